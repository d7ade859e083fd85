//! The level structure: which SST files make up the tree, how it changes (edits), and how the
//! changes are logged (the MANIFEST).

pub(crate) mod edit;
pub(crate) mod open_files;
pub(crate) mod probes;
pub(crate) mod purge;
pub(crate) mod set;

pub(crate) use probes::Probes;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::cache::BlockCache;
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::key::{FileNumber, Level, NUM_LEVELS, user_key};
use crate::sstable::format::BlockHandle;
use crate::sstable::mapped::MappedPages;
use crate::sstable::parallel_read;
use crate::sstable::pinned::PinBudget;
use crate::sstable::reader::{Table, TableEntry};

/// Where the tables of one database live, and how they are opened.
pub(crate) struct TableStore {
    pub fs: Arc<dyn FileSystem>,
    pub dir: PathBuf,
    pub cache: Arc<BlockCache>,
    pub mapped: Arc<MappedPages>,
    pub pins: Arc<PinBudget>,
    /// Lookups whose key a table's filter passed and the table did not hold.
    pub filter_false_positives: Arc<AtomicU64>,
    /// Tables that flush and compaction wrote and opened with their filter and index read,
    /// waiting for the edit that installs them: the file's [`FileMeta`] takes its table
    /// from here, so that no reader meets a cold table the engine itself just wrote.
    pub warmed: Mutex<HashMap<FileNumber, Arc<Table>>>,
    /// Data blocks that batched lookups read together, in flight at once.
    pub parallel_reads: AtomicU64,
    /// Compacted tables on their way to deletion.
    pub purge: purge::Purge,
    /// The bound on table files holding a descriptor (unbounded until set).
    pub open_files: Arc<open_files::OpenFiles>,
    /// The order of keys, the same for every family.
    pub order: KeyOrder,
}

impl TableStore {
    /// A store over an empty in-memory file system, for tests of what reads only the files'
    /// metadata.
    #[cfg(test)]
    pub(crate) fn in_memory() -> TableStore {
        TableStore::new(
            Arc::new(crate::fs::MemFs::new()),
            "/db".into(),
            Arc::new(BlockCache::new(1 << 20)),
            Arc::new(MappedPages::new(0)),
            Arc::new(PinBudget::new(0)),
            KeyOrder::Bytewise,
        )
    }

    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        cache: Arc<BlockCache>,
        mapped: Arc<MappedPages>,
        pins: Arc<PinBudget>,
        order: KeyOrder,
    ) -> TableStore {
        TableStore {
            fs,
            dir,
            cache,
            mapped,
            pins,
            filter_false_positives: Default::default(),
            warmed: Mutex::new(HashMap::new()),
            parallel_reads: AtomicU64::new(0),
            purge: purge::Purge::default(),
            open_files: open_files::OpenFiles::new(usize::MAX),
            order,
        }
    }

    pub(crate) fn table_path(&self, number: FileNumber) -> PathBuf {
        self.dir.join(table_file_name(number))
    }

    /// Opens table `number` under this store's cache, mapping and budget.
    fn open_table(&self, number: FileNumber) -> Result<Table> {
        let path = self.table_path(number);
        let file = open_files::ReopeningFile::open(self.fs.clone(), path.clone(), &self.open_files)
            .map_err(|e| Error::io("open", &path, e))?;
        Ok(
            Table::open(file, &path, number, self.cache.clone(), self.order.clone())?
                .with_mapping(&self.mapped)
                .with_budget(&self.pins)
                .with_false_positive_counter(&self.filter_false_positives),
        )
    }

    /// Opens the table just written as `number` and reads its filter and index, for the
    /// edit that installs it to find. A failure leaves the table to be opened by its first
    /// reader, who meets the error, if any, itself.
    pub(crate) fn warm(&self, number: FileNumber) {
        let Ok(table) = self.open_table(number).map(Arc::new) else {
            return;
        };
        if table.warm().is_ok() {
            crate::mutex::lock(&self.warmed).insert(number, table);
        }
    }

    /// The warm table of `number`, if flush or compaction left one.
    fn take_warmed(&self, number: FileNumber) -> Option<Arc<Table>> {
        let mut warmed = crate::mutex::lock(&self.warmed);
        if warmed.is_empty() {
            return None;
        }
        warmed.remove(&number)
    }

    /// Lets go of warm tables that no edit installed (their job failed).
    pub(crate) fn forget_warmed(&self, numbers: impl Iterator<Item = FileNumber>) {
        let mut warmed = crate::mutex::lock(&self.warmed);
        for n in numbers {
            warmed.remove(&n);
        }
    }
}

pub(crate) fn table_file_name(number: FileNumber) -> String {
    format!("{:06}.sst", number.0)
}

pub(crate) fn wal_file_name(number: FileNumber) -> String {
    format!("{:06}.wal", number.0)
}

pub(crate) fn manifest_file_name(number: FileNumber) -> String {
    format!("MANIFEST-{:06}", number.0)
}

/// One SST file of the tree. Shared by every version that contains it; the file is deleted
/// when it has been removed from the tree (`obsolete`) and the last reference goes.
pub(crate) struct FileMeta {
    pub number: FileNumber,
    pub size: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub entries: u64,
    pub deletions: u64,
    /// Range tombstones in the file.
    pub range_deletions: u64,
    /// Bloom filter bits per key the file was built with, in thousandths (`None` for files
    /// the MANIFEST recorded before it held them).
    pub filter_millibits: Option<u64>,
    store: Arc<TableStore>,
    table: OnceLock<Arc<Table>>,
    obsolete: AtomicBool,
    /// Reads that may still consult this file in vain before it is compacted; see
    /// [`FileMeta::charge_read`].
    allowed_reads: AtomicI64,
}

/// Bytes of compaction that one read consulting a file in vain is taken to be worth, as in
/// LevelDB's seek compaction: a file of `n` bytes may be consulted in vain `n / 16 KiB` times
/// (at least [`MIN_ALLOWED_READS`]) before it is merged into the level below.
const READ_COST_BYTES: u64 = 16 * 1024;
const MIN_ALLOWED_READS: i64 = 100;

/// A file that reads consulted in vain until its allowance ran out: the picker compacts it
/// when no level is over its size target.
#[derive(Clone)]
pub(crate) struct ReadCompaction {
    pub level: usize,
    pub file: Arc<FileMeta>,
}

impl std::fmt::Debug for FileMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileMeta")
            .field("number", &self.number)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl FileMeta {
    pub(crate) fn new(store: Arc<TableStore>, f: &edit::NewFile) -> FileMeta {
        let table = OnceLock::new();
        if let Some(warm) = store.take_warmed(f.number) {
            let _ = table.set(warm);
        }
        FileMeta {
            number: f.number,
            size: f.size,
            smallest: f.smallest.clone(),
            largest: f.largest.clone(),
            entries: f.entries,
            deletions: f.deletions,
            range_deletions: f.range_deletions,
            filter_millibits: f.filter_millibits,
            store,
            table,
            obsolete: AtomicBool::new(false),
            allowed_reads: AtomicI64::new(
                i64::try_from(f.size / READ_COST_BYTES)
                    .unwrap_or(i64::MAX)
                    .max(MIN_ALLOWED_READS),
            ),
        }
    }

    /// Bloom filter bits per key the file was built with, when the MANIFEST says.
    pub(crate) fn filter_bits(&self) -> Option<f64> {
        self.filter_millibits.map(|m| m as f64 / 1000.0)
    }

    /// Adds to `out` the data block of this file that a seek to the internal key `target`
    /// lands in, when the table reads it with `pread` (not in place from a mapping that
    /// holds every table). Finds it in the index the table holds; a failure here is left
    /// for the seek itself to meet and report.
    pub(crate) fn block_for_seek(self: &Arc<Self>, target: &[u8], out: &mut Vec<SeekBlock>) {
        let Ok(t) = self.table() else { return };
        if t.reads_in_place() {
            return;
        }
        if let Ok(root) = t.index()
            && let Ok(Some(h)) = t.find_data_block(&root, target, true)
        {
            out.push((self.clone(), h));
        }
    }

    /// Counts a read that consulted this file and had to go on to another. True for the read
    /// that uses up the allowance: the file now costs readers more than merging it down would.
    pub(crate) fn charge_read(&self) -> bool {
        // Once used up, the allowance is only read: no store to a line every reader shares.
        self.allowed_reads.load(Ordering::Relaxed) > 0
            && self.allowed_reads.fetch_sub(1, Ordering::Relaxed) == 1
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.store.table_path(self.number)
    }

    /// The open table, opened on first use.
    pub(crate) fn table(&self) -> Result<&Arc<Table>> {
        if let Some(t) = self.table.get() {
            return Ok(t);
        }
        let table = self.store.open_table(self.number)?;
        // A racing opener may have won; either table is equally good.
        let _ = self.table.set(Arc::new(table));
        self.table
            .get()
            .ok_or_else(|| Error::corruption(self.path(), 0, "table could not be opened"))
    }

    /// Asks for the memory a probe of the table's filter for `user_key` reads, where the table
    /// is open and holds its filter whole; otherwise does nothing.
    pub(crate) fn prefetch_filter(&self, user_key: &[u8]) {
        if let Some(t) = self.table.get() {
            t.prefetch_filter(user_key);
        }
    }

    pub(crate) fn smallest_user_key(&self) -> &[u8] {
        user_key(&self.smallest)
    }

    pub(crate) fn largest_user_key(&self) -> &[u8] {
        user_key(&self.largest)
    }

    /// Whether `user_key` lies within the file's key range.
    pub(crate) fn covers(&self, user_key: &[u8]) -> bool {
        let order = &self.store.order;
        order.user(user_key, self.smallest_user_key()).is_ge()
            && order.user(user_key, self.largest_user_key()).is_le()
    }

    /// The order of the file's keys.
    pub(crate) fn order(&self) -> &KeyOrder {
        &self.store.order
    }

    /// Marks the file as removed from the tree; it is deleted when the last reference drops
    /// (by the purge thread, see `purge.rs`).
    pub(crate) fn mark_obsolete(&self) {
        // SeqCst is not needed: Drop runs after every other reference is gone, which already
        // synchronizes through the Arc's reference count.
        self.obsolete.store(true, Ordering::Relaxed);
    }
}

impl Drop for FileMeta {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Relaxed) {
            let obsolete = purge::Obsolete {
                number: self.number,
                path: self.path(),
                table: self.table.take(),
            };
            let store = &self.store;
            store
                .purge
                .hand_over(store.fs.as_ref(), &store.cache, obsolete);
        }
    }
}

/// A table's data block that a seek will read: the file, and where in it.
pub(crate) type SeekBlock = (Arc<FileMeta>, BlockHandle);

/// Reads the `blocks` that the cache lacks into it, all in flight together where the
/// kernel allows it ([`parallel_read::read_each`]), when there are two or more: a seek
/// beyond memory then waits for its slowest read instead of one read per level and level-0
/// table. A block that fails to read or parse is left out; the seek reads it again and
/// reports the error.
pub(crate) fn read_together(blocks: &[SeekBlock]) {
    if blocks.len() < 2 {
        return;
    }
    let mut reads: Vec<(&Arc<Table>, BlockHandle)> = Vec::with_capacity(blocks.len());
    let mut requests = Vec::with_capacity(blocks.len());
    let mut keep_open = Vec::new();
    for (f, h) in blocks {
        let Some(t) = f.table.get() else { continue };
        if t.is_cached(*h) || reads.iter().any(|&(o, oh)| Arc::ptr_eq(o, t) && oh == *h) {
            continue;
        }
        if let Some((read, keep)) = t.pread_of(*h, true) {
            keep_open.extend(keep);
            reads.push((t, *h));
            requests.push(read);
        }
    }
    if requests.len() < 2 {
        return;
    }
    let used = parallel_read::read_each(&requests, |q, answer| {
        if let Some(&(t, h)) = reads.get(q) {
            let _ = t.block_from_read(h, answer, true);
        }
    });
    if used && let (Some((f, _)), Some(&(t, _))) = (blocks.first(), reads.first()) {
        let n = requests.len() as u64;
        f.store.parallel_reads.fetch_add(n, Ordering::Relaxed);
        t.count_cache_misses(n);
    }
}

/// The files one lookup consults, for charging the first that cost it a data block read in
/// vain when the lookup goes on to another file.
#[derive(Default)]
struct ReadCharge<'a> {
    first: Option<(usize, &'a Arc<FileMeta>)>,
    charged: bool,
}

impl<'a> ReadCharge<'a> {
    /// The lookup consults another file: the file that cost it a data block read before
    /// this, if any, is charged (once a lookup).
    fn consult(&mut self, exhausted: &mut Option<ReadCompaction>) {
        if let Some((level, first)) = self.first
            && !self.charged
        {
            self.charged = true;
            if first.charge_read() {
                *exhausted = Some(ReadCompaction {
                    level,
                    file: first.clone(),
                });
            }
        }
    }

    /// The lookup read a data block of `f` (in `level`) and did not find its key there.
    fn missed(&mut self, level: usize, f: &'a Arc<FileMeta>) {
        self.first.get_or_insert((level, f));
    }
}

/// The largest user keys of a sorted level's files, end to end in one allocation. Finding
/// the file that may hold a key searches two arrays, where a search of the files themselves
/// follows two pointers for every key it compares, each a likely cache miss once a level
/// has hundreds of files.
#[derive(Default, Clone)]
pub(crate) struct LevelBounds {
    keys: Vec<u8>,
    /// Where each file's largest user key ends in `keys`; it starts where the one before
    /// ends.
    ends: Vec<usize>,
}

impl LevelBounds {
    fn new(files: &[Arc<FileMeta>]) -> LevelBounds {
        let mut bounds = LevelBounds {
            keys: Vec::with_capacity(files.iter().map(|f| f.largest_user_key().len()).sum()),
            ends: Vec::with_capacity(files.len()),
        };
        for f in files {
            bounds.keys.extend_from_slice(f.largest_user_key());
            bounds.ends.push(bounds.keys.len());
        }
        bounds
    }

    /// The first file whose largest user key is at or after `key`, or the number of files
    /// when none is.
    fn first_at_or_after(&self, order: &KeyOrder, key: &[u8]) -> usize {
        let (mut low, mut high) = (0, self.ends.len());
        while low < high {
            let mid = low + (high - low) / 2;
            let start = match mid {
                0 => 0,
                _ => self.ends.get(mid - 1).copied().unwrap_or_default(),
            };
            let end = self.ends.get(mid).copied().unwrap_or_default();
            let largest = self.keys.get(start..end).unwrap_or_default();
            if order.user(largest, key).is_lt() {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low
    }
}

/// An immutable snapshot of the level structure.
#[derive(Default, Clone)]
pub(crate) struct Version {
    /// Level 0: newest file first. Deeper levels: sorted by key, not overlapping.
    pub levels: [Vec<Arc<FileMeta>>; NUM_LEVELS],
    /// The files with range tombstones, from any level.
    pub range_del_files: Vec<Arc<FileMeta>>,
    /// True when the files' filters together outgrow what a core's caches hold (see
    /// [`FILTERS_OUTGROW_CACHE_BYTES`]): a lookup then asks for every filter line it will
    /// probe before it probes the first.
    pub prefetch_filters: bool,
    /// By level, the files' largest user keys laid out for [`Version::file_for`]'s search
    /// (level 0's is empty).
    pub bounds: [LevelBounds; NUM_LEVELS],
    /// One past the deepest level that holds a file (at least 1 once [`Version::index_files`]
    /// has run; 0 in an empty default): a lookup walks levels `1..depth`, not the empty ones
    /// of all [`NUM_LEVELS`] below them. Only `VersionSet::apply_files` changes a live
    /// version's levels, and it indexes them again.
    pub depth: usize,
    /// The order of the files' keys (set by [`Version::index_files`]; without files, no
    /// order is asked for).
    pub order: KeyOrder,
}

/// Filter bytes beyond which a lookup's filter probes mostly miss the CPU's caches: about a
/// server core's second-level cache. Below it, asking for the lines first costs a second hash
/// and filter load per table and saves nothing (readmissing of 1M entries, 2.1M/s without,
/// 1.5M/s with).
const FILTERS_OUTGROW_CACHE_BYTES: u64 = 4 << 20;

impl Version {
    /// The files with range tombstones whose range holds `user_key`: those of level 0, and
    /// at most one per deeper level, found by binary search.
    pub(crate) fn range_del_files_holding<'a>(
        &'a self,
        user_key: &'a [u8],
    ) -> impl Iterator<Item = &'a Arc<FileMeta>> + 'a {
        // Without any, nothing is walked: this runs on every get.
        let (level0, deeper): (&[Arc<FileMeta>], &[Vec<Arc<FileMeta>>]) =
            match self.range_del_files.is_empty() {
                true => (&[], &[]),
                false => (
                    &self.levels[0],
                    self.levels.get(1..self.depth).unwrap_or_default(),
                ),
            };
        let level0 = level0
            .iter()
            .filter(move |f| f.range_deletions > 0 && f.covers(user_key));
        let deeper = deeper.iter().filter_map(move |files| {
            let order = &self.order;
            let i = files.partition_point(|f| order.user(f.largest_user_key(), user_key).is_lt());
            files.get(i).filter(|f| {
                f.range_deletions > 0 && order.user(f.smallest_user_key(), user_key).is_le()
            })
        });
        level0.chain(deeper)
    }

    /// Sets [`Version::range_del_files`], [`Version::prefetch_filters`],
    /// [`Version::bounds`] and [`Version::depth`] from the levels.
    pub(crate) fn index_files(&mut self) {
        let order = self.files().next().map(|(_, f)| f.order().clone());
        if let Some(order) = order {
            self.order = order;
        }
        self.depth = self
            .levels
            .iter()
            .rposition(|files| !files.is_empty())
            .map_or(1, |deepest| deepest + 1);
        self.range_del_files = self
            .files()
            .filter(|(_, f)| f.range_deletions > 0)
            .map(|(_, f)| f.clone())
            .collect();
        let filter_bits: u64 = self
            .files()
            .map(|(_, f)| {
                f.entries
                    .saturating_mul(f.filter_millibits.unwrap_or(10_000))
                    / 1000
            })
            .sum();
        self.prefetch_filters = filter_bits / 8 > FILTERS_OUTGROW_CACHE_BYTES;
        for (level, files) in self.levels.iter().enumerate().skip(1) {
            if let Some(bounds) = self.bounds.get_mut(level) {
                *bounds = LevelBounds::new(files);
            }
        }
    }

    /// The one file of sorted level `level` (1 and deeper) that may hold `key`: the first
    /// whose largest user key is at or after `key`, if it starts at or before it. A level's
    /// files never share a user key (`VersionSet` refuses an edit that would make two of
    /// them overlap, and compaction cuts its outputs between user keys), so no other file
    /// can hold a version of `key`. A lookup at a snapshot older than every version of
    /// `key` in the file finds none there, as it should.
    #[inline]
    fn file_for(&self, level: usize, key: &[u8]) -> Option<&Arc<FileMeta>> {
        let files = self.levels.get(level).filter(|files| !files.is_empty())?;
        debug_assert!(
            self.bounds
                .get(level)
                .is_none_or(|b| b.ends.len() == files.len()),
            "index_files was not called after level {level} changed"
        );
        let i = match self.bounds.get(level) {
            Some(bounds) if bounds.ends.len() == files.len() => {
                bounds.first_at_or_after(&self.order, key)
            }
            // Only a version whose levels changed after `index_files`, which the assertion
            // above refuses in tests: still answered, by searching the files themselves.
            _ => files.partition_point(|f| self.order.user(f.largest_user_key(), key).is_lt()),
        };
        files
            .get(i)
            .filter(|f| self.order.user(key, f.smallest_user_key()).is_ge())
    }

    pub(crate) fn level_bytes(&self, level: usize) -> u64 {
        self.levels
            .get(level)
            .map_or(0, |fs| fs.iter().map(|f| f.size).sum())
    }

    pub(crate) fn files(&self) -> impl Iterator<Item = (Level, &Arc<FileMeta>)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(l, fs)| fs.iter().map(move |f| (Level(l), f)))
    }

    /// True when `file` is in `level`.
    pub(crate) fn holds(&self, level: usize, file: &Arc<FileMeta>) -> bool {
        self.levels
            .get(level)
            .is_some_and(|fs| fs.iter().any(|f| Arc::ptr_eq(f, file)))
    }

    /// True when the tables' random reads are all made in place from their mappings
    /// ([`MappedPages::reads_all_in_place`]): no seek would wait for the device.
    pub(crate) fn reads_all_in_place(&self) -> bool {
        (self.files().next()).is_some_and(|(_, f)| f.store.mapped.reads_all_in_place())
    }

    /// The data blocks a seek of every level-0 table and every level to the internal key
    /// `target` will read with `pread` ([`FileMeta::block_for_seek`]).
    pub(crate) fn blocks_for_seek(&self, target: &[u8]) -> Vec<SeekBlock> {
        let mut out = Vec::new();
        for f in &self.levels[0] {
            f.block_for_seek(target, &mut out);
        }
        for files in self.levels.iter().skip(1) {
            let i = files.partition_point(|f| self.order.internal(&f.largest, target).is_lt());
            if let Some(f) = files.get(i) {
                f.block_for_seek(target, &mut out);
            }
        }
        out
    }

    /// Looks `user_key` up at the sequence number encoded in `lookup`, newest data first.
    ///
    /// A lookup that consults a file in vain and goes on to another charges the first file
    /// (see [`FileMeta::charge_read`]) when it read a data block of the first in vain: a
    /// lookup its filter answered cost the file nothing to speak of; `exhausted` receives
    /// the file whose allowance this
    /// lookup used up.
    pub(crate) fn get(
        &self,
        lookup: &[u8],
        key: &[u8],
        fill_cache: bool,
        exhausted: &mut Option<ReadCompaction>,
    ) -> Result<Option<TableEntry>> {
        let mut charge = ReadCharge::default();
        let level0 = self.levels[0]
            .iter()
            .filter(|f| f.covers(key))
            .map(|f| (0, f));
        debug_assert!(
            self.levels
                .iter()
                .skip(self.depth.max(1))
                .all(Vec::is_empty),
            "index_files was not called after a level below depth {} gained files",
            self.depth
        );
        let deeper = (1..self.depth).filter_map(|level| Some((level, self.file_for(level, key)?)));
        // The filters' lines are asked for first, all of them: their cache misses overlap,
        // where probing table by table would wait for each in turn.
        let mut tables = level0.chain(deeper);
        let mut first: [Option<(usize, &Arc<FileMeta>)>; 16] = [None; 16];
        if self.prefetch_filters {
            for slot in &mut first {
                *slot = tables.next();
                let Some((_, f)) = slot else { break };
                f.prefetch_filter(key);
            }
        }
        for (level, f) in first.into_iter().flatten().chain(tables) {
            charge.consult(exhausted);
            let mut read_data = false;
            if let Some(e) = f
                .table()?
                .get_reading(lookup, key, fill_cache, &mut read_data)?
            {
                return Ok(Some(e));
            }
            if read_data {
                charge.missed(level, f);
            }
        }
        Ok(None)
    }

    /// [`Version::get`] for many keys at once: `lookups[i]` is the lookup key of `keys[i]`,
    /// and each `out[i]` still `None` receives what the tables hold of that key (and stays
    /// `None` when they hold nothing).
    ///
    /// The keys go down the levels together, and within a level each step of a lookup runs
    /// for every key before the next step begins, having asked for the memory it reads for
    /// all of them first: the cache misses of different keys overlap instead of following
    /// one another.
    pub(crate) fn get_many<'a>(
        &'a self,
        lookups: &[&[u8]],
        keys: &[&[u8]],
        fill_cache: bool,
        out: &mut [Option<Result<Option<TableEntry>>>],
        probes: &mut Probes<'a>,
        exhausted: &mut Option<ReadCompaction>,
    ) {
        probes.start(keys.len());
        for f in &self.levels[0] {
            probes.files.clear();
            for (i, key) in keys.iter().enumerate() {
                if out.get(i).is_some_and(Option::is_none) && f.covers(key) {
                    probes.files.push((i, f));
                }
            }
            probes.find(0, lookups, keys, fill_cache);
        }
        for (level, files) in self.levels.iter().enumerate().skip(1) {
            if files.is_empty() {
                continue;
            }
            probes.files.clear();
            for (i, key) in keys.iter().enumerate() {
                if out.get(i).is_none_or(Option::is_some) {
                    continue;
                }
                if let Some(f) = self.file_for(level, key) {
                    probes.files.push((i, f));
                }
            }
            probes.find(level, lookups, keys, fill_cache);
        }
        probes.read(fill_cache);
        probes.search(lookups, keys, fill_cache, out, exhausted);
    }

    /// Charges for a key an iterator read (see `DbIterator`'s sampling): when files of more
    /// than one sorted run may hold `user_key`, the first is charged, as a lookup of the key
    /// would charge it. Returns the file whose allowance this used up.
    pub(crate) fn charge_sample(&self, user_key: &[u8]) -> Option<ReadCompaction> {
        let mut charge = ReadCharge::default();
        let mut exhausted = None;
        for f in &self.levels[0] {
            if f.covers(user_key) {
                charge.consult(&mut exhausted);
                charge.missed(0, f);
            }
        }
        for (level, files) in self.levels.iter().enumerate().skip(1) {
            let order = &self.order;
            let i = files.partition_point(|f| order.user(f.largest_user_key(), user_key).is_lt());
            if let Some(f) = files.get(i)
                && order.user(user_key, f.smallest_user_key()).is_ge()
            {
                charge.consult(&mut exhausted);
                charge.missed(level, f);
            }
        }
        exhausted
    }

    /// Files of `level` whose user-key range meets `[begin, end]` (`None` is unbounded).
    ///
    /// In level 0, where files overlap, the range widens until no file outside the result
    /// overlaps a file inside it: otherwise an older file could stay behind in level 0 holding
    /// a version of a key whose newer version moved down, and reads would find the old one
    /// first.
    pub(crate) fn overlapping(
        &self,
        level: usize,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Vec<Arc<FileMeta>> {
        let Some(files) = self.levels.get(level) else {
            return Vec::new();
        };
        let mut lo: Option<Vec<u8>> = begin.map(<[u8]>::to_vec);
        let mut hi: Option<Vec<u8>> = end.map(<[u8]>::to_vec);
        let cmp = |a: &[u8], b: &[u8]| self.order.user(a, b);
        'widen: loop {
            let mut out = Vec::new();
            for f in files {
                let meets = lo
                    .as_deref()
                    .is_none_or(|b| cmp(f.largest_user_key(), b).is_ge())
                    && hi
                        .as_deref()
                        .is_none_or(|e| cmp(f.smallest_user_key(), e).is_le());
                if !meets {
                    continue;
                }
                if level == 0 {
                    if lo
                        .as_deref()
                        .is_some_and(|b| cmp(f.smallest_user_key(), b).is_lt())
                    {
                        lo = Some(f.smallest_user_key().to_vec());
                        continue 'widen;
                    }
                    if hi
                        .as_deref()
                        .is_some_and(|e| cmp(f.largest_user_key(), e).is_gt())
                    {
                        hi = Some(f.largest_user_key().to_vec());
                        continue 'widen;
                    }
                }
                out.push(f.clone());
            }
            return out;
        }
    }
}

pub(crate) fn io_err<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(op, path, e)
}

#[cfg(test)]
mod tests;

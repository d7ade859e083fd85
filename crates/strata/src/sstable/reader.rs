//! Reads an SST file: point lookups through filter, index and one data block, and
//! bidirectional iteration. The filter and the root index block are read once and held by
//! the open table, as LevelDB and RocksDB (by default) hold them: in the block cache, a stream
//! of data blocks would evict them, and every lookup would read them again whole. Each is
//! read on its own first use, so a lookup the filter answers never reads the index. A budget
//! shared by the tables bounds what they hold ([`super::pinned`]). Data blocks, lower index
//! levels and the partitions of a partitioned filter (whose index the table holds) come from
//! the block cache when they are there.

use std::cmp::Ordering;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{self, AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwapOption, Guard};

use super::block::{Block, BlockData, BlockIter};
use super::filter::{BloomFilter, FilterRef};
use super::format::{
    BLOCK_TRAILER_BYTES, BlockHandle, Compression, FOOTER_BYTES, FilterKind, Footer, FooterError,
    check_block, decompress_block, unwrap_block,
};
use super::mapped::{MappedPages, MappedTable};
use super::parallel_read::ReadRequest;
use super::pinned::PinBudget;
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::fs::{MappedBytes, RandomAccessFile};
use crate::iter::InternalIterator;
use crate::key::{FileNumber, ParsedKey, SeqNo, compare_internal, parse_internal_key};
use crate::mutex::lock;
use crate::range_del::{Fragmented, RangeTombstone};

/// An open SST file.
pub(crate) struct Table {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    number: FileNumber,
    footer: Footer,
    cache: Arc<BlockCache>,
    /// The filter, read on first use and held until the budget lets it go.
    filter: ArcSwapOption<PinnedFilter>,
    /// The root block of the index, read on first use and held until the budget lets it go.
    index: ArcSwapOption<RootIndex>,
    /// Set by each use of `filter` or `index`, cleared by the budget's clock hand.
    used: AtomicBool,
    /// Held while `filter` or `index` is read from the file, so that racing lookups read it
    /// once.
    loading: Mutex<()>,
    /// The budget `filter` and `index` count against; without one, they are held while the
    /// table is open.
    budget: Option<Arc<PinBudget>>,
    /// The file mapped into memory, for reads that fill the cache; see [`super::mapped`].
    mapped: Option<(Arc<MappedPages>, Arc<MappedTable>)>,
    /// The range tombstones, read on first use (for files that have them).
    range_dels: Mutex<Option<Arc<TableRangeDels>>>,
    /// Counts lookups whose key the filter passed and the table did not hold.
    false_positives: Option<Arc<AtomicU64>>,
}

/// A table's range tombstones, as written and fragmented.
pub(crate) struct TableRangeDels {
    pub list: Vec<RangeTombstone>,
    pub fragmented: Arc<Fragmented>,
}

/// A table's filter as its table holds it: the lookup reads it in every table it consults.
pub(crate) enum PinnedFilter {
    Whole(BloomFilter),
    /// The index of the filter's partitions, by the last internal key each covers.
    Partitions(RootIndex),
}

impl PinnedFilter {
    /// Hints that [`Table::may_contain`] of `user_key` will come soon, where the filter is
    /// held whole.
    pub(crate) fn prefetch(&self, user_key: &[u8]) {
        if let PinnedFilter::Whole(f) = self {
            f.view().prefetch(user_key);
        }
    }

    fn size(&self) -> usize {
        match self {
            PinnedFilter::Whole(f) => f.size(),
            PinnedFilter::Partitions(index) => index.size(),
        }
    }
}

/// A table's filter or root index, held for the length of a lookup: the budget may let the
/// table's copy go meanwhile, but not this one.
pub(crate) struct Held<T>(Guard<Option<Arc<T>>>);

impl<T> Deref for Held<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self.0.as_deref() {
            Some(p) => p,
            // Built only from a loaded value (`Table::held`).
            None => unreachable!("a Held holds nothing"),
        }
    }
}

/// The root block of a table's index, held open, with the handle of each of its entries
/// decoded side by side. A lookup whose search heads settle where it lands takes the handle
/// from here and reads nothing of the block itself.
pub(crate) struct RootIndex {
    block: Arc<Block>,
    /// The handle of every entry, by restart point (a root block restarts at every entry);
    /// empty when the block does not, and lookups search it whole.
    handles: Vec<BlockHandle>,
}

impl RootIndex {
    /// Decodes the handles of `block`; a block that does not restart at every entry, or holds
    /// an entry that does not decode, is searched whole instead (and the damage reported by
    /// the lookups that reach it).
    fn new(block: Block) -> RootIndex {
        let block = Arc::new(block);
        let mut handles = Vec::with_capacity(block.num_restarts());
        let mut it = block.iter_ref(compare_internal);
        let mut whole = it.seek_to_first().is_ok();
        while whole && it.valid() {
            match BlockHandle::decode_varint(it.value()) {
                Ok(h) => handles.push(h),
                Err(_) => whole = false,
            }
            whole = whole && it.next().is_ok();
        }
        if !whole || handles.len() != block.num_restarts() {
            handles = Vec::new();
        }
        RootIndex { block, handles }
    }

    fn size(&self) -> usize {
        self.block.size() + self.handles.len() * size_of::<BlockHandle>()
    }

    /// The handle a seek for `target` lands on, when the search heads settle it: `Some(None)`
    /// when every entry is below `target`.
    fn settled(&self, target: &[u8]) -> Option<Option<BlockHandle>> {
        if self.handles.is_empty() {
            return None;
        }
        let i = self.block.restart_settled_by_heads(target)?;
        Some(self.handles.get(i).copied())
    }
}

/// A found entry.
pub(crate) struct TableEntry {
    pub kind: crate::key::ValueKind,
    pub value: Vec<u8>,
    /// The sequence number the entry was written at.
    pub seq: crate::key::SeqNo,
}

fn bytewise(a: &[u8], b: &[u8]) -> Ordering {
    a.cmp(b)
}

impl Table {
    /// Opens a table, checking its footer.
    pub(crate) fn open(
        file: Arc<dyn RandomAccessFile>,
        path: &Path,
        number: FileNumber,
        cache: Arc<BlockCache>,
    ) -> Result<Table> {
        let size = file.size().map_err(|e| Error::io("stat", path, e))?;
        if size < FOOTER_BYTES as u64 {
            return Err(Error::corruption(path, 0, "file too short to be an SST"));
        }
        let footer_offset = size - FOOTER_BYTES as u64;
        let bytes = file
            .read_at(footer_offset, FOOTER_BYTES)
            .map_err(|e| Error::io("read", path, e))?;
        let footer = match Footer::decode(&bytes) {
            Ok(f) => f,
            Err(FooterError::Damaged(e)) => return Err(e.at(path, footer_offset)),
            Err(FooterError::Version(v)) => {
                return Err(Error::UnsupportedFormat {
                    file: path.to_path_buf(),
                    reason: format!("SST format version {v}"),
                });
            }
        };
        for h in [footer.filter, footer.index, footer.properties] {
            if h.size
                .checked_add(BLOCK_TRAILER_BYTES as u64)
                .and_then(|len| h.offset.checked_add(len))
                .is_none_or(|end| end > footer_offset)
            {
                return Err(Error::corruption(
                    path,
                    footer_offset,
                    "footer points past the file",
                ));
            }
        }
        Ok(Table {
            file,
            path: path.to_path_buf(),
            number,
            footer,
            cache,
            filter: ArcSwapOption::empty(),
            index: ArcSwapOption::empty(),
            used: AtomicBool::new(false),
            loading: Mutex::new(()),
            budget: None,
            mapped: None,
            range_dels: Mutex::new(None),
            false_positives: None,
        })
    }

    /// The newest sequence number in the table, from its properties (`None` for a file
    /// written before the property existed).
    pub(crate) fn largest_seq(&self) -> Result<Option<SeqNo>> {
        Ok(self
            .properties()?
            .iter()
            .find(|(n, _)| n == super::builder::prop::LARGEST_SEQ)
            .map(|(_, v)| SeqNo(*v)))
    }

    /// The table's range tombstones; `None` for a file without any.
    pub(crate) fn range_tombstones(&self) -> Result<Option<Arc<TableRangeDels>>> {
        if !self.footer.range_deletions {
            return Ok(None);
        }
        let mut held = lock(&self.range_dels);
        if let Some(r) = held.as_ref() {
            return Ok(Some(r.clone()));
        }
        let props = self.properties()?;
        let prop = |name: &str| props.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        let handle = match (
            prop(super::builder::prop::RANGE_DEL_OFFSET),
            prop(super::builder::prop::RANGE_DEL_SIZE),
        ) {
            (Some(offset), Some(size)) => BlockHandle { offset, size },
            _ => {
                return Err(Error::corruption(
                    &self.path,
                    self.footer.properties.offset,
                    "range-deletion block not named in the properties",
                ));
            }
        };
        let block = self.read_block(handle, false)?;
        let mut it = block.iter(compare_internal);
        let mut list = Vec::new();
        it.seek_to_first()
            .map_err(|e| self.with_path(e, handle.offset))?;
        while it.valid() {
            let p = parse_internal_key(it.key())
                .filter(|p| p.kind == crate::key::ValueKind::RangeDelete)
                .ok_or_else(|| {
                    Error::corruption(&self.path, handle.offset, "malformed range tombstone")
                })?;
            list.push(RangeTombstone {
                begin: p.user_key.to_vec(),
                end: it.value().to_vec(),
                seq: p.seq,
            });
            it.next().map_err(|e| self.with_path(e, handle.offset))?;
        }
        let r = Arc::new(TableRangeDels {
            fragmented: Arc::new(Fragmented::new(&list)),
            list,
        });
        *held = Some(r.clone());
        Ok(Some(r))
    }

    /// Counts in `counter` the lookups whose key the filter passed and the table did not
    /// hold (see [`Table::false_positive`]).
    pub(crate) fn with_false_positive_counter(mut self, counter: &Arc<AtomicU64>) -> Table {
        self.false_positives = Some(counter.clone());
        self
    }

    /// Counts a lookup whose key the filter passed and this table did not hold.
    pub(crate) fn false_positive(&self) {
        if let Some(c) = &self.false_positives {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Counts this table's pinned blocks against `budget`, which lets them go when other
    /// tables' blocks are more in use.
    pub(crate) fn with_budget(mut self, budget: &Arc<PinBudget>) -> Table {
        self.budget = Some(budget.clone());
        self
    }

    /// Reads this table's blocks through a mapping of its file, under `pages`' budget, where
    /// the file system maps files.
    pub(crate) fn with_mapping(mut self, pages: &Arc<MappedPages>) -> Table {
        self.mapped = self
            .file
            .map()
            .and_then(|map| pages.register(map))
            .map(|table| (pages.clone(), table));
        self
    }

    /// Bytes a block occupies in the file: its contents and trailer.
    fn stored_len(&self, handle: BlockHandle) -> Result<usize> {
        usize::try_from(handle.size)
            .ok()
            .and_then(|s| s.checked_add(BLOCK_TRAILER_BYTES))
            .ok_or_else(|| Error::corruption(&self.path, handle.offset, "block size overflows"))
    }

    fn read_raw(&self, handle: BlockHandle) -> Result<Vec<u8>> {
        let len = self.stored_len(handle)?;
        self.unwrap_read(handle, self.file.read_at(handle.offset, len))
    }

    /// The block in `stored`, the answer of a read of `handle`'s bytes, checked.
    fn unwrap_read(
        &self,
        handle: BlockHandle,
        stored: std::io::Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let stored = stored.map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::corruption(
                &self.path,
                handle.offset,
                "block extends past the end of the file",
            ),
            _ => Error::io("read", &self.path, e),
        })?;
        unwrap_block(stored).map_err(|e| e.at(&self.path, handle.offset))
    }

    /// A block read in place from the mapping; checked, as every block read from the file,
    /// unless it passed its check since its pages were mapped (see `MappedTable::is_checked`).
    fn read_mapped(
        &self,
        pages: &MappedPages,
        table: &MappedTable,
        handle: BlockHandle,
    ) -> Result<BlockData> {
        let past_end = || {
            Error::corruption(
                &self.path,
                handle.offset,
                "block extends past the end of the file",
            )
        };
        let start = usize::try_from(handle.offset).map_err(|_| past_end())?;
        let len = self.stored_len(handle)?;
        let stored = MappedBytes::new(table.map().clone(), start, len).ok_or_else(past_end)?;
        let verify = !table.is_checked(start, len);
        let (body, kind) =
            check_block(stored.bytes(), verify).map_err(|e| e.at(&self.path, handle.offset))?;
        if verify {
            table.mark_checked(start, len);
        }
        let data = match kind {
            Compression::None => {
                let body_len = body.len();
                BlockData::Mapped(stored.truncated(body_len))
            }
            _ => BlockData::Owned(
                decompress_block(body, kind).map_err(|e| e.at(&self.path, handle.offset))?,
            ),
        };
        pages.touch(table, start, len);
        Ok(data)
    }

    pub(crate) fn read_block(&self, handle: BlockHandle, fill_cache: bool) -> Result<Arc<Block>> {
        self.read_block_in(handle, fill_cache, false)
    }

    /// Reads a block, from the cache when it is there. A scan stepping to the next block
    /// (`in_order`) reads it through the mapping: one page fault maps the cached pages of 64
    /// KiB, the next fifteen blocks or so. A random read is cheaper with `pread` unless the
    /// page is mapped already, so it reads that way unless the table's mapping says its
    /// window is resident, or every open table fits in the mapping budget (then each window
    /// is faulted in once and stays). Reads that skip the cache (compactions,
    /// checks) read each block once and would only crowd the mapped pages out.
    ///
    /// A block read in place does not enter the block cache: the mapping holds it already,
    /// and a scan's blocks would only evict the blocks point reads come back to.
    fn read_block_in(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
        in_order: bool,
    ) -> Result<Arc<Block>> {
        if let Some(b) = self.cache.get(&(self.number.0, handle.offset)) {
            return Ok(b);
        }
        self.load_block(handle, fill_cache, in_order)
    }

    /// Reads a block that is not in the cache, and caches it when `fill_cache` says so and it
    /// was not read in place.
    fn load_block(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
        in_order: bool,
    ) -> Result<Arc<Block>> {
        // A random read takes the block in place too when its pages are mapped already:
        // then it costs no fault, and saves the system call, the copy and the allocation.
        let resident = |table: &MappedTable| {
            let start = usize::try_from(handle.offset).ok();
            let len = self.stored_len(handle).ok();
            start
                .zip(len)
                .is_some_and(|(start, len)| table.is_resident(start, len))
        };
        let (data, cache) = match &self.mapped {
            Some((pages, table))
                if fill_cache && (in_order || pages.holds_all() || resident(table)) =>
            {
                // A compressed block comes out of the mapping decompressed into a buffer of
                // its own: a random read caches that, as a block read with `pread` is cached,
                // so that the next lookup does not decompress it again.
                let data = self.read_mapped(pages, table, handle)?;
                let owned = matches!(data, BlockData::Owned(_));
                (data, owned && !in_order)
            }
            _ => (BlockData::Owned(self.read_raw(handle)?), fill_cache),
        };
        let block = Arc::new(Block::new(data).map_err(|e| e.at(&self.path, handle.offset))?);
        if cache {
            self.cache
                .insert((self.number.0, handle.offset), block.clone());
        }
        Ok(block)
    }

    /// The block of `handle` if the cache holds it.
    pub(crate) fn cached_block(&self, handle: BlockHandle) -> Option<Arc<Block>> {
        self.cache.get(&(self.number.0, handle.offset))
    }

    /// [`Table::read_block`] of a block the caller found missing from the cache.
    pub(crate) fn read_uncached(
        &self,
        handle: BlockHandle,
        fill_cache: bool,
    ) -> Result<Arc<Block>> {
        self.load_block(handle, fill_cache, false)
    }

    /// The read that [`Table::read_uncached`] of `handle` would make with `pread`, for a
    /// batch to make it together with others ([`super::parallel_read`]): `None` when the
    /// block would be read in place from the mapping, or the file has no descriptor. The
    /// caller has found the block missing from the cache.
    pub(crate) fn pread_of(&self, handle: BlockHandle, fill_cache: bool) -> Option<ReadRequest> {
        let fd = self.file.raw_fd()?;
        if let Some((pages, table)) = &self.mapped
            && fill_cache
        {
            let start = usize::try_from(handle.offset).ok()?;
            let len = self.stored_len(handle).ok()?;
            if pages.holds_all() || table.is_resident(start, len) {
                return None;
            }
        }
        Some(ReadRequest {
            fd,
            offset: handle.offset,
            len: self.stored_len(handle).ok()?,
        })
    }

    /// The block of `handle` from the answer of its [`Table::pread_of`] read: checked,
    /// parsed and cached as [`Table::read_block`] would.
    pub(crate) fn block_from_read(
        &self,
        handle: BlockHandle,
        stored: std::io::Result<Vec<u8>>,
        fill_cache: bool,
    ) -> Result<Arc<Block>> {
        let data = BlockData::Owned(self.unwrap_read(handle, stored)?);
        let block = Arc::new(Block::new(data).map_err(|e| e.at(&self.path, handle.offset))?);
        if fill_cache {
            self.cache
                .insert((self.number.0, handle.offset), block.clone());
        }
        Ok(block)
    }

    /// The filter, read from the file unless the table holds it.
    pub(crate) fn filter(self: &Arc<Self>) -> Result<Held<PinnedFilter>> {
        self.held(&self.filter, Self::read_filter, PinnedFilter::size)
    }

    /// The root block of the index, read from the file unless the table holds it.
    pub(crate) fn index(self: &Arc<Self>) -> Result<Held<RootIndex>> {
        self.held(&self.index, Self::read_root, RootIndex::size)
    }

    /// Reads the filter and the root index into the table now, so that its first lookup
    /// finds them there (a table that flush or compaction has just written).
    pub(crate) fn warm(self: &Arc<Self>) -> Result<()> {
        self.filter()?;
        self.index()?;
        Ok(())
    }

    /// Bytes of filter and root index the table holds now.
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.filter.load().as_deref().map_or(0, PinnedFilter::size)
            + self.index.load().as_deref().map_or(0, RootIndex::size)
    }

    /// What `slot` holds, read by `read` first if it holds nothing.
    fn held<T>(
        self: &Arc<Self>,
        slot: &ArcSwapOption<T>,
        read: fn(&Self) -> Result<T>,
        size: fn(&T) -> usize,
    ) -> Result<Held<T>> {
        let held = slot.load();
        if held.is_some() {
            // Read first: once set, the bit stays set without a store to a shared line.
            if !self.used.load(atomic::Ordering::Relaxed) {
                self.used.store(true, atomic::Ordering::Relaxed);
            }
            return Ok(Held(held));
        }
        drop(held);
        self.load(slot, read, size)
    }

    #[cold]
    fn load<T>(
        self: &Arc<Self>,
        slot: &ArcSwapOption<T>,
        read: fn(&Self) -> Result<T>,
        size: fn(&T) -> usize,
    ) -> Result<Held<T>> {
        let loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        // A racing lookup may have loaded it while this one waited.
        let held = slot.load();
        if held.is_some() {
            return Ok(Held(held));
        }
        drop(held);
        let value = Arc::new(read(self)?);
        self.used.store(true, atomic::Ordering::Relaxed);
        if let Some(budget) = &self.budget {
            budget.charge(size(&value));
        }
        slot.store(Some(value.clone()));
        drop(loading);
        if let Some(budget) = &self.budget {
            budget.admit(self);
        }
        Ok(Held(Guard::from_inner(Some(value))))
    }

    fn read_filter(&self) -> Result<PinnedFilter> {
        let at = self.footer.filter;
        Ok(match self.footer.filter_kind {
            FilterKind::Whole => PinnedFilter::Whole(
                BloomFilter::new(self.read_raw(at)?).map_err(|e| e.at(&self.path, at.offset))?,
            ),
            FilterKind::Partitioned => {
                PinnedFilter::Partitions(RootIndex::new(self.read_index_root(at)?))
            }
        })
    }

    fn read_root(&self) -> Result<RootIndex> {
        Ok(RootIndex::new(self.read_index_root(self.footer.index)?))
    }

    /// Reads the root block of the index, or the index of the filter's partitions, from the
    /// file.
    fn read_index_root(&self, at: BlockHandle) -> Result<Block> {
        Block::new(self.read_raw(at)?)
            .and_then(Block::with_search_heads)
            .map_err(|e| e.at(&self.path, at.offset))
    }

    /// Clears the bit that says the pinned blocks were used since the last call; returns it.
    pub(super) fn take_used(&self) -> bool {
        self.used.swap(false, atomic::Ordering::Relaxed)
    }

    /// Lets the filter and root index go (lookups holding them keep them until they end);
    /// returns the bytes they took.
    pub(super) fn unpin(&self) -> usize {
        self.filter.swap(None).map_or(0, |f| f.size())
            + self.index.swap(None).map_or(0, |r| r.size())
    }

    fn with_path(&self, e: Error, offset: u64) -> Error {
        match e {
            Error::Corruption { reason, .. } => Error::corruption(&self.path, offset, reason),
            other => other,
        }
    }

    /// False only when the table certainly holds no entry of `user_key` at or after `lookup`
    /// (an internal key of `user_key`): the answer of the whole filter, or of the partition
    /// that a seek for `lookup` lands in. A partition covers whole data blocks, and each user
    /// key is in the partition of every block that holds one of its entries, so the entry a
    /// lookup finds is always in the partition asked.
    pub(crate) fn may_contain(
        &self,
        filter: &PinnedFilter,
        lookup: &[u8],
        user_key: &[u8],
        fill_cache: bool,
    ) -> Result<bool> {
        let index = match filter {
            PinnedFilter::Whole(f) => return Ok(f.view().may_contain(user_key)),
            PinnedFilter::Partitions(index) => index,
        };
        let found = match index.settled(lookup) {
            Some(settled) => settled,
            None => self.seek_index(&index.block, self.footer.filter, lookup)?,
        };
        // Past the last partition: every key of the table is below `lookup`.
        let Some(handle) = found else {
            return Ok(false);
        };
        let probe = |block: &Block| self.probe_partition(block, handle, user_key);
        match self.cache.with(&(self.number.0, handle.offset), probe) {
            Some(answer) => answer,
            None => probe(&*self.load_block(handle, fill_cache, false)?),
        }
    }

    /// Asks the filter partition in `block` (read from `handle`) about `user_key`.
    fn probe_partition(&self, block: &Block, handle: BlockHandle, user_key: &[u8]) -> Result<bool> {
        let mut it = block.iter_ref(bytewise);
        it.seek_to_first()
            .map_err(|e| self.with_path(e, handle.offset))?;
        if !it.valid() {
            return Err(Error::corruption(
                &self.path,
                handle.offset,
                "filter partition without a filter",
            ));
        }
        let filter = FilterRef::new(it.value()).map_err(|e| e.at(&self.path, handle.offset))?;
        Ok(filter.may_contain(user_key))
    }

    /// The handles of a partitioned filter's partitions, in key order; none for a whole one.
    fn filter_partition_handles(&self) -> Result<Vec<BlockHandle>> {
        match self.footer.filter_kind {
            FilterKind::Whole => Ok(Vec::new()),
            FilterKind::Partitioned => self.handles_in(self.footer.filter),
        }
    }

    /// The handle in every entry of the index block at `at` (of the index or of the filter's
    /// partitions), in order.
    fn handles_in(&self, at: BlockHandle) -> Result<Vec<BlockHandle>> {
        let block = self.read_block(at, false)?;
        let mut it = block.iter(compare_internal);
        it.seek_to_first()
            .map_err(|e| self.with_path(e, at.offset))?;
        let mut out = Vec::new();
        while it.valid() {
            out.push(
                BlockHandle::decode_varint(it.value()).map_err(|e| e.at(&self.path, at.offset))?,
            );
            it.next().map_err(|e| self.with_path(e, at.offset))?;
        }
        Ok(out)
    }

    /// Descends the index, from its root `root`, to the handle of the data block that may
    /// hold `target`.
    pub(crate) fn find_data_block(
        &self,
        root: &RootIndex,
        target: &[u8],
        fill_cache: bool,
    ) -> Result<Option<BlockHandle>> {
        let mut handle = self.footer.index;
        for depth in 0..self.footer.index_depth {
            let found = if depth == 0 {
                match root.settled(target) {
                    Some(settled) => settled,
                    None => self.seek_index(&root.block, handle, target)?,
                }
            } else {
                let block = self.read_block(handle, fill_cache)?;
                self.seek_index(&block, handle, target)?
            };
            match found {
                Some(h) => handle = h,
                None => return Ok(None),
            }
        }
        Ok(Some(handle))
    }

    /// The handle in the first entry at or after `target` of the index block `at` names.
    fn seek_index(
        &self,
        block: &Block,
        at: BlockHandle,
        target: &[u8],
    ) -> Result<Option<BlockHandle>> {
        let mut it = block.iter_ref(compare_internal);
        it.seek(target).map_err(|e| self.with_path(e, at.offset))?;
        if !it.valid() {
            return Ok(None);
        }
        BlockHandle::decode_varint(it.value())
            .map(Some)
            .map_err(|e| e.at(&self.path, at.offset))
    }

    /// The first entry at or after `lookup` if it has the same user key.
    pub(crate) fn get(
        self: &Arc<Self>,
        lookup: &[u8],
        user_key: &[u8],
        fill_cache: bool,
    ) -> Result<Option<TableEntry>> {
        self.get_reading(lookup, user_key, fill_cache, &mut false)
    }

    /// [`Table::get`], setting `read_data` when the lookup went as far as a data block (the
    /// filter passed the key and the index named a block): the cost that read-triggered
    /// compaction counts.
    pub(crate) fn get_reading(
        self: &Arc<Self>,
        lookup: &[u8],
        user_key: &[u8],
        fill_cache: bool,
        read_data: &mut bool,
    ) -> Result<Option<TableEntry>> {
        if !self.may_contain(&*self.filter()?, lookup, user_key, fill_cache)? {
            return Ok(None);
        }
        let Some(handle) = self.find_data_block(&*self.index()?, lookup, fill_cache)? else {
            self.false_positive();
            return Ok(None);
        };
        *read_data = true;
        // A cached block is searched where it lies, under the cache's read lock.
        let cached = self.cache.with(&(self.number.0, handle.offset), |block| {
            self.get_in_block(block, handle, lookup, user_key)
        });
        let found = match cached {
            Some(found) => found?,
            None => {
                let block = self.load_block(handle, fill_cache, false)?;
                self.get_in_block(&block, handle, lookup, user_key)?
            }
        };
        if found.is_none() {
            self.false_positive();
        }
        Ok(found)
    }

    /// [`Table::get`] within the data block `handle` names.
    pub(crate) fn get_in_block(
        &self,
        block: &Block,
        handle: BlockHandle,
        lookup: &[u8],
        user_key: &[u8],
    ) -> Result<Option<TableEntry>> {
        let mut it = block.iter_ref(compare_internal);
        it.seek(lookup)
            .map_err(|e| self.with_path(e, handle.offset))?;
        if !it.valid() {
            return Ok(None);
        }
        let parsed: ParsedKey<'_> = parse_internal_key(it.key()).ok_or_else(|| {
            Error::corruption(&self.path, handle.offset, "malformed internal key")
        })?;
        if parsed.user_key != user_key {
            return Ok(None);
        }
        Ok(Some(TableEntry {
            kind: parsed.kind,
            value: it.value().to_vec(),
            seq: parsed.seq,
        }))
    }

    /// Reads the properties block as (name, value) pairs.
    pub(crate) fn properties(&self) -> Result<Vec<(String, u64)>> {
        let block = self.read_block(self.footer.properties, false)?;
        let mut it = block.iter(bytewise);
        let mut out = Vec::new();
        it.seek_to_first()
            .map_err(|e| self.with_path(e, self.footer.properties.offset))?;
        while it.valid() {
            let v = crate::coding::Reader::new(it.value())
                .varint()
                .map_err(|e| e.at(&self.path, self.footer.properties.offset))?;
            out.push((String::from_utf8_lossy(it.key()).into_owned(), v));
            it.next()
                .map_err(|e| self.with_path(e, self.footer.properties.offset))?;
        }
        Ok(out)
    }

    pub(crate) fn footer(&self) -> Footer {
        self.footer
    }

    /// A cursor over every entry of the table.
    pub(crate) fn iter(self: &Arc<Self>, fill_cache: bool) -> TableIter {
        TableIter {
            table: self.clone(),
            fill_cache,
            root: None,
            stack: Vec::new(),
            data: None,
        }
    }

    /// The handles of every data block, in key order, from the index.
    pub(crate) fn data_block_handles(&self) -> Result<Vec<BlockHandle>> {
        let mut level = vec![self.footer.index];
        for _ in 0..self.footer.index_depth {
            let mut next = Vec::new();
            for h in level {
                next.extend(self.handles_in(h)?);
            }
            level = next;
        }
        Ok(level)
    }

    /// Verifies the checksum of every block and the order of every key (for `check`);
    /// returns the number of entries.
    pub(crate) fn verify(self: &Arc<Self>) -> Result<u64> {
        self.warm()?;
        self.properties()?;
        self.range_tombstones()?;
        for h in self.filter_partition_handles()? {
            self.probe_partition(&*self.read_block(h, false)?, h, b"")?;
        }
        for h in self.data_block_handles()? {
            self.read_block(h, false)?;
        }
        let mut entries = 0u64;
        let mut it = self.iter(false);
        it.seek_to_first()?;
        let mut last: Option<Vec<u8>> = None;
        while it.valid() {
            if parse_internal_key(it.key()).is_none() {
                return Err(Error::corruption(&self.path, 0, "malformed internal key"));
            }
            if let Some(l) = &last
                && compare_internal(l, it.key()) != Ordering::Less
            {
                return Err(Error::corruption(&self.path, 0, "keys out of order"));
            }
            last = Some(it.key().to_vec());
            entries += 1;
            it.next()?;
        }
        Ok(entries)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.unpin());
        }
    }
}

/// A cursor over a table: a stack of index cursors from the root down, then a data block.
pub(crate) struct TableIter {
    table: Arc<Table>,
    fill_cache: bool,
    /// The root block of the index, kept from the first seek for the cursor's next ones.
    root: Option<Arc<Block>>,
    /// One cursor per index level, root first, with the offset of its block.
    stack: Vec<(BlockIter, u64)>,
    data: Option<(BlockIter, u64)>,
}

#[derive(Clone, Copy)]
enum Edge {
    First,
    Last,
}

impl TableIter {
    fn err(&self, e: Error, offset: u64) -> Error {
        self.table.with_path(e, offset)
    }

    fn open_block(&self, handle_bytes: &[u8], at: u64, in_order: bool) -> Result<(BlockIter, u64)> {
        let handle =
            BlockHandle::decode_varint(handle_bytes).map_err(|e| e.at(&self.table.path, at))?;
        let block = self
            .table
            .read_block_in(handle, self.fill_cache, in_order)?;
        Ok((block.iter(compare_internal), handle.offset))
    }

    /// Rebuilds the cursors below index level `level` (whose cursor is positioned) down to the
    /// data block, each placed at `edge`. `in_order` when a scan steps there from the block
    /// before (or after).
    fn descend(&mut self, from: usize, edge: Edge, in_order: bool) -> Result<()> {
        self.stack.truncate(from + 1);
        self.data = None;
        loop {
            let Some((top, at)) = self.stack.last() else {
                return Ok(());
            };
            if !top.valid() {
                return Ok(());
            }
            let (mut child, off) = self.open_block(top.value(), *at, in_order)?;
            let r = match edge {
                Edge::First => child.seek_to_first(),
                Edge::Last => child.seek_to_last(),
            };
            r.map_err(|e| self.err(e, off))?;
            if self.stack.len() == usize::from(self.table.footer.index_depth) {
                self.data = Some((child, off));
                return Ok(());
            }
            self.stack.push((child, off));
        }
    }

    /// A cursor over the root block of the index. The first seek takes the table's pinned
    /// one; a cursor that does not fill the cache (a compaction's) reads one for itself
    /// rather than pin it, unless the table holds it already. Later seeks reuse it.
    fn root(&mut self) -> Result<(BlockIter, u64)> {
        let offset = self.table.footer.index.offset;
        if let Some(root) = &self.root {
            return Ok((root.iter(compare_internal), offset));
        }
        let root = if self.fill_cache {
            self.table.index()?.block.clone()
        } else {
            match self.table.index.load().as_deref() {
                Some(r) => r.block.clone(),
                None => Arc::new(self.table.read_index_root(self.table.footer.index)?),
            }
        };
        let it = root.iter(compare_internal);
        self.root = Some(root);
        Ok((it, offset))
    }

    /// After the data cursor ran off one end, moves to the neighbouring data block.
    fn skip_empty(&mut self, forward: bool) -> Result<()> {
        while self.data.as_ref().is_some_and(|(d, _)| !d.valid()) {
            // Find the deepest index level that can still move.
            let mut level = self.stack.len();
            loop {
                if level == 0 {
                    self.data = None;
                    return Ok(());
                }
                level -= 1;
                let Some((it, off)) = self.stack.get_mut(level) else {
                    return Ok(());
                };
                let off = *off;
                let r = if forward { it.next() } else { it.prev() };
                let valid = it.valid();
                r.map_err(|e| self.table.with_path(e, off))?;
                if valid {
                    break;
                }
            }
            self.descend(level, if forward { Edge::First } else { Edge::Last }, true)?;
        }
        Ok(())
    }

    fn data(&self) -> &BlockIter {
        debug_assert!(self.valid());
        match &self.data {
            Some((d, _)) => d,
            None => unreachable_iter(),
        }
    }
}

#[cold]
fn unreachable_iter() -> ! {
    // Callers must check valid() first: this is a broken precondition, not bad data.
    panic!("table iterator used while not valid")
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.data.as_ref().is_some_and(|(d, _)| d.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let (mut root, off) = self.root()?;
        root.seek_to_first().map_err(|e| self.err(e, off))?;
        self.stack = vec![(root, off)];
        self.descend(0, Edge::First, true)?;
        self.skip_empty(true)
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let (mut root, off) = self.root()?;
        root.seek_to_last().map_err(|e| self.err(e, off))?;
        self.stack = vec![(root, off)];
        self.descend(0, Edge::Last, true)?;
        self.skip_empty(false)
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let (mut it, mut off) = self.root()?;
        self.stack.clear();
        self.data = None;
        loop {
            it.seek(target).map_err(|e| self.err(e, off))?;
            if !it.valid() {
                return Ok(());
            }
            let (child, child_off) = self.open_block(it.value(), off, false)?;
            self.stack.push((it, off));
            if self.stack.len() == usize::from(self.table.footer.index_depth) {
                let mut d = child;
                d.seek(target).map_err(|e| self.err(e, child_off))?;
                self.data = Some((d, child_off));
                return self.skip_empty(true);
            }
            it = child;
            off = child_off;
        }
    }
    fn next(&mut self) -> Result<()> {
        if let Some((d, off)) = &mut self.data {
            let off = *off;
            d.next().map_err(|e| self.table.with_path(e, off))?;
        }
        self.skip_empty(true)
    }
    fn prev(&mut self) -> Result<()> {
        if let Some((d, off)) = &mut self.data {
            let off = *off;
            d.prev().map_err(|e| self.table.with_path(e, off))?;
        }
        self.skip_empty(false)
    }
    fn key(&self) -> &[u8] {
        self.data().key()
    }
    fn value(&self) -> &[u8] {
        self.data().value()
    }
}

#[cfg(test)]
mod tests {
    use super::super::builder::TableBuilder;
    use super::super::{Compression, FilterKind, IndexKind, TableOptions};
    use super::*;
    use crate::fs::{FileSystem, MemFs};
    use crate::key::{SeqNo, ValueKind, internal_key, lookup_key};
    use crate::sstable::pinned::PinBudget;

    fn options(kind: IndexKind, compression: Compression, filter: FilterKind) -> TableOptions {
        TableOptions {
            block_size: 256,
            restart_interval: 4,
            bloom_bits_per_key: 10.0,
            compression,
            index_kind: kind,
            filter_kind: filter,
        }
    }

    /// A table at `/t/1.sst` of `entries` (internal key, value), opened.
    fn build_from(
        opts: TableOptions,
        entries: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
    ) -> (MemFs, Arc<Table>) {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/t")).unwrap();
        let path = Path::new("/t/1.sst");
        let mut b = TableBuilder::new(fs.create(path).unwrap(), path.to_path_buf(), opts);
        for (k, v) in entries {
            b.add(&k, &v).unwrap();
        }
        b.finish().unwrap();
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = Table::open(fs.open(path).unwrap(), path, FileNumber(1), cache).unwrap();
        (fs, Arc::new(t))
    }

    /// `n` entries, `key000000` = `value0`, `key000002` = `value1`, ...
    fn build_with(n: u32, opts: TableOptions) -> (MemFs, Arc<Table>) {
        let entries = (0..n).map(|i| {
            let k = internal_key(
                format!("key{:06}", i * 2).as_bytes(),
                SeqNo(u64::from(i) + 1),
                ValueKind::Value,
            );
            (k, format!("value{i}").into_bytes())
        });
        let (fs, t) = build_from(opts, entries);
        assert_eq!(t.verify().unwrap(), u64::from(n));
        (fs, t)
    }

    fn build(n: u32, kind: IndexKind, compression: Compression) -> (MemFs, Arc<Table>) {
        build_with(n, options(kind, compression, FilterKind::Whole))
    }

    #[test]
    fn both_index_kinds_find_every_key_and_iterate_both_ways() {
        let kinds = [IndexKind::Flat, IndexKind::BTree]
            .into_iter()
            .flat_map(|k| [FilterKind::Whole, FilterKind::Partitioned].map(|f| (k, f)));
        for (kind, filter) in kinds {
            for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
                let n = 2000;
                let (_fs, t) = build_with(n, options(kind, c, filter));
                assert_eq!(t.footer().filter_kind, filter);
                if kind == IndexKind::BTree {
                    assert!(
                        t.footer().index_depth >= 2,
                        "btree of {n} entries should have levels"
                    );
                }
                for i in 0..n {
                    let uk = format!("key{:06}", i * 2);
                    let e = t
                        .get(&lookup_key(uk.as_bytes(), SeqNo::MAX), uk.as_bytes(), true)
                        .unwrap()
                        .unwrap();
                    assert_eq!(e.value, format!("value{i}").as_bytes());
                    let miss = format!("key{:06}", i * 2 + 1);
                    assert!(
                        t.get(
                            &lookup_key(miss.as_bytes(), SeqNo::MAX),
                            miss.as_bytes(),
                            true
                        )
                        .unwrap()
                        .is_none()
                    );
                }
                let mut it = t.iter(true);
                it.seek_to_first().unwrap();
                let mut count = 0;
                while it.valid() {
                    count += 1;
                    it.next().unwrap();
                }
                assert_eq!(count, n);
                it.seek_to_last().unwrap();
                let mut back = 0;
                while it.valid() {
                    back += 1;
                    it.prev().unwrap();
                }
                assert_eq!(back, n);
                it.seek(&lookup_key(b"key000101", SeqNo::MAX)).unwrap();
                assert_eq!(crate::key::user_key(it.key()), b"key000102");
                it.prev().unwrap();
                assert_eq!(crate::key::user_key(it.key()), b"key000100");
                it.seek(&lookup_key(b"zzz", SeqNo::MAX)).unwrap();
                assert!(!it.valid());
                assert!(t.verify().unwrap() == u64::from(n));
            }
        }
    }

    #[test]
    fn tables_over_the_pin_budget_let_their_blocks_go_and_read_them_again() {
        let n = 500;
        let (fs, t) = build(n, IndexKind::Flat, Compression::None);
        t.warm().unwrap();
        let one = t.held_bytes();
        drop(t);
        // Room for two tables' blocks, among six.
        let budget = Arc::new(PinBudget::new(2 * one + one / 2));
        let cache = Arc::new(BlockCache::new(1 << 20));
        let path = Path::new("/t/1.sst");
        let tables: Vec<Arc<Table>> = (1..=6)
            .map(|i| {
                let t = Table::open(fs.open(path).unwrap(), path, FileNumber(i), cache.clone());
                Arc::new(t.unwrap().with_budget(&budget))
            })
            .collect();
        for round in 0..3 {
            for (j, t) in tables.iter().enumerate() {
                for i in (round..n).step_by(7) {
                    let uk = format!("key{:06}", i * 2);
                    let lookup = lookup_key(uk.as_bytes(), SeqNo::MAX);
                    let e = t.get(&lookup, uk.as_bytes(), true).unwrap().unwrap();
                    assert_eq!(e.value, format!("value{i}").as_bytes());
                }
                assert!(
                    budget.held() <= 2 * one + one / 2,
                    "table {j}: {}",
                    budget.held()
                );
            }
        }
        let holding = tables.iter().filter(|t| t.held_bytes() == one).count();
        assert_eq!(holding, 2, "the two tables used last hold their blocks");
        assert_eq!(budget.held(), 2 * one);
        // A lookup's hold outlives the table's: the blocks stay readable after they are let go.
        let held = tables[5].filter().unwrap();
        assert_eq!(tables[5].unpin(), one);
        budget.release(one);
        let lookup = lookup_key(b"key000004", SeqNo::MAX);
        assert!(
            tables[5]
                .may_contain(&held, &lookup, b"key000004", true)
                .unwrap()
        );
        drop(tables);
        assert_eq!(budget.held(), 0, "closed tables give their bytes back");
    }

    /// A lookup the filter answers reads the filter alone: the index is read by the first
    /// lookup the filter passes.
    #[test]
    fn a_lookup_the_filter_refuses_never_reads_the_index() {
        // `build` verifies its table, which reads everything: open the file afresh.
        let (fs, _) = build(500, IndexKind::Flat, Compression::None);
        let path = Path::new("/t/1.sst");
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = Table::open(fs.open(path).unwrap(), path, FileNumber(2), cache);
        {
            let t = Arc::new(t.unwrap());
            // Odd keys were never written; about 1% pass the filter (10 bits a key).
            let mut refused = 0;
            for i in 0..200 {
                let uk = format!("key{:06}", i * 2 + 1);
                let lookup = lookup_key(uk.as_bytes(), SeqNo::MAX);
                if !t
                    .may_contain(&t.filter().unwrap(), &lookup, uk.as_bytes(), true)
                    .unwrap()
                {
                    refused += 1;
                    assert!(t.get(&lookup, uk.as_bytes(), true).unwrap().is_none());
                    assert!(t.index.load().is_none(), "{uk}: the index was read");
                }
            }
            assert!(refused > 150, "{refused}");
            let lookup = lookup_key(b"key000004", SeqNo::MAX);
            assert!(t.get(&lookup, b"key000004", true).unwrap().is_some());
            assert!(t.index.load().is_some());
        }
    }

    /// Every version of every key, and each key seen from before its newest versions: a
    /// lookup must find the newest version at or below its sequence number when the versions
    /// of a key straddle the boundary of two filter partitions.
    #[test]
    fn partitioned_filters_find_every_version_across_partition_boundaries() {
        const VERSIONS: u64 = 12;
        let keys = 3000u64;
        let entries = (0..keys).flat_map(|i| {
            // Newest first, as internal keys order.
            (1..=VERSIONS).rev().map(move |v| {
                let k = internal_key(
                    format!("key{:06}", i * 2).as_bytes(),
                    SeqNo(i * VERSIONS + v),
                    ValueKind::Value,
                );
                (k, format!("v{i}.{v}").into_bytes())
            })
        });
        let opts = options(IndexKind::BTree, Compression::None, FilterKind::Partitioned);
        let (_fs, t) = build_from(opts, entries);
        let partitions = t.filter_partition_handles().unwrap().len();
        assert!(partitions > 10, "only {partitions} partitions");
        assert_eq!(t.verify().unwrap(), keys * VERSIONS);
        let pinned = t.filter().unwrap();
        for i in 0..keys {
            let uk = format!("key{:06}", i * 2);
            for v in 1..=VERSIONS {
                let lookup = lookup_key(uk.as_bytes(), SeqNo(i * VERSIONS + v));
                assert!(
                    t.may_contain(&pinned, &lookup, uk.as_bytes(), true)
                        .unwrap()
                );
                let e = t.get(&lookup, uk.as_bytes(), true).unwrap().unwrap();
                assert_eq!(e.value, format!("v{i}.{v}").as_bytes());
            }
        }
        // Absent keys: the partitions answer no for nearly all (10 bits a key: about 1%).
        let mut maybe = 0;
        for i in 0..keys {
            let uk = format!("key{:06}", i * 2 + 1);
            let lookup = lookup_key(uk.as_bytes(), SeqNo::MAX);
            maybe += usize::from(
                t.may_contain(&pinned, &lookup, uk.as_bytes(), true)
                    .unwrap(),
            );
            assert!(t.get(&lookup, uk.as_bytes(), true).unwrap().is_none());
        }
        assert!(
            maybe < 100,
            "{maybe} of {keys} absent keys passed the filters"
        );
        // Past the last key, no partition is asked at all.
        let past = lookup_key(b"zzz", SeqNo::MAX);
        assert!(!t.may_contain(&pinned, &past, b"zzz", true).unwrap());
    }

    /// Regression (found by fuzzing with checksum checks off): a footer whose block size is
    /// near `u64::MAX` overflowed the bounds check.
    #[test]
    fn a_footer_handle_of_any_size_is_corruption() {
        let opts = options(IndexKind::Flat, Compression::None, FilterKind::Whole);
        let (fs, t) = build_with(50, opts);
        drop(t);
        let mut data = fs.read_all(Path::new("/t/1.sst")).unwrap();
        let at = data.len() - FOOTER_BYTES;
        for size in [
            u64::MAX,
            u64::MAX - BLOCK_TRAILER_BYTES as u64 + 1,
            at as u64,
        ] {
            let Ok(mut footer) = Footer::decode(&data[at..]) else {
                panic!("the footer of a table just written")
            };
            footer.filter.size = size;
            data.truncate(at);
            data.extend_from_slice(&footer.encode());
            let fs2 = MemFs::new();
            fs2.create_dir_all(Path::new("/t")).unwrap();
            let mut f = fs2.create(Path::new("/t/1.sst")).unwrap();
            f.append(&data).unwrap();
            drop(f);
            let opened = Table::open(
                fs2.open(Path::new("/t/1.sst")).unwrap(),
                Path::new("/t/1.sst"),
                FileNumber(1),
                Arc::new(BlockCache::new(1 << 20)),
            );
            match opened {
                Err(Error::Corruption { reason, .. }) => {
                    assert_eq!(reason, "footer points past the file", "size {size}")
                }
                Err(other) => panic!("size {size}: {other}"),
                Ok(_) => panic!("size {size}: opened"),
            }
        }
    }

    #[test]
    fn flipped_bytes_are_reported_with_the_file_name() {
        for filter in [FilterKind::Whole, FilterKind::Partitioned] {
            flipped_bytes_are_reported(filter);
        }
    }

    fn flipped_bytes_are_reported(filter: FilterKind) {
        let opts = options(IndexKind::Flat, Compression::None, filter);
        let (fs, t) = build_with(500, opts);
        let size = fs.file_size(Path::new("/t/1.sst")).unwrap() as usize;
        drop(t);
        let mut detected = 0;
        for pos in (0..size).step_by(97) {
            let fs2 = MemFs::new();
            fs2.create_dir_all(Path::new("/t")).unwrap();
            let mut data = fs.read_all(Path::new("/t/1.sst")).unwrap();
            data[pos] ^= 0x40;
            let mut f = fs2.create(Path::new("/t/1.sst")).unwrap();
            f.append(&data).unwrap();
            drop(f);
            let cache = Arc::new(BlockCache::new(1 << 20));
            let opened = Table::open(
                fs2.open(Path::new("/t/1.sst")).unwrap(),
                Path::new("/t/1.sst"),
                FileNumber(1),
                cache,
            );
            let res = opened.and_then(|t| Arc::new(t).verify());
            match res {
                Err(Error::Corruption { file, .. }) => {
                    assert_eq!(file, Path::new("/t/1.sst"));
                    detected += 1;
                }
                Err(other) => panic!("unexpected error {other}"),
                Ok(_) => panic!("flip at {pos} not detected"),
            }
        }
        assert!(detected > 0);
    }
}

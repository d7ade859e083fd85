//! The database: [`Db`], its shared state, and the public calls, which hand their work to
//! the files beside this one:
//!
//! - `recovery.rs`: opening a database, checking its MANIFEST and replaying its WALs;
//! - `write.rs`: the write path, group commit into the WAL and the memtable;
//! - `read.rs`: point lookups over a super-version;
//! - `iter.rs`: iterators over the whole database;
//! - `background.rs`: the flush and compaction threads, and deleting obsolete files;
//! - `transaction.rs`: optimistic transactions.
//!
//! Locking: `DbInner::state` guards the version set, the memtable list and the writer queue.
//! Only the write leader does WAL I/O, holding `wal` but not `state`. Readers take an `Arc` of
//! the current [`SuperVersion`] under a read lock held for one clone, and do their I/O with no
//! lock held.

mod background;
mod family;
mod iter;
mod read;
mod recovery;
mod transaction;
mod write;

pub use family::ColumnFamily;
pub use iter::{DbIterator, Scan};
pub use transaction::Transaction;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::batch::WriteBatch;
use crate::compaction;
use crate::error::{Error, Result};
use crate::filter_policy;
use crate::fs::FileLock;
use crate::key::{FileNumber, NUM_LEVELS, SeqNo};
use crate::log::LogWriter;
use crate::memtable::MemTable;
use crate::mutex::lock;
use crate::options::{Options, ReadOptions, WriteOptions};
use crate::snapshot::{Snapshot, SnapshotList};
use crate::stats::{FamilyStats, FileInfo, LevelStats, Stats};
use crate::version::edit::VersionEdit;
use crate::version::set::VersionSet;
use crate::version::{TableStore, Version, wal_file_name};
use family::{Family, FamilyState};
use write::{QueuedWrite, Writer};

/// What readers see: the memtables and the level structure, installed together.
pub(crate) struct SuperVersion {
    pub mem: Arc<MemTable>,
    /// Immutable memtables, newest first.
    pub imm: Vec<Arc<MemTable>>,
    pub version: Arc<Version>,
    /// The newest sequence number up to which the flushes and compactions behind these
    /// tables folded or dropped versions: a read below it could miss what it should see.
    pub horizon: SeqNo,
}

struct State {
    versions: VersionSet,
    /// The default column family, which is never dropped.
    default: FamilyState,
    /// The other column families, by id.
    others: Vec<FamilyState>,
    queue: VecDeque<Arc<Writer>>,
    /// The first failure that may have lost data; writes are refused from then on.
    bg_error: Option<Error>,
    closed: bool,
    /// What [`SuperVersion::horizon`] the next super-version gets.
    horizon: SeqNo,
    /// A manual compaction runs: background compactions pick nothing new meanwhile.
    manual_compaction: bool,
    /// The family the compaction thread looks at first next time (round-robin).
    compaction_turn: usize,
    /// Sequence numbers handed out to write groups (visible or not yet).
    last_allocated: SeqNo,
    wal_number: FileNumber,
    /// Writers in the last synced group; its successor's leader waits for that many to queue
    /// up (see `DbInner::gather_sync_writers`).
    last_sync_group: usize,
    /// The last sequence number the flush thread saw handed out, and since when: writes
    /// have stopped when it stays the same (see `DbInner::check_idle`).
    idle_mark: (SeqNo, Instant),
    /// Idle merges that writes gave up since the last that finished. Each doubles the quiet
    /// time the next one waits for, so that a trickle of writes a few seconds apart does not
    /// start and abandon a merge of the whole tree again and again.
    idle_merges_given_up_in_a_row: u32,
}

#[derive(Default)]
struct Counters {
    user_bytes: AtomicU64,
    wal_bytes: AtomicU64,
    flush_bytes: AtomicU64,
    compaction_bytes_written: AtomicU64,
    compaction_bytes_read: AtomicU64,
    flushes: AtomicU64,
    compactions: AtomicU64,
    read_compactions: AtomicU64,
    trivial_moves: AtomicU64,
    idle_merges: AtomicU64,
    idle_merges_given_up: AtomicU64,
    stall_micros: AtomicU64,
    wal_tail_dropped_bytes: AtomicU64,
    wal_salvaged_bytes: AtomicU64,
}

impl State {
    /// The default column family, which is never dropped.
    fn default_family(&self) -> &FamilyState {
        &self.default
    }

    /// Every column family, the default one first.
    fn families(&self) -> impl Iterator<Item = &FamilyState> {
        std::iter::once(&self.default).chain(&self.others)
    }

    fn families_mut(&mut self) -> impl Iterator<Item = &mut FamilyState> {
        std::iter::once(&mut self.default).chain(&mut self.others)
    }

    fn family(&self, id: u32) -> Option<&FamilyState> {
        self.families().find(|f| f.family.id == id)
    }

    fn family_mut(&mut self, id: u32) -> Option<&mut FamilyState> {
        self.families_mut().find(|f| f.family.id == id)
    }

    /// Generations of immutable memtables waiting to be flushed (the same in every family).
    fn pending_flushes(&self) -> usize {
        self.default_family().imm.len()
    }

    /// The most level-0 files any family holds: what slows and stops writers.
    fn level0_files(&self) -> usize {
        self.families()
            .map(|f| self.versions.current(f.family.id).levels[0].len())
            .max()
            .unwrap_or(0)
    }
}

pub(crate) struct DbInner {
    /// The options the database was opened with: the database-wide ones, and the default
    /// column family's.
    opts: Options,
    dir: PathBuf,
    store: Arc<TableStore>,
    /// The default column family, which the calls without a family use.
    default: Arc<Family>,
    state: Mutex<State>,
    /// Writers wait here for their turn, for room, and for flushes to finish.
    writer_cv: Condvar,
    /// Background threads wait here for work.
    bg_cv: Condvar,
    /// The last sequence number whose write is complete; reads see up to here.
    visible: AtomicU64,
    /// The active WAL; held only by the write leader and by memtable switches, which run as
    /// the leader.
    wal: Mutex<Option<LogWriter>>,
    snapshots: Arc<SnapshotList>,
    counters: Counters,
    shutting_down: AtomicBool,
    _lock: Box<dyn FileLock>,
}

/// An open database. Dropping it closes it; [`Db::close`] does the same and reports errors.
///
/// `Db` is `Send + Sync`: share it between threads with an `Arc`.
///
/// ```
/// # fn main() -> strata::Result<()> {
/// let dir = tempfile::tempdir().unwrap();
/// let db = strata::Db::open(dir.path(), strata::Options::default())?;
/// db.put(b"hello", b"world")?;
/// assert_eq!(db.get(b"hello")?, Some(b"world".to_vec()));
/// db.delete(b"hello")?;
/// assert_eq!(db.get(b"hello")?, None);
/// db.close()?;
/// # Ok(()) }
/// ```
pub struct Db {
    inner: Arc<DbInner>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

fn parse_file_name(name: &str) -> Option<(FileNumber, &str)> {
    let (stem, ext) = name.split_once('.')?;
    Some((FileNumber(stem.parse().ok()?), ext))
}

impl Db {
    /// The sequence number of the newest write (put, delete or merge) of `key`, or of a
    /// range delete that removed its value; `None` when it was never written. A range delete
    /// over a key that had no value does not count: it changed nothing. A later write of the
    /// key, by anyone, makes it larger: a caller can tell whether a key changed between two
    /// moments (as the server's `WATCH` does).
    pub fn newest_sequence(&self, key: &[u8]) -> Result<Option<u64>> {
        self.inner.check_open()?;
        Ok(self.inner.newest_seq(key)?.map(|s| s.0))
    }

    /// Sets `key` to `value`, with default write options.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write(b, WriteOptions::default())
    }

    /// Removes `key`; removing a missing key is not an error.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(b, WriteOptions::default())
    }

    /// Deletes every key in `[begin, end)` with one write, however many keys the range
    /// holds; see [`WriteBatch::delete_range`].
    pub fn delete_range(&self, begin: &[u8], end: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(begin, end);
        self.write(b, WriteOptions::default())
    }

    /// Writes `operand` for `key`, to be folded into its value by
    /// [`Options::merge_operator`] when the key is read: an update without a read.
    pub fn merge(&self, key: &[u8], operand: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.merge(key, operand);
        self.write(b, WriteOptions::default())
    }

    /// Applies a batch atomically. With `options.sync` the batch is durable against power
    /// loss when this returns; see [`WriteOptions`] for the whole contract.
    pub fn write(&self, batch: WriteBatch, options: WriteOptions) -> Result<()> {
        batch.validate()?;
        if batch.has_families() {
            self.inner.check_families(&batch)?;
        } else if batch.has_merges() && self.inner.default.opts.merge_operator.is_none() {
            return Err(Error::InvalidArgument(
                "a merge needs Options::merge_operator".into(),
            ));
        }
        if batch.is_empty() {
            return self.inner.check_writable();
        }
        self.inner
            .join_write_queue(QueuedWrite::Batch(batch), options.sync)
    }

    /// The value of `key` in the latest state, or `None`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, &ReadOptions::default())
    }

    /// The value of `key` as `options` say (a snapshot, or the latest state).
    pub fn get_with(&self, key: &[u8], options: &ReadOptions) -> Result<Option<Vec<u8>>> {
        self.inner.get(key, options)
    }

    /// Sets `key` to `value` in column family `cf`.
    pub fn put_cf(&self, cf: &ColumnFamily, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put_cf(cf, key, value);
        self.write(b, WriteOptions::default())
    }

    /// Removes `key` from column family `cf`.
    pub fn delete_cf(&self, cf: &ColumnFamily, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_cf(cf, key);
        self.write(b, WriteOptions::default())
    }

    /// The value of `key` in column family `cf`, in the latest state.
    pub fn get_cf(&self, cf: &ColumnFamily, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(
            key,
            &ReadOptions {
                family: Some(cf.clone()),
                ..ReadOptions::default()
            },
        )
    }

    /// Creates the column family `name`, with `options` for its tree (see
    /// [`ColumnFamily`]); logged in the MANIFEST before it returns. A name in use is
    /// [`Error::InvalidArgument`].
    ///
    /// ```
    /// # fn main() -> strata::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = strata::Db::open(dir.path(), strata::Options::default())?;
    /// let users = db.create_family("users", strata::Options::default())?;
    /// let mut batch = strata::WriteBatch::new();
    /// batch.put(b"count", b"1");
    /// batch.put_cf(&users, b"ada", b"lovelace");
    /// db.write(batch, strata::WriteOptions::default())?;
    /// assert_eq!(db.get_cf(&users, b"ada")?, Some(b"lovelace".to_vec()));
    /// assert_eq!(db.get(b"ada")?, None);
    /// assert_eq!(db.families(), ["default", "users"]);
    /// # Ok(()) }
    /// ```
    pub fn create_family(&self, name: &str, options: Options) -> Result<ColumnFamily> {
        self.inner.create_family(name, options)
    }

    /// Drops the column family `name` and, once no reader holds them, removes its files.
    /// The default family cannot be dropped.
    pub fn drop_family(&self, name: &str) -> Result<()> {
        self.inner.drop_family(name)
    }

    /// The column family `name`, if it exists.
    pub fn family(&self, name: &str) -> Option<ColumnFamily> {
        let st = lock(&self.inner.state);
        st.families()
            .find(|f| f.family.name == name)
            .map(|f| ColumnFamily {
                family: f.family.clone(),
            })
    }

    /// The default column family, which the calls without a family use.
    pub fn default_family(&self) -> ColumnFamily {
        ColumnFamily {
            family: self.inner.default.clone(),
        }
    }

    /// The names of the column families, the default one first, then by id (the order of
    /// their creation).
    pub fn families(&self) -> Vec<String> {
        let st = lock(&self.inner.state);
        st.families().map(|f| f.family.name.clone()).collect()
    }

    /// The values of several keys, each as [`Db::get_with`] would give it, read together:
    /// the lookups' cache misses overlap instead of following one another, so a batch costs
    /// less than its keys read one at a time (RocksDB's `MultiGet`). All keys are read at
    /// one sequence number, the snapshot's or the latest.
    ///
    /// ```
    /// # fn main() -> strata::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = strata::Db::open(dir.path(), strata::Options::default())?;
    /// db.put(b"a", b"1")?;
    /// let values = db.get_many(&[b"a", b"b"], &strata::ReadOptions::default());
    /// assert_eq!(values[0].as_ref().unwrap().as_deref(), Some(&b"1"[..]));
    /// assert_eq!(values[1].as_ref().unwrap(), &None);
    /// # Ok(()) }
    /// ```
    pub fn get_many<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        options: &ReadOptions,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        let mut values = Vec::with_capacity(keys.len());
        self.get_many_with(keys.iter().map(AsRef::as_ref), options, |v| values.push(v));
        values
    }

    /// [`Db::get_many`] for callers that keep their own containers: `each` is called once per
    /// key, in the order of `keys`, with what [`Db::get_with`] would return for it. No
    /// vector of results is built: per call, only the values and the lookup's own working
    /// lists are allocated.
    ///
    /// ```
    /// # fn main() -> strata::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = strata::Db::open(dir.path(), strata::Options::default())?;
    /// db.put(b"a", b"1")?;
    /// let mut found = 0;
    /// let keys: [&[u8]; 2] = [b"a", b"b"];
    /// db.get_many_with(keys, &strata::ReadOptions::default(), |v| {
    ///     found += usize::from(matches!(v, Ok(Some(_))));
    /// });
    /// assert_eq!(found, 1);
    /// # Ok(()) }
    /// ```
    pub fn get_many_with<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        options: &ReadOptions,
        each: impl FnMut(Result<Option<Vec<u8>>>),
    ) {
        self.inner.get_many(keys, options, each)
    }

    /// Takes a snapshot of the current state.
    pub fn snapshot(&self) -> Snapshot {
        let inner = &self.inner;
        inner
            .snapshots
            .acquire(|| SeqNo(inner.visible.load(Ordering::Acquire)))
    }

    /// An iterator over the state `options` name, within its bounds. It keeps every file it
    /// may read alive until dropped. Position it with a seek before reading.
    pub fn iter(&self, options: &ReadOptions) -> Result<DbIterator> {
        self.inner.check_open()?;
        self.inner.iter(options)
    }

    /// The entries with keys in `range`, in key order.
    ///
    /// ```
    /// # fn main() -> strata::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = strata::Db::open(dir.path(), strata::Options::default())?;
    /// for k in [b"a", b"b", b"c", b"d"] {
    ///     db.put(k, b"v")?;
    /// }
    /// let keys: Vec<Vec<u8>> = db
    ///     .scan(b"b".to_vec()..b"d".to_vec())?
    ///     .map(|e| e.map(|(k, _)| k))
    ///     .collect::<strata::Result<_>>()?;
    /// assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
    /// # Ok(()) }
    /// ```
    pub fn scan(&self, range: impl std::ops::RangeBounds<Vec<u8>>) -> Result<Scan> {
        self.scan_with(range, ReadOptions::default(), false)
    }

    /// The entries with keys in `range`, in reverse key order.
    pub fn scan_rev(&self, range: impl std::ops::RangeBounds<Vec<u8>>) -> Result<Scan> {
        self.scan_with(range, ReadOptions::default(), true)
    }

    /// [`Db::scan`] or [`Db::scan_rev`] with read options (a snapshot, for example); the
    /// range narrows the options' bounds.
    pub fn scan_with(
        &self,
        range: impl std::ops::RangeBounds<Vec<u8>>,
        mut options: ReadOptions,
        reverse: bool,
    ) -> Result<Scan> {
        use std::ops::Bound;
        let successor = |k: &Vec<u8>| {
            let mut s = k.clone();
            s.push(0);
            s
        };
        let lower = match range.start_bound() {
            Bound::Included(k) => Some(k.clone()),
            Bound::Excluded(k) => Some(successor(k)),
            Bound::Unbounded => None,
        };
        let upper = match range.end_bound() {
            Bound::Included(k) => Some(successor(k)),
            Bound::Excluded(k) => Some(k.clone()),
            Bound::Unbounded => None,
        };
        if let Some(l) = lower {
            options.lower_bound = Some(options.lower_bound.map_or(l.clone(), |o| o.max(l)));
        }
        if let Some(u) = upper {
            options.upper_bound = Some(options.upper_bound.map_or(u.clone(), |o| o.min(u)));
        }
        let it = self.iter(&options)?;
        Ok(Scan {
            it,
            reverse,
            started: false,
            done: false,
        })
    }

    /// Makes every write acknowledged so far durable against power loss (fsyncs the WAL), as
    /// if each had been written with `sync = true`. For callers that batch durability in
    /// time, such as a server's `everysec` mode.
    pub fn sync_wal(&self) -> Result<()> {
        self.inner.check_writable()?;
        // Writers wait only while the WAL's buffered bytes go to the operating system, not
        // while the disk makes them durable.
        let mut wal = lock(&self.inner.wal);
        let w = wal.as_mut().ok_or(Error::Closed)?;
        let begun = w.begin_sync();
        drop(wal);
        let result = begun.and_then(|s| s.finish());
        if let Err(e) = &result {
            let mut st = lock(&self.inner.state);
            self.inner.poison(&mut st, e);
        }
        result
    }

    /// Writes a consistent copy of the database into `dir`, a new directory, while writes
    /// go on; the copy opens as a database of its own. The memtables are flushed first, so
    /// the copy holds every write made before the call and needs no WAL. Its tables are
    /// hard-linked where the file system allows (sharing their bytes with this database's,
    /// which never change), copied where not, under a MANIFEST of their own.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let store = &self.inner.store;
        let fs = store.fs.as_ref();
        if fs.exists(dir) {
            return Err(Error::InvalidArgument(format!(
                "checkpoint: {} exists already",
                dir.display()
            )));
        }
        self.inner.flush()?;
        // The version holds its tables alive (a compaction's inputs are deleted only when no
        // version needs them) while they are linked.
        let (files, mut edit) = {
            let st = lock(&self.inner.state);
            let files: Vec<_> = st.versions.files().map(|(_, _, f)| f.clone()).collect();
            (files, st.versions.snapshot_edit())
        };
        fs.create_dir_all(dir)
            .map_err(crate::version::io_err("create", dir))?;
        let made = self.fill_checkpoint(dir, &files, &mut edit);
        if made.is_err() {
            // A half-made copy would open as a database that lacks tables: remove it.
            for name in fs.list(dir).unwrap_or_default() {
                let _ = fs.remove(&dir.join(name));
            }
            let _ = fs.remove_dir(dir);
        }
        made
    }

    /// Links `files` into the new directory `dir` and writes the MANIFEST of `edit` (the
    /// state that holds them) over an empty WAL.
    fn fill_checkpoint(
        &self,
        dir: &Path,
        files: &[Arc<crate::version::FileMeta>],
        edit: &mut crate::version::edit::VersionEdit,
    ) -> Result<()> {
        let store = &self.inner.store;
        let fs = store.fs.as_ref();
        // The new directory's own entry, in its parent.
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs.sync_dir(parent)
                .map_err(crate::version::io_err("fsync", parent))?;
        }
        for f in files {
            let name = crate::version::table_file_name(f.number);
            fs.link_or_copy(&store.dir.join(&name), &dir.join(&name))
                .map_err(crate::version::io_err("link", &dir.join(&name)))?;
        }
        // An empty WAL of its own, which its MANIFEST names as the oldest it needs.
        let next = edit.next_file_number.unwrap_or(1);
        let mut wal = background::create_wal_in(fs, dir, FileNumber(next))?;
        wal.sync()?;
        edit.log_number = Some(FileNumber(next));
        edit.next_file_number = Some(next + 2);
        // Writing the MANIFEST syncs the directory: every link and file above is in it.
        crate::version::set::write_manifest(fs, dir, FileNumber(next + 1), edit)?;
        Ok(())
    }

    /// Turns the memtable into an SST now and waits until every write made before the call
    /// is in one (writes that go on meanwhile do not hold it up).
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Compacts every file that overlaps `[begin, end]` (`None` is unbounded) down the
    /// tree, after a flush. With both `None` the whole database ends in one sorted level,
    /// without overwritten versions or deleted keys that no snapshot needs.
    pub fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.inner.flush()?;
        self.inner.compact_range(&self.inner.default, begin, end)
    }

    /// [`Db::compact_range`] in column family `cf`.
    pub fn compact_range_cf(
        &self,
        cf: &ColumnFamily,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<()> {
        self.inner.flush()?;
        self.inner.compact_range(&cf.family, begin, end)
    }

    /// The engine's statistics: levels, memtables, cache, bytes written.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The total size of the keys and values a full scan returns: the live data, to set
    /// against the on-disk size in [`Stats`]. Reads the whole database.
    pub fn live_data_bytes(&self) -> Result<u64> {
        let mut it = self.iter(&ReadOptions {
            skip_cache: true,
            ..ReadOptions::default()
        })?;
        it.seek_to_first()?;
        let mut total = 0u64;
        while it.valid() {
            total += (it.key().len() + it.value().len()) as u64;
            it.next()?;
        }
        Ok(total)
    }

    /// The directory of the database.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Closes the database: stops background work, makes the WAL durable and releases the
    /// lock. Everything acknowledged before is kept.
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        {
            let mut st = lock(&self.inner.state);
            if st.closed {
                return Ok(());
            }
            st.closed = true;
            // Set under the state lock: background threads check it under the same lock
            // before waiting, so the notification below cannot be lost.
            self.inner.shutting_down.store(true, Ordering::SeqCst);
        }
        self.inner.bg_cv.notify_all();
        self.inner.writer_cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let mut wal = lock(&self.inner.wal);
        if let Some(w) = wal.as_mut() {
            w.sync()?;
        }
        *wal = None;
        Ok(())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.close_inner();
    }
}

impl DbInner {
    fn check_open(&self) -> Result<()> {
        if lock(&self.state).closed {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        let st = lock(&self.state);
        if st.closed {
            return Err(Error::Closed);
        }
        match &st.bg_error {
            Some(e) => Err(Error::Poisoned(e.to_string())),
            None => Ok(()),
        }
    }

    /// The column family a read names.
    fn family_of<'a>(&'a self, options: &'a ReadOptions) -> &'a Arc<Family> {
        options
            .family
            .as_ref()
            .map_or(&self.default, |cf| &cf.family)
    }

    /// Publishes every family's memtables and version to readers. Requires: `state` is
    /// locked.
    fn install_super_version(&self, st: &State) {
        for f in st.families() {
            let sv = Arc::new(SuperVersion {
                mem: f.mem.clone(),
                imm: f.imm.iter().rev().cloned().collect(),
                version: st.versions.current(f.family.id),
                horizon: st.horizon,
            });
            *f.family
                .super_version
                .write()
                .unwrap_or_else(|e| e.into_inner()) = sv;
        }
    }

    /// Checks a batch that names column families: every family it names exists and is not
    /// being dropped, and has a merge operator where the batch merges.
    fn check_families(&self, batch: &WriteBatch) -> Result<()> {
        let st = lock(&self.state);
        let mut last = None;
        for op in batch.iter() {
            let op = op.map_err(|e| Error::InvalidArgument(e.0.to_string()))?;
            let merge = op.kind == crate::key::ValueKind::Merge;
            if last == Some((op.family, merge)) {
                continue;
            }
            last = Some((op.family, merge));
            let Some(f) = st
                .family(op.family)
                .filter(|f| !f.family.dropped.load(Ordering::SeqCst))
            else {
                return Err(Error::InvalidArgument(format!(
                    "column family {} does not exist (dropped?)",
                    op.family
                )));
            };
            if merge && f.family.opts.merge_operator.is_none() {
                return Err(Error::InvalidArgument(format!(
                    "a merge needs Options::merge_operator (column family {})",
                    f.family.name
                )));
            }
        }
        Ok(())
    }

    /// A new family's state: an empty memtable on the active WAL, and an empty one for each
    /// generation waiting to be flushed, so that its list lines up with the others'.
    fn new_family_state(&self, st: &State, family: Arc<Family>) -> FamilyState {
        let size = family.opts.write_buffer_size;
        let imm = st
            .default_family()
            .imm
            .iter()
            .map(|m| Arc::new(MemTable::new(m.wal_number(), size)))
            .collect();
        FamilyState {
            mem: Arc::new(MemTable::new(st.wal_number, size)),
            imm,
            busy_levels: [false; NUM_LEVELS],
            read_compaction: None,
            idle_merge_requested: false,
            family,
        }
    }

    fn create_family(&self, name: &str, options: Options) -> Result<ColumnFamily> {
        options.validate()?;
        if name.is_empty() || name.len() > 255 {
            return Err(Error::InvalidArgument(
                "a column family name takes 1 to 255 bytes".into(),
            ));
        }
        let mut st = lock(&self.state);
        if st.closed {
            return Err(Error::Closed);
        }
        if st.versions.families().values().any(|f| f.name == name) {
            return Err(Error::InvalidArgument(format!(
                "column family {name} exists already"
            )));
        }
        let id = st.versions.new_family_id();
        let edit = VersionEdit {
            added_families: vec![(id, name.to_string())],
            next_family: Some(id + 1),
            ..Default::default()
        };
        self.log_and_apply_unpublished(&mut st, edit)?;
        let family = Arc::new(Family::new(
            id,
            name,
            options,
            SuperVersion {
                mem: Arc::new(MemTable::new(st.wal_number, 1024)),
                imm: Vec::new(),
                version: st.versions.current(id),
                horizon: st.horizon,
            },
        ));
        let fs = self.new_family_state(&st, family.clone());
        st.others.push(fs);
        self.install_super_version(&st);
        Ok(ColumnFamily { family })
    }

    fn drop_family(&self, name: &str) -> Result<()> {
        let mut st = lock(&self.state);
        let Some(family) = st
            .families()
            .find(|f| f.family.name == name)
            .map(|f| f.family.clone())
        else {
            return Err(Error::InvalidArgument(format!("no column family {name}")));
        };
        if family.id == 0 {
            return Err(Error::InvalidArgument(
                "the default column family cannot be dropped".into(),
            ));
        }
        // No new compaction picks the family from here on; wait out the running ones.
        family.dropped.store(true, Ordering::SeqCst);
        while st
            .family(family.id)
            .is_some_and(|f| f.busy_levels.iter().any(|&b| b))
        {
            if st.closed {
                return Err(Error::Closed);
            }
            st = self.writer_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        // Another drop of the same family may have finished while this one waited.
        if st.family(family.id).is_none() {
            return Err(Error::InvalidArgument(format!("no column family {name}")));
        }
        let edit = VersionEdit {
            dropped_families: vec![family.id],
            ..Default::default()
        };
        if let Err(e) = self.log_and_apply_unpublished(&mut st, edit) {
            family.dropped.store(false, Ordering::SeqCst);
            return Err(e);
        }
        st.others.retain(|f| f.family.id != family.id);
        // Handles of the family now read an empty tree, and hold none of its files: they go
        // once the last iterator over them does.
        *family
            .super_version
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(SuperVersion {
            mem: Arc::new(MemTable::new(st.wal_number, 1024)),
            imm: Vec::new(),
            version: Arc::new(Version::default()),
            horizon: st.horizon,
        });
        self.install_super_version(&st);
        Ok(())
    }

    /// Logs an edit with the latest sequence number, installs the version it makes and
    /// publishes it; a failure poisons the database, since the MANIFEST may hold the edit.
    fn log_and_apply(&self, st: &mut State, edit: VersionEdit) -> Result<()> {
        self.log_and_apply_unpublished(st, edit)?;
        self.install_super_version(st);
        Ok(())
    }

    /// [`DbInner::log_and_apply`] without publishing the new super-version, for a caller
    /// that changes the memtables too and publishes both at once (a flush: readers must
    /// never see a memtable and the table made of it together, where a merge would find
    /// its operands twice).
    fn log_and_apply_unpublished(&self, st: &mut State, mut edit: VersionEdit) -> Result<()> {
        // Warm tables of the edit that no version took (it failed) are let go after.
        let added: Vec<FileNumber> = edit.added.iter().map(|f| f.number).collect();
        // After a failure nothing more is logged: the state on disk stays as the failure
        // left it, for the next open to recover.
        let result = match &st.bg_error {
            Some(e) => Err(Error::Poisoned(e.to_string())),
            None => {
                edit.last_sequence = Some(st.last_allocated);
                st.versions
                    .log_and_apply(edit)
                    .inspect_err(|e| self.poison(st, e))
            }
        };
        self.store.forget_warmed(added.into_iter());
        result
    }

    fn poison(&self, st: &mut State, e: &Error) {
        if st.bg_error.is_none() {
            st.bg_error = Some(e.duplicate());
        }
        self.writer_cv.notify_all();
    }

    fn new_file_number(&self) -> FileNumber {
        lock(&self.state).versions.new_file_number()
    }

    /// Whether family `f` has background work running or due.
    fn work_pending(&self, st: &State, f: &FamilyState) -> bool {
        let v = st.versions.current(f.family.id);
        !f.imm.is_empty()
            || f.busy_levels.iter().any(|&b| b)
            || f.read_compaction.is_some()
            || f.family.targets.needs_work(&v)
            || f.idle_merge_requested
            || (self.opts.idle_merge_after.is_some()
                && compaction::idle_merge_output_level(
                    &v,
                    &f.family.targets,
                    f.mem.approximate_size() as u64,
                )
                .is_some())
    }

    /// Per physical level, down to the deepest holding files (and at least the first
    /// seven, the levels a leveled tree has room for in LevelDB).
    fn level_stats(v: &Version, family: &Family) -> Vec<LevelStats> {
        let fallback_bits = family.opts.filter_policy.bits_per_key() as f64;
        let shown = (0..NUM_LEVELS)
            .rev()
            .find(|&l| !v.levels[l].is_empty())
            .map_or(0, |l| l + 1)
            .max(7);
        let leveled = family.targets.policy == crate::MergePolicy::Leveling;
        (0..shown)
            .map(|l| LevelStats {
                files: v.levels[l].len(),
                bytes: v.level_bytes(l),
                target_bytes: if l == 0 || !leveled {
                    0
                } else {
                    family.targets.target_bytes(l)
                },
                filter_bits_per_key: filter_policy::level_bits(&v.levels[l], fallback_bits),
            })
            .collect()
    }

    fn file_stats(v: &Version) -> Vec<FileInfo> {
        v.files()
            .map(|(level, f)| FileInfo {
                level: level.0,
                number: f.number.0,
                size: f.size,
                smallest_key: f.smallest_user_key().to_vec(),
                largest_key: f.largest_user_key().to_vec(),
                entries: f.entries,
                deletions: f.deletions,
                range_deletions: f.range_deletions,
                filter_bits_per_key: f.filter_bits(),
            })
            .collect()
    }

    fn stats(&self) -> Stats {
        let st = lock(&self.state);
        let v = st.versions.current(0);
        let fallback_bits = self.opts.filter_policy.bits_per_key() as f64;
        let levels = Self::level_stats(&v, &self.default);
        let families = st
            .families()
            .map(|f| FamilyStats {
                name: f.family.name.clone(),
                id: f.family.id,
                levels: Self::level_stats(&st.versions.current(f.family.id), &f.family),
                files: Self::file_stats(&st.versions.current(f.family.id)),
                memtable_bytes: f.mem.approximate_size() as u64,
            })
            .collect();
        let files = Self::file_stats(&v);
        // The active WAL by what was appended (its file may be reserved ahead); the older
        // ones are closed and cut to their length.
        let active_wal = lock(&self.wal).as_ref().map_or(0, LogWriter::bytes_written);
        let wal_bytes = active_wal
            + st.default_family()
                .imm
                .iter()
                .filter_map(|m| {
                    self.store
                        .fs
                        .file_size(&self.dir.join(wal_file_name(m.wal_number())))
                        .ok()
                })
                .sum::<u64>();
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let default = st.default_family();
        let t = &self.default.targets;
        let mut runs_per_level = vec![v.levels[0].len()];
        for (p, files) in v.levels.iter().enumerate().skip(1) {
            let level = t.tree_level(p);
            if runs_per_level.len() <= level {
                runs_per_level.resize(level + 1, 0);
            }
            runs_per_level[level] += usize::from(!files.is_empty());
        }
        while runs_per_level.len() > 1 && runs_per_level.last() == Some(&0) {
            runs_per_level.pop();
        }
        Stats {
            levels,
            merge_policy: t.policy,
            size_ratio: t.size_ratio,
            runs_per_level,
            families,
            files,
            memtable_bytes: default.mem.approximate_size() as u64,
            immutable_memtables: default.imm.len(),
            immutable_memtable_bytes: default
                .imm
                .iter()
                .map(|m| m.approximate_size() as u64)
                .sum(),
            block_cache_hits: self.store.cache.hits(),
            block_cache_misses: self.store.cache.misses(),
            block_cache_bytes: self.store.cache.usage() as u64,
            block_cache_capacity: self.store.cache.capacity() as u64,
            table_pinned_bytes: self.store.pins.held() as u64,
            user_bytes_written: r(&c.user_bytes),
            wal_bytes_written: r(&c.wal_bytes),
            flush_bytes_written: r(&c.flush_bytes),
            compaction_bytes_written: r(&c.compaction_bytes_written),
            compaction_bytes_read: r(&c.compaction_bytes_read),
            flushes: r(&c.flushes),
            compactions: r(&c.compactions),
            read_compactions: r(&c.read_compactions),
            trivial_moves: r(&c.trivial_moves),
            idle_merges: r(&c.idle_merges),
            idle_merges_given_up: r(&c.idle_merges_given_up),
            compaction_pending: st.families().any(|f| self.work_pending(&st, f)),
            write_stall_micros: r(&c.stall_micros),
            wal_tail_dropped_bytes: r(&c.wal_tail_dropped_bytes),
            wal_salvaged_bytes: r(&c.wal_salvaged_bytes),
            sst_bytes: st.versions.files().map(|(_, _, f)| f.size).sum(),
            wal_bytes,
            expected_false_positives: filter_policy::expected_false_positives(&v, fallback_bits),
            filter_false_positives: self.store.filter_false_positives.load(Ordering::Relaxed),
            parallel_block_reads: self.store.parallel_reads.load(Ordering::Relaxed),
            last_sequence: self.visible.load(Ordering::Acquire),
            live_snapshots: self.snapshots.count(),
            poisoned: st.bg_error.as_ref().map(|e| e.to_string()),
        }
    }
}

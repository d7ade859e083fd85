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
//! Only the write leader does WAL I/O, holding `wal` but not `state`. Readers load the current
//! [`SuperVersion`] from its family's `ArcSwap` (a point lookup as an uncounted guard, an
//! iterator as an `Arc`), and do their I/O with no lock held.

mod background;
mod family;
mod iter;
mod merged;
mod queue;
mod read;
mod read_options;
mod recovery;
mod repair;
mod sizes;
mod state;
mod stats;
mod transaction;
mod updates;
mod write;

pub use family::ColumnFamily;
pub use iter::{DbIterator, Scan};
pub use read_options::ReadOptions;
pub use repair::{RepairReport, destroy, repair};
pub use transaction::Transaction;
pub use updates::UpdatesSince;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::key::{FileNumber, SeqNo};
use crate::mutex::lock;
use crate::options::{Options, WriteOptions};
use crate::snapshot::Snapshot;
use crate::stats::Stats;
use queue::QueuedWrite;
use state::DbInner;

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

impl Db {
    /// The sequence number of the newest write (put, delete or merge) of `key`, or of a
    /// range delete that removed its value; `None` when it was never written. A range delete
    /// over a key that had no value does not count: it changed nothing. Compaction writes the
    /// versions at the bottom of the tree that every reader sees with sequence number zero
    /// (as RocksDB does: they compress better), so the number of an old write may drop to
    /// `Some(0)`. To tell whether a key changed after a moment, hold a
    /// [`Db::pin_sequences`] (or a [`Snapshot`]) taken then: while it lives, every write made
    /// after it reads larger than its sequence, through any compaction (as the server's
    /// `WATCH` does). A deletion after it may still be compacted away with the versions it
    /// hid: the key then reads `None`.
    pub fn newest_sequence(&self, key: &[u8]) -> Result<Option<u64>> {
        self.inner.check_open()?;
        Ok(self.inner.newest_seq(key)?.map(|s| s.0))
    }

    /// Sets `key` to `value`, with default write options.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        // Room for the op's kind and family and two length varints: the buffer never grows.
        let mut b = WriteBatch::with_capacity(key.len() + value.len() + 16);
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
        if batch.has_ranges() {
            batch.check_ranges(&self.inner.opts.key_order())?;
        }
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
        let mut b = WriteBatch::with_capacity(key.len() + value.len() + 16);
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
        self.inner.drop_family(name)?;
        self.inner.store.purge.wait_idle();
        Ok(())
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

    /// Pins the sequence numbers of the writes made from now on: while the pin lives, no
    /// compaction writes them as zero, so [`Db::newest_sequence`] of a key written after it
    /// reads above [`SequencePin::sequence`](crate::SequencePin::sequence). It keeps no old
    /// version alive, unlike a snapshot.
    pub fn pin_sequences(&self) -> crate::SequencePin {
        let inner = &self.inner;
        crate::SequencePin(
            inner
                .sequence_pins
                .acquire(|| SeqNo(inner.visible.load(Ordering::Acquire))),
        )
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
        let order = self.inner.opts.key_order();
        // In byte order `k + [0]` is the key right after `k`, and the iterator's bounds say
        // it all; in another order no key is known to follow `k`, and the scan itself
        // leaves out an excluded start and stops after an included end.
        let bytewise = order.is_bytewise();
        let successor = |k: &Vec<u8>| {
            let mut s = k.clone();
            s.push(0);
            s
        };
        let (mut skip, mut through) = (None, None);
        let lower = match range.start_bound() {
            Bound::Included(k) => Some(k.clone()),
            Bound::Excluded(k) if bytewise => Some(successor(k)),
            Bound::Excluded(k) => {
                skip = Some(k.clone());
                Some(k.clone())
            }
            Bound::Unbounded => None,
        };
        let upper = match range.end_bound() {
            Bound::Included(k) if bytewise => Some(successor(k)),
            Bound::Included(k) => {
                through = Some(k.clone());
                None
            }
            Bound::Excluded(k) => Some(k.clone()),
            Bound::Unbounded => None,
        };
        if let Some(l) = lower {
            let narrower = |o: Vec<u8>| order.max(&o, &l).to_vec();
            options.lower_bound = Some(options.lower_bound.map_or(l.clone(), narrower));
        }
        if let Some(u) = upper {
            let narrower = |o: Vec<u8>| order.min(&o, &u).to_vec();
            options.upper_bound = Some(options.upper_bound.map_or(u.clone(), narrower));
        }
        let it = self.iter(&options)?;
        Ok(Scan {
            it,
            reverse,
            started: false,
            done: false,
            skip,
            through,
            order,
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
        let mut wal = crate::wal::create_wal_in(fs, dir, FileNumber(next))?;
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
    /// without overwritten versions or deleted keys that no snapshot needs. It returns once
    /// the files of the compacted tables that no reader holds are deleted.
    pub fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.inner
            .manual_compaction(&self.inner.default, begin, end)?;
        self.inner.store.purge.wait_idle();
        Ok(())
    }

    /// Waits until no flush or compaction is queued or running in any column family, a
    /// `compact_range` of another thread's included, and the tables they replaced that no
    /// reader holds are deleted; as RocksDB's `WaitForCompact`. With the idle merge on
    /// (`Options::idle_merge_after`), that includes the merge it would make once writes have
    /// stopped for that long, so writes that go on keep it waiting. Returns the error that
    /// stopped the background work, if one did.
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.inner.wait_for_compactions()?;
        self.inner.store.purge.wait_idle();
        Ok(())
    }

    /// [`Db::compact_range`] in column family `cf`.
    pub fn compact_range_cf(
        &self,
        cf: &ColumnFamily,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<()> {
        self.inner.manual_compaction(&cf.family, begin, end)?;
        self.inner.store.purge.wait_idle();
        Ok(())
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
        self.inner.store.purge.stop();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // No flush thread is left to let go of the memory kept for new memtables.
        self.inner.chunk_pool.clear();
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

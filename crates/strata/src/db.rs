//! The database: the write path (group commit into WAL and memtable), the read path over a
//! super-version, and the background flush and compaction threads.
//!
//! Locking: `DbInner::state` guards the version set, the memtable list and the writer queue.
//! Only the write leader does WAL I/O, holding `wal` but not `state`. Readers take an `Arc` of
//! the current [`SuperVersion`] under a read lock held for one clone, and do their I/O with no
//! lock held.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::batch::{WriteBatch, decode_record};
use crate::cache::BlockCache;
use crate::compaction::{self, Compaction, JobContext, LevelTargets};
use crate::error::{Error, Result};
use crate::fs::FileLock;
use crate::iter::BoxedIter;
use crate::iter::db_iter::DbIter;
use crate::iter::level::LevelIterator;
use crate::iter::merge::MergingIterator;
use crate::key::{
    FileNumber, Level, NUM_LEVELS, SeqNo, ValueKind, append_internal_key, lookup_key,
};
use crate::log::{LogKind, LogWriter, RecoveryMode, header_record, read_log, strip_header};
use crate::memtable::{Lookup, MemTable};
use crate::options::{Options, ReadOptions, WriteOptions};
use crate::snapshot::{Snapshot, SnapshotList};
use crate::sstable::TableOptions;
use crate::sstable::builder::TableBuilder;
use crate::sstable::mapped::MappedPages;
use crate::sstable::pinned::PinBudget;
use crate::sstable::reader::TableEntry;
use crate::stats::{FileInfo, LevelStats, Stats};
use crate::version::edit::{NewFile, VersionEdit};
use crate::version::set::VersionSet;
use crate::version::{
    Probes, ReadCompaction, TableStore, Version, io_err, table_file_name, wal_file_name,
};

/// Batches grouped into one WAL record stop growing past this size.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// How long a synced group's leader waits for the writers of the last group to queue up: a
/// fraction of an fdatasync (about 140 us on the disks Strata was measured on).
const SYNC_GATHER: Duration = Duration::from_micros(100);
/// How long a synced writer behind a leader yields its CPU, rather than sleeping, while its
/// group's fdatasync runs: a few fdatasyncs.
const SYNC_YIELD: Duration = Duration::from_micros(400);
/// A yield that takes longer than this, most of an fdatasync, means the writer is starved of
/// the CPU: it stops yielding and sleeps. Shorter slow yields are the other writers of the
/// group running their own work between its yields (four writers on two cores yielded for
/// over 20 us so often that a bound of 20 us put them to sleep, and cost a fifth of their
/// rate).
const SLOW_YIELD: Duration = Duration::from_micros(100);
/// Keys [`Db::get_many`] looks up together.
const GET_MANY_BATCH: usize = 32;

/// Lets a synced writer behind a leader wait for its group by yielding its CPU, for at most
/// [`SYNC_YIELD`]; true when the group completed meanwhile. A writer that sleeps on
/// `writer_cv` instead is woken after its group's fdatasync, and on a small virtual machine
/// that wake-up took about 100 us, as long as a fdatasync: its next write then missed the
/// next group. The writer stops yielding, and sleeps, once a yield shows that it is starved
/// of the CPU, as RocksDB's write threads do.
fn yield_until_done(w: &Writer) -> bool {
    let mut last = Instant::now();
    let deadline = last + SYNC_YIELD;
    // Acquire: pairs with the Release store by the leader that completed this writer.
    while !w.done.load(Ordering::Acquire) {
        if last >= deadline {
            return false;
        }
        std::thread::yield_now();
        let now = Instant::now();
        if now - last > SLOW_YIELD {
            return w.done.load(Ordering::Acquire);
        }
        last = now;
    }
    true
}

/// What readers see: the memtables and the level structure, installed together.
pub(crate) struct SuperVersion {
    pub mem: Arc<MemTable>,
    /// Immutable memtables, newest first.
    pub imm: Vec<Arc<MemTable>>,
    pub version: Arc<Version>,
}

enum WriteKind {
    Batch(WriteBatch),
    /// Turn the active memtable immutable (for `flush` and the age timer).
    SwitchMemtable,
}

struct Writer {
    kind: WriteKind,
    sync: bool,
    done: AtomicBool,
    result: Mutex<Option<Result<()>>>,
}

struct State {
    versions: VersionSet,
    mem: Arc<MemTable>,
    /// Immutable memtables, oldest first.
    imm: VecDeque<Arc<MemTable>>,
    queue: VecDeque<Arc<Writer>>,
    /// The first failure that may have lost data; writes are refused from then on.
    bg_error: Option<Error>,
    closed: bool,
    busy_levels: [bool; NUM_LEVELS],
    /// A manual compaction runs: background compactions pick nothing new meanwhile.
    manual_compaction: bool,
    /// A file reads consulted in vain until its allowance ran out, to compact when no level
    /// needs it more.
    read_compaction: Option<ReadCompaction>,
    /// Sequence numbers handed out to write groups (visible or not yet).
    last_allocated: SeqNo,
    wal_number: FileNumber,
    /// Writers in the last synced group; its successor's leader waits for that many to queue
    /// up (see `DbInner::gather_sync_writers`).
    last_sync_group: usize,
    /// The last sequence number the flush thread saw handed out, and since when: writes
    /// have stopped when it stays the same (see `DbInner::check_idle`).
    idle_mark: (SeqNo, Instant),
    /// Writes stopped with the tree out of shape: the next compaction merges every level
    /// into the deepest (see [`compaction::settle`]).
    settle_requested: bool,
    /// Idle merges that writes gave up since the last that finished. Each doubles the quiet
    /// time the next one waits for, so that a trickle of writes a few seconds apart does not
    /// start and abandon a merge of the whole tree again and again.
    settles_given_up: u32,
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

pub(crate) struct DbInner {
    opts: Options,
    dir: PathBuf,
    store: Arc<TableStore>,
    table_options: TableOptions,
    targets: LevelTargets,
    state: Mutex<State>,
    /// Writers wait here for their turn, for room, and for flushes to finish.
    writer_cv: Condvar,
    /// Background threads wait here for work.
    bg_cv: Condvar,
    super_version: RwLock<Arc<SuperVersion>>,
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Poisoning only means another thread panicked while holding the lock; the engine's
    // own consistency is tracked by `bg_error`, so carry on.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn parse_file_name(name: &str) -> Option<(FileNumber, &str)> {
    let (stem, ext) = name.split_once('.')?;
    Some((FileNumber(stem.parse().ok()?), ext))
}

impl Db {
    /// Opens the database in `path`, creating it when `options.create_if_missing` is set.
    ///
    /// Recovery replays the WAL files newer than the last flush. A torn last record is
    /// dropped; damage elsewhere is [`Error::Corruption`] unless `options.wal_recovery` is
    /// [`RecoveryMode::Salvage`]. A second opener of the same directory gets
    /// [`Error::Locked`].
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        options.validate()?;
        let dir = path.as_ref().to_path_buf();
        let fs = options.fs.clone();
        if !fs.exists(&dir) {
            if !options.create_if_missing {
                return Err(Error::InvalidArgument(format!(
                    "database {} does not exist (create_if_missing is off)",
                    dir.display()
                )));
            }
            fs.create_dir_all(&dir)
                .map_err(io_err("create directory", &dir))?;
        }
        let lock_path = dir.join("LOCK");
        let file_lock = fs.lock(&lock_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock => Error::Locked(dir.clone()),
            _ => Error::io("lock", &lock_path, e),
        })?;
        let store = Arc::new(TableStore {
            fs: fs.clone(),
            dir: dir.clone(),
            cache: Arc::new(BlockCache::new(options.block_cache_bytes)),
            mapped: Arc::new(MappedPages::new(options.table_map_bytes)),
            pins: Arc::new(PinBudget::new(options.table_pinned_bytes)),
        });
        let exists = fs.exists(&dir.join("CURRENT"));
        if exists && options.error_if_exists {
            return Err(Error::InvalidArgument(format!(
                "database {} already exists",
                dir.display()
            )));
        }
        if !exists && !options.create_if_missing {
            return Err(Error::InvalidArgument(format!(
                "{} holds no database",
                dir.display()
            )));
        }
        let mut versions = if exists {
            VersionSet::recover(store.clone())?
        } else {
            VersionSet::empty(store.clone())
        };
        let table_options = TableOptions {
            block_size: options.block_size,
            restart_interval: options.block_restart_interval,
            bloom_bits_per_key: options.bloom_bits_per_key,
            compression: options.compression,
            index_kind: options.index_kind,
            filter_kind: options.filter_kind,
        };
        let counters = Counters::default();

        // Replay the WALs that hold writes not yet in an SST.
        let names = fs.list(&dir).map_err(io_err("list", &dir))?;
        if exists {
            check_manifest_against_directory(&versions, &dir, &names)?;
        }
        let mut wals: Vec<FileNumber> = Vec::new();
        for name in &names {
            if let Some((n, ext)) = parse_file_name(name) {
                versions.mark_file_number_used(n);
                if ext == "wal" && n >= versions.log_number {
                    wals.push(n);
                }
            }
        }
        wals.sort();
        let mut last_seq = versions.last_sequence;
        let mut edit = VersionEdit::default();
        let mut mem = Arc::new(MemTable::new(FileNumber(0), options.write_buffer_size));
        let mut next_seq: Option<u64> = None;
        'replay: for (i, number) in wals.iter().enumerate() {
            let path = dir.join(wal_file_name(*number));
            let data = fs.read_all(&path).map_err(io_err("read", &path))?;
            let contents = read_log(&path, &data, options.wal_recovery)?;
            let mut salvaged = contents.salvaged_bytes;
            // Only the newest WAL can be torn by a crash: older ones were synced whole when
            // their memtable was switched out, so a short one has lost writes that later
            // WALs depend on.
            if contents.torn_tail_bytes > 0 && i + 1 < wals.len() {
                let offset = data.len() as u64 - contents.torn_tail_bytes;
                if options.wal_recovery == RecoveryMode::Strict {
                    return Err(Error::corruption(
                        &path,
                        offset,
                        "an older WAL ends in a torn record; newer WALs follow it",
                    ));
                }
                salvaged += contents.torn_tail_bytes;
            } else {
                counters
                    .wal_tail_dropped_bytes
                    .fetch_add(contents.torn_tail_bytes, Ordering::Relaxed);
            }
            for (offset, record) in strip_header(&path, contents, LogKind::Wal)? {
                let decoded = decode_record(&record).map_err(|e| e.at(&path, offset));
                // One open replays the WALs of one run of the database, which logged every
                // write group in order with contiguous sequence numbers: a gap means records
                // were lost (an older WAL cut short at a record boundary, say).
                let decoded = decoded.and_then(|(seq, batch)| match next_seq {
                    Some(expected) if seq.0 != expected => Err(Error::corruption(
                        &path,
                        offset,
                        format!(
                            "WAL records are missing: sequence {expected} expected, {} found",
                            seq.0
                        ),
                    )),
                    _ => Ok((seq, batch)),
                });
                let (seq, batch) = match decoded {
                    Ok(d) => d,
                    Err(_) if options.wal_recovery == RecoveryMode::Salvage => {
                        counters
                            .wal_salvaged_bytes
                            .fetch_add(data.len() as u64 - offset, Ordering::Relaxed);
                        break 'replay;
                    }
                    Err(e) => return Err(e),
                };
                next_seq = Some(seq.0 + u64::from(batch.count()));
                let mut s = seq.0;
                for op in batch.iter() {
                    let op = op.map_err(|e| e.at(&path, offset))?;
                    mem.add(SeqNo(s), op.kind, op.key, op.value);
                    s += 1;
                }
                if batch.count() > 0 {
                    last_seq = last_seq.max(SeqNo(s - 1));
                }
                if mem.approximate_size() >= options.write_buffer_size {
                    edit.added
                        .push(write_level0(&store, &table_options, &mut versions, &mem)?);
                    mem = Arc::new(MemTable::new(FileNumber(0), options.write_buffer_size));
                }
            }
            if salvaged > 0 {
                counters
                    .wal_salvaged_bytes
                    .fetch_add(salvaged, Ordering::Relaxed);
                break 'replay;
            }
        }
        if !mem.is_empty() {
            edit.added
                .push(write_level0(&store, &table_options, &mut versions, &mem)?);
        }
        if !edit.added.is_empty() {
            fs.sync_dir(&dir).map_err(io_err("fsync", &dir))?;
        }
        // A fresh WAL for new writes; older ones are obsolete once the edit is logged.
        let wal_number = versions.new_file_number();
        let wal = create_wal(&store, wal_number)?;
        if !exists {
            // The new MANIFEST's first record then names a WAL too, so no MANIFEST ever says
            // "no WAL", and one cut short after that record is caught like any other.
            versions.log_number = wal_number;
        }
        edit.log_number = Some(wal_number);
        edit.last_sequence = Some(last_seq);
        versions.log_and_apply(edit)?;

        let mem = Arc::new(MemTable::new(wal_number, options.write_buffer_size));
        let version = versions.current();
        let sv = Arc::new(SuperVersion {
            mem: mem.clone(),
            imm: Vec::new(),
            version,
        });
        let state = State {
            versions,
            mem,
            imm: VecDeque::new(),
            queue: VecDeque::new(),
            bg_error: None,
            closed: false,
            busy_levels: [false; NUM_LEVELS],
            manual_compaction: false,
            read_compaction: None,
            last_allocated: last_seq,
            wal_number,
            last_sync_group: 0,
            idle_mark: (SeqNo(0), Instant::now()),
            settle_requested: false,
            settles_given_up: 0,
        };
        let inner = Arc::new(DbInner {
            targets: LevelTargets {
                l0_trigger: options.level0_compaction_trigger,
                level1_bytes: options.level1_max_bytes,
                size_ratio: options.size_ratio,
            },
            dir,
            store,
            table_options,
            state: Mutex::new(state),
            writer_cv: Condvar::new(),
            bg_cv: Condvar::new(),
            super_version: RwLock::new(sv),
            visible: AtomicU64::new(last_seq.0),
            wal: Mutex::new(Some(wal)),
            snapshots: Arc::new(SnapshotList::default()),
            counters,
            shutting_down: AtomicBool::new(false),
            _lock: file_lock,
            opts: options,
        });
        inner.delete_obsolete_files(&names);
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| Error::io("spawn thread", &inner.dir, e))
        };
        let i = inner.clone();
        threads.push(spawn(
            "strata-flush".into(),
            Box::new(move || i.flush_loop()),
        )?);
        for n in 0..inner.opts.max_background_compactions {
            let i = inner.clone();
            threads.push(spawn(
                format!("strata-compact-{n}"),
                Box::new(move || i.compaction_loop()),
            )?);
        }
        Ok(Db { inner, threads })
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

    /// Applies a batch atomically. With `options.sync` the batch is durable against power
    /// loss when this returns; see [`WriteOptions`] for the whole contract.
    pub fn write(&self, batch: WriteBatch, options: WriteOptions) -> Result<()> {
        batch.validate()?;
        if batch.is_empty() {
            return self.inner.check_writable();
        }
        self.inner.write(WriteKind::Batch(batch), options.sync)
    }

    /// The value of `key` in the latest state, or `None`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, &ReadOptions::default())
    }

    /// The value of `key` as `options` say (a snapshot, or the latest state).
    pub fn get_with(&self, key: &[u8], options: &ReadOptions) -> Result<Option<Vec<u8>>> {
        self.inner.get(key, options)
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
        Ok(self.inner.iter(options))
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
        let mut wal = lock(&self.inner.wal);
        let w = wal.as_mut().ok_or(Error::Closed)?;
        let result = w.sync();
        drop(wal);
        if let Err(e) = &result {
            let mut st = lock(&self.inner.state);
            self.inner.poison(&mut st, e);
        }
        result
    }

    /// Turns the memtable into an SST now and waits until every memtable is flushed.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Compacts every file that overlaps `[begin, end]` (`None` is unbounded) down the
    /// tree, after a flush. With both `None` the whole database ends in one sorted level,
    /// without overwritten versions or deleted keys that no snapshot needs.
    pub fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.inner.flush()?;
        self.inner.compact_range(begin, end)
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

/// A crash can tear only the last MANIFEST edit, before it was synced and acted on; a MANIFEST
/// cut short anywhere else has lost edits whose effects (deleted WALs and tables) already
/// happened. Two invariants tell them apart: every table the MANIFEST names exists, and so
/// does the WAL it names as the oldest live one.
fn check_manifest_against_directory(
    versions: &VersionSet,
    dir: &Path,
    names: &[String],
) -> Result<()> {
    let present: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let manifest = dir.join(crate::version::manifest_file_name(
        versions.manifest_number(),
    ));
    for (_, f) in versions.current().files() {
        let name = table_file_name(f.number);
        if !present.contains(name.as_str()) {
            return Err(Error::corruption(
                &manifest,
                0,
                format!("the MANIFEST names {name}, which is missing"),
            ));
        }
    }
    // Only a MANIFEST written by an older Strata, which began with an empty database's state,
    // names no WAL. Cut short there, it has lost the edits that named the tables now present.
    if versions.log_number.0 == 0 && names.iter().any(|n| n.ends_with(".sst")) {
        return Err(Error::corruption(
            &manifest,
            0,
            "the MANIFEST names no WAL, yet tables are present: edits after its first were lost",
        ));
    }
    let wal = wal_file_name(versions.log_number);
    if versions.log_number.0 != 0 && !present.contains(wal.as_str()) {
        return Err(Error::corruption(
            &manifest,
            0,
            format!(
                "the MANIFEST names {wal} as the oldest live WAL, but it is missing: edits after it were lost"
            ),
        ));
    }
    Ok(())
}

fn create_wal(store: &TableStore, number: FileNumber) -> Result<LogWriter> {
    let path = store.dir.join(wal_file_name(number));
    let file = store
        .fs
        .create_log(&path)
        .map_err(io_err("create", &path))?;
    let mut w = LogWriter::new(file, path);
    w.add_record(&header_record(LogKind::Wal))?;
    w.flush()?;
    // The WAL's directory entry must be durable before synced writes land in it.
    store
        .fs
        .sync_dir(&store.dir)
        .map_err(io_err("fsync", &store.dir))?;
    Ok(w)
}

/// Writes a memtable to a new level-0 SST (synced) and describes it for an edit.
fn write_level0(
    store: &TableStore,
    opts: &TableOptions,
    versions: &mut VersionSet,
    mem: &Arc<MemTable>,
) -> Result<NewFile> {
    let number = versions.new_file_number();
    build_table_from_memtable(store, opts, number, mem)
}

fn build_table_from_memtable(
    store: &TableStore,
    opts: &TableOptions,
    number: FileNumber,
    mem: &Arc<MemTable>,
) -> Result<NewFile> {
    use crate::iter::InternalIterator;
    let path = store.dir.join(table_file_name(number));
    let result = (|| {
        let file = store.fs.create(&path).map_err(io_err("create", &path))?;
        let mut b = TableBuilder::new(file, path.clone(), opts.clone());
        let mut it = mem.iter();
        it.seek_to_first()?;
        while it.valid() {
            b.add(it.key(), it.value())?;
            it.next()?;
        }
        b.finish()
    })();
    match result {
        Ok(s) => Ok(NewFile {
            level: Level(0),
            number,
            size: s.file_size,
            smallest: s.smallest,
            largest: s.largest,
            entries: s.entries,
            deletions: s.deletions,
        }),
        Err(e) => {
            let _ = store.fs.remove(&path);
            Err(e)
        }
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

    fn super_version(&self) -> Arc<SuperVersion> {
        self.super_version
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Publishes the state's memtables and version to readers. Requires: `state` is locked.
    fn install_super_version(&self, st: &State) {
        let sv = Arc::new(SuperVersion {
            mem: st.mem.clone(),
            imm: st.imm.iter().rev().cloned().collect(),
            version: st.versions.current(),
        });
        *self
            .super_version
            .write()
            .unwrap_or_else(|e| e.into_inner()) = sv;
    }

    /// Logs an edit with the latest sequence number, installs the version it makes and
    /// publishes it; a failure poisons the database, since the MANIFEST may hold the edit.
    fn log_and_apply(&self, st: &mut State, mut edit: VersionEdit) -> Result<()> {
        // After a failure nothing more is logged: the state on disk stays as the failure
        // left it, for the next open to recover.
        if let Some(e) = &st.bg_error {
            return Err(Error::Poisoned(e.to_string()));
        }
        edit.last_sequence = Some(st.last_allocated);
        match st.versions.log_and_apply(edit) {
            Ok(()) => {
                self.install_super_version(st);
                Ok(())
            }
            Err(e) => {
                self.poison(st, &e);
                Err(e)
            }
        }
    }

    fn poison(&self, st: &mut State, e: &Error) {
        if st.bg_error.is_none() {
            st.bg_error = Some(e.duplicate());
        }
        self.writer_cv.notify_all();
    }

    fn write(&self, kind: WriteKind, sync: bool) -> Result<()> {
        let w = Arc::new(Writer {
            kind,
            sync,
            done: AtomicBool::new(false),
            result: Mutex::new(None),
        });
        let mut st = lock(&self.state);
        st.queue.push_back(w.clone());
        if sync && !st.queue.front().is_some_and(|f| Arc::ptr_eq(f, &w)) {
            drop(st);
            if yield_until_done(&w) {
                return lock(&w.result).take().unwrap_or(Ok(()));
            }
            st = lock(&self.state);
        }
        // Acquire: pairs with the Release store by the leader that completed this writer.
        while !w.done.load(Ordering::Acquire)
            && !st.queue.front().is_some_and(|f| Arc::ptr_eq(f, &w))
        {
            st = self.writer_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if w.done.load(Ordering::Acquire) {
            return lock(&w.result).take().unwrap_or(Ok(()));
        }
        // This writer leads: it writes its own batch and those queued behind it.
        if w.sync && st.last_sync_group > 1 {
            st = self.gather_sync_writers(st);
        }
        let force = matches!(w.kind, WriteKind::SwitchMemtable);
        let (st2, room) = self.make_room_for_write(st, force);
        st = st2;
        if let Err(e) = room {
            st.queue.pop_front();
            self.writer_cv.notify_all();
            return Err(e);
        }
        if force {
            st.queue.pop_front();
            self.writer_cv.notify_all();
            return Ok(());
        }
        let mut group: Vec<Arc<Writer>> = Vec::new();
        let mut bytes = 0usize;
        let mut sync_group = false;
        let first_size = match &w.kind {
            WriteKind::Batch(b) => b.approximate_size(),
            WriteKind::SwitchMemtable => 0,
        };
        // Small writes do not wait behind a large group.
        let limit = if first_size <= 128 << 10 {
            first_size + (128 << 10)
        } else {
            MAX_GROUP_BYTES
        };
        for cand in st.queue.iter() {
            let WriteKind::Batch(b) = &cand.kind else {
                break;
            };
            if !group.is_empty()
                && (bytes + b.approximate_size() > limit || (cand.sync && !sync_group))
            {
                break;
            }
            bytes += b.approximate_size();
            sync_group |= cand.sync;
            group.push(cand.clone());
        }
        if sync_group {
            st.last_sync_group = group.len();
        }
        let count: u64 = group
            .iter()
            .map(|g| match &g.kind {
                WriteKind::Batch(b) => u64::from(b.count()),
                WriteKind::SwitchMemtable => 0,
            })
            .sum();
        let first_seq = SeqNo(st.last_allocated.0 + 1);
        st.last_allocated = SeqNo(st.last_allocated.0 + count);
        let last_seq = st.last_allocated;
        let mem = st.mem.clone();
        drop(st);

        let result = self.write_group(&group, first_seq, sync_group, &mem, bytes);

        let mut st = lock(&self.state);
        match &result {
            Ok(()) => {
                // Release: readers that load this value see every memtable insert before it.
                self.visible.store(last_seq.0, Ordering::Release);
            }
            Err(e) => self.poison(&mut st, e),
        }
        for g in &group {
            st.queue.pop_front();
            if !Arc::ptr_eq(g, &w) {
                *lock(&g.result) = Some(match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(e.duplicate()),
                });
                g.done.store(true, Ordering::Release);
            }
        }
        // Only writers in the queue wait for this: followers just completed and the next
        // leader. A lone writer with nobody behind it skips the wake-up, a system call.
        if group.len() > 1 || !st.queue.is_empty() {
            self.writer_cv.notify_all();
        }
        result
    }

    /// Group commit for synced writes from several threads. When a group completes, its
    /// writers return and queue their next writes one by one; the first to queue leads at
    /// once, so groups would alternate between one writer and the rest, and one fdatasync in
    /// two would serve a single write. A leader whose last synced group had several writers
    /// therefore waits, at most [`SYNC_GATHER`], for as many to queue behind it. A lone
    /// synced writer never waits.
    ///
    /// The leader yields its CPU while it waits, rather than sleeping on `writer_cv`: waking
    /// a sleeping thread took about 100 us on the 2-core machine Strata was measured on,
    /// most of an fdatasync, and the writers it waits for are running already.
    fn gather_sync_writers<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let deadline = Instant::now() + SYNC_GATHER;
        while st.queue.len() < st.last_sync_group {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            drop(st);
            std::thread::yield_now();
            st = lock(&self.state);
        }
        st
    }

    /// Logs a group and inserts it into the memtable. Runs as the leader, without `state`.
    fn write_group(
        &self,
        group: &[Arc<Writer>],
        first_seq: SeqNo,
        sync: bool,
        mem: &MemTable,
        bytes: usize,
    ) -> Result<()> {
        let merged;
        let batch: &WriteBatch = match group {
            [only] => match &only.kind {
                WriteKind::Batch(b) => b,
                WriteKind::SwitchMemtable => return Ok(()),
            },
            _ => {
                let mut m = WriteBatch::new();
                for g in group {
                    if let WriteKind::Batch(b) = &g.kind {
                        b.append_to(&mut m);
                    }
                }
                merged = m;
                &merged
            }
        };
        {
            let mut wal = lock(&self.wal);
            let w = wal.as_mut().ok_or(Error::Closed)?;
            w.add_record_parts(&[&batch.header(first_seq), batch.ops_bytes()])?;
            if sync {
                w.sync()?;
            } else {
                w.flush()?;
            }
        }
        self.counters
            .wal_bytes
            .fetch_add(bytes as u64 + 8, Ordering::Relaxed);
        let mut user = 0u64;
        for (seq, op) in (first_seq.0..).zip(batch.iter()) {
            let op = op.map_err(|e| e.at(&self.dir, 0))?;
            mem.add(SeqNo(seq), op.kind, op.key, op.value);
            user += (op.key.len() + op.value.len()) as u64;
        }
        self.counters.user_bytes.fetch_add(user, Ordering::Relaxed);
        Ok(())
    }

    /// Makes sure the active memtable has room, switching it (and the WAL) when full or when
    /// `force`d, and slowing or stopping writers while flush and compaction are behind.
    /// Requires: the caller leads the writer queue.
    fn make_room_for_write<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        force: bool,
    ) -> (MutexGuard<'a, State>, Result<()>) {
        let mut allow_delay = !force;
        loop {
            if st.closed {
                return (st, Err(Error::Closed));
            }
            if let Some(msg) = st.bg_error.as_ref().map(|e| e.to_string()) {
                return (st, Err(Error::Poisoned(msg)));
            }
            let l0 = st.versions.current().levels[0].len();
            if allow_delay && l0 >= self.opts.level0_slowdown_trigger {
                // Spread the compaction debt over many writes instead of one long stop.
                drop(st);
                let start = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                self.counters
                    .stall_micros
                    .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                allow_delay = false;
                st = lock(&self.state);
                continue;
            }
            if !force && st.mem.approximate_size() < self.opts.write_buffer_size {
                return (st, Ok(()));
            }
            if force && st.mem.is_empty() {
                return (st, Ok(()));
            }
            if st.imm.len() >= self.opts.max_immutable_memtables
                || l0 >= self.opts.level0_stop_trigger
            {
                let start = Instant::now();
                self.bg_cv.notify_all();
                st = self
                    .writer_cv
                    .wait_timeout(st, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                self.counters
                    .stall_micros
                    .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                continue;
            }
            // Switch to a new memtable and WAL.
            let number = st.versions.new_file_number();
            let wal = match create_wal(&self.store, number) {
                Ok(w) => w,
                Err(e) => {
                    self.poison(&mut st, &e);
                    return (st, Err(e));
                }
            };
            {
                let mut cur = lock(&self.wal);
                // Sync the old WAL: a synced write in the new one must never survive a power
                // loss that drops earlier writes left unsynced in the old one.
                if let Some(old) = cur.as_mut()
                    && let Err(e) = old.sync()
                {
                    self.poison(&mut st, &e);
                    return (st, Err(e));
                }
                *cur = Some(wal);
            }
            let old = std::mem::replace(
                &mut st.mem,
                Arc::new(MemTable::new(number, self.opts.write_buffer_size)),
            );
            st.imm.push_back(old);
            st.wal_number = number;
            self.install_super_version(&st);
            self.bg_cv.notify_all();
            return (st, Ok(()));
        }
    }

    fn get(&self, key: &[u8], options: &ReadOptions) -> Result<Option<Vec<u8>>> {
        let seq = self.read_seq(options);
        let sv = self.super_version();
        for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
            match m.get(key, seq) {
                Lookup::Found(v) => return Ok(Some(v)),
                Lookup::Deleted => return Ok(None),
                Lookup::Absent => {}
            }
        }
        let lookup = lookup_key(key, seq);
        let mut exhausted = None;
        let found = sv
            .version
            .get(&lookup, key, !options.skip_cache, &mut exhausted);
        if let Some(rc) = exhausted {
            self.ask_read_compaction(rc);
        }
        match found? {
            Some(e) if e.kind == ValueKind::Value => Ok(Some(e.value)),
            _ => Ok(None),
        }
    }

    fn get_many<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        options: &ReadOptions,
        mut each: impl FnMut(Result<Option<Vec<u8>>>),
    ) {
        let seq = self.read_seq(options);
        let sv = self.super_version();
        let mut keys = keys.into_iter();
        let mut probes = Probes::default();
        let mut exhausted = None;
        // A batch's lookup keys, end to end; kept from batch to batch.
        let mut lookup_bytes = Vec::new();
        // Lines asked for must still be in the first-level cache when they are read: a batch
        // of 32 lookups asks for a few hundred.
        loop {
            let mut batch: [&[u8]; GET_MANY_BATCH] = [&[]; GET_MANY_BATCH];
            // `batch` first: a full batch leaves the next key in `keys`.
            let n = batch
                .iter_mut()
                .zip(keys.by_ref())
                .map(|(b, k)| *b = k)
                .count();
            if n == 0 {
                break;
            }
            let keys = batch.get(..n).unwrap_or_default();
            let mut found: [Option<Result<Option<TableEntry>>>; GET_MANY_BATCH] =
                std::array::from_fn(|_| None);
            let out = found.get_mut(..n).unwrap_or_default();
            for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
                for (k, _) in keys.iter().zip(out.iter()).filter(|(_, o)| o.is_none()) {
                    m.prefetch_bucket(k);
                }
                for (k, _) in keys.iter().zip(out.iter()).filter(|(_, o)| o.is_none()) {
                    m.prefetch_chain(k);
                }
                for (k, o) in keys.iter().zip(out.iter_mut()).filter(|(_, o)| o.is_none()) {
                    *o = match m.get(k, seq) {
                        Lookup::Found(value) => Some(Ok(Some(TableEntry {
                            kind: ValueKind::Value,
                            value,
                        }))),
                        Lookup::Deleted => Some(Ok(None)),
                        Lookup::Absent => None,
                    };
                }
            }
            // The lookup keys of the keys the memtables did not answer (empty for the rest).
            lookup_bytes.clear();
            let mut ends = [0usize; GET_MANY_BATCH];
            for ((k, o), end) in keys.iter().zip(out.iter()).zip(&mut ends) {
                if o.is_none() {
                    append_internal_key(&mut lookup_bytes, k, seq, ValueKind::Value);
                }
                *end = lookup_bytes.len();
            }
            let lookups: [&[u8]; GET_MANY_BATCH] = std::array::from_fn(|i| {
                let start = i.checked_sub(1).map_or(0, |p| ends[p]);
                lookup_bytes.get(start..ends[i]).unwrap_or_default()
            });
            sv.version.get_many(
                lookups.get(..n).unwrap_or_default(),
                keys,
                !options.skip_cache,
                out,
                &mut probes,
                &mut exhausted,
            );
            for o in out.iter_mut() {
                each(match o.take() {
                    Some(Ok(Some(e))) if e.kind == ValueKind::Value => Ok(Some(e.value)),
                    Some(Err(e)) => Err(e),
                    _ => Ok(None),
                });
            }
        }
        if let Some(rc) = exhausted {
            self.ask_read_compaction(rc);
        }
    }

    /// The sequence number a read sees: its snapshot's, or the last visible write's. Load it
    /// before the super-version: every write at or below it is in a memtable or table that
    /// this super-version (or a later one) holds.
    fn read_seq(&self, options: &ReadOptions) -> SeqNo {
        match &options.snapshot {
            Some(s) => s.seq(),
            None => SeqNo(self.visible.load(Ordering::Acquire)),
        }
    }

    /// Hands a file that reads used up to the compaction thread, unless it has one already.
    fn ask_read_compaction(&self, rc: ReadCompaction) {
        if !self.opts.read_triggered_compaction {
            return;
        }
        let mut st = lock(&self.state);
        if st.read_compaction.is_none() {
            st.read_compaction = Some(rc);
            self.bg_cv.notify_all();
        }
    }

    fn iter(self: &Arc<Self>, options: &ReadOptions) -> DbIterator {
        let seq = self.read_seq(options);
        let sv = self.super_version();
        let fill = !options.skip_cache;
        let levels = sv.version.levels.iter().skip(1).filter(|f| !f.is_empty());
        let mut children: Vec<BoxedIter> =
            Vec::with_capacity(1 + sv.imm.len() + sv.version.levels[0].len() + levels.count());
        children.push(Box::new(sv.mem.iter()));
        for m in &sv.imm {
            children.push(Box::new(m.iter()));
        }
        for f in &sv.version.levels[0] {
            children.push(Box::new(LazyTable::new(f.clone(), fill)));
        }
        for files in sv.version.levels.iter().skip(1) {
            if !files.is_empty() {
                children.push(Box::new(LevelIterator::new(files.clone(), fill)));
            }
        }
        let merged = MergingIterator::new(children);
        DbIterator {
            inner: DbIter::new(
                Box::new(merged),
                seq,
                options.lower_bound.clone(),
                options.upper_bound.clone(),
            ),
            sampler: ReadSampler::new(Arc::downgrade(self)),
            sv,
            _snapshot: options.snapshot.clone(),
        }
    }

    fn flush(&self) -> Result<()> {
        self.write(WriteKind::SwitchMemtable, false)?;
        let mut st = lock(&self.state);
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Poisoned(e.to_string()));
            }
            if st.imm.is_empty() {
                return Ok(());
            }
            if st.closed {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            st = self.writer_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn flush_loop(self: &Arc<Self>) {
        loop {
            let mut st = lock(&self.state);
            loop {
                if self.shutting_down.load(Ordering::SeqCst) {
                    return;
                }
                if !st.imm.is_empty() && st.bg_error.is_none() {
                    break;
                }
                let idle_poll = self
                    .opts
                    .idle_compaction_after
                    .map_or(Duration::from_secs(1), |d| {
                        (d / 2).clamp(Duration::from_millis(10), Duration::from_secs(1))
                    });
                let timeout = self.opts.memtable_max_age.map_or(idle_poll, |a| {
                    a.saturating_sub(st.mem.created().elapsed())
                        .clamp(Duration::from_millis(10), idle_poll)
                });
                st = self
                    .bg_cv
                    .wait_timeout(st, timeout)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                if let Some(age) = self.opts.memtable_max_age
                    && !st.mem.is_empty()
                    && st.mem.created().elapsed() >= age
                {
                    st = self.switch_memtable_from_flush_thread(st).0;
                }
                st = self.check_idle(st);
            }
            let Some(mem) = st.imm.front().cloned() else {
                continue;
            };
            let number = st.versions.new_file_number();
            drop(st);
            let result = build_table_from_memtable(&self.store, &self.table_options, number, &mem)
                .and_then(|f| {
                    self.store
                        .fs
                        .sync_dir(&self.dir)
                        .map_err(io_err("fsync", &self.dir))?;
                    Ok(f)
                });
            let mut st = lock(&self.state);
            // Once the edit may be in the MANIFEST, the table must stay even if logging
            // failed: a reopen may find the edit and need the file.
            let mut logged = false;
            let result = result.and_then(|file| {
                let size = file.size;
                // WALs before the next memtable's are no longer needed once this is logged.
                let next_wal = st
                    .imm
                    .get(1)
                    .map_or(st.mem.wal_number(), |m| m.wal_number());
                let edit = VersionEdit {
                    log_number: Some(next_wal),
                    added: vec![file],
                    ..Default::default()
                };
                logged = true;
                self.log_and_apply(&mut st, edit)?;
                self.counters.flush_bytes.fetch_add(size, Ordering::Relaxed);
                self.counters.flushes.fetch_add(1, Ordering::Relaxed);
                Ok(mem.wal_number())
            });
            match result {
                Ok(old_wal) => {
                    st.imm.pop_front();
                    self.install_super_version(&st);
                    let _ = self.store.fs.remove(&self.dir.join(wal_file_name(old_wal)));
                }
                Err(e) => {
                    if !logged {
                        let _ = self
                            .store
                            .fs
                            .remove(&self.dir.join(table_file_name(number)));
                    }
                    self.poison(&mut st, &e);
                }
            }
            self.writer_cv.notify_all();
            self.bg_cv.notify_all();
        }
    }

    /// Turns the active memtable immutable, for the flush thread to flush; true when it did.
    /// It runs under `state` in place of a write: only while no writer is queued, so that it
    /// leads, and only when nothing would make the switch wait for room, which the flush
    /// thread itself would have to make. Errors poison the database.
    fn switch_memtable_from_flush_thread<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
    ) -> (MutexGuard<'a, State>, bool) {
        let waits = !st.imm.is_empty()
            || st.versions.current().levels[0].len() >= self.opts.level0_stop_trigger;
        if !st.queue.is_empty() || waits || st.bg_error.is_some() {
            return (st, false);
        }
        let (st, room) = self.make_room_for_write(st, true);
        (st, room.is_ok())
    }

    /// Run by the flush thread each time it wakes. Once no write has come for
    /// `idle_compaction_after` and the tree is out of shape, it switches the memtable (so that
    /// its flush joins the merge) and asks the compaction thread to settle the tree.
    fn check_idle<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let Some(after) = self.opts.idle_compaction_after else {
            return st;
        };
        if st.idle_mark.0 != st.last_allocated {
            st.idle_mark = (st.last_allocated, Instant::now());
            return st;
        }
        let quiet = after.saturating_mul(1 << st.settles_given_up.min(6));
        if st.settle_requested
            || st.bg_error.is_some()
            || !st.imm.is_empty()
            || st.idle_mark.1.elapsed() < quiet
        {
            return st;
        }
        let mem_bytes = st.mem.approximate_size() as u64;
        if compaction::settle_output_level(&st.versions.current(), &self.targets, mem_bytes)
            .is_none()
        {
            return st;
        }
        if !st.mem.is_empty() {
            let (st2, switched) = self.switch_memtable_from_flush_thread(st);
            st = st2;
            if !switched {
                return st;
            }
        }
        st.settle_requested = true;
        self.bg_cv.notify_all();
        st
    }

    fn new_file_number(&self) -> FileNumber {
        lock(&self.state).versions.new_file_number()
    }

    fn compaction_loop(self: &Arc<Self>) {
        loop {
            let mut st = lock(&self.state);
            let picked = loop {
                if self.shutting_down.load(Ordering::SeqCst) {
                    return;
                }
                if st.bg_error.is_none() && !st.manual_compaction {
                    let v = st.versions.current();
                    if st.settle_requested
                        && st.imm.is_empty()
                        && !st.busy_levels.iter().any(|&b| b)
                    {
                        st.settle_requested = false;
                        if let Some(c) = compaction::settle(&v, &self.targets) {
                            break c;
                        }
                    }
                    let read = st.read_compaction.as_ref();
                    let picked = compaction::pick(
                        &v,
                        &self.targets,
                        &st.busy_levels,
                        &st.versions.compact_pointers,
                        read,
                    );
                    // Done with the file once this compaction takes it or another took it
                    // already; until then it stays listed.
                    if let Some(rc) = read
                        && (picked.as_ref().is_some_and(|c| c.for_reads)
                            || !v.holds(rc.level, &rc.file))
                    {
                        st.read_compaction = None;
                    }
                    if let Some(c) = picked {
                        break c;
                    }
                }
                st = self.bg_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            };
            let levels = picked.level..=picked.output_level();
            for busy in &mut st.busy_levels[levels.clone()] {
                *busy = true;
            }
            drop(st);
            if picked.for_reads {
                self.counters
                    .read_compactions
                    .fetch_add(1, Ordering::Relaxed);
            }
            let _ = self.run_compaction(&picked, true);
            let mut st = lock(&self.state);
            for busy in &mut st.busy_levels[levels] {
                *busy = false;
            }
            drop(st);
            self.writer_cv.notify_all();
            self.bg_cv.notify_all();
        }
    }

    /// Runs a compaction whose levels the caller marked busy, and installs its result. With
    /// `allow_move`, a lone input with nothing beneath changes level without a rewrite.
    fn run_compaction(&self, c: &Compaction, allow_move: bool) -> Result<()> {
        if allow_move && c.is_trivial_move() {
            let mut st = lock(&self.state);
            let edit = compaction::trivial_move_edit(c);
            self.log_and_apply(&mut st, edit)?;
            self.counters.trivial_moves.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let smallest_snapshot = self
            .snapshots
            .oldest(|| SeqNo(self.visible.load(Ordering::Acquire)));
        let alloc = || self.new_file_number();
        // A settling merge gives way to the first write after it started: the writes would
        // otherwise pile up in level 0 behind a job that rewrites the whole tree.
        let started_at = self.visible.load(Ordering::Acquire);
        let cancel = || c.settling && self.visible.load(Ordering::Acquire) != started_at;
        let ctx = JobContext {
            store: &self.store,
            table_options: &self.table_options,
            target_file_bytes: self.opts.target_file_size,
            smallest_snapshot,
            newest_snapshot: self.snapshots.newest(),
            new_file_number: &alloc,
            shutting_down: &self.shutting_down,
            cancel: &cancel,
            filter: self.opts.compaction_filter.as_deref(),
        };
        let job = compaction::run(c, &ctx).and_then(|job| {
            if job.as_ref().is_some_and(|j| !j.edit.added.is_empty()) {
                self.store
                    .fs
                    .sync_dir(&self.dir)
                    .map_err(io_err("fsync", &self.dir))?;
            }
            Ok(job)
        });
        let mut st = lock(&self.state);
        let job = match job {
            Ok(Some(j)) => j,
            Ok(None) => {
                st.settles_given_up += 1;
                self.counters
                    .idle_merges_given_up
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Err(Error::Closed) => return Err(Error::Closed),
            Err(e) => {
                self.poison(&mut st, &e);
                return Err(e);
            }
        };
        // If logging fails the outputs stay: the MANIFEST may hold the edit, and the next
        // open removes whatever no version references.
        self.log_and_apply(&mut st, job.edit)?;
        if c.settling {
            st.settles_given_up = 0;
            self.counters.idle_merges.fetch_add(1, Ordering::Relaxed);
        }
        let c = &self.counters;
        c.compaction_bytes_read
            .fetch_add(job.bytes_read, Ordering::Relaxed);
        c.compaction_bytes_written
            .fetch_add(job.bytes_written, Ordering::Relaxed);
        c.compactions.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Runs a manual compaction exclusively: background compactions finish what they
    /// started and pick nothing new until it is done, so that no data slips below the levels
    /// being merged.
    fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        {
            let mut st = lock(&self.state);
            loop {
                if let Some(e) = &st.bg_error {
                    return Err(Error::Poisoned(e.to_string()));
                }
                if st.closed {
                    return Err(Error::Closed);
                }
                if !st.manual_compaction && !st.busy_levels.iter().any(|b| *b) {
                    break;
                }
                st = self.writer_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.manual_compaction = true;
        }
        let result = self.manual_compaction_levels(begin, end);
        lock(&self.state).manual_compaction = false;
        self.writer_cv.notify_all();
        self.bg_cv.notify_all();
        result
    }

    /// Merges every level down into the deepest one holding data in the range; the last step
    /// takes every file of the deepest level in the range, so that all of it is rewritten
    /// without overwritten versions or tombstones that no snapshot needs.
    fn manual_compaction_levels(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        let deepest = {
            let st = lock(&self.state);
            let v = st.versions.current();
            (0..NUM_LEVELS)
                .rev()
                .find(|&l| !v.overlapping(l, begin, end).is_empty())
        };
        let Some(deepest) = deepest else {
            return Ok(());
        };
        let mut merged_into_deepest = false;
        for level in 0..deepest {
            let v = lock(&self.state).versions.current();
            let inputs = v.overlapping(level, begin, end);
            if inputs.is_empty() {
                continue;
            }
            let mut c = compaction::with_next_level(&v, level, inputs);
            if level + 1 == deepest {
                // Widen to the whole range (the files in between included, so that the
                // outputs never overlap a file left in place).
                let lo = c.inputs.iter().map(|f| f.smallest_user_key()).min();
                let hi = c.inputs.iter().map(|f| f.largest_user_key()).max();
                let lo = match (begin, lo) {
                    (Some(b), Some(l)) => Some(b.min(l)),
                    _ => None,
                };
                let hi = match (end, hi) {
                    (Some(e), Some(h)) => Some(e.max(h)),
                    _ => None,
                };
                c.next_inputs = v.overlapping(deepest, lo, hi);
                merged_into_deepest = true;
            }
            // A manual compaction rewrites even a lone file.
            self.run_compaction(&c, false)?;
        }
        if !merged_into_deepest {
            let v = lock(&self.state).versions.current();
            let inputs = v.overlapping(deepest, begin, end);
            let c = if deepest + 1 < NUM_LEVELS {
                compaction::with_next_level(&v, deepest, inputs)
            } else {
                Compaction {
                    level: deepest,
                    output_level: deepest,
                    inputs,
                    between: Vec::new(),
                    next_inputs: Vec::new(),
                    version: v.clone(),
                    for_reads: false,
                    settling: false,
                }
            };
            self.run_compaction(&c, false)?;
        }
        Ok(())
    }

    /// Removes files no version needs: old WALs and MANIFESTs, SSTs left by a crash, and
    /// temporary files. Failures only leave garbage for the next open.
    fn delete_obsolete_files(&self, names: &[String]) {
        let st = lock(&self.state);
        let live: std::collections::HashSet<FileNumber> = st
            .versions
            .current()
            .files()
            .map(|(_, f)| f.number)
            .collect();
        let manifest = crate::version::manifest_file_name(st.versions.manifest_number());
        for name in names {
            let remove = if let Some(rest) = name.strip_prefix("MANIFEST-") {
                rest.parse::<u64>().is_ok() && *name != manifest
            } else if let Some((n, ext)) = parse_file_name(name) {
                match ext {
                    "wal" => n < st.versions.log_number,
                    "sst" => !live.contains(&n),
                    "dbtmp" => true,
                    _ => false,
                }
            } else {
                false
            };
            if remove {
                let _ = self.store.fs.remove(&self.dir.join(name));
            }
        }
    }

    fn stats(&self) -> Stats {
        let st = lock(&self.state);
        let v = st.versions.current();
        let levels = (0..NUM_LEVELS)
            .map(|l| LevelStats {
                files: v.levels[l].len(),
                bytes: v.level_bytes(l),
                target_bytes: if l == 0 {
                    0
                } else {
                    self.targets.target_bytes(l)
                },
            })
            .collect();
        let files = v
            .files()
            .map(|(level, f)| FileInfo {
                level: level.0,
                number: f.number.0,
                size: f.size,
                smallest_key: f.smallest_user_key().to_vec(),
                largest_key: f.largest_user_key().to_vec(),
                entries: f.entries,
                deletions: f.deletions,
            })
            .collect();
        // The active WAL by what was appended (its file may be reserved ahead); the older
        // ones are closed and cut to their length.
        let active_wal = lock(&self.wal).as_ref().map_or(0, LogWriter::bytes_written);
        let wal_bytes = active_wal
            + st.imm
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
        Stats {
            levels,
            files,
            memtable_bytes: st.mem.approximate_size() as u64,
            immutable_memtables: st.imm.len(),
            immutable_memtable_bytes: st.imm.iter().map(|m| m.approximate_size() as u64).sum(),
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
            compaction_pending: !st.imm.is_empty()
                || st.busy_levels.iter().any(|&b| b)
                || st.read_compaction.is_some()
                || self.targets.scores(&v).iter().any(|&s| s >= 1.0)
                || st.settle_requested
                || (self.opts.idle_compaction_after.is_some()
                    && compaction::settle_output_level(
                        &v,
                        &self.targets,
                        st.mem.approximate_size() as u64,
                    )
                    .is_some()),
            write_stall_micros: r(&c.stall_micros),
            wal_tail_dropped_bytes: r(&c.wal_tail_dropped_bytes),
            wal_salvaged_bytes: r(&c.wal_salvaged_bytes),
            sst_bytes: v.files().map(|(_, f)| f.size).sum(),
            wal_bytes,
            last_sequence: self.visible.load(Ordering::Acquire),
            live_snapshots: self.snapshots.count(),
            poisoned: st.bg_error.as_ref().map(|e| e.to_string()),
        }
    }
}

/// A level-0 table opened on first use by an iterator.
struct LazyTable {
    file: Arc<crate::version::FileMeta>,
    fill: bool,
    it: Option<crate::sstable::reader::TableIter>,
}

impl LazyTable {
    fn new(file: Arc<crate::version::FileMeta>, fill: bool) -> Self {
        LazyTable {
            file,
            fill,
            it: None,
        }
    }

    fn it(&mut self) -> Result<&mut crate::sstable::reader::TableIter> {
        if self.it.is_none() {
            self.it = Some(self.file.table()?.iter(self.fill));
        }
        self.it.as_mut().ok_or(Error::Closed)
    }
}

impl crate::iter::InternalIterator for LazyTable {
    fn valid(&self) -> bool {
        self.it.as_ref().is_some_and(|i| i.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.it()?.seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.it()?.seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.it()?.seek(target)
    }
    fn next(&mut self) -> Result<()> {
        self.it()?.next()
    }
    fn prev(&mut self) -> Result<()> {
        self.it()?.prev()
    }
    fn key(&self) -> &[u8] {
        self.it.as_ref().map_or(&[], |i| i.key())
    }
    fn value(&self) -> &[u8] {
        self.it.as_ref().map_or(&[], |i| i.value())
    }
}

/// A cursor over the database in key order, forward and backward.
///
/// ```
/// # fn main() -> strata::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let db = strata::Db::open(dir.path(), strata::Options::default())?;
/// db.put(b"a", b"1")?;
/// db.put(b"b", b"2")?;
/// let mut it = db.iter(&strata::ReadOptions::default())?;
/// it.seek_to_last()?;
/// assert_eq!(it.key(), b"b");
/// it.prev()?;
/// assert_eq!(it.key(), b"a");
/// it.prev()?;
/// assert!(!it.valid());
/// # Ok(()) }
/// ```
pub struct DbIterator {
    inner: DbIter,
    sv: Arc<SuperVersion>,
    sampler: ReadSampler,
    _snapshot: Option<Snapshot>,
}

/// Bytes an iterator reads, on average, between two samples of its position.
const READ_SAMPLE_BYTES: u64 = 1 << 20;

/// Samples the keys an iterator reads for read-triggered compaction, as LevelDB does: about
/// once per [`READ_SAMPLE_BYTES`] of keys and values (at random, so that no pattern of
/// reads dodges it), the key is charged to the files that may hold it (see
/// `Version::charge_sample`). Scans and seeks pay for every sorted run they merge, and a
/// lookup charges only the runs it consults, so without samples a tree read only by scans
/// would never be asked to change.
struct ReadSampler {
    db: Weak<DbInner>,
    until: u64,
    rng: u64,
}

impl ReadSampler {
    fn new(db: Weak<DbInner>) -> Self {
        // Distinct iterators start at distinct points of the sequence (never 0, where
        // xorshift stays).
        static SEEDS: AtomicU64 = AtomicU64::new(0);
        let rng = SEEDS
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            | 1;
        let mut s = ReadSampler { db, until: 0, rng };
        s.until = s.period();
        s
    }

    /// A period drawn uniformly from `[0, 2 * READ_SAMPLE_BYTES)`.
    fn period(&mut self) -> u64 {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % (2 * READ_SAMPLE_BYTES)
    }

    /// Counts the entry the iterator is on; on a sample, charges its key.
    fn read(&mut self, version: &Version, key: &[u8], value_len: usize) {
        let n = (key.len() + value_len) as u64;
        if n < self.until {
            self.until -= n;
            return;
        }
        self.until = self.period();
        if let Some(rc) = version.charge_sample(key)
            && let Some(db) = self.db.upgrade()
        {
            db.ask_read_compaction(rc);
        }
    }
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator")
            .field("valid", &self.inner.valid())
            .finish()
    }
}

impl DbIterator {
    /// True when positioned on an entry.
    pub fn valid(&self) -> bool {
        self.inner.valid()
    }
    /// Positions on the first key (at or after the lower bound).
    pub fn seek_to_first(&mut self) -> Result<()> {
        let r = self.inner.seek_to_first();
        self.sample(r)
    }
    /// Positions on the last key (before the upper bound).
    pub fn seek_to_last(&mut self) -> Result<()> {
        let r = self.inner.seek_to_last();
        self.sample(r)
    }
    /// Positions on the first key at or after `key`.
    pub fn seek(&mut self, key: &[u8]) -> Result<()> {
        let r = self.inner.seek(key);
        self.sample(r)
    }
    /// Positions on the last key at or before `key`.
    pub fn seek_for_prev(&mut self, key: &[u8]) -> Result<()> {
        let r = self.inner.seek_for_prev(key);
        self.sample(r)
    }
    /// Moves to the next key. Requires: `valid()`. (A cursor, not an `Iterator`: moving can
    /// fail; [`Db::scan`] gives an `Iterator`.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<()> {
        let r = self.inner.next();
        self.sample(r)
    }
    /// Moves to the previous key. Requires: `valid()`.
    pub fn prev(&mut self) -> Result<()> {
        let r = self.inner.prev();
        self.sample(r)
    }
    fn sample(&mut self, r: Result<()>) -> Result<()> {
        if r.is_ok() && self.inner.valid() {
            let (key, value) = (self.inner.key(), self.inner.value());
            self.sampler.read(&self.sv.version, key, value.len());
        }
        r
    }
    /// The current key. Requires: `valid()`.
    pub fn key(&self) -> &[u8] {
        self.inner.key()
    }
    /// The current value. Requires: `valid()`.
    pub fn value(&self) -> &[u8] {
        self.inner.value()
    }
}

/// A Rust iterator over a key range, from [`Db::scan`] or [`Db::scan_rev`].
pub struct Scan {
    it: DbIterator,
    reverse: bool,
    started: bool,
    done: bool,
}

impl std::fmt::Debug for Scan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan")
            .field("reverse", &self.reverse)
            .finish_non_exhaustive()
    }
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = if !self.started {
            self.started = true;
            if self.reverse {
                self.it.seek_to_last()
            } else {
                self.it.seek_to_first()
            }
        } else if self.reverse {
            self.it.prev()
        } else {
            self.it.next()
        };
        if let Err(e) = step {
            self.done = true;
            return Some(Err(e));
        }
        if !self.it.valid() {
            self.done = true;
            return None;
        }
        Some(Ok((self.it.key().to_vec(), self.it.value().to_vec())))
    }
}

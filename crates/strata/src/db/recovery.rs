//! Opening a database: the MANIFEST, its check against the directory, and the replay of the
//! WALs that hold writes not yet in a table.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::Db;
use super::background::write_level0;
use super::family::SuperVersion;
use super::family::{Family, FamilyState};
use super::state::{Counters, DbInner, State, parse_file_name};
use crate::batch::{WriteBatch, decode_record};
use crate::cache::BlockCache;
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::key::{FileNumber, NUM_LEVELS, SeqNo};
use crate::log::{LogKind, RecoveryMode, read_log, strip_header};
use crate::memtable::{ChunkPool, MemTable, Recycling};
use crate::mutex::lock;
use crate::options::Options;
use crate::snapshot::SnapshotList;
use crate::sstable::mapped::MappedPages;
use crate::sstable::pinned::PinBudget;
use crate::version::edit::VersionEdit;
use crate::version::open_files::OpenFiles;
use crate::version::set::VersionSet;
use crate::version::{TableStore, io_err, table_file_name, wal_file_name};
use crate::wal::create_wal;

impl Db {
    /// Opens the database in `path`, creating it when `options.create_if_missing` is set.
    ///
    /// Recovery replays the WAL files newer than the last flush. A torn last record is
    /// dropped; damage elsewhere is [`Error::Corruption`] unless `options.wal_recovery` is
    /// [`RecoveryMode::Salvage`]. A second opener of the same directory gets
    /// [`Error::Locked`].
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        Db::open_with_families(path, options, Vec::new())
    }

    /// [`Db::open`] with options for column families by name. A family the database holds
    /// and `families` does not name opens with `options` less the merge operator and the
    /// compaction filter, which belong to one family's data (without them, reads of merged
    /// keys fail and compactions keep every entry); one `families` names that the database
    /// lacks is created. A family's options are not stored: give the same ones at every
    /// open. [`Db::list_families`] says which families a database holds.
    pub fn open_with_families(
        path: impl AsRef<Path>,
        options: Options,
        families: Vec<(String, Options)>,
    ) -> Result<Db> {
        options.validate()?;
        for (name, o) in &families {
            o.validate()?;
            if o.comparator.name() != options.comparator.name() {
                return Err(Error::InvalidArgument(format!(
                    "column family {name} asks for comparator {}; every family of a \
                     database orders keys by one, here {}",
                    o.comparator.name(),
                    options.comparator.name()
                )));
            }
        }
        let db = Db::open_inner(path.as_ref(), options, &families)?;
        for (name, o) in families {
            if db.family(&name).is_none() {
                db.create_family(&name, o)?;
            }
        }
        Ok(db)
    }

    /// The column families of the database in `path`, the default one first, read from its
    /// MANIFEST without opening it (RocksDB's `ListColumnFamilies`). `options` must carry the
    /// database's comparator, as for [`Db::open`].
    pub fn list_families(path: impl AsRef<Path>, options: &Options) -> Result<Vec<String>> {
        let dir = path.as_ref().to_path_buf();
        let store = Arc::new(TableStore::new(
            options.fs.clone(),
            dir,
            Arc::new(BlockCache::new(0)),
            Arc::new(MappedPages::new(0)),
            Arc::new(PinBudget::new(0)),
            options.key_order(),
        ));
        let versions = VersionSet::recover(store)?;
        Ok(versions
            .families()
            .values()
            .map(|f| f.name.clone())
            .collect())
    }

    fn open_inner(path: &Path, options: Options, given: &[(String, Options)]) -> Result<Db> {
        let dir = path.to_path_buf();
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
        let store = table_store(&dir, &options);
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
        let counters = Counters::default();
        // The families the MANIFEST holds, each with its options.
        let families = families_of(&versions, &options, given);

        // Replay the WALs that hold writes not yet in an SST.
        let names = fs.list(&dir).map_err(io_err("list", &dir))?;
        if exists {
            check_manifest_against_directory(&versions, &dir, &names)?;
        }
        let wals = wals_to_replay(&mut versions, &names);
        let (mut edit, last_seq) =
            replay_wals(&store, &options, &families, &mut versions, &counters, &wals)?;
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
        let chunk_pool = Arc::new(ChunkPool::new(options.write_buffer_size));
        let mut family_states: VecDeque<FamilyState> = families
            .iter()
            .map(|f| FamilyState {
                family: f.clone(),
                mem: memtable_on(f, wal_number, Some(&chunk_pool)),
                imm: VecDeque::new(),
                busy_levels: [false; NUM_LEVELS],
                read_compaction: None,
                idle_merge_requested: false,
            })
            .collect();
        let default = family_states
            .pop_front()
            .filter(|f| f.family.id == 0)
            .ok_or_else(|| Error::corruption(&dir, 0, "the default column family is missing"))?;
        let default_family = default.family.clone();
        let state = State::opened(
            versions,
            default,
            family_states.into(),
            last_seq,
            wal_number,
        );
        let inner = Arc::new(DbInner {
            dir,
            store,
            default: default_family,
            state: Mutex::new(state),
            writer_cv: Condvar::new(),
            bg_cv: Condvar::new(),
            visible: AtomicU64::new(last_seq.0),
            wal: Mutex::new(Some(wal)),
            snapshots: Arc::new(SnapshotList::default()),
            sequence_pins: Arc::new(SnapshotList::default()),
            counters,
            shutting_down: AtomicBool::new(false),
            retired_wals: std::sync::Mutex::new(std::collections::VecDeque::new()),
            chunk_pool,
            _lock: file_lock,
            opts: options,
        });
        inner.install_super_version(&lock(&inner.state));
        inner.delete_obsolete_files(&names);
        let threads = start_threads(&inner).inspect_err(|_| inner.stop_threads())?;
        Ok(Db { inner, threads })
    }
}

/// A crash can tear only the last MANIFEST edit, before it was synced and acted on; a MANIFEST
/// cut short anywhere else has lost edits whose effects (deleted WALs and tables) already
/// happened. Two invariants tell them apart: every table the MANIFEST names exists, and so
/// does the WAL it names as the oldest live one.
pub(super) fn check_manifest_against_directory(
    versions: &VersionSet,
    dir: &Path,
    names: &[String],
) -> Result<()> {
    let present: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let manifest = dir.join(crate::version::manifest_file_name(
        versions.manifest_number(),
    ));
    for (_, _, f) in versions.files() {
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
                "the MANIFEST names {wal} as the oldest live WAL, but it is missing: \
                 edits after it were lost"
            ),
        ));
    }
    Ok(())
}

/// The tables of the database in `dir`, with the caches, budgets and open-file bound
/// `options` size.
pub(super) fn table_store(dir: &Path, options: &Options) -> Arc<TableStore> {
    let mut store = TableStore::new(
        options.fs.clone(),
        dir.to_path_buf(),
        Arc::new(BlockCache::new(options.block_cache_bytes)),
        Arc::new(MappedPages::new(options.table_map_bytes)),
        Arc::new(PinBudget::new(options.table_pinned_bytes)),
        options.key_order(),
    );
    store.open_files = OpenFiles::new(options.max_open_files);
    Arc::new(store)
}

/// The families the MANIFEST holds, each with its options: those `given` by name, the
/// database's for the default family, and for the others the database's without a merge
/// operator or compaction filter.
fn families_of(
    versions: &VersionSet,
    options: &Options,
    given: &[(String, Options)],
) -> Vec<Arc<Family>> {
    versions
        .families()
        .iter()
        .map(|(id, f)| {
            let opts = match given.iter().find(|(name, _)| *name == f.name) {
                Some((_, o)) if *id != 0 => o.clone(),
                _ if *id == 0 => options.clone(),
                _ => Options {
                    merge_operator: None,
                    compaction_filter: None,
                    ..options.clone()
                },
            };
            Arc::new(Family::new(*id, &f.name, opts, placeholder()))
        })
        .collect()
}

/// The WALs in `names` that may hold writes not yet in a table, oldest first; every numbered
/// file's number is marked used.
fn wals_to_replay(versions: &mut VersionSet, names: &[String]) -> Vec<FileNumber> {
    let mut wals: Vec<FileNumber> = Vec::new();
    for name in names {
        if let Some((n, ext)) = parse_file_name(name) {
            versions.mark_file_number_used(n);
            if ext == "wal" && n >= versions.log_number {
                wals.push(n);
            }
        }
    }
    wals.sort();
    wals
}

/// Starts the purge thread, the flush thread and the compaction threads.
fn start_threads(inner: &Arc<DbInner>) -> Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(|e| Error::io("spawn thread", &inner.dir, e))
    };
    let store = inner.store.clone();
    threads.push(spawn(
        "strata-purge".into(),
        Box::new(move || store.purge.run(store.fs.as_ref(), &store.cache)),
    )?);
    let i = inner.clone();
    threads.push(spawn(
        "strata-flush".into(),
        Box::new(move || i.poison_on_panic("flush", || i.flush_loop())),
    )?);
    for n in 0..inner.opts.max_background_compactions {
        let i = inner.clone();
        threads.push(spawn(
            format!("strata-compact-{n}"),
            Box::new(move || i.poison_on_panic("compaction", || i.compaction_loop())),
        )?);
    }
    Ok(threads)
}

/// Replays `wals` (oldest first) into one memtable per column family, writing each that fills
/// up, and the last ones, as level-0 tables. Returns the edit that adds those tables, with the
/// last sequence number replayed.
fn replay_wals(
    store: &TableStore,
    options: &Options,
    families: &[Arc<Family>],
    versions: &mut VersionSet,
    counters: &Counters,
    wals: &[FileNumber],
) -> Result<(VersionEdit, SeqNo)> {
    let mut replay = Replay {
        store,
        options,
        counters,
        last_seq: versions.last_sequence,
        versions,
        edit: VersionEdit::default(),
        mems: families
            .iter()
            .map(|f| (f.clone(), empty_memtable(f)))
            .collect(),
        next_seq: None,
    };
    for (i, number) in wals.iter().enumerate() {
        let newest = i + 1 == wals.len();
        if !replay.wal(*number, newest)? {
            break;
        }
    }
    for (family, mem) in &replay.mems {
        if !mem.is_empty() {
            let table = write_level0(store, family, replay.versions, mem)?;
            replay.edit.added.push(table);
        }
    }
    Ok((replay.edit, replay.last_seq))
}

fn empty_memtable(f: &Family) -> Arc<MemTable> {
    memtable_on(f, FileNumber(0), None)
}

/// An empty memtable of family `f` for writes logged in WAL `wal`, its arena taking chunks
/// from `pool` first.
fn memtable_on(f: &Family, wal: FileNumber, pool: Option<&Arc<ChunkPool>>) -> Arc<MemTable> {
    Arc::new(MemTable::new(
        wal,
        f.opts.write_buffer_size,
        f.opts.key_order(),
        pool.map(|pool| Recycling {
            pool: pool.clone(),
            family: f.id,
        }),
    ))
}

/// What a family's readers see before the database is open: nothing.
fn placeholder() -> SuperVersion {
    SuperVersion {
        mem: Arc::new(MemTable::new(FileNumber(0), 1024, KeyOrder::Bytewise, None)),
        imm: Vec::new(),
        version: Arc::new(crate::version::Version::default()),
        horizon: SeqNo(0),
    }
}

/// A replay of WALs in progress.
struct Replay<'a> {
    store: &'a TableStore,
    options: &'a Options,
    counters: &'a Counters,
    versions: &'a mut VersionSet,
    /// The tables written so far.
    edit: VersionEdit,
    /// Each column family with the memtable its writes replay into.
    mems: Vec<(Arc<Family>, Arc<MemTable>)>,
    last_seq: SeqNo,
    /// The sequence number the next record must start with.
    next_seq: Option<u64>,
}

impl Replay<'_> {
    /// Replays one WAL; false when salvage mode dropped damage in it, and the WALs after it
    /// are not to be replayed.
    fn wal(&mut self, number: FileNumber, newest: bool) -> Result<bool> {
        let (fs, mode) = (&self.store.fs, self.options.wal_recovery);
        let path = self.store.dir.join(wal_file_name(number));
        let data = fs.read_all(&path).map_err(io_err("read", &path))?;
        let contents = read_log(&path, &data, mode)?;
        let mut salvaged = contents.salvaged_bytes;
        // Only the newest WAL can be torn by a crash: older ones were synced whole when their
        // memtable was switched out, so a short one has lost writes that later WALs depend on.
        if contents.torn_tail_bytes > 0 && !newest {
            let offset = data.len() as u64 - contents.torn_tail_bytes;
            if mode == RecoveryMode::Strict {
                return Err(Error::corruption(
                    &path,
                    offset,
                    "an older WAL ends in a torn record; newer WALs follow it",
                ));
            }
            salvaged += contents.torn_tail_bytes;
        } else {
            self.counters
                .wal_tail_dropped_bytes
                .fetch_add(contents.torn_tail_bytes, Ordering::Relaxed);
        }
        for (offset, record) in strip_header(&path, contents, LogKind::Wal)? {
            let (seq, batch) = match self.decode(&path, offset, &record) {
                Ok(d) => d,
                Err(_) if mode == RecoveryMode::Salvage => {
                    salvaged = data.len() as u64 - offset;
                    break;
                }
                Err(e) => return Err(e),
            };
            self.apply(&path, offset, seq, &batch)?;
        }
        if salvaged > 0 {
            self.counters
                .wal_salvaged_bytes
                .fetch_add(salvaged, Ordering::Relaxed);
            return Ok(false);
        }
        Ok(true)
    }

    /// Decodes one WAL record: a write group and its first sequence number.
    fn decode(&self, path: &Path, offset: u64, record: &[u8]) -> Result<(SeqNo, WriteBatch)> {
        let (seq, batch) = decode_record(record).map_err(|e| e.at(path, offset))?;
        // One open replays the WALs of one run of the database, which logged every write
        // group in order with contiguous sequence numbers: a gap means records were lost (an
        // older WAL cut short at a record boundary, say).
        if let Some(expected) = self.next_seq
            && seq.0 != expected
        {
            return Err(Error::corruption(
                path,
                offset,
                format!(
                    "WAL records are missing: sequence {expected} expected, {} found",
                    seq.0
                ),
            ));
        }
        Ok((seq, batch))
    }

    /// Applies a write group to the memtable, and writes the memtable out once full.
    fn apply(&mut self, path: &Path, offset: u64, seq: SeqNo, batch: &WriteBatch) -> Result<()> {
        self.next_seq = Some(seq.0 + u64::from(batch.count()));
        let mut s = seq.0;
        for op in batch.iter() {
            let op = op.map_err(|e| e.at(path, offset))?;
            // The writes of a dropped family are not replayed.
            if let Some((_, mem)) = self.mems.iter().find(|(f, _)| f.id == op.family) {
                mem.add(SeqNo(s), op.kind, op.key, op.value);
            }
            s += 1;
        }
        if batch.count() > 0 {
            self.last_seq = self.last_seq.max(SeqNo(s - 1));
        }
        for (family, mem) in &mut self.mems {
            if mem.approximate_size() >= family.opts.write_buffer_size {
                let table = write_level0(self.store, family, self.versions, mem)?;
                self.edit.added.push(table);
                *mem = empty_memtable(family);
            }
        }
        Ok(())
    }
}

//! The database's shared state: [`DbInner`], which every call and background thread
//! holds, and [`State`], the part under its lock.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::family::{ColumnFamily, Family, FamilyState, SuperVersion};
use super::queue::Writer;
use crate::batch::WriteBatch;
use crate::compaction;
use crate::error::{Error, Result};
use crate::fs::FileLock;
use crate::key::{FileNumber, NUM_LEVELS, SeqNo};
use crate::log::LogWriter;
use crate::memtable::{ChunkPool, MemTable, Recycling};
use crate::mutex::lock;
use crate::options::Options;
use crate::snapshot::SnapshotList;
use crate::version::edit::VersionEdit;
use crate::version::set::VersionSet;
use crate::version::{TableStore, Version};

pub(super) struct State {
    pub(super) versions: VersionSet,
    /// The default column family, which is never dropped.
    pub(super) default: FamilyState,
    /// The other column families, by id.
    pub(super) others: Vec<FamilyState>,
    pub(super) queue: VecDeque<Arc<Writer>>,
    /// The first failure that may have lost data; writes are refused from then on.
    pub(super) bg_error: Option<Error>,
    pub(super) closed: bool,
    /// What [`SuperVersion::horizon`] the next super-version gets.
    pub(super) horizon: SeqNo,
    /// A manual compaction runs: background compactions pick nothing new meanwhile.
    pub(super) manual_compaction: bool,
    /// `compact_range` calls under way, counted from before their flush: what
    /// `wait_for_compactions` waits for besides the background work.
    pub(super) manual_compactions: usize,
    /// The family the compaction thread looks at first next time (round-robin).
    pub(super) compaction_turn: usize,
    /// Sequence numbers handed out to write groups (visible or not yet).
    pub(super) last_allocated: SeqNo,
    pub(super) wal_number: FileNumber,
    /// Writers in the last synced group; its successor's leader waits for that many to queue
    /// up (see `DbInner::gather_sync_writers`).
    pub(super) last_sync_group: usize,
    /// The last group's vector, emptied, for the next leader to fill: a write allocates none.
    pub(super) spare_group: Vec<Arc<Writer>>,
    /// The last sequence number the flush thread saw handed out, and since when: writes
    /// have stopped when it stays the same (see `DbInner::check_idle`).
    pub(super) idle_mark: (SeqNo, Instant),
    /// Idle merges that writes gave up since the last that finished. Each doubles the quiet
    /// time the next one waits for, so that a trickle of writes a few seconds apart does not
    /// start and abandon a merge of the whole tree again and again.
    pub(super) idle_merges_given_up_in_a_row: u32,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) user_bytes: AtomicU64,
    pub(super) wal_bytes: AtomicU64,
    pub(super) flush_bytes: AtomicU64,
    pub(super) compaction_bytes_written: AtomicU64,
    pub(super) compaction_bytes_read: AtomicU64,
    pub(super) flushes: AtomicU64,
    pub(super) compactions: AtomicU64,
    pub(super) read_compactions: AtomicU64,
    pub(super) trivial_moves: AtomicU64,
    pub(super) idle_merges: AtomicU64,
    pub(super) idle_merges_given_up: AtomicU64,
    pub(super) stall_micros: AtomicU64,
    pub(super) wal_tail_dropped_bytes: AtomicU64,
    pub(super) wal_salvaged_bytes: AtomicU64,
}

impl State {
    /// The state of a database just opened, with its families as recovery left them and
    /// `wal_number` the log that takes writes after `last_seq`.
    pub(super) fn opened(
        versions: VersionSet,
        default: FamilyState,
        others: Vec<FamilyState>,
        last_seq: SeqNo,
        wal_number: FileNumber,
    ) -> State {
        State {
            versions,
            default,
            others,
            queue: VecDeque::new(),
            bg_error: None,
            closed: false,
            horizon: SeqNo(0),
            manual_compaction: false,
            manual_compactions: 0,
            compaction_turn: 0,
            last_allocated: last_seq,
            wal_number,
            last_sync_group: 0,
            spare_group: Vec::new(),
            idle_mark: (SeqNo(0), Instant::now()),
            idle_merges_given_up_in_a_row: 0,
        }
    }

    /// The default column family, which is never dropped.
    pub(super) fn default_family(&self) -> &FamilyState {
        &self.default
    }

    /// Every column family, the default one first.
    pub(super) fn families(&self) -> impl Iterator<Item = &FamilyState> {
        std::iter::once(&self.default).chain(&self.others)
    }

    pub(super) fn families_mut(&mut self) -> impl Iterator<Item = &mut FamilyState> {
        std::iter::once(&mut self.default).chain(&mut self.others)
    }

    pub(super) fn family(&self, id: u32) -> Option<&FamilyState> {
        self.families().find(|f| f.family.id == id)
    }

    pub(super) fn family_mut(&mut self, id: u32) -> Option<&mut FamilyState> {
        self.families_mut().find(|f| f.family.id == id)
    }

    /// Generations of immutable memtables waiting to be flushed (the same in every family).
    pub(super) fn pending_flushes(&self) -> usize {
        self.default_family().imm.len()
    }

    /// The most level-0 files any family holds: what slows and stops writers.
    pub(super) fn level0_files(&self) -> usize {
        self.families()
            .map(|f| self.versions.current(f.family.id).levels[0].len())
            .max()
            .unwrap_or(0)
    }
}

pub(crate) struct DbInner {
    /// The options the database was opened with: the database-wide ones, and the default
    /// column family's.
    pub(super) opts: Options,
    pub(super) dir: PathBuf,
    pub(super) store: Arc<TableStore>,
    /// The default column family, which the calls without a family use.
    pub(super) default: Arc<Family>,
    pub(super) state: Mutex<State>,
    /// Writers wait here for their turn, for room, and for flushes to finish.
    pub(super) writer_cv: Condvar,
    /// Background threads wait here for work.
    pub(super) bg_cv: Condvar,
    /// The last sequence number whose write is complete; reads see up to here.
    pub(super) visible: AtomicU64,
    /// The active WAL; held only by the write leader and by memtable switches, which run as
    /// the leader.
    pub(super) wal: Mutex<Option<LogWriter>>,
    pub(super) snapshots: Arc<SnapshotList>,
    /// The live [`crate::SequencePin`]s: no write after the oldest is written with sequence
    /// number zero.
    pub(super) sequence_pins: Arc<SnapshotList>,
    pub(super) counters: Counters,
    pub(super) shutting_down: AtomicBool,
    /// WALs whose writes are in tables, kept for `Db::updates_since`, oldest first.
    pub(super) retired_wals: Mutex<VecDeque<Retired>>,
    /// Arena chunks of flushed memtables, for the next memtables to fill.
    pub(super) chunk_pool: Arc<ChunkPool>,
    pub(super) _lock: Box<dyn FileLock>,
}

/// A WAL set aside: its writes are in tables, and it is kept for `Db::updates_since`.
pub(super) struct Retired {
    pub(super) number: FileNumber,
    pub(super) since: Instant,
    pub(super) bytes: u64,
}

pub(super) fn parse_file_name(name: &str) -> Option<(FileNumber, &str)> {
    let (stem, ext) = name.split_once('.')?;
    Some((FileNumber(stem.parse().ok()?), ext))
}

impl DbInner {
    /// Tells the background threads to end, as a close does (after a failed start).
    pub(super) fn stop_threads(&self) {
        {
            // Under the state lock, as a close sets it: no thread misses the notification.
            let _st = lock(&self.state);
            self.shutting_down.store(true, Ordering::SeqCst);
        }
        self.bg_cv.notify_all();
        self.store.purge.stop();
    }

    pub(super) fn check_open(&self) -> Result<()> {
        if lock(&self.state).closed {
            return Err(Error::Closed);
        }
        Ok(())
    }

    pub(super) fn check_writable(&self) -> Result<()> {
        let st = lock(&self.state);
        if st.closed {
            return Err(Error::Closed);
        }
        match &st.bg_error {
            Some(e) => Err(Error::Poisoned(e.to_string())),
            None => Ok(()),
        }
    }

    /// Publishes every family's memtables and version to readers. Requires: `state` is
    /// locked.
    pub(super) fn install_super_version(&self, st: &State) {
        for f in st.families() {
            f.family.set_super_version(SuperVersion {
                mem: f.mem.clone(),
                imm: f.imm.iter().rev().cloned().collect(),
                version: st.versions.current(f.family.id),
                horizon: st.horizon,
            });
        }
    }

    /// Checks a batch that names column families: every family it names exists and is not
    /// being dropped, and has a merge operator where the batch merges.
    pub(super) fn check_families(&self, batch: &WriteBatch) -> Result<()> {
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
    pub(super) fn new_family_state(&self, st: &State, family: Arc<Family>) -> FamilyState {
        let size = family.opts.write_buffer_size;
        let order = family.opts.key_order();
        let imm = st
            .default_family()
            .imm
            .iter()
            .map(|m| Arc::new(MemTable::new(m.wal_number(), size, order.clone(), None)))
            .collect();
        let pool = Some(Recycling {
            pool: self.chunk_pool.clone(),
            family: family.id,
        });
        FamilyState {
            mem: Arc::new(MemTable::new(st.wal_number, size, order, pool)),
            imm,
            busy_levels: [false; NUM_LEVELS],
            read_compaction: None,
            idle_merge_requested: false,
            family,
        }
    }

    pub(super) fn create_family(&self, name: &str, options: Options) -> Result<ColumnFamily> {
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
        let ours = st.default_family().family.opts.comparator.name();
        if options.comparator.name() != ours {
            return Err(Error::InvalidArgument(format!(
                "column family {name} asks for comparator {}; every family of this database \
                 orders keys by {ours}",
                options.comparator.name()
            )));
        }
        let id = st.versions.new_family_id();
        let edit = VersionEdit {
            added_families: vec![(id, name.to_string())],
            next_family: Some(id + 1),
            ..Default::default()
        };
        self.log_and_apply_unpublished(&mut st, edit)?;
        let order = options.key_order();
        let family = Arc::new(Family::new(
            id,
            name,
            options,
            SuperVersion {
                mem: Arc::new(MemTable::new(st.wal_number, 1024, order, None)),
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

    pub(super) fn drop_family(&self, name: &str) -> Result<()> {
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
            // A compaction that failed or panicked leaves its levels busy.
            running(&st)?;
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
        family.set_super_version(SuperVersion {
            mem: Arc::new(MemTable::new(
                st.wal_number,
                1024,
                family.opts.key_order(),
                None,
            )),
            imm: Vec::new(),
            version: Arc::new(Version::default()),
            horizon: st.horizon,
        });
        self.install_super_version(&st);
        Ok(())
    }

    /// Logs an edit with the latest sequence number, installs the version it makes and
    /// publishes it; a failure poisons the database, since the MANIFEST may hold the edit.
    pub(super) fn log_and_apply(&self, st: &mut State, edit: VersionEdit) -> Result<()> {
        self.log_and_apply_unpublished(st, edit)?;
        self.install_super_version(st);
        Ok(())
    }

    /// [`DbInner::log_and_apply`] without publishing the new super-version, for a caller
    /// that changes the memtables too and publishes both at once (a flush: readers must
    /// never see a memtable and the table made of it together, where a merge would find
    /// its operands twice).
    pub(super) fn log_and_apply_unpublished(
        &self,
        st: &mut State,
        mut edit: VersionEdit,
    ) -> Result<()> {
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

    pub(super) fn poison(&self, st: &mut State, e: &Error) {
        if st.bg_error.is_none() {
            st.bg_error = Some(e.duplicate());
        }
        self.writer_cv.notify_all();
    }

    /// Runs a background thread's loop. A panic in it (in a comparator, merge operator or
    /// compaction filter of the user's, or a bug of ours) poisons the database with an error
    /// that names it, so that writers and `wait_for_compactions` stop waiting for a thread
    /// that is gone; the thread then ends.
    pub(super) fn poison_on_panic(&self, thread: &str, body: impl FnOnce()) {
        let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) else {
            return;
        };
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let mut st = lock(&self.state);
        let e = Error::Poisoned(format!("the {thread} thread panicked: {what}"));
        self.poison(&mut st, &e);
        self.bg_cv.notify_all();
    }

    pub(super) fn new_file_number(&self) -> FileNumber {
        lock(&self.state).versions.new_file_number()
    }

    /// Waits until no family has flush or compaction work pending (see
    /// [`DbInner::work_pending`]) and no manual compaction runs, or a background error
    /// stopped them.
    pub(super) fn wait_for_compactions(&self) -> Result<()> {
        let mut st = lock(&self.state);
        loop {
            running(&st)?;
            if st.manual_compactions == 0 && !st.families().any(|f| self.work_pending(&st, f)) {
                return Ok(());
            }
            // Each finished job notifies; the timeout covers work that becomes due with
            // time alone (an idle merge), which nothing notifies.
            self.bg_cv.notify_all();
            st = self
                .writer_cv
                .wait_timeout(st, std::time::Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Whether family `f` has background work running or due.
    pub(super) fn work_pending(&self, st: &State, f: &FamilyState) -> bool {
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
}

/// What a thread waiting on the database's background work returns once that work cannot
/// come: the error that stopped it, or the close.
pub(super) fn running(st: &State) -> Result<()> {
    if let Some(e) = &st.bg_error {
        return Err(Error::Poisoned(e.to_string()));
    }
    if st.closed {
        return Err(Error::Closed);
    }
    Ok(())
}

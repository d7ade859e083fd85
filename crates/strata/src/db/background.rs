//! Background work: flushing memtables to level-0 tables, compactions (automatic, manual
//! and the idle merge), and deleting the files no version needs.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::family::Family;
use super::queue::QueuedWrite;
use super::state::{DbInner, State, parse_file_name};
use crate::compaction::{self, Compaction, JobContext};
use crate::error::{Error, Result};
use crate::key::{FileNumber, Level, NUM_LEVELS, SeqNo, ValueKind, parse_internal_key};
use crate::memtable::MemTable;
use crate::merge::MergeOperator;
use crate::mutex::lock;
use crate::sstable::TableOptions;
use crate::sstable::builder::TableBuilder;
use crate::version::edit::{NewFile, VersionEdit};
use crate::version::set::VersionSet;
use crate::version::{TableStore, io_err, table_file_name};

/// Writes a memtable of column family `family` to a new level-0 SST while the database
/// opens, and describes it for an edit.
pub(super) fn write_level0(
    store: &TableStore,
    family: &Family,
    versions: &mut VersionSet,
    mem: &Arc<MemTable>,
) -> Result<NewFile> {
    let number = versions.new_file_number();
    let opts = compaction::flush_options(
        family.opts.filter_policy,
        &family.table_options,
        &versions.current(family.id),
        &family.tree_model(),
    );
    let opts =
        compaction::flush_filter(opts, &versions.all_current(), crate::process_memory_limit());
    // No snapshot lives while the database opens.
    let fold = family.opts.merge_operator.as_deref();
    let mut file =
        build_table_from_memtable(store, &opts, number, mem, fold.map(|op| (op, SeqNo::MAX)))?;
    file.family = family.id;
    Ok(file)
}

/// Writes a memtable to a new table. With `fold` (the merge operator and the oldest sequence
/// number a reader may ask for), a key's merge operands that every reader sees are folded,
/// into the value or deletion beneath them in the memtable, or else into one operand.
pub(super) fn build_table_from_memtable(
    store: &TableStore,
    opts: &TableOptions,
    number: FileNumber,
    mem: &Arc<MemTable>,
    fold: Option<(&dyn MergeOperator, SeqNo)>,
) -> Result<NewFile> {
    use crate::iter::InternalIterator;
    let path = store.dir.join(table_file_name(number));
    let result = (|| {
        let file = store.fs.create(&path).map_err(io_err("create", &path))?;
        let mut b = TableBuilder::new(file, path.clone(), opts.clone());
        let mut it = mem.iter();
        it.seek_to_first()?;
        let tombstones = mem.range_tombstones();
        let malformed = || Error::corruption(&path, 0, "malformed internal key in a memtable");
        let mut key: Vec<u8> = Vec::new();
        let mut have_key = false;
        // Whether the current key's newest version that every reader sees was reached.
        let mut reached = false;
        while it.valid() {
            let p = parse_internal_key(it.key()).ok_or_else(malformed)?;
            if !have_key || p.user_key != key.as_slice() {
                key.clear();
                key.extend_from_slice(p.user_key);
                have_key = true;
                reached = false;
            }
            if let Some((op, oldest)) = fold
                && !reached
                && p.seq <= oldest
            {
                reached = true;
                if p.kind == ValueKind::Merge {
                    let cover = tombstones
                        .as_ref()
                        .map_or(SeqNo(0), |t| t.covering(&key, oldest));
                    let folded = crate::compaction::fold_operands(
                        &mut it, &key, op, false, cover, &malformed,
                    )?;
                    for (k, v) in &folded {
                        b.add(k, v)?;
                    }
                    continue;
                }
            }
            b.add(it.key(), it.value())?;
            it.next()?;
        }
        for t in mem.range_tombstone_list() {
            b.add_range_tombstone(&t);
        }
        b.finish()
    })();
    match result {
        Ok(s) => Ok({
            store.warm(number);
            NewFile {
                level: Level(0),
                number,
                size: s.file_size,
                smallest: s.smallest,
                largest: s.largest,
                entries: s.entries,
                deletions: s.deletions,
                range_deletions: s.range_deletions,
                filter_millibits: Some(s.filter_millibits),
                family: 0,
            }
        }),
        Err(e) => {
            let _ = store.fs.remove(&path);
            Err(e)
        }
    }
}

/// One table of a generation's flush: the family, its memtable, the table's number and
/// how it is built.
struct FlushJob {
    family: Arc<Family>,
    mem: Arc<MemTable>,
    number: FileNumber,
    table_options: TableOptions,
}

impl DbInner {
    pub(super) fn flush(&self) -> Result<()> {
        self.join_write_queue(QueuedWrite::SwitchMemtable, false)?;
        let mut st = lock(&self.state);
        // Memtables are flushed oldest first, so the flush is done when the newest memtable
        // now waiting (the one switched out above, or a later one) has gone: under writes
        // faster than flushes, waiting for none to be left could wait for the writes to stop.
        // Every family's list lines up with the default one's.
        let Some(newest) = st.default_family().imm.back().cloned() else {
            return Ok(());
        };
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Poisoned(e.to_string()));
            }
            if !st
                .default_family()
                .imm
                .iter()
                .any(|m| Arc::ptr_eq(m, &newest))
            {
                return Ok(());
            }
            if st.closed {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            st = self.writer_cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    pub(super) fn flush_loop(self: &Arc<Self>) {
        loop {
            let mut st = lock(&self.state);
            loop {
                if self.shutting_down.load(Ordering::SeqCst) {
                    return;
                }
                if st.pending_flushes() > 0 && st.bg_error.is_none() {
                    break;
                }
                let idle_poll = self
                    .opts
                    .idle_merge_after
                    .map_or(Duration::from_secs(1), |d| {
                        (d / 2).clamp(Duration::from_millis(10), Duration::from_secs(1))
                    });
                // Every family's memtable was made at the same switch.
                let created = st.default_family().mem.created();
                let timeout = self.opts.memtable_max_age.map_or(idle_poll, |a| {
                    a.saturating_sub(created.elapsed())
                        .clamp(Duration::from_millis(10), idle_poll)
                });
                st = self
                    .bg_cv
                    .wait_timeout(st, timeout)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                if let Some(age) = self.opts.memtable_max_age
                    && st.families().any(|f| !f.mem.is_empty())
                    && st.default_family().mem.created().elapsed() >= age
                {
                    st = self.switch_memtable_from_flush_thread(st).0;
                }
                st = self.check_idle(st);
                if self.chunk_pool.bytes() > 0 {
                    // Unmapped without holding up writers.
                    drop(st);
                    self.chunk_pool.release_if_idle();
                    st = lock(&self.state);
                }
            }
            self.flush_generation(st);
            self.writer_cv.notify_all();
            self.bg_cv.notify_all();
        }
    }

    /// Flushes the oldest generation of immutable memtables: a table for each family whose
    /// memtable holds writes, all added by one edit, which also moves the oldest live WAL
    /// past the generation's. Errors poison the database.
    fn flush_generation(&self, mut st: MutexGuard<'_, State>) {
        let mut jobs = Vec::new();
        let waiting: Vec<(Arc<Family>, Arc<MemTable>)> = st
            .families()
            .filter_map(|f| {
                let m = f.imm.front().filter(|m| !m.is_empty())?;
                Some((f.family.clone(), m.clone()))
            })
            .collect();
        // Every family's tables count, as for compactions.
        let (versions, memory) = (st.versions.all_current(), crate::process_memory_limit());
        for (family, mem) in waiting {
            let number = st.versions.new_file_number();
            let table_options = compaction::flush_options(
                family.opts.filter_policy,
                &family.table_options,
                &st.versions.current(family.id),
                &family.tree_model(),
            );
            let table_options = compaction::flush_filter(table_options, &versions, memory);
            jobs.push(FlushJob {
                family,
                mem,
                number,
                table_options,
            });
        }
        // Let go before the job's end: the last hold on tables a compaction replaced meanwhile
        // would keep them from the purge, and `wait_for_compactions` would return before they
        // were deleted.
        drop(versions);
        let Some(old_wal) = st.default_family().imm.front().map(|m| m.wal_number()) else {
            return;
        };
        drop(st);
        // Operands every reader sees fold: any snapshot taken from now on is newer than
        // the memtables, which take no more writes.
        let oldest = self
            .snapshots
            .oldest(|| SeqNo(self.visible.load(Ordering::Acquire)));
        let mut files = Vec::new();
        let mut result = Ok(());
        for job in &jobs {
            let fold = job
                .family
                .opts
                .merge_operator
                .as_deref()
                .map(|op| (op, oldest));
            match build_table_from_memtable(
                &self.store,
                &job.table_options,
                job.number,
                &job.mem,
                fold,
            ) {
                Ok(mut f) => {
                    f.family = job.family.id;
                    files.push(f);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() && !files.is_empty() {
            result = self
                .store
                .fs
                .sync_dir(&self.dir)
                .map_err(io_err("fsync", &self.dir));
        }
        let mut st = lock(&self.state);
        if let Err(e) = result {
            self.remove_new_tables(&files);
            self.poison(&mut st, &e);
            return;
        }
        // A family dropped meanwhile takes no table.
        let (files, orphans): (Vec<NewFile>, Vec<NewFile>) = files
            .into_iter()
            .partition(|f| st.family(f.family).is_some());
        self.remove_new_tables(&orphans);
        let size: u64 = files.iter().map(|f| f.size).sum();
        let tables = files.len();
        // WALs before the next generation's are no longer needed once this is logged.
        let next_wal = {
            let d = st.default_family();
            d.imm.get(1).map_or(d.mem.wal_number(), |m| m.wal_number())
        };
        let edit = VersionEdit {
            log_number: Some(next_wal),
            added: files,
            ..Default::default()
        };
        // Once the edit may be in the MANIFEST, the tables must stay even if logging failed:
        // a reopen may find the edit and need them. Published below, with the memtables
        // gone from the lists.
        if self.log_and_apply_unpublished(&mut st, edit).is_err() {
            return;
        }
        self.counters.flush_bytes.fetch_add(size, Ordering::Relaxed);
        if tables > 0 {
            self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        }
        let writing = Self::drop_flushed_memtables(&mut st);
        if jobs.iter().any(|j| j.family.opts.merge_operator.is_some()) {
            st.horizon = st.horizon.max(oldest);
        }
        self.install_super_version(&st);
        self.retire_wal(old_wal);
        if !writing {
            // Unmapped without holding up writers.
            drop(st);
            self.chunk_pool.clear();
        }
    }

    /// Removes tables a flush wrote and will not log.
    fn remove_new_tables(&self, files: &[NewFile]) {
        self.store.forget_warmed(files.iter().map(|f| f.number));
        for f in files {
            let _ = self
                .store
                .fs
                .remove(&self.dir.join(table_file_name(f.number)));
        }
    }

    /// Takes the flushed generation's memtables off the lists. While its family takes
    /// writes, a flushed memtable's memory goes to the next memtables; once no family does,
    /// it leaves the process. True when some family's active memtable holds writes.
    fn drop_flushed_memtables(st: &mut State) -> bool {
        let mut writing = false;
        for f in st.families_mut() {
            if let Some(m) = f.imm.pop_front()
                && !f.mem.is_empty()
            {
                m.recycle_on_drop();
                writing = true;
            }
        }
        writing
    }

    /// Turns the active memtable immutable, for the flush thread to flush; true when it did.
    /// It runs under `state` in place of a write: only while no writer is queued, so that it
    /// leads, and only when nothing would make the switch wait for room, which the flush
    /// thread itself would have to make. Errors poison the database.
    pub(super) fn switch_memtable_from_flush_thread<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
    ) -> (MutexGuard<'a, State>, bool) {
        let waits = st.pending_flushes() > 0 || st.level0_files() >= self.opts.level0_stop_trigger;
        if !st.queue.is_empty() || waits || st.bg_error.is_some() {
            return (st, false);
        }
        let (st, room) = self.make_room_for_write(st, true);
        (st, room.is_ok())
    }

    /// Run by the flush thread each time it wakes. Once no write has come for
    /// `idle_merge_after` and the tree is out of shape, it switches the memtable (so that
    /// its flush joins the merge) and asks the compaction thread for an idle merge.
    pub(super) fn check_idle<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let Some(after) = self.opts.idle_merge_after else {
            return st;
        };
        if st.idle_mark.0 != st.last_allocated {
            st.idle_mark = (st.last_allocated, Instant::now());
            return st;
        }
        let quiet = after.saturating_mul(1 << st.idle_merges_given_up_in_a_row.min(6));
        if st.families().any(|f| f.idle_merge_requested)
            || st.bg_error.is_some()
            || st.pending_flushes() > 0
            || st.idle_mark.1.elapsed() < quiet
        {
            return st;
        }
        let out_of_shape: Vec<u32> = st
            .families()
            .filter(|f| {
                let v = st.versions.current(f.family.id);
                let mem_bytes = f.mem.approximate_size() as u64;
                compaction::idle_merge_output_level(&v, &f.family.targets, mem_bytes).is_some()
            })
            .map(|f| f.family.id)
            .collect();
        if out_of_shape.is_empty() {
            return st;
        }
        if st.families().any(|f| !f.mem.is_empty()) {
            let (st2, switched) = self.switch_memtable_from_flush_thread(st);
            st = st2;
            if !switched {
                return st;
            }
        }
        for f in st.families_mut() {
            f.idle_merge_requested = out_of_shape.contains(&f.family.id);
        }
        self.bg_cv.notify_all();
        st
    }

    /// The most urgent compaction of the first family that needs one, taking the families in
    /// turn from the one after the last served, so that a busy family does not starve the
    /// others. Marks its levels busy.
    fn pick_compaction(&self, st: &mut State) -> Option<(Arc<Family>, Compaction)> {
        let n = st.families().count();
        let pending_flushes = st.pending_flushes();
        let turn = st.compaction_turn;
        for i in (0..n).map(|i| (i + turn) % n) {
            let State {
                versions,
                default,
                others,
                ..
            } = &mut *st;
            let Some(f) = std::iter::once(default).chain(others.iter_mut()).nth(i) else {
                continue;
            };
            if f.family.dropped.load(Ordering::SeqCst) {
                continue;
            }
            let v = versions.current(f.family.id);
            let mut picked = None;
            if f.idle_merge_requested && pending_flushes == 0 && !f.busy_levels.iter().any(|&b| b) {
                f.idle_merge_requested = false;
                picked = compaction::idle_merge(&v, &f.family.targets);
            }
            if picked.is_none() {
                let read = f.read_compaction.as_ref();
                picked = compaction::pick(
                    &v,
                    &f.family.targets,
                    &f.busy_levels,
                    versions.compact_pointers(f.family.id),
                    read,
                );
                // Done with the file once this compaction takes it or another took it
                // already; until then it stays listed.
                if let Some(rc) = read
                    && (picked.as_ref().is_some_and(|c| c.for_reads)
                        || !v.holds(rc.level, &rc.file))
                {
                    f.read_compaction = None;
                }
            }
            if let Some(c) = picked {
                for busy in &mut f.busy_levels[c.level..=c.output_level()] {
                    *busy = true;
                }
                let family = f.family.clone();
                st.compaction_turn = (i + 1) % n;
                return Some((family, c));
            }
        }
        None
    }

    pub(super) fn compaction_loop(self: &Arc<Self>) {
        // Whether this thread ran a compaction since it last gave free memory back.
        let mut worked = false;
        loop {
            let mut st = lock(&self.state);
            let (family, picked) = loop {
                if self.shutting_down.load(Ordering::SeqCst) {
                    return;
                }
                if st.bg_error.is_none()
                    && !st.manual_compaction
                    && let Some(p) = self.pick_compaction(&mut st)
                {
                    break p;
                }
                if worked {
                    // Going idle: what the compactions freed goes back to the system, for
                    // the page cache to use, before this thread waits.
                    drop(st);
                    crate::memory::release_free_heap();
                    worked = false;
                    st = lock(&self.state);
                    continue;
                }
                st = self.bg_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            };
            worked = true;
            drop(st);
            if picked.for_reads {
                self.counters
                    .read_compactions
                    .fetch_add(1, Ordering::Relaxed);
            }
            let _ = self.run_compaction(&family, &picked, true);
            let levels = picked.level..=picked.output_level();
            // The inputs' version goes before the levels are free: a drop of the family waits
            // for them, then for the purge of what the family's tables leave.
            drop(picked);
            let mut st = lock(&self.state);
            if let Some(f) = st.family_mut(family.id) {
                for busy in &mut f.busy_levels[levels] {
                    *busy = false;
                }
            }
            drop(st);
            self.writer_cv.notify_all();
            self.bg_cv.notify_all();
        }
    }

    /// Runs a compaction whose levels the caller marked busy, and installs its result. With
    /// `allow_move`, a lone input with nothing beneath changes level without a rewrite.
    pub(super) fn run_compaction(
        &self,
        family: &Family,
        c: &Compaction,
        allow_move: bool,
    ) -> Result<()> {
        if allow_move && c.is_trivial_move() {
            let mut st = lock(&self.state);
            if st.family(family.id).is_none() {
                return Ok(());
            }
            let mut edit = compaction::trivial_move_edit(c);
            edit.family = family.id;
            edit.added.iter_mut().for_each(|f| f.family = family.id);
            self.log_and_apply(&mut st, edit)?;
            self.counters.trivial_moves.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let smallest_snapshot = self
            .snapshots
            .oldest(|| SeqNo(self.visible.load(Ordering::Acquire)));
        let alloc = || self.new_file_number();
        // An idle merge gives way to the first write after it started: the writes would
        // otherwise pile up in level 0 behind a job that rewrites the whole tree.
        let started_at = self.visible.load(Ordering::Acquire);
        let cancel = || c.idle_merge && self.visible.load(Ordering::Acquire) != started_at;
        let mut table_options = compaction::compaction_options(
            family.opts.filter_policy,
            &family.table_options,
            c,
            &family.tree_model(),
        );
        // Every family's tables count: they share the budget and the memory.
        let versions: Vec<_> = {
            let st = lock(&self.state);
            st.families()
                .map(|f| st.versions.current(f.family.id))
                .collect()
        };
        if family.opts.partition_over_budget {
            table_options =
                compaction::metadata_layout(table_options, &versions, self.store.pins.budget());
        }
        let memory = crate::process_memory_limit();
        table_options = compaction::filter_format(table_options, &versions, memory);
        let ctx = JobContext {
            store: &self.store,
            table_options: &table_options,
            target_file_bytes: family.opts.target_file_size,
            smallest_snapshot,
            zero_floor: self
                .sequence_pins
                .oldest(|| smallest_snapshot)
                .min(smallest_snapshot),
            newest_snapshot: self.snapshots.newest(),
            new_file_number: &alloc,
            shutting_down: &self.shutting_down,
            cancel: &cancel,
            filter: family.opts.compaction_filter.as_deref(),
            merge: family.opts.merge_operator.as_deref(),
        };
        let job = compaction::run(c, &ctx).and_then(|job| {
            if let Some(j) = job.as_ref().filter(|j| !j.edit.added.is_empty())
                && let Err(e) = self.store.fs.sync_dir(&self.dir)
            {
                self.store
                    .forget_warmed(j.edit.added.iter().map(|f| f.number));
                return Err(io_err("fsync", &self.dir)(e));
            }
            Ok(job)
        });
        let mut st = lock(&self.state);
        let mut job = match job {
            Ok(Some(j)) => j,
            Ok(None) => {
                st.idle_merges_given_up_in_a_row += 1;
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
        if st.family(family.id).is_none() {
            // Dropped meanwhile (by a drop that came during a manual compaction).
            self.store
                .forget_warmed(job.edit.added.iter().map(|f| f.number));
            for f in &job.edit.added {
                let _ = self
                    .store
                    .fs
                    .remove(&self.dir.join(table_file_name(f.number)));
            }
            return Ok(());
        }
        job.edit.family = family.id;
        job.edit.added.iter_mut().for_each(|f| f.family = family.id);
        // If logging fails the outputs stay: the MANIFEST may hold the edit, and the next
        // open removes whatever no version references.
        st.horizon = st.horizon.max(smallest_snapshot);
        self.log_and_apply(&mut st, job.edit)?;
        if c.idle_merge {
            st.idle_merges_given_up_in_a_row = 0;
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

    /// A `compact_range` of `family`: the memtables flushed, then the levels merged
    /// exclusively (background compactions finish what they started and pick nothing new
    /// until it is done, so that no data slips below the levels being merged). It counts in
    /// `State::manual_compactions` from the start, so that a `wait_for_compactions` from
    /// another thread waits for one begun before it.
    pub(super) fn manual_compaction(
        &self,
        family: &Family,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<()> {
        lock(&self.state).manual_compactions += 1;
        let mut marks = ManualMarks {
            db: self,
            exclusive: false,
        };
        self.flush()?;
        {
            let mut st = lock(&self.state);
            loop {
                super::state::running(&st)?;
                let busy = st.families().any(|f| f.busy_levels.iter().any(|b| *b));
                if !st.manual_compaction && !busy {
                    break;
                }
                st = self.writer_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.manual_compaction = true;
            marks.exclusive = true;
        }
        self.manual_compaction_levels(family, begin, end)
    }

    /// Merges every level down into the deepest one holding data in the range; the last step
    /// takes every file of the deepest level in the range, so that all of it is rewritten
    /// without overwritten versions or tombstones that no snapshot needs.
    pub(super) fn manual_compaction_levels(
        &self,
        family: &Family,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<()> {
        let current = || lock(&self.state).versions.current(family.id);
        if family.targets.policy != crate::options::MergePolicy::Leveling {
            return self.manual_compaction_tiered(family, &current());
        }
        let deepest = {
            let v = current();
            (0..NUM_LEVELS)
                .rev()
                .find(|&l| !v.overlapping(l, begin, end).is_empty())
        };
        let Some(deepest) = deepest else {
            return Ok(());
        };
        let mut merged_into_deepest = false;
        for level in 0..deepest {
            let v = current();
            let inputs = v.overlapping(level, begin, end);
            if inputs.is_empty() {
                continue;
            }
            let mut c = compaction::with_next_level(&v, level, inputs);
            if level + 1 == deepest {
                // Widen to the whole range (the files in between included, so that the
                // outputs never overlap a file left in place).
                let order = &v.order;
                let lo = order.least(c.inputs.iter().map(|f| f.smallest_user_key()));
                let hi = order.greatest(c.inputs.iter().map(|f| f.largest_user_key()));
                let lo = match (begin, lo) {
                    (Some(b), Some(l)) => Some(order.min(b, l)),
                    _ => None,
                };
                let hi = match (end, hi) {
                    (Some(e), Some(h)) => Some(order.max(e, h)),
                    _ => None,
                };
                c.next_inputs = v.overlapping(deepest, lo, hi);
                merged_into_deepest = true;
            }
            // A manual compaction rewrites even a lone file.
            self.run_compaction(family, &c, false)?;
        }
        if !merged_into_deepest {
            // The deepest level is rewritten in place, so that compacting again does not
            // walk the data down the empty levels below.
            // (Level 0, whose files overlap, goes into level 1.)
            let v = current();
            let inputs = v.overlapping(deepest, begin, end);
            let c = if deepest == 0 {
                compaction::with_next_level(&v, 0, inputs)
            } else {
                Compaction {
                    level: deepest,
                    output_level: deepest,
                    inputs,
                    between: Vec::new(),
                    next_inputs: Vec::new(),
                    version: v.clone(),
                    for_reads: false,
                    idle_merge: false,
                }
            };
            self.run_compaction(family, &c, false)?;
        }
        Ok(())
    }

    /// A manual compaction under the tiered policies: every run of the tree, whatever the
    /// range, merged into one in the bottom slot of the deepest level holding data. A run
    /// is taken whole: part of a run moved below the runs under it would put older
    /// versions above newer ones.
    fn manual_compaction_tiered(
        &self,
        family: &Family,
        v: &Arc<crate::version::Version>,
    ) -> Result<()> {
        let levels: Vec<usize> = (0..NUM_LEVELS)
            .filter(|&l| !v.levels[l].is_empty())
            .collect();
        let (Some(&first), Some(&last)) = (levels.first(), levels.last()) else {
            return Ok(());
        };
        let targets = &family.targets;
        let output = targets
            .physical(targets.tree_level(last))
            .end
            .saturating_sub(1)
            .max(last);
        let c = Compaction {
            level: first,
            output_level: output,
            inputs: v.levels[first].clone(),
            between: levels
                .iter()
                .filter(|&&l| l > first && l < output)
                .map(|&l| (l, v.levels[l].clone()))
                .collect(),
            next_inputs: if output > first {
                v.levels[output].clone()
            } else {
                Vec::new()
            },
            version: v.clone(),
            for_reads: false,
            idle_merge: false,
        };
        self.run_compaction(family, &c, false)
    }

    /// Removes files no version needs: old WALs and MANIFESTs, SSTs left by a crash, and
    /// temporary files. Failures only leave garbage for the next open.
    pub(super) fn delete_obsolete_files(&self, names: &[String]) {
        let st = lock(&self.state);
        let live: std::collections::HashSet<FileNumber> =
            st.versions.files().map(|(_, _, f)| f.number).collect();
        let manifest = crate::version::manifest_file_name(st.versions.manifest_number());
        let mut retire = Vec::new();
        for name in names {
            let remove = if let Some(rest) = name.strip_prefix("MANIFEST-") {
                rest.parse::<u64>().is_ok() && *name != manifest
            } else if let Some((n, ext)) = parse_file_name(name) {
                match ext {
                    "wal" if n < st.versions.log_number => {
                        retire.push(n);
                        false
                    }
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
        drop(st);
        for n in retire {
            self.retire_wal(n);
        }
    }
}

/// What a manual compaction marks in the state, undone when it ends, by returning or by a
/// panic (in a comparator, merge operator or compaction filter of the user's, on the
/// caller's thread). A panic also poisons the database: the levels it was merging are in
/// no known state, and background compactions and waits must not go on as if it had ended.
struct ManualMarks<'a> {
    db: &'a DbInner,
    /// It set `State::manual_compaction`.
    exclusive: bool,
}

impl Drop for ManualMarks<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.db.state);
        st.manual_compactions -= 1;
        if self.exclusive {
            st.manual_compaction = false;
        }
        if std::thread::panicking() {
            let e = Error::Poisoned("a compact_range panicked".into());
            self.db.poison(&mut st, &e);
        }
        drop(st);
        self.db.writer_cv.notify_all();
        self.db.bg_cv.notify_all();
    }
}

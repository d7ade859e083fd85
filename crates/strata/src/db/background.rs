//! Background work: flushing memtables to level-0 tables, compactions (automatic, manual
//! and the idle merge), and deleting the files no version needs.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::write::QueuedWrite;
use super::{DbInner, State, parse_file_name};
use crate::compaction::LevelTargets;
use crate::compaction::{self, Compaction, JobContext};
use crate::error::{Error, Result};
use crate::filter_policy::{self, TreeModel};
use crate::key::{FileNumber, Level, NUM_LEVELS, SeqNo, ValueKind, parse_internal_key};
use crate::log::{LogKind, LogWriter, header_record};
use crate::memtable::MemTable;
use crate::merge::MergeOperator;
use crate::mutex::lock;
use crate::options::Options;
use crate::sstable::TableOptions;
use crate::sstable::builder::TableBuilder;
use crate::version::edit::{NewFile, VersionEdit};
use crate::version::set::VersionSet;
use crate::version::{TableStore, io_err, table_file_name, wal_file_name};

pub(super) fn create_wal(store: &TableStore, number: FileNumber) -> Result<LogWriter> {
    create_wal_in(store.fs.as_ref(), &store.dir, number)
}

/// [`create_wal`] in any directory: a checkpoint's too.
pub(super) fn create_wal_in(
    fs: &dyn crate::fs::FileSystem,
    dir: &std::path::Path,
    number: FileNumber,
) -> Result<LogWriter> {
    let path = dir.join(wal_file_name(number));
    let file = fs.create_log(&path).map_err(io_err("create", &path))?;
    let mut w = LogWriter::new(file, path);
    w.add_record(&header_record(LogKind::Wal))?;
    w.flush()?;
    // The WAL's directory entry must be durable before synced writes land in it.
    fs.sync_dir(dir).map_err(io_err("fsync", dir))?;
    Ok(w)
}

/// Writes a memtable to a new level-0 SST (synced) and describes it for an edit.
pub(super) fn write_level0(
    store: &TableStore,
    opts: &TableOptions,
    options: &Options,
    versions: &mut VersionSet,
    mem: &Arc<MemTable>,
    fold: Option<&dyn MergeOperator>,
) -> Result<NewFile> {
    let number = versions.new_file_number();
    let targets = LevelTargets::of(options);
    let model = TreeModel {
        targets: &targets,
        buffer_bytes: options.write_buffer_size as u64,
    };
    let opts =
        filter_policy::flush_options(options.filter_policy, opts, &versions.current(), &model);
    // No snapshot lives while the database opens.
    build_table_from_memtable(store, &opts, number, mem, fold.map(|op| (op, SeqNo::MAX)))
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
        Ok(s) => Ok(NewFile {
            level: Level(0),
            number,
            size: s.file_size,
            smallest: s.smallest,
            largest: s.largest,
            entries: s.entries,
            deletions: s.deletions,
            range_deletions: s.range_deletions,
            filter_millibits: Some(s.filter_millibits),
        }),
        Err(e) => {
            let _ = store.fs.remove(&path);
            Err(e)
        }
    }
}

impl DbInner {
    /// The tree's shape as Monkey's filter allocation sees it.
    fn tree_model(&self) -> TreeModel<'_> {
        TreeModel {
            targets: &self.targets,
            buffer_bytes: self.opts.write_buffer_size as u64,
        }
    }

    pub(super) fn flush(&self) -> Result<()> {
        self.join_write_queue(QueuedWrite::SwitchMemtable, false)?;
        let mut st = lock(&self.state);
        // Memtables are flushed oldest first, so the flush is done when the newest memtable
        // now waiting (the one switched out above, or a later one) has gone: under writes
        // faster than flushes, waiting for none to be left could wait for the writes to stop.
        let Some(newest) = st.imm.back().cloned() else {
            return Ok(());
        };
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Poisoned(e.to_string()));
            }
            if !st.imm.iter().any(|m| Arc::ptr_eq(m, &newest)) {
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
                if !st.imm.is_empty() && st.bg_error.is_none() {
                    break;
                }
                let idle_poll = self
                    .opts
                    .idle_merge_after
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
            let table_options = filter_policy::flush_options(
                self.opts.filter_policy,
                &self.table_options,
                &st.versions.current(),
                &self.tree_model(),
            );
            drop(st);
            // Operands every reader sees fold: any snapshot taken from now on is newer than
            // the memtable, which takes no more writes.
            let oldest = self
                .snapshots
                .oldest(|| SeqNo(self.visible.load(Ordering::Acquire)));
            let fold = self.opts.merge_operator.as_deref().map(|op| (op, oldest));
            let result = build_table_from_memtable(&self.store, &table_options, number, &mem, fold)
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
                // Published below, with the memtable gone from the list.
                self.log_and_apply_unpublished(&mut st, edit)?;
                self.counters.flush_bytes.fetch_add(size, Ordering::Relaxed);
                self.counters.flushes.fetch_add(1, Ordering::Relaxed);
                Ok(mem.wal_number())
            });
            match result {
                Ok(old_wal) => {
                    st.imm.pop_front();
                    if fold.is_some() {
                        st.horizon = st.horizon.max(oldest);
                    }
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
    pub(super) fn switch_memtable_from_flush_thread<'a>(
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
        if st.idle_merge_requested
            || st.bg_error.is_some()
            || !st.imm.is_empty()
            || st.idle_mark.1.elapsed() < quiet
        {
            return st;
        }
        let mem_bytes = st.mem.approximate_size() as u64;
        if compaction::idle_merge_output_level(&st.versions.current(), &self.targets, mem_bytes)
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
        st.idle_merge_requested = true;
        self.bg_cv.notify_all();
        st
    }

    pub(super) fn compaction_loop(self: &Arc<Self>) {
        loop {
            let mut st = lock(&self.state);
            let picked = loop {
                if self.shutting_down.load(Ordering::SeqCst) {
                    return;
                }
                if st.bg_error.is_none() && !st.manual_compaction {
                    let v = st.versions.current();
                    if st.idle_merge_requested
                        && st.imm.is_empty()
                        && !st.busy_levels.iter().any(|&b| b)
                    {
                        st.idle_merge_requested = false;
                        if let Some(c) = compaction::idle_merge(&v, &self.targets) {
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
    pub(super) fn run_compaction(&self, c: &Compaction, allow_move: bool) -> Result<()> {
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
        // An idle merge gives way to the first write after it started: the writes would
        // otherwise pile up in level 0 behind a job that rewrites the whole tree.
        let started_at = self.visible.load(Ordering::Acquire);
        let cancel = || c.idle_merge && self.visible.load(Ordering::Acquire) != started_at;
        let table_options = filter_policy::compaction_options(
            self.opts.filter_policy,
            &self.table_options,
            c,
            &self.tree_model(),
        );
        let ctx = JobContext {
            store: &self.store,
            table_options: &table_options,
            target_file_bytes: self.opts.target_file_size,
            smallest_snapshot,
            newest_snapshot: self.snapshots.newest(),
            new_file_number: &alloc,
            shutting_down: &self.shutting_down,
            cancel: &cancel,
            filter: self.opts.compaction_filter.as_deref(),
            merge: self.opts.merge_operator.as_deref(),
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

    /// Runs a manual compaction exclusively: background compactions finish what they
    /// started and pick nothing new until it is done, so that no data slips below the levels
    /// being merged.
    pub(super) fn compact_range(&self, begin: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
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
    pub(super) fn manual_compaction_levels(
        &self,
        begin: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<()> {
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
                    idle_merge: false,
                }
            };
            self.run_compaction(&c, false)?;
        }
        Ok(())
    }

    /// Removes files no version needs: old WALs and MANIFESTs, SSTs left by a crash, and
    /// temporary files. Failures only leave garbage for the next open.
    pub(super) fn delete_obsolete_files(&self, names: &[String]) {
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
}

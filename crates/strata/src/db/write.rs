//! The write path: writers queue up, a leader logs the group to the WAL in one record and
//! applies it to the memtable, and a full memtable is switched for a new one with a new WAL.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::queue::{QueuedWrite, Writer};
use super::state::{DbInner, State};
use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::key::SeqNo;
use crate::memtable::{MemTable, Recycling};
use crate::mutex::lock;
use crate::wal::create_wal;

/// Batches grouped into one WAL record stop growing past this size.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// The memtable buckets a group's leader asks for before it writes the WAL: about what a
/// core's first-level cache holds, with room for the entries themselves.
const PREFETCH_BUCKETS: usize = 256;

/// How long a synced group's leader waits for the writers of the last group to queue up: a
/// fraction of an fdatasync (about 140 us on the disks Strata was measured on).
const SYNC_GATHER: Duration = Duration::from_micros(100);
/// How long a synced writer behind a leader yields its CPU, rather than sleeping, while its
/// group's fdatasync runs: a few fdatasyncs.
const SYNC_YIELD: Duration = Duration::from_micros(400);
/// A yield that takes longer than this, most of an fdatasync, means the writer is starved of
/// the CPU: it stops yielding and sleeps. Shorter slow yields are the other writers of the
/// group running their own work between its yields, so a tighter bound puts writers to sleep
/// that would have been done in time (docs/design.md, "Constants and their reasons").
const SLOW_YIELD: Duration = Duration::from_micros(100);
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

/// The active memtables a write group goes into: the default family's, and the others' by
/// family id.
pub(super) struct Memtables {
    pub(super) default: Arc<MemTable>,
    pub(super) others: Vec<(u32, Arc<MemTable>)>,
}

impl DbInner {
    /// Joins the write queue with `kind` and returns once it is done: by this thread as the
    /// leader of a group, or by another leader whose group took it in.
    pub(super) fn join_write_queue(&self, kind: QueuedWrite, sync: bool) -> Result<()> {
        let w = Writer::reuse_or_new(kind, sync);
        let result = self.write_as(&w);
        w.keep_for_reuse();
        result
    }

    /// [`DbInner::join_write_queue`] for the writer `w`, not yet queued.
    fn write_as(&self, w: &Arc<Writer>) -> Result<()> {
        let mut st = lock(&self.state);
        st.queue.push_back(Arc::clone(w));
        if w.sync && !st.queue.front().is_some_and(|f| Arc::ptr_eq(f, w)) {
            drop(st);
            if yield_until_done(w) {
                return lock(&w.result).take().unwrap_or(Ok(()));
            }
            st = lock(&self.state);
        }
        // Acquire: pairs with the Release store by the leader that completed this writer.
        while !w.done.load(Ordering::Acquire)
            && !st.queue.front().is_some_and(|f| Arc::ptr_eq(f, w))
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
        let force = matches!(w.kind, QueuedWrite::SwitchMemtable);
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
        let mut group = std::mem::take(&mut st.spare_group);
        let mut bytes = 0usize;
        let mut sync_group = false;
        let first_size = match &w.kind {
            QueuedWrite::Batch(b) | QueuedWrite::Checked { batch: b, .. } => b.approximate_size(),
            QueuedWrite::SwitchMemtable => 0,
        };
        if let QueuedWrite::Checked { snapshot, keys, .. } = &w.kind {
            // Every group before this one is in the memtables, and none can follow while this
            // writer leads: the check sees every write before its own. It reads tables, so
            // it runs without the state lock.
            drop(st);
            let checked = self.check_unwritten_since(keys, *snapshot);
            st = lock(&self.state);
            if let Err(e) = checked {
                st.queue.pop_front();
                st.spare_group = group;
                self.writer_cv.notify_all();
                return Err(e);
            }
            group.push(Arc::clone(w));
            bytes = first_size;
            sync_group = w.sync;
        }
        // Small writes do not wait behind a large group.
        let limit = if first_size <= 128 << 10 {
            first_size + (128 << 10)
        } else {
            MAX_GROUP_BYTES
        };
        for cand in st.queue.iter().skip(group.len()) {
            let QueuedWrite::Batch(b) = &cand.kind else {
                break;
            };
            if matches!(w.kind, QueuedWrite::Checked { .. }) {
                break;
            }
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
                QueuedWrite::Batch(b) | QueuedWrite::Checked { batch: b, .. } => {
                    u64::from(b.count())
                }
                QueuedWrite::SwitchMemtable => 0,
            })
            .sum();
        let first_seq = SeqNo(st.last_allocated.0 + 1);
        st.last_allocated = SeqNo(st.last_allocated.0 + count);
        let last_seq = st.last_allocated;
        // The other families' memtables: no allocation where there are none.
        let mems = Memtables {
            default: st.default.mem.clone(),
            others: st
                .others
                .iter()
                .map(|f| (f.family.id, f.mem.clone()))
                .collect(),
        };
        drop(st);

        let result = self.write_group(&group, first_seq, sync_group, &mems, bytes);
        self.complete_group(w, group, result, last_seq)
    }

    /// Publishes a group's writes to readers (or poisons the database when they failed),
    /// hands every follower its result and takes the group off the queue.
    fn complete_group(
        &self,
        leader: &Arc<Writer>,
        mut group: Vec<Arc<Writer>>,
        result: Result<()>,
        last_seq: SeqNo,
    ) -> Result<()> {
        let mut st = lock(&self.state);
        match &result {
            Ok(()) => {
                // Release: readers that load this value see every memtable insert before it.
                self.visible.store(last_seq.0, Ordering::Release);
            }
            Err(e) => self.poison(&mut st, e),
        }
        let followers = group.len() > 1;
        for g in group.drain(..) {
            st.queue.pop_front();
            if !Arc::ptr_eq(&g, leader) {
                *lock(&g.result) = Some(match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(e.duplicate()),
                });
                g.done.store(true, Ordering::Release);
            }
        }
        // Only writers in the queue wait for this: followers just completed and the next
        // leader. A lone writer with nobody behind it skips the wake-up, a system call.
        if followers || !st.queue.is_empty() {
            self.writer_cv.notify_all();
        }
        st.spare_group = group;
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
    pub(super) fn gather_sync_writers<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
    ) -> MutexGuard<'a, State> {
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

    /// A transaction's commit check: `Err(Conflict)` when any of `keys` has an entry newer
    /// than `snapshot`. Runs as the leader, so that no write can come between the check and
    /// the transaction's own.
    fn check_unwritten_since(&self, keys: &[Vec<u8>], snapshot: SeqNo) -> Result<()> {
        for key in keys {
            if self.newest_seq(key)?.is_some_and(|seq| seq > snapshot) {
                return Err(Error::Conflict { key: key.clone() });
            }
        }
        Ok(())
    }

    /// Logs a group and inserts it into the families' memtables. Runs as the leader, without
    /// `state`.
    pub(super) fn write_group(
        &self,
        group: &[Arc<Writer>],
        first_seq: SeqNo,
        sync: bool,
        mems: &Memtables,
        bytes: usize,
    ) -> Result<()> {
        let merged;
        let batch: &WriteBatch = match group {
            [only] => match &only.kind {
                QueuedWrite::Batch(b) | QueuedWrite::Checked { batch: b, .. } => b,
                QueuedWrite::SwitchMemtable => return Ok(()),
            },
            _ => {
                let mut m = WriteBatch::new();
                for g in group {
                    if let QueuedWrite::Batch(b) = &g.kind {
                        b.append_to(&mut m);
                    }
                }
                merged = m;
                &merged
            }
        };
        // Each insert below first touches its key's hash bucket, a line of a table of
        // megabytes that is seldom in cache: asked for now, those misses overlap the WAL write.
        for op in batch.iter().take(PREFETCH_BUCKETS).flatten() {
            match op.family {
                0 => mems.default.prefetch_bucket(op.key),
                id => {
                    if let Some((_, m)) = mems.others.iter().find(|(f, _)| *f == id) {
                        m.prefetch_bucket(op.key);
                    }
                }
            }
        }
        {
            let mut wal = lock(&self.wal);
            let w = wal.as_mut().ok_or(Error::Closed)?;
            w.add_record_parts(&[&batch.header(first_seq), batch.ops_bytes()])?;
            if sync {
                w.sync()?;
            } else {
                w.flush()?;
            }
            if let Some(listener) = &self.opts.wal_listener {
                listener.logged(first_seq.0, batch);
            }
        }
        self.counters
            .wal_bytes
            .fetch_add(bytes as u64 + 8, Ordering::Relaxed);
        let mut user = 0u64;
        // The default family's entries of a group of several are counted and queued for its
        // list together; a single entry goes in alone, without a list of its own.
        let mut default = (batch.len() > 1).then(|| mems.default.adds(batch.len()));
        for (seq, op) in (first_seq.0..).zip(batch.iter()) {
            let op = op.map_err(|e| e.at(&self.dir, 0))?;
            let seq = SeqNo(seq);
            match (op.family, default.as_mut()) {
                (0, Some(adds)) => adds.add(seq, op.kind, op.key, op.value),
                (0, None) => mems.default.add(seq, op.kind, op.key, op.value),
                // A family dropped since the batch was checked takes nothing, as at recovery.
                (id, _) => {
                    if let Some((_, m)) = mems.others.iter().find(|(f, _)| *f == id) {
                        m.add(seq, op.kind, op.key, op.value);
                    }
                }
            }
            user += (op.key.len() + op.value.len()) as u64;
        }
        drop(default);
        self.counters.user_bytes.fetch_add(user, Ordering::Relaxed);
        Ok(())
    }

    /// Makes sure the active memtable has room, switching it (and the WAL) when full or when
    /// `force`d, and slowing or stopping writers while flush and compaction are behind.
    /// Requires: the caller leads the writer queue.
    pub(super) fn make_room_for_write<'a>(
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
            let l0 = st.level0_files();
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
            let full = st
                .families()
                .any(|f| f.mem.approximate_size() >= f.family.opts.write_buffer_size);
            if !force && !full {
                return (st, Ok(()));
            }
            if force && st.families().all(|f| f.mem.is_empty()) {
                return (st, Ok(()));
            }
            if st.pending_flushes() >= self.opts.max_immutable_memtables
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
            // Every family's memtable switches: the generation is flushed as a whole.
            for f in st.families_mut() {
                let opts = &f.family.opts;
                let fresh = Arc::new(MemTable::new(
                    number,
                    opts.write_buffer_size,
                    opts.key_order(),
                    Some(Recycling {
                        pool: self.chunk_pool.clone(),
                        family: f.family.id,
                    }),
                ));
                let old = std::mem::replace(&mut f.mem, fresh);
                f.imm.push_back(old);
            }
            st.wal_number = number;
            self.install_super_version(&st);
            self.bg_cv.notify_all();
            return (st, Ok(()));
        }
    }
}

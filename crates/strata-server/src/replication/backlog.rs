//! The replication backlog: the newest write batches, as the engine logged them, kept in
//! memory for the replicas that follow (Redis's `repl-backlog-size`). Older batches are read
//! back from the WAL files (`Db::updates_since`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// One logged write group: the sequence numbers `first..end` and its WAL record.
pub(crate) struct Record {
    pub first: u64,
    pub end: u64,
    pub bytes: Arc<[u8]>,
}

/// What the backlog holds for a replica that wants the batches from a sequence number on.
pub(crate) enum From {
    /// The batches from there on (none yet when it is ahead of them all).
    Here(Vec<Arc<Record>>),
    /// It starts later: the WAL files hold what comes before.
    Before,
}

#[derive(Default)]
struct Inner {
    records: VecDeque<Arc<Record>>,
    bytes: usize,
    /// One past the newest sequence number logged since the backlog was made active.
    pushed_end: u64,
    /// Bumped by [`Backlog::wake`], so that waiting senders look at their flags.
    generation: u64,
    /// Senders waiting on `more`: a write tells them only when there are some.
    waiting: usize,
}

pub(crate) struct Backlog {
    inner: Mutex<Inner>,
    more: Condvar,
    /// Senders gathering batches wait here, for [`Backlog::wake`] only.
    urgent: Condvar,
    /// Off until a replica first attaches: until then a write costs nothing here.
    active: AtomicBool,
    limit: AtomicUsize,
}

/// Most batches handed to a sender at once.
const MAX_TAKEN: usize = 4096;

/// 64 MiB: a replica that falls this far behind reads the WAL files instead (a second of
/// writes at 500,000 SETs of 100 bytes a second).
pub(crate) const DEFAULT_LIMIT: usize = 64 << 20;

impl Backlog {
    pub(crate) fn new() -> Backlog {
        Backlog {
            inner: Mutex::new(Inner::default()),
            more: Condvar::new(),
            urgent: Condvar::new(),
            active: AtomicBool::new(false),
            limit: AtomicUsize::new(DEFAULT_LIMIT),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn activate(&self) {
        // Release: pairs with the Acquire of a writer's check.
        self.active.store(true, Ordering::Release);
    }

    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes.max(1 << 14), Ordering::Relaxed);
    }

    /// The first sequence number held, and the bytes held.
    pub(crate) fn extent(&self) -> (u64, usize) {
        let inner = self.lock();
        (inner.records.front().map_or(0, |r| r.first), inner.bytes)
    }

    /// The batches from sequence number `next` on, when the backlog reaches back to it.
    pub(crate) fn from(&self, next: u64) -> From {
        let inner = self.lock();
        if next >= inner.pushed_end && inner.pushed_end > 0 {
            return From::Here(Vec::new());
        }
        match inner.records.front() {
            Some(first) if first.first <= next => {
                // In order of their numbers: the first that ends past `next` is found by
                // halving, not by walking the whole backlog under its lock.
                let from = inner.records.partition_point(|r| r.end <= next);
                From::Here(
                    inner
                        .records
                        .range(from..)
                        .take(MAX_TAKEN)
                        .cloned()
                        .collect(),
                )
            }
            _ => From::Before,
        }
    }

    /// Waits until a batch ends past `next`, [`Backlog::wake`] is called, or `timeout`
    /// passes.
    pub(crate) fn wait(&self, next: u64, timeout: Duration) {
        let mut inner = self.lock();
        let generation = inner.generation;
        inner.waiting += 1;
        let (mut inner, _) = self
            .more
            .wait_timeout_while(inner, timeout, |i| {
                i.pushed_end <= next && i.generation == generation
            })
            .unwrap_or_else(|e| e.into_inner());
        inner.waiting -= 1;
    }

    /// Waits `timeout` for more batches to gather, unless [`Backlog::wake`] is called (WAIT
    /// asks for acknowledgements now).
    pub(crate) fn gather(&self, timeout: Duration) {
        let inner = self.lock();
        let generation = inner.generation;
        let _ = self
            .urgent
            .wait_timeout_while(inner, timeout, |i| i.generation == generation)
            .unwrap_or_else(|e| e.into_inner());
    }

    /// Wakes every waiting sender.
    pub(crate) fn wake(&self) {
        self.lock().generation += 1;
        self.more.notify_all();
        self.urgent.notify_all();
    }
}

impl strata::WalListener for Backlog {
    fn logged(&self, first_seq: u64, batch: &strata::WriteBatch) {
        if !self.active() {
            return;
        }
        let r = Arc::new(Record {
            first: first_seq,
            end: first_seq + batch.len() as u64,
            bytes: batch.to_record(first_seq).into(),
        });
        let limit = self.limit();
        let waiting = {
            let mut inner = self.lock();
            inner.bytes += r.bytes.len();
            inner.pushed_end = r.end;
            inner.records.push_back(r);
            while inner.bytes > limit && inner.records.len() > 1 {
                if let Some(old) = inner.records.pop_front() {
                    inner.bytes -= old.bytes.len();
                }
            }
            inner.waiting
        };
        // A notification is a system call even with nobody waiting.
        if waiting > 0 {
            self.more.notify_all();
        }
    }
}

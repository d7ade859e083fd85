//! Snapshots: a fixed sequence number that reads can name, and that compaction respects.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::key::SeqNo;

/// The sequence numbers of live snapshots, counted.
#[derive(Default)]
pub(crate) struct SnapshotList {
    live: Mutex<BTreeMap<SeqNo, usize>>,
}

impl SnapshotList {
    /// Registers a snapshot at the sequence `current()` returns, under the list's lock so that
    /// compaction never misses a snapshot being taken.
    pub(crate) fn acquire(self: &Arc<Self>, current: impl FnOnce() -> SeqNo) -> Snapshot {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let seq = current();
        *live.entry(seq).or_default() += 1;
        Snapshot {
            inner: Arc::new(SnapshotInner {
                seq,
                list: self.clone(),
            }),
        }
    }

    /// The oldest live snapshot, or `current()` when there is none.
    pub(crate) fn oldest(&self, current: impl FnOnce() -> SeqNo) -> SeqNo {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.keys().next().copied().unwrap_or_else(current)
    }

    /// The newest sequence number a snapshot holds, if any snapshot lives.
    pub(crate) fn newest(&self) -> Option<SeqNo> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.keys().next_back().copied()
    }

    pub(crate) fn count(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }
}

struct SnapshotInner {
    seq: SeqNo,
    list: Arc<SnapshotList>,
}

impl Drop for SnapshotInner {
    fn drop(&mut self) {
        let mut live = self.list.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = live.get_mut(&self.seq) {
            *n -= 1;
            if *n == 0 {
                live.remove(&self.seq);
            }
        }
    }
}

/// A consistent point-in-time view of the database. Reads through
/// [`ReadOptions::snapshot`](crate::ReadOptions) see exactly the writes made before it was
/// taken, while writes and compactions go on. Released when the last clone is dropped.
#[derive(Clone)]
pub struct Snapshot {
    inner: Arc<SnapshotInner>,
}

impl Snapshot {
    /// The sequence number of the last write the snapshot sees.
    pub fn sequence(&self) -> u64 {
        self.inner.seq.0
    }

    pub(crate) fn seq(&self) -> SeqNo {
        self.inner.seq
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("sequence", &self.inner.seq.0)
            .finish()
    }
}

/// Keeps compaction from writing a write made after it with sequence number zero (the bottom
/// of the tree forgets the numbers every reader sees), while it lives: the newest sequence
/// number of a key written after the pin reads above [`SequencePin::sequence`] until the pin
/// is dropped. Unlike a [`Snapshot`] it keeps no old version alive: compaction drops
/// overwritten versions and tombstones as it would without it. The server's `WATCH` holds one.
#[derive(Debug)]
pub struct SequencePin(pub(crate) Snapshot);

impl SequencePin {
    /// The sequence number of the last write made before the pin.
    pub fn sequence(&self) -> u64 {
        self.0.sequence()
    }
}

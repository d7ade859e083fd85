//! The write queue's entries: what each waiting writer brings, and where its leader leaves
//! the result.

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::key::SeqNo;

/// What a writer in the queue brings. A memtable switch queues with the batches because it
/// replaces the WAL, which only the write leader touches.
pub(super) enum QueuedWrite {
    Batch(WriteBatch),
    /// A transaction's writes, written only if none of `keys` was written after `snapshot`.
    /// It forms a group of its own, so that the check sees every write before it.
    Checked {
        batch: WriteBatch,
        snapshot: SeqNo,
        keys: Vec<Vec<u8>>,
    },
    /// Turn the active memtable immutable (for `flush` and the age timer).
    SwitchMemtable,
}

/// A thread in the write queue, waiting for its turn or for the leader to do its write.
pub(super) struct Writer {
    pub(super) kind: QueuedWrite,
    pub(super) sync: bool,
    pub(super) done: AtomicBool,
    pub(super) result: Mutex<Option<Result<()>>>,
}

//! The write queue's entries: what each waiting writer brings, and where its leader leaves
//! the result.

use std::cell::RefCell;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

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

thread_local! {
    /// The writer this thread queued last, for its next write: a write then allocates no
    /// writer of its own once the queue and its leader have let go of the last one.
    static SPARE: RefCell<Option<Arc<Writer>>> = const { RefCell::new(None) };
}

impl Writer {
    /// A writer for `kind`: this thread's last one when nothing else holds it any more, else
    /// a new one.
    pub(super) fn reuse_or_new(kind: QueuedWrite, sync: bool) -> Arc<Writer> {
        // None in a thread-local's destructor, once `SPARE` is gone.
        let spare = SPARE.try_with(|s| s.borrow_mut().take()).ok().flatten();
        if let Some(mut w) = spare
            && let Some(inner) = Arc::get_mut(&mut w)
        {
            inner.kind = kind;
            inner.sync = sync;
            *inner.done.get_mut() = false;
            *inner.result.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
            return w;
        }
        Arc::new(Writer {
            kind,
            sync,
            done: AtomicBool::new(false),
            result: Mutex::new(None),
        })
    }

    /// Keeps this writer for the thread's next write when nothing else holds it, without the
    /// write it carried (a batch can be large, and a thread may not write again for long).
    pub(super) fn keep_for_reuse(mut self: Arc<Self>) {
        if let Some(inner) = Arc::get_mut(&mut self) {
            inner.kind = QueuedWrite::SwitchMemtable;
            // Fails only in a thread-local's destructor, where the writer is simply dropped.
            let _ = SPARE.try_with(|s| *s.borrow_mut() = Some(self));
        }
    }
}

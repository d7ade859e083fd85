//! The writes of the `EXEC` a thread runs, while its commands run: where its own reads see
//! them and no other thread's do (see `transaction.rs`), and the stripes it holds.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, RangeBounds};
use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

use strata::WriteBatch;

use super::engine;
use crate::shared::Shared;

/// The writes of an `EXEC` running now.
#[derive(Default)]
pub(crate) struct ExecWrites {
    /// Engine key to stored bytes (`None`: deleted), for reads inside the transaction.
    pub(super) values: HashMap<Vec<u8>, Option<Vec<u8>>>,
    pub(super) batch: WriteBatch,
    /// Keys to drop from the hot-key cache once written.
    pub(super) cached: Vec<Vec<u8>>,
}

thread_local! {
    /// The writes of the `EXEC` this thread runs, while its commands run.
    static WRITES: RefCell<Option<ExecWrites>> = const { RefCell::new(None) };
    /// The stripes the `EXEC` this thread runs holds, sorted: its commands take them again
    /// as though free ([`held_by_this_thread`]).
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// True inside an `EXEC` on this thread, while its commands run.
pub(super) fn in_exec() -> bool {
    WRITES.with_borrow(Option::is_some)
}

/// True when the `EXEC` running on this thread holds stripe `i`.
pub(super) fn held_by_this_thread(i: usize) -> bool {
    HELD.with_borrow(|held| held.binary_search(&i).is_ok())
}

/// The stored bytes the `EXEC` running on this thread wrote under an engine key, if it
/// wrote it.
pub(super) fn pending(key: &[u8]) -> Option<Option<Vec<u8>>> {
    WRITES.with_borrow(|w| w.as_ref()?.values.get(key).cloned())
}

/// Engine keys to stored bytes, in order.
pub(super) type Entries = BTreeMap<Vec<u8>, Vec<u8>>;

/// The engine entries in `range` as the `EXEC` running on this thread sees them: the
/// engine's, with the transaction's own writes over them. `None` outside `EXEC`.
pub(super) fn merged_range(
    shared: &Shared,
    range: &(Bound<Vec<u8>>, Bound<Vec<u8>>),
) -> Result<Option<Entries>, String> {
    if !in_exec() {
        return Ok(None);
    }
    let mut merged = BTreeMap::new();
    for e in shared
        .db
        .scan_with(range.clone(), strata::ReadOptions::default(), false)
        .map_err(engine)?
    {
        let (k, v) = e.map_err(engine)?;
        merged.insert(k, v);
    }
    WRITES.with_borrow(|w| {
        for (k, v) in w.iter().flat_map(|w| &w.values) {
            if !range.contains(k) {
                continue;
            }
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
    });
    Ok(Some(merged))
}

/// Holds a command's writes (engine key and stored bytes, `None` deleting; ranges of
/// elements deleted) in the batch of
/// the `EXEC` running on this thread, and the keys to drop from the cache once written.
/// False, holding nothing, when none runs.
pub(super) fn hold(
    ops: &mut Vec<(Vec<u8>, Option<Vec<u8>>)>,
    ranges: &[(Vec<u8>, Vec<u8>)],
    keys: &[Vec<u8>],
) -> bool {
    WRITES.with_borrow_mut(|w| {
        let Some(w) = w.as_mut() else {
            return false;
        };
        // A range goes in ahead of the command's other writes: it deletes elements of a
        // version no later write of the transaction uses.
        for (lo, hi) in ranges {
            w.batch.delete_range(lo, hi);
        }
        for (k, v) in ops.drain(..) {
            match &v {
                Some(v) => w.batch.put(&k, v),
                None => w.batch.delete(&k),
            }
            w.values.insert(k, v);
        }
        w.cached.extend_from_slice(keys);
        true
    })
}

/// The locks an `EXEC` runs under.
pub(crate) enum ExecLock<'a> {
    /// Alone: no other command runs.
    Alone { _all: RwLockWriteGuard<'a, ()> },
    /// The stripes of its keys; [`HELD`] names them until this is dropped.
    Keys {
        _keyspace: RwLockReadGuard<'a, ()>,
        _stripes: Vec<MutexGuard<'a, ()>>,
        _held: HeldMark,
    },
}

/// Clears [`HELD`] when dropped (the stripes it names are released just before, by the same
/// thread).
pub(crate) struct HeldMark;

impl Drop for HeldMark {
    fn drop(&mut self) {
        HELD.with_borrow_mut(Vec::clear);
    }
}

/// Names the stripes the `EXEC` running on this thread holds (sorted), until the mark is
/// dropped.
pub(super) fn hold_stripes(held: Vec<usize>) -> HeldMark {
    HELD.set(held);
    HeldMark
}

/// Starts the writes of an `EXEC` on this thread.
pub(super) fn begin() {
    WRITES.set(Some(ExecWrites::default()));
}

/// Ends the writes of the `EXEC` running on this thread and hands them over.
pub(super) fn end() -> ExecWrites {
    WRITES.take().unwrap_or_default()
}

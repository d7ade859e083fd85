//! MULTI, EXEC, DISCARD, WATCH and UNWATCH.
//!
//! `MULTI` queues a connection's commands until `EXEC`. `EXEC` holds the stripe locks of
//! every key its commands name (from the command table's key positions) and every key
//! watched, from the WATCH check until its writes are in the engine, so no other client's
//! command on those keys comes between its commands; the rest of the keyspace goes on.
//! A transaction with a command that names no keys in the table (KEYS, SCAN, DBSIZE,
//! RANDOMKEY, FLUSHDB, SELECT, ...) or that reaches another database (MOVE, COPY) runs
//! alone instead, under the keyspace's write lock, as FLUSHALL does ([`exec_lock`]).
//!
//! Its writes wait in [`ExecWrites`], kept by the thread running it, where its own reads see
//! them and no other thread's do, and reach the engine as one atomic batch when the last
//! command has run: after a crash a transaction is there whole or not at all. `WATCH`
//! records the engine's sequence number of each key's newest write; `EXEC` answers a null
//! array, running nothing, when any has changed, or when a watched key that was live has
//! expired since. Commands that walk the keyspace inside `EXEC` walk it with the
//! transaction's writes over it ([`merged_range`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, RangeBounds};
use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

use strata::WriteBatch;

use super::{Command, Connection, Ctx, Outcome, engine, lookup, run, write_opts};
use crate::resp::Reply;
use crate::{After, Shared};

/// The writes of an `EXEC` running now.
#[derive(Default)]
pub(crate) struct ExecWrites {
    /// Engine key to stored bytes (`None`: deleted), for reads inside the transaction.
    values: HashMap<Vec<u8>, Option<Vec<u8>>>,
    batch: WriteBatch,
    /// Keys to drop from the hot-key cache once written.
    cached: Vec<Vec<u8>>,
}

thread_local! {
    /// The writes of the `EXEC` this thread runs, while its commands run.
    static WRITES: RefCell<Option<ExecWrites>> = const { RefCell::new(None) };
    /// The stripes the `EXEC` this thread runs holds, sorted: its commands take them again
    /// as though free ([`held_by_this_thread`]).
    static HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// A key as `WATCH` saw it.
pub(crate) struct Watched {
    key: Vec<u8>,
    /// The sequence number of its newest write.
    seq: Option<u64>,
    /// When it expires, if it was live and expiring.
    expires_at: Option<u64>,
}

/// Commands that run at once inside `MULTI` rather than being queued.
pub(super) fn runs_inside_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "reset" | "quit"
    )
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

/// Holds a command's writes (engine key and stored bytes, `None` deleting) in the batch of
/// the `EXEC` running on this thread, and the keys to drop from the cache once written.
/// False, holding nothing, when none runs.
pub(super) fn hold(ops: &mut Vec<(Vec<u8>, Option<Vec<u8>>)>, keys: &[Vec<u8>]) -> bool {
    WRITES.with_borrow_mut(|w| {
        let Some(w) = w.as_mut() else {
            return false;
        };
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

/// The keys a queued command names, by its row's key positions; `None` when the command
/// names none there, or may reach beyond them (another database).
fn named_keys<'q>(cmd: &Command, args: &'q [Vec<u8>]) -> Option<Vec<&'q [u8]>> {
    let (first, last, step) = cmd.keys;
    if first <= 0 || step <= 0 || matches!(cmd.name, "move" | "copy") {
        return None;
    }
    let n = args.len() as i64;
    let last = if last < 0 {
        n + i64::from(last)
    } else {
        i64::from(last)
    };
    let mut keys = Vec::new();
    let mut i = i64::from(first);
    while i <= last.min(n - 1) {
        keys.push(args[i as usize].as_slice());
        i += i64::from(step);
    }
    Some(keys)
}

/// Takes the locks `EXEC` runs under: the stripes of every key it names and watches when
/// the command table names them all, else the keyspace's write lock.
pub(crate) fn exec_lock<'a>(shared: &'a Shared, conn: &Connection) -> ExecLock<'a> {
    let mut keys: Vec<Vec<u8>> = conn.watched.iter().map(|w| w.key.clone()).collect();
    for args in conn.multi.iter().flatten() {
        let named = args
            .first()
            .and_then(|n| lookup(n))
            .and_then(|(_, cmd)| named_keys(cmd, args));
        let Some(named) = named else {
            let all = shared.keyspace.write().unwrap_or_else(|e| e.into_inner());
            return ExecLock::Alone { _all: all };
        };
        keys.extend(
            named
                .into_iter()
                .map(|k| crate::store::data_key(conn.db, k)),
        );
    }
    let keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    let stripes = super::lock_stripes(shared, keys.iter().map(Vec::as_slice));
    let mut held: Vec<usize> = keys.iter().map(|k| shared.stripe(k)).collect();
    held.sort_unstable();
    held.dedup();
    HELD.set(held);
    ExecLock::Keys {
        _keyspace: keyspace,
        _stripes: stripes,
        _held: HeldMark,
    }
}

pub(super) fn multi(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    if cx.conn.multi.is_some() {
        return Err("ERR MULTI calls can not be nested".into());
    }
    cx.conn.multi = Some(Vec::new());
    cx.conn.multi_failed = false;
    cx.out.ok();
    Ok(())
}

pub(super) fn discard(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    if cx.conn.multi.take().is_none() {
        return Err("ERR DISCARD without MULTI".into());
    }
    cx.conn.multi_failed = false;
    cx.conn.watched.clear();
    cx.out.ok();
    Ok(())
}

pub(super) fn watch(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if cx.conn.multi.is_some() {
        return Err("ERR WATCH inside MULTI is not allowed".into());
    }
    for k in a.iter().skip(1) {
        let key = cx.key(k);
        let seq = cx.shared.db.newest_sequence(&key).map_err(engine)?;
        let expires_at = cx.get(&key)?.and_then(|v| v.expires_at);
        cx.conn.watched.push(Watched {
            key,
            seq,
            expires_at,
        });
    }
    cx.out.ok();
    Ok(())
}

pub(super) fn unwatch(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    cx.conn.watched.clear();
    cx.out.ok();
    Ok(())
}

/// True when a watched key was written, or expired, since `WATCH`.
fn touched(cx: &Ctx<'_, '_>, watched: &[Watched]) -> Result<bool, String> {
    for w in watched {
        if cx.shared.db.newest_sequence(&w.key).map_err(engine)? != w.seq
            || w.expires_at.is_some_and(|t| t <= cx.now)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `EXEC`: runs the queued commands (under the locks [`exec_lock`] took) and writes what
/// they wrote as one batch.
pub(super) fn exec(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    let Some(queue) = cx.conn.multi.take() else {
        return Err("ERR EXEC without MULTI".into());
    };
    let failed = std::mem::take(&mut cx.conn.multi_failed);
    let watched = std::mem::take(&mut cx.conn.watched);
    if failed {
        return Err("EXECABORT Transaction discarded because of previous errors.".into());
    }
    if touched(cx, &watched)? {
        cx.out.null_array();
        return Ok(());
    }
    let shared = cx.shared;
    WRITES.set(Some(ExecWrites::default()));
    // The replies wait until the batch is written: a failed write answers the EXEC with an
    // error, not with replies for writes that did not happen.
    let mut replies = Vec::new();
    let protocol = cx.conn.protocol;
    for args in &queue {
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let mut out = Reply::new(&mut replies, protocol);
        let Some((i, cmd)) = argv.first().and_then(|n| lookup(n)) else {
            out.error("ERR unknown command");
            continue;
        };
        // Checked again: the user's rights may have changed since the command was queued.
        if !cx.conn.unrestricted
            && let Err(e) = super::auth::permitted(shared, cx.conn, i, cmd, &argv)
        {
            out.error(&e);
            continue;
        }
        if matches!(run(shared, cx.conn, i, cmd, &argv, &mut out), After::Close) {
            cx.after = After::Close;
        }
    }
    let writes = WRITES.take().unwrap_or_default();
    // Out of the cache before the batch is in, as every write does.
    for k in &writes.cached {
        shared.cache.remove(k);
    }
    if !writes.batch.is_empty() {
        shared
            .db
            .write(writes.batch, write_opts(shared))
            .map_err(engine)?;
    }
    cx.out.array(queue.len());
    cx.out.raw(&replies);
    Ok(())
}

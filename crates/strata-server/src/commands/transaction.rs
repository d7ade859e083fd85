//! MULTI, EXEC, DISCARD, WATCH and UNWATCH.
//!
//! `MULTI` queues a connection's commands until `EXEC`. `EXEC` runs alone, under the
//! keyspace's write lock as FLUSHALL does, so no other client's command comes between its
//! commands. Their writes wait in [`ExecWrites`], where their reads see them, and reach the
//! engine as one atomic batch when the last command has run: after a crash a transaction is
//! there whole or not at all. `WATCH` records the engine's sequence number of each key's
//! newest write; `EXEC` answers a null array, running nothing, when any has changed, or when
//! a watched key that was live has expired since. Commands that walk the keyspace inside
//! `EXEC` (KEYS, SCAN, DBSIZE, RANDOMKEY, FLUSHDB) walk it with the transaction's writes over
//! it ([`merged_range`]).

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::Ordering;

use strata::WriteBatch;

use super::{Ctx, Outcome, engine, lookup, run, write_opts};
use crate::resp::Reply;
use crate::{After, Shared};

/// The writes of the `EXEC` running now.
#[derive(Default)]
pub(crate) struct ExecWrites {
    /// Engine key to stored bytes (`None`: deleted), for reads inside the transaction.
    values: HashMap<Vec<u8>, Option<Vec<u8>>>,
    batch: WriteBatch,
    /// Keys to drop from the hot-key cache once written.
    cached: Vec<Vec<u8>>,
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

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Option<ExecWrites>> {
    shared.exec.lock().unwrap_or_else(|e| e.into_inner())
}

/// The stored bytes an `EXEC` running now wrote under an engine key, if it wrote it.
pub(super) fn pending(shared: &Shared, key: &[u8]) -> Option<Option<Vec<u8>>> {
    // Acquire: pairs with the Release store that starts an EXEC.
    if !shared.exec_active.load(Ordering::Acquire) {
        return None;
    }
    lock(shared).as_ref()?.values.get(key).cloned()
}

/// Engine keys to stored bytes, in order.
pub(super) type Entries = BTreeMap<Vec<u8>, Vec<u8>>;

/// The engine entries in `range` as the running `EXEC` sees them: the engine's, with the
/// transaction's own writes over them. `None` when no `EXEC` runs.
pub(super) fn merged_range(
    shared: &Shared,
    range: &(Bound<Vec<u8>>, Bound<Vec<u8>>),
) -> Result<Option<Entries>, String> {
    if !shared.exec_active.load(Ordering::Acquire) {
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
    if let Some(w) = lock(shared).as_ref() {
        for (k, v) in w.values.iter().filter(|(k, _)| range.contains(*k)) {
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
    }
    Ok(Some(merged))
}

/// Holds a command's writes in the running `EXEC`'s batch.
pub(super) fn hold(shared: &Shared, ops: Vec<(Vec<u8>, Option<Vec<u8>>)>, keys: Vec<Vec<u8>>) {
    let mut guard = lock(shared);
    let Some(w) = guard.as_mut() else { return };
    for (k, v) in ops {
        match &v {
            Some(v) => w.batch.put(&k, v),
            None => w.batch.delete(&k),
        }
        w.values.insert(k, v);
    }
    w.cached.extend(keys);
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

/// `EXEC`: runs the queued commands (under the keyspace's write lock, which `execute` took)
/// and writes what they wrote as one batch.
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
    *lock(shared) = Some(ExecWrites::default());
    // Release: reads on this thread see the overlay from here on (the write lock keeps the
    // other threads out).
    shared.exec_active.store(true, Ordering::Release);
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
        if matches!(run(shared, cx.conn, i, cmd, &argv, &mut out), After::Close) {
            cx.after = After::Close;
        }
    }
    shared.exec_active.store(false, Ordering::Release);
    let writes = lock(shared).take().unwrap_or_default();
    let written = if writes.batch.is_empty() {
        Ok(())
    } else {
        shared.db.write(writes.batch, write_opts(shared))
    };
    for k in &writes.cached {
        shared.cache.remove(k);
    }
    written.map_err(engine)?;
    cx.out.array(queue.len());
    cx.out.raw(&replies);
    Ok(())
}

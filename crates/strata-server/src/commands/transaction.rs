//! MULTI, EXEC, DISCARD, WATCH and UNWATCH.
//!
//! `MULTI` queues a connection's commands until `EXEC`. `EXEC` holds the stripe locks of
//! every key its commands name (from the command table's key positions) and every key
//! watched, from the WATCH check until its writes are in the engine, so no other client's
//! command on those keys comes between its commands; the rest of the keyspace goes on.
//! A transaction with a command that names no keys in the table (KEYS, SCAN, DBSIZE,
//! RANDOMKEY, FLUSHDB, SELECT, ...), that reaches another database (MOVE, COPY) or that
//! may look keys up by pattern (SORT) runs alone instead, under the keyspace's write lock, as
//! FLUSHALL does (`exec_lock` in `dispatch.rs`).
//!
//! Its writes wait in `ExecWrites` (`exec_state.rs`), kept by the thread running it, where its
//! own reads see them and no other thread's do, and reach the engine as one atomic batch when
//! the last command has run: after a crash a transaction is there whole or not at all. `WATCH`
//! pins the engine's sequence numbers (`Db::pin_sequences`) and records the latest; `EXEC`
//! answers a null array, running nothing, when a watched key has a write above it (or, stored
//! when watched, holds no version now), or when a watched key that was live has expired
//! since. Commands that walk the keyspace inside `EXEC` walk it with the
//! transaction's writes over it (`exec_state::merged_range`).

use super::session::Watched;
use super::spec::lookup;
use super::{Ctx, Outcome, auth, engine, exec_state, keyspace, run, write_opts};
use crate::resp::Reply;
use crate::shared::After;
use crate::store;

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
    let pin = std::sync::Arc::new(cx.shared.db.pin_sequences());
    for k in a.iter().skip(1) {
        let key = cx.key(k);
        let stored = keyspace::read_raw(cx.shared, &key)?
            .map(|raw| store::decode_value(&raw))
            .transpose()?;
        let live = stored.as_ref().filter(|v| v.is_live(cx.now));
        cx.conn.watched.push(Watched {
            db: cx.conn.db,
            swaps: cx.shared.databases.swaps(cx.conn.db),
            expires_at: live.and_then(|v| v.expires_at),
            expired: stored.is_some() && live.is_none(),
            absent: stored.is_none(),
            key,
            since: pin.sequence(),
            _pin: pin.clone(),
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

/// True when a watched key was written, or expired, since `WATCH`. A key that had expired
/// already when watched and is no longer stored is unchanged, as in Redis: the expiry cycle
/// removing it is no write a client made. (Redis would abort where another client wrote the
/// key and deleted it again in between; this check, made at `EXEC`, cannot tell that from
/// the expiry.) A compaction changes nothing: it may write an old version's sequence number
/// as zero, never give a key a number above the watch's (the watch's pin keeps the numbers
/// of later writes). A key stored when watched and holding no version now was deleted since,
/// its tombstone compacted away with it. A key absent when watched whose tombstone a
/// compaction dropped since is unchanged (a write and a delete both compacted away go
/// unseen).
fn touched(cx: &Ctx<'_, '_>, watched: &[Watched]) -> Result<bool, String> {
    for w in watched {
        // A SWAPDB took the key's database since: touched if the key lives on either side,
        // or was ever written where the database is stored now (Redis asks whether it
        // existed on either side at the swap; this asks later, and errs toward touched).
        if cx.shared.databases.swaps(w.db) != w.swaps {
            let now_key =
                store::data_key(cx.shared.databases.prefix(w.db), store::user_key(&w.key));
            let written = cx.shared.db.newest_sequence(&now_key).map_err(engine)?;
            if written.is_some()
                || cx.get_any_locked(&w.key)?.is_some()
                || cx.get_any_locked(&now_key)?.is_some()
            {
                return Ok(true);
            }
        }
        let seq = cx.shared.db.newest_sequence(&w.key).map_err(engine)?;
        let written = match seq {
            Some(s) => s > w.since,
            None => !w.absent,
        };
        // Asked of the engine, not the hot-key cache: the expiry filter of a compaction
        // removes an expired value from the tables without telling the cache.
        if written && w.expired && cx.shared.db.get(&w.key).map_err(engine)?.is_none() {
            continue;
        }
        if written || w.expires_at.is_some_and(|t| t <= cx.now) {
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
    exec_state::begin();
    // Keyspace notifications go out once the batch is in, not as each command runs.
    let notifications = crate::notify::Deferred::begin();
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
            && let Err(e) = auth::permitted(shared, cx.conn, i, cmd, &argv)
        {
            out.error(&e);
            continue;
        }
        if matches!(
            run(shared, cx.conn, i, cmd, cx.handlers, &argv, &mut out),
            After::Close
        ) {
            cx.after = After::Close;
        }
    }
    commit(shared, exec_state::end())?;
    notifications.send(shared);
    cx.out.array(queue.len());
    cx.out.raw(&replies);
    Ok(())
}

/// Writes what a transaction or a script wrote as one batch, and wakes the connections parked
/// on its keys. On failure, what it changed in memory goes back to what the directory holds.
pub(super) fn commit(shared: &crate::shared::Shared, writes: exec_state::ExecWrites) -> Outcome {
    // Out of the cache before the batch is in, as every write does.
    for k in &writes.cached {
        shared.cache.remove(k);
    }
    if writes.batch.is_empty() {
        return Ok(());
    }
    if let Err(e) = shared.db.write(writes.batch, write_opts(shared)) {
        // A SWAPDB's map, and the runs SPOP took to be gone.
        shared.set_gaps.forget_all();
        if let Err(r) = shared.databases.reload(&shared.db) {
            return Err(format!("{}; and the database map: {r}", engine(e)));
        }
        return Err(engine(e));
    }
    // Connections parked on these keys see the writes whole, never half of them.
    shared.notify_written(&writes.cached);
    Ok(())
}

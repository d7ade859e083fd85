//! The batched path: plain GETs and SETs of many connections in one engine call.

use std::sync::atomic::Ordering;

use strata::{ReadOptions, WriteBatch};

use super::exec_state;
use super::keyspace::{live_data, lock_stripes, read_raw, read_raw_locked};
use super::spec::{Spec, lookup};
use super::{Connection, Outcome, engine, write_opts};
use crate::resp::{Args, Reply};
use crate::shared::Shared;
use crate::store::Value;

impl Connection {
    /// A plain GET or SET of this connection (`args`, checked by [`is_plain_get`] or
    /// [`is_plain_set`]) may join the batched paths, which check nothing themselves: no
    /// transaction is open, the connection is logged in, and its user may run it on its key.
    pub(crate) fn may_batch(&mut self, shared: &Shared, args: &Args) -> bool {
        // Keyspace notifications are found by the path every other command takes.
        if self.multi.is_some()
            || self.denied
            || !self.refresh_user(shared)
            || crate::notify::on(shared)
            || self.reply != super::session::ReplyMode::On
            || self.subs.any()
            // While a script runs, each command waits or answers BUSY (`dispatch.rs`).
            || shared.scripts.active()
            // MONITOR is told of commands by the path every other command takes.
            || shared.pubsub.monitored()
            // Replicas refuse writes, and may refuse reads, on the path of every command.
            || !crate::replication::batches_allowed(shared)
        {
            return false;
        }
        if !self.authenticated {
            return false;
        }
        if self.unrestricted {
            return true;
        }
        let (Some(name), Some(key)) = (args.get(0), args.get(1)) else {
            return false;
        };
        let value = args.get(2).unwrap_or_default();
        let argv = [name, key, value];
        let argv = argv.get(..args.len()).unwrap_or_default();
        // GET or SET: their rows, found once.
        static ROWS: std::sync::OnceLock<[Option<(usize, &'static Spec)>; 2]> =
            std::sync::OnceLock::new();
        let rows = ROWS.get_or_init(|| [lookup(b"get"), lookup(b"set")]);
        let row = if args.len() == 2 { rows[0] } else { rows[1] };
        let hint = &mut self.acl_hint;
        row.is_some_and(|(i, cmd)| self.user.check_with_hint(i, cmd, argv, hint).is_ok())
    }
}

/// What [`read_many`] does for each key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// The hot-key cache answered.
    Cached,
    /// The engine answers; the cache is not consulted for this key.
    Read,
    /// The engine answers, and its answer fills the cache.
    ReadAndFill,
}

/// What [`read_many`] keeps from call to call, so that a worker's batched reads allocate
/// nothing beyond the values read.
#[derive(Default)]
pub(crate) struct ReadScratch {
    plans: Vec<Plan>,
}

/// Reads several engine keys as [`read_raw`] reads one, the keys the hot-key cache does not
/// answer in one batched lookup of the engine ([`strata::Db::get_many_with`]), and appends
/// each key's stored bytes to `out`, in order. The keys whose misses fill the cache have
/// their stripe locks held, together, from before the engine is read until the fill; they
/// are taken in order, as every multi-key command takes them. `locked`: the caller holds
/// the stripe lock of every key already.
pub(crate) fn read_many<'k>(
    shared: &Shared,
    keys: impl Iterator<Item = &'k [u8]> + Clone,
    locked: bool,
    scratch: &mut ReadScratch,
    out: &mut Vec<Result<Option<Vec<u8>>, String>>,
) {
    if exec_state::in_exec() {
        // Inside EXEC: each key through the transaction's own writes.
        let read = if locked { read_raw_locked } else { read_raw };
        out.extend(keys.map(|k| read(shared, k)));
        return;
    }
    let start = out.len();
    let plans = &mut scratch.plans;
    plans.clear();
    for k in keys.clone() {
        let (plan, value) = if !shared.cache.consult() {
            (Plan::Read, None)
        } else if let Some(v) = shared.cache.get(k) {
            (Plan::Cached, v)
        } else {
            (Plan::ReadAndFill, None)
        };
        plans.push(plan);
        out.push(Ok(value));
    }
    if plans.iter().all(|&p| p == Plan::Cached) {
        return;
    }
    let planned = || keys.clone().zip(plans.iter().copied());
    let filling = planned().filter(|&(_, p)| p == Plan::ReadAndFill);
    let _stripes = if locked {
        Vec::new()
    } else {
        lock_stripes(shared, filling.map(|(k, _)| k))
    };
    let wanted = planned().filter(|&(_, p)| p != Plan::Cached);
    // Every key is paired with its own slot before the cached ones are left out: pairing
    // the engine's answers with the slots of all keys would shift them onto cached keys.
    let mut slots = planned()
        .zip(out.get_mut(start..).unwrap_or_default())
        .filter(|((_, p), _)| *p != Plan::Cached);
    let each = |v: strata::Result<Option<Vec<u8>>>| {
        let Some(((k, plan), slot)) = slots.next() else {
            return;
        };
        if plan == Plan::ReadAndFill
            && let Ok(v) = &v
        {
            shared.cache.fill(k, v);
        }
        *slot = v.map_err(engine);
    };
    shared
        .db
        .get_many_with(wanted.map(|(k, _)| k), &ReadOptions::default(), each);
}

/// Counts a GET's outcome and writes its reply; `stored` is the key's stored bytes.
pub(crate) fn answer_get(
    shared: &Shared,
    stored: Result<Option<Vec<u8>>, String>,
    now: u64,
    out: &mut Reply<'_>,
) {
    // Parsed in place: a GET's value goes from the engine's buffer to the reply uncopied.
    let counters = &shared.counters;
    let data = match &stored {
        Ok(Some(raw)) => live_data(raw, now),
        Ok(None) => Ok(None),
        Err(e) => Err(e.clone()),
    };
    match data {
        Ok(Some(data)) => {
            counters.keyspace_hits.fetch_add(1, Ordering::Relaxed);
            out.bulk(data);
        }
        Ok(_) => {
            counters.keyspace_misses.fetch_add(1, Ordering::Relaxed);
            out.null();
        }
        Err(e) => out.error(&e),
    }
}

/// Counts a GET's outcome and writes its reply; `value` is the key's live value.
pub(crate) fn answer_value(
    shared: &Shared,
    value: Result<Option<Value>, String>,
    out: &mut Reply<'_>,
) {
    let counters = &shared.counters;
    match value {
        Ok(Some(v)) => {
            counters.keyspace_hits.fetch_add(1, Ordering::Relaxed);
            out.bulk(&v.data);
        }
        Ok(None) => {
            counters.keyspace_misses.fetch_add(1, Ordering::Relaxed);
            out.null();
        }
        Err(e) => out.error(&e),
    }
}

/// True for `GET key`: a read that can join its neighbours' batched lookup.
pub(crate) fn is_plain_get(args: &Args) -> bool {
    args.len() == 2 && args.get(0).is_some_and(|c| c.eq_ignore_ascii_case(b"GET"))
}

/// Reads the keys of plain GETs (from [`is_plain_get`], possibly from several connections;
/// each a database's number, then the client's key) together, under the key space's read
/// lock as every command but FLUSHALL runs. Each database's prefix is looked up under that
/// lock, so a `SWAPDB` comes wholly before or after the batch.
pub(crate) fn read_gets<'k>(
    shared: &Shared,
    keys: impl Iterator<Item = &'k [u8]> + Clone,
    scratch: &mut ReadScratch,
    out: &mut Vec<Result<Option<Vec<u8>>, String>>,
) {
    let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    let stored: Vec<_> = keys.map(|k| shared.databases.stored(k)).collect();
    read_many(shared, stored.iter().map(|k| &**k), false, scratch, out);
}

/// True for `SET key value` without options: a write that can join its neighbours' batch.
pub(crate) fn is_plain_set(args: &Args) -> bool {
    args.len() == 3 && args.get(0).is_some_and(|c| c.eq_ignore_ascii_case(b"SET"))
}

/// Writes plain SETs (from [`is_plain_set`], possibly from several connections; key as
/// [`read_gets`] takes it and stored value each) as one atomic batch, in order, under their
/// keys' stripe locks. Each SET's reply is `+OK` on success and the returned error otherwise.
pub(crate) fn write_sets<'a>(
    shared: &Shared,
    sets: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
) -> Outcome {
    let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    let stored: Vec<_> = sets.map(|(k, v)| (shared.databases.stored(k), v)).collect();
    let sets = stored.iter().map(|(k, v)| (&**k, *v));
    let _g = lock_stripes(shared, sets.clone().map(|(k, _)| k));
    let mut batch = WriteBatch::new();
    for (k, v) in sets.clone() {
        batch.put(k, v);
    }
    // Out of the cache before the engine has the new values, under the stripe locks that
    // a refill takes: no reader sees a cached old value once the batch is in.
    for (k, _) in sets.clone() {
        shared.cache.remove(k);
    }
    shared.db.write(batch, write_opts(shared)).map_err(engine)?;
    // Readers parked on a key a SET overwrote look again (a stream became a string).
    if shared.parked.load(Ordering::Acquire) > 0 {
        let keys: Vec<Vec<u8>> = sets.map(|(k, _)| k.to_vec()).collect();
        shared.notify_written(&keys);
    }
    Ok(())
}

/// Counts the calls and time (in all) of batched GETs and SETs into their commands'
/// statistics.
pub(crate) fn count_batched(shared: &Shared, name: &[u8], calls: u64, nanos: u64) {
    if let Some((i, _)) = lookup(name)
        && let Some(s) = shared.command_stats.get(i)
    {
        s.record(calls, nanos);
    }
}

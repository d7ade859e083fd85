//! The commands the server answers, in Redis's words and reply shapes.
//!
//! Every command is a row of one table ([`TABLE`], in `table.rs`): its name, arity, flags,
//! ACL categories, key positions and handler. Dispatch, arity errors, COMMAND's replies and
//! INFO's per-command statistics are all answered from it. The handlers live by family:
//! [`strings`], [`keys`] (the keyspace and expiry) and [`server`] (connection and server).
//!
//! Keys and values are stored as [`crate::store`] lays them out; every read judges expiry
//! by the clock read once when the command starts, so an expired key is invisible to every
//! read from the moment it expires.

mod auth;
mod keys;
mod server;
mod strings;
mod table;
mod transaction;

pub(crate) use keys::expire_cycle;
pub(crate) use table::{Command, TABLE, lookup};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use strata::{ReadOptions, WriteBatch, WriteOptions};

use crate::resp::{Args, Reply};
use crate::store::{self, Value};
use crate::{After, Shared, SyncMode};

/// True while the `default` user takes any password, as protected mode asks.
pub(crate) fn default_needs_no_password(shared: &Shared) -> bool {
    auth::user(shared, "default").is_none_or(|u| u.nopass)
}

/// Per-connection state.
pub(crate) struct Connection {
    pub id: u64,
    pub name: Option<Vec<u8>>,
    /// The database `SELECT` chose.
    pub db: u8,
    /// 2 or 3, as `HELLO` chose.
    pub protocol: u8,
    /// Commands queued since `MULTI`, when one is open.
    pub multi: Option<Vec<Vec<Vec<u8>>>>,
    /// A command failed to queue since `MULTI`: `EXEC` discards the transaction.
    pub multi_failed: bool,
    /// Keys `WATCH`ed, as they were then.
    pub watched: Vec<transaction::Watched>,
    /// The user the connection runs as.
    pub user: Arc<crate::acl::User>,
    /// False until the connection authenticates, when `default` needs a password.
    pub authenticated: bool,
    /// The user may run every command on every key: nothing to check.
    pub unrestricted: bool,
    /// [`Shared::acl_generation`] when `user` was read.
    acl_seen: u64,
    /// Refused by protected mode: every command is answered with its error, then closed.
    pub denied: bool,
    /// Where the user's key patterns are walked from: the one that granted the last key.
    pub acl_hint: usize,
}

impl Connection {
    pub(crate) fn new(id: u64, shared: &Shared, denied: bool) -> Self {
        let user = auth::user(shared, "default")
            .unwrap_or_else(|| Arc::new(crate::acl::User::default_user()));
        let mut c = Connection {
            id,
            name: None,
            db: 0,
            protocol: 2,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            authenticated: false,
            unrestricted: false,
            acl_seen: 0,
            user: user.clone(),
            denied,
            acl_hint: 0,
        };
        c.log_in(user, false);
        c
    }

    /// Runs as `user` from now on; `authenticated`: it gave its password (else it is
    /// authenticated only if it needs none).
    pub(crate) fn log_in(&mut self, user: Arc<crate::acl::User>, authenticated: bool) {
        // The user was read before now: the next command reads it again ([`refresh_user`]),
        // in case it changed or went in between.
        self.acl_seen = u64::MAX;
        self.authenticated = authenticated || (user.enabled && user.nopass);
        self.unrestricted = user.unrestricted();
        self.user = user;
    }

    /// Picks up a change of the connection's user. False when the user was deleted: the
    /// connection is closed, as Redis closes it.
    pub(crate) fn refresh_user(&mut self, shared: &Shared) -> bool {
        let seen = shared.acl_generation.load(Ordering::Acquire);
        if seen == self.acl_seen {
            return true;
        }
        let Some(user) = auth::user(shared, &self.user.name).filter(|u| u.id == self.user.id)
        else {
            return false;
        };
        self.acl_seen = seen;
        self.unrestricted = user.unrestricted();
        self.user = user;
        true
    }

    /// A plain GET or SET of this connection (`args`, checked by [`is_plain_get`] or
    /// [`is_plain_set`]) may join the batched paths, which check nothing themselves: no
    /// transaction is open, the connection is logged in, and its user may run it on its key.
    pub(crate) fn may_batch(&mut self, shared: &Shared, args: &Args) -> bool {
        if self.multi.is_some() || self.denied || !self.refresh_user(shared) {
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
        static ROWS: std::sync::OnceLock<[Option<(usize, &'static Command)>; 2]> =
            std::sync::OnceLock::new();
        let rows = ROWS.get_or_init(|| [lookup(b"get"), lookup(b"set")]);
        let row = if args.len() == 2 { rows[0] } else { rows[1] };
        let hint = &mut self.acl_hint;
        row.is_some_and(|(i, cmd)| self.user.check_with_hint(i, cmd, argv, hint).is_ok())
    }
}

/// A command's outcome: `Err` holds the whole error line, code first (`ERR ...`).
pub(crate) type Outcome = Result<(), String>;

/// What a handler works with.
pub(crate) struct Ctx<'a, 'o> {
    pub shared: &'a Shared,
    pub conn: &'a mut Connection,
    pub out: &'a mut Reply<'o>,
    /// Unix milliseconds when the command started: every expiry it judges is judged by it.
    pub now: u64,
    pub after: After,
}

/// Calls and time per command, for `INFO commandstats`.
#[derive(Default)]
pub(crate) struct CommandStats {
    pub calls: AtomicU64,
    pub micros: AtomicU64,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
}

fn arity_ok(cmd: &Command, argc: usize) -> bool {
    let argc = argc as i64;
    let arity = i64::from(cmd.arity);
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

pub(crate) fn wrong_args(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

pub(crate) fn engine(e: strata::Error) -> String {
    format!("ERR {e}")
}

pub(crate) fn syntax() -> String {
    "ERR syntax error".into()
}

pub(crate) fn not_an_integer() -> String {
    "ERR value is not an integer or out of range".into()
}

pub(crate) fn parse_i64(b: &[u8]) -> Option<i64> {
    // Redis accepts no sign but `-`, no spaces and no leading zeros (but "0" itself).
    let s = std::str::from_utf8(b).ok()?;
    if s.starts_with('+') || (s.len() > 1 && s.starts_with('0')) || s.starts_with("-0") {
        return None;
    }
    s.parse().ok()
}

pub(crate) fn int_arg(b: &[u8]) -> Result<i64, String> {
    parse_i64(b).ok_or_else(not_an_integer)
}

pub(crate) fn upper(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_uppercase()
}

pub(crate) fn write_opts(shared: &Shared) -> WriteOptions {
    WriteOptions {
        sync: shared.sync_mode() == SyncMode::Always,
    }
}

/// Runs one command (`args[0]` is its name) and writes its reply.
pub(crate) fn execute(
    shared: &Shared,
    conn: &mut Connection,
    args: &[&[u8]],
    out: &mut Reply<'_>,
) -> After {
    let Some(name) = args.first() else {
        return After::Continue;
    };
    if conn.denied {
        out.error(crate::net::PROTECTED);
        return After::Close;
    }
    let Some((i, cmd)) = lookup(name) else {
        let shown: String = args
            .iter()
            .skip(1)
            .take(3)
            .map(|x| format!("'{}' ", String::from_utf8_lossy(x)))
            .collect();
        out.error(&format!(
            "ERR unknown command '{}', with args beginning with: {shown}",
            String::from_utf8_lossy(name)
        ));
        conn.multi_failed |= conn.multi.is_some();
        return After::Continue;
    };
    let stats = shared.command_stats.get(i);
    if !arity_ok(cmd, args.len()) {
        if let Some(s) = stats {
            s.rejected.fetch_add(1, Ordering::Relaxed);
        }
        out.error(&wrong_args(cmd.name));
        conn.multi_failed |= conn.multi.is_some();
        return After::Continue;
    }
    if !conn.refresh_user(shared) {
        return After::Close;
    }
    let no_auth = cmd.flags.contains(&"no-auth");
    if !conn.authenticated && !no_auth {
        out.error("NOAUTH Authentication required.");
        conn.multi_failed |= conn.multi.is_some();
        return After::Continue;
    }
    if !conn.unrestricted
        && !no_auth
        && let Err(e) = auth::permitted(shared, conn, i, cmd, args)
    {
        out.error(&e);
        conn.multi_failed |= conn.multi.is_some();
        return After::Continue;
    }
    if conn.multi.is_some() && cmd.flags.contains(&"no_multi") {
        out.error("ERR Command not allowed inside a transaction");
        conn.multi_failed = true;
        return After::Continue;
    }
    if let Some(queue) = conn.multi.as_mut()
        && !transaction::runs_inside_multi(cmd.name)
    {
        queue.push(args.iter().map(|a| a.to_vec()).collect());
        out.simple("QUEUED");
        return After::Continue;
    }
    // FLUSHALL and FLUSHDB run alone: they wait for every other command and hold new ones
    // back. EXEC holds its keys' stripes, or runs alone.
    if cmd.name == "exec" {
        let _locks = transaction::exec_lock(shared, conn);
        run(shared, conn, i, cmd, args, out)
    } else if cmd.name.starts_with("flush") {
        let _all = shared.keyspace.write().unwrap_or_else(|e| e.into_inner());
        run(shared, conn, i, cmd, args, out)
    } else {
        let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
        run(shared, conn, i, cmd, args, out)
    }
}

/// Runs a command that passed the checks, under the lock its caller took, and counts it.
pub(crate) fn run(
    shared: &Shared,
    conn: &mut Connection,
    i: usize,
    cmd: &Command,
    args: &[&[u8]],
    out: &mut Reply<'_>,
) -> After {
    let stats = shared.command_stats.get(i);
    let started = Instant::now();
    let mut ctx = Ctx {
        shared,
        now: shared.clock.now_ms(),
        conn,
        out,
        after: After::Continue,
    };
    let result = (cmd.run)(&mut ctx, args);
    let after = ctx.after;
    if let Err(e) = result {
        out.error(&e);
        if let Some(s) = stats {
            s.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    if let Some(s) = stats {
        // Relaxed: statistics.
        s.calls.fetch_add(1, Ordering::Relaxed);
        s.micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
    after
}

// Reading and writing keys.

/// Reads an engine key's stored bytes through the hot-key cache. On a miss the engine is
/// read and the cache filled under the key's stripe lock, so that a concurrent write cannot
/// be overtaken by a stale fill.
fn read_raw(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if let Some(v) = transaction::pending(key) {
        return Ok(v);
    }
    if !shared.cache.consult() {
        return shared.db.get(key).map_err(engine);
    }
    if let Some(v) = shared.cache.get(key) {
        return Ok(v);
    }
    let _stripe = lock_stripe(shared, key);
    let v = shared.db.get(key).map_err(engine)?;
    shared.cache.fill(key, &v);
    Ok(v)
}

/// Reads an engine key while the caller holds its stripe lock.
pub(crate) fn read_raw_locked(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if let Some(v) = transaction::pending(key) {
        return Ok(v);
    }
    if shared.cache.consult()
        && let Some(v) = shared.cache.get(key)
    {
        return Ok(v);
    }
    shared.db.get(key).map_err(engine)
}

/// The data of stored bytes, read in place, unless expired at `now`.
pub(crate) fn live_data(raw: &[u8], now: u64) -> Result<Option<&[u8]>, String> {
    let (expires_at, data) = store::parse_value(raw).map_err(|e| format!("ERR {e}"))?;
    Ok(expires_at.is_none_or(|t| t > now).then_some(data))
}

fn live(raw: Option<Vec<u8>>, now: u64) -> Result<Option<Value>, String> {
    let Some(raw) = raw else { return Ok(None) };
    let v = store::decode_value(&raw).map_err(|e| format!("ERR {e}"))?;
    Ok(v.is_live(now).then_some(v))
}

impl<'a> Ctx<'a, '_> {
    /// The engine key of `key` in the connection's database.
    pub(crate) fn key(&self, key: &[u8]) -> Vec<u8> {
        store::data_key(self.conn.db, key)
    }

    /// The live value of an engine key (`None` when absent or expired).
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Value>, String> {
        live(read_raw(self.shared, key)?, self.now)
    }

    /// As [`Ctx::get`], for a caller that holds the key's stripe lock.
    pub(crate) fn get_locked(&self, key: &[u8]) -> Result<Option<Value>, String> {
        live(read_raw_locked(self.shared, key)?, self.now)
    }

    pub(crate) fn lock<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Vec<std::sync::MutexGuard<'a, ()>> {
        lock_stripes(self.shared, keys)
    }
}

/// Writes to make as one atomic batch. Requires: the caller holds the stripe lock of every
/// key written.
#[derive(Default)]
pub(crate) struct Writes {
    batch: WriteBatch,
    keys: Vec<Vec<u8>>,
    /// Inside an `EXEC`, the same writes, engine key and stored bytes (`None` deletes).
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Writes {
    /// Stores `data` under an engine key; an expiry also enters the expiry index.
    pub(crate) fn put(&mut self, key: &[u8], data: &[u8], expires_at: Option<u64>) {
        let stored = store::encode_value(data, expires_at);
        self.batch.put(key, &stored);
        let in_exec = transaction::in_exec();
        if in_exec {
            self.ops.push((key.to_vec(), Some(stored)));
        }
        if let Some(t) = expires_at {
            let index = store::index_key(t, key);
            self.batch.put(&index, b"");
            if in_exec {
                self.ops.push((index, Some(Vec::new())));
            }
        }
        self.keys.push(key.to_vec());
    }

    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.batch.delete(key);
        if transaction::in_exec() {
            self.ops.push((key.to_vec(), None));
        }
        self.keys.push(key.to_vec());
    }

    /// Deletes a key of the server's own (an expiry index entry), not cached.
    pub(crate) fn delete_raw(&mut self, key: &[u8]) {
        self.batch.delete(key);
        if transaction::in_exec() {
            self.ops.push((key.to_vec(), None));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    pub(crate) fn commit(mut self, shared: &Shared) -> Outcome {
        if transaction::hold(&mut self.ops, &self.keys) {
            return Ok(());
        }
        // A written key leaves the cache (the next read fills it): cheaper than copying every
        // written value in, and right whatever the write's outcome. It leaves before the
        // write, under the stripe locks a refill takes, so that no reader sees the cached old
        // value of one key and the engine's new value of another.
        for k in &self.keys {
            shared.cache.remove(k);
        }
        shared
            .db
            .write(self.batch, write_opts(shared))
            .map_err(engine)
    }
}

/// Locks the stripe of one key, unless the `EXEC` running on this thread holds it: the read
/// path's cache fill, without the vector [`lock_stripes`] makes.
fn lock_stripe<'a>(shared: &'a Shared, key: &[u8]) -> Option<std::sync::MutexGuard<'a, ()>> {
    let i = shared.stripe(key);
    if transaction::held_by_this_thread(i) {
        return None;
    }
    Some(shared.stripes[i].lock().unwrap_or_else(|e| e.into_inner()))
}

/// Locks the stripes of `keys` in a fixed order (no deadlock between multi-key commands).
/// Inside an `EXEC`, the stripes it already holds are not taken again.
pub(crate) fn lock_stripes<'a, 'k>(
    shared: &'a Shared,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Vec<std::sync::MutexGuard<'a, ()>> {
    let mut idx: Vec<usize> = keys.into_iter().map(|k| shared.stripe(k)).collect();
    idx.sort_unstable();
    idx.dedup();
    idx.retain(|&i| !transaction::held_by_this_thread(i));
    idx.into_iter()
        .map(|i| shared.stripes[i].lock().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

// The batched path: plain GETs and SETs of many connections in one engine call.

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
    if transaction::in_exec() {
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

/// Reads the engine keys of plain GETs (from [`is_plain_get`], possibly from several
/// connections) together, under the key space's read lock as every command but FLUSHALL
/// runs.
pub(crate) fn read_gets<'k>(
    shared: &Shared,
    keys: impl Iterator<Item = &'k [u8]> + Clone,
    scratch: &mut ReadScratch,
    out: &mut Vec<Result<Option<Vec<u8>>, String>>,
) {
    let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    read_many(shared, keys, false, scratch, out);
}

/// True for `SET key value` without options: a write that can join its neighbours' batch.
pub(crate) fn is_plain_set(args: &Args) -> bool {
    args.len() == 3 && args.get(0).is_some_and(|c| c.eq_ignore_ascii_case(b"SET"))
}

/// Writes plain SETs (from [`is_plain_set`], possibly from several connections; engine key
/// and stored value each) as one atomic batch, in order, under their keys' stripe locks.
/// Each SET's reply is `+OK` on success and the returned error otherwise.
pub(crate) fn write_sets<'a>(
    shared: &Shared,
    sets: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
) -> Outcome {
    let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    let _g = lock_stripes(shared, sets.clone().map(|(k, _)| k));
    let mut batch = WriteBatch::new();
    for (k, v) in sets.clone() {
        batch.put(k, v);
    }
    // Out of the cache before the engine has the new values, under the stripe locks that
    // a refill takes: no reader sees a cached old value once the batch is in.
    for (k, _) in sets {
        shared.cache.remove(k);
    }
    shared.db.write(batch, write_opts(shared)).map_err(engine)
}

/// Counts the calls and time of batched GETs and SETs into their commands' statistics.
pub(crate) fn count_batched(shared: &Shared, name: &[u8], calls: u64, micros: u64) {
    if let Some((i, _)) = lookup(name)
        && let Some(s) = shared.command_stats.get(i)
    {
        s.calls.fetch_add(calls, Ordering::Relaxed);
        s.micros.fetch_add(micros, Ordering::Relaxed);
    }
}

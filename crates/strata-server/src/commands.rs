//! The commands the server answers, in Redis's words and reply shapes.

use std::sync::atomic::Ordering;

use strata::{ReadOptions, WriteBatch, WriteOptions};

use crate::resp::{Args, Reply};
use crate::{After, Shared, SyncMode};

/// Per-connection state.
#[derive(Default)]
pub(crate) struct Connection {
    pub name: Option<Vec<u8>>,
}

const MAX_SCAN_CURSORS: usize = 100_000;

fn upper(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_uppercase()
}

fn write_opts(shared: &Shared) -> WriteOptions {
    WriteOptions {
        sync: shared.config.sync == SyncMode::Always,
    }
}

fn wrong_args(out: &mut Reply<'_>, cmd: &str) {
    out.error(&format!(
        "ERR wrong number of arguments for '{}' command",
        cmd.to_ascii_lowercase()
    ));
}

fn parse_i64(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Reads a key through the hot-key cache. On a miss the engine is read and the cache filled
/// under the key's stripe lock, so that a concurrent write cannot be overtaken by a stale fill.
fn read(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if !shared.cache.consult() {
        return shared.db.get(key).map_err(|e| e.to_string());
    }
    if let Some(v) = shared.cache.get(key) {
        return Ok(v);
    }
    let _stripe = shared.stripes[shared.stripe(key)]
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let v = shared.db.get(key).map_err(|e| e.to_string())?;
    shared.cache.fill(key, &v);
    Ok(v)
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

/// Reads several keys as [`read`] reads one, the keys the hot-key cache does not answer in
/// one batched lookup of the engine ([`strata::Db::get_many_with`]), and appends each key's
/// value to `out`, in order. The keys whose misses fill the cache have their stripe locks
/// held, together, from before the engine is read until the fill; they are taken in order,
/// as every multi-key command takes them.
pub(crate) fn read_many<'k>(
    shared: &Shared,
    keys: impl Iterator<Item = &'k [u8]> + Clone,
    scratch: &mut ReadScratch,
    out: &mut Vec<Result<Option<Vec<u8>>, String>>,
) {
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
    let _stripes = lock_stripes(shared, filling.map(|(k, _)| k));
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
        *slot = v.map_err(|e| e.to_string());
    };
    shared
        .db
        .get_many_with(wanted.map(|(k, _)| k), &ReadOptions::default(), each);
}

/// Counts a GET's outcome and writes its reply.
pub(crate) fn answer_get(
    shared: &Shared,
    value: Result<Option<Vec<u8>>, String>,
    out: &mut Reply<'_>,
) {
    let counters = &shared.counters;
    match value {
        Ok(Some(v)) => {
            counters.keyspace_hits.fetch_add(1, Ordering::Relaxed);
            out.bulk(&v);
        }
        Ok(None) => {
            counters.keyspace_misses.fetch_add(1, Ordering::Relaxed);
            out.null();
        }
        Err(e) => out.error(&format!("ERR {e}")),
    }
}

/// Reads a key while the caller holds its stripe lock.
fn read_locked(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if shared.cache.consult()
        && let Some(v) = shared.cache.get(key)
    {
        return Ok(v);
    }
    shared.db.get(key).map_err(|e| e.to_string())
}

/// Applies a batch and drops its keys from the cache. Requires: the caller holds the stripe locks of
/// every key in `changes`.
fn apply<'a, I>(shared: &Shared, changes: I) -> Result<(), String>
where
    I: IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    I::IntoIter: Clone,
{
    let changes = changes.into_iter();
    let mut batch = WriteBatch::new();
    for (k, v) in changes.clone() {
        match v {
            Some(v) => batch.put(k, v),
            None => batch.delete(k),
        }
    }
    let result = shared
        .db
        .write(batch, write_opts(shared))
        .map_err(|e| e.to_string());
    // A written key leaves the cache (the next read fills it): cheaper than copying every
    // written value in, and right whatever the write's outcome.
    for (k, _) in changes {
        shared.cache.remove(k);
    }
    result
}

/// Locks the stripes of `keys` in a fixed order (no deadlock between multi-key commands).
fn lock_stripes<'a, 'k>(
    shared: &'a Shared,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Vec<std::sync::MutexGuard<'a, ()>> {
    let mut idx: Vec<usize> = keys.into_iter().map(|k| shared.stripe(k)).collect();
    idx.sort_unstable();
    idx.dedup();
    idx.into_iter()
        .map(|i| shared.stripes[i].lock().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// True for `GET key`: a read that can join its neighbours' batched lookup.
pub(crate) fn is_plain_get(args: &Args) -> bool {
    args.len() == 2 && args.get(0).is_some_and(|c| c.eq_ignore_ascii_case(b"GET"))
}

/// Reads the keys of plain GETs (from [`is_plain_get`], possibly from several connections)
/// together, under the key space's read lock as every command but FLUSHALL runs.
pub(crate) fn read_gets<'k>(
    shared: &Shared,
    keys: impl Iterator<Item = &'k [u8]> + Clone,
    scratch: &mut ReadScratch,
    out: &mut Vec<Result<Option<Vec<u8>>, String>>,
) {
    let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    read_many(shared, keys, scratch, out);
}

/// True for `SET key value` without options: a write that can join its neighbours' batch.
pub(crate) fn is_plain_set(args: &Args) -> bool {
    args.len() == 3 && args.get(0).is_some_and(|c| c.eq_ignore_ascii_case(b"SET"))
}

/// Writes plain SETs (from [`is_plain_set`], possibly from several connections; key and
/// value each) as one atomic batch, in order, under their keys' stripe locks. Each SET's
/// reply is `+OK` on success and the returned error otherwise.
pub(crate) fn write_sets<'a>(
    shared: &Shared,
    sets: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
) -> Result<(), String> {
    let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    let _g = lock_stripes(shared, sets.clone().map(|(k, _)| k));
    apply(shared, sets.map(|(k, v)| (k, Some(v))))
}

pub(crate) fn execute(
    shared: &Shared,
    conn: &mut Connection,
    args: &[&[u8]],
    out: &mut Reply<'_>,
) -> After {
    let Some((name, rest)) = args.split_first() else {
        return After::Continue;
    };
    // Command names are short: upper-cased on the stack, without an allocation.
    let mut buf = [0u8; 32];
    let cmd: std::borrow::Cow<'_, str> = match (buf.get_mut(..name.len()), name.is_ascii()) {
        (Some(dst), true) => {
            dst.copy_from_slice(name);
            dst.make_ascii_uppercase();
            std::str::from_utf8(dst).unwrap_or_default().into()
        }
        _ => upper(name).into(),
    };
    let cmd = &*cmd;
    // FLUSHALL runs alone: it waits for every other command and holds new ones back.
    let result = if cmd == "FLUSHALL" || cmd == "FLUSHDB" {
        let _all = shared.keyspace.write().unwrap_or_else(|e| e.into_inner());
        run(shared, conn, cmd, rest, out)
    } else {
        let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
        run(shared, conn, cmd, rest, out)
    };
    match result {
        Ok(after) => after,
        Err(e) => {
            out.error(&format!("ERR {e}"));
            After::Continue
        }
    }
}

fn run(
    shared: &Shared,
    conn: &mut Connection,
    cmd: &str,
    a: &[&[u8]],
    out: &mut Reply<'_>,
) -> Result<After, String> {
    let n = a.len();
    macro_rules! arity {
        ($ok:expr) => {
            if !($ok) {
                wrong_args(out, cmd);
                return Ok(After::Continue);
            }
        };
    }
    match cmd {
        "PING" => {
            arity!(n <= 1);
            match a.first() {
                Some(m) => out.bulk(m),
                None => out.simple("PONG"),
            }
        }
        "ECHO" => {
            arity!(n == 1);
            out.bulk(a[0]);
        }
        "QUIT" => {
            out.ok();
            return Ok(After::Close);
        }
        "SELECT" => {
            arity!(n == 1);
            if a[0] == b"0" {
                out.ok();
            } else {
                out.error("ERR DB index is out of range");
            }
        }
        "HELLO" => {
            if let Some(v) = a.first() {
                match parse_i64(v) {
                    Some(2) => {}
                    Some(_) => {
                        out.error("NOPROTO sorry, this protocol version is not supported");
                        return Ok(After::Continue);
                    }
                    None => {
                        out.error("ERR Protocol version is not an integer or out of range");
                        return Ok(After::Continue);
                    }
                }
            }
            let mut i = 1;
            while i < n {
                match upper(a[i]).as_str() {
                    "SETNAME" if i + 1 < n => {
                        conn.name = Some(a[i + 1].to_vec());
                        i += 2;
                    }
                    "AUTH" if i + 2 < n => i += 3,
                    _ => {
                        out.error("ERR syntax error in HELLO");
                        return Ok(After::Continue);
                    }
                }
            }
            out.array(14);
            for (k, v) in [("server", "strata"), ("version", env!("CARGO_PKG_VERSION"))] {
                out.bulk(k.as_bytes());
                out.bulk(v.as_bytes());
            }
            out.bulk(b"proto");
            out.int(2);
            out.bulk(b"id");
            out.int(shared.counters.connections_received.load(Ordering::Relaxed) as i64);
            for (k, v) in [("mode", "standalone"), ("role", "master")] {
                out.bulk(k.as_bytes());
                out.bulk(v.as_bytes());
            }
            out.bulk(b"modules");
            out.array(0);
        }
        "CLIENT" => {
            // Enough for clients that name their connection.
            match a.first().map(|s| upper(s)).as_deref() {
                Some("SETNAME") if n == 2 => {
                    conn.name = Some(a[1].to_vec());
                    out.ok();
                }
                Some("GETNAME") => match &conn.name {
                    Some(nm) => out.bulk(nm),
                    None => out.null(),
                },
                Some("SETINFO") => out.ok(),
                _ => out.error("ERR unknown CLIENT subcommand"),
            }
        }
        "COMMAND" => match a.first().map(|s| upper(s)).as_deref() {
            None | Some("DOCS") | Some("INFO") => out.array(0),
            Some("COUNT") => out.int(COMMAND_NAMES.len() as i64),
            Some(_) => out.error("ERR unknown COMMAND subcommand"),
        },
        "CONFIG" => {
            arity!(n >= 1);
            match upper(a[0]).as_str() {
                "GET" => {
                    arity!(n == 2);
                    let pattern = a[1].to_ascii_lowercase();
                    let values = config_values(shared);
                    let hits: Vec<&(String, String)> = values
                        .iter()
                        .filter(|(k, _)| crate::glob::matches(&pattern, k.as_bytes()))
                        .collect();
                    out.array(hits.len() * 2);
                    for (k, v) in hits {
                        out.bulk(k.as_bytes());
                        out.bulk(v.as_bytes());
                    }
                }
                "SET" | "RESETSTAT" | "REWRITE" => {
                    out.error("ERR CONFIG SET is not supported: restart with other flags")
                }
                _ => out.error("ERR unknown CONFIG subcommand"),
            }
        }
        "INFO" => {
            let section = a
                .first()
                .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
            out.bulk(info(shared, section.as_deref())?.as_bytes());
        }
        "DBSIZE" => {
            arity!(n == 0);
            let mut count = 0i64;
            for e in shared.db.scan(..).map_err(|e| e.to_string())? {
                e.map_err(|e| e.to_string())?;
                count += 1;
            }
            out.int(count);
        }
        "GET" => {
            arity!(n == 1);
            answer_get(shared, Ok(read(shared, a[0])?), out);
        }
        "SET" => {
            arity!(n >= 2);
            let (mut nx, mut xx, mut get) = (false, false, false);
            for opt in &a[2..] {
                match upper(opt).as_str() {
                    "NX" => nx = true,
                    "XX" => xx = true,
                    "GET" => get = true,
                    "EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL" => {
                        out.error("ERR expiry (EX, PX, EXAT, PXAT, KEEPTTL) is not supported by this server");
                        return Ok(After::Continue);
                    }
                    _ => {
                        out.error("ERR syntax error");
                        return Ok(After::Continue);
                    }
                }
            }
            if nx && xx {
                out.error("ERR syntax error");
                return Ok(After::Continue);
            }
            let key = a[0];
            let _g = lock_stripes(shared, [key]);
            let old = if nx || xx || get {
                read_locked(shared, key)?
            } else {
                None
            };
            let allowed = !(nx && old.is_some() || xx && old.is_none());
            if allowed {
                apply(shared, [(key, Some(a[1]))])?;
            }
            match (get, allowed) {
                (true, _) => match old {
                    Some(v) => out.bulk(&v),
                    None => out.null(),
                },
                (false, true) => out.ok(),
                (false, false) => out.null(),
            }
        }
        "SETNX" => {
            arity!(n == 2);
            let key = a[0];
            let _g = lock_stripes(shared, [key]);
            if read_locked(shared, key)?.is_some() {
                out.int(0);
            } else {
                apply(shared, [(key, Some(a[1]))])?;
                out.int(1);
            }
        }
        "MSET" => {
            arity!(n >= 2 && n.is_multiple_of(2));
            let keys: Vec<&[u8]> = a.chunks(2).map(|p| p[0]).collect();
            let _g = lock_stripes(shared, keys.iter().copied());
            let changes: Vec<(&[u8], Option<&[u8]>)> =
                a.chunks(2).map(|p| (p[0], Some(p[1]))).collect();
            apply(shared, changes.iter().copied())?;
            out.ok();
        }
        "MGET" => {
            arity!(n >= 1);
            let mut values = Vec::with_capacity(n);
            read_many(
                shared,
                a.iter().copied(),
                &mut ReadScratch::default(),
                &mut values,
            );
            let values = values.into_iter().collect::<Result<Vec<_>, _>>()?;
            out.array(n);
            for v in values {
                match v {
                    Some(v) => out.bulk(&v),
                    None => out.null(),
                }
            }
        }
        "DEL" | "UNLINK" => {
            arity!(n >= 1);
            let _g = lock_stripes(shared, a.iter().copied());
            let mut removed = 0;
            let mut changes = Vec::new();
            let mut seen = std::collections::HashSet::new();
            for k in a {
                if seen.insert(*k) && read_locked(shared, k)?.is_some() {
                    removed += 1;
                    changes.push((*k, None));
                }
            }
            if !changes.is_empty() {
                apply(shared, changes.iter().copied())?;
            }
            out.int(removed);
        }
        "EXISTS" => {
            arity!(n >= 1);
            let mut count = 0;
            for k in a {
                if read(shared, k)?.is_some() {
                    count += 1;
                }
            }
            out.int(count);
        }
        "INCR" | "DECR" | "INCRBY" | "DECRBY" => {
            let by = match cmd {
                "INCR" => {
                    arity!(n == 1);
                    1
                }
                "DECR" => {
                    arity!(n == 1);
                    -1
                }
                _ => {
                    arity!(n == 2);
                    let Some(d) = parse_i64(a[1]) else {
                        out.error("ERR value is not an integer or out of range");
                        return Ok(After::Continue);
                    };
                    if cmd == "DECRBY" {
                        d.checked_neg().ok_or("decrement would overflow")?
                    } else {
                        d
                    }
                }
            };
            let key = a[0];
            let _g = lock_stripes(shared, [key]);
            let current = match read_locked(shared, key)? {
                Some(v) => match parse_i64(&v) {
                    Some(x)
                        if v.first() != Some(&b'+') && (v == b"0" || v.first() != Some(&b'0')) =>
                    {
                        x
                    }
                    _ => {
                        out.error("ERR value is not an integer or out of range");
                        return Ok(After::Continue);
                    }
                },
                None => 0,
            };
            let Some(next) = current.checked_add(by) else {
                out.error("ERR increment or decrement would overflow");
                return Ok(After::Continue);
            };
            apply(shared, [(key, Some(next.to_string().as_bytes()))])?;
            out.int(next);
        }
        "APPEND" => {
            arity!(n == 2);
            let key = a[0];
            let _g = lock_stripes(shared, [key]);
            let mut v = read_locked(shared, key)?.unwrap_or_default();
            v.extend_from_slice(a[1]);
            if v.len() > strata::MAX_VALUE_BYTES {
                out.error("ERR string exceeds maximum allowed size");
                return Ok(After::Continue);
            }
            apply(shared, [(key, Some(v.as_slice()))])?;
            out.int(v.len() as i64);
        }
        "STRLEN" => {
            arity!(n == 1);
            out.int(read(shared, a[0])?.map_or(0, |v| v.len() as i64));
        }
        "GETDEL" => {
            arity!(n == 1);
            let key = a[0];
            let _g = lock_stripes(shared, [key]);
            match read_locked(shared, key)? {
                Some(v) => {
                    apply(shared, [(key, None)])?;
                    out.bulk(&v);
                }
                None => out.null(),
            }
        }
        "TYPE" => {
            arity!(n == 1);
            out.simple(if read(shared, a[0])?.is_some() {
                "string"
            } else {
                "none"
            });
        }
        "SCAN" => {
            arity!(n >= 1);
            scan(shared, a, out)?;
        }
        "FLUSHALL" | "FLUSHDB" => {
            flushall(shared)?;
            out.ok();
        }
        _ => {
            let shown: Vec<String> = a
                .iter()
                .take(3)
                .map(|x| format!("'{}'", String::from_utf8_lossy(x)))
                .collect();
            out.error(&format!(
                "ERR unknown command '{}', with args beginning with: {}",
                cmd.to_ascii_lowercase(),
                shown.join(" ")
            ));
        }
    }
    Ok(After::Continue)
}

const COMMAND_NAMES: &[&str] = &[
    "ping", "echo", "quit", "select", "hello", "client", "command", "config", "info", "dbsize",
    "get", "set", "setnx", "mset", "mget", "del", "unlink", "exists", "incr", "decr", "incrby",
    "decrby", "append", "strlen", "getdel", "type", "scan", "flushall", "flushdb",
];

fn config_values(shared: &Shared) -> Vec<(String, String)> {
    let c = &shared.config;
    let appendfsync = match c.sync {
        SyncMode::Always => "always",
        SyncMode::EverySec => "everysec",
        SyncMode::No => "no",
    };
    vec![
        ("appendonly".into(), "yes".into()),
        ("appendfsync".into(), appendfsync.into()),
        ("save".into(), String::new()),
        ("databases".into(), "1".into()),
        ("maxclients".into(), c.max_clients.to_string()),
        ("proto-max-bulk-len".into(), c.max_request_bytes.to_string()),
        (
            "timeout".into(),
            c.idle_timeout.map_or(0, |t| t.as_secs()).to_string(),
        ),
        ("port".into(), shared.port.to_string()),
        ("bind".into(), c.bind.clone()),
        ("dir".into(), c.dir.display().to_string()),
    ]
}

fn info(shared: &Shared, section: Option<&str>) -> Result<String, String> {
    use std::fmt::Write as _;
    let want = |s: &str| {
        section.is_none_or(|x| x == s || x == "all" || x == "everything" || x == "default")
    };
    let c = &shared.counters;
    let mut o = String::new();
    if want("server") {
        let _ = write!(
            o,
            "# Server\r\nredis_version:7.0.0\r\nstrata_version:{}\r\nredis_mode:standalone\r\nos:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::process::id(),
            shared.port,
            shared.started.elapsed().as_secs()
        );
    }
    if want("clients") {
        let _ = write!(
            o,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nrejected_connections:{}\r\n\r\n",
            c.connected.load(Ordering::Relaxed),
            shared.config.max_clients,
            c.rejected.load(Ordering::Relaxed)
        );
    }
    let hits = shared.cache.hits();
    let misses = shared.cache.misses();
    if want("stats") {
        let rate = if hits + misses == 0 {
            0.0
        } else {
            hits as f64 / (hits + misses) as f64
        };
        let _ = write!(
            o,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\nprotocol_errors:{}\r\nhot_cache_bytes:{}\r\nhot_cache_hits:{hits}\r\nhot_cache_misses:{misses}\r\nhot_cache_hit_rate:{rate:.4}\r\nhot_cache_bypassed:{}\r\n\r\n",
            c.connections_received.load(Ordering::Relaxed),
            c.commands.load(Ordering::Relaxed),
            c.keyspace_hits.load(Ordering::Relaxed),
            c.keyspace_misses.load(Ordering::Relaxed),
            c.protocol_errors.load(Ordering::Relaxed),
            shared.cache.bytes(),
            shared.cache.bypassed(),
        );
    }
    let s = shared.db.stats();
    if want("keyspace") {
        // An estimate: entries in SSTs less their tombstones, plus the memtable's last
        // sequence share is not tracked; DBSIZE gives the exact count.
        let estimate: u64 = s
            .files
            .iter()
            .map(|f| f.entries.saturating_sub(2 * f.deletions))
            .sum();
        let _ = write!(o, "# Keyspace\r\ndb0:keys_estimate={estimate}\r\n\r\n");
    }
    if want("lsm") {
        let _ = write!(o, "# LSM\r\n");
        for (i, l) in s.levels.iter().enumerate() {
            let _ = write!(
                o,
                "level{i}:files={},bytes={},target_bytes={}\r\n",
                l.files, l.bytes, l.target_bytes
            );
        }
        let _ = write!(
            o,
            "memtable_bytes:{}\r\nimmutable_memtables:{}\r\nsst_bytes:{}\r\nwal_bytes:{}\r\nwrite_amplification:{:.3}\r\nblock_cache_hits:{}\r\nblock_cache_misses:{}\r\nblock_cache_hit_rate:{:.4}\r\ntable_pinned_bytes:{}\r\nflushes:{}\r\ncompactions:{}\r\nread_compactions:{}\r\nidle_merges:{}\r\nidle_merges_given_up:{}\r\nwrite_stall_micros:{}\r\n",
            s.memtable_bytes,
            s.immutable_memtables,
            s.sst_bytes,
            s.wal_bytes,
            s.write_amplification().unwrap_or(0.0),
            s.block_cache_hits,
            s.block_cache_misses,
            s.cache_hit_rate(),
            s.table_pinned_bytes,
            s.flushes,
            s.compactions,
            s.read_compactions,
            s.idle_merges,
            s.idle_merges_given_up,
            s.write_stall_micros
        );
        if let Some(p) = &s.poisoned {
            let _ = write!(o, "poisoned:{p}\r\n");
        }
    }
    Ok(o)
}

/// `SCAN cursor [MATCH pattern] [COUNT n]`: keys in key order. The cursor is a number that
/// names the key to continue after, kept in a bounded table (the oldest cursors expire).
fn scan(shared: &Shared, a: &[&[u8]], out: &mut Reply<'_>) -> Result<(), String> {
    let cursor: u64 = std::str::from_utf8(a[0])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("invalid cursor")?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut i = 1;
    while i < a.len() {
        match (upper(a[i]).as_str(), a.get(i + 1)) {
            ("MATCH", Some(p)) => pattern = Some(p),
            ("COUNT", Some(c)) => {
                count = std::str::from_utf8(c)
                    .ok()
                    .and_then(|s| s.parse::<usize>().ok())
                    .filter(|&c| c > 0)
                    .ok_or("value is not an integer or out of range")?;
            }
            ("TYPE", Some(_)) => {}
            _ => return Err("syntax error".into()),
        }
        i += 2;
    }
    let after: Option<Vec<u8>> = if cursor == 0 {
        None
    } else {
        let table = shared.cursors.lock().unwrap_or_else(|e| e.into_inner());
        Some(
            table
                .map
                .get(&cursor)
                .cloned()
                .ok_or("invalid cursor (expired or never issued)")?,
        )
    };
    let range = match &after {
        Some(k) => (
            std::ops::Bound::Excluded(k.clone()),
            std::ops::Bound::Unbounded,
        ),
        None => (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded),
    };
    let mut keys = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    let mut finished = true;
    let entries = shared
        .db
        .scan_with(range, strata::ReadOptions::default(), false)
        .map_err(|e| e.to_string())?;
    for (examined, e) in entries.enumerate() {
        let (k, _) = e.map_err(|e| e.to_string())?;
        if examined == count {
            finished = false;
            break;
        }
        if pattern.is_none_or(|p| crate::glob::matches(p, &k)) {
            keys.push(k.clone());
        }
        last = Some(k);
    }
    let next = match (finished, last) {
        (false, Some(k)) => {
            let mut table = shared.cursors.lock().unwrap_or_else(|e| e.into_inner());
            table.next += 1;
            let id = table.next;
            table.map.insert(id, k);
            table.order.push_back(id);
            while table.order.len() > MAX_SCAN_CURSORS {
                if let Some(old) = table.order.pop_front() {
                    table.map.remove(&old);
                }
            }
            id
        }
        _ => 0,
    };
    out.array(2);
    out.bulk(next.to_string().as_bytes());
    out.array(keys.len());
    for k in keys {
        out.bulk(&k);
    }
    Ok(())
}

fn flushall(shared: &Shared) -> Result<(), String> {
    loop {
        let mut batch = WriteBatch::new();
        for e in shared.db.scan(..).map_err(|e| e.to_string())?.take(10_000) {
            let (k, _) = e.map_err(|e| e.to_string())?;
            batch.delete(&k);
        }
        if batch.is_empty() {
            break;
        }
        shared
            .db
            .write(batch, write_opts(shared))
            .map_err(|e| e.to_string())?;
    }
    shared.cache.clear();
    Ok(())
}

//! `strata serve` as a process: expiry times survive SIGKILL and restarts, expired keys are
//! invisible from the moment they expire, and a compaction takes them off the disk.

mod common;

use std::path::Path;

use std::time::Duration;

use redis::Commands;

use common::{free_port, kill, serve, serve_with};

fn pexpiretime(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

fn sst_keys(dir: &Path) -> Vec<(Vec<u8>, bool)> {
    let mut keys = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "sst") {
            let dump = strata::inspect::dump_file(&path, true).unwrap();
            keys.extend(dump.entries.into_iter().map(|e| (e.key, e.deletion)));
        }
    }
    keys
}

#[test]
fn expiry_survives_sigkill_and_expired_keys_leave_the_disk() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("db");
    let port = free_port();
    let (child, mut c) = serve(&dir, port);
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let set_at = now_ms();
    let _: () = redis::cmd("SET")
        .arg("short")
        .arg("v")
        .arg("PX")
        .arg(1500)
        .query(&mut c)
        .unwrap();
    let _: () = c.set_ex("long", "v", 3600).unwrap();
    let _: () = c.set("plain", "v").unwrap();
    let _: () = c.set("soon", "v").unwrap();
    let _: i64 = redis::cmd("PEXPIREAT")
        .arg("soon")
        .arg(set_at + 1200)
        .query(&mut c)
        .unwrap();
    // Writes acknowledged without a sync: they survive a crash of the process.
    let short_at = pexpiretime(&mut c, "short");
    let long_at = pexpiretime(&mut c, "long");
    assert!(
        (set_at + 1500..=now_ms() + 1500).contains(&short_at),
        "{short_at}"
    );
    assert_eq!(pexpiretime(&mut c, "soon"), set_at + 1200);
    kill(child);

    let (child, mut c) = serve(&dir, port);
    assert_eq!(
        pexpiretime(&mut c, "short"),
        short_at,
        "expiry times are absolute"
    );
    assert_eq!(pexpiretime(&mut c, "long"), long_at);
    assert_eq!(pexpiretime(&mut c, "soon"), set_at + 1200);
    assert_eq!(pexpiretime(&mut c, "plain"), -1);
    // Wait until both short keys are due; from then on no read sees them.
    let wait = short_at - now_ms() + 50;
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait as u64));
    }
    assert_eq!(c.get::<_, Option<String>>("short").unwrap(), None);
    assert_eq!(c.exists::<_, i64>(&["short", "soon", "long"]).unwrap(), 1);
    let mut keys: Vec<String> = c.keys("*").unwrap();
    keys.sort();
    assert_eq!(keys, ["long", "plain"]);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 2);
    assert_eq!(c.ttl::<_, i64>("soon").unwrap(), -2);
    kill(child);

    let (child, mut c) = serve(&dir, port);
    assert_eq!(c.get::<_, Option<String>>("short").unwrap(), None);
    assert_eq!(pexpiretime(&mut c, "long"), long_at);
    assert_eq!(c.get::<_, String>("plain").unwrap(), "v");
    let _: () = redis::cmd("COMPACT").query(&mut c).unwrap();
    kill(child);
    // The tables hold the live keys and nothing of the expired ones, not even a tombstone
    // (engine keys are the database's number, then the client's key).
    let on_disk = sst_keys(&dir);
    for gone in [&b"\x00short"[..], b"\x00soon"] {
        assert!(
            !on_disk.iter().any(|(k, _)| k.as_slice() == gone),
            "{} is still on disk: {on_disk:?}",
            String::from_utf8_lossy(gone)
        );
    }
    for kept in [&b"\x00long"[..], b"\x00plain"] {
        assert!(on_disk.iter().any(|(k, del)| k.as_slice() == kept && !del));
    }
}

/// What one writer knows of its keys: the acknowledged value of each (`None`: deleted), and
/// the write in flight when the server died, whose keys may hold either their old or their
/// new values.
#[derive(Default)]
struct Writer {
    acked: std::collections::HashMap<String, Option<String>>,
    in_flight: Vec<(String, Option<String>)>,
}

/// Writes from one connection until the server goes away: SET, MSET, DEL, INCR and a
/// MULTI/EXEC transaction of two SETs on keys of its own, each recorded once its reply came.
fn write_until_killed(port: u16, id: usize, start: u64, w: &mut Writer) {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return;
    };
    let Ok(mut c) = client.get_connection() else {
        return;
    };
    let mut x = start.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ id as u64 | 1;
    for n in start.. {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = |j: u64| format!("w{id}:k{}", j % 50);
        let value = format!("{n}");
        let mut cmd;
        let changes: Vec<(String, Option<String>)>;
        if x % 5 == 4 {
            let (a, b) = (key(x >> 8), format!("w{id}:t{}", (x >> 20) % 50));
            w.in_flight = vec![
                (a.clone(), Some(format!("{value}x"))),
                (b.clone(), Some(format!("{value}y"))),
            ];
            let done: redis::RedisResult<()> = redis::pipe()
                .atomic()
                .set(&a, format!("{value}x"))
                .ignore()
                .set(&b, format!("{value}y"))
                .ignore()
                .query(&mut c);
            if done.is_err() {
                return;
            }
            let changes = std::mem::take(&mut w.in_flight);
            w.acked.extend(changes);
            continue;
        }
        match x % 4 {
            0 => {
                cmd = redis::cmd("SET");
                cmd.arg(key(x >> 8)).arg(&value);
                changes = vec![(key(x >> 8), Some(value))];
            }
            1 => {
                let (a, b) = (key(x >> 8), key(x >> 20));
                cmd = redis::cmd("MSET");
                cmd.arg(&a)
                    .arg(format!("{value}a"))
                    .arg(&b)
                    .arg(format!("{value}b"));
                changes = if a == b {
                    vec![(a, Some(format!("{value}b")))]
                } else {
                    vec![
                        (a, Some(format!("{value}a"))),
                        (b, Some(format!("{value}b"))),
                    ]
                };
            }
            2 => {
                cmd = redis::cmd("DEL");
                cmd.arg(key(x >> 8));
                changes = vec![(key(x >> 8), None)];
            }
            _ => {
                let counter = format!("w{id}:counter");
                let next = match w.acked.get(&counter) {
                    Some(Some(v)) => v.parse::<i64>().unwrap() + 1,
                    _ => 1,
                };
                cmd = redis::cmd("INCR");
                cmd.arg(&counter);
                changes = vec![(counter, Some(next.to_string()))];
            }
        }
        w.in_flight = changes.clone();
        match cmd.query::<redis::Value>(&mut c) {
            Ok(redis::Value::Int(got)) if x % 4 == 3 => {
                assert_eq!(Some(got.to_string()), changes[0].1, "INCR's answer");
                w.acked.extend(changes);
                w.in_flight.clear();
            }
            Ok(_) => {
                w.acked.extend(changes);
                w.in_flight.clear();
            }
            Err(_) => return,
        }
    }
}

/// SIGKILL cycles of the server tests: `STRATA_SERVER_CRASH_CYCLES`, 8 by default.
fn crash_cycles() -> u64 {
    std::env::var("STRATA_SERVER_CRASH_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(8)
}

/// Lets the writers run for a random 100-500 ms before the kill.
fn pause_before_kill(rng: &mut u64) {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    std::thread::sleep(Duration::from_millis(100 + *rng % 400));
}

/// `strata serve --sync always` killed with SIGKILL at random moments while four connections
/// write: after each restart every acknowledged write is there with its value, and a write
/// in flight is there whole or not at all.
#[test]
fn the_server_keeps_every_acknowledged_write_across_sigkills() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("db");
    let port = free_port();
    let cycles = crash_cycles();
    let mut writers: Vec<Writer> = (0..4).map(|_| Writer::default()).collect();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut checked = 0usize;
    for cycle in 0..cycles {
        let (child, _) = serve_with(&dir, port, &["--sync", "always"]);
        let handles: Vec<_> = std::mem::take(&mut writers)
            .into_iter()
            .enumerate()
            .map(|(id, mut w)| {
                std::thread::spawn(move || {
                    write_until_killed(port, id, cycle * 1_000_000, &mut w);
                    w
                })
            })
            .collect();
        pause_before_kill(&mut rng);
        kill(child);
        writers = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let (child, mut c) = serve_with(&dir, port, &["--sync", "always"]);
        for (id, w) in writers.iter_mut().enumerate() {
            for (key, want) in &w.acked {
                if w.in_flight.iter().any(|(k, _)| k == key) {
                    continue;
                }
                let got: Option<String> = c.get(key).unwrap();
                assert_eq!(
                    got, *want,
                    "cycle {cycle}, writer {id}: {key}, acknowledged {want:?}"
                );
                checked += 1;
            }
            // The write in flight is there whole (every key new) or not at all (every key as
            // acknowledged before it).
            let now: Vec<Option<String>> =
                w.in_flight.iter().map(|(k, _)| c.get(k).unwrap()).collect();
            let whole = w.in_flight.iter().zip(&now).all(|((_, v), got)| got == v);
            let none = w
                .in_flight
                .iter()
                .zip(&now)
                .all(|((k, _), got)| *got == w.acked.get(k).cloned().flatten());
            assert!(
                whole || none,
                "cycle {cycle}, writer {id}: the write in flight {:?} left {now:?}",
                w.in_flight
            );
            // What the write in flight left is now the state to build on.
            for (key, _) in std::mem::take(&mut w.in_flight) {
                let got: Option<String> = c.get(&key).unwrap();
                w.acked.insert(key, got);
            }
        }
        kill(child);
    }
    assert!(checked > 100, "{checked} keys checked");
    eprintln!("server crash test: {cycles} SIGKILLs, {checked} acknowledged keys checked");
}

/// The bank through the server: clients move amounts between accounts with WATCH, GET, MULTI,
/// SET, SET, EXEC (retrying when EXEC answers null), while `strata serve --sync always` is
/// SIGKILLed at random moments and restarted; after each restart the total is unchanged and
/// no balance is negative.
#[test]
fn bank_transfers_through_watch_and_exec_keep_the_total_across_sigkills() {
    const ACCOUNTS: u64 = 10;
    const START: i64 = 100;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("db");
    let port = free_port();
    let cycles = crash_cycles();
    let account = |i: u64| format!("acct{i}");
    {
        let (child, mut c) = serve_with(&dir, port, &["--sync", "always"]);
        for i in 0..ACCOUNTS {
            let _: () = c.set(account(i), START).unwrap();
        }
        kill(child);
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let (mut committed, mut retried) = (0u64, 0u64);
    for cycle in 0..cycles {
        let (child, _) = serve_with(&dir, port, &["--sync", "always"]);
        let movers: Vec<_> = (0..3u64)
            .map(|m| {
                std::thread::spawn(move || {
                    let (mut done, mut again) = (0u64, 0u64);
                    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    else {
                        return (done, again);
                    };
                    let Ok(mut c) = client.get_connection() else {
                        return (done, again);
                    };
                    let mut x = ((cycle + 1) * 7919 + m * 104_729) | 1;
                    loop {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let from = account(x % ACCOUNTS);
                        let to = account((x % ACCOUNTS + 1 + (x >> 8) % (ACCOUNTS - 1)) % ACCOUNTS);
                        let amount = (x >> 16) as i64 % 20 + 1;
                        let mut step = || -> redis::RedisResult<Option<()>> {
                            redis::cmd("WATCH")
                                .arg(&from)
                                .arg(&to)
                                .query::<()>(&mut c)?;
                            let a: i64 = redis::cmd("GET").arg(&from).query(&mut c)?;
                            let b: i64 = redis::cmd("GET").arg(&to).query(&mut c)?;
                            if a < amount {
                                redis::cmd("UNWATCH").query::<()>(&mut c)?;
                                return Ok(Some(()));
                            }
                            redis::pipe()
                                .atomic()
                                .set(&from, a - amount)
                                .ignore()
                                .set(&to, b + amount)
                                .ignore()
                                .query(&mut c)
                        };
                        match step() {
                            Ok(Some(())) => done += 1,
                            Ok(None) => again += 1,
                            Err(_) => return (done, again),
                        }
                    }
                })
            })
            .collect();
        pause_before_kill(&mut rng);
        kill(child);
        for m in movers {
            let (d, a) = m.join().unwrap();
            committed += d;
            retried += a;
        }
        let (child, mut c) = serve_with(&dir, port, &["--sync", "always"]);
        let balances: Vec<i64> = (0..ACCOUNTS).map(|i| c.get(account(i)).unwrap()).collect();
        assert_eq!(
            balances.iter().sum::<i64>(),
            ACCOUNTS as i64 * START,
            "cycle {cycle}: the total changed: {balances:?}"
        );
        assert!(
            balances.iter().all(|&b| b >= 0),
            "cycle {cycle}: {balances:?}"
        );
        kill(child);
    }
    eprintln!(
        "server bank: {cycles} SIGKILLs, {committed} transfers, {retried} retried after EXEC \
         answered null; the total never changed"
    );
    assert!(committed > 0);
}

/// What one writer knows of its hash and set: each field's acknowledged value and each
/// member's presence (`None`: absent), and the element the write in flight changes, which
/// may hold either its old or its new state.
#[derive(Default)]
struct CollectionWriter {
    acked: std::collections::BTreeMap<String, Option<String>>,
    in_flight: Option<(String, Option<String>)>,
}

/// The hash and set of writer `id` as the server holds them, as `h:field` and `s:member`
/// entries.
fn collections_of(c: &mut redis::Connection, id: usize) -> Vec<(String, String)> {
    let hash: Vec<(String, String)> = c.hgetall(format!("w{id}:hash")).unwrap();
    let set: Vec<String> = c.smembers(format!("w{id}:set")).unwrap();
    let zset: Vec<(String, String)> = redis::cmd("ZRANGE")
        .arg(format!("w{id}:zset"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(c)
        .unwrap();
    let mut all: Vec<(String, String)> = hash
        .into_iter()
        .map(|(f, v)| (format!("h:{f}"), v))
        .chain(set.into_iter().map(|m| (format!("s:{m}"), String::new())))
        .chain(zset.into_iter().map(|(m, s)| (format!("z:{m}"), s)))
        .collect();
    all.sort();
    all
}

/// Writes HSET, HDEL, HINCRBY, SADD, SREM, ZADD and ZREM to one connection's own hash, set
/// and sorted set until the server goes away, each recorded once its reply came.
fn write_collections_until_killed(port: u16, id: usize, start: u64, w: &mut CollectionWriter) {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return;
    };
    let Ok(mut c) = client.get_connection() else {
        return;
    };
    let (hash, set, zset) = (
        format!("w{id}:hash"),
        format!("w{id}:set"),
        format!("w{id}:zset"),
    );
    let mut x = start.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ id as u64 | 1;
    for n in start.. {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Few elements: collections empty out and are made again, under new versions.
        let element = format!("e{}", (x >> 8) % 6);
        let mut cmd;
        let change = match x % 7 {
            0 => {
                cmd = redis::cmd("HSET");
                cmd.arg(&hash).arg(&element).arg(n);
                (format!("h:{element}"), Some(n.to_string()))
            }
            1 => {
                cmd = redis::cmd("HDEL");
                cmd.arg(&hash).arg(&element);
                (format!("h:{element}"), None)
            }
            2 => {
                let field = format!("h:counter{}", id);
                let next = match w.acked.get(&field) {
                    Some(Some(v)) => v.parse::<i64>().unwrap() + 1,
                    _ => 1,
                };
                cmd = redis::cmd("HINCRBY");
                cmd.arg(&hash).arg(format!("counter{id}")).arg(1);
                (field, Some(next.to_string()))
            }
            5 => {
                cmd = redis::cmd("ZADD");
                cmd.arg(&zset).arg(n % 1000).arg(&element);
                (format!("z:{element}"), Some((n % 1000).to_string()))
            }
            6 => {
                cmd = redis::cmd("ZREM");
                cmd.arg(&zset).arg(&element);
                (format!("z:{element}"), None)
            }
            3 => {
                cmd = redis::cmd("SADD");
                cmd.arg(&set).arg(&element);
                (format!("s:{element}"), Some(String::new()))
            }
            _ => {
                cmd = redis::cmd("SREM");
                cmd.arg(&set).arg(&element);
                (format!("s:{element}"), None)
            }
        };
        w.in_flight = Some(change.clone());
        match cmd.query::<redis::Value>(&mut c) {
            Ok(redis::Value::Int(got)) if x % 7 == 2 => {
                assert_eq!(Some(got.to_string()), change.1, "HINCRBY's answer");
            }
            Ok(_) => {}
            Err(_) => return,
        }
        w.acked.insert(change.0, change.1);
        w.in_flight = None;
    }
}

/// `strata serve --sync always` killed with SIGKILL while three connections write to hashes,
/// sets and sorted sets: after each restart every acknowledged field and member is there with
/// its value, nothing else is, and the element of the write in flight holds its old or its
/// new state.
#[test]
fn collections_keep_every_acknowledged_write_across_sigkills() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("db");
    let port = free_port();
    let cycles = crash_cycles();
    let mut writers: Vec<CollectionWriter> = (0..3).map(|_| CollectionWriter::default()).collect();
    let mut rng = 0x6c07_8965_d5a4_1e2fu64;
    let mut checked = 0usize;
    for cycle in 0..cycles {
        let (child, _) = serve_with(&dir, port, &["--sync", "always"]);
        let handles: Vec<_> = std::mem::take(&mut writers)
            .into_iter()
            .enumerate()
            .map(|(id, mut w)| {
                std::thread::spawn(move || {
                    write_collections_until_killed(port, id, cycle * 1_000_000, &mut w);
                    w
                })
            })
            .collect();
        pause_before_kill(&mut rng);
        kill(child);
        writers = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let (child, mut c) = serve_with(&dir, port, &["--sync", "always"]);
        for (id, w) in writers.iter_mut().enumerate() {
            let got: std::collections::BTreeMap<String, String> =
                collections_of(&mut c, id).into_iter().collect();
            let flight = w.in_flight.take();
            let mut want: std::collections::BTreeMap<String, String> = w
                .acked
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
                .collect();
            if let Some((k, new)) = &flight {
                let old = w.acked.get(k).cloned().flatten();
                let now = got.get(k).cloned();
                assert!(
                    now == *new || now == old,
                    "cycle {cycle}, writer {id}: {k} in flight from {old:?} to {new:?} is {now:?}"
                );
                // What the write in flight left is now the state to build on.
                match now {
                    Some(v) => want.insert(k.clone(), v),
                    None => want.remove(k),
                };
                w.acked.insert(k.clone(), got.get(k).cloned());
            }
            assert_eq!(got, want, "cycle {cycle}, writer {id}");
            checked += want.len();
        }
        kill(child);
    }
    assert!(checked > 100, "{checked} fields and members checked");
    eprintln!("collection crash test: {cycles} SIGKILLs, {checked} fields and members checked");
}

/// What a stream's producer and consumer were told: entries added (ID to value), entries
/// delivered to the consumer and entries acknowledged, and the command in flight at the kill.
#[derive(Default)]
struct StreamLog {
    added: std::collections::BTreeMap<String, String>,
    delivered: std::collections::BTreeSet<String>,
    acked: std::collections::BTreeSet<String>,
    in_flight: Option<StreamOp>,
    next: u64,
}

enum StreamOp {
    Add(String),
    Read,
    Ack(Vec<String>),
}

/// Adds entries, reads them through a consumer group and acknowledges every other one, one
/// command at a time, until the server dies.
fn stream_until_killed(port: u16, log: &mut StreamLog) {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return;
    };
    let Ok(mut c) = client.get_connection() else {
        return;
    };
    loop {
        log.next += 1;
        let value = format!("v{}", log.next);
        log.in_flight = Some(StreamOp::Add(value.clone()));
        let Ok(id) = redis::cmd("XADD")
            .arg("jobs")
            .arg("*")
            .arg("n")
            .arg(&value)
            .query::<String>(&mut c)
        else {
            return;
        };
        log.added.insert(id, value);
        if !log.next.is_multiple_of(3) {
            continue;
        }
        log.in_flight = Some(StreamOp::Read);
        let read = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("workers")
            .arg("w1")
            .arg("COUNT")
            .arg(2)
            .arg("STREAMS")
            .arg("jobs")
            .arg(">")
            .query::<redis::streams::StreamReadReply>(&mut c);
        let Ok(read) = read else { return };
        let ids: Vec<String> = read
            .keys
            .iter()
            .flat_map(|k| k.ids.iter().map(|e| e.id.clone()))
            .collect();
        log.delivered.extend(ids.iter().cloned());
        let acking: Vec<String> = ids.into_iter().step_by(2).collect();
        if acking.is_empty() {
            continue;
        }
        log.in_flight = Some(StreamOp::Ack(acking.clone()));
        let Ok(n) = redis::cmd("XACK")
            .arg("jobs")
            .arg("workers")
            .arg(&acking)
            .query::<usize>(&mut c)
        else {
            return;
        };
        assert_eq!(
            n,
            acking.len(),
            "acknowledged entries that were not pending"
        );
        log.acked.extend(acking);
    }
}

/// `strata serve --sync always` killed with SIGKILL while a producer adds to a stream and a
/// consumer group reads and acknowledges: after each restart every acknowledged entry is in
/// the stream with its value, every entry delivered and not acknowledged is pending, every
/// acknowledged one is not, and the command in flight took effect whole or not at all.
#[test]
fn streams_keep_every_acknowledged_entry_and_acknowledgement_across_sigkills() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("db");
    let port = free_port();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut log = StreamLog::default();
    {
        let (child, mut c) = serve_with(&dir, port, &["--sync", "always"]);
        let made: String = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg("jobs")
            .arg("workers")
            .arg("$")
            .arg("MKSTREAM")
            .query(&mut c)
            .unwrap();
        assert_eq!(made, "OK");
        kill(child);
    }
    for cycle in 0..crash_cycles() {
        let (child, _) = serve_with(&dir, port, &["--sync", "always"]);
        let handle = std::thread::spawn(move || {
            stream_until_killed(port, &mut log);
            log
        });
        pause_before_kill(&mut rng);
        kill(child);
        log = handle.join().unwrap();
        let (child, mut c) = serve_with(&dir, port, &["--sync", "always"]);
        check_stream(&mut c, &mut log, cycle);
        kill(child);
    }
    assert!(
        log.acked.len() > 20,
        "{} acknowledgements checked",
        log.acked.len()
    );
    eprintln!(
        "stream crash test: {} entries, {} delivered, {} acknowledged",
        log.added.len(),
        log.delivered.len(),
        log.acked.len()
    );
}

/// Compares the restarted server's stream and pending list with what the clients were told,
/// and takes what the command in flight left as the state to go on from.
fn check_stream(c: &mut redis::Connection, log: &mut StreamLog, cycle: u64) {
    let entries: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg("jobs")
        .arg("-")
        .arg("+")
        .query(c)
        .unwrap();
    let mut got: std::collections::BTreeMap<String, String> = entries
        .ids
        .iter()
        .map(|e| (e.id.clone(), e.get::<String>("n").unwrap()))
        .collect();
    if let Some(StreamOp::Add(value)) = &log.in_flight {
        // The add in flight is the last entry, if it is there at all.
        let extra: Vec<String> = got
            .iter()
            .filter(|(id, _)| !log.added.contains_key(*id))
            .map(|(id, _)| id.clone())
            .collect();
        assert!(
            extra.len() <= 1,
            "cycle {cycle}: entries never added: {extra:?}"
        );
        if let Some(id) = extra.first() {
            assert_eq!(&got[id], value, "cycle {cycle}: the entry in flight");
            log.added.insert(id.clone(), value.clone());
        }
    }
    assert_eq!(got, log.added, "cycle {cycle}: the stream's entries");
    got.clear();
    let pending: Vec<Vec<redis::Value>> = redis::cmd("XPENDING")
        .arg("jobs")
        .arg("workers")
        .arg("-")
        .arg("+")
        .arg(1_000_000)
        .query(c)
        .unwrap();
    let pending: std::collections::BTreeSet<String> = pending
        .iter()
        .map(|row| redis::from_redis_value::<String>(&row[0]).unwrap())
        .collect();
    let mut want: std::collections::BTreeSet<String> =
        log.delivered.difference(&log.acked).cloned().collect();
    match log.in_flight.take() {
        Some(StreamOp::Read) => {
            // A read in flight (COUNT 2) delivered nothing, or the one or two entries right
            // after the last one the consumer saw.
            let seen = log
                .delivered
                .iter()
                .map(|id| numeric(id))
                .max()
                .unwrap_or((0, 0));
            let mut extra: Vec<(u64, u64)> =
                pending.difference(&want).map(|id| numeric(id)).collect();
            extra.sort_unstable();
            let next: Vec<(u64, u64)> = log
                .added
                .keys()
                .map(|id| numeric(id))
                .filter(|id| *id > seen)
                .take(extra.len())
                .collect();
            assert!(
                extra.len() <= 2 && extra == next,
                "cycle {cycle}: the read in flight left {extra:?} pending, after {seen:?}"
            );
            log.delivered.extend(pending.iter().cloned());
            want = log.delivered.difference(&log.acked).cloned().collect();
        }
        Some(StreamOp::Ack(ids)) => {
            // The acknowledgement in flight took all its entries or none.
            let gone = ids.iter().all(|id| !pending.contains(id));
            let kept = ids.iter().all(|id| pending.contains(id));
            assert!(
                gone || kept,
                "cycle {cycle}: an acknowledgement taken in part: {ids:?}"
            );
            if gone {
                log.acked.extend(ids.iter().cloned());
                want = log.delivered.difference(&log.acked).cloned().collect();
            }
        }
        _ => {}
    }
    assert_eq!(pending, want, "cycle {cycle}: the pending entries");
    // The group's own count agrees with its list.
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("jobs")
        .query(c)
        .unwrap();
    let count: usize = redis::from_redis_value(&groups[0]["pending"]).unwrap();
    assert_eq!(
        count,
        pending.len(),
        "cycle {cycle}: the group's pending count"
    );
}

/// An entry ID as its two numbers, which order IDs as the stream does.
fn numeric(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap();
    (ms.parse().unwrap(), seq.parse().unwrap())
}

fn config_get(c: &mut redis::Connection, name: &str) -> String {
    let got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(c).unwrap();
    got.get(1).cloned().unwrap_or_default()
}

/// `strata serve FILE`: the file's settings apply, a flag on the command line overrides
/// the file, CONFIG REWRITE writes the running settings back keeping the file's comments,
/// and the next start runs with them. A directive the server does not know stops it.
#[test]
fn a_configuration_file_is_read_at_start_and_written_back_by_config_rewrite() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("db");
    let file = t.path().join("strata.conf");
    std::fs::write(
        &file,
        "# the operator's note\nslowlog-max-len 10\nport 1\nlatency-monitor-threshold 5\n",
    )
    .unwrap();
    let port = free_port();
    let flags = [file.to_str().unwrap()];
    let (child, mut c) = serve_with(&dir, port, &flags);
    assert_eq!(config_get(&mut c, "slowlog-max-len"), "10");
    assert_eq!(config_get(&mut c, "latency-monitor-threshold"), "5");
    assert_eq!(config_get(&mut c, "port"), port.to_string());
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg(20)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut c).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "# the operator's note",
            "slowlog-max-len 20",
            &format!("port {port}"),
            "latency-monitor-threshold 5"
        ]
    );
    assert!(lines.contains(&"appendfsync everysec"), "{text}");
    kill(child);
    let (child, mut c) = serve_with(&dir, port, &flags);
    assert_eq!(config_get(&mut c, "slowlog-max-len"), "20");
    kill(child);
    std::fs::write(&file, "slowlog-max-len 10\nno-such-thing yes\n").unwrap();
    let out = common::strata_command()
        .args([
            "serve",
            file.to_str().unwrap(),
            "--dir",
            dir.to_str().unwrap(),
        ])
        .args(["--port", &free_port().to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'no-such-thing'"), "{err}");
}

//! The server against a model of Redis's string keyspace: random commands over a few
//! databases, with empty values, binary keys, repeated keys within one MGET, expiry judged by
//! a clock the test moves, and restarts. Every reply must equal the model's, errors
//! included (a server error where the model expects one, never a dropped connection). Some
//! runs of commands go as one MULTI/EXEC transaction, sent as plain commands so that EXEC's
//! array is read slot by slot, each slot against the model's reply, errors among them. Some
//! transactions WATCH a key first: one that another connection then writes is aborted (EXEC
//! answers nil and nothing of it happens), one left alone or UNWATCHed runs.
//!
//! The seed is printed; `STRATA_SEED=n` replays a run.

mod common;

use std::collections::BTreeMap;

use redis::{ConnectionLike, Value};
use strata_server::{Clock, Config, Server, SyncMode};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

const KEYS: &[&[u8]] = &[
    b"",
    b"a",
    b"k00277",
    b"k00106",
    b"\x00",
    b"\x00\xff",
    b"\xff\xfe",
    b"key with spaces",
    b"k\r\n",
    b"k*",
    b"long-key-long-key-long-key",
    b"n",
];
const VALUES: &[&[u8]] = &[
    b"",
    b"",
    b"0",
    b"12",
    b"-3",
    b"abc",
    b"\x00\x01\xff",
    b"x y",
];

/// A command drawn, and the reply the model expects (`Err`: an error reply).
type Drawn = (Vec<Vec<u8>>, Result<Value, ()>);

/// Each database's keys: value and expiry time (Unix ms).
type Model = BTreeMap<(u8, Vec<u8>), (Vec<u8>, Option<u64>)>;

fn live(m: &Model, db: u8, k: &[u8], now: u64) -> Option<(Vec<u8>, Option<u64>)> {
    m.get(&(db, k.to_vec()))
        .filter(|(_, t)| t.is_none_or(|t| t > now))
        .cloned()
}

fn bulk(v: Option<Vec<u8>>) -> Value {
    v.map_or(Value::Nil, Value::BulkString)
}

fn start(dir: &std::path::Path, clock: &Clock) -> (Server, redis::Connection) {
    let server = Server::start(Config {
        dir: dir.to_path_buf(),
        port: 0,
        sync: SyncMode::No,
        // Small enough that evictions and refills happen; the hot-key cache is on.
        cache_bytes: 64 * 1024,
        clock: clock.clone(),
        active_expiry: Some(std::time::Duration::from_millis(5)),
        engine: strata::Options {
            write_buffer_size: 4096,
            idle_merge_after: None,
            ..common::engine_options()
        },
        ..Config::default()
    })
    .unwrap();
    let c = redis::Client::open(format!("redis://{}/", server.local_addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    (server, c)
}

fn command(args: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::cmd(std::str::from_utf8(&args[0]).unwrap());
    for a in &args[1..] {
        cmd.arg(a.as_slice());
    }
    cmd
}

/// Runs one command; a server error comes back as `Value::ServerError`, and only a failure
/// of the connection itself as `Err`.
fn run(c: &mut redis::Connection, args: &[Vec<u8>]) -> redis::RedisResult<Value> {
    c.req_packed_command(&command(args).get_packed_command())
}

/// How a transaction watches: not at all, a key left alone, a key another connection writes
/// before EXEC (aborting it), or a key written after UNWATCH (not aborting it).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Watch {
    None,
    Untouched,
    Touched,
    Unwatched,
}

fn text(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

#[test]
fn random_commands_answer_as_the_model_does() {
    let seed = common::seed();
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(1_700_000_000_000);
    let (mut server, mut c) = start(dir.path(), &clock);
    let mut m: Model = BTreeMap::new();
    let mut db: u8 = 0;
    let steps = 3000;
    // Commands drawn for a transaction, with their expected replies, and how many it takes.
    let mut block: Vec<Drawn> = Vec::new();
    let mut block_len = 0;
    // The transaction's watch, and the model and database to return to if it aborts.
    let mut watch = Watch::None;
    let mut before: Option<(Model, u8)> = None;
    let (mut runs_watched, mut aborts) = (0, 0);
    for step in 0..steps {
        if block_len == 0 && rng.below(12) == 0 {
            block_len = 2 + rng.below(4) as usize;
            watch = *rng.pick(&[
                Watch::None,
                Watch::None,
                Watch::Untouched,
                Watch::Touched,
                Watch::Unwatched,
            ]);
            if watch != Watch::None {
                let key = rng.pick(KEYS).to_vec();
                let ok = run(&mut c, &[text("WATCH"), key.clone()]).unwrap();
                assert_eq!(ok, Value::Okay, "seed {seed}, step {step}: WATCH");
                if watch == Watch::Unwatched {
                    let ok = run(&mut c, &[text("UNWATCH")]).unwrap();
                    assert_eq!(ok, Value::Okay, "seed {seed}, step {step}: UNWATCH");
                }
                if watch != Watch::Untouched {
                    // Another client writes the key, in the database the watch was taken in.
                    let addr = server.local_addr();
                    let mut other = redis::Client::open(format!("redis://{addr}/"))
                        .unwrap()
                        .get_connection()
                        .unwrap();
                    let select = run(&mut other, &[text("SELECT"), text(&db.to_string())]);
                    assert_eq!(select.unwrap(), Value::Okay);
                    let set = run(&mut other, &[text("SET"), key.clone(), text("touched")]);
                    assert_eq!(set.unwrap(), Value::Okay);
                    m.insert((db, key), (text("touched"), None));
                }
            }
            before = Some((m.clone(), db));
        }
        if block_len == 0 && step % 500 == 499 {
            // A restart: the data, the expiry times and nothing else survive.
            server.shutdown().unwrap();
            (server, c) = start(dir.path(), &clock);
            db = 0;
        }
        let now = clock.now_ms();
        let key = rng.pick(KEYS).to_vec();
        let value = rng.pick(VALUES).to_vec();
        let cur = live(&m, db, &key, now);
        let (args, want): (Vec<Vec<u8>>, Result<Value, ()>) = match rng.below(20) {
            0 | 1 => {
                // SET with one random option.
                let mut args = vec![text("SET"), key.clone(), value.clone()];
                let (mut expiry, mut nx, mut xx, mut get) = (None, false, false, false);
                match rng.below(7) {
                    0 => {
                        let ms = 1 + rng.below(4000);
                        args.extend([text("PX"), text(&ms.to_string())]);
                        expiry = Some(now + ms);
                    }
                    1 => {
                        let secs = rng.below(4);
                        args.extend([text("EX"), text(&secs.to_string())]);
                        expiry = Some(now + secs * 1000);
                    }
                    2 => {
                        args.push(text("NX"));
                        nx = true;
                    }
                    3 => {
                        args.push(text("XX"));
                        xx = true;
                    }
                    4 => {
                        args.push(text("GET"));
                        get = true;
                    }
                    5 => {
                        args.push(text("KEEPTTL"));
                        expiry = cur.as_ref().and_then(|c| c.1);
                    }
                    _ => {}
                }
                if expiry == Some(now) {
                    // EX 0 is an error, as in Redis.
                    (args, Err(()))
                } else {
                    let allowed = !(nx && cur.is_some() || xx && cur.is_none());
                    if allowed {
                        m.insert((db, key.clone()), (value.clone(), expiry));
                    }
                    let reply = if get {
                        bulk(cur.map(|c| c.0))
                    } else if allowed {
                        Value::Okay
                    } else {
                        Value::Nil
                    };
                    (args, Ok(reply))
                }
            }
            2 | 3 => (vec![text("GET"), key], Ok(bulk(cur.map(|c| c.0)))),
            4 | 5 => {
                // MGET with repeated keys, the regression's shape among them.
                let n = 1 + rng.below(7) as usize;
                let keys: Vec<Vec<u8>> = (0..n).map(|_| rng.pick(KEYS).to_vec()).collect();
                let want = keys
                    .iter()
                    .map(|k| bulk(live(&m, db, k, now).map(|c| c.0)))
                    .collect();
                let mut args = vec![text("MGET")];
                args.extend(keys);
                (args, Ok(Value::Array(want)))
            }
            6 => {
                let other = rng.pick(KEYS).to_vec();
                let mut n = 0;
                for k in [&key, &other] {
                    if live(&m, db, k, now).is_some() {
                        m.remove(&(db, k.clone()));
                        n += 1;
                    }
                }
                (vec![text("DEL"), key, other], Ok(Value::Int(n)))
            }
            7 => {
                let n = i64::from(cur.is_some());
                (
                    vec![text("EXISTS"), key.clone(), key],
                    Ok(Value::Int(2 * n)),
                )
            }
            8 => {
                // PEXPIRE with a flag.
                let ms = rng.below(3000) as i64 - 500;
                let flag = *rng.pick(&["", "NX", "XX", "GT", "LT"]);
                let mut args = vec![text("PEXPIRE"), key.clone(), text(&ms.to_string())];
                if !flag.is_empty() {
                    args.push(text(flag));
                }
                let at = now as i64 + ms;
                let reply = match cur {
                    None => 0,
                    Some((v, t)) => {
                        let t = t.map(|t| t as i64);
                        let refused = match flag {
                            "NX" => t.is_some(),
                            "XX" => t.is_none(),
                            "GT" => t.is_none_or(|t| at <= t),
                            "LT" => t.is_some_and(|t| at >= t),
                            _ => false,
                        };
                        if refused {
                            0
                        } else {
                            if at <= now as i64 {
                                m.remove(&(db, key.clone()));
                            } else {
                                m.insert((db, key.clone()), (v, Some(at as u64)));
                            }
                            1
                        }
                    }
                };
                (args, Ok(Value::Int(reply)))
            }
            9 => {
                let reply = match &cur {
                    None => -2,
                    Some((_, None)) => -1,
                    Some((_, Some(t))) => (t - now) as i64,
                };
                (vec![text("PTTL"), key], Ok(Value::Int(reply)))
            }
            10 => {
                let reply = match cur {
                    Some((v, Some(_))) => {
                        m.insert((db, key.clone()), (v, None));
                        1
                    }
                    _ => 0,
                };
                (vec![text("PERSIST"), key], Ok(Value::Int(reply)))
            }
            11 => {
                // INCR keeps the expiry; a value that is not an integer is an error.
                // Redis's integers: no sign but '-', no leading zeros, no "-0".
                let canonical = |s: &str| s.parse::<i64>().ok().filter(|n| n.to_string() == s);
                let want = match &cur {
                    None => Ok(0),
                    Some((v, _)) => std::str::from_utf8(v).ok().and_then(canonical).ok_or(()),
                };
                let want = want.and_then(|n| n.checked_add(1).ok_or(())).map(|n| {
                    let t = cur.as_ref().and_then(|c| c.1);
                    m.insert((db, key.clone()), (text(&n.to_string()), t));
                    Value::Int(n)
                });
                (vec![text("INCR"), key], want)
            }
            12 => {
                let (mut v, t) = cur.unwrap_or_default();
                v.extend_from_slice(&value);
                let len = v.len() as i64;
                m.insert((db, key.clone()), (v, t));
                (vec![text("APPEND"), key, value], Ok(Value::Int(len)))
            }
            13 => {
                let offset = rng.below(6) as usize;
                let reply = if value.is_empty() {
                    cur.map_or(0, |c| c.0.len() as i64)
                } else {
                    let (mut v, t) = cur.unwrap_or_default();
                    if v.len() < offset + value.len() {
                        v.resize(offset + value.len(), 0);
                    }
                    v[offset..offset + value.len()].copy_from_slice(&value);
                    let len = v.len() as i64;
                    m.insert((db, key.clone()), (v, t));
                    len
                };
                let args = vec![text("SETRANGE"), key, text(&offset.to_string()), value];
                (args, Ok(Value::Int(reply)))
            }
            14 => {
                if cur.is_some() {
                    m.remove(&(db, key.clone()));
                }
                (vec![text("GETDEL"), key], Ok(bulk(cur.map(|c| c.0))))
            }
            15 => {
                db = rng.below(3) as u8;
                (vec![text("SELECT"), text(&db.to_string())], Ok(Value::Okay))
            }
            16 => {
                let n = m
                    .iter()
                    .filter(|((d, _), (_, t))| *d == db && t.is_none_or(|t| t > now))
                    .count();
                (vec![text("DBSIZE")], Ok(Value::Int(n as i64)))
            }
            17 => {
                let keys: Vec<Value> = m
                    .iter()
                    .filter(|((d, _), (_, t))| *d == db && t.is_none_or(|t| t > now))
                    .map(|((_, k), _)| Value::BulkString(k.clone()))
                    .collect();
                (vec![text("KEYS"), text("*")], Ok(Value::Array(keys)))
            }
            18 => {
                // RENAME keeps the expiry; a missing source is an error.
                let to = rng.pick(KEYS).to_vec();
                let want = match cur {
                    None => Err(()),
                    Some(v) => {
                        m.remove(&(db, key.clone()));
                        m.insert((db, to.clone()), v);
                        Ok(Value::Okay)
                    }
                };
                (vec![text("RENAME"), key, to], want)
            }
            _ if block_len > 0 => continue,
            _ => {
                // Half the time the clock lands exactly on a key's expiry: the boundary
                // where the key must just have gone.
                let due: Vec<u64> = m
                    .values()
                    .filter_map(|(_, t)| *t)
                    .filter(|&t| t > now)
                    .collect();
                if !due.is_empty() && rng.below(2) == 0 {
                    clock.set_ms(*rng.pick(&due));
                } else {
                    clock.advance_ms(rng.below(1500));
                }
                continue;
            }
        };
        let shown = |a: &[Vec<u8>]| {
            a.iter()
                .map(|x| format!("{:?}", String::from_utf8_lossy(x)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if block_len > 0 {
            // The clock stands still while a transaction is drawn: EXEC runs every command
            // at one moment.
            block.push((args, want));
            if block.len() < block_len {
                continue;
            }
            let mut p = redis::pipe();
            p.add_command(redis::cmd("MULTI"));
            for (args, _) in &block {
                p.add_command(command(args));
            }
            p.add_command(redis::cmd("EXEC"));
            let got = c
                .req_packed_commands(&p.get_packed_pipeline(), 0, block.len() + 2)
                .unwrap_or_else(|e| panic!("seed {seed}, step {step}: the transaction: {e}"));
            let all: Vec<String> = block.iter().map(|(a, _)| shown(a)).collect();
            let queued = Value::SimpleString("QUEUED".into());
            assert_eq!(
                got.len(),
                block.len() + 2,
                "seed {seed}, step {step}: {all:?}"
            );
            assert_eq!(got[0], Value::Okay, "seed {seed}, step {step}: MULTI");
            for (args, reply) in block.iter().map(|(a, _)| a).zip(&got[1..=block.len()]) {
                assert_eq!(
                    reply,
                    &queued,
                    "seed {seed}, step {step}: {} in MULTI {all:?}",
                    shown(args)
                );
            }
            let exec = &got[block.len() + 1];
            if watch == Watch::Touched {
                // Aborted: nil, and nothing the block did happened.
                assert_eq!(exec, &Value::Nil, "seed {seed}, step {step}: EXEC {all:?}");
                (m, db) = before.take().unwrap();
                aborts += 1;
            } else {
                let Value::Array(replies) = exec else {
                    panic!("seed {seed}, step {step}: EXEC {all:?} answered {exec:?}");
                };
                assert_eq!(
                    replies.len(),
                    block.len(),
                    "seed {seed}, step {step}: {all:?}"
                );
                for ((args, want), got) in block.iter().zip(replies) {
                    match want {
                        Ok(w) => assert_eq!(
                            got,
                            w,
                            "seed {seed}, step {step}: {} in MULTI {all:?}",
                            shown(args)
                        ),
                        Err(()) => assert!(
                            matches!(got, Value::ServerError(_)),
                            "seed {seed}, step {step}: {} in MULTI: got {got:?}",
                            shown(args)
                        ),
                    }
                }
                if watch != Watch::None {
                    runs_watched += 1;
                }
            }
            block.clear();
            block_len = 0;
            continue;
        }
        let got = run(&mut c, &args)
            .unwrap_or_else(|e| panic!("seed {seed}, step {step}: {}: {e}", shown(&args)));
        match &want {
            Ok(w) => assert_eq!(
                &got,
                w,
                "seed {seed}, step {step}: {} (db {db})",
                shown(&args)
            ),
            Err(()) => assert!(
                matches!(got, Value::ServerError(_)),
                "seed {seed}, step {step}: {} (db {db}): got {got:?}, want an error",
                shown(&args)
            ),
        }
    }
    server.shutdown().unwrap();
    // Over 3,000 steps about 250 transactions run: both kinds of watched outcome occur.
    assert!(
        runs_watched > 0 && aborts > 0,
        "seed {seed}: {runs_watched} watched transactions ran, {aborts} aborted"
    );
}

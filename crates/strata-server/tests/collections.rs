//! Hashes, sets and sorted sets against a model of Redis's keyspace with strings and the
//! three collections: random
//! commands over a few keys and two databases, expiry judged by a clock the test moves,
//! WRONGTYPE wherever a command meets a key of another kind, restarts, and some runs of
//! commands as one MULTI/EXEC transaction. Every reply must equal the model's (an error where
//! the model expects one); replies that list members are compared in full, in member order.
//!
//! The seed is printed; `STRATA_SEED=n` replays a run.

mod common;

use std::collections::{BTreeMap, BTreeSet};

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

const KEYS: &[&[u8]] = &[b"h", b"s", b"x", b"\x00k", b"long key name"];
/// Lists get keys of their own besides: other kinds meet them less, so they grow longer.
const LIST_KEYS: &[&[u8]] = &[b"l1", b"l2", b"x"];
const MEMBERS: &[&[u8]] = &[b"", b"a", b"b", b"\x00", b"\xff\x01", b"member c"];
const VALUES: &[&[u8]] = &[b"", b"1", b"-7", b"12", b"abc", b"\x00\xff"];

#[derive(Clone, Debug, PartialEq)]
enum V {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
    ZSet(BTreeMap<Vec<u8>, f64>),
    List(std::collections::VecDeque<Vec<u8>>),
}

/// Each database's keys: value and expiry time (Unix ms).
type Model = BTreeMap<(u8, Vec<u8>), (V, Option<u64>)>;

/// A command drawn, and the reply the model expects (`Err`: an error reply).
type Drawn = (Vec<Vec<u8>>, Result<Value, ()>);

fn text(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// `a` and `b`, once each.
fn distinct(a: &[u8], b: &[u8]) -> BTreeSet<Vec<u8>> {
    [a.to_vec(), b.to_vec()].into_iter().collect()
}

fn bulk(b: &[u8]) -> Value {
    Value::BulkString(b.to_vec())
}

fn start(dir: &std::path::Path, clock: &Clock) -> (Server, redis::Connection) {
    let server = Server::start(Config {
        dir: dir.to_path_buf(),
        port: 0,
        sync: SyncMode::No,
        cache_bytes: 64 * 1024,
        clock: clock.clone(),
        active_expiry: Some(std::time::Duration::from_millis(5)),
        engine: strata::Options {
            // Small: elements are flushed and compacted while the run goes on.
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

fn run(c: &mut redis::Connection, args: &[Vec<u8>]) -> redis::RedisResult<Value> {
    c.req_packed_command(&command(args).get_packed_command())
}

/// The model's keyspace at one moment, and the draws that read and change it.
struct World {
    m: Model,
    db: u8,
    now: u64,
}

impl World {
    fn live(&self, k: &[u8]) -> Option<&(V, Option<u64>)> {
        self.m
            .get(&(self.db, k.to_vec()))
            .filter(|(_, t)| t.is_none_or(|t| t > self.now))
    }

    fn hash(&self, k: &[u8]) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, ()> {
        match self.live(k) {
            None => Ok(BTreeMap::new()),
            Some((V::Hash(h), _)) => Ok(h.clone()),
            Some(_) => Err(()),
        }
    }

    fn set(&self, k: &[u8]) -> Result<BTreeSet<Vec<u8>>, ()> {
        match self.live(k) {
            None => Ok(BTreeSet::new()),
            Some((V::Set(s), _)) => Ok(s.clone()),
            Some(_) => Err(()),
        }
    }

    fn zset(&self, k: &[u8]) -> Result<BTreeMap<Vec<u8>, f64>, ()> {
        match self.live(k) {
            None => Ok(BTreeMap::new()),
            Some((V::ZSet(z), _)) => Ok(z.clone()),
            Some(_) => Err(()),
        }
    }

    fn list(&self, k: &[u8]) -> Result<std::collections::VecDeque<Vec<u8>>, ()> {
        match self.live(k) {
            None => Ok(Default::default()),
            Some((V::List(l), _)) => Ok(l.clone()),
            Some(_) => Err(()),
        }
    }

    /// Stores a collection under `k` keeping its expiry; an empty one deletes the key.
    fn store(&mut self, k: &[u8], v: V) {
        let t = self.live(k).and_then(|(_, t)| *t);
        let empty = match &v {
            V::Hash(h) => h.is_empty(),
            V::Set(s) => s.is_empty(),
            V::ZSet(z) => z.is_empty(),
            V::List(l) => l.is_empty(),
            V::Str(_) => false,
        };
        if empty {
            self.m.remove(&(self.db, k.to_vec()));
        } else {
            self.m.insert((self.db, k.to_vec()), (v, t));
        }
    }

    fn draw_hash(&mut self, rng: &mut Rng, key: Vec<u8>) -> Drawn {
        let f = rng.pick(MEMBERS).to_vec();
        let g = rng.pick(MEMBERS).to_vec();
        let v = rng.pick(VALUES).to_vec();
        let h = self.hash(&key);
        match rng.below(6) {
            0 => {
                let args = vec![
                    text("HSET"),
                    key.clone(),
                    f.clone(),
                    v.clone(),
                    g.clone(),
                    v.clone(),
                ];
                let want = h.map(|mut h| {
                    let new = distinct(&f, &g)
                        .into_iter()
                        .filter(|x| !h.contains_key(x))
                        .count();
                    h.insert(f, v.clone());
                    h.insert(g, v);
                    self.store(&key, V::Hash(h));
                    Value::Int(new as i64)
                });
                (args, want)
            }
            1 => {
                let want = h.map(|mut h| {
                    let n = distinct(&f, &g)
                        .into_iter()
                        .filter(|x| h.remove(x).is_some())
                        .count();
                    self.store(&key, V::Hash(h));
                    Value::Int(n as i64)
                });
                (vec![text("HDEL"), key, f, g], want)
            }
            2 => {
                let want = h.map(|h| h.get(&f).map_or(Value::Nil, |v| bulk(v)));
                (vec![text("HGET"), key, f], want)
            }
            3 => {
                let want = h.map(|h| {
                    Value::Array(h.iter().flat_map(|(f, v)| [bulk(f), bulk(v)]).collect())
                });
                (vec![text("HGETALL"), key], want)
            }
            4 => (
                vec![text("HLEN"), key.clone()],
                h.map(|h| Value::Int(h.len() as i64)),
            ),
            _ => {
                let by = rng.below(7) as i64 - 3;
                let canonical = |s: &[u8]| {
                    std::str::from_utf8(s)
                        .ok()?
                        .parse::<i64>()
                        .ok()
                        .filter(|n| n.to_string().as_bytes() == s)
                };
                let want = h.and_then(|mut h| {
                    let cur = match h.get(&f) {
                        None => 0,
                        Some(v) => canonical(v).ok_or(())?,
                    };
                    h.insert(f.clone(), (cur + by).to_string().into_bytes());
                    self.store(&key, V::Hash(h));
                    Ok(Value::Int(cur + by))
                });
                (vec![text("HINCRBY"), key, f, text(&by.to_string())], want)
            }
        }
    }

    fn draw_set(&mut self, rng: &mut Rng, key: Vec<u8>) -> Drawn {
        let a = rng.pick(MEMBERS).to_vec();
        let b = rng.pick(MEMBERS).to_vec();
        let other = rng.pick(KEYS).to_vec();
        let s = self.set(&key);
        let members = |s: &BTreeSet<Vec<u8>>| Value::Array(s.iter().map(|m| bulk(m)).collect());
        match rng.below(7) {
            0 => {
                let want = s.map(|mut s| {
                    let n = distinct(&a, &b)
                        .into_iter()
                        .filter(|m| s.insert(m.clone()))
                        .count();
                    self.store(&key, V::Set(s));
                    Value::Int(n as i64)
                });
                (vec![text("SADD"), key, a, b], want)
            }
            1 => {
                let want = s.map(|mut s| {
                    let n = distinct(&a, &b).into_iter().filter(|m| s.remove(m)).count();
                    self.store(&key, V::Set(s));
                    Value::Int(n as i64)
                });
                (vec![text("SREM"), key, a, b], want)
            }
            2 => (vec![text("SMEMBERS"), key], s.map(|s| members(&s))),
            3 => (
                vec![text("SISMEMBER"), key, a.clone()],
                s.map(|s| Value::Int(i64::from(s.contains(&a)))),
            ),
            4 => {
                let op = *rng.pick(&["SINTER", "SUNION", "SDIFF"]);
                let t = self.set(&other);
                let want = s.and_then(|s| {
                    let t = t?;
                    Ok(members(&match op {
                        "SINTER" => s.intersection(&t).cloned().collect(),
                        "SUNION" => s.union(&t).cloned().collect(),
                        _ => s.difference(&t).cloned().collect(),
                    }))
                });
                (vec![text(op), key, other], want)
            }
            5 => {
                // The destination is replaced whatever it held.
                let op = *rng.pick(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]);
                let dst = rng.pick(KEYS).to_vec();
                let t = self.set(&other);
                let want = s.and_then(|s| {
                    let t = t?;
                    let r: BTreeSet<Vec<u8>> = match op {
                        "SINTERSTORE" => s.intersection(&t).cloned().collect(),
                        "SUNIONSTORE" => s.union(&t).cloned().collect(),
                        _ => s.difference(&t).cloned().collect(),
                    };
                    let n = r.len() as i64;
                    self.m.remove(&(self.db, dst.clone()));
                    self.store(&dst, V::Set(r));
                    Ok(Value::Int(n))
                });
                (vec![text(op), dst, key, other], want)
            }
            _ => {
                let dst = other;
                let missing = self.live(&key).is_none();
                let want = s.and_then(|mut s| {
                    if missing {
                        return Ok(Value::Int(0));
                    }
                    let mut t = self.set(&dst)?;
                    if !s.contains(&a) {
                        return Ok(Value::Int(0));
                    }
                    if dst != key {
                        s.remove(&a);
                        t.insert(a.clone());
                        self.store(&key, V::Set(s));
                        self.store(&dst, V::Set(t));
                    }
                    Ok(Value::Int(1))
                });
                (vec![text("SMOVE"), key, dst, a], want)
            }
        }
    }

    fn draw_zset(&mut self, rng: &mut Rng, key: Vec<u8>) -> Drawn {
        let m = rng.pick(MEMBERS).to_vec();
        let score = *rng.pick(&[-1.5, 0.0, 2.0, 2.0, 7.0]);
        let z = self.zset(&key);
        // Members in score order, ties in member order, with their scores as Redis writes
        // them (these scores need no more than one decimal).
        let ordered = |z: &BTreeMap<Vec<u8>, f64>| {
            let mut v: Vec<(Vec<u8>, f64)> = z.iter().map(|(m, s)| (m.clone(), *s)).collect();
            v.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
            v
        };
        let score_bulk = |s: f64| bulk(format!("{s}").as_bytes());
        match rng.below(7) {
            0 => {
                let want = z.map(|mut z| {
                    let new = z.insert(m.clone(), score).is_none();
                    self.store(&key, V::ZSet(z));
                    Value::Int(i64::from(new))
                });
                (vec![text("ZADD"), key, text(&format!("{score}")), m], want)
            }
            1 => {
                let want = z.map(|mut z| {
                    let n = i64::from(z.remove(&m).is_some());
                    self.store(&key, V::ZSet(z));
                    Value::Int(n)
                });
                (vec![text("ZREM"), key, m], want)
            }
            2 => {
                let want = z.map(|z| z.get(&m).map_or(Value::Nil, |s| score_bulk(*s)));
                (vec![text("ZSCORE"), key, m], want)
            }
            3 => {
                let want = z.map(|z| {
                    let all = ordered(&z).into_iter();
                    Value::Array(all.flat_map(|(m, s)| [bulk(&m), score_bulk(s)]).collect())
                });
                (
                    vec![
                        text("ZRANGE"),
                        key,
                        text("0"),
                        text("-1"),
                        text("WITHSCORES"),
                    ],
                    want,
                )
            }
            4 => {
                let want = z.map(|z| {
                    let hit = ordered(&z)
                        .into_iter()
                        .filter(|(_, s)| *s > 0.0 && *s <= 2.0);
                    Value::Array(hit.map(|(m, _)| bulk(&m)).collect())
                });
                (
                    vec![text("ZRANGEBYSCORE"), key, text("(0"), text("2")],
                    want,
                )
            }
            5 => {
                let want = z.map(|z| {
                    let rank = ordered(&z).iter().position(|(x, _)| *x == m);
                    rank.map_or(Value::Nil, |r| Value::Int(r as i64))
                });
                (vec![text("ZRANK"), key, m], want)
            }
            _ => {
                let want = z.map(|mut z| {
                    let first = ordered(&z).into_iter().next();
                    if let Some((m, _)) = &first {
                        z.remove(m);
                    }
                    self.store(&key, V::ZSet(z));
                    Value::Array(
                        first
                            .into_iter()
                            .flat_map(|(m, s)| [bulk(&m), score_bulk(s)])
                            .collect(),
                    )
                });
                (vec![text("ZPOPMIN"), key], want)
            }
        }
    }

    fn draw_list(&mut self, rng: &mut Rng) -> Drawn {
        let key = rng.pick(LIST_KEYS).to_vec();
        let v = rng.pick(VALUES).to_vec();
        let l = self.list(&key);
        let all = |l: &std::collections::VecDeque<Vec<u8>>| {
            Value::Array(l.iter().map(|v| bulk(v)).collect())
        };
        let i = rng.below(7) as i64 - 3;
        // An index (negative from the end) within the list, as LINDEX and LSET read it.
        let at = |len: usize| {
            let j = if i < 0 { i + len as i64 } else { i };
            (0..len as i64).contains(&j).then_some(j as usize)
        };
        match rng.below(11) {
            0..=2 => {
                let left = rng.below(2) == 0;
                let want = l.map(|mut l| {
                    if left {
                        l.push_front(v.clone())
                    } else {
                        l.push_back(v.clone())
                    }
                    let n = l.len() as i64;
                    self.store(&key, V::List(l));
                    Value::Int(n)
                });
                (
                    vec![text(if left { "LPUSH" } else { "RPUSH" }), key, v],
                    want,
                )
            }
            3 | 4 => {
                let left = rng.below(2) == 0;
                let want = l.map(|mut l| {
                    let got = if left { l.pop_front() } else { l.pop_back() };
                    self.store(&key, V::List(l));
                    got.map_or(Value::Nil, |g| bulk(&g))
                });
                (vec![text(if left { "LPOP" } else { "RPOP" }), key], want)
            }
            5 | 6 => (
                vec![text("LRANGE"), key, text("0"), text("-1")],
                l.map(|l| all(&l)),
            ),
            7 => {
                let want = l.map(|l| at(l.len()).map_or(Value::Nil, |j| bulk(&l[j])));
                (vec![text("LINDEX"), key, text(&i.to_string())], want)
            }
            8 => {
                let want = l.and_then(|mut l| {
                    if l.is_empty() {
                        return Err(());
                    }
                    let j = at(l.len()).ok_or(())?;
                    l[j] = v.clone();
                    self.store(&key, V::List(l));
                    Ok(Value::Okay)
                });
                (vec![text("LSET"), key, text(&i.to_string()), v], want)
            }
            9 => {
                // LREM of every match.
                let want = l.map(|mut l| {
                    let before = l.len();
                    l.retain(|x| *x != v);
                    let n = (before - l.len()) as i64;
                    self.store(&key, V::List(l));
                    Value::Int(n)
                });
                (vec![text("LREM"), key, text("0"), v], want)
            }
            _ => {
                // LTRIM to the second element on.
                let want = l.map(|mut l| {
                    l.pop_front();
                    self.store(&key, V::List(l));
                    Value::Okay
                });
                (vec![text("LTRIM"), key, text("1"), text("-1")], want)
            }
        }
    }

    fn draw_generic(&mut self, rng: &mut Rng, key: Vec<u8>) -> Drawn {
        let other = rng.pick(KEYS).to_vec();
        let cur = self.live(&key).cloned();
        match rng.below(9) {
            0 => {
                let name = match &cur {
                    None => "none",
                    Some((V::Str(_), _)) => "string",
                    Some((V::Hash(_), _)) => "hash",
                    Some((V::Set(_), _)) => "set",
                    Some((V::ZSet(_), _)) => "zset",
                    Some((V::List(_), _)) => "list",
                };
                (
                    vec![text("TYPE"), key],
                    Ok(Value::SimpleString(name.into())),
                )
            }
            1 => {
                let v = rng.pick(VALUES).to_vec();
                self.m
                    .insert((self.db, key.clone()), (V::Str(v.clone()), None));
                (vec![text("SET"), key, v], Ok(Value::Okay))
            }
            2 => {
                let want = match &cur {
                    None => Ok(Value::Nil),
                    Some((V::Str(v), _)) => Ok(bulk(v)),
                    Some(_) => Err(()),
                };
                (vec![text("GET"), key], want)
            }
            3 => {
                let n = i64::from(cur.is_some());
                self.m.remove(&(self.db, key.clone()));
                (vec![text("DEL"), key], Ok(Value::Int(n)))
            }
            4 => {
                let ms = rng.below(3000) as i64 - 300;
                let reply = match cur {
                    None => 0,
                    Some((v, _)) => {
                        if ms <= 0 {
                            self.m.remove(&(self.db, key.clone()));
                        } else {
                            self.m
                                .insert((self.db, key.clone()), (v, Some(self.now + ms as u64)));
                        }
                        1
                    }
                };
                (
                    vec![text("PEXPIRE"), key, text(&ms.to_string())],
                    Ok(Value::Int(reply)),
                )
            }
            5 => {
                let reply = match &cur {
                    None => -2,
                    Some((_, None)) => -1,
                    Some((_, Some(t))) => (t - self.now) as i64,
                };
                (vec![text("PTTL"), key], Ok(Value::Int(reply)))
            }
            6 => {
                let want = match cur {
                    None => Err(()),
                    Some(v) => {
                        self.m.remove(&(self.db, key.clone()));
                        self.m.insert((self.db, other.clone()), v);
                        Ok(Value::Okay)
                    }
                };
                (vec![text("RENAME"), key, other], want)
            }
            7 => {
                let want = match (cur, key == other) {
                    (_, true) => Err(()),
                    (None, _) => Ok(Value::Int(0)),
                    (Some(_), _) if self.live(&other).is_some() => Ok(Value::Int(0)),
                    (Some(v), _) => {
                        self.m.insert((self.db, other.clone()), v);
                        Ok(Value::Int(1))
                    }
                };
                (vec![text("COPY"), key, other], want)
            }
            _ => {
                self.db = 1 - self.db;
                (
                    vec![text("SELECT"), text(&self.db.to_string())],
                    Ok(Value::Okay),
                )
            }
        }
    }
}

fn shown(a: &[Vec<u8>]) -> String {
    a.iter()
        .map(|x| format!("{:?}", String::from_utf8_lossy(x)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn check(seed: u64, step: usize, args: &[Vec<u8>], got: &Value, want: &Result<Value, ()>) {
    match want {
        Ok(w) => assert_eq!(got, w, "seed {seed}, step {step}: {}", shown(args)),
        Err(()) => assert!(
            matches!(got, Value::ServerError(_)),
            "seed {seed}, step {step}: {}: got {got:?}, want an error",
            shown(args)
        ),
    }
}

#[test]
fn collections_answer_as_the_model_does() {
    let seed = common::seed();
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(1_700_000_000_000);
    let (mut server, mut c) = start(dir.path(), &clock);
    let mut w = World {
        m: BTreeMap::new(),
        db: 0,
        now: clock.now_ms(),
    };
    let mut block: Vec<Drawn> = Vec::new();
    let mut block_len = 0;
    let (mut transactions, mut wrongtype) = (0, 0);
    for step in 0..4000 {
        if block_len == 0 && rng.below(15) == 0 {
            block_len = 2 + rng.below(4) as usize;
        }
        if block_len == 0 && step % 700 == 699 {
            server.shutdown().unwrap();
            (server, c) = start(dir.path(), &clock);
            w.db = 0;
        }
        w.now = clock.now_ms();
        let key = rng.pick(KEYS).to_vec();
        let (args, want) = match rng.below(16) {
            0..=2 => w.draw_hash(&mut rng, key),
            3..=5 => w.draw_set(&mut rng, key),
            6..=8 => w.draw_zset(&mut rng, key),
            9..=11 => w.draw_list(&mut rng),
            12..=14 => w.draw_generic(&mut rng, key),
            _ if block_len > 0 => continue,
            _ => {
                clock.advance_ms(rng.below(1200));
                continue;
            }
        };
        wrongtype += usize::from(want.is_err());
        if block_len == 0 {
            let got = run(&mut c, &args)
                .unwrap_or_else(|e| panic!("seed {seed}, step {step}: {}: {e}", shown(&args)));
            check(seed, step, &args, &got, &want);
            continue;
        }
        // The clock stands still while a transaction is drawn: EXEC runs it at one moment.
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
            .unwrap_or_else(|e| panic!("seed {seed}, step {step}: a transaction: {e}"));
        let Some(Value::Array(replies)) = got.last() else {
            panic!("seed {seed}, step {step}: EXEC answered {got:?}");
        };
        assert_eq!(replies.len(), block.len(), "seed {seed}, step {step}");
        for ((args, want), got) in block.iter().zip(replies) {
            check(seed, step, args, got, want);
        }
        transactions += 1;
        block.clear();
        block_len = 0;
    }
    server.shutdown().unwrap();
    assert!(
        transactions > 50 && wrongtype > 50,
        "seed {seed}: {transactions} transactions, {wrongtype} errors"
    );
}

/// A pop remembers where it left off (the next one seeks past the members it deleted): a
/// member added beyond that point afterwards is seen by the next pop and range.
#[test]
fn members_added_past_a_pop_are_popped_next() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(1_700_000_000_000);
    let (server, mut c) = start(dir.path(), &clock);
    let mut cmd = |args: &[&str]| run(&mut c, &args.iter().map(|a| text(a)).collect::<Vec<_>>());
    let pair = |m: &str, s: &str| Value::Array(vec![bulk(m.as_bytes()), bulk(s.as_bytes())]);
    assert_eq!(
        cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]).unwrap(),
        Value::Int(3)
    );
    assert_eq!(cmd(&["ZPOPMIN", "z"]).unwrap(), pair("a", "1"));
    assert_eq!(cmd(&["ZADD", "z", "0", "x"]).unwrap(), Value::Int(1));
    assert_eq!(cmd(&["ZPOPMIN", "z"]).unwrap(), pair("x", "0"));
    assert_eq!(cmd(&["ZPOPMAX", "z"]).unwrap(), pair("c", "3"));
    assert_eq!(cmd(&["ZADD", "z", "9", "y"]).unwrap(), Value::Int(1));
    assert_eq!(cmd(&["ZPOPMAX", "z"]).unwrap(), pair("y", "9"));
    // A member whose score moves below the edge by ZINCRBY.
    assert_eq!(cmd(&["ZADD", "z", "5", "d"]).unwrap(), Value::Int(1));
    assert_eq!(cmd(&["ZPOPMIN", "z"]).unwrap(), pair("b", "2"));
    cmd(&["ZINCRBY", "z", "-10", "d"]).unwrap();
    let all = cmd(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]).unwrap();
    assert_eq!(all, Value::Array(vec![bulk(b"d"), bulk(b"-5")]));
    server.shutdown().unwrap();
}

/// SPOP remembers the stretches of a large set that its pops emptied and seeks past them: a
/// member added inside such a stretch is drawn again like any other (not hidden until the set
/// is otherwise empty), and a set popped to the end gives each member exactly once.
#[test]
fn members_added_where_pops_emptied_the_set_are_drawn_again() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(1_700_000_000_000);
    let (server, mut c) = start(dir.path(), &clock);
    let name = |i: u32| format!("m{i:06}");
    let mut sadd = redis::cmd("SADD");
    sadd.arg("s");
    for i in (0..4000).step_by(2) {
        sadd.arg(name(i));
    }
    let added: i64 = sadd.query(&mut c).unwrap();
    assert_eq!(added, 2000);
    let mut popped = BTreeSet::new();
    for _ in 0..1500 {
        let m: String = redis::cmd("SPOP").arg("s").query(&mut c).unwrap();
        assert!(popped.insert(m), "a member came out twice");
    }
    // Fifty new members, each beside one already popped: inside a stretch pops emptied.
    let late: Vec<String> = popped
        .iter()
        .step_by(30)
        .take(50)
        .map(|m| name(m[1..].parse::<u32>().unwrap() + 1))
        .collect();
    assert_eq!(late.len(), 50);
    let added: i64 = redis::cmd("SADD")
        .arg("s")
        .arg(&late)
        .query(&mut c)
        .unwrap();
    assert_eq!(added, 50);
    // Half of what is left: 550 members, 50 of them new.
    let mut drawn_late = 0;
    for _ in 0..275 {
        let m: String = redis::cmd("SPOP").arg("s").query(&mut c).unwrap();
        drawn_late += usize::from(late.contains(&m));
        assert!(popped.insert(m), "a member came out twice");
    }
    assert!(
        drawn_late >= 10,
        "{drawn_late} of 50 members added into emptied stretches were drawn in 275 pops"
    );
    // The rest, to the end: every member exactly once, then nothing.
    loop {
        let m: Option<String> = redis::cmd("SPOP").arg("s").query(&mut c).unwrap();
        let Some(m) = m else { break };
        assert!(popped.insert(m), "a member came out twice");
    }
    let want: BTreeSet<String> = (0..4000)
        .step_by(2)
        .map(name)
        .chain(late.iter().cloned())
        .collect();
    assert_eq!(popped, want);
    let card: i64 = redis::cmd("SCARD").arg("s").query(&mut c).unwrap();
    assert_eq!(card, 0);
    server.shutdown().unwrap();
}

/// SWAPDB exchanges two databases whole (keys of every kind, written before and after), and
/// the exchange is still there after a restart.
#[test]
fn swapped_databases_stay_swapped_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(1_700_000_000_000);
    let (server, mut c) = start(dir.path(), &clock);
    let q = |c: &mut redis::Connection, args: &[&str]| -> Value {
        run(c, &args.iter().map(|a| text(a)).collect::<Vec<_>>()).unwrap()
    };
    q(&mut c, &["SET", "a", "1"]);
    q(&mut c, &["HSET", "h", "f", "v"]);
    q(&mut c, &["SELECT", "1"]);
    q(&mut c, &["SET", "b", "2"]);
    q(&mut c, &["RPUSH", "l", "x", "y"]);
    assert_eq!(q(&mut c, &["SWAPDB", "0", "1"]), Value::Okay);
    // This connection is still in database 1, which now holds what 0 held.
    q(&mut c, &["SET", "c", "3"]);
    let check = |c: &mut redis::Connection| {
        q(c, &["SELECT", "0"]);
        assert_eq!(q(c, &["GET", "b"]), bulk(b"2"));
        assert_eq!(
            q(c, &["LRANGE", "l", "0", "-1"]),
            Value::Array(vec![bulk(b"x"), bulk(b"y")])
        );
        assert_eq!(q(c, &["EXISTS", "a", "h", "c"]), Value::Int(0));
        q(c, &["SELECT", "1"]);
        assert_eq!(q(c, &["GET", "a"]), bulk(b"1"));
        assert_eq!(q(c, &["HGET", "h", "f"]), bulk(b"v"));
        assert_eq!(q(c, &["GET", "c"]), bulk(b"3"));
        assert_eq!(q(c, &["DBSIZE"]), Value::Int(3));
    };
    check(&mut c);
    drop(c);
    server.shutdown().unwrap();
    let (server, mut c) = start(dir.path(), &clock);
    check(&mut c);
    assert_eq!(q(&mut c, &["SWAPDB", "1", "0"]), Value::Okay);
    q(&mut c, &["SELECT", "0"]);
    assert_eq!(q(&mut c, &["GET", "a"]), bulk(b"1"));
    server.shutdown().unwrap();
}

/// A client parked on a key before SWAPDB waits on the key of its own database number
/// afterwards: a push there wakes it, and a WATCH across two swaps that put the database
/// back where it was still sees the swap.
#[test]
fn swapdb_moves_parked_clients_and_touches_watched_keys() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(1_700_000_000_000);
    let (server, mut c) = start(dir.path(), &clock);
    let addr = server.local_addr();
    let waiter = std::thread::spawn(move || {
        let mut w = common::connect(addr);
        let got: Option<(String, String)> =
            redis::cmd("BLPOP").arg("q").arg(5).query(&mut w).unwrap();
        got
    });
    while {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut c).unwrap();
        !info.contains("blocked_clients:1")
    } {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    let _: () = redis::cmd("RPUSH").arg("q").arg("x").query(&mut c).unwrap();
    assert_eq!(waiter.join().unwrap(), Some(("q".into(), "x".into())));

    // WATCH, then two swaps of the same pair: the key is stored where it was, yet swapped.
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let _: () = redis::cmd("WATCH").arg("k").query(&mut c).unwrap();
    for _ in 0..2 {
        let _: () = redis::cmd("SWAPDB").arg(0).arg(1).query(&mut c).unwrap();
    }
    let _: () = redis::cmd("MULTI").query(&mut c).unwrap();
    let _: () = redis::cmd("PING").query(&mut c).unwrap();
    let exec: Value = redis::cmd("EXEC").query(&mut c).unwrap();
    assert_eq!(exec, Value::Nil);
    server.shutdown().unwrap();
}

/// SORT's keys under ACL rules, as Redis 7.0 has them: the sorted key is read and the STORE
/// destination written; BY and GET need read access to every key. COMMAND GETKEYS names
/// exactly the keys a command that counts its keys counts.
#[test]
fn sort_asks_acl_for_what_it_reads_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(1_700_000_000_000);
    let (server, mut c) = start(dir.path(), &clock);
    let q = |c: &mut redis::Connection, args: &[&str]| -> redis::RedisResult<Value> {
        run(c, &args.iter().map(|a| text(a)).collect::<Vec<_>>())
    };
    q(&mut c, &["RPUSH", "l", "2", "1"]).unwrap();
    q(&mut c, &["SET", "w_1", "9"]).unwrap();
    for (user, rules) in [
        ("reader", &["on", "nopass", "%R~*", "+@all"][..]),
        ("narrow", &["on", "nopass", "%R~l", "%W~dst", "+@all"][..]),
    ] {
        let mut args = vec!["ACL", "SETUSER", user];
        args.extend_from_slice(rules);
        q(&mut c, &args).unwrap();
    }
    let as_user = |user: &str| {
        let mut u = common::connect(server.local_addr());
        q(&mut u, &["AUTH", user, "x"]).unwrap();
        u
    };
    let sorted = Value::Array(vec![bulk(b"2"), bulk(b"1")]);
    let mut reader = as_user("reader");
    assert_eq!(q(&mut reader, &["SORT", "l", "BY", "w_*"]).unwrap(), sorted);
    let mut narrow = as_user("narrow");
    assert_eq!(
        q(&mut narrow, &["SORT", "l"]).unwrap(),
        Value::Array(vec![bulk(b"1"), bulk(b"2")])
    );
    assert_eq!(
        q(&mut narrow, &["SORT", "l", "STORE", "dst"]).unwrap(),
        Value::Int(2)
    );
    let refused = |v: Value| match v {
        Value::ServerError(e) => format!("{} {}", e.code(), e.details().unwrap_or_default()),
        other => panic!("not refused: {other:?}"),
    };
    let denied = refused(q(&mut narrow, &["SORT", "l", "BY", "w_*"]).unwrap());
    assert!(denied.contains("BY option of SORT denied"), "{denied}");
    let denied = refused(q(&mut narrow, &["SORT", "l", "STORE", "l"]).unwrap());
    assert!(denied.starts_with("NOPERM"), "{denied}");

    let keys = |c: &mut redis::Connection, args: &[&str]| {
        let mut all = vec!["COMMAND", "GETKEYS"];
        all.extend_from_slice(args);
        q(c, &all).unwrap()
    };
    let names = |ks: &[&str]| Value::Array(ks.iter().map(|k| bulk(k.as_bytes())).collect());
    let got = keys(
        &mut c,
        &["ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"],
    );
    assert_eq!(got, names(&["d", "a", "b"]));
    assert_eq!(
        keys(&mut c, &["LMPOP", "2", "a", "b", "LEFT"]),
        names(&["a", "b"])
    );
    assert_eq!(
        keys(&mut c, &["SORT", "s", "STORE", "x"]),
        names(&["s", "x"])
    );
    server.shutdown().unwrap();
}

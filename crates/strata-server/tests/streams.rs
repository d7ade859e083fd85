//! Streams against a model: random XADD (`*` by a clock the test moves, and explicit IDs),
//! XDEL, XTRIM, XRANGE, XREVRANGE and XLEN over two streams, and a consumer group's
//! XREADGROUP, XACK, XPENDING and XCLAIM by two consumers, with restarts between. Every reply
//! must equal the model's, entries compared whole (ID, fields and values); engine options
//! small enough that entries and pending lists are flushed and compacted as the run goes.
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
}

type Id = (u64, u64);

fn id_text(id: Id) -> String {
    format!("{}-{}", id.0, id.1)
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// A consumer group as the model keeps it: its last delivered ID and pending entries (ID to
/// consumer and delivery count).
#[derive(Default)]
struct Group {
    last: Id,
    pending: BTreeMap<Id, (String, u64)>,
}

/// A stream: entries (ID to field-value pairs), its last ID, its group when made.
#[derive(Default)]
struct Stream {
    entries: BTreeMap<Id, Vec<(String, String)>>,
    last: Id,
    group: Option<Group>,
}

fn entry_value(id: Id, fields: &[(String, String)]) -> Value {
    let flat = fields
        .iter()
        .flat_map(|(f, v)| [bulk(f), bulk(v)])
        .collect();
    Value::Array(vec![bulk(&id_text(id)), Value::Array(flat)])
}

fn start(dir: &std::path::Path, clock: &Clock) -> (Server, redis::Connection) {
    let server = Server::start(Config {
        dir: dir.to_path_buf(),
        port: 0,
        sync: SyncMode::No,
        clock: clock.clone(),
        engine: strata::Options {
            write_buffer_size: 4096,
            idle_merge_after: None,
            ..common::engine_options()
        },
        ..Config::default()
    })
    .unwrap();
    let c = common::connect(server.local_addr());
    (server, c)
}

fn run(c: &mut redis::Connection, args: &[String]) -> Value {
    let mut cmd = redis::cmd(&args[0]);
    for a in &args[1..] {
        cmd.arg(a.as_str());
    }
    c.req_packed_command(&cmd.get_packed_command())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Draws one command on stream `key` and the reply the model expects, applying it.
fn draw(rng: &mut Rng, s: &mut Stream, key: &str, now: u64) -> (Vec<String>, Value) {
    let strs = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let some_id = |rng: &mut Rng, s: &Stream| -> Id {
        let known: Vec<Id> = s.entries.keys().copied().collect();
        if !known.is_empty() && rng.below(4) > 0 {
            known[rng.below(known.len() as u64) as usize]
        } else {
            (now.saturating_sub(rng.below(3000)), rng.below(3))
        }
    };
    match rng.below(12) {
        0..=2 => {
            let fields = vec![
                (
                    format!("f{}", rng.below(3)),
                    format!("v{}", rng.next() % 1000),
                ),
                ("n".to_string(), String::new()),
            ];
            let explicit = rng.below(3) == 0;
            let id = if explicit {
                (s.last.0 + rng.below(2), s.last.1 + 1 + rng.below(2))
            } else if now > s.last.0 {
                (now, 0)
            } else {
                (s.last.0, s.last.1 + 1)
            };
            let mut args = strs(&["XADD", key]);
            // Now and then capped, as a log that keeps its newest entries is.
            let cap = (rng.below(4) == 0).then(|| 1 + rng.below(10) as usize);
            if let Some(cap) = cap {
                args.extend(strs(&["MAXLEN", &cap.to_string()]));
            }
            args.push(if explicit { id_text(id) } else { "*".into() });
            for (f, v) in &fields {
                args.push(f.clone());
                args.push(v.clone());
            }
            s.entries.insert(id, fields);
            s.last = id;
            while cap.is_some_and(|c| s.entries.len() > c) {
                s.entries.pop_first();
            }
            (args, bulk(&id_text(id)))
        }
        3 => {
            let id = some_id(rng, s);
            let gone = s.entries.remove(&id).is_some();
            (
                strs(&["XDEL", key, &id_text(id)]),
                Value::Int(i64::from(gone)),
            )
        }
        4 if rng.below(2) == 0 => {
            let keep = rng.below(12) as usize;
            let n = s.entries.len().saturating_sub(keep);
            let doomed: Vec<Id> = s.entries.keys().take(n).copied().collect();
            for id in &doomed {
                s.entries.remove(id);
            }
            let args = strs(&["XTRIM", key, "MAXLEN", "=", &keep.to_string()]);
            (args, Value::Int(doomed.len() as i64))
        }
        4 => {
            let min = some_id(rng, s);
            let doomed: Vec<Id> = s.entries.range(..min).map(|(id, _)| *id).collect();
            for id in &doomed {
                s.entries.remove(id);
            }
            let args = strs(&["XTRIM", key, "MINID", &id_text(min)]);
            (args, Value::Int(doomed.len() as i64))
        }
        5..=7 => {
            let (a, b) = (some_id(rng, s), some_id(rng, s));
            let (lo, hi) = (a.min(b), a.max(b));
            let count = rng.below(6) as usize;
            let back = rng.below(2) == 0;
            let mut found: Vec<Value> = s
                .entries
                .range(lo..=hi)
                .map(|(id, f)| entry_value(*id, f))
                .collect();
            if back {
                found.reverse();
            }
            found.truncate(if count == 0 { usize::MAX } else { count });
            let (name, first, second) = match back {
                true => ("XREVRANGE", id_text(hi), id_text(lo)),
                false => ("XRANGE", id_text(lo), id_text(hi)),
            };
            let mut args = vec![name.to_string(), key.to_string(), first, second];
            if count > 0 {
                args.extend(strs(&["COUNT", &count.to_string()]));
            }
            (args, Value::Array(found))
        }
        8 => (strs(&["XLEN", key]), Value::Int(s.entries.len() as i64)),
        _ => draw_group(rng, s, key, now),
    }
}

/// A consumer group command: made on first use, then read, acknowledged and claimed from.
fn draw_group(rng: &mut Rng, s: &mut Stream, key: &str, now: u64) -> (Vec<String>, Value) {
    let strs = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let Some(g) = s.group.as_mut() else {
        s.group = Some(Group {
            last: s.last,
            pending: BTreeMap::new(),
        });
        return (
            strs(&["XGROUP", "CREATE", key, "g", "$", "MKSTREAM"]),
            Value::Okay,
        );
    };
    let consumer = if rng.below(2) == 0 { "alice" } else { "bob" };
    match rng.below(4) {
        0 => {
            let count = 1 + rng.below(3) as usize;
            let new: Vec<Id> = s
                .entries
                .range((
                    std::ops::Bound::Excluded(g.last),
                    std::ops::Bound::Unbounded,
                ))
                .take(count)
                .map(|(id, _)| *id)
                .collect();
            let args = strs(&[
                "XREADGROUP",
                "GROUP",
                "g",
                consumer,
                "COUNT",
                &count.to_string(),
                "STREAMS",
                key,
                ">",
            ]);
            if new.is_empty() {
                return (args, Value::Nil);
            }
            let mut entries = Vec::new();
            for id in &new {
                g.pending.insert(*id, (consumer.to_string(), 1));
                g.last = *id;
                entries.push(entry_value(*id, &s.entries[id]));
            }
            let reply = Value::Array(vec![Value::Array(vec![bulk(key), Value::Array(entries)])]);
            (args, reply)
        }
        1 => {
            let ids: Vec<Id> = g
                .pending
                .keys()
                .copied()
                .take(1 + rng.below(2) as usize)
                .collect();
            let mut args = strs(&["XACK", key, "g"]);
            let mut n = 0;
            for id in &ids {
                n += i64::from(g.pending.remove(id).is_some());
                args.push(id_text(*id));
            }
            args.push(id_text((now, 77)));
            (args, Value::Int(n))
        }
        2 => {
            let rows: Vec<Value> = g
                .pending
                .iter()
                .filter(|(_, (c, _))| c == consumer)
                .map(|(id, (c, n))| {
                    Value::Array(vec![bulk(&id_text(*id)), bulk(c), Value::Int(*n as i64)])
                })
                .collect();
            // The idle time is left out of the comparison: the model keeps no clock for it.
            (
                strs(&["XPENDING", key, "g", "-", "+", "100", consumer]),
                Value::Array(rows),
            )
        }
        _ => {
            let Some((&id, _)) = g.pending.iter().next() else {
                return (strs(&["XLEN", key]), Value::Int(s.entries.len() as i64));
            };
            let args = strs(&["XCLAIM", key, "g", consumer, "0", &id_text(id)]);
            let Some(fields) = s.entries.get(&id) else {
                // Its entry is gone: the claim drops it from the pending list.
                g.pending.remove(&id);
                return (args, Value::Array(vec![]));
            };
            let held = g.pending.get_mut(&id).unwrap();
            *held = (consumer.to_string(), held.1 + 1);
            (args, Value::Array(vec![entry_value(id, fields)]))
        }
    }
}

/// XPENDING's rows without their idle times.
fn without_idle(v: Value) -> Value {
    match v {
        Value::Array(rows) => Value::Array(
            rows.into_iter()
                .map(|r| match r {
                    Value::Array(mut f) if f.len() == 4 => {
                        f.remove(2);
                        Value::Array(f)
                    }
                    other => other,
                })
                .collect(),
        ),
        other => other,
    }
}

#[test]
fn streams_answer_as_the_model_does() {
    let seed = common::seed();
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(1_700_000_000_000);
    let (mut server, mut c) = start(dir.path(), &clock);
    let mut streams: BTreeMap<&str, Stream> = BTreeMap::new();
    let mut compared = 0;
    for step in 0..3000 {
        if step % 1000 == 999 {
            server.shutdown().unwrap();
            (server, c) = start(dir.path(), &clock);
        }
        if rng.below(5) == 0 {
            clock.advance_ms(rng.below(3));
        }
        let key = if rng.below(3) == 0 { "s2" } else { "s1" };
        let s = streams.entry(key).or_default();
        let (args, want) = draw(&mut rng, s, key, clock.now_ms());
        let mut got = run(&mut c, &args);
        if args[0] == "XPENDING" {
            got = without_idle(got);
        }
        assert_eq!(got, want, "seed {seed}, step {step}: {args:?}");
        if matches!(&want, Value::Array(v) if !v.is_empty()) {
            compared += 1;
        }
    }
    server.shutdown().unwrap();
    assert!(
        compared > 300,
        "seed {seed}: {compared} non-empty lists compared"
    );
}

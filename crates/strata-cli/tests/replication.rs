//! Replication between `strata serve` processes on loopback: replicas copy a primary whole
//! and follow its writes of every kind; a replica SIGKILLed under writes resumes by partial
//! resync; one that fell further behind than the primary keeps is copied whole again.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use redis::Commands;

use common::{free_port, kill, serve_with};

/// Every key of every database with its type, value and whether it expires, as text.
fn dump(c: &mut redis::Connection) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for db in 0..16 {
        let _: () = redis::cmd("SELECT").arg(db).query(c).unwrap();
        let mut keys: Vec<String> = c.scan::<String>().unwrap().collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let kind: String = redis::cmd("TYPE").arg(&k).query(c).unwrap();
            let value = match kind.as_str() {
                "string" => format!("{:?}", c.get::<_, Vec<u8>>(&k).unwrap()),
                "hash" => format!(
                    "{:?}",
                    c.hgetall::<_, BTreeMap<String, String>>(&k).unwrap()
                ),
                "list" => format!("{:?}", c.lrange::<_, Vec<String>>(&k, 0, -1).unwrap()),
                "set" => {
                    let mut m: Vec<String> = c.smembers(&k).unwrap();
                    m.sort();
                    format!("{m:?}")
                }
                "zset" => format!(
                    "{:?}",
                    c.zrange_withscores::<_, Vec<(String, String)>>(&k, 0, -1)
                        .unwrap()
                ),
                "stream" => {
                    let v: redis::Value = redis::cmd("XRANGE")
                        .arg(&k)
                        .arg("-")
                        .arg("+")
                        .query(c)
                        .unwrap();
                    format!("{v:?}")
                }
                other => panic!("key {k} of type {other}"),
            };
            let ttl: i64 = c.pttl(&k).unwrap();
            out.insert(
                format!("{db}/{k}"),
                format!("{kind} {value} expires={}", ttl > 0),
            );
        }
    }
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    out
}

fn info_field(c: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}: {info}"))
        .trim()
        .to_string()
}

/// Waits until `check` holds, for at most 20 seconds.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn replica(dir: &Path, port: u16, primary: u16, flags: &[&str]) -> (Child, redis::Connection) {
    let of = format!("127.0.0.1 {primary}");
    let mut all = vec!["--replicaof", of.as_str()];
    all.extend_from_slice(flags);
    serve_with(dir, port, &all)
}

/// Writes of every kind the server keeps, in two databases, with a transaction, a script
/// and a SWAPDB among them.
fn write_everything(c: &mut redis::Connection, round: u32) {
    let r = round.to_string();
    let _: () = c.set(format!("s{r}"), format!("v{r}")).unwrap();
    let _: () = c.set_ex(format!("ttl{r}"), "x", 3600).unwrap();
    let _: i64 = c.incr("counter", 7).unwrap();
    let _: () = c.append("log", &r).unwrap();
    let _: () = c
        .hset_multiple(format!("h{r}"), &[("a", "1"), ("b", "2")])
        .unwrap();
    let _: i64 = c.hincr("h-shared", "n", 1).unwrap();
    let _: () = c.rpush("list", &[&r, "x"]).unwrap();
    let _: Option<String> = c.lpop("list", None).unwrap();
    let _: () = c.sadd("set", &[format!("m{r}"), "common".into()]).unwrap();
    let _: () = c.zadd("zset", format!("z{r}"), round as f64 * 1.5).unwrap();
    let _: String = redis::cmd("XADD")
        .arg("stream")
        .arg("*")
        .arg("round")
        .arg(&r)
        .query(c)
        .unwrap();
    let _: i64 = c.del(format!("s{}", round.saturating_sub(1))).unwrap();
    let _: () = redis::pipe()
        .atomic()
        .set("in-multi", &r)
        .hset("h-multi", &r, &r)
        .query(c)
        .unwrap();
    let _: i64 = redis::cmd("EVAL")
        .arg("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('SADD', KEYS[2], ARGV[1])")
        .arg(2)
        .arg("by-script")
        .arg("script-set")
        .arg(&r)
        .query(c)
        .unwrap();
    let _: () = redis::cmd("SELECT").arg(3).query(c).unwrap();
    let _: () = c.set(format!("db3-{r}"), &r).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    let _: () = redis::cmd("SWAPDB").arg(3).arg(4).query(c).unwrap();
}

fn stop(child: Child) {
    kill(child);
}

#[test]
fn replicas_copy_the_primary_and_follow_writes_of_every_kind() {
    let t = tempfile::tempdir().unwrap();
    let (mp, r1p, r2p) = (free_port(), free_port(), free_port());
    let (m, mut mc) = serve_with(&t.path().join("m"), mp, &[]);
    // Before the replicas: they get this by the full copy.
    for round in 0..3 {
        write_everything(&mut mc, round);
    }
    let (r1, mut c1) = replica(&t.path().join("r1"), r1p, mp, &[]);
    let (r2, mut c2) = replica(&t.path().join("r2"), r2p, mp, &[]);
    eventually("two replicas online", || {
        info_field(&mut mc, "replication", "connected_slaves") == "2"
    });
    // After: they get this by the stream.
    for round in 3..8 {
        write_everything(&mut mc, round);
    }
    let acked: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut mc).unwrap();
    assert_eq!(acked, 2, "WAIT: both replicas acknowledged");
    let want = dump(&mut mc);
    // What the writes left, checked on the primary against what was written.
    assert_eq!(
        want.get("0/counter").unwrap(),
        "string [53, 54] expires=false"
    );
    assert!(want["0/stream"].contains("round"));
    assert!(want.contains_key("4/db3-7") || want.contains_key("3/db3-7"));
    assert_eq!(want.get("0/s7").unwrap(), "string [118, 55] expires=false");
    assert!(!want.contains_key("0/s6"), "deleted");
    assert_eq!(want.get("0/ttl5").unwrap(), "string [120] expires=true");
    assert_eq!(dump(&mut c1), want, "replica 1");
    assert_eq!(dump(&mut c2), want, "replica 2");
    // A replica refuses writes, and says what it follows.
    let err = c1.set::<_, _, ()>("x", "y").unwrap_err();
    assert_eq!(err.kind(), redis::ErrorKind::ReadOnly, "{err}");
    let role: redis::Value = redis::cmd("ROLE").query(&mut c1).unwrap();
    assert!(format!("{role:?}").contains("connected"), "{role:?}");
    assert_eq!(
        info_field(&mut c2, "replication", "master_link_status"),
        "up"
    );
    assert_eq!(
        info_field(&mut c1, "replication", "slave_repl_offset"),
        info_field(&mut mc, "replication", "master_repl_offset"),
    );
    // Function libraries follow: a replica runs its primary's read-only function.
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(
            "#!lua name=lib\nredis.register_function{function_name='peek', \
             callback=function(keys) return redis.call('GET', keys[1]) end, flags={'no-writes'}}",
        )
        .query(&mut mc)
        .unwrap();
    let _: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut mc).unwrap();
    let peeked: String = redis::cmd("FCALL_RO")
        .arg("peek")
        .arg(1)
        .arg("s7")
        .query(&mut c1)
        .unwrap();
    assert_eq!(peeked, "v7");
    // A reader blocked on a replica is woken by its primary's write.
    let on_replica = redis::Client::open(format!("redis://127.0.0.1:{r1p}/")).unwrap();
    let reader = std::thread::spawn(move || {
        let mut c = on_replica.get_connection().unwrap();
        let got: redis::Value = redis::cmd("XREAD")
            .arg("BLOCK")
            .arg(5000)
            .arg("STREAMS")
            .arg("stream")
            .arg("$")
            .query(&mut c)
            .unwrap();
        format!("{got:?}")
    });
    std::thread::sleep(Duration::from_millis(300));
    let _: String = redis::cmd("XADD")
        .arg("stream")
        .arg("*")
        .arg("late")
        .arg("arrival")
        .query(&mut mc)
        .unwrap();
    let got = reader.join().unwrap();
    assert!(got.contains("arrival"), "XREAD BLOCK on the replica: {got}");
    // Too few replicas for `min-replicas-to-write`: writes are refused, reads are not.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(3)
        .query(&mut mc)
        .unwrap();
    let err = mc.set::<_, _, ()>("x", "y").unwrap_err();
    assert!(err.to_string().contains("NOREPLICAS"), "{err}");
    assert_eq!(mc.get::<_, String>("s7").unwrap(), "v7");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(2)
        .query(&mut mc)
        .unwrap();
    let _: () = mc.set("two-replicas", "enough").unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(0)
        .query(&mut mc)
        .unwrap();
    // FLUSHALL goes through too.
    let _: () = redis::cmd("FLUSHALL").query(&mut mc).unwrap();
    let _: i64 = redis::cmd("WAIT").arg(2).arg(5000).query(&mut mc).unwrap();
    assert!(dump(&mut c1).is_empty());
    // Promoted, a replica takes writes and hands out collection versions of its own.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut c2)
        .unwrap();
    let _: () = c2.hset("new-hash", "f", "v").unwrap();
    assert_eq!(c2.hget::<_, _, String>("new-hash", "f").unwrap(), "v");
    // Pointed back at its primary, it is copied whole: its own writes do not stay.
    let _: () = mc.set("after-promotion", "1").unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(mp)
        .query(&mut c2)
        .unwrap();
    eventually("the old replica follows again", || {
        c2.get::<_, Option<String>>("after-promotion")
            .ok()
            .flatten()
            .is_some()
    });
    assert_eq!(dump(&mut c2), dump(&mut mc));
    for child in [m, r1, r2] {
        stop(child);
    }
}

/// Writes SETs until told to stop; the keys written.
fn writer(port: u16, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> u64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        // A batch applied twice shows in the count, not in the SET.
        let _: () = redis::pipe()
            .atomic()
            .set(format!("w{n}"), n.to_string())
            .incr("count", 1)
            .ignore()
            .query(&mut c)
            .unwrap();
        n += 1;
    }
    n
}

#[test]
fn a_replica_killed_under_writes_resumes_where_it_stopped() {
    let t = tempfile::tempdir().unwrap();
    let (mp, rp) = (free_port(), free_port());
    let (m, mut mc) = serve_with(&t.path().join("m"), mp, &[]);
    let rdir = t.path().join("r");
    let (r, mut rc) = replica(&rdir, rp, mp, &[]);
    eventually("replica online", || {
        info_field(&mut mc, "replication", "connected_slaves") == "1"
    });
    let halt = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let w = {
        let halt = halt.clone();
        std::thread::spawn(move || writer(mp, halt))
    };
    eventually("writes reach the replica", || {
        redis::cmd("DBSIZE").query::<i64>(&mut rc).unwrap_or(0) > 2000
    });
    kill(r);
    std::thread::sleep(Duration::from_millis(300));
    let (r, mut rc) = replica(&rdir, rp, mp, &[]);
    std::thread::sleep(Duration::from_millis(300));
    halt.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = w.join().unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mc).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(
        redis::cmd("DBSIZE").query::<i64>(&mut rc).unwrap(),
        written as i64 + 1
    );
    assert_eq!(rc.get::<_, u64>("count").unwrap(), written);
    assert_eq!(dump(&mut rc), dump(&mut mc));
    assert_eq!(info_field(&mut mc, "stats", "sync_full"), "1");
    assert_eq!(info_field(&mut mc, "stats", "sync_partial_ok"), "1");
    stop(m);
    stop(r);
}

#[test]
fn a_replica_further_behind_than_the_primary_keeps_is_copied_whole() {
    let t = tempfile::tempdir().unwrap();
    let (mp, rp) = (free_port(), free_port());
    let small = [
        "--write-buffer-size",
        "65536",
        "--repl-wal-keep-bytes",
        "65536",
    ];
    let (m, mut mc) = serve_with(&t.path().join("m"), mp, &small);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("repl-backlog-size")
        .arg("16kb")
        .query(&mut mc)
        .unwrap();
    let rdir = t.path().join("r");
    let _: () = mc.set("gone", "soon").unwrap();
    let (r, mut rc) = replica(&rdir, rp, mp, &[]);
    eventually("replica online with the key", || {
        rc.get::<_, Option<String>>("gone").unwrap().is_some()
    });
    kill(r);
    // Deleted while the replica is away: the copy that replaces its keys has no such key.
    let _: i64 = mc.del("gone").unwrap();
    // About 2 MB of writes: far past the 16 KiB backlog and the 64 KiB of WAL kept.
    let value = "v".repeat(200);
    for i in 0..10_000 {
        let _: () = mc.set(format!("k{i}"), &value).unwrap();
    }
    let (r, mut rc) = replica(&rdir, rp, mp, &[]);
    eventually("replica online again", || {
        info_field(&mut mc, "replication", "connected_slaves") == "1"
    });
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mc).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(dump(&mut rc), dump(&mut mc));
    assert_eq!(info_field(&mut mc, "stats", "sync_full"), "2");
    assert_eq!(info_field(&mut mc, "stats", "sync_partial_err"), "1");
    stop(m);
    stop(r);
}

#[test]
fn a_replica_logs_in_to_a_primary_that_needs_a_password() {
    let t = tempfile::tempdir().unwrap();
    let (mp, rp, wp) = (free_port(), free_port(), free_port());
    let (m, mut mc) = serve_with(&t.path().join("m"), mp, &[]);
    let _: () = mc.set("k", "v").unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("secret")
        .query(&mut mc)
        .unwrap();
    // From a configuration file, as Sentinel-managed replicas are run.
    let conf = t.path().join("r.conf");
    std::fs::write(
        &conf,
        format!("replicaof 127.0.0.1 {mp}\nmasterauth secret\nreplica-serve-stale-data no\n"),
    )
    .unwrap();
    let (r, mut rc) = serve_with(&t.path().join("r"), rp, &[conf.to_str().unwrap()]);
    eventually("the replica logs in and copies", || {
        rc.get::<_, Option<String>>("k").ok().flatten().as_deref() == Some("v")
    });
    // Without the password the link stays down, and a replica that must not serve stale
    // data says so.
    let conf = t.path().join("w.conf");
    std::fs::write(
        &conf,
        format!("replicaof 127.0.0.1 {mp}\nreplica-serve-stale-data no\n"),
    )
    .unwrap();
    let (w, mut wc) = serve_with(&t.path().join("w"), wp, &[conf.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        info_field(&mut wc, "replication", "master_link_status"),
        "down"
    );
    let err = wc.get::<_, Option<String>>("k").unwrap_err();
    assert_eq!(err.kind(), redis::ErrorKind::MasterDown, "{err}");
    for child in [m, r, w] {
        stop(child);
    }
}

//! The server through a real Redis client library and raw sockets.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use redis::Commands;
use strata_server::{Server, SyncMode};

mod common;

use common::{connect, start};

fn client(server: &Server) -> redis::Connection {
    connect(server.local_addr())
}

/// The error reply a command gets, as "CODE detail"; a panic on any other reply and on a
/// failure of the connection itself.
fn error_of(cmd: &redis::Cmd, c: &mut redis::Connection) -> String {
    let e = cmd.query::<redis::Value>(c).expect_err("an error reply");
    let code = e
        .code()
        .unwrap_or_else(|| panic!("not an error reply, but {e}"));
    format!("{code} {}", e.detail().unwrap_or_default())
}

#[test]
fn every_command_answers_as_redis_does() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    let echo: String = redis::cmd("ECHO").arg("hi").query(&mut c).unwrap();
    assert_eq!(echo, "hi");
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    assert_eq!(
        error_of(redis::cmd("SELECT").arg(16), &mut c),
        "ERR DB index is out of range"
    );
    let _: () = c.set("k", "v").unwrap();
    assert_eq!(c.get::<_, String>("k").unwrap(), "v");
    assert_eq!(c.get::<_, Option<String>>("missing").unwrap(), None);
    // SET NX / XX / GET
    let r: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("w")
        .arg("NX")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None);
    let r: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("w")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(r.as_deref(), Some("OK"));
    let r: Option<String> = redis::cmd("SET")
        .arg("new")
        .arg("x")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None);
    let old: Option<String> = redis::cmd("SET")
        .arg("k")
        .arg("z")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert_eq!(old.as_deref(), Some("w"));
    let err = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .arg("EX")
        .arg(0)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(err.to_string().contains("invalid expire time"), "{err}");
    // SETNX
    assert_eq!(c.set_nx::<_, _, i64>("once", 1).unwrap(), 1);
    assert_eq!(c.set_nx::<_, _, i64>("once", 2).unwrap(), 0);
    // MSET / MGET
    let _: () = redis::cmd("MSET")
        .arg("a")
        .arg("1")
        .arg("b")
        .arg("2")
        .query(&mut c)
        .unwrap();
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg("a")
        .arg("b")
        .arg("zz")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![Some("1".into()), Some("2".into()), None]);
    // DEL / EXISTS on several keys
    assert_eq!(
        redis::cmd("EXISTS")
            .arg("a")
            .arg("b")
            .arg("zz")
            .arg("a")
            .query::<i64>(&mut c)
            .unwrap(),
        3
    );
    assert_eq!(
        redis::cmd("DEL")
            .arg("a")
            .arg("zz")
            .arg("a")
            .query::<i64>(&mut c)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("EXISTS").arg("a").query::<i64>(&mut c).unwrap(),
        0
    );
    // Counters
    assert_eq!(c.incr::<_, _, i64>("n", 1).unwrap(), 1);
    assert_eq!(
        redis::cmd("INCRBY")
            .arg("n")
            .arg(41)
            .query::<i64>(&mut c)
            .unwrap(),
        42
    );
    assert_eq!(
        redis::cmd("DECR").arg("n").query::<i64>(&mut c).unwrap(),
        41
    );
    assert_eq!(
        redis::cmd("DECRBY")
            .arg("n")
            .arg(40)
            .query::<i64>(&mut c)
            .unwrap(),
        1
    );
    assert_eq!(
        error_of(redis::cmd("INCR").arg("k"), &mut c),
        "ERR value is not an integer or out of range"
    );
    let _: () = c.set("big", i64::MAX).unwrap();
    assert_eq!(
        error_of(redis::cmd("INCR").arg("big"), &mut c),
        "ERR increment or decrement would overflow"
    );
    // APPEND / STRLEN / GETDEL
    assert_eq!(
        redis::cmd("APPEND")
            .arg("s")
            .arg("ab")
            .query::<i64>(&mut c)
            .unwrap(),
        2
    );
    assert_eq!(
        redis::cmd("APPEND")
            .arg("s")
            .arg("cd")
            .query::<i64>(&mut c)
            .unwrap(),
        4
    );
    assert_eq!(
        redis::cmd("STRLEN").arg("s").query::<i64>(&mut c).unwrap(),
        4
    );
    assert_eq!(
        redis::cmd("STRLEN")
            .arg("none")
            .query::<i64>(&mut c)
            .unwrap(),
        0
    );
    assert_eq!(
        redis::cmd("GETDEL")
            .arg("s")
            .query::<Option<String>>(&mut c)
            .unwrap()
            .as_deref(),
        Some("abcd")
    );
    assert_eq!(
        redis::cmd("GETDEL")
            .arg("s")
            .query::<Option<String>>(&mut c)
            .unwrap(),
        None
    );
    // DBSIZE, INFO, CONFIG GET, COMMAND, HELLO
    let keys: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(keys, 5, "k, once, b, n and big");
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for section in [
        "# Server",
        "# Clients",
        "# Stats",
        "# Keyspace",
        "# LSM",
        "hot_cache_hit_rate",
        "write_amplification",
        "expected_false_positives:",
        "filter_false_positives:",
    ] {
        assert!(info.contains(section), "INFO lacks {section}");
    }
    // SAVE flushes the memtables into a table of the default 10 bits per key; levels
    // without files show no bits.
    let _: String = redis::cmd("SAVE").query(&mut c).unwrap();
    let lsm: String = redis::cmd("INFO").arg("lsm").query(&mut c).unwrap();
    assert!(lsm.contains("filter_bits_per_key=10.000"), "{lsm}");
    // The merge policy the server runs (`STRATA_MERGE_POLICY`'s) and the sorted runs per
    // level: level 0's one table.
    // Spelled out here, not taken from the engine's own `MergePolicy::name`.
    let policy = match common::engine_options().merge_policy {
        strata::MergePolicy::Leveling => "leveling",
        strata::MergePolicy::Tiering => "tiering",
        strata::MergePolicy::LazyLeveling => "lazy-leveling",
    };
    assert!(
        lsm.contains(&format!(
            "merge_policy:{policy}\r\nsize_ratio:10\r\nruns_per_level:1\r\n"
        )),
        "{lsm}"
    );
    assert!(
        lsm.contains("level6:files=0,") && lsm.contains("filter_bits_per_key=-"),
        "{lsm}"
    );
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query(&mut c)
        .unwrap();
    assert_eq!(cfg, vec!["appendonly", "yes"]);
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query(&mut c)
        .unwrap();
    assert_eq!(cfg, vec!["save", ""]);
    let docs: Vec<String> = redis::cmd("COMMAND").arg("DOCS").query(&mut c).unwrap();
    assert!(docs.is_empty());
    let hello: Vec<redis::Value> = redis::cmd("HELLO").arg(2).query(&mut c).unwrap();
    assert_eq!(hello.len(), 14);
    assert_eq!(
        error_of(redis::cmd("HELLO").arg(4), &mut c),
        "NOPROTO unsupported protocol version"
    );
    // Unknown command: an error, and the connection goes on.
    let err = redis::cmd("FROB").arg("x").query::<()>(&mut c).unwrap_err();
    assert!(err.to_string().contains("unknown command"), "{err}");
    assert_eq!(c.get::<_, String>("k").unwrap(), "z");
    // FLUSHALL
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
    assert_eq!(c.get::<_, Option<String>>("k").unwrap(), None);
    server.shutdown().unwrap();
}

#[test]
fn pipelining_and_binary_safe_keys_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let mut pipe = redis::pipe();
    for i in 0..1000u32 {
        let key = [b"bin\x00\r\n".as_slice(), &i.to_be_bytes()].concat();
        let value: Vec<u8> = (0..=255u8).chain(i.to_le_bytes()).collect();
        pipe.cmd("SET").arg(key).arg(value).ignore();
    }
    for i in 0..1000u32 {
        let key = [b"bin\x00\r\n".as_slice(), &i.to_be_bytes()].concat();
        pipe.cmd("GET").arg(key);
    }
    let got: Vec<Vec<u8>> = pipe.query(&mut c).unwrap();
    assert_eq!(got.len(), 1000);
    for (i, v) in got.iter().enumerate() {
        let want: Vec<u8> = (0..=255u8).chain((i as u32).to_le_bytes()).collect();
        assert_eq!(v, &want);
    }
    // Raw pipelined bytes in one write: replies come back in order.
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n")
        .unwrap();
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 19 {
        let n = s.read(&mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"+PONG\r\n$2\r\nhi\r\n+PONG\r\n");
    server.shutdown().unwrap();
}

#[test]
fn scan_covers_exactly_the_keyspace_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| c.engine.write_buffer_size = 64 * 1024);
    let mut c = client(&server);
    for i in 0..3000u32 {
        let _: () = c.set(format!("stable:{i:05}"), "v").unwrap();
    }
    let addr = server.local_addr();
    let writer = std::thread::spawn(move || {
        let mut w = connect(addr);
        for i in 0..3000u32 {
            let _: () = w.set(format!("churn:{i:05}"), "x").unwrap();
            if i % 3 == 0 {
                let _: () = w.del(format!("churn:{:05}", i / 2)).unwrap();
            }
        }
    });
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = 0u64;
    let mut calls = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("stable:*")
            .arg("COUNT")
            .arg(100)
            .query(&mut c)
            .unwrap();
        calls += 1;
        for k in keys {
            assert!(seen.insert(k.clone()), "{k} returned twice");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    writer.join().unwrap();
    assert!(calls > 10);
    let expected: std::collections::BTreeSet<String> =
        (0..3000).map(|i| format!("stable:{i:05}")).collect();
    assert_eq!(
        seen, expected,
        "every key present throughout is returned exactly once"
    );
    // Strata's own rule (redis-server walks its table from any number): a cursor it never
    // issued is refused, not read as a place in the keyspace.
    assert_eq!(
        error_of(redis::cmd("SCAN").arg(987654), &mut c),
        "ERR invalid cursor (expired or never issued)"
    );
    server.shutdown().unwrap();
}

#[test]
fn setnx_races_have_exactly_one_winner_and_incr_is_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(start(dir.path(), |_| {}));
    let addr = server.local_addr();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = connect(addr);
                let mut wins = 0;
                for round in 0..200 {
                    wins += c.set_nx::<_, _, i64>(format!("race:{round}"), t).unwrap();
                    let _: i64 = c.incr("counter", 1).unwrap();
                }
                wins
            })
        })
        .collect();
    let wins: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(wins, 200, "each key has exactly one SETNX winner");
    let mut c = connect(addr);
    assert_eq!(
        c.get::<_, i64>("counter").unwrap(),
        1600,
        "no increment lost, no stale cached value"
    );
    Arc::try_unwrap(server).ok().unwrap().shutdown().unwrap();
}

#[test]
fn restart_keeps_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| c.sync = SyncMode::Always);
    let mut c = client(&server);
    for i in 0..500 {
        let _: () = c.set(format!("key{i}"), i).unwrap();
    }
    drop(c);
    server.shutdown().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    for i in 0..500 {
        assert_eq!(c.get::<_, i64>(format!("key{i}")).unwrap(), i);
    }
    server.shutdown().unwrap();
}

/// The value of one field of `INFO persistence`.
fn persistence_field(c: &mut redis::Connection, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .to_string()
}

/// The keys `k0..` that a server over `dir` holds, and their values.
fn keys_in(dir: &std::path::Path) -> Vec<(String, String)> {
    let server = start(dir, |_| {});
    let mut c = client(&server);
    let mut keys: Vec<String> = c.keys("k*").unwrap();
    keys.sort();
    let pairs = keys
        .into_iter()
        .map(|k| {
            let v: String = c.get(&k).unwrap();
            (k, v)
        })
        .collect();
    drop(c);
    server.shutdown().unwrap();
    pairs
}

#[test]
fn save_and_bgsave_write_a_checkpoint_that_a_server_opens() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let started: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    let _: () = c.set("k1", "one").unwrap();
    let _: () = c.set("k2", "two").unwrap();
    assert_eq!(
        persistence_field(&mut c, "rdb_changes_since_last_save"),
        "2"
    );
    std::thread::sleep(Duration::from_millis(1100));
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let saved: i64 = redis::cmd("LASTSAVE").query(&mut c).unwrap();
    assert!(saved > started, "LASTSAVE {saved}, started {started}");
    assert_eq!(
        persistence_field(&mut c, "rdb_changes_since_last_save"),
        "0"
    );
    let _: () = c.set("k3", "three").unwrap();
    let _: () = c.del("k1").unwrap();
    let checkpoint = dir.path().join("checkpoint");
    assert_eq!(
        keys_in(&checkpoint),
        [("k1".into(), "one".into()), ("k2".into(), "two".into())]
    );

    // BGSAVE replaces it with the state of its own time.
    let reply: String = redis::cmd("BGSAVE").query(&mut c).unwrap();
    assert_eq!(reply, "Background saving started");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while persistence_field(&mut c, "rdb_changes_since_last_save") != "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "BGSAVE did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(persistence_field(&mut c, "rdb_last_bgsave_status"), "ok");
    assert_eq!(
        keys_in(&checkpoint),
        [("k2".into(), "two".into()), ("k3".into(), "three".into())]
    );
    assert!(!dir.path().join("checkpoint.tmp").exists());

    // Not inside a transaction, as in Redis.
    let _: () = redis::cmd("MULTI").query(&mut c).unwrap();
    let err = redis::cmd("SAVE").query::<()>(&mut c).unwrap_err();
    assert!(
        err.to_string().contains("not allowed inside a transaction"),
        "{err}"
    );
    let err = redis::cmd("EXEC").query::<()>(&mut c).unwrap_err();
    assert!(err.to_string().contains("Transaction discarded"), "{err}");
    drop(c);
    server.shutdown().unwrap();
}

/// FLUSHDB writes one range tombstone over the database's keys: the keys stay gone after a
/// restart, the other databases keep theirs, and keys written afterwards are kept.
#[test]
fn flushdb_is_one_range_delete_that_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| c.sync = SyncMode::Always);
    let mut c = client(&server);
    let mut pipe = redis::pipe();
    for i in 0..3000 {
        pipe.set(format!("k{i}"), i).ignore();
    }
    let _: () = pipe.query(&mut c).unwrap();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut c).unwrap();
    for i in 0..10 {
        let _: () = c.set(format!("other{i}"), i).unwrap();
    }
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    let _: () = c.set("after", 1).unwrap();
    drop(c);
    server.shutdown().unwrap();
    {
        // One range tombstone, not a deletion per key.
        let db = strata::Db::open(dir.path(), common::engine_options()).unwrap();
        let files = db.stats().files;
        assert_eq!(files.iter().map(|f| f.range_deletions).sum::<u64>(), 1);
        assert_eq!(files.iter().map(|f| f.deletions).sum::<u64>(), 0);
    }

    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 1);
    assert_eq!(c.get::<_, Option<i64>>("k7").unwrap(), None);
    assert_eq!(c.get::<_, i64>("after").unwrap(), 1);
    let _: () = redis::cmd("SELECT").arg(1).query(&mut c).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 10);
    drop(c);
    server.shutdown().unwrap();
}

fn raw_exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn malformed_and_oversized_requests_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| c.max_request_bytes = 1024);
    let mut good = client(&server);
    let _: () = good.set("k", "v").unwrap();
    let addr = server.local_addr();
    for bad in [
        b"*x\r\n".as_slice(),
        b"*1\r\n:5\r\n",
        b"*1\r\n$-9\r\n",
        b"*2\r\n$3\r\nGET\r\n$1\r\nkXY",
        b"\"unbalanced\r\n",
        b"*1\r\n$2000\r\n",
    ] {
        let reply = raw_exchange(addr, bad);
        assert!(
            reply.starts_with(b"-ERR Protocol error"),
            "{:?} -> {:?}",
            String::from_utf8_lossy(bad),
            String::from_utf8_lossy(&reply)
        );
    }
    // Random garbage from many connections: the server answers or closes, and lives on.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..50 {
        let junk: Vec<u8> = (0..200)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let _ = s.write_all(&junk);
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
    }
    assert_eq!(
        good.get::<_, String>("k").unwrap(),
        "v",
        "other clients are unharmed"
    );
    server.shutdown().unwrap();
}

#[test]
fn client_limit_and_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| {
        c.max_clients = 2;
        c.idle_timeout = Some(Duration::from_millis(500));
    });
    let mut a = client(&server);
    let mut b = client(&server);
    let _: () = a.set("x", 1).unwrap();
    let _: () = b.set("y", 2).unwrap();
    let reply = raw_exchange(server.local_addr(), b"PING\r\n");
    assert!(
        reply.starts_with(b"-ERR max number of clients reached"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    // Idle connections are closed; then new clients get in.
    std::thread::sleep(Duration::from_millis(1200));
    let idle = redis::cmd("PING").query::<String>(&mut a).unwrap_err();
    assert!(
        idle.is_io_error() || idle.is_connection_dropped(),
        "idle connection should be closed: {idle}"
    );
    let mut c = client(&server);
    assert_eq!(c.get::<_, i64>("y").unwrap(), 2);
    server.shutdown().unwrap();
}

#[test]
fn a_slow_reader_does_not_hold_up_others() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let _: () = c.set("big", vec![b'x'; 1 << 20]).unwrap();
    // This client asks for 64 MiB of replies and never reads them.
    let mut slow = TcpStream::connect(server.local_addr()).unwrap();
    let mut req = Vec::new();
    for _ in 0..64 {
        req.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n");
    }
    slow.write_all(&req).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let start = std::time::Instant::now();
    for i in 0..100 {
        let _: () = c.set(format!("k{i}"), i).unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(5));
    drop(slow);
    server.shutdown().unwrap();
}

/// Pipelined plain SETs are written as one batch: replies stay in order, the last write of a
/// key wins, other commands between them see the writes before them, and SETs before a
/// malformed request are still applied and answered.
#[test]
fn pipelined_sets_are_grouped_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let req = b"SET a 1\r\nSET a 2\r\nGET a\r\nSET b x\r\nSETNX b y\r\nSET c 3\r\n*1\r\n:bad\r\n";
    let got = raw_exchange(server.local_addr(), req);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("+OK\r\n+OK\r\n$1\r\n2\r\n+OK\r\n:0\r\n+OK\r\n-ERR Protocol error"),
        "{text:?}"
    );
    let mut c = client(&server);
    assert_eq!(c.get::<_, String>("a").unwrap(), "2");
    assert_eq!(c.get::<_, String>("b").unwrap(), "x");
    assert_eq!(
        c.get::<_, String>("c").unwrap(),
        "3",
        "the SET before the bad request was applied"
    );
    server.shutdown().unwrap();
}

/// GETs join the round's batch after its SETs: a GET still sees every earlier write of its
/// connection and none of its later ones, and replies keep their order.
#[test]
fn pipelined_gets_see_exactly_the_writes_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in 0..200 {
        // GET before the SET of the same key, then after; a DEL ends a batch.
        req.extend_from_slice(
            format!(
                "GET k{i}\r\nSET k{i} v{i}\r\nGET k{i}\r\nGET k{}\r\n",
                i + 1
            )
            .as_bytes(),
        );
        let v = format!("v{i}");
        want.extend_from_slice(format!("$-1\r\n+OK\r\n${}\r\n{v}\r\n$-1\r\n", v.len()).as_bytes());
        if i % 50 == 49 {
            req.extend_from_slice(format!("DEL k{i}\r\nGET k{i}\r\n").as_bytes());
            want.extend_from_slice(b":1\r\n$-1\r\n");
        }
    }
    // Longer than one connection's share of a batch.
    for _ in 0..100 {
        req.extend_from_slice(b"GET k0\r\n");
        want.extend_from_slice(b"$2\r\nv0\r\n");
    }
    req.extend_from_slice(b"QUIT\r\n");
    want.extend_from_slice(b"+OK\r\n");
    let got = raw_exchange(server.local_addr(), &req);
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );

    // Many connections pipelining at once: each reads its own keys back.
    let addr = server.local_addr();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = connect(addr);
                for round in 0..20 {
                    let mut pipe = redis::pipe();
                    for i in 0..40 {
                        pipe.cmd("SET")
                            .arg(format!("t{t}-{i}"))
                            .arg(format!("{round}"))
                            .ignore();
                        pipe.cmd("GET").arg(format!("t{t}-{i}"));
                    }
                    let got: Vec<String> = pipe.query(&mut c).unwrap();
                    assert_eq!(got, vec![round.to_string(); 40]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn the_hot_key_cache_never_serves_a_stale_value() {
    // A cache too small for the keys, so that entries are evicted and refilled all the time,
    // and two workers, so that writers and readers run at once.
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| {
        c.cache_bytes = 16 * 1024;
        c.threads = 2;
    });
    const KEYS: usize = 64;
    const WRITES: u64 = 400;
    // The highest value acknowledged for each key: a read that starts after an
    // acknowledgement must see that value or a newer one.
    let acked: Arc<Vec<std::sync::atomic::AtomicU64>> =
        Arc::new((0..KEYS).map(|_| Default::default()).collect());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (acked, mut c) = (acked.clone(), client(&server));
            std::thread::spawn(move || {
                for i in 1..=WRITES {
                    // Each writer owns half of the keys; odd rounds pipeline four SETs.
                    let keys: Vec<usize> = (0..4)
                        .map(|j| w + 2 * ((i as usize * 4 + j) % (KEYS / 2)))
                        .collect();
                    if i % 2 == 1 {
                        let mut p = redis::pipe();
                        for k in &keys {
                            p.set(format!("k{k}"), i).ignore();
                        }
                        p.query::<()>(&mut c).unwrap();
                    } else {
                        for k in &keys {
                            c.set::<_, _, ()>(format!("k{k}"), i).unwrap();
                        }
                    }
                    for k in keys {
                        acked[k].fetch_max(i, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (acked, done, mut c) = (acked.clone(), done.clone(), client(&server));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut k = r;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    k = (k * 7 + 3) % KEYS;
                    let floor = acked[k].load(std::sync::atomic::Ordering::SeqCst);
                    let got: Option<u64> = c.get(format!("k{k}")).unwrap();
                    assert!(
                        got.unwrap_or(0) >= floor,
                        "k{k}: read {got:?} after {floor} was acknowledged"
                    );
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads > 100, "{reads} reads");
    let mut c = client(&server);
    for k in 0..KEYS {
        let got: u64 = c.get(format!("k{k}")).unwrap();
        assert_eq!(
            got,
            acked[k].load(std::sync::atomic::Ordering::SeqCst),
            "k{k}"
        );
    }
    server.shutdown().unwrap();
}

/// Regression: an MGET whose first key the hot-key cache answered wrote the engine's answer
/// for the next key into the first key's slot, so a cached empty value came back as nil.
#[test]
fn mget_answers_each_key_with_its_own_value_when_some_are_cached() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let _: () = c.set("k00277", "").unwrap();
    let _: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&[
            "k00277", "k00150", "k00281", "k00129", "k00244", "k00161", "k00051",
        ])
        .query(&mut c)
        .unwrap();
    let _: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["k00110", "k00277", "k00240"])
        .query(&mut c)
        .unwrap();
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["k00277", "k00106"])
        .query(&mut c)
        .unwrap();
    assert_eq!(got, vec![Some(String::new()), None]);
    server.shutdown().unwrap();
}

/// With the active-expiry cycle off, keys that expired and that nothing read still leave the
/// disk: compaction's filter removes them.
#[test]
fn compaction_removes_expired_keys_that_nothing_read() {
    let dir = tempfile::tempdir().unwrap();
    let clock = strata_server::Clock::manual(1_700_000_000_000);
    let server = start(dir.path(), |c| {
        c.clock = clock.clone();
        c.active_expiry = None;
    });
    let mut c = client(&server);
    for i in 0..100 {
        let _: () = redis::cmd("SET")
            .arg(format!("gone{i}"))
            .arg("v")
            .arg("PX")
            .arg(1000)
            .query(&mut c)
            .unwrap();
        let _: () = c.set_ex(format!("kept{i}"), "v", 100).unwrap();
    }
    clock.advance_ms(1000);
    assert_eq!(c.get::<_, Option<String>>("gone7").unwrap(), None);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 100);
    let _: () = redis::cmd("COMPACT").query(&mut c).unwrap();
    server.shutdown().unwrap();
    let mut data_keys = Vec::new();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "sst") {
            let dump = strata::inspect::dump_file(&path, true).unwrap();
            // Database 0's keys; the expiry index's entries start with 0xFE.
            data_keys.extend(
                dump.entries
                    .into_iter()
                    .filter(|e| e.key.first() == Some(&0)),
            );
        }
    }
    let mut names: Vec<String> = data_keys
        .iter()
        .map(|e| String::from_utf8_lossy(&e.key[1..]).into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..100).map(|i| format!("kept{i}")).collect();
    want.sort();
    assert_eq!(names, want, "the expired keys are gone, the others stay");
    assert!(data_keys.iter().all(|e| !e.deletion));
}

/// After `HELLO 3` replies take RESP3's types; `HELLO 2` turns them back.
#[test]
fn resp3_replies_take_their_own_types() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let got = raw_exchange(
        server.local_addr(),
        b"SET k v\r\nHELLO 3\r\nGET missing\r\nMGET k missing\r\nCONFIG GET appendonly\r\n\
          INCRBYFLOAT f 1.5\r\nINFO keyspace\r\nHELLO 2\r\nGET missing\r\nQUIT\r\n",
    );
    let got = String::from_utf8_lossy(&got);
    let modes =
        "$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
    let head = "$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n";
    let info = "# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n";
    // The whole exchange, byte for byte: this is the server's first connection, id 1.
    let want = [
        "+OK\r\n".to_string(),
        format!("%7\r\n{head}:3\r\n$2\r\nid\r\n:1\r\n{modes}"),
        "_\r\n".into(),
        "*2\r\n$1\r\nv\r\n_\r\n".into(),
        "%1\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n".into(),
        "$3\r\n1.5\r\n".into(),
        format!("={}\r\ntxt:{info}\r\n", info.len() + 4),
        format!("*14\r\n{head}:2\r\n$2\r\nid\r\n:1\r\n{modes}"),
        "$-1\r\n+OK\r\n".into(),
    ]
    .concat();
    assert_eq!(got, want);
    // A client library that speaks RESP3 works end to end.
    let client =
        redis::Client::open(format!("redis://{}/?protocol=resp3", server.local_addr())).unwrap();
    let mut c = client.get_connection().unwrap();
    let _: () = c.set("r3", "").unwrap();
    assert_eq!(
        c.get::<_, Option<String>>("r3").unwrap(),
        Some(String::new())
    );
    assert_eq!(c.get::<_, Option<String>>("nope").unwrap(), None);
    let cfg: std::collections::HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query(&mut c)
        .unwrap();
    assert_eq!(cfg["appendfsync"], "everysec");
    server.shutdown().unwrap();
}

/// Each of the sixteen databases is its own keyspace, and MOVE and COPY ... DB move keys
/// between them.
#[test]
fn databases_are_separate_keyspaces() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    for db in 0..16 {
        let _: () = redis::cmd("SELECT").arg(db).query(&mut c).unwrap();
        let _: () = c.set("k", db).unwrap();
    }
    for db in (0..16).rev() {
        let _: () = redis::cmd("SELECT").arg(db).query(&mut c).unwrap();
        assert_eq!(c.get::<_, i64>("k").unwrap(), db);
        assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 1);
    }
    // Now in database 0.
    let _: () = c.set("m", "moved").unwrap();
    assert_eq!(
        redis::cmd("MOVE")
            .arg("m")
            .arg(5)
            .query::<i64>(&mut c)
            .unwrap(),
        1
    );
    assert_eq!(c.get::<_, Option<String>>("m").unwrap(), None);
    // A key that exists in the target database is not moved, and stays where it was.
    let _: () = c.set("m", "again").unwrap();
    assert_eq!(
        redis::cmd("MOVE")
            .arg("m")
            .arg(5)
            .query::<i64>(&mut c)
            .unwrap(),
        0
    );
    assert_eq!(c.get::<_, String>("m").unwrap(), "again");
    let _: () = c.del("m").unwrap();
    let copied: i64 = redis::cmd("COPY")
        .arg("k")
        .arg("c")
        .arg("DB")
        .arg(5)
        .query(&mut c)
        .unwrap();
    assert_eq!(copied, 1);
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
    let _: () = redis::cmd("SELECT").arg(5).query(&mut c).unwrap();
    let mut keys: Vec<String> = c.keys("*").unwrap();
    keys.sort();
    assert_eq!(keys, ["c", "k", "m"]);
    assert_eq!(c.get::<_, String>("c").unwrap(), "0");
    server.shutdown().unwrap();
}

/// A data directory written before the server laid out databases and expiry (raw keys and
/// values) opens with its keys in database 0, once and for good.
#[test]
fn a_directory_of_the_earlier_layout_is_converted_into_database_0() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = strata::Db::open(dir.path(), common::engine_options()).unwrap();
        db.put(b"old", b"value").unwrap();
        db.put(b"\x00binary", b"").unwrap();
        db.put(b"\xfe\xff", b"x").unwrap();
        db.close().unwrap();
    }
    for _ in 0..2 {
        let server = start(dir.path(), |_| {});
        let mut c = client(&server);
        assert_eq!(c.get::<_, String>("old").unwrap(), "value");
        assert_eq!(c.get::<_, Vec<u8>>(b"\x00binary").unwrap(), b"");
        assert_eq!(c.get::<_, String>(b"\xfe\xff").unwrap(), "x");
        assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 3);
        assert_eq!(c.ttl::<_, i64>("old").unwrap(), -1);
        server.shutdown().unwrap();
    }
}

/// The active-expiry cycle removes due keys that nothing reads, several cycles' worth, and
/// leaves alone a key whose expiry was since lifted or moved.
#[test]
fn active_expiry_removes_due_keys_and_only_those() {
    let dir = tempfile::tempdir().unwrap();
    let clock = strata_server::Clock::manual(1_700_000_000_000);
    let server = start(dir.path(), |c| {
        c.clock = clock.clone();
        // Rarely enough that the cycle runs between the clock's move and WATCH only by
        // chance, and then the first check passes without reaching what it tests.
        c.active_expiry = Some(Duration::from_millis(100));
    });
    let mut c = client(&server);
    let mut pipe = redis::pipe();
    for i in 0..2500 {
        pipe.cmd("SET")
            .arg(format!("k{i}"))
            .arg("v")
            .arg("PX")
            .arg(100)
            .ignore();
    }
    pipe.query::<()>(&mut c).unwrap();
    // Stale index entries: one key persisted, one given a later expiry, one rewritten.
    let _: i64 = redis::cmd("PERSIST").arg("k0").query(&mut c).unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg("k1")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    let _: () = c.set("k2", "new").unwrap();
    let expired = |c: &mut redis::Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("expired_keys:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(expired(&mut c), 0, "nothing is due yet");
    clock.advance_ms(100);
    let started = std::time::Instant::now();
    while expired(&mut c) < 2497 && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(expired(&mut c), 2497);
    assert_eq!(c.get::<_, String>("k0").unwrap(), "v");
    assert_eq!(c.get::<_, String>("k1").unwrap(), "v");
    assert_eq!(c.get::<_, String>("k2").unwrap(), "new");
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 3);
    // The key with the later expiry goes when that time comes.
    clock.advance_ms(60_000);
    let started = std::time::Instant::now();
    while expired(&mut c) < 2498 && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(expired(&mut c), 2498);
    server.shutdown().unwrap();
}

/// String, bit, expiry and keyspace commands, their options, edge cases and errors, answered
/// byte for byte as redis-server 7.0.15 answered them (`tests/golden/`: the commands, sent
/// here as inline commands, and redis-server's replies to them on an empty database).
/// INCRBYFLOAT is given sums exact in binary: Redis adds in long double, and its last digits
/// differ from a double's otherwise (docs/COMPATIBILITY.md).
#[test]
fn replies_match_redis_server_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let commands = include_str!("golden/commands.txt");
    let want: &[u8] = include_bytes!("golden/redis-7.0.15-replies.bin");
    let mut req = commands.replace('\n', "\r\n").into_bytes();
    req.extend_from_slice(b"QUIT\r\n");
    let got = raw_exchange(server.local_addr(), &req);
    if got != want {
        // Name the first command whose reply differs.
        let (mut g, mut w) = (got.as_slice(), want);
        let mut line = 0;
        while g.first() == w.first() && !g.is_empty() {
            if g.first() == Some(&b'\n') {
                line += 1;
            }
            g = &g[1..];
            w = &w[1..];
        }
        panic!(
            "replies differ after {line} reply lines: got {:?}, want {:?}",
            String::from_utf8_lossy(&g[..g.len().min(80)]),
            String::from_utf8_lossy(&w[..w.len().min(80)])
        );
    }
    server.shutdown().unwrap();
}

/// As in Redis: a watched key that had expired already when watched may be removed, by the
/// expiry cycle or by a command that meets it, without aborting EXEC, since nothing a
/// client sees changed; written again, or live when watched and expired since, it aborts.
#[test]
fn a_watched_key_that_had_expired_already_goes_without_aborting_exec() {
    let dir = tempfile::tempdir().unwrap();
    let clock = strata_server::Clock::manual(1_700_000_000_000);
    let server = start(dir.path(), |c| {
        c.clock = clock.clone();
        c.active_expiry = Some(Duration::from_millis(5));
    });
    let mut c = client(&server);
    let mut other = client(&server);
    let expired_keys = |c: &mut redis::Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
        let line = info
            .lines()
            .find(|l| l.starts_with("expired_keys:"))
            .unwrap();
        line["expired_keys:".len()..].trim().parse().unwrap()
    };
    let exec = |c: &mut redis::Connection| -> Option<Vec<String>> {
        let _: () = redis::cmd("MULTI").query(c).unwrap();
        let _: () = redis::cmd("PING").query(c).unwrap();
        redis::cmd("EXEC").query(c).unwrap()
    };
    let set_px = |c: &mut redis::Connection, key: &str, ms: u64| {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .arg("PX")
            .arg(ms)
            .query(c)
            .unwrap();
    };
    // Expired before WATCH, then removed by the expiry cycle: EXEC runs.
    set_px(&mut c, "stale", 1000);
    let before = expired_keys(&mut c);
    clock.advance_ms(1000);
    let _: () = redis::cmd("WATCH").arg("stale").query(&mut c).unwrap();
    let start = std::time::Instant::now();
    while expired_keys(&mut other) == before {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the key never expired"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(exec(&mut c), Some(vec!["PONG".to_string()]));
    // Expired before WATCH, then written by another client: EXEC aborts.
    set_px(&mut c, "rewritten", 1000);
    clock.advance_ms(1000);
    let _: () = redis::cmd("WATCH").arg("rewritten").query(&mut c).unwrap();
    let _: () = other.set("rewritten", "new").unwrap();
    assert_eq!(exec(&mut c), None);
    // Live when watched, expired before EXEC: EXEC aborts.
    set_px(&mut c, "live", 1000);
    let _: () = redis::cmd("WATCH").arg("live").query(&mut c).unwrap();
    clock.advance_ms(1000);
    assert_eq!(exec(&mut c), None);
    server.shutdown().unwrap();
}

/// A compaction that drops a deleted key's tombstone, or rewrites a value's sequence number,
/// is no write: a transaction watching the key runs. A key written after WATCH aborts it.
#[test]
fn a_compaction_is_no_write_to_a_watched_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let mut other = client(&server);
    let exec = |c: &mut redis::Connection| -> Option<Vec<String>> {
        let _: () = redis::cmd("MULTI").query(c).unwrap();
        let _: () = redis::cmd("PING").query(c).unwrap();
        redis::cmd("EXEC").query(c).unwrap()
    };
    let _: () = c.set("gone", "v").unwrap();
    let _: () = c.del("gone").unwrap();
    let _: () = redis::cmd("WATCH").arg("gone").query(&mut c).unwrap();
    let _: () = redis::cmd("COMPACT").query(&mut other).unwrap();
    assert_eq!(exec(&mut c), Some(vec!["PONG".to_string()]));
    let _: () = c.set("deleted", "v").unwrap();
    let _: () = redis::cmd("WATCH").arg("deleted").query(&mut c).unwrap();
    let _: () = other.del("deleted").unwrap();
    let _: () = redis::cmd("COMPACT").query(&mut other).unwrap();
    assert_eq!(exec(&mut c), None);
    // A compaction that writes a watched value's sequence number as zero (the bottom of the
    // tree forgets those every reader sees) is no write either; a write made after WATCH
    // keeps its number through compactions, and aborts.
    let _: () = c.set("kept", "v").unwrap();
    let _: () = redis::cmd("WATCH").arg("kept").query(&mut c).unwrap();
    let _: () = redis::cmd("COMPACT").query(&mut other).unwrap();
    let _: () = redis::cmd("COMPACT").query(&mut other).unwrap();
    assert_eq!(exec(&mut c), Some(vec!["PONG".to_string()]));
    let _: () = c.set("moved", "v").unwrap();
    let _: () = redis::cmd("WATCH").arg("moved").query(&mut c).unwrap();
    let _: () = other.set("moved", "w").unwrap();
    let _: () = redis::cmd("COMPACT").query(&mut other).unwrap();
    let _: () = redis::cmd("COMPACT").query(&mut other).unwrap();
    assert_eq!(exec(&mut c), None);
    server.shutdown().unwrap();
}

#[test]
fn multi_exec_runs_its_commands_together_and_watch_aborts_it() {
    let t = tempfile::tempdir().unwrap();
    let server = start(t.path(), |_| {});
    let addr = server.local_addr();
    let mut c = client(&server);
    // The redis crate's atomic pipeline is MULTI ... EXEC; reads see the writes before them.
    let got: (String, i64, i64, String) = redis::pipe()
        .atomic()
        .set("a", 1)
        .incr("a", 1)
        .incr("a", 1)
        .get("a")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ("OK".into(), 2, 3, "3".into()));
    // Commands that walk the keyspace see the transaction's own writes, in order.
    let _: () = redis::cmd("SET").arg("old").arg(1).query(&mut c).unwrap();
    let got: (Vec<String>, i64, Vec<String>) = redis::pipe()
        .atomic()
        .set("fa", 1)
        .ignore()
        .cmd("KEYS")
        .arg("f*")
        .cmd("FLUSHDB")
        .ignore()
        .set("fb", 1)
        .ignore()
        .cmd("DBSIZE")
        .cmd("KEYS")
        .arg("*")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, (vec!["fa".into()], 1, vec!["fb".into()]));
    // A runtime error has its slot in EXEC's reply; the other commands run.
    assert_eq!(
        raw_exchange(
            addr,
            b"SET s str\r\nMULTI\r\nINCR s\r\nSET t 1\r\nEXEC\r\nGET t\r\nQUIT\r\n"
        ),
        b"+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n\
          -ERR value is not an integer or out of range\r\n+OK\r\n$1\r\n1\r\n+OK\r\n"
    );
    // A command that fails its checks while queued discards the transaction.
    assert_eq!(
        raw_exchange(
            addr,
            b"MULTI\r\nSET u 1\r\nGET\r\nEXEC\r\nGET u\r\nQUIT\r\n"
        ),
        b"+OK\r\n+QUEUED\r\n-ERR wrong number of arguments for 'get' command\r\n\
          -EXECABORT Transaction discarded because of previous errors.\r\n$-1\r\n+OK\r\n"
    );
    // A watched key written by another client: EXEC runs nothing and answers a null, in
    // either protocol.
    for (hello, null) in [(&b""[..], &b"*-1\r\n"[..]), (b"HELLO 3\r\n", b"_\r\n")] {
        let mut w = TcpStream::connect(addr).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        w.write_all(hello).unwrap();
        w.write_all(b"WATCH w\r\n").unwrap();
        // The other client writes only once WATCH has answered.
        let mut seen = Vec::new();
        while !seen.ends_with(b"+OK\r\n") {
            let mut buf = [0u8; 512];
            let n = w.read(&mut buf).unwrap();
            assert!(n > 0, "the server closed the connection");
            seen.extend_from_slice(&buf[..n]);
        }
        let _: () = redis::cmd("SET")
            .arg("w")
            .arg("other")
            .query(&mut c)
            .unwrap();
        w.write_all(b"MULTI\r\nSET w mine\r\nSET w2 mine\r\nEXEC\r\nQUIT\r\n")
            .unwrap();
        let mut out = Vec::new();
        let _ = w.read_to_end(&mut out);
        let expected = [&b"+OK\r\n+QUEUED\r\n+QUEUED\r\n"[..], null, b"+OK\r\n"].concat();
        assert_eq!(out, expected, "{}", String::from_utf8_lossy(&out));
        let w_now: String = redis::cmd("GET").arg("w").query(&mut c).unwrap();
        let w2: Option<String> = redis::cmd("GET").arg("w2").query(&mut c).unwrap();
        assert_eq!((w_now.as_str(), w2), ("other", None));
    }
    // A watched key that expires before EXEC aborts it too.
    let _: () = redis::cmd("SET")
        .arg("e")
        .arg("v")
        .arg("PX")
        .arg(100)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("WATCH").arg("e").query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    let r: Option<(String,)> = redis::pipe().atomic().set("e2", 1).query(&mut c).unwrap();
    assert_eq!(r, None);
    // No other client's command comes between a transaction's commands.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = connect(addr);
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _: () = redis::pipe()
                    .atomic()
                    .set("x", i)
                    .ignore()
                    .set("y", i)
                    .ignore()
                    .query(&mut c)
                    .unwrap();
                i += 1;
            }
            i
        })
    };
    for _ in 0..2000 {
        let (x, y): (Option<u64>, Option<u64>) =
            redis::cmd("MGET").arg("x").arg("y").query(&mut c).unwrap();
        assert_eq!(x, y, "a reader saw half a transaction");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0);
}

#[test]
fn concurrent_transactions_on_shared_keys_lose_no_update() {
    // EXEC holds its keys' stripes, not the whole keyspace: transactions on the same keys
    // still run one after another, while those on other keys and plain commands go on.
    // Four worker threads, so that transactions of different clients run at once.
    let t = tempfile::tempdir().unwrap();
    let server = start(t.path(), |c| c.threads = 4);
    let addr = server.local_addr();
    const CLIENTS: u64 = 4;
    const ROUNDS: u64 = 300;
    let writers: Vec<_> = (0..CLIENTS)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = connect(addr);
                for i in 0..ROUNDS {
                    // Read-modify-writes of two shared keys, and a key of the client's own.
                    let (x, y): (i64, i64) = redis::pipe()
                        .atomic()
                        .incr("x", 1)
                        .incr("y", 1)
                        .set(format!("own{w}"), i)
                        .ignore()
                        .query(&mut c)
                        .unwrap();
                    assert_eq!(x, y, "another transaction came between INCR x and INCR y");
                }
            })
        })
        .collect();
    let mut c = connect(addr);
    for _ in 0..500 {
        let (x, y): (Option<i64>, Option<i64>) =
            redis::cmd("MGET").arg("x").arg("y").query(&mut c).unwrap();
        assert_eq!(x, y, "a reader saw half a transaction");
    }
    for w in writers {
        w.join().unwrap();
    }
    let (x, y): (i64, i64) = redis::cmd("MGET").arg("x").arg("y").query(&mut c).unwrap();
    assert_eq!(
        (x, y),
        ((CLIENTS * ROUNDS) as i64, (CLIENTS * ROUNDS) as i64)
    );
}

/// The `client_*_buffer_limit_disconnections` counters of INFO clients.
fn buffer_closes(c: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("clients").query(c).unwrap();
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
            .unwrap()
    };
    (
        field("client_query_buffer_limit_disconnections"),
        field("client_output_buffer_limit_disconnections"),
    )
}

#[test]
fn query_and_output_buffer_limits_close_only_the_offender() {
    let t = tempfile::tempdir().unwrap();
    let server = start(t.path(), |_| {});
    let addr = server.local_addr();
    let mut c = client(&server);
    assert_eq!(buffer_closes(&mut c), (0, 0));
    for (name, value) in [
        ("client-query-buffer-limit", "1mb"),
        ("client-output-buffer-limit", "normal 2mb 0 0"),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut c)
            .unwrap();
    }
    let bad: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("normal 2mb 1mb 10")
        .query(&mut c);
    assert!(bad.is_err(), "a soft limit is refused, not ignored");
    // A request that never ends: its bulk string grows past 1 MiB and the connection closes.
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    slow.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n")
        .unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..32 {
        if slow.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut buf = [0u8; 16];
    match slow.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the connection should be closed without an answer: {other:?}"),
    }
    assert_eq!(buffer_closes(&mut c), (1, 0));
    // A flood of GETs of a 512 KiB value, never read: its replies pass 2 MiB and it closes.
    let big = vec![b'v'; 512 * 1024];
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query(&mut c)
        .unwrap();
    let mut flood = TcpStream::connect(addr).unwrap();
    flood
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let get = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n".repeat(200);
    let _ = flood.write_all(&get);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while buffer_closes(&mut c).1 == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(buffer_closes(&mut c), (1, 1));
    // Everyone else goes on.
    let v: Vec<u8> = redis::cmd("GET").arg("big").query(&mut c).unwrap();
    assert_eq!(v, big);
}

/// The kernel's timer of the TCP socket from local port `local` to remote port `remote` on
/// 127.0.0.1, from /proc/net/tcp: 2 is the keepalive timer, 0 none.
fn tcp_timer(local: u16, remote: u16) -> Option<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let want = (
        format!("0100007F:{local:04X}"),
        format!("0100007F:{remote:04X}"),
    );
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&want.0.as_str()) && f.get(2) == Some(&want.1.as_str()))
            .then(|| u8::from_str_radix(f.get(5)?.split(':').next()?, 16).ok())?
    })
}

#[test]
fn accepted_connections_get_tcp_keepalive() {
    let t = tempfile::tempdir().unwrap();
    let server = start(t.path(), |c| c.tcp_keepalive = 300);
    let port = server.local_addr().port();
    let probe = TcpStream::connect(server.local_addr()).unwrap();
    let mut c = client(&server);
    let _: () = redis::cmd("PING").query(&mut c).unwrap();
    let mine = probe.local_addr().unwrap().port();
    assert_eq!(
        tcp_timer(port, mine),
        Some(2),
        "the server's side probes when idle"
    );
    // Turned off: connections accepted from now on have no keepalive timer.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("tcp-keepalive")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let quiet = TcpStream::connect(server.local_addr()).unwrap();
    // A connection made after it and answered: connections are accepted in order, so
    // `quiet` is accepted, and configured, by now.
    let mut after = client(&server);
    let _: () = redis::cmd("PING").query(&mut after).unwrap();
    let theirs = quiet.local_addr().unwrap().port();
    assert_eq!(tcp_timer(port, theirs), Some(0));
}

/// CLIENT LIST shows every connection with its own name, database and last command, from
/// whichever worker asks; CLIENT KILL closes the ones its filters pick, on their own workers,
/// and leaves the rest serving.
#[test]
fn client_list_shows_every_connection_and_client_kill_closes_those_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| c.threads = 3);
    let mut admin = client(&server);
    let mut named = client(&server);
    let mut other = client(&server);
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("worker-7")
        .query(&mut named)
        .unwrap();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut named).unwrap();
    let _: Option<String> = named.get("k").unwrap();
    let named_id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut named).unwrap();
    let other_id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut other).unwrap();
    let admin_id: u64 = redis::cmd("CLIENT").arg("ID").query(&mut admin).unwrap();
    let ids_listed = |c: &mut redis::Connection| -> Vec<u64> {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(c).unwrap();
        let id = |l: &str| l.strip_prefix("id=")?.split(' ').next()?.parse().ok();
        list.lines().filter_map(id).collect()
    };
    assert_eq!(ids_listed(&mut admin), [admin_id, named_id, other_id]);
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    let lines: Vec<&str> = list.lines().collect();
    let line = lines
        .iter()
        .find(|l| l.starts_with(&format!("id={named_id} ")))
        .unwrap();
    for field in [
        "name=worker-7",
        "db=3",
        "cmd=client|id",
        "flags=N",
        "user=default",
    ] {
        assert!(line.split(' ').any(|f| f == field), "{field} in {line}");
    }
    let only: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(other_id)
        .query(&mut admin)
        .unwrap();
    assert!(only.starts_with(&format!("id={other_id} ")), "{only}");
    assert_eq!(only.lines().count(), 1);
    // KILL by ID closes that connection only; the others go on.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(named_id)
        .query(&mut admin)
        .unwrap();
    assert_eq!(killed, 1);
    let start = std::time::Instant::now();
    while redis::cmd("PING").query::<String>(&mut named).is_ok() {
        assert!(start.elapsed() < Duration::from_secs(10), "never closed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        redis::cmd("PING").query::<String>(&mut other).unwrap(),
        "PONG"
    );
    assert_eq!(ids_listed(&mut admin), [admin_id, other_id]);
    // An unknown address names no one; the old form says so.
    let e = error_of(
        redis::cmd("CLIENT").arg("KILL").arg("10.0.0.1:1"),
        &mut admin,
    );
    assert_eq!(e, "ERR No such client");
    // TYPE normal, SKIPME yes: every normal connection but the one asking.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut admin)
        .unwrap();
    assert_eq!(killed, 1);
    assert_eq!(
        redis::cmd("PING").query::<String>(&mut admin).unwrap(),
        "PONG"
    );
    let start = std::time::Instant::now();
    while redis::cmd("PING").query::<String>(&mut other).is_ok() {
        assert!(start.elapsed() < Duration::from_secs(10), "never closed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(ids_listed(&mut admin), [admin_id]);
    server.shutdown().unwrap();
}

/// MONITOR hears each command another connection runs, in order, its arguments quoted as
/// Redis quotes them; a script's commands come from "lua"; passwords are not shown.
#[test]
fn monitor_hears_commands_as_they_run_with_passwords_redacted() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| c.threads = 2);
    let mut watcher = TcpStream::connect(server.local_addr()).unwrap();
    watcher
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    watcher.write_all(b"*1\r\n$7\r\nMONITOR\r\n").unwrap();
    let mut lines = std::io::BufReader::new(watcher.try_clone().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "+OK");
    let mut c = client(&server);
    let _: () = c.set("k", "a b\"\n").unwrap();
    let _: Option<String> = c.get("k").unwrap();
    let _: () = redis::cmd("EVAL")
        .arg("return redis.call('incr', KEYS[1])")
        .arg(1)
        .arg("n")
        .query(&mut c)
        .unwrap();
    // The operator's commands are not shown.
    let _: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
    let _: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query(&mut c)
        .unwrap();
    let _ = redis::cmd("AUTH").arg("secret").query::<String>(&mut c);
    let _ = redis::cmd("HELLO")
        .arg(2)
        .arg("AUTH")
        .arg("default")
        .arg("secret")
        .query::<redis::Value>(&mut c);
    // The client library's own CLIENT SETINFO on connecting comes first.
    let mut next = || {
        let mut line = lines.next().unwrap().unwrap();
        while line.contains("] \"CLIENT\" ") {
            line = lines.next().unwrap().unwrap();
        }
        let (_, args) = line.split_once("] ").unwrap();
        let from = line.split_once(" [").unwrap().1.split(']').next().unwrap();
        (
            from.split(' ').next_back().unwrap().to_string(),
            args.to_string(),
        )
    };
    let (from, set) = next();
    assert_eq!(set, r#""SET" "k" "a b\"\n""#);
    assert!(from.starts_with("127.0.0.1:"), "{from}");
    assert_eq!(next().1, r#""GET" "k""#);
    assert_eq!(
        next().1,
        r#""EVAL" "return redis.call('incr', KEYS[1])" "1" "n""#
    );
    assert_eq!(next(), ("lua".to_string(), r#""incr" "n""#.to_string()));
    assert_eq!(next().1, r#""AUTH" "(redacted)""#);
    assert_eq!(next().1, r#""HELLO" "2" "AUTH" "(redacted)" "(redacted)""#);
    server.shutdown().unwrap();
}

/// Every parameter CONFIG GET shows takes a CONFIG SET of the value shown (Redis's own
/// "CONFIG sanity"), except the three Redis never changes; a fixed parameter refuses any
/// other value, a parameter named twice is refused whole, and SLOWLOG's settings apply.
#[test]
fn config_set_takes_back_what_config_get_shows() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let all: Vec<(String, String)> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("*")
        .query(&mut c)
        .unwrap();
    assert!(all.len() > 30, "{all:?}");
    for (k, v) in &all {
        let got = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query::<()>(&mut c);
        match k.as_str() {
            "databases" | "aclfile" | "daemonize" => {
                let e = got.unwrap_err().to_string();
                assert!(e.contains("can't set immutable config"), "{k}: {e}");
            }
            _ => assert!(got.is_ok(), "{k} {v:?}: {got:?}"),
        }
    }
    let after: Vec<(String, String)> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("*")
        .query(&mut c)
        .unwrap();
    assert_eq!(after, all);
    let port = server.local_addr().port() + 1;
    let e = error_of(
        redis::cmd("CONFIG").arg("SET").arg("port").arg(port),
        &mut c,
    );
    assert!(e.contains("can't set immutable config"), "{e}");
    let e = error_of(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-max-len")
            .arg(5)
            .arg("slowlog-max-len")
            .arg(6),
        &mut c,
    );
    assert!(e.contains("duplicate parameter"), "{e}");
    // Nothing of a refused CONFIG SET is applied.
    let len: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-max-len")
        .query(&mut c)
        .unwrap();
    assert_eq!(len[1], "128");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .arg("slowlog-max-len")
        .arg(2)
        .query(&mut c)
        .unwrap();
    let _: () = c.set("a", 1).unwrap();
    let _: () = redis::cmd("ECHO").arg("b").query(&mut c).unwrap();
    let log: Vec<(i64, i64, i64, Vec<String>, String, String)> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let commands: Vec<&[String]> = log.iter().map(|e| e.3.as_slice()).collect();
    assert_eq!(commands, [&["ECHO", "b"][..], &["SET", "a", "1"][..]]);
    server.shutdown().unwrap();
}

/// MEMORY STATS shows where the memory is: writes fill the memtable, a COMPACT moves them
/// to tables on disk; MEMORY DOCTOR reports the same figures.
#[test]
fn memory_stats_follow_writes_from_memtable_to_disk() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let stats = |c: &mut redis::Connection| -> std::collections::HashMap<String, i64> {
        redis::cmd("MEMORY").arg("STATS").query(c).unwrap()
    };
    let before = stats(&mut c);
    for i in 0..2000 {
        let _: () = c.set(format!("key{i}"), "v".repeat(100)).unwrap();
    }
    let written = stats(&mut c);
    assert!(
        written["engine.memtables"] >= before["engine.memtables"] + 200_000,
        "{before:?} then {written:?}"
    );
    assert!(written["held.total"] >= written["engine.memtables"]);
    assert_eq!(written["disk.tables"], before["disk.tables"]);
    let _: () = redis::cmd("COMPACT").query(&mut c).unwrap();
    let compacted = stats(&mut c);
    assert!(compacted["disk.tables"] > 0, "{compacted:?}");
    assert!(compacted["engine.memtables"] < written["engine.memtables"]);
    let report: String = redis::cmd("MEMORY").arg("DOCTOR").query(&mut c).unwrap();
    assert!(
        report.contains(&format!("disk.tables: {}", compacted["disk.tables"])),
        "{report}"
    );
    server.shutdown().unwrap();
}

/// CLIENT PAUSE WRITE holds writes and lets reads through; CLIENT UNPAUSE lets the held
/// writes go on; CLIENT PAUSE ALL holds reads too, until its time is up.
#[test]
fn client_pause_holds_writes_or_everything_until_it_ends() {
    use std::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |c| c.threads = 2);
    let addr = server.local_addr();
    let mut admin = client(&server);
    let mut c = client(&server);
    let _: () = c.set("k", "before").unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query(&mut admin)
        .unwrap();
    let started = Instant::now();
    assert_eq!(c.get::<_, String>("k").unwrap(), "before");
    assert!(started.elapsed() < Duration::from_secs(5));
    let spawned = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut w = common::connect(addr);
        let _: () = w.set("k", "after").unwrap();
        Instant::now()
    });
    std::thread::sleep(Duration::from_millis(300));
    // Still held: the value is the old one.
    assert_eq!(c.get::<_, String>("k").unwrap(), "before");
    let unpaused = Instant::now();
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut admin)
        .unwrap();
    let done = writer.join().unwrap();
    assert!(
        done >= unpaused,
        "written {:?} after the start",
        done - spawned
    );
    assert!(done - unpaused < Duration::from_secs(30));
    assert_eq!(c.get::<_, String>("k").unwrap(), "after");
    // ALL: a read waits for the pause's time to run out.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .query(&mut admin)
        .unwrap();
    let started = Instant::now();
    assert_eq!(c.get::<_, String>("k").unwrap(), "after");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // That pause has run out: a pause of writes after it lets reads through at once.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query(&mut admin)
        .unwrap();
    let started = Instant::now();
    assert_eq!(c.get::<_, String>("k").unwrap(), "after");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut admin)
        .unwrap();
    server.shutdown().unwrap();
}

/// INFO gives Redis's fields where Strata has the figure: channels and patterns with a
/// subscriber, functions and libraries loaded, the memory in Redis's human form.
#[test]
fn info_has_redis_fields_for_subscriptions_and_functions() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut c = client(&server);
    let field = |c: &mut redis::Connection, section: &str, name: &str| -> String {
        let info: String = redis::cmd("INFO").arg(section).query(c).unwrap();
        let line = info.lines().find(|l| l.starts_with(&format!("{name}:")));
        line.unwrap_or_else(|| panic!("no {name} in {info}"))[name.len() + 1..].to_string()
    };
    assert_eq!(field(&mut c, "stats", "pubsub_channels"), "0");
    let mut sub = client(&server);
    let _: () = redis::cmd("SUBSCRIBE")
        .arg("a")
        .arg("b")
        .query(&mut sub)
        .unwrap();
    let _: () = redis::cmd("PSUBSCRIBE").arg("n*").query(&mut sub).unwrap();
    assert_eq!(field(&mut c, "stats", "pubsub_channels"), "2");
    assert_eq!(field(&mut c, "stats", "pubsub_patterns"), "1");
    let library = "#!lua name=lib\n\
                   redis.register_function('f1', function() return 1 end)\n\
                   redis.register_function('f2', function() return 2 end)";
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library)
        .query(&mut c)
        .unwrap();
    assert_eq!(field(&mut c, "memory", "number_of_functions"), "2");
    assert_eq!(field(&mut c, "memory", "number_of_libraries"), "1");
    let used: u64 = field(&mut c, "memory", "used_memory").parse().unwrap();
    let human = field(&mut c, "memory", "used_memory_human");
    let (number, unit) = human.split_at(human.len() - 1);
    let scale = match unit {
        "G" => 1u64 << 30,
        "M" => 1 << 20,
        "K" => 1 << 10,
        _ => 1,
    };
    let shown: f64 = number.parse().unwrap();
    assert!(
        (shown * scale as f64 - used as f64).abs() <= scale as f64,
        "{used} {human}"
    );
    assert_eq!(field(&mut c, "cluster", "cluster_enabled"), "0");
    server.shutdown().unwrap();
}

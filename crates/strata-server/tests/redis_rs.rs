//! redis-rs, the `redis` crate, as an application uses it: its typed `Commands` API over
//! hashes, lists, sets, sorted sets and a blocking pop woken by another connection, in RESP2
//! and RESP3 (the client matrix's row for Rust; `tests/clients` holds the other clients').

mod common;

use std::collections::{BTreeSet, HashMap};

use redis::Commands;

fn each_protocol(run: impl Fn(&str, &mut redis::Connection, &redis::Client)) {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(dir.path(), |_| {});
    for (label, query) in [("RESP2", ""), ("RESP3", "?protocol=resp3")] {
        let url = format!("redis://{}/{query}", server.local_addr());
        let client = redis::Client::open(url).unwrap();
        let mut c = client.get_connection().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        run(label, &mut c, &client);
    }
    server.shutdown().unwrap();
}

#[test]
fn hashes_lists_sets_and_sorted_sets_through_the_typed_api() {
    each_protocol(|label, c, _| {
        let _: () = c.hset_multiple("h", &[("a", "1"), ("b", "2")]).unwrap();
        let n: i64 = c.hincr("h", "a", 10).unwrap();
        assert_eq!(n, 11, "{label}");
        let all: HashMap<String, String> = c.hgetall("h").unwrap();
        let want: HashMap<String, String> = [("a", "11"), ("b", "2")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        assert_eq!(all, want, "{label}");

        let _: () = c.rpush("l", &["x", "y", "z"]).unwrap();
        let _: () = c.lpush("l", "w").unwrap();
        let range: Vec<String> = c.lrange("l", 0, -1).unwrap();
        assert_eq!(range, ["w", "x", "y", "z"], "{label}");
        let popped: Option<String> = c.rpop("l", None).unwrap();
        assert_eq!(popped.as_deref(), Some("z"), "{label}");

        let added: i64 = c.sadd("s", &["p", "q", "r", "p"]).unwrap();
        assert_eq!(added, 3, "{label}");
        let members: BTreeSet<String> = c.smembers("s").unwrap();
        assert_eq!(members, ["p", "q", "r"].map(String::from).into(), "{label}");
        let is: bool = c.sismember("s", "q").unwrap();
        assert!(is, "{label}");

        let _: () = c
            .zadd_multiple("z", &[(3.5, "c"), (1.0, "a"), (2.0, "b")])
            .unwrap();
        let top: Vec<(String, f64)> = c.zrevrange_withscores("z", 0, 1).unwrap();
        assert_eq!(
            top,
            [("c".to_string(), 3.5), ("b".to_string(), 2.0)],
            "{label}"
        );
        let score: Option<f64> = c.zscore("z", "a").unwrap();
        assert_eq!(score, Some(1.0), "{label}");
        let rank: Option<i64> = c.zrank("z", "c").unwrap();
        assert_eq!(rank, Some(2), "{label}");
        let sorted: Vec<String> = redis::cmd("SORT").arg("l").arg("ALPHA").query(c).unwrap();
        assert_eq!(sorted, ["w", "x", "y"], "{label}");

        let kind: String = redis::cmd("TYPE").arg("z").query(c).unwrap();
        assert_eq!(kind, "zset", "{label}");
        let wrong: redis::RedisResult<i64> = c.llen("h");
        let err = wrong.unwrap_err();
        assert_eq!(err.code(), Some("WRONGTYPE"), "{label}: {err}");
    });
}

#[test]
fn a_blocking_pop_is_woken_by_a_push_from_another_connection() {
    each_protocol(|label, c, client| {
        let mut other = client.get_connection().unwrap();
        let waiter = std::thread::spawn(move || {
            let got: Option<(String, String)> = other.blpop("q", 5.0).unwrap();
            got
        });
        // The pop is parked before the push arrives.
        while {
            let info: String = redis::cmd("INFO").arg("clients").query(c).unwrap();
            !info.contains("blocked_clients:1")
        } {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _: () = c.rpush("q", "job").unwrap();
        let got = waiter.join().unwrap();
        assert_eq!(got, Some(("q".to_string(), "job".to_string())), "{label}");
        let left: i64 = c.llen("q").unwrap();
        assert_eq!(left, 0, "{label}");
    });
}

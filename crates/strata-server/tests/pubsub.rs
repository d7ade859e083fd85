//! Pub/sub through real sockets: messages cross worker threads and reach every subscriber
//! in each publisher's order, RESP3 subscribers get push frames and may run other commands,
//! ACL channel rules refuse and log what they forbid and cut off a subscriber whose user
//! lost the channel, and keyspace notifications name what a command wrote.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redis::Value;

fn ask(c: &mut redis::Connection, args: &[&str]) -> Result<Value, String> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c).map_err(|e| e.to_string())
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// Sends a command on a connection that subscribes (its replies are read apart).
fn send(c: &mut redis::Connection, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    c.send_packed_command(&cmd.get_packed_command()).unwrap();
}

fn recv(c: &mut redis::Connection) -> Value {
    c.recv_response().unwrap()
}

#[test]
fn messages_cross_workers_and_keep_each_publishers_order() {
    let t = tempfile::tempdir().unwrap();
    let server = common::start(t.path(), |c| c.threads = 4);
    let addr = server.local_addr();
    // Six subscribers, spread over the four workers, each on the channel and a pattern.
    let mut subs: Vec<redis::Connection> = (0..6).map(|_| common::connect(addr)).collect();
    for s in &mut subs {
        send(s, &["SUBSCRIBE", "orders"]);
        assert_eq!(
            recv(s),
            Value::Array(vec![bulk("subscribe"), bulk("orders"), Value::Int(1)])
        );
        send(s, &["PSUBSCRIBE", "ord*"]);
        assert_eq!(
            recv(s),
            Value::Array(vec![bulk("psubscribe"), bulk("ord*"), Value::Int(2)])
        );
    }
    const EACH: usize = 1000;
    let publishers: Vec<_> = (0..2)
        .map(|p| {
            std::thread::spawn(move || {
                let mut c = common::connect(addr);
                // Pipelined, a hundred at a time: the server sees each publisher's messages
                // together, not one per round trip.
                for chunk in (0..EACH).collect::<Vec<_>>().chunks(100) {
                    let mut pipe = redis::pipe();
                    for i in chunk {
                        pipe.cmd("PUBLISH").arg("orders").arg(format!("{p}:{i}"));
                    }
                    let counts: Vec<i64> = pipe.query(&mut c).unwrap();
                    assert_eq!(counts, vec![12; chunk.len()], "six subscribers, each twice");
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().unwrap();
    }
    for s in &mut subs {
        // Per publisher, the next number expected by channel and by pattern.
        let mut next = [[0usize; 2]; 2];
        for _ in 0..4 * EACH {
            let (via, payload) = match recv(s) {
                Value::Array(v) if v.len() == 3 && v[0] == bulk("message") => (0, v[2].clone()),
                Value::Array(v) if v.len() == 4 && v[0] == bulk("pmessage") => {
                    assert_eq!(v[1], bulk("ord*"));
                    (1, v[3].clone())
                }
                other => panic!("not a message: {other:?}"),
            };
            let Value::BulkString(payload) = payload else {
                panic!("payload {payload:?}");
            };
            let text = String::from_utf8(payload).unwrap();
            let (p, i) = text.split_once(':').unwrap();
            let (p, i): (usize, usize) = (p.parse().unwrap(), i.parse().unwrap());
            assert_eq!(i, next[p][via], "publisher {p}'s messages out of order");
            next[p][via] += 1;
        }
        assert_eq!(next, [[EACH; 2]; 2]);
    }
    let mut c = common::connect(addr);
    assert_eq!(
        ask(&mut c, &["PUBSUB", "NUMSUB", "orders", "none"]).unwrap(),
        Value::Array(vec![
            bulk("orders"),
            Value::Int(6),
            bulk("none"),
            Value::Int(0)
        ])
    );
    assert_eq!(ask(&mut c, &["PUBSUB", "NUMPAT"]).unwrap(), Value::Int(1));
    // Subscribers that close leave the registry.
    drop(subs);
    let started = Instant::now();
    while ask(&mut c, &["PUBLISH", "orders", "x"]).unwrap() != Value::Int(0) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "closed subscribers stay"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads from a raw socket until `want` bytes came, or a second passed.
fn read_exactly(s: &mut TcpStream, want: usize) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = vec![0; want];
    s.read_exact(&mut got).unwrap();
    got
}

#[test]
fn resp3_subscribers_get_push_frames_and_may_run_commands() {
    let t = tempfile::tempdir().unwrap();
    let server = common::start(t.path(), |_| {});
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.write_all(b"HELLO 3\r\n").unwrap();
    // The map HELLO answers with: read up to the modules' empty array that ends it.
    let mut hello = Vec::new();
    while !hello.ends_with(b"modules\r\n*0\r\n") {
        hello.extend(read_exactly(&mut s, 1));
    }
    s.write_all(b"SUBSCRIBE a\r\nSET k v\r\nGET k\r\n").unwrap();
    let want = b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n+OK\r\n$1\r\nv\r\n";
    assert_eq!(
        String::from_utf8_lossy(&read_exactly(&mut s, want.len())),
        String::from_utf8_lossy(want)
    );
    let mut p = common::connect(server.local_addr());
    assert_eq!(ask(&mut p, &["PUBLISH", "a", "hi"]).unwrap(), Value::Int(1));
    let want = b">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n";
    assert_eq!(read_exactly(&mut s, want.len()), want);
    // RESP2 subscribers may only change their subscriptions, PING, QUIT and RESET.
    let mut r2 = common::connect(server.local_addr());
    send(&mut r2, &["SUBSCRIBE", "a"]);
    recv(&mut r2);
    send(&mut r2, &["GET", "k"]);
    let refused = format!("{:?}", recv(&mut r2));
    assert!(
        refused.contains(
            "Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET \
             are allowed in this context"
        ),
        "{refused}"
    );
    send(&mut r2, &["PING", "x"]);
    assert_eq!(recv(&mut r2), Value::Array(vec![bulk("pong"), bulk("x")]));
    send(&mut r2, &["RESET"]);
    assert_eq!(recv(&mut r2), Value::SimpleString("RESET".into()));
    assert_eq!(ask(&mut r2, &["GET", "k"]).unwrap(), bulk("v"));
    assert_eq!(
        ask(&mut p, &["PUBLISH", "a", "again"]).unwrap(),
        Value::Int(1)
    );
}

#[test]
fn acl_channel_rules_refuse_log_and_cut_off() {
    let t = tempfile::tempdir().unwrap();
    let server = common::start(t.path(), |_| {});
    let mut admin = common::connect(server.local_addr());
    let setuser = [
        "ACL",
        "SETUSER",
        "u",
        "on",
        ">pw",
        "resetchannels",
        "&news.*",
        "+@all",
    ];
    assert_eq!(ask(&mut admin, &setuser).unwrap(), Value::Okay);
    let mut u = common::connect(server.local_addr());
    assert_eq!(ask(&mut u, &["AUTH", "u", "pw"]).unwrap(), Value::Okay);
    assert_eq!(
        ask(&mut u, &["PUBLISH", "news.1", "x"]).unwrap(),
        Value::Int(0)
    );
    let refused = "NOPERM: this user has no permissions to access one of the channels used as \
                   arguments";
    assert_eq!(
        ask(&mut u, &["PUBLISH", "sports", "x"]).unwrap_err(),
        refused
    );
    assert_eq!(
        ask(&mut u, &["SUBSCRIBE", "news.1", "sports"]).unwrap_err(),
        refused
    );
    // A pattern is allowed only as the user's pattern is written.
    assert_eq!(
        ask(&mut u, &["PSUBSCRIBE", "news.1*"]).unwrap_err(),
        refused
    );
    let log = ask(&mut admin, &["ACL", "LOG", "1"]).unwrap();
    let text = format!("{log:?}");
    assert!(
        text.contains("\"channel\"") && text.contains("news.1*"),
        "{text}"
    );
    send(&mut u, &["PSUBSCRIBE", "news.*"]);
    assert_eq!(
        recv(&mut u),
        Value::Array(vec![bulk("psubscribe"), bulk("news.*"), Value::Int(1)])
    );
    assert_eq!(
        ask(&mut admin, &["PUBLISH", "news.2", "a"]).unwrap(),
        Value::Int(1)
    );
    assert_eq!(
        recv(&mut u),
        Value::Array(vec![
            bulk("pmessage"),
            bulk("news.*"),
            bulk("news.2"),
            bulk("a")
        ])
    );
    // The user loses the pattern: its subscriber hears nothing more and is cut off.
    let revoke = ["ACL", "SETUSER", "u", "resetchannels", "&other"];
    assert_eq!(ask(&mut admin, &revoke).unwrap(), Value::Okay);
    ask(&mut admin, &["PUBLISH", "news.3", "secret"]).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    match u.recv_response() {
        Err(e) => assert!(!e.is_timeout(), "not cut off: {e}"),
        Ok(v) => panic!("heard {v:?} after losing the channel"),
    }
}

#[test]
fn keyspace_notifications_name_what_commands_wrote() {
    let t = tempfile::tempdir().unwrap();
    let server = common::start(t.path(), |_| {});
    let mut c = common::connect(server.local_addr());
    let setting = ["CONFIG", "SET", "notify-keyspace-events", "KEA"];
    assert_eq!(ask(&mut c, &setting).unwrap(), Value::Okay);
    let mut s = common::connect(server.local_addr());
    send(&mut s, &["PSUBSCRIBE", "__key*__:*"]);
    recv(&mut s);
    for cmd in [
        &["SET", "k", "1", "PX", "300"][..],
        &["INCR", "k"],
        &["SREM", "set", "nothing"],
        &["RPUSH", "l", "a"],
        &["RPOP", "l"],
        &["MULTI"],
        &["HSET", "h", "f", "v"],
        &["EXEC"],
    ] {
        ask(&mut c, cmd).unwrap();
    }
    let mut got = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // The string expires by the expiry cycle, which announces it.
    while !got.contains(&"__keyevent@0__:expired k".to_string()) {
        let Value::Array(v) = recv(&mut s) else {
            panic!("not a message")
        };
        let text = |v: &Value| match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        };
        got.push(format!("{} {}", text(&v[2]), text(&v[3])));
    }
    let want = [
        "__keyspace@0__:k set",
        "__keyevent@0__:set k",
        "__keyspace@0__:k expire",
        "__keyevent@0__:expire k",
        "__keyspace@0__:k incrby",
        "__keyevent@0__:incrby k",
        "__keyspace@0__:l rpush",
        "__keyevent@0__:rpush l",
        "__keyspace@0__:l rpop",
        "__keyevent@0__:rpop l",
        "__keyspace@0__:l del",
        "__keyevent@0__:del l",
        "__keyspace@0__:h hset",
        "__keyevent@0__:hset h",
        "__keyspace@0__:k expired",
        "__keyevent@0__:expired k",
    ];
    assert_eq!(got, want);
}

/// A subscriber that unsubscribes while a publisher on another worker goes on gets, before
/// the confirmation, every message PUBLISH counted it for, in order, and none after it.
#[test]
fn messages_published_before_an_unsubscribe_come_before_its_confirmation() {
    let t = tempfile::tempdir().unwrap();
    let server = common::start(t.path(), |c| c.threads = 2);
    let addr = server.local_addr();
    let mut s = common::connect(addr);
    send(&mut s, &["SUBSCRIBE", "ch"]);
    recv(&mut s);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let publisher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = common::connect(addr);
            let mut counted = 0i64;
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let n: i64 = redis::cmd("PUBLISH")
                    .arg("ch")
                    .arg(i)
                    .query(&mut c)
                    .unwrap();
                counted += n;
                i += 1;
            }
            counted
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    send(&mut s, &["UNSUBSCRIBE", "ch"]);
    let mut received = 0i64;
    loop {
        match recv(&mut s) {
            Value::Array(v) if v[0] == bulk("message") => {
                assert_eq!(v[2], bulk(&received.to_string()), "out of order");
                received += 1;
            }
            Value::Array(v) if v[0] == bulk("unsubscribe") => break,
            other => panic!("{other:?}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let counted = publisher.join().unwrap();
    assert!(received > 0, "nothing was published before the unsubscribe");
    assert_eq!(
        received, counted,
        "messages counted by PUBLISH and received"
    );
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let after = s.recv_response();
    assert!(
        after.as_ref().is_err_and(|e| e.is_timeout()),
        "after the confirmation: {after:?}"
    );
}

/// A write that replaces a value past its expiry announces `expired` first, as Redis's
/// lookup does, and `new` where asked for; here no expiry cycle runs.
#[test]
fn a_write_over_an_expired_value_announces_its_expiry() {
    let t = tempfile::tempdir().unwrap();
    let server = common::start(t.path(), |c| c.active_expiry = None);
    let mut c = common::connect(server.local_addr());
    let setting = ["CONFIG", "SET", "notify-keyspace-events", "Exn$"];
    assert_eq!(ask(&mut c, &setting).unwrap(), Value::Okay);
    let mut s = common::connect(server.local_addr());
    send(&mut s, &["PSUBSCRIBE", "__keyevent@0__:*"]);
    recv(&mut s);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    ask(&mut c, &["SET", "lazy", "1", "PX", "20"]).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    ask(&mut c, &["SET", "lazy", "2"]).unwrap();
    let mut got = Vec::new();
    for _ in 0..5 {
        let Value::Array(v) = recv(&mut s) else {
            panic!("not a message")
        };
        got.push(v[2].clone());
    }
    let want: Vec<Value> = ["new", "set", "expired", "new", "set"]
        .iter()
        .map(|e| bulk(&format!("__keyevent@0__:{e}")))
        .collect();
    assert_eq!(got, want);
}

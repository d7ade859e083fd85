//! Blocking pops: a parked connection is woken by another connection's write, the first
//! parked is the first served, a timeout answers null, a transaction's writes wake it only
//! whole, a connection that went away while parked takes nothing, and inside MULTI a
//! blocking pop answers at once.

mod common;

use std::time::{Duration, Instant};

use redis::Value;
use strata_server::{Config, Server};

fn start(dir: &std::path::Path) -> Server {
    Server::start(Config {
        dir: dir.to_path_buf(),
        port: 0,
        engine: common::engine_options(),
        ..Config::default()
    })
    .unwrap()
}

fn connect(server: &Server) -> redis::Connection {
    redis::Client::open(format!("redis://{}/", server.local_addr()))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Waits until INFO counts `n` parked connections.
fn wait_parked(c: &mut redis::Connection, n: usize) {
    let started = Instant::now();
    loop {
        let info: String = redis::cmd("INFO").arg("clients").query(c).unwrap();
        if info.contains(&format!("blocked_clients:{n}\r\n")) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{info}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends BZPOPMIN on a connection of its own, in a thread; the handle gives its answer.
fn bzpopmin(server: &Server, key: &str, timeout: &str) -> std::thread::JoinHandle<Value> {
    let mut c = connect(server);
    let (key, timeout) = (key.to_string(), timeout.to_string());
    std::thread::spawn(move || {
        redis::cmd("BZPOPMIN")
            .arg(&key)
            .arg(&timeout)
            .query(&mut c)
            .unwrap()
    })
}

fn popped(key: &str, member: &str, score: &str) -> Value {
    Value::Array(vec![
        Value::BulkString(key.into()),
        Value::BulkString(member.into()),
        Value::BulkString(score.into()),
    ])
}

#[test]
fn parked_pops_are_served_first_parked_first_and_time_out_with_null() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = connect(&server);
    let first = bzpopmin(&server, "q", "0");
    wait_parked(&mut c, 1);
    let second = bzpopmin(&server, "q", "0");
    wait_parked(&mut c, 2);
    let _: i64 = redis::cmd("ZADD")
        .arg("q")
        .arg(1)
        .arg("x")
        .arg(2)
        .arg("y")
        .query(&mut c)
        .unwrap();
    assert_eq!(first.join().unwrap(), popped("q", "x", "1"));
    assert_eq!(second.join().unwrap(), popped("q", "y", "2"));
    wait_parked(&mut c, 0);
    let card: i64 = redis::cmd("ZCARD").arg("q").query(&mut c).unwrap();
    assert_eq!(card, 0);
    // A timeout answers null.
    let started = Instant::now();
    assert_eq!(bzpopmin(&server, "none", "0.2").join().unwrap(), Value::Nil);
    assert!(started.elapsed() >= Duration::from_millis(190));
    wait_parked(&mut c, 0);
}

#[test]
fn a_transaction_wakes_a_parked_pop_only_with_what_it_left() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = connect(&server);
    let waiting = bzpopmin(&server, "t", "0");
    wait_parked(&mut c, 1);
    // ZADD then DEL in one transaction leaves nothing: the pop stays parked.
    let _: Value = redis::pipe()
        .atomic()
        .cmd("ZADD")
        .arg("t")
        .arg(1)
        .arg("gone")
        .cmd("DEL")
        .arg("t")
        .query(&mut c)
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    wait_parked(&mut c, 1);
    // A string under the key does not wake it either (nor answer WRONGTYPE).
    let _: () = redis::cmd("SET").arg("t").arg("s").query(&mut c).unwrap();
    let _: i64 = redis::cmd("DEL").arg("t").query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    wait_parked(&mut c, 1);
    let _: i64 = redis::cmd("ZADD")
        .arg("t")
        .arg(5)
        .arg("kept")
        .query(&mut c)
        .unwrap();
    assert_eq!(waiting.join().unwrap(), popped("t", "kept", "5"));
    // Inside MULTI a blocking pop does not block.
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("BZPOPMIN")
        .arg("t")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, vec![Value::Nil]);
}

#[test]
fn a_connection_gone_while_parked_takes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = connect(&server);
    // A raw socket parks a pop, then closes.
    let addr = server.local_addr();
    {
        use std::io::Write;
        let mut raw = std::net::TcpStream::connect(addr).unwrap();
        raw.write_all(b"*3\r\n$8\r\nBZPOPMIN\r\n$1\r\ng\r\n$1\r\n0\r\n")
            .unwrap();
        wait_parked(&mut c, 1);
    }
    // The socket is closed: the server notices and forgets it.
    wait_parked(&mut c, 0);
    let _: i64 = redis::cmd("ZADD")
        .arg("g")
        .arg(1)
        .arg("m")
        .query(&mut c)
        .unwrap();
    let card: i64 = redis::cmd("ZCARD").arg("g").query(&mut c).unwrap();
    assert_eq!(card, 1, "the member went to a connection that is gone");
}

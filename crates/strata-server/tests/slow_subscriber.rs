//! A subscriber that never reads: 10,000 messages of 10 KiB are published to it. The
//! `pubsub` class of the output buffer limit (32 MiB hard, Redis's default) closes it, the
//! server's memory stays bounded, and a subscriber that reads gets every message whole.
//!
//! Alone in its test binary, so that the process's peak resident memory is this test's. The
//! same run with the limit switched off follows, and must break the bound: the check of memory
//! is shown to see what it checks.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redis::Value;

/// The process's peak resident memory, in bytes (`VmHWM`).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

const MESSAGES: usize = 10_000;
const SIZE: usize = 10 * 1024;

#[test]
fn a_subscriber_that_never_reads_is_closed_and_memory_stays_bounded() {
    let grew = flood([32 << 20, 8 << 20, 60]);
    eprintln!(
        "with the pubsub limit, peak resident memory grew {} MiB",
        grew >> 20
    );
    // 100 MB was published to the silent subscriber; the limit holds it near 32 MiB.
    assert!(
        grew < 64 << 20,
        "peak resident memory grew {} MiB",
        grew >> 20
    );
    // The same run without the limit, in a process of its own (a peak only grows), must
    // break the bound: the check sees what it checks.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "without_the_limit", "--ignored", "--nocapture"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let grew: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("grew bytes: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no figure from the run without the limit: {text}"));
    eprintln!("without it, {} MiB", grew >> 20);
    assert!(
        grew > 64 << 20,
        "without the limit the peak grew only {} MiB",
        grew >> 20
    );
}

/// The flood without the limit: run by the test above, in a process of its own.
#[test]
#[ignore = "run by a_subscriber_that_never_reads_is_closed_and_memory_stays_bounded"]
fn without_the_limit() {
    eprintln!("grew bytes: {}", flood([0, 0, 0]));
}

/// Publishes the messages to a silent subscriber and a reading one on a server with
/// `limit`; checks the reader got every message whole and the others carry on, and, with a
/// limit, that the silent one was closed. Returns how far the peak resident memory grew.
fn flood(limit: [usize; 3]) -> u64 {
    let t = tempfile::tempdir().unwrap();
    let server = common::start(t.path(), |c| {
        c.threads = 2;
        c.pubsub_output_limit = limit;
    });
    let addr = server.local_addr();
    // The one that never reads: subscribed by hand, its socket left alone.
    let mut silent = TcpStream::connect(addr).unwrap();
    silent.write_all(b"SUBSCRIBE feed\r\n").unwrap();
    // One that reads everything, in a thread.
    let mut reader = common::connect(addr);
    let mut cmd = redis::cmd("SUBSCRIBE");
    reader
        .send_packed_command(&cmd.arg("feed").get_packed_command())
        .unwrap();
    reader.recv_response().unwrap();
    let mut admin = common::connect(addr);
    let started = Instant::now();
    while redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("feed")
        .query::<Vec<Value>>(&mut admin)
        .unwrap()[1]
        != Value::Int(2)
    {
        assert!(started.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
    let listener = std::thread::spawn(move || {
        for i in 0..MESSAGES {
            let Value::Array(v) = reader.recv_response().unwrap() else {
                panic!("not a message");
            };
            let Value::BulkString(payload) = &v[2] else {
                panic!("payload");
            };
            assert_eq!(*payload, message(i), "message {i}");
        }
        reader
    });
    let before = peak_rss();
    let mut publisher = common::connect(addr);
    for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(50) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            pipe.cmd("PUBLISH").arg("feed").arg(message(i));
        }
        let _: Vec<i64> = pipe.query(&mut publisher).unwrap();
    }
    let _reader = listener.join().unwrap();
    let grew = peak_rss().saturating_sub(before);
    let info: String = redis::cmd("INFO").arg("clients").query(&mut admin).unwrap();
    let closed = usize::from(limit[0] > 0);
    let line = format!("client_output_buffer_limit_disconnections:{closed}\r\n");
    assert!(info.contains(&line), "{info}");
    // With the limit, its subscription is gone; the others carry on.
    let n: i64 = redis::cmd("PUBLISH")
        .arg("feed")
        .arg("x")
        .query(&mut admin)
        .unwrap();
    assert_eq!(n, 2 - closed as i64);
    assert_eq!(
        redis::cmd("PING").query::<String>(&mut admin).unwrap(),
        "PONG"
    );
    drop(silent);
    drop(server);
    grew
}

fn message(i: usize) -> Vec<u8> {
    let mut m = format!("{i:08}").into_bytes();
    m.resize(SIZE, b'a' + (i % 26) as u8);
    m
}

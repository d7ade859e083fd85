//! Lua scripts in `strata serve` as a process: a script's writes survive SIGKILL all together
//! or not at all, a runaway script is stopped by SCRIPT KILL while the other clients are
//! answered BUSY, and FUNCTION LOAD's libraries outlive the process.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, kill, serve_with};

/// Keys one script writes.
const KEYS: usize = 5_000;

/// A script that writes `KEYS` keys, then works on for about as long again (`ARGV[2]`
/// `forever`: without end).
const WRITER: &str = "for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'k:' .. i, i) end
     local x = 0
     for i = 1, 20000000 do x = x + i end
     while ARGV[2] == 'forever' do x = x + 1 end
     return 'done'";

fn count_keys(c: &mut redis::Connection) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS").arg("k:*").query(c).unwrap();
    keys.len()
}

/// How a cycle picks its moment to kill the server.
#[derive(Clone, Copy, Debug)]
enum Moment {
    /// Once SCRIPT KILL answers UNKILLABLE: the script runs and has written.
    Midway,
    /// Once the script has answered.
    After,
    /// After this many milliseconds, wherever the script is.
    At(u64),
}

/// Starts a script under `--sync always`, kills the server with SIGKILL at `moment`,
/// restarts it and counts the script's keys; the flag tells whether the script had answered.
fn killed_during_a_script(dir: &std::path::Path, moment: Moment) -> (usize, bool) {
    let port = free_port();
    let (child, mut c) = serve_with(dir, port, &["--sync", "always"]);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let forever = if matches!(moment, Moment::Midway) {
        "forever"
    } else {
        "once"
    };
    let script = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("EVAL")
            .arg(WRITER)
            .arg(0)
            .arg(KEYS)
            .arg(forever)
            .query::<String>(&mut c)
            .is_ok()
    });
    match moment {
        Moment::Midway => loop {
            let e = redis::cmd("SCRIPT").arg("KILL").query::<String>(&mut c);
            if e.as_ref().is_err_and(|e| e.code() == Some("UNKILLABLE")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        },
        Moment::After => {
            while !script.is_finished() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Moment::At(ms) => std::thread::sleep(Duration::from_millis(ms)),
    }
    kill(child);
    let answered = script.join().unwrap();
    let (child, mut c) = serve_with(dir, port, &["--sync", "always"]);
    let n = count_keys(&mut c);
    kill(child);
    println!("{moment:?}: answered {answered}, {n} keys");
    (n, answered)
}

/// A script's writes reach the engine as one batch: killed midway (it has written, SCRIPT
/// KILL refuses it), none of them is there after a restart; killed after it answered, all
/// are; killed at moments spread over its run, all or none.
#[test]
fn a_script_killed_by_sigkill_leaves_all_its_writes_or_none() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(killed_during_a_script(dir.path(), Moment::Midway).0, 0);
    assert_eq!(killed_during_a_script(dir.path(), Moment::After).0, KEYS);
    for ms in [30, 90, 150, 250] {
        let (n, answered) = killed_during_a_script(dir.path(), Moment::At(ms));
        assert!(n == 0 || n == KEYS, "killed at {ms} ms: {n} of {KEYS} keys");
        if answered {
            assert_eq!(n, KEYS, "an answered script's writes are all kept");
        }
    }
}

/// With one worker thread, a script that never ends holds no one up for good: the other
/// clients are answered BUSY once it has run `busy-reply-threshold`, SCRIPT KILL stops it,
/// and the server answers again.
#[test]
fn a_runaway_script_is_killed_while_the_others_are_answered_busy() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (child, mut c) = serve_with(dir.path(), port, &["--threads", "1"]);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(100)
        .query(&mut c)
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let runaway = std::thread::spawn(move || {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("EVAL")
            .arg("local n = 0 while true do n = n + 1 end")
            .arg(0)
            .query::<String>(&mut c)
            .unwrap_err()
    });
    let started = Instant::now();
    let busy = loop {
        match redis::cmd("GET").arg("x").query::<Option<String>>(&mut c) {
            Err(e) => break e,
            Ok(_) => assert!(started.elapsed() < Duration::from_secs(5), "never busy"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(busy.code(), Some("BUSY"), "{busy}");
    let ok: String = redis::cmd("SCRIPT").arg("KILL").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let killed = runaway.join().unwrap();
    assert!(killed.to_string().contains("killed by user"), "{killed}");
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
    kill(child);
}

/// A library loaded with FUNCTION LOAD is there after SIGKILL and a restart; one deleted is
/// not.
#[test]
fn function_libraries_outlive_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let flags = ["--sync", "always"];
    let (child, mut c) = serve_with(dir.path(), port, &flags);
    for (name, reply) in [("kept", "kept!"), ("gone", "gone!")] {
        let code = format!(
            "#!lua name={name}\nredis.register_function('{name}', function() return '{reply}' end)"
        );
        let loaded: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(code)
            .query(&mut c)
            .unwrap();
        assert_eq!(loaded, name);
    }
    let _: () = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("gone")
        .query(&mut c)
        .unwrap();
    kill(child);
    let (child, mut c) = serve_with(dir.path(), port, &flags);
    let kept: String = redis::cmd("FCALL")
        .arg("kept")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(kept, "kept!");
    let gone = redis::cmd("FCALL")
        .arg("gone")
        .arg(0)
        .query::<String>(&mut c)
        .unwrap_err();
    assert!(gone.to_string().contains("Function not found"), "{gone}");
    kill(child);
}

//! `strata serve` as a process: expiry times survive SIGKILL and restarts, expired keys are
//! invisible from the moment they expire, and a compaction takes them off the disk.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::Commands;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the server on `dir` and waits until it answers. The caller kills and waits for the
/// child ([`kill`]).
#[allow(clippy::zombie_processes)]
fn serve(dir: &Path, port: u16) -> (Child, redis::Connection) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "serve",
            "--dir",
            dir.to_str().unwrap(),
            "--port",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let started = Instant::now();
    loop {
        if let Ok(mut c) = client.get_connection()
            && redis::cmd("PING").query::<String>(&mut c).is_ok()
        {
            return (child, c);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills the server with SIGKILL and checks that this, and nothing else, ended it.
fn kill(mut child: Child) {
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert_eq!(
        status.signal(),
        Some(9),
        "the server ended by itself: {status:?}\n{err}"
    );
}

fn pexpiretime(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

fn sst_keys(dir: &Path) -> Vec<(Vec<u8>, bool)> {
    let mut keys = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "sst") {
            let dump = strata::inspect::dump_file(&path, true).unwrap();
            keys.extend(dump.entries.into_iter().map(|e| (e.key, e.deletion)));
        }
    }
    keys
}

#[test]
fn expiry_survives_sigkill_and_expired_keys_leave_the_disk() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("db");
    let port = free_port();
    let (child, mut c) = serve(&dir, port);
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let set_at = now_ms();
    let _: () = redis::cmd("SET")
        .arg("short")
        .arg("v")
        .arg("PX")
        .arg(1500)
        .query(&mut c)
        .unwrap();
    let _: () = c.set_ex("long", "v", 3600).unwrap();
    let _: () = c.set("plain", "v").unwrap();
    let _: () = c.set("soon", "v").unwrap();
    let _: i64 = redis::cmd("PEXPIREAT")
        .arg("soon")
        .arg(set_at + 1200)
        .query(&mut c)
        .unwrap();
    // Writes acknowledged without a sync: they survive a crash of the process.
    let short_at = pexpiretime(&mut c, "short");
    let long_at = pexpiretime(&mut c, "long");
    assert!(
        (set_at + 1500..=now_ms() + 1500).contains(&short_at),
        "{short_at}"
    );
    assert_eq!(pexpiretime(&mut c, "soon"), set_at + 1200);
    kill(child);

    let (child, mut c) = serve(&dir, port);
    assert_eq!(
        pexpiretime(&mut c, "short"),
        short_at,
        "expiry times are absolute"
    );
    assert_eq!(pexpiretime(&mut c, "long"), long_at);
    assert_eq!(pexpiretime(&mut c, "soon"), set_at + 1200);
    assert_eq!(pexpiretime(&mut c, "plain"), -1);
    // Wait until both short keys are due; from then on no read sees them.
    let wait = short_at - now_ms() + 50;
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait as u64));
    }
    assert_eq!(c.get::<_, Option<String>>("short").unwrap(), None);
    assert_eq!(c.exists::<_, i64>(&["short", "soon", "long"]).unwrap(), 1);
    let mut keys: Vec<String> = c.keys("*").unwrap();
    keys.sort();
    assert_eq!(keys, ["long", "plain"]);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 2);
    assert_eq!(c.ttl::<_, i64>("soon").unwrap(), -2);
    kill(child);

    let (child, mut c) = serve(&dir, port);
    assert_eq!(c.get::<_, Option<String>>("short").unwrap(), None);
    assert_eq!(pexpiretime(&mut c, "long"), long_at);
    assert_eq!(c.get::<_, String>("plain").unwrap(), "v");
    let _: () = redis::cmd("COMPACT").query(&mut c).unwrap();
    kill(child);
    // The tables hold the live keys and nothing of the expired ones, not even a tombstone
    // (engine keys are the database's number, then the client's key).
    let on_disk = sst_keys(&dir);
    for gone in [&b"\x00short"[..], b"\x00soon"] {
        assert!(
            !on_disk.iter().any(|(k, _)| k.as_slice() == gone),
            "{} is still on disk: {on_disk:?}",
            String::from_utf8_lossy(gone)
        );
    }
    for kept in [&b"\x00long"[..], b"\x00plain"] {
        assert!(on_disk.iter().any(|(k, del)| k.as_slice() == kept && !del));
    }
}

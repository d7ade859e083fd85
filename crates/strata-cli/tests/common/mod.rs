//! What the `strata` binary's test files share.
#![allow(dead_code)]

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `--merge-policy` flag for the policy `STRATA_MERGE_POLICY` names (`leveling`,
/// `tiering` or `lazy`; none when unset), so that the binary's tests run under each
/// (`scripts/test.sh`). A name it does not know fails the test.
pub fn merge_policy_flags() -> Vec<&'static str> {
    match std::env::var("STRATA_MERGE_POLICY").as_deref() {
        Err(_) => vec![],
        Ok("leveling") => vec!["--merge-policy", "leveling"],
        Ok("tiering") => vec!["--merge-policy", "tiering"],
        Ok("lazy") => vec!["--merge-policy", "lazy-leveling"],
        Ok(other) => panic!("STRATA_MERGE_POLICY={other}: leveling, tiering or lazy"),
    }
}

/// The `strata` binary under test, with the merge policy's flag.
pub fn strata_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.args(merge_policy_flags());
    cmd
}

pub fn free_port() -> u16 {
    // A port the system handed out is free again once its listener closes, and another test
    // of this process, running beside this one, may be handed it before this test's server
    // binds it: each port goes to one test only.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Starts the server on `dir` and waits until it answers. The caller kills and waits for the
/// child ([`kill`]).
pub fn serve(dir: &Path, port: u16) -> (Child, redis::Connection) {
    serve_with(dir, port, &[])
}

/// As [`serve`], with more flags for the server.
#[allow(clippy::zombie_processes)]
pub fn serve_with(dir: &Path, port: u16, flags: &[&str]) -> (Child, redis::Connection) {
    let mut child = strata_command()
        .args([
            "serve",
            "--dir",
            dir.to_str().unwrap(),
            "--port",
            &port.to_string(),
        ])
        .args(flags)
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
            // What answered must be this server, not another on the port it could not take.
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                panic!("the server on port {port} exited ({status}) and another answered: {err}");
            }
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
pub fn kill(mut child: Child) {
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

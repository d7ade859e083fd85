//! Two Strata servers behind twemproxy (Debian's `nutcracker`) on loopback: the proxy spreads
//! the keyspace over both, and every key reads back through it.
//!
//! Skipped with a notice where `nutcracker` is not installed, unless
//! `STRATA_REQUIRE_NUTCRACKER=1` (as `.ci/run` sets), which makes its absence a failure.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use strata_server::{Config, Server};

/// A minimal RESP client: twemproxy refuses the `CLIENT SETINFO` that client libraries send
/// on connecting, so the test speaks the protocol itself.
struct Resp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Resp {
    fn connect(port: u16) -> std::io::Result<Resp> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(Resp {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// Sends a command and returns its reply: a status or error line, or a bulk string.
    fn call(&mut self, args: &[&str]) -> std::io::Result<String> {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.writer.write_all(req.as_bytes())?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end().to_string();
        if let Some(len) = line.strip_prefix('$') {
            let len: i64 = len.parse().map_err(|_| std::io::ErrorKind::InvalidData)?;
            if len < 0 {
                return Ok("(nil)".into());
            }
            let mut buf = vec![0u8; len as usize + 2];
            self.reader.read_exact(&mut buf)?;
            buf.truncate(len as usize);
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        Ok(line)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn two_servers_behind_twemproxy_share_the_keyspace() {
    let nutcracker = ["/usr/sbin/nutcracker", "/usr/bin/nutcracker"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(nutcracker) = nutcracker else {
        assert!(
            std::env::var("STRATA_REQUIRE_NUTCRACKER").is_err(),
            "nutcracker is required here but not installed (apt-get install nutcracker)"
        );
        // Written to stderr itself, which `cargo test` shows; it captures `eprintln!`.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: two_servers_behind_twemproxy_share_the_keyspace: \
              nutcracker is not installed; apt-get install nutcracker\n",
        );
        return;
    };
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let servers: Vec<Server> = dirs
        .iter()
        .map(|d| {
            Server::start(Config {
                dir: d.path().to_path_buf(),
                port: 0,
                ..Config::default()
            })
            .unwrap()
        })
        .collect();
    let proxy_port = free_port();
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("nutcracker.yml");
    std::fs::write(
        &conf,
        format!(
            "strata:\n  listen: 127.0.0.1:{proxy_port}\n  hash: fnv1a_64\n  distribution: \
             ketama\n  redis: true\n  auto_eject_hosts: false\n  timeout: \
             2000\n  servers:\n   - {}:1 one\n   - {}:1 two\n",
            servers[0].local_addr(),
            servers[1].local_addr()
        ),
    )
    .unwrap();
    let _proxy = Proxy(
        Command::new(nutcracker)
            .arg("-c")
            .arg(&conf)
            .arg("-o")
            .arg(conf_dir.path().join("nutcracker.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    let mut c = loop {
        match Resp::connect(proxy_port)
            .and_then(|mut c| c.call(&["SET", "probe", "1"]).map(|r| (c, r)))
        {
            Ok((c, r)) if r == "+OK" => break c,
            other => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "nutcracker did not come up: {:?}",
                    other.err()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert_eq!(c.call(&["DEL", "probe"]).unwrap(), ":1");
    for i in 0..400 {
        assert_eq!(
            c.call(&["SET", &format!("user:{i}"), &format!("value {i}")])
                .unwrap(),
            "+OK"
        );
    }
    for i in 0..400 {
        assert_eq!(
            c.call(&["GET", &format!("user:{i}")]).unwrap(),
            format!("value {i}")
        );
    }
    let counts: Vec<i64> = servers
        .iter()
        .map(|s| {
            let mut direct = Resp::connect(s.local_addr().port()).unwrap();
            direct
                .call(&["DBSIZE"])
                .unwrap()
                .trim_start_matches(':')
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(
        counts.iter().sum::<i64>(),
        400,
        "every key lives on exactly one server"
    );
    assert!(
        counts.iter().all(|&n| n > 50),
        "the proxy spreads keys over both servers: {counts:?}"
    );
    drop(c);
    for s in servers {
        s.shutdown().unwrap();
    }
}

//! Passwords, ACL users and protected mode, through a real client.

use std::collections::HashSet;

use proptest::prelude::*;
mod common;

use common::start;
use strata_server::{Config, Server};

fn client(server: &Server) -> redis::Connection {
    common::connect(server.local_addr())
}

/// A command's reply: the value as text, or the error line (code and message).
fn ask(c: &mut redis::Connection, args: &[&str]) -> Result<redis::Value, String> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query::<redis::Value>(c).map_err(|e| {
        format!(
            "{} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or_default()
        )
    })
}

/// True when the server has closed the connection: the command gets no reply at all.
fn closed(c: &mut redis::Connection, args: &[&str]) -> bool {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match cmd.query::<redis::Value>(c) {
        Ok(_) => false,
        Err(e) => e.is_io_error() || e.is_connection_dropped(),
    }
}

fn text(v: Result<redis::Value, String>) -> String {
    match v {
        Ok(redis::Value::Okay) => "OK".into(),
        Ok(redis::Value::SimpleString(s)) => s,
        Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Ok(redis::Value::Nil) => "(nil)".into(),
        Ok(redis::Value::Int(n)) => n.to_string(),
        Ok(other) => format!("{other:?}"),
        Err(e) => e,
    }
}

#[test]
fn requirepass_gates_every_command_but_auth_and_hello() {
    let t = tempfile::tempdir().unwrap();
    let server = start(t.path(), |c| c.requirepass = Some("s3cret".into()));
    let mut c = client(&server);
    let noauth = "NOAUTH Authentication required.";
    assert_eq!(text(ask(&mut c, &["PING"])), noauth);
    assert_eq!(text(ask(&mut c, &["GET", "k"])), noauth);
    assert_eq!(text(ask(&mut c, &["SET", "k", "v"])), noauth);
    // Unknown commands and arity errors answer as they do for anyone.
    assert!(text(ask(&mut c, &["NOSUCH"])).starts_with("ERR unknown command"));
    assert_eq!(
        text(ask(&mut c, &["AUTH", "wrong"])),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert!(text(ask(&mut c, &["HELLO", "3"])).starts_with("NOAUTH HELLO must be called"));
    assert_eq!(
        text(ask(&mut c, &["HELLO", "3", "AUTH", "default", "nope"])),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(text(ask(&mut c, &["AUTH", "s3cret"])), "OK");
    assert_eq!(text(ask(&mut c, &["SET", "k", "v"])), "OK");
    assert_eq!(text(ask(&mut c, &["GET", "k"])), "v");
    // HELLO AUTH logs in and switches the protocol at once.
    let mut h = client(&server);
    assert!(ask(&mut h, &["HELLO", "3", "AUTH", "default", "s3cret"]).is_ok());
    assert_eq!(text(ask(&mut h, &["GET", "k"])), "v");
    // Pipelined GETs and SETs of a client not yet logged in are refused too (the batched
    // paths check nothing themselves).
    let mut p = client(&server);
    let replies: Result<(String, String), _> = redis::pipe().set("k", "x").get("k").query(&mut p);
    assert_eq!(replies.unwrap_err().code(), Some("NOAUTH"));
    assert_eq!(text(ask(&mut c, &["GET", "k"])), "v");
    // CONFIG SET requirepass changes it; the connections already in stay in.
    assert_eq!(
        text(ask(&mut c, &["CONFIG", "SET", "requirepass", "other"])),
        "OK"
    );
    assert_eq!(text(ask(&mut c, &["GET", "k"])), "v");
    let mut d = client(&server);
    assert_eq!(
        text(ask(&mut d, &["AUTH", "s3cret"])),
        "WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(text(ask(&mut d, &["AUTH", "default", "other"])), "OK");
    // RESET logs a connection out when `default` needs a password.
    assert_eq!(text(ask(&mut d, &["RESET"])), "RESET");
    assert_eq!(text(ask(&mut d, &["GET", "k"])), noauth);
    // An empty requirepass lets everyone in again.
    assert_eq!(
        text(ask(&mut c, &["CONFIG", "SET", "requirepass", ""])),
        "OK"
    );
    let mut e = client(&server);
    assert_eq!(text(ask(&mut e, &["GET", "k"])), "v");
    assert!(text(ask(&mut e, &["AUTH", "x"])).starts_with("ERR AUTH <password> called without"));
}

#[test]
fn acl_users_have_their_commands_keys_and_log() {
    let t = tempfile::tempdir().unwrap();
    let server = start(t.path(), |_| {});
    let mut admin = client(&server);
    assert_eq!(
        text(ask(
            &mut admin,
            &[
                "ACL", "SETUSER", "alice", "on", ">pw", "~a*", "%R~r*", "+get", "+set", "+mget",
                "+multi", "+exec",
            ]
        )),
        "OK"
    );
    assert_eq!(
        text(ask(&mut admin, &["ACL", "SETUSER", "alice", "+bogus"])),
        "ERR Error in ACL SETUSER modifier '+bogus': Unknown command or category name in ACL"
    );
    let list = ask(&mut admin, &["ACL", "LIST"]).unwrap();
    let lines: Vec<String> = redis::from_redis_value(&list).unwrap();
    assert_eq!(
        lines,
        vec![
            "user alice on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 \
             ~a* %R~r* resetchannels -@all +get +set +mget +multi +exec"
                .to_string(),
            "user default on nopass ~* &* +@all".to_string(),
        ]
    );
    assert_eq!(
        text(ask(&mut admin, &["ACL", "DRYRUN", "alice", "get", "b"])),
        "This user has no permissions to access the 'b' key"
    );
    assert_eq!(
        text(ask(&mut admin, &["ACL", "DRYRUN", "alice", "del", "a"])),
        "This user has no permissions to run the 'del' command"
    );
    assert_eq!(
        text(ask(&mut admin, &["ACL", "DRYRUN", "alice", "get", "r1"])),
        "OK"
    );

    let mut c = client(&server);
    assert_eq!(text(ask(&mut c, &["AUTH", "alice", "pw"])), "OK");
    assert_eq!(
        text(ask(&mut c, &["ACL", "WHOAMI"])),
        "NOPERM this user has no permissions to run the 'acl' command"
    );
    assert_eq!(text(ask(&mut c, &["SET", "a1", "v"])), "OK");
    let key = "NOPERM this user has no permissions to access one of the keys used as arguments";
    assert_eq!(text(ask(&mut c, &["SET", "r1", "v"])), key);
    assert_eq!(text(ask(&mut c, &["GET", "r1"])), "(nil)");
    assert_eq!(text(ask(&mut c, &["MGET", "a1", "b"])), key);
    assert_eq!(
        text(ask(&mut c, &["DEL", "a1"])),
        "NOPERM this user has no permissions to run the 'del' command"
    );
    // A refused command inside MULTI fails the transaction.
    assert_eq!(text(ask(&mut c, &["MULTI"])), "OK");
    assert_eq!(text(ask(&mut c, &["SET", "a2", "1"])), "QUEUED");
    assert_eq!(text(ask(&mut c, &["SET", "zz", "1"])), key);
    assert_eq!(
        text(ask(&mut c, &["EXEC"])),
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(text(ask(&mut c, &["GET", "a2"])), "(nil)");

    let log = ask(&mut admin, &["ACL", "LOG"]).unwrap();
    let entries: Vec<Vec<redis::Value>> = redis::from_redis_value(&log).unwrap();
    let field = |e: &Vec<redis::Value>, name: &str| -> String {
        let i = e
            .iter()
            .position(|v| matches!(v, redis::Value::BulkString(b) if b == name.as_bytes()))
            .unwrap();
        text(Ok(e[i + 1].clone()))
    };
    let seen: HashSet<(String, String, String)> = entries
        .iter()
        .map(|e| (field(e, "reason"), field(e, "context"), field(e, "object")))
        .collect();
    for want in [
        ("command", "toplevel", "acl"),
        ("key", "toplevel", "r1"),
        ("key", "toplevel", "b"),
        ("command", "toplevel", "del"),
        ("key", "multi", "zz"),
    ] {
        let want = (want.0.to_string(), want.1.to_string(), want.2.to_string());
        assert!(seen.contains(&want), "ACL LOG lacks {want:?}: {seen:?}");
    }
    // A failed login is logged with the user it named.
    let mut w = client(&server);
    assert!(text(ask(&mut w, &["AUTH", "alice", "bad"])).starts_with("WRONGPASS"));
    let log = ask(&mut admin, &["ACL", "LOG", "1"]).unwrap();
    let entries: Vec<Vec<redis::Value>> = redis::from_redis_value(&log).unwrap();
    assert_eq!(
        (field(&entries[0], "reason"), field(&entries[0], "username")),
        ("auth".to_string(), "alice".to_string())
    );
    // Rights taken away between MULTI and EXEC are checked again at EXEC (raw bytes, so
    // that the error is seen in its slot of EXEC's array).
    {
        use std::io::{Read, Write};
        let mut raw = std::net::TcpStream::connect(server.local_addr()).unwrap();
        raw.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut exchange = |req: &[u8], want: &[u8]| {
            raw.write_all(req).unwrap();
            let mut got = vec![0u8; want.len()];
            raw.read_exact(&mut got).unwrap();
            assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
        };
        exchange(
            b"*3\r\n$4\r\nAUTH\r\n$5\r\nalice\r\n$2\r\npw\r\n",
            b"+OK\r\n",
        );
        exchange(b"*1\r\n$5\r\nMULTI\r\n", b"+OK\r\n");
        exchange(
            b"*3\r\n$3\r\nSET\r\n$2\r\na3\r\n$1\r\n1\r\n",
            b"+QUEUED\r\n",
        );
        assert_eq!(
            text(ask(&mut admin, &["ACL", "SETUSER", "alice", "-set"])),
            "OK"
        );
        exchange(
            b"*1\r\n$4\r\nEXEC\r\n",
            b"*1\r\n-NOPERM this user has no permissions to run the 'set' command\r\n",
        );
    }
    assert_eq!(text(ask(&mut c, &["GET", "a3"])), "(nil)");
    // Write-only keys: stored and removed, but nothing that shows the old value.
    let rules = ["on", ">w", "%W~w*", "+@all"];
    let mut setuser = vec!["ACL", "SETUSER", "writer"];
    setuser.extend(rules);
    assert_eq!(text(ask(&mut admin, &setuser)), "OK");
    let mut w2 = client(&server);
    assert_eq!(text(ask(&mut w2, &["AUTH", "writer", "w"])), "OK");
    assert_eq!(text(ask(&mut w2, &["SET", "w1", "secret"])), "OK");
    for shows in [
        vec!["GET", "w1"],
        vec!["GETDEL", "w1"],
        vec!["GETSET", "w1", "x"],
        vec!["INCR", "w1"],
        vec!["SET", "w1", "x", "GET"],
        vec!["RENAME", "w1", "w2"],
    ] {
        assert_eq!(text(ask(&mut w2, &shows)), key, "{shows:?}");
    }
    assert_eq!(text(ask(&mut w2, &["DEL", "w1"])), "1");
    // A user deleted and made again is another user: the old one's connections close.
    assert_eq!(text(ask(&mut admin, &["ACL", "DELUSER", "writer"])), "1");
    assert_eq!(text(ask(&mut admin, &setuser)), "OK");
    assert!(closed(&mut w2, &["SET", "w3", "v"]));
    // Turned off: the password no longer works. Deleted: its connections are closed.
    assert_eq!(
        text(ask(&mut admin, &["ACL", "SETUSER", "alice", "off"])),
        "OK"
    );
    assert!(text(ask(&mut w, &["AUTH", "alice", "pw"])).starts_with("WRONGPASS"));
    assert_eq!(text(ask(&mut admin, &["ACL", "DELUSER", "alice"])), "1");
    assert!(closed(&mut c, &["GET", "a1"]));
    assert_eq!(
        text(ask(&mut admin, &["ACL", "DELUSER", "default"])),
        "ERR The 'default' user cannot be removed"
    );
}

#[test]
fn acl_save_and_load_keep_users_in_the_acl_file() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("users.acl");
    std::fs::write(&file, "user bob on >pw ~b:* +@string\n").unwrap();
    let server = start(&t.path().join("db"), |c| c.aclfile = Some(file.clone()));
    let mut c = client(&server);
    assert_eq!(text(ask(&mut c, &["AUTH", "bob", "pw"])), "OK");
    assert_eq!(text(ask(&mut c, &["SET", "b:1", "v"])), "OK");
    assert!(text(ask(&mut c, &["SET", "c", "v"])).starts_with("NOPERM"));
    let mut admin = client(&server);
    assert_eq!(
        text(ask(
            &mut admin,
            &["ACL", "SETUSER", "carol", "on", ">x", "allkeys", "+get"]
        )),
        "OK"
    );
    assert_eq!(text(ask(&mut admin, &["ACL", "SAVE"])), "OK");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        saved.contains("user carol on #") && !saved.contains(">x"),
        "{saved}"
    );
    // A damaged file is refused whole, and the users stay as they were.
    std::fs::write(&file, "user dave on >pw\nuser bob bogus\n").unwrap();
    assert!(text(ask(&mut admin, &["ACL", "LOAD"])).contains("users.acl:2:"));
    assert_eq!(
        text(ask(&mut admin, &["ACL", "DRYRUN", "carol", "get", "k"])),
        "OK"
    );
    // A file without `default` leaves it as it is: here, with its password.
    std::fs::write(&file, "user carol on >x allkeys +get\n").unwrap();
    assert_eq!(
        text(ask(&mut admin, &["CONFIG", "SET", "requirepass", "rootpw"])),
        "OK"
    );
    assert_eq!(text(ask(&mut admin, &["ACL", "LOAD"])), "OK");
    let mut fresh = client(&server);
    assert_eq!(
        text(ask(&mut fresh, &["GET", "b:1"])),
        "NOAUTH Authentication required."
    );
    assert_eq!(
        text(ask(&mut admin, &["CONFIG", "SET", "requirepass", ""])),
        "OK"
    );
    std::fs::write(&file, &saved).unwrap();
    drop((c, admin, fresh));
    server.shutdown().unwrap();
    // A restart loads the saved users.
    let server = start(&t.path().join("db"), |c| c.aclfile = Some(file.clone()));
    let mut c = client(&server);
    assert_eq!(text(ask(&mut c, &["AUTH", "carol", "x"])), "OK");
    assert_eq!(text(ask(&mut c, &["GET", "b:1"])), "v");
    // A damaged file stops the server from starting.
    drop(c);
    server.shutdown().unwrap();
    std::fs::write(&file, "user eve on #nothex\n").unwrap();
    let t2 = tempfile::tempdir().unwrap();
    let err = Server::start(Config {
        dir: t2.path().to_path_buf(),
        port: 0,
        aclfile: Some(file.clone()),
        ..Config::default()
    })
    .err()
    .unwrap();
    assert!(err.contains("users.acl:1:"), "{err}");
}

#[test]
fn protected_mode_refuses_other_hosts_until_a_password_is_set() {
    // A non-loopback address of this host, found by routing (no packet is sent).
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    let local = probe
        .connect("10.255.255.255:9")
        .ok()
        .and_then(|_| probe.local_addr().ok())
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    let Some(ip) = local else {
        assert!(
            std::env::var_os("STRATA_REQUIRE_NONLOOPBACK").is_none(),
            "this host has no non-loopback address, and STRATA_REQUIRE_NONLOOPBACK is set"
        );
        // Written to stderr itself, which `cargo test` shows; it captures `eprintln!`.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: protected_mode_refuses_other_hosts_until_a_password_is_set: this host \
              has no non-loopback address\n",
        );
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let server = start(t.path(), |c| c.bind = "0.0.0.0".into());
    let port = server.local_addr().port();
    // What a client from another host is answered: its first command's reply, then the end.
    let outside = || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect((ip, port)).unwrap();
        s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        let mut got = Vec::new();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    let refused = outside();
    assert!(
        refused.starts_with("-DENIED Redis is running in protected mode"),
        "{refused}"
    );
    let mut local = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(text(ask(&mut local, &["PING"])), "PONG");
    assert_eq!(
        text(ask(&mut local, &["CONFIG", "SET", "requirepass", "pw"])),
        "OK"
    );
    assert_eq!(outside(), "-NOAUTH Authentication required.\r\n");
}

// The model test: random users against random commands and keys.

/// A command of the model: name, categories, and what it needs on its keys (read, write).
/// A write command reads too when it shows or moves the old value (INCR), not when it only
/// stores or removes (SET, MSET, DEL).
struct ModelCmd {
    name: &'static str,
    categories: &'static [&'static str],
    read: bool,
    write: bool,
}

const CMDS: &[ModelCmd] = &[
    ModelCmd {
        name: "get",
        categories: &["read", "string", "fast"],
        read: true,
        write: false,
    },
    ModelCmd {
        name: "mget",
        categories: &["read", "string", "fast"],
        read: true,
        write: false,
    },
    ModelCmd {
        name: "exists",
        categories: &["keyspace", "read", "fast"],
        read: true,
        write: false,
    },
    ModelCmd {
        name: "set",
        categories: &["write", "string", "slow"],
        read: false,
        write: true,
    },
    ModelCmd {
        name: "mset",
        categories: &["write", "string", "slow"],
        read: false,
        write: true,
    },
    ModelCmd {
        name: "incr",
        categories: &["write", "string", "fast"],
        read: true,
        write: true,
    },
    ModelCmd {
        name: "del",
        categories: &["keyspace", "write", "slow"],
        read: false,
        write: true,
    },
    // A command with subcommands, which rules may name one by one.
    ModelCmd {
        name: "object",
        categories: &["keyspace", "read", "slow"],
        read: true,
        write: false,
    },
];

/// OBJECT's subcommands the model runs.
const SUBS: &[&str] = &["encoding", "refcount"];

const CATS: &[&str] = &["read", "write", "string", "keyspace", "fast", "slow"];
const PATTERNS: &[&str] = &["*", "a*", "b*", "k1", "k?"];
const KEYS: &[&str] = &["a1", "b2", "k1", "k2", "kk3", "z"];

/// The glob subset the patterns above use.
fn model_match(pattern: &str, key: &str) -> bool {
    match pattern {
        "*" => true,
        "k?" => key.len() == 2 && key.starts_with('k'),
        p if p.ends_with('*') => key.starts_with(&p[..p.len() - 1]),
        p => p == key,
    }
}

#[derive(Clone, Debug)]
enum Rule {
    Cmd(bool, usize),
    Cat(bool, usize),
    All(bool),
    Keys(bool, bool, usize),
    /// `+object|sub` or `-object|sub`.
    Sub(bool, usize),
}

impl Rule {
    fn text(&self) -> String {
        let sign = |b: &bool| if *b { '+' } else { '-' };
        match self {
            Rule::Cmd(a, i) => format!("{}{}", sign(a), CMDS[*i].name),
            Rule::Cat(a, i) => format!("{}@{}", sign(a), CATS[*i]),
            Rule::All(a) => format!("{}@all", sign(a)),
            Rule::Keys(true, true, p) => format!("~{}", PATTERNS[*p]),
            Rule::Keys(true, false, p) => format!("%R~{}", PATTERNS[*p]),
            Rule::Keys(_, _, p) => format!("%W~{}", PATTERNS[*p]),
            Rule::Sub(a, s) => format!("{}object|{}", sign(a), SUBS[*s]),
        }
    }
}

fn rule() -> impl Strategy<Value = Rule> {
    prop_oneof![
        (any::<bool>(), 0..CMDS.len()).prop_map(|(a, i)| Rule::Cmd(a, i)),
        (any::<bool>(), 0..CATS.len()).prop_map(|(a, i)| Rule::Cat(a, i)),
        any::<bool>().prop_map(Rule::All),
        (0..3u8, 0..PATTERNS.len()).prop_map(|(rw, p)| Rule::Keys(rw != 1, rw != 0, p)),
        (any::<bool>(), 0..SUBS.len()).prop_map(|(a, s)| Rule::Sub(a, s)),
    ]
}

/// What the model says of `cmd` (with subcommand `sub`, for OBJECT) with `keys` for a user
/// built by `rules`. A rule on a subcommand outweighs the command's; a later rule on the
/// whole command, a category of it or `@all` drops the subcommands' rules.
fn model_allows(
    enabled: bool,
    rules: &[Rule],
    cmd: &ModelCmd,
    sub: usize,
    keys: &[&str],
) -> &'static str {
    if !enabled {
        return "off";
    }
    let mut allowed = false;
    let mut sub_rule: Option<bool> = None;
    let mut patterns: Vec<(bool, bool, &str)> = Vec::new();
    for r in rules {
        match r {
            Rule::Cmd(a, i) if CMDS[*i].name == cmd.name => (allowed, sub_rule) = (*a, None),
            Rule::Cmd(..) => {}
            Rule::Cat(a, i) if cmd.categories.contains(&CATS[*i]) => {
                (allowed, sub_rule) = (*a, None)
            }
            Rule::Cat(..) => {}
            Rule::All(a) => (allowed, sub_rule) = (*a, None),
            Rule::Keys(r, w, p) => patterns.push((*r, *w, PATTERNS[*p])),
            Rule::Sub(a, s) if cmd.name == "object" && *s == sub => sub_rule = Some(*a),
            Rule::Sub(..) => {}
        }
    }
    if !sub_rule.unwrap_or(allowed) {
        return "command";
    }
    let key_ok = |k: &str| {
        let readable = patterns.iter().any(|&(r, _, p)| r && model_match(p, k));
        let writable = patterns.iter().any(|&(_, w, p)| w && model_match(p, k));
        (!cmd.read || readable) && (!cmd.write || writable)
    };
    if keys.iter().all(|k| key_ok(k)) {
        "ok"
    } else {
        "key"
    }
}

fn args_for(cmd: &ModelCmd, sub: usize, keys: &[&str]) -> Vec<String> {
    let mut args = vec![cmd.name.to_string()];
    match cmd.name {
        "object" => args.extend([SUBS[sub].to_string(), keys[0].to_string()]),
        "get" | "incr" => args.push(keys[0].into()),
        "set" => args.extend([keys[0].to_string(), "1".into()]),
        "mset" => {
            for k in keys {
                args.extend([k.to_string(), "1".into()]);
            }
        }
        _ => args.extend(keys.iter().map(|k| k.to_string())),
    }
    args
}

/// The reply an allowed command gets, from the model's store of the keys' values, which it
/// updates as the command would.
fn model_reply(
    cmd: &ModelCmd,
    sub: usize,
    keys: &[&str],
    store: &mut std::collections::BTreeMap<String, i64>,
) -> redis::Value {
    use redis::Value;
    let value = |store: &std::collections::BTreeMap<String, i64>, k: &str| {
        store.get(k).map_or(Value::Nil, |n| {
            Value::BulkString(n.to_string().into_bytes())
        })
    };
    match cmd.name {
        "get" => value(store, keys[0]),
        "mget" => Value::Array(keys.iter().map(|k| value(store, k)).collect()),
        "exists" => Value::Int(keys.iter().filter(|k| store.contains_key(**k)).count() as i64),
        "set" | "mset" => {
            for k in keys {
                store.insert(k.to_string(), 1);
            }
            Value::Okay
        }
        "incr" => {
            let n = store.entry(keys[0].to_string()).or_insert(0);
            *n += 1;
            Value::Int(*n)
        }
        "del" => Value::Int(keys.iter().filter(|k| store.remove(**k).is_some()).count() as i64),
        // Every value stored here is an integer: OBJECT ENCODING says `int`.
        "object" => match (store.contains_key(keys[0]), SUBS[sub]) {
            (false, _) => Value::Nil,
            (true, "encoding") => Value::BulkString(b"int".to_vec()),
            (true, _) => Value::Int(1),
        },
        other => panic!("no model of {other}"),
    }
}

fn keys_used<'a>(cmd: &ModelCmd, keys: &'a [&'a str]) -> &'a [&'a str] {
    match cmd.name {
        "get" | "incr" | "set" | "object" => &keys[..1],
        _ => keys,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn permissions_answer_as_the_model_does(
        enabled in prop::bool::weighted(0.9),
        // Commands opened wholesale half the time, and a few key patterns always, so that
        // every verdict (allowed, command refused, key refused) is common.
        base_all in any::<bool>(),
        key_rules in prop::collection::vec(
            (0..3u8, 0..PATTERNS.len()).prop_map(|(rw, p)| Rule::Keys(rw != 1, rw != 0, p)),
            1..4,
        ),
        more in prop::collection::vec(rule(), 0..6),
        calls in prop::collection::vec(
            (0..CMDS.len(), 0..SUBS.len(), prop::collection::vec(0..KEYS.len(), 1..4)),
            1..12,
        ),
    ) {
        let mut rules = vec![Rule::All(base_all)];
        rules.extend(key_rules);
        rules.extend(more);
        let t = tempfile::tempdir().unwrap();
        let server = start(t.path(), |_| {});
        let mut admin = client(&server);
        let mut setuser: Vec<String> = vec!["ACL".into(), "SETUSER".into(), "u".into()];
        setuser.push(if enabled { "on" } else { "off" }.into());
        setuser.push(">pw".into());
        setuser.extend(rules.iter().map(Rule::text));
        let refs: Vec<&str> = setuser.iter().map(String::as_str).collect();
        prop_assert_eq!(text(ask(&mut admin, &refs)), "OK");
        let mut c = client(&server);
        let login = text(ask(&mut c, &["AUTH", "u", "pw"]));
        if !enabled {
            prop_assert!(login.starts_with("WRONGPASS"), "{}", login);
            return Ok(());
        }
        prop_assert_eq!(login, "OK");
        // The keys' values as the allowed commands left them.
        let mut store = std::collections::BTreeMap::new();
        for (ci, sub, key_idx) in calls {
            let cmd = &CMDS[ci];
            let all: Vec<&str> = key_idx.iter().map(|&i| KEYS[i]).collect();
            let keys = keys_used(cmd, &all);
            let args = args_for(cmd, sub, keys);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let reply = ask(&mut c, &refs);
            let got = text(reply.clone());
            let want = model_allows(enabled, &rules, cmd, sub, keys);
            let verdict = if got.starts_with("NOPERM this user has no permissions to run") {
                "command"
            } else if got.starts_with("NOPERM this user has no permissions to access") {
                "key"
            } else {
                "ok"
            };
            prop_assert_eq!(verdict, want, "{:?} by {:?} answered {}", args, rules, got);
            // An allowed command ran: its reply is the model's, and its writes are kept.
            if want == "ok" {
                let expected = model_reply(cmd, sub, keys, &mut store);
                prop_assert_eq!(reply, Ok(expected), "{:?}", args);
            }
            // DRYRUN answers from the same check.
            let mut dry = vec!["ACL", "DRYRUN", "u"];
            dry.extend(refs.iter().copied());
            let dry = text(ask(&mut admin, &dry));
            prop_assert_eq!(dry == "OK", want == "ok", "DRYRUN {:?}: {}", args, dry);
        }
        // Refused commands changed nothing: every key holds what the allowed ones left.
        let mut mget = vec!["MGET"];
        mget.extend(KEYS);
        let all = KEYS
            .iter()
            .map(|k| store.get(*k).map_or(redis::Value::Nil, |n| {
                redis::Value::BulkString(n.to_string().into_bytes())
            }))
            .collect();
        prop_assert_eq!(ask(&mut admin, &mget), Ok(redis::Value::Array(all)));
    }
}

/// A script runs as its caller: each `redis.call` is checked against the user's commands and
/// key patterns, whatever the keys EVAL declared, and `redis.acl_check_cmd` answers the same
/// question without running the command.
#[test]
fn scripts_run_with_their_callers_rights() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut admin = client(&server);
    ask(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "bob",
            "on",
            ">pw",
            "+@scripting",
            "+set",
            "+get",
            "~x*",
        ],
    )
    .unwrap();
    let mut bob = client(&server);
    ask(&mut bob, &["AUTH", "bob", "pw"]).unwrap();
    let set = "return redis.call('set', KEYS[1], 'v')";
    assert_eq!(text(ask(&mut bob, &["EVAL", set, "1", "x1"])), "OK");
    // A declared key outside the patterns is refused before the script runs: this script
    // never touches it.
    let refused = text(ask(&mut bob, &["EVAL", "return 1", "1", "y1"]));
    assert!(refused.starts_with("NOPERM"), "{refused}");
    // A key the script reaches without declaring it is refused at the call.
    let undeclared = "return redis.call('set', 'y2', 'v')";
    let refused = text(ask(&mut bob, &["EVAL", undeclared, "0"]));
    assert!(refused.contains("NOPERM"), "{refused}");
    let other = "return redis.call('del', 'x1')";
    let refused = text(ask(&mut bob, &["EVAL", other, "0"]));
    assert!(refused.contains("NOPERM"), "{refused}");
    let check =
        "return {redis.acl_check_cmd('set', 'x9', 'v'), redis.acl_check_cmd('set', 'y9', 'v')}";
    assert_eq!(
        text(ask(&mut bob, &["EVAL", check, "0"])),
        "array([int(1), nil])"
    );
    assert_eq!(text(ask(&mut admin, &["EXISTS", "y1", "y2"])), "0");
    assert_eq!(text(ask(&mut admin, &["GET", "x1"])), "v");
    server.shutdown().unwrap();
}

/// A script's calls are held to the caller's read and write key patterns: `%R~` lets a
/// script read a key and not write it, `%W~` write and not read.
#[test]
fn scripts_keep_to_their_callers_read_and_write_patterns() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), |_| {});
    let mut admin = client(&server);
    ask(&mut admin, &["SET", "r1", "seen"]).unwrap();
    let rules = [
        "ACL", "SETUSER", "carol", "on", ">pw", "+@all", "%R~r*", "%W~w*",
    ];
    assert_eq!(text(ask(&mut admin, &rules)), "OK");
    let mut carol = client(&server);
    ask(&mut carol, &["AUTH", "carol", "pw"]).unwrap();
    let run = |c: &mut redis::Connection, script: &str| text(ask(c, &["EVAL", script, "0"]));
    assert_eq!(run(&mut carol, "return redis.call('get', 'r1')"), "seen");
    assert!(run(&mut carol, "return redis.call('set', 'r1', 'x')").contains("NOPERM"));
    assert_eq!(run(&mut carol, "return redis.call('set', 'w1', 'x')"), "OK");
    assert!(run(&mut carol, "return redis.call('get', 'w1')").contains("NOPERM"));
    // Nothing the refused calls would have written was written.
    assert_eq!(text(ask(&mut admin, &["GET", "r1"])), "seen");
    assert_eq!(text(ask(&mut admin, &["GET", "w1"])), "x");
    server.shutdown().unwrap();
}

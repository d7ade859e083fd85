//! AUTH and ACL: who a connection is, and what its user may do ([`crate::acl`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::spec::{self, SPECS, Spec, lookup};
use super::{Connection, Ctx, Outcome, upper};
use crate::acl::{self, Acl, Denied, LogEntry, User};
use crate::shared::Shared;

/// Redis's answer to a client refused by protected mode.
pub(crate) const PROTECTED: &str = "DENIED Redis is running in protected mode because \
    protected mode is enabled and no password is set for the default user. In this mode \
    connections are only accepted from the loopback interface. If you want to connect from \
    external computers to Redis you may adopt one of the following solutions: 1) Just disable \
    protected mode sending the command 'CONFIG SET protected-mode no' from the loopback \
    interface by connecting to Redis from the same host the server is running, however MAKE \
    SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to \
    make this change permanent. 2) Alternatively you can just disable the protected mode by \
    editing the Redis configuration file, and setting the protected mode option to 'no', and \
    then restarting the server. 3) If you started the server manually just for testing, \
    restart it with the '--protected-mode no' option. 4) Setup a an authentication password \
    for the default user. NOTE: You only need to do one of the above things in order for the \
    server to start accepting connections from the outside.";

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

fn read(shared: &Shared) -> std::sync::RwLockReadGuard<'_, Acl> {
    shared.acl.read().unwrap_or_else(|e| e.into_inner())
}

fn write(shared: &Shared) -> std::sync::RwLockWriteGuard<'_, Acl> {
    shared.acl.write().unwrap_or_else(|e| e.into_inner())
}

/// Marks a change of the users, for every connection to pick up. Called with the write
/// lock held.
fn changed(shared: &Shared) {
    // Release: a connection that sees the new generation reads the changed users.
    shared.acl_generation.fetch_add(1, Ordering::Release);
}

/// The user named `name`, as it is now.
pub(crate) fn user(shared: &Shared, name: &str) -> Option<Arc<User>> {
    shared.user(name)
}

fn client_info(conn: &Connection, cmd: &str) -> String {
    format!(
        "id={} name={} db={} cmd={cmd} user={} resp={}",
        conn.id,
        String::from_utf8_lossy(conn.name.as_deref().unwrap_or_default()),
        conn.db,
        conn.user.name,
        conn.protocol
    )
}

/// Checks a command against the connection's user; the error line of a refusal, which
/// also enters `ACL LOG`.
pub(crate) fn permitted(
    shared: &Shared,
    conn: &mut Connection,
    index: usize,
    cmd: &Spec,
    args: &[&[u8]],
) -> Outcome {
    let denied = match conn
        .user
        .check_with_hint(index, cmd, args, &mut conn.acl_hint)
    {
        Ok(()) => return Ok(()),
        Err(d) => d,
    };
    let (reason, object, line) = match denied {
        Denied::Command => (
            "command",
            cmd.name.to_string(),
            format!(
                "NOPERM this user has no permissions to run the '{}' command",
                cmd.name
            ),
        ),
        Denied::Key(i) => (
            "key",
            String::from_utf8_lossy(args.get(i).copied().unwrap_or_default()).into_owned(),
            "NOPERM this user has no permissions to access one of the keys used as arguments"
                .to_string(),
        ),
        Denied::Channel(i) => (
            "channel",
            String::from_utf8_lossy(args.get(i).copied().unwrap_or_default()).into_owned(),
            "NOPERM this user has no permissions to access one of the channels used as arguments"
                .to_string(),
        ),
    };
    write(shared).record(LogEntry {
        count: 1,
        reason,
        context: if conn.multi.is_some() {
            "multi"
        } else {
            "toplevel"
        },
        object,
        username: conn.user.name.clone(),
        at: std::time::Instant::now(),
        client_info: client_info(conn, cmd.name),
    });
    Err(line)
}

/// Logs in as `name` with `password`, or answers WRONGPASS (and logs the attempt).
pub(crate) fn log_in(cx: &mut Ctx<'_, '_>, name: &[u8], password: &[u8]) -> Outcome {
    let name = String::from_utf8_lossy(name).into_owned();
    // Unknown users cost a digest too, so that a timing does not tell which names exist.
    let found = user(cx.shared, &name);
    let ok = match &found {
        Some(u) => u.accepts(password),
        None => {
            let _ = acl::digest(password);
            false
        }
    };
    match found {
        Some(u) if ok => {
            cx.conn.log_in(u, true);
            Ok(())
        }
        _ => {
            write(cx.shared).record(LogEntry {
                count: 1,
                reason: "auth",
                context: "toplevel",
                object: "AUTH".into(),
                username: name,
                at: std::time::Instant::now(),
                client_info: client_info(cx.conn, "auth"),
            });
            Err(WRONGPASS.into())
        }
    }
}

/// `AUTH [username] password`.
pub(super) fn auth(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    match a.len() {
        2 => {
            let default_nopass = user(cx.shared, "default").is_some_and(|u| u.nopass);
            if default_nopass {
                return Err(
                    "ERR AUTH <password> called without any password configured for \
                     the default user. Are you sure your configuration is correct?"
                        .into(),
                );
            }
            log_in(cx, b"default", a[1])?;
        }
        3 => log_in(cx, a[1], a[2])?,
        _ => return Err(super::syntax()),
    }
    cx.out.ok();
    Ok(())
}

/// `requirepass` as `CONFIG SET` sets it.
pub(crate) fn set_requirepass(shared: &Shared, password: &[u8]) {
    let mut acl = write(shared);
    acl::set_requirepass(&mut acl, password);
    changed(shared);
}

fn user_reply(cx: &mut Ctx<'_, '_>, u: &User) {
    cx.out.map(6);
    cx.out.bulk(b"flags");
    let flags = u.flags();
    cx.out.array(flags.len());
    for f in flags {
        cx.out.bulk(f.as_bytes());
    }
    cx.out.bulk(b"passwords");
    cx.out.array(u.passwords.len());
    for p in &u.passwords {
        cx.out.bulk(acl::hex(p).as_bytes());
    }
    cx.out.bulk(b"commands");
    cx.out.bulk(u.commands_text().as_bytes());
    cx.out.bulk(b"keys");
    cx.out.bulk(u.keys_text().as_bytes());
    cx.out.bulk(b"channels");
    cx.out.bulk(u.channels_text().as_bytes());
    cx.out.bulk(b"selectors");
    cx.out.array(0);
}

fn no_file() -> String {
    "ERR This Redis instance is not configured to use an ACL file. You may want to specify \
     users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a \
     Redis configuration file set) in order to store users in the Redis configuration."
        .into()
}

/// `ACL <subcommand>`.
pub(super) fn acl(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a[1]);
    let arity_ok = match sub.as_str() {
        "WHOAMI" | "USERS" | "LIST" | "LOAD" | "SAVE" => a.len() == 2,
        "SETUSER" | "DELUSER" => a.len() >= 3,
        "GETUSER" => a.len() == 3,
        "CAT" => a.len() <= 3,
        "DRYRUN" => a.len() >= 4,
        "LOG" => a.len() <= 3,
        _ => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try ACL HELP.",
                String::from_utf8_lossy(a[1])
            ));
        }
    };
    if !arity_ok {
        return Err(super::wrong_args(&format!("acl|{}", sub.to_lowercase())));
    }
    let shared = cx.shared;
    match sub.as_str() {
        "WHOAMI" => cx.out.bulk(cx.conn.user.name.as_bytes()),
        "USERS" => {
            let names: Vec<String> = read(shared).users.keys().cloned().collect();
            cx.out.array(names.len());
            for n in names {
                cx.out.bulk(n.as_bytes());
            }
        }
        "LIST" => {
            let lines: Vec<String> = read(shared).users.values().map(|u| u.describe()).collect();
            cx.out.array(lines.len());
            for l in lines {
                cx.out.bulk(l.as_bytes());
            }
        }
        "SETUSER" => {
            let name = String::from_utf8_lossy(a[2]).into_owned();
            if name.is_empty() || name.contains(|c: char| c.is_whitespace()) {
                return Err("ERR Usernames can't contain spaces or null characters".into());
            }
            let mut acl = write(shared);
            let mut u = acl
                .users
                .get(&name)
                .map_or_else(|| User::new(&name), |u| (**u).clone());
            for rule in &a[3..] {
                u.apply(rule).map_err(|e| format!("ERR {e}"))?;
            }
            acl.users.insert(name, Arc::new(u));
            changed(shared);
            drop(acl);
            cx.out.ok();
        }
        "GETUSER" => match user(shared, &String::from_utf8_lossy(a[2])) {
            Some(u) => user_reply(cx, &u),
            None => cx.out.null(),
        },
        "DELUSER" => {
            if a[2..].iter().any(|n| *n == b"default") {
                return Err("ERR The 'default' user cannot be removed".into());
            }
            let mut acl = write(shared);
            let mut removed = 0;
            for n in &a[2..] {
                removed += i64::from(acl.users.remove(&*String::from_utf8_lossy(n)).is_some());
            }
            changed(shared);
            drop(acl);
            cx.out.int(removed);
        }
        "CAT" => match a.get(2) {
            None => {
                cx.out.array(acl::CATEGORIES.len());
                for c in acl::CATEGORIES {
                    cx.out.bulk(c.as_bytes());
                }
            }
            Some(cat) => {
                let cat = String::from_utf8_lossy(cat).to_lowercase();
                if !acl::CATEGORIES.contains(&cat.as_str()) {
                    return Err(format!("ERR Unknown category '{cat}'"));
                }
                let names: Vec<&str> = SPECS
                    .iter()
                    .filter(|c| c.categories.contains(&cat.as_str()))
                    .map(|c| c.name)
                    .collect();
                cx.out.array(names.len());
                for n in names {
                    cx.out.bulk(n.as_bytes());
                }
            }
        },
        "DRYRUN" => acl_dryrun(cx, a)?,
        "LOG" => log(cx, a.get(2).copied())?,
        "LOAD" => acl_load(cx, a)?,
        "SAVE" => {
            let path = shared.config.aclfile.as_ref().ok_or_else(no_file)?;
            let text = read(shared).file_text();
            save(path, &text).map_err(|e| {
                format!(
                    "ERR There was an error trying to save the ACLs. Please check the server \
                     logs for more information ({e})"
                )
            })?;
            cx.out.ok();
        }
        _ => unreachable!("every subcommand is matched above"),
    }
    Ok(())
}

/// `ACL DRYRUN user command [arg ...]`: whether the user may run the command, as its
/// refusal would say.
fn acl_dryrun(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let shared = cx.shared;
    let name = String::from_utf8_lossy(a[2]).into_owned();
    let u = user(shared, &name).ok_or_else(|| format!("ERR User '{name}' not found"))?;
    let Some((i, cmd)) = lookup(a[3]) else {
        return Err(format!(
            "ERR Command '{}' not found",
            String::from_utf8_lossy(a[3])
        ));
    };
    let args = &a[3..];
    if !spec::arity_ok(cmd, args.len()) {
        return Err(super::wrong_args(cmd.name));
    }
    match u.check(i, cmd, args) {
        Ok(()) => cx.out.ok(),
        Err(Denied::Command) => cx.out.bulk(
            format!(
                "This user has no permissions to run the '{}' command",
                cmd.name
            )
            .as_bytes(),
        ),
        Err(Denied::Key(k)) => cx.out.bulk(
            format!(
                "This user has no permissions to access the '{}' key",
                String::from_utf8_lossy(args.get(k).copied().unwrap_or_default())
            )
            .as_bytes(),
        ),
        Err(Denied::Channel(k)) => cx.out.bulk(
            format!(
                "This user has no permissions to access the '{}' channel",
                String::from_utf8_lossy(args.get(k).copied().unwrap_or_default())
            )
            .as_bytes(),
        ),
    }
    Ok(())
}

/// `ACL LOAD`: the users of the ACL file replace the server's.
fn acl_load(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    let shared = cx.shared;
    let path = shared.config.aclfile.as_ref().ok_or_else(no_file)?;
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "ERR Error loading ACLs, opening file '{}': {e}",
            path.display()
        )
    })?;
    let mut users =
        Acl::parse_file(&text, &path.display().to_string()).map_err(|e| format!("ERR {e}"))?;
    let mut acl = write(shared);
    // `default` stays the same user (its connections go on), with the file's rules if
    // the file has it, else as it was: a file without it does not drop requirepass.
    // Every other user is made anew, and its connections are closed.
    let current = acl.users.get("default").cloned();
    match (users.get_mut("default"), current) {
        (Some(new), Some(old)) => {
            let mut d = (**new).clone();
            d.id = old.id;
            *new = Arc::new(d);
        }
        (None, Some(old)) => {
            users.insert("default".into(), old);
        }
        _ => {}
    }
    acl.users = users;
    changed(shared);
    drop(acl);
    cx.out.ok();
    Ok(())
}

/// Writes the ACL file whole or not at all: a temporary file, synced, renamed over it.
fn save(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // A name of its own for each save, so that two at once cannot truncate each other's;
    // readable by the server's user only, as it holds password digests.
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SAVES.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("acl.tmp.{}.{n}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// `ACL LOG [count | RESET]`.
fn log(cx: &mut Ctx<'_, '_>, arg: Option<&[u8]>) -> Outcome {
    let mut count = usize::MAX;
    if let Some(arg) = arg {
        if arg.eq_ignore_ascii_case(b"reset") {
            write(cx.shared).log.clear();
            cx.out.ok();
            return Ok(());
        }
        count = super::parse_i64(arg)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| "ERR value is out of range, must be positive".to_string())?;
    }
    let acl = read(cx.shared);
    let entries: Vec<&LogEntry> = acl.log.iter().take(count).collect();
    cx.out.array(entries.len());
    for e in entries {
        cx.out.map(7);
        cx.out.bulk(b"count");
        cx.out.int(e.count as i64);
        for (k, v) in [
            ("reason", e.reason),
            ("context", e.context),
            ("object", &e.object),
            ("username", &e.username),
        ] {
            cx.out.bulk(k.as_bytes());
            cx.out.bulk(v.as_bytes());
        }
        cx.out.bulk(b"age-seconds");
        cx.out
            .double(&format!("{:.3}", e.at.elapsed().as_secs_f64()));
        cx.out.bulk(b"client-info");
        cx.out.bulk(e.client_info.as_bytes());
    }
    Ok(())
}

/// True while the `default` user takes any password, as protected mode asks.
pub(crate) fn default_needs_no_password(shared: &Shared) -> bool {
    shared.user("default").is_none_or(|u| u.nopass)
}

/// Protected mode refuses `peer` (`None`: its address is unknown, and it is refused as one
/// from another host would be): it is not on this host, and `default` needs no password.
pub(crate) fn protected(shared: &Shared, peer: Option<std::net::SocketAddr>) -> bool {
    let loopback = peer.is_some_and(|peer| match peer.ip() {
        std::net::IpAddr::V4(ip) => ip.is_loopback(),
        std::net::IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    });
    shared.protected_mode.load(Ordering::Relaxed) && !loopback && default_needs_no_password(shared)
}

//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO, SCRIPT and FUNCTION.
//!
//! A script runs alone, under the keyspace's write lock (`dispatch.rs`), as a transaction
//! does: its writes wait in `exec_state` where its own reads see them, and reach the engine
//! as one batch when it returns, so after a crash a script is there whole or not at all. A
//! script inside `EXEC` joins the transaction's batch. `redis.call` runs each command through
//! the checks Redis makes for scripts (known, arity, `noscript`, read-only scripts, ACL)
//! with the caller's user, in the caller's database; a `SELECT` inside stays inside.
//!
//! FUNCTION LOAD's libraries are kept in the engine under `0xFF "function" <library>`
//! (docs/format.md) and loaded again when the server starts; FLUSHALL leaves them, as in
//! Redis.

use super::spec::{arity_ok, lookup};
use super::{Ctx, Handler, Outcome, auth, engine, exec_state, int_arg, run, upper};
use crate::resp::Reply;
use crate::scripting::{Host, Invocation, Target};
use crate::shared::Shared;

/// Where a library's code is kept, by name.
pub(super) const FUNCTION_PREFIX: &[u8] = b"\xFFfunction";

/// The client a script runs as: the calling connection's user, database and protocol, as
/// Redis's script client takes them.
pub(crate) fn script_client(shared: &Shared, caller: &super::Connection) -> super::Connection {
    let mut c = super::Connection::new(caller.id, shared, false);
    c.log_in(caller.user.clone(), caller.authenticated);
    c.acl_seen = caller.acl_seen;
    c.db = caller.db;
    c.protocol = caller.protocol;
    c.name = caller.name.clone();
    c.info = caller.info.clone();
    c
}

/// What `redis.call` runs commands with: the calling connection, its user and database.
struct ScriptHost<'c, 'a> {
    shared: &'a Shared,
    conn: &'c mut super::Connection,
    handlers: &'static [Handler],
    read_only: bool,
}

impl Host for ScriptHost<'_, '_> {
    fn acl_check(&mut self, args: &[Vec<u8>]) -> Result<bool, String> {
        self.acl_check_cmd(args)
    }

    fn call(&mut self, args: &[Vec<u8>], protocol: u8) -> Vec<u8> {
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let mut buf = Vec::new();
        let mut out = Reply::new(&mut buf, protocol);
        if let Err(e) = self.check(&argv) {
            out.error(&e);
            return buf;
        }
        let Some((i, cmd)) = argv.first().and_then(|n| lookup(n)) else {
            return buf;
        };
        if cmd.flags.contains(&"write") {
            self.shared.scripts.note_write();
        }
        let saved = self.conn.protocol;
        self.conn.protocol = protocol;
        run(
            self.shared,
            self.conn,
            i,
            cmd,
            self.handlers,
            &argv,
            &mut out,
        );
        self.conn.protocol = saved;
        buf
    }
}

impl ScriptHost<'_, '_> {
    fn acl_check_cmd(&mut self, args: &[Vec<u8>]) -> Result<bool, String> {
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let name = argv.first().copied().unwrap_or_default();
        let Some((i, cmd)) = lookup(name) else {
            return Err("ERR Invalid command passed to redis.acl_check_cmd()".into());
        };
        if !arity_ok(cmd, argv.len()) {
            return Err("ERR Invalid number of arguments passed to redis.acl_check_cmd()".into());
        }
        if self.conn.unrestricted {
            return Ok(true);
        }
        let mut hint = 0;
        Ok(self
            .conn
            .user
            .check_with_hint(i, cmd, &argv, &mut hint)
            .is_ok())
    }

    /// The checks Redis makes of a command a script calls.
    fn check(&mut self, argv: &[&[u8]]) -> Outcome {
        let name = argv.first().copied().unwrap_or_default();
        let Some((i, cmd)) = lookup(name) else {
            return Err("ERR Unknown Redis command called from script".into());
        };
        if !arity_ok(cmd, argv.len()) {
            return Err("ERR Wrong number of args calling Redis command from script".into());
        }
        // A script cannot log in again, nor change its connection's protocol or user.
        if cmd.flags.contains(&"noscript")
            || matches!(cmd.name, "auth" | "hello" | "reset" | "quit" | "client")
        {
            return Err("ERR This Redis command is not allowed from script".into());
        }
        if matches!(cmd.name, "xread" | "xreadgroup")
            && argv.iter().any(|a| a.eq_ignore_ascii_case(b"block"))
        {
            return Err(format!(
                "ERR {} command is not allowed with BLOCK option from scripts",
                cmd.name
            ));
        }
        if self.read_only && cmd.flags.contains(&"write") {
            return Err("ERR Write commands are not allowed from read-only scripts.".into());
        }
        if !self.conn.unrestricted {
            auth::permitted(self.shared, self.conn, i, cmd, argv)?;
        }
        Ok(())
    }
}

/// A script's keys, then its arguments.
type KeysAndArgs<'a> = (&'a [&'a [u8]], &'a [&'a [u8]]);

/// Splits `numkeys key... arg...` (from `a[2]` on).
fn keys_and_args<'a>(a: &'a [&'a [u8]]) -> Result<KeysAndArgs<'a>, String> {
    let n = int_arg(a.get(2).copied().unwrap_or_default()).map_err(|e| {
        let fcall = |c: &&[u8]| c.get(..5).is_some_and(|p| p.eq_ignore_ascii_case(b"fcall"));
        if a.first().is_some_and(fcall) {
            "ERR Bad number of keys provided".to_string()
        } else {
            e
        }
    })?;
    if n < 0 {
        return Err("ERR Number of keys can't be negative".into());
    }
    let rest = a.get(3..).unwrap_or_default();
    if n as u64 > rest.len() as u64 {
        return Err("ERR Number of keys can't be greater than number of args".into());
    }
    Ok(rest.split_at(n as usize))
}

/// EVAL, EVALSHA, EVAL_RO and EVALSHA_RO.
pub(super) fn eval(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let name = upper(a.first().copied().unwrap_or_default());
    let body = a.get(1).copied().unwrap_or_default();
    let (keys, args) = keys_and_args(a)?;
    let by_sha = name.starts_with("EVALSHA");
    let flags = if by_sha {
        if body.len() != 40 {
            return Err("NOSCRIPT No matching script. Please use EVAL.".into());
        }
        cx.shared
            .scripts
            .script_flags(body)
            .ok_or("NOSCRIPT No matching script. Please use EVAL.")?
    } else {
        crate::scripting::Scripts::body_flags(body)?
    };
    let read_only = name.ends_with("_RO") || flags.no_writes;
    if flags.declared && !read_only {
        may_write(cx.shared)?;
    }
    let target = if by_sha {
        Target::Sha(body)
    } else {
        Target::Body(body)
    };
    run_script(cx, target, a, keys, args, read_only)
}

/// A script that declares it may write is refused before it runs where writes would be: on
/// a read-only replica, or with too few replicas for `min-replicas-to-write`.
fn may_write(shared: &crate::shared::Shared) -> Outcome {
    match crate::replication::refusal(shared, &["write"]) {
        Some(e) if e.starts_with("READONLY") => {
            Err("READONLY Can not run script with write flag on readonly replica".into())
        }
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// FCALL and FCALL_RO.
pub(super) fn fcall(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let name = a.get(1).copied().unwrap_or_default();
    let (keys, args) = keys_and_args(a)?;
    let flags = cx
        .shared
        .scripts
        .function_flags(name)
        .ok_or("ERR Function not found")?;
    let ro_command = upper(a.first().copied().unwrap_or_default()) == "FCALL_RO";
    if ro_command && !flags.no_writes {
        return Err("ERR Can not execute a script with write flag using *_ro command.".into());
    }
    if !flags.no_writes {
        may_write(cx.shared)?;
    }
    run_script(
        cx,
        Target::Function(name),
        a,
        keys,
        args,
        ro_command || flags.no_writes,
    )
}

/// Runs a script with its writes gathered into one batch (or into the transaction's).
fn run_script(
    cx: &mut Ctx<'_, '_>,
    target: Target<'_>,
    a: &[&[u8]],
    keys: &[&[u8]],
    args: &[&[u8]],
    read_only: bool,
) -> Outcome {
    let shared = cx.shared;
    let nested = exec_state::in_exec();
    let notifications = (!nested).then(|| {
        exec_state::begin();
        crate::notify::Deferred::begin()
    });
    let (db, protocol) = (cx.conn.db, cx.conn.protocol);
    let mut replies = Vec::new();
    let mut out = Reply::new(&mut replies, protocol);
    let mut host = ScriptHost {
        shared,
        conn: cx.conn,
        handlers: cx.handlers,
        read_only,
    };
    let call = Invocation {
        keys,
        args,
        command: a,
    };
    let ran = shared.scripts.run(target, &call, &mut host, &mut out);
    cx.conn.db = db;
    if let Some(notifications) = notifications {
        let writes = exec_state::end();
        ran?;
        // Stopped by the server shutting down: what it wrote is not kept.
        if shared.shutdown.load(std::sync::atomic::Ordering::SeqCst)
            || shared
                .shutdown_requested
                .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err("ERR the server is shutting down".into());
        }
        super::transaction::commit(shared, writes)?;
        notifications.send(shared);
    } else {
        ran?;
    }
    // A script's error reply counts in INFO errorstats by its code, as any error does.
    if replies.first() == Some(&b'-') {
        let line = replies.get(1..).unwrap_or_default();
        let end = line.iter().position(|&b| b == b'\r').unwrap_or(line.len());
        shared.count_error(&String::from_utf8_lossy(
            line.get(..end).unwrap_or_default(),
        ));
    }
    cx.out.raw(&replies);
    Ok(())
}

/// SCRIPT LOAD, EXISTS, FLUSH, KILL and HELP.
pub(super) fn script(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a.get(1).copied().unwrap_or_default());
    let scripts = &cx.shared.scripts;
    match (sub.as_str(), a.len()) {
        ("LOAD", 3) => {
            let sha = scripts.load(a.get(2).copied().unwrap_or_default())?;
            cx.out.bulk(sha.as_bytes());
        }
        ("EXISTS", n) if n > 2 => {
            cx.out.array(n - 2);
            for sha in a.iter().skip(2) {
                cx.out.int(i64::from(scripts.exists(sha)));
            }
        }
        ("FLUSH", 2 | 3) => {
            flush_mode(a.get(2).copied())?;
            scripts.flush();
            cx.out.ok();
        }
        ("KILL", 2) => {
            scripts.kill(false)?;
            cx.out.ok();
        }
        ("HELP", 2) => help(cx, SCRIPT_HELP),
        _ => return Err(unknown_subcommand("SCRIPT", &sub)),
    }
    Ok(())
}

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Print this help.",
];

pub(super) fn help(cx: &mut Ctx<'_, '_>, lines: &[&str]) {
    cx.out.array(lines.len());
    for l in lines {
        cx.out.simple(l);
    }
}

pub(super) fn unknown_subcommand(command: &str, sub: &str) -> String {
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {command} HELP.",
        sub.to_ascii_lowercase()
    )
}

pub(super) fn flush_mode(arg: Option<&[u8]>) -> Outcome {
    match arg.map(upper).as_deref() {
        None | Some("ASYNC" | "SYNC") => Ok(()),
        Some(_) => Err("ERR SCRIPT FLUSH only support SYNC|ASYNC option".into()),
    }
}

/// The engine key a library's code is kept under.
pub(super) fn library_key(name: &str) -> Vec<u8> {
    let mut k = FUNCTION_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

/// Loads the libraries kept in the engine, when the server starts.
pub(crate) fn load_libraries(shared: &Shared) -> Result<(), String> {
    let mut end = FUNCTION_PREFIX.to_vec();
    end.push(0xFF);
    for entry in shared
        .db
        .scan(FUNCTION_PREFIX.to_vec()..end)
        .map_err(engine)?
    {
        let (_, code) = entry.map_err(engine)?;
        shared
            .scripts
            .load_library(&code, true)
            .map_err(|e| format!("a stored function library does not load: {e}"))?;
    }
    Ok(())
}

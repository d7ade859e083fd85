//! Dispatch: a command's checks (arity, authentication, ACL, transaction state) and the
//! lock it runs under, then its handler.

use std::sync::atomic::Ordering;

use super::auth::{self, PROTECTED};
use super::exec_state::{self, ExecLock};
use super::handlers::HANDLERS;
use super::keyspace::lock_stripes;
use super::spec::{Spec, arity_ok, lookup};
use super::{Connection, run, wrong_args};
use crate::resp::Reply;
use crate::shared::{After, Shared};

/// Runs one command (`args[0]` is its name) and writes its reply.
pub(crate) fn execute(
    shared: &Shared,
    conn: &mut Connection,
    args: &[&[u8]],
    out: &mut Reply<'_>,
) -> After {
    let Some(name) = args.first() else {
        return After::Continue;
    };
    if conn.denied {
        out.error(PROTECTED);
        return After::Close;
    }
    let Some((i, cmd)) = lookup(name) else {
        unknown_command(conn, args, out);
        return After::Continue;
    };
    reload_stale_functions(shared);
    let stats = shared.command_stats.get(i);
    if !arity_ok(cmd, args.len()) {
        if let Some(s) = stats {
            s.rejected.fetch_add(1, Ordering::Relaxed);
        }
        out.error(&wrong_args(cmd.name));
        conn.multi_failed |= conn.multi.is_some();
        return After::Continue;
    }
    if !conn.refresh_user(shared) {
        return After::Close;
    }
    let no_auth = cmd.flags.contains(&"no-auth");
    if !conn.authenticated && !no_auth {
        out.error("NOAUTH Authentication required.");
        conn.multi_failed |= conn.multi.is_some();
        return After::Continue;
    }
    if !conn.unrestricted
        && !no_auth
        && let Err(e) = auth::permitted(shared, conn, i, cmd, args)
    {
        out.error(&e);
        conn.multi_failed |= conn.multi.is_some();
        return After::Continue;
    }
    // A RESP2 connection that subscribes reads messages, not replies: it may only change
    // its subscriptions, PING, QUIT and RESET.
    if conn.protocol == 2 && conn.subs.any() && !runs_subscribed(cmd.name) {
        out.error(&format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
             RESET are allowed in this context",
            cmd.name
        ));
        return After::Continue;
    }
    if conn.multi.is_some() && cmd.flags.contains(&"no_multi") {
        out.error("ERR Command not allowed inside a transaction");
        conn.multi_failed = true;
        return After::Continue;
    }
    // A script joins the line of scripts rather than waiting here for the one running.
    if shared.scripts.active() && !on_script_thread() && !super::spec::runs_script(cmd.name) {
        // What stops a script, and MULTI's bookkeeping, run beside it, without the keyspace
        // it holds.
        if allowed_while_busy(cmd, args) {
            return run(shared, conn, i, cmd, HANDLERS, args, out);
        }
        if let Err(e) = wait_for_script(shared) {
            // Refused inside MULTI, as any command: the transaction fails; EXEC ends it.
            if conn.multi.is_some() && cmd.name == "exec" {
                conn.multi = None;
                conn.multi_failed = false;
                conn.watched.clear();
                out.error(&format!("EXECABORT Transaction discarded because of: {e}"));
                return After::Continue;
            }
            conn.multi_failed |= conn.multi.is_some();
            out.error(&e);
            return After::Continue;
        }
    }
    if let Some(queue) = conn.multi.as_mut()
        && !runs_inside_multi(cmd.name)
    {
        queue.push(args.iter().map(|a| a.to_vec()).collect());
        conn.publish();
        out.simple("QUEUED");
        return After::Continue;
    }
    // A script runs on the script thread, which answers through the worker when it ends.
    if super::spec::runs_script(cmd.name) && !on_script_thread() {
        return After::Script;
    }
    // FLUSHALL, FLUSHDB, SWAPDB, scripts and a SORT that looks keys up by pattern run alone:
    // they wait for every other command and hold new ones back. EXEC holds its keys' stripes,
    // or runs alone.
    if cmd.name == "exec" {
        let _locks = exec_lock(shared, conn);
        run(shared, conn, i, cmd, HANDLERS, args, out)
    } else if cmd.name.starts_with("flush")
        || cmd.name == "swapdb"
        || super::sort::reads_patterns(cmd.name, args)
        || super::spec::runs_script(cmd.name)
    {
        let _all = shared.keyspace.write().unwrap_or_else(|e| e.into_inner());
        run(shared, conn, i, cmd, HANDLERS, args, out)
    } else {
        let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
        run(shared, conn, i, cmd, HANDLERS, args, out)
    }
}

/// Answers a command the table does not have.
fn unknown_command(conn: &mut Connection, args: &[&[u8]], out: &mut Reply<'_>) {
    let shown: String = args
        .iter()
        .skip(1)
        .take(3)
        .map(|x| format!("'{}' ", String::from_utf8_lossy(x)))
        .collect();
    out.error(&format!(
        "ERR unknown command '{}', with args beginning with: {shown}",
        String::from_utf8_lossy(args.first().copied().unwrap_or_default())
    ));
    conn.multi_failed |= conn.multi.is_some();
}

/// A replica's primary changed its function libraries: they are read again before the
/// command runs.
fn reload_stale_functions(shared: &Shared) {
    if shared
        .replication
        .functions_stale
        .swap(false, Ordering::AcqRel)
    {
        shared.scripts.with_functions(|f| f.flush());
        if let Err(e) = super::load_libraries(shared) {
            eprintln!("strata: {e}");
        }
    }
}

/// Commands that run while a script is busy: SCRIPT KILL, FUNCTION KILL and STATS, SHUTDOWN,
/// and MULTI, DISCARD and UNWATCH, which touch no key.
fn allowed_while_busy(cmd: &Spec, args: &[&[u8]]) -> bool {
    let sub = args.get(1).map(|s| s.to_ascii_lowercase());
    matches!(cmd.name, "shutdown" | "multi" | "discard" | "unwatch")
        || matches!(
            (cmd.name, sub.as_deref()),
            ("script", Some(b"kill")) | ("function", Some(b"kill" | b"stats"))
        )
}

/// Waits while a script runs, as Redis's clients wait for its one thread, until the script
/// has run `busy-reply-threshold`; from then on commands are answered BUSY.
fn wait_for_script(shared: &Shared) -> Result<(), String> {
    loop {
        if !shared.scripts.active() {
            return Ok(());
        }
        // Handed to the script thread and not started yet: it has run no time.
        let ran = shared.scripts.running_for().unwrap_or_default();
        let threshold = std::time::Duration::from_millis(
            shared.scripts.busy_threshold_ms.load(Ordering::Relaxed),
        );
        if ran >= threshold {
            let kill = if shared.scripts.running_function() {
                "FUNCTION KILL"
            } else {
                "SCRIPT KILL"
            };
            return Err(format!(
                "BUSY Redis is busy running a script. You can only call {kill} or SHUTDOWN NOSAVE."
            ));
        }
        std::thread::sleep((threshold - ran).min(std::time::Duration::from_micros(50)));
    }
}

thread_local! {
    /// True on the script thread, where EVAL and FCALL run rather than being handed on.
    static SCRIPT_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on the script thread.
pub(crate) fn on_script_thread() -> bool {
    SCRIPT_THREAD.with(std::cell::Cell::get)
}

/// Runs a script command on the script thread, for a connection of a worker: `conn` is the
/// script's client, made by [`script_client`]. Its reply is appended to `out`.
pub(crate) fn run_on_script_thread(
    shared: &Shared,
    conn: &mut Connection,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) {
    SCRIPT_THREAD.with(|s| s.set(true));
    /// Drops what a script had gathered when it stops by a panic, so that the next one does
    /// not find itself inside it.
    struct Unwound;
    impl Drop for Unwound {
        fn drop(&mut self) {
            if exec_state::in_exec() {
                let _ = exec_state::end();
            }
        }
    }
    let _unwound = Unwound;
    let protocol = conn.protocol;
    execute(shared, conn, args, &mut Reply::new(out, protocol));
}

/// Commands a RESP2 connection may run while it subscribes.
fn runs_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "ping"
            | "quit"
            | "reset"
    )
}

/// Commands that run at once inside `MULTI` rather than being queued.
fn runs_inside_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "reset" | "quit"
    )
}

/// The keys a queued command names, by its row's key positions; `None` when the command
/// names none there, or may reach beyond them (another database).
fn named_keys<'q>(cmd: &Spec, args: &'q [Vec<u8>]) -> Option<Vec<&'q [u8]>> {
    let (first, last, step) = cmd.keys;
    if first <= 0
        || step <= 0
        || matches!(cmd.name, "move" | "copy" | "sort" | "sort_ro" | "swapdb")
        || super::spec::runs_script(cmd.name)
    {
        return None;
    }
    let n = args.len() as i64;
    let last = if last < 0 {
        n + i64::from(last)
    } else {
        i64::from(last)
    };
    let mut keys = Vec::new();
    let mut i = i64::from(first);
    while i <= last.min(n - 1) {
        keys.push(args[i as usize].as_slice());
        i += i64::from(step);
    }
    Some(keys)
}

/// Takes the locks `EXEC` runs under: the stripes of every key it names and watches when
/// the command table names them all, else the keyspace's write lock.
pub(crate) fn exec_lock<'a>(shared: &'a Shared, conn: &Connection) -> ExecLock<'a> {
    let mut named = Vec::new();
    for args in conn.multi.iter().flatten() {
        let keys = args
            .first()
            .and_then(|n| lookup(n))
            .and_then(|(_, cmd)| named_keys(cmd, args));
        let Some(keys) = keys else {
            let all = shared.keyspace.write().unwrap_or_else(|e| e.into_inner());
            return ExecLock::Alone { _all: all };
        };
        named.extend(keys);
    }
    // Where each database is stored is read under the keyspace lock, which SWAPDB waits for.
    let keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    let prefix = shared.databases.prefix(conn.db);
    let mut keys: Vec<Vec<u8>> = named
        .into_iter()
        .map(|k| crate::store::data_key(prefix, k))
        .collect();
    for w in &conn.watched {
        // A watched key as it was stored when watched, and as it is stored now.
        let now = shared.databases.prefix(w.db);
        keys.push(crate::store::data_key(now, crate::store::user_key(&w.key)));
        keys.push(w.key.clone());
    }
    let stripes = lock_stripes(shared, keys.iter().map(Vec::as_slice));
    let mut held: Vec<usize> = keys.iter().map(|k| shared.stripe(k)).collect();
    held.sort_unstable();
    held.dedup();
    ExecLock::Keys {
        _keyspace: keyspace,
        _stripes: stripes,
        _held: exec_state::hold_stripes(held),
    }
}

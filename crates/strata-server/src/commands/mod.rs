//! The commands the server answers, in Redis's words and reply shapes.
//!
//! Every command is a row of one table (`table.rs`): its name, arity, flags, ACL categories,
//! key positions and handler. Dispatch, arity errors, COMMAND's replies and INFO's
//! per-command statistics are all answered from its descriptions (`spec.rs`). The handlers
//! live by family: `strings.rs`, `hashes.rs`, `lists.rs`, `sets.rs`, `zsets.rs`,
//! `zrange.rs` and `zalgebra.rs` (with `collection.rs`, what the collections share, and
//! `blocking.rs`, the blocking pops), `keys.rs` (the keyspace and expiry), `server.rs`
//! (connection and server), `config.rs` (CONFIG), `info.rs` (INFO), `persistence.rs` (SAVE,
//! BGSAVE, LASTSAVE), `auth.rs` (AUTH, ACL and protected mode) and `transaction.rs`.
//!
//! The rooms beside the handlers: `dispatch.rs` runs a command through its checks,
//! `session.rs` is a connection's state, `keyspace.rs` reads and writes keys, `exec_state.rs`
//! holds the writes of the `EXEC` a thread runs, and `batched.rs` is the path on which plain
//! GETs and SETs of many connections share one engine call.
//!
//! Keys and values are stored as [`crate::store`] lays them out; every read judges expiry
//! by the clock read once when the command starts, so an expired key is invisible to every
//! read from the moment it expires.

mod auth;

mod batched;
mod blocking;
mod client;
mod collection;
mod config;
mod dispatch;
mod exec_state;
mod functions;
mod handlers;
mod hashes;
mod info;
mod keys;
mod keyspace;
mod latency;
mod lists;
mod monitor;
mod persistence;
mod pubsub;
mod scripting;
mod server;
mod session;
mod set_pops;
mod sets;
mod sort;
mod spec;
mod stream;
mod streams;
mod strings;
mod table;
mod transaction;
mod xclaim;
mod xgroups;
mod xinfo;
mod zalgebra;
mod zrange;
mod zsets;

pub(crate) use auth::protected;
pub(crate) use batched::{
    ReadScratch, answer_get, count_batched, is_plain_get, is_plain_set, read_gets, write_sets,
};
pub(crate) use dispatch::execute;
pub(crate) use dispatch::run_on_script_thread;
pub(crate) use keys::expire_cycle;
pub(crate) use pubsub::forget as forget_subscriptions;
pub(crate) use scripting::{load_libraries, script_client};
pub(crate) use session::Connection;
#[cfg(test)]
pub(crate) use spec::lookup;
pub(crate) use spec::{SPECS, Spec};

use std::sync::atomic::Ordering;
use std::time::Instant;

use strata::WriteOptions;

use crate::config::SyncMode;
use crate::resp::Reply;
use crate::shared::{After, Shared};

/// A command's outcome: `Err` holds the whole error line, code first (`ERR ...`).
pub(crate) type Outcome = Result<(), String>;

/// What a handler works with.
pub(crate) struct Ctx<'a, 'o> {
    pub shared: &'a Shared,
    pub conn: &'a mut Connection,
    pub out: &'a mut Reply<'o>,
    /// Unix milliseconds when the command started: every expiry it judges is judged by it.
    pub now: u64,
    pub after: After,
    /// The handlers of the command table, by row: `EXEC` runs its queued commands with them.
    pub handlers: &'static [Handler],
}

/// A command's handler: it answers in `cx.out`.
pub(crate) type Handler = fn(&mut Ctx<'_, '_>, &[&[u8]]) -> Outcome;

pub(crate) fn wrong_args(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

pub(crate) fn engine(e: strata::Error) -> String {
    format!("ERR {e}")
}

pub(crate) fn syntax() -> String {
    "ERR syntax error".into()
}

pub(crate) fn not_an_integer() -> String {
    "ERR value is not an integer or out of range".into()
}

pub(crate) fn parse_i64(b: &[u8]) -> Option<i64> {
    // Redis accepts no sign but `-`, no spaces and no leading zeros (but "0" itself).
    let s = std::str::from_utf8(b).ok()?;
    if s.starts_with('+') || (s.len() > 1 && s.starts_with('0')) || s.starts_with("-0") {
        return None;
    }
    s.parse().ok()
}

pub(crate) fn int_arg(b: &[u8]) -> Result<i64, String> {
    parse_i64(b).ok_or_else(not_an_integer)
}

pub(crate) fn upper(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_uppercase()
}

pub(crate) fn write_opts(shared: &Shared) -> WriteOptions {
    WriteOptions {
        sync: shared.sync_mode() == SyncMode::Always,
    }
}

/// Runs a command that passed the checks, under the lock its caller took, and counts it.
pub(crate) fn run(
    shared: &Shared,
    conn: &mut Connection,
    i: usize,
    cmd: &Spec,
    handlers: &'static [Handler],
    args: &[&[u8]],
    out: &mut Reply<'_>,
) -> After {
    let Some(handler) = handlers.get(i) else {
        out.error(&format!("ERR unknown command '{}'", cmd.name));
        return After::Continue;
    };
    let outer = OUTER.replace(Some(cmd.name));
    let _restore = RestoreOuter(outer);
    // What CLIENT LIST shows is the client's own command, not those a script or EXEC runs.
    if let Some(info) = conn.info.as_ref().filter(|_| outer.is_none()) {
        info.ran(i);
        if has_subcommands(cmd.name) {
            let sub = args
                .get(1)
                .map(|s| String::from_utf8_lossy(s).to_lowercase());
            info.shown().sub_cmd = sub.unwrap_or_default();
        }
    }
    let started = Instant::now();
    let mut ctx = Ctx {
        shared,
        now: shared.clock.now_ms(),
        conn,
        out,
        after: After::Continue,
        handlers,
    };
    let notify = crate::notify::on(shared);
    if notify {
        crate::notify::clear();
    }
    let from_script = outer.is_some_and(scripting::runs_script);
    // A script is shown to MONITOR before the commands it runs.
    if outer.is_none() && scripting::runs_script(cmd.name) && shared.pubsub.monitored() {
        monitor::tell(shared, ctx.conn, args, false);
    }
    let result = handler(&mut ctx, args);
    if monitor::shown_after(cmd) && shared.pubsub.monitored() {
        monitor::tell(shared, ctx.conn, args, from_script);
    }
    let after = ctx.after;
    if outer.is_none() && changes_what_clients_show(cmd.name) {
        ctx.conn.publish();
    }
    if notify && result.is_ok() {
        crate::notify::emit(shared, args);
    }
    let failed = result.as_ref().err().cloned();
    if let Err(e) = result {
        out.error(&e);
        shared.count_error(&e);
    }
    // A command that parks is counted once, when it is served.
    if !matches!(after, After::Block(_)) {
        let took = Took {
            nanos: started.elapsed().as_nanos() as u64,
            failed,
            outer,
        };
        measure(shared, conn, i, cmd, args, &took);
    }
    after
}

thread_local! {
    /// The command running on this thread that runs others (EXEC, EVAL), if any.
    static OUTER: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Puts back the command that ran this one, however the handler ends (a panic on the
/// script thread is caught, and the thread goes on).
struct RestoreOuter(Option<&'static str>);

impl Drop for RestoreOuter {
    fn drop(&mut self) {
        OUTER.set(self.0);
    }
}

/// How a command went, for [`measure`].
struct Took {
    nanos: u64,
    /// Its error reply, if it failed.
    failed: Option<String>,
    /// The command that ran it (EXEC, a script), if not its client.
    outer: Option<&'static str>,
}

/// Counts a command that ran into its statistics (its subcommand's, for CONFIG GET and the
/// like), the slow log and the latency monitor. EXEC goes to the slow log as the commands
/// it ran, a script as itself.
fn measure(shared: &Shared, conn: &Connection, i: usize, cmd: &Spec, args: &[&[u8]], took: &Took) {
    let unknown_sub = took
        .failed
        .as_deref()
        .is_some_and(|e| e.starts_with("ERR unknown subcommand"));
    let sub_stats = match args.get(1) {
        Some(sub) if has_subcommands(cmd.name) && !unknown_sub => {
            let sub = String::from_utf8_lossy(sub).to_lowercase();
            Some(shared.stats.subcommands.get(&format!("{}|{sub}", cmd.name)))
        }
        _ => None,
    };
    if let Some(s) = sub_stats.as_deref().or(shared.command_stats.get(i)) {
        s.record(1, took.nanos);
        if took.failed.is_some() {
            s.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    let micros = took.nanos / 1000;
    let top = took.outer.is_none();
    if ((top && cmd.name != "exec") || took.outer == Some("exec"))
        && shared.stats.slowlog.wants(micros)
    {
        let (addr, name) = match &conn.info {
            Some(info) => (info.addr.as_str(), conn.name.as_deref().unwrap_or_default()),
            None => ("", conn.name.as_deref().unwrap_or_default()),
        };
        let shown = redact(cmd.name, args);
        let shown: Vec<&[u8]> = shown.iter().map(|a| a.as_ref()).collect();
        shared.stats.slowlog.add(&shown, micros, addr, name);
    }
    if top {
        let event = if cmd.flags.contains(&"fast") {
            "fast-command"
        } else {
            "command"
        };
        shared.stats.latency.note(event, took.nanos / 1_000_000);
    }
}

/// The arguments as the slow log keeps them: passwords and ACL rules as "(redacted)".
fn redact<'a>(name: &str, args: &[&'a [u8]]) -> Vec<std::borrow::Cow<'a, [u8]>> {
    use std::borrow::Cow;
    const HIDDEN: &[u8] = b"(redacted)";
    let mut out: Vec<Cow<'a, [u8]>> = args.iter().map(|a| Cow::Borrowed(*a)).collect();
    let sub = args.get(1).map(|s| s.to_ascii_lowercase());
    let hide_from = match (name, sub.as_deref()) {
        ("auth", _) => Some(1),
        ("acl", Some(b"setuser")) => Some(2),
        _ => None,
    };
    if let Some(from) = hide_from {
        for a in out.iter_mut().skip(from) {
            *a = Cow::Borrowed(HIDDEN);
        }
    }
    // The values after these words, up to the count given.
    let secrets: &[(&[u8], usize)] = match (name, sub.as_deref()) {
        ("hello", _) => &[(b"auth", 2)],
        ("migrate", _) => &[(b"auth", 1), (b"auth2", 2)],
        ("config", Some(b"set")) => &[(b"requirepass", 1), (b"masterauth", 1)],
        _ => &[],
    };
    let mut i = 0;
    while i < args.len() {
        let word = args
            .get(i)
            .map(|a| a.to_ascii_lowercase())
            .unwrap_or_default();
        if let Some(&(_, n)) = secrets.iter().find(|(w, _)| *w == word.as_slice()) {
            for a in out.iter_mut().skip(i + 1).take(n) {
                *a = Cow::Borrowed(HIDDEN);
            }
            i += n;
        }
        i += 1;
    }
    out
}

/// Commands whose name alone says little: CLIENT LIST and the statistics show them with
/// their subcommand.
pub(crate) fn has_subcommands(name: &str) -> bool {
    spec::SUBCOMMANDS.iter().any(|(n, _)| *n == name)
}

/// Commands that may change what CLIENT LIST shows of their connection.
fn changes_what_clients_show(name: &str) -> bool {
    matches!(
        name,
        "select"
            | "hello"
            | "client"
            | "auth"
            | "reset"
            | "multi"
            | "exec"
            | "discard"
            | "subscribe"
            | "psubscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "punsubscribe"
            | "sunsubscribe"
    )
}

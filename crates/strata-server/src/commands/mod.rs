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
mod lists;
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
    let stats = shared.command_stats.get(i);
    let Some(handler) = handlers.get(i) else {
        out.error(&format!("ERR unknown command '{}'", cmd.name));
        return After::Continue;
    };
    if let Some(info) = &conn.info {
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
    let result = handler(&mut ctx, args);
    let after = ctx.after;
    if changes_what_clients_show(cmd.name) {
        ctx.conn.publish();
    }
    if notify && result.is_ok() {
        crate::notify::emit(shared, args);
    }
    if let Err(e) = result {
        out.error(&e);
        shared.count_error(&e);
        if let Some(s) = stats {
            s.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    // A command that parks is counted once, when it is served.
    if let Some(s) = stats.filter(|_| !matches!(after, After::Block(_))) {
        // Relaxed: statistics.
        s.calls.fetch_add(1, Ordering::Relaxed);
        s.micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
    after
}

/// Commands whose name alone says little: CLIENT LIST shows them with their subcommand.
pub(crate) fn has_subcommands(name: &str) -> bool {
    matches!(
        name,
        "acl"
            | "client"
            | "command"
            | "config"
            | "function"
            | "latency"
            | "memory"
            | "object"
            | "pubsub"
            | "script"
            | "slowlog"
            | "xgroup"
            | "xinfo"
    )
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

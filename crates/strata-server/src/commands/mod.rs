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
mod geo;
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
mod replication;
mod run;
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
pub(crate) use client::{pause_in_force, paused};
pub(crate) use dispatch::execute;
pub(crate) use dispatch::run_on_script_thread;
pub(crate) use keys::expire_cycle;
pub(crate) use pubsub::forget as forget_subscriptions;
pub(crate) use replication::{become_replica, wait_timed_out};
pub(crate) use run::run;

pub(crate) use config::apply_settings;
pub(crate) use scripting::{load_libraries, script_client};
pub(crate) use session::Connection;
#[cfg(test)]
pub(crate) use spec::lookup;
pub(crate) use spec::{SPECS, Spec};
pub(crate) use spec::{SUBCOMMAND_CATEGORIES, subcommands_of};

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

//! The command table: one row per command the server answers, with its name, arity, flags,
//! ACL categories, key positions and handler. Dispatch, arity errors, `COMMAND` and
//! `INFO commandstats` all read it; adding a command is one row here and one handler.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::{Ctx, Outcome, auth, keys, server, strings, transaction};

/// One command: its row in the table.
pub(crate) struct Command {
    /// The name, in lower case.
    pub name: &'static str,
    /// Redis's arity: `n` exactly `n` arguments with the name, `-n` at least `n`.
    pub arity: i32,
    pub flags: &'static [&'static str],
    /// ACL categories, without the `@`.
    pub categories: &'static [&'static str],
    /// First key, last key (negative: from the end) and step, as COMMAND reports them.
    pub keys: (i32, i32, i32),
    pub run: fn(&mut Ctx<'_, '_>, &[&[u8]]) -> Outcome,
}

const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom", "fast"];
const WS: &[&str] = &["write", "denyoom"];
const RS: &[&str] = &["readonly"];
/// Connection commands a client may send before it authenticates.
const C: &[&str] = &["fast", "loading", "stale", "no-auth"];
/// Connection commands that need an authenticated client.
const CA: &[&str] = &["fast", "loading", "stale"];
const A: &[&str] = &["admin", "noscript", "loading", "stale"];
const ONE: (i32, i32, i32) = (1, 1, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);
const NONE: (i32, i32, i32) = (0, 0, 0);
/// MULTI, DISCARD, WATCH and UNWATCH.
const TX: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];

macro_rules! cmd {
    ($name:literal, $arity:expr, $flags:expr, [$($cat:literal),*], $keys:expr, $run:path) => {
        Command {
            name: $name,
            arity: $arity,
            flags: $flags,
            categories: &[$($cat),*],
            keys: $keys,
            run: $run,
        }
    };
}

/// Every command the server answers.
pub(crate) static TABLE: &[Command] = &[
    // Strings.
    cmd!("get", 2, R, ["read", "string", "fast"], ONE, strings::get),
    cmd!(
        "set",
        -3,
        WS,
        ["write", "string", "slow"],
        ONE,
        strings::set
    ),
    cmd!(
        "setnx",
        3,
        W,
        ["write", "string", "fast"],
        ONE,
        strings::setnx
    ),
    cmd!(
        "setex",
        4,
        WS,
        ["write", "string", "slow"],
        ONE,
        strings::setex
    ),
    cmd!(
        "psetex",
        4,
        WS,
        ["write", "string", "slow"],
        ONE,
        strings::setex
    ),
    cmd!(
        "getex",
        -2,
        &["write", "fast"],
        ["write", "string", "fast"],
        ONE,
        strings::getex
    ),
    cmd!(
        "getdel",
        2,
        &["write", "fast"],
        ["write", "string", "fast"],
        ONE,
        strings::getdel
    ),
    cmd!(
        "getset",
        3,
        W,
        ["write", "string", "fast"],
        ONE,
        strings::getset
    ),
    cmd!(
        "mget",
        -2,
        R,
        ["read", "string", "fast"],
        ALL,
        strings::mget
    ),
    cmd!(
        "mset",
        -3,
        WS,
        ["write", "string", "slow"],
        (1, -1, 2),
        strings::mset
    ),
    cmd!(
        "msetnx",
        -3,
        WS,
        ["write", "string", "slow"],
        (1, -1, 2),
        strings::msetnx
    ),
    cmd!(
        "incr",
        2,
        W,
        ["write", "string", "fast"],
        ONE,
        strings::incr
    ),
    cmd!(
        "decr",
        2,
        W,
        ["write", "string", "fast"],
        ONE,
        strings::incr
    ),
    cmd!(
        "incrby",
        3,
        W,
        ["write", "string", "fast"],
        ONE,
        strings::incr
    ),
    cmd!(
        "decrby",
        3,
        W,
        ["write", "string", "fast"],
        ONE,
        strings::incr
    ),
    cmd!(
        "incrbyfloat",
        3,
        W,
        ["write", "string", "fast"],
        ONE,
        strings::incrbyfloat
    ),
    cmd!(
        "append",
        3,
        W,
        ["write", "string", "fast"],
        ONE,
        strings::append
    ),
    cmd!(
        "strlen",
        2,
        R,
        ["read", "string", "fast"],
        ONE,
        strings::strlen
    ),
    cmd!(
        "getrange",
        4,
        RS,
        ["read", "string", "slow"],
        ONE,
        strings::getrange
    ),
    cmd!(
        "substr",
        4,
        RS,
        ["read", "string", "slow"],
        ONE,
        strings::getrange
    ),
    cmd!(
        "setrange",
        4,
        WS,
        ["write", "string", "slow"],
        ONE,
        strings::setrange
    ),
    cmd!(
        "lcs",
        -3,
        RS,
        ["read", "string", "slow"],
        (1, 2, 1),
        strings::lcs
    ),
    cmd!(
        "setbit",
        4,
        W,
        ["write", "bitmap", "slow"],
        ONE,
        strings::setbit
    ),
    cmd!(
        "getbit",
        3,
        R,
        ["read", "bitmap", "fast"],
        ONE,
        strings::getbit
    ),
    cmd!(
        "bitcount",
        -2,
        RS,
        ["read", "bitmap", "slow"],
        ONE,
        strings::bitcount
    ),
    cmd!(
        "bitpos",
        -3,
        RS,
        ["read", "bitmap", "slow"],
        ONE,
        strings::bitpos
    ),
    // The keyspace and expiry.
    cmd!(
        "del",
        -2,
        &["write"],
        ["keyspace", "write", "slow"],
        ALL,
        keys::del
    ),
    cmd!(
        "unlink",
        -2,
        &["write", "fast"],
        ["keyspace", "write", "fast"],
        ALL,
        keys::del
    ),
    cmd!(
        "exists",
        -2,
        R,
        ["keyspace", "read", "fast"],
        ALL,
        keys::exists
    ),
    cmd!(
        "touch",
        -2,
        R,
        ["keyspace", "read", "fast"],
        ALL,
        keys::exists
    ),
    cmd!("type", 2, R, ["keyspace", "read", "fast"], ONE, keys::type_),
    cmd!(
        "keys",
        2,
        RS,
        ["keyspace", "read", "slow", "dangerous"],
        NONE,
        keys::keys
    ),
    cmd!(
        "scan",
        -2,
        RS,
        ["keyspace", "read", "slow"],
        NONE,
        keys::scan
    ),
    cmd!(
        "randomkey",
        1,
        RS,
        ["keyspace", "read", "slow"],
        NONE,
        keys::randomkey
    ),
    cmd!(
        "rename",
        3,
        &["write"],
        ["keyspace", "write", "slow"],
        (1, 2, 1),
        keys::rename
    ),
    cmd!(
        "renamenx",
        3,
        W,
        ["keyspace", "write", "fast"],
        (1, 2, 1),
        keys::rename
    ),
    cmd!(
        "copy",
        -3,
        WS,
        ["keyspace", "write", "slow"],
        (1, 2, 1),
        keys::copy
    ),
    cmd!(
        "move",
        3,
        &["write", "fast"],
        ["keyspace", "write", "fast"],
        ONE,
        keys::move_
    ),
    cmd!(
        "dbsize",
        1,
        R,
        ["keyspace", "read", "fast"],
        NONE,
        keys::dbsize
    ),
    cmd!(
        "flushdb",
        -1,
        &["write"],
        ["keyspace", "write", "slow", "dangerous"],
        NONE,
        keys::flushdb
    ),
    cmd!(
        "flushall",
        -1,
        &["write"],
        ["keyspace", "write", "slow", "dangerous"],
        NONE,
        keys::flushall
    ),
    cmd!(
        "expire",
        -3,
        &["write", "fast"],
        ["keyspace", "write", "fast"],
        ONE,
        keys::expire
    ),
    cmd!(
        "pexpire",
        -3,
        &["write", "fast"],
        ["keyspace", "write", "fast"],
        ONE,
        keys::expire
    ),
    cmd!(
        "expireat",
        -3,
        &["write", "fast"],
        ["keyspace", "write", "fast"],
        ONE,
        keys::expire
    ),
    cmd!(
        "pexpireat",
        -3,
        &["write", "fast"],
        ["keyspace", "write", "fast"],
        ONE,
        keys::expire
    ),
    cmd!("ttl", 2, R, ["keyspace", "read", "fast"], ONE, keys::ttl),
    cmd!("pttl", 2, R, ["keyspace", "read", "fast"], ONE, keys::ttl),
    cmd!(
        "expiretime",
        2,
        R,
        ["keyspace", "read", "fast"],
        ONE,
        keys::ttl
    ),
    cmd!(
        "pexpiretime",
        2,
        R,
        ["keyspace", "read", "fast"],
        ONE,
        keys::ttl
    ),
    cmd!(
        "persist",
        2,
        &["write", "fast"],
        ["keyspace", "write", "fast"],
        ONE,
        keys::persist
    ),
    // The connection and the server.
    cmd!("ping", -1, CA, ["fast", "connection"], NONE, server::ping),
    cmd!("echo", 2, CA, ["fast", "connection"], NONE, server::echo),
    cmd!("quit", -1, C, ["fast", "connection"], NONE, server::quit),
    cmd!(
        "select",
        2,
        CA,
        ["fast", "connection"],
        NONE,
        server::select
    ),
    cmd!("auth", -2, C, ["fast", "connection"], NONE, auth::auth),
    cmd!(
        "acl",
        -2,
        A,
        ["admin", "slow", "dangerous"],
        NONE,
        auth::acl
    ),
    cmd!("hello", -1, C, ["fast", "connection"], NONE, server::hello),
    cmd!("reset", 1, C, ["fast", "connection"], NONE, server::reset),
    cmd!(
        "client",
        -2,
        &["loading", "stale"],
        ["slow", "connection"],
        NONE,
        server::client
    ),
    cmd!(
        "command",
        -1,
        &["loading", "stale"],
        ["slow", "connection"],
        NONE,
        server::command
    ),
    cmd!(
        "config",
        -2,
        A,
        ["admin", "slow", "dangerous"],
        NONE,
        server::config
    ),
    cmd!(
        "info",
        -1,
        &["loading", "stale"],
        ["slow", "dangerous"],
        NONE,
        server::info
    ),
    cmd!(
        "time",
        1,
        &["loading", "stale", "fast"],
        ["fast"],
        NONE,
        server::time
    ),
    cmd!(
        "compact",
        -1,
        A,
        ["admin", "slow", "dangerous"],
        NONE,
        server::compact
    ),
    // Transactions.
    cmd!(
        "multi",
        1,
        TX,
        ["fast", "transaction"],
        NONE,
        transaction::multi
    ),
    cmd!(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        ["slow", "transaction"],
        NONE,
        transaction::exec
    ),
    cmd!(
        "discard",
        1,
        TX,
        ["fast", "transaction"],
        NONE,
        transaction::discard
    ),
    cmd!(
        "watch",
        -2,
        TX,
        ["fast", "transaction"],
        ALL,
        transaction::watch
    ),
    cmd!(
        "unwatch",
        1,
        TX,
        ["fast", "transaction"],
        NONE,
        transaction::unwatch
    ),
    cmd!(
        "save",
        1,
        &["admin", "noscript", "no_async_loading", "no_multi"],
        ["admin", "slow", "dangerous"],
        NONE,
        server::save
    ),
    cmd!(
        "bgsave",
        -1,
        &["admin", "noscript", "no_async_loading"],
        ["admin", "slow", "dangerous"],
        NONE,
        server::bgsave
    ),
    cmd!(
        "lastsave",
        1,
        &["loading", "stale", "fast"],
        ["fast", "admin", "dangerous"],
        NONE,
        server::lastsave
    ),
];

/// The table's rows by name.
fn index() -> &'static HashMap<&'static str, usize> {
    static INDEX: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    INDEX.get_or_init(|| TABLE.iter().enumerate().map(|(i, c)| (c.name, i)).collect())
}

/// The row of `name` (any case), with its place in the table.
pub(crate) fn lookup(name: &[u8]) -> Option<(usize, &'static Command)> {
    // Command names are short: lower-cased on the stack, without an allocation.
    let mut buf = [0u8; 32];
    let dst = buf.get_mut(..name.len())?;
    dst.copy_from_slice(name);
    dst.make_ascii_lowercase();
    let i = *index().get(std::str::from_utf8(dst).ok()?)?;
    Some((i, TABLE.get(i)?))
}

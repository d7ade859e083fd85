//! The commands' descriptions, [`SPECS`], made from the command table's rows
//! (`table.rs`): what dispatch, ACL checks, `COMMAND` and `INFO commandstats` read.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::table::command_rows;

/// A command's description: its row of the table without the handler.
pub(crate) struct Spec {
    /// The name, in lower case.
    pub name: &'static str,
    /// Redis's arity: `n` exactly `n` arguments with the name, `-n` at least `n`.
    pub arity: i32,
    pub flags: &'static [&'static str],
    /// ACL categories, without the `@`.
    pub categories: &'static [&'static str],
    /// First key, last key (negative: from the end) and step, as COMMAND reports them.
    pub keys: (i32, i32, i32),
}

const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom", "fast"];
const WS: &[&str] = &["write", "denyoom"];
/// A write that frees memory rather than taking it (HDEL, SREM, SPOP, SMOVE).
const WF: &[&str] = &["write", "fast"];
const RS: &[&str] = &["readonly"];
/// Connection commands a client may send before it authenticates.
const C: &[&str] = &["fast", "loading", "stale", "no-auth"];
/// Connection commands that need an authenticated client.
const CA: &[&str] = &["fast", "loading", "stale"];
const A: &[&str] = &["admin", "noscript", "loading", "stale"];
const REPL: &[&str] = &["admin", "noscript", "loading", "stale", "no_async_loading"];
const ROLE: &[&str] = &["noscript", "loading", "stale", "fast"];
const PSYNC: &[&str] = &["admin", "noscript", "no_async_loading", "no_multi"];
const PS: &[&str] = &["pubsub", "noscript", "loading", "stale"];
const PF: &[&str] = &["pubsub", "loading", "stale", "fast"];
const PL: &[&str] = &["pubsub", "loading", "stale"];
const XR: &[&str] = &["readonly", "blocking", "movablekeys"];
const XW: &[&str] = &["write", "blocking", "movablekeys"];
/// Commands whose keys are counted by an argument (`numkeys`): their key positions move.
const RM: &[&str] = &["readonly", "movablekeys"];
const WSM: &[&str] = &["write", "denyoom", "movablekeys"];
const WM: &[&str] = &["write", "movablekeys"];
const WBM: &[&str] = &["write", "blocking", "movablekeys"];
/// SORT, whose `STORE` destination moves.
const SORT: &[&str] = &["write", "denyoom", "movablekeys"];
const SORT_RO: &[&str] = &["readonly", "movablekeys"];
/// Commands that run a script: their keys are counted (`numkeys`).
const SCRIPT: &[&str] = &[
    "noscript",
    "stale",
    "skip_monitor",
    "may_replicate",
    "no_mandatory_keys",
    "movablekeys",
];
const SCRIPT_RO: &[&str] = &[
    "noscript",
    "stale",
    "skip_monitor",
    "no_mandatory_keys",
    "movablekeys",
    "readonly",
];
const TWO: (i32, i32, i32) = (2, 2, 1);
const ONE: (i32, i32, i32) = (1, 1, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);
const NONE: (i32, i32, i32) = (0, 0, 0);
/// MULTI, DISCARD, WATCH and UNWATCH.
const TX: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];

/// The subcommands of each command that has them, as COMMAND LIST names them.
pub(crate) const SUBCOMMANDS: &[(&str, &[&str])] = &[
    (
        "acl",
        &[
            "cat", "deluser", "dryrun", "getuser", "list", "load", "log", "save", "setuser",
            "users", "whoami",
        ],
    ),
    (
        "client",
        &[
            "getname",
            "getredir",
            "help",
            "id",
            "info",
            "kill",
            "list",
            "no-evict",
            "pause",
            "reply",
            "setinfo",
            "setname",
            "trackinginfo",
            "unblock",
            "unpause",
        ],
    ),
    ("command", &["count", "docs", "getkeys", "info", "list"]),
    (
        "cluster",
        &[
            "help", "info", "keyslot", "myid", "nodes", "shards", "slots",
        ],
    ),
    ("config", &["get", "resetstat", "rewrite", "set"]),
    (
        "function",
        &[
            "delete", "dump", "flush", "kill", "list", "load", "restore", "stats",
        ],
    ),
    (
        "latency",
        &[
            "doctor",
            "graph",
            "help",
            "histogram",
            "history",
            "latest",
            "reset",
        ],
    ),
    ("memory", &["doctor", "help", "stats", "usage"]),
    (
        "object",
        &["encoding", "freq", "help", "idletime", "refcount"],
    ),
    (
        "pubsub",
        &[
            "channels",
            "help",
            "numpat",
            "numsub",
            "shardchannels",
            "shardnumsub",
        ],
    ),
    ("script", &["exists", "flush", "help", "kill", "load"]),
    ("slowlog", &["get", "help", "len", "reset"]),
    (
        "xgroup",
        &[
            "create",
            "createconsumer",
            "delconsumer",
            "destroy",
            "help",
            "setid",
        ],
    ),
    ("xinfo", &["consumers", "groups", "help", "stream"]),
];

/// Subcommands whose ACL categories are not their command's, as Redis 7.0 files them: CLIENT's
/// operator subcommands are `@admin` and `@dangerous` where CLIENT itself is not.
pub(crate) const SUBCOMMAND_CATEGORIES: &[(&str, &str, &[&str])] = &[
    ("client", "kill", OPERATOR),
    ("client", "list", OPERATOR),
    ("client", "no-evict", OPERATOR),
    ("client", "pause", OPERATOR),
    ("client", "unblock", OPERATOR),
    ("client", "unpause", OPERATOR),
];
const OPERATOR: &[&str] = &["admin", "slow", "dangerous", "connection"];

/// The categories of `name`'s subcommand `sub` where they are not `name`'s own.
pub(crate) fn subcommand_categories(name: &str, sub: &[u8]) -> Option<&'static [&'static str]> {
    SUBCOMMAND_CATEGORIES
        .iter()
        .find(|(n, s, _)| *n == name && s.as_bytes().eq_ignore_ascii_case(sub))
        .map(|(_, _, c)| *c)
}

/// The subcommands of `name`, when it is a command that has them.
pub(crate) fn subcommands_of(name: &str) -> Option<&'static [&'static str]> {
    SUBCOMMANDS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// The subcommands of row `i` of the command table, looked up once per row: the path every
/// command takes asks, and pays an index, not a search by name.
pub(crate) fn subcommands_of_row(i: usize) -> Option<&'static [&'static str]> {
    static BY_ROW: OnceLock<Vec<Option<&'static [&'static str]>>> = OnceLock::new();
    let rows = BY_ROW.get_or_init(|| SPECS.iter().map(|c| subcommands_of(c.name)).collect());
    rows.get(i).copied().flatten()
}

/// Commands whose name alone says little: CLIENT LIST and the statistics show them with
/// their subcommand.
pub(crate) fn has_subcommands(name: &str) -> bool {
    SUBCOMMANDS.iter().any(|(n, _)| *n == name)
}

/// The commands that run a script: they run alone.
pub(crate) fn runs_script(name: &str) -> bool {
    matches!(
        name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
    )
}

macro_rules! specs {
    ($((
        $name:literal, $arity:expr, $flags:expr, [$($cat:literal),*], $keys:expr, $run:path
    )),* $(,)?) => {
        /// Every command the server answers, in the table's order.
        pub(crate) static SPECS: &[Spec] = &[$(Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            categories: &[$($cat),*],
            keys: $keys,
        }),*];
    };
}

command_rows!(specs);

/// The table's rows by name.
fn index() -> &'static HashMap<&'static str, usize> {
    static INDEX: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    INDEX.get_or_init(|| SPECS.iter().enumerate().map(|(i, c)| (c.name, i)).collect())
}

/// The row of `name` (any case), with its place in the table.
pub(crate) fn lookup(name: &[u8]) -> Option<(usize, &'static Spec)> {
    // Command names are short: lower-cased on the stack, without an allocation.
    let mut buf = [0u8; 32];
    let dst = buf.get_mut(..name.len())?;
    dst.copy_from_slice(name);
    dst.make_ascii_lowercase();
    let i = *index().get(std::str::from_utf8(dst).ok()?)?;
    Some((i, SPECS.get(i)?))
}

/// Whether `argc` arguments (with the name) fit `cmd`'s arity.
pub(crate) fn arity_ok(cmd: &Spec, argc: usize) -> bool {
    let argc = argc as i64;
    let arity = i64::from(cmd.arity);
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

//! Users and what they may do, as Redis 6+ has them: `ACL SETUSER` rules, passwords kept as
//! SHA-256 digests, allowed commands (by name or by the categories of the command table) and
//! key patterns for reading, writing or both.
//!
//! A user's allowed commands are a flag per row of the command table, so a permission check
//! is an index into a vector; its keys are found from the row's key positions. A user with
//! every command and every key (`default`, unless changed) is *unrestricted*, and its
//! commands skip the check.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::commands::{SPECS, Spec};
use crate::glob;

const BAD_HASH: &str = "The password hash must be exactly 64 characters and contain only \
     lowercase hexadecimal characters";

/// A password's SHA-256 digest.
pub(crate) type Digest32 = [u8; 32];

/// The categories `ACL CAT` lists, as Redis 7.0 names them.
pub(crate) const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// A key pattern and what it allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyPattern {
    pub read: bool,
    pub write: bool,
    pub pattern: Vec<u8>,
    shape: Shape,
}

/// How a pattern is matched, found once when it is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `prefix*`, with no other special byte: the prefix's length.
    Prefix(usize),
    /// No special byte at all.
    Exact,
    Glob,
}

impl KeyPattern {
    pub(crate) fn new(read: bool, write: bool, pattern: &[u8]) -> Self {
        let special = |b: &u8| matches!(b, b'*' | b'?' | b'[' | b'\\');
        let shape = match pattern.split_last() {
            Some((b'*', prefix)) if !prefix.iter().any(special) => Shape::Prefix(prefix.len()),
            _ if !pattern.iter().any(special) => Shape::Exact,
            _ => Shape::Glob,
        };
        KeyPattern {
            read,
            write,
            pattern: pattern.to_vec(),
            shape,
        }
    }

    /// Whether `key` matches: the common shapes directly, the rest through the glob matcher.
    fn matches(&self, key: &[u8]) -> bool {
        match self.shape {
            Shape::Prefix(n) => key.starts_with(self.pattern.get(..n).unwrap_or_default()),
            Shape::Exact => key == self.pattern.as_slice(),
            Shape::Glob => glob::matches(&self.pattern, key),
        }
    }
}

/// One user.
#[derive(Clone, Debug)]
pub(crate) struct User {
    pub name: String,
    /// Distinct for every user created: a user deleted and made again under the same name
    /// is another user, whose rights its predecessor's connections do not get.
    pub id: u64,
    pub enabled: bool,
    /// Any password authenticates.
    pub nopass: bool,
    pub passwords: Vec<Digest32>,
    /// One flag per row of [`SPECS`].
    allowed: Vec<bool>,
    /// Exceptions by first argument (`+config|get`, `-client|kill`, `+select|0`): the row,
    /// the subcommand or first argument in lower case, and whether it is allowed. They
    /// outweigh the row's flag; a rule on the whole command or a category drops them.
    sub_rules: Vec<(usize, Vec<u8>, bool)>,
    /// The command rules since the last `+@all` or `-@all`, for display.
    command_rules: Vec<String>,
    /// The last `+@all`/`-@all` (`allcommands`/`nocommands`) was `+@all`.
    base_all: bool,
    pub keys: Vec<KeyPattern>,
    /// `&*`: every channel.
    all_channels: bool,
    /// The `&pattern` rules otherwise: channels the user may publish and subscribe to.
    channels: Vec<Vec<u8>>,
}

/// Why a command was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Denied {
    Command,
    /// The key at this argument position.
    Key(usize),
    /// The channel at this argument position.
    Channel(usize),
}

impl User {
    /// A user as `ACL SETUSER` creates it: off, no passwords, no keys, no commands.
    pub(crate) fn new(name: &str) -> Self {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        User {
            name: name.to_string(),
            // Relaxed: only distinctness matters.
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            allowed: vec![false; SPECS.len()],
            sub_rules: Vec::new(),
            command_rules: Vec::new(),
            base_all: false,
            keys: Vec::new(),
            all_channels: false,
            channels: Vec::new(),
        }
    }

    /// `default` as a fresh server has it: on, no password, every command and key.
    pub(crate) fn default_user() -> Self {
        let mut u = User::new("default");
        for rule in ["on", "nopass", "~*", "&*", "+@all"] {
            // The rules are valid.
            let _ = u.apply(rule.as_bytes());
        }
        u
    }

    /// Every command, every key, enabled: nothing to check.
    pub(crate) fn unrestricted(&self) -> bool {
        self.enabled
            && self.all_channels
            && self.allowed.iter().all(|&a| a)
            && self.sub_rules.iter().all(|(_, _, allow)| *allow)
            && self
                .keys
                .iter()
                .any(|k| k.read && k.write && k.pattern == b"*")
    }

    /// Whether `password` authenticates this user (compared as digests, in constant time).
    pub(crate) fn accepts(&self, password: &[u8]) -> bool {
        // Hashed whatever the user's state, so that the time taken tells nothing of it.
        let given = digest(password);
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        // Every stored digest is compared, whatever matched before.
        self.passwords
            .iter()
            .fold(false, |found, d| found | constant_time_eq(d, &given))
    }

    /// May this user run `cmd` (row `index`) with `args`?
    pub(crate) fn check(&self, index: usize, cmd: &Spec, args: &[&[u8]]) -> Result<(), Denied> {
        self.check_with_hint(index, cmd, args, &mut 0)
    }

    /// As [`User::check`]. The walk over the key patterns starts at `hint`, and `hint` is
    /// left at the pattern that granted the last key. A connection that keeps its hint finds
    /// its usual pattern first; the answer does not depend on where the walk starts.
    pub(crate) fn check_with_hint(
        &self,
        index: usize,
        cmd: &Spec,
        args: &[&[u8]],
        hint: &mut usize,
    ) -> Result<(), Denied> {
        if !self.command_allowed(index, args) {
            return Err(Denied::Command);
        }
        let needed = needs(index, cmd, args);
        let n = self.keys.len();
        let start = if *hint < n { *hint } else { 0 };
        for i in command_keys(cmd, args) {
            let Some(key) = args.get(i) else { continue };
            // SORT reads the key it sorts and writes only the one it stores into.
            let (read, write) = match cmd.name {
                "sort" => (i == 1, i != 1),
                _ => needed,
            };
            // Each need may be met by a different pattern (`%R~a*` and `%W~a*`); patterns that
            // would add nothing are not matched.
            let (mut can_read, mut can_write) = (!read, !write);
            let order = (start..n).chain(0..start);
            for (at, k) in order.filter_map(|at| Some((at, self.keys.get(at)?))) {
                if (can_read || !k.read) && (can_write || !k.write) {
                    continue;
                }
                if k.matches(key) {
                    can_read |= k.read;
                    can_write |= k.write;
                    if can_read && can_write {
                        *hint = at;
                        break;
                    }
                }
            }
            if !(can_read && can_write) {
                return Err(Denied::Key(i));
            }
        }
        self.check_channels(cmd, args)
    }

    /// Whether the user may run row `index` with these arguments: a rule on its subcommand
    /// (or first argument), else the rule on the command.
    fn command_allowed(&self, index: usize, args: &[&[u8]]) -> bool {
        if !self.sub_rules.is_empty()
            && let Some(first) = args.get(1)
        {
            let found = self
                .sub_rules
                .iter()
                .rev()
                .find(|(i, sub, _)| *i == index && sub.eq_ignore_ascii_case(first));
            if let Some((_, _, allow)) = found {
                return *allow;
            }
        }
        self.allowed.get(index).copied().unwrap_or(false)
    }

    /// The channels a pub/sub command names, against the user's channel rules.
    fn check_channels(&self, cmd: &Spec, args: &[&[u8]]) -> Result<(), Denied> {
        if self.all_channels {
            return Ok(());
        }
        let (last, pattern) = match cmd.name {
            "publish" | "spublish" => (2, false),
            "subscribe" | "ssubscribe" => (args.len(), false),
            "psubscribe" => (args.len(), true),
            _ => return Ok(()),
        };
        for (i, channel) in args.iter().enumerate().take(last).skip(1) {
            if !self.channel_allowed(channel, pattern) {
                return Err(Denied::Channel(i));
            }
        }
        Ok(())
    }

    /// Applies one `ACL SETUSER` rule.
    pub(crate) fn apply(&mut self, rule: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(rule).into_owned();
        let bad = |why: &str| format!("Error in ACL SETUSER modifier '{text}': {why}");
        let lower = text.to_ascii_lowercase();
        match lower.as_str() {
            "on" => self.enabled = true,
            "off" => self.enabled = false,
            "nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            "resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            "allkeys" => self.apply(b"~*")?,
            "resetkeys" => self.keys.clear(),
            "allchannels" => self.apply(b"&*")?,
            "resetchannels" => {
                self.all_channels = false;
                self.channels.clear();
            }
            "allcommands" => self.apply(b"+@all")?,
            "nocommands" => self.apply(b"-@all")?,
            "reset" => {
                for r in ["resetpass", "resetkeys", "resetchannels", "off", "-@all"] {
                    self.apply(r.as_bytes())?;
                }
            }
            _ => match rule.split_first() {
                Some((b'>', pw)) => {
                    let d = digest(pw);
                    if !self.passwords.contains(&d) {
                        self.passwords.push(d);
                    }
                    self.nopass = false;
                }
                Some((b'<', pw)) => {
                    let d = digest(pw);
                    self.passwords.retain(|p| *p != d);
                }
                Some((b'#', hex)) => {
                    let d = parse_digest(hex).ok_or_else(|| bad(BAD_HASH))?;
                    if !self.passwords.contains(&d) {
                        self.passwords.push(d);
                    }
                    self.nopass = false;
                }
                Some((b'!', hex)) => {
                    let d = parse_digest(hex).ok_or_else(|| bad(BAD_HASH))?;
                    self.passwords.retain(|p| *p != d);
                }
                Some((b'~', pattern)) => self.add_keys(true, true, pattern),
                Some((b'%', rest)) => {
                    let tilde = rest
                        .iter()
                        .position(|&b| b == b'~')
                        .ok_or_else(|| bad("Syntax error"))?;
                    let (flags, pattern) = rest.split_at(tilde);
                    let (mut read, mut write) = (false, false);
                    for f in flags {
                        match f.to_ascii_uppercase() {
                            b'R' => read = true,
                            b'W' => write = true,
                            _ => return Err(bad("Syntax error")),
                        }
                    }
                    if !read && !write {
                        return Err(bad("Syntax error"));
                    }
                    self.add_keys(read, write, pattern.get(1..).unwrap_or_default());
                }
                Some((b'&', pattern)) => {
                    if pattern == b"*" {
                        self.all_channels = true;
                        self.channels.clear();
                    } else if !self.all_channels && !self.channels.iter().any(|c| c == pattern) {
                        self.channels.push(pattern.to_vec());
                    }
                }
                Some((&sign @ (b'+' | b'-'), what)) => {
                    let what = String::from_utf8_lossy(what).to_ascii_lowercase();
                    self.command_rule(sign == b'+', &what, &bad)?;
                }
                Some((b'(', _)) => {
                    return Err(bad("Selectors are not supported"));
                }
                _ => return Err(bad("Syntax error")),
            },
        }
        Ok(())
    }

    /// A `+...` or `-...` rule: a command, a category (`@name`), `@all`, or a command's
    /// subcommand or first argument (`cmd|sub`).
    fn command_rule(
        &mut self,
        allow: bool,
        what: &str,
        bad: &dyn Fn(&str) -> String,
    ) -> Result<(), String> {
        let unknown = || bad("Unknown command or category name in ACL");
        if let Some(category) = what.strip_prefix('@') {
            if category == "all" {
                self.allowed.iter_mut().for_each(|a| *a = allow);
                self.sub_rules.clear();
                self.base_all = allow;
                self.command_rules.clear();
                return Ok(());
            }
            if !CATEGORIES.contains(&category) {
                return Err(unknown());
            }
            for (i, c) in SPECS.iter().enumerate() {
                if c.categories.contains(&category)
                    && let Some(a) = self.allowed.get_mut(i)
                {
                    *a = allow;
                    self.sub_rules.retain(|(row, _, _)| *row != i);
                }
            }
            // Subcommands filed under categories of their own follow their categories.
            for (name, sub, cats) in crate::commands::SUBCOMMAND_CATEGORIES {
                let row = SPECS.iter().position(|c| c.name == *name);
                if let Some(i) = row.filter(|_| cats.contains(&category)) {
                    self.sub_rules
                        .retain(|(r, s, _)| !(*r == i && s.as_slice() == sub.as_bytes()));
                    self.sub_rules.push((i, sub.as_bytes().to_vec(), allow));
                }
            }
        } else if let Some((name, sub)) = what.split_once('|') {
            let i = SPECS
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(unknown)?;
            // A command with subcommands takes only those; another takes a rule
            // on its first argument, which may only allow, as in Redis 7.0.
            match crate::commands::subcommands_of(name) {
                Some(subs) if !subs.contains(&sub) => return Err(unknown()),
                None if !allow => {
                    return Err(bad(
                        "a first argument may be allowed (+cmd|arg), not denied",
                    ));
                }
                _ => {}
            }
            if sub.is_empty() || sub.contains('|') {
                return Err(unknown());
            }
            self.sub_rules
                .retain(|(row, s, _)| !(*row == i && s.as_slice() == sub.as_bytes()));
            self.sub_rules.push((i, sub.as_bytes().to_vec(), allow));
        } else {
            let i = SPECS
                .iter()
                .position(|c| c.name == what)
                .ok_or_else(unknown)?;
            if let Some(a) = self.allowed.get_mut(i) {
                *a = allow;
            }
            self.sub_rules.retain(|(row, _, _)| *row != i);
        }
        let sign = if allow { '+' } else { '-' };
        self.command_rules.push(format!("{sign}{what}"));
        Ok(())
    }

    fn add_keys(&mut self, read: bool, write: bool, pattern: &[u8]) {
        if let Some(k) = self.keys.iter_mut().find(|k| k.pattern == pattern) {
            k.read |= read;
            k.write |= write;
        } else {
            self.keys.push(KeyPattern::new(read, write, pattern));
        }
    }

    /// The flags `ACL GETUSER` lists.
    pub(crate) fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        f
    }

    /// The command rules, as `ACL GETUSER` and `ACL LIST` show them.
    pub(crate) fn commands_text(&self) -> String {
        let mut parts = vec![if self.base_all { "+@all" } else { "-@all" }.to_string()];
        parts.extend(self.command_rules.iter().cloned());
        parts.join(" ")
    }

    /// The key patterns, as `ACL GETUSER` shows them.
    pub(crate) fn keys_text(&self) -> String {
        let pats: Vec<String> = self
            .keys
            .iter()
            .map(|k| {
                let p = String::from_utf8_lossy(&k.pattern);
                match (k.read, k.write) {
                    (true, true) => format!("~{p}"),
                    (true, false) => format!("%R~{p}"),
                    _ => format!("%W~{p}"),
                }
            })
            .collect();
        pats.join(" ")
    }

    /// The channel rules as `ACL GETUSER` shows them: `&*`, or each `&pattern`.
    pub(crate) fn channels_text(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let each: Vec<String> = self
            .channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect();
        each.join(" ")
    }

    /// Whether the user may read every key (`~*` or `%R~*`), as a command that reads keys it
    /// finds by pattern needs (SORT's `BY` and `GET`).
    pub(crate) fn all_keys(&self) -> bool {
        self.keys.iter().any(|k| k.read && k.pattern == b"*")
    }

    /// Whether the user may publish to (or subscribe to) `channel`; a `pattern` subscribed
    /// to must be one of the user's patterns as written, as Redis has it.
    pub(crate) fn channel_allowed(&self, channel: &[u8], pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|p| {
                if pattern {
                    p == channel
                } else {
                    crate::glob::matches(p, channel)
                }
            })
    }

    /// The user as one `ACL LIST` line (and one line of an ACL file): rules that rebuild it.
    pub(crate) fn describe(&self) -> String {
        let mut parts = vec![format!("user {}", self.name)];
        parts.extend(self.flags().iter().map(|f| f.to_string()));
        parts.extend(self.passwords.iter().map(|d| format!("#{}", hex(d))));
        let keys = self.keys_text();
        if !keys.is_empty() {
            parts.push(keys);
        }
        if self.all_channels {
            parts.push("&*".into());
        } else {
            parts.push("resetchannels".into());
            parts.extend(
                self.channels
                    .iter()
                    .map(|c| format!("&{}", String::from_utf8_lossy(c))),
            );
        }
        parts.push(self.commands_text());
        parts.join(" ")
    }
}

/// What a command needs on its keys: (read, write), by row, found once. A command without
/// the `write` flag reads. One with it writes, and reads too unless it only stores or
/// removes without showing anything of the old value: SET (without its GET option), SETNX,
/// SETEX, PSETEX, MSET, MSETNX, DEL, UNLINK and the EXPIRE family and PERSIST. INCR, APPEND,
/// GETSET, GETDEL, RENAME, COPY and the like show or move what they read, and need both.
fn needs(index: usize, cmd: &Spec, args: &[&[u8]]) -> (bool, bool) {
    static NEEDS: std::sync::OnceLock<Vec<(bool, bool)>> = std::sync::OnceLock::new();
    let of = |c: &Spec| {
        if !c.flags.contains(&"write") {
            return (true, false);
        }
        let write_only = matches!(
            c.name,
            "set"
                | "setnx"
                | "setex"
                | "psetex"
                | "mset"
                | "msetnx"
                | "del"
                | "unlink"
                | "expire"
                | "pexpire"
                | "expireat"
                | "pexpireat"
                | "persist"
        );
        (!write_only, true)
    };
    let rows = NEEDS.get_or_init(|| SPECS.iter().map(of).collect());
    let (read, write) = rows.get(index).copied().unwrap_or_else(|| of(cmd));
    // SET ... GET answers with the old value.
    let set_get = cmd.name == "set" && args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get"));
    (read || set_get, write)
}

/// The argument positions of a command's keys, from its row.
pub(crate) fn key_positions(cmd: &Spec, argc: usize) -> impl Iterator<Item = usize> {
    let (first, last, step) = cmd.keys;
    let n = argc as i64;
    let last = if last < 0 {
        n + i64::from(last)
    } else {
        i64::from(last)
    };
    let (first, step) = (i64::from(first), i64::from(step).max(1));
    let end = if first <= 0 { 0 } else { last.min(n - 1) + 1 };
    (first.max(1)..end.max(first.max(1)))
        .step_by(step as usize)
        .map(|i| i as usize)
}

/// The argument positions of a command's keys: from its row, with the keys whose places move,
/// or for a command that counts its keys (`numkeys`), exactly those it counts.
pub(crate) fn command_keys(cmd: &Spec, args: &[&[u8]]) -> Vec<usize> {
    // (where numkeys is, keys before it)
    let counted = match cmd.name {
        "zunionstore" | "zinterstore" | "zdiffstore" => Some((2, vec![1])),
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop" => {
            Some((1, Vec::new()))
        }
        "blmpop" | "bzmpop" => Some((2, Vec::new())),
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => {
            Some((2, Vec::new()))
        }
        _ => None,
    };
    let numkeys = counted.as_ref().and_then(|(at, _)| {
        let n: usize = std::str::from_utf8(args.get(*at)?).ok()?.parse().ok()?;
        (at.checked_add(1 + n)? <= args.len()).then_some(n)
    });
    match (counted, numkeys) {
        (Some((at, mut keys)), Some(n)) => {
            keys.extend(at + 1..at + 1 + n);
            keys
        }
        _ => key_positions(cmd, args.len())
            .chain(movable_keys(cmd, args))
            .collect(),
    }
}

/// The keys whose places move, which a command's row cannot name: the first half of what
/// follows `STREAMS` in XREAD and XREADGROUP, and SORT's `STORE` destination.
pub(crate) fn movable_keys(cmd: &Spec, args: &[&[u8]]) -> Vec<usize> {
    match cmd.name {
        "xread" | "xreadgroup" => {
            let Some(at) = args.iter().position(|a| a.eq_ignore_ascii_case(b"streams")) else {
                return Vec::new();
            };
            let n = (args.len() - at - 1) / 2;
            (at + 1..at + 1 + n).collect()
        }
        "sort" => sort_store_key(args).into_iter().collect(),
        // STORE and STOREDIST name a key, after the place and the radius.
        "georadius" | "georadiusbymember" => {
            let from = if cmd.name == "georadius" { 6 } else { 5 };
            (from..args.len().saturating_sub(1))
                .filter(|&i| {
                    args.get(i).is_some_and(|a| {
                        a.eq_ignore_ascii_case(b"store") || a.eq_ignore_ascii_case(b"storedist")
                    })
                })
                .map(|i| i + 1)
                .collect()
        }
        _ => Vec::new(),
    }
}

/// The argument position of SORT's `STORE` destination (the last one given), if any: the
/// key its command-table row cannot name.
fn sort_store_key(args: &[&[u8]]) -> Option<usize> {
    let mut found = None;
    let mut j = 2;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        match opt.as_slice() {
            b"limit" => j += 2,
            b"by" | b"get" => j += 1,
            b"store" if j + 1 < args.len() => {
                found = Some(j + 1);
                j += 1;
            }
            _ => {}
        }
        j += 1;
    }
    found
}

/// What a refused command or login leaves in `ACL LOG`.
pub(crate) struct LogEntry {
    pub count: u64,
    /// `auth`, `command` or `key`.
    pub reason: &'static str,
    /// `toplevel` or `multi`.
    pub context: &'static str,
    pub object: String,
    pub username: String,
    pub at: std::time::Instant,
    pub client_info: String,
}

/// The most entries `ACL LOG` keeps, as Redis's default `acllog-max-len`.
const LOG_MAX: usize = 128;

/// Every user, and the log of refusals.
pub(crate) struct Acl {
    pub users: BTreeMap<String, Arc<User>>,
    pub log: VecDeque<LogEntry>,
}

impl Acl {
    pub(crate) fn new() -> Self {
        let mut users = BTreeMap::new();
        users.insert("default".to_string(), Arc::new(User::default_user()));
        Acl {
            users,
            log: VecDeque::new(),
        }
    }

    /// Adds a refusal; one like the newest within a minute only counts again.
    pub(crate) fn record(&mut self, entry: LogEntry) {
        if let Some(e) = self.log.iter_mut().find(|e| {
            e.reason == entry.reason
                && e.context == entry.context
                && e.object == entry.object
                && e.username == entry.username
                && e.at.elapsed().as_secs() < 60
        }) {
            e.count += 1;
            e.at = entry.at;
            e.client_info = entry.client_info;
            return;
        }
        self.log.push_front(entry);
        self.log.truncate(LOG_MAX);
    }

    /// Users from the lines of an ACL file (`user <name> <rules>...`, as `ACL LIST` writes
    /// them). `default` is there only if the file has it: the caller keeps its own.
    pub(crate) fn parse_file(
        text: &str,
        path: &str,
    ) -> Result<BTreeMap<String, Arc<User>>, String> {
        let mut users = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_ascii_whitespace();
            let (Some("user"), Some(name)) = (words.next(), words.next()) else {
                return Err(format!("{path}:{}: should start with user keyword", n + 1));
            };
            if users.contains_key(name) {
                return Err(format!("{path}:{}: Duplicate user '{name}' found", n + 1));
            }
            let mut u = User::new(name);
            for w in words {
                u.apply(w.as_bytes())
                    .map_err(|e| format!("{path}:{}: {e}", n + 1))?;
            }
            users.insert(name.to_string(), Arc::new(u));
        }
        Ok(users)
    }

    /// The users as an ACL file holds them.
    pub(crate) fn file_text(&self) -> String {
        let mut s = String::new();
        for u in self.users.values() {
            s.push_str(&u.describe());
            s.push('\n');
        }
        s
    }
}

/// `requirepass`: the `default` user's one password, or none (`nopass`) when empty.
pub(crate) fn set_requirepass(acl: &mut Acl, password: &[u8]) {
    let mut user = acl
        .users
        .get("default")
        .map_or_else(User::default_user, |u| (**u).clone());
    let _ = user.apply(b"resetpass");
    if password.is_empty() {
        let _ = user.apply(b"nopass");
    } else {
        let mut rule = vec![b'>'];
        rule.extend_from_slice(password);
        let _ = user.apply(&rule);
    }
    acl.users.insert("default".into(), Arc::new(user));
}

pub(crate) fn digest(password: &[u8]) -> Digest32 {
    Sha256::digest(password).into()
}

fn constant_time_eq(a: &Digest32, b: &Digest32) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn hex(d: &Digest32) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_digest(hex: &[u8]) -> Option<Digest32> {
    if hex.len() != 64 || !hex.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut d = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        *d.get_mut(i)? = u8::from_str_radix(s, 16).ok()?;
    }
    Some(d)
}

#[cfg(test)]
mod tests;

//! Keyspace notifications: `notify-keyspace-events`, and the messages a write publishes on
//! `__keyspace@<db>__:<key>` (the event's name) and `__keyevent@<db>__:<event>` (the key).
//!
//! Events are found from what a command wrote, not from each handler: while the setting is
//! on, every batch of writes records on its thread the client keys it stored or deleted
//! ([`record`]), and when the command is done [`emit`] names an event for each such key
//! from the command (its name, or Redis's name for it: HMSET writes `hset`, INCR `incrby`).
//! A key the command deleted without being a deleting command (the last element popped) has
//! a `del` after its event, as in Redis; a command that did not change a key (SREM of a
//! member that is not there) wrote nothing and announces nothing. The active expiry cycle
//! announces `expired` for each key it removes.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use crate::shared::Shared;

pub(crate) const GENERIC: u32 = 1 << 0;
pub(crate) const STRING: u32 = 1 << 1;
pub(crate) const LIST: u32 = 1 << 2;
pub(crate) const SET: u32 = 1 << 3;
pub(crate) const HASH: u32 = 1 << 4;
pub(crate) const ZSET: u32 = 1 << 5;
pub(crate) const EXPIRED: u32 = 1 << 6;
const EVICTED: u32 = 1 << 7;
const STREAM: u32 = 1 << 8;
const MODULE: u32 = 1 << 9;
const NEW: u32 = 1 << 10;
const KEYSPACE: u32 = 1 << 11;
const KEYEVENT: u32 = 1 << 12;
const KEY_MISS: u32 = 1 << 13;
/// `A`: every class but `n` (new keys) and `m` (misses).
const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The class letters, in the order CONFIG GET shows them.
const LETTERS: [(char, u32); 11] = [
    ('g', GENERIC),
    ('$', STRING),
    ('l', LIST),
    ('s', SET),
    ('h', HASH),
    ('z', ZSET),
    ('x', EXPIRED),
    ('e', EVICTED),
    ('t', STREAM),
    ('d', MODULE),
    ('n', NEW),
];

/// Parses a `notify-keyspace-events` value; `None` for a letter Redis does not know.
pub(crate) fn parse(text: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for &b in text {
        flags |= match b {
            b'A' => ALL,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b'm' => KEY_MISS,
            _ => LETTERS.iter().find(|(c, _)| *c as u8 == b)?.1,
        };
    }
    Some(flags)
}

/// The value CONFIG GET shows for `flags`.
pub(crate) fn format(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
        if flags & NEW != 0 {
            s.push('n');
        }
    } else {
        s.extend(
            LETTERS
                .iter()
                .filter(|(_, f)| flags & f != 0)
                .map(|(c, _)| c),
        );
    }
    for (c, f) in [('K', KEYSPACE), ('E', KEYEVENT), ('m', KEY_MISS)] {
        if flags & f != 0 {
            s.push(c);
        }
    }
    s
}

thread_local! {
    /// The client keys this thread's command wrote, each with whether it was deleted and
    /// whether it was created.
    static WRITTEN: RefCell<Vec<Written>> = const { RefCell::new(Vec::new()) };
}

/// A notification held back: its channel and message.
type Message = (Vec<u8>, Vec<u8>);

thread_local! {
    /// Inside an `EXEC`, the notifications of its commands (channel, message), sent once its
    /// batch is written.
    static DEFERRED: RefCell<Option<Vec<Message>>> = const { RefCell::new(None) };
}

/// Holds back this thread's notifications until [`Deferred::send`]; dropped unsent (a
/// transaction whose batch failed), it forgets them.
pub(crate) struct Deferred;

impl Deferred {
    pub(crate) fn begin() -> Deferred {
        DEFERRED.with_borrow_mut(|d| *d = Some(Vec::new()));
        Deferred
    }

    /// Publishes what was held back, in order.
    pub(crate) fn send(self, shared: &Shared) {
        let held = DEFERRED.with_borrow_mut(Option::take).unwrap_or_default();
        for (channel, message) in held {
            shared
                .pubsub
                .publish(false, &channel, &message, |w| shared.wake_worker(w));
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        DEFERRED.with_borrow_mut(|d| *d = None);
    }
}

/// Publishes one notification now, or holds it for the `EXEC` being run.
fn publish(shared: &Shared, channel: Vec<u8>, message: &[u8]) {
    let held = DEFERRED.with_borrow_mut(|d| match d {
        Some(list) => {
            list.push((channel.clone(), message.to_vec()));
            true
        }
        None => false,
    });
    if !held {
        shared
            .pubsub
            .publish(false, &channel, message, |w| shared.wake_worker(w));
    }
}

/// Whether any notification may be sent (a class and a channel kind are both on).
pub(crate) fn on(shared: &Shared) -> bool {
    // Relaxed: a setting, read on its own.
    let flags = shared.notify_flags.load(Ordering::Relaxed);
    flags & (KEYSPACE | KEYEVENT) != 0 && flags & (ALL | NEW) != 0
}

/// A client key a command wrote, as its batch recorded it.
pub(crate) struct Written {
    /// The engine key.
    pub key: Vec<u8>,
    pub deleted: bool,
    /// Stored where no live value was (for `new`).
    pub created: bool,
    /// It held a value past its expiry, which this write replaced (for `expired`: the
    /// expiry a read would have found).
    pub expired: bool,
}

/// Whether `new` or `expired` events are asked for: the writer must then tell a created key
/// and one whose old value had expired.
pub(crate) fn wants_prior(shared: &Shared) -> bool {
    shared.notify_flags.load(Ordering::Relaxed) & (NEW | EXPIRED) != 0
}

/// Notes a write of the command running on this thread.
pub(crate) fn record(w: Written) {
    WRITTEN.with_borrow_mut(|all| all.push(w));
}

/// Forgets what an earlier command of this thread recorded.
pub(crate) fn clear() {
    WRITTEN.with_borrow_mut(Vec::clear);
}

/// Announces the events of command `args` (which succeeded) for the keys it wrote.
pub(crate) fn emit(shared: &Shared, args: &[&[u8]]) {
    let written = WRITTEN.with_borrow_mut(std::mem::take);
    let Some(name) = args.first().map(|n| n.to_ascii_lowercase()) else {
        return;
    };
    let name = String::from_utf8_lossy(&name).into_owned();
    let mut seen: Vec<&[u8]> = Vec::new();
    for (i, w) in written.iter().enumerate() {
        let key = &w.key;
        if seen.contains(&key.as_slice()) {
            continue;
        }
        seen.push(key);
        // As Redis: the expiry a lookup finds, then the key made again, then the command's.
        if written.iter().skip(i).any(|x| x.key == *key && x.expired) {
            announce(shared, EXPIRED, "expired", key);
        }
        if written.iter().skip(i).any(|x| x.key == *key && x.created) {
            announce(shared, NEW, "new", key);
        }
        // A key written twice counts as deleted if its last write deleted it.
        let deleted = written
            .iter()
            .skip(i)
            .rfind(|x| x.key == *key)
            .map_or(w.deleted, |x| x.deleted);
        for (class, event) in events(&name, args, key, deleted) {
            announce(shared, class, event, key);
        }
    }
}

/// Announces a stream event that a command's writes do not show: a consumer that XREADGROUP
/// or XCLAIM made (`key` is the engine key).
pub(crate) fn stream_event(shared: &Shared, event: &'static str, key: &[u8]) {
    if on(shared) {
        announce(shared, STREAM, event, key);
    }
}

/// `expired` for a key the expiry cycle removed (engine key).
pub(crate) fn expired(shared: &Shared, key: &[u8]) {
    announce(shared, EXPIRED, "expired", key);
}

/// The events of command `name` on engine key `key`, in order.
fn events(name: &str, args: &[&[u8]], key: &[u8], deleted: bool) -> Vec<(u32, &'static str)> {
    let client_key = key.get(1..).unwrap_or_default();
    let first = args.get(1).is_some_and(|k| *k == client_key);
    let arg = |i: usize| {
        args.get(i)
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default()
    };
    let side = |i: usize| if arg(i) == b"LEFT" { "l" } else { "r" };
    // Commands that move between two keys name each end's event.
    let moved: Option<(u32, &'static str)> = match name {
        "rename" | "renamenx" => Some((GENERIC, if first { "rename_from" } else { "rename_to" })),
        "copy" => (!first).then_some((GENERIC, "copy_to")),
        "move" => Some((GENERIC, if deleted { "move_from" } else { "move_to" })),
        "smove" => Some((SET, if first { "srem" } else { "sadd" })),
        "rpoplpush" | "brpoplpush" => Some((LIST, if first { "rpop" } else { "lpush" })),
        "lmove" | "blmove" => Some(if first {
            (LIST, if side(3) == "l" { "lpop" } else { "rpop" })
        } else {
            (LIST, if side(4) == "l" { "lpush" } else { "rpush" })
        }),
        _ => None,
    };
    let mut out = Vec::new();
    if let Some(e) = moved {
        if name == "copy" && first {
            return out;
        }
        out.push(e);
        if deleted && !matches!(name, "rename" | "renamenx" | "move") {
            out.push((GENERIC, "del"));
        }
        return out;
    }
    let Some((class, event)) = event_of(name).map(|(c, e)| (c, mpop_side(name, args, e))) else {
        return out;
    };
    if name == "xgroup" {
        let sub = arg(1);
        let event = match &*sub {
            b"CREATE" => "xgroup-create",
            b"SETID" => "xgroup-setid",
            b"DESTROY" => "xgroup-destroy",
            b"CREATECONSUMER" => "xgroup-createconsumer",
            b"DELCONSUMER" => "xgroup-delconsumer",
            _ => return out,
        };
        out.push((STREAM, event));
        return out;
    }
    let deletes =
        matches!(event, "del" | "sortstore") || name.ends_with("store") || class == GENERIC;
    if deleted && deletes {
        out.push((GENERIC, "del"));
        return out;
    }
    out.push((class, event));
    if deleted {
        out.push((GENERIC, "del"));
    }
    // A string stored with a time to live announces the expiry too.
    let timed = matches!(name, "setex" | "psetex")
        || (name == "set"
            && args
                .iter()
                .skip(3)
                .any(|a| matches!(&*a.to_ascii_uppercase(), b"EX" | b"PX" | b"EXAT" | b"PXAT")));
    if timed {
        out.push((GENERIC, "expire"));
    }
    out
}

/// The end LMPOP, BLMPOP, ZMPOP and BZMPOP took from (`RIGHT` and `MAX` name the other
/// event); any other command's `event` as it is.
fn mpop_side(name: &str, args: &[&[u8]], event: &'static str) -> &'static str {
    let numkeys_at = match name {
        "lmpop" | "zmpop" => 1,
        "blmpop" | "bzmpop" => 2,
        _ => return event,
    };
    let numkeys = args
        .get(numkeys_at)
        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    let side = args
        .get(numkeys_at + 1 + numkeys)
        .map(|s| s.to_ascii_uppercase())
        .unwrap_or_default();
    match (event, &*side) {
        ("lpop", b"RIGHT") => "rpop",
        ("zpopmin", b"MAX") => "zpopmax",
        _ => event,
    }
}

/// Redis's class and event name for a command that writes one kind of key.
fn event_of(name: &str) -> Option<(u32, &'static str)> {
    Some(match name {
        "set" | "setnx" | "setex" | "psetex" | "mset" | "msetnx" | "getset" => (STRING, "set"),
        "append" => (STRING, "append"),
        "setrange" => (STRING, "setrange"),
        "incr" | "decr" | "incrby" | "decrby" => (STRING, "incrby"),
        "incrbyfloat" => (STRING, "incrbyfloat"),
        "getdel" | "del" | "unlink" => (GENERIC, "del"),
        "expire" | "pexpire" | "expireat" | "pexpireat" => (GENERIC, "expire"),
        "persist" => (GENERIC, "persist"),
        "getex" => (GENERIC, "expire"),
        "restore" => (GENERIC, "restore"),
        "hset" | "hmset" | "hsetnx" => (HASH, "hset"),
        "hdel" => (HASH, "hdel"),
        "hincrby" => (HASH, "hincrby"),
        "hincrbyfloat" => (HASH, "hincrbyfloat"),
        "lpush" | "lpushx" => (LIST, "lpush"),
        "rpush" | "rpushx" => (LIST, "rpush"),
        "lpop" | "blpop" => (LIST, "lpop"),
        "rpop" | "brpop" => (LIST, "rpop"),
        "lmpop" | "blmpop" => (LIST, "lpop"),
        "linsert" => (LIST, "linsert"),
        "lset" => (LIST, "lset"),
        "lrem" => (LIST, "lrem"),
        "ltrim" => (LIST, "ltrim"),
        "sadd" => (SET, "sadd"),
        "srem" => (SET, "srem"),
        "spop" => (SET, "spop"),
        "sinterstore" => (SET, "sinterstore"),
        "sunionstore" => (SET, "sunionstore"),
        "sdiffstore" => (SET, "sdiffstore"),
        "zadd" => (ZSET, "zadd"),
        "zincrby" => (ZSET, "zincr"),
        "zrem" => (ZSET, "zrem"),
        "zremrangebyscore" => (ZSET, "zremrangebyscore"),
        "zremrangebyrank" => (ZSET, "zremrangebyrank"),
        "zremrangebylex" => (ZSET, "zremrangebylex"),
        "zpopmin" | "bzpopmin" => (ZSET, "zpopmin"),
        "zpopmax" | "bzpopmax" => (ZSET, "zpopmax"),
        "zmpop" | "bzmpop" => (ZSET, "zpopmin"),
        "zunionstore" => (ZSET, "zunionstore"),
        "zinterstore" => (ZSET, "zinterstore"),
        "zdiffstore" => (ZSET, "zdiffstore"),
        "zrangestore" => (ZSET, "zrangestore"),
        "sort" => (LIST, "sortstore"),
        "xadd" => (STREAM, "xadd"),
        "xtrim" => (STREAM, "xtrim"),
        "xdel" => (STREAM, "xdel"),
        "xsetid" => (STREAM, "xsetid"),
        "xgroup" => (STREAM, "xgroup"),
        _ => return None,
    })
}

/// Publishes one event on the channels the setting asks for.
fn announce(shared: &Shared, class: u32, event: &str, key: &[u8]) {
    let flags = shared.notify_flags.load(Ordering::Relaxed);
    if flags & class == 0 {
        return;
    }
    let (Some(&prefix), Some(client_key)) = (key.first(), key.get(1..)) else {
        return;
    };
    let db = shared.databases.number(prefix);
    if flags & KEYSPACE != 0 {
        let mut channel = format!("__keyspace@{db}__:").into_bytes();
        channel.extend_from_slice(client_key);
        publish(shared, channel, event.as_bytes());
    }
    if flags & KEYEVENT != 0 {
        let channel = format!("__keyevent@{db}__:{event}");
        publish(shared, channel.into_bytes(), client_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_back_as_redis_shows_them() {
        for (given, shown) in [
            ("gKE", "gKE"),
            ("$lshzxeKE", "$lshzxeKE"),
            ("KA", "AK"),
            ("EA", "AE"),
            ("En", "nE"),
            ("", ""),
        ] {
            assert_eq!(format(parse(given.as_bytes()).unwrap()), shown, "{given}");
        }
        assert_eq!(parse(b"Kq"), None);
    }

    #[test]
    fn events_follow_what_was_written() {
        let key = |k: &str| [&[0u8][..], k.as_bytes()].concat();
        let ev = |args: &[&str], k: &str, deleted| {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let name = String::from_utf8_lossy(args[0]).to_lowercase();
            events(&name, &args, &key(k), deleted)
        };
        assert_eq!(ev(&["SET", "k", "v"], "k", false), vec![(STRING, "set")]);
        assert_eq!(
            ev(&["set", "k", "v", "ex", "5"], "k", false),
            vec![(STRING, "set"), (GENERIC, "expire")]
        );
        assert_eq!(
            ev(&["rpop", "l"], "l", true),
            vec![(LIST, "rpop"), (GENERIC, "del")]
        );
        assert_eq!(ev(&["expire", "k", "0"], "k", true), vec![(GENERIC, "del")]);
        assert_eq!(
            ev(&["sunionstore", "d", "a"], "d", true),
            vec![(GENERIC, "del")]
        );
        assert_eq!(
            ev(&["hmset", "h", "a", "1"], "h", false),
            vec![(HASH, "hset")]
        );
        assert_eq!(
            ev(&["lmove", "a", "b", "left", "right"], "a", false),
            vec![(LIST, "lpop")]
        );
        assert_eq!(
            ev(&["lmove", "a", "b", "left", "right"], "b", false),
            vec![(LIST, "rpush")]
        );
        assert_eq!(
            ev(&["rename", "a", "b"], "a", true),
            vec![(GENERIC, "rename_from")]
        );
        assert_eq!(
            ev(&["rename", "a", "b"], "b", false),
            vec![(GENERIC, "rename_to")]
        );
        assert_eq!(ev(&["get", "k"], "k", false), vec![]);
        assert_eq!(
            ev(&["LMPOP", "2", "a", "l", "RIGHT"], "l", false),
            vec![(LIST, "rpop")]
        );
        assert_eq!(
            ev(&["zmpop", "1", "z", "MAX"], "z", false),
            vec![(ZSET, "zpopmax")]
        );
        assert_eq!(
            ev(&["XGROUP", "CREATE", "s", "g", "$"], "s", false),
            vec![(STREAM, "xgroup-create")]
        );
        assert_eq!(
            ev(&["XADD", "s", "*", "f", "v"], "s", false),
            vec![(STREAM, "xadd")]
        );
    }
}

//! Pub/sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs, PUBLISH, SPUBLISH and
//! PUBSUB. The registry and the way messages cross worker threads are in [`crate::pubsub`].

use super::{Connection, Ctx, Outcome, upper};
use crate::pubsub::Kind;
use crate::resp::Reply;
use crate::shared::Shared;

/// The word each namespace's confirmations carry: (subscribe, unsubscribe).
fn words(kind: Kind) -> (&'static [u8], &'static [u8]) {
    match kind {
        Kind::Channel => (b"subscribe", b"unsubscribe"),
        Kind::Pattern => (b"psubscribe", b"punsubscribe"),
        Kind::Shard => (b"ssubscribe", b"sunsubscribe"),
        Kind::Monitor => (b"monitor", b"monitor"),
    }
}

/// The count a confirmation carries: channels and patterns together, shard channels apart.
fn count(conn: &Connection, kind: Kind) -> usize {
    match kind {
        Kind::Shard => conn.subs.shard.len(),
        Kind::Monitor => conn.subs.monitor.len(),
        Kind::Channel | Kind::Pattern => conn.subs.plain(),
    }
}

fn confirm(out: &mut Reply<'_>, word: &[u8], name: Option<&[u8]>, n: usize) {
    out.push(3);
    out.bulk(word);
    match name {
        Some(name) => out.bulk(name),
        None => out.null(),
    }
    out.int(n as i64);
}

fn subscribe_to(cx: &mut Ctx<'_, '_>, kind: Kind, names: &[&[u8]]) -> Outcome {
    for &name in names {
        if cx.conn.subs.of(kind).insert(name.to_vec()) {
            cx.shared.pubsub.subscribe(kind, name, cx.conn.at);
        }
        confirm(cx.out, words(kind).0, Some(name), count(cx.conn, kind));
    }
    Ok(())
}

/// Ends the subscriptions named (all of `kind`'s when none is), confirming each; with none
/// to end, one confirmation without a name.
fn unsubscribe_from(
    shared: &Shared,
    conn: &mut Connection,
    out: Option<&mut Reply<'_>>,
    kind: Kind,
    names: &[&[u8]],
) {
    let all: Vec<Vec<u8>>;
    let names: Vec<&[u8]> = if names.is_empty() {
        all = conn.subs.of(kind).iter().cloned().collect();
        all.iter().map(Vec::as_slice).collect()
    } else {
        names.to_vec()
    };
    let word = words(kind).1;
    let mut out = out;
    for &name in &names {
        if conn.subs.of(kind).remove(name) {
            shared.pubsub.unsubscribe(kind, name, conn.at);
            // What was published to it before is on its way: it goes out first, as Redis
            // sends it before the confirmation.
            if let Some(out) = out.as_deref_mut() {
                for d in shared.pubsub.take_for(conn.at, kind, name) {
                    crate::pubsub::encode(out, &d);
                }
            }
        }
        if let Some(out) = out.as_deref_mut() {
            confirm(out, word, Some(name), count(conn, kind));
        }
    }
    if names.is_empty()
        && let Some(out) = out
    {
        confirm(out, word, None, count(conn, kind));
    }
}

/// Ends every subscription of a connection that closes or is reset, answering nothing.
pub(crate) fn forget(shared: &Shared, conn: &mut Connection) {
    if !conn.subs.monitor.is_empty() {
        conn.subs.monitor.clear();
        shared.pubsub.unsubscribe(Kind::Monitor, b"", conn.at);
        if let Some(info) = &conn.info {
            info.shown().monitor = false;
        }
    }
    if conn.subs.any() {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            unsubscribe_from(shared, conn, None, kind, &[]);
        }
    }
}

pub(super) fn subscribe(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    subscribe_to(cx, Kind::Channel, &a[1..])
}

pub(super) fn psubscribe(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    subscribe_to(cx, Kind::Pattern, &a[1..])
}

pub(super) fn ssubscribe(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    subscribe_to(cx, Kind::Shard, &a[1..])
}

pub(super) fn unsubscribe(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    unsubscribe_from(cx.shared, cx.conn, Some(cx.out), Kind::Channel, &a[1..]);
    Ok(())
}

pub(super) fn punsubscribe(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    unsubscribe_from(cx.shared, cx.conn, Some(cx.out), Kind::Pattern, &a[1..]);
    Ok(())
}

pub(super) fn sunsubscribe(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    unsubscribe_from(cx.shared, cx.conn, Some(cx.out), Kind::Shard, &a[1..]);
    Ok(())
}

pub(super) fn publish(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let shared = cx.shared;
    let n = shared
        .pubsub
        .publish(false, a[1], a[2], |w| shared.wake_worker(w));
    cx.out.int(n as i64);
    Ok(())
}

pub(super) fn spublish(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let shared = cx.shared;
    let n = shared
        .pubsub
        .publish(true, a[1], a[2], |w| shared.wake_worker(w));
    cx.out.int(n as i64);
    Ok(())
}

/// `PUBSUB CHANNELS|SHARDCHANNELS [pattern]`, `NUMSUB|SHARDNUMSUB [channel ...]`, `NUMPAT`.
pub(super) fn pubsub(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a[1]);
    let ps = &cx.shared.pubsub;
    match (sub.as_str(), a.len()) {
        ("CHANNELS" | "SHARDCHANNELS", 2 | 3) => {
            let names = ps.channels(sub == "SHARDCHANNELS", a.get(2).copied());
            cx.out.array(names.len());
            for n in &names {
                cx.out.bulk(n);
            }
        }
        ("NUMSUB" | "SHARDNUMSUB", _) => {
            let kind = if sub == "NUMSUB" {
                Kind::Channel
            } else {
                Kind::Shard
            };
            // An array of pairs, not a map, in RESP3 too, as Redis answers.
            cx.out.array(2 * (a.len() - 2));
            for &name in &a[2..] {
                cx.out.bulk(name);
                cx.out.int(ps.count(kind, name) as i64);
            }
        }
        ("NUMPAT", 2) => cx.out.int(ps.patterns() as i64),
        ("HELP", 2) => {
            let lines = [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
                "SHARDCHANNELS [<pattern>]",
                "    Return the currently active shard level channels matching a <pattern>.",
                "SHARDNUMSUB [<shardchannel> ...]",
                "    Return the number of subscribers for the specified shard level channel(s)",
                "HELP",
                "    Print this help.",
            ];
            cx.out.array(lines.len());
            for l in lines {
                cx.out.simple(l);
            }
        }
        ("CHANNELS" | "SHARDCHANNELS" | "NUMPAT" | "HELP", _) => {
            return Err(super::wrong_args(&format!("pubsub|{}", sub.to_lowercase())));
        }
        _ => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try PUBSUB HELP.",
                String::from_utf8_lossy(a[1])
            ));
        }
    }
    Ok(())
}

//! XINFO STREAM [FULL [COUNT n]], XINFO GROUPS, XINFO CONSUMERS and XINFO HELP.

use super::stream::{CONSUMER, Consumer, GROUP, Group, Id, OWNED, PENDING, Pending, Stream};
use super::streams::reply_entry;
use super::xgroups::{distance, help, tombstones_from};
use super::{Ctx, Outcome, int_arg, syntax, upper};

/// How far a group is behind the stream's last entry, where that is known.
fn lag(s: &Stream, first: Option<Id>, g: &Group) -> Option<u64> {
    if s.meta.added == 0 {
        return Some(0);
    }
    if let Some(read) = g.read
        && !tombstones_from(s, first, g.last)
    {
        return Some(s.meta.added.saturating_sub(read));
    }
    distance(s, first, g.last).map(|read| s.meta.added.saturating_sub(read))
}

fn opt_int(cx: &mut Ctx<'_, '_>, n: Option<u64>) {
    match n {
        Some(n) => cx.out.int(n as i64),
        None => cx.out.null(),
    }
}

fn id(cx: &mut Ctx<'_, '_>, id: Id) {
    cx.out.bulk(id.text().as_bytes());
}

/// The stream's groups, by name.
fn groups(cx: &Ctx<'_, '_>, s: &Stream) -> Result<Vec<(Vec<u8>, Group)>, String> {
    let mut out = Vec::new();
    s.records(cx.shared, GROUP, &[], None, |name, v| {
        if let Some(g) = Group::decode(v) {
            out.push((name.to_vec(), g));
        }
        true
    })?;
    Ok(out)
}

fn consumers(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    group: &[u8],
) -> Result<Vec<(Vec<u8>, Consumer)>, String> {
    let mut out = Vec::new();
    s.records(cx.shared, CONSUMER, &[group], None, |name, v| {
        if let Some(c) = Consumer::decode(v) {
            out.push((name.to_vec(), c));
        }
        true
    })?;
    Ok(out)
}

/// `XINFO STREAM|GROUPS|CONSUMERS|HELP ...`.
pub(super) fn xinfo(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a[1]);
    match (sub.as_str(), a.len()) {
        ("HELP", 2) => return help(cx, XINFO_HELP),
        ("STREAM", 3..) | ("GROUPS", 3) | ("CONSUMERS", 4) => {}
        ("STREAM" | "GROUPS" | "CONSUMERS" | "HELP", _) => {
            return Err(super::wrong_args(&format!("xinfo|{}", sub.to_lowercase())));
        }
        _ => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try XINFO HELP.",
                String::from_utf8_lossy(a[1])
            ));
        }
    }
    let key = cx.key(a[2]);
    let _g = cx.lock([key.as_slice()]);
    let s = Stream::read(cx, &key)?.ok_or("ERR no such key")?;
    let first = s.end(cx.shared, false)?.map(|(i, _)| i);
    match sub.as_str() {
        "STREAM" => stream(cx, &s, first, &a[3..]),
        "GROUPS" => {
            let all = groups(cx, &s)?;
            cx.out.array(all.len());
            for (name, g) in all {
                let n = consumers(cx, &s, &name)?.len();
                cx.out.map(6);
                cx.out.bulk(b"name");
                cx.out.bulk(&name);
                cx.out.bulk(b"consumers");
                cx.out.int(n as i64);
                cx.out.bulk(b"pending");
                cx.out.int(g.pending as i64);
                cx.out.bulk(b"last-delivered-id");
                id(cx, g.last);
                cx.out.bulk(b"entries-read");
                opt_int(cx, g.read);
                cx.out.bulk(b"lag");
                opt_int(cx, lag(&s, first, &g));
            }
            Ok(())
        }
        _ => {
            if super::xgroups::read_group(cx, &s, a[3])?.is_none() {
                return Err(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    String::from_utf8_lossy(a[3]),
                    String::from_utf8_lossy(a[2])
                ));
            }
            let all = consumers(cx, &s, a[3])?;
            cx.out.array(all.len());
            for (name, c) in all {
                cx.out.map(3);
                cx.out.bulk(b"name");
                cx.out.bulk(&name);
                cx.out.bulk(b"pending");
                cx.out.int(c.pending as i64);
                cx.out.bulk(b"idle");
                cx.out.int(cx.now.saturating_sub(c.seen) as i64);
            }
            Ok(())
        }
    }
}

/// `XINFO STREAM key [FULL [COUNT n]]`.
fn stream(cx: &mut Ctx<'_, '_>, s: &Stream, first: Option<Id>, opts: &[&[u8]]) -> Outcome {
    let (full, count) = match opts {
        [] => (false, 0),
        [f] if upper(f) == "FULL" => (true, 10),
        [f, c, n] if upper(f) == "FULL" && upper(c) == "COUNT" => {
            (true, usize::try_from(int_arg(n)?.max(0)).unwrap_or(0))
        }
        _ => return Err(syntax()),
    };
    let all = groups(cx, s)?;
    let nodes = if s.header.count == 0 {
        0
    } else {
        s.meta.node + 1
    };
    cx.out.map(if full { 9 } else { 10 });
    cx.out.bulk(b"length");
    cx.out.int(s.header.count as i64);
    cx.out.bulk(b"radix-tree-keys");
    cx.out.int(nodes as i64);
    cx.out.bulk(b"radix-tree-nodes");
    cx.out.int(nodes as i64 + 1);
    cx.out.bulk(b"last-generated-id");
    id(cx, s.meta.last);
    cx.out.bulk(b"max-deleted-entry-id");
    id(cx, s.meta.max_deleted);
    cx.out.bulk(b"entries-added");
    cx.out.int(s.meta.added as i64);
    cx.out.bulk(b"recorded-first-entry-id");
    id(cx, first.unwrap_or(Id::MIN));
    if !full {
        cx.out.bulk(b"groups");
        cx.out.int(all.len() as i64);
        for last in [false, true] {
            cx.out
                .bulk(if last { b"last-entry" } else { b"first-entry" });
            match s.end(cx.shared, last)? {
                Some((i, v)) => reply_entry(cx, i, &v)?,
                None => cx.out.null(),
            }
        }
        return Ok(());
    }
    let limit = (count > 0).then_some(count);
    cx.out.bulk(b"entries");
    let entries = super::streams::range(cx, s, Id::MIN, Id::MAX, limit, false)?;
    cx.out.array(entries.len());
    for (i, v) in &entries {
        reply_entry(cx, *i, v)?;
    }
    cx.out.bulk(b"groups");
    cx.out.array(all.len());
    for (name, g) in &all {
        full_group(cx, s, first, name, g, limit)?;
    }
    Ok(())
}

fn full_group(
    cx: &mut Ctx<'_, '_>,
    s: &Stream,
    first: Option<Id>,
    name: &[u8],
    g: &Group,
    limit: Option<usize>,
) -> Outcome {
    cx.out.map(7);
    cx.out.bulk(b"name");
    cx.out.bulk(name);
    cx.out.bulk(b"last-delivered-id");
    id(cx, g.last);
    cx.out.bulk(b"entries-read");
    opt_int(cx, g.read);
    cx.out.bulk(b"lag");
    opt_int(cx, lag(s, first, g));
    cx.out.bulk(b"pel-count");
    cx.out.int(g.pending as i64);
    let mut pel: Vec<(Id, Pending)> = Vec::new();
    s.records(cx.shared, PENDING, &[name], None, |rest, v| {
        if let (Some(i), Some(p)) = (Id::from_bytes(rest), Pending::decode(v)) {
            pel.push((i, p));
        }
        limit.is_none_or(|n| pel.len() < n)
    })?;
    cx.out.bulk(b"pending");
    cx.out.array(pel.len());
    for (i, p) in &pel {
        cx.out.array(4);
        id(cx, *i);
        cx.out.bulk(&p.consumer);
        cx.out.int(p.delivered as i64);
        cx.out.int(p.count as i64);
    }
    let all = consumers(cx, s, name)?;
    cx.out.bulk(b"consumers");
    cx.out.array(all.len());
    for (c, info) in all {
        cx.out.map(4);
        cx.out.bulk(b"name");
        cx.out.bulk(&c);
        cx.out.bulk(b"seen-time");
        cx.out.int(info.seen as i64);
        cx.out.bulk(b"pel-count");
        cx.out.int(info.pending as i64);
        let mut owned: Vec<Id> = Vec::new();
        s.records(cx.shared, OWNED, &[name, &c], None, |rest, _| {
            owned.extend(Id::from_bytes(rest));
            limit.is_none_or(|n| owned.len() < n)
        })?;
        cx.out.bulk(b"pending");
        cx.out.array(owned.len());
        for i in owned {
            let p = super::stream::get_raw(cx.shared, &s.record(PENDING, &[name, &i.bytes()]))?
                .and_then(|r| Pending::decode(&r))
                .unwrap_or_default();
            cx.out.array(3);
            id(cx, i);
            cx.out.int(p.delivered as i64);
            cx.out.int(p.count as i64);
        }
    }
    Ok(())
}

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Print this help.",
];

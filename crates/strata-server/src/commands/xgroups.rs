//! Consumer groups: XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM and XAUTOCLAIM.
//!
//! A group, each of its consumers, and each pending entry are records of the stream's
//! (`stream.rs`); a pending entry is filed twice, under the group by ID and under its
//! consumer by ID, so that both lists are walked from a seek. A command reads what it needs,
//! keeps the group and the consumers it touched in memory, and writes them back with its
//! other writes, in one batch.

use std::collections::BTreeMap;

use super::keyspace::Writes;
use super::stream::{
    CONSUMER, Consumer, GROUP, Group, Id, OWNED, PENDING, Pending, Stream, get_raw, strict_id,
};
use super::streams::{Read, park_read, range, read_args, reply_streams};
use super::{Ctx, Outcome, int_arg, syntax, upper};

/// A group of a stream, as a command changes it.
pub(super) struct Open {
    pub name: Vec<u8>,
    pub group: Group,
    /// Consumers read or changed, by name.
    pub consumers: BTreeMap<Vec<u8>, Consumer>,
}

pub(super) fn nogroup(key: &[u8], group: &[u8]) -> String {
    format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    )
}

pub(super) fn read_group(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    name: &[u8],
) -> Result<Option<Open>, String> {
    let Some(raw) = get_raw(cx.shared, &s.record(GROUP, &[name]))? else {
        return Ok(None);
    };
    let group = Group::decode(&raw).ok_or("ERR corrupt consumer group")?;
    Ok(Some(Open {
        name: name.to_vec(),
        group,
        consumers: BTreeMap::new(),
    }))
}

impl Open {
    /// The consumer named `c`, if it exists.
    pub(super) fn consumer(
        &mut self,
        cx: &Ctx<'_, '_>,
        s: &Stream,
        c: &[u8],
    ) -> Result<Option<Consumer>, String> {
        if let Some(found) = self.consumers.get(c) {
            return Ok(Some(*found));
        }
        let raw = get_raw(cx.shared, &s.record(CONSUMER, &[&self.name, c]))?;
        let Some(raw) = raw else { return Ok(None) };
        let found = Consumer::decode(&raw).ok_or("ERR corrupt consumer")?;
        self.consumers.insert(c.to_vec(), found);
        Ok(Some(found))
    }

    /// The consumer named `c`, made if it is new (true); either way seen now.
    pub(super) fn touch(&mut self, cx: &Ctx<'_, '_>, s: &Stream, c: &[u8]) -> Result<bool, String> {
        let existed = self.consumer(cx, s, c)?;
        let mut found = existed.unwrap_or_default();
        found.seen = cx.now;
        self.consumers.insert(c.to_vec(), found);
        Ok(existed.is_none())
    }

    /// The pending entry `id`, if the group holds it.
    pub(super) fn pending(
        &self,
        cx: &Ctx<'_, '_>,
        s: &Stream,
        id: Id,
    ) -> Result<Option<Pending>, String> {
        let raw = get_raw(cx.shared, &s.record(PENDING, &[&self.name, &id.bytes()]))?;
        Ok(raw.and_then(|r| Pending::decode(&r)))
    }

    /// Files `id` as pending with `p` (replacing its earlier holder's claim, `before`).
    pub(super) fn hold(
        &mut self,
        s: &Stream,
        w: &mut Writes,
        id: Id,
        p: &Pending,
        before: Option<&Pending>,
    ) {
        if let Some(old) = before {
            self.release_owner(s, w, id, &old.consumer);
        } else {
            self.group.pending += 1;
        }
        w.put_raw(&s.record(PENDING, &[&self.name, &id.bytes()]), &p.encode());
        w.put_raw(
            &s.record(OWNED, &[&self.name, &p.consumer, &id.bytes()]),
            b"",
        );
        if let Some(c) = self.consumers.get_mut(&p.consumer) {
            c.pending += 1;
        }
    }

    fn release_owner(&mut self, s: &Stream, w: &mut Writes, id: Id, owner: &[u8]) {
        w.delete_raw(&s.record(OWNED, &[&self.name, owner, &id.bytes()]));
        if let Some(c) = self.consumers.get_mut(owner) {
            c.pending = c.pending.saturating_sub(1);
        }
    }

    /// Takes `id` (held as `p`) off the pending lists.
    pub(super) fn release(&mut self, s: &Stream, w: &mut Writes, id: Id, p: &Pending) {
        w.delete_raw(&s.record(PENDING, &[&self.name, &id.bytes()]));
        self.release_owner(s, w, id, &p.consumer);
        self.group.pending = self.group.pending.saturating_sub(1);
    }

    /// Writes the group and the consumers it touched.
    pub(super) fn save(&self, s: &Stream, w: &mut Writes) {
        w.put_raw(&s.record(GROUP, &[&self.name]), &self.group.encode());
        for (name, c) in &self.consumers {
            w.put_raw(&s.record(CONSUMER, &[&self.name, name]), &c.encode());
        }
    }
}

/// Whether the stream has a deletion at or after `from` (Redis's test for whether a
/// group's read counter may simply be counted on).
pub(super) fn tombstones_from(s: &Stream, first: Option<Id>, from: Id) -> bool {
    let m = s.meta.max_deleted;
    if s.header.count == 0 || m == Id::MIN {
        return false;
    }
    if first.is_some_and(|f| f > m) {
        return false;
    }
    from <= m
}

/// How many entries the stream had added up to and including `id`, where that is known.
pub(super) fn distance(s: &Stream, first: Option<Id>, id: Id) -> Option<u64> {
    let (added, last) = (s.meta.added, s.meta.last);
    if added == 0 {
        return Some(0);
    }
    if s.header.count == 0 && id <= last {
        return Some(added);
    }
    match id.cmp(&last) {
        std::cmp::Ordering::Equal => return Some(added),
        std::cmp::Ordering::Greater => return None,
        std::cmp::Ordering::Less => {}
    }
    let first = first?;
    let m = s.meta.max_deleted;
    if m == Id::MIN || m < first {
        if id < first {
            return Some(added - s.header.count);
        }
        if id == first {
            return Some(added - s.header.count + 1);
        }
    }
    None
}

fn entries_read_arg(a: &[&[u8]], i: usize) -> Result<Option<u64>, String> {
    let n = int_arg(a.get(i + 1).ok_or_else(syntax)?)?;
    match n {
        -1 => Ok(None),
        n if n >= 0 => Ok(Some(n as u64)),
        _ => Err("ERR value for ENTRIESREAD must be positive or -1".into()),
    }
}

/// `XGROUP CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER|HELP ...`.
pub(super) fn xgroup(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a[1]);
    let arity_ok = match sub.as_str() {
        "CREATE" => (5..=8).contains(&a.len()),
        "SETID" => (5..=7).contains(&a.len()),
        "DESTROY" => a.len() == 4,
        "CREATECONSUMER" | "DELCONSUMER" => a.len() == 5,
        "HELP" => a.len() == 2,
        _ => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try XGROUP HELP.",
                String::from_utf8_lossy(a[1])
            ));
        }
    };
    if !arity_ok {
        return Err(super::wrong_args(&format!("xgroup|{}", sub.to_lowercase())));
    }
    if sub == "HELP" {
        return help(cx, XGROUP_HELP);
    }
    let (mut mkstream, mut entries_read) = (false, None);
    let mut i = 5;
    while matches!(sub.as_str(), "CREATE" | "SETID") && i < a.len() {
        match upper(a[i]).as_str() {
            "MKSTREAM" if sub == "CREATE" => {
                mkstream = true;
                i += 1;
            }
            "ENTRIESREAD" => {
                entries_read = Some(entries_read_arg(a, i)?);
                i += 2;
            }
            _ => return Err(syntax()),
        }
    }
    let key = cx.key(a[2]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let mut s = match Stream::read(cx, &key)? {
        Some(s) => s,
        None if mkstream => Stream::open(cx, &key, &mut w)?,
        None => {
            return Err(
                "ERR The XGROUP subcommand requires the key to exist. Note that for \
                        CREATE you may want to use the MKSTREAM option to create an empty \
                        stream automatically."
                    .into(),
            );
        }
    };
    let name = a[3];
    let found = read_group(cx, &s, name)?;
    let missing = || {
        format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(a[2])
        )
    };
    match sub.as_str() {
        "CREATE" | "SETID" => {
            if sub == "CREATE" && found.is_some() {
                return Err("BUSYGROUP Consumer Group name already exists".into());
            }
            if sub == "SETID" && found.is_none() {
                return Err(missing());
            }
            let last = match a[4] {
                b"$" => s.meta.last,
                arg => super::stream::id_arg(arg, 0)?,
            };
            let mut g = found.unwrap_or(Open {
                name: name.to_vec(),
                group: Group::default(),
                consumers: BTreeMap::new(),
            });
            g.group.last = last;
            g.group.read = entries_read.flatten();
            g.save(&s, &mut w);
            cx.out.ok();
        }
        "DESTROY" => {
            let Some(g) = found else {
                cx.out.int(0);
                return Ok(());
            };
            destroy(cx, &mut s, &mut w, &g)?;
            cx.out.int(1);
        }
        "CREATECONSUMER" => {
            let mut g = found.ok_or_else(missing)?;
            let made = g.touch(cx, &s, a[4])?;
            cx.out.int(i64::from(made));
            if !made {
                return Ok(());
            }
            g.save(&s, &mut w);
        }
        _ => {
            let mut g = found.ok_or_else(missing)?;
            let Some(n) = delete_consumer(cx, &s, &mut w, &mut g, a[4])? else {
                cx.out.int(0);
                return Ok(());
            };
            cx.out.int(n as i64);
        }
    }
    // The header is written too: readers parked on the key look again (and a keyspace
    // event names the change; a subcommand that changed nothing returned above).
    s.finish(&mut w);
    w.commit(cx.shared)?;
    Ok(())
}

/// Deletes a group's records: itself, its consumers and its pending entries.
fn destroy(cx: &Ctx<'_, '_>, s: &mut Stream, w: &mut Writes, g: &Open) -> Outcome {
    w.delete_raw(&s.record(GROUP, &[&g.name]));
    for tag in [CONSUMER, PENDING, OWNED] {
        let prefix = s.record(tag, &[&g.name, b""]);
        let hi = crate::store::prefix_end(&prefix);
        w.delete_range(&prefix, &hi);
    }
    let _ = cx;
    Ok(())
}

/// Deletes consumer `c` and its pending entries; returns how many it held (`None`: no such
/// consumer).
fn delete_consumer(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    w: &mut Writes,
    g: &mut Open,
    c: &[u8],
) -> Result<Option<u64>, String> {
    let Some(found) = g.consumer(cx, s, c)? else {
        return Ok(None);
    };
    let mut ids = Vec::new();
    s.records(cx.shared, OWNED, &[&g.name, c], None, |rest, _| {
        ids.extend(Id::from_bytes(rest));
        true
    })?;
    for id in &ids {
        w.delete_raw(&s.record(PENDING, &[&g.name, &id.bytes()]));
        w.delete_raw(&s.record(OWNED, &[&g.name, c, &id.bytes()]));
    }
    g.group.pending = g.group.pending.saturating_sub(ids.len() as u64);
    g.consumers.remove(c);
    w.delete_raw(&s.record(CONSUMER, &[&g.name, c]));
    w.put_raw(&s.record(GROUP, &[&g.name]), &g.group.encode());
    let _ = found;
    Ok(Some(ids.len() as u64))
}

/// Answers a HELP subcommand's lines.
pub(super) fn help(cx: &mut Ctx<'_, '_>, lines: &[&str]) -> Outcome {
    cx.out.array(lines.len());
    for l in lines {
        cx.out.simple(l);
    }
    Ok(())
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Print this help.",
];

/// Delivers the entries after the group's last ID to consumer `c` (at most `count`),
/// filing them as pending unless `noack`.
fn deliver_new(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    w: &mut Writes,
    g: &mut Open,
    c: &[u8],
    count: Option<usize>,
    noack: bool,
) -> Result<Vec<Read>, String> {
    let Some(from) = g.group.last.next() else {
        return Ok(Vec::new());
    };
    let entries = range(cx, s, from, Id::MAX, count, false)?;
    // The first entry matters to the read counter only where entries were deleted, or
    // where the group's counter is not known yet.
    let first = if s.meta.max_deleted != Id::MIN || g.group.read.is_none() {
        s.end(cx.shared, false)?.map(|(id, _)| id)
    } else {
        None
    };
    for (id, _) in &entries {
        g.group.read = match g.group.read {
            Some(n) if !tombstones_from(s, first, *id) => Some(n + 1),
            _ if s.meta.added > 0 => distance(s, first, *id),
            read => read,
        };
        g.group.last = *id;
        if !noack {
            let p = Pending {
                consumer: c.to_vec(),
                delivered: cx.now,
                count: 1,
            };
            let before = g.pending(cx, s, *id)?;
            // Filed again after SETID took the group back: its holder gives it up.
            if let Some(old) = &before {
                g.consumer(cx, s, &old.consumer)?;
            }
            g.hold(s, w, *id, &p, before.as_ref());
        }
    }
    Ok(entries.into_iter().map(|(i, v)| (i, Some(v))).collect())
}

/// The entries consumer `c` holds pending after `after` (at most `count`), as they are now
/// (`None`: deleted since); each one given again counts as delivered again now, as in Redis.
fn history(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    w: &mut Writes,
    g: &Open,
    c: &[u8],
    after: Id,
    count: Option<usize>,
) -> Result<Vec<Read>, String> {
    let mut ids = Vec::new();
    if count != Some(0) {
        let start = after.bytes();
        s.records(cx.shared, OWNED, &[&g.name, c], Some(&start), |rest, _| {
            ids.extend(Id::from_bytes(rest));
            count.is_none_or(|n| ids.len() < n)
        })?;
    }
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let entry = get_raw(cx.shared, &s.entry_key(id))?;
        if entry.is_some()
            && let Some(mut p) = g.pending(cx, s, id)?
        {
            p.delivered = cx.now;
            p.count += 1;
            w.put_raw(&s.record(PENDING, &[&g.name, &id.bytes()]), &p.encode());
        }
        out.push((id, entry));
    }
    Ok(out)
}

/// `XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key [key ...] id [id ...]`:
/// with `>`, entries no consumer of the group was given (pending from now on, unless
/// NOACK); with an ID, the consumer's own pending entries after it.
pub(super) fn xreadgroup(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let r = read_args(a, true)?;
    let Some((group, consumer)) = r.group else {
        return Err(syntax());
    };
    let names = &a[r.first_key..r.first_key + r.keys];
    let id_args = &a[r.first_key + r.keys..];
    let mut afters = Vec::with_capacity(id_args.len());
    for arg in id_args {
        afters.push(match *arg {
            b">" => None,
            b"$" => {
                return Err(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you \
                            want to read the history of this consumer by specifying a proper \
                            ID, or use the > ID to get new messages. The $ ID would just \
                            return an empty result set."
                        .into(),
                );
            }
            arg => Some(strict_id(arg)?),
        });
    }
    let keys: Vec<Vec<u8>> = names.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let mut opened = Vec::with_capacity(keys.len());
    for (k, name) in keys.iter().zip(names) {
        let missing = || {
            format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP \
                 option",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(group)
            )
        };
        // A parked read whose stream went (or became another kind) ends with an error.
        let s = match Stream::read(cx, k) {
            Ok(None) | Err(_) if cx.conn.retrying => {
                return Err("UNBLOCKED the stream key no longer exists".into());
            }
            s => s?.ok_or_else(missing)?,
        };
        let g = read_group(cx, &s, group)?.ok_or_else(missing)?;
        opened.push((s, g));
    }
    let mut w = Writes::default();
    let mut found = Vec::new();
    let mut any_new = false;
    for (((s, g), name), after) in opened.iter_mut().zip(names).zip(&afters) {
        if g.touch(cx, s, consumer)? {
            crate::notify::stream_event(cx.shared, "xgroup-createconsumer", &s.key);
        }
        let entries = match after {
            None => deliver_new(cx, s, &mut w, g, consumer, r.count, r.noack)?,
            Some(after) => history(cx, s, &mut w, g, consumer, *after, r.count)?,
        };
        any_new |= !entries.is_empty();
        if after.is_some() || !entries.is_empty() {
            found.push((*name, entries));
        }
        g.save(s, &mut w);
    }
    if found.is_empty() && !any_new {
        if let Some(deadline) = r.block {
            // The consumer is seen (and made) even when the read waits.
            w.commit(cx.shared)?;
            let argv = a.iter().map(|x| x.to_vec()).collect();
            park_read(cx, keys, deadline, argv);
            return Ok(());
        }
        w.commit(cx.shared)?;
        cx.out.null_array();
        return Ok(());
    }
    w.commit(cx.shared)?;
    reply_streams(cx, &found)
}

/// `XACK key group id [id ...]`: how many of the IDs were pending and are no more.
pub(super) fn xack(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let ids: Vec<Id> = a[3..]
        .iter()
        .map(|x| strict_id(x))
        .collect::<Result<_, _>>()?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(s) = Stream::read(cx, &key)? else {
        cx.out.int(0);
        return Ok(());
    };
    let Some(mut g) = read_group(cx, &s, a[2])? else {
        cx.out.int(0);
        return Ok(());
    };
    let mut w = Writes::default();
    let mut acked: Vec<Id> = Vec::new();
    for id in ids {
        if acked.contains(&id) {
            continue;
        }
        if let Some(p) = g.pending(cx, &s, id)? {
            g.consumer(cx, &s, &p.consumer)?;
            g.release(&s, &mut w, id, &p);
            acked.push(id);
        }
    }
    if !acked.is_empty() {
        g.save(&s, &mut w);
        w.commit(cx.shared)?;
    }
    cx.out.int(acked.len() as i64);
    Ok(())
}

//! A group's pending entries: XPENDING, XCLAIM and XAUTOCLAIM.

use super::keyspace::Writes;
use super::stream::{Id, OWNED, PENDING, Pending, Stream, get_raw, id_arg};
use super::streams::reply_entry;
use super::xgroups::{Open, nogroup, read_group};
use super::{Ctx, Outcome, int_arg, parse_i64, syntax, upper};

/// The stream and group a command names, or NOGROUP.
fn open(cx: &Ctx<'_, '_>, key: &[u8], name: &[u8], group: &[u8]) -> Result<(Stream, Open), String> {
    let s = Stream::read(cx, key)?.ok_or_else(|| nogroup(name, group))?;
    let g = read_group(cx, &s, group)?.ok_or_else(|| nogroup(name, group))?;
    Ok((s, g))
}

/// An interval end as XPENDING and XAUTOCLAIM read it (`(` excludes).
fn interval(arg: &[u8], start: bool) -> Result<Option<Id>, String> {
    let fill = if start { 0 } else { u64::MAX };
    match arg.strip_prefix(b"(") {
        Some(rest) => {
            let id = Id::parse(rest, fill).ok_or(super::stream::INVALID_ID)?;
            Ok(if start { id.next() } else { id.prev() })
        }
        None => id_arg(arg, fill).map(Some),
    }
}

/// The pending entries of group `g` from `from` on (all consumers', or `owner`'s), as
/// `(id, pending)`, until `each` returns false.
fn walk_pending(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    g: &Open,
    owner: Option<&[u8]>,
    from: Id,
    mut each: impl FnMut(Id, Pending) -> bool,
) -> Outcome {
    // Walked from just before `from`, exclusive.
    let start = from.prev().map(|p| p.bytes());
    let after = start.as_ref().map(|b| &b[..]);
    let Some(c) = owner else {
        return s.records(cx.shared, PENDING, &[&g.name], after, |rest, v| {
            match (Id::from_bytes(rest), Pending::decode(v)) {
                (Some(id), Some(p)) => each(id, p),
                _ => true,
            }
        });
    };
    // A consumer's list holds IDs only: each entry's record is read from the group's, as the
    // walk goes.
    let mut failed = None;
    s.records(cx.shared, OWNED, &[&g.name, c], after, |rest, _| {
        let Some(id) = Id::from_bytes(rest) else {
            return true;
        };
        match g.pending(cx, s, id) {
            Ok(Some(p)) => each(id, p),
            Ok(None) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    })?;
    failed.map_or(Ok(()), Err)
}

/// `XPENDING key group [[IDLE ms] start end count [consumer]]`.
pub(super) fn xpending(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let mut i = 3;
    let mut min_idle = 0u64;
    if a.len() > 3 && upper(a[3]) == "IDLE" {
        min_idle = int_arg(a.get(4).ok_or_else(syntax)?)?.max(0) as u64;
        i = 5;
    }
    let extended = a.len() > 3;
    if extended && !(a.len() == i + 3 || a.len() == i + 4) {
        return Err(syntax());
    }
    let mut bounds = None;
    if extended {
        let lo = interval(a[i], true)?;
        let hi = interval(a[i + 1], false)?;
        let count = usize::try_from(int_arg(a[i + 2])?.max(0)).unwrap_or(0);
        bounds = Some((lo, hi, count, a.get(i + 3).copied()));
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let (s, mut g) = open(cx, &key, a[1], a[2])?;
    let Some((lo, hi, count, owner)) = bounds else {
        return summary(cx, &s, &mut g);
    };
    let mut rows: Vec<(Id, Pending)> = Vec::new();
    if let (Some(lo), Some(hi)) = (lo, hi)
        && count > 0
    {
        walk_pending(cx, &s, &g, owner, lo, |id, p| {
            if id > hi {
                return false;
            }
            if cx.now.saturating_sub(p.delivered) >= min_idle {
                rows.push((id, p));
            }
            rows.len() < count
        })?;
    }
    cx.out.array(rows.len());
    for (id, p) in rows {
        cx.out.array(4);
        cx.out.bulk(id.text().as_bytes());
        cx.out.bulk(&p.consumer);
        cx.out.int(cx.now.saturating_sub(p.delivered) as i64);
        cx.out.int(p.count as i64);
    }
    Ok(())
}

/// XPENDING's summary: how many, the least and greatest IDs, and each consumer's count.
fn summary(cx: &mut Ctx<'_, '_>, s: &Stream, g: &mut Open) -> Outcome {
    cx.out.array(4);
    cx.out.int(g.group.pending as i64);
    // The first and last pending IDs: one seek from each end.
    let mut first = None;
    walk_pending(cx, s, g, None, Id::MIN, |id, _| {
        first = Some(id);
        false
    })?;
    let last = s
        .last_record(cx.shared, PENDING, &[&g.name])?
        .and_then(|rest| Id::from_bytes(&rest));
    let (Some(first), Some(last)) = (first, last) else {
        cx.out.null();
        cx.out.null();
        cx.out.null_array();
        return Ok(());
    };
    cx.out.bulk(first.text().as_bytes());
    cx.out.bulk(last.text().as_bytes());
    let mut holders: Vec<(Vec<u8>, u64)> = Vec::new();
    s.records(
        cx.shared,
        super::stream::CONSUMER,
        &[&g.name],
        None,
        |name, v| {
            if let Some(c) = super::stream::Consumer::decode(v)
                && c.pending > 0
            {
                holders.push((name.to_vec(), c.pending));
            }
            true
        },
    )?;
    cx.out.array(holders.len());
    for (name, n) in holders {
        cx.out.array(2);
        cx.out.bulk(&name);
        cx.out.bulk(n.to_string().as_bytes());
    }
    Ok(())
}

/// Hands pending entry `id` (held as `p`, or `None` when FORCE files it) to `to`.
#[allow(clippy::too_many_arguments)]
fn claim_one(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    w: &mut Writes,
    g: &mut Open,
    to: &[u8],
    id: Id,
    p: Option<Pending>,
    delivered: u64,
    count: Option<u64>,
) -> Outcome {
    if let Some(old) = &p {
        g.consumer(cx, s, &old.consumer)?;
    }
    let held = p.clone().unwrap_or_default();
    let next = Pending {
        consumer: to.to_vec(),
        delivered,
        count: count.unwrap_or(held.count),
    };
    g.hold(s, w, id, &next, p.as_ref());
    Ok(())
}

/// Takes a pending entry whose stream entry is gone off the lists.
fn drop_gone(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    w: &mut Writes,
    g: &mut Open,
    id: Id,
    p: &Pending,
) -> Outcome {
    g.consumer(cx, s, &p.consumer)?;
    g.release(s, w, id, p);
    Ok(())
}

/// `XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms] [RETRYCOUNT n]
/// [FORCE] [JUSTID] [LASTID id]`.
pub(super) fn xclaim(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let (s, mut g) = open(cx, &key, a[1], a[2])?;
    let min_idle = parse_i64(a[4])
        .ok_or("ERR Invalid min-idle-time argument for XCLAIM")?
        .max(0) as u64;
    let mut ids = Vec::new();
    let mut i = 5;
    while let Some(id) = a.get(i).and_then(|x| Id::parse(x, 0)) {
        ids.push(id);
        i += 1;
    }
    let (mut delivered, mut retry, mut force, mut justid, mut lastid) =
        (cx.now, None, false, false, None);
    while i < a.len() {
        let value = || a.get(i + 1).copied().ok_or_else(syntax);
        match upper(a[i]).as_str() {
            "FORCE" => force = true,
            "JUSTID" => justid = true,
            "IDLE" => {
                delivered = cx.now.saturating_sub(int_arg(value()?)?.max(0) as u64);
                i += 1;
            }
            "TIME" => {
                delivered = int_arg(value()?)?.max(0) as u64;
                i += 1;
            }
            "RETRYCOUNT" => {
                retry = Some(int_arg(value()?)?.max(0) as u64);
                i += 1;
            }
            "LASTID" => {
                lastid = Some(super::stream::strict_id(value()?)?);
                i += 1;
            }
            _ => {
                return Err(format!(
                    "ERR Unrecognized XCLAIM option '{}'",
                    String::from_utf8_lossy(a[i])
                ));
            }
        }
        i += 1;
    }
    let delivered = delivered.min(cx.now);
    let consumer = a[3];
    let mut w = Writes::default();
    if let Some(l) = lastid.filter(|l| *l > g.group.last) {
        g.group.last = l;
    }
    let mut claimed: Vec<(Id, Vec<u8>)> = Vec::new();
    for id in ids {
        let p = g.pending(cx, &s, id)?;
        let Some(entry) = get_raw(cx.shared, &s.entry_key(id))? else {
            if let Some(p) = p {
                drop_gone(cx, &s, &mut w, &mut g, id, &p)?;
            }
            continue;
        };
        if p.is_none() && !force {
            continue;
        }
        if let Some(p) = &p
            && min_idle > 0
            && cx.now.saturating_sub(p.delivered) < min_idle
        {
            continue;
        }
        if g.touch(cx, &s, consumer)? {
            crate::notify::stream_event(cx.shared, "xgroup-createconsumer", &key);
        }
        let count = retry.or_else(|| {
            let before = p.as_ref().map_or(0, |p| p.count);
            Some(if justid { before } else { before + 1 })
        });
        claim_one(cx, &s, &mut w, &mut g, consumer, id, p, delivered, count)?;
        claimed.push((id, entry));
    }
    g.save(&s, &mut w);
    w.commit(cx.shared)?;
    cx.out.array(claimed.len());
    for (id, entry) in claimed {
        if justid {
            cx.out.bulk(id.text().as_bytes());
        } else {
            reply_entry(cx, id, &entry)?;
        }
    }
    Ok(())
}

/// `XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]`: claims pending
/// entries idle long enough, from `start` on; answers the cursor to go on from, what was
/// claimed, and the IDs dropped because their entries were deleted.
pub(super) fn xautoclaim(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let min_idle = parse_i64(a[4])
        .ok_or("ERR Invalid min-idle-time argument for XAUTOCLAIM")?
        .max(0) as u64;
    let start = interval(a[5], true)?;
    let (mut count, mut justid) = (100u64, false);
    let mut i = 6;
    while i < a.len() {
        match upper(a[i]).as_str() {
            "COUNT" => {
                let n = parse_i64(a.get(i + 1).ok_or_else(syntax)?);
                count = n
                    .filter(|n| (1..=i64::MAX / 10).contains(n))
                    .ok_or("ERR COUNT must be > 0")? as u64;
                i += 2;
            }
            "JUSTID" => {
                justid = true;
                i += 1;
            }
            _ => return Err(syntax()),
        }
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let (s, mut g) = open(cx, &key, a[1], a[2])?;
    let consumer = a[3];
    // Redis looks at ten entries for each one it may answer: one more says where to go on.
    let mut scanned: Vec<(Id, Pending)> = Vec::new();
    if let Some(start) = start {
        walk_pending(cx, &s, &g, None, start, |id, p| {
            scanned.push((id, p));
            (scanned.len() as u64) <= count * 10
        })?;
    }
    let mut w = Writes::default();
    let (mut claimed, mut deleted) = (Vec::new(), Vec::new());
    let (mut attempts, mut left) = (count * 10, count);
    let mut cursor = Id::MIN;
    for (id, p) in &scanned {
        if attempts == 0 || left == 0 {
            cursor = *id;
            break;
        }
        attempts -= 1;
        let Some(entry) = get_raw(cx.shared, &s.entry_key(*id))? else {
            drop_gone(cx, &s, &mut w, &mut g, *id, p)?;
            deleted.push(*id);
            left -= 1;
            continue;
        };
        if min_idle > 0 && cx.now.saturating_sub(p.delivered) < min_idle {
            continue;
        }
        if g.touch(cx, &s, consumer)? {
            crate::notify::stream_event(cx.shared, "xgroup-createconsumer", &key);
        }
        let n = if justid { p.count } else { p.count + 1 };
        claim_one(
            cx,
            &s,
            &mut w,
            &mut g,
            consumer,
            *id,
            Some(p.clone()),
            cx.now,
            Some(n),
        )?;
        claimed.push((*id, entry));
        left -= 1;
    }
    g.save(&s, &mut w);
    w.commit(cx.shared)?;
    cx.out.array(3);
    cx.out.bulk(cursor.text().as_bytes());
    cx.out.array(claimed.len());
    for (id, entry) in claimed {
        if justid {
            cx.out.bulk(id.text().as_bytes());
        } else {
            reply_entry(cx, id, &entry)?;
        }
    }
    cx.out.array(deleted.len());
    for id in deleted {
        cx.out.bulk(id.text().as_bytes());
    }
    Ok(())
}

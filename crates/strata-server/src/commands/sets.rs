//! The set family: SADD, SREM, SMEMBERS, SPOP, SRANDMEMBER, SMOVE, the algebra (SINTER,
//! SUNION, SDIFF and their STORE forms, SINTERCARD) and SSCAN. Each member is an element of
//! the set's collection (`collection.rs`) with an empty value.

use std::collections::BTreeSet;
use std::ops::Bound;

use super::collection::{self, Collection};
use super::keyspace::Writes;
use super::set_pops;
use super::{Ctx, Outcome, int_arg, parse_i64, syntax, upper};
use crate::store::Kind;

fn read(cx: &Ctx<'_, '_>, key: &[u8]) -> Result<Option<Collection>, String> {
    Collection::read(cx, key, Kind::Set)
}

fn reply_set(cx: &mut Ctx<'_, '_>, members: &[Vec<u8>]) {
    cx.out.set(members.len());
    for m in members {
        cx.out.bulk(m);
    }
}

pub(super) fn sadd(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let mut s = Collection::open(cx, &key, Kind::Set, &mut w)?;
    let mut added = 0;
    for m in &a[2..] {
        if s.get(cx.shared, m)?.is_none() {
            cx.shared.set_gaps.added(s.header.version, m);
            s.put(cx, &mut w, m, b"")?;
            added += 1;
        }
    }
    if added > 0 {
        s.finish(&mut w);
    }
    w.commit(cx.shared)?;
    cx.out.int(added);
    Ok(())
}

pub(super) fn srem(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    collection::remove_members(cx, a, Kind::Set)
}

pub(super) fn scard(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    collection::count(cx, a, Kind::Set)
}

/// SISMEMBER and SMISMEMBER.
pub(super) fn sismember(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let s = read(cx, &key)?;
    let mut found = Vec::with_capacity(a.len() - 2);
    for m in &a[2..] {
        found.push(match &s {
            Some(s) => s.get(cx.shared, m)?.is_some(),
            None => false,
        });
    }
    if a[0].eq_ignore_ascii_case(b"smismember") {
        cx.out.array(found.len());
    }
    for f in found {
        cx.out.int(i64::from(f));
    }
    Ok(())
}

pub(super) fn smembers(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let members: Vec<Vec<u8>> = match read(cx, &key)? {
        Some(s) => s.all(cx)?.into_iter().map(|(m, _)| m).collect(),
        None => Vec::new(),
    };
    reply_set(cx, &members);
    Ok(())
}

/// A count argument that must not be negative (SPOP's).
fn positive_count(arg: &[u8]) -> Result<usize, String> {
    let n = int_arg(arg).map_err(|_| "ERR value is out of range, must be positive")?;
    usize::try_from(n).map_err(|_| "ERR value is out of range, must be positive".into())
}

pub(super) fn spop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if a.len() > 3 {
        return Err(syntax());
    }
    let count = a.get(2).map(|c| positive_count(c)).transpose()?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(mut s) = read(cx, &key)? else {
        match count {
            Some(_) => cx.out.set(0),
            None => cx.out.null(),
        }
        return Ok(());
    };
    let picked = match count {
        Some(n) => s.sample(cx, n)?,
        // A small set is sampled over one walk; a larger one skips what pops took.
        None if s.header.count <= collection::SMALL => s.pick_one(cx)?.into_iter().collect(),
        None => set_pops::pick(cx, &s)?
            .map(|m| (m, Vec::new()))
            .into_iter()
            .collect(),
    };
    let version = s.header.version;
    // True when the set is left empty.
    let popped = (|| {
        let mut w = Writes::default();
        for (m, _) in &picked {
            s.remove(cx, &mut w, m)?;
        }
        let emptied = s.header.count == 0;
        s.finish(&mut w);
        w.commit(cx.shared)?;
        Ok::<bool, String>(emptied)
    })();
    // Emptied, or the pop did not happen (the runs it recorded as gone may hold its member).
    if !popped.as_ref().is_ok_and(|&emptied| !emptied) {
        cx.shared.set_gaps.forget(version);
    }
    popped?;
    let members: Vec<Vec<u8>> = picked.into_iter().map(|(m, _)| m).collect();
    match count {
        Some(_) => reply_set(cx, &members),
        None => match members.first() {
            Some(m) => cx.out.bulk(m),
            None => cx.out.null(),
        },
    }
    Ok(())
}

pub(super) fn srandmember(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if a.len() > 3 {
        return Err(syntax());
    }
    let count = a.get(2).map(|c| int_arg(c)).transpose()?;
    if count == Some(i64::MIN) {
        return Err("ERR value is out of range".into());
    }
    let Some(picked) = collection::draw(cx, a[1], Kind::Set, count)? else {
        return Ok(());
    };
    let count = count.unwrap_or(0);
    let members: Vec<Vec<u8>> = picked.into_iter().map(|(m, _)| m).collect();
    if count >= 0 {
        reply_set(cx, &members);
    } else {
        cx.out.array(members.len());
        for m in &members {
            cx.out.bulk(m);
        }
    }
    Ok(())
}

pub(super) fn smove(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (src, dst) = (cx.key(a[1]), cx.key(a[2]));
    let _g = cx.lock([src.as_slice(), dst.as_slice()]);
    // As in Redis: a missing source answers 0 before the kinds are checked.
    if cx.get_any_locked(&src)?.is_none() {
        cx.out.int(0);
        return Ok(());
    }
    let from = read(cx, &src)?;
    let to = read(cx, &dst)?;
    let Some(mut from) = from else {
        cx.out.int(0);
        return Ok(());
    };
    if from.get(cx.shared, a[3])?.is_none() {
        cx.out.int(0);
        return Ok(());
    }
    if src == dst {
        cx.out.int(1);
        return Ok(());
    }
    let mut w = Writes::default();
    from.remove(cx, &mut w, a[3])?;
    from.finish(&mut w);
    let mut to = match to {
        Some(to) => to,
        None => Collection::open(cx, &dst, Kind::Set, &mut w)?,
    };
    if to.get(cx.shared, a[3])?.is_none() {
        cx.shared.set_gaps.added(to.header.version, a[3]);
        to.put(cx, &mut w, a[3], b"")?;
        to.finish(&mut w);
    }
    w.commit(cx.shared)?;
    cx.out.int(1);
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The members of the sets of `keys` combined by `op` (a missing key is an empty set),
/// stopping at `limit` members; the keys' stripes are held by the caller. The intersection
/// and difference walk one set and look each member up in the others.
fn combine(
    cx: &Ctx<'_, '_>,
    keys: &[Vec<u8>],
    op: Op,
    limit: usize,
) -> Result<Vec<Vec<u8>>, String> {
    let mut sets = Vec::with_capacity(keys.len());
    for k in keys {
        sets.push(read(cx, k)?);
    }
    let mut out = Vec::new();
    match op {
        Op::Union => {
            let mut all = BTreeSet::new();
            for s in sets.iter().flatten() {
                s.walk(cx.shared, Bound::Unbounded, |m, _| {
                    all.insert(m.to_vec());
                    true
                })?;
            }
            out.extend(all.into_iter().take(limit));
        }
        Op::Inter | Op::Diff => {
            if op == Op::Inter && sets.iter().any(Option::is_none) {
                return Ok(out);
            }
            // The intersection walks its smallest set, the difference its first.
            let at = match op {
                Op::Inter => (0..sets.len())
                    .min_by_key(|&i| sets[i].as_ref().map_or(0, |s| s.header.count))
                    .unwrap_or(0),
                _ => 0,
            };
            let Some(Some(first)) = sets.get(at) else {
                return Ok(out);
            };
            let others: Vec<&Collection> = sets
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != at)
                .filter_map(|(_, s)| s.as_ref())
                .collect();
            let mut failed = None;
            first.walk(cx.shared, Bound::Unbounded, |m, _| {
                let mut keep = true;
                for s in &others {
                    match s.get(cx.shared, m) {
                        Ok(found) => keep &= found.is_some() == (op == Op::Inter),
                        Err(e) => {
                            failed = Some(e);
                            return false;
                        }
                    }
                }
                if keep {
                    out.push(m.to_vec());
                }
                out.len() < limit
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
    Ok(out)
}

fn op_of(name: &[u8]) -> Op {
    let name = upper(name);
    if name.starts_with("SINTER") {
        Op::Inter
    } else if name.starts_with("SUNION") {
        Op::Union
    } else {
        Op::Diff
    }
}

/// SINTER, SUNION and SDIFF.
pub(super) fn algebra(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let keys: Vec<Vec<u8>> = a[1..].iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let members = combine(cx, &keys, op_of(a[0]), usize::MAX)?;
    reply_set(cx, &members);
    Ok(())
}

/// SINTERSTORE, SUNIONSTORE and SDIFFSTORE: the result replaces what the destination held.
pub(super) fn store(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let dst = cx.key(a[1]);
    let keys: Vec<Vec<u8>> = a[2..].iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().chain([&dst]).map(Vec::as_slice));
    let members = combine(cx, &keys, op_of(a[0]), usize::MAX)?;
    let mut w = Writes::default();
    let mut s = Collection::replace(cx, &dst, Kind::Set, &mut w)?;
    for m in &members {
        s.put(cx, &mut w, m, b"")?;
    }
    s.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.int(members.len() as i64);
    Ok(())
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`.
pub(super) fn sintercard(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let n = parse_i64(a[1]).filter(|&n| n > 0);
    let Some(n) = n else {
        return Err("ERR numkeys should be greater than 0".into());
    };
    let n = n as usize;
    if n > a.len() - 2 {
        return Err("ERR Number of keys can't be greater than number of args".into());
    }
    let mut limit = usize::MAX;
    let mut i = 2 + n;
    while i < a.len() {
        match upper(a[i]).as_str() {
            "LIMIT" => {
                let l = parse_i64(a.get(i + 1).ok_or_else(syntax)?).filter(|&l| l >= 0);
                let Some(l) = l else {
                    return Err("ERR LIMIT can't be negative".into());
                };
                limit = if l == 0 { usize::MAX } else { l as usize };
                i += 2;
            }
            _ => return Err(syntax()),
        }
    }
    let keys: Vec<Vec<u8>> = a[2..2 + n].iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let members = combine(cx, &keys, Op::Inter, limit)?;
    cx.out.int(members.len() as i64);
    Ok(())
}

pub(super) fn sscan(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let (next, found) = match read(cx, &key)? {
        Some(s) => collection::scan(cx, &s, a)?,
        None => {
            collection::check_scan_args(a)?;
            (0, Vec::new())
        }
    };
    cx.out.array(2);
    cx.out.bulk(next.to_string().as_bytes());
    cx.out.array(found.len());
    for (m, _) in &found {
        cx.out.bulk(m);
    }
    Ok(())
}

//! The sorted set family, first part: the storage of a sorted set and the commands that
//! read or change members one by one (ZADD, ZINCRBY, ZREM, ZSCORE, ZRANK, ZPOPMIN, ...).
//! Ranges (ZRANGE and its kin, ZCOUNT, ZREMRANGEBY*) are in `zrange.rs`, the algebra
//! (ZUNION, ZINTER, ZDIFF) in `zalgebra.rs`.
//!
//! A sorted set is a collection (`collection.rs`) whose elements hold each member's score,
//! beside a score index of `(score, member)` entries in score order (`crate::store`): a
//! member's score is one point read, and ranges by score or rank walk the index.

use std::ops::Bound;

use super::collection::{Collection, Element, walk_range};
use super::keyspace::Writes;
use super::strings::parse_float;
use super::{Ctx, Outcome, int_arg, syntax, upper};
use crate::shared::Shared;
use crate::store::{self, Kind};

/// A sorted set as a command finds it and changes it.
pub(crate) struct ZSet(pub Collection);

/// A member and its score.
pub(crate) type Scored = (Vec<u8>, f64);

impl ZSet {
    pub(crate) fn read(cx: &Ctx<'_, '_>, key: &[u8]) -> Result<Option<Self>, String> {
        Ok(Collection::read(cx, key, Kind::ZSet)?.map(ZSet))
    }

    pub(crate) fn open(cx: &Ctx<'_, '_>, key: &[u8], w: &mut Writes) -> Result<Self, String> {
        Ok(ZSet(Collection::open(cx, key, Kind::ZSet, w)?))
    }

    pub(crate) fn count(&self) -> u64 {
        self.0.header.count
    }

    pub(crate) fn version(&self) -> u64 {
        self.0.header.version
    }

    pub(crate) fn score(&self, shared: &Shared, member: &[u8]) -> Result<Option<f64>, String> {
        match self.0.get(shared, member)? {
            None => Ok(None),
            Some(v) => store::decode_score(&v)
                .map(Some)
                .ok_or_else(|| "ERR corrupt stored value: a score of the wrong length".into()),
        }
    }

    /// Gives `member` `score`; returns its score before (`None`: it is new).
    pub(crate) fn set(
        &mut self,
        cx: &Ctx<'_, '_>,
        w: &mut Writes,
        member: &[u8],
        score: f64,
    ) -> Result<Option<f64>, String> {
        let old = self.score(cx.shared, member)?;
        if old == Some(score) {
            return Ok(old);
        }
        if let Some(old) = old {
            w.delete_raw(&store::score_key(self.version(), old, member));
        }
        let new = store::score_key(self.version(), score, member);
        {
            // A member beyond a pop edge moves the edge away.
            let mut edges = cx
                .shared
                .pop_edges
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let version = self.version();
            if edges
                .get(&(version, false))
                .is_some_and(|edge| new <= *edge)
            {
                edges.remove(&(version, false));
            }
            if edges.get(&(version, true)).is_some_and(|edge| new >= *edge) {
                edges.remove(&(version, true));
            }
        }
        w.put_raw(&new, b"");
        self.0.put(cx, w, member, &store::encode_score(score))?;
        Ok(old)
    }

    /// Removes `member`; true when it was one.
    pub(crate) fn remove(
        &mut self,
        cx: &Ctx<'_, '_>,
        w: &mut Writes,
        member: &[u8],
    ) -> Result<bool, String> {
        let Some(old) = self.score(cx.shared, member)? else {
            return Ok(false);
        };
        w.delete_raw(&store::score_key(self.version(), old, member));
        self.0.remove(cx, w, member)
    }

    /// Calls `each` with the members of the score index between engine keys `lo` and `hi`,
    /// in score order or (`backward`) its reverse, until it returns false.
    pub(crate) fn walk_scores(
        &self,
        shared: &Shared,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        backward: bool,
        mut each: impl FnMut(f64, &[u8]) -> bool,
    ) -> Outcome {
        if is_empty(&lo, &hi) {
            return Ok(());
        }
        walk_range(
            shared,
            (lo, hi),
            backward,
            |k, _| match store::parse_score_key(k) {
                Some((score, member)) => each(score, member),
                None => true,
            },
        )
    }

    /// The score index's whole range, as bounds.
    pub(crate) fn all(&self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        let (lo, hi) = store::scores_range(self.version());
        (Bound::Included(lo), Bound::Excluded(hi))
    }

    /// Up to `n` members from rank `start` on (ranks from the end for `rev`), in that order.
    /// Walks from whichever end of the index is nearer.
    pub(crate) fn by_rank(
        &self,
        shared: &Shared,
        start: u64,
        n: u64,
        rev: bool,
    ) -> Result<Vec<Scored>, String> {
        let count = self.count();
        let n = n.min(count.saturating_sub(start));
        if n == 0 {
            return Ok(Vec::new());
        }
        let (mut lo, mut hi) = self.all();
        // Pops from this end left no member before its edge (see `Shared::pop_edges`).
        if start == 0 {
            let edges = shared.pop_edges.lock().unwrap_or_else(|e| e.into_inner());
            match (rev, edges.get(&(self.version(), rev))) {
                (false, Some(edge)) => lo = Bound::Excluded(edge.clone()),
                (true, Some(edge)) => hi = Bound::Excluded(edge.clone()),
                _ => {}
            }
        }
        let mut out = Vec::with_capacity(n.min(1 << 16) as usize);
        // From the other end the same members come in reverse, after skipping the rest.
        let other_end = start > count / 2;
        let skip = if other_end { count - start - n } else { start };
        let mut seen = 0u64;
        self.walk_scores(shared, lo, hi, rev != other_end, |score, member| {
            if seen >= skip {
                out.push((member.to_vec(), score));
            }
            seen += 1;
            (out.len() as u64) < n
        })?;
        if other_end {
            out.reverse();
        }
        Ok(out)
    }

    /// The rank of `member` with `score` (from the end for `rev`).
    pub(crate) fn rank(
        &self,
        shared: &Shared,
        member: &[u8],
        score: f64,
        rev: bool,
    ) -> Result<u64, String> {
        let (lo, hi) = self.all();
        let here = store::score_key(self.version(), score, member);
        let mut rank = 0u64;
        let (lo, hi) = match rev {
            false => (lo, Bound::Excluded(here)),
            true => (Bound::Excluded(here), hi),
        };
        self.walk_scores(shared, lo, hi, false, |_, _| {
            rank += 1;
            true
        })?;
        Ok(rank)
    }
}

/// True when no key lies between `lo` and `hi`.
fn is_empty(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
        _ => false,
    }
}

/// A score as Redis 7.0 writes one: `%.17g`, `inf` and `-inf`.
pub(crate) fn score_text(score: f64) -> String {
    if score.is_infinite() {
        return if score > 0.0 { "inf" } else { "-inf" }.into();
    }
    if score == 0.0 {
        return if score.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{score:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        match s.contains('.') {
            true => s.trim_end_matches('0').trim_end_matches('.').to_string(),
            false => s.to_string(),
        }
    };
    if !(-4..17).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{score:.*}", (16 - exp) as usize))
    }
}

/// A score argument, as ZADD and ZINCRBY read one.
pub(crate) fn score_arg(b: &[u8]) -> Result<f64, String> {
    parse_float(b).ok_or_else(|| "ERR value is not a valid float".into())
}

/// Replies with a score: a double in RESP3, a bulk string in RESP2.
pub(crate) fn reply_score(cx: &mut Ctx<'_, '_>, score: f64) {
    cx.out.double(&score_text(score));
}

/// How members and their scores are laid out in a reply.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Shape {
    /// Flat in RESP2, `[member, score]` pairs in RESP3 (ZRANGE WITHSCORES and most others).
    ByProtocol,
    /// Flat in both (ZPOPMIN without a count).
    Flat,
    /// Pairs in both (ZMPOP).
    Pairs,
}

/// Members, with their scores when asked, laid out as `shape` says.
pub(crate) fn reply_scored(cx: &mut Ctx<'_, '_>, items: &[Scored], scores: bool, shape: Shape) {
    let pairs = scores
        && match shape {
            Shape::ByProtocol => cx.out.is_resp3(),
            Shape::Flat => false,
            Shape::Pairs => true,
        };
    match (scores, pairs) {
        (true, false) => cx.out.array(2 * items.len()),
        _ => cx.out.array(items.len()),
    }
    for (member, score) in items {
        if pairs {
            cx.out.array(2);
        }
        cx.out.bulk(member);
        if scores {
            reply_score(cx, *score);
        }
    }
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`.
pub(super) fn zadd(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut i = 2;
    while i < a.len() {
        match upper(a[i]).as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            "CH" => ch = true,
            "INCR" => incr = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &a[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(syntax());
    }
    if nx && xx {
        return Err("ERR XX and NX options at the same time are not compatible".into());
    }
    if (gt && lt) || (nx && (gt || lt)) {
        return Err("ERR GT, LT, and/or NX options at the same time are not compatible".into());
    }
    if incr && pairs.len() > 2 {
        return Err("ERR INCR option supports a single increment-element pair".into());
    }
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        scores.push((score_arg(pair[0])?, pair[1]));
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let existing = ZSet::read(cx, &key)?;
    if existing.is_none() && xx {
        reply_zadd(cx, incr, None, 0);
        return Ok(());
    }
    let mut z = match existing {
        Some(z) => z,
        None => ZSet::open(cx, &key, &mut w)?,
    };
    let (mut added, mut changed, mut last) = (0, 0, None);
    for (score, member) in scores {
        let old = z.score(cx.shared, member)?;
        let new = match (old, incr) {
            (Some(o), true) => o + score,
            _ => score,
        };
        if new.is_nan() {
            return Err("ERR resulting score is not a number (NaN)".into());
        }
        let refused = match old {
            None => xx,
            Some(o) => nx || (gt && new <= o) || (lt && new >= o),
        };
        if refused {
            continue;
        }
        last = Some(new);
        match old {
            None => added += 1,
            Some(o) if o != new => changed += 1,
            Some(_) => continue,
        }
        z.set(cx, &mut w, member, new)?;
    }
    if added + changed > 0 {
        z.0.finish(&mut w);
        w.commit(cx.shared)?;
    }
    reply_zadd(cx, incr, last, if ch { added + changed } else { added });
    Ok(())
}

fn reply_zadd(cx: &mut Ctx<'_, '_>, incr: bool, last: Option<f64>, n: i64) {
    match (incr, last) {
        (true, Some(score)) => reply_score(cx, score),
        (true, None) => cx.out.null(),
        (false, _) => cx.out.int(n),
    }
}

pub(super) fn zincrby(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let by = score_arg(a[2])?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let mut z = ZSet::open(cx, &key, &mut w)?;
    let new = z.score(cx.shared, a[3])?.unwrap_or(0.0) + by;
    if new.is_nan() {
        return Err("ERR resulting score is not a number (NaN)".into());
    }
    z.set(cx, &mut w, a[3], new)?;
    z.0.finish(&mut w);
    w.commit(cx.shared)?;
    reply_score(cx, new);
    Ok(())
}

pub(super) fn zrem(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(mut z) = ZSet::read(cx, &key)? else {
        cx.out.int(0);
        return Ok(());
    };
    let mut w = Writes::default();
    let mut removed = 0;
    for m in &a[2..] {
        removed += i64::from(z.remove(cx, &mut w, m)?);
    }
    if removed > 0 {
        z.0.finish(&mut w);
        w.commit(cx.shared)?;
    }
    cx.out.int(removed);
    Ok(())
}

pub(super) fn zcard(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    super::collection::count(cx, a, Kind::ZSet)
}

/// ZSCORE and ZMSCORE.
pub(super) fn zscore(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let z = ZSet::read(cx, &key)?;
    let mut scores = Vec::with_capacity(a.len() - 2);
    for m in &a[2..] {
        scores.push(match &z {
            Some(z) => z.score(cx.shared, m)?,
            None => None,
        });
    }
    if a[0].eq_ignore_ascii_case(b"zmscore") {
        cx.out.array(scores.len());
    }
    for s in scores {
        match s {
            Some(s) => reply_score(cx, s),
            None => cx.out.null(),
        }
    }
    Ok(())
}

/// ZRANK and ZREVRANK.
pub(super) fn zrank(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let rev = a[0].eq_ignore_ascii_case(b"zrevrank");
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let rank = match ZSet::read(cx, &key)? {
        None => None,
        Some(z) => match z.score(cx.shared, a[2])? {
            None => None,
            Some(score) => Some(z.rank(cx.shared, a[2], score, rev)?),
        },
    };
    match rank {
        Some(r) => cx.out.int(r as i64),
        None => cx.out.null(),
    }
    Ok(())
}

/// Removes and returns up to `n` members from the low end (or the high end, `max`).
pub(crate) fn pop(cx: &Ctx<'_, '_>, key: &[u8], n: u64, max: bool) -> Result<Vec<Scored>, String> {
    let Some(mut z) = ZSet::read(cx, key)? else {
        return Ok(Vec::new());
    };
    let popped = z.by_rank(cx.shared, 0, n, max)?;
    if popped.is_empty() {
        return Ok(popped);
    }
    let mut w = Writes::default();
    for (m, _) in &popped {
        z.remove(cx, &mut w, m)?;
    }
    let version = z.version();
    // The removals counted themselves off.
    let remaining = z.count();
    z.0.finish(&mut w);
    w.commit(cx.shared)?;
    // The next pop from this end seeks past what this one deleted rather than walking its
    // tombstones; not inside EXEC, whose writes are not in the engine yet.
    if let Some((member, score)) = popped
        .last()
        .filter(|_| remaining > 0 && !super::exec_state::in_exec())
    {
        let mut edges = cx
            .shared
            .pop_edges
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if edges.len() >= MAX_POP_EDGES {
            edges.clear();
        }
        edges.insert((version, max), store::score_key(version, *score, member));
    }
    Ok(popped)
}

/// Pop edges kept at most (one per sorted set and end, while it is popped from).
const MAX_POP_EDGES: usize = 4096;

/// ZPOPMIN and ZPOPMAX `key [count]`.
pub(super) fn zpop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if a.len() > 3 {
        return Err(syntax());
    }
    let max = a[0].eq_ignore_ascii_case(b"zpopmax");
    let count = match a.get(2) {
        None => None,
        Some(c) => Some(
            u64::try_from(int_arg(c)?)
                .map_err(|_| "ERR value is out of range, must be positive")?,
        ),
    };
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let popped = pop(cx, &key, count.unwrap_or(1), max)?;
    // With a count, RESP3 nests the pairs; without one the reply is one flat pair.
    let shape = match count {
        Some(_) => Shape::ByProtocol,
        None => Shape::Flat,
    };
    reply_scored(cx, &popped, true, shape);
    Ok(())
}

/// `ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]`: pops from the first key that holds
/// members.
pub(super) fn zmpop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (n, max, count) = mpop_args(&a[1..])?;
    let keys: Vec<Vec<u8>> = a[2..2 + n].iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    for (k, name) in keys.iter().zip(&a[2..2 + n]) {
        let popped = pop(cx, k, count, max)?;
        if !popped.is_empty() {
            cx.out.array(2);
            cx.out.bulk(name);
            reply_scored(cx, &popped, true, Shape::Pairs);
            return Ok(());
        }
    }
    cx.out.null_array();
    Ok(())
}

/// The arguments of ZMPOP and BZMPOP from `numkeys` on: the number of keys, whether to pop
/// the highest members, and how many.
pub(crate) fn mpop_args(a: &[&[u8]]) -> Result<(usize, bool, u64), String> {
    let n = super::parse_i64(a[0])
        .filter(|&n| n > 0)
        .ok_or("ERR numkeys should be greater than 0")? as usize;
    let rest = a.get(1 + n..).ok_or_else(syntax)?;
    let max = match rest.first().map(|w| upper(w)).as_deref() {
        Some("MIN") => false,
        Some("MAX") => true,
        _ => return Err(syntax()),
    };
    let count = match rest.get(1..) {
        Some([]) | None => 1,
        Some([word, c]) if upper(word) == "COUNT" => super::parse_i64(c)
            .filter(|&c| c > 0)
            .ok_or("ERR count should be greater than 0")?
            as u64,
        Some(_) => return Err(syntax()),
    };
    Ok((n, max, count))
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`.
pub(super) fn zrandmember(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let count = a.get(2).map(|c| int_arg(c)).transpose()?;
    let scores = match a.get(3) {
        None => false,
        Some(o) if a.len() == 4 && upper(o) == "WITHSCORES" => true,
        Some(_) => return Err(syntax()),
    };
    if count == Some(i64::MIN) || scores && count.is_some_and(|c| c < -(i64::MAX / 2)) {
        return Err("ERR value is out of range".into());
    }
    let Some(picked) = super::collection::draw(cx, a[1], Kind::ZSet, count)? else {
        return Ok(());
    };
    let items: Vec<Scored> = picked
        .into_iter()
        .map(|(m, v)| (m, store::decode_score(&v).unwrap_or(0.0)))
        .collect();
    reply_scored(cx, &items, scores, Shape::ByProtocol);
    Ok(())
}

pub(super) fn zscan(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let (next, found): (u64, Vec<Element>) = match ZSet::read(cx, &key)? {
        Some(z) => super::collection::scan(cx, &z.0, a)?,
        None => {
            super::collection::check_scan_args(a)?;
            (0, Vec::new())
        }
    };
    cx.out.array(2);
    cx.out.bulk(next.to_string().as_bytes());
    cx.out.array(2 * found.len());
    for (m, v) in &found {
        cx.out.bulk(m);
        cx.out
            .bulk(score_text(store::decode_score(v).unwrap_or(0.0)).as_bytes());
    }
    Ok(())
}

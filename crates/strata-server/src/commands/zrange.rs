//! The sorted set family, second part: ranges by rank, score and member (ZRANGE with
//! BYSCORE, BYLEX, REV and LIMIT, the older ZRANGEBYSCORE, ZREVRANGE, ... forms,
//! ZRANGESTORE, ZCOUNT, ZLEXCOUNT and ZREMRANGEBY*). Every range walks the score index or
//! the member index from its first member, never loading the set.

use std::ops::Bound;

use super::collection::walk_range;
use super::keyspace::Writes;
use super::zsets::{Scored, Shape, ZSet, reply_scored};
use super::{Ctx, Outcome, int_arg, syntax, upper};
use crate::shared::Shared;
use crate::store;

/// One end of a score range: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
#[derive(Clone, Copy)]
struct ScoreEnd {
    score: f64,
    exclusive: bool,
}

fn score_end(b: &[u8]) -> Result<ScoreEnd, String> {
    let bad = || "ERR min or max is not a float".to_string();
    let (exclusive, text) = match b.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, b),
    };
    let score = super::strings::parse_float(text).ok_or_else(bad)?;
    Ok(ScoreEnd { score, exclusive })
}

/// One end of a member range: `-`, `+`, `[m` or `(m`.
#[derive(Clone)]
enum LexEnd {
    Least,
    Greatest,
    Member(Vec<u8>, bool),
}

fn lex_end(b: &[u8]) -> Result<LexEnd, String> {
    match b.split_first() {
        Some((b'-', [])) => Ok(LexEnd::Least),
        Some((b'+', [])) => Ok(LexEnd::Greatest),
        Some((b'[', m)) => Ok(LexEnd::Member(m.to_vec(), false)),
        Some((b'(', m)) => Ok(LexEnd::Member(m.to_vec(), true)),
        _ => Err("ERR min or max not valid string range item".into()),
    }
}

/// The engine keys of the score index that the scores from `min` to `max` span.
fn score_bounds(z: &ZSet, min: ScoreEnd, max: ScoreEnd) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let at = |s: f64| store::score_key(z.version(), s, b"");
    // Just past every member of score `s`: the next score's first key.
    let past = |s: f64| {
        let mut k = at(s);
        let n = u64::from_be_bytes(k[9..17].try_into().unwrap_or([0xFF; 8]));
        match n.checked_add(1) {
            Some(n) => {
                k[9..17].copy_from_slice(&n.to_be_bytes());
                Bound::Excluded(k)
            }
            None => z.all().1,
        }
    };
    let lo = match min.exclusive {
        false => Bound::Included(at(min.score)),
        true => match past(min.score) {
            Bound::Excluded(k) => Bound::Included(k),
            other => other,
        },
    };
    let hi = match max.exclusive {
        false => past(max.score),
        true => Bound::Excluded(at(max.score)),
    };
    (lo, hi)
}

/// The engine keys of the member index that the members from `min` to `max` span.
fn lex_bounds(z: &ZSet, min: &LexEnd, max: &LexEnd) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let key = |m: &[u8]| store::element_key(z.version(), m);
    let (first, end) = store::elements_range(z.version());
    let lo = match min {
        LexEnd::Least => Bound::Included(first.clone()),
        LexEnd::Greatest => Bound::Excluded(end.clone()),
        LexEnd::Member(m, false) => Bound::Included(key(m)),
        LexEnd::Member(m, true) => Bound::Excluded(key(m)),
    };
    let hi = match max {
        LexEnd::Least => Bound::Excluded(first),
        LexEnd::Greatest => Bound::Excluded(end),
        LexEnd::Member(m, false) => Bound::Included(key(m)),
        LexEnd::Member(m, true) => Bound::Excluded(key(m)),
    };
    (lo, hi)
}

/// What a range selects.
enum Select {
    Rank(i64, i64),
    Score(ScoreEnd, ScoreEnd),
    Lex(LexEnd, LexEnd),
}

/// A range query: what it selects, its direction, and LIMIT's offset and count.
struct Query {
    select: Select,
    rev: bool,
    offset: u64,
    limit: Option<u64>,
}

/// The members `q` selects, in its order.
fn run(z: &ZSet, shared: &Shared, q: &Query) -> Result<Vec<Scored>, String> {
    if q.limit == Some(0) {
        return Ok(Vec::new());
    }
    let (lo, hi) = match &q.select {
        Select::Rank(start, stop) => {
            let count = z.count() as i64;
            let start = if *start < 0 { start + count } else { *start }.max(0);
            let stop = if *stop < 0 { stop + count } else { *stop }.min(count - 1);
            if start > stop || start >= count {
                return Ok(Vec::new());
            }
            return z.by_rank(shared, start as u64, (stop - start + 1) as u64, q.rev);
        }
        Select::Score(min, max) => score_bounds(z, *min, *max),
        Select::Lex(min, max) => {
            let (lo, hi) = lex_bounds(z, min, max);
            let mut out = Vec::new();
            let mut skipped = 0;
            let mut failed = None;
            if !is_inverted(&lo, &hi) {
                walk_range(shared, (lo, hi), q.rev, |k, v| {
                    if skipped < q.offset {
                        skipped += 1;
                        return true;
                    }
                    match store::decode_score(v) {
                        Some(s) => out.push((store::element_member(k).to_vec(), s)),
                        None => failed = Some("ERR corrupt stored value: a score"),
                    }
                    q.limit.is_none_or(|l| (out.len() as u64) < l)
                })?;
            }
            return match failed {
                Some(e) => Err(e.into()),
                None => Ok(out),
            };
        }
    };
    let mut out = Vec::new();
    let mut skipped = 0;
    z.walk_scores(shared, lo, hi, q.rev, |score, member| {
        if skipped < q.offset {
            skipped += 1;
            return true;
        }
        out.push((member.to_vec(), score));
        q.limit.is_none_or(|l| (out.len() as u64) < l)
    })?;
    Ok(out)
}

fn is_inverted(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
        _ => false,
    }
}

/// How a range command names its ends and options.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT o c] [WITHSCORES]` (and
    /// ZRANGESTORE's, without WITHSCORES).
    Range,
    Rank {
        rev: bool,
    },
    Score {
        rev: bool,
    },
    Lex {
        rev: bool,
    },
}

/// Parses a range command's arguments after the key: the query and WITHSCORES.
fn parse(form: Form, a: &[&[u8]], store: bool) -> Result<(Query, bool), String> {
    let (mut by_score, mut by_lex, mut rev) = (false, false, false);
    match form {
        Form::Rank { rev: r } => rev = r,
        Form::Score { rev: r } => (by_score, rev) = (true, r),
        Form::Lex { rev: r } => (by_lex, rev) = (true, r),
        Form::Range => {}
    }
    let (mut scores, mut limit) = (false, None);
    let mut i = 2;
    while i < a.len() {
        let word = upper(a[i]);
        match word.as_str() {
            "WITHSCORES" if !store && !matches!(form, Form::Lex { .. }) => scores = true,
            "LIMIT" if !matches!(form, Form::Rank { .. }) => {
                let (o, c) = (
                    a.get(i + 1).ok_or_else(syntax)?,
                    a.get(i + 2).ok_or_else(syntax)?,
                );
                limit = Some((int_arg(o)?, int_arg(c)?));
                i += 2;
            }
            "BYSCORE" if form == Form::Range => by_score = true,
            "BYLEX" if form == Form::Range => by_lex = true,
            "REV" if form == Form::Range => rev = true,
            _ => return Err(syntax()),
        }
        i += 1;
    }
    if by_score && by_lex {
        return Err(syntax());
    }
    if by_lex && scores {
        return Err("ERR syntax error, WITHSCORES not supported in combination with BYLEX".into());
    }
    if limit.is_some() && !by_score && !by_lex {
        return Err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
                .into(),
        );
    }
    // The older reversed forms, and ZRANGE with REV, name the high end first.
    let (first, second) = (a[0], a[1]);
    let (min, max) = if rev && (by_score || by_lex) {
        (second, first)
    } else {
        (first, second)
    };
    let select = if by_score {
        Select::Score(score_end(min)?, score_end(max)?)
    } else if by_lex {
        Select::Lex(lex_end(min)?, lex_end(max)?)
    } else {
        Select::Rank(int_arg(first)?, int_arg(second)?)
    };
    let (offset, limit) = match limit {
        None => (0, None),
        Some((o, _)) if o < 0 => (0, Some(0)),
        Some((o, c)) => (o as u64, u64::try_from(c).ok()),
    };
    Ok((
        Query {
            select,
            rev,
            offset,
            limit,
        },
        scores,
    ))
}

fn form_of(name: &[u8]) -> Form {
    match upper(name).as_str() {
        "ZREVRANGE" => Form::Rank { rev: true },
        "ZRANGEBYSCORE" => Form::Score { rev: false },
        "ZREVRANGEBYSCORE" => Form::Score { rev: true },
        "ZRANGEBYLEX" => Form::Lex { rev: false },
        "ZREVRANGEBYLEX" => Form::Lex { rev: true },
        _ => Form::Range,
    }
}

/// ZRANGE, ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX and ZREVRANGEBYLEX.
pub(super) fn zrange(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (q, scores) = parse(form_of(a[0]), &a[2..], false)?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let items = match ZSet::read(cx, &key)? {
        Some(z) => run(&z, cx.shared, &q)?,
        None => Vec::new(),
    };
    reply_scored(cx, &items, scores, Shape::ByProtocol);
    Ok(())
}

/// `ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]`.
pub(super) fn zrangestore(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (q, _) = parse(Form::Range, &a[3..], true)?;
    let (dst, src) = (cx.key(a[1]), cx.key(a[2]));
    let _g = cx.lock([dst.as_slice(), src.as_slice()]);
    let items = match ZSet::read(cx, &src)? {
        Some(z) => run(&z, cx.shared, &q)?,
        None => Vec::new(),
    };
    store_members(cx, &dst, &items)?;
    cx.out.int(items.len() as i64);
    Ok(())
}

/// Replaces what `dst` holds with a sorted set of `items` (deleting it when there are none).
/// Requires: the caller holds `dst`'s stripe lock.
pub(crate) fn store_members(cx: &Ctx<'_, '_>, dst: &[u8], items: &[Scored]) -> Outcome {
    let mut w = Writes::default();
    let mut z = ZSet(super::collection::Collection::replace(
        cx,
        dst,
        store::Kind::ZSet,
        &mut w,
    )?);
    for (m, s) in items {
        z.set(cx, &mut w, m, *s)?;
    }
    z.0.finish(&mut w);
    w.commit(cx.shared)
}

/// ZCOUNT and ZLEXCOUNT `key min max`.
pub(super) fn zcount(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let lex = a[0].eq_ignore_ascii_case(b"zlexcount");
    let select = match lex {
        true => Select::Lex(lex_end(a[2])?, lex_end(a[3])?),
        false => Select::Score(score_end(a[2])?, score_end(a[3])?),
    };
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let q = Query {
        select,
        rev: false,
        offset: 0,
        limit: None,
    };
    let n = match ZSet::read(cx, &key)? {
        Some(z) => run(&z, cx.shared, &q)?.len(),
        None => 0,
    };
    cx.out.int(n as i64);
    Ok(())
}

/// ZREMRANGEBYRANK, ZREMRANGEBYSCORE and ZREMRANGEBYLEX `key min max`.
pub(super) fn zremrange(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let select = match upper(a[0]).as_str() {
        "ZREMRANGEBYRANK" => Select::Rank(int_arg(a[2])?, int_arg(a[3])?),
        "ZREMRANGEBYLEX" => Select::Lex(lex_end(a[2])?, lex_end(a[3])?),
        _ => Select::Score(score_end(a[2])?, score_end(a[3])?),
    };
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(mut z) = ZSet::read(cx, &key)? else {
        cx.out.int(0);
        return Ok(());
    };
    let q = Query {
        select,
        rev: false,
        offset: 0,
        limit: None,
    };
    let doomed = run(&z, cx.shared, &q)?;
    if !doomed.is_empty() {
        let mut w = Writes::default();
        for (m, _) in &doomed {
            z.remove(cx, &mut w, m)?;
        }
        z.0.finish(&mut w);
        w.commit(cx.shared)?;
    }
    cx.out.int(doomed.len() as i64);
    Ok(())
}

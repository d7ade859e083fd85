//! The sorted set family, third part: ZUNION, ZINTER, ZDIFF, their STORE forms and
//! ZINTERCARD. Sets may stand among the inputs, each member with score 1, as in Redis. The
//! inputs are read into memory (a sorted map per key) and combined there.

use std::collections::BTreeMap;

use super::collection::Collection;
use super::zrange::store_members;
use super::zsets::{Scored, Shape, reply_scored};
use super::{Ctx, Outcome, syntax, upper};
use crate::store::{self, Kind};

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            // inf + -inf is NaN: Redis makes it 0.
            Aggregate::Sum => {
                let s = a + b;
                if s.is_nan() { 0.0 } else { s }
            }
            Aggregate::Min => a.min(b),
            Aggregate::Max => a.max(b),
        }
    }
}

/// The members and scores of the sorted set or set under engine key `key` (empty when
/// absent); any other kind is WRONGTYPE. Requires: the caller holds the key's stripe lock.
fn members(cx: &Ctx<'_, '_>, key: &[u8]) -> Result<BTreeMap<Vec<u8>, f64>, String> {
    let mut out = BTreeMap::new();
    let Some(v) = cx.get_any_locked(key)? else {
        return Ok(out);
    };
    let kind = match v.kind {
        Kind::ZSet | Kind::Set => v.kind,
        _ => return Err(store::WRONGTYPE.into()),
    };
    let c = Collection::read(cx, key, kind)?.ok_or_else(|| store::WRONGTYPE.to_string())?;
    c.walk(cx.shared, std::ops::Bound::Unbounded, |m, value| {
        let score = match kind {
            Kind::ZSet => store::decode_score(value).unwrap_or(0.0),
            _ => 1.0,
        };
        out.insert(m.to_vec(), score);
        true
    })?;
    Ok(out)
}

/// The parsed tail of `numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE a] [WITHSCORES]`.
struct Args<'a> {
    keys: &'a [&'a [u8]],
    weights: Vec<f64>,
    aggregate: Aggregate,
    scores: bool,
}

fn parse<'a>(a: &'a [&'a [u8]], op: Op, name: &str, store: bool) -> Result<Args<'a>, String> {
    let n = super::parse_i64(a[0]).ok_or_else(super::not_an_integer)?;
    if n < 1 {
        return Err(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        ));
    }
    let n = n as usize;
    let keys = a.get(1..1 + n).ok_or_else(syntax)?;
    let mut args = Args {
        keys,
        weights: vec![1.0; n],
        aggregate: Aggregate::Sum,
        scores: false,
    };
    let mut i = 1 + n;
    while i < a.len() {
        match upper(a[i]).as_str() {
            "WEIGHTS" if op != Op::Diff => {
                let ws = a.get(i + 1..i + 1 + n).ok_or_else(syntax)?;
                for (slot, w) in args.weights.iter_mut().zip(ws) {
                    *slot =
                        super::strings::parse_float(w).ok_or("ERR weight value is not a float")?;
                }
                i += n;
            }
            "AGGREGATE" if op != Op::Diff => {
                args.aggregate = match a.get(i + 1).map(|w| upper(w)).as_deref() {
                    Some("SUM") => Aggregate::Sum,
                    Some("MIN") => Aggregate::Min,
                    Some("MAX") => Aggregate::Max,
                    _ => return Err(syntax()),
                };
                i += 1;
            }
            "WITHSCORES" if !store => args.scores = true,
            _ => return Err(syntax()),
        }
        i += 1;
    }
    Ok(args)
}

/// The members the inputs combine to, in score order. Requires: the keys' stripe locks.
fn combine(cx: &Ctx<'_, '_>, keys: &[Vec<u8>], args: &Args, op: Op) -> Result<Vec<Scored>, String> {
    let mut inputs = Vec::with_capacity(keys.len());
    for k in keys {
        inputs.push(members(cx, k)?);
    }
    let weighted = |score: f64, w: f64| {
        let s = score * w;
        if s.is_nan() { 0.0 } else { s }
    };
    let mut acc: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
    let mut first = true;
    for (input, &w) in inputs.iter().zip(&args.weights) {
        match op {
            Op::Union => {
                for (m, s) in input {
                    let s = weighted(*s, w);
                    acc.entry(m.clone())
                        .and_modify(|a| *a = args.aggregate.apply(*a, s))
                        .or_insert(s);
                }
            }
            Op::Inter if first => {
                acc = input
                    .iter()
                    .map(|(m, s)| (m.clone(), weighted(*s, w)))
                    .collect();
            }
            Op::Inter => {
                acc.retain(|m, _| input.contains_key(m));
                for (m, a) in acc.iter_mut() {
                    *a = args.aggregate.apply(*a, weighted(input[m], w));
                }
            }
            Op::Diff if first => acc = input.clone(),
            Op::Diff => acc.retain(|m, _| !input.contains_key(m)),
        }
        first = false;
    }
    let mut out: Vec<Scored> = acc.into_iter().collect();
    out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    Ok(out)
}

fn op_of(name: &str) -> Op {
    if name.starts_with("ZUNION") {
        Op::Union
    } else if name.starts_with("ZINTER") {
        Op::Inter
    } else {
        Op::Diff
    }
}

/// ZUNION, ZINTER and ZDIFF `numkeys key [key ...] ... [WITHSCORES]`.
pub(super) fn zcombine(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let name = upper(a[0]);
    let op = op_of(&name);
    let args = parse(&a[1..], op, &name.to_lowercase(), false)?;
    let keys: Vec<Vec<u8>> = args.keys.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let items = combine(cx, &keys, &args, op)?;
    reply_scored(cx, &items, args.scores, Shape::ByProtocol);
    Ok(())
}

/// ZUNIONSTORE, ZINTERSTORE and ZDIFFSTORE `destination numkeys key [key ...] ...`.
pub(super) fn zcombine_store(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let name = upper(a[0]);
    let op = op_of(&name);
    let args = parse(&a[2..], op, &name.to_lowercase(), true)?;
    let dst = cx.key(a[1]);
    let keys: Vec<Vec<u8>> = args.keys.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().chain([&dst]).map(Vec::as_slice));
    let items = combine(cx, &keys, &args, op)?;
    store_members(cx, &dst, &items)?;
    cx.out.int(items.len() as i64);
    Ok(())
}

/// `ZINTERCARD numkeys key [key ...] [LIMIT limit]`.
pub(super) fn zintercard(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let n = super::parse_i64(a[1]).ok_or_else(super::not_an_integer)?;
    if n < 1 {
        return Err("ERR at least 1 input key is needed for 'zintercard' command".into());
    }
    let n = n as usize;
    let limit = match a.get(2 + n..).ok_or_else(syntax)? {
        [] => usize::MAX,
        [word, l] if upper(word) == "LIMIT" => match super::parse_i64(l) {
            Some(0) => usize::MAX,
            Some(l) if l > 0 => l as usize,
            _ => return Err("ERR LIMIT can't be negative".into()),
        },
        _ => return Err(syntax()),
    };
    let keys: Vec<Vec<u8>> = a[2..2 + n].iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let args = Args {
        keys: &a[2..2 + n],
        weights: vec![1.0; n],
        aggregate: Aggregate::Sum,
        scores: false,
    };
    let items = combine(cx, &keys, &args, Op::Inter)?;
    cx.out.int(items.len().min(limit) as i64);
    Ok(())
}

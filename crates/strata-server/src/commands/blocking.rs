//! Blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX,
//! BZMPOP): a command that finds nothing to take asks its worker to park the connection
//! ([`After::Block`]); the connection then costs no thread, only an entry per key in
//! `shared::Blocking`. Every write that commits (one command's batch, or an `EXEC`'s) tells
//! the registry the keys it wrote (`Shared::notify_written`), and the workers of the
//! connections waiting on them run their commands again, in the order they blocked: the first
//! blocked is the first served. A command that still finds nothing stays parked, in its
//! place; one whose timeout passes answers null. Inside `MULTI`/`EXEC` a blocking command
//! does not block: it answers at once.

use std::time::{Duration, Instant};

use super::lists;
use super::zsets::{self, Shape, reply_score, reply_scored};
use super::{Ctx, Outcome, exec_state};
use crate::shared::{After, Block};
use crate::store::{self, Kind};

/// A blocking command's timeout in seconds (0: forever), as Redis reads it.
fn timeout(arg: &[u8]) -> Result<Option<Instant>, String> {
    let secs = super::strings::parse_float(arg)
        .filter(|s| s.is_finite())
        .ok_or("ERR timeout is not a float or out of range")?;
    if secs < 0.0 {
        return Err("ERR timeout is negative".into());
    }
    if secs == 0.0 {
        return Ok(None);
    }
    Ok(Some(
        Instant::now() + Duration::from_secs_f64(secs.min(1e9)),
    ))
}

/// Parks the command on `keys`, unless it runs inside `MULTI`/`EXEC`, where it answers null
/// at once (a null array; a null string for the moves).
fn block_or_null(cx: &mut Ctx<'_, '_>, keys: Vec<Vec<u8>>, deadline: Option<Instant>) {
    if exec_state::in_exec() {
        cx.out.null_array();
    } else {
        cx.after = After::Block(Block {
            keys,
            deadline,
            argv: None,
        });
    }
}

/// `BZPOPMIN key [key ...] timeout` and BZPOPMAX: the lowest (highest) member of the first
/// key that has one, as `[key, member, score]`.
pub(super) fn bzpop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let max = a[0].eq_ignore_ascii_case(b"bzpopmax");
    let deadline = timeout(a[a.len() - 1])?;
    let names = &a[1..a.len() - 1];
    let keys: Vec<Vec<u8>> = names.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    for (k, name) in keys.iter().zip(names) {
        if !check_kind(cx, k, Kind::ZSet)? {
            continue;
        }
        if let Some((member, score)) = zsets::pop(cx, k, 1, max)?.pop() {
            cx.out.array(3);
            cx.out.bulk(name);
            cx.out.bulk(&member);
            reply_score(cx, score);
            return Ok(());
        }
    }
    block_or_null(cx, keys, deadline);
    Ok(())
}

/// Whether `key` may be taken from: WRONGTYPE when it holds a live value of another kind
/// than `kind`, or false when a parked command runs again (Redis leaves a connection parked
/// on a key that became another kind).
fn check_kind(cx: &Ctx<'_, '_>, key: &[u8], kind: Kind) -> Result<bool, String> {
    match cx.get_any_locked(key)? {
        Some(v) if v.kind != kind && cx.conn.retrying => Ok(false),
        Some(v) if v.kind != kind => Err(store::WRONGTYPE.into()),
        _ => Ok(true),
    }
}

/// `BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]`.
pub(super) fn bzmpop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let deadline = timeout(a[1])?;
    let (n, max, count) = zsets::mpop_args(&a[2..])?;
    let names = &a[3..3 + n];
    let keys: Vec<Vec<u8>> = names.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    for (k, name) in keys.iter().zip(names) {
        if !check_kind(cx, k, Kind::ZSet)? {
            continue;
        }
        let popped = zsets::pop(cx, k, count, max)?;
        if !popped.is_empty() {
            cx.out.array(2);
            cx.out.bulk(name);
            reply_scored(cx, &popped, true, Shape::Pairs);
            return Ok(());
        }
    }
    block_or_null(cx, keys, deadline);
    Ok(())
}

/// `BLPOP key [key ...] timeout` and BRPOP: `[key, element]` from the first key with a list.
pub(super) fn blpop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let left = a[0].eq_ignore_ascii_case(b"blpop");
    let deadline = timeout(a[a.len() - 1])?;
    let names = &a[1..a.len() - 1];
    let keys: Vec<Vec<u8>> = names.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    for (k, name) in keys.iter().zip(names) {
        if !check_kind(cx, k, Kind::List)? {
            continue;
        }
        if let Some(v) = lists::pop_n(cx, k, 1, left)?.and_then(|mut p| p.pop()) {
            cx.out.array(2);
            cx.out.bulk(name);
            cx.out.bulk(&v);
            return Ok(());
        }
    }
    block_or_null(cx, keys, deadline);
    Ok(())
}

/// `BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]`.
pub(super) fn blmpop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let deadline = timeout(a[1])?;
    let (n, left, count) = lists::mpop_args(&a[2..])?;
    let names = &a[3..3 + n];
    let keys: Vec<Vec<u8>> = names.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let mut live = Vec::new();
    let mut live_names = Vec::new();
    for (k, name) in keys.iter().zip(names) {
        if check_kind(cx, k, Kind::List)? {
            live.push(k.clone());
            live_names.push(*name);
        }
    }
    if !lists::mpop_first(cx, &live, &live_names, left, count)? {
        block_or_null(cx, keys, deadline);
    }
    Ok(())
}

/// `BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout` and `BRPOPLPUSH source
/// destination timeout`: the element moved.
pub(super) fn blmove(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (from_left, to_left) = match a.len() {
        4 => (false, true),
        _ => (lists::side(a[3])?, lists::side(a[4])?),
    };
    let deadline = timeout(a[a.len() - 1])?;
    let (src, dst) = (cx.key(a[1]), cx.key(a[2]));
    let _g = cx.lock([src.as_slice(), dst.as_slice()]);
    if check_kind(cx, &src, Kind::List)?
        && let Some(v) = lists::move_one(cx, &src, &dst, from_left, to_left)?
    {
        cx.out.bulk(&v);
        return Ok(());
    }
    if exec_state::in_exec() {
        cx.out.null();
    } else {
        cx.after = After::Block(Block {
            keys: vec![src],
            deadline,
            argv: None,
        });
    }
    Ok(())
}

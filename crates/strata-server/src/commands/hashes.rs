//! The hash family: HSET, HGET, HDEL, HINCRBY, HGETALL, HRANDFIELD, HSCAN, ... Each field
//! is an element of the hash's collection (`collection.rs`), its value the element's value.

use std::ops::Bound;

use super::collection::{self, Collection, Element};
use super::keyspace::Writes;
use super::strings::{format_float, parse_float};
use super::{Ctx, Outcome, int_arg, parse_i64, syntax, upper, wrong_args};
use crate::store::Kind;

/// The hash under the command's key, for reading: `None` when absent.
fn read(cx: &Ctx<'_, '_>, key: &[u8]) -> Result<Option<Collection>, String> {
    Collection::read(cx, key, Kind::Hash)
}

/// HSET and HMSET: sets fields; HSET answers how many were new, HMSET OK.
pub(super) fn hset(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if !a.len().is_multiple_of(2) {
        return Err(wrong_args(&String::from_utf8_lossy(a[0]).to_lowercase()));
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let mut h = Collection::open(cx, &key, Kind::Hash, &mut w)?;
    let mut added = 0;
    for pair in a[2..].chunks(2) {
        added += i64::from(h.put(cx, &mut w, pair[0], pair[1])?);
    }
    h.finish(&mut w);
    w.commit(cx.shared)?;
    if a[0].eq_ignore_ascii_case(b"hmset") {
        cx.out.ok();
    } else {
        cx.out.int(added);
    }
    Ok(())
}

pub(super) fn hsetnx(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let mut h = Collection::open(cx, &key, Kind::Hash, &mut w)?;
    if h.get(cx.shared, a[2])?.is_some() {
        cx.out.int(0);
        return Ok(());
    }
    h.put(cx, &mut w, a[2], a[3])?;
    h.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.int(1);
    Ok(())
}

pub(super) fn hget(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    match read(cx, &key)?
        .map(|h| h.get(cx.shared, a[2]))
        .transpose()?
        .flatten()
    {
        Some(v) => cx.out.bulk(&v),
        None => cx.out.null(),
    }
    Ok(())
}

pub(super) fn hmget(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let h = read(cx, &key)?;
    let mut values = Vec::with_capacity(a.len() - 2);
    for field in &a[2..] {
        values.push(match &h {
            Some(h) => h.get(cx.shared, field)?,
            None => None,
        });
    }
    cx.out.array(values.len());
    for v in values {
        match v {
            Some(v) => cx.out.bulk(&v),
            None => cx.out.null(),
        }
    }
    Ok(())
}

pub(super) fn hdel(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    collection::remove_members(cx, a, Kind::Hash)
}

pub(super) fn hlen(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    collection::count(cx, a, Kind::Hash)
}

pub(super) fn hstrlen(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let v = read(cx, &key)?
        .map(|h| h.get(cx.shared, a[2]))
        .transpose()?;
    cx.out.int(v.flatten().map_or(0, |v| v.len()) as i64);
    Ok(())
}

pub(super) fn hexists(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let v = read(cx, &key)?
        .map(|h| h.get(cx.shared, a[2]))
        .transpose()?;
    cx.out.int(i64::from(v.flatten().is_some()));
    Ok(())
}

pub(super) fn hincrby(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let by = int_arg(a[3])?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let mut h = Collection::open(cx, &key, Kind::Hash, &mut w)?;
    let current = match h.get(cx.shared, a[2])? {
        Some(v) => parse_i64(&v).ok_or("ERR hash value is not an integer")?,
        None => 0,
    };
    let next = current
        .checked_add(by)
        .ok_or("ERR increment or decrement would overflow")?;
    h.put(cx, &mut w, a[2], next.to_string().as_bytes())?;
    h.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.int(next);
    Ok(())
}

pub(super) fn hincrbyfloat(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let by = parse_float(a[3]).ok_or("ERR value is not a valid float")?;
    if !by.is_finite() {
        return Err("ERR value is NaN or Infinity".into());
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let mut h = Collection::open(cx, &key, Kind::Hash, &mut w)?;
    let current = match h.get(cx.shared, a[2])? {
        Some(v) => parse_float(&v).ok_or("ERR hash value is not a float")?,
        None => 0.0,
    };
    let next = current + by;
    if !next.is_finite() {
        return Err("ERR increment would produce NaN or Infinity".into());
    }
    let text = format_float(next);
    h.put(cx, &mut w, a[2], text.as_bytes())?;
    h.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.bulk(text.as_bytes());
    Ok(())
}

/// HKEYS, HVALS and HGETALL, streamed from the engine in field order.
pub(super) fn hgetall(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let name = upper(a[0]);
    let Some(h) = read(cx, &key)? else {
        if name == "HGETALL" {
            cx.out.map(0);
        } else {
            cx.out.array(0);
        }
        return Ok(());
    };
    // Into a reply of its own first: the count is what the walk met, whatever the header
    // says.
    let mut body = Vec::new();
    let mut reply = crate::resp::Reply::new(&mut body, if cx.out.is_resp3() { 3 } else { 2 });
    let mut n = 0;
    h.walk(cx.shared, Bound::Unbounded, |field, value| {
        match name.as_str() {
            "HKEYS" => reply.bulk(field),
            "HVALS" => reply.bulk(value),
            _ => {
                reply.bulk(field);
                reply.bulk(value);
            }
        }
        n += 1;
        true
    })?;
    match name.as_str() {
        "HGETALL" => cx.out.map(n),
        _ => cx.out.array(n),
    }
    cx.out.raw(&body);
    Ok(())
}

/// `HRANDFIELD key [count [WITHVALUES]]`: distinct fields for a positive count, draws that
/// may repeat for a negative one.
pub(super) fn hrandfield(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let count = a.get(2).map(|c| int_arg(c)).transpose()?;
    let with_values = match a.get(3) {
        None => false,
        Some(o) if a.len() == 4 && upper(o) == "WITHVALUES" => true,
        Some(_) => return Err(syntax()),
    };
    if count == Some(i64::MIN) || with_values && count.is_some_and(|c| c < -(i64::MAX / 2)) {
        return Err("ERR value is out of range".into());
    }
    let Some(picked) = collection::draw(cx, a[1], Kind::Hash, count)? else {
        return Ok(());
    };
    reply_pairs(cx, &picked, with_values);
    Ok(())
}

/// Fields, or fields and their values: flat in RESP2, pairs in RESP3.
fn reply_pairs(cx: &mut Ctx<'_, '_>, pairs: &[Element], with_values: bool) {
    let resp3 = cx.out.is_resp3();
    match (with_values, resp3) {
        (false, _) => cx.out.array(pairs.len()),
        (true, false) => cx.out.array(2 * pairs.len()),
        (true, true) => cx.out.array(pairs.len()),
    }
    for (field, value) in pairs {
        if with_values && resp3 {
            cx.out.array(2);
        }
        cx.out.bulk(field);
        if with_values {
            cx.out.bulk(value);
        }
    }
}

pub(super) fn hscan(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let (next, found) = match read(cx, &key)? {
        Some(h) => collection::scan(cx, &h, a)?,
        None => {
            collection::check_scan_args(a)?;
            (0, Vec::new())
        }
    };
    cx.out.array(2);
    cx.out.bulk(next.to_string().as_bytes());
    cx.out.array(2 * found.len());
    for (field, value) in &found {
        cx.out.bulk(field);
        cx.out.bulk(value);
    }
    Ok(())
}

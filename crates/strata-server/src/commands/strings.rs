//! The string family: GET and SET with their options, counters, ranges, bits and LCS.

use super::batched::{ReadScratch, answer_value, read_many};
use super::keyspace::{Writes, live_data};
use super::{Ctx, Outcome, int_arg, not_an_integer, parse_i64, syntax, upper};
use crate::store::{self, Kind, Value};

/// The largest string a key may hold: the engine's value limit less the stored value's
/// header (a tag and an expiry time). Redis's limit is 512 MiB; Strata's is 64 MiB.
fn max_string_bytes() -> usize {
    strata::MAX_VALUE_BYTES - 9
}

fn too_big() -> String {
    "ERR string exceeds maximum allowed size (proto-max-bulk-len)".into()
}

fn invalid_expire(cmd: &str) -> String {
    format!("ERR invalid expire time in '{cmd}' command")
}

/// An expiry option (EX, PX, EXAT, PXAT) turned into Unix milliseconds. Rejects times that
/// are not positive or overflow, as Redis does.
fn expiry_at(now: u64, unit: &str, arg: &[u8], cmd: &str) -> Result<u64, String> {
    let n = int_arg(arg)?;
    if n <= 0 {
        return Err(invalid_expire(cmd));
    }
    let ms = match unit {
        "EX" | "EXAT" => n.checked_mul(1000).ok_or_else(|| invalid_expire(cmd))?,
        _ => n,
    };
    let at = if unit.ends_with("AT") {
        ms
    } else {
        ms.checked_add(now as i64)
            .ok_or_else(|| invalid_expire(cmd))?
    };
    Ok(at as u64)
}

pub(super) fn get(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let v = cx.get(&cx.key(a[1]));
    answer_value(cx.shared, v, cx.out);
    Ok(())
}

pub(super) fn set(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expiry: Option<u64> = None;
    let mut i = 3;
    while i < a.len() {
        let opt = upper(a[i]);
        match opt.as_str() {
            "NX" if !xx => nx = true,
            "XX" if !nx => xx = true,
            "GET" => get = true,
            "KEEPTTL" if expiry.is_none() => keepttl = true,
            "EX" | "PX" | "EXAT" | "PXAT" if expiry.is_none() && !keepttl => {
                let arg = a.get(i + 1).ok_or_else(syntax)?;
                expiry = Some(expiry_at(cx.now, &opt, arg, "set")?);
                i += 1;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    // A key of another kind is replaced, as Redis replaces it, except by SET ... GET.
    let old = if nx || xx || get || keepttl {
        cx.get_any_locked(&key)?
    } else {
        None
    };
    if get && old.as_ref().is_some_and(|v| v.kind != Kind::String) {
        return Err(store::WRONGTYPE.into());
    }
    let allowed = !(nx && old.is_some() || xx && old.is_none());
    if allowed {
        let mut w = Writes::default();
        let expires_at = if keepttl {
            old.as_ref().and_then(|v| v.expires_at)
        } else {
            expiry
        };
        if let Some(old) = old.as_ref().filter(|v| v.kind != Kind::String) {
            w.delete_value(&key, old);
        }
        if expires_at.is_some_and(|t| t <= cx.now) {
            w.delete(&key);
        } else {
            w.put(&key, a[2], expires_at);
        }
        w.commit(cx.shared)?;
    }
    match (get, allowed) {
        (true, _) => match old {
            Some(v) => cx.out.bulk(&v.data),
            None => cx.out.null(),
        },
        (false, true) => cx.out.ok(),
        (false, false) => cx.out.null(),
    }
    Ok(())
}

pub(super) fn setnx(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    if cx.get_locked(&key)?.is_some() {
        cx.out.int(0);
    } else {
        let mut w = Writes::default();
        w.put(&key, a[2], None);
        w.commit(cx.shared)?;
        cx.out.int(1);
    }
    Ok(())
}

/// SETEX and PSETEX.
pub(super) fn setex(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let psetex = a[0].eq_ignore_ascii_case(b"psetex");
    let (unit, name) = if psetex {
        ("PX", "psetex")
    } else {
        ("EX", "setex")
    };
    let at = expiry_at(cx.now, unit, a[2], name)?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    w.put(&key, a[3], Some(at));
    w.commit(cx.shared)?;
    cx.out.ok();
    Ok(())
}

pub(super) fn getex(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    // None: leave the expiry; Some(None): PERSIST; Some(Some(t)): expire at t.
    let mut change: Option<Option<u64>> = None;
    let mut i = 2;
    while i < a.len() {
        let opt = upper(a[i]);
        match opt.as_str() {
            "PERSIST" if change.is_none() => change = Some(None),
            "EX" | "PX" | "EXAT" | "PXAT" if change.is_none() => {
                let arg = a.get(i + 1).ok_or_else(syntax)?;
                change = Some(Some(expiry_at(cx.now, &opt, arg, "getex")?));
                i += 1;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(v) = cx.get_locked(&key)? else {
        cx.out.null();
        return Ok(());
    };
    if let Some(expires_at) = change
        && expires_at != v.expires_at
    {
        let mut w = Writes::default();
        if expires_at.is_some_and(|t| t <= cx.now) {
            w.delete(&key);
        } else {
            w.put(&key, &v.data, expires_at);
        }
        w.commit(cx.shared)?;
    }
    cx.out.bulk(&v.data);
    Ok(())
}

pub(super) fn getdel(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    match cx.get_locked(&key)? {
        Some(v) => {
            let mut w = Writes::default();
            w.delete(&key);
            w.commit(cx.shared)?;
            cx.out.bulk(&v.data);
        }
        None => cx.out.null(),
    }
    Ok(())
}

pub(super) fn getset(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let old = cx.get_locked(&key)?;
    let mut w = Writes::default();
    w.put(&key, a[2], None);
    w.commit(cx.shared)?;
    match old {
        Some(v) => cx.out.bulk(&v.data),
        None => cx.out.null(),
    }
    Ok(())
}

pub(super) fn mget(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let keys: Vec<Vec<u8>> = a[1..].iter().map(|k| cx.key(k)).collect();
    let mut values = Vec::with_capacity(keys.len());
    // Under the keys' stripe locks, the values are read as of one moment between other
    // clients' multi-key writes (MSET, EXEC), never half of one.
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    read_many(
        cx.shared,
        keys.iter().map(Vec::as_slice),
        true,
        &mut ReadScratch::default(),
        &mut values,
    );
    // Every value is read and checked before the reply starts, so an error is the whole
    // reply; the values go to the reply from the engine's buffers, uncopied.
    let mut live = Vec::with_capacity(values.len());
    for v in &values {
        // A key of another kind reads as missing, as in Redis.
        live.push(match v {
            Ok(Some(raw)) => match live_data(raw, cx.now) {
                Err(e) if e == store::WRONGTYPE => None,
                other => other?,
            },
            Ok(None) => None,
            Err(e) => return Err(e.clone()),
        });
    }
    cx.out.array(live.len());
    for v in live {
        match v {
            Some(data) => cx.out.bulk(data),
            None => cx.out.null(),
        }
    }
    Ok(())
}

/// Engine keys with their values, of MSET's and MSETNX's arguments.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn pairs(cx: &Ctx<'_, '_>, a: &[&[u8]]) -> Result<Pairs, String> {
    if !(a.len() - 1).is_multiple_of(2) {
        return Err(super::wrong_args(
            &String::from_utf8_lossy(a[0]).to_lowercase(),
        ));
    }
    Ok(a[1..]
        .chunks(2)
        .map(|p| (cx.key(p[0]), p.get(1).copied().unwrap_or_default().to_vec()))
        .collect())
}

pub(super) fn mset(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let pairs = pairs(cx, a)?;
    let _g = cx.lock(pairs.iter().map(|(k, _)| k.as_slice()));
    let mut w = Writes::default();
    for (k, v) in &pairs {
        w.put(k, v, None);
    }
    w.commit(cx.shared)?;
    cx.out.ok();
    Ok(())
}

pub(super) fn msetnx(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let pairs = pairs(cx, a)?;
    let _g = cx.lock(pairs.iter().map(|(k, _)| k.as_slice()));
    for (k, _) in &pairs {
        if cx.get_locked(k)?.is_some() {
            cx.out.int(0);
            return Ok(());
        }
    }
    let mut w = Writes::default();
    for (k, v) in &pairs {
        w.put(k, v, None);
    }
    w.commit(cx.shared)?;
    cx.out.int(1);
    Ok(())
}

/// Reads a key, lets `change` compute its new data from the old (absent: `None`), and
/// writes it back keeping the key's expiry, all under the key's stripe lock.
fn modify(
    cx: &mut Ctx<'_, '_>,
    key: &[u8],
    change: impl FnOnce(Option<&Value>) -> Result<Option<Vec<u8>>, String>,
) -> Result<Option<Vec<u8>>, String> {
    let key = cx.key(key);
    let _g = cx.lock([key.as_slice()]);
    let old = cx.get_locked(&key)?;
    let new = change(old.as_ref())?;
    if let Some(data) = &new {
        let mut w = Writes::default();
        w.put(&key, data, old.and_then(|v| v.expires_at));
        w.commit(cx.shared)?;
    }
    Ok(new)
}

/// INCR, DECR, INCRBY and DECRBY.
pub(super) fn incr(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let name = String::from_utf8_lossy(a[0]).to_ascii_lowercase();
    let by = match name.as_str() {
        "incr" => 1,
        "decr" => -1,
        "incrby" => int_arg(a[2])?,
        _ => int_arg(a[2])?
            .checked_neg()
            .ok_or("ERR decrement would overflow")?,
    };
    let mut result = 0;
    modify(cx, a[1], |old| {
        let current = match old {
            Some(v) => parse_i64(&v.data).ok_or_else(not_an_integer)?,
            None => 0,
        };
        result = current
            .checked_add(by)
            .ok_or("ERR increment or decrement would overflow")?;
        Ok(Some(result.to_string().into_bytes()))
    })?;
    cx.out.int(result);
    Ok(())
}

/// Parses a float as Redis's INCRBYFLOAT does: no spaces, nothing after the number, not NaN
/// (an infinity parses, and the sum it makes is refused).
pub(super) fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    let f: f64 = s.parse().ok()?;
    (!f.is_nan()).then_some(f)
}

/// A double as Strata writes one back: the shortest text that reads back as the same
/// number, without exponent and without a negative zero. Redis sums in long double and
/// prints 17 decimals of it, so its last digits can differ (`0.1 + 0.2` is `0.3` there and
/// `0.30000000000000004` here); the shortest exact text keeps `x + -x` at exactly 0.
pub(crate) fn format_float(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return "0".into();
    }
    format!("{f}")
}

pub(super) fn incrbyfloat(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let by = parse_float(a[2]).ok_or("ERR value is not a valid float")?;
    let mut text = String::new();
    modify(cx, a[1], |old| {
        let current = match old {
            Some(v) => parse_float(&v.data).ok_or("ERR value is not a valid float")?,
            None => 0.0,
        };
        let next = current + by;
        if !next.is_finite() {
            return Err("ERR increment would produce NaN or Infinity".into());
        }
        text = format_float(next);
        Ok(Some(text.clone().into_bytes()))
    })?;
    // A bulk string in both protocols, as Redis replies to INCRBYFLOAT.
    cx.out.bulk(text.as_bytes());
    Ok(())
}

pub(super) fn append(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let new = modify(cx, a[1], |old| {
        let mut v = old.map(|v| v.data.clone()).unwrap_or_default();
        if v.len() + a[2].len() > max_string_bytes() {
            return Err(too_big());
        }
        v.extend_from_slice(a[2]);
        Ok(Some(v))
    })?;
    cx.out.int(new.map_or(0, |v| v.len() as i64));
    Ok(())
}

pub(super) fn strlen(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let v = cx.get(&cx.key(a[1]))?;
    cx.out.int(v.map_or(0, |v| v.data.len() as i64));
    Ok(())
}

/// Turns Redis's inclusive, possibly negative `start..=end` over `len` items into a range,
/// or `None` when it selects nothing.
fn clamp_range(start: i64, end: i64, len: usize) -> Option<std::ops::Range<usize>> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 {
        (len + end).max(0)
    } else {
        end.min(len - 1)
    };
    (len > 0 && start <= end && start < len).then(|| start as usize..end as usize + 1)
}

/// GETRANGE and SUBSTR.
pub(super) fn getrange(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (start, end) = (int_arg(a[2])?, int_arg(a[3])?);
    let v = cx.get(&cx.key(a[1]))?.map(|v| v.data).unwrap_or_default();
    // Both ends negative and out of order select nothing, as in Redis.
    let picked = if start < 0 && end < 0 && start > end {
        None
    } else {
        clamp_range(start, end, v.len())
    };
    cx.out
        .bulk(picked.and_then(|r| v.get(r)).unwrap_or_default());
    Ok(())
}

pub(super) fn setrange(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let offset = int_arg(a[2])?;
    if offset < 0 {
        return Err("ERR offset is out of range".into());
    }
    let offset = offset as usize;
    let patch = a[3];
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let old = cx.get_locked(&key)?;
    if patch.is_empty() {
        // Nothing to write: the length as it is, and no key created.
        cx.out.int(old.map_or(0, |v| v.data.len() as i64));
        return Ok(());
    }
    if offset.saturating_add(patch.len()) > max_string_bytes() {
        return Err(too_big());
    }
    let expires_at = old.as_ref().and_then(|v| v.expires_at);
    let mut data = old.map(|v| v.data).unwrap_or_default();
    if data.len() < offset + patch.len() {
        data.resize(offset + patch.len(), 0);
    }
    if let Some(dst) = data.get_mut(offset..offset + patch.len()) {
        dst.copy_from_slice(patch);
    }
    let mut w = Writes::default();
    w.put(&key, &data, expires_at);
    w.commit(cx.shared)?;
    cx.out.int(data.len() as i64);
    Ok(())
}

pub(super) fn lcs(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (mut len_only, mut idx, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut i = 3;
    while i < a.len() {
        match upper(a[i]).as_str() {
            "LEN" => len_only = true,
            "IDX" => idx = true,
            "WITHMATCHLEN" => with_len = true,
            "MINMATCHLEN" => {
                min_len = int_arg(a.get(i + 1).ok_or_else(syntax)?)?.max(0);
                i += 1;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    if len_only && idx {
        return Err("ERR If you want both the length and indexes, please just use IDX.".into());
    }
    let (kx, ky) = (cx.key(a[1]), cx.key(a[2]));
    let (x, y) = {
        let _g = cx.lock([kx.as_slice(), ky.as_slice()]);
        let x = cx.get_locked(&kx)?.map(|v| v.data).unwrap_or_default();
        (x, cx.get_locked(&ky)?.map(|v| v.data).unwrap_or_default())
    };
    // The classic table of common-prefix lengths, then a walk back from its far corner.
    let (n, m) = (x.len(), y.len());
    if (n + 1).saturating_mul(m + 1) > 256 * 1024 * 1024 {
        return Err(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len".into(),
        );
    }
    let w = m + 1;
    let mut t = vec![0u32; (n + 1) * w];
    for i in 1..=n {
        for j in 1..=m {
            t[i * w + j] = if x[i - 1] == y[j - 1] {
                t[(i - 1) * w + j - 1] + 1
            } else {
                t[(i - 1) * w + j].max(t[i * w + j - 1])
            };
        }
    }
    let total = t[n * w + m] as usize;
    let mut common = vec![0u8; total];
    // Matched ranges, found from the end: ((x start, x end), (y start, y end)).
    let mut ranges: Vec<((usize, usize), (usize, usize))> = Vec::new();
    let mut current: Option<((usize, usize), (usize, usize))> = None;
    let (mut i, mut j, mut k) = (n, m, total);
    while i > 0 && j > 0 {
        if x[i - 1] == y[j - 1] {
            k -= 1;
            common[k] = x[i - 1];
            let (xi, yj) = (i - 1, j - 1);
            current = match current {
                Some(((xs, xe), (ys, ye))) if xs == xi + 1 && ys == yj + 1 => {
                    Some(((xi, xe), (yj, ye)))
                }
                other => {
                    if let Some(r) = other {
                        ranges.push(r);
                    }
                    Some(((xi, xi), (yj, yj)))
                }
            };
            i -= 1;
            j -= 1;
        } else if t[(i - 1) * w + j] > t[i * w + j - 1] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    ranges.extend(current);
    if len_only {
        cx.out.int(total as i64);
    } else if idx {
        let kept: Vec<_> = ranges
            .into_iter()
            .filter(|((s, e), _)| (e - s + 1) as i64 >= min_len)
            .collect();
        cx.out.map(2);
        cx.out.bulk(b"matches");
        cx.out.array(kept.len());
        for ((xs, xe), (ys, ye)) in kept {
            cx.out.array(if with_len { 3 } else { 2 });
            for (s, e) in [(xs, xe), (ys, ye)] {
                cx.out.array(2);
                cx.out.int(s as i64);
                cx.out.int(e as i64);
            }
            if with_len {
                cx.out.int((xe - xs + 1) as i64);
            }
        }
        cx.out.bulk(b"len");
        cx.out.int(total as i64);
    } else {
        cx.out.bulk(&common);
    }
    Ok(())
}

fn bit_offset(arg: &[u8]) -> Result<usize, String> {
    match parse_i64(arg) {
        Some(n) if (0..(max_string_bytes() as i64) * 8).contains(&n) => Ok(n as usize),
        _ => Err("ERR bit offset is not an integer or out of range".into()),
    }
}

pub(super) fn setbit(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let offset = bit_offset(a[2])?;
    let on = match a[3] {
        b"1" => true,
        b"0" => false,
        _ => return Err("ERR bit is not an integer or out of range".into()),
    };
    let (byte, mask) = (offset / 8, 0x80u8 >> (offset % 8));
    let mut was = false;
    modify(cx, a[1], |old| {
        let mut v = old.map(|v| v.data.clone()).unwrap_or_default();
        if v.len() <= byte {
            v.resize(byte + 1, 0);
        }
        if let Some(b) = v.get_mut(byte) {
            was = *b & mask != 0;
            if on {
                *b |= mask;
            } else {
                *b &= !mask;
            }
        }
        Ok(Some(v))
    })?;
    cx.out.int(i64::from(was));
    Ok(())
}

pub(super) fn getbit(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let offset = bit_offset(a[2])?;
    let v = cx.get(&cx.key(a[1]))?.map(|v| v.data).unwrap_or_default();
    let bit = v
        .get(offset / 8)
        .is_some_and(|b| b & (0x80 >> (offset % 8)) != 0);
    cx.out.int(i64::from(bit));
    Ok(())
}

/// The unit of BITCOUNT's and BITPOS's range.
fn range_unit(arg: Option<&&[u8]>) -> Result<bool, String> {
    match arg.map(|a| upper(a)).as_deref() {
        None | Some("BYTE") => Ok(false),
        Some("BIT") => Ok(true),
        Some(_) => Err(syntax()),
    }
}

/// The bits `range` (inclusive, by byte or by bit) selects of `v`, as a bit range.
fn bit_range(start: i64, end: i64, bits: bool, v: &[u8]) -> Option<std::ops::Range<usize>> {
    let len = if bits { v.len() * 8 } else { v.len() };
    let r = clamp_range(start, end, len)?;
    Some(if bits { r } else { r.start * 8..r.end * 8 })
}

fn bit_at(v: &[u8], i: usize) -> bool {
    v.get(i / 8).is_some_and(|b| b & (0x80 >> (i % 8)) != 0)
}

pub(super) fn bitcount(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let v = cx.get(&cx.key(a[1]))?.map(|v| v.data).unwrap_or_default();
    let range = match a.len() {
        2 => Some(0..v.len() * 8),
        4 | 5 => {
            let (s, e) = (int_arg(a[2])?, int_arg(a[3])?);
            bit_range(s, e, range_unit(a.get(4))?, &v)
        }
        _ => return Err(syntax()),
    };
    let count = range.map_or(0, |r| r.filter(|&i| bit_at(&v, i)).count());
    cx.out.int(count as i64);
    Ok(())
}

pub(super) fn bitpos(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let want = match a[2] {
        b"1" => true,
        b"0" => false,
        _ => return Err("ERR The bit argument must be 1 or 0.".into()),
    };
    if a.len() > 6 {
        return Err(syntax());
    }
    let bits = range_unit(a.get(5))?;
    let start = a.get(3).map(|s| int_arg(s)).transpose()?.unwrap_or(0);
    let end_given = a.get(4).map(|s| int_arg(s)).transpose()?;
    let Some(v) = cx.get(&cx.key(a[1]))?.map(|v| v.data) else {
        // A missing key is all zeros.
        cx.out.int(if want { -1 } else { 0 });
        return Ok(());
    };
    let Some(range) = bit_range(start, end_given.unwrap_or(-1), bits, &v) else {
        cx.out.int(-1);
        return Ok(());
    };
    let end = range.end;
    match range.into_iter().find(|&i| bit_at(&v, i) == want) {
        Some(i) => cx.out.int(i as i64),
        // Looking for a clear bit without an end: the string is padded with zeros past it.
        None if !want && end_given.is_none() => cx.out.int(end as i64),
        None => cx.out.int(-1),
    }
    Ok(())
}

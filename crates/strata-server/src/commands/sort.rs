//! SORT and SORT_RO: the elements of a list, set or sorted set in order of their own value or
//! of a weight looked up by pattern (`BY weight_*`, `BY obj_*->field`), with `LIMIT`, `GET`
//! patterns, `ASC`/`DESC`, `ALPHA` and (SORT only) `STORE` into a list.
//!
//! A sort whose `BY` or `GET` names other keys reads keys that no argument names, so dispatch
//! runs it alone, under the keyspace's write lock, as Redis runs every command: no write
//! comes between the elements it reads and the weights it looks up (see [`reads_patterns`]).
//! Like Redis's, a sort holds the elements it sorts in memory.

use std::cmp::Ordering;

use super::collection::Collection;
use super::keyspace::Writes;
use super::lists::List;
use super::zsets::ZSet;
use super::{Ctx, Outcome, not_an_integer, parse_i64, syntax};
use crate::store::{self, Kind};

/// What SORT was asked for.
#[derive(Default)]
struct Request<'a> {
    by: Option<&'a [u8]>,
    /// `BY` a pattern without `*`: the elements keep their stored order.
    dont_sort: bool,
    gets: Vec<&'a [u8]>,
    limit: Option<(i64, i64)>,
    desc: bool,
    alpha: bool,
    store: Option<&'a [u8]>,
}

fn parse<'a>(
    a: &[&'a [u8]],
    read_only: bool,
    full_key_access: bool,
) -> Result<Request<'a>, String> {
    let mut r = Request::default();
    let mut j = 2;
    while j < a.len() {
        let left = a.len() - j - 1;
        let opt = a[j].to_ascii_lowercase();
        match opt.as_slice() {
            b"asc" => r.desc = false,
            b"desc" => r.desc = true,
            b"alpha" => r.alpha = true,
            b"limit" if left >= 2 => {
                let n = |b: &[u8]| parse_i64(b).ok_or_else(not_an_integer);
                r.limit = Some((n(a[j + 1])?, n(a[j + 2])?));
                j += 2;
            }
            b"store" if !read_only && left >= 1 => {
                r.store = Some(a[j + 1]);
                j += 1;
            }
            b"by" if left >= 1 => {
                let pattern = a[j + 1];
                if pattern.contains(&b'*') {
                    if !full_key_access {
                        return Err("ERR BY option of SORT denied due to insufficient ACL \
                                    permissions."
                            .into());
                    }
                } else {
                    r.dont_sort = true;
                }
                r.by = Some(pattern);
                j += 1;
            }
            b"get" if left >= 1 => {
                if !full_key_access {
                    return Err(
                        "ERR GET option of SORT denied due to insufficient ACL permissions.".into(),
                    );
                }
                r.gets.push(a[j + 1]);
                j += 1;
            }
            _ => return Err(syntax()),
        }
        j += 1;
    }
    Ok(r)
}

/// True when SORT/SORT_RO `args` look up keys by pattern (`BY` or `GET`): such a sort runs
/// alone.
pub(crate) fn reads_patterns(name: &str, args: &[&[u8]]) -> bool {
    matches!(name, "sort" | "sort_ro")
        && args
            .iter()
            .skip(2)
            .any(|a| a.eq_ignore_ascii_case(b"by") || a.eq_ignore_ascii_case(b"get"))
}

/// The first and last index (inclusive) of the elements `LIMIT` keeps out of `len`, as
/// Redis clamps them; `None` when it keeps none.
fn window(limit: Option<(i64, i64)>, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let (offset, count) = limit.unwrap_or((0, -1));
    let start = offset.max(0);
    let end = if count < 0 {
        len - 1
    } else {
        start.saturating_add(count).saturating_sub(1).min(len - 1)
    };
    (start < len && start <= end).then_some((start as usize, end as usize))
}

/// A stored value as `strtod` reads a whole string: the empty string is 0; anything
/// after the number, or a NaN, is an error.
fn weight_of(v: &[u8]) -> Option<f64> {
    if v.is_empty() {
        return Some(0.0);
    }
    let s = std::str::from_utf8(v).ok()?.trim_start();
    let (sign, body) = match s.as_bytes().first() {
        Some(b'-') => (-1.0, &s[1..]),
        Some(b'+') => (1.0, &s[1..]),
        _ => (1.0, s),
    };
    // strtod reads hexadecimal too (an integer here: hexadecimal fractions are rare).
    if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok().map(|n| sign * n as f64);
    }
    let w = s.parse::<f64>().ok().filter(|w| !w.is_nan())?;
    // Out of range (ERANGE) is an error; only the words for infinity read as one.
    let words = body.to_ascii_lowercase();
    let infinite_word = matches!(words.as_str(), "inf" | "infinity");
    (w.is_finite() || infinite_word).then_some(w)
}

/// What pattern `pattern` finds for `element`: `#` is the element itself; otherwise the first
/// `*` is replaced by the element and the string (or, after `->field`, the hash field) of the
/// key so named, if there is one. A pattern without `*` finds nothing. Requires: the sort
/// runs alone (see the module's notes).
fn look_up(cx: &Ctx<'_, '_>, pattern: &[u8], element: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if pattern == b"#" {
        return Ok(Some(element.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else {
        return Ok(None);
    };
    let rest = &pattern[star + 1..];
    let arrow = rest
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&at| at + 2 < rest.len());
    let (suffix, field) = match arrow {
        Some(at) => (&rest[..at], Some(&rest[at + 2..])),
        None => (rest, None),
    };
    let name = [&pattern[..star], element, suffix].concat();
    let key = cx.key(&name);
    let Some(v) = cx.get_any_locked(&key)? else {
        return Ok(None);
    };
    match (field, v.kind) {
        (None, Kind::String) => Ok(Some(v.data)),
        (Some(f), Kind::Hash) => match Collection::read(cx, &key, Kind::Hash)? {
            Some(h) => h.get(cx.shared, f),
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

/// The elements of the value under `key` (an absent key is an empty list), in their stored
/// order; with `window` (a list or sorted set that is not sorted), only that part of them,
/// from the end for `desc`.
fn elements(
    cx: &Ctx<'_, '_>,
    key: &[u8],
    window: Option<(usize, usize)>,
    desc: bool,
) -> Result<Vec<Vec<u8>>, String> {
    let Some(v) = cx.get_any_locked(key)? else {
        return Ok(Vec::new());
    };
    match v.kind {
        Kind::List => {
            let Some(list) = List::read(cx, key)? else {
                return Ok(Vec::new());
            };
            let Some((start, end)) = window else {
                return list.all(cx);
            };
            let len = list.len();
            let (first, last) = match desc {
                false => (start as u64, end as u64),
                true => (len - 1 - end as u64, len - 1 - start as u64),
            };
            let mut part = list.range(cx, first, last)?;
            if desc {
                part.reverse();
            }
            Ok(part)
        }
        Kind::Set => Ok(Collection::read(cx, key, Kind::Set)?
            .map(|s| s.all(cx))
            .transpose()?
            .unwrap_or_default()
            .into_iter()
            .map(|(m, _)| m)
            .collect()),
        Kind::ZSet => {
            let Some(z) = ZSet::read(cx, key)? else {
                return Ok(Vec::new());
            };
            let (start, n) = match window {
                Some((start, end)) => (start as u64, (end - start + 1) as u64),
                None => (0, z.count()),
            };
            Ok(z.by_rank(cx.shared, start, n, desc && window.is_some())?
                .into_iter()
                .map(|(m, _)| m)
                .collect())
        }
        _ => Err(store::WRONGTYPE.into()),
    }
}

/// The number of elements of the value under `key` that SORT would read.
fn length(cx: &Ctx<'_, '_>, key: &[u8]) -> Result<usize, String> {
    let Some(v) = cx.get_any_locked(key)? else {
        return Ok(0);
    };
    match v.kind {
        Kind::List | Kind::Set | Kind::ZSet => Ok(store::Header::decode(&v.data).count as usize),
        _ => Err(store::WRONGTYPE.into()),
    }
}

/// An element with what it is ordered by.
struct Item {
    element: Vec<u8>,
    /// `ALPHA`: the bytes compared (`None`: a `BY` key that is missing, first of all).
    text: Option<Vec<u8>>,
    number: f64,
}

fn compare(x: &Item, y: &Item, alpha: bool) -> Ordering {
    if alpha {
        return x.text.cmp(&y.text);
    }
    // Equal weights order by the elements themselves, so the answer is always the same.
    x.number
        .partial_cmp(&y.number)
        .unwrap_or(Ordering::Equal)
        .then_with(|| x.element.cmp(&y.element))
}

/// SORT and SORT_RO.
pub(super) fn sort(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let read_only = a[0].eq_ignore_ascii_case(b"sort_ro");
    let full = cx.conn.user.all_keys();
    let mut r = parse(a, read_only, full)?;
    let key = cx.key(a[1]);
    let dst = r.store.map(|d| cx.key(d));
    let _g = cx.lock(std::iter::once(key.as_slice()).chain(dst.as_deref()));
    let kind = cx.get_any_locked(&key)?.map(|v| v.kind);
    // A set has no order of its own: stored or scripted, it is sorted by its members.
    if r.dont_sort && kind == Some(Kind::Set) && r.store.is_some() {
        (r.dont_sort, r.alpha, r.by) = (false, true, None);
    }
    let in_place = r.dont_sort && matches!(kind, Some(Kind::List | Kind::ZSet));
    let picked = window(r.limit, length(cx, &key)?);
    let mut items = Vec::new();
    if !in_place || picked.is_some() {
        let part = if in_place { picked } else { None };
        for element in elements(cx, &key, part, r.desc)? {
            let weight = match (r.dont_sort, r.by) {
                (true, _) => None,
                (false, Some(by)) => look_up(cx, by, &element)?,
                (false, None) => Some(element.clone()),
            };
            let number = match (r.alpha || r.dont_sort, &weight) {
                (false, Some(w)) => weight_of(w).ok_or_else(|| {
                    "ERR One or more scores can't be converted into double".to_string()
                })?,
                _ => 0.0,
            };
            items.push(Item {
                element,
                text: weight,
                number,
            });
        }
    }
    if !r.dont_sort {
        items.sort_by(|x, y| {
            let o = compare(x, y, r.alpha);
            if r.desc { o.reverse() } else { o }
        });
    }
    // What the window keeps (an in-place read took its window already).
    let kept: &[Item] = match (in_place, window(r.limit, items.len())) {
        (true, _) => &items,
        (false, Some((start, end))) => &items[start..=end],
        (false, None) => &[],
    };
    let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(kept.len() * r.gets.len().max(1));
    for item in kept {
        if r.gets.is_empty() {
            out.push(Some(item.element.clone()));
        }
        for g in &r.gets {
            out.push(look_up(cx, g, &item.element)?);
        }
    }
    match dst {
        None => {
            cx.out.array(out.len());
            for v in out {
                match v {
                    Some(v) => cx.out.bulk(&v),
                    None => cx.out.null(),
                }
            }
        }
        Some(dst) => {
            let mut w = Writes::default();
            if out.is_empty() {
                if let Some(old) = cx.get_any_locked(&dst)? {
                    w.delete_value(&dst, &old);
                }
            } else {
                let mut list = List(Collection::replace(cx, &dst, Kind::List, &mut w)?);
                for v in &out {
                    list.push(&mut w, v.as_deref().unwrap_or_default(), false);
                }
                list.0.finish(&mut w);
            }
            w.commit(cx.shared)?;
            cx.out.int(out.len() as i64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_clamped_as_redis_clamps_them() {
        assert_eq!(window(None, 5), Some((0, 4)));
        assert_eq!(window(Some((1, 2)), 5), Some((1, 2)));
        assert_eq!(window(Some((-10, 100)), 5), Some((0, 4)));
        assert_eq!(window(Some((5, 10)), 5), None);
        assert_eq!(window(Some((2, i64::MAX)), 3), Some((2, 2)));
        assert_eq!(window(Some((0, 0)), 3), None);
        assert_eq!(window(None, 0), None);
    }

    #[test]
    fn weights_read_as_strtod_reads_a_whole_string() {
        assert_eq!(weight_of(b"1.5"), Some(1.5));
        assert_eq!(weight_of(b" -3"), Some(-3.0));
        assert_eq!(weight_of(b" 2"), Some(2.0));
        assert_eq!(weight_of(b""), Some(0.0));
        assert_eq!(weight_of(b"inf"), Some(f64::INFINITY));
        assert_eq!(weight_of(b"1.5x"), None);
        assert_eq!(weight_of(b"nan"), None);
        assert_eq!(weight_of(b" "), None);
        assert_eq!(weight_of(b"1e400"), None);
        assert_eq!(weight_of(b"-infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(weight_of(b"0x10"), Some(16.0));
        assert_eq!(weight_of(b"-0x10"), Some(-16.0));
    }
}

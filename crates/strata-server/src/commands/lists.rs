//! The list family: pushes and pops at both ends, LINDEX, LRANGE, LSET, LTRIM, LREM,
//! LINSERT, LPOS, LMOVE and LMPOP (the blocking forms are in `blocking.rs`).
//!
//! A list is a collection (`collection.rs`) whose elements are keyed by position, eight
//! big-endian bytes: its header holds the first position and the count, so a push at either
//! end, a pop, LINDEX and LSET are one entry each, and LRANGE and LTRIM are ranges of
//! positions. LREM and LINSERT, which move the elements after the place they change, write
//! the list again under a new version, as Redis's are linear too.

use std::ops::Bound;

use super::collection::{Collection, walk_range};
use super::keyspace::Writes;
use super::{Ctx, Outcome, int_arg, syntax, upper};
use crate::resp::Reply;
use crate::store::{self, Kind};

/// A list as a command finds it and changes it.
pub(crate) struct List(pub Collection);

impl List {
    pub(crate) fn read(cx: &Ctx<'_, '_>, key: &[u8]) -> Result<Option<Self>, String> {
        Ok(Collection::read(cx, key, Kind::List)?.map(List))
    }

    pub(crate) fn open(cx: &Ctx<'_, '_>, key: &[u8], w: &mut Writes) -> Result<Self, String> {
        Ok(List(Collection::open(cx, key, Kind::List, w)?))
    }

    pub(crate) fn len(&self) -> u64 {
        self.0.header.count
    }

    fn head(&self) -> u64 {
        self.0.header.head
    }

    /// The element at index `i` (from the head), if there is one.
    pub(crate) fn get(&self, cx: &Ctx<'_, '_>, i: u64) -> Result<Option<Vec<u8>>, String> {
        if i >= self.len() {
            return Ok(None);
        }
        self.0.get(cx.shared, &(self.head() + i).to_be_bytes())
    }

    /// Pushes `value` at the head (`left`) or the tail.
    pub(crate) fn push(&mut self, w: &mut Writes, value: &[u8], left: bool) {
        let at = if left {
            self.0.header.head -= 1;
            self.head()
        } else {
            self.head() + self.len()
        };
        self.0.write_raw(w, &at.to_be_bytes(), Some(value));
        self.0.header.count += 1;
    }

    /// Pops the element at the head (`left`) or the tail.
    pub(crate) fn pop(
        &mut self,
        cx: &Ctx<'_, '_>,
        w: &mut Writes,
        left: bool,
    ) -> Result<Option<Vec<u8>>, String> {
        if self.len() == 0 {
            return Ok(None);
        }
        let i = if left { 0 } else { self.len() - 1 };
        let value = self.get(cx, i)?;
        let at = self.head() + i;
        self.0.write_raw(w, &at.to_be_bytes(), None);
        if left {
            self.0.header.head += 1;
        }
        self.0.header.count -= 1;
        Ok(value)
    }

    /// The elements from index `start` to `stop` inclusive, in order.
    pub(crate) fn range(
        &self,
        cx: &Ctx<'_, '_>,
        start: u64,
        stop: u64,
    ) -> Result<Vec<Vec<u8>>, String> {
        let key =
            |i: u64| store::element_key(self.0.header.version, &(self.head() + i).to_be_bytes());
        let mut out = Vec::with_capacity((stop - start + 1).min(1 << 16) as usize);
        let range = (Bound::Included(key(start)), Bound::Included(key(stop)));
        walk_range(cx.shared, range, false, |_, v| {
            out.push(v.to_vec());
            true
        })?;
        Ok(out)
    }

    /// Every element, in order.
    pub(crate) fn all(&self, cx: &Ctx<'_, '_>) -> Result<Vec<Vec<u8>>, String> {
        match self.len() {
            0 => Ok(Vec::new()),
            n => self.range(cx, 0, n - 1),
        }
    }

    /// Writes the list again as `values`, under a new version (LREM, LINSERT).
    fn rewrite(&mut self, cx: &Ctx<'_, '_>, w: &mut Writes, values: &[Vec<u8>]) -> Outcome {
        for (lo, hi) in store::collection_ranges(Kind::List, self.0.header.version) {
            w.delete_range(&lo, &hi);
        }
        self.0.header.version = cx.shared.versions.next(&cx.shared.db)?;
        self.0.header.head = 1 << 63;
        self.0.header.count = 0;
        for v in values {
            self.push(w, v, false);
        }
        Ok(())
    }
}

/// Start and stop indexes (negative from the end) as a range within `len`, if not empty.
fn span(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = len as i64;
    let start = if start < 0 { start + len } else { start }.max(0);
    let stop = if stop < 0 { stop + len } else { stop }.min(len - 1);
    (start <= stop && start < len).then_some((start as u64, stop as u64))
}

/// An index (negative from the end) within `len`, if it is one.
fn index(i: i64, len: u64) -> Option<u64> {
    let i = if i < 0 { i.checked_add(len as i64)? } else { i };
    u64::try_from(i).ok().filter(|&i| i < len)
}

fn is_left(name: &[u8]) -> bool {
    matches!(name.first(), Some(b'l' | b'L'))
}

/// LPUSH, RPUSH, LPUSHX and RPUSHX: the length after.
pub(super) fn push(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let left = is_left(a[0]);
    let only_existing = a[0].len() == 6;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    let mut list = match List::read(cx, &key)? {
        Some(l) => l,
        None if only_existing => {
            cx.out.int(0);
            return Ok(());
        }
        None => List::open(cx, &key, &mut w)?,
    };
    for v in &a[2..] {
        list.push(&mut w, v, left);
    }
    let n = list.len();
    list.0.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.int(n as i64);
    Ok(())
}

/// Pops up to `n` elements of the list under engine key `key`; `None` when there is no list.
pub(crate) fn pop_n(
    cx: &Ctx<'_, '_>,
    key: &[u8],
    n: u64,
    left: bool,
) -> Result<Option<Vec<Vec<u8>>>, String> {
    let Some(mut list) = List::read(cx, key)? else {
        return Ok(None);
    };
    let mut w = Writes::default();
    let mut out = Vec::new();
    while (out.len() as u64) < n {
        match list.pop(cx, &mut w, left)? {
            Some(v) => out.push(v),
            None => break,
        }
    }
    if !out.is_empty() {
        list.0.finish(&mut w);
        w.commit(cx.shared)?;
    }
    Ok(Some(out))
}

/// LPOP and RPOP `key [count]`.
pub(super) fn pop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if a.len() > 3 {
        return Err(super::wrong_args(
            &String::from_utf8_lossy(a[0]).to_lowercase(),
        ));
    }
    let left = is_left(a[0]);
    let count = match a.get(2) {
        None => None,
        Some(c) => Some(
            u64::try_from(int_arg(c)?)
                .map_err(|_| "ERR value is out of range, must be positive")?,
        ),
    };
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let popped = pop_n(cx, &key, count.unwrap_or(1), left)?;
    match (count, popped) {
        (None, Some(mut p)) if !p.is_empty() => cx.out.bulk(&p.remove(0)),
        (None, _) => cx.out.null(),
        (Some(_), None) => cx.out.null_array(),
        (Some(_), Some(p)) => reply_list(cx, &p),
    }
    Ok(())
}

fn reply_list(cx: &mut Ctx<'_, '_>, items: &[Vec<u8>]) {
    cx.out.array(items.len());
    for v in items {
        cx.out.bulk(v);
    }
}

pub(super) fn llen(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    super::collection::count(cx, a, Kind::List)
}

pub(super) fn lindex(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let i = int_arg(a[2])?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let v = match List::read(cx, &key)? {
        Some(l) => match index(i, l.len()) {
            Some(i) => l.get(cx, i)?,
            None => None,
        },
        None => None,
    };
    match v {
        Some(v) => cx.out.bulk(&v),
        None => cx.out.null(),
    }
    Ok(())
}

pub(super) fn lrange(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (start, stop) = (int_arg(a[2])?, int_arg(a[3])?);
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some((list, (s, e))) = List::read(cx, &key)?.and_then(|l| {
        let part = span(start, stop, l.len())?;
        Some((l, part))
    }) else {
        cx.out.array(0);
        return Ok(());
    };
    // The elements are encoded as they are walked, into one buffer: no copy of each.
    let key = |i: u64| store::element_key(list.0.header.version, &(list.head() + i).to_be_bytes());
    let range = (Bound::Included(key(s)), Bound::Included(key(e)));
    let mut encoded = Vec::new();
    let mut items = Reply::new(&mut encoded, cx.conn.protocol);
    let mut n = 0;
    walk_range(cx.shared, range, false, |_, v| {
        items.bulk(v);
        n += 1;
        true
    })?;
    cx.out.array(n);
    cx.out.raw(&encoded);
    Ok(())
}

pub(super) fn lset(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let i = int_arg(a[2])?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut list = List::read(cx, &key)?.ok_or("ERR no such key")?;
    let i = index(i, list.len()).ok_or("ERR index out of range")?;
    let mut w = Writes::default();
    let at = list.head() + i;
    list.0.write_raw(&mut w, &at.to_be_bytes(), Some(a[3]));
    list.0.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.ok();
    Ok(())
}

pub(super) fn ltrim(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (start, stop) = (int_arg(a[2])?, int_arg(a[3])?);
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    if let Some(mut list) = List::read(cx, &key)? {
        let mut w = Writes::default();
        let version = list.0.header.version;
        let key_at = |p: u64| store::element_key(version, &p.to_be_bytes());
        let (head, len) = (list.head(), list.len());
        match span(start, stop, len) {
            None => {
                list.0.header.count = 0;
            }
            Some((s, e)) => {
                w.delete_range(&key_at(head), &key_at(head + s));
                w.delete_range(&key_at(head + e + 1), &key_at(head + len));
                list.0.header.head = head + s;
                list.0.header.count = e - s + 1;
            }
        }
        list.0.finish(&mut w);
        w.commit(cx.shared)?;
    }
    cx.out.ok();
    Ok(())
}

/// `LREM key count element`: removes the first `count` matches from the head (from the tail
/// for a negative count, all of them for 0).
pub(super) fn lrem(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let count = int_arg(a[2])?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(mut list) = List::read(cx, &key)? else {
        cx.out.int(0);
        return Ok(());
    };
    let mut values = list.all(cx)?;
    let limit = if count == 0 {
        u64::MAX
    } else {
        count.unsigned_abs()
    };
    let mut removed = 0u64;
    let mut keep = |v: &Vec<u8>| {
        if removed < limit && v.as_slice() == a[3] {
            removed += 1;
            false
        } else {
            true
        }
    };
    if count < 0 {
        values.reverse();
        values.retain(&mut keep);
        values.reverse();
    } else {
        values.retain(keep);
    }
    if removed > 0 {
        let mut w = Writes::default();
        list.rewrite(cx, &mut w, &values)?;
        list.0.finish(&mut w);
        w.commit(cx.shared)?;
    }
    cx.out.int(removed as i64);
    Ok(())
}

/// `LINSERT key BEFORE|AFTER pivot element`: the length after, -1 without the pivot.
pub(super) fn linsert(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let after = match upper(a[2]).as_str() {
        "BEFORE" => false,
        "AFTER" => true,
        _ => return Err(syntax()),
    };
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(mut list) = List::read(cx, &key)? else {
        cx.out.int(0);
        return Ok(());
    };
    let mut values = list.all(cx)?;
    let Some(at) = values.iter().position(|v| v.as_slice() == a[3]) else {
        cx.out.int(-1);
        return Ok(());
    };
    values.insert(at + usize::from(after), a[4].to_vec());
    let mut w = Writes::default();
    list.rewrite(cx, &mut w, &values)?;
    let n = list.len();
    list.0.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.int(n as i64);
    Ok(())
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`.
pub(super) fn lpos(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0u64);
    let mut i = 3;
    while i < a.len() {
        let value = a.get(i + 1).ok_or_else(syntax)?;
        match upper(a[i]).as_str() {
            "RANK" => {
                rank = int_arg(value)?;
                if rank == 0 {
                    return Err(concat!(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the ",
                        "second ... or use negative to start from the end of the list"
                    )
                    .into());
                }
                if rank == i64::MIN {
                    return Err("ERR value is out of range".into());
                }
            }
            "COUNT" => {
                count = Some(
                    u64::try_from(int_arg(value)?).map_err(|_| "ERR COUNT can't be negative")?,
                );
            }
            "MAXLEN" => {
                maxlen =
                    u64::try_from(int_arg(value)?).map_err(|_| "ERR MAXLEN can't be negative")?;
            }
            _ => return Err(syntax()),
        }
        i += 2;
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let values = match List::read(cx, &key)? {
        Some(l) => l.all(cx)?,
        None => Vec::new(),
    };
    let len = values.len();
    let order: Box<dyn Iterator<Item = usize>> = match rank > 0 {
        true => Box::new(0..len),
        false => Box::new((0..len).rev()),
    };
    let wanted = count.map_or(1, |c| if c == 0 { u64::MAX } else { c });
    let mut skip = rank.unsigned_abs() - 1;
    let mut found = Vec::new();
    for (scanned, idx) in order.enumerate() {
        if maxlen > 0 && scanned as u64 >= maxlen {
            break;
        }
        if values[idx].as_slice() != a[2] {
            continue;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        found.push(idx as i64);
        if found.len() as u64 >= wanted {
            break;
        }
    }
    match count {
        Some(_) => {
            cx.out.array(found.len());
            for f in found {
                cx.out.int(f);
            }
        }
        None => match found.first() {
            Some(&f) => cx.out.int(f),
            None => cx.out.null(),
        },
    }
    Ok(())
}

/// LEFT or RIGHT: true for LEFT.
pub(crate) fn side(arg: &[u8]) -> Result<bool, String> {
    match upper(arg).as_str() {
        "LEFT" => Ok(true),
        "RIGHT" => Ok(false),
        _ => Err(syntax()),
    }
}

/// Moves one element from the list under `src` to the list under `dst` (the same list
/// rotates); `None` when `src` holds no list. Requires: both keys' stripe locks.
pub(crate) fn move_one(
    cx: &Ctx<'_, '_>,
    src: &[u8],
    dst: &[u8],
    from_left: bool,
    to_left: bool,
) -> Result<Option<Vec<u8>>, String> {
    let Some(mut from) = List::read(cx, src)? else {
        return Ok(None);
    };
    let mut w = Writes::default();
    let to = if src == dst {
        None
    } else {
        Some(List::read(cx, dst)?)
    };
    let Some(value) = from.pop(cx, &mut w, from_left)? else {
        return Ok(None);
    };
    match to {
        None => {
            from.push(&mut w, &value, to_left);
            from.0.finish(&mut w);
        }
        Some(to) => {
            from.0.finish(&mut w);
            let mut to = match to {
                Some(t) => t,
                None => List::open(cx, dst, &mut w)?,
            };
            to.push(&mut w, &value, to_left);
            to.0.finish(&mut w);
        }
    }
    w.commit(cx.shared)?;
    Ok(Some(value))
}

/// LMOVE `source destination LEFT|RIGHT LEFT|RIGHT` and RPOPLPUSH `source destination`.
pub(super) fn lmove(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (from_left, to_left) = match a.len() {
        3 => (false, true),
        _ => (side(a[3])?, side(a[4])?),
    };
    let (src, dst) = (cx.key(a[1]), cx.key(a[2]));
    let _g = cx.lock([src.as_slice(), dst.as_slice()]);
    match move_one(cx, &src, &dst, from_left, to_left)? {
        Some(v) => cx.out.bulk(&v),
        None => cx.out.null(),
    }
    Ok(())
}

/// The arguments of LMPOP and BLMPOP from `numkeys` on: the number of keys, whether to pop
/// from the left, and how many.
pub(crate) fn mpop_args(a: &[&[u8]]) -> Result<(usize, bool, u64), String> {
    let n = super::parse_i64(a[0])
        .filter(|&n| n > 0)
        .ok_or("ERR numkeys should be greater than 0")? as usize;
    let rest = a.get(1 + n..).ok_or_else(syntax)?;
    let left = side(rest.first().ok_or_else(syntax)?)?;
    let count = match rest.get(1..) {
        Some([]) | None => 1,
        Some([word, c]) if upper(word) == "COUNT" => super::parse_i64(c)
            .filter(|&c| c > 0)
            .ok_or("ERR count should be greater than 0")?
            as u64,
        Some(_) => return Err(syntax()),
    };
    Ok((n, left, count))
}

/// Pops up to `count` elements from the first of `keys` that holds a list, answering
/// `[name, [elements]]`; false, answering nothing, when none does.
pub(crate) fn mpop_first(
    cx: &mut Ctx<'_, '_>,
    keys: &[Vec<u8>],
    names: &[&[u8]],
    left: bool,
    count: u64,
) -> Result<bool, String> {
    for (k, name) in keys.iter().zip(names) {
        if let Some(popped) = pop_n(cx, k, count, left)?.filter(|p| !p.is_empty()) {
            cx.out.array(2);
            cx.out.bulk(name);
            reply_list(cx, &popped);
            return Ok(true);
        }
    }
    Ok(false)
}

/// `LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]`.
pub(super) fn lmpop(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (n, left, count) = mpop_args(&a[1..])?;
    let names = &a[2..2 + n];
    let keys: Vec<Vec<u8>> = names.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    if !mpop_first(cx, &keys, names, left, count)? {
        cx.out.null_array();
    }
    Ok(())
}

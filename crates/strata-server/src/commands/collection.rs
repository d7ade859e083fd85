//! What hashes and sets share: a collection's header under its key, and its elements, each
//! an engine entry of its own under the collection's version (`crate::store` lays them out).
//!
//! A command opens the collection under its key's stripe lock ([`Collection::open`]), reads
//! and writes elements through [`Writes`], and ends with [`Collection::finish`], which
//! rewrites the header (its count, and so the key's newest write that WATCH sees) or deletes
//! the key when the last element went. Everything a command writes is one atomic batch.
//! Ranges of elements are read from an engine iterator as they are walked, never loaded
//! whole; inside `EXEC` the transaction's own writes lie over them.

use std::collections::HashMap;
use std::ops::Bound;

use strata::ReadOptions;

use super::keyspace::{Writes, read_raw_locked};
use super::{Ctx, Outcome, engine, exec_state, int_arg, syntax, upper};
use crate::shared::Shared;
use crate::store::{self, Header, Kind, Value};

/// The most elements one draw with repeats answers: a reply of that many is already near
/// the output buffer's limit.
const MAX_DRAWS: usize = 1 << 26;

/// Collections of at most this many elements are sampled over a walk (uniformly); larger ones
/// by seeking to a random point ([`Collection::pick_one`]).
pub(crate) const SMALL: u64 = 128;

/// A point between `first` and `last` (sorted bytes): their common prefix, then a number
/// drawn between their next eight bytes read as numbers.
pub(crate) fn random_point(first: &[u8], last: &[u8], random: u64) -> Vec<u8> {
    let common = first.iter().zip(last).take_while(|(a, b)| a == b).count();
    let head = |k: &[u8]| {
        let mut b = [0u8; 8];
        for (d, s) in b.iter_mut().zip(k.get(common..).unwrap_or_default()) {
            *d = *s;
        }
        u64::from_be_bytes(b)
    };
    let (lo, hi) = (head(first), head(last));
    let offset = if hi > lo {
        random % (hi - lo).saturating_add(1)
    } else {
        0
    };
    let mut point = first.get(..common).unwrap_or_default().to_vec();
    point.extend_from_slice(&(lo + offset).to_be_bytes());
    point
}

/// An element: its member and stored value.
pub(crate) type Element = (Vec<u8>, Vec<u8>);

/// A collection as a command finds it and changes it.
pub(crate) struct Collection {
    pub key: Vec<u8>,
    pub kind: Kind,
    pub header: Header,
    pub expires_at: Option<u64>,
    /// False for a collection the command is creating.
    pub existed: bool,
    /// The elements this command wrote (`None`: removed), which its later reads see.
    written: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Collection {
    /// The collection a stored value of a key holds, for reading its elements.
    fn of(v: &Value) -> Self {
        Collection {
            key: Vec::new(),
            kind: v.kind,
            header: Header::decode(&v.data),
            expires_at: v.expires_at,
            existed: true,
            written: HashMap::new(),
        }
    }

    /// The live collection of `kind` under engine key `key`, or `None`; another kind is
    /// WRONGTYPE. Requires: the caller holds the key's stripe lock.
    pub(crate) fn read(cx: &Ctx<'_, '_>, key: &[u8], kind: Kind) -> Result<Option<Self>, String> {
        match cx.get_any_locked(key)? {
            None => Ok(None),
            Some(v) if v.kind != kind => Err(store::WRONGTYPE.into()),
            Some(v) => Ok(Some(Collection {
                key: key.to_vec(),
                kind,
                header: Header::decode(&v.data),
                expires_at: v.expires_at,
                existed: true,
                written: HashMap::new(),
            })),
        }
    }

    /// As [`Collection::read`], but an absent key becomes a new, empty collection under a
    /// version never used before. A value left under the key past its expiry goes in the
    /// same batch, with its elements. Requires: the caller holds the key's stripe lock.
    pub(crate) fn open(
        cx: &Ctx<'_, '_>,
        key: &[u8],
        kind: Kind,
        w: &mut Writes,
    ) -> Result<Self, String> {
        if let Some(c) = Self::read(cx, key, kind)? {
            return Ok(c);
        }
        Self::replace(cx, key, kind, w)
    }

    /// A new, empty collection of `kind` under engine key `key`, replacing whatever the key
    /// held (of any kind, expired or not) in the same batch. Requires: the caller holds the
    /// key's stripe lock.
    pub(crate) fn replace(
        cx: &Ctx<'_, '_>,
        key: &[u8],
        kind: Kind,
        w: &mut Writes,
    ) -> Result<Self, String> {
        if let Some(raw) = read_raw_locked(cx.shared, key)? {
            w.delete_value(key, &store::decode_value(&raw)?);
        }
        Ok(Collection {
            key: key.to_vec(),
            kind,
            header: Header {
                version: cx.shared.versions.next(&cx.shared.db)?,
                count: 0,
                // A new list grows both ways from the middle of the positions.
                head: 1 << 63,
            },
            expires_at: None,
            existed: false,
            written: HashMap::new(),
        })
    }

    /// The engine key of `member`.
    pub(crate) fn element_key(&self, member: &[u8]) -> Vec<u8> {
        store::element_key(self.header.version, member)
    }

    /// The stored value of `member`, if it is an element.
    pub(crate) fn get(&self, shared: &Shared, member: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let k = self.element_key(member);
        if let Some(v) = self.written.get(&k) {
            return Ok(v.clone());
        }
        if let Some(v) = exec_state::pending(&k) {
            return Ok(v);
        }
        shared.db.get(&k).map_err(engine)
    }

    /// Stores `member` with `value`; true when it is new.
    pub(crate) fn put(
        &mut self,
        cx: &Ctx<'_, '_>,
        w: &mut Writes,
        member: &[u8],
        value: &[u8],
    ) -> Result<bool, String> {
        let new = self.get(cx.shared, member)?.is_none();
        let k = self.element_key(member);
        w.put_raw(&k, value);
        self.written.insert(k, Some(value.to_vec()));
        if new {
            self.header.count += 1;
        }
        Ok(new)
    }

    /// Writes an element without counting it (a list's, by position): `None` deletes it.
    pub(crate) fn write_raw(&mut self, w: &mut Writes, member: &[u8], value: Option<&[u8]>) {
        let k = self.element_key(member);
        match value {
            Some(v) => w.put_raw(&k, v),
            None => w.delete_raw(&k),
        }
        self.written.insert(k, value.map(<[u8]>::to_vec));
    }

    /// Removes `member`; true when it was an element.
    pub(crate) fn remove(
        &mut self,
        cx: &Ctx<'_, '_>,
        w: &mut Writes,
        member: &[u8],
    ) -> Result<bool, String> {
        if self.get(cx.shared, member)?.is_none() {
            return Ok(false);
        }
        let k = self.element_key(member);
        w.delete_raw(&k);
        self.written.insert(k, None);
        self.header.count = self.header.count.saturating_sub(1);
        Ok(true)
    }

    /// Writes the header, or deletes the key when no element is left.
    pub(crate) fn finish(self, w: &mut Writes) {
        if self.header.count == 0 {
            if self.existed {
                let (lo, hi) = store::elements_range(self.header.version);
                w.delete(&self.key);
                w.delete_range(&lo, &hi);
            }
        } else {
            w.put_value(
                &self.key,
                self.kind,
                &self.header.encode(self.kind),
                self.expires_at,
            );
        }
    }

    /// Calls `each` with every element (member and stored value) in member order from
    /// `start` on, until it returns false.
    pub(crate) fn walk(
        &self,
        shared: &Shared,
        start: Bound<&[u8]>,
        mut each: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Outcome {
        let (lo, hi) = store::elements_range(self.header.version);
        let from = match start {
            Bound::Included(m) => Bound::Included(self.element_key(m)),
            Bound::Excluded(m) => Bound::Excluded(self.element_key(m)),
            Bound::Unbounded => Bound::Included(lo),
        };
        walk_range(shared, (from, Bound::Excluded(hi)), false, |k, v| {
            each(store::element_member(k), v)
        })
    }

    /// Every element, in member order.
    pub(crate) fn all(&self, cx: &Ctx<'_, '_>) -> Result<Vec<Element>, String> {
        let mut out = Vec::with_capacity(self.header.count.min(1 << 16) as usize);
        self.walk(cx.shared, Bound::Unbounded, |m, v| {
            out.push((m.to_vec(), v.to_vec()));
            true
        })?;
        Ok(out)
    }

    /// One element drawn at random. A small collection is sampled over one walk; a larger
    /// one by three seeks: its first and last members, then the first member at or after a
    /// random point between them (members after wide gaps come up more often, as RANDOMKEY's
    /// keys do).
    pub(crate) fn pick_one(&self, cx: &Ctx<'_, '_>) -> Result<Option<Element>, String> {
        if self.header.count <= SMALL {
            return Ok(self.sample(cx, 1)?.pop());
        }
        let (lo, hi) = store::elements_range(self.header.version);
        let end = |backward: bool| -> Result<Option<Element>, String> {
            let mut found = None;
            let range = (Bound::Included(lo.clone()), Bound::Excluded(hi.clone()));
            walk_range(cx.shared, range, backward, |k, v| {
                found = Some((store::element_member(k).to_vec(), v.to_vec()));
                false
            })?;
            Ok(found)
        };
        let (Some(first), Some(last)) = (end(false)?, end(true)?) else {
            return Ok(None);
        };
        let point = random_point(&first.0, &last.0, cx.shared.random_seed());
        let mut found = None;
        self.walk(cx.shared, Bound::Included(&point), |m, v| {
            found = Some((m.to_vec(), v.to_vec()));
            false
        })?;
        Ok(found.or(Some(first)))
    }

    /// `n` elements drawn at random (reservoir sampling over one walk): distinct ones, all of
    /// them when `n` is at least the count.
    pub(crate) fn sample(&self, cx: &Ctx<'_, '_>, n: usize) -> Result<Vec<Element>, String> {
        let mut picked: Vec<Element> = Vec::with_capacity(n.min(1 << 16));
        let mut seen = 0u64;
        self.walk(cx.shared, Bound::Unbounded, |m, v| {
            seen += 1;
            if picked.len() < n {
                picked.push((m.to_vec(), v.to_vec()));
            } else {
                let j = cx.shared.random_seed() % seen;
                if let Some(slot) = picked.get_mut(j as usize) {
                    *slot = (m.to_vec(), v.to_vec());
                }
            }
            true
        })?;
        // The reservoir keeps the walk's order for its first `n`: shuffle.
        for i in (1..picked.len()).rev() {
            let j = (cx.shared.random_seed() % (i as u64 + 1)) as usize;
            picked.swap(i, j);
        }
        Ok(picked)
    }

    /// `n` elements drawn at random, each draw on its own (the same element may come more
    /// than once): HRANDFIELD and SRANDMEMBER with a negative count.
    pub(crate) fn draws(&self, cx: &Ctx<'_, '_>, n: usize) -> Result<Vec<Element>, String> {
        let count = self.header.count;
        if count == 0 || n == 0 {
            return Ok(Vec::new());
        }
        if n > MAX_DRAWS {
            return Err(format!(
                "ERR value is out of range: at most {MAX_DRAWS} draws"
            ));
        }
        let mut wanted: Vec<(u64, usize)> = (0..n)
            .map(|i| (cx.shared.random_seed() % count, i))
            .collect();
        wanted.sort_unstable();
        let mut out: Vec<(usize, Element)> = Vec::with_capacity(n);
        let mut next = wanted.iter().peekable();
        let mut position = 0u64;
        self.walk(cx.shared, Bound::Unbounded, |m, v| {
            while let Some(&&(p, i)) = next.peek() {
                if p != position {
                    break;
                }
                out.push((i, (m.to_vec(), v.to_vec())));
                next.next();
            }
            position += 1;
            next.peek().is_some()
        })?;
        out.sort_unstable_by_key(|(i, _)| *i);
        Ok(out.into_iter().map(|(_, e)| e).collect())
    }
}

/// Calls `each` with every engine entry in `range`, forward or backward, until it returns
/// false: from an engine iterator, or inside `EXEC` with the transaction's writes over it.
pub(crate) fn walk_range(
    shared: &Shared,
    range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    backward: bool,
    mut each: impl FnMut(&[u8], &[u8]) -> bool,
) -> Outcome {
    if let Some(merged) = exec_state::merged_range(shared, &range)? {
        let entries: Box<dyn Iterator<Item = (&Vec<u8>, &Vec<u8>)>> = match backward {
            true => Box::new(merged.iter().rev()),
            false => Box::new(merged.iter()),
        };
        for (k, v) in entries {
            if !each(k, v) {
                break;
            }
        }
        return Ok(());
    }
    let mut entries = shared
        .db
        .scan_with(range, ReadOptions::default(), backward)
        .map_err(engine)?;
    // Each entry is read in place: a long range copies nothing it does not keep.
    while entries.step().map_err(engine)? {
        if !each(entries.key(), entries.value()) {
            break;
        }
    }
    Ok(())
}

/// Copies the elements of collection `v` under a new version (COPY), with a sorted set's
/// score index; returns the header of the copy.
pub(crate) fn copy_elements(
    cx: &Ctx<'_, '_>,
    v: &Value,
    w: &mut Writes,
) -> Result<Vec<u8>, String> {
    let from = Collection::of(v);
    let version = cx.shared.versions.next(&cx.shared.db)?;
    from.walk(cx.shared, Bound::Unbounded, |m, value| {
        w.put_raw(&store::element_key(version, m), value);
        if let (Kind::ZSet, Some(score)) = (v.kind, store::decode_score(value)) {
            w.put_raw(&store::score_key(version, score, m), b"");
        }
        true
    })?;
    if v.kind == Kind::Stream {
        let lo = store::stream_record_prefix(from.header.version);
        let hi = store::prefix_end(&lo);
        let to = store::stream_record_prefix(version);
        walk_range(
            cx.shared,
            (Bound::Included(lo.clone()), Bound::Excluded(hi)),
            false,
            |k, v| {
                let rest = k.get(lo.len()..).unwrap_or_default();
                w.put_raw(&[to.as_slice(), rest].concat(), v);
                true
            },
        )?;
    }
    Ok(Header {
        version,
        ..from.header
    }
    .encode(v.kind))
}

/// The arguments of `HSCAN`/`SSCAN key cursor [MATCH pattern] [COUNT n]`: the cursor,
/// the pattern and the count.
pub(crate) fn check_scan_args<'a>(
    a: &[&'a [u8]],
) -> Result<(u64, Option<&'a [u8]>, usize), String> {
    let cursor: u64 = std::str::from_utf8(a[2])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("ERR invalid cursor")?;
    let mut pattern = None;
    let mut count = 10usize;
    let mut i = 3;
    while i < a.len() {
        let value = a.get(i + 1).ok_or_else(syntax)?;
        match upper(a[i]).as_str() {
            "MATCH" => pattern = Some(*value),
            "COUNT" => {
                count = usize::try_from(int_arg(value)?)
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or_else(syntax)?;
            }
            _ => return Err(syntax()),
        }
        i += 2;
    }
    Ok((cursor, pattern, count))
}

/// `HSCAN`/`SSCAN`: the elements after the member the cursor names (a number kept in the
/// server's cursor table), at most `count` examined. Returns the next cursor and the
/// elements matched.
pub(crate) fn scan(
    cx: &Ctx<'_, '_>,
    c: &Collection,
    a: &[&[u8]],
) -> Result<(u64, Vec<Element>), String> {
    let (cursor, pattern, count) = check_scan_args(a)?;
    let after = match cursor {
        0 => None,
        n => {
            let table = cx.shared.cursors.lock().unwrap_or_else(|e| e.into_inner());
            let (_, k) = table
                .map
                .get(&n)
                .cloned()
                .ok_or("ERR invalid cursor (expired or never issued)")?;
            Some(k)
        }
    };
    let start = match &after {
        Some(m) => Bound::Excluded(m.as_slice()),
        None => Bound::Unbounded,
    };
    let (mut found, mut examined, mut last) = (Vec::new(), 0, None);
    let mut finished = true;
    c.walk(cx.shared, start, |m, v| {
        if examined == count {
            finished = false;
            return false;
        }
        examined += 1;
        if pattern.is_none_or(|p| crate::glob::matches(p, m)) {
            found.push((m.to_vec(), v.to_vec()));
        }
        last = Some(m.to_vec());
        true
    })?;
    let next = match (finished, last) {
        (false, Some(m)) => cx.shared.new_cursor(cx.conn.db, m),
        _ => 0,
    };
    Ok((next, found))
}

/// The bytes the elements of collection `v` take in the engine (their keys and values),
/// estimated from the first `samples` of them (all of them for 0).
pub(crate) fn estimate_bytes(cx: &Ctx<'_, '_>, v: &Value, samples: usize) -> Result<u64, String> {
    let c = Collection::of(v);
    let header = c.header;
    let (mut seen, mut bytes) = (0u64, 0u64);
    c.walk(cx.shared, Bound::Unbounded, |m, value| {
        seen += 1;
        bytes += (9 + m.len() + value.len()) as u64;
        samples == 0 || seen < samples as u64
    })?;
    Ok(match seen {
        0 => 0,
        n => bytes.saturating_mul(header.count) / n,
    })
}

/// HDEL and SREM: `key member [member ...]`, answering how many were elements.
pub(crate) fn remove_members(cx: &mut Ctx<'_, '_>, a: &[&[u8]], kind: Kind) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(mut c) = Collection::read(cx, &key, kind)? else {
        cx.out.int(0);
        return Ok(());
    };
    let mut w = Writes::default();
    let mut removed = 0;
    for m in &a[2..] {
        removed += i64::from(c.remove(cx, &mut w, m)?);
    }
    if removed > 0 {
        c.finish(&mut w);
        w.commit(cx.shared)?;
    }
    cx.out.int(removed);
    Ok(())
}

/// HLEN and SCARD: the count the header keeps.
pub(crate) fn count(cx: &mut Ctx<'_, '_>, a: &[&[u8]], kind: Kind) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let n = Collection::read(cx, &key, kind)?.map_or(0, |c| c.header.count);
    cx.out.int(n as i64);
    Ok(())
}

/// HRANDFIELD and SRANDMEMBER of client key `key`: without a count, answers one member (or
/// null) itself and returns `None`; with one, returns distinct elements for a positive
/// count, draws that may repeat for a negative one.
pub(crate) fn draw(
    cx: &mut Ctx<'_, '_>,
    key: &[u8],
    kind: Kind,
    count: Option<i64>,
) -> Result<Option<Vec<Element>>, String> {
    let key = cx.key(key);
    let _g = cx.lock([key.as_slice()]);
    let c = Collection::read(cx, &key, kind)?;
    let Some(count) = count else {
        match c.map(|c| c.pick_one(cx)).transpose()?.flatten() {
            Some((m, _)) => cx.out.bulk(&m),
            None => cx.out.null(),
        }
        return Ok(None);
    };
    Ok(Some(match c {
        None => Vec::new(),
        Some(c) if count >= 0 => c.sample(cx, count as usize)?,
        Some(c) => c.draws(cx, count.unsigned_abs() as usize)?,
    }))
}

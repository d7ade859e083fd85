//! The keyspace family (DEL, EXISTS, SCAN, RENAME, COPY, ...) and expiry (EXPIRE, TTL, ...),
//! and the active-expiry cycle that removes expired keys nothing reads.

use std::ops::Bound;
use std::sync::atomic::Ordering;

use strata::ReadOptions;

use super::keyspace::{Writes, lock_stripes, read_raw_locked};
use super::{Ctx, Outcome, engine, exec_state, int_arg, syntax, upper};
use crate::shared::Shared;
use crate::store::{self, DATABASES, Kind};

pub(super) fn del(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let keys: Vec<Vec<u8>> = a[1..].iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let mut w = Writes::default();
    let mut seen = std::collections::HashSet::new();
    let mut removed = 0;
    for k in &keys {
        if !seen.insert(k.as_slice()) {
            continue;
        }
        if let Some(v) = cx.get_any_locked(k)? {
            removed += 1;
            w.delete_value(k, &v);
        }
    }
    if !w.is_empty() {
        w.commit(cx.shared)?;
    }
    cx.out.int(removed);
    Ok(())
}

/// EXISTS and TOUCH: how many of the keys exist (a key named twice counts twice).
pub(super) fn exists(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let keys: Vec<Vec<u8>> = a[1..].iter().map(|k| cx.key(k)).collect();
    // Under the keys' stripe locks: as of one moment between other clients' multi-key writes.
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let mut count = 0;
    for k in &keys {
        if cx.get_any_locked(k)?.is_some() {
            count += 1;
        }
    }
    cx.out.int(count);
    Ok(())
}

pub(super) fn type_(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let found = cx.get_any(&cx.key(a[1]))?;
    cx.out.simple(found.map_or("none", |v| v.kind.name()));
    Ok(())
}

/// `OBJECT REFCOUNT|ENCODING|IDLETIME|FREQ|HELP key`. Values are not shared and not
/// tracked for idleness: a live key's count is 1 and its idle time 0. Its encoding is the
/// name Redis gives its larger form of the kind (strings: `int`, `embstr` or `raw`).
pub(super) fn object(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a[1]);
    if sub == "HELP" && a.len() == 2 {
        cx.out.array(2);
        cx.out
            .simple("OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:");
        cx.out
            .simple("ENCODING <key> | FREQ <key> | IDLETIME <key> | REFCOUNT <key> | HELP");
        return Ok(());
    }
    if !matches!(sub.as_str(), "REFCOUNT" | "ENCODING" | "IDLETIME" | "FREQ") {
        return Err(format!(
            "ERR unknown subcommand '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(a[1])
        ));
    }
    if a.len() != 3 {
        return Err(super::wrong_args(&format!("object|{}", sub.to_lowercase())));
    }
    let Some(v) = cx.get_any(&cx.key(a[2]))? else {
        cx.out.null();
        return Ok(());
    };
    match sub.as_str() {
        "REFCOUNT" => cx.out.int(1),
        "IDLETIME" => cx.out.int(0),
        "FREQ" => {
            return Err(
                "ERR An LFU maxmemory policy is not selected, access frequency not \
                        tracked. Please note that when switching between policies at runtime \
                        LRU and LFU data will take some time to adjust."
                    .into(),
            );
        }
        _ => {
            let name = match v.kind {
                Kind::String if super::parse_i64(&v.data).is_some() => "int",
                Kind::String if v.data.len() <= 44 => "embstr",
                Kind::String => "raw",
                Kind::Hash | Kind::Set => "hashtable",
                Kind::ZSet => "skiplist",
                Kind::List => "quicklist",
                Kind::Stream => "stream",
            };
            cx.out.bulk(name.as_bytes());
        }
    }
    Ok(())
}

/// The live keys of database `db` from `start` on (client keys), in order, with their
/// values; `each` returns false to stop.
fn walk(
    cx: &Ctx<'_, '_>,
    db: u8,
    start: Bound<&[u8]>,
    each: impl FnMut(&[u8], &store::Value) -> bool,
) -> Outcome {
    walk_dir(cx, db, start, false, each)
}

/// As [`walk`]; `backward` walks from `start` down to the database's first key.
fn walk_dir(
    cx: &Ctx<'_, '_>,
    db: u8,
    start: Bound<&[u8]>,
    backward: bool,
    mut each: impl FnMut(&[u8], &store::Value) -> bool,
) -> Outcome {
    let db = cx.shared.databases.prefix(db);
    let (lo, hi) = store::db_range(db);
    let from = match start {
        Bound::Included(k) => Bound::Included(store::data_key(db, k)),
        Bound::Excluded(k) => Bound::Excluded(store::data_key(db, k)),
        Bound::Unbounded if backward => Bound::Excluded(hi.clone()),
        Bound::Unbounded => Bound::Included(lo.clone()),
    };
    let range = if backward {
        (Bound::Included(lo), from)
    } else {
        (from, Bound::Excluded(hi))
    };
    if let Some(merged) = exec_state::merged_range(cx.shared, &range)? {
        let mut entries: Box<dyn Iterator<Item = (Vec<u8>, Vec<u8>)>> = if backward {
            Box::new(merged.into_iter().rev())
        } else {
            Box::new(merged.into_iter())
        };
        for (k, raw) in &mut entries {
            let v = store::decode_value(&raw)?;
            if v.is_live(cx.now) && !each(store::user_key(&k), &v) {
                break;
            }
        }
        return Ok(());
    }
    let entries = cx
        .shared
        .db
        .scan_with(range, ReadOptions::default(), backward)
        .map_err(engine)?;
    for e in entries {
        let (k, raw) = e.map_err(engine)?;
        let v = store::decode_value(&raw)?;
        if v.is_live(cx.now) && !each(store::user_key(&k), &v) {
            break;
        }
    }
    Ok(())
}

/// The first live key from `start` on, walking forward or backward.
fn first_key(
    cx: &Ctx<'_, '_>,
    start: Bound<&[u8]>,
    backward: bool,
) -> Result<Option<Vec<u8>>, String> {
    let mut found = None;
    walk_dir(cx, cx.conn.db, start, backward, |k, _| {
        found = Some(k.to_vec());
        false
    })?;
    Ok(found)
}

pub(super) fn keys(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let pattern = a[1];
    // The pattern's literal head bounds the walk.
    let head: Vec<u8> = pattern
        .iter()
        .take_while(|b| !matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .copied()
        .collect();
    let mut found = Vec::new();
    walk(cx, cx.conn.db, Bound::Included(&head), |k, _| {
        if !k.starts_with(&head) {
            return false;
        }
        if crate::glob::matches(pattern, k) {
            found.push(k.to_vec());
        }
        true
    })?;
    cx.out.array(found.len());
    for k in found {
        cx.out.bulk(&k);
    }
    Ok(())
}

pub(super) fn dbsize(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    let mut count = 0i64;
    walk(cx, cx.conn.db, Bound::Unbounded, |_, _| {
        count += 1;
        true
    })?;
    cx.out.int(count);
    Ok(())
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`: keys in key order. The cursor is a
/// number that names the key to continue after, kept in a bounded table (the oldest cursors
/// expire).
pub(super) fn scan(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let cursor: u64 = std::str::from_utf8(a[1])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("ERR invalid cursor")?;
    let mut pattern: Option<&[u8]> = None;
    let mut type_filter: Option<String> = None;
    let mut count = 10usize;
    let mut i = 2;
    while i < a.len() {
        let value = a.get(i + 1).ok_or_else(syntax)?;
        match upper(a[i]).as_str() {
            "MATCH" => pattern = Some(value),
            "COUNT" => {
                count = usize::try_from(int_arg(value)?)
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or_else(syntax)?;
            }
            "TYPE" => type_filter = Some(String::from_utf8_lossy(value).to_ascii_lowercase()),
            _ => return Err(syntax()),
        }
        i += 2;
    }
    let after: Option<Vec<u8>> = if cursor == 0 {
        None
    } else {
        let table = cx.shared.cursors.lock().unwrap_or_else(|e| e.into_inner());
        let (db, key) = table
            .map
            .get(&cursor)
            .cloned()
            .ok_or("ERR invalid cursor (expired or never issued)")?;
        if db != cx.conn.db {
            return Err("ERR invalid cursor (issued for another database)".into());
        }
        Some(key)
    };
    let start = match &after {
        Some(k) => Bound::Excluded(k.as_slice()),
        None => Bound::Unbounded,
    };
    let mut keys = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    let mut examined = 0;
    let mut finished = true;
    walk(cx, cx.conn.db, start, |k, v| {
        if examined == count {
            finished = false;
            return false;
        }
        examined += 1;
        let type_ok = type_filter.as_deref().is_none_or(|t| t == v.kind.name());
        if type_ok && pattern.is_none_or(|p| crate::glob::matches(p, k)) {
            keys.push(k.to_vec());
        }
        last = Some(k.to_vec());
        true
    })?;
    let next = match (finished, last) {
        (false, Some(k)) => cx.shared.new_cursor(cx.conn.db, k),
        _ => 0,
    };
    cx.out.array(2);
    cx.out.bulk(next.to_string().as_bytes());
    cx.out.array(keys.len());
    for k in keys {
        cx.out.bulk(&k);
    }
    Ok(())
}

pub(super) fn randomkey(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    // A random point between the first and the last key (their first eight differing bytes
    // read as numbers), then, by a coin, the first live key at or after it or the last at or
    // before it: every key can come up, the ones after wide gaps more often.
    let (Some(first), Some(last)) = (
        first_key(cx, Bound::Unbounded, false)?,
        first_key(cx, Bound::Unbounded, true)?,
    ) else {
        cx.out.null();
        return Ok(());
    };
    let point = super::collection::random_point(&first, &last, cx.shared.random_seed());
    let backward = cx.shared.random_seed() & 1 == 0;
    let found = match first_key(cx, Bound::Included(&point), backward)? {
        Some(k) => Some(k),
        None => first_key(cx, Bound::Included(&point), !backward)?,
    };
    match found {
        Some(k) => cx.out.bulk(&k),
        None => cx.out.null(),
    }
    Ok(())
}

fn db_arg(arg: &[u8]) -> Result<u8, String> {
    let n = int_arg(arg).map_err(|_| super::not_an_integer())?;
    u8::try_from(n)
        .ok()
        .filter(|&n| n < DATABASES)
        .ok_or_else(|| "ERR DB index is out of range".into())
}

/// `SWAPDB index1 index2`: the two databases change places (their keys stay where they are
/// stored; the map from numbers to prefixes changes). Runs alone. Clients parked on keys of
/// either look again, as in Redis.
pub(super) fn swapdb(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let index = |arg: &[u8], which: &str| -> Result<u8, String> {
        let n = int_arg(arg).map_err(|_| format!("ERR invalid {which} DB index"))?;
        u8::try_from(n)
            .ok()
            .filter(|&n| n < DATABASES)
            .ok_or_else(|| "ERR DB index is out of range".into())
    };
    let (x, y) = (index(a[1], "first")?, index(a[2], "second")?);
    if x != y {
        // Recorded in the command's batch (inside EXEC, the transaction's), which a WAL
        // replays in order: a restart never sees writes made after the swap without it.
        let map = cx.shared.databases.swapped(x, y);
        let mut w = Writes::default();
        w.put_raw(store::DATABASES_KEY, &map);
        w.commit(cx.shared)?;
        cx.shared.databases.set(map, x, y);
        cx.shared.notify_all_parked();
    }
    cx.out.ok();
    Ok(())
}

/// RENAME and RENAMENX. The key keeps its expiry.
pub(super) fn rename(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let nx = a[0].eq_ignore_ascii_case(b"renamenx");
    let (src, dst) = (cx.key(a[1]), cx.key(a[2]));
    let _g = cx.lock([src.as_slice(), dst.as_slice()]);
    let v = cx.get_any_locked(&src)?.ok_or("ERR no such key")?;
    if src == dst {
        if nx {
            cx.out.int(0);
        } else {
            cx.out.ok();
        }
        return Ok(());
    }
    let old = cx.get_any_locked(&dst)?;
    if nx && old.is_some() {
        cx.out.int(0);
        return Ok(());
    }
    relocate(cx, &src, &dst, &v, old.as_ref())?;
    if nx {
        cx.out.int(1);
    } else {
        cx.out.ok();
    }
    Ok(())
}

/// `COPY source destination [DB n] [REPLACE]`. The copy keeps the source's expiry.
pub(super) fn copy(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let mut db = cx.conn.db;
    let mut replace = false;
    let mut i = 3;
    while i < a.len() {
        match upper(a[i]).as_str() {
            "REPLACE" => replace = true,
            "DB" => {
                db = db_arg(a.get(i + 1).ok_or_else(syntax)?)?;
                i += 1;
            }
            _ => return Err(syntax()),
        }
        i += 1;
    }
    let src = cx.key(a[1]);
    let dst = store::data_key(cx.shared.databases.prefix(db), a[2]);
    if src == dst {
        return Err("ERR source and destination objects are the same".into());
    }
    let _g = cx.lock([src.as_slice(), dst.as_slice()]);
    let Some(v) = cx.get_any_locked(&src)? else {
        cx.out.int(0);
        return Ok(());
    };
    let old = cx.get_any_locked(&dst)?;
    if !replace && old.is_some() {
        cx.out.int(0);
        return Ok(());
    }
    let mut w = Writes::default();
    if let Some(old) = &old {
        w.delete_value(&dst, old);
    }
    let data = match v.kind {
        Kind::String => v.data.clone(),
        _ => super::collection::copy_elements(cx, &v, &mut w)?,
    };
    w.put_value(&dst, v.kind, &data, v.expires_at);
    w.commit(cx.shared)?;
    cx.out.int(1);
    Ok(())
}

/// `MOVE key db`: moves a key to another database unless the key exists there.
pub(super) fn move_(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let db = db_arg(a[2])?;
    if db == cx.conn.db {
        return Err("ERR source and destination objects are the same".into());
    }
    let src = cx.key(a[1]);
    let dst = store::data_key(cx.shared.databases.prefix(db), a[1]);
    let _g = cx.lock([src.as_slice(), dst.as_slice()]);
    let Some(v) = cx.get_any_locked(&src)? else {
        cx.out.int(0);
        return Ok(());
    };
    if cx.get_any_locked(&dst)?.is_some() {
        cx.out.int(0);
        return Ok(());
    }
    relocate(cx, &src, &dst, &v, None)?;
    cx.out.int(1);
    Ok(())
}

/// Moves a key's value and expiry from engine key `src` to `dst` in one batch (RENAME, MOVE),
/// replacing `old`, what `dst` held. A collection's elements stay where they are: the header
/// that names their version moves. Requires: the caller holds both keys' stripe locks.
fn relocate(
    cx: &Ctx<'_, '_>,
    src: &[u8],
    dst: &[u8],
    v: &store::Value,
    old: Option<&store::Value>,
) -> Outcome {
    let mut w = Writes::default();
    if let Some(old) = old {
        w.delete_value(dst, old);
    }
    w.delete(src);
    w.put_value(dst, v.kind, &v.data, v.expires_at);
    w.commit(cx.shared)
}

/// Deletes every engine key in each `[lo, hi)` of `ranges`, in one atomic write.
/// Requires: the key space's write lock.
fn delete_ranges(shared: &Shared, ranges: &[(Vec<u8>, Vec<u8>)]) -> Outcome {
    // Inside EXEC the deletes join the transaction's batch, after its earlier writes, key by
    // key (its reads see its own writes through that batch).
    let mut in_exec = Writes::default();
    let mut exec = false;
    for (lo, hi) in ranges {
        let range = (Bound::Included(lo.clone()), Bound::Excluded(hi.clone()));
        if let Some(merged) = exec_state::merged_range(shared, &range)? {
            exec = true;
            for k in merged.into_keys() {
                in_exec.delete(&k);
            }
        }
    }
    if exec {
        return in_exec.commit(shared);
    }
    // One range tombstone per range, however many keys each holds.
    let mut w = strata::WriteBatch::new();
    for (lo, hi) in ranges {
        w.delete_range(lo, hi);
    }
    shared
        .db
        .write(w, super::write_opts(shared))
        .map_err(engine)
}

fn flush_mode(a: &[&[u8]]) -> Outcome {
    match a.get(1).map(|m| upper(m)).as_deref() {
        None | Some("SYNC") | Some("ASYNC") if a.len() <= 2 => Ok(()),
        _ => Err(syntax()),
    }
}

pub(super) fn flushdb(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    flush_mode(a)?;
    let mut ranges = vec![store::db_range(cx.shared.databases.prefix(cx.conn.db))];
    walk(cx, cx.conn.db, Bound::Unbounded, |_, v| {
        if v.kind != Kind::String {
            ranges.extend(store::collection_ranges(
                v.kind,
                store::Header::decode(&v.data).version,
            ));
        }
        true
    })?;
    delete_ranges(cx.shared, &ranges)?;
    cx.shared.cache.clear();
    cx.shared.notify_all_parked();
    cx.out.ok();
    Ok(())
}

pub(super) fn flushall(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    flush_mode(a)?;
    let mut ranges = vec![(vec![0], vec![DATABASES]), store::index_range()];
    ranges.extend(store::all_elements_ranges());
    delete_ranges(cx.shared, &ranges)?;
    cx.shared.cache.clear();
    cx.shared.notify_all_parked();
    cx.out.ok();
    Ok(())
}

/// EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT, with NX, XX, GT and LT.
pub(super) fn expire(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let name = String::from_utf8_lossy(a[0]).to_ascii_lowercase();
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &a[3..] {
        match upper(opt).as_str() {
            "NX" => nx = true,
            "XX" => xx = true,
            "GT" => gt = true,
            "LT" => lt = true,
            _ => {
                return Err(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                ));
            }
        }
    }
    if nx && (xx || gt || lt) {
        return Err("ERR NX and XX, GT or LT options at the same time are not compatible".into());
    }
    if gt && lt {
        return Err("ERR GT and LT options at the same time are not compatible".into());
    }
    let n = int_arg(a[2])?;
    let invalid = || format!("ERR invalid expire time in '{name}' command");
    let ms = if name == "expire" || name == "expireat" {
        n.checked_mul(1000).ok_or_else(invalid)?
    } else {
        n
    };
    let at = if name.ends_with("at") {
        ms
    } else {
        ms.checked_add(cx.now as i64).ok_or_else(invalid)?
    };
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(v) = cx.get_any_locked(&key)? else {
        cx.out.int(0);
        return Ok(());
    };
    // No expiry counts as an infinite one.
    let current = v.expires_at.map(|t| t as i64);
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| at <= c))
        || (lt && current.is_some_and(|c| at >= c));
    if refused {
        cx.out.int(0);
        return Ok(());
    }
    let mut w = Writes::default();
    if at <= cx.now as i64 {
        w.delete_value(&key, &v);
    } else {
        w.put_value(&key, v.kind, &v.data, Some(at as u64));
    }
    w.commit(cx.shared)?;
    cx.out.int(1);
    Ok(())
}

/// TTL, PTTL, EXPIRETIME and PEXPIRETIME: -2 for a missing key, -1 for one without expiry.
pub(super) fn ttl(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let name = String::from_utf8_lossy(a[0]).to_ascii_lowercase();
    let reply = match cx.get_any(&cx.key(a[1]))? {
        None => -2,
        Some(v) => match v.expires_at {
            None => -1,
            Some(t) => {
                let left = t.saturating_sub(cx.now) as i64;
                match name.as_str() {
                    "ttl" => (left + 500) / 1000,
                    "pttl" => left,
                    // Rounded to the nearest second, as Redis rounds TTL and EXPIRETIME.
                    "expiretime" => (t as i64 + 500) / 1000,
                    _ => t as i64,
                }
            }
        },
    };
    cx.out.int(reply);
    Ok(())
}

pub(super) fn persist(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    match cx.get_any_locked(&key)? {
        Some(v) if v.expires_at.is_some() => {
            let mut w = Writes::default();
            w.put_value(&key, v.kind, &v.data, None);
            w.commit(cx.shared)?;
            cx.out.int(1);
        }
        _ => cx.out.int(0),
    }
    Ok(())
}

/// Index entries one cycle looks at, at most.
const EXPIRE_CYCLE_ENTRIES: usize = 1000;

/// One cycle of active expiry: removes the keys whose expiry index entries are due at
/// `now_ms` (at most [`EXPIRE_CYCLE_ENTRIES`]), and the entries, in one batch. A key whose
/// value has not expired (its expiry since lifted or moved later, or the key rewritten)
/// stays, and its stale entry goes. Returns the keys removed and whether due entries
/// remain.
///
/// The cycle starts at `Shared::expiry_floor`, below which it already removed every entry:
/// the tombstones it left there are not walked again by every cycle. New entries lie above
/// the floor, since a key is only given an expiry in its future; the background thread
/// resets the floor now and then, for a clock that went back.
pub(crate) fn expire_cycle(shared: &Shared, now_ms: u64) -> Result<(u64, bool), String> {
    let _keyspace = shared.keyspace.read().unwrap_or_else(|e| e.into_inner());
    // Relaxed: only the background thread moves the floor.
    let floor = shared.expiry_floor.load(Ordering::Relaxed);
    let (_, hi) = store::due_index_range(now_ms);
    let lo = store::index_key(floor, b"");
    let mut due: Vec<Vec<u8>> = Vec::new();
    for e in shared
        .db
        .scan_with(lo..hi, ReadOptions::default(), false)
        .map_err(engine)?
        .take(EXPIRE_CYCLE_ENTRIES)
    {
        due.push(e.map_err(engine)?.0);
    }
    let more = due.len() == EXPIRE_CYCLE_ENTRIES;
    let parsed: Vec<(&[u8], u64, &[u8])> = due
        .iter()
        .filter_map(|entry| {
            store::parse_index_key(entry).map(|(at, key)| (entry.as_slice(), at, key))
        })
        .collect();
    let mut removed = 0;
    let mut gone: Vec<&[u8]> = Vec::new();
    // A few keys at a time, so that writers wait for a short batch at most.
    for chunk in parsed.chunks(64) {
        let _g = lock_stripes(shared, chunk.iter().map(|&(_, _, key)| key));
        let mut w = Writes::default();
        for &(entry, _, key) in chunk {
            w.delete_raw(entry);
            let raw = read_raw_locked(shared, key)?;
            // The key goes if its value, as it is now, has expired: whatever entry led here.
            if let Some(raw) = raw
                && let Ok(v) = store::decode_value(&raw)
                && v.expires_at.is_some_and(|t| t <= now_ms)
            {
                w.delete_value(key, &v);
                removed += 1;
                gone.push(key);
            }
        }
        w.commit(shared)?;
        crate::notify::clear();
    }
    if crate::notify::on(shared) {
        for key in gone {
            crate::notify::expired(shared, key);
        }
    }
    // A command that read the clock just before this cycle may still add an entry a little
    // below `now_ms`: the floor stays a second behind.
    let next_floor = match parsed.last() {
        Some(&(_, at, _)) if more => at,
        _ => now_ms.saturating_sub(1000),
    };
    shared.expiry_floor.store(next_floor, Ordering::Relaxed);
    shared
        .counters
        .expired_keys
        .fetch_add(removed, Ordering::Relaxed);
    Ok((removed, more))
}

/// `MEMORY USAGE key [SAMPLES n]`: the bytes the key takes in the engine (its key and
/// stored value; for a collection, its elements too, estimated from `n` of them, 5 by
/// default, all of them for 0), before compression. `MEMORY HELP` lists that.
/// MEMORY STATS: what holds the server's memory, in bytes (Redis's names where the figure
/// means the same, Strata's own for the engine's parts), and what the disk holds.
fn memory_figures(cx: &Ctx<'_, '_>) -> Vec<(&'static str, u64)> {
    let s = cx.shared.db.stats();
    let engine =
        s.memtable_bytes + s.immutable_memtable_bytes + s.block_cache_bytes + s.table_pinned_bytes;
    let lua = cx.shared.scripts.memory() as u64;
    let hot = cx.shared.cache.bytes() as u64;
    vec![
        ("held.total", engine + lua + hot),
        ("rss", super::info::resident_bytes()),
        ("lua.caches", lua),
        (
            "engine.memtables",
            s.memtable_bytes + s.immutable_memtable_bytes,
        ),
        ("engine.block-cache", s.block_cache_bytes),
        ("engine.block-cache-capacity", s.block_cache_capacity),
        ("engine.pinned-tables", s.table_pinned_bytes),
        ("hot-cache", hot),
        ("disk.tables", s.levels.iter().map(|l| l.bytes).sum()),
        ("clients.connected", cx.shared.clients.list().len() as u64),
    ]
}

/// MEMORY DOCTOR: how the memory is used, and what to change when something looks off.
fn memory_doctor(cx: &Ctx<'_, '_>) -> String {
    let s = cx.shared.db.stats();
    let lookups = s.block_cache_hits + s.block_cache_misses;
    let mut advice = Vec::new();
    if lookups > 10_000 && s.block_cache_misses * 2 > lookups {
        advice.push(format!(
            "* Most block cache lookups miss ({} of {lookups}): reads go to the disk. A larger \
             --block-cache-bytes (now {}) keeps more of the data in memory.",
            s.block_cache_misses, s.block_cache_capacity
        ));
    }
    if s.immutable_memtables > 1 {
        advice.push(format!(
            "* {} memtables wait to be flushed: writes come faster than the disk takes them.",
            s.immutable_memtables
        ));
    }
    let figures: Vec<String> = memory_figures(cx)
        .into_iter()
        .map(|(n, v)| format!("{n}: {v}"))
        .collect();
    let verdict = if advice.is_empty() {
        "No memory problem was found.".to_string()
    } else {
        advice.join("\n")
    };
    format!("{verdict}\n\n{}\n", figures.join("\n"))
}

pub(super) fn memory(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    match upper(a[1]).as_str() {
        "HELP" if a.len() == 2 => {
            let lines = [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value, as stored by the",
                "    engine. Collections' elements are estimated from <count> of them (5 by",
                "    default, all of them for 0).",
                "STATS",
                "    Return the server's memory, by what holds it.",
                "DOCTOR",
                "    Return a report on how the memory is used, with advice.",
                "HELP",
                "    Print this help.",
            ];
            cx.out.array(lines.len());
            for l in lines {
                cx.out.simple(l);
            }
            Ok(())
        }
        "STATS" if a.len() == 2 => {
            let figures = memory_figures(cx);
            cx.out.map(figures.len());
            for (name, n) in figures {
                cx.out.bulk(name.as_bytes());
                cx.out.int(n as i64);
            }
            Ok(())
        }
        "DOCTOR" if a.len() == 2 => {
            let report = memory_doctor(cx);
            cx.out.verbatim(&report);
            Ok(())
        }
        "USAGE" if a.len() == 3 || a.len() == 5 => {
            let samples = match a.get(3) {
                Some(o) if upper(o) == "SAMPLES" => {
                    let n = int_arg(a[4])?;
                    usize::try_from(n).map_err(|_| syntax())?
                }
                Some(_) => return Err(syntax()),
                None => 5,
            };
            let key = cx.key(a[2]);
            let _g = cx.lock([key.as_slice()]);
            let Some(v) = cx.get_any_locked(&key)? else {
                cx.out.null();
                return Ok(());
            };
            // The key and its stored value: a tag, perhaps an expiry, the data.
            let own = key.len() + 1 + 8 * usize::from(v.expires_at.is_some()) + v.data.len();
            let elements = match v.kind {
                Kind::String => 0,
                _ => super::collection::estimate_bytes(cx, &v, samples)?,
            };
            cx.out.int((own as u64).saturating_add(elements) as i64);
            Ok(())
        }
        _ => Err(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(a[1])
        )),
    }
}

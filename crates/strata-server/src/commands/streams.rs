//! Streams: XADD, XLEN, XRANGE, XREVRANGE, XDEL, XTRIM, XSETID and XREAD (blocking, woken
//! as the blocking pops are). Consumer groups are in `xgroups.rs`, XINFO in `xinfo.rs`, the
//! layout in `stream.rs`.

use std::time::{Duration, Instant};

use super::keyspace::Writes;
use super::stream::{Id, Stream, decode_entry, id_arg, strict_id};
use super::{Ctx, Outcome, exec_state, int_arg, syntax, upper};
use crate::shared::{After, Block};
use crate::store;

/// How XADD and XTRIM trim: to a length or to a least ID, exactly or by whole nodes (`~`),
/// removing at most `limit` entries (0: no limit).
pub(super) struct Trim {
    pub minid: Option<Id>,
    pub maxlen: u64,
    pub approx: bool,
    pub limit: u64,
}

/// Parses a trim at `a[i]` (`MAXLEN|MINID [=|~] threshold [LIMIT n]`, the option's name
/// already seen); returns it and the index after it.
fn parse_trim(a: &[&[u8]], mut i: usize, node_max: i64) -> Result<(Trim, usize), String> {
    let minid = upper(a[i]) == "MINID";
    i += 1;
    let mut approx = false;
    match a.get(i).copied() {
        Some(b"~") => {
            approx = true;
            i += 1;
        }
        Some(b"=") => i += 1,
        _ => {}
    }
    let threshold = a.get(i).ok_or_else(syntax)?;
    let mut trim = Trim {
        minid: None,
        maxlen: 0,
        approx,
        limit: 0,
    };
    if minid {
        trim.minid = Some(id_arg(threshold, 0)?);
    } else {
        let n = int_arg(threshold)?;
        trim.maxlen = u64::try_from(n).map_err(|_| "ERR The MAXLEN argument must be >= 0.")?;
    }
    i += 1;
    if a.get(i).is_some_and(|o| upper(o) == "LIMIT") {
        let n = int_arg(a.get(i + 1).ok_or_else(syntax)?)?;
        if !approx {
            return Err(
                "ERR syntax error, LIMIT cannot be used without the special ~ option".into(),
            );
        }
        trim.limit = u64::try_from(n).map_err(|_| "ERR The LIMIT argument must be >= 0.")?;
        i += 2;
    } else if approx {
        trim.limit = 100 * node_max.max(1) as u64;
    }
    Ok((trim, i))
}

/// Removes the entries `trim` asks to; returns how many went. With `~`, only whole nodes go
/// (the entries XADD put in one node), and no node that would take more than the limit.
/// What goes is always the oldest entries: one range deletion, whatever their number (inside
/// `EXEC`, one deletion each, which the transaction's later reads see).
pub(super) fn trim(
    cx: &Ctx<'_, '_>,
    s: &mut Stream,
    w: &mut Writes,
    t: &Trim,
    added: Option<(Id, u64)>,
) -> Result<u64, String> {
    let in_exec = exec_state::in_exec();
    let mut count = s.header.count;
    // How many go, the last of them, and (inside EXEC) each of them.
    let (mut gone, mut last, mut each) = (0u64, None, Vec::new());
    // The current node's entries, when trimming by nodes.
    let mut node: Option<u64> = None;
    let mut group: Vec<Id> = Vec::new();
    let goes = |count: u64, ids: &[Id], removed: u64| -> bool {
        let n = ids.len() as u64;
        let fits = t.limit == 0 || removed + n <= t.limit;
        let wanted = match t.minid {
            Some(min) => ids.last().is_some_and(|last| *last < min),
            None => count.saturating_sub(n) >= t.maxlen,
        };
        fits && wanted
    };
    // Each entry in order, with its node: true to look at the next.
    let mut visit = |id: Id, n: u64| -> bool {
        if !t.approx {
            let wanted = match t.minid {
                Some(min) => id < min,
                None => count > t.maxlen,
            };
            if wanted {
                (gone, last) = (gone + 1, Some(id));
                each.extend(in_exec.then_some(id));
                count -= 1;
            }
            return wanted;
        }
        if node.is_some_and(|m| m != n) {
            if !goes(count, &group, gone) {
                group.clear();
                return false;
            }
            count -= group.len() as u64;
            (gone, last) = (gone + group.len() as u64, group.last().copied());
            each.extend(group.drain(..).filter(|_| in_exec));
        }
        node = Some(n);
        group.push(id);
        true
    };
    let mut more = true;
    let mut corrupt = None;
    s.walk(cx.shared, Id::MIN, Id::MAX, false, |id, v| {
        more = match decode_entry(v) {
            Ok((n, _)) => visit(id, n),
            Err(e) => {
                corrupt = Some(e);
                false
            }
        };
        more
    })?;
    if let Some(e) = corrupt {
        return Err(e);
    }
    // The entry XADD just wrote is not in the engine yet: it comes last.
    if let Some((id, n)) = added
        && more
    {
        visit(id, n);
    }
    if !group.is_empty() && goes(count, &group, gone) {
        (gone, last) = (gone + group.len() as u64, group.last().copied());
        each.extend(group.drain(..).filter(|_| in_exec));
    }
    if let Some(last) = last {
        if in_exec {
            for id in &each {
                w.delete_raw(&s.entry_key(*id));
            }
        } else {
            let (lo, end) = store::elements_range(s.header.version);
            let hi = last.next().map_or(end, |n| s.entry_key(n));
            w.delete_range(&lo, &hi);
        }
    }
    s.header.count -= gone;
    Ok(gone)
}

const TOP_ITEM: &str =
    "ERR The ID specified in XADD is equal or smaller than the target stream top item";

/// The ID XADD gives a new entry: `*`, `ms-*` or an explicit one, above the stream's last.
fn new_id(arg: &[u8], last: Id, now: u64) -> Result<Id, String> {
    if arg == b"*" {
        if last == Id::MAX {
            return Err(EXHAUSTED.into());
        }
        return Ok(if now > last.ms {
            Id { ms: now, seq: 0 }
        } else {
            last.next().ok_or(EXHAUSTED)?
        });
    }
    if let Some(ms) = arg.strip_suffix(b"-*") {
        let ms = Id::parse(ms, 0).ok_or(super::stream::INVALID_ID)?.ms;
        return match ms.cmp(&last.ms) {
            std::cmp::Ordering::Greater => Ok(Id { ms, seq: 0 }),
            std::cmp::Ordering::Equal if last == Id::MIN => Ok(Id { ms, seq: 1 }),
            std::cmp::Ordering::Equal => Ok(Id {
                ms,
                seq: last.seq.checked_add(1).ok_or(TOP_ITEM)?,
            }),
            std::cmp::Ordering::Less => Err(TOP_ITEM.into()),
        };
    }
    let id = Id::parse(arg, 0).ok_or(super::stream::INVALID_ID)?;
    if id == Id::MIN {
        return Err("ERR The ID specified in XADD must be greater than 0-0".into());
    }
    if id <= last {
        return Err(TOP_ITEM.into());
    }
    Ok(id)
}

const EXHAUSTED: &str =
    "ERR The stream has exhausted the last possible ID, unable to add more items";

/// `XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT n]] *|id field value ...`.
pub(super) fn xadd(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let node_max = super::config::shape(cx.shared, "stream-node-max-entries");
    let mut nomkstream = false;
    let mut trim_by = None;
    let mut i = 2;
    while i < a.len() {
        match upper(a[i]).as_str() {
            "NOMKSTREAM" => {
                nomkstream = true;
                i += 1;
            }
            "MAXLEN" | "MINID" => {
                if trim_by.is_some() {
                    return Err(
                        "ERR syntax error, MAXLEN and MINID options at the same time \
                                are not compatible"
                            .into(),
                    );
                }
                let (t, next) = parse_trim(a, i, node_max)?;
                trim_by = Some(t);
                i = next;
            }
            _ => break,
        }
    }
    let fields = a.get(i + 1..).unwrap_or_default();
    if fields.is_empty() || fields.len() % 2 != 0 {
        return Err(super::wrong_args("xadd"));
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut w = Writes::default();
    if nomkstream && Stream::read(cx, &key)?.is_none() {
        cx.out.null();
        return Ok(());
    }
    let mut s = Stream::open(cx, &key, &mut w)?;
    let id = new_id(a[i], s.meta.last, cx.now)?;
    s.add(cx.shared, &mut w, id, fields);
    if let Some(t) = &trim_by {
        let node = s.meta.node;
        trim(cx, &mut s, &mut w, t, Some((id, node)))?;
    }
    s.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.bulk(id.text().as_bytes());
    Ok(())
}

/// `XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT n]`: how many entries went.
pub(super) fn xtrim(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let node_max = super::config::shape(cx.shared, "stream-node-max-entries");
    if !matches!(upper(a[2]).as_str(), "MAXLEN" | "MINID") {
        return Err(syntax());
    }
    let (t, next) = parse_trim(a, 2, node_max)?;
    if next != a.len() {
        return Err(syntax());
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(mut s) = Stream::read(cx, &key)? else {
        cx.out.int(0);
        return Ok(());
    };
    let mut w = Writes::default();
    let n = trim(cx, &mut s, &mut w, &t, None)?;
    if n > 0 {
        s.finish(&mut w);
        w.commit(cx.shared)?;
    }
    cx.out.int(n as i64);
    Ok(())
}

pub(super) fn xlen(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let n = Stream::read(cx, &key)?.map_or(0, |s| s.header.count);
    cx.out.int(n as i64);
    Ok(())
}

/// Answers one entry: `[id, [field, value, ...]]`.
pub(super) fn reply_entry(cx: &mut Ctx<'_, '_>, id: Id, stored: &[u8]) -> Outcome {
    let (_, fields) = decode_entry(stored)?;
    cx.out.array(2);
    cx.out.bulk(id.text().as_bytes());
    cx.out.array(fields.len());
    for f in fields {
        cx.out.bulk(f);
    }
    Ok(())
}

/// The entries between `lo` and `hi`, at most `count` (forward or backward).
pub(super) fn range(
    cx: &Ctx<'_, '_>,
    s: &Stream,
    lo: Id,
    hi: Id,
    count: Option<usize>,
    backward: bool,
) -> Result<Vec<(Id, Vec<u8>)>, String> {
    let mut out = Vec::new();
    if count == Some(0) {
        return Ok(out);
    }
    s.walk(cx.shared, lo, hi, backward, |id, v| {
        out.push((id, v.to_vec()));
        count.is_none_or(|c| out.len() < c)
    })?;
    Ok(out)
}

/// An end of an XRANGE interval: `-`, `+`, an ID (`ms` alone filled with `seq`), or `(id`
/// for the one after (before) it.
fn bound(arg: &[u8], start: bool) -> Result<Option<Id>, String> {
    let fill = if start { 0 } else { u64::MAX };
    match arg.strip_prefix(b"(") {
        Some(rest) => {
            let id = Id::parse(rest, fill).ok_or(super::stream::INVALID_ID)?;
            let moved = if start { id.next() } else { id.prev() };
            match moved {
                Some(id) => Ok(Some(id)),
                None if start => Err("ERR invalid start ID for the interval".into()),
                None => Err("ERR invalid end ID for the interval".into()),
            }
        }
        None => id_arg(arg, fill).map(Some),
    }
}

/// `XRANGE key start end [COUNT n]` and `XREVRANGE key end start [COUNT n]`.
pub(super) fn xrange(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let backward = a[0].eq_ignore_ascii_case(b"xrevrange");
    let (lo_arg, hi_arg) = if backward { (a[3], a[2]) } else { (a[2], a[3]) };
    let lo = bound(lo_arg, true)?;
    let hi = bound(hi_arg, false)?;
    let mut count = None;
    match a.len() {
        4 => {}
        6 if upper(a[4]) == "COUNT" => {
            count = Some(usize::try_from(int_arg(a[5])?.max(0)).unwrap_or(0));
        }
        _ => return Err(syntax()),
    }
    if count == Some(0) {
        // Redis answers COUNT 0 (or less) with a null array.
        cx.out.null_array();
        return Ok(());
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let entries = match (Stream::read(cx, &key)?, lo, hi) {
        (Some(s), Some(lo), Some(hi)) => range(cx, &s, lo, hi, count, backward)?,
        _ => Vec::new(),
    };
    cx.out.array(entries.len());
    for (id, v) in &entries {
        reply_entry(cx, *id, v)?;
    }
    Ok(())
}

/// `XDEL key id [id ...]`: how many entries went.
pub(super) fn xdel(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let ids: Vec<Id> = a[2..]
        .iter()
        .map(|x| strict_id(x))
        .collect::<Result<_, _>>()?;
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let Some(mut s) = Stream::read(cx, &key)? else {
        cx.out.int(0);
        return Ok(());
    };
    let mut w = Writes::default();
    let mut gone: Vec<Id> = Vec::new();
    for id in ids {
        if gone.contains(&id) {
            continue;
        }
        if super::stream::get_raw(cx.shared, &s.entry_key(id))?.is_some() {
            s.delete(&mut w, id);
            gone.push(id);
        }
    }
    if !gone.is_empty() {
        s.finish(&mut w);
        w.commit(cx.shared)?;
    }
    cx.out.int(gone.len() as i64);
    Ok(())
}

/// `XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]`.
pub(super) fn xsetid(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let id = strict_id(a[2])?;
    let (mut added, mut max_deleted) = (None, None);
    let mut i = 3;
    while i < a.len() {
        let value = a.get(i + 1).ok_or_else(syntax)?;
        match upper(a[i]).as_str() {
            "ENTRIESADDED" => {
                let n = int_arg(value)?;
                added = Some(u64::try_from(n).map_err(|_| "ERR entries_added must be positive")?);
            }
            "MAXDELETEDID" => max_deleted = Some(strict_id(value)?),
            _ => return Err(syntax()),
        }
        i += 2;
    }
    let key = cx.key(a[1]);
    let _g = cx.lock([key.as_slice()]);
    let mut s = Stream::read(cx, &key)?.ok_or("ERR no such key")?;
    if max_deleted.is_some_and(|m| id < m) {
        return Err(
            "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
                .into(),
        );
    }
    if added.is_some_and(|n| n < s.header.count) {
        return Err(
            "ERR The entries_added specified in XSETID is smaller than the target \
                    stream length"
                .into(),
        );
    }
    if s.header.count > 0
        && let Some((top, _)) = s.end(cx.shared, true)?
        && id < top
    {
        return Err(
            "ERR The ID specified in XSETID is smaller than the target stream top item".into(),
        );
    }
    s.meta.last = id;
    if let Some(n) = added {
        s.meta.added = n;
    }
    if let Some(m) = max_deleted {
        s.meta.max_deleted = m;
    }
    let mut w = Writes::default();
    s.finish(&mut w);
    w.commit(cx.shared)?;
    cx.out.ok();
    Ok(())
}

/// `BLOCK ms`: when a blocked read gives up (`None`: never).
pub(super) fn block_deadline(arg: &[u8]) -> Result<Option<Instant>, String> {
    let ms = super::parse_i64(arg).ok_or("ERR timeout is not an integer or out of range")?;
    if ms < 0 {
        return Err("ERR timeout is negative".into());
    }
    Ok((ms > 0).then(|| Instant::now() + Duration::from_millis(ms as u64)))
}

/// The options of XREAD and XREADGROUP before `STREAMS`: `COUNT`, `BLOCK`, and for a group
/// `GROUP g c` and `NOACK`.
pub(super) struct ReadArgs<'a> {
    pub count: Option<usize>,
    pub block: Option<Option<Instant>>,
    pub group: Option<(&'a [u8], &'a [u8])>,
    pub noack: bool,
    /// Where `STREAMS`' keys start, and how many.
    pub first_key: usize,
    pub keys: usize,
}

pub(super) fn read_args<'a>(a: &[&'a [u8]], grouped: bool) -> Result<ReadArgs<'a>, String> {
    let mut r = ReadArgs {
        count: None,
        block: None,
        group: None,
        noack: false,
        first_key: 0,
        keys: 0,
    };
    let mut i = 1;
    while i < a.len() {
        let more = |n: usize| a.get(i + n).copied().ok_or_else(syntax);
        match upper(a[i]).as_str() {
            "COUNT" => {
                // 0 or less: no limit, as Redis reads it.
                let n = int_arg(more(1)?)?;
                r.count = usize::try_from(n).ok().filter(|&n| n > 0);
                i += 2;
            }
            "BLOCK" => {
                r.block = Some(block_deadline(more(1)?)?);
                i += 2;
            }
            "GROUP" if grouped => {
                r.group = Some((more(1)?, more(2)?));
                i += 3;
            }
            "NOACK" if grouped => {
                r.noack = true;
                i += 1;
            }
            "STREAMS" => {
                let rest = a.len() - i - 1;
                if rest == 0 || !rest.is_multiple_of(2) {
                    return Err(
                        "ERR Unbalanced 'xread' list of streams: for each stream key \
                                an ID or '$' must be specified."
                            .replace("xread", if grouped { "xreadgroup" } else { "xread" }),
                    );
                }
                r.first_key = i + 1;
                r.keys = rest / 2;
                break;
            }
            _ => return Err(syntax()),
        }
    }
    if r.keys == 0 {
        return Err(syntax());
    }
    if grouped && r.group.is_none() {
        return Err("ERR Missing GROUP option for XREADGROUP".into());
    }
    Ok(r)
}

/// Parks a read that found nothing, to run again as `argv` (its `$` made IDs), unless it
/// runs inside `MULTI`/`EXEC`, where it answers null at once.
pub(super) fn park_read(
    cx: &mut Ctx<'_, '_>,
    keys: Vec<Vec<u8>>,
    deadline: Option<Instant>,
    argv: Vec<Vec<u8>>,
) {
    if exec_state::in_exec() {
        cx.out.null_array();
    } else {
        cx.after = After::Block(Block {
            keys,
            deadline,
            argv: Some(argv),
        });
    }
}

/// An entry read, as a stream read answers it: `None` for a pending entry since deleted.
pub(super) type Read = (Id, Option<Vec<u8>>);

/// Answers the streams read: a map of key to entries in RESP3, pairs in RESP2.
pub(super) fn reply_streams(cx: &mut Ctx<'_, '_>, found: &[(&[u8], Vec<Read>)]) -> Outcome {
    if cx.out.is_resp3() {
        cx.out.map(found.len());
    } else {
        cx.out.array(found.len());
    }
    for (name, entries) in found {
        if !cx.out.is_resp3() {
            cx.out.array(2);
        }
        cx.out.bulk(name);
        cx.out.array(entries.len());
        for (id, v) in entries {
            match v {
                Some(v) => reply_entry(cx, *id, v)?,
                None => {
                    // A pending entry deleted since it was delivered.
                    cx.out.array(2);
                    cx.out.bulk(id.text().as_bytes());
                    cx.out.null_array();
                }
            }
        }
    }
    Ok(())
}

/// `XREAD [COUNT n] [BLOCK ms] STREAMS key [key ...] id [id ...]`: each stream's entries
/// after its ID (`$`: its last); blocks until one has some when `BLOCK` says so.
pub(super) fn xread(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let r = read_args(a, false)?;
    let names = &a[r.first_key..r.first_key + r.keys];
    let id_args = &a[r.first_key + r.keys..];
    // The IDs are checked before any key is read.
    for arg in id_args {
        if *arg != b"$" {
            id_arg(arg, 0)?;
        }
    }
    let keys: Vec<Vec<u8>> = names.iter().map(|k| cx.key(k)).collect();
    let _g = cx.lock(keys.iter().map(Vec::as_slice));
    let mut resolved: Vec<Id> = Vec::with_capacity(keys.len());
    let mut found = Vec::new();
    for ((k, name), arg) in keys.iter().zip(names).zip(id_args) {
        // A parked read passes over a key that became another kind, as Redis does.
        let s = match Stream::read(cx, k) {
            Err(_) if cx.conn.retrying => None,
            s => s?,
        };
        let after = match (*arg, &s) {
            (b"$", Some(s)) => s.meta.last,
            (b"$", None) => Id::MIN,
            (arg, _) => id_arg(arg, 0)?,
        };
        resolved.push(after);
        let Some(s) = s else { continue };
        let Some(from) = after.next() else { continue };
        let entries = range(cx, &s, from, Id::MAX, r.count, false)?;
        if !entries.is_empty() {
            found.push((
                *name,
                entries.into_iter().map(|(i, v)| (i, Some(v))).collect(),
            ));
        }
    }
    if !found.is_empty() {
        return reply_streams(cx, &found);
    }
    match r.block {
        Some(deadline) => {
            let mut argv: Vec<Vec<u8>> = a[..r.first_key + r.keys]
                .iter()
                .map(|x| x.to_vec())
                .collect();
            argv.extend(resolved.iter().map(|id| id.text().into_bytes()));
            park_read(cx, keys, deadline, argv);
        }
        None => cx.out.null_array(),
    }
    Ok(())
}

//! How the server's keys and values lie in the engine, and the clock that expiry reads.
//!
//! Every engine key starts with one byte that says what it holds:
//! - `0..=15`: a key of the database of that number (`SELECT`), followed by the client's key.
//!   Its value is a one-byte tag, then for an expiring value the expiry time as eight
//!   big-endian bytes of Unix milliseconds, then the client's value. The tag names the kind
//!   of value (string, hash, set) and whether it expires: `2 * kind + expiring`. A
//!   collection's value is its header: its version (eight big-endian bytes) and its count of
//!   elements (eight more).
//! - `0x20`: the elements of collections, `[0x20][version: u64 BE][member]`, each with its
//!   value (a hash field's value; empty for a set member; a sorted set member's score as
//!   eight bytes, [`encode_score`]).
//!   A list's elements are keyed by their position, eight big-endian bytes, and its header
//!   holds, after the count, the position of its first element (pushes at the head take
//!   the positions below it, pushes at the tail those from `head + count` on).
//! - `0x21`: the score index of sorted sets, `[0x21][version: u64 BE][score: 8 bytes][member]`
//!   with an empty value, in score order. A collection's version is drawn
//!   once, when it is created, and never again for any key: deleting a collection deletes its
//!   header and the range of its version, and renaming it moves the header alone.
//! - `0x22`: a stream's records, `[0x22][version: u64 BE][tag][parts]`: its counters, consumer
//!   groups, consumers and pending entries (`commands/stream.rs`); its entries are elements
//!   under `0x20`, keyed by ID.
//! - `0xFE`: the expiry index, `[0xFE][time: u64 BE][database][key]` with an empty value: one
//!   entry for each time a key was given an expiry. The active-expiry cycle reads it from the
//!   start, so it meets due keys first. An entry whose key was since given another expiry, or
//!   none, or deleted, is stale: the cycle checks the key's own value and drops the entry.
//! - `0xFF`: the server's own records; `0xFF "layout"` holds the layout's version,
//!   `0xFF "versions"` the first collection version no server has handed out (eight
//!   big-endian bytes), reserved ahead in blocks, and `0xFF "databases"` (sixteen bytes, once
//!   `SWAPDB` has run) the prefix each database's keys are stored under, by number.
//!
//! The tags and the layout are written to disk: their numbers are frozen, never renumbered.
//! docs/format.md describes the layout beside the engine's formats.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use strata::{CompactionFilter, Db, FilterDecision, ReadOptions, WriteBatch, WriteOptions};

/// Databases a client may `SELECT`.
pub(crate) const DATABASES: u8 = 16;
const EXPIRY_INDEX: u8 = 0xFE;
pub(crate) const LAYOUT_KEY: &[u8] = b"\xFFlayout";
/// The layout this server writes; a directory written by an earlier server (no layout key,
/// raw keys and values) is converted when it is opened.
const LAYOUT_VERSION: &[u8] = b"1";

const ELEMENTS: u8 = 0x20;
const SCORES: u8 = 0x21;
const STREAM_RECORDS: u8 = 0x22;
const VERSIONS_KEY: &[u8] = b"\xFFversions";
pub(crate) const DATABASES_KEY: &[u8] = b"\xFFdatabases";
/// Versions reserved by one write of [`VERSIONS_KEY`].
const VERSION_BLOCK: u64 = 1 << 16;

/// The error of a command that meets a key of another kind than it works on.
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

/// What a key holds. Its number is written to disk, in the value's tag: never renumbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    String = 0,
    Hash = 1,
    Set = 2,
    ZSet = 3,
    List = 4,
    Stream = 5,
}

impl Kind {
    fn from_tag(tag: u8) -> Option<Kind> {
        match tag >> 1 {
            0 => Some(Kind::String),
            1 => Some(Kind::Hash),
            2 => Some(Kind::Set),
            3 => Some(Kind::ZSet),
            4 => Some(Kind::List),
            5 => Some(Kind::Stream),
            _ => None,
        }
    }

    /// The name TYPE answers.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::List => "list",
            Kind::Stream => "stream",
        }
    }
}

/// The time expiry is judged by: the system's clock, or one a test sets by hand.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicU64>>,
}

impl Clock {
    /// The system's clock.
    pub fn system() -> Self {
        Clock { manual: None }
    }

    /// A clock that reads `start_ms` until it is moved with [`Clock::set_ms`] or
    /// [`Clock::advance_ms`]; its clones share its time.
    pub fn manual(start_ms: u64) -> Self {
        Clock {
            manual: Some(Arc::new(AtomicU64::new(start_ms))),
        }
    }

    /// Unix time in milliseconds.
    pub fn now_ms(&self) -> u64 {
        match &self.manual {
            // SeqCst: a test that moves the clock expects every later read to see it.
            Some(t) => t.load(Ordering::SeqCst),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }

    /// Sets a manual clock (no effect on the system clock).
    pub fn set_ms(&self, ms: u64) {
        if let Some(t) = &self.manual {
            t.store(ms, Ordering::SeqCst);
        }
    }

    /// Moves a manual clock forward.
    pub fn advance_ms(&self, ms: u64) {
        if let Some(t) = &self.manual {
            t.fetch_add(ms, Ordering::SeqCst);
        }
    }
}

/// Appends the engine key of `key` in database `db` to `dst`.
pub(crate) fn data_key_into(db: u8, key: &[u8], dst: &mut Vec<u8>) {
    dst.reserve(key.len() + 1);
    dst.push(db);
    dst.extend_from_slice(key);
}

pub(crate) fn data_key(db: u8, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    data_key_into(db, key, &mut k);
    k
}

/// The engine-key range of database `db`: `[db]` up to `[db + 1]`.
pub(crate) fn db_range(db: u8) -> (Vec<u8>, Vec<u8>) {
    (vec![db], vec![db + 1])
}

/// The client's key of an engine key of a database.
pub(crate) fn user_key(engine_key: &[u8]) -> &[u8] {
    engine_key.get(1..).unwrap_or_default()
}

/// A stored value, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Value {
    pub kind: Kind,
    /// A string's bytes, or a collection's header ([`Header`]).
    pub data: Vec<u8>,
    /// Unix milliseconds at which the key expires.
    pub expires_at: Option<u64>,
}

impl Value {
    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at.is_none_or(|t| t > now_ms)
    }
}

/// Appends the stored form of string `data` expiring at `expires_at` to `dst`.
pub(crate) fn encode_value_into(data: &[u8], expires_at: Option<u64>, dst: &mut Vec<u8>) {
    encode_stored_into(Kind::String, data, expires_at, dst);
}

/// Appends the stored form of a value of `kind` to `dst`.
fn encode_stored_into(kind: Kind, data: &[u8], expires_at: Option<u64>, dst: &mut Vec<u8>) {
    let tag = (kind as u8) << 1;
    match expires_at {
        None => {
            dst.reserve(data.len() + 1);
            dst.push(tag);
        }
        Some(t) => {
            dst.reserve(data.len() + 9);
            dst.push(tag | 1);
            dst.extend_from_slice(&t.to_be_bytes());
        }
    }
    dst.extend_from_slice(data);
}

pub(crate) fn encode_value(data: &[u8], expires_at: Option<u64>) -> Vec<u8> {
    encode_stored(Kind::String, data, expires_at)
}

pub(crate) fn encode_stored(kind: Kind, data: &[u8], expires_at: Option<u64>) -> Vec<u8> {
    let mut v = Vec::new();
    encode_stored_into(kind, data, expires_at, &mut v);
    v
}

/// The kind, expiry time and data of a stored value of any kind; an error (a whole error
/// line) names what is wrong with bytes this server did not write.
pub(crate) fn parse_stored(raw: &[u8]) -> Result<(Kind, Option<u64>, &[u8]), String> {
    let (&tag, rest) = raw.split_first().ok_or("ERR corrupt stored value: empty")?;
    let kind = Kind::from_tag(tag)
        .ok_or_else(|| format!("ERR corrupt stored value: unknown tag {tag}"))?;
    let (expires_at, data) = if tag & 1 == 1 {
        let (t, data) = rest
            .split_first_chunk::<8>()
            .ok_or("ERR corrupt stored value: expiring value shorter than its header")?;
        (Some(u64::from_be_bytes(*t)), data)
    } else {
        (None, rest)
    };
    let header_bytes = match kind {
        Kind::List => HEADER_BYTES + 8,
        _ => HEADER_BYTES,
    };
    if kind != Kind::String && data.len() != header_bytes {
        return Err("ERR corrupt stored value: collection header of the wrong length".into());
    }
    Ok((kind, expires_at, data))
}

/// A stored value of any kind.
pub(crate) fn decode_value(raw: &[u8]) -> Result<Value, String> {
    let (kind, expires_at, data) = parse_stored(raw)?;
    Ok(Value {
        kind,
        data: data.to_vec(),
        expires_at,
    })
}

const HEADER_BYTES: usize = 16;

/// A collection's header: the version its elements are stored under and their count, and
/// for a list the position of its first element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub version: u64,
    pub count: u64,
    /// A list's first position (0 for the other kinds, which do not store it).
    pub head: u64,
}

impl Header {
    /// The header as a collection of `kind` stores it.
    pub(crate) fn encode(self, kind: Kind) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_BYTES + 8);
        b.extend_from_slice(&self.version.to_be_bytes());
        b.extend_from_slice(&self.count.to_be_bytes());
        if kind == Kind::List {
            b.extend_from_slice(&self.head.to_be_bytes());
        }
        b
    }

    /// The header in a collection's value data (its length checked by [`parse_stored`]).
    pub(crate) fn decode(data: &[u8]) -> Header {
        let word = |i: usize| {
            let mut w = [0; 8];
            w.copy_from_slice(data.get(i..i + 8).unwrap_or(&[0; 8]));
            u64::from_be_bytes(w)
        };
        Header {
            version: word(0),
            count: word(8),
            head: word(16),
        }
    }
}

/// The engine key of `member` of the collection of `version`.
pub(crate) fn element_key(version: u64, member: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(member.len() + 9);
    k.push(ELEMENTS);
    k.extend_from_slice(&version.to_be_bytes());
    k.extend_from_slice(member);
    k
}

/// The member an element key names.
pub(crate) fn element_member(key: &[u8]) -> &[u8] {
    key.get(9..).unwrap_or_default()
}

/// The engine-key range of every element of the collection of `version`.
pub(crate) fn elements_range(version: u64) -> (Vec<u8>, Vec<u8>) {
    let lo = element_key(version, b"");
    let hi = match version.checked_add(1) {
        Some(v) => element_key(v, b""),
        None => vec![ELEMENTS + 1],
    };
    (lo, hi)
}

/// The engine-key ranges of every collection's elements and score indexes.
pub(crate) fn all_elements_ranges() -> [(Vec<u8>, Vec<u8>); 3] {
    [
        (vec![ELEMENTS], vec![ELEMENTS + 1]),
        (vec![SCORES], vec![SCORES + 1]),
        (vec![STREAM_RECORDS], vec![STREAM_RECORDS + 1]),
    ]
}

/// The engine-key ranges of a collection of `kind` and `version`: its elements, and for a
/// sorted set its score index.
pub(crate) fn collection_ranges(kind: Kind, version: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut ranges = vec![elements_range(version)];
    if kind == Kind::ZSet {
        ranges.push(scores_range(version));
    }
    if kind == Kind::Stream {
        let lo = stream_record_prefix(version);
        let hi = prefix_end(&lo);
        ranges.push((lo, hi));
    }
    ranges
}

/// Where the records of the stream of `version` start: `[0x22][version]`.
pub(crate) fn stream_record_prefix(version: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(32);
    k.push(STREAM_RECORDS);
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// The first key after every key that starts with `prefix`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xFF; prefix.len() + 1]
}

/// A score as eight bytes that sort as the scores do (negative zero as zero).
pub(crate) fn encode_score(score: f64) -> [u8; 8] {
    let bits = if score == 0.0 { 0 } else { score.to_bits() };
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    };
    ordered.to_be_bytes()
}

/// The score of eight bytes from [`encode_score`].
pub(crate) fn decode_score(b: &[u8]) -> Option<f64> {
    let ordered = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
    let bits = if ordered >> 63 == 1 {
        ordered & !(1 << 63)
    } else {
        !ordered
    };
    Some(f64::from_bits(bits))
}

/// The engine key of `member` with `score` in the score index of sorted set `version`.
pub(crate) fn score_key(version: u64, score: f64, member: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(member.len() + 17);
    k.push(SCORES);
    k.extend_from_slice(&version.to_be_bytes());
    k.extend_from_slice(&encode_score(score));
    k.extend_from_slice(member);
    k
}

/// The score and member a score-index key names.
pub(crate) fn parse_score_key(key: &[u8]) -> Option<(f64, &[u8])> {
    Some((decode_score(key.get(9..17)?)?, key.get(17..)?))
}

/// The engine-key range of the score index of sorted set `version`.
pub(crate) fn scores_range(version: u64) -> (Vec<u8>, Vec<u8>) {
    let (mut lo, mut hi) = elements_range(version);
    lo[0] = SCORES;
    hi[0] = if hi.len() == 1 { SCORES + 1 } else { SCORES };
    (lo, hi)
}

/// Hands out collection versions, each once over the directory's life: the next is kept in
/// memory, and the directory records a bound above every version handed out, reserved a
/// block at a time.
pub(crate) struct Versions {
    /// The next version and the bound the directory records.
    state: std::sync::Mutex<(u64, u64)>,
}

impl Versions {
    /// Starts at the bound the directory records (versions below it may have been used).
    pub(crate) fn open(db: &Db) -> Result<Versions, String> {
        let bound = match db.get(VERSIONS_KEY).map_err(|e| e.to_string())? {
            None => 1,
            Some(v) => u64::from_be_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| "the data directory's collection version record is corrupt")?,
            ),
        };
        Ok(Versions {
            state: std::sync::Mutex::new((bound, bound)),
        })
    }

    /// Reads the bound again: a replica promoted to primary hands out versions from where
    /// its primary left them.
    pub(crate) fn reload(&self, db: &Db) -> Result<(), String> {
        let fresh = Versions::open(db)?;
        let bound = fresh.state.lock().unwrap_or_else(|e| e.into_inner()).1;
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = (bound, bound);
        Ok(())
    }

    /// A version no collection has had.
    pub(crate) fn next(&self, db: &Db) -> Result<u64, String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (next, bound) = *state;
        if next >= bound {
            let bound = next.saturating_add(VERSION_BLOCK);
            let mut batch = WriteBatch::new();
            batch.put(VERSIONS_KEY, &bound.to_be_bytes());
            db.write(batch, WriteOptions { sync: true })
                .map_err(|e| format!("ERR {e}"))?;
            state.1 = bound;
        }
        state.0 = next + 1;
        Ok(next)
    }
}

/// Which prefix each database's keys are stored under: database `n`'s keys begin with byte
/// `prefix[n]`. `SWAPDB` exchanges two entries, so two databases change places without a key
/// moving. A directory that never swapped has none recorded: each database under its own
/// number.
pub(crate) struct Databases {
    prefix: [AtomicU8; DATABASES as usize],
    /// Some database is stored under another number than its own.
    moved: AtomicBool,
    /// How many SWAPDBs each database took part in since the server started (WATCH asks).
    swaps: [AtomicU64; DATABASES as usize],
}

impl Databases {
    pub(crate) fn open(db: &Db) -> Result<Databases, String> {
        let mut prefix: [u8; DATABASES as usize] = std::array::from_fn(|n| n as u8);
        if let Some(v) = db.get(DATABASES_KEY).map_err(|e| e.to_string())? {
            let mut sorted = v.clone();
            sorted.sort_unstable();
            if sorted != prefix {
                return Err("the data directory's database map is corrupt".into());
            }
            prefix.copy_from_slice(&v);
        }
        Ok(Databases {
            moved: AtomicBool::new(prefix.iter().enumerate().any(|(n, &p)| p != n as u8)),
            prefix: prefix.map(AtomicU8::new),
            swaps: Default::default(),
        })
    }

    /// The prefix database `n`'s keys are stored under.
    pub(crate) fn prefix(&self, n: u8) -> u8 {
        // Relaxed: the map changes only while no other command runs (SWAPDB runs alone).
        self.prefix
            .get(usize::from(n))
            .map_or(n, |p| p.load(Ordering::Relaxed))
    }

    /// The database whose keys are stored under `prefix`.
    pub(crate) fn number(&self, prefix: u8) -> u8 {
        (0..DATABASES)
            .find(|&n| self.prefix(n) == prefix)
            .unwrap_or(prefix)
    }

    /// The map after exchanging databases `a` and `b`, to record (under [`DATABASES_KEY`])
    /// and then [`Databases::set`].
    pub(crate) fn swapped(&self, a: u8, b: u8) -> [u8; DATABASES as usize] {
        let mut map: [u8; DATABASES as usize] = std::array::from_fn(|n| self.prefix(n as u8));
        map.swap(usize::from(a), usize::from(b));
        map
    }

    /// Makes `map`, in which databases `a` and `b` changed places, the map in use. Requires:
    /// no other command runs.
    pub(crate) fn set(&self, map: [u8; DATABASES as usize], a: u8, b: u8) {
        for (slot, p) in self.prefix.iter().zip(map) {
            slot.store(p, Ordering::Relaxed);
        }
        let moved = map.iter().enumerate().any(|(n, &p)| p != n as u8);
        self.moved.store(moved, Ordering::Relaxed);
        for n in [a, b] {
            self.swaps[usize::from(n)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Goes back to the map the directory records (a transaction that swapped failed to
    /// write). Requires: no other command runs.
    pub(crate) fn reload(&self, db: &Db) -> Result<(), String> {
        let recorded = Databases::open(db)?;
        for (slot, p) in self.prefix.iter().zip(&recorded.prefix) {
            slot.store(p.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let moved = recorded.moved.load(Ordering::Relaxed);
        self.moved.store(moved, Ordering::Relaxed);
        Ok(())
    }

    /// How many SWAPDBs database `n` took part in since the server started.
    pub(crate) fn swaps(&self, n: u8) -> u64 {
        self.swaps
            .get(usize::from(n))
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    /// `key` (a database's number, then the client's key) as it is stored.
    pub(crate) fn stored<'k>(&self, key: &'k [u8]) -> std::borrow::Cow<'k, [u8]> {
        match key.split_first() {
            Some((&n, rest)) if self.moved.load(Ordering::Relaxed) => {
                std::borrow::Cow::Owned(data_key(self.prefix(n), rest))
            }
            _ => std::borrow::Cow::Borrowed(key),
        }
    }
}

/// The index entry that makes the active-expiry cycle look at `engine_key` at `at_ms`.
pub(crate) fn index_key(at_ms: u64, engine_key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(engine_key.len() + 9);
    k.push(EXPIRY_INDEX);
    k.extend_from_slice(&at_ms.to_be_bytes());
    k.extend_from_slice(engine_key);
    k
}

/// The time and engine key of an index entry.
pub(crate) fn parse_index_key(k: &[u8]) -> Option<(u64, &[u8])> {
    let (&tag, rest) = k.split_first()?;
    if tag != EXPIRY_INDEX {
        return None;
    }
    let (t, key) = rest.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*t), key))
}

/// The index entries due at `now_ms`: from the start of the index up to `now_ms` inclusive.
pub(crate) fn due_index_range(now_ms: u64) -> (Vec<u8>, Vec<u8>) {
    let mut end = vec![EXPIRY_INDEX];
    end.extend_from_slice(&now_ms.saturating_add(1).to_be_bytes());
    (vec![EXPIRY_INDEX], end)
}

/// The whole expiry index.
pub(crate) fn index_range() -> (Vec<u8>, Vec<u8>) {
    (vec![EXPIRY_INDEX], vec![EXPIRY_INDEX + 1])
}

/// Removes expired values when compaction rewrites them, so that they leave the disk without
/// a read or the active-expiry cycle having to find them; and expiry index entries a minute
/// past due, which the cycle had its chance at (the keys they name are expired, invisible and
/// removed by this filter in their turn).
pub(crate) struct ExpiryFilter {
    pub clock: Clock,
    /// Set once the directory holds this server's layout: until then keys and values are a
    /// directory's of the earlier layout, which this filter must not judge.
    pub enabled: Arc<std::sync::atomic::AtomicBool>,
}

/// How long past due an index entry is left for the active-expiry cycle.
const INDEX_GRACE_MS: u64 = 60_000;

impl CompactionFilter for ExpiryFilter {
    fn filter(&self, _level: usize, key: &[u8], value: &[u8]) -> FilterDecision {
        // Acquire: pairs with the release that follows the layout's conversion.
        if !self.enabled.load(Ordering::Acquire) {
            return FilterDecision::Keep;
        }
        let now = self.clock.now_ms();
        match key.first() {
            // A collection's header stays for the active-expiry cycle, which removes its
            // elements with it.
            Some(&b) if b < DATABASES => match parse_stored(value) {
                Ok((Kind::String, Some(t), _)) if t <= now => FilterDecision::Remove,
                _ => FilterDecision::Keep,
            },
            Some(&EXPIRY_INDEX) => match parse_index_key(key) {
                Some((t, _)) if t.saturating_add(INDEX_GRACE_MS) <= now => FilterDecision::Remove,
                _ => FilterDecision::Keep,
            },
            _ => FilterDecision::Keep,
        }
    }

    fn name(&self) -> &str {
        "strata-server-expiry"
    }
}

/// Makes sure the database holds this server's layout: records it in a new database, and
/// converts one written by an earlier server (raw keys and values, one keyspace) into
/// database 0, in one atomic batch.
pub(crate) fn prepare_layout(db: &Db) -> Result<(), String> {
    let e = |e: strata::Error| e.to_string();
    match db.get(LAYOUT_KEY).map_err(e)? {
        Some(v) if v == LAYOUT_VERSION => return Ok(()),
        Some(v) => {
            return Err(format!(
                "the data directory holds server layout {:?}, which this server does not know",
                String::from_utf8_lossy(&v)
            ));
        }
        None => {}
    }
    let mut batch = WriteBatch::new();
    let snapshot = db.snapshot();
    let read = ReadOptions {
        snapshot: Some(snapshot),
        ..ReadOptions::default()
    };
    for entry in db.scan_with(.., read, false).map_err(e)? {
        let (k, v) = entry.map_err(e)?;
        batch.delete(&k);
        batch.put(&data_key(0, &k), &encode_value(&v, None));
    }
    batch.put(LAYOUT_KEY, LAYOUT_VERSION);
    db.write(batch, WriteOptions { sync: true }).map_err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_bad_bytes_are_errors() {
        for (data, t) in [(&b""[..], None), (b"v", Some(7u64)), (b"", Some(u64::MAX))] {
            assert_eq!(
                decode_value(&encode_value(data, t)),
                Ok(Value {
                    kind: Kind::String,
                    data: data.to_vec(),
                    expires_at: t
                })
            );
        }
        assert!(parse_stored(b"").is_err());
        // An expiring string (tag 1) shorter than its expiry time.
        assert!(parse_stored(&[1, 0, 0]).is_err());
        assert!(parse_stored(&[9, 1]).is_err());
        // A hash (tag 2) whose header is cut short.
        assert!(parse_stored(&[2, 0, 0, 0]).is_err());
        let header = Header {
            version: 7,
            count: u64::MAX,
            head: 0,
        };
        let stored = encode_stored(Kind::Set, &header.encode(Kind::Set), Some(5));
        assert_eq!(stored[0], 5, "a set's tag, expiring");
        let (kind, t, data) = parse_stored(&stored).unwrap();
        assert_eq!(
            (kind, t, Header::decode(data)),
            (Kind::Set, Some(5), header)
        );
    }

    #[test]
    fn index_keys_sort_by_time_and_parse_back() {
        let a = index_key(5, &data_key(3, b"zzz"));
        let b = index_key(6, &data_key(0, b"a"));
        assert!(a < b);
        assert_eq!(parse_index_key(&a), Some((5, &[3, b'z', b'z', b'z'][..])));
        let (start, end) = due_index_range(5);
        assert!(start.as_slice() <= a.as_slice() && a.as_slice() < end.as_slice());
        assert!(b.as_slice() >= end.as_slice());
    }
}

//! How the server's keys and values lie in the engine, and the clock that expiry reads.
//!
//! Every engine key starts with one byte that says what it holds:
//! - `0..=15`: a key of the database of that number (`SELECT`), followed by the client's key.
//!   Its value is a one-byte tag, then for an expiring value the expiry time as eight
//!   big-endian bytes of Unix milliseconds, then the client's value.
//! - `0xFE`: the expiry index, `[0xFE][time: u64 BE][database][key]` with an empty value: one
//!   entry for each time a key was given an expiry. The active-expiry cycle reads it from the
//!   start, so it meets due keys first. An entry whose key was since given another expiry, or
//!   none, or deleted, is stale: the cycle checks the key's own value and drops the entry.
//! - `0xFF`: the server's own records; `0xFF "layout"` holds the layout's version.
//!
//! The tags and the layout are written to disk: their numbers are frozen, never renumbered.
//! docs/format.md describes the layout beside the engine's formats.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use strata::{CompactionFilter, Db, FilterDecision, ReadOptions, WriteBatch, WriteOptions};

/// Databases a client may `SELECT`.
pub(crate) const DATABASES: u8 = 16;
const EXPIRY_INDEX: u8 = 0xFE;
const LAYOUT_KEY: &[u8] = b"\xFFlayout";
/// The layout this server writes; a directory written by an earlier server (no layout key,
/// raw keys and values) is converted when it is opened.
const LAYOUT_VERSION: &[u8] = b"1";

/// Value tags. Written to disk: never renumbered.
const TAG_STRING: u8 = 0;
const TAG_STRING_EXPIRING: u8 = 1;

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
    pub data: Vec<u8>,
    /// Unix milliseconds at which the key expires.
    pub expires_at: Option<u64>,
}

impl Value {
    pub(crate) fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at.is_none_or(|t| t > now_ms)
    }
}

/// Appends the stored form of `data` expiring at `expires_at` to `dst`.
pub(crate) fn encode_value_into(data: &[u8], expires_at: Option<u64>, dst: &mut Vec<u8>) {
    match expires_at {
        None => {
            dst.reserve(data.len() + 1);
            dst.push(TAG_STRING);
        }
        Some(t) => {
            dst.reserve(data.len() + 9);
            dst.push(TAG_STRING_EXPIRING);
            dst.extend_from_slice(&t.to_be_bytes());
        }
    }
    dst.extend_from_slice(data);
}

pub(crate) fn encode_value(data: &[u8], expires_at: Option<u64>) -> Vec<u8> {
    let mut v = Vec::new();
    encode_value_into(data, expires_at, &mut v);
    v
}

/// The expiry time and data of a stored value; an error names what is wrong with bytes this
/// server did not write.
pub(crate) fn parse_value(raw: &[u8]) -> Result<(Option<u64>, &[u8]), String> {
    match raw.split_first() {
        Some((&TAG_STRING, data)) => Ok((None, data)),
        Some((&TAG_STRING_EXPIRING, rest)) => {
            let (t, data) = rest
                .split_first_chunk::<8>()
                .ok_or("corrupt stored value: expiring value shorter than its header")?;
            Ok((Some(u64::from_be_bytes(*t)), data))
        }
        Some((tag, _)) => Err(format!("corrupt stored value: unknown tag {tag}")),
        None => Err("corrupt stored value: empty".into()),
    }
}

pub(crate) fn decode_value(raw: &[u8]) -> Result<Value, String> {
    let (expires_at, data) = parse_value(raw)?;
    Ok(Value {
        data: data.to_vec(),
        expires_at,
    })
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
            Some(&b) if b < DATABASES => match parse_value(value) {
                Ok((Some(t), _)) if t <= now => FilterDecision::Remove,
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
                    data: data.to_vec(),
                    expires_at: t
                })
            );
        }
        assert!(parse_value(b"").is_err());
        assert!(parse_value(&[TAG_STRING_EXPIRING, 0, 0]).is_err());
        assert!(parse_value(&[9, 1]).is_err());
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

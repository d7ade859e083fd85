//! A stream as the engine holds it, beside the other collections: a header under its key
//! (version and length), an engine entry per stream entry under the version, keyed by its
//! ID, and the stream's records (its counters, consumer groups, consumers and pending
//! entries) under the version too (`crate::store` lays them out). Every read walks the engine
//! from a seek, so entries and pending lists may be larger than memory, and deleting a stream
//! deletes its header and its version's ranges, whatever its size.
//!
//! An entry's value is its node number (eight bytes) and its fields and values. Redis packs
//! entries into nodes of `stream-node-max-entries`, and trims with `~` only whole nodes; the
//! node number keeps that grouping, so that `MAXLEN ~` leaves what Redis leaves.

use std::ops::Bound;

use super::collection::walk_range;
use super::keyspace::{Writes, read_raw_locked};
use super::{Ctx, engine, exec_state};
use crate::shared::Shared;
use crate::store::{self, Header, Kind};

/// A stream entry's ID: milliseconds and a sequence number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Id {
    pub ms: u64,
    pub seq: u64,
}

impl Id {
    pub(crate) const MIN: Id = Id { ms: 0, seq: 0 };
    pub(crate) const MAX: Id = Id {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub(crate) fn bytes(self) -> [u8; 16] {
        let mut b = [0; 16];
        b[..8].copy_from_slice(&self.ms.to_be_bytes());
        b[8..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    pub(crate) fn from_bytes(b: &[u8]) -> Option<Id> {
        let ms = u64::from_be_bytes(b.get(..8)?.try_into().ok()?);
        let seq = u64::from_be_bytes(b.get(8..16)?.try_into().ok()?);
        Some(Id { ms, seq })
    }

    /// The ID right after this one, if any.
    pub(crate) fn next(self) -> Option<Id> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(Id { seq, ..self }),
            None => Some(Id {
                ms: self.ms.checked_add(1)?,
                seq: 0,
            }),
        }
    }

    /// The ID right before this one, if any.
    pub(crate) fn prev(self) -> Option<Id> {
        match self.seq.checked_sub(1) {
            Some(seq) => Some(Id { seq, ..self }),
            None => Some(Id {
                ms: self.ms.checked_sub(1)?,
                seq: u64::MAX,
            }),
        }
    }

    pub(crate) fn text(self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }

    /// `ms-seq`, or `ms` alone with `seq` for its sequence number; `None` when malformed.
    pub(crate) fn parse(arg: &[u8], seq: u64) -> Option<Id> {
        let s = std::str::from_utf8(arg).ok()?;
        let number = |t: &str| -> Option<u64> {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            t.parse().ok()
        };
        match s.split_once('-') {
            Some((ms, sq)) => Some(Id {
                ms: number(ms)?,
                seq: number(sq)?,
            }),
            None => Some(Id {
                ms: number(s)?,
                seq,
            }),
        }
    }
}

pub(crate) const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// An ID argument: `-` and `+` for the ends, `ms` alone taking `seq`.
pub(crate) fn id_arg(arg: &[u8], seq: u64) -> Result<Id, String> {
    match arg {
        b"-" => Ok(Id::MIN),
        b"+" => Ok(Id::MAX),
        _ => Id::parse(arg, seq).ok_or_else(|| INVALID_ID.into()),
    }
}

/// An ID argument of a command that names entries (XDEL, XACK, XSETID): `ms` or `ms-seq`,
/// not `-` or `+`.
pub(crate) fn strict_id(arg: &[u8]) -> Result<Id, String> {
    Id::parse(arg, 0).ok_or_else(|| INVALID_ID.into())
}

/// A stream's counters: its last ID, the largest ID deleted, entries ever added, and the
/// node its next entry goes to (with how many entries that node took).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    pub last: Id,
    pub max_deleted: Id,
    pub added: u64,
    pub node: u64,
    pub node_entries: u64,
}

impl Meta {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(56);
        b.extend_from_slice(&self.last.bytes());
        b.extend_from_slice(&self.max_deleted.bytes());
        for n in [self.added, self.node, self.node_entries] {
            b.extend_from_slice(&n.to_be_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Option<Meta> {
        let n = |i: usize| Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?));
        Some(Meta {
            last: Id::from_bytes(b.get(..16)?)?,
            max_deleted: Id::from_bytes(b.get(16..32)?)?,
            added: n(32)?,
            node: n(40)?,
            node_entries: n(48)?,
        })
    }
}

/// A consumer group: the last ID delivered, entries read (`None`: unknown), and how many
/// entries are pending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Group {
    pub last: Id,
    pub read: Option<u64>,
    pub pending: u64,
}

impl Group {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(33);
        b.extend_from_slice(&self.last.bytes());
        b.push(u8::from(self.read.is_some()));
        b.extend_from_slice(&self.read.unwrap_or(0).to_be_bytes());
        b.extend_from_slice(&self.pending.to_be_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Group> {
        let n = |i: usize| Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?));
        Some(Group {
            last: Id::from_bytes(b.get(..16)?)?,
            read: (*b.get(16)? == 1).then_some(n(17)?),
            pending: n(25)?,
        })
    }
}

/// A consumer: when it was last seen (Unix ms) and how many entries it holds pending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Consumer {
    pub seen: u64,
    pub pending: u64,
}

impl Consumer {
    pub(crate) fn encode(&self) -> Vec<u8> {
        [self.seen.to_be_bytes(), self.pending.to_be_bytes()].concat()
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Consumer> {
        let n = |i: usize| Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?));
        Some(Consumer {
            seen: n(0)?,
            pending: n(8)?,
        })
    }
}

/// A pending entry: who holds it, when it was last delivered (Unix ms), how many times.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    pub consumer: Vec<u8>,
    pub delivered: u64,
    pub count: u64,
}

impl Pending {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + self.consumer.len());
        b.extend_from_slice(&self.delivered.to_be_bytes());
        b.extend_from_slice(&self.count.to_be_bytes());
        b.extend_from_slice(&self.consumer);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Pending> {
        let n = |i: usize| Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?));
        Some(Pending {
            delivered: n(0)?,
            count: n(8)?,
            consumer: b.get(16..)?.to_vec(),
        })
    }
}

/// An entry's stored value: its node, then each field and value with its length.
pub(crate) fn encode_entry(node: u64, fields: &[&[u8]]) -> Vec<u8> {
    let len: usize = fields.iter().map(|f| f.len() + 4).sum();
    let mut b = Vec::with_capacity(len + 8);
    b.extend_from_slice(&node.to_be_bytes());
    for f in fields {
        b.extend_from_slice(&(f.len() as u32).to_be_bytes());
        b.extend_from_slice(f);
    }
    b
}

/// The node and the fields and values of an entry's stored value.
pub(crate) fn decode_entry(b: &[u8]) -> Result<(u64, Vec<&[u8]>), String> {
    let corrupt = || "ERR corrupt stream entry".to_string();
    let node = u64::from_be_bytes(
        b.get(..8)
            .ok_or_else(corrupt)?
            .try_into()
            .map_err(|_| corrupt())?,
    );
    let mut rest = b.get(8..).unwrap_or_default();
    let mut fields = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(corrupt)?;
        let len = u32::from_be_bytes(*len) as usize;
        fields.push(tail.get(..len).ok_or_else(corrupt)?);
        rest = tail.get(len..).unwrap_or_default();
    }
    Ok((node, fields))
}

/// The engine key of a record of the stream of `version`: `tag` then `parts`, each but the
/// last preceded by its length.
pub(crate) fn record_key(version: u64, tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = store::stream_record_prefix(version);
    k.push(tag);
    for (i, p) in parts.iter().enumerate() {
        if i + 1 < parts.len() {
            k.extend_from_slice(&(p.len() as u32).to_be_bytes());
        }
        k.extend_from_slice(p);
    }
    k
}

/// The tags of a stream's records.
pub(crate) const META: u8 = b'M';
pub(crate) const GROUP: u8 = b'G';
pub(crate) const CONSUMER: u8 = b'C';
/// A group's pending entries: `P [group] [id]`, valued [`Pending`].
pub(crate) const PENDING: u8 = b'P';
/// Each consumer's pending entries: `Q [group] [consumer] [id]`, empty.
pub(crate) const OWNED: u8 = b'Q';

/// A stream, as a command finds and changes it.
pub(crate) struct Stream {
    pub key: Vec<u8>,
    pub header: Header,
    pub expires_at: Option<u64>,
    pub meta: Meta,
}

/// Reads an engine key of the server's own, through the `EXEC` being run.
pub(crate) fn get_raw(shared: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    if let Some(v) = exec_state::pending(key) {
        return Ok(v);
    }
    shared.db.get(key).map_err(engine)
}

impl Stream {
    /// The live stream under engine key `key`, or `None`; another kind is WRONGTYPE.
    /// Requires: the caller holds the key's stripe lock.
    pub(crate) fn read(cx: &Ctx<'_, '_>, key: &[u8]) -> Result<Option<Stream>, String> {
        let Some(v) = cx.get_any_locked(key)? else {
            return Ok(None);
        };
        if v.kind != Kind::Stream {
            return Err(store::WRONGTYPE.into());
        }
        let header = Header::decode(&v.data);
        let meta = get_raw(cx.shared, &record_key(header.version, META, &[]))?
            .and_then(|b| Meta::decode(&b))
            .ok_or("ERR corrupt stream: its counters are missing")?;
        Ok(Some(Stream {
            key: key.to_vec(),
            header,
            expires_at: v.expires_at,
            meta,
        }))
    }

    /// As [`Stream::read`], but an absent key becomes a new, empty stream (a value left
    /// past its expiry goes in the same batch).
    pub(crate) fn open(cx: &Ctx<'_, '_>, key: &[u8], w: &mut Writes) -> Result<Stream, String> {
        if let Some(s) = Self::read(cx, key)? {
            return Ok(s);
        }
        if let Some(raw) = read_raw_locked(cx.shared, key)? {
            w.delete_value(key, &store::decode_value(&raw)?);
        }
        Ok(Stream {
            key: key.to_vec(),
            header: Header {
                version: cx.shared.versions.next(&cx.shared.db)?,
                count: 0,
                head: 0,
            },
            expires_at: None,
            meta: Meta::default(),
        })
    }

    pub(crate) fn entry_key(&self, id: Id) -> Vec<u8> {
        store::element_key(self.header.version, &id.bytes())
    }

    pub(crate) fn record(&self, tag: u8, parts: &[&[u8]]) -> Vec<u8> {
        record_key(self.header.version, tag, parts)
    }

    /// Writes the header and the counters: a stream stays when its last entry goes.
    pub(crate) fn finish(&self, w: &mut Writes) {
        w.put_value(
            &self.key,
            Kind::Stream,
            &self.header.encode(Kind::Stream),
            self.expires_at,
        );
        w.put_raw(&self.record(META, &[]), &self.meta.encode());
    }

    /// Appends an entry (the caller checked that `id` is above the last).
    pub(crate) fn add(&mut self, shared: &Shared, w: &mut Writes, id: Id, fields: &[&[u8]]) {
        let per_node = super::config::shape(shared, "stream-node-max-entries").max(1) as u64;
        if self.meta.node_entries >= per_node || self.meta.added == 0 {
            self.meta.node += u64::from(self.meta.added != 0);
            self.meta.node_entries = 0;
        }
        self.meta.node_entries += 1;
        w.put_raw(&self.entry_key(id), &encode_entry(self.meta.node, fields));
        self.header.count += 1;
        self.meta.added += 1;
        self.meta.last = id;
    }

    /// Deletes entry `id` (which the caller found).
    pub(crate) fn delete(&mut self, w: &mut Writes, id: Id) {
        w.delete_raw(&self.entry_key(id));
        self.header.count = self.header.count.saturating_sub(1);
        self.meta.max_deleted = self.meta.max_deleted.max(id);
    }

    /// Calls `each` with the entries between `lo` and `hi` (IDs, inclusive), forward or
    /// backward, until it returns false.
    pub(crate) fn walk(
        &self,
        shared: &Shared,
        lo: Id,
        hi: Id,
        backward: bool,
        mut each: impl FnMut(Id, &[u8]) -> bool,
    ) -> Result<(), String> {
        if lo > hi {
            return Ok(());
        }
        let range = (
            Bound::Included(self.entry_key(lo)),
            Bound::Included(self.entry_key(hi)),
        );
        let mut corrupt = false;
        walk_range(shared, range, backward, |k, v| {
            match Id::from_bytes(store::element_member(k)) {
                Some(id) => each(id, v),
                None => {
                    corrupt = true;
                    false
                }
            }
        })?;
        if corrupt {
            return Err("ERR corrupt stream entry key".into());
        }
        Ok(())
    }

    /// The first (or last) entry, with its stored value.
    pub(crate) fn end(&self, shared: &Shared, last: bool) -> Result<Option<(Id, Vec<u8>)>, String> {
        let mut found = None;
        self.walk(shared, Id::MIN, Id::MAX, last, |id, v| {
            found = Some((id, v.to_vec()));
            false
        })?;
        Ok(found)
    }

    /// Where the records under `tag` and `parts` start: every part length-prefixed.
    fn records_prefix(&self, tag: u8, parts: &[&[u8]]) -> Vec<u8> {
        let mut prefix = self.record(tag, parts);
        if let Some(last) = parts.last() {
            prefix.truncate(prefix.len() - last.len());
            prefix.extend_from_slice(&(last.len() as u32).to_be_bytes());
            prefix.extend_from_slice(last);
        }
        prefix
    }

    /// The key's rest of the last record under `tag` and `parts`.
    pub(crate) fn last_record(
        &self,
        shared: &Shared,
        tag: u8,
        parts: &[&[u8]],
    ) -> Result<Option<Vec<u8>>, String> {
        let prefix = self.records_prefix(tag, parts);
        let hi = store::prefix_end(&prefix);
        let n = prefix.len();
        let mut found = None;
        let range = (Bound::Included(prefix), Bound::Excluded(hi));
        walk_range(shared, range, true, |k, _| {
            found = Some(k.get(n..).unwrap_or_default().to_vec());
            false
        })?;
        Ok(found)
    }

    /// The records under `tag` and `parts` (a prefix), with their keys' rest and values.
    pub(crate) fn records(
        &self,
        shared: &Shared,
        tag: u8,
        parts: &[&[u8]],
        after: Option<&[u8]>,
        mut each: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), String> {
        let prefix = self.records_prefix(tag, parts);
        let hi = store::prefix_end(&prefix);
        let lo = match after {
            Some(rest) => Bound::Excluded([prefix.as_slice(), rest].concat()),
            None => Bound::Included(prefix.clone()),
        };
        let n = prefix.len();
        walk_range(shared, (lo, Bound::Excluded(hi)), false, |k, v| {
            each(k.get(n..).unwrap_or_default(), v)
        })
    }
}

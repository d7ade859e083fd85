//! Atomic write batches and their encoding, which is also the WAL record payload:
//! `first_seq: u64 LE | count: u32 LE | op*`, where each op is
//! `kind: u8 | (family: varint, when the kind's high bit is set) | key: varint length + bytes
//! | (value: varint length + bytes, for puts)`. An op without the high bit is the default
//! column family's, as every batch was before column families.

#![deny(clippy::indexing_slicing)]

use crate::coding::{Reader, put_len_prefixed, put_varint, varint_len};
use crate::error::{DecodeError, Error, Result};
use crate::key::{MAX_KEY_BYTES, MAX_VALUE_BYTES, SeqNo, ValueKind};

const HEADER_BYTES: usize = 12;
/// Set in an op's kind byte when a column family id follows it.
const FAMILY_FLAG: u8 = 0x80;

/// A group of puts and deletes applied atomically: after any crash, all of it or none of it.
///
/// ```
/// let mut batch = strata::WriteBatch::new();
/// batch.put(b"apple", b"red");
/// batch.delete(b"pear");
/// assert_eq!(batch.len(), 2);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
    count: u32,
    invalid: Option<String>,
    /// Whether `merge` added an operand.
    merges: bool,
    /// Whether an op names a column family other than the default one.
    families: bool,
    /// Whether `delete_range` added a range, whose ends the database checks in its order.
    ranges: bool,
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("ops", &self.count)
            .field("bytes", &self.rep.len())
            .finish()
    }
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::with_capacity(64)
    }

    /// An empty batch whose buffer holds `bytes` of encoded ops before it grows (a put takes
    /// its key and value and a few bytes more).
    pub fn with_capacity(bytes: usize) -> Self {
        let mut rep = Vec::with_capacity(bytes.saturating_add(HEADER_BYTES));
        rep.resize(HEADER_BYTES, 0);
        WriteBatch {
            rep,
            count: 0,
            invalid: None,
            merges: false,
            families: false,
            ranges: false,
        }
    }

    /// Adds a put. A key over [`MAX_KEY_BYTES`] or value over [`MAX_VALUE_BYTES`] makes the
    /// whole batch fail with [`Error::InvalidArgument`] when written.
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.put_kind(0, ValueKind::Value, key, value);
    }

    /// [`WriteBatch::put`] in column family `family` (its id).
    pub(crate) fn put_in(&mut self, family: u32, key: &[u8], value: &[u8]) {
        self.put_kind(family, ValueKind::Value, key, value);
    }

    /// [`WriteBatch::delete`] in column family `family` (its id).
    pub(crate) fn delete_in(&mut self, family: u32, key: &[u8]) {
        self.check(key, None);
        self.push_kind(family, ValueKind::Delete);
        put_len_prefixed(&mut self.rep, key);
        self.count += 1;
    }

    /// [`WriteBatch::merge`] in column family `family` (its id).
    pub(crate) fn merge_in(&mut self, family: u32, key: &[u8], operand: &[u8]) {
        self.merges = true;
        self.put_kind(family, ValueKind::Merge, key, operand);
    }

    /// [`WriteBatch::delete_range`] in column family `family` (its id).
    pub(crate) fn delete_range_in(&mut self, family: u32, begin: &[u8], end: &[u8]) {
        self.ranges = true;
        self.check(end, None);
        self.put_kind(family, ValueKind::RangeDelete, begin, end);
    }

    fn put_kind(&mut self, family: u32, kind: ValueKind, key: &[u8], value: &[u8]) {
        self.check(key, Some(value));
        self.rep.reserve(
            6 + varint_len(key.len() as u64)
                + key.len()
                + varint_len(value.len() as u64)
                + value.len(),
        );
        self.push_kind(family, kind);
        put_len_prefixed(&mut self.rep, key);
        put_len_prefixed(&mut self.rep, value);
        self.count += 1;
    }

    /// An op's kind byte, and its column family when not the default one.
    fn push_kind(&mut self, family: u32, kind: ValueKind) {
        if family == 0 {
            self.rep.push(kind as u8);
        } else {
            self.families = true;
            self.rep.push(kind as u8 | FAMILY_FLAG);
            put_varint(&mut self.rep, u64::from(family));
        }
    }

    /// Whether an op names a column family other than the default one.
    pub(crate) fn has_families(&self) -> bool {
        self.families
    }

    /// Adds a merge operand for `key`, folded by the database's
    /// [`MergeOperator`](crate::MergeOperator) into the key's value when it is read. Writing
    /// it to a database without one fails with [`Error::InvalidArgument`].
    pub fn merge(&mut self, key: &[u8], operand: &[u8]) {
        self.merges = true;
        self.put_kind(0, ValueKind::Merge, key, operand);
    }

    /// Adds a deletion of every key in `[begin, end)`: one entry, whatever the number of
    /// keys, hiding every older version of them from reads (snapshots taken before it still
    /// see them). An empty range (`begin == end`) deletes nothing; `begin` after `end` in
    /// the database's key order makes the whole batch fail with [`Error::InvalidArgument`]
    /// when written.
    pub fn delete_range(&mut self, begin: &[u8], end: &[u8]) {
        self.ranges = true;
        self.check(end, None);
        self.put_kind(0, ValueKind::RangeDelete, begin, end);
    }

    /// Whether the batch holds a merge operand (added by [`WriteBatch::merge`]).
    pub(crate) fn has_merges(&self) -> bool {
        self.merges
    }

    /// Adds a delete of `key` (a no-op for a key that does not exist).
    pub fn delete(&mut self, key: &[u8]) {
        self.check(key, None);
        self.rep.push(ValueKind::Delete as u8);
        put_len_prefixed(&mut self.rep, key);
        self.count += 1;
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Approximate size in bytes of the encoded batch.
    pub fn approximate_size(&self) -> usize {
        self.rep.len()
    }

    fn check(&mut self, key: &[u8], value: Option<&[u8]>) {
        if self.invalid.is_some() {
            return;
        }
        if key.len() > MAX_KEY_BYTES {
            self.invalid = Some(format!(
                "key of {} bytes exceeds the limit of {MAX_KEY_BYTES}",
                key.len()
            ));
        } else if let Some(v) = value
            && v.len() > MAX_VALUE_BYTES
        {
            self.invalid = Some(format!(
                "value of {} bytes exceeds the limit of {MAX_VALUE_BYTES}",
                v.len()
            ));
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        match &self.invalid {
            Some(msg) => Err(Error::InvalidArgument(msg.clone())),
            None => Ok(()),
        }
    }

    /// Whether `delete_range` added a range.
    pub(crate) fn has_ranges(&self) -> bool {
        self.ranges
    }

    /// Checks that no range ends before it begins in `order`.
    pub(crate) fn check_ranges(&self, order: &crate::comparator::KeyOrder) -> Result<()> {
        for op in self.iter() {
            let op = op.map_err(|e| Error::InvalidArgument(format!("write batch: {}", e.0)))?;
            if op.kind == ValueKind::RangeDelete && order.user(op.key, op.value).is_gt() {
                return Err(Error::InvalidArgument(
                    "delete_range: begin is after end".into(),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Appends this batch's operations to `group` (a batch being built by the commit leader).
    pub(crate) fn append_to(&self, group: &mut WriteBatch) {
        group
            .rep
            .extend_from_slice(self.rep.get(HEADER_BYTES..).unwrap_or_default());
        group.count += self.count;
        group.merges |= self.merges;
        group.families |= self.families;
        group.ranges |= self.ranges;
    }

    /// The record header for this batch at `first`: `first_seq | count`.
    pub(crate) fn header(&self, first: SeqNo) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[..8].copy_from_slice(&first.0.to_le_bytes());
        h[8..].copy_from_slice(&self.count.to_le_bytes());
        h
    }

    /// The encoded operations, without the header.
    pub(crate) fn ops_bytes(&self) -> &[u8] {
        self.rep.get(HEADER_BYTES..).unwrap_or_default()
    }

    /// The batch's operations in order, as the engine applies them; an error where the
    /// bytes do not parse (a batch read back with [`WriteBatch::from_record`] was checked
    /// already).
    pub fn entries(&self) -> impl Iterator<Item = crate::Result<BatchEntry<'_>>> {
        self.iter().map(|op| match op {
            Ok(op) => Ok(BatchEntry {
                kind: match op.kind {
                    ValueKind::Value => EntryKind::Put,
                    ValueKind::Delete => EntryKind::Delete,
                    ValueKind::Merge => EntryKind::Merge,
                    ValueKind::RangeDelete => EntryKind::DeleteRange,
                },
                key: op.key,
                value: op.value,
                family: op.family,
            }),
            Err(e) => Err(Error::InvalidArgument(format!("write batch: {}", e.0))),
        })
    }

    /// The batch and the sequence number of its first operation, from a WAL record (as
    /// [`Db::updates_since`](crate::Db::updates_since) and
    /// [`WalListener`](crate::WalListener) hand them out): a replica's way to apply a
    /// primary's writes. Every operation is checked to parse.
    pub fn from_record(record: &[u8]) -> crate::Result<(u64, WriteBatch)> {
        decode_record(record)
            .map(|(seq, batch)| (seq.0, batch))
            .map_err(|e| Error::InvalidArgument(format!("write batch record: {}", e.0)))
    }

    /// Appends `other`'s operations after this batch's, in order (LevelDB's
    /// `WriteBatch::Append`).
    pub fn append(&mut self, other: &WriteBatch) {
        if let (None, Some(why)) = (&self.invalid, &other.invalid) {
            self.invalid = Some(why.clone());
        }
        other.append_to(self);
    }

    /// The batch as a WAL record whose first operation has sequence number `first`, the
    /// form [`WriteBatch::from_record`] reads.
    pub fn to_record(&self, first: u64) -> Vec<u8> {
        let mut record = self.rep.clone();
        if let Some(h) = record.get_mut(..HEADER_BYTES) {
            h.copy_from_slice(&self.header(SeqNo(first)));
        }
        record
    }

    pub(crate) fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            r: Reader::new(self.rep.get(HEADER_BYTES..).unwrap_or_default()),
            remaining: self.count,
        }
    }
}

/// What one operation of a batch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Sets the key to the value.
    Put,
    /// Deletes the key.
    Delete,
    /// Adds the value as an operand of the merge operator.
    Merge,
    /// Deletes every key from `key` (inclusive) to `value` (exclusive).
    DeleteRange,
}

/// One operation of a batch, as [`WriteBatch::entries`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchEntry<'a> {
    /// What it does.
    pub kind: EntryKind,
    /// The key (a range's start for [`EntryKind::DeleteRange`]).
    pub key: &'a [u8],
    /// The value, the merge operand, or a range's end; empty for a delete.
    pub value: &'a [u8],
    /// The column family's id (0: the default family).
    pub family: u32,
}

/// One operation of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchOp<'a> {
    pub kind: ValueKind,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// The column family (0: the default one).
    pub family: u32,
}

pub(crate) struct BatchIter<'a> {
    r: Reader<'a>,
    remaining: u32,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchOp<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return if self.r.is_empty() {
                None
            } else {
                self.remaining = u32::MAX;
                Some(Err(DecodeError("batch has bytes past its last operation")))
            };
        }
        if self.remaining == u32::MAX {
            return None;
        }
        self.remaining -= 1;
        Some(self.decode_op())
    }
}

impl<'a> BatchIter<'a> {
    fn decode_op(&mut self) -> Result<BatchOp<'a>, DecodeError> {
        let byte = self.r.u8()?;
        let family = if byte & FAMILY_FLAG != 0 {
            u32::try_from(self.r.varint()?)
                .map_err(|_| DecodeError("column family id out of range"))?
        } else {
            0
        };
        let kind =
            ValueKind::from_u8(byte & !FAMILY_FLAG).ok_or(DecodeError("unknown batch op"))?;
        let key = self.r.len_prefixed()?;
        let value = match kind {
            ValueKind::Value | ValueKind::Merge | ValueKind::RangeDelete => {
                self.r.len_prefixed()?
            }
            ValueKind::Delete => &[],
        };
        // The limits `put` checks hold for every batch a WAL holds; the memtable relies on them.
        if key.len() > MAX_KEY_BYTES {
            return Err(DecodeError("key over the size limit"));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(DecodeError("value over the size limit"));
        }
        Ok(BatchOp {
            kind,
            key,
            value,
            family,
        })
    }
}

/// Decodes a WAL record back into its first sequence number and batch, checking that every
/// operation parses.
pub(crate) fn decode_record(record: &[u8]) -> Result<(SeqNo, WriteBatch), DecodeError> {
    let mut r = Reader::new(record);
    let seq = SeqNo(r.u64()?);
    let count = r.u32()?;
    let mut batch = WriteBatch {
        rep: record.to_vec(),
        count,
        invalid: None,
        merges: false,
        families: false,
        ranges: false,
    };
    let (mut merges, mut families, mut ranges) = (false, false, false);
    for op in batch.iter() {
        let op = op?;
        merges |= op.kind == ValueKind::Merge;
        families |= op.family != 0;
        ranges |= op.kind == ValueKind::RangeDelete;
    }
    batch.merges = merges;
    batch.families = families;
    batch.ranges = ranges;
    if seq
        .0
        .checked_add(u64::from(count))
        .is_none_or(|end| end > SeqNo::MAX.0)
    {
        return Err(DecodeError("sequence number out of range"));
    }
    Ok((seq, batch))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn batch_encodes_and_decodes() {
        let mut b = WriteBatch::new();
        b.put(b"a", b"1");
        b.delete(b"b");
        b.put(b"", b"");
        let rec = [b.header(SeqNo(100)).as_slice(), b.ops_bytes()].concat();
        let (seq, d) = decode_record(&rec).unwrap();
        assert_eq!(seq, SeqNo(100));
        let ops: Vec<_> = d.iter().map(|o| o.unwrap()).collect();
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[1].kind, ValueKind::Delete);
        assert_eq!(ops[1].key, b"b");
        assert_eq!(ops[2].key, b"");
    }

    #[test]
    fn garbage_records_are_errors() {
        assert!(decode_record(&[1, 2, 3]).is_err());
        let mut b = WriteBatch::new();
        b.put(b"key", b"value");
        let rec = [b.header(SeqNo(1)).as_slice(), b.ops_bytes()].concat();
        for cut in 0..rec.len() {
            assert!(decode_record(&rec[..cut]).is_err(), "cut {cut}");
        }
        let mut extra = rec.clone();
        extra.push(7);
        assert!(decode_record(&extra).is_err());
    }

    #[test]
    fn oversized_keys_invalidate_the_batch() {
        let mut b = WriteBatch::new();
        b.put(&vec![0; MAX_KEY_BYTES + 1], b"v");
        assert!(matches!(b.validate(), Err(Error::InvalidArgument(_))));
        let mut ok = WriteBatch::new();
        ok.put(&vec![0; MAX_KEY_BYTES], b"v");
        assert!(ok.validate().is_ok());
    }

    #[test]
    fn records_over_the_limits_are_errors() {
        let record = |key: &[u8], value: &[u8]| {
            let mut b = WriteBatch::new();
            b.put(key, value);
            [b.header(SeqNo(1)).as_slice(), b.ops_bytes()].concat()
        };
        assert!(decode_record(&record(&vec![0; MAX_KEY_BYTES], b"v")).is_ok());
        let long_key = decode_record(&record(&vec![0; MAX_KEY_BYTES + 1], b"v"));
        assert!(matches!(
            long_key,
            Err(DecodeError("key over the size limit"))
        ));
        let long_value = decode_record(&record(b"k", &vec![0; MAX_VALUE_BYTES + 1]));
        assert!(matches!(
            long_value,
            Err(DecodeError("value over the size limit"))
        ));
    }
}

//! Typed ids and the internal key.
//!
//! An internal key is the user key followed by an 8-byte little-endian trailer
//! `(sequence << 8) | kind`. Internal keys sort by user key ascending, then by trailer
//! descending, so the newest version of a key comes first.

use std::cmp::Ordering;

/// The largest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 64 * 1024;
/// The largest value accepted, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024 * 1024;

/// A sequence number: the position of a write in the total order of all writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SeqNo(pub u64);

impl SeqNo {
    /// The largest sequence number that fits in a trailer (56 bits).
    pub const MAX: SeqNo = SeqNo((1 << 56) - 1);
}

/// The number that names a file in the database directory (WAL, SST or MANIFEST).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FileNumber(pub u64);

/// A level of the LSM tree; 0 holds freshly flushed, overlapping files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Level(pub usize);

/// The number of levels in the tree: physical levels, each a sorted run (level 0 holds
/// overlapping files). Leveling uses one per level of the tree; tiering and lazy leveling
/// give each level of the tree `T - 1` of them, one per run (see `compaction::LevelTargets`),
/// so that every read path walks sorted runs newest first whatever the merge policy.
pub(crate) const NUM_LEVELS: usize = 32;

/// What an entry records. Written to disk: the discriminants are frozen and never renumbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ValueKind {
    Delete = 0,
    Value = 1,
    /// An operand of the merge operator, folded into the older versions at read time.
    Merge = 2,
    /// A range tombstone: the key is the range's start, the value its end (exclusive). Kept
    /// beside the point entries (see `range_del`), never among them.
    RangeDelete = 3,
}

impl ValueKind {
    pub(crate) fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Value),
            2 => Some(ValueKind::Merge),
            3 => Some(ValueKind::RangeDelete),
            _ => None,
        }
    }
}

pub(crate) const TRAILER_BYTES: usize = 8;

pub(crate) fn pack_trailer(seq: SeqNo, kind: ValueKind) -> u64 {
    debug_assert!(seq <= SeqNo::MAX);
    (seq.0 << 8) | kind as u64
}

/// Appends the internal key for `(user_key, seq, kind)` to `dst`.
pub(crate) fn append_internal_key(dst: &mut Vec<u8>, user_key: &[u8], seq: SeqNo, kind: ValueKind) {
    dst.reserve(user_key.len() + TRAILER_BYTES);
    dst.extend_from_slice(user_key);
    dst.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
}

pub(crate) fn internal_key(user_key: &[u8], seq: SeqNo, kind: ValueKind) -> Vec<u8> {
    let mut v = Vec::new();
    append_internal_key(&mut v, user_key, seq, kind);
    v
}

/// The kind with the largest discriminant: a key built with it at `seq` sorts before every
/// entry of its user key written at `seq` or earlier, whatever their kinds.
pub(crate) const SEEK_KIND: ValueKind = ValueKind::RangeDelete;

/// The key that sorts before every version of `user_key` visible at `seq`.
pub(crate) fn lookup_key(user_key: &[u8], seq: SeqNo) -> Vec<u8> {
    internal_key(user_key, seq, SEEK_KIND)
}

/// Bytes of a [`LookupKey`] kept without an allocation.
const INLINE_LOOKUP_BYTES: usize = 64;

/// [`lookup_key`] without an allocation for keys of up to 56 bytes: a point lookup builds
/// one on every call, and for a key no table holds the allocation was a fair share of it.
pub(crate) enum LookupKey {
    Inline([u8; INLINE_LOOKUP_BYTES], usize),
    Heap(Vec<u8>),
}

impl LookupKey {
    pub(crate) fn new(user_key: &[u8], seq: SeqNo) -> LookupKey {
        let len = user_key.len() + TRAILER_BYTES;
        let mut inline = [0u8; INLINE_LOOKUP_BYTES];
        match inline.get_mut(..len) {
            Some(dst) => {
                let (key, trailer) = dst.split_at_mut(user_key.len());
                key.copy_from_slice(user_key);
                trailer.copy_from_slice(&pack_trailer(seq, SEEK_KIND).to_le_bytes());
                LookupKey::Inline(inline, len)
            }
            None => LookupKey::Heap(lookup_key(user_key, seq)),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            LookupKey::Inline(bytes, len) => bytes.get(..*len).unwrap_or_default(),
            LookupKey::Heap(v) => v,
        }
    }
}

/// A borrowed, decoded internal key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParsedKey<'a> {
    pub user_key: &'a [u8],
    pub seq: SeqNo,
    pub kind: ValueKind,
}

/// Splits an internal key; `None` when it is too short or carries an unknown kind.
pub(crate) fn parse_internal_key(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    let split = ikey.len().checked_sub(TRAILER_BYTES)?;
    let (user_key, trailer) = ikey.split_at(split);
    let mut t = [0u8; 8];
    t.copy_from_slice(trailer);
    let trailer = u64::from_le_bytes(t);
    Some(ParsedKey {
        user_key,
        seq: SeqNo(trailer >> 8),
        kind: ValueKind::from_u8(trailer as u8)?,
    })
}

/// The user-key part of an internal key. A key shorter than its trailer (only damaged or
/// foreign bytes have one) yields the empty key rather than a panic; decoders that care
/// check with [`parse_internal_key`].
pub(crate) fn user_key(ikey: &[u8]) -> &[u8] {
    ikey.get(..ikey.len().saturating_sub(TRAILER_BYTES))
        .unwrap_or_default()
}

pub(crate) fn trailer(ikey: &[u8]) -> u64 {
    crate::coding::u64_at(ikey, ikey.len().saturating_sub(TRAILER_BYTES)).unwrap_or(0)
}

/// Bytewise order (as `a.cmp(b)`), eight bytes at a step. Keys are short, and for them a call
/// to the C library's `memcmp` cost more than the comparison: it was a tenth of a scan.
#[inline]
pub(crate) fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let (mut x, mut y) = (a, b);
    while let (Some((xc, xr)), Some((yc, yr))) =
        (x.split_first_chunk::<8>(), y.split_first_chunk::<8>())
    {
        if xc != yc {
            return u64::from_be_bytes(*xc).cmp(&u64::from_be_bytes(*yc));
        }
        (x, y) = (xr, yr);
    }
    x.cmp(y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comparator::KeyOrder;

    /// The lookup key built in place is the one built on the heap, byte for byte, for keys
    /// shorter than, as long as and longer than its room.
    #[test]
    fn lookup_keys_in_place_match_lookup_keys() {
        for len in [0, 1, 16, 55, 56, 57, 200] {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            for seq in [SeqNo(0), SeqNo(1), SeqNo(0x1234_5678), SeqNo::MAX] {
                let built = LookupKey::new(&key, seq);
                assert_eq!(
                    built.bytes(),
                    lookup_key(&key, seq),
                    "len {len}, seq {seq:?}"
                );
                assert_eq!(
                    matches!(built, LookupKey::Inline(..)),
                    len <= 56,
                    "len {len}"
                );
            }
        }
    }

    #[test]
    fn compare_bytes_agrees_with_slice_order() {
        let mut x = 99u64;
        let mut next = || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            x >> 33
        };
        for _ in 0..20_000 {
            // Short alphabets and shared prefixes, so that equal chunks and ties are common.
            let a: Vec<u8> = (0..next() % 20).map(|_| (next() % 3) as u8).collect();
            let mut b = a.clone();
            match next() % 3 {
                0 => b.truncate((next() % 20) as usize),
                1 => b.push((next() % 3) as u8),
                _ => {
                    if let Some(byte) = b.get_mut((next() % 20) as usize) {
                        *byte = (next() % 3) as u8;
                    }
                }
            }
            assert_eq!(compare_bytes(&a, &b), a.cmp(&b), "{a:?} {b:?}");
            assert_eq!(compare_bytes(&b, &a), b.cmp(&a), "{b:?} {a:?}");
        }
    }

    #[test]
    fn newer_versions_sort_first_within_a_user_key() {
        let a = internal_key(b"k", SeqNo(5), ValueKind::Value);
        let b = internal_key(b"k", SeqNo(3), ValueKind::Value);
        let c = internal_key(b"ka", SeqNo(9), ValueKind::Value);
        assert_eq!(KeyOrder::Bytewise.internal(&a, &b), Ordering::Less);
        assert_eq!(KeyOrder::Bytewise.internal(&b, &c), Ordering::Less);
        let d = internal_key(b"k", SeqNo(5), ValueKind::Delete);
        assert_eq!(KeyOrder::Bytewise.internal(&a, &d), Ordering::Less);
    }

    /// Regression: blocks of foreign bytes hold keys shorter than a trailer, and comparing
    /// them hit an assertion (found by the decoder fuzz test).
    #[test]
    fn short_keys_compare_without_panicking() {
        assert_eq!(user_key(b"abc"), b"");
        let _ = KeyOrder::Bytewise.internal(b"", b"abc");
        let _ = KeyOrder::Bytewise.internal(b"abcdefghij", b"x");
    }

    #[test]
    fn parse_round_trips_and_rejects_garbage() {
        let k = internal_key(b"user", SeqNo(77), ValueKind::Delete);
        let p = parse_internal_key(&k).unwrap();
        assert_eq!(p.user_key, b"user");
        assert_eq!(p.seq, SeqNo(77));
        assert_eq!(p.kind, ValueKind::Delete);
        assert!(parse_internal_key(b"short").is_none());
        let mut bad = k.clone();
        let n = bad.len();
        bad[n - 8] = 9;
        assert!(parse_internal_key(&bad).is_none());
    }
}

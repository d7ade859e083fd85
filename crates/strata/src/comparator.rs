//! The order of user keys: bytewise by default, or one the user supplies, as LevelDB's
//! `Comparator` lets a caller override the sort order.
//!
//! The order is part of the data: tables, indexes and the MANIFEST are written in it, so a
//! database remembers its comparator's name and refuses to open under another one.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::key::{compare_bytes, user_key};

/// A total order of user keys.
///
/// `compare` must be a total order (an inconsistent one may make the engine's sorts panic,
/// stopping a flush or compaction) that never changes for a given `name`: a database records
/// the name and refuses to open with a comparator of another name
/// ([`crate::Error::InvalidArgument`]). Two keys may compare equal only when their bytes are
/// equal, since filters and the memtable's hash buckets find keys by their bytes.
///
/// `compare` runs inside every read, write, flush and compaction, and must not call back
/// into the database. A comparator named as a built-in one ([`BytewiseComparator::NAME`],
/// [`ReverseBytewiseComparator::NAME`]) is taken to order as it does, and the engine compares
/// inline without calling it.
///
/// In byte order compaction cuts its output between any two keys, a range deletion going on
/// in the next file from `last + [0]`; no such key is known in another order, and there
/// compaction cuts a file only where no range deletion goes on past its last key. A range
/// deletion that stays live over much of the key space (a snapshot holds it, or keys deeper
/// down) then makes the files that span it larger than [`Options::target_file_size`].
///
/// [`Options::target_file_size`]: crate::Options::target_file_size
pub trait Comparator: Send + Sync {
    /// The name recorded in the database; two comparators with one name must order alike.
    fn name(&self) -> &str;

    /// The order of `a` and `b`.
    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering;

    /// May shorten `start` to any key in `[start, limit)`, to make index keys shorter. The
    /// default leaves it unchanged, which is always correct.
    fn find_shortest_separator(&self, start: &mut Vec<u8>, limit: &[u8]) {
        let _ = (start, limit);
    }

    /// May change `key` to a short key at or after it. The default leaves it unchanged.
    fn find_short_successor(&self, key: &mut Vec<u8>) {
        let _ = key;
    }
}

/// Byte order (the default), under LevelDB's name for it.
#[derive(Debug, Default, Clone, Copy)]
pub struct BytewiseComparator;

impl BytewiseComparator {
    /// The name a database records for byte order.
    pub const NAME: &'static str = "leveldb.BytewiseComparator";
}

impl Comparator for BytewiseComparator {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        compare_bytes(a, b)
    }

    fn find_shortest_separator(&self, start: &mut Vec<u8>, limit: &[u8]) {
        let common = start.iter().zip(limit).take_while(|(a, b)| a == b).count();
        if common >= start.len().min(limit.len()) {
            return; // one is a prefix of the other
        }
        let (Some(&s), Some(&l)) = (start.get(common), limit.get(common)) else {
            return;
        };
        if s < 0xff && s + 1 < l {
            start.truncate(common + 1);
            if let Some(last) = start.last_mut() {
                *last += 1;
            }
        }
    }

    fn find_short_successor(&self, key: &mut Vec<u8>) {
        if let Some(i) = key.iter().position(|&b| b != 0xff) {
            key.truncate(i + 1);
            if let Some(last) = key.last_mut() {
                *last += 1;
            }
        }
    }
}

/// Byte order reversed, under RocksDB's name for it.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReverseBytewiseComparator;

impl ReverseBytewiseComparator {
    /// The name a database records for reversed byte order.
    pub const NAME: &'static str = "rocksdb.ReverseBytewiseComparator";
}

impl Comparator for ReverseBytewiseComparator {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
        compare_bytes(b, a)
    }

    /// `start` cut just past its first byte that differs from `limit`'s: a prefix of
    /// `start` is at or after it in this order, and that byte keeps it before `limit`.
    fn find_shortest_separator(&self, start: &mut Vec<u8>, limit: &[u8]) {
        let common = start.iter().zip(limit).take_while(|(a, b)| a == b).count();
        if common < start.len().min(limit.len()) {
            start.truncate(common + 1);
        }
    }
}

/// The order the engine keeps keys in: the two built-in orders inline, any other through
/// the user's comparator. Cheap to clone (a reference count at most).
#[derive(Clone, Default)]
pub(crate) enum KeyOrder {
    #[default]
    Bytewise,
    Reverse,
    Custom(Arc<dyn Comparator>),
}

impl KeyOrder {
    /// The order `c` defines; the built-in comparators' names take the inline paths.
    pub(crate) fn of(c: &Arc<dyn Comparator>) -> KeyOrder {
        match c.name() {
            BytewiseComparator::NAME => KeyOrder::Bytewise,
            ReverseBytewiseComparator::NAME => KeyOrder::Reverse,
            _ => KeyOrder::Custom(c.clone()),
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            KeyOrder::Bytewise => BytewiseComparator::NAME,
            KeyOrder::Reverse => ReverseBytewiseComparator::NAME,
            KeyOrder::Custom(c) => c.name(),
        }
    }

    /// The name as a MANIFEST records it: nothing for byte order, so that its databases keep
    /// the format they had before comparators.
    pub(crate) fn name_to_record(&self) -> Option<String> {
        (!self.is_bytewise()).then(|| self.name().to_string())
    }

    /// Whether this is byte order, which the eight-byte search heads of index blocks and
    /// the memtable's sort prefix rely on.
    pub(crate) fn is_bytewise(&self) -> bool {
        matches!(self, KeyOrder::Bytewise)
    }

    /// The order of two user keys.
    #[inline(always)]
    pub(crate) fn user(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self {
            KeyOrder::Bytewise => compare_bytes(a, b),
            KeyOrder::Reverse => compare_bytes(b, a),
            KeyOrder::Custom(c) => c.compare(a, b),
        }
    }

    /// The order of two internal keys: by user key, then newest (largest trailer) first.
    #[inline(always)]
    pub(crate) fn internal(&self, a: &[u8], b: &[u8]) -> Ordering {
        match self.user(user_key(a), user_key(b)) {
            Ordering::Equal => crate::key::trailer(b).cmp(&crate::key::trailer(a)),
            o => o,
        }
    }

    /// The smaller of two user keys.
    pub(crate) fn min<'a>(&self, a: &'a [u8], b: &'a [u8]) -> &'a [u8] {
        if self.user(b, a).is_lt() { b } else { a }
    }

    /// The larger of two user keys.
    pub(crate) fn max<'a>(&self, a: &'a [u8], b: &'a [u8]) -> &'a [u8] {
        if self.user(b, a).is_gt() { b } else { a }
    }

    /// The least of some user keys.
    pub(crate) fn least<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Option<&'a [u8]> {
        keys.reduce(|a, b| self.min(a, b))
    }

    /// The greatest of some user keys.
    pub(crate) fn greatest<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Option<&'a [u8]> {
        keys.reduce(|a, b| self.max(a, b))
    }

    /// May shorten `start` to a key in `[start, limit)`.
    pub(crate) fn shorten_separator(&self, start: &mut Vec<u8>, limit: &[u8]) {
        match self {
            KeyOrder::Bytewise => BytewiseComparator.find_shortest_separator(start, limit),
            KeyOrder::Reverse => ReverseBytewiseComparator.find_shortest_separator(start, limit),
            KeyOrder::Custom(c) => c.find_shortest_separator(start, limit),
        }
    }

    /// May change `key` to a short key at or after it.
    pub(crate) fn shorten_successor(&self, key: &mut Vec<u8>) {
        match self {
            KeyOrder::Bytewise => BytewiseComparator.find_short_successor(key),
            KeyOrder::Reverse => ReverseBytewiseComparator.find_short_successor(key),
            KeyOrder::Custom(c) => c.find_short_successor(key),
        }
    }
}

impl std::fmt::Debug for KeyOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn separated(start: &[u8], limit: &[u8]) -> Vec<u8> {
        let mut s = start.to_vec();
        BytewiseComparator.find_shortest_separator(&mut s, limit);
        s
    }

    /// A separator lies in `[start, limit)` and is shortened where a byte can be raised.
    #[test]
    fn bytewise_separators_lie_between_their_keys() {
        assert_eq!(separated(b"abcdef", b"abzzzz"), b"abd");
        assert_eq!(separated(b"abc", b"abcdef"), b"abc");
        assert_eq!(separated(b"abcx", b"abd"), b"abcx");
        assert_eq!(separated(b"a\xffz", b"b"), b"a\xffz");
        let cases: [(&[u8], &[u8]); 6] = [
            (b"", b"a"),
            (b"a", b"b"),
            (b"a\x01", b"a\x03"),
            (b"k00017", b"k00025"),
            (b"\xff\xfe", b"\xff\xff"),
            (b"m", b"n\x00"),
        ];
        for (start, limit) in cases {
            let s = separated(start, limit);
            assert!(
                s.as_slice() >= start && s.as_slice() < limit,
                "{start:?} {limit:?}: {s:?}"
            );
        }
    }

    /// A reversed separator lies at or after `start` and before `limit` in reversed order.
    #[test]
    fn reverse_separators_lie_between_their_keys() {
        let cases: [(&[u8], &[u8], &[u8]); 4] = [
            (b"abzzz", b"abc", b"abz"),
            (b"abc", b"ab", b"abc"),
            (b"b\x00\x00", b"a\xff", b"b"),
            (b"k00025", b"k00017", b"k0002"),
        ];
        for (start, limit, want) in cases {
            let mut s = start.to_vec();
            ReverseBytewiseComparator.find_shortest_separator(&mut s, limit);
            assert_eq!(s, want, "{start:?} {limit:?}");
            let r = ReverseBytewiseComparator;
            assert!(r.compare(start, &s).is_le() && r.compare(&s, limit).is_lt());
        }
    }

    /// A successor is at or after its key, and short.
    #[test]
    fn bytewise_successors_follow_their_keys() {
        let cases: [(&[u8], &[u8]); 4] = [
            (b"abc", b"b"),
            (b"\xff\xffa", b"\xff\xffb"),
            (b"\xff\xff", b"\xff\xff"),
            (b"", b""),
        ];
        for (key, want) in cases {
            let mut k = key.to_vec();
            BytewiseComparator.find_short_successor(&mut k);
            assert_eq!(k, want, "{key:?}");
            assert!(k.as_slice() >= key);
        }
    }

    /// The inline orders agree with the comparators they stand for, and a comparator of
    /// another name is called.
    #[test]
    fn key_orders_agree_with_their_comparators() {
        struct Odd;
        impl Comparator for Odd {
            fn name(&self) -> &str {
                "test.LengthFirst"
            }
            fn compare(&self, a: &[u8], b: &[u8]) -> Ordering {
                a.len().cmp(&b.len()).then_with(|| a.cmp(b))
            }
        }
        let keys: [&[u8]; 5] = [b"", b"a", b"ab", b"b", b"abcdefghijk"];
        let by: [Arc<dyn Comparator>; 3] = [
            Arc::new(BytewiseComparator),
            Arc::new(ReverseBytewiseComparator),
            Arc::new(Odd),
        ];
        // What each should answer, from the standard library's order of slices.
        let want = |name: &str, a: &[u8], b: &[u8]| match name {
            "test.LengthFirst" => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
            ReverseBytewiseComparator::NAME => b.cmp(a),
            _ => a.cmp(b),
        };
        for c in by {
            let order = KeyOrder::of(&c);
            assert_eq!(order.name(), c.name());
            for a in keys {
                for b in keys {
                    let w = want(c.name(), a, b);
                    assert_eq!(order.user(a, b), w, "{} {a:?} {b:?}", c.name());
                    assert_eq!(c.compare(a, b), w, "{} {a:?} {b:?}", c.name());
                }
            }
        }
        assert_eq!(KeyOrder::Reverse.user(b"a", b"b"), Ordering::Greater);
        assert_eq!(
            KeyOrder::of(&(Arc::new(Odd) as Arc<dyn Comparator>)).user(b"b", b"ab"),
            Ordering::Less
        );
    }
}

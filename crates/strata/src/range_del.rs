//! Range tombstones: `delete_range(begin, end)` writes one entry that hides every older
//! version of every key in `[begin, end)`.
//!
//! A memtable keeps its tombstones in a list beside its entries, and a table in a block of
//! its own (format in `docs/format.md`); neither puts them among the point entries, so the
//! point paths are unchanged, and a database without tombstones pays a flag check per
//! memtable and an empty list of tables per get. For
//! reads they are *fragmented*, as RocksDB and Pebble do: cut at every begin and end into
//! non-overlapping pieces sorted by key, each with the sequence numbers of the tombstones
//! that cover it, newest first. Whether a key is covered as of a sequence number is then a
//! binary search for its piece and a walk down that piece's sequence numbers.

use crate::comparator::KeyOrder;
use crate::key::SeqNo;

/// One range tombstone: `[begin, end)` deleted at `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RangeTombstone {
    pub begin: Vec<u8>,
    pub end: Vec<u8>,
    pub seq: SeqNo,
}

/// A piece of the key space, `[start, end)`, and the tombstones covering all of it.
#[derive(Debug, Clone)]
struct Fragment {
    start: Vec<u8>,
    end: Vec<u8>,
    /// Newest first.
    seqs: Vec<SeqNo>,
}

/// Tombstones, fragmented for lookups.
#[derive(Debug, Default)]
pub(crate) struct Fragmented {
    fragments: Vec<Fragment>,
    order: KeyOrder,
}

impl Fragmented {
    /// Fragments `tombstones` (in any order; empty ranges are dropped).
    pub(crate) fn new<'a>(
        order: &KeyOrder,
        tombstones: impl IntoIterator<Item = &'a RangeTombstone>,
    ) -> Self {
        let cmp = |a: &[u8], b: &[u8]| order.user(a, b);
        let mut list: Vec<&RangeTombstone> = tombstones
            .into_iter()
            .filter(|t| cmp(&t.begin, &t.end).is_lt())
            .collect();
        if list.is_empty() {
            return Fragmented::default();
        }
        list.sort_by(|a, b| cmp(&a.begin, &b.begin));
        let mut cuts: Vec<&[u8]> = list
            .iter()
            .flat_map(|t| [t.begin.as_slice(), t.end.as_slice()])
            .collect();
        cuts.sort_by(|a, b| cmp(a, b));
        cuts.dedup();
        let mut fragments = Vec::new();
        // Tombstones begun at or before the current cut, not yet known to have ended.
        let mut active: Vec<&RangeTombstone> = Vec::new();
        let mut next = 0;
        for pair in cuts.windows(2) {
            let (start, end) = (pair[0], pair[1]);
            while let Some(t) = list.get(next).filter(|t| cmp(&t.begin, start).is_le()) {
                active.push(t);
                next += 1;
            }
            active.retain(|t| cmp(&t.end, start).is_gt());
            if active.is_empty() {
                continue;
            }
            let mut seqs: Vec<SeqNo> = active.iter().map(|t| t.seq).collect();
            seqs.sort_unstable_by(|a, b| b.cmp(a));
            seqs.dedup();
            fragments.push(Fragment {
                start: start.to_vec(),
                end: end.to_vec(),
                seqs,
            });
        }
        Fragmented {
            fragments,
            order: order.clone(),
        }
    }

    /// The fragments of `parts`, one after another: for parts that hold apart ranges, in
    /// order (the tables of one sorted level).
    pub(crate) fn concat(order: &KeyOrder, parts: &[std::sync::Arc<Fragmented>]) -> Fragmented {
        let fragments: Vec<Fragment> = parts
            .iter()
            .flat_map(|p| p.fragments.iter().cloned())
            .collect();
        debug_assert!(
            fragments
                .windows(2)
                .all(|w| order.user(&w[0].end, &w[1].start).is_le())
        );
        Fragmented {
            fragments,
            order: order.clone(),
        }
    }

    /// The oldest tombstone covering `key` that is newer than `after`, if any.
    pub(crate) fn first_covering_after(&self, key: &[u8], after: SeqNo) -> Option<SeqNo> {
        let i = self
            .fragments
            .partition_point(|f| self.order.user(&f.end, key).is_le());
        match self.fragments.get(i) {
            Some(f) if self.order.user(&f.start, key).is_le() => {
                f.seqs.iter().rev().copied().find(|s| *s > after)
            }
            _ => None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.fragments.is_empty()
    }

    /// The newest tombstone covering `key` that a read at `read_seq` sees (`SeqNo(0)`: none;
    /// no write has sequence number 0).
    pub(crate) fn covering(&self, key: &[u8], read_seq: SeqNo) -> SeqNo {
        let i = self
            .fragments
            .partition_point(|f| self.order.user(&f.end, key).is_le());
        match self.fragments.get(i) {
            Some(f) if self.order.user(&f.start, key).is_le() => f
                .seqs
                .iter()
                .copied()
                .find(|s| *s <= read_seq)
                .unwrap_or_default(),
            _ => SeqNo(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(begin: &str, end: &str, seq: u64) -> RangeTombstone {
        RangeTombstone {
            begin: begin.as_bytes().to_vec(),
            end: end.as_bytes().to_vec(),
            seq: SeqNo(seq),
        }
    }

    /// The fragmented answer against a walk over every tombstone.
    #[test]
    fn covering_agrees_with_a_scan_of_every_tombstone() {
        let mut x = 7u64;
        let mut next = |n: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % n
        };
        for _ in 0..300 {
            let list: Vec<RangeTombstone> = (0..next(8))
                .map(|_| {
                    let a = next(20);
                    let b = next(20);
                    t(&format!("k{a:02}"), &format!("k{b:02}"), 1 + next(30))
                })
                .collect();
            let f = Fragmented::new(&KeyOrder::Bytewise, &list);
            for k in 0..21 {
                let key = format!("k{k:02}");
                for read in [0, 5, 15, 31] {
                    let want = list
                        .iter()
                        .filter(|t| {
                            t.begin.as_slice() <= key.as_bytes()
                                && key.as_bytes() < t.end.as_slice()
                                && t.seq <= SeqNo(read)
                        })
                        .map(|t| t.seq)
                        .max()
                        .unwrap_or_default();
                    assert_eq!(
                        f.covering(key.as_bytes(), SeqNo(read)),
                        want,
                        "{key} {read}"
                    );
                    let first_after = list
                        .iter()
                        .filter(|t| {
                            t.begin.as_slice() <= key.as_bytes()
                                && key.as_bytes() < t.end.as_slice()
                                && t.seq > SeqNo(read)
                        })
                        .map(|t| t.seq)
                        .min();
                    assert_eq!(
                        f.first_covering_after(key.as_bytes(), SeqNo(read)),
                        first_after,
                        "{key} after {read}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_end_is_not_covered() {
        let f = Fragmented::new(&KeyOrder::Bytewise, &[t("b", "d", 5)]);
        assert_eq!(f.covering(b"a", SeqNo(9)), SeqNo(0));
        assert_eq!(f.covering(b"b", SeqNo(9)), SeqNo(5));
        assert_eq!(f.covering(b"c", SeqNo(9)), SeqNo(5));
        assert_eq!(f.covering(b"d", SeqNo(9)), SeqNo(0));
        assert_eq!(f.covering(b"c", SeqNo(4)), SeqNo(0));
    }
}

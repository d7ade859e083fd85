//! Search heads: eight bytes of every restart key of an index block, laid out so that a
//! search reads one cache line a level.
//!
//! A seek in a large index block is a binary search over thousands of restart keys, each
//! probe a cache miss into the restart array and another into the entry. The heads turn it
//! into a search over eight-byte words; only restart keys whose head equals the target's are
//! compared whole. A head preserves order one way: `a < b` gives `head(a) <= head(b)`, so
//! `head(a) < head(b)` proves `a < b`.
//!
//! A binary search over the words still waits on a miss at nearly every probe: a table of
//! 4,000 blocks costs a dozen, one after another, when the index has left the CPU's caches
//! (as it has after a read from the disk). So the words sit in lines of eight, aligned to the
//! cache line, under a tree of the lines' largest words, eight to a line too: a search reads
//! one line a level, four for 4,000 words, and counts within it the words below the target.

#![deny(clippy::indexing_slicing)]

/// Words to a line: 64 bytes, one cache line.
const LINE: usize = 8;

/// Heads equal to a target's walked one by one before a second search finds the rest.
const EQUAL_HEADS_WALKED: usize = 8;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u64; LINE]);

impl Line {
    /// Lines of `words`, the last filled out with `u64::MAX`.
    fn lines_of(words: &[u64]) -> Vec<Line> {
        words
            .chunks(LINE)
            .map(|chunk| {
                let mut line = [u64::MAX; LINE];
                for (d, s) in line.iter_mut().zip(chunk) {
                    *d = *s;
                }
                Line(line)
            })
            .collect()
    }

    /// Words of the line below `w`: where `w` would go among them, as they are sorted.
    fn below(&self, w: u64) -> usize {
        self.0.iter().filter(|&&h| h < w).count()
    }

    fn last(&self) -> u64 {
        self.0[LINE - 1]
    }
}

/// The heads of a block's restart keys, past a prefix.
///
/// The prefix is the one the keys between the first and the last share: a table whose last
/// key lies elsewhere in the key space (a key of another kind, after all the others) would
/// otherwise leave no shared prefix, and heads that all read alike. A key without the prefix
/// heads as 0 when it sorts before the prefixed keys and as `u64::MAX` after them, which
/// keeps the order.
pub(super) struct Heads {
    prefix: Vec<u8>,
    len: usize,
    /// `levels[0]` holds the heads in lines; each level above holds the last (largest) word
    /// of every line of the one below; the top level is a single line.
    levels: Vec<Vec<Line>>,
}

impl Heads {
    /// The heads `words` (of restart keys in order) under `prefix`; `None` when they are not
    /// in order.
    pub(super) fn new(prefix: Vec<u8>, words: &[u64]) -> Option<Heads> {
        if !words.is_sorted() {
            return None;
        }
        let mut levels = vec![Line::lines_of(words)];
        while let Some(below) = levels.last().filter(|l| l.len() > 1) {
            let lasts: Vec<u64> = below.iter().map(Line::last).collect();
            levels.push(Line::lines_of(&lasts));
        }
        Some(Heads {
            prefix,
            len: words.len(),
            levels,
        })
    }

    fn word(rest: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        for (d, s) in w.iter_mut().zip(rest) {
            *d = *s;
        }
        u64::from_be_bytes(w)
    }

    /// The head of `user_key` under `prefix`.
    pub(super) fn head(prefix: &[u8], user_key: &[u8]) -> u64 {
        match user_key.strip_prefix(prefix) {
            Some(rest) => Heads::word(rest),
            None if user_key < prefix => 0,
            None => u64::MAX,
        }
    }

    /// Bytes held.
    pub(super) fn size(&self) -> usize {
        let lines: usize = self.levels.iter().map(Vec::len).sum();
        self.prefix.len() + lines * std::mem::size_of::<Line>()
    }

    /// How many heads are below `w`: the first at or above it.
    ///
    /// Each level narrows the search to one line of the level below: the line whose largest
    /// word is the first at or above `w`, which holds the first such word of that level.
    fn rank(&self, w: u64) -> usize {
        let mut at = 0;
        for level in self.levels.iter().rev() {
            match level.get(at) {
                Some(line) => at = at * LINE + line.below(w),
                // Every word of the top line is below `w`, so every head is.
                None => return self.len,
            }
        }
        at.min(self.len)
    }

    fn get(&self, i: usize) -> Option<u64> {
        let line = self.levels.first()?.get(i / LINE)?;
        (i < self.len).then(|| line.0.get(i % LINE).copied())?
    }

    /// The restart points whose keys may equal or straddle `user_key`: all before the range
    /// sort below it, all after above it.
    pub(super) fn candidates(&self, user_key: &[u8]) -> std::ops::Range<usize> {
        let w = Heads::head(&self.prefix, user_key);
        let lo = self.rank(w);
        // Few heads, most often none or one, equal the target's, and they follow `lo` on its
        // line: a short walk finds their end without a second search.
        let equal = (lo..lo + EQUAL_HEADS_WALKED)
            .take_while(|&i| self.get(i) == Some(w))
            .count();
        let end = match (equal < EQUAL_HEADS_WALKED, w.checked_add(1)) {
            (true, _) => lo + equal,
            (false, Some(next)) => self.rank(next),
            (false, None) => self.len,
        };
        lo..end
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing)]

    use super::*;
    use proptest::prelude::*;

    /// The candidates of a target are exactly the restart points whose heads equal its
    /// head, or the empty range where the heads rise past it: for runs of equal heads
    /// shorter and longer than the walk.
    #[test]
    fn candidates_are_the_restarts_whose_heads_equal_the_target() {
        let mut words = vec![1u64, 4];
        words.extend(std::iter::repeat_n(6, 3));
        words.extend(std::iter::repeat_n(9, 30));
        words.extend([12, 12, u64::MAX]);
        let heads = Heads::new(Vec::new(), &words).unwrap();
        for target in [0u64, 1, 3, 4, 6, 7, 9, 10, 12, 13, u64::MAX] {
            let got = heads.candidates(&target.to_be_bytes());
            let equal: Vec<usize> = (0..words.len()).filter(|&i| words[i] == target).collect();
            match equal.first() {
                Some(&first) => assert_eq!(got, first..first + equal.len(), "target {target}"),
                None => {
                    assert!(got.is_empty(), "target {target}: {got:?}");
                    // Where it would go: after every smaller head, before every larger.
                    assert!(words[..got.start].iter().all(|&h| h < target));
                    assert!(words[got.start..].iter().all(|&h| h > target));
                }
            }
        }
    }

    #[test]
    fn heads_out_of_order_are_refused() {
        assert!(Heads::new(Vec::new(), &[1, 3, 2]).is_none());
        assert!(Heads::new(Vec::new(), &[]).is_some());
    }

    /// The candidates of a target, found by scanning the words one by one.
    fn scanned(words: &[u64], target: u64) -> std::ops::Range<usize> {
        let below = words.iter().filter(|&&h| h < target).count();
        let equal = words.iter().filter(|&&h| h == target).count();
        below..below + equal
    }

    /// Heads of the sizes where lines and levels begin and end, with long runs of 0 and of
    /// `u64::MAX` (the heads of keys before and after a block's prefix), against every word
    /// and its neighbours.
    #[test]
    fn candidates_at_the_edges_of_lines_and_levels() {
        for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 511, 512, 513] {
            for (zeroes, tops) in [(0, 0), (9, 0), (0, 9), (12, 20)] {
                let mut words = vec![0u64; zeroes];
                words.extend((0..len as u64).map(|i| 2 + 2 * (i / 3)));
                words.extend(std::iter::repeat_n(u64::MAX, tops));
                let heads = Heads::new(Vec::new(), &words).unwrap();
                let targets = words
                    .iter()
                    .flat_map(|&w| [w.saturating_sub(1), w, w.saturating_add(1)]);
                for target in targets.chain([0, 1, u64::MAX - 1, u64::MAX]) {
                    assert_eq!(
                        heads.candidates(&target.to_be_bytes()),
                        scanned(&words, target),
                        "{len} words, {zeroes} zeroes, {tops} tops, target {target}"
                    );
                }
            }
        }
    }

    proptest! {
        /// Over heads of every size from none to five levels' worth, with runs of equal
        /// heads and of `u64::MAX` among them, the candidates of targets at, between and
        /// beside the heads are the heads equal to them.
        #[test]
        fn candidates_match_a_scan_of_the_words(
            steps in proptest::collection::vec(
                prop_oneof![4 => Just(0u64), 3 => 1u64..4, 1 => 4u64..1000],
                0..5000,
            ),
            tops in 0usize..20,
            picks in proptest::collection::vec((any::<prop::sample::Index>(), -1i64..=1), 1..40),
        ) {
            // Words climbing from 0 by steps: runs of equal heads, and gaps.
            let mut words: Vec<u64> = steps
                .iter()
                .scan(0u64, |w, s| { *w += s; Some(*w) })
                .collect();
            words.extend(std::iter::repeat_n(u64::MAX, tops));
            let heads = Heads::new(Vec::new(), &words).unwrap();
            let near = picks.iter().filter(|_| !words.is_empty()).map(|(i, d)| {
                words[i.index(words.len())].saturating_add_signed(*d)
            });
            for target in near.chain([0, 1, u64::MAX - 1, u64::MAX]) {
                prop_assert_eq!(
                    heads.candidates(&target.to_be_bytes()),
                    scanned(&words, target),
                    "target {}", target
                );
            }
        }
    }
}

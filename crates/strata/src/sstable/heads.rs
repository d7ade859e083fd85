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

    proptest! {
        /// Over heads of every size from none to five levels' worth, with runs of equal
        /// heads and `u64::MAX` among them, the candidates of any target are the heads equal
        /// to it, found by scanning the words one by one.
        #[test]
        fn candidates_match_a_scan_of_the_words(
            steps in proptest::collection::vec(0u64..4, 0..5000),
            top in any::<bool>(),
            targets in proptest::collection::vec(0u64..20_000, 1..40),
        ) {
            // Words climbing by steps of 0 to 3 from 1: runs of equal heads and gaps.
            let mut words: Vec<u64> = steps
                .iter()
                .scan(1u64, |w, s| { *w += s; Some(*w) })
                .collect();
            if top {
                words.extend([u64::MAX; 3]);
            }
            let heads = Heads::new(Vec::new(), &words).unwrap();
            for target in targets.into_iter().chain([0, 1, u64::MAX - 1, u64::MAX]) {
                let below = words.iter().filter(|&&h| h < target).count();
                let equal = words.iter().filter(|&&h| h == target).count();
                prop_assert_eq!(
                    heads.candidates(&target.to_be_bytes()),
                    below..below + equal,
                    "target {}", target
                );
            }
        }
    }
}

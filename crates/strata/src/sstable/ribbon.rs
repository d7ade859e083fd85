//! Ribbon filters (Dillinger and Walzer, "Ribbon filter: practically smaller than Bloom and
//! Xor", 2021): for the same bits per key, about a fifth of a Bloom filter's false positives.
//!
//! A filter of `m` slots holds `r` bits per slot, `Z[i]`. Each key maps to a row: a start
//! slot `s`, 64 coefficient bits `c` (the lowest set) and an `r`-bit fingerprint `f`, and the
//! filter is built so that for every key added, the XOR of `Z[s + t]` over the set bits `t`
//! of `c` equals `f`. A key not added meets that equation by chance, with probability
//! `2^-r`. Building is Gaussian elimination over GF(2) on a band of width 64 (each row's
//! coefficients start at its own slot, so the rows are nearly sorted), then substitution
//! back from the last slot. A lookup reads two adjacent blocks of `r` words.
//!
//! The elimination fails when the keys' equations contradict each other, and the larger the
//! band, the more slack it needs to succeed (at 8%, one of 2 million keys always failed). So
//! a filter is cut into segments of about 32,768 keys, chosen by bits of the key's hash,
//! each a band of its own with the same number of blocks; a segment whose equations
//! contradict each other is built again with another seed, which changes its rows.
//!
//! Layout: `words | seeds: S bytes | S: u32 LE | r: u8 | RIBBON_TAG`, the words being
//! `S * B * r` little-endian u64s (`B` blocks of 64 slots a segment). Column `j` of slots
//! `64b..64b+63` of the filter is word `b * r + j`, bit `i % 64` for slot `i`, so the words
//! a lookup reads lie together.

#![deny(clippy::indexing_slicing)]

/// The last byte of a Ribbon filter. Written to disk: frozen.
pub(super) const RIBBON_TAG: u8 = 0xC2;
/// Coefficient bits per row, and slots per block.
const WIDTH: usize = 64;
/// Slots beyond one per key: room for the elimination to succeed.
const SLACK: f64 = 0.08;
/// Keys a segment is cut for.
const SEGMENT_KEYS: usize = 1 << 15;
/// The most fingerprint bits a slot holds.
const MAX_RESULT_BITS: u32 = 16;
/// Seeds a segment tries before the build gives up (and the table gets a Bloom filter).
const ATTEMPTS: u8 = 16;

/// Fingerprint bits a Ribbon filter of `bits_per_key` holds per slot (0: it cannot be one).
pub(crate) fn result_bits(bits_per_key: f64) -> u32 {
    let r = (bits_per_key / (1.0 + SLACK)).floor();
    if r < 1.0 {
        0
    } else {
        (r as u32).min(MAX_RESULT_BITS)
    }
}

/// The false-positive rate of a Ribbon filter of `bits_per_key`: `2^-r`.
pub(crate) fn rate(bits_per_key: f64) -> f64 {
    match result_bits(bits_per_key) {
        0 => 1.0,
        r => 0.5f64.powi(r as i32),
    }
}

/// A key's equation.
struct Row {
    start: usize,
    coeffs: u64,
    result: u16,
}

/// Mixes a 64-bit value (the finalizer of SplitMix64). Frozen for the format.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The row of the key of hash `h` in a filter of `starts` start slots and `r` result bits.
/// The key hash is mixed already: its high half picks the start and its low bits are the
/// fingerprint; the coefficients are mixed from it once more.
#[inline(always)]
fn row(h: u64, seed: u8, starts: u64, r: u32) -> Row {
    let a = h ^ u64::from(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    Row {
        start: (((a >> 32) * starts) >> 32) as usize,
        coeffs: mix(a) | 1,
        result: (a as u16) & (((1u32 << r) - 1) as u16),
    }
}

/// Whether `x` has an odd number of set bits, without the `popcnt` instruction.
#[inline(always)]
fn parity(mut x: u64) -> u64 {
    x ^= x >> 32;
    x ^= x >> 16;
    x ^= x >> 8;
    x ^= x >> 4;
    x ^= x >> 2;
    x ^= x >> 1;
    x & 1
}

/// [`parity`] by `popcnt`, for code compiled where the processor has it.
#[inline(always)]
fn popcnt_parity(x: u64) -> u64 {
    u64::from(x.count_ones() & 1)
}

/// Whether the processor has `popcnt` (checked once, then cached by the standard library).
fn has_popcnt() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The segment of `segments` that the key of hash `h` falls in: from bits 16 to 31 of the
/// hash, which neither the start (bits 32 to 63) nor the fingerprint (bits 0 to 15) use.
fn segment_of(h: u64, segments: usize) -> usize {
    ((((h >> 16) & 0xffff) * segments as u64) >> 16) as usize
}

/// The Ribbon filter of the keys of `hashes` with `bits_per_key`, or `None` where it cannot
/// be one (too few bits per key, or a segment none of whose seeds' equations agree).
pub(crate) fn build(hashes: &[u64], bits_per_key: f64) -> Option<Vec<u8>> {
    build_from_seed(hashes, result_bits(bits_per_key), 0)
}

/// [`build`] with `r` fingerprint bits, each segment trying seeds from `first_seed` on.
fn build_from_seed(hashes: &[u64], r: u32, first_seed: u8) -> Option<Vec<u8>> {
    if r == 0 {
        return None;
    }
    let segments = hashes.len().div_ceil(SEGMENT_KEYS).clamp(1, 1 << 16);
    // Every segment has the blocks of an average one; a fuller one has less room, and may
    // need a seed or two more.
    let keys = (hashes.len() as f64 / segments as f64 * (1.0 + SLACK)).ceil() as usize;
    let blocks = keys.max(WIDTH).div_ceil(WIDTH);
    let span = blocks * r as usize;
    let mut grouped = Vec::new();
    let firsts = counting_sort(hashes, segments, |h| segment_of(h, segments), &mut grouped);
    let mut words = vec![0u64; segments * span];
    let mut seeds = vec![0u8; segments];
    let mut work = Band::default();
    for (s, (seed, out)) in seeds
        .iter_mut()
        .zip(words.chunks_exact_mut(span))
        .enumerate()
    {
        let from = firsts.get(s).copied().unwrap_or(0);
        let to = firsts.get(s + 1).copied().unwrap_or(from);
        let keys = grouped.get(from..to).unwrap_or_default();
        *seed = (first_seed..first_seed.saturating_add(ATTEMPTS))
            .find(|&seed| work.solve(keys, seed, blocks, r, out))?;
    }
    let mut out: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    out.extend_from_slice(&seeds);
    out.extend_from_slice(&(segments as u32).to_le_bytes());
    out.extend_from_slice(&[r as u8, RIBBON_TAG]);
    Some(out)
}

/// `hashes` into `out` grouped by `bucket` of each (in `0..buckets`), keeping their order
/// within a bucket; returns where each bucket starts in `out`, and the end.
fn counting_sort(
    hashes: &[u64],
    buckets: usize,
    bucket: impl Fn(u64) -> usize,
    out: &mut Vec<u64>,
) -> Vec<usize> {
    let mut first = vec![0usize; buckets + 1];
    for &h in hashes {
        if let Some(c) = first.get_mut(bucket(h) + 1) {
            *c += 1;
        }
    }
    for b in 1..first.len() {
        let before = first.get(b - 1).copied().unwrap_or(0);
        if let Some(c) = first.get_mut(b) {
            *c += before;
        }
    }
    let starts = first.clone();
    out.clear();
    out.resize(hashes.len(), 0);
    for &h in hashes {
        if let Some(at) = first.get_mut(bucket(h)) {
            if let Some(slot) = out.get_mut(*at) {
                *slot = h;
            }
            *at += 1;
        }
    }
    starts
}

/// The working memory of a segment's elimination, kept from one segment to the next.
#[derive(Default)]
struct Band {
    sorted: Vec<u64>,
    coeffs: Vec<u64>,
    results: Vec<u16>,
}

impl Band {
    /// Builds the segment of `keys` over `blocks` blocks with `seed` into `out`; false when
    /// the keys' equations contradict each other under this seed.
    fn solve(&mut self, keys: &[u64], seed: u8, blocks: usize, r: u32, out: &mut [u64]) -> bool {
        let slots = blocks * WIDTH;
        let starts = (slots - WIDTH + 1) as u64;
        // By the block each row starts in, so that the elimination walks the band from one
        // end to the other instead of at random.
        let block = |h: u64| row(h, seed, starts, 1).start / WIDTH;
        counting_sort(keys, blocks, block, &mut self.sorted);
        self.coeffs.clear();
        self.coeffs.resize(slots, 0);
        self.results.clear();
        self.results.resize(slots, 0);
        if !band(&self.sorted, seed, r, &mut self.coeffs, &mut self.results) {
            return false;
        }
        match has_popcnt() {
            // SAFETY: the processor has `popcnt`, checked just above.
            true => unsafe { substitute_popcnt(&self.coeffs, &self.results, r, out) },
            false => substitute(&self.coeffs, &self.results, r, parity, out),
        }
        true
    }
}

/// Eliminates the keys' rows into a band of zeroed `coeffs` and `results`: slot `i` ends
/// with a row whose lowest coefficient is `i`, or none (`0`). False when two keys' equations
/// contradict each other.
fn band(hashes: &[u64], seed: u8, r: u32, coeffs: &mut [u64], results: &mut [u16]) -> bool {
    let starts = (coeffs.len() - WIDTH + 1) as u64;
    for &h in hashes {
        let Row {
            mut start,
            coeffs: mut c,
            result: mut v,
        } = row(h, seed, starts, r);
        loop {
            // A row's bits stay within its first row's 64 slots, inside the band.
            let Some((slot, result)) = coeffs.get_mut(start).zip(results.get_mut(start)) else {
                return false;
            };
            if *slot == 0 {
                (*slot, *result) = (c, v);
                break;
            }
            c ^= *slot;
            v ^= *result;
            if c == 0 {
                // The same equation twice (a repeated hash) is no contradiction.
                if v == 0 {
                    break;
                }
                return false;
            }
            let shift = c.trailing_zeros();
            start += shift as usize;
            c >>= shift;
        }
    }
    true
}

/// [`substitute`] compiled with `popcnt`.
///
/// # Safety
/// The processor must have `popcnt`.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "popcnt"))]
unsafe fn substitute_popcnt(coeffs: &[u64], results: &[u16], r: u32, out: &mut [u64]) {
    substitute(coeffs, results, r, popcnt_parity, out);
}

/// Solves the band from its last slot back, into the segment's words `out`. A slot without a
/// row is free: it takes 0.
#[inline(always)]
fn substitute(coeffs: &[u64], results: &[u16], r: u32, parity: fn(u64) -> u64, out: &mut [u64]) {
    let r = r as usize;
    // Column j's solution from the slot at hand on: bit t is slot i + t's. At a block's first
    // slot it is the block's word.
    let mut state = [0u64; MAX_RESULT_BITS as usize];
    for (i, (&c, &v)) in coeffs.iter().zip(results).enumerate().rev() {
        for (j, s) in state.iter_mut().take(r).enumerate() {
            let above = *s << 1;
            let z = match c {
                0 => 0,
                c => parity(c & above) ^ u64::from((v >> j) & 1),
            };
            *s = above | z;
        }
        if i % WIDTH == 0 {
            let base = i / WIDTH * r;
            if let Some(block) = out.get_mut(base..base + r) {
                block.copy_from_slice(state.get(..r).unwrap_or_default());
            }
        }
    }
}

/// A Ribbon filter's shape, read from its trailer.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    /// Blocks a segment.
    blocks: u64,
    segments: u64,
    r: u32,
    /// Bytes of words, before the segments' seeds.
    words_len: usize,
}

impl Shape {
    /// The shape of the filter `data` (without its tag), and the bytes its lookups read (the
    /// words, then the seeds), or `None` if its trailer is not a Ribbon filter's.
    pub(crate) fn parse(data: &[u8]) -> Option<(Shape, &[u8])> {
        let (&r, rest) = data.split_last()?;
        let (rest, segments) = rest.split_at_checked(rest.len().checked_sub(4)?)?;
        let segments = u32::from_le_bytes(segments.try_into().ok()?) as usize;
        let words_len = rest.len().checked_sub(segments)?;
        let r = u32::from(r);
        let segment_bytes = (8 * r as usize).checked_mul(segments)?;
        if r == 0
            || r > MAX_RESULT_BITS
            || segments == 0
            || words_len == 0
            || words_len % segment_bytes != 0
        {
            return None;
        }
        let blocks = (words_len / segment_bytes) as u64;
        let segments = segments as u64;
        Some((
            Shape {
                blocks,
                segments,
                r,
                words_len,
            },
            rest,
        ))
    }

    /// Fingerprint bits per slot.
    pub(crate) fn result_bits(&self) -> u32 {
        self.r
    }

    /// The key of hash `h`'s row, and the index of the first word of its segment.
    fn row(&self, data: &[u8], h: u64) -> (Row, usize) {
        let segment = segment_of(h, self.segments as usize);
        let seed = data.get(self.words_len + segment).copied().unwrap_or(0);
        let starts = self.blocks * WIDTH as u64 - WIDTH as u64 + 1;
        let first = segment * self.blocks as usize * self.r as usize;
        (row(h, seed, starts, self.r), first)
    }

    /// Whether the key of hash `h` may have been added to the filter of `words` (always, if
    /// it was).
    pub(crate) fn may_contain(&self, words: &[u8], h: u64) -> bool {
        if has_popcnt() {
            // SAFETY: the processor has `popcnt`, checked just above.
            return unsafe { self.may_contain_popcnt(words, h) };
        }
        self.may_contain_with(words, h, parity)
    }

    /// [`Shape::may_contain`] compiled with `popcnt`.
    ///
    /// # Safety
    /// The processor must have `popcnt`.
    #[cfg_attr(target_arch = "x86_64", target_feature(enable = "popcnt"))]
    unsafe fn may_contain_popcnt(&self, words: &[u8], h: u64) -> bool {
        self.may_contain_with(words, h, popcnt_parity)
    }

    /// Every column's equation is worked out, without a branch to leave early: a missing
    /// key fails the first with even odds, and a branch that guesses wrong half the time
    /// costs more than the columns it would save.
    #[inline(always)]
    fn may_contain_with(&self, words: &[u8], h: u64, parity: fn(u64) -> u64) -> bool {
        let words_only = words.get(..self.words_len).unwrap_or_default();
        let word = |i: usize| {
            words_only
                .get(i * 8..i * 8 + 8)
                .and_then(|w| w.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let (
            Row {
                start,
                coeffs,
                result,
            },
            segment,
        ) = self.row(words, h);
        let (r, shift) = (self.r as usize, start % WIDTH);
        let first = segment + start / WIDTH * r;
        let (low, high) = match shift {
            0 => (coeffs, 0),
            s => (coeffs << s, coeffs >> (WIDTH - s)),
        };
        let mut answer = 0u64;
        for j in 0..r {
            let x = (word(first + j) & low) ^ (word(first + r + j) & high);
            answer |= parity(x) << j;
        }
        answer == u64::from(result)
    }

    /// Asks for the memory [`Shape::may_contain`] of hash `h` reads: two blocks of words.
    pub(crate) fn prefetch(&self, words: &[u8], h: u64) {
        let (row, segment) = self.row(words, h);
        let start = (segment + row.start / WIDTH * self.r as usize) * 8;
        let end = (start + 16 * self.r as usize).min(self.words_len);
        if let Some(bytes) = words.get(start..end) {
            crate::prefetch::bytes(bytes);
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::sstable::filter::hash64;

    fn hashes(n: u32, salt: u32) -> Vec<u64> {
        (0..n)
            .map(|i| hash64(&[salt.to_le_bytes(), i.to_le_bytes()].concat()))
            .collect()
    }

    /// The filter's shape and the bytes its lookups read.
    fn open(data: &[u8]) -> (Shape, &[u8]) {
        assert_eq!(data.last(), Some(&RIBBON_TAG));
        Shape::parse(&data[..data.len() - 1]).expect("decoded")
    }

    /// The seed of each segment of `data`.
    fn seeds(data: &[u8]) -> Vec<u8> {
        let (shape, bytes) = open(data);
        bytes[shape.words_len..].to_vec()
    }

    #[test]
    fn every_key_added_is_found() {
        for n in [0, 1, 2, 63, 64, 65, 1000, 50_000, 100_000] {
            for bits in [2.0, 7.5, 10.0, 20.0] {
                let keys = hashes(n, 1);
                let data = build(&keys, bits).expect("built");
                let (f, words) = open(&data);
                for &h in &keys {
                    assert!(f.may_contain(words, h), "{n} keys at {bits}: {h:x} missed");
                    assert!(f.may_contain_with(words, h, parity), "without popcnt");
                }
            }
        }
    }

    #[test]
    fn segments_built_with_later_seeds_find_their_keys() {
        // Every segment starting at seed 5: the seed changes each row, and the lookup must
        // take the same one.
        let keys = hashes(70_000, 6);
        let data = build_from_seed(&keys, 9, 5).expect("built");
        assert!(seeds(&data).iter().all(|&s| s >= 5), "{:?}", seeds(&data));
        assert_eq!(seeds(&data).len(), 3);
        let (f, words) = open(&data);
        assert!(keys.iter().all(|&h| f.may_contain(words, h)));
        // The same filter read as if its seeds were 0 loses keys: the seeds are used.
        let mut zeroed = data.clone();
        let (shape, _) = open(&data);
        zeroed[shape.words_len..shape.words_len + 3].fill(0);
        let (f, words) = open(&zeroed);
        assert!(keys.iter().any(|&h| !f.may_contain(words, h)));
    }

    #[test]
    fn the_slack_lets_most_segments_succeed_at_their_first_seed() {
        // 2 million keys in one band failed at their first seed every time; in segments of
        // 32,768 keys, most succeed at the first.
        let keys = hashes(300_000, 7);
        let data = build(&keys, 10.0).expect("built");
        let seeds = seeds(&data);
        let first = seeds.iter().filter(|&&s| s == 0).count();
        assert!(first * 10 >= seeds.len() * 7, "{seeds:?}");
        let (f, words) = open(&data);
        assert!(f.words_len * 8 <= 300_000 * 10, "{} bytes", f.words_len);
        assert!(keys.iter().all(|&h| f.may_contain(words, h)));
    }

    #[test]
    fn false_positives_match_two_to_the_minus_r() {
        // 200,000 keys probed against a filter of 100,000 at 10 bits per key: 9 fingerprint
        // bits, a rate of 1/512 (about 391 of them), within a few standard deviations.
        let keys = hashes(100_000, 2);
        let data = build(&keys, 10.0).expect("built");
        let (f, words) = open(&data);
        let probes = hashes(200_000, 3);
        let passed = probes.iter().filter(|&&h| f.may_contain(words, h)).count();
        let expected = 200_000.0 / 512.0;
        assert!(
            (passed as f64 - expected).abs() < 4.0 * expected.sqrt(),
            "{passed} false positives, {expected:.0} expected"
        );
        // And the words take no more than the bits asked for.
        assert!(f.words_len * 8 <= 100_000 * 10, "{} bytes", f.words_len);
    }

    #[test]
    fn the_format_is_frozen() {
        // Filters on disk must read the same forever: a change to the rows, the segments or
        // the layout changes these bytes.
        let data = build_from_seed(&hashes(40_000, 8), 7, 2).expect("built");
        // Two segments of 20,000 keys by 1.08: 338 blocks each, of 7 words.
        assert_eq!(data.len(), 2 * 338 * 7 * 8 + 2 + 4 + 2);
        assert_eq!(hash64(&data), 14_097_966_774_955_254_984);
    }

    #[test]
    fn repeated_keys_are_one_equation() {
        let mut keys = hashes(500, 4);
        keys.extend(hashes(500, 4));
        let data = build(&keys, 10.0).expect("built");
        let (f, words) = open(&data);
        assert!(keys.iter().all(|&h| f.may_contain(words, h)));
    }

    #[test]
    fn too_few_bits_give_no_ribbon() {
        assert_eq!(result_bits(1.0), 0);
        assert!(build(&hashes(10, 5), 1.0).is_none());
        assert_eq!(rate(1.0), 1.0);
        assert_eq!(result_bits(100.0), MAX_RESULT_BITS);
    }

    #[test]
    fn damaged_trailers_are_refused() {
        let trailer = |words: usize, seeds: usize, segments: u32, r: u8| {
            let mut d = vec![0u8; words + seeds];
            d.extend_from_slice(&segments.to_le_bytes());
            d.push(r);
            Shape::parse(&d).is_some()
        };
        assert!(trailer(72, 1, 1, 9), "a good one");
        assert!(trailer(144, 2, 2, 9), "two segments");
        assert!(!trailer(71, 1, 1, 9), "words not whole blocks");
        assert!(!trailer(72, 1, 2, 9), "words of one segment, two seeds");
        assert!(!trailer(72, 0, 0, 9), "no segment");
        assert!(!trailer(0, 1, 1, 9), "no words");
        assert!(!trailer(128, 1, 1, 0), "no fingerprint bits");
        assert!(!trailer(136, 1, 1, 17), "too many");
        assert!(!trailer(72, 1, u32::MAX, 9), "more segments than bytes");
        for len in 0..6 {
            assert!(Shape::parse(&vec![9u8; len]).is_none(), "{len} bytes");
        }
    }
}

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
//! Layout: `words: blocks * r * u64 (LE) | seed: u8 | r: u8 | RIBBON_TAG`. Column `j` of
//! slots `64b..64b+63` is word `b * r + j`, bit `i % 64` for slot `i`, so the words a lookup
//! reads lie together. `seed` picks the rows; a build whose equations contradict each other
//! tries the next seed with more slots.

#![deny(clippy::indexing_slicing)]

/// The last byte of a Ribbon filter. Written to disk: frozen.
pub(super) const RIBBON_TAG: u8 = 0xC2;
/// Coefficient bits per row, and slots per block.
const WIDTH: usize = 64;
/// Slots beyond one per key: room for the elimination to succeed (a failure at 8% costs a
/// second build about once in a few thousand tables).
const SLACK: f64 = 0.08;
/// The most fingerprint bits a slot holds.
const MAX_RESULT_BITS: u32 = 16;
/// Seeds tried before a build gives up (and the table gets a Bloom filter).
const ATTEMPTS: u8 = 8;

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

/// The Ribbon filter of the keys of `hashes` with `bits_per_key`, or `None` where it cannot
/// be one (too few bits per key, or no seed's equations agree). Its slots are rounded up to
/// whole blocks: a small filter may take up to 63 slots more than its keys' bits ask.
pub(crate) fn build(hashes: &[u64], bits_per_key: f64) -> Option<Vec<u8>> {
    let r = result_bits(bits_per_key);
    if r == 0 {
        return None;
    }
    let wanted = (hashes.len() as f64 * (1.0 + SLACK)).ceil() as usize;
    let mut sorted = Vec::new();
    for seed in 0..ATTEMPTS {
        // Each retry adds a little room: small filters fail more often.
        let slots = (wanted + wanted * usize::from(seed) / 50).max(WIDTH);
        let blocks = slots.div_ceil(WIDTH);
        by_block(hashes, seed, blocks, &mut sorted);
        if let Some((coeffs, results)) = band(&sorted, seed, blocks * WIDTH, r) {
            let words = match has_popcnt() {
                // SAFETY: the processor has `popcnt`, checked just above.
                true => unsafe { substitute_popcnt(&coeffs, &results, r) },
                false => substitute(&coeffs, &results, r, parity),
            };
            let mut out: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            out.extend_from_slice(&[seed, r as u8, RIBBON_TAG]);
            return Some(out);
        }
    }
    None
}

/// `hashes` into `out` ordered by the block their rows start in (a counting sort), so that
/// the elimination walks the band from one end to the other instead of at random.
fn by_block(hashes: &[u64], seed: u8, blocks: usize, out: &mut Vec<u64>) {
    let starts = (blocks * WIDTH - WIDTH + 1) as u64;
    let block = |h: u64| row(h, seed, starts, 1).start / WIDTH;
    let mut first = vec![0usize; blocks + 1];
    for &h in hashes {
        if let Some(c) = first.get_mut(block(h) + 1) {
            *c += 1;
        }
    }
    for b in 1..first.len() {
        let before = first.get(b - 1).copied().unwrap_or(0);
        if let Some(c) = first.get_mut(b) {
            *c += before;
        }
    }
    out.clear();
    out.resize(hashes.len(), 0);
    for &h in hashes {
        if let Some(at) = first.get_mut(block(h)) {
            if let Some(slot) = out.get_mut(*at) {
                *slot = h;
            }
            *at += 1;
        }
    }
}

/// Eliminates the keys' rows into a band: slot `i` ends with a row whose lowest coefficient
/// is `i`, or none (`0`). `None` when two keys' equations contradict each other.
fn band(hashes: &[u64], seed: u8, slots: usize, r: u32) -> Option<(Vec<u64>, Vec<u16>)> {
    let starts = (slots - WIDTH + 1) as u64;
    let mut coeffs = vec![0u64; slots];
    let mut results = vec![0u16; slots];
    for &h in hashes {
        let Row {
            mut start,
            coeffs: mut c,
            result: mut v,
        } = row(h, seed, starts, r);
        loop {
            // A row's bits stay within its first row's 64 slots, inside the filter.
            let (slot, result) = coeffs.get_mut(start).zip(results.get_mut(start))?;
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
                return None;
            }
            let shift = c.trailing_zeros();
            start += shift as usize;
            c >>= shift;
        }
    }
    Some((coeffs, results))
}

/// [`substitute`] compiled with `popcnt`.
///
/// # Safety
/// The processor must have `popcnt`.
#[cfg_attr(target_arch = "x86_64", target_feature(enable = "popcnt"))]
unsafe fn substitute_popcnt(coeffs: &[u64], results: &[u16], r: u32) -> Vec<u64> {
    substitute(coeffs, results, r, popcnt_parity)
}

/// Solves the band from its last slot back, into the filter's words. A slot without a row
/// is free: it takes 0.
#[inline(always)]
fn substitute(coeffs: &[u64], results: &[u16], r: u32, parity: fn(u64) -> u64) -> Vec<u64> {
    let r = r as usize;
    let mut words = vec![0u64; coeffs.len() / WIDTH * r];
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
            if let Some(block) = words.get_mut(base..base + r) {
                block.copy_from_slice(state.get(..r).unwrap_or_default());
            }
        }
    }
    words
}

/// A Ribbon filter's shape, read from its trailer; its words are the bytes before.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    blocks: u64,
    r: u32,
    seed: u8,
}

impl Shape {
    /// The shape of the filter `data` (without its tag) and its words, or `None` if its
    /// trailer is not a Ribbon filter's.
    pub(crate) fn parse(data: &[u8]) -> Option<(Shape, &[u8])> {
        let (&r, rest) = data.split_last()?;
        let (&seed, words) = rest.split_last()?;
        let r = u32::from(r);
        let block_bytes = 8 * r as usize;
        if r == 0 || r > MAX_RESULT_BITS || words.is_empty() || words.len() % block_bytes != 0 {
            return None;
        }
        let blocks = (words.len() / block_bytes) as u64;
        Some((Shape { blocks, r, seed }, words))
    }

    /// Fingerprint bits per slot.
    pub(crate) fn result_bits(&self) -> u32 {
        self.r
    }

    fn row(&self, h: u64) -> Row {
        let starts = self.blocks * WIDTH as u64 - WIDTH as u64 + 1;
        row(h, self.seed, starts, self.r)
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
        let word = |i: usize| {
            words
                .get(i * 8..i * 8 + 8)
                .and_then(|w| w.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let Row {
            start,
            coeffs,
            result,
        } = self.row(h);
        let (r, shift) = (self.r as usize, start % WIDTH);
        let first = start / WIDTH * r;
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
        let start = self.row(h).start / WIDTH * 8 * self.r as usize;
        let end = (start + 16 * self.r as usize).min(words.len());
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

    #[test]
    fn every_key_added_is_found() {
        for n in [0, 1, 2, 63, 64, 65, 1000, 50_000] {
            for bits in [2.0, 7.5, 10.0, 20.0] {
                let keys = hashes(n, 1);
                let data = build(&keys, bits).expect("built");
                let (f, words) = Shape::parse(&data[..data.len() - 1]).expect("decoded");
                assert_eq!(f.r, result_bits(bits));
                for &h in &keys {
                    assert!(f.may_contain(words, h), "{n} keys at {bits}: {h:x} missed");
                }
            }
        }
    }

    #[test]
    fn false_positives_match_two_to_the_minus_r() {
        // 200,000 keys probed against a filter of 100,000: at 10 bits per key r is 9, and
        // the rate should be 1/512 (about 391 of them), within a few standard deviations.
        let keys = hashes(100_000, 2);
        let data = build(&keys, 10.0).expect("built");
        let (f, words) = Shape::parse(&data[..data.len() - 1]).expect("decoded");
        let probes = hashes(200_000, 3);
        let passed = probes.iter().filter(|&&h| f.may_contain(words, h)).count();
        let expected = 200_000.0 / 512.0;
        assert!(
            (passed as f64 - expected).abs() < 4.0 * expected.sqrt(),
            "{passed} false positives, {expected:.0} expected"
        );
        // And the words take no more than the bits asked for.
        assert!(words.len() * 8 <= 100_000 * 10, "{} bytes", words.len());
    }

    #[test]
    fn contradicting_equations_fail_the_seed_not_the_filter() {
        // Keys repeated are one equation; a filter of many repeats still holds them all.
        let mut keys = hashes(500, 4);
        keys.extend(hashes(500, 4));
        let data = build(&keys, 10.0).expect("built");
        let (f, words) = Shape::parse(&data[..data.len() - 1]).expect("decoded");
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
        assert!(Shape::parse(&[]).is_none());
        assert!(Shape::parse(&[0, 9]).is_none());
        // 9 result bits need words in multiples of 72 bytes.
        let mut data = vec![0u8; 71];
        data.extend_from_slice(&[0, 9]);
        assert!(Shape::parse(&data).is_none());
        let mut data = vec![0u8; 72];
        data.extend_from_slice(&[0, 17]);
        assert!(Shape::parse(&data).is_none());
    }
}

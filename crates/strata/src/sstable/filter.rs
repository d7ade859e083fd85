//! The filters of an SST: one over every user key of the file, or one per partition.
//!
//! Three layouts, told apart by the last byte:
//! - **Ribbon** (written today under [`crate::FilterFormat::Ribbon`], the default): see
//!   `ribbon.rs`; about a fifth of a Bloom filter's false positives for the same bits.
//! - **Cache-local** (written today): `lines: n * 64 bytes | k: u8 | LOCAL_TAG`. A key's
//!   64-bit hash picks one 64-byte line by multiply-and-shift (`(high 32 bits * n) >> 32`),
//!   and its `k` probes all fall in that line, so a probe costs one cache miss, not `k`, and
//!   no division.
//! - **Spread** (tables written before): `bits | k: u8`, `k` in 1..=30. Probe `i` of a key
//!   tests bit `(h1 + i * h2) mod m`, with `h1`, `h2` the halves of its hash.

#![deny(clippy::indexing_slicing)]

use super::ribbon::{self, RIBBON_TAG};
use crate::error::DecodeError;
use crate::filter_policy::FilterFormat;

/// The last byte of a cache-local filter; a spread filter's last byte is its `k` (1..=30).
/// Written to disk: frozen.
const LOCAL_TAG: u8 = 0xC1;
/// Bytes in a cache-local filter's line: a cache line.
const LINE_BYTES: usize = 64;
const LINE_BITS: u32 = 512;
/// Advances the state a cache-local filter draws its probes from: each probe is the top nine
/// bits of the state. An odd multiplier (2^32 over the golden ratio), so no state collapses.
/// Frozen for the format.
const PROBE_STEP: u32 = 0x9E37_79B9;

/// The number of probes a spread filter of `bits_per_key` makes.
fn spread_probes(bits_per_key: f64) -> u32 {
    (bits_per_key * std::f64::consts::LN_2)
        .round()
        .clamp(1.0, 30.0) as u32
}

/// The false-positive rate of a cache-local filter of `bits_per_key` making `k` probes.
///
/// The keys in a line follow a Poisson law of mean `512 / bits_per_key`; a line of `n`
/// keys has each of its bits set with probability `1 - (1 - 1/512)^(k n)`, and a missing
/// key passes when its `k` probes all meet set bits.
fn local_rate(bits_per_key: f64, k: u32) -> f64 {
    let mean = f64::from(LINE_BITS) / bits_per_key;
    let unset_per_probe = 1.0 - 1.0 / f64::from(LINE_BITS);
    // The law's mass lies within a few standard deviations of its mean.
    let spread = 8.0 * mean.sqrt() + 8.0;
    let (first, last) = ((mean - spread).max(0.0) as u64, (mean + spread) as u64);
    let mut rate = 0.0;
    // P(n) = e^-mean mean^n / n!, built from the log to stay in range for large means.
    for n in first..=last {
        let n = n as f64;
        let log_p = -mean + n * mean.ln() - ln_factorial(n);
        let set = 1.0 - unset_per_probe.powf(f64::from(k) * n);
        rate += log_p.exp() * set.powi(k as i32);
    }
    rate.min(1.0)
}

/// `ln(n!)`: summed for small `n`, by Stirling's series beyond.
fn ln_factorial(n: f64) -> f64 {
    if n < 32.0 {
        return (2..=n as u64).map(|i| (i as f64).ln()).sum();
    }
    let pi2 = 2.0 * std::f64::consts::PI;
    n * n.ln() - n + 0.5 * (pi2 * n).ln() + 1.0 / (12.0 * n) - 1.0 / (360.0 * n * n * n)
}

/// The number of probes a cache-local filter of `bits_per_key` makes: the one of least
/// false positives, or as few as come within 1% of it. Fewer than a spread filter's
/// `bits_per_key * ln 2`, since the keys of a crowded line share its 512 bits.
pub(crate) fn probes(bits_per_key: f64) -> u32 {
    // Every count a filter may hold: the best strays far from a spread filter's with many
    // bits per key (14 at 30, where a spread filter makes 21).
    let rates: Vec<(u32, f64)> = (1..=30).map(|k| (k, local_rate(bits_per_key, k))).collect();
    let best = rates.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    // Of probe counts within 1% of the best rate, the fewest: each probe is work.
    rates
        .iter()
        .find(|r| r.1 <= best * 1.01)
        .map_or_else(|| spread_probes(bits_per_key), |r| r.0)
}

/// The false-positive rate of a filter of `bits_per_key` as written today (1 without bits:
/// such a filter passes every key).
///
/// The sum behind it takes some microseconds, and statistics ask it for every table: each
/// thread remembers the rates it worked out, by bits per key (few distinct values: one
/// under the uniform policy, one per level under Monkey's).
pub(crate) fn false_positive_rate(bits_per_key: f64) -> f64 {
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static RATES: RefCell<HashMap<u64, f64>> = RefCell::new(HashMap::new());
    }
    if bits_per_key <= 0.0 {
        return 1.0;
    }
    RATES.with(|rates| {
        let mut rates = rates.borrow_mut();
        if rates.len() >= 1024 {
            rates.clear();
        }
        *rates
            .entry(bits_per_key.to_bits())
            .or_insert_with(|| local_rate(bits_per_key, probes(bits_per_key)))
    })
}

/// The false-positive rate of a filter of `format` (decided: `Auto` counts as Bloom) with
/// `bits_per_key`.
pub(crate) fn format_rate(format: FilterFormat, bits_per_key: f64) -> f64 {
    let bloom = false_positive_rate(bits_per_key);
    match format {
        FilterFormat::Ribbon if bits_per_key > 0.0 => bloom.min(ribbon::rate(bits_per_key)),
        _ => bloom,
    }
}

/// A 64-bit hash of a byte string (multiply-mix over 8-byte words). Written into filters: the
/// function is frozen for the filter format.
pub(crate) fn hash64(data: &[u8]) -> u64 {
    const K0: u64 = 0xa076_1d64_78bd_642f;
    const K1: u64 = 0xe703_7ed1_a0b4_28db;
    fn mix(a: u64, b: u64) -> u64 {
        let r = u128::from(a).wrapping_mul(u128::from(b));
        (r as u64) ^ ((r >> 64) as u64)
    }
    let mut h = mix(data.len() as u64 ^ K0, K1);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = mix(h ^ u64::from_le_bytes(w), K1 ^ K0.rotate_left(17));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        for (d, s) in w.iter_mut().zip(rest) {
            *d = *s;
        }
        h = mix(h ^ u64::from_le_bytes(w), K0);
    }
    mix(h, K1)
}

/// The line of a cache-local filter of `lines` lines that a key of hash `h` probes.
fn line_of(h: u64, lines: u64) -> usize {
    (((h >> 32) * lines) >> 32) as usize
}

/// The bits a key of hash `h` probes within its line, `k` of them, each below 512.
fn line_probes(h: u64, k: u8) -> impl Iterator<Item = u32> {
    let mut state = h as u32;
    (0..k).map(move |_| {
        let bit = state >> 23;
        state = state.wrapping_mul(PROBE_STEP);
        bit
    })
}

/// Collects key hashes and builds the filter bytes.
pub(crate) struct FilterBuilder {
    bits_per_key: f64,
    format: FilterFormat,
    k: u32,
    hashes: Vec<u64>,
}

impl FilterBuilder {
    /// A builder of filters of `format` with `bits_per_key` (0: a filter of 64 set bits,
    /// which passes every key).
    pub(crate) fn new(bits_per_key: f64, format: FilterFormat) -> Self {
        FilterBuilder {
            bits_per_key,
            format,
            k: if bits_per_key > 0.0 {
                probes(bits_per_key)
            } else {
                1
            },
            hashes: Vec::new(),
        }
    }

    /// Distinct keys added since the last [`FilterBuilder::finish`] (a key added twice in a
    /// row counts once).
    pub(crate) fn keys(&self) -> usize {
        self.hashes.len()
    }

    pub(crate) fn add_key(&mut self, user_key: &[u8]) {
        let h = hash64(user_key);
        if self.hashes.last() != Some(&h) {
            self.hashes.push(h);
        }
    }

    /// The filter of the keys added since the last call: a Ribbon filter where the format
    /// asks for one and the bits allow it, else a cache-local Bloom filter.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        if self.bits_per_key <= 0.0 {
            self.hashes.clear();
            return vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1];
        }
        // Below a few bits per key a Bloom filter's rate can be the lower one. `Auto` left
        // undecided (a flush) writes Bloom filters.
        let ribbon_pays =
            || ribbon::rate(self.bits_per_key) < false_positive_rate(self.bits_per_key);
        if self.format == FilterFormat::Ribbon
            && ribbon_pays()
            && let Some(filter) = ribbon::build(&self.hashes, self.bits_per_key)
        {
            self.hashes.clear();
            return filter;
        }
        let bits = (self.hashes.len() as f64 * self.bits_per_key).ceil() as u64;
        let lines = bits.div_ceil(u64::from(LINE_BITS)).max(1);
        let bytes = lines as usize * LINE_BYTES;
        let mut out = vec![0u8; bytes + 2];
        let k = self.k as u8;
        for &h in &self.hashes {
            let base = line_of(h, lines) * LINE_BYTES;
            for bit in line_probes(h, k) {
                if let Some(b) = out.get_mut(base + (bit / 8) as usize) {
                    *b |= 1 << (bit % 8);
                }
            }
        }
        if let Some(tail) = out.get_mut(bytes..) {
            tail.copy_from_slice(&[k, LOCAL_TAG]);
        }
        self.hashes.clear();
        out
    }
}

/// A cache line of a cache-local filter, aligned as one, so that a probe misses once.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; LINE_BYTES]);

/// Where a filter's bits are held: a cache-local filter's lines on cache-line boundaries, a
/// spread filter's bytes as read.
enum Bits {
    Lines(Vec<Line>),
    Bytes(Vec<u8>),
}

/// A decoded filter that owns its bits.
pub(crate) struct BloomFilter {
    bits: Bits,
    layout: Layout,
    k: u8,
}

/// How a filter's bits are probed.
#[derive(Clone, Copy)]
enum Layout {
    /// Cache-local, of this many lines.
    Local { lines: u64 },
    /// Spread over this many bits.
    Spread { bits: u64 },
    /// A Ribbon filter of this shape.
    Ribbon(ribbon::Shape),
}

impl BloomFilter {
    pub(crate) fn new(data: Vec<u8>) -> Result<BloomFilter, DecodeError> {
        let FilterRef {
            data: bytes,
            layout,
            k,
        } = FilterRef::new(&data)?;
        let bits = match layout {
            Layout::Local { .. } => Bits::Lines(
                bytes
                    .chunks_exact(LINE_BYTES)
                    .map(|c| {
                        let mut line = Line([0; LINE_BYTES]);
                        line.0.copy_from_slice(c);
                        line
                    })
                    .collect(),
            ),
            Layout::Spread { .. } | Layout::Ribbon(_) => Bits::Bytes(bytes.to_vec()),
        };
        Ok(BloomFilter { bits, layout, k })
    }

    /// Bytes of the filter's bits.
    pub(crate) fn size(&self) -> usize {
        self.bytes().len()
    }

    fn bytes(&self) -> &[u8] {
        match &self.bits {
            Bits::Lines(lines) => {
                // SAFETY: `Line` is 64 bytes with no padding (`repr(C)` over `[u8; 64]`), so
                // the lines are `lines.len() * 64` initialized bytes in one allocation.
                unsafe {
                    std::slice::from_raw_parts(lines.as_ptr().cast::<u8>(), size_of_val(&**lines))
                }
            }
            Bits::Bytes(b) => b,
        }
    }

    /// The filter, borrowed.
    pub(crate) fn view(&self) -> FilterRef<'_> {
        FilterRef {
            data: self.bytes(),
            layout: self.layout,
            k: self.k,
        }
    }
}

/// A decoded filter over borrowed bytes (a partition in a cached block).
#[derive(Clone, Copy)]
pub(crate) struct FilterRef<'a> {
    /// The bits, without the trailing `k` and tag.
    data: &'a [u8],
    layout: Layout,
    k: u8,
}

impl<'a> FilterRef<'a> {
    /// The filter stored in `stored`, of either layout.
    pub(crate) fn new(stored: &'a [u8]) -> Result<FilterRef<'a>, DecodeError> {
        let (&last, rest) = stored.split_last().ok_or(DecodeError("empty filter"))?;
        let (k, data, layout) = if last == RIBBON_TAG {
            let (shape, words) =
                ribbon::Shape::parse(rest).ok_or(DecodeError("Ribbon filter of a bad shape"))?;
            (shape.result_bits() as u8, words, Layout::Ribbon(shape))
        } else if last == LOCAL_TAG {
            let (&k, data) = rest
                .split_last()
                .ok_or(DecodeError("filter without bits"))?;
            if data.is_empty() || data.len() % LINE_BYTES != 0 {
                return Err(DecodeError("cache-local filter of partial lines"));
            }
            let lines = (data.len() / LINE_BYTES) as u64;
            (k, data, Layout::Local { lines })
        } else {
            let bits = rest.len() as u64 * 8;
            (last, rest, Layout::Spread { bits })
        };
        if k == 0 || k > 30 || data.is_empty() {
            return Err(DecodeError("filter has a bad probe count or no bits"));
        }
        Ok(FilterRef { data, layout, k })
    }

    /// The layout's name, as `strata inspect` shows it.
    pub(crate) fn layout_name(&self) -> &'static str {
        match self.layout {
            Layout::Local { .. } => "cache-local",
            Layout::Spread { .. } => "spread",
            Layout::Ribbon(_) => "ribbon",
        }
    }

    /// The line of a cache-local filter that a key of hash `h` probes.
    fn line(&self, h: u64, lines: u64) -> Option<&'a [u8; LINE_BYTES]> {
        let start = line_of(h, lines) * LINE_BYTES;
        self.data.get(start..start + LINE_BYTES)?.try_into().ok()
    }

    /// Hints that [`FilterRef::may_contain`] of `user_key` will come soon: asks for the
    /// memory it probes.
    pub(crate) fn prefetch(&self, user_key: &[u8]) {
        let h = hash64(user_key);
        match self.layout {
            Layout::Local { lines } => {
                if let Some(line) = self.line(h, lines) {
                    crate::prefetch::line(line);
                }
            }
            Layout::Spread { bits } => {
                let (mut pos, delta) = (h & 0xffff_ffff, (h >> 32) | 1);
                for _ in 0..self.k {
                    let bit = pos % bits;
                    if let Some(b) = self.data.get((bit / 8) as usize) {
                        crate::prefetch::line(b);
                    }
                    pos = pos.wrapping_add(delta);
                }
            }
            Layout::Ribbon(shape) => shape.prefetch(self.data, h),
        }
    }

    /// False only when the key is certainly absent from the file.
    pub(crate) fn may_contain(&self, user_key: &[u8]) -> bool {
        let h = hash64(user_key);
        match self.layout {
            Layout::Local { lines } => {
                let Some(line) = self.line(h, lines) else {
                    return false;
                };
                line_probes(h, self.k).all(|bit| {
                    line.get((bit / 8) as usize)
                        .is_some_and(|b| b & (1 << (bit % 8)) != 0)
                })
            }
            Layout::Spread { bits } => {
                let (mut pos, delta) = (h & 0xffff_ffff, (h >> 32) | 1);
                for _ in 0..self.k {
                    let bit = pos % bits;
                    match self.data.get((bit / 8) as usize) {
                        Some(b) if b & (1 << (bit % 8)) != 0 => {}
                        _ => return false,
                    }
                    pos = pos.wrapping_add(delta);
                }
                true
            }
            Layout::Ribbon(shape) => shape.may_contain(self.data, h),
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn ribbon_rates_are_two_to_the_minus_their_fingerprint_bits() {
        // 10 bits per key: a Ribbon filter's 9 fingerprint bits, 1/512.
        assert_eq!(format_rate(FilterFormat::Ribbon, 10.0), 1.0 / 512.0);
        assert!(format_rate(FilterFormat::Bloom, 10.0) > 0.009);
        // Where a Bloom filter's rate is the lower, a table gets one.
        assert_eq!(
            format_rate(FilterFormat::Ribbon, 2.0),
            false_positive_rate(2.0)
        );
    }

    #[test]
    fn no_false_negatives() {
        for bits_per_key in [1.0, 4.5, 10.0, 33.0] {
            let mut b = FilterBuilder::new(bits_per_key, FilterFormat::Bloom);
            for i in 0..10_000u32 {
                b.add_key(&i.to_be_bytes());
            }
            let f = BloomFilter::new(b.finish()).unwrap();
            for i in 0..10_000u32 {
                assert!(
                    f.view().may_contain(&i.to_be_bytes()),
                    "{bits_per_key}: {i}"
                );
            }
        }
    }

    /// The measured rate of a cache-local filter is within 10% of the rate the cost model and
    /// Monkey's allocation are given for it, and near a spread filter's: 0.96% against 0.82%
    /// at 10 bits per key.
    #[test]
    fn false_positive_rate_is_within_a_tenth_of_theory() {
        // (bits per key, the most the cache-local rate may be over a spread filter's): a
        // line's 512 bits crowd with many bits per key.
        for (bits_per_key, over_spread) in [(5.0, 1.1), (10.0, 1.25), (16.0, 2.0)] {
            let n = 100_000u64;
            let mut b = FilterBuilder::new(bits_per_key, FilterFormat::Bloom);
            for i in 0..n {
                b.add_key(format!("key{i:016}").as_bytes());
            }
            let f = BloomFilter::new(b.finish()).unwrap();
            let tries = 2_000_000u64;
            let passed = (0..tries)
                .filter(|i| f.view().may_contain(format!("other{i:014}").as_bytes()))
                .count();
            let fp = passed as f64 / tries as f64;
            let theory = false_positive_rate(bits_per_key);
            assert!(
                (fp - theory).abs() <= 0.1 * theory,
                "bits/key {bits_per_key}: measured {fp:.5}, theory {theory:.5}"
            );
            // A spread filter's rate with its best k, `(1 - e^(-k/b))^k`.
            let k = (bits_per_key * std::f64::consts::LN_2).round();
            let spread = (1.0 - (-k / bits_per_key).exp()).powf(k);
            assert!(
                fp < over_spread * spread,
                "bits/key {bits_per_key}: {fp:.5} vs {spread:.5}"
            );
        }
    }

    #[test]
    fn a_lookup_probes_one_aligned_line() {
        let mut b = FilterBuilder::new(10.0, FilterFormat::Bloom);
        for i in 0..1_000u32 {
            b.add_key(&i.to_be_bytes());
        }
        let stored = b.finish();
        let f = BloomFilter::new(stored.clone()).unwrap();
        assert_eq!(f.view().data.as_ptr() as usize % LINE_BYTES, 0);
        // Each member's bits all lie in one line: clearing every other line keeps it.
        let lines = (stored.len() - 2) / LINE_BYTES;
        for i in 0..1_000u32 {
            let h = hash64(&i.to_be_bytes());
            let line = line_of(h, lines as u64);
            let mut only = vec![0u8; stored.len()];
            let range = line * LINE_BYTES..(line + 1) * LINE_BYTES;
            only[range.clone()].copy_from_slice(&stored[range]);
            only[stored.len() - 2..].copy_from_slice(&stored[stored.len() - 2..]);
            assert!(FilterRef::new(&only).unwrap().may_contain(&i.to_be_bytes()));
        }
    }

    /// Filters of tables written before the cache-local layout: `bits | k`, probe `i` at
    /// `(h1 + i * h2) mod m` (docs/format.md).
    #[test]
    fn spread_filters_of_older_tables_still_answer() {
        let key = b"older";
        let h = hash64(key);
        let bit = (h & 0xffff_ffff) % 64;
        let mut stored = vec![0u8; 8];
        stored[(bit / 8) as usize] |= 1 << (bit % 8);
        stored.push(1);
        assert!(FilterRef::new(&stored).unwrap().may_contain(key));
        let f = BloomFilter::new(stored.clone()).unwrap();
        assert!(f.view().may_contain(key));
        assert_eq!(f.size(), 8);
        stored[(bit / 8) as usize] = 0;
        assert!(!FilterRef::new(&stored).unwrap().may_contain(key));
        // The filter of a table given no bits passes every key.
        let all = FilterBuilder::new(0.0, FilterFormat::Bloom).finish();
        assert!(BloomFilter::new(all).unwrap().view().may_contain(key));
    }

    #[test]
    fn rejects_malformed_filters() {
        assert!(BloomFilter::new(vec![]).is_err());
        assert!(BloomFilter::new(vec![0xff, 0]).is_err());
        assert!(BloomFilter::new(vec![0xff, 31]).is_err());
        assert!(BloomFilter::new(vec![6]).is_err());
        assert!(BloomFilter::new(vec![LOCAL_TAG]).is_err());
        assert!(BloomFilter::new(vec![6, LOCAL_TAG]).is_err());
        let mut partial = vec![0xffu8; LINE_BYTES - 1];
        partial.extend([6, LOCAL_TAG]);
        assert!(BloomFilter::new(partial).is_err());
        for k in [0u8, 31] {
            let mut bad_k = vec![0xffu8; LINE_BYTES];
            bad_k.extend([k, LOCAL_TAG]);
            assert!(BloomFilter::new(bad_k).is_err());
        }
    }

    /// Probe counts computed apart from this code (the same Poisson sum, in Python with
    /// `lgamma`): the best within 1% of the least rate, from few bits per key to many.
    #[test]
    fn probe_counts_are_the_best_for_their_bits() {
        assert_eq!(probes(10.0), 6);
        assert_eq!(probes(30.0), 14);
        assert_eq!(probes(40.0), 16);
    }

    #[test]
    fn probes_are_fewer_than_a_spread_filters_and_rates_fall_with_bits() {
        assert_eq!(false_positive_rate(0.0), 1.0);
        let mut last = 1.0;
        for b in [2.0, 5.0, 8.0, 10.0, 16.0, 24.0] {
            let r = false_positive_rate(b);
            assert!(r < last, "{b}: {r} after {last}");
            last = r;
            assert!(probes(b) <= spread_probes(b));
        }
    }
}

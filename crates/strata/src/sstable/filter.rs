//! The Bloom filters of an SST: one over every user key of the file, or one per partition.
//!
//! Layout: `bits: ceil(m / 8) bytes | k: u8`. Probe `i` of a key sets bit
//! `(h1 + i * h2) mod m`, with `h1`, `h2` the halves of the key's 64-bit hash.

#![deny(clippy::indexing_slicing)]

use crate::error::DecodeError;

/// The number of probes a filter of `bits_per_key` makes, as the filter builder chooses it.
pub(crate) fn probes(bits_per_key: f64) -> u32 {
    (bits_per_key * std::f64::consts::LN_2)
        .round()
        .clamp(1.0, 30.0) as u32
}

/// The false-positive rate of a filter of `bits_per_key` (1 without bits: such a filter
/// passes every key).
pub(crate) fn false_positive_rate(bits_per_key: f64) -> f64 {
    if bits_per_key <= 0.0 {
        return 1.0;
    }
    let k = f64::from(probes(bits_per_key));
    (1.0 - (-k / bits_per_key).exp()).powf(k)
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

/// Collects key hashes and builds the filter bytes.
pub(crate) struct FilterBuilder {
    bits_per_key: f64,
    hashes: Vec<u64>,
}

impl FilterBuilder {
    /// A builder of filters with `bits_per_key` (0: a filter of 64 set bits, which passes
    /// every key).
    pub(crate) fn new(bits_per_key: f64) -> Self {
        FilterBuilder {
            bits_per_key,
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

    pub(crate) fn finish(&mut self) -> Vec<u8> {
        let k = probes(self.bits_per_key) as usize;
        if self.bits_per_key <= 0.0 {
            self.hashes.clear();
            return vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1];
        }
        let bits = ((self.hashes.len() as f64 * self.bits_per_key).ceil() as usize).max(64);
        let bytes = bits.div_ceil(8);
        let bits = bytes * 8;
        let mut out = vec![0u8; bytes + 1];
        for &h in &self.hashes {
            let (mut pos, delta) = (h & 0xffff_ffff, (h >> 32) | 1);
            for _ in 0..k {
                let bit = (pos % bits as u64) as usize;
                if let Some(b) = out.get_mut(bit / 8) {
                    *b |= 1 << (bit % 8);
                }
                pos = pos.wrapping_add(delta);
            }
        }
        if let Some(last) = out.last_mut() {
            *last = k as u8;
        }
        self.hashes.clear();
        out
    }
}

/// A decoded filter that owns its bytes.
pub(crate) struct BloomFilter {
    data: Vec<u8>,
    bits: u64,
    k: u8,
}

impl BloomFilter {
    pub(crate) fn new(mut data: Vec<u8>) -> Result<BloomFilter, DecodeError> {
        let FilterRef { bits, k, .. } = FilterRef::new(&data)?;
        data.pop();
        Ok(BloomFilter { data, bits, k })
    }

    /// Bytes of the filter's bits.
    pub(crate) fn size(&self) -> usize {
        self.data.len()
    }

    /// The filter, borrowed.
    pub(crate) fn view(&self) -> FilterRef<'_> {
        FilterRef {
            data: &self.data,
            bits: self.bits,
            k: self.k,
        }
    }
}

/// A decoded filter over borrowed bytes (a partition in a cached block).
#[derive(Clone, Copy)]
pub(crate) struct FilterRef<'a> {
    data: &'a [u8],
    bits: u64,
    k: u8,
}

impl<'a> FilterRef<'a> {
    /// The filter stored in `stored` (`bits | k`).
    pub(crate) fn new(stored: &'a [u8]) -> Result<FilterRef<'a>, DecodeError> {
        let (&k, data) = stored.split_last().ok_or(DecodeError("empty filter"))?;
        if k == 0 || k > 30 || data.is_empty() {
            return Err(DecodeError("filter has a bad probe count or no bits"));
        }
        Ok(FilterRef {
            data,
            bits: data.len() as u64 * 8,
            k,
        })
    }

    /// Hints that [`FilterRef::may_contain`] of `user_key` will come soon: asks for the
    /// line of every bit it probes.
    pub(crate) fn prefetch(&self, user_key: &[u8]) {
        let h = hash64(user_key);
        let (mut pos, delta) = (h & 0xffff_ffff, (h >> 32) | 1);
        for _ in 0..self.k {
            let bit = pos % self.bits;
            if let Some(b) = self.data.get((bit / 8) as usize) {
                crate::prefetch::line(b);
            }
            pos = pos.wrapping_add(delta);
        }
    }

    /// False only when the key is certainly absent from the file.
    pub(crate) fn may_contain(&self, user_key: &[u8]) -> bool {
        let h = hash64(user_key);
        let (mut pos, delta) = (h & 0xffff_ffff, (h >> 32) | 1);
        for _ in 0..self.k {
            let bit = pos % self.bits;
            match self.data.get((bit / 8) as usize) {
                Some(b) if b & (1 << (bit % 8)) != 0 => {}
                _ => return false,
            }
            pos = pos.wrapping_add(delta);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives() {
        let mut b = FilterBuilder::new(10.0);
        for i in 0..10_000u32 {
            b.add_key(&i.to_be_bytes());
        }
        let f = BloomFilter::new(b.finish()).unwrap();
        for i in 0..10_000u32 {
            assert!(f.view().may_contain(&i.to_be_bytes()));
        }
    }

    #[test]
    fn false_positive_rate_is_within_twice_theory() {
        for bits_per_key in [5usize, 10, 16] {
            let n = 20_000u64;
            let mut b = FilterBuilder::new(bits_per_key as f64);
            for i in 0..n {
                b.add_key(format!("key{i:016}").as_bytes());
            }
            let f = BloomFilter::new(b.finish()).unwrap();
            let probes = 100_000u64;
            let fp = (0..probes)
                .filter(|i| f.view().may_contain(format!("other{i:014}").as_bytes()))
                .count() as f64
                / probes as f64;
            let k = f.k as f64;
            let theory = (1.0 - (-k / bits_per_key as f64).exp()).powf(k);
            assert!(
                fp <= 2.0 * theory,
                "bits/key {bits_per_key}: fp {fp:.5} vs theory {theory:.5}"
            );
        }
    }

    #[test]
    fn rejects_malformed_filters() {
        assert!(BloomFilter::new(vec![]).is_err());
        assert!(BloomFilter::new(vec![0xff, 0]).is_err());
        assert!(BloomFilter::new(vec![0xff, 31]).is_err());
        assert!(BloomFilter::new(vec![6]).is_err());
    }
}

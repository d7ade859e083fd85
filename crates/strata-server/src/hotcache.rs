//! The hot-key cache in front of the engine (the seed server's LRU cache): recently read or
//! written keys with their values, or the knowledge that they are absent.
//!
//! Eviction approximates LRU with CLOCK: every entry has a referenced bit, set when it is
//! read; a hand sweeps the shard's slots, clearing set bits and evicting the first entry
//! whose bit is already clear. An eviction is O(1) amortized. Coherence is the caller's duty:
//! every write of a key updates or drops its entry while holding that key's stripe lock, and
//! a read that misses fills the cache under the same lock, so the cache never returns a stale
//! value.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

const SHARDS: usize = 16;
const ENTRY_OVERHEAD_BYTES: usize = 64;

struct Slot {
    key: Box<[u8]>,
    value: Option<Vec<u8>>,
    referenced: bool,
}

/// A fast hash for the shard maps, eight bytes at a time (keys come from clients, but a
/// collision costs only time within one shard's table).
#[derive(Default)]
struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes(
                <[u8; 8]>::try_from(w).unwrap_or_default(),
            ));
        }
        let mut last = [0u8; 8];
        for (d, b) in last.iter_mut().zip(words.remainder()) {
            *d = *b;
        }
        self.write_u64(u64::from_le_bytes(last) ^ bytes.len() as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

#[derive(Default)]
struct Shard {
    /// Key to its index in `slots`.
    map: HashMap<Box<[u8]>, usize, std::hash::BuildHasherDefault<WordHasher>>,
    /// `None`: a free slot, listed in `free`.
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    hand: usize,
    bytes: usize,
}

impl Shard {
    fn remove(&mut self, key: &[u8]) {
        if let Some(i) = self.map.remove(key)
            && let Some(slot) = self.slots.get_mut(i).and_then(Option::take)
        {
            self.bytes -= charge(&slot.key, &slot.value);
            self.free.push(i);
        }
    }

    /// Evicts one entry chosen by the clock hand; false when the shard is empty.
    fn evict_one(&mut self) -> bool {
        if self.map.is_empty() {
            return false;
        }
        // Two sweeps at most: the first clears every referenced bit.
        for _ in 0..2 * self.slots.len() {
            let i = self.hand % self.slots.len();
            self.hand = i + 1;
            match self.slots.get_mut(i) {
                Some(Some(slot)) if slot.referenced => slot.referenced = false,
                Some(Some(slot)) => {
                    let key = slot.key.clone();
                    self.remove(&key);
                    return true;
                }
                _ => {}
            }
        }
        false
    }
}

pub struct HotCache {
    shards: Vec<Mutex<Shard>>,
    shard_capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

fn charge(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD_BYTES
}

impl HotCache {
    pub fn new(capacity_bytes: usize) -> Self {
        HotCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_capacity: capacity_bytes / SHARDS,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard> {
        let mut h = WordHasher(0xcbf2_9ce4_8422_2325);
        std::hash::Hasher::write(&mut h, key);
        // The high bits: the maps inside use the low ones.
        self.shards[(std::hash::Hasher::finish(&h) >> 58) as usize % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `Some(Some(v))`: cached value; `Some(None)`: cached as absent; `None`: not cached.
    pub fn get(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if self.shard_capacity == 0 {
            return None;
        }
        let mut guard = self.shard(key);
        let shard = &mut *guard;
        let found = shard
            .map
            .get(key)
            .and_then(|&i| shard.slots.get_mut(i))
            .and_then(Option::as_mut)
            .map(|slot| {
                slot.referenced = true;
                slot.value.clone()
            });
        match found {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        found
    }

    /// Records the current value of `key` (`None`: absent). Requires: the caller holds the
    /// key's stripe lock and has just read or written this value in the engine.
    pub fn put(&self, key: &[u8], value: Option<Vec<u8>>) {
        let c = charge(key, &value);
        if c > self.shard_capacity {
            self.remove(key);
            return;
        }
        let mut shard = self.shard(key);
        shard.remove(key);
        while shard.bytes + c > self.shard_capacity && shard.evict_one() {}
        shard.bytes += c;
        let slot = Slot {
            key: key.into(),
            value,
            referenced: false,
        };
        let i = match shard.free.pop() {
            Some(i) => {
                shard.slots[i] = Some(slot);
                i
            }
            None => {
                shard.slots.push(Some(slot));
                shard.slots.len() - 1
            }
        };
        shard.map.insert(key.into(), i);
    }

    pub fn remove(&self, key: &[u8]) {
        self.shard(key).remove(key);
    }

    pub fn clear(&self) {
        for s in &self.shards {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            *s = Shard::default();
        }
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    pub fn bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).bytes)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_values_and_absence_within_budget() {
        let c = HotCache::new(16 * 1024);
        c.put(b"a", Some(b"1".to_vec()));
        c.put(b"b", None);
        assert_eq!(c.get(b"a"), Some(Some(b"1".to_vec())));
        assert_eq!(c.get(b"b"), Some(None));
        assert_eq!(c.get(b"c"), None);
        for i in 0..10_000u32 {
            c.put(&i.to_be_bytes(), Some(vec![0; 100]));
        }
        assert!(c.bytes() <= 16 * 1024);
        c.remove(b"a");
        assert_eq!(c.get(b"a"), None);
        assert!(c.hits() >= 2 && c.misses() >= 2);
    }

    #[test]
    fn clock_keeps_entries_that_are_read() {
        // One shard's worth of budget per key group; the read key survives the churn.
        let c = HotCache::new(SHARDS * 4 * (ENTRY_OVERHEAD_BYTES + 8));
        let hot = 7u32.to_be_bytes();
        c.put(&hot, Some(vec![1; 4]));
        for i in 1000..20_000u32 {
            assert!(c.get(&hot).is_some(), "evicted after {i}");
            c.put(&i.to_be_bytes(), Some(vec![0; 4]));
        }
        assert!(c.bytes() <= SHARDS * 4 * (ENTRY_OVERHEAD_BYTES + 8));
    }
}

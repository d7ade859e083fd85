//! The hot-key cache in front of the engine (the seed server's LRU cache): recently read or
//! written keys with their values, or the knowledge that they are absent.
//!
//! Eviction approximates LRU the way Redis does: it samples a few entries of the shard and
//! evicts the one used longest ago. Coherence is the caller's duty: every write of a key
//! updates or drops its entry while holding that key's stripe lock, and a read that misses
//! fills the cache under the same lock, so the cache never returns a stale value.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

const SHARDS: usize = 16;
const SAMPLE: usize = 5;
const ENTRY_OVERHEAD_BYTES: usize = 64;

struct Entry {
    value: Option<Vec<u8>>,
    last_used: u64,
}

#[derive(Default)]
struct Shard {
    map: HashMap<Vec<u8>, Entry>,
    bytes: usize,
}

pub struct HotCache {
    shards: Vec<Mutex<Shard>>,
    shard_capacity: usize,
    clock: AtomicU64,
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
            clock: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in key {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        &self.shards[(h as usize) % SHARDS]
    }

    fn tick(&self) -> u64 {
        // Relaxed: an approximate recency order is all eviction needs.
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// `Some(Some(v))`: cached value; `Some(None)`: cached as absent; `None`: not cached.
    pub fn get(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if self.shard_capacity == 0 {
            return None;
        }
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let now = self.tick();
        let found = shard.map.get_mut(key).map(|e| {
            e.last_used = now;
            e.value.clone()
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
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let now = self.tick();
        if let Some(old) = shard.map.remove(key) {
            shard.bytes -= charge(key, &old.value);
        }
        while shard.bytes + c > self.shard_capacity && !shard.map.is_empty() {
            let victim = shard
                .map
                .iter()
                .take(SAMPLE)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone());
            if let Some(k) = victim
                && let Some(e) = shard.map.remove(&k)
            {
                shard.bytes -= charge(&k, &e.value);
            }
        }
        shard.bytes += c;
        shard.map.insert(
            key.to_vec(),
            Entry {
                value,
                last_used: now,
            },
        );
    }

    pub fn remove(&self, key: &[u8]) {
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = shard.map.remove(key) {
            shard.bytes -= charge(key, &old.value);
        }
    }

    pub fn clear(&self) {
        for s in &self.shards {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            s.map.clear();
            s.bytes = 0;
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
}

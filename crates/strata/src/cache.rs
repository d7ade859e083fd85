//! The block cache (the buffer pool): decoded data blocks and lower index blocks, bounded in
//! bytes, split into shards that each evict with the CLOCK algorithm. (Filters and root index
//! blocks are held by their open tables instead.)
//!
//! A lookup takes its shard's lock for reading only and marks the entry referenced with an
//! atomic; an insert takes the write lock and sweeps the clock hand, giving each referenced
//! entry a second chance, until the shard fits its budget.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::sstable::block::Block;

const SHARDS: usize = 16;

/// A cached block.
pub(crate) type CacheValue = Arc<Block>;

/// The bytes a block is charged: its contents and the slot's bookkeeping.
fn charge(block: &Block) -> usize {
    64 + block.size()
}

/// (file number, block offset).
pub(crate) type CacheKey = (u64, u64);

/// A multiply-rotate hasher for the cache's integer keys; SipHash's resistance to chosen
/// keys buys nothing here (file numbers and offsets are ours) and cost a tenth of a lookup.
#[derive(Default, Clone, Copy)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type KeyMap = HashMap<CacheKey, usize, std::hash::BuildHasherDefault<KeyHasher>>;

struct Slot {
    key: CacheKey,
    value: CacheValue,
    charge: usize,
    referenced: AtomicBool,
}

#[derive(Default)]
struct Shard {
    map: KeyMap,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    hand: usize,
    usage: usize,
}

impl Shard {
    fn evict_one(&mut self) -> bool {
        let n = self.slots.len();
        // Two full turns suffice: the first clears every reference bit.
        for _ in 0..2 * n + 1 {
            if n == 0 {
                return false;
            }
            let i = self.hand % n;
            self.hand = (i + 1) % n;
            let Some(slot) = self.slots.get_mut(i) else {
                continue;
            };
            let Some(s) = slot else { continue };
            // Relaxed: the bit is a hint; a lost update only changes which entry goes first.
            if s.referenced.swap(false, Ordering::Relaxed) {
                continue;
            }
            if let Some(s) = slot.take() {
                self.map.remove(&s.key);
                self.usage -= s.charge;
                self.free.push(i);
                return true;
            }
        }
        false
    }
}

/// A sharded CLOCK cache with a byte budget.
pub(crate) struct BlockCache {
    shards: Vec<RwLock<Shard>>,
    shard_capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl BlockCache {
    pub(crate) fn new(capacity_bytes: usize) -> Self {
        BlockCache {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
            shard_capacity: capacity_bytes / SHARDS,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &CacheKey) -> &RwLock<Shard> {
        let h = key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (key.1 >> 6).wrapping_mul(0xff51_afd7_ed55_8ccd);
        let i = (h >> 59) as usize % SHARDS;
        // SHARDS > 0, so the index is always in bounds.
        &self.shards[i]
    }

    pub(crate) fn get(&self, key: &CacheKey) -> Option<CacheValue> {
        let shard = self.shard(key).read().unwrap_or_else(|e| e.into_inner());
        let found = shard
            .map
            .get(key)
            .and_then(|&i| shard.slots.get(i))
            .and_then(Option::as_ref)
            .map(|s| {
                s.referenced.store(true, Ordering::Relaxed);
                s.value.clone()
            });
        // Relaxed: statistics counters with no ordering duty.
        match found {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        found
    }

    pub(crate) fn insert(&self, key: CacheKey, value: CacheValue) {
        let charge = charge(&value);
        if charge > self.shard_capacity {
            return;
        }
        let mut shard = self.shard(&key).write().unwrap_or_else(|e| e.into_inner());
        if let Some(&i) = shard.map.get(&key) {
            if let Some(Some(old)) = shard.slots.get(i) {
                let old_charge = old.charge;
                shard.usage -= old_charge;
            }
            shard.usage += charge;
            if let Some(slot) = shard.slots.get_mut(i) {
                *slot = Some(Slot {
                    key,
                    value,
                    charge,
                    referenced: AtomicBool::new(false),
                });
            }
        } else {
            while shard.usage + charge > self.shard_capacity {
                if !shard.evict_one() {
                    break;
                }
            }
            let slot = Some(Slot {
                key,
                value,
                charge,
                referenced: AtomicBool::new(false),
            });
            let i = match shard.free.pop() {
                Some(i) => {
                    if let Some(s) = shard.slots.get_mut(i) {
                        *s = slot;
                    }
                    i
                }
                None => {
                    shard.slots.push(slot);
                    shard.slots.len() - 1
                }
            };
            shard.map.insert(key, i);
            shard.usage += charge;
        }
    }

    /// Drops every entry of a file (after the file is deleted).
    pub(crate) fn erase_file(&self, file: u64) {
        for shard in &self.shards {
            let mut s = shard.write().unwrap_or_else(|e| e.into_inner());
            let victims: Vec<(CacheKey, usize)> = s
                .map
                .iter()
                .filter(|(k, _)| k.0 == file)
                .map(|(k, i)| (*k, *i))
                .collect();
            for (k, i) in victims {
                s.map.remove(&k);
                if let Some(slot) = s.slots.get_mut(i).and_then(Option::take) {
                    s.usage -= slot.charge;
                    s.free.push(i);
                }
            }
        }
    }

    pub(crate) fn usage(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()).usage)
            .sum()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.shard_capacity * SHARDS
    }

    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub(crate) fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(bytes: usize) -> CacheValue {
        let mut data = vec![0u8; bytes];
        data.extend_from_slice(&0u32.to_le_bytes());
        data.extend_from_slice(&1u32.to_le_bytes());
        Arc::new(Block::new(data).unwrap())
    }

    #[test]
    fn stays_within_budget_and_counts_hits() {
        let cache = BlockCache::new(16 * 64 * 1024);
        for i in 0..1000u64 {
            cache.insert((1, i * 4096), block(4000));
        }
        assert!(cache.usage() <= cache.capacity());
        assert!(cache.get(&(1, 999 * 4096)).is_some());
        assert!(cache.get(&(2, 0)).is_none());
        assert_eq!(cache.hits(), 1);
        assert_eq!(cache.misses(), 1);
    }

    #[test]
    fn clock_gives_referenced_entries_a_second_chance() {
        // One shard's worth: find keys that land in the same shard.
        let cache = BlockCache::new(SHARDS * 3 * (4000 + 64 + 8));
        let shard_of = |k: &CacheKey| cache.shard(k) as *const _;
        let target = shard_of(&(7, 0));
        let keys: Vec<CacheKey> = (0..100_000u64)
            .map(|i| (7, i * 4096))
            .filter(|k| shard_of(k) == target)
            .take(4)
            .collect();
        for k in &keys[..3] {
            cache.insert(*k, block(4000));
        }
        assert!(cache.get(&keys[0]).is_some()); // referenced: survives the next eviction
        cache.insert(keys[3], block(4000));
        assert!(cache.get(&keys[0]).is_some());
        assert!(
            cache.get(&keys[1]).is_none(),
            "the unreferenced oldest entry goes"
        );
        assert!(cache.get(&keys[3]).is_some());
    }

    #[test]
    fn erase_file_removes_only_that_file() {
        let cache = BlockCache::new(1 << 20);
        cache.insert((1, 0), block(100));
        cache.insert((2, 0), block(100));
        cache.erase_file(1);
        assert!(cache.get(&(1, 0)).is_none());
        assert!(cache.get(&(2, 0)).is_some());
    }
}

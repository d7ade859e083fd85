//! The block cache (the buffer pool): decoded data blocks, lower index blocks and the
//! partitions of partitioned filters, bounded in bytes, split into shards that each evict
//! with the CLOCK algorithm. (Whole filters, filter indexes and root index blocks are held by
//! their open tables instead.)
//!
//! A lookup takes its shard's lock for reading only and marks the entry referenced with an
//! atomic; an insert takes the write lock and sweeps the clock hand, giving each referenced
//! entry a second chance, until the shard fits its budget.
//!
//! Blocks come in two priorities. Metadata (filter partitions and index blocks below the
//! root) is passed through by every lookup of its table, a data block by the lookups of its
//! few keys: the hand passes over metadata while metadata holds at most half a shard, so a
//! run of data blocks read once (a scan that fills the cache, random reads far larger than
//! the cache) cannot push the metadata out, as RocksDB's high-priority pool keeps index and
//! filter blocks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::sstable::block::Block;

const SHARDS: usize = 16;

/// The share of a shard that metadata keeps from data blocks: half, as RocksDB's
/// `high_pri_pool_ratio` defaults.
const META_SHARE_DIVISOR: usize = 2;

/// What a block is to the cache: see the module's comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Priority {
    Data,
    Meta,
}

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

/// Each key's block and slot, in the map itself, so that a lookup reads the table and the
/// block and nothing between.
struct Entry {
    block: CacheValue,
    slot: u32,
}

type KeyMap = HashMap<CacheKey, Entry, std::hash::BuildHasherDefault<KeyHasher>>;

/// What the clock hand needs of an entry: the key to evict it by and its charge.
struct Slot {
    key: CacheKey,
    charge: usize,
    priority: Priority,
}

#[derive(Default)]
struct Shard {
    map: KeyMap,
    slots: Vec<Option<Slot>>,
    /// The clock's referenced bits, one per slot, side by side: a hit sets one without
    /// touching the slot.
    referenced: Vec<AtomicBool>,
    free: Vec<u32>,
    hand: usize,
    usage: usize,
    /// The part of `usage` that metadata takes.
    meta_usage: usize,
}

impl Shard {
    /// Evicts one entry of the clock. Metadata is passed over while it holds at most
    /// `meta_share` bytes, unless nothing else is left to evict.
    fn evict_one(&mut self, meta_share: usize) -> bool {
        let spare_meta = self.meta_usage <= meta_share;
        self.evict_one_sparing(spare_meta) || (spare_meta && self.evict_one_sparing(false))
    }

    fn evict_one_sparing(&mut self, spare_meta: bool) -> bool {
        let n = self.slots.len();
        // Two full turns suffice: the first clears every reference bit.
        for _ in 0..2 * n + 1 {
            if n == 0 {
                return false;
            }
            let i = self.hand % n;
            self.hand = (i + 1) % n;
            let spared = |s: &Option<Slot>| {
                spare_meta && s.as_ref().is_some_and(|s| s.priority == Priority::Meta)
            };
            if self.slots.get(i).is_none_or(spared) {
                continue;
            }
            // Relaxed: the bit is a hint; a lost update only changes which entry goes first.
            if self
                .referenced
                .get(i)
                .is_some_and(|r| r.swap(false, Ordering::Relaxed))
            {
                continue;
            }
            if self.slots.get(i).is_some_and(Option::is_some) {
                self.remove_slot(i as u32);
                return true;
            }
        }
        false
    }

    /// Puts a new key in a free slot.
    fn add(&mut self, key: CacheKey, block: CacheValue, charge: usize, priority: Priority) {
        let slot = Some(Slot {
            key,
            charge,
            priority,
        });
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i as usize) {
                    *s = slot;
                }
                if let Some(r) = self.referenced.get(i as usize) {
                    r.store(false, Ordering::Relaxed);
                }
                i
            }
            None => {
                self.slots.push(slot);
                self.referenced.push(AtomicBool::new(false));
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(key, Entry { block, slot: i });
        self.usage += charge;
        if priority == Priority::Meta {
            self.meta_usage += charge;
        }
    }

    /// Takes a slot's entry out of the map and frees the slot.
    fn remove_slot(&mut self, i: u32) {
        if let Some(slot) = self.slots.get_mut(i as usize).and_then(Option::take) {
            self.map.remove(&slot.key);
            self.usage -= slot.charge;
            if slot.priority == Priority::Meta {
                self.meta_usage -= slot.charge;
            }
            self.free.push(i);
        }
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

    /// Runs `f` on the cached block of `key`, if there is one, with the shard locked for
    /// reading; counts the hit or the miss.
    fn lookup<R>(&self, key: &CacheKey, f: impl FnOnce(&CacheValue) -> R) -> Option<R> {
        let shard = self.shard(key).read().unwrap_or_else(|e| e.into_inner());
        let found = shard.map.get(key).map(|e| {
            if let Some(r) = shard.referenced.get(e.slot as usize) {
                r.store(true, Ordering::Relaxed);
            }
            f(&e.block)
        });
        // Relaxed: statistics counters with no ordering duty.
        match found {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        found
    }

    /// Runs `f` on the cached block of `key`, if there is one, without taking a reference
    /// to it (an atomic write to a line that is rarely in cache): the shard stays locked
    /// for reading meanwhile, so `f` must be short and must not use the cache. A point
    /// lookup's search of one block is what it is for.
    pub(crate) fn with<R>(&self, key: &CacheKey, f: impl FnOnce(&Block) -> R) -> Option<R> {
        self.lookup(key, |b| f(b))
    }

    /// Whether the cache holds `key`, counting neither a hit nor a miss, nor marking the
    /// block used: for a caller that reads the block in when it lacks it, and counts that
    /// read with [`BlockCache::count_misses`].
    pub(crate) fn contains(&self, key: &CacheKey) -> bool {
        let shard = self.shard(key).read().unwrap_or_else(|e| e.into_inner());
        shard.map.contains_key(key)
    }

    /// Counts `n` blocks looked for and read from their files, not through [`BlockCache::get`].
    pub(crate) fn count_misses(&self, n: u64) {
        // Relaxed: a statistics counter with no ordering duty.
        self.misses.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self, key: &CacheKey) -> Option<CacheValue> {
        self.lookup(key, Arc::clone)
    }

    pub(crate) fn insert(&self, key: CacheKey, value: CacheValue) {
        self.insert_as(key, value, Priority::Data);
    }

    /// Caches `value` under `key` with `priority`.
    pub(crate) fn insert_as(&self, key: CacheKey, value: CacheValue, priority: Priority) {
        let charge = charge(&value);
        if charge > self.shard_capacity {
            return;
        }
        let mut shard = self.shard(&key).write().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = shard.map.get(&key).map(|e| e.slot) {
            shard.remove_slot(slot);
        }
        let meta_share = self.shard_capacity / META_SHARE_DIVISOR;
        while shard.usage + charge > self.shard_capacity {
            if !shard.evict_one(meta_share) {
                break;
            }
        }
        shard.add(key, value, charge, priority);
    }

    /// Drops every entry of a file (after the file is deleted).
    pub(crate) fn erase_file(&self, file: u64) {
        for shard in &self.shards {
            let mut s = shard.write().unwrap_or_else(|e| e.into_inner());
            let victims: Vec<u32> = s
                .map
                .iter()
                .filter(|(k, _)| k.0 == file)
                .map(|(_, e)| e.slot)
                .collect();
            for i in victims {
                s.remove_slot(i);
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
    fn data_blocks_read_once_do_not_push_out_metadata_within_its_share() {
        let cache = BlockCache::new(16 * 64 * 1024);
        // Metadata of a few tables, a small part of the cache, never looked up again.
        let meta: Vec<CacheKey> = (0..32u64).map(|i| (1, i * 4096)).collect();
        for k in &meta {
            cache.insert_as(*k, block(4000), Priority::Meta);
        }
        // Ten times the cache of data blocks, each read once.
        for i in 0..2_500u64 {
            cache.insert((2, i * 4096), block(4000));
        }
        assert!(cache.usage() <= cache.capacity());
        for k in &meta {
            assert!(
                cache.get(k).is_some(),
                "metadata block {k:?} was pushed out"
            );
        }
        // Data blocks still come and go: the first ones are gone.
        assert!(cache.get(&(2, 0)).is_none());
    }

    #[test]
    fn metadata_usage_follows_every_removal() {
        let cache = BlockCache::new(16 * 64 * 1024);
        let meta_usage = || -> usize {
            cache
                .shards
                .iter()
                .map(|s| s.read().unwrap().meta_usage)
                .sum()
        };
        let one = charge(&block(4000));
        cache.insert_as((1, 0), block(4000), Priority::Meta);
        assert_eq!(meta_usage(), one);
        // Cached again as data: it is data now.
        cache.insert((1, 0), block(4000));
        assert_eq!(meta_usage(), 0);
        cache.insert_as((2, 0), block(4000), Priority::Meta);
        cache.insert_as((2, 4096), block(4000), Priority::Meta);
        cache.erase_file(2);
        assert_eq!(meta_usage(), 0);
        assert_eq!(cache.usage(), one);
    }

    #[test]
    fn metadata_past_its_share_is_evicted_like_data() {
        let cache = BlockCache::new(16 * 64 * 1024);
        for i in 0..2_500u64 {
            cache.insert_as((1, i * 4096), block(4000), Priority::Meta);
        }
        assert!(cache.usage() <= cache.capacity());
        assert!(cache.get(&(1, 0)).is_none());
        assert!(cache.get(&(1, 2_499 * 4096)).is_some());
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

//! The hot-key cache in front of the engine (the seed server's LRU cache): keys that are read
//! again and again, with their values or the knowledge that they are absent.
//!
//! Eviction approximates LRU with CLOCK: every entry has a referenced bit, set when it is
//! read; a hand sweeps the shard's slots, clearing set bits and evicting the first entry
//! whose bit is already clear. An eviction is O(1) amortized.
//!
//! Admission follows TinyLFU's doorkeeper: a read that misses fills the cache only when the
//! key already missed once in the current window, which a one-bit-per-hash sketch remembers.
//! Under uniform traffic over more keys than fit, almost nothing is admitted, so misses cost
//! a lookup and not an insert and an eviction each; a key that is hot misses twice and then
//! stays.
//!
//! Coherence is the caller's duty: every write of a key drops its entry while holding that
//! key's stripe lock, and a read that misses fills the cache under the same lock, so the
//! cache never returns a stale value.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hashbrown::HashTable;

const SHARDS: usize = 16;
const ENTRY_OVERHEAD_BYTES: usize = 64;
/// Doorkeeper bits per entry the shard's budget could hold (of 64-byte values).
const DOORKEEPER_BITS_PER_ENTRY: usize = 8;

struct Slot {
    hash: u64,
    key: Box<[u8]>,
    value: Option<Vec<u8>>,
    referenced: bool,
}

/// A hash of the key, eight bytes at a time. Keys come from clients, but a collision costs
/// only time within one shard's table.
fn hash(key: &[u8]) -> u64 {
    let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        h = step(
            h,
            u64::from_le_bytes(<[u8; 8]>::try_from(w).unwrap_or_default()),
        );
    }
    let mut last = [0u8; 8];
    for (d, b) in last.iter_mut().zip(words.remainder()) {
        *d = *b;
    }
    h = step(h, u64::from_le_bytes(last) ^ key.len() as u64);
    h ^ (h >> 29)
}

/// The keys that missed once in the current window, as one bit per hash.
struct Doorkeeper {
    bits: Vec<u64>,
    /// Keys recorded since the last reset; the window ends at `window`.
    recorded: usize,
    window: usize,
}

impl Doorkeeper {
    fn new(window: usize) -> Self {
        let words = (window * DOORKEEPER_BITS_PER_ENTRY).div_ceil(64).max(1);
        Doorkeeper {
            bits: vec![0; words.next_power_of_two()],
            recorded: 0,
            window: window.max(1),
        }
    }

    /// Records `hash`; true when it was already there.
    fn check_and_record(&mut self, hash: u64) -> bool {
        // Remixed: the table uses the hash's low and top bits, the shard choice bits 40-43.
        let mixed = (hash ^ (hash >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let bit = (mixed >> 32) as usize & (self.bits.len() * 64 - 1);
        let (word, mask) = (bit / 64, 1u64 << (bit % 64));
        let Some(w) = self.bits.get_mut(word) else {
            return false;
        };
        if *w & mask != 0 {
            return true;
        }
        *w |= mask;
        self.recorded += 1;
        if self.recorded >= self.window {
            self.bits.fill(0);
            self.recorded = 0;
        }
        false
    }
}

struct Shard {
    /// Indexes into `slots`, found by the slot's hash and key.
    table: HashTable<u32>,
    /// `None`: a free slot, listed in `free`.
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    hand: usize,
    bytes: usize,
    doorkeeper: Doorkeeper,
}

impl Shard {
    fn new(capacity_bytes: usize) -> Self {
        Shard {
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            bytes: 0,
            doorkeeper: Doorkeeper::new(capacity_bytes / (ENTRY_OVERHEAD_BYTES + 64)),
        }
    }

    /// A test for the table: does the slot an index names hold `key`?
    fn holds<'a>(slots: &'a [Option<Slot>], key: &'a [u8]) -> impl Fn(&u32) -> bool + 'a {
        move |&i| {
            slots
                .get(i as usize)
                .and_then(Option::as_ref)
                .is_some_and(|s| *s.key == *key)
        }
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        self.table
            .find(hash, Self::holds(&self.slots, key))
            .copied()
    }

    /// Frees slot `i`, which the table no longer names.
    fn free_slot(&mut self, i: u32) {
        if let Some(slot) = self.slots.get_mut(i as usize).and_then(Option::take) {
            self.bytes -= charge(&slot.key, &slot.value);
            self.free.push(i);
        }
    }

    fn remove(&mut self, hash: u64, key: &[u8]) {
        let found = self.table.find_entry(hash, Self::holds(&self.slots, key));
        if let Ok(entry) = found {
            let (i, _) = entry.remove();
            self.free_slot(i);
        }
    }

    /// Evicts one entry chosen by the clock hand; false when the shard is empty.
    fn evict_one(&mut self) -> bool {
        if self.table.is_empty() {
            return false;
        }
        // Two sweeps at most: the first clears every referenced bit.
        for _ in 0..2 * self.slots.len() {
            let i = self.hand % self.slots.len();
            self.hand = i + 1;
            match self.slots.get_mut(i) {
                Some(Some(slot)) if slot.referenced => slot.referenced = false,
                Some(Some(slot)) => {
                    let hash = slot.hash;
                    let i = i as u32;
                    if let Ok(entry) = self.table.find_entry(hash, |&j| j == i) {
                        entry.remove();
                    }
                    self.free_slot(i);
                    return true;
                }
                _ => {}
            }
        }
        false
    }

    fn insert(&mut self, slot: Slot) {
        let hash = slot.hash;
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i as usize) {
                    *s = Some(slot);
                }
                i
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        self.table.insert_unique(hash, i, |&j| {
            slots
                .get(j as usize)
                .and_then(Option::as_ref)
                .map_or(0, |s| s.hash)
        });
    }
}

/// Lookups per window over which the hit rate is judged.
const WINDOW_LOOKUPS: u64 = 1024;
/// A window that hits fewer than one lookup in this many turns the cache to sampling.
const LOW_HIT_RATIO: u64 = 16;
/// While sampling, one read in this many consults the cache.
const SAMPLE_EVERY: u64 = 16;

pub struct HotCache {
    shards: Vec<Mutex<Shard>>,
    shard_capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Reads that did not consult the cache.
    bypassed: AtomicU64,
    window_lookups: AtomicU64,
    /// `hits` when the current window began.
    hits_at_window_start: AtomicU64,
    /// Set while the last window's hit rate was below one in [`LOW_HIT_RATIO`].
    sampling: AtomicBool,
    /// Turned off: a replica, whose keys change under it by its primary's batches.
    off: AtomicBool,
}

fn charge(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD_BYTES
}

impl HotCache {
    pub fn new(capacity_bytes: usize) -> Self {
        let shard_capacity = capacity_bytes / SHARDS;
        HotCache {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Shard::new(shard_capacity)))
                .collect(),
            shard_capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
            window_lookups: AtomicU64::new(0),
            hits_at_window_start: AtomicU64::new(0),
            sampling: AtomicBool::new(false),
            off: AtomicBool::new(false),
        }
    }

    /// Turns the cache off (emptied) or on again. Off, no read consults it and nothing fills
    /// it: a replica's writes come from its primary, below the commands that keep it right.
    pub fn set_off(&self, off: bool) {
        // SeqCst: a read that sees the cache on after it went off would fill it.
        self.off.store(off, Ordering::SeqCst);
        self.clear();
    }

    /// Whether a read should consult the cache. Under uniform traffic over more keys than fit
    /// the cache hits almost never, and a lookup and a doorkeeper check per read cost a tenth
    /// of a read's time for nothing; so while the hit rate stays under one in
    /// [`LOW_HIT_RATIO`], only one read in [`SAMPLE_EVERY`] consults it. Those reads keep
    /// measuring the hit rate and keep offering keys to the doorkeeper, so hot keys still get
    /// in and turn sampling off. A read that skips the cache reads the engine, which is
    /// always right.
    pub fn consult(&self) -> bool {
        if self.shard_capacity == 0 || self.off.load(Ordering::SeqCst) {
            return false;
        }
        // Relaxed: counters and a hint; a stale flag costs one lookup more or less.
        if !self.sampling.load(Ordering::Relaxed) {
            return true;
        }
        let n = self.bypassed.fetch_add(1, Ordering::Relaxed);
        n.is_multiple_of(SAMPLE_EVERY)
    }

    /// Counts a lookup (already counted in `hits` or `misses`) into the current window and,
    /// when the window is full, judges its hit rate.
    fn count_lookup(&self) {
        if self.window_lookups.fetch_add(1, Ordering::Relaxed) + 1 >= WINDOW_LOOKUPS {
            self.window_lookups.store(0, Ordering::Relaxed);
            let now = self.hits.load(Ordering::Relaxed);
            // Saturating: two threads closing a window at once may swap out of order.
            let hits = now.saturating_sub(self.hits_at_window_start.swap(now, Ordering::Relaxed));
            self.sampling
                .store(hits * LOW_HIT_RATIO < WINDOW_LOOKUPS, Ordering::Relaxed);
        }
    }

    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        // Not the low bits (a table's bucket) nor the top seven (its tag, which filters the
        // candidates a lookup compares): keys in one shard must differ in those.
        self.shards[(hash >> 40) as usize % SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `Some(Some(v))`: cached value; `Some(None)`: cached as absent; `None`: not cached.
    pub fn get(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if self.shard_capacity == 0 || self.off.load(Ordering::SeqCst) {
            return None;
        }
        let hash = hash(key);
        let mut shard = self.shard(hash);
        let found = shard.find(hash, key).and_then(|i| {
            let slot = shard.slots.get_mut(i as usize)?.as_mut()?;
            slot.referenced = true;
            Some(slot.value.clone())
        });
        drop(shard);
        match found {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        self.count_lookup();
        found
    }

    /// Offers the value of `key` just read from the engine after a miss (`None`: absent); it
    /// is kept if the key missed before in the doorkeeper's window. Requires: the caller holds
    /// the key's stripe lock.
    pub fn fill(&self, key: &[u8], value: &Option<Vec<u8>>) {
        let c = charge(key, value);
        if c > self.shard_capacity || self.off.load(Ordering::SeqCst) {
            return;
        }
        let hash = hash(key);
        let mut shard = self.shard(hash);
        if !shard.doorkeeper.check_and_record(hash) {
            return;
        }
        shard.remove(hash, key);
        while shard.bytes + c > self.shard_capacity && shard.evict_one() {}
        shard.bytes += c;
        shard.insert(Slot {
            hash,
            key: key.into(),
            value: value.clone(),
            referenced: false,
        });
    }

    pub fn remove(&self, key: &[u8]) {
        if self.shard_capacity == 0 {
            return;
        }
        let hash = hash(key);
        self.shard(hash).remove(hash, key);
    }

    pub fn clear(&self) {
        for s in &self.shards {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            *s = Shard::new(self.shard_capacity);
        }
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Reads that skipped the cache while it was sampling.
    pub fn bypassed(&self) -> u64 {
        self.bypassed.load(Ordering::Relaxed)
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

    /// Fills twice: the first miss only passes the doorkeeper.
    fn fill(c: &HotCache, key: &[u8], value: Option<Vec<u8>>) {
        c.fill(key, &value);
        c.fill(key, &value);
    }

    #[test]
    fn caches_values_and_absence_within_budget() {
        let c = HotCache::new(16 * 1024);
        fill(&c, b"a", Some(b"1".to_vec()));
        fill(&c, b"b", None);
        assert_eq!(c.get(b"a"), Some(Some(b"1".to_vec())));
        assert_eq!(c.get(b"b"), Some(None));
        assert_eq!(c.get(b"c"), None);
        for i in 0..10_000u32 {
            fill(&c, &i.to_be_bytes(), Some(vec![0; 100]));
        }
        assert!(c.bytes() <= 16 * 1024);
        c.remove(b"a");
        assert_eq!(c.get(b"a"), None);
        assert!(c.hits() >= 2 && c.misses() >= 2);
    }

    #[test]
    fn a_key_seen_once_is_not_admitted() {
        let c = HotCache::new(1 << 20);
        c.fill(b"once", &Some(b"v".to_vec()));
        assert_eq!(c.get(b"once"), None);
        c.fill(b"once", &Some(b"v".to_vec()));
        assert_eq!(c.get(b"once"), Some(Some(b"v".to_vec())));
        // Of a stream of keys that never repeat, only the doorkeeper's false positives get in.
        for i in 0..100_000u32 {
            c.fill(&i.to_be_bytes(), &Some(vec![0; 100]));
        }
        let admitted = (99_000..100_000u32)
            .filter(|i| c.get(&i.to_be_bytes()).is_some())
            .count();
        assert!(admitted < 200, "{admitted} of the last 1000 admitted");
    }

    #[test]
    fn clock_keeps_entries_that_are_read() {
        // One shard's worth of budget per key group; the read key survives the churn.
        let c = HotCache::new(SHARDS * 4 * (ENTRY_OVERHEAD_BYTES + 8));
        let hot = 7u32.to_be_bytes();
        fill(&c, &hot, Some(vec![1; 4]));
        for i in 1000..20_000u32 {
            assert!(c.get(&hot).is_some(), "evicted after {i}");
            fill(&c, &i.to_be_bytes(), Some(vec![0; 4]));
        }
        assert!(c.bytes() <= SHARDS * 4 * (ENTRY_OVERHEAD_BYTES + 8));
    }

    /// Reads through the cache as the server does: consult, else the engine (here: the key
    /// itself as its value).
    fn read(c: &HotCache, key: &[u8]) -> bool {
        if !c.consult() {
            return false;
        }
        if c.get(key).is_some() {
            return true;
        }
        c.fill(key, &Some(key.to_vec()));
        false
    }

    #[test]
    fn uniform_traffic_turns_to_sampling_and_a_hot_key_turns_it_back() {
        let c = HotCache::new(1 << 20);
        for i in 0..20_000u32 {
            read(&c, &i.to_be_bytes());
        }
        assert!(c.sampling.load(Ordering::Relaxed));
        let consulted = (0..1600u32).filter(|_| c.consult()).count();
        assert_eq!(consulted, 100, "one read in {SAMPLE_EVERY}");
        // One key read again and again: sampled reads admit it and then hit, and the next
        // window judged turns sampling off.
        let mut hits = 0;
        for _ in 0..40_000 {
            hits += usize::from(read(&c, b"hot"));
        }
        assert!(!c.sampling.load(Ordering::Relaxed));
        assert!(hits > 20_000, "{hits} hits");
    }
}

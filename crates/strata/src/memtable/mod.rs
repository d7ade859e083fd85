//! The memtable: recent writes, sorted, in memory.
//!
//! It is a skiplist keyed by internal key, with a back link at level 0. Writers add nodes
//! from many threads at once; one thread at a time links them into the list (see below), with
//! release stores that readers, who take no lock, acquire.
//! Nodes are never removed, only freed with the whole memtable, so a reader that holds an
//! `Arc<MemTable>` can follow any pointer it loaded.
//!
//! Nodes live in an arena: one allocation holds a node's header, its tower of next pointers
//! (only as tall as the node), its internal key and its value, so a step of a search touches
//! one cache line or two rather than a node and a separate key; and the whole memtable is
//! given back to the operating system chunk by chunk rather than freed node by node.
//!
//! Point lookups do not walk the list: every node is also pushed onto the chain of a hash
//! bucket chosen by its user key, newest first, so a lookup reads a bucket and a node or two
//! instead of a dozen nodes scattered over the whole table. Iterators use the list.
//!
//! Since lookups need only the hash chains, a new node joins the list later, in a batch (the
//! idea of FloDB's hash-table buffer in front of its skiplist). An insert into a list of half
//! a million nodes visits about thirty of them, each a cache miss. A batch is sorted first
//! and inserted in key order, each insert starting from the previous one's position, so it
//! visits only the few nodes between neighbours. The fewer nodes the list holds per pending
//! node, the fewer lie between neighbours, so a batch waits until it is as large as the list
//! (within bounds): inserting it then costs a node or two per insert. Whoever needs the
//! list whole (a new iterator, and so a flush) inserts the nodes still pending first.
//!
//! Nodes are handled as raw pointers into the arena throughout (never `&Node`), so that
//! reading the tower and the bytes after the header stays within the allocation's provenance.

mod arena;
mod iter;
mod skiplist;
#[cfg(test)]
mod tests;

use std::cmp::Ordering as CmpOrdering;
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::comparator::KeyOrder;
use crate::key::{FileNumber, SeqNo, ValueKind, pack_trailer, parse_internal_key};
use crate::mutex::lock;
use crate::range_del::{Fragmented, RangeTombstone};

use arena::{Arena, Pages};
pub(crate) use arena::{ChunkPool, Recycling};
use skiplist::{Link, MAX_HEIGHT, Node, sort_prefix};

/// Hash buckets per byte of write buffer: about one bucket per entry of 128 bytes.
const BYTES_PER_BUCKET: usize = 128;

/// A hash of a user key for the bucket index (not for anything adversarial: a chain only
/// grows with the entries of one memtable).
fn hash_user_key(key: &[u8]) -> u64 {
    const M: u64 = 0x2127_599b_f432_5c37;
    let mut h = 0x9e37_79b9_7f4a_7c15 ^ (key.len() as u64).wrapping_mul(M);
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        h = (h ^ u64::from_le_bytes(<[u8; 8]>::try_from(w).unwrap_or_default())).wrapping_mul(M);
        h ^= h >> 29;
    }
    let mut last = [0u8; 8];
    for (d, b) in last.iter_mut().zip(words.remainder()) {
        *d = *b;
    }
    h = (h ^ u64::from_le_bytes(last)).wrapping_mul(M);
    h ^ (h >> 32)
}

/// Nodes that wait outside the list before a writer inserts them as one sorted batch: as
/// many as the list holds (half the memtable's entries), within these bounds. The upper bound
/// caps how long one write, or one new iterator, spends inserting.
const LIST_BATCH: usize = 32768;
const MAX_LIST_BATCH: usize = 4 * LIST_BATCH;
/// One in `BRANCHING` nodes of a level also appears in the level above.
const BRANCHING: u32 = 4;
/// What a point lookup found in a memtable.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A value, written at this sequence number.
    Found(Vec<u8>, SeqNo),
    /// A deletion, written at this sequence number.
    Deleted(SeqNo),
    /// A merge operand, written at this sequence number: the value is its fold over older
    /// versions, which the caller must gather.
    Merge(SeqNo),
    Absent,
}

/// Entries added to a memtable by one writer, counted and queued for its list when this
/// drops, or in parts of [`MAX_LIST_BATCH`] on the way (see [`MemTable::adds`]).
pub(crate) struct Adds<'m> {
    mem: &'m MemTable,
    bytes: usize,
    nodes: Vec<*mut Node>,
}

impl Adds<'_> {
    pub(crate) fn add(&mut self, seq: SeqNo, kind: ValueKind, key: &[u8], value: &[u8]) {
        if let Some((node, bytes)) = self.mem.chain(seq, kind, key, value) {
            self.nodes.push(node);
            self.bytes += bytes;
            // A very large group goes to the list in parts of the size single adds make,
            // rather than as one sort of all of it, which would hold the list (and a copy of
            // the group's nodes) for as long.
            if self.nodes.len() >= MAX_LIST_BATCH {
                self.publish();
            }
        }
    }

    fn publish(&mut self) {
        if !self.nodes.is_empty() {
            // Taken first: a comparator that panics in the listing must not leave the nodes
            // here for the unwinding drop to queue again.
            let mut nodes = std::mem::take(&mut self.nodes);
            let bytes = std::mem::take(&mut self.bytes);
            self.mem.publish(&nodes, bytes, nodes.len() as u64);
            nodes.clear();
            self.nodes = nodes;
        }
    }
}

impl Drop for Adds<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Unwinding (from another family's comparator, say): queue the nodes without
            // sorting them, which would call the comparator again, and a second panic while
            // unwinding aborts the process.
            let entries = self.nodes.len() as u64;
            self.mem.queue(&self.nodes, self.bytes, entries);
            return;
        }
        self.publish();
    }
}

/// A concurrent sorted map of internal keys to values.
pub(crate) struct MemTable {
    arena: Arena,
    head: *mut Node,
    /// Chains of nodes by user key, newest first: `bucket_mask + 1` links (a power of two),
    /// all null at first.
    buckets: ManuallyDrop<Pages>,
    bucket_mask: usize,
    /// Nodes in the hash chains but not yet in the list.
    pending: Mutex<Vec<*mut Node>>,
    /// Held while a batch taken from `pending` is being inserted, so that [`MemTable::iter`]
    /// can wait for the list to hold every node added before it.
    listing: Mutex<()>,
    max_height: AtomicUsize,
    /// Bytes of the nodes: headers, towers, keys and values.
    size: AtomicUsize,
    entries: AtomicU64,
    rng: AtomicU64,
    /// The WAL that holds this memtable's writes.
    wal: FileNumber,
    created: Instant,
    /// Range tombstones, kept apart from the entries, and whether there are any.
    range_dels: Mutex<Vec<RangeTombstone>>,
    has_range_dels: AtomicBool,
    /// `range_dels` fragmented, made by the first read after a change.
    fragmented: Mutex<Option<Arc<Fragmented>>>,
    /// The order of the keys.
    order: KeyOrder,
}

impl Drop for MemTable {
    fn drop(&mut self) {
        // SAFETY: taken once, here; nothing reads the buckets after.
        let buckets = unsafe { ManuallyDrop::take(&mut self.buckets) };
        self.arena.release_buckets(buckets);
    }
}

// SAFETY: nodes are reached only through atomics with Acquire/Release ordering, are immutable
// after publication, and are freed only with the arena, when no other reference exists.
unsafe impl Send for MemTable {}
// SAFETY: as above; `&MemTable` allows only reads and lock-free inserts.
unsafe impl Sync for MemTable {}

impl MemTable {
    /// An empty memtable for writes logged in `wal`, with hash buckets sized for about
    /// `capacity_bytes` of entries.
    /// Its arena takes chunks from `pool` first.
    pub(crate) fn new(
        wal: FileNumber,
        capacity_bytes: usize,
        order: KeyOrder,
        pool: Option<Recycling>,
    ) -> Self {
        let arena = Arena::new(pool);
        let head = Node::create(&arena, MAX_HEIGHT, &[], &[]);
        let buckets = (capacity_bytes / BYTES_PER_BUCKET)
            .next_power_of_two()
            .max(64);
        let bucket_pages = ManuallyDrop::new(arena.buckets(buckets));
        MemTable {
            arena,
            head,
            buckets: bucket_pages,
            bucket_mask: buckets - 1,
            pending: Mutex::new(Vec::with_capacity(LIST_BATCH)),
            listing: Mutex::new(()),
            max_height: AtomicUsize::new(1),
            size: AtomicUsize::new(0),
            entries: AtomicU64::new(0),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            wal,
            created: Instant::now(),
            range_dels: Mutex::new(Vec::new()),
            has_range_dels: AtomicBool::new(false),
            fragmented: Mutex::new(None),
            order,
        }
    }

    /// Gives the arena's chunks to its pool when the memtable is dropped: the database is
    /// taking writes, and its next memtables will fill them.
    pub(crate) fn recycle_on_drop(&self) {
        self.arena.recycle_on_drop();
    }

    /// The range tombstones, fragmented; `None` when there are none.
    pub(crate) fn range_tombstones(&self) -> Option<Arc<Fragmented>> {
        if !self.has_range_dels.load(Ordering::Acquire) {
            return None;
        }
        let mut cache = lock(&self.fragmented);
        if cache.is_none() {
            *cache = Some(Arc::new(Fragmented::new(
                &self.order,
                lock(&self.range_dels).iter(),
            )));
        }
        cache.clone()
    }

    /// The range tombstones as written, for a flush.
    pub(crate) fn range_tombstone_list(&self) -> Vec<RangeTombstone> {
        if !self.has_range_dels.load(Ordering::Acquire) {
            return Vec::new();
        }
        lock(&self.range_dels).clone()
    }

    /// The order of the keys.
    pub(crate) fn order(&self) -> &KeyOrder {
        &self.order
    }

    pub(crate) fn wal_number(&self) -> FileNumber {
        self.wal
    }

    pub(crate) fn created(&self) -> Instant {
        self.created
    }

    /// Bytes charged against the write buffer: the nodes, keys and values.
    pub(crate) fn approximate_size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// Bytes the arena holds (at least `approximate_size`).
    #[cfg(test)]
    fn arena_bytes(&self) -> usize {
        self.arena.allocated()
    }

    pub(crate) fn len(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn random_height(&self) -> usize {
        // xorshift on a shared state; races only make heights less random, never wrong.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        let mut h = 1;
        let mut bits = x;
        while h < MAX_HEIGHT && (bits as u32).is_multiple_of(BRANCHING) {
            h += 1;
            bits >>= 8;
        }
        h
    }

    fn bucket(&self, user_key: &[u8]) -> &Link {
        let i = hash_user_key(user_key) as usize & self.bucket_mask;
        // SAFETY: `i <= bucket_mask`, within the buckets' words; a zeroed word is a valid
        // null `AtomicPtr`, of a word's size and alignment.
        unsafe { &*self.buckets.as_ptr().add(i).cast::<Link>() }
    }

    /// Adds an entry. Requires: no entry with the same (key, seq) exists, and the versions
    /// of one user key are added in sequence order (so that hash chains run newest first).
    /// The engine assigns sequence numbers and inserts a group's writes in one thread, in
    /// order, so both hold for its callers; different keys may be added from many threads.
    pub(crate) fn add(&self, seq: SeqNo, kind: ValueKind, key: &[u8], value: &[u8]) {
        if let Some((node, bytes)) = self.chain(seq, kind, key, value) {
            self.publish(&[node], bytes, 1);
        }
    }

    /// Adds made one after the other by one writer (a write group's entries, in order), as
    /// [`MemTable::add`] makes them, but counted and queued for the list together when the
    /// returned value drops: one update of the counters and of the pending nodes for the whole
    /// group rather than one per entry. Each entry is in its key's hash chain, for lookups,
    /// as soon as it is added. `entries` is about how many will come.
    pub(crate) fn adds(&self, entries: usize) -> Adds<'_> {
        Adds {
            mem: self,
            bytes: 0,
            nodes: Vec::with_capacity(entries.min(MAX_LIST_BATCH)),
        }
    }

    /// Puts a new node for the entry in its key's hash chain; returns it and the bytes it
    /// takes, or `None` for a range tombstone, which is kept apart (and counted) here.
    fn chain(
        &self,
        seq: SeqNo,
        kind: ValueKind,
        key: &[u8],
        value: &[u8],
    ) -> Option<(*mut Node, usize)> {
        if kind == ValueKind::RangeDelete {
            lock(&self.range_dels).push(RangeTombstone {
                begin: key.to_vec(),
                end: value.to_vec(),
                seq,
            });
            *lock(&self.fragmented) = None;
            self.has_range_dels.store(true, Ordering::Release);
            self.size
                .fetch_add(key.len() + value.len() + 32, Ordering::Relaxed);
            self.entries.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let trailer = pack_trailer(seq, kind).to_le_bytes();
        let height = self.random_height();
        let node = Node::create(&self.arena, height, &[key, &trailer], value);
        let bucket = self.bucket(key);
        let mut head = bucket.load(Ordering::Acquire);
        loop {
            // SAFETY: this thread made `node` and nothing else can reach it yet: it is in no
            // bucket and not in the list, so its `hash_next` is ours until the CAS below
            // publishes it in the bucket.
            unsafe { (*node).hash_next.store(head, Ordering::Relaxed) };
            // Release: a reader that finds the node through the bucket sees its contents.
            match bucket.compare_exchange_weak(head, node, Ordering::Release, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        Some((
            node,
            Node::bytes(height, key.len() + trailer.len(), value.len()),
        ))
    }

    /// Counts `nodes`, of `bytes` in all, and queues them for the list, listing the queue
    /// when it is long enough.
    fn publish(&self, nodes: &[*mut Node], bytes: usize, entries: u64) {
        let full = self.queue(nodes, bytes, entries);
        // A writer that finds the list busy leaves its batch to the next add.
        if full && let Some(_listing) = self.try_listing() {
            let batch = std::mem::take(&mut *lock(&self.pending));
            self.insert_sorted(batch);
        }
    }

    /// The list's lock, unless another thread holds it. A comparator that panicked while
    /// listing left it poisoned; the list's links are whole all the same.
    fn try_listing(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        match self.listing.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Counts `nodes`, of `bytes` in all, and queues them for the list; true when the queue
    /// is long enough to be listed.
    fn queue(&self, nodes: &[*mut Node], bytes: usize, entries: u64) -> bool {
        self.size.fetch_add(bytes, Ordering::Relaxed);
        self.entries.fetch_add(entries, Ordering::Relaxed);
        let mut pending = lock(&self.pending);
        pending.extend_from_slice(nodes);
        pending.len() >= (self.len() as usize / 2).clamp(LIST_BATCH, MAX_LIST_BATCH)
    }

    /// Inserts every pending node into the list and returns once no batch is in flight, so
    /// that the list holds every node added before the call.
    fn list_pending(&self) {
        let _listing = lock(&self.listing);
        let batch = std::mem::take(&mut *lock(&self.pending));
        if !batch.is_empty() {
            self.insert_sorted(batch);
        }
    }

    /// Inserts nodes into the list in key order, each search starting from where the last
    /// insert left off. Requires: the nodes are in the hash chains but not in the list.
    fn insert_sorted(&self, batch: Vec<*mut Node>) {
        // Sorted by the keys' first bytes, read once per node, so that most comparisons stay
        // within the vector instead of reading two nodes scattered over the arena (in byte
        // order; in another, by the keys alone).
        let bytewise = self.order.is_bytewise();
        let prefix = |n: *mut Node| match bytewise {
            // SAFETY: pending nodes are published (through their bucket) and immutable.
            true => sort_prefix(unsafe { Node::key(n) }),
            false => 0,
        };
        let mut batch: Vec<(u128, *mut Node)> = batch.into_iter().map(|n| (prefix(n), n)).collect();
        batch.sort_unstable_by(|a, b| {
            // SAFETY: as above.
            a.0.cmp(&b.0)
                .then_with(|| unsafe { self.order.internal(Node::key(a.1), Node::key(b.1)) })
        });
        let mut preds = [self.head; MAX_HEIGHT];
        let mut succs: [*mut Node; MAX_HEIGHT] = [ptr::null_mut(); MAX_HEIGHT];
        let mut positioned = false;
        for (_, node) in batch {
            // SAFETY: as above; the node is not in the list, so its tower is ours to set.
            let (key, height) = unsafe { (Node::key(node), Node::height(node)) };
            self.max_height.fetch_max(height, Ordering::Relaxed);
            // The previous position is before `key`; find the lowest level whose successor
            // is still after it and search again only below that.
            let mut level = 0;
            while positioned && level < MAX_HEIGHT && !succs[level].is_null() && {
                // SAFETY: non-null successors are published nodes.
                let succ = unsafe { Node::key(succs[level]) };
                self.order.internal(succ, key) == CmpOrdering::Less
            } {
                level += 1;
            }
            if !positioned || level == MAX_HEIGHT {
                self.find_splice(key, &mut preds, &mut succs);
                positioned = true;
            } else {
                for l in (0..level).rev() {
                    let (p, n) = self.find_splice_at(key, preds[l + 1], l, succs[l + 1]);
                    preds[l] = p;
                    succs[l] = n;
                }
            }
            self.link(node, height, key, &mut preds, &mut succs);
            for p in preds.iter_mut().take(height) {
                *p = node;
            }
        }
    }

    /// Links `node` in at levels below `height` between `preds` and `succs`, searching again
    /// at a level where another insert got in between.
    fn link(
        &self,
        node: *mut Node,
        height: usize,
        key: &[u8],
        preds: &mut [*mut Node; MAX_HEIGHT],
        succs: &mut [*mut Node; MAX_HEIGHT],
    ) {
        for level in 0..height {
            loop {
                // SAFETY: `node` is ours until published by the CAS below; level < height.
                unsafe {
                    Node::link(node, level).store(succs[level], Ordering::Relaxed);
                    if level == 0 {
                        (*node).prev.store(preds[0], Ordering::Relaxed);
                    }
                }
                // SAFETY: preds are live nodes of this list (or head) at least this tall.
                let pred = unsafe { Node::link(preds[level], level) };
                // Release: publishes the node's contents and its lower-level links.
                match pred.compare_exchange(
                    succs[level],
                    node,
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        if level == 0 && !succs[0].is_null() {
                            // Release: a cursor that steps back to `node` sees its contents.
                            // SAFETY: a published node of this list.
                            unsafe { (*succs[0]).prev.store(node, Ordering::Release) };
                        }
                        break;
                    }
                    Err(_) => {
                        let (p, s) = self.find_splice_at(key, preds[level], level, ptr::null_mut());
                        preds[level] = p;
                        succs[level] = s;
                    }
                }
            }
        }
    }

    /// For each level, the last node before `key` and the first at or after it.
    fn find_splice(
        &self,
        key: &[u8],
        preds: &mut [*mut Node; MAX_HEIGHT],
        succs: &mut [*mut Node; MAX_HEIGHT],
    ) {
        let mut pred = self.head;
        let mut known_ge = ptr::null_mut();
        for level in (0..MAX_HEIGHT).rev() {
            let (p, s) = self.find_splice_at(key, pred, level, known_ge);
            preds[level] = p;
            succs[level] = s;
            pred = p;
            known_ge = s;
        }
    }

    /// From `start` along `level`: the last node before `key` and the next one. `known_ge`
    /// is a node already known to be at or after `key` (or null), which needs no comparison.
    fn find_splice_at(
        &self,
        key: &[u8],
        start: *mut Node,
        level: usize,
        known_ge: *mut Node,
    ) -> (*mut Node, *mut Node) {
        let mut pred = start;
        loop {
            // SAFETY: `pred` is head or a published node at least `level + 1` tall.
            let next = unsafe { Node::next(pred, level) };
            if level > 0 {
                // The search goes on either at `next` or one level down from `pred`; fetch
                // the node down there while `next` arrives, so that the two misses overlap.
                // SAFETY: as above.
                crate::prefetch::line(unsafe { Node::next(pred, level - 1) });
            }
            if !next.is_null() && next != known_ge && {
                // SAFETY: non-null next pointers are published nodes.
                let next_key = unsafe { Node::key(next) };
                self.order.internal(next_key, key) == CmpOrdering::Less
            } {
                pred = next;
            } else {
                return (pred, next);
            }
        }
    }

    /// The first node at or after `key`, or null.
    fn find_ge(&self, key: &[u8]) -> *mut Node {
        let mut pred = self.head;
        let top = self.max_height.load(Ordering::Relaxed);
        let mut next = ptr::null_mut();
        for level in (0..top).rev() {
            let (p, n) = self.find_splice_at(key, pred, level, next);
            pred = p;
            next = n;
        }
        next
    }

    fn find_last(&self) -> *mut Node {
        let mut node = self.head;
        let top = self.max_height.load(Ordering::Relaxed);
        for level in (0..top).rev() {
            loop {
                // SAFETY: published nodes only, each at least `level + 1` tall.
                let next = unsafe { Node::next(node, level) };
                if next.is_null() {
                    break;
                }
                node = next;
            }
        }
        node
    }

    /// Hints that [`MemTable::get`] or [`MemTable::add`] of `key` will come soon: asks for
    /// the line of its hash bucket. (See `Db::get_many` and the write group's leader.)
    pub(crate) fn prefetch_bucket(&self, key: &[u8]) {
        crate::prefetch::line(self.bucket(key));
    }

    /// Hints, once the bucket is in cache, for the newest node of its chain: its header and
    /// the line after it, where the key of a short node ends.
    pub(crate) fn prefetch_chain(&self, key: &[u8]) {
        let node = self.bucket(key).load(Ordering::Acquire);
        if !node.is_null() {
            crate::prefetch::line(node);
            crate::prefetch::line(node.cast::<u8>().wrapping_add(64));
        }
    }

    /// The newest version of `key` visible at `seq`, found through the key's hash chain.
    pub(crate) fn get(&self, key: &[u8], seq: SeqNo) -> Lookup {
        let mut node = self.bucket(key).load(Ordering::Acquire);
        while !node.is_null() {
            // SAFETY: a node published in the bucket, kept alive by `&self`.
            let found_key = unsafe { Node::key(node) };
            // The chain runs newest first, so the first visible version of the key is the one.
            if let Some(p) = parse_internal_key(found_key)
                && p.user_key == key
                && p.seq <= seq
            {
                return match p.kind {
                    // SAFETY: as above.
                    ValueKind::Value => Lookup::Found(unsafe { Node::value(node) }.to_vec(), p.seq),
                    ValueKind::Delete | ValueKind::RangeDelete => Lookup::Deleted(p.seq),
                    ValueKind::Merge => Lookup::Merge(p.seq),
                };
            }
            // SAFETY: as above; Acquire pairs with the Release that published the next node.
            node = unsafe { (*node).hash_next.load(Ordering::Acquire) };
        }
        Lookup::Absent
    }

    /// [`MemTable::get`] by walking the list instead of the hash chain (tests compare them).
    #[cfg(test)]
    fn get_by_list(&self, key: &[u8], seq: SeqNo) -> Lookup {
        self.list_pending();
        let node = self.find_ge(&crate::key::lookup_key(key, seq));
        if node.is_null() {
            return Lookup::Absent;
        }
        // SAFETY: a published node, kept alive by `&self`.
        let (found_key, value) = unsafe { (Node::key(node), Node::value(node)) };
        match parse_internal_key(found_key) {
            Some(p) if p.user_key == key => match p.kind {
                ValueKind::Value => Lookup::Found(value.to_vec(), p.seq),
                ValueKind::Delete | ValueKind::RangeDelete => Lookup::Deleted(p.seq),
                ValueKind::Merge => Lookup::Merge(p.seq),
            },
            _ => Lookup::Absent,
        }
    }
}

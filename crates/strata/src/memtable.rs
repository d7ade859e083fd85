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

use std::cmp::Ordering as CmpOrdering;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{
    FileNumber, SeqNo, ValueKind, compare_internal, pack_trailer, parse_internal_key, user_key,
};
use crate::key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::mutex::lock;
use crate::range_del::{Fragmented, RangeTombstone};

const MAX_HEIGHT: usize = 12;
/// Nodes that wait outside the list before a writer inserts them as one sorted batch: as
/// many as the list holds (half the memtable's entries), within these bounds. The upper bound
/// caps how long one write, or one new iterator, spends inserting.
const LIST_BATCH: usize = 32768;
const MAX_LIST_BATCH: usize = 4 * LIST_BATCH;
/// One in `BRANCHING` nodes of a level also appears in the level above.
const BRANCHING: u32 = 4;
/// Bytes per arena chunk; a node larger than a quarter of this gets a chunk of its own.
const CHUNK_BYTES: usize = 1 << 20;

/// Zeroed words taken straight from the operating system and given back to it when dropped.
///
/// A memtable's memory is freed all at once, tens of megabytes, after its flush. Taken from
/// the allocator in chunks of a megabyte, it stayed in the process: after the flush of a
/// 50 MiB memtable the resident set did not shrink at all (`tests/memory.rs`), and the
/// next memtables were laid out beside what the heap kept. A mapping of its own leaves the
/// resident set when unmapped, and pages of it never written never join it.
struct Pages {
    ptr: ptr::NonNull<u64>,
    layout: std::alloc::Layout,
}

// SAFETY: `Pages` owns its memory like a `Box<[u64]>`; sharing it is up to its users.
unsafe impl Send for Pages {}

impl Pages {
    /// `words` zeroed words (at least one). Like a `Vec`, panics on a size past `isize::MAX`
    /// bytes (entries and buckets are bounded far below) and aborts when memory runs out.
    fn new(words: usize) -> Pages {
        let Ok(layout) = std::alloc::Layout::array::<u64>(words.max(1)) else {
            panic!("memtable allocation of {words} words overflows");
        };
        #[cfg(unix)]
        let p = {
            // SAFETY: a new private anonymous mapping, unmapped once, in drop.
            let p = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    layout.size(),
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                ptr::null_mut()
            } else {
                p.cast::<u64>()
            }
        };
        #[cfg(not(unix))]
        // SAFETY: the layout is not zero-sized.
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
        match ptr::NonNull::new(p) {
            Some(ptr) => Pages { ptr, layout },
            None => std::alloc::handle_alloc_error(layout),
        }
    }

    fn as_ptr(&self) -> *mut u64 {
        self.ptr.as_ptr()
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: the mapping made in `new`, with its length; unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.layout.size());
        }
        #[cfg(not(unix))]
        // SAFETY: allocated in `new` with this layout; freed once.
        unsafe {
            std::alloc::dealloc(self.ptr.as_ptr().cast(), self.layout);
        }
    }
}

/// Bump allocation of 8-byte-aligned, zeroed memory, all freed together when dropped.
struct Arena {
    inner: Mutex<ArenaInner>,
}

struct ArenaInner {
    /// Every chunk; unmapped when the arena is dropped.
    chunks: Vec<Pages>,
    /// The next free word of the current chunk, and how many words remain there.
    next: *mut u64,
    left: usize,
    /// Bytes of all chunks.
    allocated: usize,
}

// SAFETY: the raw pointer points into an owned chunk, touched only under the mutex.
unsafe impl Send for ArenaInner {}

impl Arena {
    fn new() -> Self {
        Arena {
            inner: Mutex::new(ArenaInner {
                chunks: Vec::new(),
                next: ptr::null_mut(),
                left: 0,
                allocated: 0,
            }),
        }
    }

    /// `bytes` of zeroed memory aligned to 8, alive until the arena is dropped.
    fn alloc(&self, bytes: usize) -> *mut u8 {
        let words = bytes.div_ceil(8);
        let mut a = lock(&self.inner);
        if words > a.left {
            let chunk_words = if words * 8 > CHUNK_BYTES / 4 {
                words
            } else {
                CHUNK_BYTES / 8
            };
            let chunk = Pages::new(chunk_words);
            let start = chunk.as_ptr();
            a.chunks.push(chunk);
            a.allocated += chunk_words * 8;
            if chunk_words == words {
                // A chunk of its own; the current chunk keeps serving small nodes.
                return start.cast();
            }
            a.next = start;
            a.left = chunk_words;
        }
        let p = a.next;
        // SAFETY: `words <= left`, so the result stays within (or one past) the chunk.
        a.next = unsafe { p.add(words) };
        a.left -= words;
        p.cast()
    }

    #[cfg(test)]
    fn allocated(&self) -> usize {
        lock(&self.inner).allocated
    }
}

/// A node's header, 24 bytes. In the arena it is followed by `height` next pointers, the
/// internal key (`key_len` bytes) and the value (`value_len` bytes).
#[repr(C)]
struct Node {
    /// The internal key's length in the low `KEY_LEN_BITS` bits (keys are at most
    /// `MAX_KEY_BYTES` and 8 bytes of trailer), the tower's height above them.
    key_len_height: u32,
    /// At most `MAX_VALUE_BYTES`.
    value_len: u32,
    /// The next older node in this node's hash bucket.
    hash_next: Link,
    /// The node before this one at level 0 (head for the first), so that a cursor steps back
    /// in one load instead of a search from the top.
    prev: Link,
}

type Link = AtomicPtr<Node>;

const KEY_LEN_BITS: u32 = 24;
const _: () = assert!(MAX_KEY_BYTES + 8 < 1 << KEY_LEN_BITS && MAX_HEIGHT < 1 << 8);
const _: () = assert!(MAX_VALUE_BYTES <= u32::MAX as usize);
const _: () = assert!(size_of::<Node>() == 24);

/// The first 16 bytes of an internal key's user key, zero-padded, as a number. Keys whose
/// numbers differ are in the numbers' order (a key that ends early is padded with the
/// smallest byte, and is a prefix of the other up to there); equal numbers say nothing.
fn sort_prefix(internal_key: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    for (b, k) in bytes.iter_mut().zip(user_key(internal_key)) {
        *b = *k;
    }
    u128::from_be_bytes(bytes)
}

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

impl Node {
    fn bytes(height: usize, key_len: usize, value_len: usize) -> usize {
        size_of::<Node>() + height * size_of::<Link>() + key_len + value_len
    }

    /// Writes a node into fresh arena memory. The tower is zeroed, that is, all null.
    /// Requires: the key parts together at most `MAX_KEY_BYTES + 8` bytes, the value at most
    /// `MAX_VALUE_BYTES`, `height` at most `MAX_HEIGHT` (as `WriteBatch` and WAL decoding
    /// check).
    fn create(arena: &Arena, height: usize, key: &[&[u8]], value: &[u8]) -> *mut Node {
        let key_len: usize = key.iter().map(|k| k.len()).sum();
        assert!(
            key_len < 1 << KEY_LEN_BITS && value.len() <= MAX_VALUE_BYTES && height <= MAX_HEIGHT,
            "memtable entry over the limits"
        );
        let node = arena
            .alloc(Node::bytes(height, key_len, value.len()))
            .cast::<Node>();
        // SAFETY: the memory is fresh, aligned, large enough for the header, the tower and
        // the bytes, and not yet shared with any other thread.
        unsafe {
            node.write(Node {
                key_len_height: (key_len | height << KEY_LEN_BITS) as u32,
                value_len: value.len() as u32,
                hash_next: AtomicPtr::new(ptr::null_mut()),
                prev: AtomicPtr::new(ptr::null_mut()),
            });
            let mut dst = Node::data(node);
            for part in key {
                ptr::copy_nonoverlapping(part.as_ptr(), dst, part.len());
                dst = dst.add(part.len());
            }
            ptr::copy_nonoverlapping(value.as_ptr(), dst, value.len());
        }
        node
    }

    /// The node's height.
    ///
    /// # Safety
    /// `node` is the head or a node made by `create` in an arena still alive, and either
    /// published (its header and bytes written before its pointer was stored with Release)
    /// or still being built by this thread. The accessors below share this contract.
    unsafe fn height(node: *mut Node) -> usize {
        // SAFETY: per the contract; the header is written before the node is published.
        (unsafe { (*node).key_len_height } >> KEY_LEN_BITS) as usize
    }

    /// # Safety
    /// As for [`Node::height`].
    unsafe fn key_len(node: *mut Node) -> usize {
        // SAFETY: as for `height`.
        (unsafe { (*node).key_len_height } & ((1 << KEY_LEN_BITS) - 1)) as usize
    }

    /// The node's link at `level`.
    ///
    /// # Safety
    /// As for [`Node::height`], and `level` is below the node's height. The caller picks
    /// `'a`, which must end before the arena is dropped.
    unsafe fn link<'a>(node: *mut Node, level: usize) -> &'a Link {
        // SAFETY: per the contract; the tower starts right after the header.
        unsafe {
            debug_assert!(level < Node::height(node));
            &*node.add(1).cast::<Link>().add(level)
        }
    }

    /// The next node at `level`. Acquire: pairs with the Release publication in `insert`,
    /// so the node's contents are visible once its pointer is.
    ///
    /// # Safety
    /// As for [`Node::link`].
    unsafe fn next(node: *mut Node, level: usize) -> *mut Node {
        // SAFETY: per the contract.
        unsafe { Node::link(node, level).load(Ordering::Acquire) }
    }

    /// Where the node's key and value bytes start, after its tower.
    ///
    /// # Safety
    /// As for [`Node::height`].
    unsafe fn data(node: *mut Node) -> *mut u8 {
        // SAFETY: per the contract; the bytes follow the tower.
        unsafe {
            node.add(1)
                .cast::<Link>()
                .add(Node::height(node))
                .cast::<u8>()
        }
    }

    /// The node's internal key.
    ///
    /// # Safety
    /// As for [`Node::height`]. The caller picks `'a`, which must end before the arena is
    /// dropped: callers hold the memtable (which owns the arena) for as long as they use it.
    unsafe fn key<'a>(node: *mut Node) -> &'a [u8] {
        // SAFETY: per the contract; the bytes were written before the node was published.
        unsafe { std::slice::from_raw_parts(Node::data(node), Node::key_len(node)) }
    }

    /// The node's value.
    ///
    /// # Safety
    /// As for [`Node::key`].
    unsafe fn value<'a>(node: *mut Node) -> &'a [u8] {
        // SAFETY: as for `key`.
        unsafe {
            std::slice::from_raw_parts(
                Node::data(node).add(Node::key_len(node)),
                (*node).value_len as usize,
            )
        }
    }
}

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

/// A concurrent sorted map of internal keys to values.
pub(crate) struct MemTable {
    arena: Arena,
    head: *mut Node,
    /// Chains of nodes by user key, newest first: `bucket_mask + 1` links (a power of two),
    /// all null at first.
    buckets: Pages,
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
}

// SAFETY: nodes are reached only through atomics with Acquire/Release ordering, are immutable
// after publication, and are freed only with the arena, when no other reference exists.
unsafe impl Send for MemTable {}
// SAFETY: as above; `&MemTable` allows only reads and lock-free inserts.
unsafe impl Sync for MemTable {}

impl MemTable {
    /// An empty memtable for writes logged in `wal`, with hash buckets sized for about
    /// `capacity_bytes` of entries.
    pub(crate) fn new(wal: FileNumber, capacity_bytes: usize) -> Self {
        let arena = Arena::new();
        let head = Node::create(&arena, MAX_HEIGHT, &[], &[]);
        let buckets = (capacity_bytes / BYTES_PER_BUCKET)
            .next_power_of_two()
            .max(64);
        MemTable {
            arena,
            head,
            buckets: Pages::new(buckets),
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
        }
    }

    /// The range tombstones, fragmented; `None` when there are none.
    pub(crate) fn range_tombstones(&self) -> Option<Arc<Fragmented>> {
        if !self.has_range_dels.load(Ordering::Acquire) {
            return None;
        }
        let mut cache = lock(&self.fragmented);
        if cache.is_none() {
            *cache = Some(Arc::new(Fragmented::new(lock(&self.range_dels).iter())));
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
            return;
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
        self.size.fetch_add(
            Node::bytes(height, key.len() + trailer.len(), value.len()),
            Ordering::Relaxed,
        );
        self.entries.fetch_add(1, Ordering::Relaxed);
        let full = {
            let mut pending = lock(&self.pending);
            pending.push(node);
            pending.len() >= (self.len() as usize / 2).clamp(LIST_BATCH, MAX_LIST_BATCH)
        };
        // A writer that finds the list busy leaves its batch to the next add.
        if full && let Ok(_listing) = self.listing.try_lock() {
            let batch = std::mem::take(&mut *lock(&self.pending));
            self.insert_sorted(batch);
        }
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
        // within the vector instead of reading two nodes scattered over the arena.
        // SAFETY: pending nodes are published (through their bucket) and immutable.
        let mut batch: Vec<(u128, *mut Node)> = batch
            .into_iter()
            .map(|n| (sort_prefix(unsafe { Node::key(n) }), n))
            .collect();
        batch.sort_unstable_by(|a, b| {
            // SAFETY: as above.
            a.0.cmp(&b.0)
                .then_with(|| unsafe { compare_internal(Node::key(a.1), Node::key(b.1)) })
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
                compare_internal(succ, key) == CmpOrdering::Less
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
                compare_internal(next_key, key) == CmpOrdering::Less
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

    /// Hints that [`MemTable::get`] of `key` will come soon: asks for the line of its hash
    /// bucket. (See `Db::get_many`.)
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

    /// A cursor over the memtable, keeping it alive. It sees every entry added before the
    /// call.
    pub(crate) fn iter(self: &Arc<Self>) -> MemTableIter {
        self.list_pending();
        MemTableIter {
            table: self.clone(),
            node: ptr::null_mut(),
        }
    }
}

/// A cursor over a memtable. It sees every entry added before it was made, and may see some
/// added later (those a later batch linked into the list), which the user-level iterator
/// hides by sequence number.
pub(crate) struct MemTableIter {
    table: Arc<MemTable>,
    node: *mut Node,
}

// SAFETY: the node pointer points into `table`, which is Send + Sync and kept alive by the Arc.
unsafe impl Send for MemTableIter {}

impl InternalIterator for MemTableIter {
    fn valid(&self) -> bool {
        !self.node.is_null() && self.node != self.table.head
    }
    fn seek_to_first(&mut self) -> Result<()> {
        // SAFETY: head is always live and MAX_HEIGHT tall.
        self.node = unsafe { Node::next(self.table.head, 0) };
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.node = self.table.find_last();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.node = self.table.find_ge(target);
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        debug_assert!(self.valid());
        // SAFETY: valid() means a published node kept alive by `self.table`.
        self.node = unsafe { Node::next(self.node, 0) };
        if !self.node.is_null() {
            // Nodes lie in the arena in the order they were added, not in key order, so each
            // step of a scan is a cache miss. Fetch the node after this one while the caller
            // works on this one.
            // SAFETY: as above.
            crate::prefetch::line(unsafe { Node::next(self.node, 0) });
        }
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        debug_assert!(self.valid());
        // A node listed after this cursor was made may be missing from the back links for a
        // moment, but such a node was added after the cursor's read began, so the user-level
        // iterator would hide it anyway (see `MemTable::iter`).
        // SAFETY: as in `next`; Acquire pairs with the Release that set the link.
        self.node = unsafe { (*self.node).prev.load(Ordering::Acquire) };
        if self.node != self.table.head {
            // SAFETY: as above.
            crate::prefetch::line(unsafe { (*self.node).prev.load(Ordering::Acquire) });
        }
        Ok(())
    }
    fn key(&self) -> &[u8] {
        debug_assert!(self.valid());
        // SAFETY: as in `next`.
        unsafe { Node::key(self.node) }
    }
    fn value(&self) -> &[u8] {
        debug_assert!(self.valid());
        // SAFETY: as in `next`.
        unsafe { Node::value(self.node) }
    }
}

/// The user key of the entry a memtable cursor is on (test helper).
#[cfg(test)]
fn current_user_key(it: &MemTableIter) -> Vec<u8> {
    crate::key::user_key(it.key()).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::lookup_key;

    #[test]
    fn get_sees_the_newest_visible_version() {
        let m = MemTable::new(FileNumber(1), 4096);
        m.add(SeqNo(1), ValueKind::Value, b"k", b"v1");
        m.add(SeqNo(2), ValueKind::Value, b"k", b"v2");
        m.add(SeqNo(3), ValueKind::Delete, b"k", b"");
        assert_eq!(
            m.get(b"k", SeqNo(1)),
            Lookup::Found(b"v1".to_vec(), SeqNo(1))
        );
        assert_eq!(
            m.get(b"k", SeqNo(2)),
            Lookup::Found(b"v2".to_vec(), SeqNo(2))
        );
        assert_eq!(m.get(b"k", SeqNo(3)), Lookup::Deleted(SeqNo(3)));
        assert_eq!(m.get(b"k", SeqNo(0)), Lookup::Absent);
        assert_eq!(m.get(b"j", SeqNo(9)), Lookup::Absent);
    }

    #[test]
    fn hash_lookups_agree_with_the_list_at_every_snapshot() {
        // A tiny table: few buckets, long chains mixing keys and versions.
        let m = MemTable::new(FileNumber(1), 64);
        let mut seq = 0;
        for round in 0..5u64 {
            for k in 0..200u64 {
                if (k + round) % 3 == 0 {
                    continue;
                }
                seq += 1;
                let key = format!("k{k}");
                let kind = if (k * round) % 7 == 3 {
                    ValueKind::Delete
                } else {
                    ValueKind::Value
                };
                m.add(
                    SeqNo(seq),
                    kind,
                    key.as_bytes(),
                    format!("{round}").as_bytes(),
                );
            }
        }
        for at in (0..=seq + 1).step_by(37) {
            for k in 0..210u64 {
                let key = format!("k{k}");
                assert_eq!(
                    m.get(key.as_bytes(), SeqNo(at)),
                    m.get_by_list(key.as_bytes(), SeqNo(at)),
                    "key {key} at {at}"
                );
            }
        }
    }

    #[test]
    fn large_and_small_entries_share_the_arena() {
        let m = MemTable::new(FileNumber(1), 4096);
        let big = vec![7u8; CHUNK_BYTES];
        for i in 0..3000u64 {
            let key = format!("{i:06}");
            let value: &[u8] = if i % 1000 == 0 { &big } else { key.as_bytes() };
            m.add(SeqNo(i + 1), ValueKind::Value, key.as_bytes(), value);
        }
        for i in 0..3000u64 {
            let key = format!("{i:06}");
            let want = if i % 1000 == 0 {
                big.clone()
            } else {
                key.clone().into_bytes()
            };
            assert!(
                matches!(m.get(key.as_bytes(), SeqNo::MAX), Lookup::Found(v, _) if v == want),
                "{key}"
            );
        }
        assert!(m.arena_bytes() >= m.approximate_size());
        assert!(m.approximate_size() >= 3 * CHUNK_BYTES);
    }

    #[test]
    fn iterates_in_order_both_ways() {
        let m = Arc::new(MemTable::new(FileNumber(1), 4096));
        for (i, k) in [5u8, 1, 9, 3, 7].iter().enumerate() {
            m.add(SeqNo(i as u64 + 1), ValueKind::Value, &[*k], b"");
        }
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        let mut fwd = Vec::new();
        while it.valid() {
            fwd.push(current_user_key(&it)[0]);
            it.next().unwrap();
        }
        assert_eq!(fwd, vec![1, 3, 5, 7, 9]);
        it.seek_to_last().unwrap();
        let mut back = Vec::new();
        while it.valid() {
            back.push(current_user_key(&it)[0]);
            it.prev().unwrap();
        }
        assert_eq!(back, vec![9, 7, 5, 3, 1]);
        it.seek(&lookup_key(&[4], SeqNo::MAX)).unwrap();
        assert_eq!(current_user_key(&it), vec![5]);
    }

    /// Every key of the table, in list order.
    fn listed_keys(m: &Arc<MemTable>) -> Vec<Vec<u8>> {
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        let mut keys = Vec::new();
        while it.valid() {
            keys.push(it.key().to_vec());
            it.next().unwrap();
        }
        keys
    }

    #[test]
    fn sort_prefixes_order_keys_as_the_keys_do() {
        // Short keys over the smallest, a middle and the largest byte, and the same around
        // the 16-byte mark.
        let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..3 {
            let longer: Vec<Vec<u8>> = keys
                .iter()
                .flat_map(|k| [0u8, 1, 255].map(|b| [k.as_slice(), &[b]].concat()))
                .collect();
            keys.extend(longer);
        }
        let long: Vec<Vec<u8>> = keys.iter().map(|k| [&[7u8; 14][..], k].concat()).collect();
        keys.extend(long);
        let internal: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| crate::key::internal_key(k, SeqNo(1), ValueKind::Value))
            .collect();
        for a in &internal {
            for b in &internal {
                let (pa, pb) = (sort_prefix(a), sort_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), user_key(a).cmp(user_key(b)), "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn iterators_see_every_entry_added_before_them_across_batches() {
        let m = Arc::new(MemTable::new(FileNumber(1), 1 << 20));
        let mut model = std::collections::BTreeSet::new();
        let mut x = 7u64;
        let mut seq = 0;
        // Batches of several sizes, an iterator after each: some nodes are listed by the
        // writer's batches, the rest by the iterator.
        for step in [
            1usize,
            100,
            LIST_BATCH - 1,
            1,
            LIST_BATCH + 17,
            3 * LIST_BATCH,
            5,
        ] {
            for _ in 0..step {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                seq += 1;
                let key = format!("{:08}", (x >> 33) % 50_000);
                m.add(SeqNo(seq), ValueKind::Value, key.as_bytes(), b"v");
                model.insert(crate::key::internal_key(
                    key.as_bytes(),
                    SeqNo(seq),
                    ValueKind::Value,
                ));
            }
            let keys = listed_keys(&m);
            assert_eq!(keys.len(), model.len());
            let mut want: Vec<Vec<u8>> = model.iter().cloned().collect();
            want.sort_by(|a, b| compare_internal(a, b));
            assert_eq!(keys, want, "after {seq} entries");
        }
    }

    #[test]
    fn concurrent_inserts_and_reads_lose_nothing() {
        let m = Arc::new(MemTable::new(FileNumber(1), 4096));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    // Together more than a batch, so that batches are listed while other
                    // threads add.
                    for i in 0..(LIST_BATCH as u64 / 2) {
                        let seq = t * 1_000_000 + i + 1;
                        let key = format!("{:08}", i * 4 + t);
                        m.add(SeqNo(seq), ValueKind::Value, key.as_bytes(), key.as_bytes());
                        assert!(matches!(
                            m.get(key.as_bytes(), SeqNo::MAX),
                            Lookup::Found(..)
                        ));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let total = 4 * (LIST_BATCH as u64 / 2);
        assert_eq!(m.len(), total);
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        let mut n = 0;
        let mut last: Option<Vec<u8>> = None;
        while it.valid() {
            if let Some(l) = &last {
                assert_eq!(compare_internal(l, it.key()), CmpOrdering::Less);
            }
            last = Some(it.key().to_vec());
            n += 1;
            it.next().unwrap();
        }
        assert_eq!(n, total);
    }
}

//! The memtable: recent writes, sorted, in memory.
//!
//! It is a lock-free skiplist keyed by internal key. Writers insert with compare-and-swap at
//! each level, so several threads may insert at once; readers walk the list without any lock.
//! Nodes are never removed, only freed with the whole memtable, so a reader that holds an
//! `Arc<MemTable>` can follow any pointer it loaded.
//!
//! Nodes live in an arena: one allocation holds a node's header, its tower of next pointers
//! (only as tall as the node), its internal key and its value, so a step of a search touches
//! one cache line or two rather than a node and a separate key; and the whole memtable is
//! freed chunk by chunk rather than node by node.
//!
//! Nodes are handled as raw pointers into the arena throughout (never `&Node`), so that
//! reading the tower and the bytes after the header stays within the allocation's provenance.

use std::cmp::Ordering as CmpOrdering;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{
    FileNumber, SeqNo, ValueKind, compare_internal, lookup_key, pack_trailer, parse_internal_key,
};

const MAX_HEIGHT: usize = 12;
/// One in `BRANCHING` nodes of a level also appears in the level above.
const BRANCHING: u32 = 4;
/// Bytes per arena chunk; a node larger than a quarter of this gets a chunk of its own.
const CHUNK_BYTES: usize = 1 << 20;

/// Bump allocation of 8-byte-aligned, zeroed memory, all freed together when dropped.
struct Arena {
    inner: Mutex<ArenaInner>,
}

struct ArenaInner {
    /// Every chunk, as `Box::into_raw` gave it; freed in `Drop`.
    chunks: Vec<*mut [u64]>,
    /// The next free word of the current chunk, and how many words remain there.
    next: *mut u64,
    left: usize,
    /// Bytes of all chunks.
    allocated: usize,
}

// SAFETY: the raw pointers are owned chunks, touched only under the mutex or in Drop.
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
        let mut a = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if words > a.left {
            let chunk_words = if words * 8 > CHUNK_BYTES / 4 {
                words
            } else {
                CHUNK_BYTES / 8
            };
            let chunk = Box::into_raw(vec![0u64; chunk_words].into_boxed_slice());
            a.chunks.push(chunk);
            a.allocated += chunk_words * 8;
            let start = chunk.cast::<u64>();
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
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allocated
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let a = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for &chunk in &a.chunks {
            // SAFETY: made by `Box::into_raw` in `alloc`, freed once; `&mut self` means no
            // pointer into the arena is used any more.
            drop(unsafe { Box::from_raw(chunk) });
        }
    }
}

/// A node's header. In the arena it is followed by `height` next pointers, the internal key
/// (`key_len` bytes) and the value (`value_len` bytes).
#[repr(C)]
struct Node {
    key_len: usize,
    value_len: usize,
    height: usize,
}

type Link = AtomicPtr<Node>;

impl Node {
    fn bytes(height: usize, key_len: usize, value_len: usize) -> usize {
        size_of::<Node>() + height * size_of::<Link>() + key_len + value_len
    }

    /// Writes a node into fresh arena memory. The tower is zeroed, that is, all null.
    fn create(arena: &Arena, height: usize, key: &[&[u8]], value: &[u8]) -> *mut Node {
        let key_len: usize = key.iter().map(|k| k.len()).sum();
        let node = arena
            .alloc(Node::bytes(height, key_len, value.len()))
            .cast::<Node>();
        // SAFETY: the memory is fresh, aligned, large enough for the header, the tower and
        // the bytes, and not yet shared with any other thread.
        unsafe {
            node.write(Node {
                key_len,
                value_len: value.len(),
                height,
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

    /// Safety (for the functions below): `node` is head or a node made by `create` in an
    /// arena still alive, and `level` is below its height.
    unsafe fn link<'a>(node: *mut Node, level: usize) -> &'a Link {
        // SAFETY: per the contract; the tower starts right after the header.
        unsafe {
            debug_assert!(level < (*node).height);
            &*node.add(1).cast::<Link>().add(level)
        }
    }

    /// Acquire: pairs with the Release publication in `insert`, so the node's contents are
    /// visible once its pointer is.
    unsafe fn next(node: *mut Node, level: usize) -> *mut Node {
        // SAFETY: per the contract.
        unsafe { Node::link(node, level).load(Ordering::Acquire) }
    }

    unsafe fn data(node: *mut Node) -> *mut u8 {
        // SAFETY: per the contract; the bytes follow the tower.
        unsafe { node.add(1).cast::<Link>().add((*node).height).cast::<u8>() }
    }

    unsafe fn key<'a>(node: *mut Node) -> &'a [u8] {
        // SAFETY: per the contract; the bytes were written before the node was published.
        unsafe { std::slice::from_raw_parts(Node::data(node), (*node).key_len) }
    }

    unsafe fn value<'a>(node: *mut Node) -> &'a [u8] {
        // SAFETY: as for `key`.
        unsafe {
            std::slice::from_raw_parts(Node::data(node).add((*node).key_len), (*node).value_len)
        }
    }
}

/// What a point lookup found in a memtable.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    Found(Vec<u8>),
    Deleted,
    Absent,
}

/// A concurrent sorted map of internal keys to values.
pub(crate) struct MemTable {
    arena: Arena,
    head: *mut Node,
    max_height: AtomicUsize,
    /// Bytes of the nodes: headers, towers, keys and values.
    size: AtomicUsize,
    entries: AtomicU64,
    rng: AtomicU64,
    /// The WAL that holds this memtable's writes.
    wal: FileNumber,
    created: Instant,
}

// SAFETY: nodes are reached only through atomics with Acquire/Release ordering, are immutable
// after publication, and are freed only with the arena, when no other reference exists.
unsafe impl Send for MemTable {}
// SAFETY: as above; `&MemTable` allows only reads and lock-free inserts.
unsafe impl Sync for MemTable {}

impl MemTable {
    pub(crate) fn new(wal: FileNumber) -> Self {
        let arena = Arena::new();
        let head = Node::create(&arena, MAX_HEIGHT, &[], &[]);
        MemTable {
            arena,
            head,
            max_height: AtomicUsize::new(1),
            size: AtomicUsize::new(0),
            entries: AtomicU64::new(0),
            rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            wal,
            created: Instant::now(),
        }
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

    /// Adds an entry. Requires: no entry with the same (key, seq) exists; every write has its
    /// own sequence number, so this holds for the engine's callers.
    pub(crate) fn add(&self, seq: SeqNo, kind: ValueKind, key: &[u8], value: &[u8]) {
        let trailer = pack_trailer(seq, kind).to_le_bytes();
        let height = self.random_height();
        let node = Node::create(&self.arena, height, &[key, &trailer], value);
        self.insert(node, height);
        self.size.fetch_add(
            Node::bytes(height, key.len() + trailer.len(), value.len()),
            Ordering::Relaxed,
        );
        self.entries.fetch_add(1, Ordering::Relaxed);
    }

    fn insert(&self, node: *mut Node, height: usize) {
        self.max_height.fetch_max(height, Ordering::Relaxed);
        // SAFETY: `node` is fresh, made by `create`, and not yet shared.
        let key = unsafe { Node::key(node) };
        let mut preds = [self.head; MAX_HEIGHT];
        let mut succs = [ptr::null_mut(); MAX_HEIGHT];
        self.find_splice(key, &mut preds, &mut succs);
        for level in 0..height {
            loop {
                // SAFETY: `node` is ours until published by the CAS below; level < height.
                unsafe { Node::link(node, level).store(succs[level], Ordering::Relaxed) };
                // SAFETY: preds are live nodes of this list (or head) at least this tall.
                let pred = unsafe { Node::link(preds[level], level) };
                // Release: publishes the node's contents and its lower-level links.
                match pred.compare_exchange(
                    succs[level],
                    node,
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
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
            // SAFETY: non-null next pointers are published nodes.
            if !next.is_null()
                && next != known_ge
                && compare_internal(unsafe { Node::key(next) }, key) == CmpOrdering::Less
            {
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

    /// The last node before `key`, or head.
    fn find_lt(&self, key: &[u8]) -> *mut Node {
        let mut pred = self.head;
        let top = self.max_height.load(Ordering::Relaxed);
        let mut next = ptr::null_mut();
        for level in (0..top).rev() {
            (pred, next) = self.find_splice_at(key, pred, level, next);
        }
        pred
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

    /// The newest version of `key` visible at `seq`.
    pub(crate) fn get(&self, key: &[u8], seq: SeqNo) -> Lookup {
        let target = lookup_key(key, seq);
        let node = self.find_ge(&target);
        if node.is_null() {
            return Lookup::Absent;
        }
        // SAFETY: a published node, kept alive by `&self`.
        let (found_key, value) = unsafe { (Node::key(node), Node::value(node)) };
        match parse_internal_key(found_key) {
            Some(p) if p.user_key == key => match p.kind {
                ValueKind::Value => Lookup::Found(value.to_vec()),
                ValueKind::Delete => Lookup::Deleted,
            },
            _ => Lookup::Absent,
        }
    }

    /// A cursor over the memtable, keeping it alive.
    pub(crate) fn iter(self: &Arc<Self>) -> MemTableIter {
        MemTableIter {
            table: self.clone(),
            node: ptr::null_mut(),
        }
    }
}

/// A cursor over a memtable; it sees entries inserted after it was made, which the user-level
/// iterator hides by sequence number.
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
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        debug_assert!(self.valid());
        // SAFETY: as in `next`; the key's bytes live as long as the table.
        let key = unsafe { Node::key(self.node) };
        self.node = self.table.find_lt(key);
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

    #[test]
    fn get_sees_the_newest_visible_version() {
        let m = MemTable::new(FileNumber(1));
        m.add(SeqNo(1), ValueKind::Value, b"k", b"v1");
        m.add(SeqNo(2), ValueKind::Value, b"k", b"v2");
        m.add(SeqNo(3), ValueKind::Delete, b"k", b"");
        assert_eq!(m.get(b"k", SeqNo(1)), Lookup::Found(b"v1".to_vec()));
        assert_eq!(m.get(b"k", SeqNo(2)), Lookup::Found(b"v2".to_vec()));
        assert_eq!(m.get(b"k", SeqNo(3)), Lookup::Deleted);
        assert_eq!(m.get(b"k", SeqNo(0)), Lookup::Absent);
        assert_eq!(m.get(b"j", SeqNo(9)), Lookup::Absent);
    }

    #[test]
    fn large_and_small_entries_share_the_arena() {
        let m = MemTable::new(FileNumber(1));
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
            assert_eq!(m.get(key.as_bytes(), SeqNo::MAX), Lookup::Found(want));
        }
        assert!(m.arena_bytes() >= m.approximate_size());
        assert!(m.approximate_size() >= 3 * CHUNK_BYTES);
    }

    #[test]
    fn iterates_in_order_both_ways() {
        let m = Arc::new(MemTable::new(FileNumber(1)));
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

    #[test]
    fn concurrent_inserts_and_reads_lose_nothing() {
        let m = Arc::new(MemTable::new(FileNumber(1)));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..5000u64 {
                        let seq = t * 10_000 + i + 1;
                        let key = format!("{:08}", i * 4 + t);
                        m.add(SeqNo(seq), ValueKind::Value, key.as_bytes(), key.as_bytes());
                        assert!(matches!(
                            m.get(key.as_bytes(), SeqNo::MAX),
                            Lookup::Found(_)
                        ));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(m.len(), 20_000);
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
        assert_eq!(n, 20_000);
    }
}

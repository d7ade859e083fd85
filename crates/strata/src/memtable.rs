//! The memtable: recent writes, sorted, in memory.
//!
//! It is a lock-free skiplist keyed by internal key. Writers insert with compare-and-swap at
//! each level, so several threads may insert at once; readers walk the list without any lock.
//! Nodes are never removed, only freed with the whole memtable, so a reader that holds an
//! `Arc<MemTable>` can follow any pointer it loaded.

use std::cmp::Ordering as CmpOrdering;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{
    FileNumber, SeqNo, ValueKind, append_internal_key, compare_internal, lookup_key,
    parse_internal_key,
};

const MAX_HEIGHT: usize = 12;
/// One in `BRANCHING` nodes of a level also appears in the level above.
const BRANCHING: u32 = 4;
/// Bytes charged per entry beyond its key and value, for the node and its tower.
const NODE_OVERHEAD_BYTES: usize = 64;

struct Node {
    /// Internal key followed by the value.
    entry: Box<[u8]>,
    key_len: usize,
    next: [AtomicPtr<Node>; MAX_HEIGHT],
}

impl Node {
    fn alloc(entry: Box<[u8]>, key_len: usize) -> *mut Node {
        Box::into_raw(Box::new(Node {
            entry,
            key_len,
            next: Default::default(),
        }))
    }

    fn key(&self) -> &[u8] {
        self.entry.get(..self.key_len).unwrap_or_default()
    }

    fn value(&self) -> &[u8] {
        self.entry.get(self.key_len..).unwrap_or_default()
    }

    /// Acquire: pairs with the Release publication in `insert`, so the node's contents are
    /// visible once its pointer is.
    fn next(&self, level: usize) -> *mut Node {
        self.next[level].load(Ordering::Acquire)
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
    head: *mut Node,
    max_height: AtomicUsize,
    /// Bytes charged: keys, values and per-node overhead.
    size: AtomicUsize,
    entries: AtomicU64,
    rng: AtomicU64,
    /// The WAL that holds this memtable's writes.
    wal: FileNumber,
    created: Instant,
}

// SAFETY: nodes are reached only through atomics with Acquire/Release ordering, are immutable
// after publication, and are freed only in `Drop`, when no other reference exists.
unsafe impl Send for MemTable {}
// SAFETY: as above; `&MemTable` allows only reads and lock-free inserts.
unsafe impl Sync for MemTable {}

impl Drop for MemTable {
    fn drop(&mut self) {
        let mut node = self.head;
        while !node.is_null() {
            // SAFETY: every node was made by `Box::into_raw` and is freed exactly once here;
            // `&mut self` means no reader or iterator remains.
            let boxed = unsafe { Box::from_raw(node) };
            node = boxed.next[0].load(Ordering::Relaxed);
        }
    }
}

impl MemTable {
    pub(crate) fn new(wal: FileNumber) -> Self {
        MemTable {
            head: Node::alloc(Box::new([]), 0),
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

    /// Bytes charged against the write buffer.
    pub(crate) fn approximate_size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
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
        let mut entry = Vec::with_capacity(key.len() + 8 + value.len());
        append_internal_key(&mut entry, key, seq, kind);
        let key_len = entry.len();
        entry.extend_from_slice(value);
        let charge = entry.len() + NODE_OVERHEAD_BYTES;
        let node = Node::alloc(entry.into_boxed_slice(), key_len);
        self.insert(node);
        self.size.fetch_add(charge, Ordering::Relaxed);
        self.entries.fetch_add(1, Ordering::Relaxed);
    }

    fn insert(&self, node: *mut Node) {
        let height = self.random_height();
        self.max_height.fetch_max(height, Ordering::Relaxed);
        // SAFETY: `node` is fresh and not yet shared.
        let key = unsafe { (*node).key() };
        let mut preds = [self.head; MAX_HEIGHT];
        let mut succs = [ptr::null_mut(); MAX_HEIGHT];
        self.find_splice(key, &mut preds, &mut succs);
        for level in 0..height {
            loop {
                // SAFETY: `node` is ours until published by the CAS below.
                unsafe { (*node).next[level].store(succs[level], Ordering::Relaxed) };
                // SAFETY: preds are live nodes of this list (or head).
                let pred = unsafe { &*preds[level] };
                // Release: publishes the node's contents and its lower-level links.
                match pred.next[level].compare_exchange(
                    succs[level],
                    node,
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(_) => {
                        let (p, s) = self.find_splice_at(key, preds[level], level);
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
        for level in (0..MAX_HEIGHT).rev() {
            let (p, s) = self.find_splice_at(key, pred, level);
            preds[level] = p;
            succs[level] = s;
            pred = p;
        }
    }

    fn find_splice_at(&self, key: &[u8], start: *mut Node, level: usize) -> (*mut Node, *mut Node) {
        let mut pred = start;
        loop {
            // SAFETY: `pred` is head or a published node.
            let next = unsafe { (*pred).next(level) };
            // SAFETY: non-null next pointers are published nodes.
            if !next.is_null()
                && compare_internal(unsafe { (*next).key() }, key) == CmpOrdering::Less
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
            let (p, n) = self.find_splice_at(key, pred, level);
            pred = p;
            next = n;
        }
        next
    }

    /// The last node before `key`, or head.
    fn find_lt(&self, key: &[u8]) -> *mut Node {
        let mut pred = self.head;
        let top = self.max_height.load(Ordering::Relaxed);
        for level in (0..top).rev() {
            pred = self.find_splice_at(key, pred, level).0;
        }
        pred
    }

    fn find_last(&self) -> *mut Node {
        let mut node = self.head;
        let top = self.max_height.load(Ordering::Relaxed);
        for level in (0..top).rev() {
            loop {
                // SAFETY: published nodes only.
                let next = unsafe { (*node).next(level) };
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
        // SAFETY: published node, kept alive by `&self`.
        let node = unsafe { &*node };
        match parse_internal_key(node.key()) {
            Some(p) if p.user_key == key => match p.kind {
                ValueKind::Value => Lookup::Found(node.value().to_vec()),
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

impl MemTableIter {
    fn current(&self) -> &Node {
        debug_assert!(self.valid());
        // SAFETY: valid() means a published node kept alive by `self.table`.
        unsafe { &*self.node }
    }
}

impl InternalIterator for MemTableIter {
    fn valid(&self) -> bool {
        !self.node.is_null() && self.node != self.table.head
    }
    fn seek_to_first(&mut self) -> Result<()> {
        // SAFETY: head is always live.
        self.node = unsafe { (*self.table.head).next(0) };
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
        self.node = self.current().next(0);
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        let key = self.current().key().to_vec();
        self.node = self.table.find_lt(&key);
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.current().key()
    }
    fn value(&self) -> &[u8] {
        self.current().value()
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

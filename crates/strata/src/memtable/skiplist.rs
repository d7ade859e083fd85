//! A skiplist node in the arena: header, tower of next pointers, internal key and value in
//! one allocation, handled as raw pointers.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::key::user_key;
use crate::key::{MAX_KEY_BYTES, MAX_VALUE_BYTES};

use super::arena::Arena;

pub(super) const MAX_HEIGHT: usize = 12;

/// A node's header, 24 bytes. In the arena it is followed by `height` next pointers, the
/// internal key (`key_len` bytes) and the value (`value_len` bytes).
#[repr(C)]
pub(super) struct Node {
    /// The internal key's length in the low `KEY_LEN_BITS` bits (keys are at most
    /// `MAX_KEY_BYTES` and 8 bytes of trailer), the tower's height above them.
    pub(super) key_len_height: u32,
    /// At most `MAX_VALUE_BYTES`.
    pub(super) value_len: u32,
    /// The next older node in this node's hash bucket.
    pub(super) hash_next: Link,
    /// The node before this one at level 0 (head for the first), so that a cursor steps back
    /// in one load instead of a search from the top.
    pub(super) prev: Link,
}

pub(super) type Link = AtomicPtr<Node>;

pub(super) const KEY_LEN_BITS: u32 = 24;
const _: () = assert!(MAX_KEY_BYTES + 8 < 1 << KEY_LEN_BITS && MAX_HEIGHT < 1 << 8);
const _: () = assert!(MAX_VALUE_BYTES <= u32::MAX as usize);
const _: () = assert!(size_of::<Node>() == 24);

/// The first 16 bytes of an internal key's user key, zero-padded, as a number. Keys whose
/// numbers differ are in the numbers' order (a key that ends early is padded with the
/// smallest byte, and is a prefix of the other up to there); equal numbers say nothing.
pub(super) fn sort_prefix(internal_key: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    for (b, k) in bytes.iter_mut().zip(user_key(internal_key)) {
        *b = *k;
    }
    u128::from_be_bytes(bytes)
}

impl Node {
    pub(super) fn bytes(height: usize, key_len: usize, value_len: usize) -> usize {
        size_of::<Node>() + height * size_of::<Link>() + key_len + value_len
    }

    /// Writes a node into fresh arena memory, its tower all null.
    /// Requires: the key parts together at most `MAX_KEY_BYTES + 8` bytes, the value at most
    /// `MAX_VALUE_BYTES`, `height` at most `MAX_HEIGHT` (as `WriteBatch` and WAL decoding
    /// check).
    pub(super) fn create(arena: &Arena, height: usize, key: &[&[u8]], value: &[u8]) -> *mut Node {
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
            // Arena memory may be a recycled chunk's, holding an older memtable's bytes.
            ptr::write_bytes(node.add(1).cast::<Link>(), 0, height);
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
    pub(super) unsafe fn height(node: *mut Node) -> usize {
        // SAFETY: per the contract; the header is written before the node is published.
        (unsafe { (*node).key_len_height } >> KEY_LEN_BITS) as usize
    }

    /// # Safety
    /// As for [`Node::height`].
    pub(super) unsafe fn key_len(node: *mut Node) -> usize {
        // SAFETY: as for `height`.
        (unsafe { (*node).key_len_height } & ((1 << KEY_LEN_BITS) - 1)) as usize
    }

    /// The node's link at `level`.
    ///
    /// # Safety
    /// As for [`Node::height`], and `level` is below the node's height. The caller picks
    /// `'a`, which must end before the arena is dropped.
    pub(super) unsafe fn link<'a>(node: *mut Node, level: usize) -> &'a Link {
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
    pub(super) unsafe fn next(node: *mut Node, level: usize) -> *mut Node {
        // SAFETY: per the contract.
        unsafe { Node::link(node, level).load(Ordering::Acquire) }
    }

    /// Where the node's key and value bytes start, after its tower.
    ///
    /// # Safety
    /// As for [`Node::height`].
    pub(super) unsafe fn data(node: *mut Node) -> *mut u8 {
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
    pub(super) unsafe fn key<'a>(node: *mut Node) -> &'a [u8] {
        // SAFETY: per the contract; the bytes were written before the node was published.
        unsafe { std::slice::from_raw_parts(Node::data(node), Node::key_len(node)) }
    }

    /// The node's value.
    ///
    /// # Safety
    /// As for [`Node::key`].
    pub(super) unsafe fn value<'a>(node: *mut Node) -> &'a [u8] {
        // SAFETY: as for `key`.
        unsafe {
            std::slice::from_raw_parts(
                Node::data(node).add(Node::key_len(node)),
                (*node).value_len as usize,
            )
        }
    }
}

//! A cursor over a memtable's skiplist.

use std::ptr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::Result;
use crate::iter::InternalIterator;

use super::MemTable;
use super::skiplist::Node;

impl MemTable {
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

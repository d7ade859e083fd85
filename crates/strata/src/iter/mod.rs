//! Internal iterators: cursors over internal keys in the order of [`KeyOrder::internal`], from
//! memtables, blocks, tables and levels, merged into one stream and finally turned into the
//! user's view by [`db_iter`].
//!
//! Every movement can fail (a block read from disk may be damaged), so movements return
//! `Result`; after an error the cursor is invalid.
//!
//! [`KeyOrder::internal`]: crate::comparator::KeyOrder::internal

pub(crate) mod db_iter;
pub(crate) mod level;
pub(crate) mod merge;

use crate::error::Result;

/// A bidirectional cursor over internal keys.
pub(crate) trait InternalIterator: Send {
    /// True when positioned on an entry.
    fn valid(&self) -> bool;
    /// Positions on the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
    /// Positions on the last entry.
    fn seek_to_last(&mut self) -> Result<()>;
    /// Positions on the first entry at or after the internal key `target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Moves to the next entry. Requires: `valid()`.
    fn next(&mut self) -> Result<()>;
    /// Moves to the previous entry. Requires: `valid()`.
    fn prev(&mut self) -> Result<()>;
    /// The current internal key. Requires: `valid()`.
    fn key(&self) -> &[u8];
    /// The current value. Requires: `valid()`.
    fn value(&self) -> &[u8];
}

pub(crate) type BoxedIter = Box<dyn InternalIterator>;

/// A slice that a cursor lent out, kept past the borrow so that asking for it again costs a
/// load instead of a walk down the stack of cursors. Whoever keeps one owns the cursor that
/// lent it and drops or replaces it at every movement of that cursor: the bytes it names
/// (a key buffer, a block, a memtable node) stay put while the cursor stays put.
#[derive(Clone, Copy)]
pub(crate) struct LentSlice {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a `LentSlice` is only read by the owner of the cursor that lent it, and the
// cursors are `Send`.
unsafe impl Send for LentSlice {}

impl LentSlice {
    pub(crate) const EMPTY: LentSlice = LentSlice {
        ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
        len: 0,
    };

    pub(crate) fn new(bytes: &[u8]) -> LentSlice {
        LentSlice {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// The bytes again.
    ///
    /// # Safety
    /// The cursor that lent them has not moved or been dropped since, and the result does
    /// not outlive the borrow of its owner that it is tied to.
    pub(crate) unsafe fn get<'a>(self) -> &'a [u8] {
        // SAFETY: the caller's promise; EMPTY is a dangling, aligned pointer of length 0.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

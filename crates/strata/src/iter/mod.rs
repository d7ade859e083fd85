//! Internal iterators: cursors over internal keys in [`compare_internal`] order, from
//! memtables, blocks, tables and levels, merged into one stream and finally turned into the
//! user's view by [`db_iter`].
//!
//! Every movement can fail (a block read from disk may be damaged), so movements return
//! `Result`; after an error the cursor is invalid.
//!
//! [`compare_internal`]: crate::key::compare_internal

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

//! A bound on the filters and root index blocks that open tables hold.
//!
//! A point lookup reads a table's Bloom filter and the root block of its index every time, so
//! an open table keeps both in memory ([`super::reader::Pinned`]) rather than in the block
//! cache, where a stream of data blocks would evict them. They take about 2.3 bytes per key
//! (10 filter bits and a 4 KiB block's index entry), so without a bound a database's memory
//! would grow with its data. LevelDB bounds them by the number of open tables; Strata bounds
//! their bytes.
//!
//! Every table that holds its pinned blocks is in one queue, and each use of them sets the
//! table's `used` bit. When a load takes the bytes held past the budget, a clock hand goes
//! round the queue: a table whose bit is set has it cleared and goes to the back, and the
//! first whose bit is clear lets its blocks go, until the bytes held are within the budget.
//! A lookup that already holds a table's blocks keeps them until it ends (they are shared
//! through an `Arc`), and the table's next lookup reads them again from the file.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::reader::Table;

/// The shared budget of the pinned blocks of one database's tables.
pub(crate) struct PinBudget {
    budget: usize,
    /// Bytes the tables in `tables` hold between them.
    held: AtomicUsize,
    /// Tables holding their blocks, in the order the clock hand visits them.
    tables: Mutex<VecDeque<Weak<Table>>>,
}

impl PinBudget {
    /// A budget of `bytes` of pinned blocks across all tables.
    pub(crate) fn new(bytes: usize) -> Self {
        PinBudget {
            budget: bytes,
            held: AtomicUsize::new(0),
            tables: Mutex::new(VecDeque::new()),
        }
    }

    /// The bytes tables may hold between them.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes of pinned blocks the tables hold.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Counts `bytes` a table is about to hold, before it holds them: a clock hand that lets
    /// the table's blocks go meanwhile then gives back only bytes already counted.
    pub(crate) fn charge(&self, bytes: usize) {
        self.held.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Records that `table` holds the blocks [`PinBudget::charge`] counted, and lets other
    /// tables' blocks go while the bytes held are over the budget.
    pub(crate) fn admit(&self, table: &Arc<Table>) {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        tables.retain(|t| t.strong_count() > 0);
        tables.push_back(Arc::downgrade(table));
        self.evict_over_budget(&mut tables);
    }

    /// Lets tables' blocks go while the bytes held are over the budget, after a load that
    /// counted bytes without admitting its table.
    pub(crate) fn make_room(&self) {
        if self.held() > self.budget {
            let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
            self.evict_over_budget(&mut tables);
        }
    }

    fn evict_over_budget(&self, tables: &mut VecDeque<Weak<Table>>) {
        // Two rounds at most: the first clears every bit it passes, so the second lets go of
        // whatever it reaches, unless lookups keep setting them meanwhile.
        let mut turns = 2 * tables.len();
        while self.held() > self.budget && turns > 0 {
            turns -= 1;
            let Some(next) = tables.pop_front() else {
                break;
            };
            let Some(t) = next.upgrade() else {
                continue;
            };
            if t.take_used() {
                tables.push_back(next);
            } else {
                self.release(t.unpin());
            }
        }
    }

    /// Records that a table let `bytes` of pinned blocks go (it was evicted, or closed).
    pub(crate) fn release(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }
}

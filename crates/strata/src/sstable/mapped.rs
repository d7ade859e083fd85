//! Reading tables through memory mappings, with a bound on the pages the process holds.
//!
//! A block read with `pread` costs a system call, a page-cache lookup, an allocation and a
//! copy of the block. Through a shared mapping the same block is read in place. The cost is
//! memory: every page a read touches joins the process's resident set, and Linux maps the
//! cached pages around a faulting one as well (64 KiB, its default `fault_around_bytes`).
//! Left alone, a long scan would make the whole database resident. (Scans read this way,
//! and random reads of windows a scan left resident. A random read elsewhere uses `pread`:
//! a fault that maps and later unmaps sixteen pages costs more; see `Table::read_block_in`.)
//!
//! So each mapped table keeps one bit per 64 KiB window of its file, set when a read first
//! touches the window, and all tables share one budget of windows. When the windows set pass
//! the budget, whole tables in turn drop their resident pages (`MADV_DONTNEED`: the page
//! cache keeps them, so the next touch is a minor fault, not a disk read) and clear their
//! bits, until half the budget is left. The process then never holds more than the budget
//! (plus the windows touched while a drop runs) of mapped table pages.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::fs::FileMap;

/// The bytes a touch may make resident: the kernel's default fault-around window.
const WINDOW_BITS: u32 = 16;

/// The shared budget of resident mapped pages of one database's tables.
pub(crate) struct MappedPages {
    budget_windows: usize,
    counts: Arc<Counts>,
    tables: Mutex<Vec<Weak<MappedTable>>>,
}

/// One table's mapping, its touched windows and the blocks checked since they were touched.
pub(crate) struct MappedTable {
    map: Arc<FileMap>,
    /// The budget's counts, which this table leaves when dropped.
    counts: Arc<Counts>,
    windows: Box<[AtomicU64]>,
    /// Windows set in `windows`.
    set: AtomicUsize,
    /// One bit per [`CHECKED_SLOT`] boundary of the file, set when the block it names (see
    /// [`MappedTable::checked_bit`]) passed its checksum; cleared with the windows when the
    /// table's pages drop.
    checked: Box<[AtomicU64]>,
}

/// The granularity of checked-block bits: a page, within which aligned data blocks stay.
const CHECKED_SLOT: usize = 4096;

/// The windows a mapping of `len` bytes spans.
fn window_count(len: usize) -> usize {
    len.div_ceil(1 << WINDOW_BITS)
}

/// What the budget counts, shared with its tables so that a table leaves the counts when it
/// is dropped (a deleted table's windows once stayed counted as touched, and after enough
/// compactions every new touch released every live table).
#[derive(Default)]
struct Counts {
    /// Windows of every live mapped table together, set or not.
    all: AtomicUsize,
    /// Windows set since the last drop, across all live tables.
    touched: AtomicUsize,
}

impl Drop for MappedTable {
    fn drop(&mut self) {
        let c = &self.counts;
        c.all
            .fetch_sub(window_count(self.map.bytes().len()), Ordering::Relaxed);
        let set = self.set.load(Ordering::Relaxed);
        // Saturating, as in `release`: a racing touch may count a window here first.
        let _ = c
            .touched
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(set))
            });
    }
}

fn bit_words(bits: usize) -> Box<[AtomicU64]> {
    (0..bits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
}

impl MappedTable {
    pub(crate) fn map(&self) -> &Arc<FileMap> {
        &self.map
    }

    /// The bit of the block of `len` bytes at `start`, if it has one: the bit of slot
    /// boundary `b` names the block that starts on `b` (blocks kept within a page start on
    /// one), or else a block of at least a slot that starts within the slot before `b`. No
    /// two blocks share a bit without overlapping, so other blocks get none.
    fn checked_bit(&self, start: usize, len: usize) -> Option<(&AtomicU64, u64)> {
        if !start.is_multiple_of(CHECKED_SLOT) && len < CHECKED_SLOT {
            return None;
        }
        let slot = start.div_ceil(CHECKED_SLOT);
        let word = self.checked.get(slot / 64)?;
        Some((word, 1 << (slot % 64)))
    }

    /// True when the block of `len` bytes at `start` passed its checksum since this table's
    /// pages were last dropped. A scan reads each block of a window in turn, often more than
    /// once (every scan of a range); checking it again was a tenth of a scan's time. The
    /// block cache trusts a block it holds the same way.
    pub(crate) fn is_checked(&self, start: usize, len: usize) -> bool {
        self.checked_bit(start, len)
            .is_some_and(|(word, bit)| word.load(Ordering::Relaxed) & bit != 0)
    }

    /// True when every window of the `len` bytes at `start` was touched since this table's
    /// pages were last dropped, so that reading them in place faults nothing in.
    pub(crate) fn is_resident(&self, start: usize, len: usize) -> bool {
        let first = start >> WINDOW_BITS;
        let last = start.saturating_add(len.max(1) - 1) >> WINDOW_BITS;
        // A range past the end of the file finds no word and stops at once.
        (first..=last).all(|w| {
            self.windows
                .get(w / 64)
                .is_some_and(|word| word.load(Ordering::Relaxed) & (1 << (w % 64)) != 0)
        })
    }

    /// Records that the block of `len` bytes at `start` passed its checksum.
    pub(crate) fn mark_checked(&self, start: usize, len: usize) {
        if let Some((word, bit)) = self.checked_bit(start, len) {
            word.fetch_or(bit, Ordering::Relaxed);
        }
    }
}

impl MappedPages {
    /// A budget of `bytes` of resident table pages; 0 turns mapped reads off.
    pub(crate) fn new(bytes: usize) -> Self {
        MappedPages {
            budget_windows: bytes >> WINDOW_BITS,
            counts: Arc::new(Counts::default()),
            tables: Mutex::new(Vec::new()),
        }
    }

    /// Takes a table's mapping under the budget; `None` when the budget is too small to map
    /// anything.
    pub(crate) fn register(&self, map: Arc<FileMap>) -> Option<Arc<MappedTable>> {
        if self.budget_windows == 0 {
            return None;
        }
        let len = map.bytes().len();
        self.counts
            .all
            .fetch_add(window_count(len), Ordering::Relaxed);
        let table = Arc::new(MappedTable {
            map,
            counts: self.counts.clone(),
            windows: bit_words((len >> WINDOW_BITS) + 1),
            set: AtomicUsize::new(0),
            checked: bit_words(len / CHECKED_SLOT + 2),
        });
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        tables.retain(|t| t.strong_count() > 0);
        tables.push(Arc::downgrade(&table));
        Some(table)
    }

    /// True while every open table's every window fits in the budget together: then no
    /// table is ever released, and a random read faulting a window in pays once for all the
    /// later reads of it. (Past the budget, windows would come and go, and a fault that maps
    /// sixteen pages and later unmaps them costs more than reading the one block.)
    pub(crate) fn holds_all(&self) -> bool {
        self.counts.all.load(Ordering::Relaxed) <= self.budget_windows
    }

    /// True while mapped reads are on and [`MappedPages::holds_all`]: every table's random
    /// reads are made in place, none with `pread`.
    pub(crate) fn reads_all_in_place(&self) -> bool {
        self.budget_windows > 0 && self.holds_all()
    }

    /// Records a read of `len` bytes at `start` of `table`'s mapping, made just before.
    pub(crate) fn touch(&self, table: &MappedTable, start: usize, len: usize) {
        let first = start >> WINDOW_BITS;
        let last = (start + len.max(1) - 1) >> WINDOW_BITS;
        let mut new = 0;
        for w in first..=last {
            let Some(word) = table.windows.get(w / 64) else {
                continue;
            };
            let bit = 1u64 << (w % 64);
            // Relaxed: the bits only count pages; a lost race counts a window twice or not
            // at all, which moves the next drop a little.
            if word.load(Ordering::Relaxed) & bit == 0
                && word.fetch_or(bit, Ordering::Relaxed) & bit == 0
            {
                new += 1;
            }
        }
        if new > 0 {
            table.set.fetch_add(new, Ordering::Relaxed);
            if self.counts.touched.fetch_add(new, Ordering::Relaxed) + new > self.budget_windows {
                self.release();
            }
        }
    }

    /// Drops the resident pages of whole tables, in turn, until half the budget is left set;
    /// released tables go to the back of the line.
    fn release(&self) {
        // One thread drops; the others go on reading (their touches refault later).
        let Ok(mut tables) = self.tables.try_lock() else {
            return;
        };
        tables.retain(|t| t.strong_count() > 0);
        let live: Vec<Arc<MappedTable>> = tables.iter().filter_map(Weak::upgrade).collect();
        // Counted afresh from the tables' own counts, under the lock: `touched` is only a
        // trigger, and a touch racing a release could leave it above the windows set.
        let mut set: usize = live.iter().map(|t| t.set.load(Ordering::Relaxed)).sum();
        let mut released = 0;
        for table in &live {
            if set <= self.budget_windows / 2 {
                break;
            }
            for word in table.windows.iter().chain(table.checked.iter()) {
                word.store(0, Ordering::Relaxed);
            }
            set = set.saturating_sub(table.set.swap(0, Ordering::Relaxed));
            table.map.release_resident();
            released += 1;
        }
        self.counts.touched.store(set, Ordering::Relaxed);
        tables.rotate_left(released);
    }

    /// Windows set since the last drop (for tests).
    #[cfg(test)]
    fn touched(&self) -> usize {
        self.counts.touched.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, StdFs};

    fn mapped_file(dir: &std::path::Path, len: usize) -> Arc<FileMap> {
        let path = dir.join("t.sst");
        std::fs::write(&path, vec![7u8; len]).unwrap();
        StdFs
            .open(&path)
            .unwrap()
            .map()
            .expect("a file on disk maps")
    }

    #[test]
    fn counts_each_window_once_and_starts_over_past_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let pages = MappedPages::new(4 << WINDOW_BITS);
        let table = pages.register(mapped_file(dir.path(), 1 << 20)).unwrap();
        pages.touch(&table, 0, 100);
        pages.touch(&table, 50, 100);
        assert_eq!(pages.touched(), 1);
        // A read across a window boundary touches both.
        pages.touch(&table, (1 << WINDOW_BITS) - 10, 20);
        assert_eq!(pages.touched(), 2);
        pages.touch(&table, 3 << WINDOW_BITS, 1);
        pages.touch(&table, 4 << WINDOW_BITS, 1);
        assert_eq!(pages.touched(), 4);
        // The fifth window passes the budget: the table is dropped and counting restarts.
        pages.touch(&table, 5 << WINDOW_BITS, 1);
        assert_eq!(pages.touched(), 0);
        pages.touch(&table, 0, 1);
        assert_eq!(pages.touched(), 1);
        // The bytes read the same after the drop.
        assert!(table.map().bytes().iter().all(|&b| b == 7));
    }

    #[test]
    fn a_dropped_table_leaves_the_counts() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let pages = MappedPages::new(32 << WINDOW_BITS);
        let a = pages
            .register(mapped_file(d1.path(), 20 << WINDOW_BITS))
            .unwrap();
        assert!(pages.holds_all(), "20 windows fit a budget of 32");
        let b = pages
            .register(mapped_file(d2.path(), (20 << WINDOW_BITS) + 1))
            .unwrap();
        assert!(!pages.holds_all(), "41 windows do not");
        pages.touch(&a, 0, 3 << WINDOW_BITS);
        pages.touch(&b, 0, 1);
        assert_eq!(pages.touched(), 4);
        drop(a);
        assert_eq!(pages.touched(), 1, "a's three windows left with it");
        assert!(pages.holds_all(), "b's 21 windows fit alone");
        drop(b);
        assert_eq!(pages.touched(), 0);
    }

    #[test]
    fn a_zero_budget_maps_nothing_and_dead_tables_leave_the_list() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            MappedPages::new(0)
                .register(mapped_file(dir.path(), 4096))
                .is_none()
        );
        let pages = MappedPages::new(1 << 20);
        drop(pages.register(mapped_file(dir.path(), 4096)));
        let _kept = pages.register(mapped_file(dir.path(), 4096)).unwrap();
        assert_eq!(pages.tables.lock().unwrap().len(), 1);
    }
}

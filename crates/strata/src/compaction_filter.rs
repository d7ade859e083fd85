//! A hook through which the user decides, during compaction, which entries to keep: RocksDB's
//! `CompactionFilter`. The server drops expired keys through it; a library user may drop
//! whatever its own data says is dead (time-to-live, a retired prefix).

/// What to do with the entry a [`CompactionFilter`] was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterDecision {
    /// Write the entry to the compaction's output as it is.
    Keep,
    /// Remove the key: the entry and every older version of it go, as if the key had been
    /// deleted when the entry was written.
    Remove,
}

/// Decides, for entries that compaction rewrites, whether they stay.
///
/// The filter is shown only the newest version of a key, and only when no snapshot that lives
/// when the compaction starts sees it (it is newer than every such snapshot). A snapshot
/// taken while the compaction runs may see an entry the filter then removes, as with
/// RocksDB's filters: a filter that removes what a reader could still want must not be used
/// with snapshots taken meanwhile. Entries that stay in memtables, or in files that compaction
/// has not rewritten yet, are not shown: a filter makes dead data leave the disk, it does not
/// hide it from reads, so the reader must still treat such entries as absent by itself.
///
/// `filter` runs on a compaction thread while the job holds no lock; it must not call back
/// into the database.
pub trait CompactionFilter: Send + Sync {
    /// The decision for `key` with `value`, rewritten into `level`.
    fn filter(&self, level: usize, key: &[u8], value: &[u8]) -> FilterDecision;

    /// A name for logs and stats.
    fn name(&self) -> &str {
        "compaction-filter"
    }
}

//! What a read names besides its key: a snapshot, bounds, the cache's use, a column family.

use super::family::ColumnFamily;
use crate::snapshot::Snapshot;

/// How a read is made.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Read the state as of this snapshot instead of the latest.
    pub snapshot: Option<Snapshot>,
    /// Iterators start at this key (inclusive).
    pub lower_bound: Option<Vec<u8>>,
    /// Iterators end before this key (exclusive).
    pub upper_bound: Option<Vec<u8>>,
    /// Keep blocks read for this operation out of the block cache (for large scans).
    pub skip_cache: bool,
    /// The column family to read (`None`: the default one).
    pub family: Option<ColumnFamily>,
}

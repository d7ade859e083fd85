//! Statistics a user can read from a running database.

/// One level of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct LevelStats {
    /// Number of SST files.
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// The size the level aims for (0 for level 0, whose trigger is a file count, and for
    /// every level under the tiered merge policies, whose levels are run slots filled by
    /// count). Under tiering and lazy leveling each level here is one run slot: level `i`
    /// of the tree is levels `1 + (i-1)(T-1) ..= i(T-1)` here.
    pub target_bytes: u64,
    /// Bloom filter bits per key of the level's files, averaged over their entries (`None`
    /// for an empty level).
    pub filter_bits_per_key: Option<f64>,
}

/// One SST file of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct FileInfo {
    /// The level holding the file.
    pub level: usize,
    /// The file's number (its name is the number, zero-padded, with `.sst`).
    pub number: u64,
    /// Bytes on disk.
    pub size: u64,
    /// The smallest user key in the file.
    pub smallest_key: Vec<u8>,
    /// The largest user key in the file.
    pub largest_key: Vec<u8>,
    /// Entries, tombstones included.
    pub entries: u64,
    /// Tombstones.
    pub deletions: u64,
    /// Range tombstones (not among `entries`).
    pub range_deletions: u64,
    /// Bloom filter bits per key the file was built with (`None` for files written before
    /// the MANIFEST recorded it).
    pub filter_bits_per_key: Option<f64>,
}

/// One column family's tree.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyStats {
    /// The family's name.
    pub name: String,
    /// Its id, as WAL records and MANIFEST edits name it (0: the default family).
    pub id: u32,
    /// Per level, from 0 down.
    pub levels: Vec<LevelStats>,
    /// Its SST files, by level.
    pub files: Vec<FileInfo>,
    /// Bytes charged to its active memtable.
    pub memtable_bytes: u64,
}

/// A snapshot of the engine's counters and shape, from [`crate::Db::stats`]. The levels,
/// files and memtable figures are the default column family's; `families` has every
/// family's tree, and the byte and event counters are the whole database's.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Per level, from 0 down.
    pub levels: Vec<LevelStats>,
    /// The merge policy the default family's tree is built by.
    pub merge_policy: crate::MergePolicy,
    /// Its size ratio `T`.
    pub size_ratio: u64,
    /// Sorted runs per level of the tree, from level 0 (its files) down to the deepest
    /// holding data: under leveling at most one per level, under tiering up to `T - 1`.
    pub runs_per_level: Vec<usize>,
    /// Every column family, the default one first.
    pub families: Vec<FamilyStats>,
    /// Every SST file of the default family, by level (each family's are in `families`).
    pub files: Vec<FileInfo>,
    /// Bytes charged to the active memtable.
    pub memtable_bytes: u64,
    /// Memtables waiting to be flushed.
    pub immutable_memtables: usize,
    /// Bytes charged to those memtables.
    pub immutable_memtable_bytes: u64,
    /// Memory of flushed memtables kept for the next ones to fill while writes go on: at
    /// most a write buffer's worth of arena chunks and one hash bucket table, given back by
    /// a flush that finds no writes after it, a second after the last reuse, or at close.
    pub recycled_memtable_bytes: u64,
    /// Block cache lookups that found their block.
    pub block_cache_hits: u64,
    /// Block cache lookups that went to the file.
    pub block_cache_misses: u64,
    /// Bytes held by the block cache.
    pub block_cache_bytes: u64,
    /// The block cache's budget.
    pub block_cache_capacity: u64,
    /// Bytes of Bloom filters and root index blocks held by open tables, outside the block
    /// cache (about 2.3 bytes per entry with 10 filter bits per key and 4 KiB blocks), and
    /// the zstd dictionaries of tables that have read theirs, under
    /// [`crate::Options::table_pinned_bytes`].
    pub table_pinned_bytes: u64,
    /// Table files the table cache holds open now (at most
    /// [`crate::Options::max_open_files`]; reads in flight may keep a few more that it has let
    /// go open until they end).
    pub open_table_files: usize,
    /// Bytes of keys and values written by users since open.
    pub user_bytes_written: u64,
    /// Bytes appended to WAL files since open.
    pub wal_bytes_written: u64,
    /// Bytes of SSTs written by flushes since open.
    pub flush_bytes_written: u64,
    /// Bytes of SSTs written by compactions since open.
    pub compaction_bytes_written: u64,
    /// Bytes of SSTs read by compactions since open.
    pub compaction_bytes_read: u64,
    /// Flushes since open.
    pub flushes: u64,
    /// Compactions that merged files, since open.
    pub compactions: u64,
    /// Of those compactions and trivial moves, the ones reads asked for: a file that lookups
    /// consulted in vain too often was merged down while no level was over its target.
    pub read_compactions: u64,
    /// Files moved down a level without a rewrite, since open.
    pub trivial_moves: u64,
    /// Idle merges finished since open: every level merged into one sorted run once the
    /// database was left alone (`Options::idle_merge_after`). Counted in `compactions`
    /// too.
    pub idle_merges: u64,
    /// Idle merges given up since open, because a write came while they ran.
    pub idle_merges_given_up: u64,
    /// Background work is running or due: a flush or compaction under way, a level over its
    /// target, or a compaction reads asked for. `false` once compactions have settled.
    pub compaction_pending: bool,
    /// Microseconds writers spent slowed or stopped.
    pub write_stall_micros: u64,
    /// Bytes of torn WAL tail dropped at open.
    pub wal_tail_dropped_bytes: u64,
    /// Bytes of damaged WAL dropped at open in salvage mode.
    pub wal_salvaged_bytes: u64,
    /// Bytes of live SST files, of every column family.
    pub sst_bytes: u64,
    /// Bytes of live WAL files.
    pub wal_bytes: u64,
    /// The expected number of tables a lookup of a missing key reads a block of in vain:
    /// the sum over sorted runs (each level-0 file, each deeper level) of their filters'
    /// false-positive rates, from the bits each file was built with (files older than the
    /// record of it count with the policy's bits per key), every file as if written in
    /// today's [`crate::FilterFormat`]. See [`crate::FilterPolicy`].
    pub expected_false_positives: f64,
    /// Table lookups since open whose Bloom filter passed and whose table then held no
    /// entry of the key: the wasted probes that `expected_false_positives` predicts, per
    /// lookup of a missing key.
    pub filter_false_positives: u64,
    /// Data blocks that batched lookups ([`crate::Db::get_many`]) read from files together,
    /// in flight at once through io_uring; 0 where the kernel refuses it or files have no
    /// descriptor, and such lookups read one block at a time.
    pub parallel_block_reads: u64,
    /// The sequence number of the last visible write.
    pub last_sequence: u64,
    /// Snapshots held.
    pub live_snapshots: usize,
    /// The failure that made the database refuse writes, if any.
    pub poisoned: Option<String>,
}

impl Stats {
    /// Bytes the engine wrote to SSTs and WAL per byte of user data since open
    /// (`None` before any write).
    pub fn write_amplification(&self) -> Option<f64> {
        if self.user_bytes_written == 0 {
            return None;
        }
        let written =
            self.wal_bytes_written + self.flush_bytes_written + self.compaction_bytes_written;
        Some(written as f64 / self.user_bytes_written as f64)
    }

    /// Bytes on disk (SSTs and WALs).
    pub fn disk_bytes(&self) -> u64 {
        self.sst_bytes + self.wal_bytes
    }

    /// The fraction of block cache lookups that hit.
    pub fn cache_hit_rate(&self) -> f64 {
        let total = self.block_cache_hits + self.block_cache_misses;
        if total == 0 {
            0.0
        } else {
            self.block_cache_hits as f64 / total as f64
        }
    }
}

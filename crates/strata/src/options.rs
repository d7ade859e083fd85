//! Options of a database and of single reads and writes.

use std::sync::Arc;
use std::time::Duration;

use crate::filter_policy::{FilterFormat, FilterPolicy};
use crate::fs::{FileSystem, StdFs};
use crate::log::RecoveryMode;
use crate::sstable::{Compression, FilterKind, IndexKind};

/// How a database is opened and shaped. `Options::default()` suits most uses.
///
/// ```
/// let opts = strata::Options {
///     write_buffer_size: 4 << 20,
///     size_ratio: 2,
///     ..strata::Options::default()
/// };
/// assert_eq!(opts.block_size, 4096);
/// ```
#[derive(Clone)]
pub struct Options {
    /// Create the directory and an empty database when none exists (default `true`).
    pub create_if_missing: bool,
    /// Fail with [`crate::Error::InvalidArgument`] when a database already exists.
    pub error_if_exists: bool,
    /// Bytes of writes a memtable takes before it turns immutable and is flushed (64 MiB).
    pub write_buffer_size: usize,
    /// Immutable memtables waiting for flush beyond which writers wait (default 1, as in
    /// LevelDB). The memtables hold at most `1 + max_immutable_memtables` write buffers
    /// between them, each with hash buckets besides (a sixteenth of its size when that is a
    /// power of two, at most an eighth): with one, the memtable that fills while the last one
    /// flushes.
    pub max_immutable_memtables: usize,
    /// Flush a memtable that has held writes for this long, even if not full (default off).
    pub memtable_max_age: Option<Duration>,
    /// Uncompressed size of SST data blocks (4 KiB).
    pub block_size: usize,
    /// Keys between restart points in data blocks (16).
    pub block_restart_interval: usize,
    /// Whether the data blocks of uncompressed tables with a `block_size` of 4 KiB stay
    /// within one 4 KiB page of the file (default on; RocksDB's `block_align`): a block ends
    /// before the entry that would take it past a page, and starts on the next page when it
    /// would cross one, the bytes between left zero (about 2.5% more bytes with 116-byte
    /// entries). A read from the disk of such a block is then one page, not two, and a block
    /// is in the page cache whenever its one page is. Other block sizes and compressed
    /// tables are not aligned.
    pub block_align: bool,
    /// How filter bits are given to tables: the same bits per key everywhere (`Uniform {
    /// bits_per_key: 10 }`, the default: 1% false positives per table, 0.2% with Ribbon),
    /// or the same memory spread over the levels as Monkey spreads it, which cuts the wasted
    /// table reads of lookups of missing keys; see [`FilterPolicy`].
    pub filter_policy: FilterPolicy,
    /// The filters tables are written with: Ribbon filters, about a fifth of a Bloom
    /// filter's false positives for the same bits, or cache-local Bloom filters, quicker to
    /// build and probe; by default (`Auto`) Ribbon filters once the database's tables take
    /// more than half the memory the process may use, where a false positive is likely a
    /// read from the disk. Flushes then write Bloom filters (quicker to build) with the bits
    /// that give the same false positives: every lookup consults each level-0 table. Tables
    /// keep the format they were written with; all are read.
    pub filter_format: FilterFormat,
    /// Block compression (none).
    pub compression: Compression,
    /// With zstd compression, the most bytes of each table's dictionary (16 KiB; 0: none,
    /// else at least 256). A table trains its dictionary on its first 256 KiB of data blocks
    /// (at most 16 KiB of each; compressed alone, all but the last) and compresses the blocks
    /// from there on with it: 4 KiB blocks then share the dictionary's entropy tables rather
    /// than each carrying and decoding its own, and come out smaller and decompress faster
    /// (docs/design.md, "zstd dictionaries").
    pub zstd_dictionary_bytes: usize,
    /// How SST indexes are stored and searched (flat, binary-searched). Compactions write
    /// B-tree indexes in its place over the metadata budget unless
    /// [`Options::partition_over_budget`] is off.
    pub index_kind: IndexKind,
    /// How SST Bloom filters are stored (whole). With [`FilterKind::Partitioned`] and
    /// [`IndexKind::BTree`], an open table holds only two small blocks, the roots of its
    /// index and of its filter's partitions, and the rest goes through the block cache: for
    /// a database whose filters and indexes are much larger than
    /// [`Options::table_pinned_bytes`], random lookups then read a few small blocks rather
    /// than whole filters and indexes again (`git show 6047476:docs/BENCHMARKS.md`).
    /// Compactions write partitioned filters over that budget by themselves unless
    /// [`Options::partition_over_budget`] is off.
    pub filter_kind: FilterKind,
    /// Bytes of the block cache for data blocks and lower index levels (8 MiB). Open tables
    /// hold their Bloom filters and root index blocks besides, under
    /// [`Options::table_pinned_bytes`].
    pub block_cache_bytes: usize,
    /// Bytes of Bloom filters and root index blocks that open tables may hold between them.
    /// The default is a quarter of the memory the process may use (its control group's
    /// limit, else the machine's memory: [`crate::process_memory_limit`]), and at least 32
    /// MiB: with 16-byte keys, 100-byte values, 10 Bloom bits per key and 4 KiB blocks they
    /// take about 2.3 bytes per key, so a process allowed 384 MiB holds those of some 40
    /// million keys, and lookups read neither from the file. Each is read on its table's
    /// first lookup that needs it (a filter that turns a key away spares the index), and
    /// tables that flush and compaction write are installed with both already read. Past the
    /// budget, the tables whose blocks were used least recently let them go, and read them
    /// from the file again at their next lookup (as LevelDB's table cache closes tables past
    /// `max_open_files`); with [`FilterKind::Partitioned`] and [`IndexKind::BTree`] what a
    /// table holds is two small blocks (and a zstd table its dictionary, below), and such
    /// lookups read about 4 KiB per table instead. A table's zstd dictionary (see
    /// [`Options::zstd_dictionary_bytes`]) counts too, and is let go with them.
    pub table_pinned_bytes: usize,
    /// When the tree's filters and indexes, held whole, would take more than
    /// [`Options::table_pinned_bytes`], compactions write partitioned filters and B-tree
    /// indexes (as [`FilterKind::Partitioned`] and [`IndexKind::BTree`] would), whose
    /// tables hold two small blocks and whose lookups read a partition of about a block
    /// through the block cache, where metadata outlasts data blocks; under the budget they
    /// write what `filter_kind` and `index_kind` say (on by default). Flushes always write
    /// those: level 0 is small and read by every lookup. Tables with partitioned filters
    /// are SST format version 2 (docs/format.md), which releases from before partitioned
    /// filters refuse to open: turn this off to keep a database readable by those.
    pub partition_over_budget: bool,
    /// Bytes of table files the process may hold resident through memory mappings: an
    /// eighth of the memory the process may use. Scans take their blocks in place from a
    /// mapping of the table, without a system call or a copy, and so do random reads while
    /// every open table fits in the budget (a database of up to this size is then read as
    /// LevelDB reads its mapped tables); past the budget the mapped pages are released (the
    /// operating system's page cache keeps them), and random reads use `pread` and the block
    /// cache. 0 reads with `pread` only.
    pub table_map_bytes: usize,
    /// At most this many table files hold a descriptor at once (default: half the process's
    /// `RLIMIT_NOFILE` soft limit, at least 64). Past it, the files read least recently are
    /// closed, and opened again when read; their filters, indexes and mappings stay.
    pub max_open_files: usize,
    /// Size ratio `T` between adjacent levels (10).
    pub size_ratio: u64,
    /// How sorted runs are merged (leveling). `Leveling` keeps one run per level, merging
    /// each run that arrives into it: reads consult one run per level, and each byte is
    /// rewritten about `T` times per level. `Tiering` lets a level gather up to `T - 1` runs
    /// and merges them, with the run that finds the level full, into one run of the next
    /// level: each byte is written once per level, and reads consult up to `T - 1` runs per
    /// level. `LazyLeveling` tiers every level but the deepest, which holds most of the data
    /// and is leveled: in a tree of several levels writes cost less than leveling's, and
    /// lookups and scans about what leveling's do (Dostoevsky, SIGMOD 2018); a tree of one
    /// level is leveled. Under the tiered policies reads do not ask for compactions
    /// (`read_triggered_compaction` is ignored), which would undo the policy's trade, and
    /// the idle merge judges the tree by its levels. The policy is not stored in the
    /// database: open it with the same one.
    pub merge_policy: MergePolicy,
    /// Target bytes of level 1; level `n` aims at this times `T^(n-1)` (256 MiB, as RocksDB's
    /// `max_bytes_for_level_base`: with level 0 merged down several 64 MiB memtables at a
    /// time, a smaller level 1 is rewritten into level 2 after nearly every level-0
    /// compaction).
    pub level1_max_bytes: u64,
    /// Size at which compaction starts a new output file (16 MiB).
    pub target_file_size: u64,
    /// Level-0 files that start a compaction (4, as RocksDB's). Level 0 goes down all at
    /// once, merged with all of level 1 beneath it (random writes overlap all of it), so each
    /// level-0 compaction rewrites level 1, and eight files would halve how often: Strata
    /// alone, 20 million random puts under 384 MiB filled at about 515,000 a second with 8
    /// and wrote 4.81 bytes a byte put by the time the tree settled, at 432,310 a second and
    /// 5.35 with 4. But once writes stop, up to `trigger - 1` files stay in level 0 (until
    /// the idle merge, where it is on), and every lookup consults each, every seek reads a
    /// block of each: in the run where 8 left seven, readrandom read at 0.84x RocksDB's,
    /// readmissing at 0.88x and seekrandom at 0.71x, in one where it left none at 1.05x,
    /// 2.21x and 1.17x (docs/BENCHMARKS.md, "Larger than memory").
    pub level0_compaction_trigger: usize,
    /// Level-0 files from which each write is delayed by a millisecond (16).
    pub level0_slowdown_trigger: usize,
    /// Level-0 files at which writers wait for compaction (24).
    pub level0_stop_trigger: usize,
    /// Whether lookups that consult a file in vain may ask for it to be compacted (true).
    /// Each file allows one such lookup per 16 KiB of its size (at least 100), as LevelDB's
    /// seek compaction does; past that, while no level is over its target, the file is
    /// merged into the level below. It brings a tree that writes left with several sorted
    /// runs down to fewer once reads dominate. Off, the tree changes only for writes.
    pub read_triggered_compaction: bool,
    /// After this long without writes, a tree whose levels above the deepest hold more than
    /// twice their share of its bytes (`2/(T-1)` of them) flushes its memtable and merges
    /// every level into the deepest (or into the first level below it whose target holds
    /// them all), in one compaction that writes each live byte once (default 2 s; `None`
    /// turns it off). Random writes leave such a tree while the deepest
    /// level fills: after 10 million of them, level 0 and level 1 held twice the bytes of
    /// level 2, and the database took 1.3 times its live data on disk. A tree in shape is
    /// left alone. Reads go on during the merge and do not put it off: it makes every later
    /// read cheaper, and runs on a core that a single reader leaves free. A write while the
    /// merge runs gives it up, and each merge given up doubles the quiet time the next one
    /// waits for (up to 64 times), until one finishes.
    pub idle_merge_after: Option<Duration>,
    /// Compaction threads (1).
    pub max_background_compactions: usize,
    /// What to do with a WAL damaged anywhere but its torn tail.
    pub wal_recovery: RecoveryMode,
    /// The file system all I/O goes through.
    pub fs: Arc<dyn FileSystem>,
    /// Decides which entries compaction keeps (`None`: all that reads can see); see
    /// [`CompactionFilter`](crate::CompactionFilter).
    pub compaction_filter: Option<Arc<dyn crate::CompactionFilter>>,
    /// Folds the operands [`Db::merge`](crate::Db::merge) writes (`None`: merges are refused).
    /// A database that holds operands must be opened with the same operator to read them:
    /// without one, reads of such keys fail with [`crate::Error::Merge`], and flushes and
    /// compactions keep the operands, and what lies beneath them, unfolded.
    pub merge_operator: Option<Arc<dyn crate::MergeOperator>>,
    /// The order of keys (bytewise). The database records its name and refuses to open
    /// under a comparator of another name; every column family shares it.
    pub comparator: Arc<dyn crate::Comparator>,
    /// How long a WAL whose writes are all in tables is kept for
    /// [`Db::updates_since`](crate::Db::updates_since), counted from when it was set aside
    /// (`None`: not kept for its age). Checked each time a WAL is set aside, and at open,
    /// where the WALs kept before count from the open.
    pub wal_ttl: Option<Duration>,
    /// The most bytes of such WALs kept, the oldest deleted first (0: no bound by size).
    /// With neither this nor [`wal_ttl`](Options::wal_ttl) set (the default) a WAL is deleted
    /// as soon as its writes are in tables; with both, a WAL goes when either says so.
    pub wal_size_limit: u64,
    /// Told of every write group once it is in the WAL, in commit order (`None`: nobody).
    pub wal_listener: Option<Arc<dyn crate::listener::WalListener>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("write_buffer_size", &self.write_buffer_size)
            .field("block_size", &self.block_size)
            .field("filter_policy", &self.filter_policy)
            .field("filter_format", &self.filter_format)
            .field("compression", &self.compression)
            .field("zstd_dictionary_bytes", &self.zstd_dictionary_bytes)
            .field("index_kind", &self.index_kind)
            .field("filter_kind", &self.filter_kind)
            .field("block_cache_bytes", &self.block_cache_bytes)
            .field("table_pinned_bytes", &self.table_pinned_bytes)
            .field("partition_over_budget", &self.partition_over_budget)
            .field("table_map_bytes", &self.table_map_bytes)
            .field("max_open_files", &self.max_open_files)
            .field("size_ratio", &self.size_ratio)
            .field("merge_policy", &self.merge_policy)
            .field("wal_ttl", &self.wal_ttl)
            .field("wal_size_limit", &self.wal_size_limit)
            .field("comparator", &self.comparator.name())
            .finish_non_exhaustive()
    }
}

/// A quarter of the memory the process may use, at least 32 MiB.
fn default_pinned_bytes() -> usize {
    let quarter = crate::process_memory_limit() / 4;
    usize::try_from(quarter).unwrap_or(usize::MAX).max(32 << 20)
}

/// An eighth of the memory the process may use.
fn default_map_bytes() -> usize {
    let eighth = crate::process_memory_limit() / 8;
    usize::try_from(eighth).unwrap_or(usize::MAX)
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            write_buffer_size: 64 << 20,
            max_immutable_memtables: 1,
            memtable_max_age: None,
            block_size: 4096,
            block_align: true,
            block_restart_interval: 16,
            filter_policy: FilterPolicy::default(),
            filter_format: FilterFormat::default(),
            compression: Compression::None,
            zstd_dictionary_bytes: 16 << 10,
            index_kind: IndexKind::Flat,
            filter_kind: FilterKind::Whole,
            block_cache_bytes: 8 << 20,
            table_pinned_bytes: default_pinned_bytes(),
            partition_over_budget: true,
            table_map_bytes: default_map_bytes(),
            max_open_files: crate::version::open_files::default_max_open_files(),
            size_ratio: 10,
            merge_policy: MergePolicy::Leveling,
            level1_max_bytes: 256 << 20,
            target_file_size: 16 << 20,
            level0_compaction_trigger: 4,
            level0_slowdown_trigger: 16,
            level0_stop_trigger: 24,
            read_triggered_compaction: true,
            idle_merge_after: Some(Duration::from_secs(2)),
            max_background_compactions: 1,
            wal_recovery: RecoveryMode::Strict,
            fs: Arc::new(StdFs),
            compaction_filter: None,
            merge_operator: None,
            comparator: Arc::new(crate::BytewiseComparator),
            wal_ttl: None,
            wal_size_limit: 0,
            wal_listener: None,
        }
    }
}

impl Options {
    /// The order [`Options::comparator`] defines.
    pub(crate) fn key_order(&self) -> crate::comparator::KeyOrder {
        crate::comparator::KeyOrder::of(&self.comparator)
    }

    pub(crate) fn validate(&self) -> crate::Result<()> {
        let bad = |m: &str| Err(crate::Error::InvalidArgument(m.to_string()));
        if self.write_buffer_size < 1024 {
            return bad("write_buffer_size must be at least 1 KiB");
        }
        if self.block_size < 64 {
            return bad("block_size must be at least 64 bytes");
        }
        if (1..256).contains(&self.zstd_dictionary_bytes) || self.zstd_dictionary_bytes > 1 << 20 {
            return bad("zstd_dictionary_bytes must be 0 or from 256 bytes to 1 MiB");
        }
        if self.size_ratio < 2 {
            return bad("size_ratio must be at least 2");
        }
        if self.level0_compaction_trigger == 0
            || self.level0_slowdown_trigger < self.level0_compaction_trigger
            || self.level0_stop_trigger < self.level0_slowdown_trigger
        {
            return bad("level-0 triggers must satisfy 0 < compaction <= slowdown <= stop");
        }
        if self.max_immutable_memtables == 0 || self.max_background_compactions == 0 {
            return bad("max_immutable_memtables and max_background_compactions must be positive");
        }
        if self.filter_policy.bits_per_key() > 64 {
            return bad("filter_policy's bits per key must be at most 64");
        }
        Ok(())
    }
}

/// How a write is made durable.
///
/// The contract:
/// - `sync = true`: when the call returns, the write survives power loss (the WAL was
///   fsynced).
/// - `sync = false` (the default): the write survives a crash of the process, since it was
///   handed to the operating system, but the last writes may be lost if the machine loses
///   power.
/// - Either way a batch is atomic, and after any crash the database holds a prefix of the
///   acknowledged writes that contains every synced one.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Fsync the WAL before returning.
    pub sync: bool,
}

/// How runs are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergePolicy {
    /// One sorted run per level (LevelDB, RocksDB, and Strata by default).
    Leveling,
    /// Up to `T - 1` runs per level, merged together into the next level when full.
    Tiering,
    /// Tiering at every level but the last, which is leveled.
    LazyLeveling,
}

impl MergePolicy {
    /// Every policy, for the tuner.
    pub const ALL: [MergePolicy; 3] = [
        MergePolicy::Leveling,
        MergePolicy::Tiering,
        MergePolicy::LazyLeveling,
    ];

    /// The policy's name as `strata tune` prints it.
    pub fn name(self) -> &'static str {
        match self {
            MergePolicy::Leveling => "leveling",
            MergePolicy::Tiering => "tiering",
            MergePolicy::LazyLeveling => "lazy-leveling",
        }
    }
}

//! What every engine offers the workloads: the [`Engine`] trait, its settings and answers.

pub type Result<T> = std::result::Result<T, String>;

/// Settings every engine is opened with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub write_buffer_size: usize,
    pub cache_size: usize,
    pub bloom_bits: usize,
    pub block_size: usize,
    /// `none`, `lz4` or `zstd`.
    pub compression: String,
    /// With zstd, each table's dictionary bytes for Strata and RocksDB (`None`: each
    /// engine's default).
    pub max_dict_bytes: Option<usize>,
    /// Strata's budget for the filters and root indexes open tables hold
    /// (`Options::table_pinned_bytes`). The other engines keep theirs by their own defaults:
    /// RocksDB holds every open table's, LevelDB those of up to 1,000 open tables.
    pub table_pinned_bytes: Option<usize>,
    /// Strata's B-tree index and partitioned filters (`IndexKind::BTree`,
    /// `FilterKind::Partitioned`) rather than its defaults.
    pub partition_index_and_filters: bool,
    /// Strata's whole filters and flat indexes even over its metadata budget
    /// (`Options::partition_over_budget` off).
    pub whole_metadata: bool,
    /// Strata only: its filter format, `auto`, `bloom` or `ribbon`.
    pub filter_format: String,
    /// Size ratio between adjacent levels, where the engine lets it be set (Strata's
    /// `size_ratio`, RocksDB's `max_bytes_for_level_multiplier`; LevelDB's is fixed at 10).
    pub size_ratio: Option<u64>,
    /// Target bytes of level 1 (Strata's `level1_max_bytes`, RocksDB's
    /// `max_bytes_for_level_base`; LevelDB's is fixed at 10 MiB).
    pub level1_bytes: Option<u64>,
    /// Strata only: B-tree indexes in its tables, with whole Bloom filters.
    pub btree_index: bool,
    /// Bytes at which compaction cuts its output into files (Strata's `target_file_size`,
    /// RocksDB's `target_file_size_base`; LevelDB's is fixed at 2 MiB).
    pub target_file_size: Option<u64>,
    /// Level-0 files that start their merge (Strata's `level0_compaction_trigger`, RocksDB's
    /// `level0_file_num_compaction_trigger`; LevelDB's is fixed at 4). Under RocksDB's
    /// universal compaction the trigger is its fan-in, `size_ratio`.
    pub level0_trigger: Option<usize>,
    /// RocksDB only: its universal (tiered) compaction instead of leveled, with `size_ratio`
    /// as its fan-in. Any other engine refuses it.
    pub universal: bool,
    /// RocksDB only: its statistics' counters on (no timers, no histograms), so that `tree`
    /// can count the bytes its flushes and compactions write. Off in the comparisons, as
    /// db_bench leaves them.
    #[cfg_attr(not(feature = "compare"), allow(dead_code))]
    pub statistics: bool,
}

impl Settings {
    /// db_bench's defaults as strata-bench takes them: 64 MiB memtables, an 8 MiB cache,
    /// 10 Bloom bits per key, 4 KiB blocks, no compression, each engine's own level shape.
    pub fn new() -> Self {
        Settings {
            write_buffer_size: 64 << 20,
            cache_size: 8 << 20,
            bloom_bits: 10,
            block_size: 4096,
            compression: "none".into(),
            max_dict_bytes: None,
            table_pinned_bytes: None,
            partition_index_and_filters: false,
            whole_metadata: false,
            filter_format: "auto".to_string(),
            size_ratio: None,
            level1_bytes: None,
            btree_index: false,
            target_file_size: None,
            level0_trigger: None,
            universal: false,
            statistics: false,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a scan starts: at the first key, at the last (reading backward), or at the first
/// key at or after the one given.
#[derive(Debug, Clone, Copy)]
pub enum Start<'a> {
    First,
    Last,
    Key(&'a [u8]),
}

/// What a lookup saw of a value: its length and a digest of its bytes, so that the answer
/// check compares values, not only their lengths. Engines make it from the bytes their
/// reader hands over, without a copy where the reader allows one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub len: usize,
    pub digest: u64,
}

impl Seen {
    pub fn of(value: &[u8]) -> Seen {
        Seen {
            len: value.len(),
            digest: digest(value),
        }
    }
}

/// A 64-bit digest of `bytes` (a multiply-xorshift over 8-byte words): not cryptographic,
/// but any change of a byte or of the length changes it with near certainty.
pub fn digest(bytes: &[u8]) -> u64 {
    let mut h = (bytes.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
    }
    let mut tail = [0u8; 8];
    let rest = words.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 32)
}

/// A key-value engine as the benchmarks use it.
pub trait Engine: Send + Sync {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()>;
    /// Fetches a value; returns its length and digest.
    fn get(&self, key: &[u8]) -> Result<Option<Seen>>;
    /// Fetches several values at once, through the engine's batched lookup where it has
    /// one; returns their lengths and digests.
    fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Seen>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()>;
    /// Reads up to `limit` entries in key order from `start` (backward from `Start::Last`),
    /// handing each key and its value to `visit`; returns the entries read.
    fn scan(
        &self,
        start: Start<'_>,
        limit: u64,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<u64>;
    /// Positions at the first key at or after `key`, handing it to `landed`; true if there
    /// is one.
    fn seek(&self, key: &[u8], landed: &mut dyn FnMut(&[u8])) -> Result<bool>;
    /// db_bench's `waitforcompaction`, the same for every engine: flushes the memtable, then
    /// waits until no flush or compaction is pending or running.
    fn wait_for_compaction(&self) -> Result<()>;
    /// db_bench's `compact`: a full manual compaction of the whole key range.
    fn compact(&self) -> Result<()>;
    /// Bytes the engine wrote to disk by its own account, when it keeps one.
    fn bytes_written(&self) -> Option<u64> {
        None
    }
    /// What the engine's table files report of themselves (sizes before and after
    /// compression), where it offers that; an error where they contradict the settings.
    fn files(&self) -> Result<Option<String>> {
        Ok(None)
    }
    /// The engine's own counters, for `--statistics`, where it keeps them.
    fn statistics(&self) -> Option<String> {
        None
    }
    /// The engine's tree by its own account, where it keeps one.
    fn tree(&self) -> Result<Option<Tree>> {
        Ok(None)
    }
}

/// An engine's tree as its own counters and properties describe it.
#[derive(Debug, Clone)]
pub struct Tree {
    /// Bytes its flushes and compactions wrote to tables, where it counts them.
    pub table_bytes_written: Option<u64>,
    /// Bytes of the tables the tree is made of now.
    pub table_bytes: u64,
    /// Sorted runs per level, level 0 first: each level-0 table is a run, a deeper level is
    /// one run (or, under Strata's tiered policies, as many as it holds).
    pub runs: Vec<usize>,
}

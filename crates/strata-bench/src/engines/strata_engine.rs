use std::path::{Path, PathBuf};

use strata::{
    Compression, Db, FilterKind, IndexKind, Options, ReadOptions, WriteBatch, WriteOptions,
};

use super::{Engine, Result, Seen, Settings, Start, Tree};

pub struct StrataEngine {
    db: Db,
    dir: PathBuf,
    compression: Compression,
}

fn err(e: strata::Error) -> String {
    e.to_string()
}

impl StrataEngine {
    /// Opens Strata with the settings, its idle merge on only if `idle_merge`.
    pub fn open(dir: &Path, s: &Settings, idle_merge: bool) -> Result<Self> {
        Self::with_options(dir, options(s, idle_merge)?)
    }

    /// Opens Strata with options of the caller's making (`options`, then changed).
    pub fn with_options(dir: &Path, opts: Options) -> Result<Self> {
        Ok(StrataEngine {
            compression: opts.compression,
            db: Db::open(dir, opts).map_err(err)?,
            dir: dir.to_path_buf(),
        })
    }
}

/// Strata's options for the settings, its idle merge on only if `idle_merge`.
pub fn options(s: &Settings, idle_merge: bool) -> Result<Options> {
    let compression = match s.compression.as_str() {
        "none" => Compression::None,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => {
            return Err(format!(
                "strata has no compression {other:?} (none, lz4, zstd)"
            ));
        }
    };
    let filter_format = match s.filter_format.as_str() {
        "auto" => strata::FilterFormat::Auto,
        "bloom" => strata::FilterFormat::Bloom,
        "ribbon" => strata::FilterFormat::Ribbon,
        other => {
            return Err(format!(
                "strata has no filter format {other:?} (auto, bloom, ribbon)"
            ));
        }
    };
    let defaults = Options::default();
    let (index_kind, filter_kind) = match (s.partition_index_and_filters, s.btree_index) {
        (true, _) => (IndexKind::BTree, FilterKind::Partitioned),
        (false, true) => (IndexKind::BTree, defaults.filter_kind),
        (false, false) => (defaults.index_kind, defaults.filter_kind),
    };
    let opts = Options {
        write_buffer_size: s.write_buffer_size,
        block_cache_bytes: s.cache_size,
        filter_policy: strata::FilterPolicy::Uniform {
            bits_per_key: s.bloom_bits,
        },
        block_size: s.block_size,
        compression,
        zstd_dictionary_bytes: s.max_dict_bytes.unwrap_or(defaults.zstd_dictionary_bytes),
        table_pinned_bytes: s.table_pinned_bytes.unwrap_or(defaults.table_pinned_bytes),
        partition_over_budget: !s.whole_metadata,
        filter_format,
        index_kind,
        filter_kind,
        size_ratio: s.size_ratio.unwrap_or(defaults.size_ratio),
        level1_max_bytes: s.level1_bytes.unwrap_or(defaults.level1_max_bytes),
        target_file_size: s.target_file_size.unwrap_or(defaults.target_file_size),
        level0_compaction_trigger: s
            .level0_trigger
            .unwrap_or(defaults.level0_compaction_trigger),
        level0_slowdown_trigger: s
            .level0_trigger
            .map_or(defaults.level0_slowdown_trigger, |t| {
                defaults.level0_slowdown_trigger.max(2 * t)
            }),
        level0_stop_trigger: s.level0_trigger.map_or(defaults.level0_stop_trigger, |t| {
            defaults.level0_stop_trigger.max(3 * t)
        }),
        idle_merge_after: if idle_merge {
            defaults.idle_merge_after
        } else {
            None
        },
        ..defaults
    };
    Ok(opts)
}

impl Engine for StrataEngine {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        // Sized for the put, as `Db::put` sizes its batch: no growth while it is filled.
        let mut b = WriteBatch::with_capacity(key.len() + value.len() + 16);
        b.put(key, value);
        self.db.write(b, WriteOptions { sync }).map_err(err)
    }
    fn get(&self, key: &[u8]) -> Result<Option<Seen>> {
        Ok(self.db.get(key).map_err(err)?.map(|v| Seen::of(&v)))
    }
    fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Seen>>> {
        self.db
            .get_many(keys, &ReadOptions::default())
            .into_iter()
            .map(|v| Ok(v.map_err(err)?.map(|v| Seen::of(&v))))
            .collect()
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.db.write(b, WriteOptions { sync }).map_err(err)
    }
    fn scan(
        &self,
        start: Start<'_>,
        limit: u64,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<u64> {
        let mut it = self.db.iter(&ReadOptions::default()).map_err(err)?;
        match start {
            Start::First => it.seek_to_first(),
            Start::Last => it.seek_to_last(),
            Start::Key(k) => it.seek(k),
        }
        .map_err(err)?;
        let mut n = 0;
        while it.valid() && n < limit {
            visit(it.key(), it.value());
            n += 1;
            match start {
                Start::Last => it.prev(),
                _ => it.next(),
            }
            .map_err(err)?;
        }
        Ok(n)
    }
    fn seek(&self, key: &[u8], landed: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let mut it = self.db.iter(&ReadOptions::default()).map_err(err)?;
        it.seek(key).map_err(err)?;
        if it.valid() {
            landed(it.key());
        }
        Ok(it.valid())
    }
    fn wait_for_compaction(&self) -> Result<()> {
        // The flush and compaction work the tree's shape calls for, queued or running (with
        // the idle merge on, `strata-idle`, that too), and the deletion of what it replaced.
        self.db.flush().map_err(err)?;
        self.db.wait_for_compactions().map_err(err)
    }
    fn compact(&self) -> Result<()> {
        self.db.compact_range(None, None).map_err(err)?;
        self.wait_for_compaction()
    }
    fn files(&self) -> Result<Option<String>> {
        table_files(&self.dir, self.compression).map(Some)
    }
    fn bytes_written(&self) -> Option<u64> {
        let s = self.db.stats();
        Some(s.wal_bytes_written + s.flush_bytes_written + s.compaction_bytes_written)
    }
    fn statistics(&self) -> Option<String> {
        let s = self.db.stats();
        let levels: Vec<String> = s
            .levels
            .iter()
            .enumerate()
            .filter(|(_, l)| l.files > 0)
            .map(|(i, l)| format!("L{i} {} files {:.1} MB", l.files, l.bytes as f64 / 1e6))
            .collect();
        Some(format!(
            "levels: {}\nblock cache: {} hits, {} misses, {:.1} of {:.1} MB; tables hold \
             {:.1} MB pinned, {} files open\nflushes {}, compactions {} ({} trivial moves, {} \
             read-triggered, {} idle merges), work pending: {}",
            levels.join(", "),
            s.block_cache_hits,
            s.block_cache_misses,
            s.block_cache_bytes as f64 / 1e6,
            s.block_cache_capacity as f64 / 1e6,
            s.table_pinned_bytes as f64 / 1e6,
            s.open_table_files,
            s.flushes,
            s.compactions,
            s.trivial_moves,
            s.read_compactions,
            s.idle_merges,
            s.compaction_pending,
        ))
    }
    fn tree(&self) -> Result<Option<Tree>> {
        let s = self.db.stats();
        Ok(Some(Tree {
            table_bytes_written: Some(s.flush_bytes_written + s.compaction_bytes_written),
            table_bytes: s.sst_bytes,
            runs: s.runs_per_level,
        }))
    }
}

/// What Strata's table files record of themselves: their codec, and the bytes of keys and
/// values against the bytes of data blocks. An error if a table was written with another
/// codec than the one asked for.
fn table_files(dir: &Path, asked: Compression) -> Result<String> {
    let (mut tables, mut raw, mut stored) = (0u64, 0u64, 0u64);
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "sst") {
            continue;
        }
        let dump = match strata::inspect::dump_file(&path, false) {
            Ok(dump) => dump,
            // Deleted since the listing: a table a compaction had just replaced.
            Err(_) if !path.exists() => continue,
            Err(e) => return Err(err(e)),
        };
        let prop = |name: &str| {
            dump.summary
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, v)| v.parse::<u64>().ok())
        };
        let codec = prop("strata.compression");
        if codec != Some(asked as u64) {
            return Err(format!(
                "strata: {} was written with compression {codec:?}, not {asked:?} ({})",
                path.display(),
                asked as u64
            ));
        }
        raw +=
            prop("strata.raw-key-bytes").unwrap_or(0) + prop("strata.raw-value-bytes").unwrap_or(0);
        stored += prop("strata.data-bytes").unwrap_or(0);
        tables += 1;
    }
    Ok(format!(
        "table properties: {tables} tables of {asked:?}, {:.1} MB of keys and values in {:.1} MB \
         of data blocks",
        raw as f64 / 1_048_576.0,
        stored as f64 / 1_048_576.0
    ))
}

/// How a [`Faulty`] engine answers wrongly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Every 997th key (by a hash) is dropped on the way in.
    DropKeys,
    /// Every 97th key (by another hash) keeps its first version: later writes of it are
    /// ignored, so lookups and scans answer a stale value of the right length.
    StaleValues,
}

/// Strata that answers wrongly on purpose: the answer check's own test engines.
pub struct Faulty(pub StrataEngine, pub Fault);

fn hashed(key: &[u8], seed: u64, multiplier: u64) -> u64 {
    key.iter().fold(seed, |n, &b| {
        n.wrapping_mul(multiplier).wrapping_add(u64::from(b))
    })
}

impl Engine for Faulty {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        let skip = match self.1 {
            Fault::DropKeys => hashed(key, 0, 31).is_multiple_of(997),
            Fault::StaleValues => {
                hashed(key, 7, 131).is_multiple_of(97) && self.0.get(key)?.is_some()
            }
        };
        match skip {
            true => Ok(()),
            false => self.0.put(key, value, sync),
        }
    }
    fn get(&self, key: &[u8]) -> Result<Option<Seen>> {
        self.0.get(key)
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        self.0.delete(key, sync)
    }
    fn scan(
        &self,
        start: Start<'_>,
        limit: u64,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<u64> {
        self.0.scan(start, limit, visit)
    }
    fn seek(&self, key: &[u8], landed: &mut dyn FnMut(&[u8])) -> Result<bool> {
        self.0.seek(key, landed)
    }
    fn wait_for_compaction(&self) -> Result<()> {
        self.0.wait_for_compaction()
    }
    fn compact(&self) -> Result<()> {
        self.0.compact()
    }
}

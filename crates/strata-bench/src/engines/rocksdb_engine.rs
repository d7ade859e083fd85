use std::path::Path;

use rocksdb::statistics::{StatsLevel, Ticker};
use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompactionStyle, DBCompressionType, Options,
    UniversalCompactOptions, WaitForCompactOptions, WriteOptions,
};

use super::{Engine, Result, Seen, Settings, Start, Tree};

pub struct RocksEngine {
    db: DB,
    /// The options the database was opened with: they hold its statistics.
    opts: Options,
    statistics: bool,
}

/// RocksDB's universal compaction set up as tiering with fan-in `fan_in`: a merge starts at
/// `fan_in` sorted runs and takes exactly `fan_in` runs of about the same size (the newest
/// first), so runs merge `fan_in` at a time into one `fan_in` times larger, as in Strata's
/// tiering; and the whole-tree merge RocksDB makes for space waits until the newer runs hold
/// `fan_in - 1` times the oldest's bytes, the space tiering is allowed. Its merge that brings
/// the run count back to the trigger also needs `fan_in` runs at hand, so runs of different
/// sizes (a small one from the last flush) can leave more than `fan_in`.
fn universal(opts: &mut Options, fan_in: u64) -> Result<UniversalSettings> {
    let fan_in = i32::try_from(fan_in)
        .ok()
        .filter(|&t| t >= 2)
        .ok_or_else(|| format!("rocksdb: universal compaction's fan-in {fan_in} is not >= 2"))?;
    let u = UniversalSettings {
        fan_in,
        max_size_amplification_percent: 100 * (fan_in - 1),
    };
    let mut uco = UniversalCompactOptions::default();
    uco.set_min_merge_width(u.fan_in);
    uco.set_max_merge_width(u.fan_in);
    uco.set_max_size_amplification_percent(u.max_size_amplification_percent);
    opts.set_compaction_style(DBCompactionStyle::Universal);
    opts.set_level_zero_file_num_compaction_trigger(u.fan_in);
    opts.set_universal_compaction_options(&uco);
    Ok(u)
}

/// What `universal` set, for the check of the OPTIONS file.
struct UniversalSettings {
    fan_in: i32,
    max_size_amplification_percent: i32,
}

impl RocksEngine {
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(s.write_buffer_size);
        let universal = match (s.universal, s.size_ratio) {
            (true, Some(fan_in)) => {
                if s.level0_trigger.is_some_and(|t| t as u64 != fan_in) {
                    return Err("rocksdb: universal compaction's trigger is its fan-in".into());
                }
                Some(universal(&mut opts, fan_in)?)
            }
            (true, None) => return Err("rocksdb: universal compaction needs a size ratio".into()),
            (false, Some(ratio)) => {
                opts.set_max_bytes_for_level_multiplier(ratio as f64);
                None
            }
            (false, None) => None,
        };
        if let Some(bytes) = s.level1_bytes {
            opts.set_max_bytes_for_level_base(bytes);
        }
        if let Some(bytes) = s.target_file_size {
            opts.set_target_file_size_base(bytes);
        }
        if let (Some(trigger), None) = (s.level0_trigger, &universal) {
            let trigger = i32::try_from(trigger).map_err(|e| e.to_string())?;
            opts.set_level_zero_file_num_compaction_trigger(trigger);
        }
        if s.statistics {
            opts.enable_statistics();
            opts.set_statistics_level(StatsLevel::ExceptHistogramOrTimers);
        }
        opts.set_compression_type(match s.compression.as_str() {
            "none" => DBCompressionType::None,
            "lz4" => DBCompressionType::Lz4,
            "zstd" => DBCompressionType::Zstd,
            other => return Err(format!("rocksdb: compression {other:?} not offered here")),
        });
        if let Some(bytes) = s.max_dict_bytes {
            // RocksDB's defaults but the dictionary (window bits -14, its default level,
            // strategy 0), trained on 100 times its size.
            let dict = i32::try_from(bytes).map_err(|e| e.to_string())?;
            opts.set_compression_options(-14, 32767, 0, dict);
            opts.set_zstd_max_train_bytes(dict.saturating_mul(100));
        }
        let mut table = BlockBasedOptions::default();
        table.set_block_size(s.block_size);
        table.set_block_cache(&Cache::new_lru_cache(s.cache_size));
        table.set_bloom_filter(s.bloom_bits as f64, false);
        opts.set_block_based_table_factory(&table);
        // Two background threads, as Strata has (one flush, one compaction).
        opts.increase_parallelism(2);
        // Named, so that the batched MultiGet can be handed the default column family, and
        // given these options: `DB::open_cf` would open it with RocksDB's defaults (no Bloom
        // filter, a 32 MiB cache, no compression), whatever the database's options say.
        let db = DB::open_cf_with_opts(&opts, dir, [("default", opts.clone())])
            .map_err(|e| e.to_string())?;
        check_options_file(dir, s, universal.as_ref())?;
        Ok(RocksEngine {
            db,
            opts,
            statistics: s.statistics,
        })
    }

    fn property(&self, name: &str) -> Result<Option<u64>> {
        let text = self.db.property_value(name).map_err(|e| e.to_string())?;
        text.map(|t| {
            t.trim()
                .parse()
                .map_err(|_| format!("rocksdb: property {name} is {t:?}, not a number"))
        })
        .transpose()
    }
}

/// Reads back the options RocksDB recorded in its newest OPTIONS file and fails unless the
/// default column family runs with what it was given: compression, write buffer, block
/// size, Bloom filter, size ratio, target file size and compaction style.
fn check_options_file(
    dir: &Path,
    s: &Settings,
    universal: Option<&UniversalSettings>,
) -> Result<()> {
    let newest = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("OPTIONS-"))
        .max_by_key(|n| n[8..].parse::<u64>().unwrap_or(0))
        .ok_or("rocksdb: no OPTIONS file to check the settings in")?;
    let text = std::fs::read_to_string(dir.join(&newest)).map_err(|e| e.to_string())?;
    let default_cf = text
        .split("[CFOptions \"default\"]")
        .nth(1)
        .ok_or("rocksdb: OPTIONS file has no default column family")?;
    let value = |name: &str| {
        default_cf
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or("")
            .to_string()
    };
    let compression = match s.compression.as_str() {
        "lz4" => "kLZ4Compression",
        "zstd" => "kZSTD",
        _ => "kNoCompression",
    };
    let mut expected = vec![
        ("compression", compression.to_string()),
        ("write_buffer_size", s.write_buffer_size.to_string()),
        ("block_size", s.block_size.to_string()),
    ];
    match universal {
        Some(u) => {
            expected.push(("compaction_style", "kCompactionStyleUniversal".into()));
            expected.push(("level0_file_num_compaction_trigger", u.fan_in.to_string()));
        }
        None => {
            expected.push(("compaction_style", "kCompactionStyleLevel".into()));
            if let Some(ratio) = s.size_ratio {
                expected.push(("max_bytes_for_level_multiplier", format!("{ratio}.000000")));
            }
            if let Some(trigger) = s.level0_trigger {
                expected.push(("level0_file_num_compaction_trigger", trigger.to_string()));
            }
        }
    }
    if let Some(bytes) = s.level1_bytes {
        expected.push(("max_bytes_for_level_base", bytes.to_string()));
    }
    if let Some(bytes) = s.target_file_size {
        expected.push(("target_file_size_base", bytes.to_string()));
    }
    for (name, want) in expected {
        if value(name) != want {
            return Err(format!(
                "rocksdb: {newest} says {name}={}, not {want}",
                value(name)
            ));
        }
    }
    if let Some(u) = universal {
        // One line of `name=value;` pairs in braces.
        let line = value("compaction_options_universal");
        let fields: Vec<&str> = line.trim_matches(['{', '}']).split(';').collect();
        for want in [
            format!("min_merge_width={}", u.fan_in),
            format!("max_merge_width={}", u.fan_in),
            format!(
                "max_size_amplification_percent={}",
                u.max_size_amplification_percent
            ),
        ] {
            if !fields.contains(&want.as_str()) {
                return Err(format!(
                    "rocksdb: {newest} has compaction_options_universal={line}, without {want}"
                ));
            }
        }
    }
    if !value("filter_policy").contains("bloomfilter") {
        return Err(format!(
            "rocksdb: {newest} has no Bloom filter (filter_policy={})",
            value("filter_policy")
        ));
    }
    Ok(())
}

fn wo(sync: bool) -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(sync);
    w
}

impl Engine for RocksEngine {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        self.db
            .put_opt(key, value, &wo(sync))
            .map_err(|e| e.to_string())
    }
    fn get(&self, key: &[u8]) -> Result<Option<Seen>> {
        Ok(self
            .db
            .get_pinned(key)
            .map_err(|e| e.to_string())?
            .map(|v| Seen::of(&v)))
    }
    fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Seen>>> {
        let cf = self
            .db
            .cf_handle("default")
            .ok_or("rocksdb: no default column family")?;
        self.db
            .batched_multi_get_cf(cf, keys, false)
            .into_iter()
            .map(|v| Ok(v.map_err(|e| e.to_string())?.map(|v| Seen::of(&v))))
            .collect()
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        self.db
            .delete_opt(key, &wo(sync))
            .map_err(|e| e.to_string())
    }
    fn scan(
        &self,
        start: Start<'_>,
        limit: u64,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<u64> {
        let mut it = self.db.raw_iterator();
        match start {
            Start::First => it.seek_to_first(),
            Start::Last => it.seek_to_last(),
            Start::Key(k) => it.seek(k),
        }
        let mut n = 0;
        while n < limit {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            visit(k, v);
            n += 1;
            match start {
                Start::Last => it.prev(),
                _ => it.next(),
            }
        }
        it.status().map_err(|e| e.to_string())?;
        Ok(n)
    }
    fn seek(&self, key: &[u8], landed: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let mut it = self.db.raw_iterator();
        it.seek(key);
        if let Some(k) = it.key() {
            landed(k);
        }
        it.status().map_err(|e| e.to_string())?;
        Ok(it.valid())
    }
    fn wait_for_compaction(&self) -> Result<()> {
        // RocksDB's own WaitForCompact, told to flush first (db_bench's waitforcompaction).
        let mut opts = WaitForCompactOptions::default();
        opts.set_flush(true);
        self.db.wait_for_compact(&opts).map_err(|e| e.to_string())
    }
    fn compact(&self) -> Result<()> {
        self.db.compact_range(None::<&[u8]>, None::<&[u8]>);
        self.wait_for_compaction()
    }
    fn files(&self) -> Result<Option<String>> {
        // What the table files say of themselves: raw bytes against stored data-block bytes.
        // (The codec itself was checked in the OPTIONS file at open.)
        let Some(props) = self
            .db
            .property_value("rocksdb.aggregated-table-properties")
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let field = |name: &str| -> Option<f64> {
            let at = props.find(&format!("{name}="))? + name.len() + 1;
            props[at..].split(';').next()?.trim().parse().ok()
        };
        let (Some(key), Some(value), Some(stored)) = (
            field("raw key size"),
            field("raw value size"),
            field("data block size"),
        ) else {
            return Ok(None);
        };
        let raw = key + value;
        Ok(Some(format!(
            "table properties: {:.1} MB of keys and values in {:.1} MB of data blocks",
            raw / 1_048_576.0,
            stored / 1_048_576.0
        )))
    }
    fn tree(&self) -> Result<Option<Tree>> {
        // Level 0's tables are a sorted run each; a deeper level is one run (under universal
        // compaction as under leveled). The property is absent past the last level.
        let mut runs = Vec::new();
        while let Some(files) =
            self.property(&format!("rocksdb.num-files-at-level{}", runs.len()))?
        {
            let files = usize::try_from(files).map_err(|e| e.to_string())?;
            runs.push(if runs.is_empty() { files } else { files.min(1) });
        }
        while runs.len() > 1 && runs.last() == Some(&0) {
            runs.pop();
        }
        let table_bytes = self
            .property("rocksdb.live-sst-files-size")?
            .ok_or("rocksdb: no property rocksdb.live-sst-files-size")?;
        let table_bytes_written = self.statistics.then(|| {
            self.opts.get_ticker_count(Ticker::FlushWriteBytes)
                + self.opts.get_ticker_count(Ticker::CompactWriteBytes)
        });
        Ok(Some(Tree {
            table_bytes_written,
            table_bytes,
            runs,
        }))
    }
}

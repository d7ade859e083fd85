use std::path::Path;

use strata::{
    Compression, Db, FilterKind, IndexKind, Options, ReadOptions, WriteBatch, WriteOptions,
};

use super::{Engine, Result, Settings};

pub struct StrataEngine {
    db: Db,
}

fn err(e: strata::Error) -> String {
    e.to_string()
}

impl StrataEngine {
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
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
        let defaults = Options::default();
        let (index_kind, filter_kind) = match s.partition_index_and_filters {
            true => (IndexKind::BTree, FilterKind::Partitioned),
            false => (defaults.index_kind, defaults.filter_kind),
        };
        let opts = Options {
            write_buffer_size: s.write_buffer_size,
            block_cache_bytes: s.cache_size,
            bloom_bits_per_key: s.bloom_bits,
            block_size: s.block_size,
            compression,
            table_pinned_bytes: s.table_pinned_bytes.unwrap_or(defaults.table_pinned_bytes),
            index_kind,
            filter_kind,
            idle_merge_after: if s.idle_merge {
                defaults.idle_merge_after
            } else {
                None
            },
            ..defaults
        };
        Ok(StrataEngine {
            db: Db::open(dir, opts).map_err(err)?,
        })
    }
}

impl Engine for StrataEngine {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.db.write(b, WriteOptions { sync }).map_err(err)
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get(key).map_err(err)?.map(|v| v.len()))
    }
    fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<usize>>> {
        self.db
            .get_many(keys, &ReadOptions::default())
            .into_iter()
            .map(|v| Ok(v.map_err(err)?.map(|v| v.len())))
            .collect()
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.db.write(b, WriteOptions { sync }).map_err(err)
    }
    fn scan(&self, reverse: bool, limit: u64, visit: &mut dyn FnMut(&[u8], usize)) -> Result<u64> {
        let mut it = self.db.iter(&ReadOptions::default()).map_err(err)?;
        if reverse {
            it.seek_to_last().map_err(err)?;
        } else {
            it.seek_to_first().map_err(err)?;
        }
        let mut n = 0;
        while it.valid() && n < limit {
            visit(it.key(), it.value().len());
            n += 1;
            if reverse { it.prev() } else { it.next() }.map_err(err)?;
        }
        Ok(n)
    }
    fn seek(&self, key: &[u8]) -> Result<bool> {
        let mut it = self.db.iter(&ReadOptions::default()).map_err(err)?;
        it.seek(key).map_err(err)?;
        Ok(it.valid())
    }
    fn wait_for_compaction(&self) -> Result<()> {
        // With the idle merge off (the harness's default), `compaction_pending` is the flush
        // and compaction work the tree's shape calls for, queued or running.
        self.db.flush().map_err(err)?;
        while self.db.stats().compaction_pending {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(())
    }
    fn compact(&self) -> Result<()> {
        self.db.compact_range(None, None).map_err(err)
    }
    fn bytes_written(&self) -> Option<u64> {
        let s = self.db.stats();
        Some(s.wal_bytes_written + s.flush_bytes_written + s.compaction_bytes_written)
    }
}

/// Strata with every 997th key of a write dropped: the answer check's own test engine.
pub struct Wrong(pub StrataEngine);

fn dropped(key: &[u8]) -> bool {
    let n = key
        .iter()
        .fold(0u64, |n, &b| n.wrapping_mul(31).wrapping_add(u64::from(b)));
    n % 997 == 0
}

impl Engine for Wrong {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        match dropped(key) {
            true => Ok(()),
            false => self.0.put(key, value, sync),
        }
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        self.0.get(key)
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        self.0.delete(key, sync)
    }
    fn scan(&self, reverse: bool, limit: u64, visit: &mut dyn FnMut(&[u8], usize)) -> Result<u64> {
        self.0.scan(reverse, limit, visit)
    }
    fn seek(&self, key: &[u8]) -> Result<bool> {
        self.0.seek(key)
    }
    fn wait_for_compaction(&self) -> Result<()> {
        self.0.wait_for_compaction()
    }
    fn compact(&self) -> Result<()> {
        self.0.compact()
    }
}

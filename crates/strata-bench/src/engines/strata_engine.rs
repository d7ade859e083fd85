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
    fn scan(&self, reverse: bool, limit: u64) -> Result<(u64, u64)> {
        let mut it = self.db.iter(&ReadOptions::default()).map_err(err)?;
        if reverse {
            it.seek_to_last().map_err(err)?;
        } else {
            it.seek_to_first().map_err(err)?;
        }
        let (mut n, mut bytes) = (0u64, 0u64);
        while it.valid() && n < limit {
            bytes += (it.key().len() + it.value().len()) as u64;
            n += 1;
            if reverse { it.prev() } else { it.next() }.map_err(err)?;
        }
        Ok((n, bytes))
    }
    fn seek(&self, key: &[u8]) -> Result<bool> {
        let mut it = self.db.iter(&ReadOptions::default()).map_err(err)?;
        it.seek(key).map_err(err)?;
        Ok(it.valid())
    }
    fn settle(&self) -> Result<()> {
        loop {
            if !self.db.stats().compaction_pending {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    fn bytes_written(&self) -> Option<u64> {
        let s = self.db.stats();
        Some(s.wal_bytes_written + s.flush_bytes_written + s.compaction_bytes_written)
    }
}

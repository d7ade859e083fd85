use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, IteratorMode, Options, WriteOptions,
};

use super::{Engine, Result, Settings};

pub struct RocksEngine {
    db: DB,
}

impl RocksEngine {
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(s.write_buffer_size);
        opts.set_compression_type(match s.compression.as_str() {
            "none" => DBCompressionType::None,
            "lz4" => DBCompressionType::Lz4,
            "zstd" => DBCompressionType::Zstd,
            other => return Err(format!("rocksdb: compression {other:?} not offered here")),
        });
        let mut table = BlockBasedOptions::default();
        table.set_block_size(s.block_size);
        table.set_block_cache(&Cache::new_lru_cache(s.cache_size));
        table.set_bloom_filter(s.bloom_bits as f64, false);
        opts.set_block_based_table_factory(&table);
        // Two background threads, as Strata has (one flush, one compaction).
        opts.increase_parallelism(2);
        // Named, so that the batched MultiGet can be handed the default column family.
        let db = DB::open_cf(&opts, dir, ["default"]).map_err(|e| e.to_string())?;
        Ok(RocksEngine { db })
    }
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
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self
            .db
            .get_pinned(key)
            .map_err(|e| e.to_string())?
            .map(|v| v.len()))
    }
    fn get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<usize>>> {
        let cf = self
            .db
            .cf_handle("default")
            .ok_or("rocksdb: no default column family")?;
        self.db
            .batched_multi_get_cf(cf, keys, false)
            .into_iter()
            .map(|v| Ok(v.map_err(|e| e.to_string())?.map(|v| v.len())))
            .collect()
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        self.db
            .delete_opt(key, &wo(sync))
            .map_err(|e| e.to_string())
    }
    fn scan(&self, reverse: bool, limit: u64) -> Result<(u64, u64)> {
        let mode = if reverse {
            IteratorMode::End
        } else {
            IteratorMode::Start
        };
        let mut it = self.db.raw_iterator();
        match mode {
            IteratorMode::End => it.seek_to_last(),
            _ => it.seek_to_first(),
        }
        let (mut n, mut bytes) = (0u64, 0u64);
        while it.valid() && n < limit {
            bytes += (it.key().map_or(0, <[u8]>::len) + it.value().map_or(0, <[u8]>::len)) as u64;
            n += 1;
            if reverse { it.prev() } else { it.next() }
        }
        it.status().map_err(|e| e.to_string())?;
        Ok((n, bytes))
    }
    fn seek(&self, key: &[u8]) -> Result<bool> {
        let mut it = self.db.raw_iterator();
        it.seek(key);
        Ok(it.valid())
    }
    fn settle(&self) -> Result<()> {
        loop {
            let pending = self
                .db
                .property_int_value("rocksdb.compaction-pending")
                .map_err(|e| e.to_string())?
                .unwrap_or(0)
                + self
                    .db
                    .property_int_value("rocksdb.num-running-compactions")
                    .map_err(|e| e.to_string())?
                    .unwrap_or(0)
                + self
                    .db
                    .property_int_value("rocksdb.num-running-flushes")
                    .map_err(|e| e.to_string())?
                    .unwrap_or(0);
            if pending == 0 {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

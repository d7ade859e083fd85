use std::path::Path;

use fjall::{Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode};

use super::{Engine, Result, Settings};

pub struct FjallEngine {
    keyspace: Keyspace,
    part: PartitionHandle,
}

impl FjallEngine {
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        if s.compression != "none" {
            return Err("fjall is built here without compression".into());
        }
        let keyspace = Config::new(dir)
            .cache_size(s.cache_size as u64)
            .max_write_buffer_size(s.write_buffer_size as u64)
            .open()
            .map_err(|e| e.to_string())?;
        let opts = PartitionCreateOptions::default()
            .max_memtable_size(s.write_buffer_size as u32)
            .block_size(s.block_size as u32)
            .bloom_filter_bits(Some(s.bloom_bits as u8));
        let part = keyspace
            .open_partition("bench", opts)
            .map_err(|e| e.to_string())?;
        Ok(FjallEngine { keyspace, part })
    }

    fn persist(&self, sync: bool) -> Result<()> {
        if sync {
            self.keyspace
                .persist(PersistMode::SyncData)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

impl Engine for FjallEngine {
    fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        self.part.insert(key, value).map_err(|e| e.to_string())?;
        self.persist(sync)
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self
            .part
            .get(key)
            .map_err(|e| e.to_string())?
            .map(|v| v.len()))
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        self.part.remove(key).map_err(|e| e.to_string())?;
        self.persist(sync)
    }
    fn scan(&self, reverse: bool, limit: u64) -> Result<(u64, u64)> {
        let (mut n, mut bytes) = (0u64, 0u64);
        let iter: Box<dyn Iterator<Item = fjall::Result<fjall::KvPair>>> = if reverse {
            Box::new(self.part.iter().rev())
        } else {
            Box::new(self.part.iter())
        };
        for kv in iter {
            if n >= limit {
                break;
            }
            let (k, v) = kv.map_err(|e| e.to_string())?;
            bytes += (k.len() + v.len()) as u64;
            n += 1;
        }
        Ok((n, bytes))
    }
    fn seek(&self, key: &[u8]) -> Result<bool> {
        Ok(self
            .part
            .range(key.to_vec()..)
            .next()
            .transpose()
            .map_err(|e| e.to_string())?
            .is_some())
    }
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

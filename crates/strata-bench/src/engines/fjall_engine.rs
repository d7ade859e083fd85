use std::path::Path;

use fjall::{
    AbstractTree, CompressionType, Config, Keyspace, PartitionCreateOptions, PartitionHandle,
    PersistMode,
};

use super::{Engine, Result, Seen, Settings, Start};

pub struct FjallEngine {
    keyspace: Keyspace,
    part: PartitionHandle,
}

impl FjallEngine {
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        let compression = match s.compression.as_str() {
            "none" => CompressionType::None,
            "lz4" => CompressionType::Lz4,
            other => {
                return Err(format!(
                    "fjall 2 offers no compression {other:?} (none, lz4)"
                ));
            }
        };
        // fjall's write buffer cap bounds all memtables together, the one being written and
        // those being flushed. Its defaults keep the cap at four memtables (64 and 16 MiB);
        // the same ratio here lets a flush overlap the next memtable, as RocksDB's two write
        // buffers and LevelDB's immutable memtable do, instead of stalling every writer on
        // every flush. Under a memory limit the four take at most a quarter of it (as
        // Strata's metadata budget does): four 64 MiB memtables would take two thirds of
        // 384 MiB, and the kernel killed fjall there.
        let cap = (4 * s.write_buffer_size as u64)
            .min(strata::process_memory_limit() / 4)
            .max(4 << 20);
        let keyspace = Config::new(dir)
            .cache_size(s.cache_size as u64)
            .max_write_buffer_size(cap)
            .open()
            .map_err(|e| e.to_string())?;
        let opts = PartitionCreateOptions::default()
            .compression(compression)
            .max_memtable_size(u32::try_from(cap / 4).unwrap_or(u32::MAX))
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
    fn get(&self, key: &[u8]) -> Result<Option<Seen>> {
        Ok(self
            .part
            .get(key)
            .map_err(|e| e.to_string())?
            .map(|v| Seen::of(&v)))
    }
    fn delete(&self, key: &[u8], sync: bool) -> Result<()> {
        self.part.remove(key).map_err(|e| e.to_string())?;
        self.persist(sync)
    }
    fn scan(
        &self,
        start: Start<'_>,
        limit: u64,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<u64> {
        let iter: Box<dyn Iterator<Item = fjall::Result<fjall::KvPair>>> = match start {
            Start::First => Box::new(self.part.iter()),
            Start::Last => Box::new(self.part.iter().rev()),
            Start::Key(k) => Box::new(self.part.range(k.to_vec()..)),
        };
        let mut n = 0;
        for kv in iter {
            if n >= limit {
                break;
            }
            let (k, v) = kv.map_err(|e| e.to_string())?;
            visit(&k, &v);
            n += 1;
        }
        Ok(n)
    }
    fn seek(&self, key: &[u8], landed: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let first = self
            .part
            .range(key.to_vec()..)
            .next()
            .transpose()
            .map_err(|e| e.to_string())?;
        if let Some((k, _)) = &first {
            landed(k);
        }
        Ok(first.is_some())
    }
    fn wait_for_compaction(&self) -> Result<()> {
        // fjall has no "compaction pending". The nearest: flush the memtable and wait until
        // no sealed memtable is left to flush (`rotate_memtable_and_wait` returns at once
        // when the active memtable is empty, even with sealed ones queued), then until no
        // compaction runs and none has finished, nor the segments changed, for 250 ms (a
        // flush or compaction may queue another).
        self.part
            .rotate_memtable_and_wait()
            .map_err(|e| e.to_string())?;
        let pause = std::time::Duration::from_millis(250);
        while self.part.tree.sealed_memtable_count() > 0 {
            std::thread::sleep(pause / 5);
        }
        let state = || {
            (
                self.keyspace.active_compactions(),
                self.keyspace.compactions_completed(),
                self.part.segment_count(),
            )
        };
        loop {
            let before = state();
            std::thread::sleep(pause);
            if before.0 == 0 && state() == before {
                return Ok(());
            }
        }
    }
    fn compact(&self) -> Result<()> {
        self.part
            .rotate_memtable_and_wait()
            .map_err(|e| e.to_string())?;
        self.part.major_compact().map_err(|e| e.to_string())?;
        self.wait_for_compaction()
    }
}

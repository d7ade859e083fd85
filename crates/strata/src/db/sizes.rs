//! What the database can tell of itself without a scan: the approximate bytes of key ranges
//! (LevelDB's `GetApproximateSizes`) and named properties (`GetProperty`, with LevelDB's and
//! RocksDB's common names).

use std::fmt::Write as _;
use std::sync::Arc;

use super::Db;
use super::family::{Family, SuperVersion};
use crate::ColumnFamily;
use crate::error::Result;
use crate::iter::InternalIterator as _;
use crate::key::{SeqNo, lookup_key, user_key};
use crate::sstable::format::BLOCK_TRAILER_BYTES;
use crate::version::FileMeta;

impl Db {
    /// The approximate bytes that the keys in each `[start, limit)` range take: the data
    /// blocks of every table file the range covers, found from the tables' indexes (so a
    /// block's bytes at a time, counting the versions and tombstones the files hold, and
    /// none of their filters and indexes), plus the bytes of the range's entries in the
    /// memtables. Each range costs an
    /// index lookup or two per level and a walk of its memtable entries. A range whose
    /// limit is not after its start takes 0.
    pub fn approximate_sizes<K: AsRef<[u8]>>(&self, ranges: &[(K, K)]) -> Result<Vec<u64>> {
        approximate_sizes(&self.inner.default, ranges)
    }

    /// [`Db::approximate_sizes`] in column family `cf`.
    pub fn approximate_sizes_cf<K: AsRef<[u8]>>(
        &self,
        cf: &ColumnFamily,
        ranges: &[(K, K)],
    ) -> Result<Vec<u64>> {
        approximate_sizes(&cf.family, ranges)
    }

    /// The value of property `name`, or `None` for a name it does not know. The names are
    /// LevelDB's and RocksDB's, of the default family:
    ///
    /// - `leveldb.num-files-at-level<N>` (or `rocksdb.`): the files of level `N`;
    /// - `leveldb.stats` (or `rocksdb.stats`): a table of the levels' files and bytes;
    /// - `leveldb.sstables` (or `rocksdb.sstables`): every table by level, as
    ///   `number:bytes[smallest .. largest]`;
    /// - `leveldb.approximate-memory-usage`: memtables, block cache and held table metadata;
    /// - `rocksdb.estimate-num-keys`: the tables' entries less twice their tombstones (a
    ///   tombstone and the entry it hides, as RocksDB estimates), plus the memtables'
    ///   entries (their tombstones and older versions counted as keys);
    /// - `rocksdb.total-sst-files-size`, `rocksdb.cur-size-all-mem-tables`,
    ///   `rocksdb.num-immutable-mem-table`, `rocksdb.num-entries-active-mem-table`,
    ///   `rocksdb.block-cache-usage`, `rocksdb.block-cache-capacity`,
    ///   `rocksdb.estimate-table-readers-mem` (filters and indexes the tables hold) and
    ///   `rocksdb.estimate-pending-compaction-bytes` (the bytes of levels over their
    ///   targets).
    pub fn property(&self, name: &str) -> Option<String> {
        let (scheme, rest) = name.split_once('.')?;
        if scheme != "leveldb" && scheme != "rocksdb" {
            return None;
        }
        let sv = self.inner.default.super_version();
        // The full statistics only for the names that need them: they walk every table.
        let stats = || self.stats();
        if let Some(level) = rest.strip_prefix("num-files-at-level") {
            let level: usize = level.parse().ok()?;
            return Some(sv.version.levels.get(level)?.len().to_string());
        }
        let memtables = || std::iter::once(&sv.mem).chain(sv.imm.iter());
        let memtable_bytes: u64 = memtables().map(|m| m.approximate_size() as u64).sum();
        Some(match (scheme, rest) {
            (_, "stats") => level_table(&sv),
            (_, "sstables") => sstables(&sv),
            ("leveldb", "approximate-memory-usage") => {
                let stats = stats();
                let held = memtable_bytes + stats.recycled_memtable_bytes;
                (held + stats.block_cache_bytes + stats.table_pinned_bytes).to_string()
            }
            ("rocksdb", "estimate-num-keys") => {
                let (entries, deletions) =
                    sv.version.files().fold((0u64, 0u64), |(e, d), (_, f)| {
                        (e + f.entries, d + f.deletions)
                    });
                let tables = entries.saturating_sub(2 * deletions);
                (tables + memtables().map(|m| m.len()).sum::<u64>()).to_string()
            }
            ("rocksdb", "total-sst-files-size") => {
                let bytes: u64 = sv.version.files().map(|(_, f)| f.size).sum();
                bytes.to_string()
            }
            ("rocksdb", "cur-size-all-mem-tables") => memtable_bytes.to_string(),
            ("rocksdb", "num-immutable-mem-table") => sv.imm.len().to_string(),
            ("rocksdb", "num-entries-active-mem-table") => sv.mem.len().to_string(),
            ("rocksdb", "block-cache-usage") => stats().block_cache_bytes.to_string(),
            ("rocksdb", "block-cache-capacity") => stats().block_cache_capacity.to_string(),
            ("rocksdb", "estimate-table-readers-mem") => stats().table_pinned_bytes.to_string(),
            ("rocksdb", "estimate-pending-compaction-bytes") => {
                let over: u64 = stats()
                    .levels
                    .iter()
                    .filter(|l| l.target_bytes > 0)
                    .map(|l| l.bytes.saturating_sub(l.target_bytes))
                    .sum();
                over.to_string()
            }
            _ => return None,
        })
    }
}

fn approximate_sizes<K: AsRef<[u8]>>(family: &Arc<Family>, ranges: &[(K, K)]) -> Result<Vec<u64>> {
    let sv = family.super_version();
    ranges
        .iter()
        .map(|(start, limit)| range_bytes(&sv, start.as_ref(), limit.as_ref()))
        .collect()
}

/// The bytes of `[start, limit)` in the tables and memtables of `sv`.
fn range_bytes(sv: &SuperVersion, start: &[u8], limit: &[u8]) -> Result<u64> {
    let order = sv.mem.order();
    let cmp = |a: &[u8], b: &[u8]| order.user(a, b);
    if cmp(limit, start).is_le() {
        return Ok(0);
    }
    let mut total = 0;
    for (level, files) in sv.version.levels.iter().enumerate() {
        // Deeper levels are sorted and disjoint: only the files from the first that ends at
        // or after `start` can meet the range.
        let first = match level {
            0 => 0,
            _ => files.partition_point(|f| cmp(f.largest_user_key(), start).is_lt()),
        };
        for f in files.iter().skip(first) {
            if cmp(f.smallest_user_key(), limit).is_ge() {
                if level == 0 {
                    continue;
                }
                break;
            }
            if cmp(f.largest_user_key(), start).is_lt() {
                continue;
            }
            total += file_bytes(f, start, limit)?;
        }
    }
    for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
        let mut it = m.iter();
        it.seek(&lookup_key(start, SeqNo::MAX))?;
        while it.valid() && cmp(user_key(it.key()), limit).is_lt() {
            total += (it.key().len() + it.value().len()) as u64;
            it.next()?;
        }
    }
    Ok(total)
}

/// The bytes of file `f`'s data blocks from the one where `start` would be found up to the
/// one where `limit` would be (to the end of the data when `limit` is past its last key).
fn file_bytes(f: &FileMeta, start: &[u8], limit: &[u8]) -> Result<u64> {
    let table = f.table()?;
    let root = table.index()?;
    let block_of = |key: &[u8]| table.find_data_block(&root, &lookup_key(key, SeqNo::MAX), true);
    // The end of the last data block: where the block of the file's largest key ends.
    let data_end = || -> Result<u64> {
        Ok(block_of(f.largest_user_key())?
            .map_or(f.size, |h| h.offset + h.size + BLOCK_TRAILER_BYTES as u64))
    };
    let order = f.order();
    let begin = match order.user(start, f.smallest_user_key()).is_le() {
        true => 0,
        false => match block_of(start)? {
            Some(h) => h.offset,
            None => data_end()?,
        },
    };
    let end = match order.user(limit, f.largest_user_key()).is_gt() {
        true => data_end()?,
        false => match block_of(limit)? {
            Some(h) => h.offset,
            None => data_end()?,
        },
    };
    Ok(end.saturating_sub(begin))
}

/// LevelDB's `leveldb.stats`: per level, files and megabytes.
fn level_table(sv: &SuperVersion) -> String {
    let mut out = String::from("Level  Files Size(MB)\n--------------------\n");
    for (level, files) in sv.version.levels.iter().enumerate() {
        if files.is_empty() {
            continue;
        }
        let bytes: u64 = files.iter().map(|f| f.size).sum();
        let _ = writeln!(
            out,
            "{level:>5} {:>6} {:>8.1}",
            files.len(),
            bytes as f64 / 1048576.0
        );
    }
    out
}

/// LevelDB's `leveldb.sstables`: every table by level.
fn sstables(sv: &SuperVersion) -> String {
    let mut out = String::new();
    for (level, files) in sv.version.levels.iter().enumerate() {
        let _ = writeln!(out, "--- level {level} ---");
        for f in files {
            let _ = writeln!(
                out,
                " {}:{}[{} .. {}]",
                f.number.0,
                f.size,
                String::from_utf8_lossy(f.smallest_user_key()).escape_debug(),
                String::from_utf8_lossy(f.largest_user_key()).escape_debug(),
            );
        }
    }
    out
}

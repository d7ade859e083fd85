//! The database's counters and tree shape as [`Stats`](crate::Stats) reports them.

use std::sync::atomic::{AtomicU64, Ordering};

use super::family::Family;
use super::state::DbInner;
use crate::compaction;
use crate::key::NUM_LEVELS;
use crate::log::LogWriter;
use crate::mutex::lock;
use crate::stats::{FamilyStats, FileInfo, LevelStats, Stats};
use crate::version::{Version, wal_file_name};

impl DbInner {
    /// Per physical level, down to the deepest holding files (and at least the first
    /// seven, the levels a leveled tree has room for in LevelDB).
    pub(super) fn level_stats(v: &Version, family: &Family) -> Vec<LevelStats> {
        let fallback_bits = family.opts.filter_policy.bits_per_key() as f64;
        let shown = (0..NUM_LEVELS)
            .rev()
            .find(|&l| !v.levels[l].is_empty())
            .map_or(0, |l| l + 1)
            .max(7);
        let leveled = family.targets.policy == crate::options::MergePolicy::Leveling;
        (0..shown)
            .map(|l| LevelStats {
                files: v.levels[l].len(),
                bytes: v.level_bytes(l),
                target_bytes: if l == 0 || !leveled {
                    0
                } else {
                    family.targets.target_bytes(l)
                },
                filter_bits_per_key: compaction::level_bits(&v.levels[l], fallback_bits),
            })
            .collect()
    }

    pub(super) fn file_stats(v: &Version) -> Vec<FileInfo> {
        v.files()
            .map(|(level, f)| FileInfo {
                level: level.0,
                number: f.number.0,
                size: f.size,
                smallest_key: f.smallest_user_key().to_vec(),
                largest_key: f.largest_user_key().to_vec(),
                entries: f.entries,
                deletions: f.deletions,
                range_deletions: f.range_deletions,
                filter_bits_per_key: f.filter_bits(),
            })
            .collect()
    }

    pub(super) fn stats(&self) -> Stats {
        let st = lock(&self.state);
        let v = st.versions.current(0);
        let fallback_bits = self.opts.filter_policy.bits_per_key() as f64;
        let levels = Self::level_stats(&v, &self.default);
        let families = st
            .families()
            .map(|f| FamilyStats {
                name: f.family.name.clone(),
                id: f.family.id,
                levels: Self::level_stats(&st.versions.current(f.family.id), &f.family),
                files: Self::file_stats(&st.versions.current(f.family.id)),
                memtable_bytes: f.mem.approximate_size() as u64,
            })
            .collect();
        let files = Self::file_stats(&v);
        // The active WAL by what was appended (its file may be reserved ahead); the older
        // ones are closed and cut to their length.
        let active_wal = lock(&self.wal).as_ref().map_or(0, LogWriter::bytes_written);
        let wal_bytes = active_wal
            + st.default_family()
                .imm
                .iter()
                .filter_map(|m| {
                    self.store
                        .fs
                        .file_size(&self.dir.join(wal_file_name(m.wal_number())))
                        .ok()
                })
                .sum::<u64>();
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let default = st.default_family();
        let t = &self.default.targets;
        let mut runs_per_level = vec![v.levels[0].len()];
        for (p, files) in v.levels.iter().enumerate().skip(1) {
            let level = t.tree_level(p);
            if runs_per_level.len() <= level {
                runs_per_level.resize(level + 1, 0);
            }
            runs_per_level[level] += usize::from(!files.is_empty());
        }
        while runs_per_level.len() > 1 && runs_per_level.last() == Some(&0) {
            runs_per_level.pop();
        }
        let sst_bytes: u64 = st.versions.files().map(|(_, _, f)| f.size).sum();
        let format = self.opts.filter_format;
        Stats {
            levels,
            merge_policy: t.policy,
            size_ratio: t.size_ratio,
            runs_per_level,
            families,
            files,
            memtable_bytes: default.mem.approximate_size() as u64,
            immutable_memtables: default.imm.len(),
            immutable_memtable_bytes: default
                .imm
                .iter()
                .map(|m| m.approximate_size() as u64)
                .sum(),
            recycled_memtable_bytes: self.chunk_pool.bytes() as u64,
            block_cache_hits: self.store.cache.hits(),
            block_cache_misses: self.store.cache.misses(),
            block_cache_bytes: self.store.cache.usage() as u64,
            block_cache_capacity: self.store.cache.capacity() as u64,
            table_pinned_bytes: self.store.pins.held() as u64,
            open_table_files: self.store.open_files.open_now(),
            user_bytes_written: r(&c.user_bytes),
            wal_bytes_written: r(&c.wal_bytes),
            flush_bytes_written: r(&c.flush_bytes),
            compaction_bytes_written: r(&c.compaction_bytes_written),
            compaction_bytes_read: r(&c.compaction_bytes_read),
            flushes: r(&c.flushes),
            compactions: r(&c.compactions),
            read_compactions: r(&c.read_compactions),
            trivial_moves: r(&c.trivial_moves),
            idle_merges: r(&c.idle_merges),
            idle_merges_given_up: r(&c.idle_merges_given_up),
            compaction_pending: st.families().any(|f| self.work_pending(&st, f)),
            write_stall_micros: r(&c.stall_micros),
            wal_tail_dropped_bytes: r(&c.wal_tail_dropped_bytes),
            wal_salvaged_bytes: r(&c.wal_salvaged_bytes),
            sst_bytes,
            wal_bytes,
            expected_false_positives: compaction::expected_false_positives(
                &v,
                fallback_bits,
                format,
                (sst_bytes, crate::process_memory_limit()),
            ),
            filter_false_positives: self.store.filter_false_positives.load(Ordering::Relaxed),
            parallel_block_reads: self.store.parallel_reads.load(Ordering::Relaxed),
            last_sequence: self.visible.load(Ordering::Acquire),
            live_snapshots: self.snapshots.count(),
            poisoned: st.bg_error.as_ref().map(|e| e.to_string()),
        }
    }
}

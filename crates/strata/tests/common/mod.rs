//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

pub mod watched_fs;

use strata::{Db, MemFs, Options};

/// Options that make every part of the tree work on little data: tiny memtables, blocks and
/// files, and low level targets.
pub fn tiny_options(fs: Option<MemFs>, size_ratio: u64) -> Options {
    let mut o = Options {
        write_buffer_size: 2048,
        block_size: 128,
        block_restart_interval: 4,
        target_file_size: 2048,
        level1_max_bytes: 8 * 1024,
        size_ratio,
        level0_compaction_trigger: 2,
        level0_slowdown_trigger: 4,
        level0_stop_trigger: 8,
        block_cache_bytes: 64 * 1024,
        // A few tables' filters and root indexes: lookups keep reading them again.
        table_pinned_bytes: 2048,
        // Four 64 KiB windows: on a real file system, scans release mapped pages often.
        table_map_bytes: 256 * 1024,
        // Tests that look at the tree's shape must not find it merged behind their back;
        // those that want the merge ask for it.
        idle_merge_after: None,
        // The tiny budget above would have compactions write partitioned metadata: tests
        // get the layout they ask for, and those of the fallback turn it on.
        partition_over_budget: false,
        ..Options::default()
    };
    if let Some(fs) = fs {
        o.fs = Arc::new(fs);
    }
    o.merge_policy = merge_policy();
    o
}

/// Strata's default options under the merge policy `STRATA_MERGE_POLICY` names: every test
/// builds its options from these or from `tiny_options`, so that the suite runs under each
/// policy (`scripts/test.sh`). A test of what one policy does names its policy.
pub fn options() -> Options {
    Options {
        merge_policy: merge_policy(),
        ..Options::default()
    }
}

/// The merge policy `STRATA_MERGE_POLICY` names (`leveling`, `tiering` or `lazy`), for
/// running the tests under each; leveling when unset. A name it does not know fails the
/// test rather than running another policy.
pub fn merge_policy() -> strata::MergePolicy {
    match std::env::var("STRATA_MERGE_POLICY").as_deref() {
        Err(_) | Ok("leveling") => strata::MergePolicy::Leveling,
        Ok("tiering") => strata::MergePolicy::Tiering,
        Ok("lazy") => strata::MergePolicy::LazyLeveling,
        Ok(other) => panic!("STRATA_MERGE_POLICY={other}: leveling, tiering or lazy"),
    }
}

/// Everything a full forward scan returns, checked to come in key order, each key once.
pub fn dump(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let entries: Vec<(Vec<u8>, Vec<u8>)> = db.scan(..).unwrap().map(|e| e.unwrap()).collect();
    // The scan as the list it is: in strictly increasing key order, each key once. A map
    // built from it would hide a key out of order or a key twice.
    if let Some(w) = entries.windows(2).find(|w| w[0].0 >= w[1].0) {
        panic!(
            "the scan is out of order or repeats a key: {:?} then {:?}",
            w[0].0, w[1].0
        );
    }
    entries.into_iter().collect()
}

/// A deterministic pseudo-random generator (splitmix64) so tests can print and replay seeds.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A seed from the environment (`STRATA_SEED`) or the clock, printed so a failure can be
/// replayed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("STRATA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{test}: seed {seed} (replay with STRATA_SEED={seed})");
    seed
}

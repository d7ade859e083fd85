//! The merge policies on the same writes: leveling keeps one run per level, tiering gathers
//! up to `T - 1` runs per level and writes each byte fewer times, lazy leveling tiers every
//! level but the deepest, which stays one run. Every policy reads back what was written,
//! after a reopen too.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use strata::{Db, MemFs, MergePolicy, Options, Stats};

const T: u64 = 4;
const KEYS: u64 = 20_000;
const KEYS_PER_FLUSH: u64 = 200;

fn options(fs: &MemFs, policy: MergePolicy) -> Options {
    Options {
        merge_policy: policy,
        // About what a flush of KEYS_PER_FLUSH keys holds (and above it, so that every table
        // comes from `fill`'s own flushes): lazy leveling sizes its levels in write buffers.
        write_buffer_size: 32 * 1024,
        target_file_size: 8 * 1024,
        level1_max_bytes: 16 * 1024,
        size_ratio: T,
        level0_compaction_trigger: 2,
        read_triggered_compaction: false,
        ..common::tiny_options(Some(fs.clone()), T)
    }
}

fn key(i: u64) -> Vec<u8> {
    format!(
        "key{:012}",
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 1_000_000_007
    )
    .into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value{i}-{}", "v".repeat((i % 40) as usize)).into_bytes()
}

fn settle(db: &Db) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while db.stats().compaction_pending {
        assert!(Instant::now() < deadline, "compactions did not settle");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The runs of each level of the tree (level 0: its files), from the stats' run slots.
fn runs_per_level(s: &Stats, policy: MergePolicy) -> Vec<usize> {
    let slots = match policy {
        MergePolicy::Leveling => 1,
        _ => (T - 1) as usize,
    };
    let mut runs = vec![s.levels[0].files];
    for (p, l) in s.levels.iter().enumerate().skip(1) {
        let level = 1 + (p - 1) / slots;
        if runs.len() <= level {
            runs.resize(level + 1, 0);
        }
        runs[level] += usize::from(l.files > 0);
    }
    while runs.len() > 1 && runs.last() == Some(&0) {
        runs.pop();
    }
    runs
}

/// Fills a database under `policy`, each flush followed by the compactions it starts, so
/// that the tree goes through the same shapes whatever the machine's speed. Returns the
/// database, the most runs any level below 0 held after a flush settled, and the bytes
/// compaction wrote.
fn fill(fs: &MemFs, policy: MergePolicy) -> (Db, usize, u64) {
    let db = Db::open("/db", options(fs, policy)).unwrap();
    let mut most_runs = 0;
    for i in 0..KEYS {
        db.put(&key(i), &value(i)).unwrap();
        // Overwrites, so that merges have versions to drop.
        if i % 3 == 0 {
            db.put(&key(i / 2), &value(i)).unwrap();
        }
        if (i + 1) % KEYS_PER_FLUSH == 0 {
            db.flush().unwrap();
            settle(&db);
            let runs = runs_per_level(&db.stats(), policy);
            most_runs = most_runs.max(runs.iter().skip(1).copied().max().unwrap_or(0));
        }
    }
    let written = db.stats().compaction_bytes_written;
    (db, most_runs, written)
}

fn model() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..KEYS {
        m.insert(key(i), value(i));
        if i % 3 == 0 {
            m.insert(key(i / 2), value(i));
        }
    }
    m
}

#[test]
fn each_policy_keeps_its_shape_reads_back_and_tiering_writes_less() {
    let want = model();
    let mut written = BTreeMap::new();
    for policy in [
        MergePolicy::Leveling,
        MergePolicy::Tiering,
        MergePolicy::LazyLeveling,
    ] {
        let fs = MemFs::new();
        let (db, most_runs, bytes) = fill(&fs, policy);
        written.insert(format!("{policy:?}"), bytes);
        let s = db.stats();
        let runs = runs_per_level(&s, policy);
        eprintln!("{policy:?}: runs per level {runs:?}, at most {most_runs}, {bytes} bytes");
        assert!(
            runs.len() >= 3,
            "{policy:?}: the tree is too shallow: {runs:?}"
        );
        match policy {
            MergePolicy::Leveling => assert_eq!(most_runs, 1, "leveling holds one run a level"),
            MergePolicy::Tiering => {
                assert!(most_runs > 1, "tiering never gathered runs");
                assert!(most_runs < T as usize, "a level held more than T - 1 runs");
            }
            MergePolicy::LazyLeveling => {
                assert!(most_runs > 1, "lazy leveling never gathered runs");
                assert!(most_runs < T as usize, "a level held more than T - 1 runs");
                assert_eq!(
                    runs.last(),
                    Some(&1),
                    "the deepest level is one run: {runs:?}"
                );
            }
        }
        assert!(common::dump(&db) == want, "{policy:?}: contents differ");
        db.close().unwrap();
        let db = Db::open("/db", options(&fs, policy)).unwrap();
        assert!(
            common::dump(&db) == want,
            "{policy:?}: contents after reopen"
        );
        for i in (0..KEYS).step_by(97) {
            assert_eq!(db.get(&key(i)).unwrap(), want.get(&key(i)).cloned());
        }
    }
    let (lev, tier, lazy) = (
        written["Leveling"],
        written["Tiering"],
        written["LazyLeveling"],
    );
    assert!(
        tier * 10 < lev * 7,
        "tiering wrote {tier} compaction bytes against leveling's {lev}"
    );
    assert!(
        lazy < lev,
        "lazy leveling wrote {lazy} compaction bytes against leveling's {lev}"
    );
}

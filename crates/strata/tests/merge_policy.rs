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
    fill_with(options(fs, policy))
}

/// [`fill`] under options of the caller's making.
fn fill_with(opts: Options) -> (Db, usize, u64) {
    let policy = opts.merge_policy;
    let db = Db::open("/db", opts).unwrap();
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
            }
            MergePolicy::LazyLeveling => {
                assert!(most_runs > 1, "lazy leveling never gathered runs");
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

/// Tiering at ratios whose levels have one slot (`T = 2`), whose deepest level has one slot
/// (`T = 3` and `16` among 32 levels), and past the levels there are (`T = 40`): fifty
/// level-0 merges, more than there are levels, and the writes never stall.
#[test]
fn tiering_keeps_taking_writes_at_every_ratio() {
    let want = model();
    for ratio in [2, 3, 16, 40] {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let fs = MemFs::new();
            let opts = Options {
                size_ratio: ratio,
                ..options(&fs, MergePolicy::Tiering)
            };
            let (db, _, _) = fill_with(opts);
            let _ = tx.send((common::dump(&db), db.stats().runs_per_level));
        });
        let (state, runs) = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("T = {ratio}: the writes stalled (or the writer failed)"));
        eprintln!("T = {ratio}: runs per level {runs:?}");
        assert!(state == want, "T = {ratio}: contents differ");
        // At most T - 1 runs a level (the slots a level has, past 32 levels).
        let slots = (ratio - 1).min(31) as usize;
        assert!(
            runs.iter().skip(1).all(|&r| r <= slots),
            "T = {ratio}: {runs:?}"
        );
    }
}

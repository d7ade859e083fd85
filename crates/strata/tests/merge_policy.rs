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

/// The most sorted runs below level 0 that one key may be in, from the files' key ranges
/// alone: the most files of levels 1 and deeper whose ranges hold any one file's first key.
/// Files of one run never overlap, so this counts runs without the engine's own account of
/// which levels make up a run.
fn runs_at_one_key(s: &Stats) -> usize {
    let files: Vec<_> = s.files.iter().filter(|f| f.level > 0).collect();
    files
        .iter()
        .map(|at| {
            let k = &at.smallest_key;
            files
                .iter()
                .filter(|f| &f.smallest_key <= k && k <= &f.largest_key)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Files of each level below 0 whose key ranges overlap: none, wherever a level is a run.
fn overlapping(s: &Stats) -> Vec<String> {
    let mut by_level: BTreeMap<usize, Vec<_>> = BTreeMap::new();
    for f in s.files.iter().filter(|f| f.level > 0) {
        by_level.entry(f.level).or_default().push(f);
    }
    let mut out = Vec::new();
    for (level, mut files) in by_level {
        files.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key));
        for w in files.windows(2) {
            if w[0].largest_key >= w[1].smallest_key {
                out.push(format!(
                    "level {level}: files {} and {}",
                    w[0].number, w[1].number
                ));
            }
        }
    }
    out
}

/// Fills a database under `policy`, each flush followed by the compactions it starts, so
/// that the tree goes through the same shapes whatever the machine's speed. Returns the
/// database, the most runs any level below 0 held after a flush settled (by the engine's
/// account), the most runs below level 0 one key was in (by the files' key ranges), and the
/// bytes compaction wrote. After every flush, no level's files overlap.
fn fill(fs: &MemFs, policy: MergePolicy) -> (Db, usize, usize, u64) {
    fill_with(options(fs, policy))
}

/// [`fill`] under options of the caller's making.
fn fill_with(opts: Options) -> (Db, usize, usize, u64) {
    let db = Db::open("/db", opts).unwrap();
    let (mut most_runs, mut deepest_stack) = (0, 0);
    for i in 0..KEYS {
        db.put(&key(i), &value(i)).unwrap();
        // Overwrites, so that merges have versions to drop.
        if i % 3 == 0 {
            db.put(&key(i / 2), &value(i)).unwrap();
        }
        if (i + 1) % KEYS_PER_FLUSH == 0 {
            db.flush().unwrap();
            settle(&db);
            let s = db.stats();
            let overlaps = overlapping(&s);
            assert!(overlaps.is_empty(), "after key {i}: {overlaps:?}");
            most_runs = most_runs.max(s.runs_per_level.iter().skip(1).copied().max().unwrap_or(0));
            deepest_stack = deepest_stack.max(runs_at_one_key(&s));
        }
    }
    let written = db.stats().compaction_bytes_written;
    (db, most_runs, deepest_stack, written)
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
        let (db, most_runs, _, bytes) = fill(&fs, policy);
        written.insert(format!("{policy:?}"), bytes);
        let s = db.stats();
        let runs = s.runs_per_level.clone();
        eprintln!("{policy:?}: runs per level {runs:?}, at most {most_runs}, {bytes} bytes");
        assert!(
            runs.len() >= 3,
            "{policy:?}: the tree is too shallow: {runs:?}"
        );
        match policy {
            // Each level one run: `fill` checked after every flush that no level's files
            // overlap (the engine's run count cannot show it: a level is one run by its
            // layout).
            MergePolicy::Leveling => {}
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
            let (db, most_runs, stack, _) = fill_with(opts);
            let _ = tx.send((
                common::dump(&db),
                db.stats().runs_per_level,
                most_runs,
                stack,
            ));
        });
        let (state, runs, most_runs, stack) = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("T = {ratio}: the writes stalled (or the writer failed)"));
        eprintln!(
            "T = {ratio}: runs per level {runs:?}, at most {most_runs}, at one key at most {stack}"
        );
        assert!(state == want, "T = {ratio}: contents differ");
        // A level takes runs until it holds T - 1 of them: at T = 16, fifty level-0 merges
        // leave some level with far more than two.
        if ratio == 16 {
            assert!(
                most_runs > 2,
                "T = 16: no level held more than {most_runs} runs"
            );
            // Counted from the files alone: level 1 gathers T - 1 = 15 runs before it merges
            // down, so some key was in 15 runs at once (a level full at two runs: 5).
            assert!(stack >= 15, "T = 16: one key was in at most {stack} runs");
        }
    }
}

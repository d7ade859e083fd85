//! `Db::approximate_sizes` and `Db::property`: figures set against what the test wrote and
//! what the directory holds, not against the engine's own sums.

use strata::{Db, Options};

mod common;

const VALUE: usize = 1000;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// Bytes of the entries `[from, to)` as the test wrote them: key, value and the 8-byte
/// sequence and kind each stored entry carries.
fn written(from: u32, to: u32) -> u64 {
    (to - from) as u64 * (key(0).len() + VALUE + 8) as u64
}

/// A database whose tree nothing merges behind the test's back.
fn open(dir: &std::path::Path) -> Db {
    Db::open(
        dir,
        Options {
            idle_merge_after: None,
            ..common::options()
        },
    )
    .unwrap()
}

fn filled(dir: &std::path::Path, n: u32) -> Db {
    let db = open(dir);
    let mut rng = common::Rng(common::seed("sizes"));
    for i in 0..n {
        // Incompressible values of a fixed length.
        let v: Vec<u8> = (0..VALUE).map(|_| rng.next_u64() as u8).collect();
        db.put(&key(i), &v).unwrap();
    }
    db.compact_range(None, None).unwrap();
    db
}

fn assert_near(got: u64, want: u64, within: f64, what: &str) {
    let off = (got as f64 - want as f64).abs() / want as f64;
    assert!(
        off <= within,
        "{what}: {got} bytes against {want} written ({off:.3} off)"
    );
}

#[test]
fn sizes_of_ranges_follow_the_bytes_written_in_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = filled(dir.path(), 10_000);
    let ranges = [
        (key(0), key(10_000)),
        (key(0), key(5_000)),
        (key(2_000), key(2_500)),
        (key(9_000), b"z".to_vec()),
        // Empty and reversed ranges, and one past every key.
        (key(3_000), key(3_000)),
        (key(4_000), key(3_000)),
        (b"m".to_vec(), b"n".to_vec()),
    ];
    let sizes = db.approximate_sizes(&ranges).unwrap();
    assert_near(sizes[0], written(0, 10_000), 0.05, "the whole");
    assert_near(sizes[1], written(0, 5_000), 0.05, "the first half");
    // A data block holds about four entries: the ends land within a block each.
    assert_near(sizes[2], written(2_000, 2_500), 0.05, "500 keys inside");
    assert_near(
        sizes[3],
        written(9_000, 10_000),
        0.05,
        "the tail, past the last key",
    );
    assert_eq!(&sizes[4..], &[0, 0, 0]);
    // Ranges that meet add up exactly, wherever the cut falls in a block: a range's ends
    // are where its keys would be found, each end counted on one side only.
    let mut rng = common::Rng(common::seed("sizes additivity"));
    for _ in 0..200 {
        let mut cut = [0, 0, 0].map(|_| rng.below(10_500) as u32);
        cut.sort();
        let [a, b, c] = cut.map(key);
        let s = db
            .approximate_sizes(&[(a.clone(), b.clone()), (b, c.clone()), (a, c)])
            .unwrap();
        assert_eq!(s[0] + s[1], s[2], "{cut:?}");
    }

    // Entries still in the memtable count too.
    for i in 10_000..10_200 {
        db.put(&key(i), &[7u8; VALUE]).unwrap();
    }
    let sizes = db.approximate_sizes(&[(key(10_000), key(10_200))]).unwrap();
    assert_near(sizes[0], written(10_000, 10_200), 0.05, "in the memtable");
    db.close().unwrap();
}

/// Files in level 0 overlap: a range counts each one's part. Two flushes of the same keys
/// (the second overwriting the first) hold the range twice.
#[test]
fn level_zero_files_each_count_their_part() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    for round in 0..2u8 {
        for i in 0..3_000 {
            db.put(&key(i), &[round; VALUE]).unwrap();
        }
        db.flush().unwrap();
    }
    assert_eq!(db.property("leveldb.num-files-at-level0").unwrap(), "2");
    let sizes = db
        .approximate_sizes(&[(key(0), key(3_000)), (key(1_000), key(2_000))])
        .unwrap();
    assert_near(sizes[0], 2 * written(0, 3_000), 0.05, "both files, whole");
    assert_near(
        sizes[1],
        2 * written(1_000, 2_000),
        0.05,
        "both files, a third",
    );
    db.close().unwrap();
}

#[test]
fn properties_say_what_the_directory_and_the_writes_say() {
    let dir = tempfile::tempdir().unwrap();
    let db = filled(dir.path(), 2_000);
    let ssts: Vec<(u64, u64)> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .map(|p| {
            let number = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            (number, std::fs::metadata(&p).unwrap().len())
        })
        .collect();
    assert!(!ssts.is_empty());
    let total: u64 = ssts.iter().map(|s| s.1).sum();
    let prop = |name: &str| {
        db.property(name)
            .unwrap_or_else(|| panic!("{name} unknown"))
    };
    assert_eq!(prop("rocksdb.total-sst-files-size"), total.to_string());
    // One version of each key, all in tables after the full compaction.
    assert_eq!(prop("rocksdb.estimate-num-keys"), "2000");
    assert_eq!(prop("rocksdb.num-entries-active-mem-table"), "0");
    // Files by level, for every level there is (the tiered policies have more than seven);
    // the first past the last is unknown.
    let per_level: Vec<usize> = (0..)
        .map_while(|l| {
            let files = db.property(&format!("leveldb.num-files-at-level{l}"))?;
            assert_eq!(files, prop(&format!("rocksdb.num-files-at-level{l}")));
            Some(files.parse::<usize>().unwrap())
        })
        .collect();
    assert!(per_level.len() >= 7, "{per_level:?}");
    assert_eq!(per_level.iter().sum::<usize>(), ssts.len());
    let listing = prop("leveldb.sstables");
    for (number, size) in &ssts {
        assert!(listing.contains(&format!(" {number}:{size}[")), "{listing}");
    }
    assert!(
        listing.contains("k00000") && listing.contains("k01999"),
        "{listing}"
    );
    // A row per level that holds files: the level, then its files.
    let stats = prop("leveldb.stats");
    assert_eq!(stats, prop("rocksdb.stats"));
    for (l, &files) in per_level.iter().enumerate() {
        let row = stats.lines().find(|r| {
            let mut cells = r.split_whitespace();
            cells.next() == Some(&l.to_string())
        });
        match files {
            0 => assert!(row.is_none(), "{stats}"),
            n => assert!(
                row.is_some_and(|r| r.split_whitespace().nth(1) == Some(&n.to_string())),
                "level {l}: {stats}"
            ),
        }
    }
    assert_eq!(prop("rocksdb.num-immutable-mem-table"), "0");
    assert_eq!(
        prop("rocksdb.block-cache-capacity"),
        (8u64 << 20).to_string()
    );

    // Deleted keys leave the estimate, each tombstone taking its entry with it.
    for i in 0..100 {
        db.delete(&key(i)).unwrap();
    }
    db.flush().unwrap();
    assert_eq!(prop("rocksdb.estimate-num-keys"), "1900");

    db.put(b"new", b"value").unwrap();
    assert_eq!(prop("rocksdb.estimate-num-keys"), "1901");
    assert_eq!(prop("rocksdb.num-entries-active-mem-table"), "1");
    assert!(
        prop("rocksdb.cur-size-all-mem-tables")
            .parse::<u64>()
            .unwrap()
            > 0
    );
    let memory: u64 = prop("leveldb.approximate-memory-usage").parse().unwrap();
    assert!(memory > 0);

    for unknown in [
        "leveldb.num-files-at-level",
        "leveldb.num-files-at-levelx",
        "leveldb.num-files-at-level99",
        "leveldb.nothing",
        "other.stats",
        "stats",
    ] {
        assert_eq!(db.property(unknown), None, "{unknown}");
    }
    db.close().unwrap();
}

//! Databases written by the released formats, checked in under `tests/golden/`, must open and
//! read back as written: a format change that breaks old databases fails here. Each holds
//! SSTs (with whole filters, format 1, of the spread layout, the cache-local one or Ribbon's,
//! or partitioned ones, format 2; range tombstones, format 3; a zstd dictionary, format 4),
//! a MANIFEST, CURRENT and a WAL with writes that were never flushed (merge operands and a
//! range tombstone among them in the third).
//!
//! `cargo test -p strata --test golden -- --ignored write_golden_databases` writes them;
//! it writes only the directories missing, so the old formats' databases stay as they were.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use strata::{Db, FilterKind, Options};

mod common;

/// The databases: directory name, filter kind, the SST format version it must hold, and
/// its tables' filter layout (`strata inspect` names it for whole filters).
const GOLDEN: &[(&str, FilterKind, &str, &str)] = &[
    (
        "sst1-whole-filters",
        FilterKind::Whole,
        "SST v1",
        "Whole, spread",
    ),
    (
        "sst2-partitioned-filters",
        FilterKind::Partitioned,
        "SST v2",
        "Partitioned",
    ),
    (
        "sst1-cache-local-filters",
        FilterKind::Whole,
        "SST v1",
        "Whole, cache-local",
    ),
    (
        "sst2-partitioned-cache-local-filters",
        FilterKind::Partitioned,
        "SST v2",
        "Partitioned",
    ),
    (
        "sst1-ribbon-filters",
        FilterKind::Whole,
        "SST v1",
        "Whole, ribbon",
    ),
    (
        "sst2-partitioned-ribbon-filters",
        FilterKind::Partitioned,
        "SST v2",
        "Partitioned",
    ),
];

fn golden_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// What every golden database holds once open.
fn expected() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..300u32 {
        if i % 7 == 3 {
            continue;
        }
        let v = if i % 5 == 0 {
            format!("new{i}")
        } else {
            format!("v{i}-{}", "x".repeat((i % 40) as usize))
        };
        m.insert(format!("k{i:03}").into_bytes(), v.into_bytes());
    }
    m
}

fn options(kind: FilterKind) -> Options {
    Options {
        write_buffer_size: 4096,
        block_size: 256,
        filter_kind: kind,
        idle_merge_after: None,
        ..common::options()
    }
}

#[test]
#[ignore = "writes the golden databases; run by hand for a new format"]
fn write_golden_databases() {
    for &(name, kind, _, _) in GOLDEN {
        let dir = golden_dir(name);
        // A format's database is written once: the ones of older formats stay as they are.
        if dir.exists() {
            continue;
        }
        let db = Db::open(&dir, options(kind)).unwrap();
        for i in 0..300u32 {
            let v = format!("v{i}-{}", "x".repeat((i % 40) as usize));
            db.put(format!("k{i:03}").as_bytes(), v.as_bytes()).unwrap();
        }
        db.compact_range(None, None).unwrap();
        for i in (0..300u32).filter(|i| i % 7 == 3) {
            db.delete(format!("k{i:03}").as_bytes()).unwrap();
        }
        db.flush().unwrap();
        // Left in the WAL: never flushed.
        for i in (0..300u32).filter(|i| i % 5 == 0 && i % 7 != 3) {
            db.put(format!("k{i:03}").as_bytes(), format!("new{i}").as_bytes())
                .unwrap();
        }
        db.close().unwrap();
        let _ = std::fs::remove_file(dir.join("LOCK"));
    }
}

#[test]
fn golden_databases_open_and_read_as_written() {
    for &(name, kind, version, filter) in GOLDEN {
        let src = golden_dir(name);
        let t = tempfile::tempdir().unwrap();
        let mut kinds = Vec::new();
        for e in std::fs::read_dir(&src).unwrap() {
            let path = e.unwrap().path();
            let to = t.path().join(path.file_name().unwrap());
            std::fs::copy(&path, &to).unwrap();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if file.ends_with(".sst") {
                let dump = strata::inspect::dump_file(&path, false).unwrap();
                let fact = |name: &str| {
                    let (_, value) = dump.summary.iter().find(|(k, _)| k == name).unwrap();
                    value.clone()
                };
                assert_eq!(fact("format"), version, "{name}/{file}");
                assert_eq!(fact("filter"), filter, "{name}/{file}");
            }
            kinds.push(file);
        }
        kinds.sort();
        assert!(
            kinds.iter().any(|f| f.ends_with(".sst"))
                && kinds.iter().any(|f| f.ends_with(".wal"))
                && kinds.iter().any(|f| f.starts_with("MANIFEST-"))
                && kinds.iter().any(|f| f == "CURRENT"),
            "{name} lacks a kind of file: {kinds:?}"
        );
        // Opened with other options than it was written with: the files say what they hold.
        let opposite = if kind == FilterKind::Whole {
            FilterKind::Partitioned
        } else {
            FilterKind::Whole
        };
        let db = Db::open(t.path(), options(opposite)).unwrap();
        assert!(common::dump(&db) == expected(), "{name}: contents differ");
        for (k, v) in expected() {
            assert_eq!(db.get(&k).unwrap(), Some(v), "{name}");
        }
        assert_eq!(
            db.get(b"k003").unwrap(),
            None,
            "{name}: a deleted key is back"
        );
        db.close().unwrap();
    }
}

/// A copy of the golden database `name` in a new directory, and the SST format versions of
/// its tables as `strata inspect` names them.
fn copy_golden(name: &str) -> (tempfile::TempDir, Vec<String>) {
    let t = tempfile::tempdir().unwrap();
    let mut versions = Vec::new();
    for e in std::fs::read_dir(golden_dir(name)).unwrap() {
        let path = e.unwrap().path();
        std::fs::copy(&path, t.path().join(path.file_name().unwrap())).unwrap();
        if path.extension().is_some_and(|x| x == "sst") {
            let dump = strata::inspect::dump_file(&path, true).unwrap();
            let format = dump.summary.iter().find(|(k, _)| k == "format").unwrap();
            versions.push(format.1.clone());
        }
    }
    (t, versions)
}

/// The database with range tombstones (SST 3, MANIFEST tag 7) and merge operands (kind 2),
/// in tables and in the WAL.
const GOLDEN_REACH: &str = "sst3-range-deletes-and-merges";

fn reach_options() -> Options {
    Options {
        merge_operator: Some(std::sync::Arc::new(strata::merge::Append {
            delimiter: b"+".to_vec(),
        })),
        ..options(FilterKind::Whole)
    }
}

fn k(i: u32) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

fn reach_expected() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for i in 0..200u32 {
        if (50..100).contains(&i) || (150..160).contains(&i) {
            continue;
        }
        let mut v = format!("v{i}").into_bytes();
        if (10..20).contains(&i) {
            v.extend_from_slice(b"+m");
        }
        if i == 20 {
            v.extend_from_slice(b"+w");
        }
        m.insert(k(i), v);
    }
    m
}

#[test]
#[ignore = "writes the golden database; run by hand for a new format"]
fn write_golden_reach_database() {
    let dir = golden_dir(GOLDEN_REACH);
    let _ = std::fs::remove_dir_all(&dir);
    let db = Db::open(&dir, reach_options()).unwrap();
    for i in 0..200u32 {
        db.put(&k(i), format!("v{i}").as_bytes()).unwrap();
    }
    db.compact_range(None, None).unwrap();
    db.delete_range(&k(50), &k(100)).unwrap();
    for i in 10..20u32 {
        db.merge(&k(i), b"m").unwrap();
    }
    db.flush().unwrap();
    // Left in the WAL: never flushed.
    db.delete_range(&k(150), &k(160)).unwrap();
    db.merge(&k(20), b"w").unwrap();
    db.close().unwrap();
    let _ = std::fs::remove_file(dir.join("LOCK"));
}

#[test]
fn the_golden_database_with_range_deletes_and_merges_reads_as_written() {
    let (t, versions) = copy_golden(GOLDEN_REACH);
    assert!(versions.iter().any(|v| v == "SST v3"), "{versions:?}");
    let db = Db::open(t.path(), reach_options()).unwrap();
    assert!(common::dump(&db) == reach_expected(), "contents differ");
    for (key, v) in reach_expected() {
        assert_eq!(db.get(&key).unwrap(), Some(v));
    }
    assert_eq!(db.get(&k(75)).unwrap(), None, "a range-deleted key is back");
    assert_eq!(
        db.get(&k(155)).unwrap(),
        None,
        "a range-deleted key is back"
    );
}

/// The database with column families (MANIFEST tags 9 to 13, WAL ops with a family): two
/// families beside the default one, in tables and in the WAL, and one created and dropped.
const GOLDEN_FAMILIES: &str = "families";

/// What family `name` of the golden database holds.
fn families_expected(name: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    (0..100u32)
        .filter(|i| name != "users" || i % 10 != 4)
        .map(|i| (k(i), format!("{name}{i}").into_bytes()))
        .collect()
}

#[test]
#[ignore = "writes the golden database; run by hand for a new format"]
fn write_golden_families_database() {
    let dir = golden_dir(GOLDEN_FAMILIES);
    let _ = std::fs::remove_dir_all(&dir);
    let db = Db::open(&dir, options(FilterKind::Whole)).unwrap();
    let gone = db
        .create_family("gone", options(FilterKind::Whole))
        .unwrap();
    let users = db
        .create_family("users", options(FilterKind::Whole))
        .unwrap();
    let events = db
        .create_family("events", options(FilterKind::Partitioned))
        .unwrap();
    for i in 0..100u32 {
        let mut b = strata::WriteBatch::new();
        b.put(&k(i), format!("default{i}").as_bytes());
        b.put_cf(&users, &k(i), format!("users{i}").as_bytes());
        b.put_cf(&gone, &k(i), b"gone");
        db.write(b, strata::WriteOptions::default()).unwrap();
    }
    db.flush().unwrap();
    db.drop_family("gone").unwrap();
    // Left in the WAL: never flushed.
    for i in 0..100u32 {
        db.put_cf(&events, &k(i), format!("events{i}").as_bytes())
            .unwrap();
    }
    for i in (0..100u32).filter(|i| i % 10 == 4) {
        db.delete_cf(&users, &k(i)).unwrap();
    }
    db.close().unwrap();
    let _ = std::fs::remove_file(dir.join("LOCK"));
}

#[test]
fn the_golden_database_with_column_families_reads_as_written() {
    let src = golden_dir(GOLDEN_FAMILIES);
    let t = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let path = e.unwrap().path();
        std::fs::copy(&path, t.path().join(path.file_name().unwrap())).unwrap();
    }
    let db = Db::open(t.path(), options(FilterKind::Whole)).unwrap();
    assert_eq!(db.families(), ["default", "users", "events"]);
    for name in ["default", "users", "events"] {
        let ro = strata::ReadOptions {
            family: Some(db.family(name).unwrap()),
            ..Default::default()
        };
        let got: BTreeMap<Vec<u8>, Vec<u8>> = db
            .scan_with(.., ro, false)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        assert!(got == families_expected(name), "{name}: contents differ");
    }
}

/// The database with a zstd dictionary (SST 4, block kind 3): a table whose later blocks
/// were compressed with the dictionary trained on its first 256 KiB, and a WAL.
const GOLDEN_DICTIONARY: &str = "sst4-zstd-dictionary";

fn dictionary_options() -> Options {
    Options {
        compression: strata::Compression::Zstd,
        zstd_dictionary_bytes: 4096,
        write_buffer_size: 4 << 20,
        block_size: 4096,
        ..options(FilterKind::Whole)
    }
}

/// One of 64 values of 100 bytes over four letters, by its number.
fn dictionary_value(i: u32) -> Vec<u8> {
    let v = (i % 64).wrapping_mul(0x9e37_79b9);
    (0..100u32)
        .map(|j| b"acgt"[(v.wrapping_mul(j + 1).rotate_left(j % 29) >> 30) as usize])
        .collect()
}

fn dictionary_expected() -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m: BTreeMap<Vec<u8>, Vec<u8>> = (0..4000u32)
        .map(|i| (format!("d{i:05}").into_bytes(), dictionary_value(i * 7)))
        .collect();
    m.insert(b"d-wal".to_vec(), b"never flushed".to_vec());
    m
}

#[test]
#[ignore = "writes the golden database; run by hand for a new format"]
fn write_golden_dictionary_database() {
    let dir = golden_dir(GOLDEN_DICTIONARY);
    let _ = std::fs::remove_dir_all(&dir);
    let db = Db::open(&dir, dictionary_options()).unwrap();
    for i in 0..4000u32 {
        db.put(format!("d{i:05}").as_bytes(), &dictionary_value(i * 7))
            .unwrap();
    }
    db.compact_range(None, None).unwrap();
    // Left in the WAL: never flushed.
    db.put(b"d-wal", b"never flushed").unwrap();
    db.close().unwrap();
    let _ = std::fs::remove_file(dir.join("LOCK"));
}

#[test]
fn the_golden_database_with_a_zstd_dictionary_reads_as_written() {
    let (t, versions) = copy_golden(GOLDEN_DICTIONARY);
    assert!(versions.iter().any(|v| v == "SST v4"), "{versions:?}");
    // Opened without dictionaries of its own: the tables say how they were written.
    let options = Options {
        zstd_dictionary_bytes: 0,
        ..dictionary_options()
    };
    let db = Db::open(t.path(), options).unwrap();
    assert!(
        common::dump(&db) == dictionary_expected(),
        "contents differ"
    );
    for (key, v) in dictionary_expected() {
        assert_eq!(db.get(&key).unwrap(), Some(v));
    }
}

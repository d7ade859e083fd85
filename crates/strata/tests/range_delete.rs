//! Range deletes at the edges the model test reaches only by chance: whole files hidden by
//! one tombstone, and snapshots that must still see what a tombstone hides.

mod common;

use std::path::Path;

use strata::{Db, FileSystem, MemFs, ReadOptions};

fn key(i: u64) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn tables(fs: &MemFs) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(Path::new("/db"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".sst"))
        .collect();
    v.sort();
    v
}

/// Tables that a tombstone hides whole leave the tree without being read: their data blocks
/// are damaged here on purpose, and the compaction that drops them must not notice.
#[test]
fn compaction_drops_tables_a_tombstone_hides_without_reading_them() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::tiny_options(Some(fs.clone()), 4)).unwrap();
    for i in 0..2000 {
        db.put(&key(i), format!("value{i}").as_bytes()).unwrap();
    }
    db.compact_range(None, None).unwrap();
    db.close().unwrap();
    let damaged = tables(&fs);
    assert!(damaged.len() > 3, "{damaged:?}");
    for name in &damaged {
        // The first data block: the footer and properties at the end stay intact.
        fs.mutate_file(&Path::new("/db").join(name), |b| b[10] ^= 0xff)
            .unwrap();
    }

    let db = Db::open("/db", common::tiny_options(Some(fs.clone()), 4)).unwrap();
    db.delete_range(&key(0), &key(99_999)).unwrap();
    db.compact_range(None, None).unwrap();
    let left = tables(&fs);
    assert!(
        damaged.iter().all(|d| !left.contains(d)),
        "hidden tables were kept: {left:?}"
    );
    assert_eq!(db.get(&key(7)).unwrap(), None);
    assert_eq!(common::dump(&db).len(), 0);
    db.put(&key(7), b"again").unwrap();
    assert_eq!(db.get(&key(7)).unwrap().as_deref(), Some(&b"again"[..]));
}

/// A snapshot taken before a range delete keeps seeing the keys through compactions, which
/// may then neither drop the entries nor the tables that hold them; once it is released, a
/// compaction removes both the keys and the tombstone.
#[test]
fn a_snapshot_keeps_what_a_later_range_delete_hides() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::tiny_options(Some(fs.clone()), 4)).unwrap();
    for i in 0..1500 {
        db.put(&key(i), format!("value{i}").as_bytes()).unwrap();
    }
    db.compact_range(None, None).unwrap();
    let before = db.snapshot();
    db.delete_range(&key(100), &key(1400)).unwrap();
    db.compact_range(None, None).unwrap();
    let at = ReadOptions {
        snapshot: Some(before.clone()),
        ..ReadOptions::default()
    };
    for i in (0..1500).step_by(7) {
        let want = format!("value{i}").into_bytes();
        assert_eq!(
            db.get_with(&key(i), &at).unwrap(),
            Some(want.clone()),
            "{i}"
        );
        let now = db.get(&key(i)).unwrap();
        assert_eq!(now, (!(100..1400).contains(&i)).then_some(want), "{i}");
    }
    let seen: Vec<_> = db
        .scan_with(.., at, true)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(seen.len(), 1500);
    assert_eq!(common::dump(&db).len(), 200);

    drop(before);
    db.compact_range(None, None).unwrap();
    let s = db.stats();
    let entries: u64 = s.files.iter().map(|f| f.entries).sum();
    assert_eq!(entries, 200, "covered entries outlived the snapshot");
    let tombstones: u64 = s.files.iter().map(|f| f.range_deletions).sum();
    assert_eq!(tombstones, 0, "the tombstone outlived what it covered");
    assert_eq!(common::dump(&db).len(), 200);
}

/// A range delete changes a key (for `WATCH` and transactions) only where it removes a value:
/// over a key already absent it changes nothing.
#[test]
fn a_range_delete_changes_only_the_keys_it_removes() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::tiny_options(Some(fs), 4)).unwrap();
    db.put(b"x", b"1").unwrap();
    let before = db.newest_sequence(b"x").unwrap();
    assert_eq!(db.newest_sequence(b"never").unwrap(), None);
    db.delete_range(b"a", b"z").unwrap();
    let deleted = db.newest_sequence(b"x").unwrap();
    assert!(deleted > before, "{deleted:?} {before:?}");
    assert_eq!(db.newest_sequence(b"never").unwrap(), None);
    // Once absent, another range delete changes nothing, in the memtable or in a table.
    db.delete_range(b"a", b"z").unwrap();
    assert_eq!(db.newest_sequence(b"x").unwrap(), deleted);
    db.flush().unwrap();
    db.delete_range(b"w", b"y").unwrap();
    assert_eq!(db.newest_sequence(b"x").unwrap(), deleted);
    db.put(b"x", b"2").unwrap();
    assert!(db.newest_sequence(b"x").unwrap() > deleted);
}

/// A wide tombstone (FLUSHDB's) does not make one table of everything written after it in its
/// range: compaction cuts its output as usual, ending the tombstone just past each table's
/// last key and going on with it in the next.
#[test]
fn a_wide_tombstone_is_cut_with_the_tables_it_spans() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::tiny_options(Some(fs.clone()), 4)).unwrap();
    for i in 0..3000 {
        db.put(&key(i), b"old").unwrap();
    }
    db.compact_range(None, None).unwrap();
    let snapshot = db.snapshot();
    db.delete_range(&key(0), &key(99_999)).unwrap();
    for i in (0..3000).step_by(2) {
        db.put(&key(i), format!("new{i}").as_bytes()).unwrap();
    }
    db.compact_range(None, None).unwrap();
    let files = db.stats().files;
    let with_tombstones = files.iter().filter(|f| f.range_deletions > 0).count();
    assert!(
        with_tombstones > 3,
        "the tombstone sits in {with_tombstones} of {} tables",
        files.len()
    );
    let biggest = files.iter().map(|f| f.size).max().unwrap();
    assert!(biggest < 16 * 1024, "a table of {biggest} bytes");
    for i in 0..3000 {
        let want = (i % 2 == 0).then(|| format!("new{i}").into_bytes());
        assert_eq!(db.get(&key(i)).unwrap(), want, "{i}");
    }
    // The snapshot keeps the old values under the cut tombstone.
    let at = ReadOptions {
        snapshot: Some(snapshot),
        ..ReadOptions::default()
    };
    let old: Vec<_> = db
        .scan_with(.., at, false)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(old.len(), 3000);
    assert!(old.iter().all(|(_, v)| v == b"old"));
}

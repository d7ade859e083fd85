//! The bottom of the tree forgets sequence numbers that no reader needs (written as zero, so
//! that compressed tables shrink), and keeps every one a snapshot or a range tombstone needs.

mod common;

use std::collections::BTreeMap;

use strata::{Db, MemFs, ReadOptions};

fn key(i: u64) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: u64, round: u64) -> Vec<u8> {
    format!("value {i} of round {round}").into_bytes()
}

fn at(snapshot: &strata::Snapshot) -> ReadOptions {
    ReadOptions {
        snapshot: Some(snapshot.clone()),
        ..ReadOptions::default()
    }
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, read: &ReadOptions, total: u64) {
    for i in 0..total {
        let k = key(i);
        assert_eq!(
            db.get_with(&k, read).unwrap(),
            model.get(&k).cloned(),
            "key {i}"
        );
    }
}

#[test]
fn a_full_compaction_forgets_sequences_no_snapshot_needs() {
    let db = Db::open("/db", common::tiny_options(Some(MemFs::new()), 4)).unwrap();
    let total = 500;
    let mut first = BTreeMap::new();
    for i in 0..total {
        db.put(&key(i), &value(i, 1)).unwrap();
        first.insert(key(i), value(i, 1));
    }
    let snapshot = db.snapshot();
    let mut second = first.clone();
    for i in 0..100 {
        db.put(&key(i), &value(i, 2)).unwrap();
        second.insert(key(i), value(i, 2));
    }
    for i in 100..150 {
        db.delete(&key(i)).unwrap();
        second.remove(&key(i));
    }
    db.compact_range(None, None).unwrap();

    // Written before the snapshot and not since: every reader sees these, so their
    // sequence numbers went.
    for i in 150..total {
        assert_eq!(db.newest_sequence(&key(i)).unwrap(), Some(0), "key {i}");
    }
    // Written after it: the snapshot must tell them from what it sees.
    for i in 0..150 {
        let seq = db.newest_sequence(&key(i)).unwrap().unwrap();
        assert!(seq > snapshot.sequence(), "key {i}: {seq}");
    }
    check(&db, &first, &at(&snapshot), total);
    check(&db, &second, &ReadOptions::default(), total);

    drop(snapshot);
    db.compact_range(None, None).unwrap();
    for i in 0..total {
        let want = (!(100..150).contains(&i)).then_some(0);
        assert_eq!(db.newest_sequence(&key(i)).unwrap(), want, "key {i}");
    }
    check(&db, &second, &ReadOptions::default(), total);
}

/// A range tombstone that a compaction must keep (a deeper level still holds part of its
/// range) and a value written after it, with nothing beneath it: the value keeps its
/// sequence, which is what tells a read that the tombstone does not hide it.
#[test]
fn a_value_under_a_kept_older_range_tombstone_keeps_its_sequence() {
    let mut o = common::tiny_options(Some(MemFs::new()), 4);
    // The levels' shape is what this test sets up.
    o.merge_policy = strata::MergePolicy::Leveling;
    let db = Db::open("/db", o).unwrap();
    // Deep: old keys inside the tombstone's range, away from the newer value's key.
    for i in 0..1000u64 {
        db.put(format!("b{i:04}").as_bytes(), &[b'o'; 100]).unwrap();
    }
    db.compact_range(None, None).unwrap();
    let levels = |db: &Db| -> Vec<(usize, u64)> {
        let files = db.stats().files;
        files.iter().map(|f| (f.level, f.range_deletions)).collect()
    };
    assert!(
        levels(&db).iter().all(|&(l, _)| l >= 2),
        "{:?}",
        levels(&db)
    );
    // Above them: the tombstone, then a newer value inside its range with nothing beneath.
    db.delete_range(b"a", b"m").unwrap();
    db.put(b"k-new", b"new").unwrap();
    // Level 0 into level 1 only: the deeper files hold nothing of [k, l].
    db.compact_range(Some(b"k"), Some(b"l")).unwrap();
    assert!(
        levels(&db).contains(&(1, 1)),
        "the tombstone did not stay in level 1: {:?}",
        levels(&db)
    );
    assert_eq!(db.get(b"k-new").unwrap(), Some(b"new".to_vec()));
    assert_eq!(db.get(b"b0500").unwrap(), None);
    // The merge that drops the tombstone still meets it: the value's sequence goes with
    // the next merge, which does not.
    for _ in 0..2 {
        db.compact_range(None, None).unwrap();
        assert_eq!(db.get(b"k-new").unwrap(), Some(b"new".to_vec()));
        assert_eq!(db.get(b"b0500").unwrap(), None);
    }
    assert_eq!(levels(&db).iter().map(|f| f.1).sum::<u64>(), 0);
    assert_eq!(db.newest_sequence(b"k-new").unwrap(), Some(0));
}

/// A merge into a level above older versions of some of its keys: those keys keep their
/// sequence numbers (a zero would sort them below the older versions beneath), while keys
/// with nothing beneath lose theirs. Every read and scan, and a full merge after, agree with
/// the model.
#[test]
fn values_with_older_versions_beneath_keep_their_sequences() {
    let mut o = common::tiny_options(Some(MemFs::new()), 4);
    o.merge_policy = strata::MergePolicy::Leveling;
    let db = Db::open("/db", o).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..1000 {
        db.put(&key(i), &value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    db.compact_range(None, None).unwrap();
    let deep = db.stats().files.iter().map(|f| f.level).max().unwrap();
    assert!(deep >= 2, "the keys went to level {deep}");
    // Newer versions of keys that the deep level holds, and keys past its range.
    for i in (100..200).chain(5000..5100) {
        db.put(&key(i), &value(i, 2)).unwrap();
        model.insert(key(i), value(i, 2));
    }
    // Merge the range of the new keys down to the deepest level holding it, above the deep
    // one: the files merged hold the rewritten keys too.
    db.compact_range(Some(&key(5000)), Some(&key(5099)))
        .unwrap();
    let levels: Vec<usize> = db.stats().files.iter().map(|f| f.level).collect();
    assert!(
        levels.iter().any(|&l| l > 0 && l < deep) && levels.contains(&deep),
        "no merge above the deep level: {levels:?}"
    );
    // The rewritten keys lie above their older versions; the new keys have nothing beneath.
    for i in 100..200 {
        assert_ne!(db.newest_sequence(&key(i)).unwrap(), Some(0), "key {i}");
    }
    let snapshotless = ReadOptions::default();
    check(&db, &model, &snapshotless, 5100);
    assert_eq!(common::dump(&db), model);
    db.compact_range(None, None).unwrap();
    check(&db, &model, &snapshotless, 5100);
    assert_eq!(common::dump(&db), model);
}

/// A sequence pin keeps the numbers of the writes made after it from being written as zero,
/// and, unlike a snapshot, keeps no overwritten version.
#[test]
fn a_sequence_pin_keeps_later_numbers_and_no_old_versions() {
    let db = Db::open("/db", common::tiny_options(Some(MemFs::new()), 4)).unwrap();
    for i in 0..300 {
        db.put(&key(i), &value(i, 1)).unwrap();
    }
    let pin = db.pin_sequences();
    for i in 0..100 {
        db.put(&key(i), &value(i, 2)).unwrap();
    }
    db.compact_range(None, None).unwrap();
    for i in 0..100 {
        let seq = db.newest_sequence(&key(i)).unwrap().unwrap();
        assert!(seq > pin.sequence(), "key {i}: {seq}");
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 2)));
    }
    for i in 100..300 {
        assert_eq!(db.newest_sequence(&key(i)).unwrap(), Some(0), "key {i}");
    }
    // One version of each key is left: the pin kept none of the first round's 0..100.
    let entries: u64 = db.stats().files.iter().map(|f| f.entries).sum();
    assert_eq!(entries, 300);
    drop(pin);
    db.compact_range(None, None).unwrap();
    for i in 0..300 {
        assert_eq!(db.newest_sequence(&key(i)).unwrap(), Some(0), "key {i}");
    }
}

//! User comparators: a database keeps its keys in the order its comparator gives, records
//! the comparator's name, and refuses to open under another one. The model test
//! (`tests/model.rs`) checks every read path under a reversed order; these check the
//! promises around it: the name, the bounds of scans and ranges, transactions, sizes, the
//! inspection tools and repair.

mod common;

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use strata::{
    BytewiseComparator, Comparator, Db, Error, MemFs, Options, ReverseBytewiseComparator,
    WriteBatch,
};

/// Orders keys by length, then bytewise: an order unlike byte order in both directions.
struct LengthFirst;

impl Comparator for LengthFirst {
    fn name(&self) -> &str {
        "test.LengthFirst"
    }
    fn compare(&self, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    }
}

fn options(fs: &MemFs, comparator: Arc<dyn Comparator>) -> Options {
    let mut o = common::tiny_options(Some(fs.clone()), 4);
    o.comparator = comparator;
    o
}

fn keys_of(db: &Db) -> Vec<Vec<u8>> {
    db.scan(..).unwrap().map(|e| e.unwrap().0).collect()
}

/// Writes `n` keys of one to four bytes, flushing and compacting between rounds, so that
/// tables of several levels and the memtable hold them.
fn fill(db: &Db, words: &[&[u8]]) {
    for (i, w) in words.iter().enumerate() {
        db.put(w, format!("v{i}").as_bytes()).unwrap();
        if i % 7 == 6 {
            db.flush().unwrap();
        }
    }
    db.compact_range(None, None).unwrap();
    db.put(b"zz", b"in the memtable").unwrap();
}

const WORDS: [&[u8]; 16] = [
    b"a", b"bb", b"b", b"abc", b"ab", b"c", b"zzz", b"aa", b"ba", b"cab", b"dddd", b"d", b"ca",
    b"abcd", b"bcd", b"e",
];

/// Every key comes back in the comparator's order, from memtables and tables alike, and
/// point reads find them.
#[test]
fn a_user_order_is_kept_through_flushes_compactions_and_reopens() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Arc::new(LengthFirst))).unwrap();
    fill(&db, &WORDS);
    let mut want: Vec<Vec<u8>> = WORDS.iter().map(|w| w.to_vec()).collect();
    want.push(b"zz".to_vec());
    want.sort_by(|a, b| LengthFirst.compare(a, b));
    assert_eq!(keys_of(&db), want);
    db.close().unwrap();
    let db = Db::open("/db", options(&fs, Arc::new(LengthFirst))).unwrap();
    assert_eq!(keys_of(&db), want);
    assert_eq!(db.get(b"cab").unwrap(), Some(b"v9".to_vec()));
    assert_eq!(db.get(b"zz").unwrap(), Some(b"in the memtable".to_vec()));
    assert_eq!(db.get(b"zzzz").unwrap(), None);
    let rev: Vec<Vec<u8>> = db.scan_rev(..).unwrap().map(|e| e.unwrap().0).collect();
    assert_eq!(rev, want.iter().rev().cloned().collect::<Vec<_>>());
}

/// The name is recorded: opening under another comparator, or a bytewise database under a
/// comparator, fails with a clear error and changes nothing; the right one opens it.
#[test]
fn a_database_refuses_to_open_under_another_comparator() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Arc::new(ReverseBytewiseComparator))).unwrap();
    db.put(b"k", b"v").unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    for other in [
        Arc::new(BytewiseComparator) as Arc<dyn Comparator>,
        Arc::new(LengthFirst),
    ] {
        let name = other.name().to_string();
        match Db::open("/db", options(&fs, other)) {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains(ReverseBytewiseComparator::NAME), "{why}");
                assert!(why.contains(&name), "{why}");
            }
            Err(e) => panic!("opened under {name}: {e}"),
            Ok(_) => panic!("opened under {name}"),
        }
    }
    let db = Db::open("/db", options(&fs, Arc::new(ReverseBytewiseComparator))).unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
    db.close().unwrap();

    // A bytewise database names no comparator, and is refused under one all the same.
    let plain = MemFs::new();
    let db = Db::open("/db", common::tiny_options(Some(plain.clone()), 4)).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    match Db::open("/db", options(&plain, Arc::new(LengthFirst))) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("test.LengthFirst"), "{why}"),
        other => panic!(
            "a bytewise database opened under LengthFirst: {:?}",
            other.err()
        ),
    }
    // The built-in bytewise comparator is the default's order under its own name.
    let db = Db::open("/db", options(&plain, Arc::new(BytewiseComparator))).unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(b"v".to_vec()));
}

/// A column family cannot ask for an order of its own.
#[test]
fn a_column_family_shares_the_database_order() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Arc::new(ReverseBytewiseComparator))).unwrap();
    match db.create_family("other", common::tiny_options(Some(fs.clone()), 4)) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("Bytewise"), "{why}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a family in byte order in a reversed database"),
    }
    let cf = db
        .create_family("same", options(&fs, Arc::new(ReverseBytewiseComparator)))
        .unwrap();
    for k in [b"a", b"c", b"b"] {
        db.put_cf(&cf, k, k).unwrap();
    }
    let ro = strata::ReadOptions {
        family: Some(cf.clone()),
        ..Default::default()
    };
    let got: Vec<Vec<u8>> = db
        .scan_with(.., ro, false)
        .unwrap()
        .map(|e| e.unwrap().0)
        .collect();
    assert_eq!(got, [b"c".to_vec(), b"b".to_vec(), b"a".to_vec()]);
}

/// Included and excluded bounds of scans, both ways, and range deletions, in reversed
/// order: `c` comes before `b`.
#[test]
fn scan_bounds_and_range_deletions_follow_the_comparator() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Arc::new(ReverseBytewiseComparator))).unwrap();
    for k in [b"a", b"b", b"c", b"d", b"e"] {
        db.put(k, k).unwrap();
    }
    db.flush().unwrap();
    let scan = |lo: Bound<&[u8]>, hi: Bound<&[u8]>, reverse: bool| -> String {
        let range = (lo.map(<[u8]>::to_vec), hi.map(<[u8]>::to_vec));
        let it = match reverse {
            false => db.scan(range),
            true => db.scan_rev(range),
        };
        it.unwrap()
            .map(|e| String::from_utf8(e.unwrap().0).unwrap())
            .collect()
    };
    use Bound::{Excluded, Included, Unbounded};
    assert_eq!(scan(Unbounded, Unbounded, false), "edcba");
    assert_eq!(scan(Included(b"d"), Included(b"b"), false), "dcb");
    assert_eq!(scan(Excluded(b"d"), Included(b"b"), false), "cb");
    assert_eq!(scan(Included(b"d"), Excluded(b"b"), false), "dc");
    assert_eq!(scan(Excluded(b"d"), Excluded(b"b"), false), "c");
    assert_eq!(scan(Included(b"d"), Included(b"b"), true), "bcd");
    assert_eq!(scan(Excluded(b"d"), Included(b"b"), true), "bc");
    assert_eq!(scan(Excluded(b"e"), Unbounded, true), "abcd");
    assert_eq!(scan(Unbounded, Included(b"c"), true), "cde");
    assert_eq!(
        scan(Included(b"b"), Included(b"d"), false),
        "",
        "an empty range"
    );

    // In this order `d` to `b` is a range and `b` to `d` is not.
    let mut bad = WriteBatch::new();
    bad.delete_range(b"b", b"d");
    assert!(matches!(
        db.write(bad, Default::default()),
        Err(Error::InvalidArgument(_))
    ));
    db.delete_range(b"d", b"b").unwrap();
    assert_eq!(scan(Unbounded, Unbounded, false), "eba");
    db.compact_range(None, None).unwrap();
    assert_eq!(scan(Unbounded, Unbounded, false), "eba");
    assert_eq!(db.get(b"c").unwrap(), None);
}

/// A transaction's scan merges its own writes into the snapshot's in the database's order.
#[test]
fn transaction_scans_follow_the_comparator() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Arc::new(ReverseBytewiseComparator))).unwrap();
    for k in [b"a", b"c", b"e"] {
        db.put(k, b"db").unwrap();
    }
    let mut tx = db.transaction();
    tx.put(b"d", b"tx");
    tx.put(b"b", b"tx");
    tx.delete(b"c");
    let got: Vec<(String, String)> = tx
        .scan(b"e".to_vec()..=b"b".to_vec())
        .unwrap()
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
        .collect();
    let want = [("e", "db"), ("d", "tx"), ("b", "tx")];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(got, want);
    assert!(tx.scan(b"b".to_vec()..b"e".to_vec()).unwrap().is_empty());
}

/// Sizes of ranges are measured in the comparator's order: a range that holds every key
/// measures the tables, one that ends before it starts measures nothing.
#[test]
fn sizes_follow_the_comparator() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Arc::new(ReverseBytewiseComparator))).unwrap();
    for i in 0..2000u32 {
        db.put(format!("k{i:05}").as_bytes(), &[7u8; 100]).unwrap();
    }
    db.flush().unwrap();
    let sizes = db
        .approximate_sizes(&[
            (b"k99999".to_vec(), b"k".to_vec()),
            (b"k".to_vec(), b"k99999".to_vec()),
            (b"k01999".to_vec(), b"k01000".to_vec()),
        ])
        .unwrap();
    assert!(sizes[0] > 200_000, "{sizes:?}");
    assert_eq!(sizes[1], 0, "{sizes:?}");
    assert!(sizes[2] > sizes[0] / 4 && sizes[2] < sizes[0], "{sizes:?}");
}

/// `check` and `dump_file` read a database in the built-in reversed order by the name its
/// MANIFEST records, and refuse, with a clear error, one whose comparator they cannot know.
#[test]
fn the_inspection_tools_read_the_recorded_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = common::tiny_options(None, 4);
    o.comparator = Arc::new(ReverseBytewiseComparator);
    let db = Db::open(dir.path(), o).unwrap();
    for i in 0..500u32 {
        db.put(format!("k{i:04}").as_bytes(), b"value").unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let checks = strata::inspect::check(dir.path()).unwrap();
    let ssts: Vec<_> = checks
        .iter()
        .filter(|c| c.kind == strata::inspect::FileKind::Sst)
        .collect();
    assert!(!ssts.is_empty());
    for c in &checks {
        assert!(c.error.is_none(), "{:?}: {:?}", c.path, c.error);
    }
    let dump = strata::inspect::dump_file(&ssts[0].path, true).unwrap();
    let keys: Vec<&[u8]> = dump.entries.iter().map(|e| e.key.as_slice()).collect();
    assert!(keys.len() > 1);
    assert!(
        keys.windows(2).all(|w| w[0] > w[1]),
        "not in reversed order"
    );

    let other = tempfile::tempdir().unwrap();
    let mut o = common::tiny_options(None, 4);
    o.comparator = Arc::new(LengthFirst);
    let db = Db::open(other.path(), o).unwrap();
    db.put(b"k", b"v").unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    match strata::inspect::check(other.path()) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("test.LengthFirst"), "{why}"),
        other => panic!("checked a database of an unknown order: {other:?}"),
    }
}

/// Repair rebuilds the MANIFEST of a database in a user's order with that order's name,
/// keeping every key; the database then opens under it and under nothing else.
#[test]
fn repair_keeps_the_order_and_its_name() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, Arc::new(LengthFirst))).unwrap();
    fill(&db, &WORDS);
    // Length first: from `e` (the last key of one byte) up to `ac` are `e`, `aa` and `ab`.
    db.delete_range(b"e", b"ac").unwrap();
    db.flush().unwrap();
    let before = keys_of(&db);
    let mut want: Vec<Vec<u8>> = WORDS.iter().map(|w| w.to_vec()).collect();
    want.push(b"zz".to_vec());
    want.retain(|k| ![&b"e"[..], b"aa", b"ab"].contains(&k.as_slice()));
    want.sort_by(|a, b| LengthFirst.compare(a, b));
    assert_eq!(before, want);
    db.close().unwrap();
    // Neither CURRENT nor a MANIFEST is left: the order comes from the options alone.
    let dir = Path::new("/db");
    for name in strata::FileSystem::list(&fs, dir).unwrap() {
        if name == "CURRENT" || name.starts_with("MANIFEST-") {
            strata::FileSystem::remove(&fs, &dir.join(name)).unwrap();
        }
    }
    let report = strata::repair("/db", options(&fs, Arc::new(LengthFirst))).unwrap();
    assert!(report.tables_kept > 0, "{report:?}");
    let db = Db::open("/db", options(&fs, Arc::new(LengthFirst))).unwrap();
    assert_eq!(keys_of(&db), before);
    db.close().unwrap();
    assert!(matches!(
        Db::open("/db", options(&fs, Arc::new(BytewiseComparator))),
        Err(Error::InvalidArgument(_))
    ));
}

/// The first edit of every MANIFEST names the comparator, except for byte order, whose
/// MANIFEST stays as it was before comparators (an older Strata opens it).
#[test]
fn only_a_comparator_other_than_bytewise_is_recorded() {
    for (comparator, recorded) in [
        (
            Arc::new(ReverseBytewiseComparator) as Arc<dyn Comparator>,
            Some("comparator rocksdb.ReverseBytewiseComparator"),
        ),
        (Arc::new(BytewiseComparator), None),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = common::tiny_options(None, 4);
        o.comparator = comparator;
        let db = Db::open(dir.path(), o).unwrap();
        db.put(b"k", b"v").unwrap();
        db.flush().unwrap();
        db.close().unwrap();
        let current = std::fs::read_to_string(dir.path().join("CURRENT")).unwrap();
        let manifest = dir.path().join(current.trim_end());
        let dump = strata::inspect::dump_file(&manifest, false).unwrap();
        let edits: Vec<&String> = dump
            .summary
            .iter()
            .filter(|(name, _)| name.starts_with("edit @"))
            .map(|(_, edit)| edit)
            .collect();
        assert!(!edits.is_empty());
        match recorded {
            Some(name) => assert!(edits[0].starts_with(name), "{:?}", edits[0]),
            None => assert!(edits.iter().all(|e| !e.contains("comparator")), "{edits:?}"),
        }
        assert!(
            edits[1..].iter().all(|e| !e.contains("comparator")),
            "{edits:?}"
        );
    }
}

/// Byte order under a user's name, whose separators and successors are taken where they
/// fall between two blocks and refused where they do not: index keys outside a block's
/// range would send lookups to the wrong block.
struct Separators {
    /// Answers out of range: past `limit`, and before the key.
    wrong: bool,
}

impl Comparator for Separators {
    fn name(&self) -> &str {
        "test.Separators"
    }
    fn compare(&self, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        a.cmp(b)
    }
    fn find_shortest_separator(&self, start: &mut Vec<u8>, limit: &[u8]) {
        match self.wrong {
            true => *start = [limit, b"\xff"].concat(),
            false => BytewiseComparator.find_shortest_separator(start, limit),
        }
    }
    fn find_short_successor(&self, key: &mut Vec<u8>) {
        match self.wrong {
            true => key.truncate(1),
            false => BytewiseComparator.find_short_successor(key),
        }
    }
}

#[test]
fn separators_out_of_range_are_not_taken() {
    for wrong in [false, true] {
        let fs = MemFs::new();
        let open = || Db::open("/db", options(&fs, Arc::new(Separators { wrong }))).unwrap();
        let db = open();
        let key = |i: u32| format!("key{:07}", i * 7919 % 100_000).into_bytes();
        for i in 0..3000 {
            db.put(&key(i), format!("value{i}").as_bytes()).unwrap();
        }
        db.compact_range(None, None).unwrap();
        db.close().unwrap();
        let db = open();
        for i in 0..3000 {
            let got = db.get(&key(i)).unwrap();
            assert_eq!(
                got,
                Some(format!("value{i}").into_bytes()),
                "wrong {wrong}, key {i}"
            );
        }
        let mut want: Vec<Vec<u8>> = (0..3000).map(key).collect();
        want.sort();
        assert_eq!(keys_of(&db), want);
    }
}

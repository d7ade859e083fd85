//! The merge operator at the edges the model test reaches only by chance: folds in flushes
//! and compactions beside snapshots, and a database without the operator.

mod common;

use std::sync::Arc;

use strata::merge::{Append, CounterAdd};
use strata::{Db, Error, MemFs, Options, ReadOptions};

fn options(fs: &MemFs, op: bool) -> Options {
    let mut o = common::tiny_options(Some(fs.clone()), 4);
    o.write_buffer_size = 64 * 1024;
    if op {
        o.merge_operator = Some(Arc::new(Append {
            delimiter: b",".to_vec(),
        }));
    }
    o
}

fn table_entries(db: &Db) -> u64 {
    db.stats().files.iter().map(|f| f.entries).sum()
}

#[test]
fn a_flush_folds_operands_into_the_value_beneath_them() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, true)).unwrap();
    db.put(b"k", b"base").unwrap();
    for op in ["a", "b", "c"] {
        db.merge(b"k", op.as_bytes()).unwrap();
    }
    // Operands alone fold into one operand.
    db.merge(b"lone", b"x").unwrap();
    db.merge(b"lone", b"y").unwrap();
    db.flush().unwrap();
    assert_eq!(table_entries(&db), 2, "one entry per key after the flush");
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"base,a,b,c"[..]));
    assert_eq!(db.get(b"lone").unwrap().as_deref(), Some(&b"x,y"[..]));
}

#[test]
fn a_snapshot_keeps_the_versions_it_sees_through_flush_and_compaction() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, true)).unwrap();
    db.put(b"k", b"base").unwrap();
    db.merge(b"k", b"a").unwrap();
    let snap = db.snapshot();
    db.merge(b"k", b"b").unwrap();
    db.merge(b"k", b"c").unwrap();
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    let at = ReadOptions {
        snapshot: Some(snap.clone()),
        ..ReadOptions::default()
    };
    assert_eq!(
        db.get_with(b"k", &at).unwrap().as_deref(),
        Some(&b"base,a"[..])
    );
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"base,a,b,c"[..]));
    // What the snapshot sees was folded (it sees base and a alike); what it does not see
    // stayed apart.
    assert_eq!(table_entries(&db), 3);
    drop((snap, at));
    // A compaction that rewrites the key's table (keys around it come down onto it).
    db.put(b"j", b"1").unwrap();
    db.put(b"l", b"1").unwrap();
    db.compact_range(None, None).unwrap();
    assert_eq!(table_entries(&db), 3, "k, j and l, one entry each");
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"base,a,b,c"[..]));
}

#[test]
fn without_an_operator_merges_are_refused_and_operands_are_an_error_to_read() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs, false)).unwrap();
    assert!(matches!(
        db.merge(b"k", b"x"),
        Err(Error::InvalidArgument(_))
    ));
    db.close().unwrap();
    let db = Db::open("/db", options(&fs, true)).unwrap();
    db.merge(b"k", b"x").unwrap();
    db.close().unwrap();
    let db = Db::open("/db", options(&fs, false)).unwrap();
    assert!(matches!(db.get(b"k"), Err(Error::Merge { .. })));
    assert!(db.scan(..).unwrap().any(|e| e.is_err()));
    // Compactions without the operator keep the operands and what lies beneath them.
    db.put(b"base", b"v").unwrap();
    db.close().unwrap();
    let db = Db::open("/db", options(&fs, true)).unwrap();
    db.merge(b"base", b"w").unwrap();
    db.close().unwrap();
    let db = Db::open("/db", options(&fs, false)).unwrap();
    db.compact_range(None, None).unwrap();
    db.close().unwrap();
    let db = Db::open("/db", options(&fs, true)).unwrap();
    assert_eq!(db.get(b"base").unwrap().as_deref(), Some(&b"v,w"[..]));
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"x"[..]));
}

#[test]
fn counters_add_and_refuse_a_value_that_is_not_a_counter() {
    let fs = MemFs::new();
    let mut o = options(&fs, false);
    o.merge_operator = Some(Arc::new(CounterAdd));
    let db = Db::open("/db", o).unwrap();
    for n in [5, -2, 10] {
        db.merge(b"c", &CounterAdd::operand(n)).unwrap();
    }
    db.flush().unwrap();
    db.merge(b"c", &CounterAdd::operand(100)).unwrap();
    assert_eq!(
        CounterAdd::decode(&db.get(b"c").unwrap().unwrap()),
        Some(113)
    );
    db.put(b"text", b"abc").unwrap();
    db.merge(b"text", &CounterAdd::operand(1)).unwrap();
    assert!(matches!(db.get(b"text"), Err(Error::Merge { .. })));
    // Compaction keeps what it cannot fold, and reads still report it.
    db.compact_range(None, None).unwrap();
    assert!(matches!(db.get(b"text"), Err(Error::Merge { .. })));
    assert_eq!(
        CounterAdd::decode(&db.get(b"c").unwrap().unwrap()),
        Some(113)
    );
}

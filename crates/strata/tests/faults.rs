//! What the engine does when the disk misbehaves: failed fsyncs, a full disk in the middle
//! of a flush and of a compaction, failed reads.

mod common;

use std::sync::Arc;

use strata::{Db, Error, FaultFs, FaultOp, MemFs, Options, WriteBatch, WriteOptions};

fn open(fault: &FaultFs) -> strata::Result<Db> {
    let mut o = common::tiny_options(None, 10);
    o.level0_compaction_trigger = 100;
    o.level0_slowdown_trigger = 100;
    o.level0_stop_trigger = 100;
    o.read_triggered_compaction = false;
    o.fs = Arc::new(fault.clone());
    Db::open("/db", o)
}

fn fill(db: &Db, range: std::ops::Range<u32>) {
    for i in range {
        db.put(format!("k{i:05}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
}

fn assert_holds(db: &Db, range: std::ops::Range<u32>) {
    for i in range {
        assert_eq!(
            db.get(format!("k{i:05}").as_bytes()).unwrap(),
            Some(format!("v{i}").into_bytes()),
            "k{i:05}"
        );
    }
}

#[test]
fn a_failed_fsync_poisons_writes_but_not_reads() {
    let fault = FaultFs::new(Arc::new(MemFs::new()));
    let db = open(&fault).unwrap();
    fill(&db, 0..100);
    fault.fail_nth(FaultOp::Sync, 1, false);
    let mut b = WriteBatch::new();
    b.put(b"synced", b"?");
    let err = db.write(b, WriteOptions { sync: true }).unwrap_err();
    assert!(matches!(err, Error::Io { op: "fsync", .. }), "{err}");
    match db.put(b"after", b"x") {
        Err(Error::Poisoned(msg)) => assert!(msg.contains("fsync"), "{msg}"),
        other => panic!("expected Poisoned, got {other:?}"),
    }
    assert!(db.stats().poisoned.is_some());
    assert_holds(&db, 0..100);
    drop(db);
    fault.clear();
    let db = open(&fault).unwrap();
    assert_holds(&db, 0..100);
    db.put(b"after", b"x").unwrap();
}

#[test]
fn disk_full_during_a_flush_fails_writes_keeps_reads_and_recovers() {
    let fault = FaultFs::new(Arc::new(MemFs::new()));
    let db = open(&fault).unwrap();
    fill(&db, 0..300);
    db.flush().unwrap();
    fill(&db, 300..400);
    fault.disk_full();
    let err = db.flush().unwrap_err();
    assert!(err.to_string().contains("No space left on device"), "{err}");
    let err = db.put(b"more", b"x").unwrap_err();
    assert!(
        matches!(err, Error::Poisoned(_) | Error::Io { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("No space left"),
        "a clear reason: {err}"
    );
    assert_holds(&db, 0..400);
    drop(db);
    fault.free_space();
    let db = open(&fault).unwrap();
    assert_holds(&db, 0..400);
    assert_eq!(db.get(b"more").unwrap(), None);
    fill(&db, 400..450);
    db.flush().unwrap();
    assert_holds(&db, 0..450);
}

#[test]
fn disk_full_during_a_compaction_keeps_reads_and_recovers() {
    let fault = FaultFs::new(Arc::new(MemFs::new()));
    let db = open(&fault).unwrap();
    for round in 0..5u32 {
        fill(&db, round * 200..(round + 1) * 200);
        db.flush().unwrap();
    }
    fault.disk_full();
    let err = db.compact_range(None, None).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert_holds(&db, 0..1000);
    assert!(db.put(b"x", b"y").is_err());
    drop(db);
    fault.free_space();
    let db = open(&fault).unwrap();
    assert_holds(&db, 0..1000);
    db.compact_range(None, None).unwrap();
    assert_holds(&db, 0..1000);
    assert_eq!(db.stats().levels[0].files, 0);
}

fn tables(fault: &FaultFs) -> Vec<String> {
    let mut names: Vec<String> = strata::FileSystem::list(fault, std::path::Path::new("/db"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".sst"))
        .collect();
    names.sort();
    names
}

/// A merge that fails while it writes its second output leaves none of its outputs behind:
/// neither the table it finished nor the one it was writing.
#[test]
fn a_compaction_that_fails_midway_leaves_no_partial_table() {
    let fault = FaultFs::new(Arc::new(MemFs::new()));
    let db = open(&fault).unwrap();
    for round in 0..5u32 {
        fill(&db, round * 200..(round + 1) * 200);
        db.flush().unwrap();
    }
    let before = tables(&fault);
    let creates = fault.calls(FaultOp::Create);
    // Tables of 2 KiB in blocks of 128 bytes: the 40th append falls in a later output.
    fault.fail_nth(FaultOp::Append, 40, false);
    let err = db.compact_range(None, None).unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    assert!(
        fault.calls(FaultOp::Create) >= creates + 2,
        "the merge failed in its first output; the test needs it in a later one"
    );
    assert_eq!(
        tables(&fault),
        before,
        "the merge's outputs are all removed"
    );
    assert_holds(&db, 0..1000);
}

#[test]
fn a_failed_read_is_an_error_not_a_wrong_answer() {
    let fault = FaultFs::new(Arc::new(MemFs::new()));
    let mut o = common::tiny_options(None, 10);
    o.fs = Arc::new(fault.clone());
    o.block_cache_bytes = 0;
    let db = Db::open("/db", o).unwrap();
    fill(&db, 0..300);
    db.flush().unwrap();
    fault.fail_nth(FaultOp::Read, 1, true);
    let mut errors = 0;
    for i in 0..300u32 {
        match db.get(format!("k{i:05}").as_bytes()) {
            Ok(Some(v)) => assert_eq!(v, format!("v{i}").into_bytes()),
            Ok(None) => panic!("a failed read turned into a missing key"),
            Err(Error::Io { op: "read", .. }) => errors += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(errors > 0);
    fault.clear();
    assert_holds(&db, 0..300);
}

#[test]
fn options_are_validated() {
    let bad = Options {
        size_ratio: 1,
        ..common::options()
    };
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Db::open(dir.path(), bad),
        Err(Error::InvalidArgument(_))
    ));
}

/// On the real file system the WAL is written through a memory mapping. A record cut short
/// by a failed append (the bytes copied so far stay in the file) is dropped at the next open
/// as a torn tail, and every acknowledged write is kept.
#[test]
fn a_short_wal_append_on_disk_is_a_torn_tail_and_loses_nothing_acknowledged() {
    // A record is appended in parts (header, batch header, operations): cut each of them.
    for nth in 1..=3 {
        let dir = tempfile::tempdir().unwrap();
        let fault = FaultFs::new(Arc::new(strata::StdFs));
        let options = || {
            let mut o = common::tiny_options(None, 10);
            o.write_buffer_size = 1 << 20;
            o.fs = Arc::new(fault.clone());
            o
        };
        let db = Db::open(dir.path(), options()).unwrap();
        fill(&db, 0..300);
        // That append copies half of its bytes, then fails.
        fault.short_write_nth(nth, 50);
        let mut b = WriteBatch::new();
        b.put(b"k-torn", &[7u8; 500]);
        assert!(db.write(b, WriteOptions::default()).is_err());
        drop(db);
        fault.clear();
        let db = Db::open(dir.path(), options()).unwrap();
        assert_holds(&db, 0..300);
        assert_eq!(db.get(b"k-torn").unwrap(), None, "append {nth} cut");
        assert!(db.stats().wal_tail_dropped_bytes > 0, "append {nth} cut");
    }
}

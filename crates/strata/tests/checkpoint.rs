//! Checkpoints: a consistent copy, made while writes go on, that opens as a database.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use strata::{Db, Error, MemFs, WriteBatch, WriteOptions};

fn key(i: u64) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("v{i}").into_bytes()
}

/// The number of keys `k000000..` a dump holds, after checking that it holds exactly the
/// first that many, each with its value: the state after a prefix of the writes.
fn prefix_len(db: &Db) -> u64 {
    let state = common::dump(db);
    let n = state.len() as u64;
    for i in 0..n {
        assert_eq!(
            state.get(&key(i)),
            Some(&value(i)),
            "not a prefix: key {i} of {n}"
        );
    }
    n
}

#[test]
fn a_checkpoint_made_during_writes_holds_every_earlier_write_and_outlives_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path().join("db"), common::tiny_options(None, 4)).unwrap());
    let acked = Arc::new(AtomicU64::new(0));
    let writer = {
        let (db, acked) = (db.clone(), acked.clone());
        std::thread::spawn(move || {
            for i in 0..6000 {
                db.put(&key(i), &value(i)).unwrap();
                acked.store(i + 1, Ordering::SeqCst);
            }
        })
    };
    while acked.load(Ordering::SeqCst) < 2000 {
        std::thread::yield_now();
    }
    let before = acked.load(Ordering::SeqCst);
    let copy = dir.path().join("checkpoint");
    db.checkpoint(&copy).unwrap();
    let after = acked.load(Ordering::SeqCst);
    writer.join().unwrap();

    let held = {
        let c = Db::open(&copy, common::tiny_options(None, 4)).unwrap();
        prefix_len(&c)
    };
    assert!(
        (before..=after).contains(&held),
        "the checkpoint holds {held} writes; {before} were acknowledged before it began, \
         {after} when it returned"
    );
    // The database goes on and compacts its tables away; the copy keeps its own.
    db.compact_range(None, None).unwrap();
    assert_eq!(prefix_len(&db), 6000);
    drop(db);
    let c = Db::open(&copy, common::tiny_options(None, 4)).unwrap();
    assert_eq!(prefix_len(&c), held);
    // And takes writes of its own.
    c.put(b"only-in-the-copy", b"1").unwrap();
    drop(c);
    let c = Db::open(&copy, common::tiny_options(None, 4)).unwrap();
    assert_eq!(
        c.get(b"only-in-the-copy").unwrap().as_deref(),
        Some(&b"1"[..])
    );
}

#[test]
fn a_checkpoint_survives_a_power_loss_once_made() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::tiny_options(Some(fs.clone()), 4)).unwrap();
    for i in 0..500 {
        let mut b = WriteBatch::new();
        b.put(&key(i), &value(i));
        // Unsynced: only the checkpoint makes these durable.
        db.write(b, WriteOptions { sync: false }).unwrap();
    }
    db.checkpoint("/copy").unwrap();
    let after = fs.power_loss_copy();
    let c = Db::open("/copy", common::tiny_options(Some(after), 4)).unwrap();
    assert_eq!(prefix_len(&c), 500);
}

#[test]
fn a_checkpoint_into_an_existing_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), common::tiny_options(None, 4)).unwrap();
    db.put(b"a", b"1").unwrap();
    let err = db.checkpoint(dir.path()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// Two checkpoints racing into one directory: the second finds the first's links where its
/// own would go. It must fail there, not fall back to a copy that truncates the file, which
/// is a live table of the database.
#[test]
fn linking_onto_an_existing_file_fails_and_truncates_nothing() {
    use strata::{FileSystem, StdFs};
    let dir = tempfile::tempdir().unwrap();
    let (table, link) = (dir.path().join("000007.sst"), dir.path().join("link.sst"));
    std::fs::write(&table, b"the table's bytes").unwrap();
    std::fs::hard_link(&table, &link).unwrap();
    assert!(StdFs.link_or_copy(&table, &link).is_err());
    assert_eq!(std::fs::read(&table).unwrap(), b"the table's bytes");
}

/// A checkpoint that fails partway removes what it made: a directory with some of the
/// tables would open as a database that silently lacks the rest.
#[test]
fn a_failed_checkpoint_leaves_no_directory() {
    use strata::{FaultFs, FaultOp, FileSystem, Options};
    let mem = MemFs::new();
    let fs = FaultFs::new(Arc::new(mem.clone()));
    let opts = Options {
        fs: Arc::new(fs.clone()),
        ..common::tiny_options(None, 4)
    };
    let db = Db::open("/db", opts).unwrap();
    for i in 0..1000 {
        db.put(&key(i), &value(i)).unwrap();
    }
    db.flush().unwrap();
    // Merged into one level, the tree gives the compaction thread nothing to do, so the
    // fault below meets the checkpoint's copies and not a compaction's output.
    db.compact_range(None, None).unwrap();
    // The memory file system copies tables: the second copy fails.
    fs.fail_nth(FaultOp::Create, 2, false);
    assert!(db.checkpoint("/copy").is_err());
    assert!(
        !fs.exists(std::path::Path::new("/copy")),
        "a half-made checkpoint is left"
    );
    db.checkpoint("/copy").unwrap();
    let c = Db::open("/copy", common::tiny_options(Some(mem), 4)).unwrap();
    assert_eq!(prefix_len(&c), 1000);
}

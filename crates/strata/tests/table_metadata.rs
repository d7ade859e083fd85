//! What open tables hold of their metadata: tables that flush and compaction write are
//! installed with their filter and index already read, so that no reader meets a cold table
//! the engine itself just wrote. Reads are counted through the file system seam.

mod common;

use std::sync::Arc;

use strata::{Db, FaultFs, FaultOp, MemFs, Options};

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes()
}

/// Options with room for every table's metadata, no mapping (every read goes through
/// `read_at`, where the seam counts it) and filters of 10 bits a key.
fn options(fault: &FaultFs) -> Options {
    Options {
        fs: Arc::new(fault.clone()),
        table_pinned_bytes: 64 << 20,
        table_map_bytes: 0,
        target_file_size: 16 * 1024,
        filter_policy: strata::FilterPolicy::Uniform { bits_per_key: 10 },
        ..common::tiny_options(None, 10)
    }
}

/// Reads that lookups of `n` absent keys make: only the data blocks of the filters' false
/// positives, when every table holds its filter and index.
fn reads_for_absent_keys(db: &Db, fault: &FaultFs, n: u32) -> (u64, u64) {
    let before = (
        fault.calls(FaultOp::Read),
        db.stats().filter_false_positives,
    );
    for i in 0..n {
        // Among the written keys, so that every level's tables are consulted.
        let absent = [key(i), b"x".to_vec()].concat();
        assert_eq!(db.get(&absent).unwrap(), None);
    }
    let after = (
        fault.calls(FaultOp::Read),
        db.stats().filter_false_positives,
    );
    (after.0 - before.0, after.1 - before.1)
}

fn settle(db: &Db) {
    let start = std::time::Instant::now();
    while db.stats().compaction_pending {
        assert!(start.elapsed().as_secs() < 60, "compactions did not settle");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A database of 4,000 keys over a file system that counts reads, its flushes and the
/// compactions they started done.
fn filled() -> (FaultFs, Db) {
    let fault = FaultFs::new(Arc::new(MemFs::new()));
    let db = Db::open("/db", options(&fault)).unwrap();
    for i in 0..4000 {
        db.put(&key(i), format!("value{i}").as_bytes()).unwrap();
    }
    db.flush().unwrap();
    settle(&db);
    (fault, db)
}

#[test]
fn tables_written_by_flush_and_compaction_are_installed_warm() {
    let (fault, db) = filled();
    // Flushes and the compactions they started wrote every table there is.
    let tables = db.stats().files.len();
    assert!(tables >= 8, "only {tables} tables");
    let (reads, false_positives) = reads_for_absent_keys(&db, &fault, 500);
    // A cold table would cost its filter's read (and its index's, where the filter passes)
    // at its first lookup: at least one read a table.
    assert!(
        reads <= false_positives,
        "{reads} reads for 500 absent keys over {tables} tables, with {false_positives} false \
         positives"
    );
    // And a whole-range compaction's tables, the same.
    db.compact_range(None, None).unwrap();
    settle(&db);
    let tables = db.stats().files.len();
    assert!(tables >= 8, "only {tables} tables after compact_range");
    let (reads, false_positives) = reads_for_absent_keys(&db, &fault, 500);
    assert!(
        reads <= false_positives,
        "{reads} reads for 500 absent keys over {tables} tables after compact_range, with \
         {false_positives} false positives"
    );
    // What they hold is counted.
    assert!(db.stats().table_pinned_bytes > 0);
    for i in (0..4000).step_by(37) {
        assert_eq!(
            db.get(&key(i)).unwrap(),
            Some(format!("value{i}").into_bytes())
        );
    }
}

#[test]
fn tables_opened_again_after_a_reopen_are_cold_and_the_count_shows_it() {
    // The check above can see a cold table: after a reopen, which writes no table, each
    // table's first lookup reads its filter.
    let (fault, db) = filled();
    db.close().unwrap();
    let db = Db::open("/db", options(&fault)).unwrap();
    let tables = db.stats().files.len() as u64;
    let (reads, _) = reads_for_absent_keys(&db, &fault, 500);
    assert!(
        reads >= tables,
        "{reads} reads for 500 absent keys over {tables} cold tables"
    );
}

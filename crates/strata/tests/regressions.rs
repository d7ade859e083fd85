//! One fixed test per bug the randomized reliability tests found, so each stays fixed
//! whatever seed those tests draw.

mod common;

use std::path::Path;
use std::sync::Arc;

use strata::{Db, Error, FaultFs, FaultOp, FileSystem, MemFs, Options, WriteOptions};

fn opts(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        write_buffer_size: 4 * 1024,
        level0_compaction_trigger: 100,
        level0_slowdown_trigger: 100,
        level0_stop_trigger: 100,
        read_triggered_compaction: false,
        fs,
        ..common::options()
    }
}

fn files(fs: &MemFs, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(Path::new("/db"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(suffix) || n.starts_with(suffix))
        .collect();
    v.sort();
    v
}

/// The files a crash leaves while the WALs of three memtables are live (flushes held back),
/// with the WALs' names, oldest first.
fn crash_with_several_wals() -> (MemFs, Vec<String>) {
    let mem = MemFs::new();
    let fault = FaultFs::new(Arc::new(mem.clone()));
    let o = Options {
        max_immutable_memtables: 8,
        ..opts(Arc::new(fault.clone()))
    };
    let db = Db::open("/db", o).unwrap();
    fault.close_gate(".sst");
    for i in 0..10_000u32 {
        let mut b = strata::WriteBatch::new();
        b.put(format!("k{i:05}").as_bytes(), &[b'v'; 60]);
        db.write(b, WriteOptions { sync: true }).unwrap();
        if files(&mem, ".wal").len() >= 3 {
            break;
        }
    }
    let crashed = mem.process_crash_copy();
    fault.open_gate();
    drop(db);
    let wals = files(&crashed, ".wal");
    assert!(
        wals.len() >= 2,
        "the test needs two live WALs, has {wals:?}"
    );
    (crashed, wals)
}

/// Several WALs, the older one cut short: that is lost history, not a torn tail, because
/// older WALs are synced whole when their memtable is switched out.
#[test]
fn a_torn_older_wal_is_corruption() {
    let (crashed, wals) = crash_with_several_wals();
    crashed
        .mutate_file(&Path::new("/db").join(&wals[0]), |d| {
            d.truncate(d.len() - 5)
        })
        .unwrap();
    match Db::open("/db", opts(Arc::new(crashed))) {
        Err(Error::Corruption { file, .. }) => assert!(file.ends_with(&wals[0])),
        other => panic!("expected corruption of {}, got {other:?}", wals[0]),
    }
}

/// A MANIFEST cut short after a flush had been logged (and its WAL deleted) lost that
/// flush's data silently; open now sees that the oldest live WAL it names is gone.
#[test]
fn a_manifest_missing_synced_edits_is_corruption() {
    let mem = MemFs::new();
    let db = Db::open("/db", opts(Arc::new(mem.clone()))).unwrap();
    let manifest = files(&mem, "MANIFEST")[0].clone();
    let before = mem.file_size(&Path::new("/db").join(&manifest)).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:04}").as_bytes(), &[b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    drop(db);
    mem.mutate_file(&Path::new("/db").join(&manifest), |d| {
        d.truncate(before as usize)
    })
    .unwrap();
    match Db::open("/db", opts(Arc::new(mem))) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("missing"), "{reason}"),
        other => panic!("expected corruption, got {other:?}"),
    }
}

/// A failed MANIFEST fsync used to delete the table the edit (already in the file) named.
#[test]
fn a_failed_manifest_sync_keeps_the_new_table() {
    let mem = MemFs::new();
    let fault = FaultFs::new(Arc::new(mem.clone()));
    let db = Db::open("/db", opts(Arc::new(fault.clone()))).unwrap();
    for i in 0..50u32 {
        db.put(format!("k{i:04}").as_bytes(), b"v").unwrap();
    }
    // A flush fsyncs the old WAL (at the switch), then the table, then the MANIFEST: fail
    // the third, the MANIFEST's.
    fault.fail_nth(FaultOp::Sync, 3, false);
    assert!(db.flush().is_err());
    let crashed = mem.process_crash_copy();
    drop(db);
    let db = Db::open("/db", opts(Arc::new(crashed))).unwrap();
    assert_eq!(
        db.stats().levels[0].files,
        1,
        "the edit was in the MANIFEST and its table is there"
    );
    for i in 0..50u32 {
        assert_eq!(
            db.get(format!("k{i:04}").as_bytes()).unwrap(),
            Some(b"v".to_vec())
        );
    }
}

/// An older WAL cut exactly at a record boundary has no torn tail to give it away; the gap in
/// sequence numbers before the next WAL does (found by the corruption sweep).
#[test]
fn an_older_wal_cut_at_a_record_boundary_is_corruption() {
    let (crashed, wals) = crash_with_several_wals();
    // Cut the older WAL just before its last record: record = crc, len, len crc, payload.
    crashed
        .mutate_file(&Path::new("/db").join(&wals[0]), |d| {
            let (mut at, mut last) = (0usize, 0usize);
            while at + 12 <= d.len() {
                let len = u32::from_le_bytes(d[at + 4..at + 8].try_into().unwrap()) as usize;
                last = at;
                at += 12 + len;
            }
            d.truncate(last);
        })
        .unwrap();
    match Db::open("/db", opts(Arc::new(crashed))) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("missing"), "{reason}"),
        other => panic!("expected corruption, got {other:?}"),
    }
}

/// A damaged version number in an SST footer read as "unsupported format".
#[test]
fn a_damaged_footer_version_is_corruption() {
    let mem = MemFs::new();
    let db = Db::open("/db", opts(Arc::new(mem.clone()))).unwrap();
    db.put(b"k", b"v").unwrap();
    db.flush().unwrap();
    drop(db);
    let sst = Path::new("/db").join(&files(&mem, ".sst")[0]);
    mem.mutate_file(&sst, |d| {
        let n = d.len();
        d[n - 12] ^= 0x20; // the format version
    })
    .unwrap();
    let db = Db::open(
        "/db",
        Options {
            block_cache_bytes: 0,
            ..opts(Arc::new(mem))
        },
    )
    .unwrap();
    match db.get(b"k") {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, sst),
        other => panic!("expected corruption, got {other:?}"),
    }
}

/// A new database's first MANIFEST record described the empty database and named no WAL; cut
/// short right after it, the MANIFEST lost the flushes logged later, and open went on without
/// their tables. Every cut of the MANIFEST must now be reported or lose nothing.
#[test]
fn a_new_manifest_cut_anywhere_loses_nothing_silently() {
    let mem = MemFs::new();
    let db = Db::open("/db", opts(Arc::new(mem.clone()))).unwrap();
    for i in 0..300u32 {
        db.put(format!("k{i:04}").as_bytes(), &[b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    drop(db);
    assert!(!files(&mem, ".sst").is_empty());
    let manifest = Path::new("/db").join(&files(&mem, "MANIFEST")[0]);
    let size = mem.file_size(&manifest).unwrap() as usize;
    for cut in 0..size {
        let fs = mem.process_crash_copy();
        fs.mutate_file(&manifest, |d| d.truncate(cut)).unwrap();
        match Db::open("/db", opts(Arc::new(fs))) {
            Err(e) => assert!(e.is_corruption(), "cut at {cut}: {e}"),
            Ok(db) => {
                for i in 0..300u32 {
                    let got = db.get(format!("k{i:04}").as_bytes()).unwrap();
                    assert!(got.is_some(), "cut at {cut}: k{i:04} vanished");
                }
            }
        }
    }
}

/// A flush published the version with its new table before the list of memtables without
/// the one flushed: a read in between saw both, and a merge found its operands twice (a
/// point lookup, which stops at the first version, hid it). A reader checks that every fold
/// it sees is a prefix of the appends made, with no operand repeated, while flushes run.
#[test]
fn a_read_during_a_flush_never_sees_a_memtable_and_its_table_together() {
    let mut o = common::tiny_options(None, 4);
    o.merge_operator = Some(Arc::new(strata::merge::Append {
        delimiter: b",".to_vec(),
    }));
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), o).unwrap());
    db.put(b"k", b"base").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let v = db.get(b"k").unwrap().unwrap();
                let text = String::from_utf8(v).unwrap();
                let parts: Vec<&str> = text.split(',').collect();
                assert_eq!(parts[0], "base");
                for (i, p) in parts.iter().skip(1).enumerate() {
                    assert_eq!(*p, format!("m{i}"), "read {reads}: {text}");
                }
                reads += 1;
            }
            reads
        })
    };
    for i in 0..400 {
        db.merge(b"k", format!("m{i}").as_bytes()).unwrap();
        db.flush().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    let want: Vec<String> = std::iter::once("base".to_string())
        .chain((0..400).map(|i| format!("m{i}")))
        .collect();
    assert_eq!(db.get(b"k").unwrap().unwrap(), want.join(",").into_bytes());
}

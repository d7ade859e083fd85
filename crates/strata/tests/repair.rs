//! `strata::repair` on each kind of damage the corruption sweep makes (a missing or damaged
//! MANIFEST, a missing CURRENT, a damaged table, a damaged WAL), the database read back
//! whole and compared with a model of what was written, less what the damage took.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use strata::{Db, FileSystem, MemFs, Options};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Fails naming the first few keys where `got` and `want` differ, not the whole maps.
fn same(got: &Model, want: &Model) {
    let keys: std::collections::BTreeSet<&Vec<u8>> = got.keys().chain(want.keys()).collect();
    let show = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(v).into_owned());
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .map(|k| {
            let (g, w) = (show(got.get(k)), show(want.get(k)));
            format!("{}: got {g:?}, want {w:?}", String::from_utf8_lossy(k))
        })
        .collect();
    assert!(
        diff.is_empty(),
        "{} keys differ: {:?}",
        diff.len(),
        &diff[..diff.len().min(5)]
    );
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

fn options(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        // Level 0's tables stay apart, so that a test can tell which keys one holds.
        level0_compaction_trigger: 100,
        level0_slowdown_trigger: 100,
        level0_stop_trigger: 100,
        read_triggered_compaction: false,
        idle_merge_after: None,
        ..common::options()
    }
}

fn files(fs: &MemFs, ext: &str) -> Vec<String> {
    let mut v: Vec<String> = fs.list(Path::new("/db")).unwrap();
    v.retain(|n| n.ends_with(ext));
    v.sort();
    v
}

/// A database with a table at the bottom (k0000-k0199), a level-0 table of overwrites,
/// deletions and a range deletion over it (k0000-k0069), a level-0 table of its own keys
/// (k0300-k0349), and writes only in the WAL (k0200-k0249, k0100); and its model. The
/// names of the level-0 tables, oldest first.
fn build(fs: &MemFs) -> (Model, Vec<String>) {
    let db = Db::open("/db", options(fs)).unwrap();
    let mut m = Model::new();
    for i in 0..200 {
        db.put(&key(i), b"first").unwrap();
        m.insert(key(i), b"first".to_vec());
    }
    db.compact_range(None, None).unwrap();
    let bottom = files(fs, ".sst");
    for i in 0..50 {
        db.put(&key(i), b"second").unwrap();
        m.insert(key(i), b"second".to_vec());
    }
    for i in 50..60 {
        db.delete(&key(i)).unwrap();
        m.remove(&key(i));
    }
    db.delete_range(&key(60), &key(70)).unwrap();
    for i in 60..70 {
        m.remove(&key(i));
    }
    db.flush().unwrap();
    for i in 300..350 {
        db.put(&key(i), b"own").unwrap();
        m.insert(key(i), b"own".to_vec());
    }
    db.flush().unwrap();
    for i in 200..250 {
        db.put(&key(i), b"logged").unwrap();
        m.insert(key(i), b"logged".to_vec());
    }
    db.put(&key(100), b"logged").unwrap();
    m.insert(key(100), b"logged".to_vec());
    drop(db);
    let mut level0 = files(fs, ".sst");
    level0.retain(|n| !bottom.contains(n));
    assert_eq!(level0.len(), 2, "{level0:?}");
    (m, level0)
}

fn repair_and_read(fs: &MemFs) -> (strata::RepairReport, Model) {
    let report = strata::repair("/db", options(fs)).unwrap();
    eprintln!("{report}");
    let db = Db::open("/db", options(fs)).unwrap();
    let got = common::dump(&db);
    // A second open reads what the first left, and the tree takes writes.
    db.put(b"after", b"repair").unwrap();
    drop(db);
    let db = Db::open("/db", options(fs)).unwrap();
    assert_eq!(db.get(b"after").unwrap(), Some(b"repair".to_vec()));
    (report, got)
}

fn remove_matching(fs: &MemFs, prefix: &str) {
    for name in fs.list(Path::new("/db")).unwrap() {
        if name.starts_with(prefix) {
            fs.remove(&Path::new("/db").join(name)).unwrap();
        }
    }
}

#[test]
fn a_missing_manifest_is_rebuilt_from_the_tables_and_the_wal() {
    let fs = MemFs::new();
    let (model, _) = build(&fs);
    remove_matching(&fs, "MANIFEST-");
    assert!(Db::open("/db", options(&fs)).is_err());
    let (report, got) = repair_and_read(&fs);
    assert!(!report.manifest_read);
    assert!(report.set_aside.is_empty(), "{:?}", report.set_aside);
    assert_eq!(report.wal_records, 51, "{report}");
    same(&got, &model);
}

#[test]
fn a_damaged_manifest_is_set_aside_and_rebuilt() {
    let fs = MemFs::new();
    let (model, _) = build(&fs);
    let manifest = files(&fs, "")
        .into_iter()
        .find(|n| n.starts_with("MANIFEST-"))
        .unwrap();
    let path = Path::new("/db").join(&manifest);
    // The first edit, which names the tables, damaged in the middle.
    fs.mutate_file(&path, |d| d[30] ^= 0x10).unwrap();
    assert!(Db::open("/db", options(&fs)).is_err());
    let (report, got) = repair_and_read(&fs);
    assert!(!report.manifest_read);
    assert_eq!(report.set_aside.len(), 1, "{:?}", report.set_aside);
    assert_eq!(report.set_aside[0].0, manifest);
    assert!(fs.exists(&Path::new("/db/lost").join(&manifest)));
    same(&got, &model);
}

#[test]
fn a_missing_current_is_rebuilt() {
    let fs = MemFs::new();
    let (model, _) = build(&fs);
    fs.remove(Path::new("/db/CURRENT")).unwrap();
    let (report, got) = repair_and_read(&fs);
    assert!(!report.manifest_read);
    same(&got, &model);
}

#[test]
fn a_damaged_table_is_set_aside_and_the_rest_kept() {
    let fs = MemFs::new();
    let (mut model, level0) = build(&fs);
    // The newer level-0 table holds k0300-k0349 and nothing else.
    let damaged = &level0[1];
    let path = Path::new("/db").join(damaged);
    fs.mutate_file(&path, |d| d[100] ^= 0x01).unwrap();
    let (report, got) = repair_and_read(&fs);
    assert!(report.manifest_read, "{report}");
    assert_eq!(report.set_aside.len(), 1, "{:?}", report.set_aside);
    assert_eq!(&report.set_aside[0].0, damaged);
    assert!(fs.exists(&Path::new("/db/lost").join(damaged)));
    for i in 300..350 {
        model.remove(&key(i));
    }
    same(&got, &model);
}

#[test]
fn a_damaged_wal_keeps_every_intact_record() {
    let fs = MemFs::new();
    let (mut model, _) = build(&fs);
    let wal = files(&fs, ".wal").pop().unwrap();
    let path = Path::new("/db").join(&wal);
    // One byte of the record that puts k0224.
    fs.mutate_file(&path, |d| {
        let at = d.windows(5).position(|w| w == b"k0224").unwrap();
        d[at + 2] ^= 0x40;
    })
    .unwrap();
    assert!(Db::open("/db", options(&fs)).is_err());
    let (report, got) = repair_and_read(&fs);
    assert!(report.wal_bytes_lost > 0, "{report}");
    assert_eq!(report.wal_records, 50, "{report}");
    assert!(fs.exists(&Path::new("/db/lost").join(&wal)));
    model.remove(&key(224));
    same(&got, &model);
}

/// WALs kept after their writes reached tables (for replication, `wal_size_limit`) are not
/// replayed over the tables: a key deleted since, whose tombstone compaction dropped, stays
/// deleted, and the value a later write gave a key stays.
#[test]
fn wals_kept_past_their_flush_replay_nothing_older_than_the_tables() {
    let fs = MemFs::new();
    let o = Options {
        wal_size_limit: 1 << 30,
        ..options(&fs)
    };
    let db = Db::open("/db", o.clone()).unwrap();
    db.put(b"deleted", b"old").unwrap();
    db.put(b"rewritten", b"old").unwrap();
    db.flush().unwrap();
    db.delete(b"deleted").unwrap();
    db.put(b"rewritten", b"new").unwrap();
    db.compact_range(None, None).unwrap();
    drop(db);
    assert!(files(&fs, ".wal").len() >= 2, "{:?}", files(&fs, ".wal"));
    remove_matching(&fs, "MANIFEST-");
    let report = strata::repair("/db", o.clone()).unwrap();
    // Every write is in the tables (whose newest sequence numbers count the ones compaction
    // wrote as zero): none is replayed.
    assert_eq!(
        (report.wal_records, report.wal_records_in_tables),
        (0, 4),
        "{report}"
    );
    let db = Db::open("/db", o).unwrap();
    assert_eq!(db.get(b"deleted").unwrap(), None);
    assert_eq!(db.get(b"rewritten").unwrap(), Some(b"new".to_vec()));
}

#[test]
fn a_second_family_is_kept_when_the_manifest_reads() {
    let fs = MemFs::new();
    let (model, level0) = build(&fs);
    let db = Db::open("/db", options(&fs)).unwrap();
    let cf = db.create_family("other", options(&fs)).unwrap();
    db.put_cf(&cf, b"in-other", b"1").unwrap();
    db.flush().unwrap();
    db.put_cf(&cf, b"logged-in-other", b"2").unwrap();
    drop(db);
    fs.mutate_file(&Path::new("/db").join(&level0[1]), |d| d[100] ^= 0x01)
        .unwrap();
    let report = strata::repair("/db", options(&fs)).unwrap();
    assert_eq!(report.families, vec!["default", "other"], "{report}");
    let given = vec![("other".to_string(), options(&fs))];
    let db = Db::open_with_families("/db", options(&fs), given).unwrap();
    let cf = db.family("other").unwrap();
    assert_eq!(db.get_cf(&cf, b"in-other").unwrap(), Some(b"1".to_vec()));
    assert_eq!(
        db.get_cf(&cf, b"logged-in-other").unwrap(),
        Some(b"2".to_vec())
    );
    assert_eq!(db.get(b"in-other").unwrap(), None);
    assert_eq!(
        db.get(&key(0)).unwrap().as_deref(),
        model.get(&key(0)).map(|v| &v[..])
    );
}

#[test]
fn repair_refuses_an_open_database() {
    let fs = MemFs::new();
    let db = Db::open("/db", options(&fs)).unwrap();
    assert!(matches!(
        strata::repair("/db", options(&fs)),
        Err(strata::Error::Locked(_))
    ));
    drop(db);
    let e = strata::repair("/missing", options(&fs)).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    // A directory of other files is not made a database.
    fs.create_dir_all(Path::new("/photos")).unwrap();
    fs.create(Path::new("/photos/a.jpg")).unwrap();
    let e = strata::repair("/photos", options(&fs)).unwrap_err();
    assert!(e.to_string().contains("holds no database files"), "{e}");
    assert_eq!(
        fs.list(Path::new("/photos")).unwrap(),
        vec!["a.jpg".to_string()]
    );
}

#[test]
fn destroy_deletes_the_database_and_its_directory() {
    let fs = MemFs::new();
    build(&fs);
    let db = Db::open("/db", options(&fs)).unwrap();
    assert!(matches!(
        strata::destroy("/db", &options(&fs)),
        Err(strata::Error::Locked(_))
    ));
    drop(db);
    strata::destroy("/db", &options(&fs)).unwrap();
    assert!(!fs.exists(Path::new("/db")));
    // Gone already: no error. A directory with other files keeps them, and itself.
    strata::destroy("/db", &options(&fs)).unwrap();
    build(&fs);
    fs.create(Path::new("/db/notes.txt")).unwrap();
    strata::destroy("/db", &options(&fs)).unwrap();
    assert_eq!(
        fs.list(Path::new("/db")).unwrap(),
        vec!["notes.txt".to_string()]
    );
}

/// A repair cut short by a failed call (at every call site of every kind, in turn) changes
/// nothing that a second repair needs: the second gives the whole model, less only what the
/// damage took. A read that fails (an I/O error, not damage) ends the repair rather than
/// setting a healthy table aside.
#[test]
fn a_repair_cut_short_anywhere_loses_nothing_to_the_next() {
    use strata::{FaultFs, FaultOp};
    let base = MemFs::new();
    let (mut model, level0) = build(&base);
    let db = Db::open("/db", options(&base)).unwrap();
    let cf = db.create_family("other", options(&base)).unwrap();
    db.put_cf(&cf, b"in-other", b"1").unwrap();
    db.flush().unwrap();
    db.put_cf(&cf, b"logged-in-other", b"2").unwrap();
    drop(db);
    base.mutate_file(&Path::new("/db").join(&level0[1]), |d| d[100] ^= 0x01)
        .unwrap();
    for i in 300..350 {
        model.remove(&key(i));
    }
    let mut other = Model::new();
    other.insert(b"in-other".to_vec(), b"1".to_vec());
    other.insert(b"logged-in-other".to_vec(), b"2".to_vec());
    // Without the MANIFEST the families are unknown: the other family's writes join the
    // default one.
    let mut merged = model.clone();
    merged.extend(other.clone());
    for drop_manifest in [false, true] {
        let mut failed = 0;
        for op in FaultOp::ALL {
            for n in 1..=40 {
                let fs = base.process_crash_copy();
                if drop_manifest {
                    remove_matching(&fs, "MANIFEST-");
                }
                let faulty = FaultFs::new(Arc::new(fs.clone()));
                faulty.fail_nth(op, n, false);
                let o = Options {
                    fs: Arc::new(faulty),
                    // Tables read with read_at, where the faults are, not through mappings.
                    table_map_bytes: 0,
                    ..options(&fs)
                };
                if strata::repair("/db", o).is_err() {
                    failed += 1;
                }
                let context = format!("{op:?} call {n}, MANIFEST dropped: {drop_manifest}");
                strata::repair("/db", options(&fs)).unwrap_or_else(|e| panic!("{context}: {e}"));
                let given = vec![("other".to_string(), options(&fs))];
                let db = Db::open_with_families("/db", options(&fs), given)
                    .unwrap_or_else(|e| panic!("{context}: {e}"));
                let got = common::dump(&db);
                let want = if drop_manifest { &merged } else { &model };
                if got != *want {
                    eprintln!("{context}");
                    same(&got, want);
                }
                if !drop_manifest {
                    let cf = db.family("other").unwrap_or_else(|| panic!("{context}"));
                    for (k, v) in &other {
                        assert_eq!(db.get_cf(&cf, k).unwrap().as_ref(), Some(v), "{context}");
                    }
                }
            }
        }
        assert!(failed > 20, "only {failed} repairs met a fault");
    }
}

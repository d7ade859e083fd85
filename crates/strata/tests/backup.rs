//! Backups: several backups of one database in a directory, sharing their unchanged tables,
//! each restored whole and checked, or not at all.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use strata::{BackupEngine, Db, Error, FaultFs, FaultOp, FileSystem, MemFs, Options};

fn options(fs: Option<MemFs>) -> Options {
    common::tiny_options(fs, 4)
}

fn fill(db: &Db, from: u64, to: u64, tag: &str) {
    for i in from..to {
        db.put(
            format!("k{i:05}").as_bytes(),
            format!("{tag}{i}").as_bytes(),
        )
        .unwrap();
    }
}

fn restored(engine: &BackupEngine, id: u64, target: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    engine.restore(id, target).unwrap();
    let db = Db::open(target, options(None)).unwrap();
    common::dump(&db)
}

fn shared_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("shared"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn backups_share_unchanged_tables_and_each_restores_its_own_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), options(None)).unwrap();
    let engine = BackupEngine::open(dir.path().join("backups")).unwrap();

    fill(&db, 0, 2000, "a");
    let first_state = common::dump(&db);
    let first = engine.create(&db).unwrap();
    assert_eq!(first.info.id, 1);
    assert_eq!(first.added_bytes, first.info.bytes);
    let after_first = shared_files(&dir.path().join("backups"));

    // New keys at the end: most tables stay as they were.
    fill(&db, 2000, 2100, "b");
    let second_state = common::dump(&db);
    let second = engine.create(&db).unwrap();
    assert_eq!(second.info.id, 2);
    let after_second = shared_files(&dir.path().join("backups"));
    let shared_by_both = after_first
        .iter()
        .filter(|f| after_second.contains(f))
        .count();
    assert_eq!(
        shared_by_both,
        after_first.len(),
        "a shared table went away"
    );
    assert!(
        second.added_bytes < second.info.bytes / 2,
        "the second backup added {} of its {} bytes",
        second.added_bytes,
        second.info.bytes
    );
    assert_ne!(first_state, second_state);

    let listed = engine.list().unwrap();
    assert_eq!(listed, vec![first.info.clone(), second.info.clone()]);
    engine.verify(1).unwrap();
    engine.verify(2).unwrap();
    assert_eq!(restored(&engine, 1, &dir.path().join("r1")), first_state);
    assert_eq!(restored(&engine, 2, &dir.path().join("r2")), second_state);

    // Restoring over an existing directory is refused and leaves it alone.
    assert!(matches!(
        engine.restore(1, dir.path().join("r2")),
        Err(Error::InvalidArgument(_))
    ));
    let db2 = Db::open(dir.path().join("r2"), options(None)).unwrap();
    assert_eq!(common::dump(&db2), second_state);
}

#[test]
fn a_damaged_table_fails_verify_and_restore_and_leaves_no_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), options(None)).unwrap();
    fill(&db, 0, 1500, "v");
    let state = common::dump(&db);
    let backups = dir.path().join("backups");
    let engine = BackupEngine::open(&backups).unwrap();
    engine.create(&db).unwrap();
    drop(db);

    let victim = backups.join("shared").join(&shared_files(&backups)[0]);
    let mut bytes = std::fs::read(&victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&victim, &bytes).unwrap();

    assert!(matches!(engine.verify(1), Err(Error::Corruption { .. })));
    let target = dir.path().join("restored");
    match engine.restore(1, &target) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, victim),
        other => panic!("restore of a damaged backup gave {other:?}"),
    }
    assert!(!target.exists(), "a failed restore left {target:?}");
    // The backup holds copies: the damage did not reach the database's own tables.
    let db = Db::open(dir.path().join("db"), options(None)).unwrap();
    assert_eq!(common::dump(&db), state);
}

#[test]
fn purge_keeps_the_newest_and_removes_only_what_they_do_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path().join("db"), options(None)).unwrap();
    let backups = dir.path().join("backups");
    let engine = BackupEngine::open(&backups).unwrap();
    let mut states = Vec::new();
    for round in 0..4u64 {
        // Each round rewrites every key: later backups share little with earlier ones.
        fill(&db, 0, 800, &format!("r{round}-"));
        db.compact_range(None, None).unwrap();
        states.push(common::dump(&db));
        engine.create(&db).unwrap();
    }
    let before = shared_files(&backups);
    assert_eq!(engine.purge(2).unwrap(), vec![1, 2]);
    let ids: Vec<u64> = engine.list().unwrap().iter().map(|b| b.id).collect();
    assert_eq!(ids, vec![3, 4]);
    let after = shared_files(&backups);
    assert!(after.len() < before.len(), "purge removed no table");
    assert!(!backups.join("private").join("1").exists());
    for id in [3, 4] {
        engine.verify(id).unwrap();
        let target = dir.path().join(format!("r{id}"));
        assert_eq!(restored(&engine, id, &target), states[id as usize - 1]);
    }
    engine.delete(3).unwrap();
    engine.verify(4).unwrap();
    assert!(matches!(engine.verify(3), Err(Error::InvalidArgument(_))));
    // Ids are never used twice, even the newest deleted one's.
    engine.delete(4).unwrap();
    assert_eq!(engine.create(&db).unwrap().info.id, 5);
}

#[test]
fn a_backup_cut_short_is_not_listed_and_its_files_are_collected() {
    let mem = MemFs::new();
    let fs = FaultFs::new(Arc::new(mem.clone()));
    let opts = Options {
        fs: Arc::new(fs.clone()),
        ..options(None)
    };
    let db = Db::open("/db", opts).unwrap();
    fill(&db, 0, 1500, "v");
    let engine = BackupEngine::open_with("/backups", Arc::new(fs.clone())).unwrap();
    let state = common::dump(&db);
    // The third rename into the backup (a table or a private file) fails.
    fs.fail_nth(FaultOp::Rename, 3, false);
    assert!(engine.create(&db).is_err());
    assert_eq!(engine.list().unwrap(), vec![]);
    assert!(!mem.list(Path::new("/backups/shared")).unwrap().is_empty());

    engine.purge(0).unwrap();
    assert_eq!(mem.list(Path::new("/backups/shared")).unwrap().len(), 0);
    let made = engine.create(&db).unwrap();
    // The id the cut-short backup took is not used again.
    assert_eq!(made.info.id, 2);
    engine.restore(2, "/restored").unwrap();
    let r = Db::open("/restored", options(Some(mem.clone()))).unwrap();
    assert_eq!(common::dump(&r), state);
}

#[test]
fn a_backup_survives_a_power_loss_once_made() {
    let mem = MemFs::new();
    let db = Db::open("/db", options(Some(mem.clone()))).unwrap();
    fill(&db, 0, 1200, "v");
    let state = common::dump(&db);
    let engine = BackupEngine::open_with("/backups", Arc::new(mem.clone())).unwrap();
    engine.create(&db).unwrap();
    drop(engine);

    let after = mem.power_loss_copy();
    let engine = BackupEngine::open_with("/backups", Arc::new(after.clone())).unwrap();
    engine.verify(1).unwrap();
    engine.restore(1, "/restored").unwrap();
    let r = Db::open("/restored", options(Some(after))).unwrap();
    assert_eq!(common::dump(&r), state);
}

#[test]
fn a_second_engine_on_one_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _engine = BackupEngine::open(dir.path()).unwrap();
    assert!(matches!(
        BackupEngine::open(dir.path()),
        Err(Error::Locked(_))
    ));
}

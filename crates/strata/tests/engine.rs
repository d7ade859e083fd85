//! Targeted tests of the engine's promises: recovery, locking, limits, corruption reports,
//! concurrency and regressions found by the model test.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use strata::{
    Db, Error, FileSystem, MemFs, Options, ReadOptions, RecoveryMode, WriteBatch, WriteOptions,
};

fn no_auto_compaction(mut o: Options) -> Options {
    o.level0_compaction_trigger = 100;
    o.level0_slowdown_trigger = 100;
    o.level0_stop_trigger = 100;
    o.read_triggered_compaction = false;
    o
}

/// Regression: a ranged manual compaction took only the level-0 files overlapping the range,
/// leaving behind an older level-0 file with a stale version of a key whose newer version
/// moved to level 1; reads then returned the stale value.
#[test]
fn ranged_compaction_takes_every_overlapping_level0_file() {
    let fs = MemFs::new();
    let db = Db::open(
        "/db",
        no_auto_compaction(common::tiny_options(Some(fs), 10)),
    )
    .unwrap();
    db.put(b"a", b"old-a").unwrap();
    db.put(b"m", b"old-m").unwrap();
    db.flush().unwrap();
    db.put(b"m", b"new-m").unwrap();
    db.put(b"z", b"new-z").unwrap();
    db.flush().unwrap();
    db.compact_range(Some(b"z"), Some(b"z")).unwrap();
    assert_eq!(db.get(b"m").unwrap(), Some(b"new-m".to_vec()));
    assert_eq!(db.get(b"a").unwrap(), Some(b"old-a".to_vec()));
}

#[test]
fn empty_keys_and_values_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::options()).unwrap();
    db.put(b"", b"empty key").unwrap();
    db.put(b"empty value", b"").unwrap();
    assert_eq!(db.get(b"").unwrap(), Some(b"empty key".to_vec()));
    assert_eq!(db.get(b"empty value").unwrap(), Some(Vec::new()));
    let big_key = vec![1u8; strata::MAX_KEY_BYTES];
    db.put(&big_key, b"v").unwrap();
    let too_big = vec![1u8; strata::MAX_KEY_BYTES + 1];
    assert!(matches!(
        db.put(&too_big, b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(db.get(&too_big).unwrap(), None, "nothing written");
    let big_value = vec![9u8; strata::MAX_VALUE_BYTES];
    db.put(b"big", &big_value).unwrap();
    assert!(matches!(
        db.put(b"bigger", &vec![0u8; strata::MAX_VALUE_BYTES + 1]),
        Err(Error::InvalidArgument(_))
    ));
    db.flush().unwrap();
    assert_eq!(
        db.get(b"big").unwrap().map(|v| v.len()),
        Some(strata::MAX_VALUE_BYTES)
    );
    assert_eq!(db.get(&big_key).unwrap(), Some(b"v".to_vec()));
    assert_eq!(db.get(b"").unwrap(), Some(b"empty key".to_vec()));
}

#[test]
fn second_opener_in_this_process_gets_locked() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::options()).unwrap();
    match Db::open(dir.path(), common::options()) {
        Err(Error::Locked(p)) => assert_eq!(p, dir.path()),
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(db);
    Db::open(dir.path(), common::options()).unwrap();
}

/// The child half of `second_opener_in_another_process_gets_locked`.
#[test]
#[ignore = "run by its parent test in a child process"]
fn lock_child() {
    let Ok(dir) = std::env::var("STRATA_LOCK_DIR") else {
        return;
    };
    match Db::open(&dir, common::options()) {
        Err(Error::Locked(_)) => println!("child saw Locked"),
        other => panic!("child expected Locked, got {other:?}"),
    }
}

#[test]
fn second_opener_in_another_process_gets_locked() {
    let dir = tempfile::tempdir().unwrap();
    let _db = Db::open(dir.path(), common::options()).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lock_child", "--ignored", "--nocapture"])
        .env("STRATA_LOCK_DIR", dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    assert!(
        stdout.contains("child saw Locked"),
        "child output: {stdout}"
    );
}

#[test]
fn open_without_create_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        create_if_missing: false,
        ..common::options()
    };
    let err = Db::open(dir.path().join("missing"), opts).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("does not exist"));
}

#[test]
fn drop_without_close_keeps_everything_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), common::tiny_options(None, 10)).unwrap();
        for i in 0..2000u32 {
            db.put(format!("k{i:05}").as_bytes(), format!("v{i}").as_bytes())
                .unwrap();
        }
    }
    let db = Db::open(dir.path(), common::tiny_options(None, 10)).unwrap();
    for i in 0..2000u32 {
        assert_eq!(
            db.get(format!("k{i:05}").as_bytes()).unwrap(),
            Some(format!("v{i}").into_bytes())
        );
    }
}

#[test]
fn process_crash_keeps_unsynced_acknowledged_writes() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::tiny_options(Some(fs.clone()), 10)).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..500u32 {
        let (k, v) = (
            format!("k{i:05}").into_bytes(),
            format!("v{i}").into_bytes(),
        );
        db.put(&k, &v).unwrap();
        want.insert(k, v);
    }
    let crashed = fs.process_crash_copy();
    let db2 = Db::open("/db", common::tiny_options(Some(crashed), 10)).unwrap();
    assert_eq!(common::dump(&db2), want);
    drop(db);
}

#[test]
fn power_loss_keeps_every_synced_write() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::tiny_options(Some(fs.clone()), 10)).unwrap();
    for i in 0..300u32 {
        let mut b = WriteBatch::new();
        b.put(format!("k{i:05}").as_bytes(), format!("v{i}").as_bytes());
        db.write(b, WriteOptions { sync: i % 3 == 0 }).unwrap();
    }
    let after = fs.power_loss_copy();
    let db2 = Db::open("/db", common::tiny_options(Some(after), 10)).unwrap();
    let state = common::dump(&db2);
    // A prefix of the writes, containing the last synced one (i = 297).
    let n = state.len();
    assert!(n >= 298, "synced writes lost: only {n} keys survive");
    for i in 0..n as u32 {
        assert_eq!(
            state.get(format!("k{i:05}").as_bytes()).map(Vec::as_slice),
            Some(format!("v{i}").as_bytes())
        );
    }
    drop(db);
}

/// `sync_wal` (the server's `everysec`) makes every write acknowledged before it durable; the
/// writes after it are not promised, and a power loss may take them.
#[test]
fn power_loss_keeps_every_write_before_a_wal_sync() {
    let fs = MemFs::new();
    // One memtable and one WAL for all the writes: no flush makes any of them durable.
    let opts = |fs| Options {
        write_buffer_size: 1 << 20,
        ..common::tiny_options(Some(fs), 10)
    };
    let db = Db::open("/db", opts(fs.clone())).unwrap();
    let put = |i: u32| {
        let mut b = WriteBatch::new();
        b.put(format!("k{i:05}").as_bytes(), format!("v{i}").as_bytes());
        db.write(b, WriteOptions { sync: false }).unwrap();
    };
    (0..250).for_each(put);
    db.sync_wal().unwrap();
    (250..300).for_each(put);
    let after = fs.power_loss_copy();
    let db2 = Db::open("/db", opts(after)).unwrap();
    let state = common::dump(&db2);
    let n = state.len();
    assert!(
        n >= 250,
        "writes before sync_wal lost: only {n} keys survive"
    );
    for i in 0..n as u32 {
        assert_eq!(
            state.get(format!("k{i:05}").as_bytes()).map(Vec::as_slice),
            Some(format!("v{i}").as_bytes())
        );
    }
    drop(db);
}

/// Synced writers in several threads are committed in shared groups (the leader waits a
/// moment for the last group's writers); every acknowledged write must survive a power loss.
#[test]
fn power_loss_keeps_every_write_of_concurrent_synced_writers() {
    let fs = MemFs::new();
    let db = Arc::new(Db::open("/db", common::tiny_options(Some(fs.clone()), 10)).unwrap());
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..150u32 {
                    let mut b = WriteBatch::new();
                    b.put(
                        format!("w{w}-{i:04}").as_bytes(),
                        format!("{w}.{i}").as_bytes(),
                    );
                    db.write(b, WriteOptions { sync: true }).unwrap();
                }
            })
        })
        .collect();
    for t in writers {
        t.join().unwrap();
    }
    // One writer left: it syncs alone, with no wait for others.
    let mut b = WriteBatch::new();
    b.put(b"last", b"v");
    db.write(b, WriteOptions { sync: true }).unwrap();
    let after = fs.power_loss_copy();
    let db2 = Db::open("/db", common::tiny_options(Some(after), 10)).unwrap();
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = (0..4u32)
        .flat_map(|w| (0..150u32).map(move |i| (w, i)))
        .map(|(w, i)| {
            (
                format!("w{w}-{i:04}").into_bytes(),
                format!("{w}.{i}").into_bytes(),
            )
        })
        .collect();
    want.insert(b"last".to_vec(), b"v".to_vec());
    assert_eq!(common::dump(&db2), want);
}

fn wal_files(fs: &MemFs) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(Path::new("/db"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .collect();
    v.sort();
    v
}

#[test]
fn truncated_wal_tail_is_dropped_and_the_rest_kept() {
    let fs = MemFs::new();
    let opts = common::tiny_options(Some(fs.clone()), 10);
    let opts = Options {
        write_buffer_size: 1 << 20,
        ..opts
    };
    let db = Db::open("/db", opts.clone()).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:03}").as_bytes(), b"value").unwrap();
    }
    let crashed = fs.process_crash_copy();
    drop(db);
    let wal = wal_files(&crashed).pop().unwrap();
    crashed
        .mutate_file(&Path::new("/db").join(&wal), |d| {
            // The log ends in its reserve of zeros; cut into the last record itself.
            let end = d.iter().rposition(|&b| b != 0).unwrap() + 1;
            d.truncate(end - 3);
        })
        .unwrap();
    let db = Db::open(
        "/db",
        Options {
            fs: Arc::new(crashed),
            ..opts
        },
    )
    .unwrap();
    let expect: BTreeMap<Vec<u8>, Vec<u8>> = (0..99u32)
        .map(|i| (format!("k{i:03}").into_bytes(), b"value".to_vec()))
        .collect();
    assert_eq!(
        common::dump(&db),
        expect,
        "only the torn last write is lost"
    );
    assert!(db.stats().wal_tail_dropped_bytes > 0);
}

#[test]
fn corrupt_wal_record_in_the_middle_is_an_error_naming_the_file() {
    let fs = MemFs::new();
    let opts = Options {
        write_buffer_size: 1 << 20,
        ..common::tiny_options(Some(fs.clone()), 10)
    };
    let db = Db::open("/db", opts.clone()).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:03}").as_bytes(), b"value").unwrap();
    }
    let crashed = fs.process_crash_copy();
    drop(db);
    let wal = wal_files(&crashed).pop().unwrap();
    let wal_path = Path::new("/db").join(&wal);
    crashed.mutate_file(&wal_path, |d| d[200] ^= 0x55).unwrap();
    let salvage_fs = crashed.process_crash_copy();
    match Db::open(
        "/db",
        Options {
            fs: Arc::new(crashed),
            ..opts.clone()
        },
    ) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, wal_path);
            assert!(offset <= 200);
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let db = Db::open(
        "/db",
        Options {
            fs: Arc::new(salvage_fs),
            wal_recovery: RecoveryMode::Salvage,
            ..opts
        },
    )
    .unwrap();
    let n = common::dump(&db).len();
    assert!(
        n > 0 && n < 100,
        "salvage keeps the prefix before the damage, kept {n}"
    );
    for i in 0..n as u32 {
        assert!(db.get(format!("k{i:03}").as_bytes()).unwrap().is_some());
    }
    assert!(db.stats().wal_salvaged_bytes > 0);
}

#[test]
fn corrupt_sst_block_is_reported_with_the_file() {
    let fs = MemFs::new();
    let opts = no_auto_compaction(common::tiny_options(Some(fs.clone()), 10));
    let opts = Options {
        block_cache_bytes: 0,
        ..opts
    };
    let db = Db::open("/db", opts.clone()).unwrap();
    for i in 0..200u32 {
        db.put(
            format!("k{i:03}").as_bytes(),
            format!("value-{i}").as_bytes(),
        )
        .unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let sst = fs
        .list(Path::new("/db"))
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".sst"))
        .unwrap();
    let path = Path::new("/db").join(&sst);
    fs.mutate_file(&path, |d| d[40] ^= 0x01).unwrap();
    let db = Db::open("/db", opts).unwrap();
    let mut saw = 0;
    for i in 0..200u32 {
        match db.get(format!("k{i:03}").as_bytes()) {
            Ok(Some(v)) => assert_eq!(v, format!("value-{i}").into_bytes(), "never a wrong value"),
            Ok(None) => panic!("key k{i:03} vanished without an error"),
            Err(Error::Corruption { file, .. }) => {
                assert_eq!(file, path);
                saw += 1;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(saw > 0, "the damaged block was never reported");
    let scan: Result<Vec<_>, _> = db.scan(..).unwrap().collect();
    assert!(matches!(scan, Err(Error::Corruption { .. })));
}

#[test]
fn snapshots_and_iterators_survive_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::tiny_options(None, 2)).unwrap();
    for i in 0..500u32 {
        db.put(format!("k{i:04}").as_bytes(), b"first").unwrap();
    }
    let snap = db.snapshot();
    let mut it = db.iter(&ReadOptions::default()).unwrap();
    for i in 0..500u32 {
        if i % 2 == 0 {
            db.delete(format!("k{i:04}").as_bytes()).unwrap();
        } else {
            db.put(format!("k{i:04}").as_bytes(), b"second").unwrap();
        }
    }
    db.compact_range(None, None).unwrap();
    // The iterator was made before the rewrite and still reads its files.
    it.seek_to_first().unwrap();
    let mut n = 0;
    while it.valid() {
        assert_eq!(it.value(), b"first");
        n += 1;
        it.next().unwrap();
    }
    assert_eq!(n, 500);
    let ro = ReadOptions {
        snapshot: Some(snap.clone()),
        ..ReadOptions::default()
    };
    assert_eq!(db.scan_with(.., ro.clone(), false).unwrap().count(), 500);
    assert_eq!(db.get_with(b"k0000", &ro).unwrap(), Some(b"first".to_vec()));
    assert_eq!(db.get(b"k0000").unwrap(), None);
    assert_eq!(db.get(b"k0001").unwrap(), Some(b"second".to_vec()));
    drop(snap);
    drop(ro);
    db.compact_range(None, None).unwrap();
    let s = db.stats();
    assert_eq!(s.files.iter().map(|f| f.entries).sum::<u64>(), 250);
}

/// Writers apply batches that set a group of keys to one value; readers check that a
/// snapshot never changes and always shows each batch whole.
#[test]
fn concurrent_writers_and_readers_see_whole_batches_and_stable_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), common::tiny_options(None, 4)).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    const GROUPS: u32 = 8;
    const PER_GROUP: u32 = 5;
    let writers: Vec<_> = (0..3u32)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for round in 0..400u32 {
                    let g = (round * 3 + w) % GROUPS;
                    let value = format!("w{w}-r{round}");
                    let mut b = WriteBatch::new();
                    for k in 0..PER_GROUP {
                        b.put(format!("g{g}-k{k}").as_bytes(), value.as_bytes());
                    }
                    db.write(
                        b,
                        WriteOptions {
                            sync: round % 50 == 0,
                        },
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let db = db.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut checks = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let snap = db.snapshot();
                    let ro = ReadOptions {
                        snapshot: Some(snap),
                        ..ReadOptions::default()
                    };
                    let first: Vec<_> = db
                        .scan_with(.., ro.clone(), false)
                        .unwrap()
                        .map(|e| e.unwrap())
                        .collect();
                    for g in 0..GROUPS {
                        let prefix = format!("g{g}-");
                        let values: Vec<&Vec<u8>> = first
                            .iter()
                            .filter(|(k, _)| k.starts_with(prefix.as_bytes()))
                            .map(|(_, v)| v)
                            .collect();
                        assert!(
                            values.is_empty() || values.len() == PER_GROUP as usize,
                            "half a batch"
                        );
                        assert!(values.windows(2).all(|w| w[0] == w[1]), "a batch seen torn");
                    }
                    let again: Vec<_> = db
                        .scan_with(.., ro.clone(), true)
                        .unwrap()
                        .map(|e| e.unwrap())
                        .collect();
                    let mut again = again;
                    again.reverse();
                    assert_eq!(first, again, "a snapshot changed");
                    for (k, v) in first.iter().take(5) {
                        assert_eq!(db.get_with(k, &ro).unwrap().as_ref(), Some(v));
                    }
                    checks += 1;
                }
                checks
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let checks: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(checks > 0);
    let s = db.stats();
    assert!(s.flushes > 0, "the test should flush");
}

#[test]
fn memtable_is_flushed_after_its_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_max_age: Some(std::time::Duration::from_millis(100)),
        ..common::options()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    db.put(b"quiet", b"db").unwrap();
    let start = std::time::Instant::now();
    while db.stats().flushes == 0 {
        assert!(start.elapsed().as_secs() < 10, "no flush after the max age");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(db.stats().levels[0].files, 1);
    assert_eq!(db.get(b"quiet").unwrap(), Some(b"db".to_vec()));
}

/// Two overlapping level-0 files, under the level-0 trigger: even keys in the older, every
/// fourth key in the newer, values `pad` bytes long, filters of `bits` bits per key (0:
/// filters that pass every key). Lookups of odd keys consult the newer in vain before
/// missing in the older too.
fn two_overlapping_level0_files(read_triggered_compaction: bool, pad: usize, bits: usize) -> Db {
    let mut o = common::tiny_options(Some(MemFs::new()), 10);
    o.filter_policy = strata::FilterPolicy::Uniform { bits_per_key: bits };
    o.write_buffer_size = 4 << 20;
    o.level0_compaction_trigger = 4;
    o.level0_slowdown_trigger = 8;
    o.level0_stop_trigger = 12;
    o.read_triggered_compaction = read_triggered_compaction;
    // Reads ask for compactions under leveling only (the tiered policies ignore the option).
    o.merge_policy = strata::MergePolicy::Leveling;
    let db = Db::open("/db", o).unwrap();
    for i in (0..400).step_by(2) {
        db.put(format!("k{i:04}").as_bytes(), &expected(i, pad).unwrap())
            .unwrap();
    }
    db.flush().unwrap();
    for i in (0..400).step_by(4) {
        db.put(format!("k{i:04}").as_bytes(), &expected(i, pad).unwrap())
            .unwrap();
    }
    db.flush().unwrap();
    assert_eq!(db.stats().levels[0].files, 2);
    db
}

fn expected(i: usize, pad: usize) -> Option<Vec<u8>> {
    let tag: &[u8] = match i % 4 {
        0 => b"new",
        2 => b"old",
        _ => return None,
    };
    Some([tag, &vec![b'.'; pad]].concat())
}

/// Waits for level 0 to empty; returns the stats then.
fn level0_merged_down(db: &Db) -> strata::Stats {
    let start = std::time::Instant::now();
    while db.stats().levels[0].files > 0 && start.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    db.stats()
}

#[test]
fn lookups_that_consult_a_file_in_vain_get_it_compacted() {
    let db = two_overlapping_level0_files(true, 0, 0);
    // Each lookup of an odd key reads a data block of the newer file in vain (its filter
    // passes every key), goes on to the older, and charges the newer; a file this small
    // allows 100 such lookups.
    for i in (1..400).step_by(2).cycle().take(150) {
        assert_eq!(db.get(format!("k{i:04}").as_bytes()).unwrap(), None);
    }
    let s = level0_merged_down(&db);
    assert_eq!(s.levels[0].files, 0, "level 0 should have been merged down");
    assert_eq!(s.read_compactions, 1);
    for i in 0..400 {
        let got = db.get(format!("k{i:04}").as_bytes()).unwrap();
        assert_eq!(got, expected(i, 0), "k{i:04}");
    }

    // Turned off, the same lookups leave the tree as writes left it.
    let db = two_overlapping_level0_files(false, 0, 0);
    for i in (1..400).step_by(2).cycle().take(300) {
        assert_eq!(db.get(format!("k{i:04}").as_bytes()).unwrap(), None);
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let s = db.stats();
    assert_eq!((s.levels[0].files, s.read_compactions), (2, 0));
}

#[test]
fn batched_lookups_that_read_a_file_in_vain_get_it_compacted() {
    let db = two_overlapping_level0_files(true, 0, 0);
    let keys: Vec<Vec<u8>> = (1..400)
        .step_by(2)
        .map(|i| format!("k{i:04}").into_bytes())
        .collect();
    for got in db.get_many(&keys, &strata::ReadOptions::default()) {
        assert_eq!(got.unwrap(), None);
    }
    let s = level0_merged_down(&db);
    assert_eq!((s.levels[0].files, s.read_compactions), (0, 1));
}

#[test]
fn lookups_the_filters_answer_charge_no_file() {
    // With 10 bits a key the newer file's filter turns away about 99% of the odd keys, which
    // then cost it no data block: 300 lookups charge it a few times, not the 100 that would
    // use its allowance up.
    let db = two_overlapping_level0_files(true, 0, 10);
    for i in (1..400).step_by(2).cycle().take(300) {
        assert_eq!(db.get(format!("k{i:04}").as_bytes()).unwrap(), None);
    }
    let keys: Vec<Vec<u8>> = (1..400)
        .step_by(2)
        .map(|i| format!("k{i:04}").into_bytes())
        .collect();
    for got in db.get_many(&keys, &strata::ReadOptions::default()) {
        assert_eq!(got.unwrap(), None);
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let s = db.stats();
    assert_eq!((s.levels[0].files, s.read_compactions), (2, 0));
}

#[test]
fn scans_over_overlapping_files_get_them_compacted() {
    let pad = 1000;
    let db = two_overlapping_level0_files(true, pad, 10);
    // Every key a scan reads lies in both files, so every sample (about one per MiB read)
    // charges the newer. A scan reads some 200 KB; 100 samples use the allowance up.
    let want: Vec<(Vec<u8>, Vec<u8>)> = (0..400)
        .filter_map(|i| Some((format!("k{i:04}").into_bytes(), expected(i, pad)?)))
        .collect();
    let start = std::time::Instant::now();
    while db.stats().read_compactions == 0 && start.elapsed().as_secs() < 60 {
        let got: Vec<_> = db.scan(..).unwrap().map(|e| e.unwrap()).collect();
        assert!(got == want, "a scan read something else");
    }
    let s = level0_merged_down(&db);
    assert_eq!((s.levels[0].files, s.read_compactions), (0, 1));
    let got: Vec<_> = db.scan(..).unwrap().map(|e| e.unwrap()).collect();
    assert!(got == want);
}

/// Step `i` of the idle-merge tests' load: a put of a 100-byte value, or every seventh step a
/// delete, of one of 20,000 keys drawn at random.
fn random_write(
    db: &Db,
    rng: &mut common::Rng,
    model: &mut std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    i: u32,
) {
    let k = format!("{:08}", rng.below(20_000)).into_bytes();
    if i.is_multiple_of(7) {
        db.delete(&k).unwrap();
        model.remove(&k);
    } else {
        let v = format!("{i:0100}").into_bytes();
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
}

#[test]
fn an_idle_tree_out_of_shape_is_merged_into_its_deepest_level() {
    let dir = tempfile::tempdir().unwrap();
    let (mut model, opts) = shaped_tree(dir.path(), None);
    let db = Db::open(
        dir.path(),
        Options {
            // Longer than any pause between the writes below on a loaded machine, so that
            // the merge comes after them.
            idle_merge_after: Some(std::time::Duration::from_millis(300)),
            ..piling_up(opts)
        },
    )
    .unwrap();
    let mut rng = common::Rng(7);
    let mut snapshot = None;
    for i in 0..10_000u32 {
        random_write(&db, &mut rng, &mut model, i);
        if i == 5_000 {
            snapshot = Some((db.snapshot(), model.clone()));
        }
    }
    assert_out_of_shape(&db);
    settle(&db);
    let s = db.stats();
    assert!(s.idle_merges >= 1, "the idle merge never ran");
    let runs: Vec<usize> = (0..s.levels.len())
        .filter(|&l| s.levels[l].files > 0)
        .collect();
    assert_eq!(runs.len(), 1, "one sorted run once settled: {runs:?}");
    assert!(runs[0] >= 1, "the run lies below level 0");
    assert_eq!((s.memtable_bytes, s.immutable_memtables), (0, 0));
    assert!(
        common::dump(&db) == model,
        "the merge changed what reads see"
    );
    let (snap, then) = snapshot.unwrap();
    let ro = ReadOptions {
        snapshot: Some(snap),
        ..ReadOptions::default()
    };
    let got: std::collections::BTreeMap<_, _> = db
        .scan_with(.., ro, false)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert!(got == then, "the merge dropped versions a snapshot reads");
}

#[test]
fn levels_follow_the_size_ratio() {
    for ratio in [2u64, 10] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            write_buffer_size: 64 << 10,
            target_file_size: 32 << 10,
            level1_max_bytes: 128 << 10,
            size_ratio: ratio,
            // Level targets are leveling's: the tiered policies fill levels by runs.
            merge_policy: strata::MergePolicy::Leveling,
            ..common::options()
        };
        let db = Db::open(dir.path(), opts).unwrap();
        let mut rng = common::Rng(ratio);
        for _ in 0..60_000 {
            let k = format!("{:016}", rng.below(1 << 40));
            db.put(k.as_bytes(), &[b'v'; 100]).unwrap();
        }
        db.flush().unwrap();
        settle(&db);
        let s = db.stats();
        assert!(s.levels[0].files < common::options().level0_compaction_trigger);
        assert_eq!(s.immutable_memtables, 0);
        for (i, l) in s.levels.iter().enumerate().skip(1) {
            assert!(
                l.bytes <= l.target_bytes + (64 << 10),
                "T={ratio} level {i} holds {} over target {}",
                l.bytes,
                l.target_bytes
            );
        }
        let deepest = s.levels.iter().rposition(|l| l.files > 0).unwrap();
        assert!(deepest >= 2, "T={ratio}: data should spread over levels");
        let wa = s.write_amplification().unwrap();
        assert!(
            wa > 1.0,
            "write amplification counts the WAL and flushes: {wa}"
        );
    }
}

#[test]
fn stats_count_the_filters_and_indexes_that_open_tables_hold() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::options()).unwrap();
    for i in 0..10_000u32 {
        db.put(format!("k{i:06}").as_bytes(), b"value").unwrap();
    }
    db.flush().unwrap();
    // A lookup opens the table and loads its filter; a miss that passes the filter would
    // load the index too, so look up a key that is there.
    assert!(db.get(b"k000042").unwrap().is_some());
    let pinned = db.stats().table_pinned_bytes;
    // 10 bits per key for the filter alone is 12,500 bytes.
    assert!(pinned >= 12_000, "pinned {pinned}");
    assert!(pinned < 200_000, "pinned {pinned}");
}

#[test]
fn readers_in_parallel_see_every_key_while_tables_let_their_filters_go() {
    let budget = 16 << 10;
    let opts = Options {
        write_buffer_size: 32 << 10,
        target_file_size: 16 << 10,
        table_pinned_bytes: budget,
        ..common::tiny_options(None, 10)
    };
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), opts).unwrap());
    let n = 20_000u32;
    for i in 0..n {
        db.put(format!("k{i:06}").as_bytes(), format!("v{i}").as_bytes())
            .unwrap();
    }
    db.flush().unwrap();
    let files = db.stats().files.len();
    assert!(files > 20, "{files} tables");
    let readers: Vec<_> = (0..4u32)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut rng = common::Rng(u64::from(t) + 1);
                for _ in 0..20_000 {
                    let i = rng.below(u64::from(n) * 2) as u32;
                    let got = db.get(format!("k{i:06}").as_bytes()).unwrap();
                    let want = (i < n).then(|| format!("v{i}").into_bytes());
                    assert_eq!(got, want, "key {i}");
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    // Each table's blocks here are well under the budget; a load may pass it only while a
    // racing load is letting others go.
    let held = db.stats().table_pinned_bytes;
    assert!(held > 0 && held <= budget as u64 + 8192, "held {held}");
    let all: Vec<_> = (0..n).map(|i| format!("k{i:06}").into_bytes()).collect();
    for (i, got) in db
        .get_many(&all, &ReadOptions::default())
        .into_iter()
        .enumerate()
    {
        assert_eq!(got.unwrap(), Some(format!("v{i}").into_bytes()));
    }
}

/// Options whose writes pile up in level 0: its merges are out of reach, and reads do not
/// ask for them.
fn piling_up(opts: Options) -> Options {
    Options {
        level0_compaction_trigger: 1000,
        level0_slowdown_trigger: 1000,
        level0_stop_trigger: 1000,
        read_triggered_compaction: false,
        ..opts
    }
}

/// A tree of 30,000 random writes in the shape the merge policy gives it, closed; the
/// writes as a model, and the options it was written with.
fn shaped_tree(
    path: &std::path::Path,
    fs: Option<&Arc<dyn FileSystem>>,
) -> (std::collections::BTreeMap<Vec<u8>, Vec<u8>>, Options) {
    let mut opts = Options {
        write_buffer_size: 64 << 10,
        target_file_size: 32 << 10,
        level1_max_bytes: 256 << 10,
        level0_compaction_trigger: 4,
        idle_merge_after: None,
        ..common::options()
    };
    if let Some(fs) = fs {
        opts.fs = fs.clone();
    }
    let db = Db::open(path, opts.clone()).unwrap();
    let mut rng = common::Rng(11);
    let mut model = std::collections::BTreeMap::new();
    for i in 0..30_000u32 {
        random_write(&db, &mut rng, &mut model, i);
    }
    db.flush().unwrap();
    settle(&db);
    db.close().unwrap();
    (model, opts)
}

/// Fails unless level 0 holds more than its share of the tree under any policy: many
/// files, over a third of the bytes below it (twice a tree's share at `T = 10` is 2/9).
fn assert_out_of_shape(db: &Db) {
    let s = db.stats();
    let below: u64 = s.levels[1..].iter().map(|l| l.bytes).sum();
    assert!(
        s.levels[0].files >= 8 && s.levels[0].bytes * 3 > below && below > 0,
        "{:?}",
        s.levels
    );
}

/// A tree out of shape under every merge policy: `shaped_tree`, then 10,000 more random
/// writes piled up in level 0; closed. The model, and options that leave level 0 where it
/// is, so that only the idle merge takes the tree in hand.
fn out_of_shape_tree(
    fs: &Arc<dyn FileSystem>,
) -> (std::collections::BTreeMap<Vec<u8>, Vec<u8>>, Options) {
    let (mut model, opts) = shaped_tree(std::path::Path::new("/db"), Some(fs));
    let opts = piling_up(opts);
    let db = Db::open("/db", opts.clone()).unwrap();
    let mut rng = common::Rng(13);
    for i in 0..10_000u32 {
        random_write(&db, &mut rng, &mut model, i);
    }
    db.flush().unwrap();
    settle(&db);
    assert_out_of_shape(&db);
    db.close().unwrap();
    (model, opts)
}

/// Waits until the database's background work is done; panics after a minute.
fn settle(db: &Db) {
    let start = std::time::Instant::now();
    while db.stats().compaction_pending {
        assert!(start.elapsed().as_secs() < 60, "the tree never settled");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_write_during_the_idle_merge_makes_it_give_up_and_lose_nothing() {
    let fault = strata::FaultFs::new(Arc::new(MemFs::new()));
    let fs: Arc<dyn FileSystem> = Arc::new(fault.clone());
    let (mut model, opts) = out_of_shape_tree(&fs);
    // The merge's first output waits at the gate; the write lands while it runs.
    fault.close_gate(".sst");
    let opts = Options {
        idle_merge_after: Some(std::time::Duration::from_millis(20)),
        ..opts
    };
    let db = Db::open("/db", opts).unwrap();
    let start = std::time::Instant::now();
    while fault.held_at_gate() == 0 {
        assert!(start.elapsed().as_secs() < 60, "the idle merge never began");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    db.put(b"written during the merge", b"kept").unwrap();
    model.insert(b"written during the merge".to_vec(), b"kept".to_vec());
    fault.open_gate();
    let start = std::time::Instant::now();
    while db.stats().idle_merges_given_up == 0 {
        assert!(start.elapsed().as_secs() < 60, "the merge did not give up");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        common::dump(&db) == model,
        "giving up changed what reads see"
    );
    // Left alone again, the next merge (after twice the quiet time) finishes.
    settle(&db);
    let s = db.stats();
    assert_eq!((s.idle_merges, s.idle_merges_given_up), (1, 1));
    let runs = s.levels.iter().filter(|l| l.files > 0).count();
    assert_eq!(runs, 1, "one sorted run once settled: {:?}", s.levels);
    assert!(
        common::dump(&db) == model,
        "the merge changed what reads see"
    );
    db.close().unwrap();
    let db = Db::open(
        "/db",
        Options {
            fs,
            ..common::options()
        },
    )
    .unwrap();
    assert!(
        common::dump(&db) == model,
        "reopening changed what reads see"
    );
}

#[test]
fn reads_go_on_through_the_idle_merge_and_see_the_same() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let (model, opts) = out_of_shape_tree(&fs);
    let db = Db::open(
        "/db",
        Options {
            // Long enough that the reads below begin before the merge does.
            idle_merge_after: Some(std::time::Duration::from_millis(200)),
            ..opts
        },
    )
    .unwrap();
    // Reads of every kind, from before the merge begins until after it is done: they do not
    // put it off, and each sees the model.
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let start = std::time::Instant::now();
    let mut i = 0;
    while db.stats().idle_merges == 0 {
        assert!(
            start.elapsed().as_secs() < 60,
            "reads kept the merge from running"
        );
        let k = keys[i % keys.len()];
        assert_eq!(db.get(k).unwrap().as_ref(), model.get(k));
        let lo = keys[(i * 7919) % keys.len()];
        let got: Vec<(Vec<u8>, Vec<u8>)> = db
            .scan(lo.clone()..)
            .unwrap()
            .take(20)
            .map(|e| e.unwrap())
            .collect();
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .range(lo.clone()..)
            .take(20)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want);
        i += 1;
    }
    assert!(i > 0, "no read ran before the merge finished");
    settle(&db);
    let s = db.stats();
    assert_eq!((s.idle_merges, s.idle_merges_given_up), (1, 0));
    assert!(common::dump(&db) == model);
}

/// Removes every entry whose value starts with `dead`.
struct DropDead;

impl strata::CompactionFilter for DropDead {
    fn filter(&self, _level: usize, _key: &[u8], value: &[u8]) -> strata::FilterDecision {
        if value.starts_with(b"dead") {
            strata::FilterDecision::Remove
        } else {
            strata::FilterDecision::Keep
        }
    }
}

/// Every SST entry under `dir`, by reading the files as `strata inspect-file` does.
fn sst_entries(dir: &Path) -> Vec<strata::inspect::DumpEntry> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "sst") {
            all.extend(strata::inspect::dump_file(&path, true).unwrap().entries);
        }
    }
    all
}

/// A compaction filter's removal takes the key's older versions with it, even when they lie
/// in a deeper level than the compaction writes; a snapshot older than the entry keeps it.
#[test]
fn a_compaction_filter_removes_keys_and_their_older_versions() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = no_auto_compaction(common::tiny_options(None, 10));
    o.compaction_filter = Some(Arc::new(DropDead));
    let db = Db::open(dir.path(), o).unwrap();
    // Old, live versions pushed to the bottom level.
    for i in 0..200u32 {
        db.put(format!("k{i:04}").as_bytes(), b"alive-old").unwrap();
    }
    db.compact_range(None, None).unwrap();
    // Newer versions, every third one dead, in level 0 above them.
    for i in 0..200u32 {
        let v: &[u8] = if i % 3 == 0 { b"dead" } else { b"alive-new" };
        db.put(format!("k{i:04}").as_bytes(), v).unwrap();
    }
    // A snapshot taken now sees the dead values; a merge while it lives keeps them.
    let snap = db.snapshot();
    db.compact_range(None, None).unwrap();
    let at_snap = ReadOptions {
        snapshot: Some(snap.clone()),
        ..ReadOptions::default()
    };
    assert_eq!(
        db.get_with(b"k0000", &at_snap).unwrap(),
        Some(b"dead".to_vec())
    );
    drop(at_snap);
    drop(snap);
    db.compact_range(None, None).unwrap();
    for i in 0..200u32 {
        let want = (i % 3 != 0).then(|| b"alive-new".to_vec());
        assert_eq!(db.get(format!("k{i:04}").as_bytes()).unwrap(), want, "k{i}");
    }
    let entries = sst_entries(dir.path());
    assert!(
        entries
            .iter()
            .all(|e| e.value != b"dead" && e.value != b"alive-old"),
        "a removed key or an older version of it is still on disk"
    );
    assert_eq!(entries.len(), 133, "the live keys, once each");
    // Reopened, the answers stand.
    drop(db);
    let mut o = no_auto_compaction(common::tiny_options(None, 10));
    o.compaction_filter = Some(Arc::new(DropDead));
    let db = Db::open(dir.path(), o).unwrap();
    assert_eq!(db.get(b"k0003").unwrap(), None);
    assert_eq!(db.get(b"k0004").unwrap(), Some(b"alive-new".to_vec()));
}

/// A removal over an older version that a snapshot still needs leaves a tombstone: reads of
/// the present find the key gone, not its older version back, and the snapshot keeps it.
#[test]
fn a_compaction_filter_removal_over_older_versions_leaves_a_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = no_auto_compaction(common::tiny_options(None, 10));
    o.compaction_filter = Some(Arc::new(DropDead));
    let db = Db::open(dir.path(), o).unwrap();
    db.put(b"a", b"old").unwrap();
    db.put(b"z", b"old").unwrap();
    db.compact_range(None, None).unwrap();
    let snap = db.snapshot();
    db.put(b"a", b"dead").unwrap();
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get(b"a").unwrap(), None);
    assert_eq!(db.get(b"z").unwrap(), Some(b"old".to_vec()));
    let at_snap = ReadOptions {
        snapshot: Some(snap),
        ..ReadOptions::default()
    };
    assert_eq!(db.get_with(b"a", &at_snap).unwrap(), Some(b"old".to_vec()));
    let entries = sst_entries(dir.path());
    assert!(entries.iter().all(|e| e.value != b"dead"));
    assert!(entries.iter().any(|e| e.key == b"a" && e.deletion));
}

/// Under a stream of writes a flushed memtable's memory is kept for the next memtables to
/// fill; once writes stop, it is let go: after a while, or by the next flush.
#[test]
fn flushed_memtables_memory_is_reused_while_writes_go_on_and_let_go_after() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            write_buffer_size: 8 << 20,
            // No merge when writes stop, whose flush would let go of the memory first.
            idle_merge_after: None,
            // Writes go on while a memtable waits for its flush, so that a flush ends
            // while the next memtable holds writes even on a slow disk.
            max_immutable_memtables: 2,
            ..no_auto_compaction(common::options())
        },
    )
    .unwrap();
    let value = [7u8; 200];
    let mut next = 0u64;
    let mut put = |n: u64| {
        for _ in 0..n {
            db.put(format!("{next:016}").as_bytes(), &value).unwrap();
            next += 1;
        }
    };
    let wait_for = |what: &str, done: &dyn Fn(u64) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let kept = db.stats().recycled_memtable_bytes;
            if done(kept) {
                return kept;
            }
            assert!(Instant::now() < deadline, "{what}: {kept} bytes kept");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Writes until a memtable's flush has ended while its successor takes writes; the flush
    // thread lets go of the memtable just after.
    let mut written = || {
        let flushes = db.stats().flushes;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            put(1_000);
            let s = db.stats();
            if s.flushes > flushes && s.immutable_memtables == 0 && s.memtable_bytes > 0 {
                return;
            }
            assert!(Instant::now() < deadline, "no flush ended within a minute");
        }
    };
    written();
    let kept = wait_for("a flush while writes went on", &|kept| kept > 0);
    // The successor took at most a chunk or two since.
    assert!(
        kept >= 4 << 20,
        "kept {kept} bytes of a flushed 8 MiB memtable"
    );
    // Writes stop: the pool goes unused, and is let go.
    wait_for("no writes for a while", &|kept| kept == 0);
    // The flush of the last memtable, leaving an empty one, lets go at once.
    written();
    wait_for("a flush while writes went on", &|kept| kept > 0);
    // (The flush thread lets go just after the flush is done: well within the second that
    // the idle release waits.)
    db.flush().unwrap();
    let deadline = Instant::now() + Duration::from_millis(500);
    while db.stats().recycled_memtable_bytes > 0 {
        assert!(
            Instant::now() < deadline,
            "still kept after a flush with no writes after it"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Panics on the value `boom`: a user's compaction filter with a bug.
struct Explodes;

impl strata::CompactionFilter for Explodes {
    fn filter(&self, _level: usize, _key: &[u8], value: &[u8]) -> strata::FilterDecision {
        assert!(value != b"boom", "the filter met boom");
        strata::FilterDecision::Keep
    }
}

/// A background compaction whose filter (the user's code) panics stops the database with an
/// error that says so: writes, waits for compactions and a drop of the family fail, where
/// they waited for ever on a compaction thread that was gone (writes once level 0 reached
/// its stop trigger, the drop on the levels the compaction left busy).
#[test]
fn a_panic_in_a_background_compaction_poisons_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::tiny_options(None, 10)).unwrap();
    let mut o = common::tiny_options(None, 10);
    o.compaction_filter = Some(Arc::new(Explodes));
    let family = db.create_family("exploding", o).unwrap();
    // On another thread, so that a write or wait that never ends fails the test.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        db.put_cf(&family, b"key", b"boom").unwrap();
        // Enough writes for the tables holding `boom` to be compacted, unless one fails first.
        for i in 0..20_000u32 {
            let key = format!("key{i:08}");
            if db.put_cf(&family, key.as_bytes(), &[b'v'; 100]).is_err() {
                break;
            }
        }
        let waited = db.wait_for_compactions();
        let put = db.put(b"a", b"b");
        done.send((waited, put, db.drop_family("exploding")))
            .unwrap();
    });
    let (waited, put, dropped) = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the writes, the wait or the drop still wait after a minute");
    let e = waited.unwrap_err();
    assert!(
        matches!(&e, Error::Poisoned(m) if m.contains("thread panicked: the filter met boom")),
        "{e}"
    );
    assert!(matches!(put, Err(Error::Poisoned(_))), "{put:?}");
    assert!(matches!(dropped, Err(Error::Poisoned(_))), "{dropped:?}");
}

/// A `compact_range` whose compaction filter panics, on the caller's thread, poisons the
/// database and gives up its marks: waits for compactions end with the error instead of
/// waiting for a manual compaction that will never finish.
#[test]
fn a_panic_in_compact_range_poisons_the_database_and_ends_its_marks() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = no_auto_compaction(common::tiny_options(None, 10));
    o.compaction_filter = Some(Arc::new(Explodes));
    let db = Arc::new(Db::open(dir.path(), o).unwrap());
    db.put(b"key", b"boom").unwrap();
    for i in 0..200u32 {
        db.put(format!("key{i:08}").as_bytes(), b"value").unwrap();
    }
    db.flush().unwrap();
    let compacting = db.clone();
    let panicked = std::thread::spawn(move || compacting.compact_range(None, None)).join();
    assert!(panicked.is_err(), "the filter's panic reaches the caller");
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        done.send((db.wait_for_compactions(), db.put(b"a", b"b")))
            .unwrap();
    });
    let (waited, put) = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("still waiting after a minute");
    assert!(
        matches!(&waited, Err(Error::Poisoned(m)) if m.contains("compact_range panicked")),
        "{waited:?}"
    );
    assert!(matches!(put, Err(Error::Poisoned(_))), "{put:?}");
}

//! Compacted tables are closed and deleted by the purge thread, never on the thread of a
//! reader that held them last. Removals are watched through the file system seam, with the
//! name of the thread that asked for each.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::watched_fs::{Hooks, WatchedFs};
use strata::{Db, Options, ReadOptions};

/// Which thread removed which file.
#[derive(Default)]
struct Removals(Mutex<Vec<(PathBuf, String)>>);

impl Hooks for Removals {
    fn removing(&self, path: &Path) {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        self.0.lock().unwrap().push((path.to_path_buf(), thread));
    }
}

fn tables(dir: &Path) -> Vec<PathBuf> {
    let mut t: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    t.sort();
    t
}

#[test]
fn a_reader_that_drops_the_last_reference_to_compacted_tables_does_not_delete_them() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(WatchedFs::new(Removals::default()));
    let opts = Options {
        fs: fs.clone(),
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    for round in 0..2u32 {
        for i in 0..2_000u32 {
            db.put(format!("key{i:05}").as_bytes(), &round.to_le_bytes())
                .unwrap();
        }
        db.flush().unwrap();
    }
    let old = tables(dir.path());
    assert!(old.len() >= 2, "two flushes made {old:?}");

    // A reader holds the version of the two tables, and has read from them.
    let mut it = db.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first().unwrap();
    assert_eq!(it.key(), b"key00000");
    assert_eq!(it.value(), 1u32.to_le_bytes());

    db.compact_range(None, None).unwrap();
    // Compacted away, the tables are still on disk: the reader holds them.
    for t in &old {
        assert!(t.exists(), "{} went while a reader held it", t.display());
    }
    drop(it);

    let deadline = Instant::now() + Duration::from_secs(20);
    while old.iter().any(|t| t.exists()) {
        assert!(Instant::now() < deadline, "{old:?} are still there");
        std::thread::sleep(Duration::from_millis(10));
    }
    let removed = fs.hooks.0.lock().unwrap().clone();
    let me = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string();
    for t in &old {
        let by: Vec<&String> = removed
            .iter()
            .filter(|(p, _)| p == t)
            .map(|(_, thread)| thread)
            .collect();
        assert_eq!(
            by,
            ["strata-purge"],
            "{} was removed by {by:?} ({me} read)",
            t.display()
        );
    }
    assert_eq!(
        db.get(b"key01999").unwrap(),
        Some(1u32.to_le_bytes().to_vec())
    );
    db.close().unwrap();
}

/// Tables made and removed slowly, as on a loaded disk.
/// Slows the making and removing of files, and counts the tables made.
#[derive(Clone, Default)]
struct SlowTables(Arc<AtomicUsize>);

impl Hooks for SlowTables {
    fn creating(&self, path: &Path) {
        if path.extension().is_some_and(|e| e == "sst") {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    fn removing(&self, _path: &Path) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `wait_for_compactions` returns once the flushes and compactions the writes called for are
/// done and the tables they replaced are deleted, however slowly: the directory then holds
/// exactly the tables of the tree.
#[test]
fn waiting_for_compactions_waits_for_what_they_replaced_to_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let slow = SlowTables::default();
    let db = Db::open(dir.path(), small_tables(WatchedFs::new(slow.clone()))).unwrap();
    let mut rng = common::Rng(common::seed("waiting_for_compactions"));
    for _ in 0..30_000u32 {
        let key = format!("key{:06}", rng.below(20_000));
        db.put(key.as_bytes(), &[b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    assert!(
        db.stats().compactions > 0,
        "the writes called for no compaction"
    );
    let (levels, live) = tree(&db, dir.path());
    assert_eq!(tables(dir.path()), live);
    assert!(levels.len() > 1, "the tree is in levels {levels:?}");

    // A compact_range of another thread, which leaves one level, is waited for too: from
    // its first table on, the one its flush makes of these writes, before its compaction
    // has begun.
    for i in 0..100u32 {
        db.put(format!("key{i:06}").as_bytes(), b"newer").unwrap();
    }
    let db = Arc::new(db);
    let made = slow.0.load(Ordering::SeqCst);
    let compacting = {
        let db = db.clone();
        std::thread::spawn(move || db.compact_range(None, None).unwrap())
    };
    while slow.0.load(Ordering::SeqCst) == made {
        std::thread::sleep(Duration::from_millis(1));
    }
    db.wait_for_compactions().unwrap();
    let (levels, live) = tree(&db, dir.path());
    assert_eq!(
        levels.len(),
        1,
        "the wait returned with tables in levels {levels:?}"
    );
    assert_eq!(tables(dir.path()), live);
    compacting.join().unwrap();
}

/// Options for tables of 64 KiB on `fs`, which a few thousand writes compact.
fn small_tables(fs: impl strata::FileSystem + 'static) -> Options {
    Options {
        fs: Arc::new(fs),
        write_buffer_size: 64 << 10,
        target_file_size: 64 << 10,
        level1_max_bytes: 256 << 10,
        idle_merge_after: None,
        ..Options::default()
    }
}

/// The levels that hold tables, and the paths of the tables, sorted.
fn tree(db: &Db, dir: &Path) -> (std::collections::BTreeSet<usize>, Vec<PathBuf>) {
    let stats = db.stats();
    let files = stats.families.iter().flat_map(|f| &f.files);
    let levels = files.clone().map(|f| f.level).collect();
    let mut live: Vec<PathBuf> = files
        .map(|f| dir.join(format!("{:06}.sst", f.number)))
        .collect();
    live.sort();
    (levels, live)
}

/// Panics on the first table it is asked to remove.
#[derive(Default)]
struct FirstRemovalPanics(std::sync::atomic::AtomicBool);

impl Hooks for FirstRemovalPanics {
    fn removing(&self, path: &Path) {
        if path.extension().is_some_and(|e| e == "sst") && !self.0.swap(true, Ordering::SeqCst) {
            panic!("the file system fails");
        }
    }
}

/// A panic on the purge thread (here the file system's) costs the deletion it was making,
/// not the thread: later tables are still deleted, and waits for the purge end.
#[test]
fn a_panic_while_deleting_a_table_leaves_the_purge_running() {
    let dir = tempfile::tempdir().unwrap();
    let fs = WatchedFs::new(FirstRemovalPanics::default());
    let db = Db::open(dir.path(), small_tables(fs)).unwrap();
    let path = dir.path().to_path_buf();
    // On another thread, so that a wait that never ends fails the test.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rng = common::Rng(common::seed("purge_panics"));
        for _ in 0..30_000u32 {
            let key = format!("key{:06}", rng.below(20_000));
            db.put(key.as_bytes(), &[b'v'; 100]).unwrap();
        }
        db.compact_range(None, None).unwrap();
        db.wait_for_compactions().unwrap();
        let (_, live) = tree(&db, &path);
        done.send((db.stats().compactions, live)).unwrap();
    });
    let (compactions, live) = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("the writes and waits still wait after a minute");
    assert!(compactions > 1, "{compactions} compactions");
    // One table's deletion was lost with the panic; every other replaced table is gone.
    let on_disk = tables(dir.path());
    let strays: Vec<&PathBuf> = on_disk.iter().filter(|t| !live.contains(t)).collect();
    assert_eq!(strays.len(), 1, "tables left behind: {strays:?}");
}

//! Compacted tables are closed and deleted by the purge thread, never on the thread of a
//! reader that held them last. Removals are watched through the file system seam, with the
//! name of the thread that asked for each.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata::{
    Db, FileLock, FileSystem, Options, RandomAccessFile, ReadOptions, StdFs, WritableFile,
};

/// `StdFs`, noting which thread removed which file.
#[derive(Default)]
struct Watching {
    fs: StdFs,
    removed: Mutex<Vec<(PathBuf, String)>>,
}

impl FileSystem for Watching {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.fs.create(path)
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.fs.create_log(path)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.fs.open(path)
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.fs.read_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.fs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        self.removed
            .lock()
            .unwrap()
            .push((path.to_path_buf(), thread));
        self.fs.remove(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.fs.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.fs.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.fs.remove_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.fs.exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.fs.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.fs.lock(path)
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.fs.file_size(path)
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
    let fs = Arc::new(Watching::default());
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
    let removed = fs.removed.lock().unwrap().clone();
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

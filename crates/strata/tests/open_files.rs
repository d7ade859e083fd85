//! The table cache's bound on open files: however many tables the tree holds, no more than
//! `Options::max_open_files` of them hold a descriptor at once, but for reads in flight (a
//! file the clock hand closes stays open until the read that holds it ends), and every read
//! answers as the model says. Descriptors are counted through the file system seam.

mod common;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::watched_fs::{Hooks, WatchedFs};
use strata::{Db, Options, RandomAccessFile, ReadOptions};

/// Table files open at once, the most ever, and how many opens there were.
#[derive(Default)]
struct Counting {
    open: Arc<AtomicUsize>,
    most: AtomicUsize,
    opens: AtomicUsize,
}

/// A table file the engine holds open, counted until it is let go.
struct CountedFile {
    file: Arc<dyn RandomAccessFile>,
    open: Arc<AtomicUsize>,
}

impl Drop for CountedFile {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RandomAccessFile for CountedFile {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.file.read_at(offset, len)
    }
    fn size(&self) -> io::Result<u64> {
        self.file.size()
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.file.raw_fd()
    }
}

impl Hooks for Counting {
    fn opened(&self, path: &Path, file: Arc<dyn RandomAccessFile>) -> Arc<dyn RandomAccessFile> {
        if path.extension().is_none_or(|e| e != "sst") {
            return file;
        }
        let now = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.opens.fetch_add(1, Ordering::SeqCst);
        Arc::new(CountedFile {
            file,
            open: self.open.clone(),
        })
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 1_000_000).into_bytes()
}

fn tables(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect()
}

#[test]
fn no_more_table_files_are_open_than_the_bound_however_many_the_tree_holds() {
    const LIMIT: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(WatchedFs::new(Counting::default()));
    let opts = Options {
        fs: fs.clone(),
        max_open_files: LIMIT,
        // Reads go through the files, not a mapping.
        table_map_bytes: 0,
        block_cache_bytes: 0,
        ..common::tiny_options(None, 10)
    };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..6_000u32 {
        let value = format!("value {i} {}", "x".repeat(40)).into_bytes();
        db.put(&key(i), &value).unwrap();
        model.insert(key(i), value);
    }
    db.flush().unwrap();
    let held = tables(dir.path()).len();
    assert!(held > 4 * LIMIT, "the tree holds {held} tables");

    for round in 0..2 {
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "round {round}");
        }
        let scanned: Vec<(Vec<u8>, Vec<u8>)> = db.scan(..).unwrap().map(Result::unwrap).collect();
        let expected: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(scanned, expected, "round {round}");
    }
    // Three threads read tables here: this one, the flush thread (which reads the tables it
    // writes before installing them) and the compaction thread; each may hold one file past
    // the bound for the span of a read.
    let slack = 3;
    let most = fs.hooks.most.load(Ordering::SeqCst);
    assert!(
        most <= LIMIT + slack,
        "{most} table files open at once, for a bound of {LIMIT} and {held} tables"
    );
    // Batched lookups read their blocks together, through handles that keep each file open
    // until its read is done (a descriptor closed under a read could be another file's by
    // then): their answers are the model's.
    // Each batch's 32 keys lie far apart, in as many tables, more than the bound holds: the
    // clock closes files of the batch while it gathers the others' reads.
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let stride = keys.len() / 32;
    for start in 0..stride {
        let batch: Vec<&Vec<u8>> = keys.iter().skip(start).step_by(stride).copied().collect();
        let got = db.get_many(&batch, &ReadOptions::default());
        for (k, v) in batch.iter().zip(got) {
            assert_eq!(v.unwrap().as_ref(), model.get(*k), "batched {k:?}");
        }
    }
    let most = fs.hooks.most.load(Ordering::SeqCst);
    assert!(most <= LIMIT + slack + 32, "{most} open with batches of 32");
    // The bound was met by closing files, not by never opening them.
    assert!(fs.hooks.opens.load(Ordering::SeqCst) > held);
    // Files a batch opened past the bound close when the clock hand next passes them, at a
    // later open: until then the count may stay above the bound by a batch's reads.
    let open = db.stats().open_table_files;
    assert!(open <= LIMIT + slack + 32, "{open} open after the batches");
    db.close().unwrap();

    // Opened again, the database reads every key under the same bound.
    fs.hooks.most.store(0, Ordering::SeqCst);
    let db = Db::open(dir.path(), opts).unwrap();
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    assert!(fs.hooks.most.load(Ordering::SeqCst) <= LIMIT + slack);
    db.close().unwrap();
}

/// Runs in a child process (so that its descriptor limit is its own): under a limit of 128
/// descriptors, a database of hundreds of tables, with the default bound (half the limit),
/// is written, opened again and read whole.
#[test]
fn a_database_of_more_tables_than_descriptors_opens_and_serves() {
    if std::env::var_os("STRATA_OPEN_FILES_CHILD").is_some() {
        return serve_under_a_descriptor_limit();
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_database_of_more_tables_than_descriptors_opens_and_serves",
            "--nocapture",
        ])
        .env("STRATA_OPEN_FILES_CHILD", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("served under the limit"), "{text}");
}

fn serve_under_a_descriptor_limit() {
    let limit = libc::rlimit {
        rlim_cur: 128,
        rlim_max: 128,
    };
    // SAFETY: setrlimit reads the struct it is given, which lives for the call.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        table_map_bytes: 0,
        ..common::tiny_options(None, 10)
    };
    assert_eq!(opts.max_open_files, 64);
    let mut model = BTreeMap::new();
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for i in 0..8_000u32 {
            let value = format!("value {i} {}", "y".repeat(40)).into_bytes();
            db.put(&key(i), &value).unwrap();
            model.insert(key(i), value);
        }
        db.flush().unwrap();
        db.close().unwrap();
    }
    let held = tables(dir.path()).len();
    assert!(held > 2 * 128, "the tree holds {held} tables");
    let db = Db::open(dir.path(), opts).unwrap();
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(db.scan(..).unwrap().count(), model.len());
    db.close().unwrap();
    println!("{held} tables served under the limit of 128 descriptors");
}

//! Lookups in tables whose metadata is over the budget: with partitioned filters and
//! indexes, an open table holds only the top blocks, and a lookup of a missing key reads at
//! most one filter partition from the file and no index block. Reads are counted through the
//! file system seam.

mod common;

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::watched_fs::{Hooks, WatchedFs};
use strata::{Db, FilterKind, IndexKind, Options, RandomAccessFile};

/// The length of every read of a table file, in order.
#[derive(Default)]
struct Reads(Arc<Mutex<Vec<usize>>>);

struct CountedFile {
    file: Arc<dyn RandomAccessFile>,
    reads: Arc<Mutex<Vec<usize>>>,
}

impl RandomAccessFile for CountedFile {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.reads.lock().unwrap().push(len);
        self.file.read_at(offset, len)
    }
    fn size(&self) -> io::Result<u64> {
        self.file.size()
    }
}

impl Hooks for Reads {
    fn opened(&self, path: &Path, file: Arc<dyn RandomAccessFile>) -> Arc<dyn RandomAccessFile> {
        if path.extension().is_none_or(|e| e != "sst") {
            return file;
        }
        Arc::new(CountedFile {
            file,
            reads: self.0.clone(),
        })
    }
}

const BLOCK: usize = 4096;

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes()
}

/// A database of 200,000 keys merged into one level, whose tables' filters and indexes are
/// far over `table_pinned_bytes`, with no block cache to keep what lookups read.
fn over_budget(dir: &Path, filter_kind: FilterKind, reads: &Reads) -> Db {
    let opts = Options {
        fs: Arc::new(WatchedFs::new(Reads(reads.0.clone()))),
        filter_kind,
        index_kind: IndexKind::BTree,
        block_size: BLOCK,
        write_buffer_size: 4 << 20,
        target_file_size: 4 << 20,
        // Room for the top blocks of the tables' filters and indexes, not for a whole
        // filter (about 45 KiB a table) or index.
        table_pinned_bytes: 16 * 1024,
        block_cache_bytes: 0,
        table_map_bytes: 0,
        idle_merge_after: None,
        ..Options::default()
    };
    let db = Db::open(dir, opts).unwrap();
    let value = [b'v'; 100];
    for i in 0..200_000 {
        db.put(&key(i), &value).unwrap();
    }
    db.compact_range(None, None).unwrap();
    db
}

/// For each of `n` missing keys (among the written ones, so that a table covers each), the
/// reads of table files its lookup made; lookups that met a false positive of the filter
/// are left out, and counted.
fn reads_of_missing_keys(db: &Db, reads: &Reads, n: u32) -> (Vec<Vec<usize>>, u64) {
    // Once, so that every table's top blocks are read.
    for i in 0..n {
        db.get(&[key(i), b"x".to_vec()].concat()).unwrap();
    }
    let mut out = Vec::new();
    let mut false_positives = 0;
    for i in 0..n {
        let missing = [key(i), b"x".to_vec()].concat();
        reads.0.lock().unwrap().clear();
        let before = db.stats().filter_false_positives;
        assert_eq!(db.get(&missing).unwrap(), None);
        if db.stats().filter_false_positives == before {
            out.push(reads.0.lock().unwrap().clone());
        } else {
            false_positives += 1;
        }
    }
    (out, false_positives)
}

#[test]
fn a_missing_key_in_an_over_budget_table_reads_one_filter_partition_and_no_index() {
    let dir = tempfile::tempdir().unwrap();
    let reads = Reads::default();
    let db = over_budget(dir.path(), FilterKind::Partitioned, &reads);
    let (lookups, false_positives) = reads_of_missing_keys(&db, &reads, 500);
    assert!(
        false_positives < 25,
        "{false_positives} false positives in 500"
    );
    let mut partitions_read = 0;
    for r in &lookups {
        // One table of the level covers the key: at most its filter partition, a block.
        assert!(r.len() <= 1, "a missing key's lookup read {r:?}");
        assert!(
            r.iter().all(|&len| len <= BLOCK + 512),
            "a missing key's lookup read more than a partition: {r:?}"
        );
        partitions_read += r.len();
    }
    // The partitions came from the file, not from memory the test did not see: a check of
    // lookups that read nothing would pass whatever the engine did.
    assert!(
        partitions_read * 10 >= lookups.len() * 9,
        "only {partitions_read} of {} lookups read a partition",
        lookups.len()
    );
}

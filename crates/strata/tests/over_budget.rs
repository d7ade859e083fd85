//! Lookups in tables whose metadata is over the budget: with partitioned filters and
//! indexes, an open table holds only the top blocks, and a lookup of a missing key reads at
//! most one filter partition from the file and no index block. Reads are seen through the
//! file system seam, and placed in the file by its layout (`docs/format.md`): data blocks,
//! then the filter's partitions, then their index block (where the footer's filter handle
//! points), then the index blocks.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::watched_fs::{Hooks, WatchedFs};
use strata::{Db, FilterKind, IndexKind, Options, RandomAccessFile};

/// Every read of a table file, in order: the file, the offset and the length.
type Read = (PathBuf, u64, usize);

#[derive(Default)]
struct Reads(Arc<Mutex<Vec<Read>>>);

struct CountedFile {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    reads: Arc<Mutex<Vec<Read>>>,
}

impl RandomAccessFile for CountedFile {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.reads
            .lock()
            .unwrap()
            .push((self.path.clone(), offset, len));
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
            path: path.to_path_buf(),
            reads: self.0.clone(),
        })
    }
}

const BLOCK: usize = 4096;

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes()
}

/// A database of 200,000 keys merged into one level, with `layout`'s filters and indexes,
/// under a `table_pinned_bytes` far below them (room for the top blocks of the tables'
/// filters and indexes, not for a whole filter of about 45 KiB a table), with no block cache
/// to keep what lookups read.
fn over_budget(dir: &Path, layout: (FilterKind, IndexKind), reads: &Reads) -> Db {
    filled(dir, reads, |o| {
        (o.filter_kind, o.index_kind) = layout;
        o.table_pinned_bytes = 16 * 1024;
    })
}

fn filled(dir: &Path, reads: &Reads, tweak: impl FnOnce(&mut Options)) -> Db {
    let mut opts = Options {
        fs: Arc::new(WatchedFs::new(Reads(reads.0.clone()))),
        block_size: BLOCK,
        write_buffer_size: 4 << 20,
        target_file_size: 4 << 20,
        block_cache_bytes: 0,
        table_map_bytes: 0,
        idle_merge_after: None,
        ..Options::default()
    };
    tweak(&mut opts);
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
fn reads_of_missing_keys(db: &Db, reads: &Reads, n: u32) -> (Vec<Vec<Read>>, u64) {
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

/// Where a table's filter partitions lie: from the end of its last data block (and its
/// 5-byte trailer) to the partitions' index block, which the footer's filter handle names
/// (its first 8 bytes, the offset, little-endian).
fn partitions(path: &Path) -> (u64, u64) {
    const FOOTER_BYTES: usize = 68;
    let dump = strata::inspect::dump_file(path, false).unwrap();
    let data_end = dump.blocks.iter().map(|&(o, s)| o + s + 5).max().unwrap();
    let bytes = std::fs::read(path).unwrap();
    let footer = &bytes[bytes.len() - FOOTER_BYTES..];
    let filter_index = u64::from_le_bytes(footer[..8].try_into().unwrap());
    assert!(data_end < filter_index, "{}: no partitions", path.display());
    (data_end, filter_index)
}

#[test]
fn a_missing_key_in_an_over_budget_table_reads_one_filter_partition_and_no_index() {
    let dir = tempfile::tempdir().unwrap();
    let reads = Reads::default();
    let db = over_budget(
        dir.path(),
        (FilterKind::Partitioned, IndexKind::BTree),
        &reads,
    );
    reads_one_partition_per_missing_key(&db, &reads);
}

/// With the default layout (whole filters, flat indexes), a tree whose metadata is over the
/// budget is rewritten by compaction with partitioned metadata, and its lookups of missing
/// keys read one partition; under the budget it stays whole.
#[test]
fn compaction_falls_back_to_partitioned_metadata_over_the_budget_only() {
    let dir = tempfile::tempdir().unwrap();
    let reads = Reads::default();
    let db = over_budget(dir.path(), (FilterKind::Whole, IndexKind::Flat), &reads);
    assert_eq!(filter_kinds(dir.path()), ["Partitioned BTree"]);
    reads_one_partition_per_missing_key(&db, &reads);
    drop(db);
    let dir = tempfile::tempdir().unwrap();
    let db = filled(dir.path(), &reads, |o| o.table_pinned_bytes = 64 << 20);
    assert_eq!(filter_kinds(dir.path()), ["Whole Flat"]);
    drop(db);
}

/// The filter and index kinds of the tables in `dir`, each pair once.
fn filter_kinds(dir: &Path) -> Vec<String> {
    let mut kinds: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .map(|p| {
            let dump = strata::inspect::dump_file(&p, false).unwrap();
            let fact = |name: &str| {
                let (_, value) = dump.summary.iter().find(|(k, _)| k == name).unwrap();
                value.split(',').next().unwrap().to_string()
            };
            format!("{} {}", fact("filter"), fact("index"))
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// Lookups of 500 missing keys each read at most one block, a filter partition.
fn reads_one_partition_per_missing_key(db: &Db, reads: &Reads) {
    let (lookups, false_positives) = reads_of_missing_keys(db, reads, 500);
    assert!(
        false_positives < 25,
        "{false_positives} false positives in 500"
    );
    let mut partitions_read = 0;
    for r in &lookups {
        // One table of the level covers the key: at most its filter partition.
        assert!(r.len() <= 1, "a missing key's lookup read {r:?}");
        for (path, offset, len) in r {
            let (partitions_start, partitions_end) = partitions(path);
            assert!(
                (partitions_start..partitions_end).contains(offset) && *len <= BLOCK + 512,
                "a missing key's lookup read {len} bytes at {offset} of {}, outside the \
                 filter's partitions ({partitions_start}..{partitions_end})",
                path.display()
            );
        }
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

//! Tables built and read back: every index and filter kind, the pin budget, corruption.

use std::path::Path;
use std::sync::Arc;

use crate::comparator::KeyOrder;

use super::builder::TableBuilder;
use super::format::{BLOCK_TRAILER_BYTES, BlockHandle, Coding, FOOTER_BYTES, Footer};
use super::reader::*;
use super::{Compression, FilterKind, IndexKind, TableOptions};
use crate::cache::BlockCache;
use crate::error::Error;
use crate::fs::{FileSystem, MemFs};
use crate::iter::InternalIterator;
use crate::key::{FileNumber, SeqNo, ValueKind, internal_key, lookup_key};
use crate::sstable::pinned::PinBudget;

fn options(kind: IndexKind, compression: Compression, filter: FilterKind) -> TableOptions {
    TableOptions {
        block_size: 256,
        restart_interval: 4,
        bloom_bits_per_key: 10.0,
        filter_format: crate::FilterFormat::default(),
        compression,
        index_kind: kind,
        filter_kind: filter,
        align_blocks: false,
        zstd_dictionary_bytes: crate::Options::default().zstd_dictionary_bytes,
        order: crate::comparator::KeyOrder::Bytewise,
    }
}

/// The table at `path` in `fs`, opened as file `number` under `cache`, keys bytewise.
fn open_table(
    fs: &MemFs,
    path: &Path,
    number: u64,
    cache: Arc<BlockCache>,
) -> crate::Result<Table> {
    Table::open(
        fs.open(path).unwrap(),
        path,
        FileNumber(number),
        cache,
        KeyOrder::Bytewise,
    )
}

/// A table at `/t/1.sst` of `entries` (internal key, value), opened.
fn build_from(
    opts: TableOptions,
    entries: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
) -> (MemFs, Arc<Table>) {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/t")).unwrap();
    let path = Path::new("/t/1.sst");
    let mut b = TableBuilder::new(fs.create(path).unwrap(), path.to_path_buf(), opts);
    for (k, v) in entries {
        b.add(&k, &v).unwrap();
    }
    b.finish().unwrap();
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = open_table(&fs, path, 1, cache).unwrap();
    (fs, Arc::new(t))
}

/// `n` entries, `key000000` = `value0`, `key000002` = `value1`, ...
fn build_with(n: u32, opts: TableOptions) -> (MemFs, Arc<Table>) {
    let entries = (0..n).map(|i| {
        let k = internal_key(
            format!("key{:06}", i * 2).as_bytes(),
            SeqNo(u64::from(i) + 1),
            ValueKind::Value,
        );
        (k, format!("value{i}").into_bytes())
    });
    let (fs, t) = build_from(opts, entries);
    assert_eq!(t.verify().unwrap(), u64::from(n));
    (fs, t)
}

fn build(n: u32, kind: IndexKind, compression: Compression) -> (MemFs, Arc<Table>) {
    build_with(n, options(kind, compression, FilterKind::Whole))
}

#[test]
fn both_index_kinds_find_every_key_and_iterate_both_ways() {
    let kinds = [IndexKind::Flat, IndexKind::BTree]
        .into_iter()
        .flat_map(|k| [FilterKind::Whole, FilterKind::Partitioned].map(|f| (k, f)));
    for (kind, filter) in kinds {
        for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let n = 2000;
            let (_fs, t) = build_with(n, options(kind, c, filter));
            assert_eq!(t.footer().filter_kind, filter);
            if kind == IndexKind::BTree {
                assert!(
                    t.footer().index_depth >= 2,
                    "btree of {n} entries should have levels"
                );
            }
            for i in 0..n {
                let uk = format!("key{:06}", i * 2);
                let e = t
                    .get(&lookup_key(uk.as_bytes(), SeqNo::MAX), uk.as_bytes(), true)
                    .unwrap()
                    .unwrap();
                assert_eq!(e.value, format!("value{i}").as_bytes());
                let miss = format!("key{:06}", i * 2 + 1);
                assert!(
                    t.get(
                        &lookup_key(miss.as_bytes(), SeqNo::MAX),
                        miss.as_bytes(),
                        true
                    )
                    .unwrap()
                    .is_none()
                );
            }
            let mut it = t.iter(true);
            it.seek_to_first().unwrap();
            let mut count = 0;
            while it.valid() {
                count += 1;
                it.next().unwrap();
            }
            assert_eq!(count, n);
            it.seek_to_last().unwrap();
            let mut back = 0;
            while it.valid() {
                back += 1;
                it.prev().unwrap();
            }
            assert_eq!(back, n);
            it.seek(&lookup_key(b"key000101", SeqNo::MAX)).unwrap();
            assert_eq!(crate::key::user_key(it.key()), b"key000102");
            it.prev().unwrap();
            assert_eq!(crate::key::user_key(it.key()), b"key000100");
            it.seek(&lookup_key(b"zzz", SeqNo::MAX)).unwrap();
            assert!(!it.valid());
            assert!(t.verify().unwrap() == u64::from(n));
        }
    }
}

#[test]
fn tables_over_the_pin_budget_let_their_blocks_go_and_read_them_again() {
    let n = 500;
    let (fs, t) = build(n, IndexKind::Flat, Compression::None);
    t.warm().unwrap();
    let one = t.held_bytes();
    drop(t);
    // Room for two tables' blocks, among six.
    let budget = Arc::new(PinBudget::new(2 * one + one / 2));
    let cache = Arc::new(BlockCache::new(1 << 20));
    let path = Path::new("/t/1.sst");
    let tables: Vec<Arc<Table>> = (1..=6)
        .map(|i| {
            let t = open_table(&fs, path, i, cache.clone());
            Arc::new(t.unwrap().with_budget(&budget))
        })
        .collect();
    for round in 0..3 {
        for (j, t) in tables.iter().enumerate() {
            for i in (round..n).step_by(7) {
                let uk = format!("key{:06}", i * 2);
                let lookup = lookup_key(uk.as_bytes(), SeqNo::MAX);
                let e = t.get(&lookup, uk.as_bytes(), true).unwrap().unwrap();
                assert_eq!(e.value, format!("value{i}").as_bytes());
            }
            assert!(
                budget.held() <= 2 * one + one / 2,
                "table {j}: {}",
                budget.held()
            );
        }
    }
    let holding = tables.iter().filter(|t| t.held_bytes() == one).count();
    assert_eq!(holding, 2, "the two tables used last hold their blocks");
    assert_eq!(budget.held(), 2 * one);
    // A lookup's hold outlives the table's: the blocks stay readable after they are let go.
    let held = tables[5].filter().unwrap();
    assert_eq!(tables[5].unpin(), one);
    budget.release(one);
    let lookup = lookup_key(b"key000004", SeqNo::MAX);
    assert!(
        tables[5]
            .may_contain(&held, &lookup, b"key000004", true)
            .unwrap()
    );
    drop(tables);
    assert_eq!(budget.held(), 0, "closed tables give their bytes back");
}

/// A lookup the filter answers reads the filter alone: the index is read by the first
/// lookup the filter passes.
#[test]
fn a_lookup_the_filter_refuses_never_reads_the_index() {
    // `build` verifies its table, which reads everything: open the file afresh.
    let (fs, _) = build(500, IndexKind::Flat, Compression::None);
    let path = Path::new("/t/1.sst");
    let cache = Arc::new(BlockCache::new(1 << 20));
    let t = open_table(&fs, path, 2, cache);
    {
        let t = Arc::new(t.unwrap());
        // Odd keys were never written; about 1% pass the filter (10 bits a key).
        let mut refused = 0;
        for i in 0..200 {
            let uk = format!("key{:06}", i * 2 + 1);
            let lookup = lookup_key(uk.as_bytes(), SeqNo::MAX);
            if !t
                .may_contain(&t.filter().unwrap(), &lookup, uk.as_bytes(), true)
                .unwrap()
            {
                refused += 1;
                assert!(t.get(&lookup, uk.as_bytes(), true).unwrap().is_none());
                assert!(t.index.load().is_none(), "{uk}: the index was read");
            }
        }
        assert!(refused > 150, "{refused}");
        let lookup = lookup_key(b"key000004", SeqNo::MAX);
        assert!(t.get(&lookup, b"key000004", true).unwrap().is_some());
        assert!(t.index.load().is_some());
    }
}

/// Every version of every key, and each key seen from before its newest versions: a
/// lookup must find the newest version at or below its sequence number when the versions
/// of a key straddle the boundary of two filter partitions.
#[test]
fn partitioned_filters_find_every_version_across_partition_boundaries() {
    const VERSIONS: u64 = 12;
    let keys = 3000u64;
    let entries = (0..keys).flat_map(|i| {
        // Newest first, as internal keys order.
        (1..=VERSIONS).rev().map(move |v| {
            let k = internal_key(
                format!("key{:06}", i * 2).as_bytes(),
                SeqNo(i * VERSIONS + v),
                ValueKind::Value,
            );
            (k, format!("v{i}.{v}").into_bytes())
        })
    });
    let opts = options(IndexKind::BTree, Compression::None, FilterKind::Partitioned);
    let (_fs, t) = build_from(opts, entries);
    let partitions = t.filter_partition_handles().unwrap().len();
    assert!(partitions > 10, "only {partitions} partitions");
    assert_eq!(t.verify().unwrap(), keys * VERSIONS);
    let pinned = t.filter().unwrap();
    for i in 0..keys {
        let uk = format!("key{:06}", i * 2);
        for v in 1..=VERSIONS {
            let lookup = lookup_key(uk.as_bytes(), SeqNo(i * VERSIONS + v));
            assert!(
                t.may_contain(&pinned, &lookup, uk.as_bytes(), true)
                    .unwrap()
            );
            let e = t.get(&lookup, uk.as_bytes(), true).unwrap().unwrap();
            assert_eq!(e.value, format!("v{i}.{v}").as_bytes());
        }
    }
    // Absent keys: the partitions answer no for nearly all (10 bits a key: about 1%).
    let mut maybe = 0;
    for i in 0..keys {
        let uk = format!("key{:06}", i * 2 + 1);
        let lookup = lookup_key(uk.as_bytes(), SeqNo::MAX);
        maybe += usize::from(
            t.may_contain(&pinned, &lookup, uk.as_bytes(), true)
                .unwrap(),
        );
        assert!(t.get(&lookup, uk.as_bytes(), true).unwrap().is_none());
    }
    assert!(
        maybe < 100,
        "{maybe} of {keys} absent keys passed the filters"
    );
    // Past the last key, no partition is asked at all.
    let past = lookup_key(b"zzz", SeqNo::MAX);
    assert!(!t.may_contain(&pinned, &past, b"zzz", true).unwrap());
}

/// Regression (found by fuzzing with checksum checks off): a footer whose block size is
/// near `u64::MAX` overflowed the bounds check.
#[test]
fn a_footer_handle_of_any_size_is_corruption() {
    let opts = options(IndexKind::Flat, Compression::None, FilterKind::Whole);
    let (fs, t) = build_with(50, opts);
    drop(t);
    let mut data = fs.read_all(Path::new("/t/1.sst")).unwrap();
    let at = data.len() - FOOTER_BYTES;
    for size in [
        u64::MAX,
        u64::MAX - BLOCK_TRAILER_BYTES as u64 + 1,
        at as u64,
    ] {
        let Ok(mut footer) = Footer::decode(&data[at..]) else {
            panic!("the footer of a table just written")
        };
        footer.filter.size = size;
        data.truncate(at);
        data.extend_from_slice(&footer.encode());
        let fs2 = MemFs::new();
        fs2.create_dir_all(Path::new("/t")).unwrap();
        let mut f = fs2.create(Path::new("/t/1.sst")).unwrap();
        f.append(&data).unwrap();
        drop(f);
        let opened = open_table(
            &fs2,
            Path::new("/t/1.sst"),
            1,
            Arc::new(BlockCache::new(1 << 20)),
        );
        match opened {
            Err(Error::Corruption { reason, .. }) => {
                assert_eq!(reason, "footer points past the file", "size {size}")
            }
            Err(other) => panic!("size {size}: {other}"),
            Ok(_) => panic!("size {size}: opened"),
        }
    }
}

#[test]
fn flipped_bytes_are_reported_with_the_file_name() {
    for filter in [FilterKind::Whole, FilterKind::Partitioned] {
        flipped_bytes_are_reported(filter);
    }
}

fn flipped_bytes_are_reported(filter: FilterKind) {
    let opts = options(IndexKind::Flat, Compression::None, filter);
    let (fs, t) = build_with(500, opts);
    let size = fs.file_size(Path::new("/t/1.sst")).unwrap() as usize;
    drop(t);
    let mut detected = 0;
    for pos in (0..size).step_by(97) {
        let fs2 = MemFs::new();
        fs2.create_dir_all(Path::new("/t")).unwrap();
        let mut data = fs.read_all(Path::new("/t/1.sst")).unwrap();
        data[pos] ^= 0x40;
        let mut f = fs2.create(Path::new("/t/1.sst")).unwrap();
        f.append(&data).unwrap();
        drop(f);
        let cache = Arc::new(BlockCache::new(1 << 20));
        let opened = open_table(&fs2, Path::new("/t/1.sst"), 1, cache);
        let res = opened.and_then(|t| Arc::new(t).verify());
        match res {
            Err(Error::Corruption { file, .. }) => {
                assert_eq!(file, Path::new("/t/1.sst"));
                detected += 1;
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("flip at {pos} not detected"),
        }
    }
    assert!(detected > 0);
}

#[test]
fn aligned_data_blocks_stay_within_a_page_and_read_back() {
    for filter in [FilterKind::Whole, FilterKind::Partitioned] {
        aligned_data_blocks_read_back(filter);
    }
}

fn aligned_data_blocks_read_back(filter: FilterKind) {
    // 16-byte keys and 100-byte values, as the benchmarks write them: 4 KiB blocks of these
    // cross page boundaries unless aligned. 20,000 of them span several filter partitions.
    let entries = || {
        (0..20_000u32).map(|i| {
            let k = internal_key(format!("{i:016}").as_bytes(), SeqNo(1), ValueKind::Value);
            (k, vec![b'a' + (i % 26) as u8; 100])
        })
    };
    let last_byte =
        |h: &super::format::BlockHandle| h.offset + h.size + BLOCK_TRAILER_BYTES as u64 - 1;
    let crossing = |t: &Table| {
        let handles = t.data_block_handles().unwrap();
        assert!(handles.len() > 400, "{} blocks", handles.len());
        handles
            .iter()
            .filter(|h| h.offset / 4096 != last_byte(h) / 4096)
            .count()
    };
    let mut opts = options(IndexKind::Flat, Compression::None, filter);
    opts.block_size = 4096;
    let (plain_fs, plain) = build_from(opts.clone(), entries());
    assert!(crossing(&plain) > 400, "unaligned blocks cross pages");
    opts.align_blocks = true;
    let (fs, t) = build_from(opts, entries());
    assert_eq!(crossing(&t), 0);
    if filter == FilterKind::Partitioned {
        assert!(t.filter_partition_handles().unwrap().len() >= 4);
    }
    assert_eq!(t.verify().unwrap(), 20_000);
    // Every key is found: a partition the page cut ended holds the keys of its blocks only.
    for (k, v) in entries() {
        let uk = &k[..16];
        let got = t.get(&lookup_key(uk, SeqNo::MAX), uk, true).unwrap();
        assert_eq!(got.map(|e| e.value), Some(v), "{filter:?}");
    }
    let mut it = t.iter(true);
    it.seek_to_first().unwrap();
    for (k, v) in entries() {
        assert!(it.valid());
        assert_eq!((it.key(), it.value()), (&k[..], &v[..]));
        it.next().unwrap();
    }
    assert!(!it.valid());
    // The zeroes between blocks cost little: under 3% of the file.
    let path = Path::new("/t/1.sst");
    let size = |fs: &MemFs| fs.file_size(path).unwrap();
    assert!(size(&fs) * 100 < size(&plain_fs) * 103);
    // No read looks at the zeroes, so `check` does: a byte flipped there is reported.
    let handles = t.data_block_handles().unwrap();
    let gap = handles
        .windows(2)
        .map(|w| last_byte(&w[0]) + 1)
        .find(|end| end % 4096 != 0)
        .unwrap();
    fs.mutate_file(path, |b| b[gap as usize] ^= 1).unwrap();
    let cache = Arc::new(BlockCache::new(1 << 20));
    let damaged = open_table(&fs, path, 1, cache).unwrap();
    match Arc::new(damaged).verify() {
        Err(Error::Corruption { .. }) => {}
        other => panic!("a flipped zero at {gap} gave {other:?}"),
    }
}

/// Index keys are the shortest separators between blocks where the comparator finds one
/// (`key000003000` and `key000006000` are kept apart by `key000004`), and every key is still
/// found, keys between two blocks are not, and seeks between blocks land on the next key.
#[test]
fn index_keys_are_short_separators_that_find_every_key() {
    for kind in [IndexKind::Flat, IndexKind::BTree] {
        let opts = options(kind, Compression::None, FilterKind::Whole);
        let key = |i: u32| format!("key{:09}", i * 3000).into_bytes();
        let entries = (0..300u32).map(|i| {
            let k = internal_key(&key(i), SeqNo(u64::from(i) + 1), ValueKind::Value);
            (k, vec![b'v'; 200])
        });
        let (_fs, t) = build_from(opts, entries);
        // The root of a flat index holds every data block's entry.
        if kind == IndexKind::Flat {
            let root = t.index().unwrap();
            let mut it = root.block.iter_ref(t.block_order());
            it.seek_to_first().unwrap();
            let mut keys = Vec::new();
            while it.valid() {
                keys.push(String::from_utf8_lossy(crate::key::user_key(it.key())).into_owned());
                it.next().unwrap();
            }
            assert_eq!(keys.len(), 150, "two entries to a block");
            // Blocks end with 3000, 9000, 15000, 21000 and the next start 6000 later: a
            // digit raised by one stays below the next block's where the two differ by two
            // or more (`key000009000` and `key000012000` differ by one, at 0 and 1).
            let want = ["key000004", "key000009000", "key000016", "key000022"];
            assert_eq!(keys[..4], want);
        }
        for i in 0..300u32 {
            let found = t
                .get(&lookup_key(&key(i), SeqNo::MAX), &key(i), true)
                .unwrap();
            assert_eq!(found.map(|e| e.value), Some(vec![b'v'; 200]), "key {i}");
            let between = format!("key{:09}", i * 3000 + 1500).into_bytes();
            let missing = t.get(&lookup_key(&between, SeqNo::MAX), &between, true);
            assert!(missing.unwrap().is_none(), "between {i} and {}", i + 1);
            let mut it = t.iter(true);
            it.seek(&lookup_key(&between, SeqNo::MAX)).unwrap();
            match i + 1 < 300 {
                true => assert_eq!(crate::key::user_key(it.key()), key(i + 1)),
                false => assert!(!it.valid()),
            }
        }
    }
}

/// `n` entries whose 100-byte values come from a pool of 512: they repeat across the table
/// but seldom within a block, as what a dictionary made from the first blocks finds again in
/// the later ones.
fn pooled_entries(n: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let pool: Vec<Vec<u8>> = (0..512)
        .map(|_| (0..100).map(|_| b'a' + (next() % 26) as u8).collect())
        .collect();
    (0..n)
        .map(|i| {
            let key = format!("key{i:08}");
            let k = internal_key(key.as_bytes(), SeqNo(u64::from(i) + 1), ValueKind::Value);
            (k, pool[(next() % 512) as usize].clone())
        })
        .collect()
}

fn zstd_options(dictionary_bytes: usize) -> TableOptions {
    TableOptions {
        block_size: 4096,
        zstd_dictionary_bytes: dictionary_bytes,
        ..options(IndexKind::Flat, Compression::Zstd, FilterKind::Whole)
    }
}

/// The kind byte of each data block's trailer, in order.
fn block_kinds(t: &Table) -> Vec<u8> {
    let handles = t.data_block_handles().unwrap();
    let kind = |h: &BlockHandle| t.file.read_at(h.offset + h.size, 1).unwrap()[0];
    handles.iter().map(kind).collect()
}

#[test]
fn a_zstd_table_compresses_its_later_blocks_with_a_dictionary_of_its_first() {
    let entries = pooled_entries(30_000);
    let (fs, t) = build_from(zstd_options(16 << 10), entries.iter().cloned());
    let (plain_fs, plain) = build_from(zstd_options(0), entries.iter().cloned());
    assert!(t.footer().zstd_dictionary && t.footer().version() == 4);
    assert!(!plain.footer().zstd_dictionary && plain.footer().version() == 1);
    // The first 256 KiB of blocks (about 63 of 4 KiB) go out alone, the rest with the
    // dictionary made from them; without one, every block alone.
    let kinds = block_kinds(&t);
    let alone = kinds
        .iter()
        .take_while(|&&k| k == Compression::Zstd as u8)
        .count();
    assert!(
        (55..=64).contains(&alone),
        "{alone} blocks before the dictionary"
    );
    assert!(kinds.len() > 3 * alone, "{} blocks", kinds.len());
    assert!(kinds[alone..].iter().all(|&k| k == Coding::ZstdDict.byte()));
    assert!(
        block_kinds(&plain)
            .iter()
            .all(|&k| k == Compression::Zstd as u8)
    );
    // Every entry reads back, looked up and in order both ways.
    for (k, v) in &entries {
        let uk = crate::key::user_key(k);
        let e = t
            .get(&lookup_key(uk, SeqNo::MAX), uk, true)
            .unwrap()
            .unwrap();
        assert_eq!(&e.value, v);
    }
    let mut it = t.iter(true);
    it.seek_to_first().unwrap();
    let mut forward = Vec::new();
    while it.valid() {
        forward.push((it.key().to_vec(), it.value().to_vec()));
        it.next().unwrap();
    }
    assert!(forward == entries, "a forward scan read other entries");
    it.seek_to_last().unwrap();
    let mut back = Vec::new();
    while it.valid() {
        back.push((it.key().to_vec(), it.value().to_vec()));
        it.prev().unwrap();
    }
    back.reverse();
    assert!(back == entries, "a backward scan read other entries");
    // The whole file, the dictionary's own bytes in it, is smaller.
    let size = |fs: &MemFs| fs.file_size(Path::new("/t/1.sst")).unwrap();
    let (with, without) = (size(&fs), size(&plain_fs));
    assert!(
        with * 10 < without * 9,
        "{with} bytes with a dictionary, {without} without"
    );
}

/// A table's zstd dictionary counts against the budget of what open tables hold, from the
/// read that needs it until the table closes.
#[test]
fn a_zstd_dictionary_counts_against_the_pin_budget_while_its_table_is_open() {
    let entries = pooled_entries(30_000);
    let (fs, built) = build_from(zstd_options(16 << 10), entries.iter().cloned());
    let stored = built
        .properties()
        .unwrap()
        .into_iter()
        .find(|(name, _)| name == super::builder::prop::ZSTD_DICT_SIZE)
        .map(|(_, size)| size as usize)
        .expect("the table stores a dictionary");
    drop(built);
    let budget = Arc::new(PinBudget::new(1 << 30));
    let cache = Arc::new(BlockCache::new(1 << 20));
    let path = Path::new("/t/1.sst");
    let t = Arc::new(
        open_table(&fs, path, 2, cache)
            .unwrap()
            .with_budget(&budget),
    );
    let get = |(k, v): &(Vec<u8>, Vec<u8>)| {
        let uk = crate::key::user_key(k);
        let e = t.get(&lookup_key(uk, SeqNo::MAX), uk, true).unwrap();
        assert_eq!(e.map(|e| e.value).as_ref(), Some(v));
    };
    // The first block was compressed alone: its read needs no dictionary.
    get(&entries[0]);
    assert!(t.held_bytes() > 0);
    assert_eq!(budget.held(), t.held_bytes(), "filter and index alone");
    // The last was compressed with the dictionary.
    get(entries.last().unwrap());
    let dictionary = budget.held() - t.held_bytes();
    assert!(
        dictionary >= stored,
        "{dictionary} bytes counted for a dictionary stored in {stored}"
    );
    // Let go with the filter and index, all of it: the budget then holds nothing.
    budget.release(t.unpin());
    assert_eq!(
        budget.held(),
        0,
        "a table that lets go gives its dictionary's bytes back"
    );
    // The next read that needs it (of a block the cache does not hold) reads it again, and
    // counts it again.
    get(&entries[entries.len() / 2]);
    assert_eq!(budget.held() - t.held_bytes(), dictionary);
    drop(t);
    assert_eq!(
        budget.held(),
        0,
        "a closed table gives its dictionary's bytes back"
    );
}

/// A block the properties name must lie before them: a damaged handle is reported, and
/// sizes no read.
#[test]
fn a_named_block_past_the_properties_is_damage() {
    let (_fs, t) = build(500, IndexKind::Flat, Compression::None);
    let props = t.footer().properties.offset;
    let named = |offset: u64, size: u64| {
        let found = [("at".to_string(), offset), ("len".to_string(), size)];
        t.named_block(&found, "at", "len", "a block")
    };
    let whole = named(0, props - BLOCK_TRAILER_BYTES as u64).unwrap();
    assert_eq!(
        (whole.offset, whole.size),
        (0, props - BLOCK_TRAILER_BYTES as u64)
    );
    for (offset, size) in [
        (0, props - BLOCK_TRAILER_BYTES as u64 + 1),
        (props, 0),
        (1, u64::MAX - 3),
        (u64::MAX, 1),
        (0, 1 << 62),
    ] {
        let e = named(offset, size).unwrap_err();
        assert!(
            matches!(e, Error::Corruption { .. }),
            "offset {offset} size {size}: {e}"
        );
    }
}

/// Damage anywhere in a table with a dictionary, the dictionary's block among the places, is
/// reported as corruption of the file when the table is checked: never a panic, never other
/// entries. So are blocks whose kind says otherwise than how they were written, with their
/// checksums made right again: metadata that claims to need the dictionary (which must not
/// send the dictionary's own read back to itself), and a block compressed with the
/// dictionary that claims to be compressed alone.
#[test]
fn damaged_tables_with_a_dictionary_are_reported() {
    let entries = pooled_entries(6_000);
    let (fs, t) = build_from(zstd_options(16 << 10), entries.into_iter());
    assert!(t.footer().zstd_dictionary);
    assert_eq!(t.verify().unwrap(), 6_000);
    let props = t.properties().unwrap();
    let prop = |name: &str| props.iter().find(|(n, _)| n == name).unwrap().1;
    let dictionary = BlockHandle {
        offset: prop(super::builder::prop::ZSTD_DICT_OFFSET),
        size: prop(super::builder::prop::ZSTD_DICT_SIZE),
    };
    let kinds = block_kinds(&t);
    let with_dictionary = kinds.iter().position(|&k| k == Coding::ZstdDict.byte());
    let data_block = t.data_block_handles().unwrap()[with_dictionary.unwrap()];
    let (properties, index, filter) = (t.footer().properties, t.footer().index, t.footer().filter);
    let size = fs.file_size(Path::new("/t/1.sst")).unwrap() as usize;
    drop(t);
    let original = fs.read_all(Path::new("/t/1.sst")).unwrap();
    let reported = |data: &[u8], what: &str| {
        let data = data.to_vec();
        let (done, checked) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let fs2 = MemFs::new();
            fs2.create_dir_all(Path::new("/t")).unwrap();
            let mut f = fs2.create(Path::new("/t/1.sst")).unwrap();
            f.append(&data).unwrap();
            drop(f);
            let cache = Arc::new(BlockCache::new(1 << 20));
            let opened = open_table(&fs2, Path::new("/t/1.sst"), 1, cache);
            let _ = done.send(opened.and_then(|t| Arc::new(t).verify()));
        });
        // A read that waits on itself (a lock it holds) fails the test rather than hang it.
        let verified = checked
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{what}: the check never returned"));
        match verified {
            Err(Error::Corruption { file, .. }) => assert_eq!(file, Path::new("/t/1.sst")),
            Err(other) => panic!("{what}: unexpected error {other}"),
            Ok(_) => panic!("{what}: not detected"),
        }
    };
    let (start, len) = (dictionary.offset as usize, dictionary.size as usize);
    for pos in (0..size)
        .step_by(size / 150)
        .chain((start..start + len).step_by(997))
    {
        let mut data = original.clone();
        data[pos] ^= 0x40;
        reported(&data, &format!("a flip at {pos}"));
    }
    let relabelled = [
        (properties, Coding::ZstdDict),
        (dictionary, Coding::ZstdDict),
        // Read while the table loads its filter and index: the dictionary's load must not
        // wait on that load.
        (index, Coding::ZstdDict),
        (filter, Coding::ZstdDict),
        (data_block, Coding::Alone(Compression::Zstd)),
    ];
    for (h, kind) in relabelled {
        let (start, end) = (h.offset as usize, (h.offset + h.size) as usize);
        let mut data = original.clone();
        let trailer = super::format::block_trailer(&data[start..end], kind);
        data[end..end + BLOCK_TRAILER_BYTES].copy_from_slice(&trailer);
        reported(&data, &format!("the block at {start} relabelled {kind:?}"));
    }
    // A dictionary block whose bytes lost zstd's dictionary magic, resealed: not a
    // dictionary of raw content either.
    let (start, end) = (start, start + len);
    let mut data = original.clone();
    data[start..start + 4].fill(0);
    let trailer = super::format::block_trailer(&data[start..end], Coding::Alone(Compression::None));
    data[end..end + BLOCK_TRAILER_BYTES].copy_from_slice(&trailer);
    reported(&data, "a dictionary without its magic");
}

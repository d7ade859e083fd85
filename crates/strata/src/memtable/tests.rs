use super::arena::CHUNK_BYTES;
use super::iter::MemTableIter;
use super::*;
use crate::iter::InternalIterator;
use crate::key::lookup_key;
use crate::key::user_key;

/// The user key of the entry a memtable cursor is on (test helper).
fn current_user_key(it: &MemTableIter) -> Vec<u8> {
    crate::key::user_key(it.key()).to_vec()
}

#[test]
fn get_sees_the_newest_visible_version() {
    let m = MemTable::new(FileNumber(1), 4096, KeyOrder::Bytewise, None);
    m.add(SeqNo(1), ValueKind::Value, b"k", b"v1");
    m.add(SeqNo(2), ValueKind::Value, b"k", b"v2");
    m.add(SeqNo(3), ValueKind::Delete, b"k", b"");
    assert_eq!(
        m.get(b"k", SeqNo(1)),
        Lookup::Found(b"v1".to_vec(), SeqNo(1))
    );
    assert_eq!(
        m.get(b"k", SeqNo(2)),
        Lookup::Found(b"v2".to_vec(), SeqNo(2))
    );
    assert_eq!(m.get(b"k", SeqNo(3)), Lookup::Deleted(SeqNo(3)));
    assert_eq!(m.get(b"k", SeqNo(0)), Lookup::Absent);
    assert_eq!(m.get(b"j", SeqNo(9)), Lookup::Absent);
}

#[test]
fn hash_lookups_agree_with_the_list_at_every_snapshot() {
    // A tiny table: few buckets, long chains mixing keys and versions.
    let m = MemTable::new(FileNumber(1), 64, KeyOrder::Bytewise, None);
    let mut seq = 0;
    for round in 0..5u64 {
        for k in 0..200u64 {
            if (k + round) % 3 == 0 {
                continue;
            }
            seq += 1;
            let key = format!("k{k}");
            let kind = if (k * round) % 7 == 3 {
                ValueKind::Delete
            } else {
                ValueKind::Value
            };
            m.add(
                SeqNo(seq),
                kind,
                key.as_bytes(),
                format!("{round}").as_bytes(),
            );
        }
    }
    for at in (0..=seq + 1).step_by(37) {
        for k in 0..210u64 {
            let key = format!("k{k}");
            assert_eq!(
                m.get(key.as_bytes(), SeqNo(at)),
                m.get_by_list(key.as_bytes(), SeqNo(at)),
                "key {key} at {at}"
            );
        }
    }
}

#[test]
fn large_and_small_entries_share_the_arena() {
    let m = MemTable::new(FileNumber(1), 4096, KeyOrder::Bytewise, None);
    let big = vec![7u8; CHUNK_BYTES];
    for i in 0..3000u64 {
        let key = format!("{i:06}");
        let value: &[u8] = if i % 1000 == 0 { &big } else { key.as_bytes() };
        m.add(SeqNo(i + 1), ValueKind::Value, key.as_bytes(), value);
    }
    for i in 0..3000u64 {
        let key = format!("{i:06}");
        let want = if i % 1000 == 0 {
            big.clone()
        } else {
            key.clone().into_bytes()
        };
        assert!(
            matches!(m.get(key.as_bytes(), SeqNo::MAX), Lookup::Found(v, _) if v == want),
            "{key}"
        );
    }
    assert!(m.arena_bytes() >= m.approximate_size());
    assert!(m.approximate_size() >= 3 * CHUNK_BYTES);
}

#[test]
fn iterates_in_order_both_ways() {
    let m = Arc::new(MemTable::new(FileNumber(1), 4096, KeyOrder::Bytewise, None));
    for (i, k) in [5u8, 1, 9, 3, 7].iter().enumerate() {
        m.add(SeqNo(i as u64 + 1), ValueKind::Value, &[*k], b"");
    }
    let mut it = m.iter();
    it.seek_to_first().unwrap();
    let mut fwd = Vec::new();
    while it.valid() {
        fwd.push(current_user_key(&it)[0]);
        it.next().unwrap();
    }
    assert_eq!(fwd, vec![1, 3, 5, 7, 9]);
    it.seek_to_last().unwrap();
    let mut back = Vec::new();
    while it.valid() {
        back.push(current_user_key(&it)[0]);
        it.prev().unwrap();
    }
    assert_eq!(back, vec![9, 7, 5, 3, 1]);
    it.seek(&lookup_key(&[4], SeqNo::MAX)).unwrap();
    assert_eq!(current_user_key(&it), vec![5]);
}

/// Every key of the table, in list order.
fn listed_keys(m: &Arc<MemTable>) -> Vec<Vec<u8>> {
    let mut it = m.iter();
    it.seek_to_first().unwrap();
    let mut keys = Vec::new();
    while it.valid() {
        keys.push(it.key().to_vec());
        it.next().unwrap();
    }
    keys
}

#[test]
fn sort_prefixes_order_keys_as_the_keys_do() {
    // Short keys over the smallest, a middle and the largest byte, and the same around
    // the 16-byte mark.
    let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
    for _ in 0..3 {
        let longer: Vec<Vec<u8>> = keys
            .iter()
            .flat_map(|k| [0u8, 1, 255].map(|b| [k.as_slice(), &[b]].concat()))
            .collect();
        keys.extend(longer);
    }
    let long: Vec<Vec<u8>> = keys.iter().map(|k| [&[7u8; 14][..], k].concat()).collect();
    keys.extend(long);
    let internal: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| crate::key::internal_key(k, SeqNo(1), ValueKind::Value))
        .collect();
    for a in &internal {
        for b in &internal {
            let (pa, pb) = (sort_prefix(a), sort_prefix(b));
            if pa != pb {
                assert_eq!(pa.cmp(&pb), user_key(a).cmp(user_key(b)), "{a:?} {b:?}");
            }
        }
    }
}

#[test]
fn iterators_see_every_entry_added_before_them_across_batches() {
    let m = Arc::new(MemTable::new(
        FileNumber(1),
        1 << 20,
        KeyOrder::Bytewise,
        None,
    ));
    let mut model = std::collections::BTreeSet::new();
    let mut x = 7u64;
    let mut seq = 0;
    // Batches of several sizes, an iterator after each: some nodes are listed by the
    // writer's batches, the rest by the iterator.
    for step in [
        1usize,
        100,
        LIST_BATCH - 1,
        1,
        LIST_BATCH + 17,
        3 * LIST_BATCH,
        5,
    ] {
        for _ in 0..step {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            seq += 1;
            let key = format!("{:08}", (x >> 33) % 50_000);
            m.add(SeqNo(seq), ValueKind::Value, key.as_bytes(), b"v");
            model.insert(crate::key::internal_key(
                key.as_bytes(),
                SeqNo(seq),
                ValueKind::Value,
            ));
        }
        let keys = listed_keys(&m);
        assert_eq!(keys.len(), model.len());
        let mut want: Vec<Vec<u8>> = model.iter().cloned().collect();
        want.sort_by(|a, b| KeyOrder::Bytewise.internal(a, b));
        assert_eq!(keys, want, "after {seq} entries");
    }
}

#[test]
fn concurrent_inserts_and_reads_lose_nothing() {
    let m = Arc::new(MemTable::new(FileNumber(1), 4096, KeyOrder::Bytewise, None));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                // Together more than a batch, so that batches are listed while other
                // threads add.
                for i in 0..(LIST_BATCH as u64 / 2) {
                    let seq = t * 1_000_000 + i + 1;
                    let key = format!("{:08}", i * 4 + t);
                    m.add(SeqNo(seq), ValueKind::Value, key.as_bytes(), key.as_bytes());
                    assert!(matches!(
                        m.get(key.as_bytes(), SeqNo::MAX),
                        Lookup::Found(..)
                    ));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let total = 4 * (LIST_BATCH as u64 / 2);
    assert_eq!(m.len(), total);
    let mut it = m.iter();
    it.seek_to_first().unwrap();
    let mut n = 0;
    let mut last: Option<Vec<u8>> = None;
    while it.valid() {
        if let Some(l) = &last {
            assert_eq!(KeyOrder::Bytewise.internal(l, it.key()), CmpOrdering::Less);
        }
        last = Some(it.key().to_vec());
        n += 1;
        it.next().unwrap();
    }
    assert_eq!(n, total);
}

fn recycling(pool: &Arc<ChunkPool>, family: u32) -> Option<Recycling> {
    Some(Recycling {
        pool: pool.clone(),
        family,
    })
}

#[test]
fn a_memtable_on_recycled_memory_holds_only_its_own_entries() {
    let pool = Arc::new(ChunkPool::new(64 << 20));
    let capacity = 1 << 20;
    // The old memtable's nodes fill chunks with towers of live pointers, and its keys fill
    // the hash chains.
    let old = MemTable::new(
        FileNumber(1),
        capacity,
        KeyOrder::Bytewise,
        recycling(&pool, 0),
    );
    for i in 0..30_000u64 {
        let key = format!("old{:08}", i * 7_919 % 30_011);
        old.add(SeqNo(i + 1), ValueKind::Value, key.as_bytes(), &[0xab; 100]);
    }
    old.recycle_on_drop();
    drop(old);
    let kept = pool.bytes();
    assert!(kept >= 3 * CHUNK_BYTES, "the pool kept {kept} bytes");
    let buckets = capacity / BYTES_PER_BUCKET * 8;
    assert_eq!(pool.bucket_bytes(), buckets);

    let m = Arc::new(MemTable::new(
        FileNumber(2),
        capacity,
        KeyOrder::Bytewise,
        recycling(&pool, 0),
    ));
    let mut model = std::collections::BTreeMap::new();
    for i in 0..20_000u64 {
        let key = format!("new{:08}", i * 104_729 % 20_011);
        let value = format!("value {i}");
        m.add(
            SeqNo(i + 1),
            ValueKind::Value,
            key.as_bytes(),
            value.as_bytes(),
        );
        model.insert(key, value);
    }
    assert!(
        pool.bytes() < kept - buckets,
        "the new memtable took no chunk from the pool"
    );
    assert_eq!(
        pool.bucket_bytes(),
        0,
        "the new memtable took no bucket table"
    );
    // A tower or a bucket left as the old memtable had it would lead to its entries.
    let keys: Vec<Vec<u8>> = listed_keys(&m)
        .iter()
        .map(|k| user_key(k).to_vec())
        .collect();
    let want: Vec<Vec<u8>> = model.keys().map(|k| k.as_bytes().to_vec()).collect();
    assert_eq!(keys, want);
    for (key, value) in &model {
        match m.get(key.as_bytes(), SeqNo::MAX) {
            Lookup::Found(v, _) => assert_eq!(v, value.as_bytes(), "{key}"),
            other => panic!("{key}: {other:?}"),
        }
    }
    for i in (0..30_011u64).step_by(13) {
        let key = format!("old{i:08}");
        assert_eq!(m.get(key.as_bytes(), SeqNo::MAX), Lookup::Absent, "{key}");
    }
}

#[test]
fn only_a_memtable_marked_for_recycling_gives_its_memory_to_the_pool() {
    let pool = Arc::new(ChunkPool::new(64 << 20));
    let on_pool = |family| {
        MemTable::new(
            FileNumber(1),
            1 << 20,
            KeyOrder::Bytewise,
            recycling(&pool, family),
        )
    };
    for recycle in [false, true] {
        let m = on_pool(0);
        for i in 0..20_000u64 {
            m.add(
                SeqNo(i + 1),
                ValueKind::Value,
                format!("{i:08}").as_bytes(),
                &[1; 100],
            );
        }
        if recycle {
            m.recycle_on_drop();
        }
        drop(m);
        assert_eq!(pool.bytes() > 2 * CHUNK_BYTES, recycle);
    }
    // Another family's memtable takes no bucket table, and no chunk for its first.
    let kept = pool.bytes();
    let other = on_pool(1);
    other.add(SeqNo(1), ValueKind::Value, b"k", b"v");
    assert_eq!(pool.bytes(), kept);
    let m = on_pool(0);
    assert_eq!(pool.bucket_bytes(), 0);
    drop(m);
    pool.clear();
    assert_eq!(pool.bytes(), 0);
}

/// Entries added together (`MemTable::adds`) are in their hash chains for lookups as each is
/// added, and once the adds drop, counted and listed exactly as the same entries added one by
/// one: the same entries in the same order, the same length and bytes, through batches that
/// reach the list's threshold.
#[test]
fn entries_added_together_read_and_count_as_entries_added_alone() {
    let alone = Arc::new(MemTable::new(
        FileNumber(1),
        1 << 20,
        KeyOrder::Bytewise,
        None,
    ));
    let together = Arc::new(MemTable::new(
        FileNumber(1),
        1 << 20,
        KeyOrder::Bytewise,
        None,
    ));
    let mut x = 11u64;
    let mut seq = 0;
    for group in [1usize, 100, LIST_BATCH + 3, 7, 2 * LIST_BATCH] {
        let mut adds = together.adds(group);
        for _ in 0..group {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            seq += 1;
            let key = format!("{:08}", (x >> 33) % 80_000);
            let value = format!("v{seq}");
            let kind = match seq % 9 {
                0 => ValueKind::Delete,
                _ => ValueKind::Value,
            };
            alone.add(SeqNo(seq), kind, key.as_bytes(), value.as_bytes());
            adds.add(SeqNo(seq), kind, key.as_bytes(), value.as_bytes());
            assert_eq!(
                together.get(key.as_bytes(), SeqNo(seq)),
                alone.get(key.as_bytes(), SeqNo(seq)),
                "a lookup of an entry just added"
            );
        }
        drop(adds);
        assert_eq!(together.len(), alone.len());
        assert_eq!(together.approximate_size(), alone.approximate_size());
        assert!(
            listed_keys(&together) == listed_keys(&alone),
            "after {seq} entries"
        );
    }
}

/// A group larger than the list's largest batch is counted and queued in parts as it is
/// added, not all at once when it ends.
#[test]
fn a_very_large_group_goes_to_the_list_in_parts() {
    let m = Arc::new(MemTable::new(
        FileNumber(1),
        1 << 20,
        KeyOrder::Bytewise,
        None,
    ));
    let total = MAX_LIST_BATCH + 10;
    let mut adds = m.adds(total);
    for i in 0..total {
        let key = format!("{i:08}");
        adds.add(SeqNo(i as u64 + 1), ValueKind::Value, key.as_bytes(), b"v");
    }
    assert_eq!(
        m.len(),
        MAX_LIST_BATCH as u64,
        "the first part, before the group ends"
    );
    drop(adds);
    assert_eq!(m.len(), total as u64);
    let want: Vec<Vec<u8>> = (0..total).map(|i| format!("{i:08}").into_bytes()).collect();
    assert!(
        listed_user_keys(&m) == want,
        "the list holds every key in order"
    );
}

fn listed_user_keys(m: &Arc<MemTable>) -> Vec<Vec<u8>> {
    listed_keys(m)
        .iter()
        .map(|k| user_key(k).to_vec())
        .collect()
}

/// Byte order, except that it panics while its flag is set (each test has its own).
struct PanickyOrder(Arc<AtomicBool>);

impl crate::comparator::Comparator for PanickyOrder {
    fn name(&self) -> &str {
        "panicky"
    }
    fn compare(&self, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        assert!(!self.0.load(Ordering::SeqCst), "the comparator fails");
        a.cmp(b)
    }
}

/// A memtable ordered by a [`PanickyOrder`], and the flag that makes it panic.
fn panicky_memtable() -> (Arc<MemTable>, Arc<AtomicBool>) {
    let panics = Arc::new(AtomicBool::new(false));
    let order = KeyOrder::Custom(Arc::new(PanickyOrder(panics.clone())));
    let m = Arc::new(MemTable::new(FileNumber(1), 1 << 20, order, None));
    (m, panics)
}

/// A writer that panics with a group half added (another family's comparator failing, in
/// the database) leaves its entries queued and counted; the group's end does not call the
/// comparator again, which would panic during the unwinding and abort the process.
#[test]
fn a_group_dropped_by_a_panic_queues_its_entries_without_sorting_them() {
    let (m, panics) = panicky_memtable();
    let total = LIST_BATCH + 10;
    panics.store(true, Ordering::SeqCst);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut adds = m.adds(total);
        for i in 0..total {
            let key = format!("{i:08}");
            adds.add(SeqNo(i as u64 + 1), ValueKind::Value, key.as_bytes(), b"v");
        }
        panic!("the writer fails");
    }));
    panics.store(false, Ordering::SeqCst);
    assert!(unwound.is_err());
    assert_eq!(m.len(), total as u64);
    let want: Vec<Vec<u8>> = (0..total).map(|i| format!("{i:08}").into_bytes()).collect();
    assert!(
        listed_user_keys(&m) == want,
        "the list holds every key in order"
    );
}

/// A comparator that panics while a large group's first part is being listed leaves that
/// part counted once: the unwinding drop does not queue the nodes again.
#[test]
fn a_panic_while_a_group_part_is_listed_counts_it_once() {
    let (m, panics) = panicky_memtable();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut adds = m.adds(MAX_LIST_BATCH);
        for i in 0..MAX_LIST_BATCH {
            if i == MAX_LIST_BATCH - 1 {
                panics.store(true, Ordering::SeqCst);
            }
            let key = format!("{i:08}");
            adds.add(SeqNo(i as u64 + 1), ValueKind::Value, key.as_bytes(), b"v");
        }
    }));
    panics.store(false, Ordering::SeqCst);
    assert!(unwound.is_err(), "the listing of the first part panicked");
    assert_eq!(m.len(), MAX_LIST_BATCH as u64);
}

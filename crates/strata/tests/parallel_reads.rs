//! Batched lookups over real files: the data blocks of a batch are read together (through
//! io_uring where the kernel allows it), and every answer is the one a lookup at a time
//! gives, found keys, missing keys, overwritten and deleted ones alike.

mod common;

use std::collections::BTreeMap;

use strata::{Db, Options, ReadOptions};

#[test]
fn batched_lookups_read_their_blocks_together_and_answer_as_single_ones() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        // Blocks come from the files: a small cache, no mapping.
        block_cache_bytes: 64 * 1024,
        table_map_bytes: 0,
        write_buffer_size: 256 * 1024,
        target_file_size: 256 * 1024,
        ..common::options()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let mut rng = common::Rng(99);
    let mut model = BTreeMap::new();
    for i in 0..60_000u64 {
        let k = format!("key{:08}", rng.below(40_000)).into_bytes();
        if i % 11 == 0 {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    db.flush().unwrap();
    let start = std::time::Instant::now();
    while db.stats().compaction_pending {
        assert!(start.elapsed().as_secs() < 60, "compactions did not settle");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for round in 0..20 {
        // Present, absent and deleted keys mixed, some twice in a batch.
        let keys: Vec<Vec<u8>> = (0..64)
            .map(|j| match j % 9 {
                8 => format!("key{:08}x", rng.below(40_000)).into_bytes(),
                7 if j > 0 => format!("key{:08}", (round * 64 + j - 1) % 40_000).into_bytes(),
                _ => format!("key{:08}", rng.below(40_000)).into_bytes(),
            })
            .collect();
        let batched = db.get_many(&keys, &ReadOptions::default());
        for (k, got) in keys.iter().zip(batched) {
            let got = got.unwrap();
            assert_eq!(got.as_ref(), model.get(k), "round {round}: {k:?}");
            assert_eq!(got, db.get(k).unwrap(), "round {round}: {k:?}");
        }
    }
    let parallel = db.stats().parallel_block_reads;
    if parallel == 0 {
        assert!(
            std::env::var_os("STRATA_REQUIRE_IO_URING").is_none(),
            "no block was read in parallel, and STRATA_REQUIRE_IO_URING is set"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: batched_lookups_read_their_blocks_together: this kernel refuses \
              io_uring; batched lookups read one block at a time\n",
        );
    }
}

#[test]
fn a_seek_reads_its_levels_blocks_together_and_lands_where_the_model_says() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        // Room for a few data blocks in each shard, a twentieth of the database.
        block_cache_bytes: 256 * 1024,
        table_map_bytes: 0,
        write_buffer_size: 128 * 1024,
        target_file_size: 128 * 1024,
        // The tree's shape is the test's own: no compaction but the one it asks for.
        level0_compaction_trigger: 100,
        level0_slowdown_trigger: 200,
        level0_stop_trigger: 300,
        read_triggered_compaction: false,
        idle_merge_after: None,
        ..common::options()
    };
    let db = Db::open(dir.path(), opts).unwrap();
    let mut rng = common::Rng(7);
    let mut model = BTreeMap::new();
    for i in 0..80_000u64 {
        if i == 60_000 {
            // The first writes go down into one sorted level; the rest stay in level 0.
            db.compact_range(None, None).unwrap();
        }
        let k = format!("key{:08}", rng.below(50_000)).into_bytes();
        if i % 13 == 0 {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("value-{i}-{}", "v".repeat(100)).into_bytes();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    db.flush().unwrap();
    let stats = db.stats();
    let level0 = stats.levels.first().map_or(0, |l| l.files);
    let levels = stats.levels.iter().skip(1).filter(|l| l.files > 0).count();
    assert!(
        level0 >= 3 && levels == 1,
        "{level0} level-0 tables, {levels} levels"
    );
    let (before, misses_before) = (stats.parallel_block_reads, stats.block_cache_misses);
    let mut it = db.iter(&ReadOptions::default()).unwrap();
    for round in 0..2_000 {
        let target = format!("key{:08}", rng.below(50_100)).into_bytes();
        it.seek(&target).unwrap();
        let want = model.range(target.clone()..).next();
        let got = it.valid().then(|| (it.key().to_vec(), it.value().to_vec()));
        assert_eq!(
            got.as_ref().map(|(k, v)| (k, v)),
            want,
            "round {round}: seek to {target:?}"
        );
        // The cursor goes on from there as any other.
        if it.valid() {
            it.next().unwrap();
            let next = model.range(target.clone()..).nth(1);
            let got = it.valid().then(|| (it.key().to_vec(), it.value().to_vec()));
            assert_eq!(
                got.as_ref().map(|(k, v)| (k, v)),
                next,
                "round {round}: next"
            );
        }
    }
    let stats = db.stats();
    let parallel = stats.parallel_block_reads - before;
    // The blocks read together went into the cache, where the cursors' seeks found them:
    // few misses besides those reads (the blocks a cursor steps into after its seek).
    let misses = stats.block_cache_misses - misses_before;
    eprintln!("seeks: {parallel} blocks read together, {misses} cache misses");
    assert!(
        parallel == 0 || 2 * misses < 3 * parallel,
        "{misses} cache misses for {parallel} blocks read together"
    );
    if parallel == 0 {
        assert!(
            std::env::var_os("STRATA_REQUIRE_IO_URING").is_none(),
            "no seek read its blocks together, and STRATA_REQUIRE_IO_URING is set"
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIPPED: a_seek_reads_its_levels_blocks_together: this kernel refuses io_uring; \
              seeks read one block at a time\n",
        );
    }
}

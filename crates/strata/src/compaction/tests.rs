use super::*;
use crate::key::internal_key;
use crate::key::{FileNumber, Level, SeqNo, ValueKind};
use crate::version::TableStore;
use crate::version::edit::NewFile;

/// A version from `(level, smallest, largest, size)` rows; the files exist only as
/// metadata, which is all the picker reads.
fn version(rows: &[(usize, &str, &str, u64)]) -> Arc<Version> {
    let store = Arc::new(TableStore::in_memory());
    let mut levels: [Vec<Arc<FileMeta>>; NUM_LEVELS] = Default::default();
    for (i, &(level, smallest, largest, size)) in rows.iter().enumerate() {
        let f = NewFile {
            level: Level(level),
            number: FileNumber(i as u64 + 1),
            size,
            smallest: internal_key(smallest.as_bytes(), SeqNo(1), ValueKind::Value),
            largest: internal_key(largest.as_bytes(), SeqNo(1), ValueKind::Value),
            entries: 1,
            deletions: 0,
            range_deletions: 0,
            filter_millibits: None,
            family: 0,
        };
        levels[level].push(Arc::new(FileMeta::new(store.clone(), &f)));
    }
    let mut v = Version {
        levels,
        ..Version::default()
    };
    v.index_files();
    Arc::new(v)
}

fn picked(v: &Arc<Version>, pointer: &str) -> (FileNumber, Vec<FileNumber>) {
    let targets = LevelTargets {
        l0_trigger: 4,
        level1_bytes: 100,
        size_ratio: 10,
        policy: MergePolicy::Leveling,
        buffer_bytes: 10,
    };
    let mut pointers: [Vec<u8>; NUM_LEVELS] = Default::default();
    if !pointer.is_empty() {
        pointers[1] = internal_key(pointer.as_bytes(), SeqNo(1), ValueKind::Value);
    }
    let c = pick(v, &targets, &[false; NUM_LEVELS], &pointers, None)
        .expect("level 1 is over its target");
    assert_eq!(c.level, 1);
    let next = c.next_inputs.iter().map(|f| f.number).collect();
    (c.inputs[0].number, next)
}

/// What the tiered picker chooses: (first input level, output level, levels merged in
/// between, whether the output level's files are merged in).
fn tiered(v: &Arc<Version>, policy: MergePolicy) -> Option<(usize, usize, Vec<usize>, bool)> {
    let targets = LevelTargets {
        l0_trigger: 2,
        level1_bytes: 100,
        size_ratio: 4,
        policy,
        buffer_bytes: 10,
    };
    assert_eq!(targets.physical(1), 1..4);
    assert_eq!(targets.physical(2), 4..7);
    let none = Default::default();
    let c = pick(v, &targets, &[false; NUM_LEVELS], &none, None)?;
    let between = c.between.iter().map(|(l, _)| *l).collect();
    Some((c.level, c.output_level, between, !c.next_inputs.is_empty()))
}

#[test]
fn tiering_stacks_runs_from_the_bottom_slot_up_and_merges_a_full_level_down() {
    use MergePolicy::{LazyLeveling, Tiering};
    // Level 0 over its trigger, level 1 empty: into level 1's bottom slot.
    let v = version(&[(0, "a", "z", 10), (0, "a", "z", 10)]);
    assert_eq!(tiered(&v, Tiering), Some((0, 3, vec![], false)));
    // One run there already: the next goes above it, not merged with it.
    let v = version(&[(0, "a", "z", 10), (0, "a", "z", 10), (3, "a", "z", 20)]);
    assert_eq!(tiered(&v, Tiering), Some((0, 2, vec![], false)));
    // Under lazy leveling the deepest level, under its capacity (two 10-byte buffers
    // times 4), is leveled.
    assert_eq!(tiered(&v, LazyLeveling), Some((0, 3, vec![], true)));
    // Past its capacity it goes down with level 0 into a new deepest level.
    let v = version(&[(0, "a", "z", 10), (0, "a", "z", 10), (3, "a", "z", 200)]);
    assert_eq!(tiered(&v, LazyLeveling), Some((0, 6, vec![3], false)));
    // Tiering adds a run above it instead.
    assert_eq!(tiered(&v, Tiering), Some((0, 2, vec![], false)));
    // A full level 1 (three slots) merges with level 0 into one run of level 2, in its
    // bottom slot: four runs' worth.
    let full = [(1, "a", "z", 20), (2, "a", "z", 20), (3, "a", "z", 20)];
    let mut rows = vec![(0, "a", "z", 10), (0, "a", "z", 10)];
    rows.extend(full);
    let v = version(&rows);
    assert_eq!(tiered(&v, Tiering), Some((0, 6, vec![1, 2, 3], false)));
    // With a run in level 2 already, above it.
    rows.push((6, "a", "z", 60));
    let v = version(&rows);
    assert_eq!(tiered(&v, Tiering), Some((0, 5, vec![1, 2, 3], false)));
    // Under lazy leveling level 2, the deepest, is leveled: merged into its run.
    assert_eq!(tiered(&v, LazyLeveling), Some((0, 6, vec![1, 2, 3], true)));
    // Nothing to do: level 0 under its trigger, no level full.
    let v = version(&[(0, "a", "z", 10), (3, "a", "z", 20), (6, "a", "z", 60)]);
    assert_eq!(tiered(&v, Tiering), None);
}

#[test]
fn tiering_at_ratio_2_carries_full_levels_down_and_never_runs_out_of_levels() {
    let targets = LevelTargets {
        l0_trigger: 2,
        level1_bytes: 100,
        size_ratio: 2,
        policy: MergePolicy::Tiering,
        buffer_bytes: 10,
    };
    let none = Default::default();
    let picked = |rows: &[(usize, &str, &str, u64)]| {
        let v = version(rows);
        let c = pick(&v, &targets, &[false; NUM_LEVELS], &none, None)?;
        let between: Vec<usize> = c.between.iter().map(|(l, _)| *l).collect();
        Some((c.level, c.output_level, between, !c.next_inputs.is_empty()))
    };
    // One slot a level: levels 1 to 3 full, so level 0 and all three merge into level 4.
    let mut rows = vec![(0, "a", "z", 1), (0, "a", "z", 1)];
    rows.extend([(1, "a", "z", 2), (2, "a", "z", 4), (3, "a", "z", 8)]);
    assert_eq!(picked(&rows), Some((0, 4, vec![1, 2, 3], false)));
    // Every level full, the deepest included: all of it into the deepest level.
    let mut rows = vec![(0, "a", "z", 1), (0, "a", "z", 1)];
    rows.extend((1..NUM_LEVELS).map(|l| (l, "a", "z", 1 << l.min(40))));
    let deepest = NUM_LEVELS - 1;
    let between: Vec<usize> = (1..deepest).collect();
    assert_eq!(picked(&rows), Some((0, deepest, between, true)));
}

#[test]
fn level_compaction_takes_the_file_with_least_beneath_it_per_byte() {
    // Level 1 (files 1-3) is over its 100 bytes. File 2 has 10 bytes beneath per byte of
    // its own, file 1 has 2, file 3 has 1.5: file 3 goes first, whatever the pointer.
    let v = version(&[
        (1, "a", "c", 50),
        (1, "d", "f", 10),
        (1, "g", "i", 80),
        (2, "a", "b", 100),
        (2, "d", "e", 100),
        (2, "g", "h", 120),
    ]);
    for pointer in ["", "c", "f", "i"] {
        assert_eq!(picked(&v, pointer), (FileNumber(3), vec![FileNumber(6)]));
    }
}

#[test]
fn an_idle_merge_takes_a_tree_out_of_shape_into_its_deepest_level() {
    let targets = LevelTargets {
        l0_trigger: 4,
        level1_bytes: 100,
        size_ratio: 10,
        policy: MergePolicy::Leveling,
        buffer_bytes: 10,
    };
    // Levels 0 and 1 hold 300 bytes above level 2's 600: more than 2/9 of it.
    let v = version(&[
        (0, "a", "z", 100),
        (1, "a", "m", 100),
        (1, "n", "z", 100),
        (2, "a", "z", 600),
    ]);
    let c = idle_merge(&v, &targets).expect("out of shape");
    assert_eq!((c.level, c.output_level, c.idle_merge), (0, 2, true));
    let numbers: Vec<u64> = c.input_files().map(|(_, f)| f.number.0).collect();
    assert_eq!(numbers, [1, 2, 3, 4]);
    let levels: Vec<usize> = c.input_files().map(|(l, _)| l).collect();
    assert_eq!(levels, [0, 1, 1, 2]);
    assert!(!c.is_trivial_move());

    // In shape: 100 bytes above 600 is under 2/9 of it, memtable included.
    let v = version(&[(1, "a", "m", 100), (2, "a", "z", 600)]);
    assert!(idle_merge(&v, &targets).is_none());
    assert!(idle_merge_output_level(&v, &targets, 33).is_none());
    assert!(idle_merge_output_level(&v, &targets, 34).is_some());

    // A single sorted run has nothing to merge, nor has an empty tree; a memtable over
    // one run is two.
    let v = version(&[(1, "a", "m", 100), (1, "n", "z", 100)]);
    assert!(idle_merge(&v, &targets).is_none());
    assert!(idle_merge_output_level(&v, &targets, 100).is_some());
    assert!(idle_merge(&version(&[]), &targets).is_none());

    // Level 0 alone goes into level 1.
    let v = version(&[(0, "a", "z", 10), (0, "b", "y", 10)]);
    let c = idle_merge(&v, &targets).expect("two runs in level 0");
    assert_eq!((c.level, c.output_level), (0, 1));

    // 400 bytes exceed level 1's target of 100: they go to level 2 (1,000), level 1
    // merged in on the way.
    let v = version(&[(0, "a", "z", 100), (1, "a", "m", 150), (1, "n", "z", 150)]);
    let c = idle_merge(&v, &targets).expect("level 0 is a third of level 1");
    assert_eq!((c.output_level, c.next_inputs.len()), (2, 0));
    let levels: Vec<usize> = c.input_files().map(|(l, _)| l).collect();
    assert_eq!(levels, [0, 1, 1]);
}

#[test]
fn equal_files_take_turns_from_the_pointer() {
    // Nothing beneath any file: each would move down without a rewrite, so the pointer
    // decides, wrapping around at the end of the level.
    let v = version(&[(1, "a", "c", 60), (1, "d", "f", 60), (1, "g", "i", 60)]);
    assert_eq!(picked(&v, "").0, FileNumber(1));
    assert_eq!(picked(&v, "c").0, FileNumber(2));
    assert_eq!(picked(&v, "f").0, FileNumber(3));
    assert_eq!(picked(&v, "i").0, FileNumber(1));
}

/// Options as a database opened with the defaults would give a flush, `bits` a key.
fn flush_base(bits: f64) -> crate::sstable::TableOptions {
    let o = crate::Options::default();
    crate::sstable::TableOptions {
        block_size: o.block_size,
        restart_interval: o.block_restart_interval,
        bloom_bits_per_key: bits,
        filter_format: o.filter_format,
        compression: o.compression,
        index_kind: o.index_kind,
        filter_kind: o.filter_kind,
        align_blocks: false,
        zstd_dictionary_bytes: o.zstd_dictionary_bytes,
        order: crate::comparator::KeyOrder::Bytewise,
    }
}

#[test]
fn a_flush_over_tables_past_half_the_memory_matches_ribbon_false_positives_with_bloom() {
    use crate::filter_policy::FilterFormat;
    use crate::sstable::filter::false_positive_rate;
    let memory = 384 << 20;
    let big = version(&[(2, "a", "z", 1 << 30)]);
    let opts = flush_filter(flush_base(10.0), &[big], memory);
    assert_eq!(opts.filter_format, FilterFormat::Bloom);
    // A Ribbon filter of 10 bits a key holds 9-bit fingerprints: 1 false positive in 512.
    let ribbon = 1.0 / 512.0;
    let bits = opts.bloom_bits_per_key;
    assert!(false_positive_rate(bits) <= ribbon, "{bits} bits");
    assert!(
        false_positive_rate(bits - 0.25) > ribbon,
        "{bits} bits: not the fewest"
    );
    assert!(bits > 12.0 && bits < 20.0, "{bits} bits");
}

#[test]
fn a_flush_of_a_database_in_memory_keeps_the_bits_asked_for() {
    use crate::filter_policy::FilterFormat;
    let small = version(&[(2, "a", "z", 10 << 20)]);
    let opts = flush_filter(flush_base(10.0), &[small], 384 << 20);
    assert_eq!(opts.filter_format, FilterFormat::Bloom);
    assert_eq!(opts.bloom_bits_per_key, 10.0);
    // Asked for Bloom outright, a flush keeps its bits whatever the database's size.
    let big = version(&[(2, "a", "z", 1 << 30)]);
    let bloom = crate::sstable::TableOptions {
        filter_format: FilterFormat::Bloom,
        ..flush_base(10.0)
    };
    assert_eq!(
        flush_filter(bloom, std::slice::from_ref(&big), 384 << 20).bloom_bits_per_key,
        10.0
    );
    // Asked for Ribbon outright, a flush writes Ribbon filters of the bits asked for.
    let ribbon = crate::sstable::TableOptions {
        filter_format: FilterFormat::Ribbon,
        ..flush_base(10.0)
    };
    let opts = flush_filter(ribbon, &[big], 384 << 20);
    assert_eq!(opts.filter_format, FilterFormat::Ribbon);
    assert_eq!(opts.bloom_bits_per_key, 10.0);
}

//! The engine against a `BTreeMap` model: random puts, deletes, merges (appends, whose order
//! matters), batches, point reads, scans in both directions, cursor walks that change
//! direction, snapshots, flushes, compactions and reopens, every read checked.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use strata::{
    Db, FilterKind, IndexKind, MemFs, MergePolicy, ReadOptions, WriteBatch, WriteOptions,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, Vec<u8>),
    Delete(u16),
    /// An operand of the append operator.
    Merge(u16, Vec<u8>),
    /// `delete_range(key(a), key(b))`.
    DeleteRange(u16, u16),
    /// One batch: puts, a range delete, more puts (the order within the batch matters).
    RangeBatch(Vec<(u16, Vec<u8>)>, (u16, u16), Vec<(u16, Vec<u8>)>),
    /// Puts (`Some(v), false`), merges (`Some(v), true`) and deletes (`None`).
    Batch(Vec<(u16, Option<Vec<u8>>, bool)>),
    Get(u16),
    /// Keys read together (with repeats, and more than one internal batch of 32).
    GetMany(Vec<u16>),
    Scan(u16, u16, bool),
    Walk(u16, Vec<bool>),
    TakeSnapshot,
    ReadSnapshot(usize, u16),
    GetManySnapshot(usize, Vec<u16>),
    ScanSnapshot(usize, bool),
    Flush,
    Compact(Option<(u16, u16)>),
    Reopen,
    /// Neither reads nor writes, for up to 25 ms while background work is due: long enough
    /// for the idle merge of a tree out of shape to run, and for most to finish.
    Pause,
}

fn key(k: u16) -> Vec<u8> {
    format!("key{k:04}").into_bytes()
}

/// How the model's keys are written to the engine: as they are, or with every bit flipped
/// for an engine whose comparator reverses byte order. The model's keys all have one length,
/// so flipping them reverses their byte order: the engine, ordering them by its comparator,
/// must then order them as the model does, and every place that compared bytes instead
/// would show.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Keys {
    Plain,
    Flipped,
}

impl Keys {
    /// The engine's key for a model key, and the model's for an engine key (flipping twice
    /// is no flip).
    fn map(self, k: &[u8]) -> Vec<u8> {
        match self {
            Keys::Plain => k.to_vec(),
            Keys::Flipped => k.iter().map(|b| !b).collect(),
        }
    }
}

/// A comparator that orders as `ReverseBytewiseComparator` does, under a name of its own:
/// the engine calls it through the trait, as it would any user's.
struct ReverseByHand;

impl strata::Comparator for ReverseByHand {
    fn name(&self) -> &str {
        "test.ReverseByHand"
    }
    fn compare(&self, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        b.cmp(a)
    }
}

/// The database's entries with the model's keys, checked to come in the model's order, each
/// key once.
fn dump(db: &Db, keys: Keys) -> Model {
    let entries: Vec<(Vec<u8>, Vec<u8>)> = db
        .scan(..)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|(k, v)| (keys.map(&k), v))
        .collect();
    if let Some(w) = entries.windows(2).find(|w| w[0].0 >= w[1].0) {
        panic!(
            "the scan is out of order or repeats a key: {:?} then {:?}",
            w[0].0, w[1].0
        );
    }
    entries.into_iter().collect()
}

fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        8 => proptest::collection::vec(any::<u8>(), 1..40),
        1 => proptest::collection::vec(any::<u8>(), 200..600),
    ]
}

fn op_strategy(keys: u16) -> impl Strategy<Value = Op> {
    let k = 0..keys;
    prop_oneof![
        30 => (k.clone(), value_strategy()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => k.clone().prop_map(Op::Delete),
        10 => (k.clone(), proptest::collection::vec(any::<u8>(), 0..12))
            .prop_map(|(k, v)| Op::Merge(k, v)),
        4 => (k.clone(), prop_oneof![0u16..12, 0u16..100])
            .prop_map(|(a, len)| Op::DeleteRange(a, a + len)),
        2 => (
            proptest::collection::vec((k.clone(), value_strategy()), 0..4),
            (k.clone(), 0u16..30),
            proptest::collection::vec((k.clone(), value_strategy()), 0..4),
        )
            .prop_map(|(before, (a, len), after)| Op::RangeBatch(before, (a, a + len), after)),
        6 => proptest::collection::vec(
            (k.clone(), proptest::option::of(value_strategy()), any::<bool>()),
            1..8
        )
        .prop_map(Op::Batch),
        15 => k.clone().prop_map(Op::Get),
        5 => proptest::collection::vec(k.clone(), 1..80).prop_map(Op::GetMany),
        5 => (k.clone(), k.clone(), any::<bool>()).prop_map(|(a, b, r)| Op::Scan(a, b, r)),
        5 => (k.clone(), proptest::collection::vec(any::<bool>(), 1..12))
            .prop_map(|(s, m)| Op::Walk(s, m)),
        3 => Just(Op::TakeSnapshot),
        4 => (any::<usize>(), k.clone()).prop_map(|(i, k)| Op::ReadSnapshot(i, k)),
        2 => (any::<usize>(), proptest::collection::vec(k.clone(), 1..40))
            .prop_map(|(i, ks)| Op::GetManySnapshot(i, ks)),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(i, r)| Op::ScanSnapshot(i, r)),
        2 => Just(Op::Flush),
        2 => proptest::option::of((k.clone(), k)).prop_map(Op::Compact),
        2 => Just(Op::Reopen),
        1 => Just(Op::Pause),
    ]
}

/// The merge operator of every run: appends, with a separator, so that a fold in the wrong
/// order or with an operand lost or repeated reads differently.
fn append() -> strata::merge::Append {
    strata::merge::Append {
        delimiter: b"|".to_vec(),
    }
}

fn model_merge(model: &mut Model, k: Vec<u8>, operand: &[u8]) {
    let v = match model.get(&k) {
        Some(v) => [v.as_slice(), b"|", operand].concat(),
        None => operand.to_vec(),
    };
    model.insert(k, v);
}

fn model_range(model: &Model, lo: &[u8], hi: &[u8], reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    if lo >= hi {
        return Vec::new();
    }
    let mut v: Vec<_> = model
        .range(lo.to_vec()..hi.to_vec())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if reverse {
        v.reverse();
    }
    v
}

/// Reads `keys` together and checks every value against the model.
fn check_get_many(db: &Db, model: &Model, keys: &[Vec<u8>], ro: &ReadOptions, map: Keys) {
    let asked: Vec<Vec<u8>> = keys.iter().map(|k| map.map(k)).collect();
    let got: Vec<_> = db
        .get_many(&asked, ro)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let want: Vec<_> = keys.iter().map(|k| model.get(k).cloned()).collect();
    assert_eq!(got, want);
}

/// Checks a cursor walk: seek to `start`, then move next/prev as `moves` say.
fn check_walk(db: &Db, model: &Model, start: &[u8], moves: &[bool], map: Keys) {
    let mut it = db.iter(&ReadOptions::default()).unwrap();
    it.seek(&map.map(start)).unwrap();
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let mut pos = keys.partition_point(|k| k.as_slice() < start);
    for &forward in moves {
        let expected = keys.get(pos);
        match expected {
            Some(k) => {
                assert!(
                    it.valid(),
                    "cursor should be on {:?}",
                    String::from_utf8_lossy(k)
                );
                assert_eq!(map.map(it.key()), k.as_slice());
                assert_eq!(it.value(), model[*k].as_slice());
            }
            None => {
                assert!(!it.valid(), "cursor should be off the end");
                return;
            }
        }
        if forward {
            it.next().unwrap();
            pos += 1;
        } else {
            it.prev().unwrap();
            if pos == 0 {
                assert!(!it.valid());
                return;
            }
            pos -= 1;
        }
    }
}

struct Harness {
    fs: MemFs,
    db: Option<Db>,
    model: Model,
    snapshots: Vec<(strata::Snapshot, Model)>,
    size_ratio: u64,
    index: IndexKind,
    filter: FilterKind,
    /// Replaces the options' filter policy when set.
    policy: Option<strata::FilterPolicy>,
    merge_policy: MergePolicy,
    /// Compactions write partitioned metadata once the tree's is over the (tiny) budget, so
    /// the tree mixes whole and partitioned tables.
    partition_over_budget: bool,
    /// The filters' format (the options' own, `Auto`, writes Bloom filters in databases
    /// this small).
    filter_format: strata::FilterFormat,
    /// The comparator, when not bytewise: one that reverses byte order, as the model's keys
    /// are then flipped.
    comparator: Option<std::sync::Arc<dyn strata::Comparator>>,
}

/// Options whose filters are partitioned, with the index they go with, and partitions of
/// about 32 keys: several to each of the tests' small tables.
fn partitioned(mut o: strata::Options) -> strata::Options {
    o.index_kind = IndexKind::BTree;
    o.filter_kind = FilterKind::Partitioned;
    o.filter_policy = strata::FilterPolicy::Uniform {
        bits_per_key: o.block_size * 8 / 32,
    };
    o
}

impl Harness {
    fn options(&self) -> strata::Options {
        let mut o = common::tiny_options(Some(self.fs.clone()), self.size_ratio);
        if self.filter == FilterKind::Partitioned {
            o = partitioned(o);
        }
        o.index_kind = self.index;
        if let Some(p) = self.policy {
            o.filter_policy = p;
        }
        o.merge_policy = self.merge_policy;
        o.partition_over_budget = self.partition_over_budget;
        o.filter_format = self.filter_format;
        if self.partition_over_budget {
            // A budget that a few dozen keys' filters and indexes overrun.
            o.table_pinned_bytes = 128;
        }
        o.merge_operator = Some(std::sync::Arc::new(append()));
        // A pause of 20 ms (two of the flush thread's looks) merges the tree, so that the
        // merges run among the reads, snapshots and writes of the run.
        o.idle_merge_after = Some(std::time::Duration::from_millis(1));
        if let Some(c) = &self.comparator {
            o.comparator = c.clone();
        }
        o
    }

    fn keys(&self) -> Keys {
        match self.comparator {
            None => Keys::Plain,
            Some(_) => Keys::Flipped,
        }
    }

    /// The engine's key for model key `k`.
    fn ek(&self, k: u16) -> Vec<u8> {
        self.keys().map(&key(k))
    }

    fn db(&self) -> &Db {
        self.db.as_ref().unwrap()
    }

    /// Read options at snapshot `i` (modulo those taken) and the model as it stood then.
    fn snapshot_read(&self, i: usize) -> Option<(ReadOptions, &Model)> {
        let (s, m) = self.snapshots.get(i % self.snapshots.len().max(1))?;
        let ro = ReadOptions {
            snapshot: Some(s.clone()),
            ..ReadOptions::default()
        };
        Some((ro, m))
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Put(k, v) => {
                self.db().put(&self.ek(*k), v).unwrap();
                self.model.insert(key(*k), v.clone());
            }
            Op::Delete(k) => {
                self.db().delete(&self.ek(*k)).unwrap();
                self.model.remove(&key(*k));
            }
            Op::Merge(k, v) => {
                self.db().merge(&self.ek(*k), v).unwrap();
                model_merge(&mut self.model, key(*k), v);
            }
            Op::DeleteRange(a, b) => {
                self.db().delete_range(&self.ek(*a), &self.ek(*b)).unwrap();
                let (a, b) = (key(*a), key(*b));
                self.model.retain(|k, _| k < &a || k >= &b);
            }
            Op::RangeBatch(before, (a, b), after) => {
                let mut batch = WriteBatch::new();
                for (k, v) in before {
                    batch.put(&self.ek(*k), v);
                    self.model.insert(key(*k), v.clone());
                }
                batch.delete_range(&self.ek(*a), &self.ek(*b));
                let (a, b) = (key(*a), key(*b));
                self.model.retain(|k, _| k < &a || k >= &b);
                for (k, v) in after {
                    batch.put(&self.ek(*k), v);
                    self.model.insert(key(*k), v.clone());
                }
                self.db().write(batch, WriteOptions::default()).unwrap();
            }
            Op::Batch(ops) => {
                let mut b = WriteBatch::new();
                for (k, v, merge) in ops {
                    match (v, merge) {
                        (Some(v), false) => b.put(&self.ek(*k), v),
                        (Some(v), true) => b.merge(&self.ek(*k), v),
                        (None, _) => b.delete(&self.ek(*k)),
                    }
                }
                self.db().write(b, WriteOptions::default()).unwrap();
                for (k, v, merge) in ops {
                    match (v, merge) {
                        (Some(v), false) => {
                            self.model.insert(key(*k), v.clone());
                        }
                        (Some(v), true) => model_merge(&mut self.model, key(*k), v),
                        (None, _) => {
                            self.model.remove(&key(*k));
                        }
                    }
                }
            }
            Op::Get(k) => assert_eq!(
                self.db().get(&self.ek(*k)).unwrap(),
                self.model.get(&key(*k)).cloned()
            ),
            Op::GetMany(ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                check_get_many(
                    self.db(),
                    &self.model,
                    &keys,
                    &ReadOptions::default(),
                    self.keys(),
                );
            }
            Op::Scan(a, b, reverse) => {
                let (lo, hi) = (key(*a), key(*b));
                let range = self.ek(*a)..self.ek(*b);
                let got: Vec<_> = if *reverse {
                    self.db().scan_rev(range)
                } else {
                    self.db().scan(range)
                }
                .unwrap()
                .map(|e| e.unwrap())
                .map(|(k, v)| (self.keys().map(&k), v))
                .collect();
                assert_eq!(got, model_range(&self.model, &lo, &hi, *reverse));
            }
            Op::Walk(start, moves) => {
                check_walk(self.db(), &self.model, &key(*start), moves, self.keys())
            }
            Op::TakeSnapshot => {
                let s = self.db().snapshot();
                self.snapshots.push((s, self.model.clone()));
            }
            Op::ReadSnapshot(i, k) => {
                if let Some((ro, m)) = self.snapshot_read(*i) {
                    assert_eq!(
                        self.db().get_with(&self.ek(*k), &ro).unwrap(),
                        m.get(&key(*k)).cloned()
                    );
                }
            }
            Op::GetManySnapshot(i, ks) => {
                if let Some((ro, m)) = self.snapshot_read(*i) {
                    let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                    check_get_many(self.db(), m, &keys, &ro, self.keys());
                }
            }
            Op::ScanSnapshot(i, reverse) => {
                let Some((ro, m)) = self.snapshot_read(*i) else {
                    return;
                };
                let got: Vec<_> = self
                    .db()
                    .scan_with(.., ro, *reverse)
                    .unwrap()
                    .map(|e| e.unwrap())
                    .map(|(k, v)| (self.keys().map(&k), v))
                    .collect();
                let mut want: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                if *reverse {
                    want.reverse();
                }
                assert_eq!(got, want);
            }
            Op::Flush => self.db().flush().unwrap(),
            Op::Compact(range) => {
                let (a, b) = match range {
                    Some((a, b)) => (Some(self.ek(*a.min(b))), Some(self.ek(*a.max(b)))),
                    None => (None, None),
                };
                self.db().compact_range(a.as_deref(), b.as_deref()).unwrap();
            }
            Op::Reopen => {
                self.snapshots.clear();
                self.db.take().unwrap().close().unwrap();
                self.db = Some(Db::open(Path::new("/db"), self.options()).unwrap());
                assert_eq!(
                    dump(self.db(), self.keys()),
                    self.model,
                    "state after reopen"
                );
            }
            Op::Pause => {
                // Only while background work is due: a settled tree has no merge to wait for.
                let start = std::time::Instant::now();
                while self.db().stats().compaction_pending
                    && start.elapsed() < std::time::Duration::from_millis(25)
                {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            }
        }
    }
}

fn run_ops(ops: &[Op], size_ratio: u64, index: IndexKind, filter: FilterKind) {
    run_ops_with(ops, size_ratio, index, filter, None);
}

fn run_ops_with(
    ops: &[Op],
    size_ratio: u64,
    index: IndexKind,
    filter: FilterKind,
    policy: Option<strata::FilterPolicy>,
) {
    run_ops_merging(
        ops,
        size_ratio,
        index,
        filter,
        policy,
        common::merge_policy(),
    );
}

fn run_ops_merging(
    ops: &[Op],
    size_ratio: u64,
    index: IndexKind,
    filter: FilterKind,
    policy: Option<strata::FilterPolicy>,
    merge_policy: MergePolicy,
) {
    let h = Harness {
        policy,
        merge_policy,
        ..harness(size_ratio, index, filter)
    };
    run_harness(h, ops);
}

/// A harness on an empty file system, with the options' defaults besides those given.
fn harness(size_ratio: u64, index: IndexKind, filter: FilterKind) -> Harness {
    Harness {
        fs: MemFs::new(),
        db: None,
        model: Model::new(),
        snapshots: Vec::new(),
        size_ratio,
        index,
        filter,
        policy: None,
        merge_policy: common::merge_policy(),
        partition_over_budget: false,
        filter_format: strata::FilterFormat::Auto,
        comparator: None,
    }
}

/// A harness whose engine orders keys by `comparator` (one that reverses byte order).
fn ordered_by(
    comparator: std::sync::Arc<dyn strata::Comparator>,
    size_ratio: u64,
    index: IndexKind,
    filter: FilterKind,
) -> Harness {
    Harness {
        comparator: Some(comparator),
        ..harness(size_ratio, index, filter)
    }
}

fn run_harness(mut h: Harness, ops: &[Op]) {
    h.db = Some(Db::open(Path::new("/db"), h.options()).unwrap());
    for op in ops {
        h.apply(op);
    }
    assert_eq!(dump(h.db(), h.keys()), h.model, "final state");
    h.snapshots.clear();
    h.db.take().unwrap().close().unwrap();
    let db = Db::open(Path::new("/db"), h.options()).unwrap();
    assert_eq!(dump(&db, h.keys()), h.model, "state after the final reopen");
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model_ratio_2(ops in proptest::collection::vec(op_strategy(120), 1..120)) {
        run_ops(&ops, 2, IndexKind::Flat, FilterKind::Whole);
    }

    #[test]
    fn engine_matches_model_ratio_10_btree(
        ops in proptest::collection::vec(op_strategy(60), 1..120)
    ) {
        run_ops(&ops, 10, IndexKind::BTree, FilterKind::Whole);
    }

    /// Whole metadata asked for, over the budget: compactions write partitioned tables, and
    /// the tree mixes them with whole level-0 tables.
    #[test]
    fn engine_matches_model_partitioned_over_budget(
        ops in proptest::collection::vec(op_strategy(60), 1..120)
    ) {
        run_harness(Harness {
            fs: MemFs::new(),
            db: None,
            model: Model::new(),
            snapshots: Vec::new(),
            size_ratio: 4,
            index: IndexKind::Flat,
            filter: FilterKind::Whole,
            policy: None,
            merge_policy: common::merge_policy(),
            partition_over_budget: true,
            filter_format: strata::FilterFormat::Auto,
            comparator: None,
        }, &ops);
    }

    /// Ribbon filters, whole in some tables and in partitions in others.
    #[test]
    fn engine_matches_model_ribbon_filters(
        ops in proptest::collection::vec(op_strategy(60), 1..120)
    ) {
        run_harness(Harness {
            fs: MemFs::new(),
            db: None,
            model: Model::new(),
            snapshots: Vec::new(),
            size_ratio: 4,
            index: IndexKind::Flat,
            filter: FilterKind::Whole,
            policy: None,
            merge_policy: common::merge_policy(),
            partition_over_budget: true,
            filter_format: strata::FilterFormat::Ribbon,
            comparator: None,
        }, &ops);
    }

    #[test]
    fn engine_matches_model_partitioned_filters(
        ops in proptest::collection::vec(op_strategy(60), 1..120)
    ) {
        run_ops(&ops, 4, IndexKind::BTree, FilterKind::Partitioned);
    }

    /// Monkey's filters in partitions, with the B-tree index.
    #[test]
    fn engine_matches_model_partitioned_monkey_filters(
        ops in proptest::collection::vec(op_strategy(60), 1..120)
    ) {
        let monkey = strata::FilterPolicy::Monkey { total_bits_per_key: 8 };
        run_ops_with(&ops, 4, IndexKind::BTree, FilterKind::Partitioned, Some(monkey));
    }

    /// Monkey's filters with 2 bits per key overall: the deepest level's tables get few
    /// bits or none (filters that pass every key).
    #[test]
    fn engine_matches_model_monkey_filters(
        ops in proptest::collection::vec(op_strategy(60), 1..120)
    ) {
        let monkey = strata::FilterPolicy::Monkey { total_bits_per_key: 2 };
        run_ops_with(&ops, 3, IndexKind::Flat, FilterKind::Whole, Some(monkey));
    }

    /// Tiering: up to `T - 1` runs per level, merged into the next level when full.
    #[test]
    fn engine_matches_model_tiering(ops in proptest::collection::vec(op_strategy(60), 1..120)) {
        run_ops_merging(&ops, 3, IndexKind::Flat, FilterKind::Whole, None, MergePolicy::Tiering);
    }

    /// Lazy leveling: tiered levels above a leveled deepest one.
    #[test]
    fn engine_matches_model_lazy_leveling(
        ops in proptest::collection::vec(op_strategy(60), 1..120)
    ) {
        let lazy = MergePolicy::LazyLeveling;
        run_ops_merging(&ops, 4, IndexKind::BTree, FilterKind::Partitioned, None, lazy);
    }

    /// Keys in reversed byte order, by the built-in comparator: every read, flush,
    /// compaction, range deletion and reopen in the comparator's order.
    #[test]
    fn engine_matches_model_reverse_bytewise(
        ops in proptest::collection::vec(op_strategy(120), 1..120)
    ) {
        let reverse = std::sync::Arc::new(strata::ReverseBytewiseComparator);
        run_harness(ordered_by(reverse, 2, IndexKind::Flat, FilterKind::Whole), &ops);
    }

    /// The same order through a user's comparator, with B-tree indexes and partitioned
    /// filters.
    #[test]
    fn engine_matches_model_user_comparator(
        ops in proptest::collection::vec(op_strategy(60), 1..120)
    ) {
        let by_hand = std::sync::Arc::new(ReverseByHand);
        run_harness(ordered_by(by_hand, 4, IndexKind::BTree, FilterKind::Partitioned), &ops);
    }

    /// Tiering at the smallest ratio: one run slot per level, full levels carrying down as
    /// the digits of a binary counter do.
    #[test]
    fn engine_matches_model_tiering_ratio_2(
        ops in proptest::collection::vec(op_strategy(120), 1..120)
    ) {
        run_ops_merging(&ops, 2, IndexKind::Flat, FilterKind::Whole, None, MergePolicy::Tiering);
    }
}

/// Long random runs that grow the tree several levels deep, on the real file system; the seed
/// is printed.
#[test]
fn long_random_runs_reach_deep_levels() {
    long_random_run(MergePolicy::Leveling, 2);
}

#[test]
fn long_random_runs_reach_deep_levels_tiering() {
    long_random_run(MergePolicy::Tiering, 3);
}

#[test]
fn long_random_runs_reach_deep_levels_lazy_leveling() {
    long_random_run(MergePolicy::LazyLeveling, 2);
}

fn long_random_run(merge_policy: MergePolicy, size_ratio: u64) {
    let seed = common::seed(&format!("long_random_runs {merge_policy:?}"));
    let mut rng = common::Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    // Partitioned filters: their partitions are read through the mappings of real files.
    let mut opts = partitioned(common::tiny_options(None, size_ratio));
    opts.merge_policy = merge_policy;
    opts.write_buffer_size = 8 * 1024;
    opts.merge_operator = Some(std::sync::Arc::new(append()));
    let mut db = Db::open(dir.path(), opts.clone()).unwrap();
    let mut model = Model::new();
    let mut max_depth = 0;
    for step in 0..30_000u64 {
        let k = key(rng.below(2000) as u16);
        match rng.below(100) {
            0..=49 => {
                let v = format!("v{step}-{}", "x".repeat(rng.below(60) as usize)).into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            50..=58 => {
                let operand = format!("m{step}").into_bytes();
                db.merge(&k, &operand).unwrap();
                model_merge(&mut model, k, &operand);
            }
            59 => {
                let end = key(rng.below(2000) as u16);
                if k <= end {
                    db.delete_range(&k, &end).unwrap();
                    model.retain(|m, _| m < &k || m >= &end);
                }
            }
            60..=74 => {
                db.delete(&k).unwrap();
                model.remove(&k);
            }
            75..=94 => assert_eq!(
                db.get(&k).unwrap(),
                model.get(&k).cloned(),
                "seed {seed} step {step}"
            ),
            95..=98 => {
                let moves: Vec<bool> = (0..20).map(|_| rng.chance(60)).collect();
                check_walk(&db, &model, &k, &moves, Keys::Plain);
            }
            _ => {
                if rng.chance(10) {
                    db.close().unwrap();
                    db = Db::open(dir.path(), opts.clone()).unwrap();
                }
            }
        }
        if step % 500 == 0 {
            // Batched lookups, deep levels included, against the model.
            let keys: Vec<Vec<u8>> = (0..70).map(|_| key(rng.below(2000) as u16)).collect();
            check_get_many(&db, &model, &keys, &ReadOptions::default(), Keys::Plain);
        }
        if step % 5000 == 0 {
            // Levels of the tree, not run slots.
            let depth = db.stats().runs_per_level.len() - 1;
            max_depth = max_depth.max(depth);
        }
    }
    assert_eq!(common::dump(&db), model, "seed {seed}");
    let depth = db.stats().runs_per_level.len() - 1;
    // A tiered level holds T - 1 runs before it goes down: its tree is shallower.
    let want = if merge_policy == MergePolicy::Leveling {
        3
    } else {
        2
    };
    assert!(
        max_depth.max(depth) >= want,
        "tree should reach level {want}, reached {}",
        max_depth.max(depth)
    );
    db.compact_range(None, None).unwrap();
    assert_eq!(
        common::dump(&db),
        model,
        "after full compaction, seed {seed}"
    );
    let s = db.stats();
    let entries: u64 = s.files.iter().map(|f| f.entries).sum();
    assert_eq!(
        entries,
        model.len() as u64,
        "a full compaction keeps one version per live key"
    );
    let tombstones: u64 = s.files.iter().map(|f| f.deletions).sum();
    assert_eq!(
        tombstones, 0,
        "no tombstone survives a full compaction without snapshots"
    );
}

//! Column families: separate trees with their own options in one database, one WAL and one
//! sequence. Checked against a model (a map per family) through random writes, batches
//! across families, snapshots, flushes, compactions, creations, drops and reopens; and the
//! promises one by one: a batch across families is atomic, a WAL goes only once every
//! family's writes in it are in tables, a dropped family's files go, and each family builds
//! its tables with its own options.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use strata::{
    ColumnFamily, Db, FileSystem as _, FilterPolicy, MemFs, Options, ReadOptions, WriteBatch,
    WriteOptions,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The families a test may create, besides the default one.
const NAMES: [&str; 3] = ["users", "events", "tags"];

fn name(f: u8) -> &'static str {
    match f {
        0 => "default",
        i => NAMES[usize::from(i - 1) % NAMES.len()],
    }
}

/// Options for family `f`: each builds its tables otherwise.
fn family_options(fs: &MemFs, f: u8) -> Options {
    let mut o = common::tiny_options(Some(fs.clone()), 4);
    o.merge_operator = Some(Arc::new(strata::merge::Append {
        delimiter: b",".to_vec(),
    }));
    match f {
        1 => {
            o.write_buffer_size = 4096;
            o.filter_policy = FilterPolicy::Uniform { bits_per_key: 3 };
        }
        2 => {
            o.compression = strata::Compression::Lz4;
            o.block_size = 256;
        }
        3 => o.size_ratio = 2,
        _ => {}
    }
    o
}

fn key(k: u16) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u16, Vec<u8>),
    Delete(u8, u16),
    Merge(u8, u16, Vec<u8>),
    DeleteRange(u8, u16, u16),
    /// Writes to several families in one batch: a put (`Some`) or a delete (`None`).
    Batch(Vec<(u8, u16, Option<Vec<u8>>)>),
    Get(u8, u16),
    Scan(u8, bool),
    TakeSnapshot,
    ReadSnapshot(usize, u8),
    Flush,
    Compact(u8),
    Create(u8),
    Drop(u8),
    Reopen,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let f = 0u8..4;
    let k = 0u16..60;
    let v = proptest::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        30 => (f.clone(), k.clone(), v.clone()).prop_map(|(f, k, v)| Op::Put(f, k, v)),
        6 => (f.clone(), k.clone()).prop_map(|(f, k)| Op::Delete(f, k)),
        6 => (f.clone(), k.clone(), v.clone()).prop_map(|(f, k, v)| Op::Merge(f, k, v)),
        3 => (f.clone(), k.clone(), 0u16..20).prop_map(|(f, a, n)| Op::DeleteRange(f, a, a + n)),
        8 => proptest::collection::vec(
            (f.clone(), k.clone(), proptest::option::of(v.clone())),
            1..8
        )
        .prop_map(Op::Batch),
        10 => (f.clone(), k.clone()).prop_map(|(f, k)| Op::Get(f, k)),
        4 => (f.clone(), any::<bool>()).prop_map(|(f, r)| Op::Scan(f, r)),
        3 => Just(Op::TakeSnapshot),
        4 => (0usize..8, f.clone()).prop_map(|(i, f)| Op::ReadSnapshot(i, f)),
        3 => Just(Op::Flush),
        2 => f.clone().prop_map(Op::Compact),
        4 => (1u8..4).prop_map(Op::Create),
        2 => (1u8..4).prop_map(Op::Drop),
        2 => Just(Op::Reopen),
    ]
}

struct Harness {
    fs: MemFs,
    path: &'static Path,
    db: Option<Db>,
    /// The families that exist, by number (0 is the default one), with their model.
    models: BTreeMap<u8, Model>,
    /// Snapshots with the models of the families that existed when each was taken.
    snapshots: Vec<(strata::Snapshot, BTreeMap<u8, Model>)>,
}

impl Harness {
    fn new() -> Self {
        let mut h = Harness {
            fs: MemFs::new(),
            path: Path::new("/families"),
            db: None,
            models: BTreeMap::from([(0, Model::new())]),
            snapshots: Vec::new(),
        };
        h.open();
        h
    }

    fn open(&mut self) {
        // The families the MANIFEST holds, before opening creates any that are missing.
        let mut names: Vec<String> = self.models.keys().map(|f| name(*f).to_string()).collect();
        names.sort();
        if self.fs.exists(&self.path.join("CURRENT")) {
            let mut listed = Db::list_families(self.path, &family_options(&self.fs, 0)).unwrap();
            listed.sort();
            assert_eq!(listed, names, "the families the MANIFEST holds");
        }
        let given = self
            .models
            .keys()
            .filter(|f| **f != 0)
            .map(|f| (name(*f).to_string(), family_options(&self.fs, *f)))
            .collect();
        let db = Db::open_with_families(self.path, family_options(&self.fs, 0), given).unwrap();
        let mut listed = db.families();
        listed.sort();
        assert_eq!(listed, names, "the families after open");
        self.db = Some(db);
    }

    fn db(&self) -> &Db {
        self.db.as_ref().unwrap()
    }

    fn cf(&self, f: u8) -> Option<ColumnFamily> {
        self.models.contains_key(&f).then(|| {
            self.db()
                .family(name(f))
                .expect("a family of the model exists")
        })
    }

    fn read_options(&self, f: u8, snapshot: Option<strata::Snapshot>) -> Option<ReadOptions> {
        Some(ReadOptions {
            family: Some(self.cf(f)?),
            snapshot,
            ..ReadOptions::default()
        })
    }

    fn scan(&self, ro: ReadOptions, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.db()
            .scan_with(.., ro, reverse)
            .unwrap()
            .map(|e| e.unwrap())
            .collect()
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Put(f, k, v) => {
                if let Some(cf) = self.cf(*f) {
                    self.db().put_cf(&cf, &key(*k), v).unwrap();
                    self.models.get_mut(f).unwrap().insert(key(*k), v.clone());
                }
            }
            Op::Delete(f, k) => {
                if let Some(cf) = self.cf(*f) {
                    self.db().delete_cf(&cf, &key(*k)).unwrap();
                    self.models.get_mut(f).unwrap().remove(&key(*k));
                }
            }
            Op::Merge(f, k, v) => {
                if let Some(cf) = self.cf(*f) {
                    let mut b = WriteBatch::new();
                    b.merge_cf(&cf, &key(*k), v);
                    self.db().write(b, WriteOptions::default()).unwrap();
                    let m = self.models.get_mut(f).unwrap();
                    let new = match m.get(&key(*k)) {
                        Some(old) => [old.as_slice(), b",", v].concat(),
                        None => v.clone(),
                    };
                    m.insert(key(*k), new);
                }
            }
            Op::DeleteRange(f, a, b) => {
                if let Some(cf) = self.cf(*f) {
                    let mut batch = WriteBatch::new();
                    batch.delete_range_cf(&cf, &key(*a), &key(*b));
                    self.db().write(batch, WriteOptions::default()).unwrap();
                    let (lo, hi) = (key(*a), key(*b));
                    self.models
                        .get_mut(f)
                        .unwrap()
                        .retain(|k, _| *k < lo || *k >= hi);
                }
            }
            Op::Batch(writes) => {
                let mut b = WriteBatch::new();
                let mut after = self.models.clone();
                for (f, k, v) in writes {
                    let Some(cf) = self.cf(*f) else { continue };
                    let m = after.get_mut(f).unwrap();
                    match v {
                        Some(v) => {
                            b.put_cf(&cf, &key(*k), v);
                            m.insert(key(*k), v.clone());
                        }
                        None => {
                            b.delete_cf(&cf, &key(*k));
                            m.remove(&key(*k));
                        }
                    }
                }
                self.db().write(b, WriteOptions::default()).unwrap();
                self.models = after;
            }
            Op::Get(f, k) => {
                if let Some(cf) = self.cf(*f) {
                    let got = self.db().get_cf(&cf, &key(*k)).unwrap();
                    assert_eq!(got.as_ref(), self.models[f].get(&key(*k)), "get {f} {k}");
                }
            }
            Op::Scan(f, reverse) => {
                if let Some(ro) = self.read_options(*f, None) {
                    let mut want: Vec<_> = self.models[f].clone().into_iter().collect();
                    if *reverse {
                        want.reverse();
                    }
                    assert_eq!(self.scan(ro, *reverse), want, "scan of family {f}");
                }
            }
            Op::TakeSnapshot => {
                let s = self.db().snapshot();
                self.snapshots.push((s, self.models.clone()));
            }
            Op::ReadSnapshot(i, f) => {
                let Some((snap, models)) = self.snapshots.get(*i) else {
                    return;
                };
                let Some(ro) = self.read_options(*f, None) else {
                    return;
                };
                // A family created after the snapshot (or dropped and created again) holds
                // nothing the snapshot sees.
                let want = models.get(f).cloned().unwrap_or_default();
                let ro = ReadOptions {
                    snapshot: Some(snap.clone()),
                    ..ro
                };
                let got: Model = self.scan(ro, false).into_iter().collect();
                assert_eq!(got, want, "family {f} at snapshot {i}");
            }
            Op::Flush => self.db().flush().unwrap(),
            Op::Compact(f) => {
                if let Some(cf) = self.cf(*f) {
                    self.db().compact_range_cf(&cf, None, None).unwrap();
                }
            }
            Op::Create(f) => {
                let created = self
                    .db()
                    .create_family(name(*f), family_options(&self.fs, *f));
                if self.models.contains_key(f) {
                    assert!(created.is_err(), "a family created twice");
                } else {
                    assert_eq!(created.unwrap().name(), name(*f));
                    self.models.insert(*f, Model::new());
                }
            }
            Op::Drop(f) => {
                let dropped = self.db().drop_family(name(*f));
                if self.models.remove(f).is_some() {
                    dropped.unwrap();
                    assert!(self.db().family(name(*f)).is_none());
                    self.generation_dropped(*f);
                } else {
                    assert!(dropped.is_err(), "dropped a family that is not there");
                }
            }
            Op::Reopen => {
                self.snapshots.clear();
                self.db.take().unwrap().close().unwrap();
                self.open();
            }
        }
    }

    /// Forgets what snapshots knew of a dropped family: a family created again under its
    /// name starts empty, and a snapshot taken before holds nothing of it.
    fn generation_dropped(&mut self, f: u8) {
        for (_, models) in &mut self.snapshots {
            models.remove(&f);
        }
    }

    /// Every family, read whole, against its model.
    fn check_all(&self) {
        for (f, m) in &self.models {
            let ro = self.read_options(*f, None).unwrap();
            let got: Model = self.scan(ro, false).into_iter().collect();
            assert_eq!(&got, m, "family {f}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn families_match_a_model_per_family(ops in proptest::collection::vec(op_strategy(), 1..150)) {
        let mut h = Harness::new();
        for op in &ops {
            h.apply(op);
        }
        h.check_all();
        h.apply(&Op::Reopen);
        h.check_all();
    }
}

/// `.sst` and `.wal` files in the database's directory.
fn files(fs: &MemFs, dir: &Path, ext: &str) -> Vec<String> {
    use strata::FileSystem as _;
    let mut v: Vec<String> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(ext))
        .collect();
    v.sort();
    v
}

#[test]
fn a_wal_goes_only_once_every_familys_writes_in_it_are_in_tables() {
    let fs = MemFs::new();
    let dir = Path::new("/wal");
    let db = Db::open(dir, family_options(&fs, 0)).unwrap();
    let users = db.create_family("users", family_options(&fs, 0)).unwrap();
    // One write in a quiet family, then enough in the default one to fill its memtable
    // many times over: every switch makes a new WAL, and the first holds the quiet write.
    db.put_cf(&users, b"ada", b"lovelace").unwrap();
    let first_wals = files(&fs, dir, ".wal");
    for i in 0..2000u32 {
        db.put(format!("k{i:05}").as_bytes(), &[b'v'; 50]).unwrap();
    }
    db.flush().unwrap();
    let wals = files(&fs, dir, ".wal");
    assert!(
        first_wals.iter().all(|w| !wals.contains(w)),
        "the WAL with the quiet family's write is still there: {first_wals:?} in {wals:?}"
    );
    // Its write is in a table of its own family, so a process crash loses nothing.
    let s = db.stats();
    let users_stats = s.families.iter().find(|f| f.name == "users").unwrap();
    assert!(users_stats.levels.iter().map(|l| l.files).sum::<usize>() > 0);
    let crashed = fs.process_crash_copy();
    drop(db);
    let db = Db::open(dir, family_options(&crashed, 0)).unwrap();
    let users = db.family("users").unwrap();
    assert_eq!(
        db.get_cf(&users, b"ada").unwrap(),
        Some(b"lovelace".to_vec())
    );
    assert_eq!(db.get(b"k01999").unwrap(), Some(vec![b'v'; 50]));
}

#[test]
fn a_dropped_familys_files_go_and_it_stays_dropped() {
    let fs = MemFs::new();
    let dir = Path::new("/drop");
    let db = Db::open(dir, family_options(&fs, 0)).unwrap();
    let events = db.create_family("events", family_options(&fs, 0)).unwrap();
    db.put(b"kept", b"1").unwrap();
    for i in 0..500u32 {
        db.put_cf(&events, format!("e{i:04}").as_bytes(), &[b'x'; 40])
            .unwrap();
    }
    db.flush().unwrap();
    assert!(!db.stats().families[1].files.is_empty());
    // A write after the flush stays in the WAL, to be skipped at replay.
    db.put_cf(&events, b"late", b"x").unwrap();
    db.drop_family("events").unwrap();
    assert_eq!(db.families(), ["default"]);
    // Writes through the old handle fail, and reads find nothing.
    assert!(db.put_cf(&events, b"e", b"x").is_err());
    assert_eq!(db.get_cf(&events, b"e0001").unwrap(), None);
    // What is left on disk is the default family's tables, every one of them: the dropped
    // family's went with it, whatever its compactions were doing when the drop came.
    let live: Vec<String> = db.stats().families[0]
        .files
        .iter()
        .map(|f| format!("{:06}.sst", f.number))
        .collect();
    assert!(!live.is_empty());
    assert_eq!(files(&fs, dir, ".sst"), live);
    assert!(db.drop_family("default").is_err());
    assert!(db.drop_family("events").is_err());
    db.close().unwrap();
    assert_eq!(
        Db::list_families(dir, &family_options(&fs, 0)).unwrap(),
        ["default"]
    );
    let db = Db::open(dir, family_options(&fs, 0)).unwrap();
    assert_eq!(db.families(), ["default"]);
    assert_eq!(db.get(b"kept").unwrap(), Some(b"1".to_vec()));
    // A family created again under the name starts empty: the old one's WAL write is not
    // replayed into it.
    let events = db.create_family("events", family_options(&fs, 0)).unwrap();
    assert_eq!(db.get_cf(&events, b"late").unwrap(), None);
    assert_eq!(db.get_cf(&events, b"e0001").unwrap(), None);
    db.close().unwrap();
    let db = Db::open(dir, family_options(&fs, 0)).unwrap();
    let events = db.family("events").unwrap();
    assert_eq!(db.get_cf(&events, b"late").unwrap(), None);
}

/// Removes the keys that start with `tmp`.
struct DropTmp;

impl strata::CompactionFilter for DropTmp {
    fn filter(&self, _level: usize, key: &[u8], _value: &[u8]) -> strata::FilterDecision {
        if key.starts_with(b"tmp") {
            strata::FilterDecision::Remove
        } else {
            strata::FilterDecision::Keep
        }
    }
}

#[test]
fn merge_operators_and_compaction_filters_belong_to_their_family() {
    let fs = MemFs::new();
    let dir = Path::new("/hooks");
    let plain = || Options {
        merge_operator: None,
        ..family_options(&fs, 0)
    };
    let counters = Options {
        merge_operator: Some(Arc::new(strata::merge::CounterAdd)),
        compaction_filter: Some(Arc::new(DropTmp)),
        ..family_options(&fs, 0)
    };
    let families = vec![("counters".to_string(), counters.clone())];
    let db = Db::open_with_families(dir, plain(), families.clone()).unwrap();
    let cf = db.family("counters").unwrap();
    let one = 1u64.to_le_bytes();
    for _ in 0..3 {
        let mut b = WriteBatch::new();
        b.merge_cf(&cf, b"hits", &one);
        db.write(b, WriteOptions::default()).unwrap();
    }
    db.put_cf(&cf, b"tmp-family", b"gone").unwrap();
    // The default family has no merge operator.
    assert!(db.merge(b"hits", &one).is_err());
    let mut b = WriteBatch::new();
    b.merge(b"hits", &one);
    b.put_cf(&cf, b"x", b"y");
    assert!(db.write(b, WriteOptions::default()).is_err());
    db.put(b"tmp-default", b"kept").unwrap();
    db.compact_range(None, None).unwrap();
    db.compact_range_cf(&cf, None, None).unwrap();
    assert_eq!(
        db.get_cf(&cf, b"hits").unwrap(),
        Some(3u64.to_le_bytes().to_vec())
    );
    // The family's filter removed its own `tmp` key, not the default family's.
    assert_eq!(db.get_cf(&cf, b"tmp-family").unwrap(), None);
    assert_eq!(db.get(b"tmp-default").unwrap(), Some(b"kept".to_vec()));
    // An unflushed operand, replayed at open: folded by the family's operator when named...
    let mut b = WriteBatch::new();
    b.merge_cf(&cf, b"hits", &one);
    db.write(b, WriteOptions::default()).unwrap();
    db.close().unwrap();
    let db = Db::open_with_families(dir, plain(), families).unwrap();
    let cf = db.family("counters").unwrap();
    assert_eq!(
        db.get_cf(&cf, b"hits").unwrap(),
        Some(4u64.to_le_bytes().to_vec())
    );
    db.close().unwrap();
    // ...and, opened without naming it, the family has no operator: its merged keys are
    // refused, not folded by another family's operator.
    let db = Db::open(dir, counters).unwrap();
    let cf = db.family("counters").unwrap();
    assert!(matches!(
        db.get_cf(&cf, b"hits"),
        Err(strata::Error::Merge { .. })
    ));
}

#[test]
fn each_family_builds_its_tables_with_its_own_options() {
    let fs = MemFs::new();
    let dir = Path::new("/options");
    let db = Db::open(dir, family_options(&fs, 0)).unwrap();
    let sparse = Options {
        filter_policy: FilterPolicy::Uniform { bits_per_key: 3 },
        ..family_options(&fs, 0)
    };
    let users = db.create_family("users", sparse).unwrap();
    for i in 0..300u32 {
        let k = format!("k{i:04}");
        db.put(k.as_bytes(), b"default").unwrap();
        db.put_cf(&users, k.as_bytes(), b"users").unwrap();
    }
    db.flush().unwrap();
    let s = db.stats();
    let bits = |f: &strata::FamilyStats| -> Vec<f64> {
        f.levels
            .iter()
            .filter_map(|l| l.filter_bits_per_key)
            .collect()
    };
    let (default_bits, users_bits) = (bits(&s.families[0]), bits(&s.families[1]));
    assert!(!default_bits.is_empty() && default_bits.iter().all(|b| *b == 10.0));
    assert!(!users_bits.is_empty() && users_bits.iter().all(|b| *b == 3.0));
    // The same key holds each family's own value.
    assert_eq!(db.get(b"k0007").unwrap(), Some(b"default".to_vec()));
    assert_eq!(
        db.get_cf(&users, b"k0007").unwrap(),
        Some(b"users".to_vec())
    );
    // A batch across families, read at one snapshot.
    let snap = db.snapshot();
    let mut b = WriteBatch::new();
    b.put(b"k0007", b"default2");
    b.put_cf(&users, b"k0007", b"users2");
    db.write(b, WriteOptions::default()).unwrap();
    let at = |cf: &ColumnFamily| ReadOptions {
        family: Some(cf.clone()),
        snapshot: Some(snap.clone()),
        ..ReadOptions::default()
    };
    let default = db.default_family();
    assert_eq!(
        db.get_with(b"k0007", &at(&default)).unwrap(),
        Some(b"default".to_vec())
    );
    assert_eq!(
        db.get_with(b"k0007", &at(&users)).unwrap(),
        Some(b"users".to_vec())
    );
    assert_eq!(
        db.get_cf(&users, b"k0007").unwrap(),
        Some(b"users2".to_vec())
    );
    // Compression is the family's too: the same compressible data takes a fraction of the
    // bytes in a family with lz4.
    // One memtable holds it all: the flush writes one table per family.
    let with = |compression| Options {
        compression,
        write_buffer_size: 1 << 20,
        ..family_options(&fs, 0)
    };
    let packed = db
        .create_family("packed", with(strata::Compression::Lz4))
        .unwrap();
    let unpacked = db
        .create_family("unpacked", with(strata::Compression::None))
        .unwrap();
    for i in 0..300u32 {
        let k = format!("p{i:04}");
        db.put_cf(&unpacked, k.as_bytes(), &[b'a'; 200]).unwrap();
        db.put_cf(&packed, k.as_bytes(), &[b'a'; 200]).unwrap();
    }
    db.flush().unwrap();
    let bytes = |name: &str| -> u64 {
        let s = db.stats();
        let f = s.families.iter().find(|f| f.name == name).unwrap();
        f.files.iter().map(|f| f.size).sum()
    };
    let (plain, lz4) = (bytes("unpacked"), bytes("packed"));
    assert!(
        lz4 > 0 && lz4 * 3 < plain,
        "flushed: lz4 family {lz4} bytes against {plain} uncompressed"
    );
    // And compaction rewrites them so.
    db.compact_range_cf(&packed, None, None).unwrap();
    db.compact_range_cf(&unpacked, None, None).unwrap();
    let (plain, lz4) = (bytes("unpacked"), bytes("packed"));
    assert!(
        lz4 > 0 && lz4 * 3 < plain,
        "compacted: lz4 family {lz4} bytes against {plain} uncompressed"
    );
    // Names are checked.
    assert!(db.create_family("users", common::options()).is_err());
    assert!(db.create_family("", common::options()).is_err());
}

#[test]
fn a_checkpoint_holds_every_family() {
    let fs = MemFs::new();
    let dir = Path::new("/source");
    let db = Db::open(dir, family_options(&fs, 0)).unwrap();
    let users = db.create_family("users", family_options(&fs, 1)).unwrap();
    db.put(b"a", b"default").unwrap();
    db.put_cf(&users, b"a", b"users").unwrap();
    db.flush().unwrap();
    db.put_cf(&users, b"b", b"unflushed").unwrap();
    db.checkpoint("/copy").unwrap();
    db.put_cf(&users, b"c", b"after").unwrap();
    drop(db);
    let copy = Db::open("/copy", family_options(&fs, 0)).unwrap();
    assert_eq!(copy.families(), ["default", "users"]);
    let users = copy.family("users").unwrap();
    assert_eq!(copy.get(b"a").unwrap(), Some(b"default".to_vec()));
    assert_eq!(copy.get_cf(&users, b"a").unwrap(), Some(b"users".to_vec()));
    assert_eq!(
        copy.get_cf(&users, b"b").unwrap(),
        Some(b"unflushed".to_vec())
    );
    assert_eq!(copy.get_cf(&users, b"c").unwrap(), None);
}

#[test]
fn families_created_and_dropped_under_writes_flushes_and_compactions() {
    let fs = MemFs::new();
    let dir = Path::new("/churn");
    let db = Arc::new(Db::open(dir, family_options(&fs, 0)).unwrap());
    let stable = db.create_family("stable", family_options(&fs, 2)).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Creations, drops and writes to the family that comes and goes that succeeded.
    let counts = [(); 3].map(|()| std::sync::atomic::AtomicU64::new(0));
    let count = |i: usize| counts[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let running = |f: &dyn Fn(u64)| {
        let mut i = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            f(i);
            i += 1;
        }
    };
    std::thread::scope(|s| {
        // Writers: batches across the default and the stable family, and writes to a family
        // that comes and goes (refused while it is gone).
        let mut writers = Vec::new();
        for w in 0..2u64 {
            let (db, stable) = (&db, &stable);
            writers.push(s.spawn(move || {
                for i in 0..1500u64 {
                    let mut b = WriteBatch::new();
                    let k = format!("w{w}-{:04}", i % 500);
                    b.put(k.as_bytes(), &i.to_le_bytes());
                    b.put_cf(stable, k.as_bytes(), &i.to_le_bytes());
                    db.write(b, WriteOptions::default()).unwrap();
                    if let Some(churn) = db.family("churn")
                        && db.put_cf(&churn, k.as_bytes(), &[b'c'; 64]).is_ok()
                    {
                        count(2);
                    }
                }
            }));
        }
        // Two threads create and drop the same family, racing each other.
        for _ in 0..2 {
            let (db, fs, count) = (&db, &fs, &count);
            s.spawn(move || {
                running(&|_| {
                    if db.create_family("churn", family_options(fs, 3)).is_ok() {
                        count(0);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    if db.drop_family("churn").is_ok() {
                        count(1);
                    }
                })
            });
        }
        let db2 = &db;
        s.spawn(move || {
            running(&|i| {
                db2.flush().unwrap();
                if i % 4 == 0 {
                    let churn = db2.family("churn");
                    if let Some(c) = churn {
                        db2.compact_range_cf(&c, None, None).unwrap();
                    }
                }
            })
        });
        // Stop the churn once the writers are done, even when one failed.
        let results: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert_eq!(db.stats().poisoned, None);
    let [created, dropped, written] = counts.map(|c| c.into_inner());
    assert!(
        created > 0 && dropped > 0 && written > 0,
        "the churn did nothing: {created} created, {dropped} dropped, {written} written"
    );
    eprintln!("churn: {created} created, {dropped} dropped, {written} writes to it");
    let check = |db: &Db| {
        let stable = db.family("stable").unwrap();
        for w in 0..2u64 {
            for k in 0..500u64 {
                let key = format!("w{w}-{k:04}");
                let want = Some((1000 + k).to_le_bytes().to_vec());
                assert_eq!(db.get(key.as_bytes()).unwrap(), want, "{key}");
                assert_eq!(db.get_cf(&stable, key.as_bytes()).unwrap(), want, "{key}");
            }
        }
    };
    check(&db);
    Arc::try_unwrap(db).unwrap().close().unwrap();
    let families = vec![("stable".to_string(), family_options(&fs, 2))];
    let db = Db::open_with_families(dir, family_options(&fs, 0), families).unwrap();
    check(&db);
}

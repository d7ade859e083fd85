//! Optimistic transactions: what a transaction sees, when its commit conflicts (including
//! when the history it needs has left the memtables), a bank of accounts moved between by
//! threads, and random interleavings checked against a serial model.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use proptest::prelude::*;
use strata::{Db, MemFs, ReadOptions, WriteOptions};

fn open() -> Db {
    Db::open("/db", common::tiny_options(Some(MemFs::new()), 4)).unwrap()
}

fn conflict(r: strata::Result<()>) -> bool {
    match r {
        Err(e) if e.is_conflict() => true,
        Err(e) => panic!("{e}"),
        Ok(()) => false,
    }
}

#[test]
fn a_transaction_reads_its_snapshot_and_its_own_writes() {
    let db = open();
    db.put(b"a", b"1").unwrap();
    db.put(b"c", b"3").unwrap();
    let mut tx = db.transaction();
    db.put(b"a", b"changed").unwrap();
    db.put(b"b", b"new").unwrap();
    assert_eq!(
        tx.get(b"a").unwrap(),
        Some(b"1".to_vec()),
        "the snapshot's value"
    );
    assert_eq!(tx.get(b"b").unwrap(), None, "written after the snapshot");
    tx.put(b"b", b"mine");
    tx.delete(b"c");
    tx.put(b"d", b"4");
    assert_eq!(tx.get(b"b").unwrap(), Some(b"mine".to_vec()));
    assert_eq!(tx.get(b"c").unwrap(), None);
    let scanned = tx.scan(..).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = [("a", "1"), ("b", "mine"), ("d", "4")]
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    assert_eq!(scanned, want);
    // Nothing is written before commit, and the commit conflicts: `a` was read and written
    // since.
    assert_eq!(db.get(b"d").unwrap(), None);
    assert!(conflict(tx.commit(WriteOptions::default())));
    assert_eq!(
        db.get(b"d").unwrap(),
        None,
        "a conflicting commit writes nothing"
    );
    assert_eq!(db.get(b"c").unwrap(), Some(b"3".to_vec()));
}

#[test]
fn commits_conflict_exactly_on_keys_read_or_written_since_the_snapshot() {
    let db = open();
    db.put(b"x", b"0").unwrap();
    db.put(b"y", b"0").unwrap();
    // Disjoint keys: both commit.
    let mut t1 = db.transaction();
    let mut t2 = db.transaction();
    t1.get(b"x").unwrap();
    t1.put(b"x", b"1");
    t2.get(b"y").unwrap();
    t2.put(b"y", b"2");
    assert!(!conflict(t1.commit(WriteOptions::default())));
    assert!(!conflict(t2.commit(WriteOptions::default())));
    // Write-write on a key neither read: the second conflicts.
    let mut t1 = db.transaction();
    let mut t2 = db.transaction();
    t1.put(b"z", b"1");
    t2.put(b"z", b"2");
    assert!(!conflict(t1.commit(WriteOptions::default())));
    assert!(conflict(t2.commit(WriteOptions::default())));
    assert_eq!(db.get(b"z").unwrap(), Some(b"1".to_vec()));
    // A key read and then rewritten with the same value by someone else still conflicts:
    // the check is by sequence number, not by value.
    let mut t = db.transaction();
    t.get(b"x").unwrap();
    t.put(b"w", b"1");
    db.put(b"x", b"1").unwrap();
    assert!(conflict(t.commit(WriteOptions::default())));
    // A deletion by someone else conflicts too.
    let mut t = db.transaction();
    t.get(b"y").unwrap();
    t.put(b"w", b"2");
    db.delete(b"y").unwrap();
    assert!(conflict(t.commit(WriteOptions::default())));
    // A read-only transaction commits.
    let mut t = db.transaction();
    t.get(b"x").unwrap();
    db.put(b"x", b"9").unwrap();
    assert!(!conflict(t.commit(WriteOptions::default())));
}

#[test]
fn the_check_is_exact_once_the_history_is_in_tables() {
    let db = open();
    for i in 0..200u32 {
        db.put(format!("k{i:03}").as_bytes(), b"old").unwrap();
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    // Written long before the snapshot and compacted: no conflict.
    let mut t = db.transaction();
    t.get(b"k007").unwrap();
    t.put(b"k008", b"t");
    // Others write plenty after the snapshot (not k007 or k008), flushed and compacted, so
    // that the memtables hold none of it.
    for i in 100..200u32 {
        db.put(format!("k{i:03}").as_bytes(), b"new").unwrap();
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    assert!(!conflict(t.commit(WriteOptions::default())));
    // A write after the snapshot that has left the memtables for the deepest level.
    let mut t = db.transaction();
    t.get(b"k150").unwrap();
    t.put(b"k151", b"t");
    db.put(b"k150", b"newer").unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:03}").as_bytes(), b"filler").unwrap();
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    assert!(conflict(t.commit(WriteOptions::default())));
    assert_eq!(db.get(b"k151").unwrap(), Some(b"new".to_vec()));
}

/// Jepsen's and Badger's bank: threads move random amounts between random accounts with
/// transactions, retrying on conflict, while a checker reads every balance at a snapshot.
/// The total never changes and no balance goes negative. Conflicts are counted.
#[test]
fn bank_transfers_keep_the_total() {
    const ACCOUNTS: u64 = 20;
    const START: u64 = 100;
    let seed = common::seed("bank");
    let db = Arc::new(open());
    let account = |i: u64| format!("acct{i:02}").into_bytes();
    for i in 0..ACCOUNTS {
        db.put(&account(i), START.to_string().as_bytes()).unwrap();
    }
    let balance = |v: Option<Vec<u8>>| -> u64 {
        String::from_utf8(v.expect("an account vanished"))
            .unwrap()
            .parse()
            .unwrap()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (commits, conflicts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let movers: Vec<_> = (0..3u64)
        .map(|t| {
            let (db, stop) = (db.clone(), stop.clone());
            let (commits, conflicts) = (commits.clone(), conflicts.clone());
            std::thread::spawn(move || {
                let mut rng = common::Rng(seed ^ (t + 1));
                while !stop.load(Ordering::Relaxed) {
                    let from = rng.below(ACCOUNTS);
                    let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                    let amount = 1 + rng.below(30);
                    let mut tx = db.transaction();
                    let a = balance(tx.get(&account(from)).unwrap());
                    let b = balance(tx.get(&account(to)).unwrap());
                    if a < amount {
                        continue;
                    }
                    tx.put(&account(from), (a - amount).to_string().as_bytes());
                    tx.put(&account(to), (b + amount).to_string().as_bytes());
                    match tx.commit(WriteOptions::default()) {
                        Ok(()) => commits.fetch_add(1, Ordering::Relaxed),
                        Err(e) if e.is_conflict() => conflicts.fetch_add(1, Ordering::Relaxed),
                        Err(e) => panic!("{e}"),
                    };
                }
            })
        })
        .collect();
    let mut checks = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        let ro = ReadOptions {
            snapshot: Some(db.snapshot()),
            ..ReadOptions::default()
        };
        let mut total = 0;
        for i in 0..ACCOUNTS {
            total += balance(db.get_with(&account(i), &ro).unwrap());
        }
        assert_eq!(total, ACCOUNTS * START, "check {checks} (seed {seed})");
        checks += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for m in movers {
        m.join().unwrap();
    }
    let total: u64 = (0..ACCOUNTS)
        .map(|i| balance(db.get(&account(i)).unwrap()))
        .sum();
    assert_eq!(total, ACCOUNTS * START);
    let (commits, conflicts) = (
        commits.load(Ordering::Relaxed),
        conflicts.load(Ordering::Relaxed),
    );
    eprintln!(
        "bank: {commits} transfers committed, {conflicts} conflicts, {checks} snapshot checks \
         of the total (seed {seed})"
    );
    assert!(commits > 100 && conflicts > 0, "the movers must contend");
}

#[derive(Debug, Clone)]
enum Step {
    /// Begin transaction `t` (replacing an open one).
    Begin(usize),
    Get(usize, u8),
    Put(usize, u8, u8),
    Delete(usize, u8),
    /// A scan of the whole keyspace (`None`) or of keys from `lo` to `hi`, each bound
    /// included or not.
    Scan(usize, Option<(u8, bool, u8, bool)>),
    Commit(usize),
    /// A write outside any transaction.
    Direct(u8, Option<u8>),
    Flush,
}

fn key(k: u8) -> Vec<u8> {
    vec![b'k', k]
}

fn step() -> impl Strategy<Value = Step> {
    let k = 0u8..6;
    prop_oneof![
        2 => (0usize..3).prop_map(Step::Begin),
        3 => (0usize..3, k.clone()).prop_map(|(t, k)| Step::Get(t, k)),
        3 => (0usize..3, k.clone(), any::<u8>()).prop_map(|(t, k, v)| Step::Put(t, k, v)),
        1 => (0usize..3, k.clone()).prop_map(|(t, k)| Step::Delete(t, k)),
        1 => (0usize..3).prop_map(|t| Step::Scan(t, None)),
        2 => (0usize..3, (0u8..7, any::<bool>(), 0u8..7, any::<bool>()))
            .prop_map(|(t, bounds)| Step::Scan(t, Some(bounds))),
        2 => (0usize..3).prop_map(Step::Commit),
        2 => (k, proptest::option::of(any::<u8>())).prop_map(|(k, v)| Step::Direct(k, v)),
        1 => Just(Step::Flush),
    ]
}

type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// The model of one open transaction: the state at its start, its writes, the keys it read,
/// and the keys written by others since it began.
struct ModelTx {
    start: State,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    read: std::collections::BTreeSet<Vec<u8>>,
    touched_since: std::collections::BTreeSet<Vec<u8>>,
}

impl ModelTx {
    fn view(&self) -> State {
        let mut s = self.start.clone();
        for (k, v) in &self.writes {
            match v {
                Some(v) => s.insert(k.clone(), v.clone()),
                None => s.remove(k),
            };
        }
        s
    }
}

fn run_model(steps: Vec<Step>) {
    let db = open();
    let mut state = State::new();
    let mut txs: Vec<Option<(strata::Transaction<'_>, ModelTx)>> = vec![None, None, None];
    for (i, s) in steps.into_iter().enumerate() {
        let ctx = format!("step {i}: {s:?}");
        match s {
            Step::Begin(t) => {
                txs[t] = Some((
                    db.transaction(),
                    ModelTx {
                        start: state.clone(),
                        writes: BTreeMap::new(),
                        read: Default::default(),
                        touched_since: Default::default(),
                    },
                ));
            }
            Step::Get(t, k) => {
                if let Some((tx, m)) = txs[t].as_mut() {
                    let got = tx.get(&key(k)).unwrap();
                    assert_eq!(got.as_ref(), m.view().get(&key(k)), "{ctx}");
                    if !m.writes.contains_key(&key(k)) {
                        m.read.insert(key(k));
                    }
                }
            }
            Step::Put(t, k, v) => {
                if let Some((tx, m)) = txs[t].as_mut() {
                    tx.put(&key(k), &[v]);
                    m.writes.insert(key(k), Some(vec![v]));
                }
            }
            Step::Delete(t, k) => {
                if let Some((tx, m)) = txs[t].as_mut() {
                    tx.delete(&key(k));
                    m.writes.insert(key(k), None);
                }
            }
            Step::Scan(t, bounds) => {
                if let Some((tx, m)) = txs[t].as_mut() {
                    // Whether key number `k` lies in the scan's range, said on the numbers.
                    let inside = |k: &[u8]| match bounds {
                        None => true,
                        Some((lo, lo_in, hi, hi_in)) => {
                            (k[1] > lo || lo_in && k[1] == lo) && (k[1] < hi || hi_in && k[1] == hi)
                        }
                    };
                    let bound = |k: u8, inclusive: bool| match inclusive {
                        true => Bound::Included(key(k)),
                        false => Bound::Excluded(key(k)),
                    };
                    let got = match bounds {
                        None => tx.scan(..).unwrap(),
                        // The two forms callers write most, as they write them.
                        Some((lo, true, hi, false)) => tx.scan(key(lo)..key(hi)).unwrap(),
                        Some((lo, true, hi, true)) => tx.scan(key(lo)..=key(hi)).unwrap(),
                        Some((lo, lo_in, hi, hi_in)) => {
                            tx.scan((bound(lo, lo_in), bound(hi, hi_in))).unwrap()
                        }
                    };
                    let want: Vec<_> = m.view().into_iter().filter(|(k, _)| inside(k)).collect();
                    assert_eq!(got, want, "{ctx}");
                    // Only the keys inside, from the snapshot, join the keys checked at commit.
                    for k in m.start.keys() {
                        if inside(k) && !m.writes.contains_key(k) {
                            m.read.insert(k.clone());
                        }
                    }
                }
            }
            Step::Commit(t) => {
                if let Some((tx, m)) = txs[t].take() {
                    let expect_conflict = !m.writes.is_empty()
                        && m.read
                            .iter()
                            .chain(m.writes.keys())
                            .any(|k| m.touched_since.contains(k));
                    let got = conflict(tx.commit(WriteOptions::default()));
                    assert_eq!(got, expect_conflict, "{ctx}");
                    if !got {
                        for (k, v) in &m.writes {
                            match v {
                                Some(v) => state.insert(k.clone(), v.clone()),
                                None => state.remove(k),
                            };
                            for (_, other) in txs.iter_mut().flatten() {
                                other.touched_since.insert(k.clone());
                            }
                        }
                    }
                }
            }
            Step::Direct(k, v) => {
                match v {
                    Some(v) => {
                        db.put(&key(k), &[v]).unwrap();
                        state.insert(key(k), vec![v]);
                    }
                    None => {
                        db.delete(&key(k)).unwrap();
                        state.remove(&key(k));
                    }
                }
                for (_, other) in txs.iter_mut().flatten() {
                    other.touched_since.insert(key(k));
                }
            }
            Step::Flush => db.flush().unwrap(),
        }
        assert_eq!(common::dump(&db), state, "{ctx}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(300),
        ..ProptestConfig::default()
    })]

    /// Interleaved transactions and plain writes against a serial model: every read a
    /// transaction makes, every commit's outcome (a conflict exactly when a key it read or
    /// wrote was written by another since it began), and the database after each step.
    #[test]
    fn transactions_match_a_serial_model(steps in proptest::collection::vec(step(), 1..80)) {
        run_model(steps);
    }
}

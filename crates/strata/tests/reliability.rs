//! Reliability under simulated power loss, injected I/O faults at every call site, and
//! corruption of every kind of file. Each test prints its figures (for docs/RELIABILITY.md).
//! `STRATA_RELIABILITY_SCALE` multiplies the number of rounds.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use strata::{
    Db, Error, FaultFs, FaultOp, FileSystem, MemFs, Options, ReadOptions, WriteBatch, WriteOptions,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
const MARKER: &[u8] = b"~batch";

fn scale() -> u64 {
    std::env::var("STRATA_RELIABILITY_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn options(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        write_buffer_size: 4 * 1024,
        target_file_size: 4 * 1024,
        level1_max_bytes: 16 * 1024,
        size_ratio: 4,
        block_size: 256,
        level0_compaction_trigger: 2,
        // Four 64 KiB windows: on a real file system, scans release mapped pages often.
        table_map_bytes: 256 * 1024,
        fs,
        ..common::options()
    }
}

fn batch_ops(seed: u64, i: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut rng = common::Rng(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..1 + rng.below(5))
        .map(|j| {
            let key = format!("key{:04}", rng.below(400)).into_bytes();
            if rng.chance(20) {
                (key, None)
            } else {
                (
                    key,
                    Some(format!("v{i}-{j}-{}", "y".repeat(rng.below(80) as usize)).into_bytes()),
                )
            }
        })
        .collect();
    ops.push((MARKER.to_vec(), Some(i.to_string().into_bytes())));
    ops
}

/// The column family that, where a database has it, holds the keys of odd number: batches
/// then span two families.
const ODD: &str = "odd";

fn is_odd(key: &[u8]) -> bool {
    key.last().is_some_and(|d| d.is_ascii_digit() && d % 2 == 1) && key.starts_with(b"key")
}

/// The batch of `ops`, with the keys of odd number in family [`ODD`] where `db` has it.
fn to_batch(db: &Db, ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> WriteBatch {
    let odd = db.family(ODD);
    let mut b = WriteBatch::new();
    for (k, v) in ops {
        let cf = match &odd {
            Some(cf) if is_odd(k) => cf.clone(),
            _ => db.default_family(),
        };
        match v {
            Some(v) => b.put_cf(&cf, k, v),
            None => b.delete_cf(&cf, k),
        }
    }
    b
}

/// Every key of the database: of the default family, and of [`ODD`] where it has it.
fn dump_all(db: &Db) -> Model {
    let mut state = common::dump(db);
    if let Some(cf) = db.family(ODD) {
        for k in state.keys() {
            assert!(!is_odd(k), "an odd key in the default family");
        }
        let ro = ReadOptions {
            family: Some(cf),
            ..ReadOptions::default()
        };
        for e in db.scan_with(.., ro, false).unwrap() {
            let (k, v) = e.unwrap();
            assert!(is_odd(&k), "an even key in the odd family");
            state.insert(k, v);
        }
    }
    state
}

fn model_after(seed: u64, batches: u64) -> Model {
    let mut m = Model::new();
    for i in 0..batches {
        for (k, v) in batch_ops(seed, i) {
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
    }
    m
}

/// Checks that the database holds exactly the state after some prefix of the batches,
/// at least `min_batches` long and at most `max_batches`; returns the prefix length.
fn verify_prefix(db: &Db, seed: u64, min_batches: u64, max_batches: u64, context: &str) -> u64 {
    let state = dump_all(db);
    let end = state.get(MARKER).map_or(0, |v| {
        String::from_utf8_lossy(v).parse::<u64>().unwrap() + 1
    });
    assert!(
        end >= min_batches,
        "{context}: only {end} batches survive, {min_batches} must"
    );
    assert!(
        end <= max_batches,
        "{context}: {end} batches survive, only {max_batches} were issued"
    );
    assert!(
        state == model_after(seed, end),
        "{context}: state is not the prefix of {end} batches"
    );
    end
}

#[test]
fn power_loss_at_random_moments_keeps_every_synced_write() {
    let seed = common::seed("power_loss");
    let mut rng = common::Rng(seed);
    let rounds = 60 * scale();
    let (mut clean, mut torn, mut holes) = (0u64, 0u64, 0u64);
    for round in 0..rounds {
        let mem = MemFs::new();
        // Every other round, a write buffer of 64 KiB: logs of many pages, which a torn
        // power loss can leave with holes.
        // Each merge policy in turn.
        let merge_policy = [
            strata::MergePolicy::Leveling,
            strata::MergePolicy::Tiering,
            strata::MergePolicy::LazyLeveling,
        ][(round % 3) as usize];
        let opts = |fs: MemFs| Options {
            write_buffer_size: if round % 2 == 1 { 64 * 1024 } else { 4 * 1024 },
            merge_policy,
            ..options(Arc::new(fs))
        };
        // Batches span two column families: each is still all or nothing.
        let open = |fs: MemFs| {
            let families = vec![(ODD.to_string(), opts(fs.clone()))];
            Db::open_with_families("/db", opts(fs), families)
        };
        let db = open(mem.clone()).unwrap();
        let total = 50 + rng.below(400);
        let crash_at = rng.below(total);
        let tear_seed = rng.next_u64();
        let mut last_synced: Option<u64> = None;
        let mut copies = Vec::new();
        for i in 0..total {
            // The large-buffer rounds sync rarely, so that their unsynced tails span pages.
            let sync = rng.chance(if round % 2 == 1 { 2 } else { 15 });
            db.write(to_batch(&db, &batch_ops(seed, i)), WriteOptions { sync })
                .unwrap();
            if sync {
                last_synced = Some(i);
            }
            if i == crash_at {
                // The power fails now, while flushes and compactions may be running: either
                // every unsynced page is lost, or each one is lost or kept by chance.
                copies.push(("clean", mem.power_loss_copy(), last_synced, i + 1));
                copies.push((
                    "torn",
                    mem.torn_power_loss_copy(tear_seed),
                    last_synced,
                    i + 1,
                ));
            }
        }
        drop(db);
        if let [(_, clean_copy, ..), (_, torn_copy, ..)] = &copies[..] {
            holes += u64::from(has_a_hole(clean_copy, torn_copy));
        }
        for (how, after, synced, issued) in copies {
            let context = format!("round {round}, {how} power loss (seed {seed})");
            // The MANIFEST holds the family before opening could create it again.
            let listed = Db::list_families("/db", &opts(after.clone()))
                .unwrap_or_else(|e| panic!("{context}: listing families: {e}"));
            assert_eq!(listed, ["default", ODD], "{context}");
            let db = open(after).unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
            verify_prefix(&db, seed, synced.map_or(0, |s| s + 1), issued, &context);
            match how {
                "clean" => clean += 1,
                _ => torn += 1,
            }
        }
    }
    eprintln!(
        "power_loss: {clean} clean and {torn} torn power losses simulated ({holes} torn WALs \
         with a lost page before a kept one), every synced write kept (seed {seed})"
    );
    assert!(
        holes > 0,
        "no torn copy had a hole: the torn simulation tested nothing new"
    );
}

/// True when some WAL of `torn` has a page lost (zero past what the clean copy kept) before
/// a page that was kept.
fn has_a_hole(clean: &MemFs, torn: &MemFs) -> bool {
    const PAGE: usize = 4096;
    let dir = Path::new("/db");
    torn.list(dir)
        .unwrap()
        .iter()
        .filter(|n| n.ends_with(".wal"))
        .any(|name| {
            let path = dir.join(name);
            let kept = clean.read_all(&path).unwrap_or_default();
            let synced = kept.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            let data = torn.read_all(&path).unwrap();
            let mut lost = false;
            let mut page = synced - synced % PAGE;
            while page < data.len() {
                let part = &data[page.max(synced)..(page + PAGE).min(data.len())];
                if part.iter().all(|&b| b == 0) {
                    lost = true;
                } else if lost {
                    return true;
                }
                page += PAGE;
            }
            false
        })
}

/// What a workload run against faults got acknowledged.
struct Acked {
    /// Batches issued (the last one may have failed).
    issued: u64,
    /// Batches acknowledged: a crash of the process must keep them all.
    written: u64,
    /// Batches acknowledged up to the last synced one: a power loss must keep them.
    synced: u64,
}

/// Options under which the fault workload makes the same calls in the same order every run:
/// memtables switch and tables merge only when the workload asks, never on a timer or
/// behind its back, so that "the Nth append" names one call site.
fn fault_options(fs: Arc<dyn FileSystem>) -> Options {
    Options {
        write_buffer_size: 1 << 20,
        level0_compaction_trigger: 100,
        level0_slowdown_trigger: 100,
        level0_stop_trigger: 100,
        level1_max_bytes: 1 << 30,
        read_triggered_compaction: false,
        idle_merge_after: None,
        ..options(fs)
    }
}

/// Runs the workload against `fault`, stopping at the first error: batches with a flush
/// every 40, a full compaction after 80 (into many small tables), more batches, another.
/// Returns the database still open, so that a test can crash it.
fn faulty_workload(fault: &FaultFs, seed: u64, batches: u64) -> (Acked, Option<Db>) {
    let mut acked = Acked {
        issued: 0,
        written: 0,
        synced: 0,
    };
    let Ok(db) = Db::open("/db", fault_options(Arc::new(fault.clone()))) else {
        return (acked, None);
    };
    for i in 0..batches {
        let sync = i % 7 == 0;
        acked.issued = i + 1;
        if db
            .write(to_batch(&db, &batch_ops(seed, i)), WriteOptions { sync })
            .is_err()
        {
            return (acked, Some(db));
        }
        acked.written = i + 1;
        if sync {
            acked.synced = i + 1;
        }
        if (i % 40 == 39 && db.flush().is_err())
            || (i == 79 && db.compact_range(None, None).is_err())
        {
            return (acked, Some(db));
        }
    }
    let _ = db.compact_range(None, None);
    (acked, Some(db))
}

#[test]
fn a_fault_at_every_io_call_site_loses_nothing_acknowledged() {
    let seed = 4242;
    let batches = 120;
    // Count the calls of each kind in a clean run.
    let clean = FaultFs::new(Arc::new(MemFs::new()));
    drop(faulty_workload(&clean, seed, batches));
    // Every call site by default; STRATA_FAULT_STRIDE samples every Nth instead.
    let stride = std::env::var("STRATA_FAULT_STRIDE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1u64)
        .max(1);
    let mut report = Vec::new();
    for (kind, short) in FaultOp::ALL
        .iter()
        .map(|k| (*k, false))
        .chain([(FaultOp::Append, true)])
    {
        let calls = clean.calls(kind);
        // A kind the workload never calls would be swept zero times and pass unseen.
        assert!(
            calls > 0,
            "{kind:?}: the workload makes no such call, so no fault of it is tried"
        );
        let mut fired = 0u64;
        let mut n = 1;
        while n <= calls {
            let mem = MemFs::new();
            let fault = FaultFs::new(Arc::new(mem.clone()));
            if short {
                fault.short_write_nth(n, 50);
            } else {
                fault.fail_nth(kind, n, false);
            }
            let (acked, db) = faulty_workload(&fault, seed, batches);
            // The process dies now, or the power fails, with the files as the fault left
            // them and the database still open.
            let mut copies = vec![
                ("crash", mem.process_crash_copy(), acked.written),
                ("power loss", mem.power_loss_copy(), acked.synced),
            ];
            // And the files as the database left them when it was closed after the fault.
            drop(db);
            copies.push(("close", mem.process_crash_copy(), acked.written));
            let context = format!(
                "{kind:?}{} fault at call {n} of {calls}",
                if short { " short write" } else { "" }
            );
            assert_eq!(
                fault.faults_injected(),
                1,
                "{context}: the fault did not fire (the run made {} such calls)",
                fault.calls(kind)
            );
            fired += 1;
            // Reopened after a crash of the process, the files must hold every acknowledged
            // write; after a power loss, every synced one.
            for (what, fs, kept) in copies {
                let db = Db::open("/db", fault_options(Arc::new(fs)))
                    .unwrap_or_else(|e| panic!("{context}, {what}: {e}"));
                verify_prefix(&db, seed, kept, acked.issued, &format!("{context}, {what}"));
            }
            n += stride;
        }
        assert!(fired > 0, "{kind:?}: no fault fired");
        report.push(format!(
            "{kind:?}{}: {calls} call sites in the workload, a fault fired at {fired} of them",
            if short { " (short write)" } else { "" }
        ));
    }
    for line in &report {
        eprintln!("fault injection: {line}");
    }
}

/// How one damaged copy of a database ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    /// Opening it, or a read, failed with an error naming the damaged file.
    Reported,
    /// Every read (each key, full scans both ways) equals the model: the damage hit bytes
    /// no read uses (an SST's filter or properties, which `check` still reports).
    ReadsRight,
    /// A truncated WAL: every read equals the state after a prefix of the batches.
    TornPrefix,
}

/// The error must be corruption in exactly `path`.
fn names_file(e: &Error, path: &Path) -> std::result::Result<(), String> {
    match e {
        Error::Corruption { file, .. } | Error::UnsupportedFormat { file, .. } if file == path => {
            Ok(())
        }
        other => Err(format!("an error that does not name the file: {other}")),
    }
}

/// Reads every key and scans the whole database both ways, comparing entry by entry with
/// `expect`; `Ok(true)` when some read failed with an error naming `path`.
fn reads_match(db: &Db, expect: &Model, path: &Path) -> std::result::Result<bool, String> {
    let mut reported = false;
    let keys = (0..400)
        .map(|i| format!("key{i:04}").into_bytes())
        .chain([MARKER.to_vec()]);
    for k in keys {
        match db.get(&k) {
            Ok(got) if got.as_ref() == expect.get(&k) => {}
            Ok(got) => {
                return Err(format!(
                    "{}: read {:?}, expected {:?}",
                    String::from_utf8_lossy(&k),
                    got.map(|v| String::from_utf8_lossy(&v).into_owned()),
                    expect
                        .get(&k)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                ));
            }
            Err(e) => {
                names_file(&e, path)?;
                reported = true;
            }
        }
    }
    for reverse in [false, true] {
        let mut scan_failed = false;
        let mut want: Vec<(&Vec<u8>, &Vec<u8>)> = expect.iter().collect();
        if reverse {
            want.reverse();
        }
        let mut want = want.into_iter();
        for entry in db
            .scan_with(.., ReadOptions::default(), reverse)
            .map_err(|e| e.to_string())?
        {
            match entry {
                Ok((k, v)) => {
                    if want.next() != Some((&k, &v)) {
                        return Err(format!(
                            "scan (reverse: {reverse}) met {} out of place or with a wrong value",
                            String::from_utf8_lossy(&k)
                        ));
                    }
                }
                Err(e) => {
                    names_file(&e, path)?;
                    reported = true;
                    scan_failed = true;
                    break;
                }
            }
        }
        if !scan_failed && want.next().is_some() {
            return Err(format!("scan (reverse: {reverse}) ended early"));
        }
    }
    Ok(reported)
}

/// Opens one damaged copy and decides how it ended; `Err` is a miss.
fn judge_damaged_copy(
    fs: MemFs,
    opts: &Options,
    path: &Path,
    model: &Model,
    wal_truncated: bool,
    seed: u64,
) -> std::result::Result<Verdict, String> {
    let db = match Db::open(
        "/db",
        Options {
            fs: Arc::new(fs),
            ..opts.clone()
        },
    ) {
        Ok(db) => db,
        Err(e) => return names_file(&e, path).map(|()| Verdict::Reported),
    };
    if wal_truncated {
        // A WAL cut short reads as a crash during its last write: the state after a prefix
        // of the batches, at least those before the flush.
        let end = match db.get(MARKER) {
            Ok(v) => v.map_or(0, |v| {
                String::from_utf8_lossy(&v).parse::<u64>().unwrap() + 1
            }),
            Err(e) => return names_file(&e, path).map(|()| Verdict::Reported),
        };
        if end < 150 {
            return Err(format!("only {end} batches left, 150 are in tables"));
        }
        return match reads_match(&db, &model_after(seed, end), path)? {
            true => Ok(Verdict::Reported),
            false => Ok(Verdict::TornPrefix),
        };
    }
    match reads_match(&db, model, path)? {
        true => Ok(Verdict::Reported),
        false => Ok(Verdict::ReadsRight),
    }
}

#[test]
fn corruption_anywhere_is_reported_never_misread() {
    let seed = 99;
    let mem = MemFs::new();
    let opts = Options {
        level0_compaction_trigger: 100,
        level0_slowdown_trigger: 100,
        level0_stop_trigger: 100,
        read_triggered_compaction: false,
        ..options(Arc::new(mem.clone()))
    };
    let db = Db::open("/db", opts.clone()).unwrap();
    for i in 0..150 {
        db.write(
            to_batch(&db, &batch_ops(seed, i)),
            WriteOptions { sync: true },
        )
        .unwrap();
    }
    db.flush().unwrap();
    for i in 150..200 {
        db.write(
            to_batch(&db, &batch_ops(seed, i)),
            WriteOptions { sync: true },
        )
        .unwrap();
    }
    drop(db);
    let model = model_after(seed, 200);
    let names: Vec<String> = mem
        .list(Path::new("/db"))
        .unwrap()
        .into_iter()
        .filter(|n| n != "LOCK")
        .collect();
    let mut rng = common::Rng(seed);
    let mut tally: BTreeMap<(&str, Verdict), u64> = BTreeMap::new();
    let mut misses = Vec::new();
    let mut injected = 0u64;
    for name in &names {
        let kind = if name.ends_with(".sst") {
            "SST"
        } else if name.ends_with(".wal") {
            "WAL"
        } else if name.starts_with("MANIFEST") {
            "MANIFEST"
        } else {
            "CURRENT"
        };
        let path = Path::new("/db").join(name);
        let size = mem.file_size(&path).unwrap();
        for round in 0..(25 * scale()) {
            let fs = mem.process_crash_copy();
            let truncate = round % 5 == 4;
            let offset = rng.below(size.max(1)) as usize;
            let bit = 1u8 << rng.below(8);
            fs.mutate_file(&path, |d| {
                if truncate {
                    d.truncate(offset);
                } else if let Some(b) = d.get_mut(offset) {
                    *b ^= bit;
                }
            })
            .unwrap();
            injected += 1;
            let context = format!(
                "{name} {} at {offset}",
                if truncate { "truncated" } else { "bit flip" }
            );
            // `check` must name every damaged SST, whether or not a read needs the bytes.
            if kind == "SST" {
                let report = strata::inspect::check_fs(&fs, Path::new("/db")).unwrap();
                if !report.iter().any(|r| r.path == path && r.error.is_some()) {
                    misses.push(format!("{context}: check did not find the damage"));
                }
            }
            // Half the copies read tables through mappings, half with read_at.
            let opts = Options {
                table_map_bytes: if round % 2 == 0 { 256 * 1024 } else { 0 },
                ..opts.clone()
            };
            let wal_truncated = kind == "WAL" && truncate;
            match judge_damaged_copy(fs, &opts, &path, &model, wal_truncated, seed) {
                Ok(verdict) => *tally.entry((kind, verdict)).or_default() += 1,
                Err(why) => misses.push(format!("{context}: {why}")),
            }
        }
    }
    for ((kind, verdict), n) in &tally {
        eprintln!("corruption: {kind}: {n} damaged copies {verdict:?}");
    }
    for kind in ["CURRENT", "MANIFEST", "SST", "WAL"] {
        assert!(
            tally.keys().any(|(k, _)| *k == kind),
            "no {kind} file was damaged: the database lacks one"
        );
    }
    eprintln!(
        "corruption: {injected} damaged copies, {} misses",
        misses.len()
    );
    assert!(misses.is_empty(), "misses:\n{}", misses.join("\n"));
}

/// db_stress in small: threads doing puts, deletes, batches, gets, range scans both ways and
/// snapshot reads while flushes and compactions run; every point read checked against the
/// expected value under the key's lock, every scan checked against point reads at the same
/// snapshot.
#[test]
fn stress_mixed_operations_from_many_threads() {
    use std::sync::Mutex;
    let seconds: f64 = std::env::var("STRATA_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let seed = common::seed("stress");
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options {
                fs: Arc::new(strata::StdFs),
                ..options(Arc::new(strata::StdFs))
            },
        )
        .unwrap(),
    );
    const KEYS: usize = 500;
    let expected: Arc<Vec<Mutex<Option<Vec<u8>>>>> =
        Arc::new((0..KEYS).map(|_| Mutex::new(None)).collect());
    let key = |i: usize| format!("s{i:04}").into_bytes();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (db, expected) = (db.clone(), expected.clone());
            std::thread::spawn(move || {
                let mut rng = common::Rng(seed + t);
                let mut ops = 0u64;
                while std::time::Instant::now() < deadline {
                    let i = rng.below(KEYS as u64) as usize;
                    match rng.below(100) {
                        0..=39 => {
                            let mut e = expected[i].lock().unwrap();
                            let v = format!("t{t}-{ops}").into_bytes();
                            db.put(&key(i), &v).unwrap();
                            *e = Some(v);
                        }
                        40..=49 => {
                            let mut e = expected[i].lock().unwrap();
                            db.delete(&key(i)).unwrap();
                            *e = None;
                        }
                        50..=59 => {
                            // A batch over consecutive keys, locked in order.
                            let n = 1 + rng.below(4) as usize;
                            let idx: Vec<usize> = (i..(i + n).min(KEYS)).collect();
                            let mut guards: Vec<_> =
                                idx.iter().map(|&j| expected[j].lock().unwrap()).collect();
                            let mut b = WriteBatch::new();
                            let v = format!("b{t}-{ops}").into_bytes();
                            for &j in &idx {
                                b.put(&key(j), &v);
                            }
                            db.write(
                                b,
                                WriteOptions {
                                    sync: rng.chance(5),
                                },
                            )
                            .unwrap();
                            for g in guards.iter_mut() {
                                **g = Some(v.clone());
                            }
                        }
                        60..=84 => {
                            let e = expected[i].lock().unwrap();
                            assert_eq!(db.get(&key(i)).unwrap(), *e, "key {i} (seed {seed})");
                        }
                        _ => {
                            let snap = db.snapshot();
                            let ro = ReadOptions {
                                snapshot: Some(snap),
                                ..ReadOptions::default()
                            };
                            let (lo, hi) = (key(i), key((i + 40).min(KEYS)));
                            let fwd: Vec<_> = db
                                .scan_with(lo.clone()..hi.clone(), ro.clone(), false)
                                .unwrap()
                                .map(|e| e.unwrap())
                                .collect();
                            let mut back: Vec<_> = db
                                .scan_with(lo..hi, ro.clone(), true)
                                .unwrap()
                                .map(|e| e.unwrap())
                                .collect();
                            back.reverse();
                            assert_eq!(
                                fwd, back,
                                "forward and backward scans differ (seed {seed})"
                            );
                            assert!(fwd.windows(2).all(|w| w[0].0 < w[1].0));
                            for (k, v) in fwd.iter().take(8) {
                                assert_eq!(
                                    db.get_with(k, &ro).unwrap().as_ref(),
                                    Some(v),
                                    "snapshot read differs from its scan"
                                );
                            }
                        }
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    let ops: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(
            db.get(&key(i)).unwrap(),
            *e.lock().unwrap(),
            "final key {i}"
        );
    }
    let s = db.stats();
    eprintln!(
        "stress: {ops} operations verified in {seconds} s by 4 threads; \
         {} flushes, {} compactions (seed {seed})",
        s.flushes, s.compactions
    );
    assert!(s.flushes > 0 && s.compactions > 0);
}

/// Unsynced writes, a memtable switch whose flush never finishes, then a synced write in
/// the new WAL: after a power loss the writes before the synced one are all there (the
/// switch syncs the old WAL; were it left unsynced, the synced write would have to sync it).
#[test]
fn a_synced_write_after_a_switch_keeps_the_unsynced_writes_before_it() {
    synced_after_a_switch(false);
}

/// The same for `sync_wal` (a server's `everysec`) after unsynced writes.
#[test]
fn sync_wal_after_a_switch_keeps_the_writes_before_it() {
    synced_after_a_switch(true);
}

fn synced_after_a_switch(by_sync_wal: bool) {
    let mem = MemFs::new();
    let fault = FaultFs::new(Arc::new(mem.clone()));
    let db = Db::open("/db", options(Arc::new(fault.clone()))).unwrap();
    // The flush of the first memtable waits at the gate: its writes are in its WAL only.
    // The gate opens before the database closes, whatever the test's outcome.
    struct OpenOnDrop(FaultFs);
    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            self.0.open_gate();
        }
    }
    let gate = OpenOnDrop(fault.clone());
    fault.close_gate(".sst");
    let key = |i: u32| format!("key{i:05}").into_bytes();
    let wals = || {
        let names = mem.list(Path::new("/db")).unwrap();
        names.iter().filter(|n| n.ends_with(".wal")).count()
    };
    let mut written = 0;
    while wals() < 2 {
        db.put(&key(written), &[b'v'; 100]).unwrap();
        written += 1;
    }
    db.put(&key(written), &[b'v'; 100]).unwrap();
    written += 1;
    let mut synced = WriteBatch::new();
    synced.put(b"synced", b"yes");
    // The flush has reached the gate (it may not have by the time of the synced write,
    // which asks nothing of it), and waits there while the power goes.
    let start = std::time::Instant::now();
    while fault.held_at_gate() == 0 {
        assert!(
            start.elapsed().as_secs() < 30,
            "the flush never reached the gate"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    match by_sync_wal {
        false => db.write(synced, WriteOptions { sync: true }).unwrap(),
        true => {
            db.write(synced, WriteOptions { sync: false }).unwrap();
            db.sync_wal().unwrap();
        }
    }
    let lost_power = mem.power_loss_copy();
    drop(gate);
    drop(db);
    let db = Db::open("/db", options(Arc::new(lost_power))).unwrap();
    assert_eq!(db.get(b"synced").unwrap(), Some(b"yes".to_vec()));
    for i in 0..written {
        assert_eq!(
            db.get(&key(i)).unwrap(),
            Some(vec![b'v'; 100]),
            "key {i} of {written}, written before the synced write, was lost"
        );
    }
}

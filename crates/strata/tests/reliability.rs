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
        ..Options::default()
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

fn to_batch(ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k, v),
            None => b.delete(k),
        }
    }
    b
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
    let state = common::dump(db);
    let end = state.get(MARKER).map_or(0, |v| {
        String::from_utf8_lossy(v).parse::<u64>().unwrap() + 1
    });
    assert!(
        end >= min_batches,
        "{context}: only {end} batches survive, {min_batches} were synced"
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
    let rounds = 40 * scale();
    let mut losses = 0u64;
    for round in 0..rounds {
        let mem = MemFs::new();
        let db = Db::open("/db", options(Arc::new(mem.clone()))).unwrap();
        let total = 50 + rng.below(400);
        let crash_at = rng.below(total);
        let mut last_synced: Option<u64> = None;
        let mut copy = None;
        for i in 0..total {
            let sync = rng.chance(15);
            db.write(to_batch(&batch_ops(seed, i)), WriteOptions { sync })
                .unwrap();
            if sync {
                last_synced = Some(i);
            }
            if i == crash_at {
                // The power fails now, while flushes and compactions may be running.
                copy = Some((mem.power_loss_copy(), last_synced, i + 1));
            }
        }
        drop(db);
        let (after, synced, issued) = copy.unwrap();
        let db = Db::open("/db", options(Arc::new(after))).unwrap_or_else(|e| {
            panic!("round {round}: reopen after power loss: {e} (seed {seed})")
        });
        verify_prefix(
            &db,
            seed,
            synced.map_or(0, |s| s + 1),
            issued,
            &format!("round {round} (seed {seed})"),
        );
        losses += 1;
    }
    eprintln!("power_loss: {losses} power losses simulated, every synced write kept (seed {seed})");
}

/// Runs the workload against `fault`, stopping at the first error; returns (batches issued,
/// batches synced and acknowledged).
fn faulty_workload(fault: &FaultFs, seed: u64, batches: u64) -> (u64, u64) {
    let Ok(db) = Db::open("/db", options(Arc::new(fault.clone()))) else {
        return (0, 0);
    };
    let mut synced_end = 0;
    for i in 0..batches {
        let sync = i % 7 == 0;
        match db.write(to_batch(&batch_ops(seed, i)), WriteOptions { sync }) {
            Ok(()) if sync => synced_end = i + 1,
            Ok(()) => {}
            Err(_) => return (i + 1, synced_end),
        }
        if i % 40 == 39 && db.flush().is_err() {
            return (i + 1, synced_end);
        }
    }
    if db.compact_range(None, None).is_err() {
        return (batches, synced_end);
    }
    (batches, synced_end)
}

#[test]
fn a_fault_at_every_io_call_site_loses_nothing_acknowledged() {
    let seed = 4242;
    let batches = 120;
    // Count the calls of each kind in a clean run.
    let clean = FaultFs::new(Arc::new(MemFs::new()));
    faulty_workload(&clean, seed, batches);
    let mut report = Vec::new();
    for (kind, short) in FaultOp::ALL
        .iter()
        .map(|k| (*k, false))
        .chain([(FaultOp::Append, true)])
    {
        let calls = clean.calls(kind);
        // Every call site by default; STRATA_FAULT_STRIDE samples every Nth instead.
        let stride = std::env::var("STRATA_FAULT_STRIDE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1u64)
            .max(1);
        let mut injected = 0;
        let mut n = 1;
        while n <= calls {
            let mem = MemFs::new();
            let fault = FaultFs::new(Arc::new(mem.clone()));
            if short {
                fault.short_write_nth(n, 50);
            } else {
                fault.fail_nth(kind, n, false);
            }
            let (issued, synced) = faulty_workload(&fault, seed, batches);
            injected += fault.faults_injected();
            let context = format!(
                "{kind:?}{} fault at call {n}",
                if short { " short write" } else { "" }
            );
            // After the fault clears, a reopen of the files as they are must be consistent
            // and hold every synced write; so must one after a power loss.
            for (what, fs) in [
                ("reopen", mem.process_crash_copy()),
                ("power loss", mem.power_loss_copy()),
            ] {
                let db = Db::open("/db", options(Arc::new(fs)))
                    .unwrap_or_else(|e| panic!("{context}, {what}: {e}"));
                verify_prefix(
                    &db,
                    seed,
                    synced,
                    issued.max(synced),
                    &format!("{context}, {what}"),
                );
            }
            n += stride;
        }
        report.push(format!(
            "{kind:?}{}: {calls} call sites in the workload, {injected} faults injected",
            if short { " (short write)" } else { "" }
        ));
    }
    for line in &report {
        eprintln!("fault injection: {line}");
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
        db.write(to_batch(&batch_ops(seed, i)), WriteOptions { sync: true })
            .unwrap();
    }
    db.flush().unwrap();
    for i in 150..200 {
        db.write(to_batch(&batch_ops(seed, i)), WriteOptions { sync: true })
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
    let (mut injected, mut detected, mut torn_ok) = (0u64, 0u64, 0u64);
    let mut per_kind: BTreeMap<String, (u64, u64)> = BTreeMap::new();
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
            let entry = per_kind.entry(kind.to_string()).or_default();
            entry.0 += 1;
            let context = format!(
                "{name} {} at {offset}",
                if truncate { "truncated" } else { "bit flip" }
            );
            // `check` must find every damaged SST.
            if kind == "SST" {
                let report = strata::inspect::check_fs(&fs, Path::new("/db")).unwrap();
                let damaged = report.iter().any(|r| r.path == path && r.error.is_some());
                assert!(damaged, "{context}: check did not find the damage");
            }
            match Db::open(
                "/db",
                Options {
                    fs: Arc::new(fs),
                    ..opts.clone()
                },
            ) {
                Err(e) => {
                    assert!(
                        e.is_corruption() || matches!(e, Error::UnsupportedFormat { .. }),
                        "{context}: open failed with {e}"
                    );
                    let file = match &e {
                        Error::Corruption { file, .. } | Error::UnsupportedFormat { file, .. } => {
                            file.clone()
                        }
                        _ => unreachable!(),
                    };
                    assert!(
                        file.starts_with("/db"),
                        "{context}: error names {}",
                        file.display()
                    );
                    detected += 1;
                    entry.1 += 1;
                }
                Ok(db) => {
                    // Every answer is right or an error; a truncated WAL may lose its tail.
                    let mut saw_error = false;
                    for (k, v) in &model {
                        match db.get(k) {
                            Ok(Some(got)) => assert!(
                                &got == v || kind == "WAL",
                                "{context}: wrong value for {k:?}"
                            ),
                            Ok(None) => assert!(
                                kind == "WAL" && truncate,
                                "{context}: {k:?} vanished silently"
                            ),
                            Err(e) => {
                                assert!(e.is_corruption(), "{context}: {e}");
                                saw_error = true;
                            }
                        }
                    }
                    let scan: strata::Result<Vec<_>> = db
                        .scan_with(.., ReadOptions::default(), false)
                        .unwrap()
                        .collect();
                    match scan {
                        Ok(entries) if kind == "WAL" && truncate => {
                            // A torn WAL tail: the state is a prefix of the batches.
                            let _ = entries;
                            verify_prefix(&db, seed, 150, 200, &context);
                            torn_ok += 1;
                            entry.1 += 1;
                        }
                        Ok(entries) => {
                            assert!(
                                saw_error || entries.len() == model.len(),
                                "{context}: scan disagrees"
                            );
                            if saw_error {
                                detected += 1;
                                entry.1 += 1;
                            } else {
                                // The flip hit bytes that no read needed (possible only in
                                // an SST's filter or properties, which `check` covers).
                                assert_eq!(kind, "SST", "{context}: damage went unnoticed");
                                detected += 1;
                                entry.1 += 1;
                            }
                        }
                        Err(e) => {
                            assert!(e.is_corruption(), "{context}: {e}");
                            detected += 1;
                            entry.1 += 1;
                        }
                    }
                }
            }
        }
    }
    for (kind, (n, found)) in &per_kind {
        eprintln!(
            "corruption: {kind}: {n} damaged copies, {found} detected or dropped as a torn tail"
        );
    }
    eprintln!(
        "corruption: {injected} injected, {detected} reported as corruption, {torn_ok} torn WAL tails dropped to a prefix"
    );
    assert_eq!(detected + torn_ok, injected);
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
        "stress: {ops} operations verified in {seconds} s by 4 threads; {} flushes, {} compactions (seed {seed})",
        s.flushes, s.compactions
    );
    assert!(s.flushes > 0 && s.compactions > 0);
}

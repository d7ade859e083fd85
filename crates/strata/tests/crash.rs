//! Crash tests: a child process writes random batches (some synced) derived from a seed and
//! a counter, reporting each acknowledgement; the parent kills it with SIGKILL at random
//! moments, reopens the database and checks that
//! - it opens, without any corruption error;
//! - its state is exactly the state after some prefix of the issued batches (no half batch,
//!   no deleted key back, no value from the future);
//! - that prefix holds every acknowledged batch, synced or not: a SIGKILL ends the process,
//!   not the machine, and an unsynced write is the operating system's once acknowledged;
//! - and that the child ended by the SIGKILL, not by itself (its stderr is shown if not).
//!
//! Each batch spans three column families (a key's number picks its family; the marker is
//! the default family's), so the all-or-nothing check covers batches across families.
//!
//! Flushes and compactions run during the kills (tiny memtables and files), under each merge
//! policy in turn: cycle `n` runs `POLICIES[n % 3]`, so the database also changes policy
//! between cycles, and each policy's picker meets the shapes the others left.
//! `STRATA_CRASH_CYCLES` sets the number of cycles (default 150).

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use strata::{Db, Options, WriteBatch, WriteOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const KEYS: u64 = 3000;
const MARKER: &[u8] = b"~batch";

#[derive(Debug, Clone)]
enum Write {
    Put(Vec<u8>),
    Delete,
    /// An operand of the append operator.
    Merge(Vec<u8>),
    /// `delete_range(key, end)`.
    DeleteRange(Vec<u8>),
}

/// The operations of batch `i`: a few puts, deletes and merges of keys chosen by the seed,
/// and the marker key recording the batch number.
fn batch_ops(seed: u64, i: u64) -> Vec<(Vec<u8>, Write)> {
    let mut rng = common::Rng(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let n = 1 + rng.below(8);
    let mut ops = Vec::new();
    for j in 0..n {
        let key = format!("key{:05}", rng.below(KEYS)).into_bytes();
        match rng.below(100) {
            0..25 => ops.push((key, Write::Delete)),
            25..45 => ops.push((key, Write::Merge(format!("m{i}-{j}").into_bytes()))),
            45..47 => {
                let end = format!("key{:05}", rng.below(KEYS)).into_bytes();
                if key <= end {
                    ops.push((key, Write::DeleteRange(end)));
                }
            }
            _ => {
                // Now and then a value large enough that the write group after its own
                // goes to the WAL with a system call rather than through its mapping.
                let len = match rng.below(10) {
                    0 => 4_100 + rng.below(4_000),
                    _ => rng.below(200),
                } as usize;
                let v = format!("v{i}-{j}-{}", "x".repeat(len)).into_bytes();
                ops.push((key, Write::Put(v)));
            }
        }
    }
    ops.push((MARKER.to_vec(), Write::Put(i.to_string().into_bytes())));
    ops
}

fn is_synced(seed: u64, i: u64) -> bool {
    common::Rng(seed.wrapping_add(i)).chance(10)
}

/// The column families besides the default one.
const FAMILIES: [&str; 2] = ["a", "b"];

/// The family a key is written in: `None` for the default one.
fn family_of(key: &[u8]) -> Option<&'static str> {
    let n: u64 = std::str::from_utf8(key.strip_prefix(b"key")?)
        .ok()?
        .parse()
        .ok()?;
    match n % 3 {
        0 => None,
        i => Some(FAMILIES[i as usize - 1]),
    }
}

fn open(path: &std::path::Path, policy: strata::MergePolicy) -> strata::Result<Db> {
    let families = FAMILIES.map(|f| (f.to_string(), options(policy))).to_vec();
    Db::open_with_families(path, options(policy), families)
}

/// Every family's state, in one map (a key lives in one family only).
fn dump_all(db: &Db) -> Model {
    let mut state = common::dump(db);
    for k in state.keys() {
        assert_eq!(
            family_of(k),
            None,
            "a key in the default family that is not its own"
        );
    }
    for f in FAMILIES {
        let cf = db.family(f).expect("the family exists");
        let ro = strata::ReadOptions {
            family: Some(cf),
            ..Default::default()
        };
        let it = db.scan_with(.., ro, false).unwrap();
        for e in it {
            let (k, v) = e.unwrap();
            assert_eq!(family_of(&k), Some(f), "a key in the wrong family");
            state.insert(k, v);
        }
    }
    state
}

fn apply(model: &mut Model, ops: &[(Vec<u8>, Write)]) {
    for (k, w) in ops {
        match w {
            Write::Put(v) => {
                model.insert(k.clone(), v.clone());
            }
            Write::Delete => {
                model.remove(k);
            }
            // A range delete removes its family's keys only.
            Write::DeleteRange(end) => {
                model.retain(|m, _| m < k || m >= end || family_of(m) != family_of(k));
            }
            Write::Merge(operand) => {
                let v = match model.get(k) {
                    Some(old) => [old.as_slice(), b",", operand].concat(),
                    None => operand.clone(),
                };
                model.insert(k.clone(), v);
            }
        }
    }
}

const POLICIES: [strata::MergePolicy; 3] = [
    strata::MergePolicy::Leveling,
    strata::MergePolicy::Tiering,
    strata::MergePolicy::LazyLeveling,
];

/// The merge policy of this cycle (the parent sets it for the child).
fn policy() -> strata::MergePolicy {
    let n: usize = std::env::var("STRATA_CRASH_POLICY")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    POLICIES[n % POLICIES.len()]
}

fn options(policy: strata::MergePolicy) -> Options {
    Options {
        merge_policy: policy,
        write_buffer_size: 16 * 1024,
        target_file_size: 16 * 1024,
        level1_max_bytes: 64 * 1024,
        size_ratio: 4,
        block_size: 512,
        merge_operator: Some(std::sync::Arc::new(strata::merge::Append {
            delimiter: b",".to_vec(),
        })),
        ..common::options()
    }
}

/// The child: writes batches from `STRATA_CRASH_START` on until killed.
#[test]
#[ignore = "run by crash_cycles in a child process"]
fn crash_child() {
    let (Ok(dir), Ok(seed), Ok(start)) = (
        std::env::var("STRATA_CRASH_DIR"),
        std::env::var("STRATA_CRASH_SEED"),
        std::env::var("STRATA_CRASH_START"),
    ) else {
        return;
    };
    let (seed, start): (u64, u64) = (seed.parse().unwrap(), start.parse().unwrap());
    let db = open(std::path::Path::new(&dir), policy()).unwrap();
    let families = FAMILIES.map(|f| db.family(f).unwrap());
    println!("ready");
    for i in start.. {
        let mut b = WriteBatch::new();
        for (k, w) in batch_ops(seed, i) {
            let cf = match family_of(&k) {
                Some(f) => families.iter().find(|c| c.name() == f).unwrap().clone(),
                None => db.default_family(),
            };
            match w {
                Write::Put(v) => b.put_cf(&cf, &k, &v),
                Write::Delete => b.delete_cf(&cf, &k),
                Write::Merge(operand) => b.merge_cf(&cf, &k, &operand),
                Write::DeleteRange(end) => b.delete_range_cf(&cf, &k, &end),
            }
        }
        db.write(
            b,
            WriteOptions {
                sync: is_synced(seed, i),
            },
        )
        .unwrap();
        println!("ack {i}");
    }
}

#[test]
fn crash_cycles() {
    let cycles: u64 = std::env::var("STRATA_CRASH_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(150);
    let seed = common::seed("crash_cycles");
    let mut rng = common::Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut model = Model::new();
    let mut next = 0u64; // the first batch the next child writes
    let mut survived = 0u64;
    let mut max_level = 0usize;
    for cycle in 0..cycles {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("STRATA_CRASH_DIR", &path)
            .env("STRATA_CRASH_SEED", seed.to_string())
            .env("STRATA_CRASH_START", next.to_string())
            .env("STRATA_CRASH_POLICY", cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let stderr_reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
            text
        });
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait until the child has opened the database, then let it write a while.
        // (libtest prints its own lines first.)
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("cycle {cycle}: child did not start (seed {seed})"));
            if line.ends_with("ready") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5 + rng.below(60)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        reader.join().unwrap();
        let child_stderr = stderr_reader.join().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "cycle {cycle}: the child ended by itself ({status:?}), not by the SIGKILL \
             (seed {seed}); its stderr:\n{child_stderr}"
        );
        let mut last_ack: Option<u64> = None;
        let mut last_synced_ack: Option<u64> = None;
        for line in rx.try_iter() {
            if let Some(i) = line
                .strip_prefix("ack ")
                .and_then(|n| n.parse::<u64>().ok())
            {
                last_ack = Some(i);
                if is_synced(seed, i) {
                    last_synced_ack = Some(i);
                }
            }
        }
        // The families were created by the first child: the MANIFEST must still hold them
        // (opening would create them again).
        let policy = POLICIES[cycle as usize % POLICIES.len()];
        let listed = Db::list_families(&path, &options(policy))
            .unwrap_or_else(|e| panic!("cycle {cycle}: listing families: {e} (seed {seed})"));
        assert_eq!(listed, ["default", "a", "b"], "cycle {cycle} (seed {seed})");
        let db = open(&path, policy)
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e} (seed {seed})"));
        let state = dump_all(&db);
        // The marker says which prefix survived; the rest of the state must match it exactly.
        let prefix_end = match state.get(MARKER) {
            Some(v) => String::from_utf8_lossy(v).parse::<u64>().unwrap() + 1,
            None => 0,
        };
        assert!(
            prefix_end >= next,
            "cycle {cycle}: batches from earlier cycles lost (seed {seed})"
        );
        if let Some(s) = last_synced_ack {
            assert!(
                prefix_end > s,
                "cycle {cycle}: synced batch {s} lost; survived up to {prefix_end} (seed {seed})"
            );
        }
        if let Some(a) = last_ack {
            assert!(
                prefix_end > a,
                "cycle {cycle}: acknowledged batch {a} lost to a SIGKILL; survived up to \
                 {prefix_end} (seed {seed})"
            );
        }
        // Unacknowledged batches may survive, but only the one in flight when killed.
        let acked_end = last_ack.map_or(next, |a| a + 1);
        assert!(
            prefix_end <= acked_end + 1,
            "cycle {cycle}: a batch from the future (seed {seed})"
        );
        for i in next..prefix_end {
            apply(&mut model, &batch_ops(seed, i));
        }
        assert_eq!(
            state.len(),
            model.len(),
            "cycle {cycle}: key count differs from the prefix (seed {seed})"
        );
        assert!(
            state == model,
            "cycle {cycle}: state is not the prefix up to batch {prefix_end} (seed {seed})"
        );
        let s = db.stats();
        max_level = max_level.max(s.levels.iter().rposition(|l| l.files > 0).unwrap_or(0));
        db.close().unwrap();
        next = prefix_end;
        survived += 1;
    }
    eprintln!(
        "crash_cycles: {survived} crash cycles survived, {next} batches, \
         deepest level {max_level} (seed {seed})"
    );
    assert!(next > 0);
    // Tables below level 0 come only from compactions: the kills struck a tree that
    // compacted, not one that only flushed.
    assert!(
        max_level >= 1,
        "crash_cycles: no table below level 0 in any cycle: compaction never ran (seed {seed})"
    );
}

//! Transfers between accounts: each reads two balances and writes two, as an optimistic
//! transaction, and the same reads and writes as a plain batch (no conflict check, so not
//! safe under contention) for the cost of the check. Prints transfers a second per thread
//! count and the share of transactions that conflicted and were retried.
//!
//! ```text
//! cargo run --release -p strata --example transfer -- --accounts 100000 --seconds 5 --hot 0
//! ```
//!
//! `--hot P` sends P percent of transfers between the first ten accounts (a hot-key skew).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use strata::{Db, Options, WriteBatch, WriteOptions};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn balance(v: Option<Vec<u8>>) -> u64 {
    v.and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// xorshift64, one per thread.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn pick(x: &mut u64, accounts: u64, hot: u64) -> (Vec<u8>, Vec<u8>) {
    let range = if next(x) % 100 < hot { 10 } else { accounts };
    let a = next(x) % range;
    let b = (a + 1 + next(x) % (range - 1)) % range;
    let key = |i: u64| format!("account{i:08}").into_bytes();
    (key(a), key(b))
}

/// Runs transfers from `threads` threads for `seconds`; returns (committed, conflicts).
fn run(db: &Arc<Db>, threads: u64, seconds: f64, accounts: u64, hot: u64, tx: bool) -> (u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let (done, conflicts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (db, stop, done, conflicts) =
                (db.clone(), stop.clone(), done.clone(), conflicts.clone());
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15 ^ (t + 1);
                while !stop.load(Ordering::Relaxed) {
                    let (from, to) = pick(&mut x, accounts, hot);
                    if tx {
                        let mut t = db.transaction();
                        let a = balance(t.get(&from).expect("read"));
                        let b = balance(t.get(&to).expect("read"));
                        t.put(&from, a.saturating_sub(1).to_string().as_bytes());
                        t.put(&to, (b + 1).to_string().as_bytes());
                        match t.commit(WriteOptions::default()) {
                            Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                            Err(e) if e.is_conflict() => conflicts.fetch_add(1, Ordering::Relaxed),
                            Err(e) => panic!("{e}"),
                        };
                    } else {
                        let a = balance(db.get(&from).expect("read"));
                        let b = balance(db.get(&to).expect("read"));
                        let mut batch = WriteBatch::new();
                        batch.put(&from, a.saturating_sub(1).to_string().as_bytes());
                        batch.put(&to, (b + 1).to_string().as_bytes());
                        db.write(batch, WriteOptions::default()).expect("write");
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("worker");
    }
    (
        done.load(Ordering::Relaxed),
        conflicts.load(Ordering::Relaxed),
    )
}

fn main() -> strata::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let accounts: u64 = arg(&args, "--accounts", "100000")
        .parse()
        .unwrap_or(100_000);
    let seconds: f64 = arg(&args, "--seconds", "5").parse().unwrap_or(5.0);
    let hot: u64 = arg(&args, "--hot", "0").parse().unwrap_or(0).min(100);
    let dir = arg(&args, "--dir", "/tmp/strata-transfer");
    let _ = std::fs::remove_dir_all(&dir);
    let db = Arc::new(Db::open(&dir, Options::default())?);
    let mut batch = WriteBatch::new();
    for i in 0..accounts {
        batch.put(format!("account{i:08}").as_bytes(), b"1000");
    }
    db.write(batch, WriteOptions::default())?;
    println!("{accounts} accounts, {hot}% of transfers among the first ten, {seconds} s a run");
    println!("threads  transactions/s  conflicts  plain batches/s  transactions/plain");
    for threads in [1, 2, 4] {
        let started = Instant::now();
        let (tx, conflicts) = run(&db, threads, seconds, accounts, hot, true);
        let tx_rate = tx as f64 / started.elapsed().as_secs_f64();
        let started = Instant::now();
        let (plain, _) = run(&db, threads, seconds, accounts, hot, false);
        let plain_rate = plain as f64 / started.elapsed().as_secs_f64();
        println!(
            "{threads:>7} {tx_rate:>15.0} {:>9.2}% {plain_rate:>16.0} {:>19.2}",
            100.0 * conflicts as f64 / (tx + conflicts).max(1) as f64,
            tx_rate / plain_rate
        );
    }
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

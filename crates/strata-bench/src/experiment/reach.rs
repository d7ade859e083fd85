//! What the engine offers beyond LevelDB's API, measured on Strata alone:
//! - counters: `--increments` additions spread over `--counters` keys, through the merge
//!   operator (`Db::merge` with `CounterAdd`) against a read, an add and a put, on one and
//!   on two threads (each thread on its own half of the keys, so that the read-then-write
//!   loses no update); every counter is checked at the end;
//! - a checkpoint of a database of `--checkpoint_mb` MiB (random keys, 100-byte values):
//!   hard-linked in its own file system, and copied into `--copy_dir` on another (a tmpfs);
//!   then two backups (the second after 1% more writes) and a restore that checks every
//!   file. Each copy is opened and its key count compared with the source's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use strata::merge::CounterAdd;
use strata::{BackupEngine, Db, Options, WriteBatch, WriteOptions};

use super::{Common, Out, Table, num};
use crate::workloads::{Rng, key};

#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// Additions per counter run.
    #[arg(long, default_value_t = 1_000_000)]
    pub increments: u64,
    /// Counter keys.
    #[arg(long, default_value_t = 1000)]
    pub counters: u64,
    /// Size of the database the checkpoint and backups copy, in MiB of keys and values.
    #[arg(long, default_value_t = 1024)]
    pub checkpoint_mb: u64,
    /// A directory on another file system (a tmpfs), where the checkpoint must copy.
    #[arg(long, default_value = "/dev/shm/strata-reach")]
    pub copy_dir: PathBuf,
    #[arg(long, default_value_t = 401)]
    pub seed: u64,
}

const COLUMNS: &[&str] = &[
    "measure",
    "variant",
    "threads",
    "ops",
    "seconds",
    "ops_per_s",
    "bytes",
];

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

pub fn run(a: &Args) -> Result<(), String> {
    let mut out = Out::start("reach", &a.common, &["strata"])?;
    let mut table = Table::new(COLUMNS);
    counters(a, &mut out, &mut table)?;
    checkpoints(a, &mut out, &mut table)?;
    out.finish(&table)
}

fn counter_key(i: u64) -> Vec<u8> {
    format!("counter{i:06}").into_bytes()
}

/// One counter run: `threads` threads, thread `t` adding 1 to counters `t, t + threads, ...`.
fn count(db: &Arc<Db>, a: &Args, threads: u64, merge: bool) -> Result<f64, String> {
    let per_thread = a.increments / threads;
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let db = db.clone();
            let (counters, seed) = (a.counters, a.seed);
            std::thread::spawn(move || -> Result<(), String> {
                let mine = counters / threads;
                let mut rng = Rng::new(seed + t);
                for _ in 0..per_thread {
                    let k = counter_key(t + threads * rng.below(mine));
                    if merge {
                        db.merge(&k, &CounterAdd::operand(1)).map_err(err)?;
                    } else {
                        let now = match db.get(&k).map_err(err)? {
                            Some(v) => CounterAdd::decode(&v).ok_or("a counter of bad width")?,
                            None => 0,
                        };
                        db.put(&k, &CounterAdd::operand(now + 1)).map_err(err)?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| "a counter thread panicked")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut total = 0i64;
    for i in 0..a.counters {
        if let Some(v) = db.get(&counter_key(i)).map_err(err)? {
            total += CounterAdd::decode(&v).ok_or("a counter of bad width")?;
        }
    }
    if total as u64 != per_thread * threads {
        return Err(format!(
            "the counters add up to {total}, not the {} additions made",
            per_thread * threads
        ));
    }
    Ok(seconds)
}

fn counters(a: &Args, out: &mut Out, table: &mut Table) -> Result<(), String> {
    out.say(&format!(
        "counters: {} additions over {} keys",
        a.increments, a.counters
    ));
    for threads in [1u64, 2] {
        for merge in [true, false] {
            let dir = out.db_dir(&format!("counters-{threads}-{merge}"));
            let _ = std::fs::remove_dir_all(&dir);
            let opts = Options {
                merge_operator: Some(Arc::new(CounterAdd)),
                ..Options::default()
            };
            let db = Arc::new(Db::open(&dir, opts).map_err(err)?);
            let seconds = count(&db, a, threads, merge)?;
            drop(db);
            let _ = std::fs::remove_dir_all(&dir);
            let variant = if merge { "merge" } else { "get+put" };
            let rate = a.increments as f64 / seconds;
            out.say(&format!(
                "  {variant:<8} {threads} thread(s): {seconds:.2} s, {rate:.0} additions/s"
            ));
            table.push(vec![
                json!("counter"),
                json!(variant),
                json!(threads),
                json!(a.increments),
                num(seconds),
                num(rate),
                json!(null),
            ]);
        }
    }
    Ok(())
}

/// Bytes of the files in `dir`, and how many of them share their inode with another name
/// (hard links).
fn dir_bytes(dir: &Path) -> Result<(u64, u64), String> {
    use std::os::unix::fs::MetadataExt;
    let (mut bytes, mut linked) = (0, 0);
    for e in std::fs::read_dir(dir).map_err(err)? {
        let m = e.map_err(err)?.metadata().map_err(err)?;
        if m.is_file() {
            bytes += m.len();
            if m.nlink() > 1 {
                linked += m.len();
            }
        }
    }
    Ok((bytes, linked))
}

/// The keys a full scan of `db` returns.
fn scan_count(db: &Db) -> Result<u64, String> {
    let mut n = 0;
    for e in db.scan(..).map_err(err)? {
        e.map_err(err)?;
        n += 1;
    }
    Ok(n)
}

/// The keys of the database in `dir`: each copy opens as a database of its own.
fn key_count(dir: &Path) -> Result<u64, String> {
    scan_count(&Db::open(dir, Options::default()).map_err(err)?)
}

fn fill(db: &Db, from: u64, to: u64, rng: &mut Rng) -> Result<(), String> {
    let value = vec![b'v'; 100];
    let mut b = WriteBatch::new();
    for _ in from..to {
        b.put(&key(rng.next_u64() % 1_000_000_000_000, 16), &value);
        if b.len() == 1000 {
            db.write(std::mem::take(&mut b), WriteOptions::default())
                .map_err(err)?;
        }
    }
    db.write(b, WriteOptions::default()).map_err(err)
}

fn checkpoints(a: &Args, out: &mut Out, table: &mut Table) -> Result<(), String> {
    let entries = a.checkpoint_mb * (1 << 20) / 116;
    let dir = out.db_dir("checkpoint-source");
    let _ = std::fs::remove_dir_all(&dir);
    let db = Db::open(&dir, Options::default()).map_err(err)?;
    let mut rng = Rng::new(a.seed);
    let started = Instant::now();
    fill(&db, 0, entries, &mut rng)?;
    db.compact_range(None, None).map_err(err)?;
    let (db_bytes, _) = dir_bytes(&dir)?;
    out.say(&format!(
        "checkpoint source: {entries} puts of 16 + 100 bytes, {:.0} MiB on disk, filled and \
         compacted in {:.1} s",
        db_bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    ));
    let mut row = |out: &mut Out, measure: &str, variant: &str, seconds: f64, bytes: u64| {
        out.say(&format!(
            "  {measure:<10} {variant:<28} {seconds:>7.3} s  {:>8.1} MiB",
            bytes as f64 / (1 << 20) as f64
        ));
        table.push(vec![
            json!(measure),
            json!(variant),
            json!(1),
            json!(1),
            num(seconds),
            json!(null),
            json!(bytes),
        ]);
    };
    let source_keys = scan_count(&db)?;

    // In the same file system: hard links.
    let linked = a.common.db.join("checkpoint-linked");
    let t = Instant::now();
    db.checkpoint(&linked).map_err(err)?;
    let seconds = t.elapsed().as_secs_f64();
    let (bytes, shared) = dir_bytes(&linked)?;
    row(
        out,
        "checkpoint",
        "hard links (same fs)",
        seconds,
        bytes - shared,
    );
    if key_count(&linked)? != source_keys {
        return Err("the linked checkpoint does not hold the source's keys".into());
    }

    // Into another file system: copies.
    let copied = a.copy_dir.join("checkpoint");
    let _ = std::fs::remove_dir_all(&a.copy_dir);
    std::fs::create_dir_all(&a.copy_dir).map_err(err)?;
    let t = Instant::now();
    db.checkpoint(&copied).map_err(err)?;
    let seconds = t.elapsed().as_secs_f64();
    let (bytes, shared) = dir_bytes(&copied)?;
    row(out, "checkpoint", "copies (tmpfs)", seconds, bytes - shared);
    if key_count(&copied)? != source_keys {
        return Err("the copied checkpoint does not hold the source's keys".into());
    }
    let _ = std::fs::remove_dir_all(&a.copy_dir);

    // Backups: a full one, then one after 1% more writes.
    let backups = BackupEngine::open(a.common.db.join("backups")).map_err(err)?;
    let t = Instant::now();
    let first = backups.create(&db).map_err(err)?;
    row(
        out,
        "backup",
        "first",
        t.elapsed().as_secs_f64(),
        first.added_bytes,
    );
    fill(&db, 0, entries / 100, &mut rng)?;
    let t = Instant::now();
    let second = backups.create(&db).map_err(err)?;
    row(
        out,
        "backup",
        "after 1% more writes",
        t.elapsed().as_secs_f64(),
        second.added_bytes,
    );
    let restored = a.common.db.join("restored");
    let t = Instant::now();
    backups.restore(second.info.id, &restored).map_err(err)?;
    row(
        out,
        "restore",
        "newest, checksums checked",
        t.elapsed().as_secs_f64(),
        second.info.bytes,
    );
    if key_count(&restored)? != scan_count(&db)? {
        return Err("the restored backup does not hold the source's keys".into());
    }
    Ok(())
}

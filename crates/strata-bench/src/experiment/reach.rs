//! What the engine offers beyond LevelDB's API, measured on Strata alone:
//! - counters: `--increments` additions spread over `--counters` keys, through the merge
//!   operator (`Db::merge` with `CounterAdd`) against a read, an add and a put, on one and
//!   on two threads (each thread on its own half of the keys, so that the read-then-write
//!   loses no update); every counter is checked at the end;
//! - range deletes: `--range_keys` keys deleted by one `delete_range` against one `delete`
//!   each, then random gets and a scan of what they deleted (each must find nothing);
//!   random gets with `--tombstones` range tombstones (two keys each, flushed into a table)
//!   against the same database without them, in alternating rounds; and FLUSHDB of
//!   `--range_keys` keys on `strata serve` against redis-server;
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
    /// Keys a range delete and FLUSHDB remove.
    #[arg(long, default_value_t = 1_000_000)]
    pub range_keys: u64,
    /// Range tombstones present for the random gets.
    #[arg(long, default_value_t = 1000)]
    pub tombstones: u64,
    /// Random gets per measure.
    #[arg(long, default_value_t = 200_000)]
    pub gets: u64,
    /// The strata binary for FLUSHDB (default: beside this one, or target/release).
    #[arg(long)]
    pub strata: Option<PathBuf>,
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
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
    range_deletes(a, &mut out, &mut table)?;
    tombstone_gets(a, &mut out, &mut table)?;
    flushdb(a, &mut out, &mut table)?;
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

fn push(out: &mut Out, table: &mut Table, row: (&str, &str, u64, f64, Option<u64>)) {
    let (measure, variant, ops, seconds, bytes) = row;
    let rate = ops as f64 / seconds;
    let amount = match bytes {
        Some(b) => format!("{:>10.1} MiB", b as f64 / (1 << 20) as f64),
        None => format!("{rate:>12.0}/s"),
    };
    out.say(&format!(
        "  {measure:<24} {variant:<28} {ops:>9} ops {seconds:>10.6} s {amount}"
    ));
    table.push(vec![
        json!(measure),
        json!(variant),
        json!(1),
        json!(ops),
        // Unrounded: some of these take microseconds.
        json!(seconds),
        if bytes.is_some() {
            json!(null)
        } else {
            num(rate)
        },
        json!(bytes),
    ]);
}

/// A database of `n` keys `key(i, 16)` with 100-byte values, compacted into its tables.
fn filled(dir: &Path, n: u64) -> Result<Db, String> {
    let _ = std::fs::remove_dir_all(dir);
    let db = Db::open(dir, Options::default()).map_err(err)?;
    let value = vec![b'v'; 100];
    let mut b = WriteBatch::new();
    for i in 0..n {
        b.put(&key(i, 16), &value);
        if b.len() == 1000 {
            db.write(std::mem::take(&mut b), WriteOptions::default())
                .map_err(err)?;
        }
    }
    db.write(b, WriteOptions::default()).map_err(err)?;
    db.compact_range(None, None).map_err(err)?;
    Ok(db)
}

/// Random gets of keys below `n`; returns the seconds and how many were found.
fn random_gets(db: &Db, n: u64, gets: u64, seed: u64) -> Result<(f64, u64), String> {
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let mut found = 0;
    for _ in 0..gets {
        if db.get(&key(rng.below(n), 16)).map_err(err)?.is_some() {
            found += 1;
        }
    }
    Ok((started.elapsed().as_secs_f64(), found))
}

fn range_deletes(a: &Args, out: &mut Out, table: &mut Table) -> Result<(), String> {
    let n = a.range_keys;
    out.say(&format!(
        "range deletes: {n} keys of 16 + 100 bytes, compacted"
    ));
    for one_write in [true, false] {
        let dir = out.db_dir("range-delete");
        let db = filled(&dir, n)?;
        let variant = if one_write {
            "delete_range"
        } else {
            "delete each"
        };
        let t = Instant::now();
        if one_write {
            db.delete_range(&key(0, 16), &key(n, 16)).map_err(err)?;
        } else {
            for i in 0..n {
                db.delete(&key(i, 16)).map_err(err)?;
            }
        }
        push(
            out,
            table,
            ("delete keys", variant, n, t.elapsed().as_secs_f64(), None),
        );
        let (seconds, found) = random_gets(&db, n, a.gets, a.seed)?;
        if found != 0 {
            return Err(format!("{variant}: {found} deleted keys found"));
        }
        push(
            out,
            table,
            ("get deleted key", variant, a.gets, seconds, None),
        );
        let t = Instant::now();
        if scan_count(&db)? != 0 {
            return Err(format!("{variant}: a scan found deleted keys"));
        }
        push(
            out,
            table,
            (
                "scan deleted range",
                variant,
                1,
                t.elapsed().as_secs_f64(),
                None,
            ),
        );
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn tombstone_gets(a: &Args, out: &mut Out, table: &mut Table) -> Result<(), String> {
    let n = a.range_keys;
    out.say(&format!(
        "random gets over {n} keys, without and with {} range tombstones of two keys each",
        a.tombstones
    ));
    let plain = filled(&out.db_dir("gets-plain"), n)?;
    let with = filled(&out.db_dir("gets-tombstones"), n)?;
    let stride = n / a.tombstones.max(1);
    for j in 0..a.tombstones {
        let begin = j * stride;
        with.delete_range(&key(begin, 16), &key(begin + 2, 16))
            .map_err(err)?;
    }
    // Into a table: every get consults it, as its range spans the keys.
    with.flush().map_err(err)?;
    let deleted = 2 * a.tombstones.min(n / 2);
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..3 {
        for (i, db) in [&plain, &with].into_iter().enumerate() {
            let (seconds, found) = random_gets(db, n, a.gets, a.seed + round)?;
            // Every get of a present key finds it; those the tombstones hide do not.
            let expected = a.gets as f64 * (n - deleted * i as u64) as f64 / n as f64;
            if (found as f64 - expected).abs() > expected * 0.02 + 50.0 {
                return Err(format!("{found} keys found, about {expected:.0} expected"));
            }
            times[i].push(seconds);
        }
    }
    let label = format!("{} range tombstones", a.tombstones);
    for (i, variant) in ["no tombstones", label.as_str()].into_iter().enumerate() {
        times[i].sort_by(f64::total_cmp);
        push(
            out,
            table,
            (
                "random get (median of 3)",
                variant,
                a.gets,
                times[i][1],
                None,
            ),
        );
    }
    drop((plain, with));
    let _ = std::fs::remove_dir_all(out.db_dir("gets-plain"));
    let _ = std::fs::remove_dir_all(out.db_dir("gets-tombstones"));
    Ok(())
}

/// Sends `requests` (RESP, pipelined) and waits for `count` replies.
fn exchange(addr: &str, requests: &[u8], count: u64) -> Result<Vec<u8>, String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    let writer = {
        let mut w = s.try_clone().map_err(err)?;
        let requests = requests.to_vec();
        std::thread::spawn(move || w.write_all(&requests))
    };
    let (mut input, mut buf, mut replies, mut last) =
        (Vec::new(), vec![0u8; 1 << 16], 0, Vec::new());
    while replies < count {
        let n = s.read(&mut buf).map_err(err)?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        input.extend_from_slice(&buf[..n]);
        while let Some(len) = crate::server_load::reply_len(&input)? {
            last = input.drain(..len).collect();
            replies += 1;
        }
    }
    writer.join().map_err(|_| "writer panicked")?.map_err(err)?;
    Ok(last)
}

fn flushdb(a: &Args, out: &mut Out, table: &mut Table) -> Result<(), String> {
    let n = a.range_keys;
    out.say(&format!(
        "FLUSHDB of {n} keys (100-byte values), AOF/WAL everysec"
    ));
    let value = vec![b'v'; 100];
    let mut load = Vec::new();
    for i in 0..n {
        crate::server_load::encode(&mut load, &[b"SET", &key(i, 16), &value]);
    }
    for name in ["strata", "redis"] {
        let dir = a.common.db.join(format!("flushdb-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        let server = super::server_mix::start_server(name, &a.strata, &a.redis_server, &dir)?;
        exchange(&server.addr, &load, n)?;
        let mut req = Vec::new();
        crate::server_load::encode(&mut req, &[b"FLUSHDB"]);
        let t = Instant::now();
        exchange(&server.addr, &req, 1)?;
        let seconds = t.elapsed().as_secs_f64();
        let mut req = Vec::new();
        crate::server_load::encode(&mut req, &[b"DBSIZE"]);
        if exchange(&server.addr, &req, 1)? != b":0\r\n" {
            return Err(format!("{name}: keys left after FLUSHDB"));
        }
        let variant = if name == "strata" {
            "strata serve"
        } else {
            "redis-server"
        };
        push(out, table, ("FLUSHDB", variant, n, seconds, None));
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
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
        push(out, table, (measure, variant, 1, seconds, Some(bytes)));
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

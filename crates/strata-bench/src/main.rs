//! `strata-bench`: db_bench's workloads on Strata, RocksDB, LevelDB and fjall in one harness,
//! and `strata-bench server`, a load client for Redis-protocol servers.

mod engines;
mod server_load;
mod sys;
mod transfer_load;
mod workloads;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use crate::engines::{Engine, Settings};
use crate::workloads::{Outcome, Params};

#[derive(Parser)]
#[command(
    name = "strata-bench",
    version,
    about = "db_bench's workloads on Strata and other engines"
)]
#[command(rename_all = "snake_case")]
struct Cli {
    #[command(subcommand)]
    command: Option<Mode>,
    /// Comma-separated workloads, run in order on one database.
    #[arg(
        long,
        default_value = "fillseq,fillrandom,overwrite,readrandom,readseq,readreverse,seekrandom"
    )]
    benchmarks: String,
    /// Entries to write.
    #[arg(long, default_value_t = 1_000_000)]
    num: u64,
    /// Reads per thread for the read workloads (default: --num).
    #[arg(long)]
    reads: Option<u64>,
    /// Threads running each workload.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// none, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression_type: String,
    /// Block cache bytes.
    #[arg(long, default_value_t = 8 << 20)]
    cache_size: usize,
    #[arg(long, default_value_t = 10)]
    bloom_bits: usize,
    #[arg(long, default_value_t = 64 << 20)]
    write_buffer_size: usize,
    #[arg(long, default_value_t = 4096)]
    block_size: usize,
    /// Strata only: bytes of Bloom filters and root index blocks its open tables may hold
    /// (default: Strata's, 32 MiB).
    #[arg(long)]
    table_pinned_bytes: Option<usize>,
    /// Strata only: B-tree indexes and partitioned Bloom filters (as RocksDB's flag of the
    /// name), so that open tables hold only the roots of both.
    #[arg(long)]
    partition_index_and_filters: bool,
    /// Sync every write (as fillsync does).
    #[arg(long)]
    sync: bool,
    /// Keep and reuse the database in --db instead of starting empty.
    #[arg(long)]
    use_existing_db: bool,
    /// Database directory (engines get subdirectories).
    #[arg(long, default_value = "/tmp/strata-bench")]
    db: PathBuf,
    #[arg(long, default_value_t = 301)]
    seed: u64,
    /// Keys per batched lookup in multireadrandom (db_bench's default is 1; 32 is the batch
    /// RocksDB's MultiGet works in).
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Engine for a single run.
    #[arg(long, default_value = "strata")]
    engine: String,
    /// Engines to compare, interleaved, e.g. strata,rocksdb,leveldb,fjall.
    #[arg(long)]
    compare: Option<String>,
    /// Rounds of a comparison; medians are reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Mode {
    /// Drive a Redis-protocol server with GET/SET mixes over Zipf-distributed keys.
    Server(server_load::Args),
}

fn settings(cli: &Cli) -> Settings {
    Settings {
        write_buffer_size: cli.write_buffer_size,
        cache_size: cli.cache_size,
        bloom_bits: cli.bloom_bits,
        block_size: cli.block_size,
        compression: cli.compression_type.clone(),
        table_pinned_bytes: cli.table_pinned_bytes,
        partition_index_and_filters: cli.partition_index_and_filters,
    }
}

fn params(cli: &Cli) -> Params {
    Params {
        num: cli.num,
        reads: cli.reads.unwrap_or(cli.num),
        threads: cli.threads.max(1),
        key_size: cli.key_size,
        value_size: cli.value_size,
        seed: cli.seed,
        batch_size: cli.batch_size,
    }
}

/// A workload's figures with what it did to the disk and memory.
struct Report {
    outcome: Outcome,
    write_amp: Option<f64>,
    disk_bytes: u64,
    peak_rss: Option<u64>,
}

fn print_line(engine: &str, r: &Report, prefix_engine: bool) {
    let o = &r.outcome;
    let mb = o.bytes as f64 / 1048576.0 / o.seconds.max(1e-9);
    let name = if prefix_engine {
        format!("{engine}/{}", o.name)
    } else {
        o.name.clone()
    };
    let mut line = format!(
        "{name:<12} : {:>11.3} micros/op {:>9.0} ops/sec;",
        o.micros_per_op(),
        o.ops_per_sec()
    );
    if o.bytes > 0 {
        line.push_str(&format!(" {mb:>7.1} MB/s"));
    }
    if (o.name.starts_with("read") && !o.name.starts_with("readseq") && o.name != "readreverse")
        || o.name == "multireadrandom"
    {
        line.push_str(&format!(" ({} of {} found)", o.found, o.ops));
    }
    println!("{line}");
    let h = &o.hist;
    println!(
        "{:<12} : p50 {:.2} us, p99 {:.2} us, p99.9 {:.2} us, max {:.2} us",
        "",
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.value_at_quantile(0.999) as f64 / 1000.0,
        h.max() as f64 / 1000.0
    );
    if workloads::writes(&o.name) {
        let live = o.bytes;
        let wa = r.write_amp.map_or("-".to_string(), |w| format!("{w:.2}"));
        println!(
            "{:<12} : write amp {wa}, on disk {:.1} MB for {:.1} MB written by the workload, \
             peak RSS {}",
            "",
            r.disk_bytes as f64 / 1048576.0,
            live as f64 / 1048576.0,
            r.peak_rss.map_or("-".to_string(), |b| format!(
                "{:.0} MB",
                b as f64 / 1048576.0
            ))
        );
    }
}

fn json_report(engine: &str, r: &Report) -> serde_json::Value {
    let o = &r.outcome;
    serde_json::json!({
        "engine": engine,
        "benchmark": o.name,
        "ops": o.ops,
        "seconds": o.seconds,
        "ops_per_sec": o.ops_per_sec(),
        "micros_per_op": o.micros_per_op(),
        "found": o.found,
        "p50_us": o.hist.value_at_quantile(0.5) as f64 / 1000.0,
        "p99_us": o.hist.value_at_quantile(0.99) as f64 / 1000.0,
        "p999_us": o.hist.value_at_quantile(0.999) as f64 / 1000.0,
        "write_amp": r.write_amp,
        "disk_bytes": r.disk_bytes,
        "peak_rss_bytes": r.peak_rss,
    })
}

/// Runs every workload of the list, in order, on one engine.
fn run_engine(
    cli: &Cli,
    engine_name: &str,
    dir: &Path,
    quiet: bool,
) -> Result<Vec<Report>, String> {
    let s = settings(cli);
    let p = params(cli);
    if !cli.use_existing_db {
        let _ = std::fs::remove_dir_all(dir);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut engine: Arc<dyn Engine> = Arc::from(engines::open(engine_name, dir, &s)?);
    let mut reports = Vec::new();
    let mut last_write: Option<WriteMark> = None;
    for name in cli
        .benchmarks
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        if name == "waitforcompaction" {
            // As RocksDB's db_bench: not a measurement, a pause until compactions settle. It
            // reports what settling added to the last write workload's cost: its write
            // amplification counted to the end of settling, and the size on disk after.
            let start = Instant::now();
            engine.settle()?;
            if !quiet && !cli.json {
                let settled = last_write
                    .as_ref()
                    .and_then(|w| w.amplification(engine.as_ref()))
                    .map_or(String::new(), |(name, wa)| {
                        format!("; {name} write amp with settling {wa:.2}")
                    });
                println!(
                    "{name:<12} : settled in {:.1} s{settled}, on disk {:.1} MB",
                    start.elapsed().as_secs_f64(),
                    sys::dir_bytes(dir) as f64 / 1e6
                );
            }
            continue;
        }
        if workloads::fresh_db(name) && !cli.use_existing_db {
            drop(engine);
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            engine = Arc::from(engines::open(engine_name, dir, &s)?);
        }
        let disk_before = sys::write_bytes();
        let engine_before = engine.bytes_written();
        let progress = Arc::new(AtomicU64::new(0));
        let bar = progress_bar(name, &progress, quiet);
        let outcome = workloads::run(&engine, &p, name, &progress)?;
        if let Some((stop, handle)) = bar {
            stop.store(u64::MAX, Ordering::SeqCst);
            let _ = handle.join();
        }
        let write_amp = if workloads::writes(name) && outcome.bytes > 0 {
            let mark = WriteMark {
                name: name.to_string(),
                engine_before,
                disk_before,
                bytes: outcome.bytes,
            };
            let wa = mark.amplification(engine.as_ref()).map(|(_, wa)| wa);
            last_write = Some(mark);
            wa
        } else {
            None
        };
        let report = Report {
            outcome,
            write_amp,
            disk_bytes: sys::dir_bytes(dir),
            peak_rss: sys::peak_rss_bytes(),
        };
        if !quiet {
            if cli.json {
                println!("{}", json_report(engine_name, &report));
            } else {
                print_line(engine_name, &report, false);
            }
        }
        reports.push(report);
    }
    Ok(reports)
}

/// Where the engine's and the process's write counters stood when a write workload began.
struct WriteMark {
    name: String,
    engine_before: Option<u64>,
    disk_before: Option<u64>,
    bytes: u64,
}

impl WriteMark {
    /// Bytes written since the mark per byte the workload wrote: the engine's own count where
    /// it keeps one, else what the process sent to disk.
    fn amplification(&self, engine: &dyn Engine) -> Option<(&str, f64)> {
        let written = match (engine.bytes_written(), self.engine_before) {
            (Some(after), Some(before)) => Some(after.saturating_sub(before)),
            _ => sys::write_bytes()
                .zip(self.disk_before)
                .map(|(a, b)| a.saturating_sub(b)),
        }?;
        Some((&self.name, written as f64 / self.bytes as f64))
    }
}

/// A progress bar on stderr for runs longer than a few seconds, silent when stderr is not a
/// terminal.
fn progress_bar(
    name: &str,
    progress: &Arc<AtomicU64>,
    quiet: bool,
) -> Option<(Arc<AtomicU64>, std::thread::JoinHandle<()>)> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let stop = Arc::new(AtomicU64::new(0));
    let (p, s, name) = (progress.clone(), stop.clone(), name.to_string());
    let handle = std::thread::spawn(move || {
        let start = Instant::now();
        let mut bar: Option<indicatif::ProgressBar> = None;
        while s.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(200));
            if start.elapsed() > Duration::from_secs(3) {
                let b = bar.get_or_insert_with(|| {
                    let b = indicatif::ProgressBar::new_spinner();
                    b.set_style(
                        indicatif::ProgressStyle::with_template("{spinner} {msg}")
                            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                    );
                    b
                });
                let n = p.load(Ordering::Relaxed);
                b.set_message(format!(
                    "{name}: {n} ops, {:.0} ops/s",
                    n as f64 / start.elapsed().as_secs_f64()
                ));
                b.tick();
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
    });
    Some((stop, handle))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn compare(cli: &Cli, list: &str) -> Result<(), String> {
    let engines: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let benchmarks: Vec<String> = cli
        .benchmarks
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s != "waitforcompaction")
        .collect();
    // results[engine][benchmark] = ops/sec of each round
    let mut results: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); benchmarks.len()]; engines.len()];
    for round in 1..=cli.rounds {
        for (ei, e) in engines.iter().enumerate() {
            eprintln!("round {round}/{}: {e}", cli.rounds);
            let reports = run_engine(cli, e, &cli.db.join(e), true)?;
            for (bi, r) in reports.iter().enumerate() {
                results[ei][bi].push(r.outcome.ops_per_sec());
                if cli.json {
                    let mut j = json_report(e, r);
                    j["round"] = serde_json::json!(round);
                    println!("{j}");
                }
            }
        }
    }
    if cli.json {
        return Ok(());
    }
    println!(
        "median ops/sec of {} interleaved rounds; num={} threads={} value_size={} \
         write_buffer_size={} cache_size={} bloom_bits={} compression={}",
        cli.rounds,
        cli.num,
        cli.threads,
        cli.value_size,
        cli.write_buffer_size,
        cli.cache_size,
        cli.bloom_bits,
        cli.compression_type
    );
    let mut header = format!("{:<18}", "benchmark");
    for e in &engines {
        header.push_str(&format!("{e:>12}"));
    }
    for e in engines.iter().skip(1) {
        header.push_str(&format!("{:>16}", format!("{}/{e}", engines[0])));
    }
    println!("{header}");
    for (bi, b) in benchmarks.iter().enumerate() {
        // A workload run twice (readrandom before and after compactions settle) is numbered.
        let seen = benchmarks[..bi].iter().filter(|x| *x == b).count();
        let b = if seen > 0 {
            format!("{b}#{}", seen + 1)
        } else {
            b.clone()
        };
        let meds: Vec<f64> = (0..engines.len())
            .map(|ei| median(results[ei][bi].clone()))
            .collect();
        let mut line = format!("{b:<18}");
        for m in &meds {
            line.push_str(&format!("{m:>12.0}"));
        }
        for m in meds.iter().skip(1) {
            line.push_str(&format!("{:>16.2}", meds[0] / m.max(1e-9)));
        }
        println!("{line}");
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Mode::Server(args)) => server_load::run(args),
        None => match &cli.compare {
            Some(list) => compare(&cli, list),
            None => {
                if !cli.json {
                    println!(
                        "{}: num={} key_size={} value_size={} threads={} write_buffer_size={} \
                         cache_size={} bloom_bits={} compression={}",
                        cli.engine,
                        cli.num,
                        cli.key_size,
                        cli.value_size,
                        cli.threads,
                        cli.write_buffer_size,
                        cli.cache_size,
                        cli.bloom_bits,
                        cli.compression_type
                    );
                }
                let dir = cli.db.join(&cli.engine);
                run_engine(&cli, &cli.engine, &dir, false).map(|_| ())
            }
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

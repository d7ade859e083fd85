//! `strata-bench`: db_bench's workloads on Strata, RocksDB, LevelDB and fjall in one harness,
//! and `strata-bench server`, a load client for Redis-protocol servers.

mod engines;
mod experiment;
mod machine;
mod plot;
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
    /// With zstd, the most bytes of a compression dictionary per table (db_bench's flag):
    /// Strata's `zstd_dictionary_bytes`, RocksDB's `max_dict_bytes` with 100 times as many
    /// bytes to train on. Unset, each engine keeps its default (Strata 16 KiB, RocksDB none).
    #[arg(long)]
    compression_max_dict_bytes: Option<usize>,
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
    /// (default: Strata's, a quarter of the memory the process may use).
    #[arg(long)]
    table_pinned_bytes: Option<usize>,
    /// Strata only: B-tree indexes and partitioned Bloom filters (as RocksDB's flag of the
    /// name), so that open tables hold only the roots of both.
    #[arg(long)]
    partition_index_and_filters: bool,
    /// Strata only: keep whole filters and flat indexes over the metadata budget, where its
    /// compactions would otherwise write partitioned ones (`Options::partition_over_budget`
    /// off).
    #[arg(long)]
    whole_metadata: bool,
    /// Strata only: the filters tables are written with, `auto` (Strata's default), `bloom`
    /// or `ribbon` (`Options::filter_format`).
    #[arg(long, default_value = "auto")]
    filter_format: String,
    /// Level-0 files that start their merge into level 1, for every engine that has the
    /// setting (db_bench's `level0_file_num_compaction_trigger`); each engine's own default
    /// when absent (4 for Strata and RocksDB).
    #[arg(long)]
    level0_file_num_compaction_trigger: Option<usize>,
    /// Sync every write of every workload (fillsync always does).
    #[arg(long)]
    sync: bool,
    /// Bytes per second readwhilewriting's writer may write, for every engine (db_bench's
    /// flag of the name); 0 writes as fast as it can.
    #[arg(long, default_value_t = 0)]
    benchmark_write_rate_limit: u64,
    /// Keep and reuse the database in --db instead of starting empty.
    #[arg(long)]
    use_existing_db: bool,
    /// After each workload and step, print the engine's own counters where it keeps them
    /// (db_bench's flag of the name): Strata's files per level, block cache hits and misses,
    /// bytes its tables hold pinned, compactions.
    #[arg(long)]
    statistics: bool,
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
    /// Draw the comparison's medians as an SVG bar chart into this file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// The chart's title (default: the run's settings).
    #[arg(long)]
    plot_title: Option<String>,
}

#[derive(Subcommand)]
enum Mode {
    /// Drive a Redis-protocol server with GET/SET mixes over Zipf-distributed keys.
    Server(server_load::Args),
    /// The seed documents' experiments, each with its CSV results and SVG figure.
    #[command(subcommand)]
    Experiment(experiment::Experiment),
}

fn settings(cli: &Cli) -> Settings {
    Settings {
        write_buffer_size: cli.write_buffer_size,
        cache_size: cli.cache_size,
        bloom_bits: cli.bloom_bits,
        block_size: cli.block_size,
        compression: cli.compression_type.clone(),
        max_dict_bytes: cli.compression_max_dict_bytes,
        table_pinned_bytes: cli.table_pinned_bytes,
        partition_index_and_filters: cli.partition_index_and_filters,
        whole_metadata: cli.whole_metadata,
        filter_format: cli.filter_format.clone(),
        level0_trigger: cli.level0_file_num_compaction_trigger,
        ..Settings::new()
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
        write_rate_limit: cli.benchmark_write_rate_limit,
        sync: cli.sync,
        generation: 0,
    }
}

/// A workload's figures with what it did to the disk and memory.
struct Report {
    outcome: Outcome,
    /// Bytes the process wrote to storage during the workload per byte of keys and values
    /// it wrote, the same measure for every engine.
    write_amp: Option<f64>,
    /// The engine's own count of what it wrote, per byte, where it keeps one.
    engine_write_amp: Option<f64>,
    disk_bytes: u64,
    peak_rss: Option<u64>,
    /// The process's CPU time over the workload, user and system seconds (background work
    /// included).
    cpu: Option<(f64, f64)>,
    /// Bytes the process read from the device over the workload (background work included).
    device_read: Option<u64>,
}

fn ratio(x: Option<f64>) -> String {
    x.map_or("-".to_string(), |w| format!("{w:.2}"))
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
    if let Some(found) = answer(o) {
        line.push_str(&format!(" ({found})"));
    }
    if let Some((puts, rate)) = o.writer {
        line.push_str(&format!(
            "; its writer put {puts} entries at {:.2} MB/s",
            rate / 1048576.0
        ));
    }
    println!("{line}");
    let h = &o.hist;
    println!(
        "{:<12} : p50 {:.2} us, p99 {:.2} us, p99.9 {:.2} us, max {:.2} us{}",
        "",
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.value_at_quantile(0.999) as f64 / 1000.0,
        h.max() as f64 / 1000.0,
        r.cpu
            .map_or(String::new(), |c| format!("; {}", cpu_text(c, r)))
    );
    if workloads::writes(&o.name) {
        println!(
            "{:<12} : write amp {} (engine's own count {}), on disk {:.1} MB for {:.1} MB \
             written by the workload, peak RSS {}",
            "",
            ratio(r.write_amp),
            ratio(r.engine_write_amp),
            r.disk_bytes as f64 / 1048576.0,
            o.bytes as f64 / 1048576.0,
            r.peak_rss.map_or("-".to_string(), |b| format!(
                "{:.0} MB",
                b as f64 / 1048576.0
            ))
        );
    }
}

/// A workload's CPU time, as the result lines print it, and, where the kernel counts them,
/// the process's reads from the device per operation: beyond memory, what each engine asked
/// of the disk (its background work's reads included).
fn cpu_text((user, system): (f64, f64), r: &Report) -> String {
    let mut text = format!("CPU user {user:.1} s, system {system:.1} s");
    if let Some(bytes) = r.device_read {
        text.push_str(&format!(
            ", device reads {:.1} MB ({:.2} KiB an op)",
            bytes as f64 / 1048576.0,
            bytes as f64 / 1024.0 / r.outcome.ops.max(1) as f64
        ));
    }
    text
}

/// What a read workload answered, in a form to compare engines by: `N of M found` for
/// lookups and seeks, the entry count for scans, and the hash of the answers.
fn answer(o: &Outcome) -> Option<String> {
    let hash = o.answer_hash?;
    Some(match o.name.as_str() {
        "readseq" | "readreverse" => format!("{} entries, hashed {hash:016x}", o.found),
        _ => format!("{} of {} found, hashed {hash:016x}", o.found, o.ops),
    })
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
        "answer_hash": o.answer_hash.map(|h| format!("{h:016x}")),
        "writer_puts": o.writer.map(|w| w.0),
        "writer_bytes_per_sec": o.writer.map(|w| w.1),
        "p50_us": o.hist.value_at_quantile(0.5) as f64 / 1000.0,
        "p99_us": o.hist.value_at_quantile(0.99) as f64 / 1000.0,
        "p999_us": o.hist.value_at_quantile(0.999) as f64 / 1000.0,
        "write_amp": r.write_amp,
        "engine_write_amp": r.engine_write_amp,
        "disk_bytes": r.disk_bytes,
        "peak_rss_bytes": r.peak_rss,
        "cpu_user_seconds": r.cpu.map(|c| c.0),
        "cpu_system_seconds": r.cpu.map(|c| c.1),
        "device_read_bytes": r.device_read,
    })
}

/// What a `waitforcompaction` or `compact` step took and left.
struct Step {
    name: String,
    seconds: f64,
    disk_bytes: u64,
    /// The last write workload's amplification counted to the end of this step: the process's
    /// count and the engine's own.
    write_amp: Option<f64>,
    engine_write_amp: Option<f64>,
    files: Option<String>,
}

/// The steps of a benchmark list that are pauses, not measurements: they print what they
/// took and what the disk holds after.
fn is_step(name: &str) -> bool {
    matches!(name, "waitforcompaction" | "compact")
}

/// Runs every workload of the list, in order, on one engine.
fn run_engine(
    cli: &Cli,
    engine_name: &str,
    dir: &Path,
    quiet: bool,
) -> Result<(Vec<Report>, Vec<Step>), String> {
    let s = settings(cli);
    let mut p = params(cli);
    if !cli.use_existing_db {
        let _ = std::fs::remove_dir_all(dir);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    sys::reset_peak_rss();
    let mut engine: Arc<dyn Engine> = Arc::from(engines::open(engine_name, dir, &s)?);
    let (mut reports, mut steps) = (Vec::new(), Vec::new());
    let mut last_write: Option<WriteMark> = None;
    for (place, name) in cli
        .benchmarks
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .enumerate()
    {
        p.generation = place as u64 + 1;
        if is_step(name) {
            // As db_bench's: `waitforcompaction` flushes and waits for background work to
            // end; `compact` compacts the whole key range. Either adds to the last write
            // workload's cost, reported as its write amplification to the end of the step.
            let start = Instant::now();
            match name {
                "compact" => engine.compact()?,
                _ => engine.wait_for_compaction()?,
            }
            let step = Step {
                name: name.to_string(),
                seconds: start.elapsed().as_secs_f64(),
                disk_bytes: sys::dir_bytes(dir),
                write_amp: last_write.as_ref().and_then(WriteMark::amplification),
                engine_write_amp: last_write
                    .as_ref()
                    .and_then(|w| w.engine_amplification(engine.as_ref())),
                files: engine.files()?,
            };
            if !quiet && !cli.json {
                let settled = last_write.as_ref().map_or(String::new(), |w| {
                    format!(
                        "; {} write amp to here {} (engine's own count {})",
                        w.name,
                        ratio(step.write_amp),
                        ratio(step.engine_write_amp)
                    )
                });
                let files = step
                    .files
                    .as_ref()
                    .map_or(String::new(), |f| format!("\n{:<12} : {f}", ""));
                println!(
                    "{name:<12} : done in {:.1} s{settled}, on disk {:.1} MB{files}",
                    step.seconds,
                    step.disk_bytes as f64 / 1048576.0
                );
            }
            steps.push(step);
            print_statistics(cli, engine.as_ref());
            continue;
        }
        if workloads::fresh_db(name) && !cli.use_existing_db {
            drop(engine);
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            engine = Arc::from(engines::open(engine_name, dir, &s)?);
        }
        let mark = WriteMark {
            name: name.to_string(),
            engine_before: engine.bytes_written(),
            disk_before: sys::write_bytes(),
            bytes: 0,
        };
        let progress = Arc::new(AtomicU64::new(0));
        let bar = progress_bar(name, &progress, quiet);
        let cpu_before = sys::cpu_seconds();
        let read_before = sys::read_bytes();
        let outcome = workloads::run(&engine, &p, name, &progress)?;
        let cpu = cpu_before
            .zip(sys::cpu_seconds())
            .map(|((u0, s0), (u1, s1))| (u1 - u0, s1 - s0));
        let device_read = read_before
            .zip(sys::read_bytes())
            .map(|(before, after)| after.saturating_sub(before));
        if let Some((stop, handle)) = bar {
            stop.store(u64::MAX, Ordering::SeqCst);
            let _ = handle.join();
        }
        let (write_amp, engine_write_amp) = if workloads::writes(name) && outcome.bytes > 0 {
            let mark = WriteMark {
                bytes: outcome.bytes,
                ..mark
            };
            let amps = (
                mark.amplification(),
                mark.engine_amplification(engine.as_ref()),
            );
            last_write = Some(mark);
            amps
        } else {
            (None, None)
        };
        let report = Report {
            outcome,
            write_amp,
            engine_write_amp,
            disk_bytes: sys::dir_bytes(dir),
            peak_rss: sys::peak_rss_bytes(),
            cpu,
            device_read,
        };
        if !quiet {
            if cli.json {
                println!("{}", json_report(engine_name, &report));
            } else {
                print_line(engine_name, &report, false);
            }
        }
        reports.push(report);
        print_statistics(cli, engine.as_ref());
    }
    Ok((reports, steps))
}

/// `--statistics`: the engine's counters as it reports them, indented under the last line.
fn print_statistics(cli: &Cli, engine: &dyn Engine) {
    if !cli.statistics {
        return;
    }
    if let Some(text) = engine.statistics() {
        for line in text.lines() {
            println!("{:<12} : {line}", "");
        }
    }
}

/// Where the process's and the engine's write counters stood when a write workload began.
struct WriteMark {
    name: String,
    engine_before: Option<u64>,
    disk_before: Option<u64>,
    bytes: u64,
}

impl WriteMark {
    /// What the process wrote to storage since the mark, per byte the workload wrote.
    fn amplification(&self) -> Option<f64> {
        let written = sys::write_bytes()?.saturating_sub(self.disk_before?);
        Some(written as f64 / self.bytes.max(1) as f64)
    }

    /// The same from the engine's own count, where it keeps one.
    fn engine_amplification(&self, engine: &dyn Engine) -> Option<f64> {
        let written = engine.bytes_written()?.saturating_sub(self.engine_before?);
        Some(written as f64 / self.bytes.max(1) as f64)
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

/// A step's figures in a comparison, as text or JSON.
fn step_line(engine: &str, round: usize, step: &Step, json: bool) -> String {
    if json {
        return serde_json::json!({
            "engine": engine,
            "round": round,
            "step": step.name,
            "seconds": step.seconds,
            "disk_bytes": step.disk_bytes,
            "write_amp": step.write_amp,
            "engine_write_amp": step.engine_write_amp,
            "files": step.files,
        })
        .to_string();
    }
    let files = step
        .files
        .as_ref()
        .map_or(String::new(), |f| format!("; {f}"));
    format!(
        "{engine}/{} round {round}: {:.1} s, on disk {:.1} MB, the last fill's write amp to \
         here {} (engine's own count {}){files}",
        step.name,
        step.seconds,
        step.disk_bytes as f64 / 1048576.0,
        ratio(step.write_amp),
        ratio(step.engine_write_amp)
    )
}

/// Names for the measured workloads of a list: those after a `compact` step are marked
/// `name@compacted`, and a name that still repeats is numbered (`readrandom#2`).
fn labels(list: &str) -> Vec<String> {
    let mut compacted = false;
    let mut names = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name == "compact" {
            compacted = true;
        }
        if is_step(name) {
            continue;
        }
        let base = match compacted {
            true => format!("{name}@compacted"),
            false => name.to_string(),
        };
        let seen = names
            .iter()
            .filter(|n: &&String| n.split('#').next() == Some(base.as_str()))
            .count();
        names.push(match seen {
            0 => base,
            n => format!("{base}#{}", n + 1),
        });
    }
    names
}

/// The run's settings, the machine, the commit and the engines' versions.
fn header(cli: &Cli, engines: &[&str]) -> String {
    format!(
        "num={} reads={} threads={} key_size={} value_size={} write_buffer_size={} \
         cache_size={} bloom_bits={} block_size={} compression={}{} sync={} \
         benchmark_write_rate_limit={}\n\
         machine: {}\ncommit: {}\nengines: {}",
        cli.num,
        cli.reads.unwrap_or(cli.num),
        cli.threads,
        cli.key_size,
        cli.value_size,
        cli.write_buffer_size,
        cli.cache_size,
        cli.bloom_bits,
        cli.block_size,
        cli.compression_type,
        cli.compression_max_dict_bytes
            .map(|b| format!(" compression_max_dict_bytes={b}"))
            .unwrap_or_default(),
        cli.sync,
        cli.benchmark_write_rate_limit,
        machine::describe(&cli.db),
        machine::commit(),
        machine::engine_versions(engines),
    )
}

/// Where engines answered the same workload differently: one line per disagreement. Lookup
/// counts and the hashes of keys and values are compared; readwhilewriting's answers depend
/// on how far its writer got and are left out, and so are those of every read after it until
/// a workload starts a fresh database (its writer left values that depend on timing).
fn disagreements(
    engines: &[&str],
    benchmarks: &[String],
    answers: &[Vec<Vec<Option<String>>>],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut timed_writes = false;
    for (bi, b) in benchmarks.iter().enumerate() {
        if workloads::fresh_db(b.split('@').next().unwrap_or(b)) {
            timed_writes = false;
        }
        if b.starts_with("readwhilewriting") {
            timed_writes = true;
        }
        if timed_writes {
            continue;
        }
        for (round, first) in answers[0][bi].iter().enumerate() {
            for (ei, e) in engines.iter().enumerate().skip(1) {
                let other = &answers[ei][bi][round];
                if other != first {
                    out.push(format!(
                        "{b} (round {}): {} answered {}, {e} answered {}",
                        round + 1,
                        engines[0],
                        first.as_deref().unwrap_or("nothing"),
                        other.as_deref().unwrap_or("nothing")
                    ));
                }
            }
        }
    }
    out
}

fn compare(cli: &Cli, list: &str) -> Result<(), String> {
    let engines: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let benchmarks = labels(&cli.benchmarks);
    if cli.json {
        println!("{}", serde_json::json!({ "header": header(cli, &engines) }));
    } else {
        println!("{}", header(cli, &engines));
    }
    // [engine][benchmark][round]: ops/sec, and what the workload answered.
    let mut results: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); benchmarks.len()]; engines.len()];
    let mut answers: Vec<Vec<Vec<Option<String>>>> =
        vec![vec![Vec::new(); benchmarks.len()]; engines.len()];
    for round in 1..=cli.rounds {
        // Each round starts with the next engine, so that no engine always runs first (on a
        // cold page cache) or last (after the others have filled the disk's queues).
        for k in 0..engines.len() {
            let ei = (k + round - 1) % engines.len();
            let e = engines[ei];
            eprintln!("round {round}/{}: {e}", cli.rounds);
            let (reports, steps) = run_engine(cli, e, &cli.db.join(e), true)?;
            if let Some(peak) = reports
                .last()
                .and_then(|r| r.peak_rss)
                .filter(|_| !cli.json)
            {
                println!(
                    "{e} round {round}: peak RSS {:.0} MB",
                    peak as f64 / 1048576.0
                );
            }
            for step in &steps {
                println!("{}", step_line(e, round, step, cli.json));
            }
            for (bi, r) in reports.iter().enumerate() {
                results[ei][bi].push(r.outcome.ops_per_sec());
                if workloads::writes(&r.outcome.name) && !cli.json {
                    println!(
                        "{e}/{} round {round}: write amp {} (engine's own count {}), \
                         on disk {:.1} MB",
                        r.outcome.name,
                        ratio(r.write_amp),
                        ratio(r.engine_write_amp),
                        r.disk_bytes as f64 / 1048576.0
                    );
                }
                if let Some(cpu) = r
                    .cpu
                    .filter(|_| !cli.json && !workloads::writes(&r.outcome.name))
                {
                    println!("{e}/{} round {round}: {}", r.outcome.name, cpu_text(cpu, r));
                }
                if let Some((puts, rate)) = r.outcome.writer.filter(|_| !cli.json) {
                    println!(
                        "{e}/{} round {round}: its writer put {puts} entries at {:.2} MB/s",
                        r.outcome.name,
                        rate / 1048576.0
                    );
                }
                answers[ei][bi].push(answer(&r.outcome));
                if cli.json {
                    let mut j = json_report(e, r);
                    j["round"] = serde_json::json!(round);
                    println!("{j}");
                }
            }
        }
    }
    let medians: Vec<Vec<f64>> = results
        .iter()
        .map(|per_bench| per_bench.iter().map(|r| median(r.clone())).collect())
        .collect();
    if !cli.json {
        print_table(cli, &engines, &benchmarks, &medians, &answers);
    }
    if let Some(file) = &cli.plot {
        let title = cli.plot_title.clone().unwrap_or_else(|| {
            format!(
                "num={} value_size={} threads={} compression={}: median of {} rounds",
                cli.num, cli.value_size, cli.threads, cli.compression_type, cli.rounds
            )
        });
        plot::bars(file, &title, &engines, &benchmarks, &medians)?;
    }
    let wrong = disagreements(&engines, &benchmarks, &answers);
    if !wrong.is_empty() {
        return Err(format!(
            "the engines disagree on {} answers:\n  {}",
            wrong.len(),
            wrong.join("\n  ")
        ));
    }
    Ok(())
}

/// The medians, each engine's ratio to the best of the others, and the answers.
fn print_table(
    cli: &Cli,
    engines: &[&str],
    labels: &[String],
    medians: &[Vec<f64>],
    answers: &[Vec<Vec<Option<String>>>],
) {
    println!(
        "median ops/sec of {} rounds, engine order rotating; the last column: {} over the \
         best of the others",
        cli.rounds, engines[0]
    );
    let mut head = format!("{:<22}", "benchmark");
    for e in engines {
        head.push_str(&format!("{e:>13}"));
    }
    if engines.len() > 1 {
        head.push_str(&format!("{:>10}", "ratio"));
    }
    head.push_str("  answer");
    println!("{head}");
    for (bi, b) in labels.iter().enumerate() {
        let mut line = format!("{b:<22}");
        for m in medians {
            line.push_str(&format!("{:>13.0}", m[bi]));
        }
        if engines.len() > 1 {
            let best_other = medians[1..].iter().map(|m| m[bi]).fold(0f64, f64::max);
            line.push_str(&format!("{:>9.2}x", medians[0][bi] / best_other.max(1e-9)));
        }
        if let Some(Some(a)) = answers[0][bi].first() {
            line.push_str(&format!("  {a}"));
        }
        println!("{line}");
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Some(Mode::Server(args)) if args.mix == server_load::Mix::Transfer => {
            transfer_load::run(args)
        }
        Some(Mode::Server(args)) => server_load::run(args),
        Some(Mode::Experiment(e)) => experiment::run(e),
        None => match &cli.compare {
            Some(list) => compare(&cli, list),
            None => {
                if !cli.json {
                    println!("{}", header(&cli, &[cli.engine.as_str()]));
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

//! The course project's growth experiment (seed 000): about 1 GB of 16-byte entries put in
//! 40 periods of random keys, with gets and short scans measured after each period, as the
//! data grows.
//!
//! The seed's configuration: 8-byte keys and values, a 1 MiB memtable, a 10 MiB buffer pool
//! (the block cache here), Bloom filters of 8 bits per entry and a size ratio of 2. Gets are
//! measured with the flat, binary-searched index (`strata`) and with the B-tree index
//! (`strata-btree`), each engine loading the same keys in the same order.

use std::time::Instant;

use serde_json::json;

use super::{Common, Out, Table, num};
use crate::engines::{Engine, Settings, Start, digest};
use crate::plot::{self, Axis, Panel, Series};
use crate::workloads::{Rng, hash_found, hash_key};

/// The seed's total: 1 GiB of 16-byte entries.
const FULL_ENTRIES: u64 = 67_108_864;

#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// Share of the seed's 67,108,864 entries (1 GB) to put: 1 is the seed's run.
    #[arg(long, default_value_t = 0.1)]
    pub scale: f64,
    /// Periods the puts are split into; gets and scans are measured after each.
    #[arg(long, default_value_t = 40)]
    pub periods: u64,
    /// Random gets after each period.
    #[arg(long, default_value_t = 20_000)]
    pub gets: u64,
    /// Short scans after each period.
    #[arg(long, default_value_t = 2_000)]
    pub scans: u64,
    /// Entries each scan reads from its random start.
    #[arg(long, default_value_t = 16)]
    pub scan_length: u64,
    /// Engines, each run on its own through every period.
    #[arg(long, default_value = "strata,strata-btree,rocksdb,leveldb")]
    pub engines: String,
    /// Strata only: bytes of Bloom filters and root index blocks its open tables may hold
    /// (default: Strata's, a quarter of the memory the process may use).
    #[arg(long)]
    pub table_pinned_bytes: Option<usize>,
    #[arg(long, default_value_t = 301)]
    pub seed: u64,
}

/// What one engine did in one period.
struct Period {
    entries: u64,
    put_rate: f64,
    get_rate: f64,
    found: u64,
    scan_rate: f64,
    scanned: u64,
    answers: u64,
    disk_bytes: u64,
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

fn run_engine(
    a: &Args,
    engine: &dyn Engine,
    dir: &std::path::Path,
    per_period: u64,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<Period>, String> {
    let range = per_period * a.periods;
    let mut puts = Rng::new(a.seed);
    let mut values = Rng::new(a.seed ^ 0x7a1);
    let mut periods = Vec::new();
    for p in 0..a.periods {
        let start = Instant::now();
        for _ in 0..per_period {
            let k = key(1 + puts.below(range));
            engine.put(&k, &values.next_u64().to_le_bytes(), false)?;
        }
        let put_rate = per_period as f64 / start.elapsed().as_secs_f64();

        // The same lookups and scans for every engine: drawn from the period's own seed.
        let mut reads = Rng::new(a.seed ^ (p + 1).wrapping_mul(0x9e37));
        let mut answers = 0u64;
        let (mut found, mut scanned) = (0u64, 0u64);
        let start = Instant::now();
        for _ in 0..a.gets {
            let k = key(1 + reads.below(range));
            if let Some(v) = engine.get(&k)? {
                found += 1;
                answers = answers.wrapping_add(hash_found(&k, v));
            }
        }
        let get_rate = a.gets as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        for _ in 0..a.scans {
            let from = key(1 + reads.below(range));
            scanned += engine.scan(Start::Key(&from), a.scan_length, &mut |k, v| {
                answers = answers.wrapping_add(hash_key(digest(v).wrapping_add(1), k));
            })?;
        }
        let scan_rate = a.scans as f64 / start.elapsed().as_secs_f64();
        periods.push(Period {
            entries: per_period * (p + 1),
            put_rate,
            get_rate,
            found,
            scan_rate,
            scanned,
            answers,
            disk_bytes: crate::sys::dir_bytes(dir),
        });
        bar.inc(1);
    }
    Ok(periods)
}

pub fn run(a: &Args) -> Result<(), String> {
    if !(a.scale > 0.0 && a.scale <= 1.0) || a.periods == 0 {
        return Err("growth: --scale must be in (0, 1] and --periods at least 1".into());
    }
    let engines: Vec<String> = super::list(&a.engines, "--engines")?;
    let names: Vec<&str> = engines.iter().map(String::as_str).collect();
    let mut out = Out::start("growth", &a.common, &names)?;
    let per_period = ((FULL_ENTRIES as f64 * a.scale) as u64 / a.periods).max(1);
    let total = per_period * a.periods;
    // Size ratio 2 over the six levels below level 0, with level 1 sized so that the deepest
    // level holds the whole data set (at least two memtables).
    let level1 = ((total * 16) >> 5).max(2 << 20);
    let settings = Settings {
        write_buffer_size: 1 << 20,
        cache_size: 10 << 20,
        bloom_bits: 8,
        size_ratio: Some(2),
        level1_bytes: Some(level1),
        table_pinned_bytes: a.table_pinned_bytes,
        ..Settings::new()
    };
    out.say(&format!(
        "growth: {total} entries of 8-byte keys and 8-byte values ({:.0} MB) in {} periods of \
         {per_period} random keys from [1, {}]; after each, {} gets and {} scans of {} entries",
        total as f64 * 16.0 / 1e6,
        a.periods,
        per_period * a.periods,
        a.gets,
        a.scans,
        a.scan_length
    ));
    out.say(&format!(
        "settings: 1 MiB memtable, 10 MiB block cache, 8 Bloom bits per key, size ratio 2, \
         level 1 of {:.1} MiB (LevelDB: its fixed ratio 10 and 10 MiB level 1)",
        level1 as f64 / 1048576.0
    ));
    let mut table = Table::new(&[
        "engine",
        "period",
        "entries",
        "data_mb",
        "put_ops_per_sec",
        "get_ops_per_sec",
        "gets_found",
        "scan_ops_per_sec",
        "entries_scanned",
        "disk_mb",
    ]);
    let bar = super::progress(a.periods * engines.len() as u64, "periods");
    let mut results: Vec<(String, Vec<Period>)> = Vec::new();
    for name in &names {
        bar.set_message(name.to_string());
        let engine = super::open_fresh(&out, name, &settings)?;
        let periods = run_engine(a, engine.as_ref(), &out.db_dir(name), per_period, &bar)?;
        drop(engine);
        let mean = |f: fn(&Period) -> f64| periods.iter().map(f).sum::<f64>() / a.periods as f64;
        out.say(&format!(
            "{name:<13} mean over the periods: {:>9.0} puts/s, {:>9.0} gets/s, {:>8.0} scans/s; \
             last period: {:.0} gets/s, {:.0} scans/s, {:.1} MB on disk",
            mean(|p| p.put_rate),
            mean(|p| p.get_rate),
            mean(|p| p.scan_rate),
            periods.last().map_or(0.0, |p| p.get_rate),
            periods.last().map_or(0.0, |p| p.scan_rate),
            periods.last().map_or(0, |p| p.disk_bytes) as f64 / 1e6,
        ));
        for (i, p) in periods.iter().enumerate() {
            table.push(vec![
                json!(name),
                json!(i + 1),
                json!(p.entries),
                num(p.entries as f64 * 16.0 / 1e6),
                num(p.put_rate),
                num(p.get_rate),
                json!(p.found),
                num(p.scan_rate),
                json!(p.scanned),
                num(p.disk_bytes as f64 / 1e6),
            ]);
        }
        results.push((name.to_string(), periods));
    }
    bar.finish_and_clear();

    let series = |f: fn(&Period) -> f64| -> Vec<Series> {
        results
            .iter()
            .map(|(name, periods)| Series {
                name: name.clone(),
                points: periods
                    .iter()
                    .map(|p| (p.entries as f64 * 16.0 / 1e6, f(p)))
                    .collect(),
            })
            .collect()
    };
    let panel = |title: &str, f: fn(&Period) -> f64| Panel {
        title: title.into(),
        x: Axis::linear("data put (MB)"),
        y: Axis::log("operations per second"),
        series: series(f),
    };
    plot::lines(
        &out.path("svg"),
        &format!(
            "Growth: {:.0} MB of 16-byte entries in {} periods (seed 000's experiment at scale {})",
            total as f64 * 16.0 / 1e6,
            a.periods,
            a.scale
        ),
        &[
            panel("puts per second in each period", |p| p.put_rate),
            panel("gets per second after each period", |p| p.get_rate),
            panel(
                &format!("scans of {} entries per second", a.scan_length),
                |p| p.scan_rate,
            ),
        ],
        3,
    )?;
    let disagreement = disagreement(&results);
    if let Some(d) = &disagreement {
        out.say(&format!("ANSWERS DIFFER: {d}"));
    } else if results.len() < 2 {
        out.say("answers: one engine, nothing to compare them with");
    } else {
        out.say(&format!(
            "answers: every engine found the same keys with the same values and scanned \
             the same entries in all {} periods",
            a.periods
        ));
    }
    out.finish(&table)?;
    match disagreement {
        Some(d) => Err(format!("growth: the engines' answers differ: {d}")),
        None => Ok(()),
    }
}

/// The first period in which two engines answered the same gets and scans differently.
fn disagreement(results: &[(String, Vec<Period>)]) -> Option<String> {
    let (first, theirs) = results.first()?;
    for (name, periods) in &results[1..] {
        for (i, (a, b)) in theirs.iter().zip(periods).enumerate() {
            if (a.found, a.scanned, a.answers) != (b.found, b.scanned, b.answers) {
                return Some(format!(
                    "period {}: {first} found {} and scanned {} (hash {:016x}), {name} found {} \
                     and scanned {} (hash {:016x})",
                    i + 1,
                    a.found,
                    a.scanned,
                    a.answers,
                    b.found,
                    b.scanned,
                    b.answers
                ));
            }
        }
    }
    None
}

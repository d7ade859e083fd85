//! Monkey's Bloom filter bits against uniform bits at the same total (`--bits`, 5 and 10
//! bits per key): `--num` random keys filled into each of two databases that differ only in
//! `Options::filter_policy`, compactions left to settle (no idle merge, no read-triggered
//! compaction, so that the tree keeps its levels), then `--lookups` gets of missing keys and
//! of existing keys on each, in alternating rounds. For each: throughput, the filter false
//! positives measured per lookup (tables whose filter passed and which held nothing of the
//! key), the model's expected false positives per lookup of a missing key, the filter bits
//! the tree holds per entry, and each level's bits.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use strata::{Db, FilterPolicy, Options, ReadOptions, WriteBatch, WriteOptions};

use super::{Common, Out, Table, num};
use crate::plot;
use crate::workloads::key;

#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// Keys filled into each database.
    #[arg(long, default_value_t = 10_000_000)]
    pub num: u64,
    /// Gets per measure.
    #[arg(long, default_value_t = 1_000_000)]
    pub lookups: u64,
    /// Bits per key, each compared at once (uniform and Monkey).
    #[arg(long, value_delimiter = ',', default_value = "5,10")]
    pub bits: Vec<usize>,
    /// Alternating rounds of the measures.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
}

const COLUMNS: &[&str] = &[
    "bits",
    "policy",
    "measure",
    "round",
    "lookups",
    "seconds",
    "ops_per_s",
    "false_positives_per_lookup",
    "expected_per_lookup",
    "predicted_per_lookup",
    "tree_bits_per_entry",
    "level_bits",
];

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The `i`-th key of a random order over 2^53 distinct keys (a multiplication by an odd
/// number modulo 2^53 is a bijection, and 2^53 has 16 digits): keys below `num` are filled,
/// the others are missing, and both are spread over the same key space.
fn scrambled(i: u64) -> Vec<u8> {
    key(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & ((1 << 53) - 1), 16)
}

/// Bloom filters: Monkey's allocation and this experiment's predictions model their rate.
fn options(policy: FilterPolicy) -> Options {
    Options {
        filter_policy: policy,
        filter_format: strata::FilterFormat::Bloom,
        idle_merge_after: None,
        read_triggered_compaction: false,
        ..Options::default()
    }
}

fn fill(dir: &Path, policy: FilterPolicy, a: &Args) -> Result<Db, String> {
    let db = Db::open(dir, options(policy)).map_err(err)?;
    let value = vec![b'v'; a.value_size];
    let mut batch = WriteBatch::new();
    for i in 0..a.num {
        batch.put(&scrambled(i), &value);
        if batch.len() == 100 {
            db.write(std::mem::take(&mut batch), WriteOptions::default())
                .map_err(err)?;
        }
    }
    db.write(batch, WriteOptions::default()).map_err(err)?;
    db.flush().map_err(err)?;
    while db.stats().compaction_pending {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(db)
}

/// The false positives per lookup of the missing keys `first..` that the files' bits predict:
/// each lookup pays the rate of every file whose key range holds its key (a level's files
/// leave gaps between them, where a lookup probes nothing in that level).
fn predicted(s: &strata::Stats, a: &Args, first: u64) -> f64 {
    let rate = |bits: f64| {
        if bits <= 0.0 {
            return 1.0;
        }
        let k = (bits * std::f64::consts::LN_2).round().clamp(1.0, 30.0);
        (1.0 - (-k / bits).exp()).powf(k)
    };
    let mut levels: Vec<Vec<&strata::FileInfo>> = vec![Vec::new(); s.levels.len()];
    for f in &s.files {
        levels[f.level].push(f);
    }
    for files in levels.iter_mut().skip(1) {
        files.sort_by(|x, y| x.smallest_key.cmp(&y.smallest_key));
    }
    let bits = |f: &strata::FileInfo| rate(f.filter_bits_per_key.unwrap_or(0.0));
    let mut total = 0.0;
    for n in 0..a.lookups {
        let k = scrambled(first + n);
        for (l, files) in levels.iter().enumerate() {
            if l == 0 {
                let holding = files
                    .iter()
                    .filter(|f| f.smallest_key <= k && k <= f.largest_key);
                total += holding.map(|f| bits(f)).sum::<f64>();
            } else {
                let i = files.partition_point(|f| f.largest_key < k);
                if let Some(f) = files.get(i).filter(|f| f.smallest_key <= k) {
                    total += bits(f);
                }
            }
        }
    }
    total / a.lookups as f64
}

/// `lookups` gets of keys `first..`: seconds and filter false positives per lookup. Each get
/// must find what the fill wrote (existing keys) or nothing (missing ones).
fn lookups(db: &Db, a: &Args, first: u64, present: bool) -> Result<(f64, f64), String> {
    let before = db.stats().filter_false_positives;
    let started = Instant::now();
    let stride = 0x5851_f42d_4c95_7f2d_u64;
    for n in 0..a.lookups {
        let i = if present {
            n.wrapping_mul(stride) % a.num
        } else {
            first + n
        };
        let found = db
            .get_with(&scrambled(i), &ReadOptions::default())
            .map_err(err)?;
        if found.is_some() != present {
            return Err(format!(
                "key {i}: found {}, expected {present}",
                found.is_some()
            ));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let wasted = db.stats().filter_false_positives - before;
    Ok((seconds, wasted as f64 / a.lookups as f64))
}

fn policy_name(p: FilterPolicy) -> &'static str {
    match p {
        FilterPolicy::Uniform { .. } => "uniform",
        FilterPolicy::Monkey { .. } => "monkey",
    }
}

pub fn run(a: &Args) -> Result<(), String> {
    let mut out = Out::start("monkey", &a.common, &["strata"])?;
    let mut table = Table::new(COLUMNS);
    let mut groups = Vec::new();
    let mut medians = vec![Vec::new(), Vec::new()];
    for &bits in &a.bits {
        let policies = [
            FilterPolicy::Uniform { bits_per_key: bits },
            FilterPolicy::Monkey {
                total_bits_per_key: bits,
            },
        ];
        let mut dbs = Vec::new();
        for p in policies {
            let dir = out.db_dir(&format!("{}-{bits}", policy_name(p)));
            let _ = std::fs::remove_dir_all(&dir);
            let started = Instant::now();
            let db = fill(&dir, p, a)?;
            let s = db.stats();
            let entries: u64 = s.files.iter().map(|f| f.entries).sum();
            let spent: f64 = s
                .files
                .iter()
                .map(|f| f.filter_bits_per_key.unwrap_or(0.0) * f.entries as f64)
                .sum::<f64>()
                / entries.max(1) as f64;
            let levels: Vec<String> = s
                .levels
                .iter()
                .enumerate()
                .filter(|(_, l)| l.files > 0)
                .map(|(i, l)| {
                    format!(
                        "L{i}:{}f/{:.2}b",
                        l.files,
                        l.filter_bits_per_key.unwrap_or(0.0)
                    )
                })
                .collect();
            out.say(&format!(
                "{} {bits} bits: filled {} keys in {:.1} s; tree {}; {spent:.2} bits per entry; \
                 expected false positives per missing lookup {:.4}",
                policy_name(p),
                a.num,
                started.elapsed().as_secs_f64(),
                levels.join(" "),
                s.expected_false_positives
            ));
            dbs.push((p, db, spent, levels.join(" "), s.expected_false_positives));
        }
        let mut rates = vec![vec![Vec::new(); 2]; dbs.len()];
        for round in 1..=a.rounds {
            for (di, (p, db, spent, levels, expected)) in dbs.iter().enumerate() {
                for (mi, (measure, present)) in [("readmissing", false), ("readrandom", true)]
                    .into_iter()
                    .enumerate()
                {
                    let first = a.num + (round as u64) * a.lookups;
                    let (seconds, wasted) = lookups(db, a, first, present)?;
                    let forecast = (!present).then(|| predicted(&db.stats(), a, first));
                    let rate = a.lookups as f64 / seconds;
                    rates[di][mi].push(rate);
                    let forecast_text =
                        forecast.map_or(String::new(), |f| format!(" ({f:.4} predicted)"));
                    out.say(&format!(
                        "  round {round} {:<8} {bits:>2} bits {measure:<12} {rate:>10.0}/s \
                         {wasted:.4} false positives per lookup{forecast_text}",
                        policy_name(*p)
                    ));
                    table.push(vec![
                        json!(bits),
                        json!(policy_name(*p)),
                        json!(measure),
                        json!(round),
                        json!(a.lookups),
                        num(seconds),
                        num(rate),
                        json!(wasted),
                        if present {
                            json!(null)
                        } else {
                            json!(expected)
                        },
                        json!(forecast),
                        json!(spent),
                        json!(levels),
                    ]);
                }
            }
        }
        for (mi, measure) in ["readmissing", "readrandom"].into_iter().enumerate() {
            groups.push(format!("{measure} {bits} bits"));
            for (di, series) in medians.iter_mut().enumerate() {
                let mut r = rates[di][mi].clone();
                r.sort_by(f64::total_cmp);
                series.push(r[r.len() / 2]);
            }
        }
        for (p, db, ..) in dbs {
            db.close().map_err(err)?;
            let _ = std::fs::remove_dir_all(out.db_dir(&format!("{}-{bits}", policy_name(p))));
        }
    }
    plot::bars(
        &out.path("svg"),
        "Gets per second, Monkey's filter bits against uniform bits (median of rounds)",
        &["uniform", "monkey"],
        &groups,
        &medians,
    )?;
    out.finish(&table)
}

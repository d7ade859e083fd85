//! FloDB's multi-threaded test (seed 003, `IgorMultiThreaded`): n worker threads run for a
//! fixed time on a store that starts with `--initial` keys, half of a key range twice that
//! size; a share of the operations are updates, split equally between inserts and deletes
//! (so the store stays about half full), the rest reads, or short scans with `--scans`.
//! Keys are uniform, or skewed with `--skew x`: x% of the keys get (100-x)% of the
//! accesses. With `--one_writer`, one thread only updates while the others only read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Common, Out, Table, num};
use crate::engines::{Engine, Settings, Start};
use crate::plot::{self, Axis, Panel, Series};
use crate::workloads::{Rng, Values, key};

#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// Worker thread counts, one run each.
    #[arg(long, default_value = "1,2,4,8,16")]
    pub threads: String,
    /// Percentages of updates, one curve each.
    #[arg(long, default_value = "0,10,50,100")]
    pub updates: String,
    /// Keys in the store at the start: half of the key range.
    #[arg(long, default_value_t = 200_000)]
    pub initial: u64,
    /// Seconds per run.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// x: x% of the keys get (100-x)% of the accesses (uniform when absent).
    #[arg(long)]
    pub skew: Option<f64>,
    /// One thread only updates, the others only read; `--updates` is then not used.
    #[arg(long)]
    pub one_writer: bool,
    /// Scans of this many entries instead of reads.
    #[arg(long)]
    pub scans: Option<u64>,
    #[arg(long, default_value = "strata,rocksdb,leveldb")]
    pub engines: String,
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    #[arg(long, default_value_t = 301)]
    pub seed: u64,
}

/// Whether key `k` is among the initial half of the range (a fixed, scattered half).
fn initially_present(k: u64) -> bool {
    k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 63 == 0
}

/// Draws keys in [0, range), uniformly or with the skew asked for.
struct Keys {
    range: u64,
    hot: Option<(u64, f64)>,
}

impl Keys {
    fn next(&self, rng: &mut Rng) -> u64 {
        match self.hot {
            Some((hot, share)) if hot > 0 && hot < self.range => {
                if (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= share {
                    rng.below(hot)
                } else {
                    hot + rng.below(self.range - hot)
                }
            }
            _ => rng.below(self.range),
        }
    }
}

/// Operations one thread did: reads (or scans) and updates.
#[derive(Default, Clone, Copy)]
struct Counts {
    reads: u64,
    updates: u64,
}

#[allow(clippy::too_many_arguments)]
fn worker(
    engine: &dyn Engine,
    a: &Args,
    keys: &Keys,
    update_percent: f64,
    seed: u64,
    stop: &AtomicBool,
) -> Result<Counts, String> {
    let mut rng = Rng::new(seed);
    let mut values = Values::new(seed);
    let mut c = Counts::default();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..32 {
            let k = key(keys.next(&mut rng), 16);
            let roll = rng.below(10_000) as f64 / 100.0;
            if roll < update_percent {
                if rng.next_u64() & 1 == 0 {
                    engine.put(&k, values.next(a.value_size), false)?;
                } else {
                    engine.delete(&k, false)?;
                }
                c.updates += 1;
            } else {
                match a.scans {
                    Some(len) => {
                        engine.scan(Start::Key(&k), len, &mut |_, _| {})?;
                    }
                    None => {
                        engine.get(&k)?;
                    }
                }
                c.reads += 1;
            }
        }
    }
    Ok(c)
}

/// One timed run with `threads` workers; returns the operations of all of them and the
/// seconds they ran.
fn measure(
    engine: &Arc<dyn Engine>,
    a: &Args,
    keys: &Keys,
    threads: usize,
    update_percent: f64,
    round: u64,
) -> Result<(Counts, f64), String> {
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let results: Vec<Result<Counts, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (engine, stop) = (engine.clone(), &stop);
                // With one writer, thread 0 only updates and the rest only read.
                let share = match (a.one_writer, t) {
                    (true, 0) => 100.0,
                    (true, _) => 0.0,
                    (false, _) => update_percent,
                };
                let seed = a.seed ^ (round << 20) ^ t as u64;
                s.spawn(move || worker(engine.as_ref(), a, keys, share, seed, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(a.duration));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut total = Counts::default();
    for r in results {
        let c = r?;
        total.reads += c.reads;
        total.updates += c.updates;
    }
    Ok((total, seconds))
}

pub fn run(a: &Args) -> Result<(), String> {
    let threads: Vec<usize> = super::list(&a.threads, "--threads")?;
    let updates: Vec<f64> = match a.one_writer {
        true => vec![0.0],
        false => super::list(&a.updates, "--updates")?,
    };
    let engines: Vec<String> = super::list(&a.engines, "--engines")?;
    let names: Vec<&str> = engines.iter().map(String::as_str).collect();
    if threads.contains(&0) || a.initial == 0 {
        return Err("flodb: --threads and --initial must be at least 1".into());
    }
    let mut out = Out::start("flodb", &a.common, &names)?;
    let range = a.initial * 2;
    let keys = Keys {
        range,
        hot: a.skew.map(|x| {
            let hot = (range as f64 * x / 100.0) as u64;
            (hot, (100.0 - x) / 100.0)
        }),
    };
    let reads = match a.scans {
        Some(len) => format!("scans of {len} entries"),
        None => "reads".to_string(),
    };
    let mode = match a.one_writer {
        true => format!("one thread updating, the others {reads}"),
        false => format!("updates (half inserts, half deletes) and {reads}"),
    };
    let skew = match a.skew {
        Some(x) => format!("{x}% of the keys get {}% of the accesses", 100.0 - x),
        None => "uniform keys".to_string(),
    };
    out.say(&format!(
        "flodb: {} keys at the start in a range of {range}, 16-byte keys, {}-byte values; \
         {mode}; {skew}; {} s per run on {} cores",
        a.initial,
        a.value_size,
        a.duration,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    let settings = Settings::new();
    let mut table = Table::new(&[
        "engine",
        "update_percent",
        "threads",
        "ops_per_sec",
        "reads_per_sec",
        "updates_per_sec",
    ]);
    let mut results: Vec<(String, f64, usize, f64)> = Vec::new();
    let bar = super::progress((names.len() * updates.len() * threads.len()) as u64, "runs");
    for name in &names {
        bar.set_message(format!("{name}: loading"));
        let engine: Arc<dyn Engine> = Arc::from(super::open_fresh(&out, name, &settings)?);
        let mut values = Values::new(a.seed);
        for k in (0..range).filter(|&k| initially_present(k)) {
            engine.put(&key(k, 16), values.next(a.value_size), false)?;
        }
        engine.wait_for_compaction()?;
        let mut round = 0;
        for &u in &updates {
            let mut line = format!("{name:<8} {:>5}% updates:", u);
            for &t in &threads {
                bar.set_message(format!("{name} {u}% {t} threads"));
                // Each run starts with no flush or compaction left over from the one before.
                engine.wait_for_compaction()?;
                round += 1;
                let (c, seconds) = measure(&engine, a, &keys, t, u, round)?;
                let ops = (c.reads + c.updates) as f64 / seconds;
                line.push_str(&format!(" {t} threads {ops:>9.0}/s;"));
                table.push(vec![
                    json!(name),
                    json!(u),
                    json!(t),
                    num(ops),
                    num(c.reads as f64 / seconds),
                    num(c.updates as f64 / seconds),
                ]);
                results.push((name.to_string(), u, t, ops));
                bar.inc(1);
            }
            out.say(line.trim_end_matches(';'));
        }
    }
    bar.finish_and_clear();
    let panels: Vec<Panel> = updates
        .iter()
        .map(|&u| Panel {
            title: match a.one_writer {
                true => mode.clone(),
                false => format!("{u}% updates"),
            },
            x: Axis::linear("worker threads"),
            y: Axis::linear("operations per second"),
            series: names
                .iter()
                .map(|name| Series {
                    name: name.to_string(),
                    points: results
                        .iter()
                        .filter(|r| r.0 == *name && r.1 == u)
                        .map(|r| (r.2 as f64, r.3))
                        .collect(),
                })
                .collect(),
        })
        .collect();
    plot::lines(
        &out.path("svg"),
        &format!(
            "FloDB's multi-threaded test (seed 003): {} keys, {skew}, {} cores",
            a.initial,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
        &panels,
        updates.len().min(4),
    )?;
    out.finish(&table)
}

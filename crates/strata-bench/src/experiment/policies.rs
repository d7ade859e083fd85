//! The policy map: each merge policy (leveling, tiering, lazy leveling) at each size ratio
//! `--ratios`, on the same `--num` random keys: the fill's throughput and write amplification
//! (bytes written to tables per byte put), then gets of existing keys, gets of missing keys
//! and short scans, in microseconds each, and the space the tree takes; beside each, what
//! the cost model predicts for the design (write amplification, blocks read per get, per
//! missing get and per short scan, space amplification).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use strata::cost_model::{self, Design, Shape};
use strata::{Db, MergePolicy, Options, ReadOptions, WriteBatch, WriteOptions};

use super::{Common, Out, Table, num};
use crate::plot::{self, Axis, Panel, Series};
use crate::workloads::key;

#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// Keys filled into each database.
    #[arg(long, default_value_t = 2_000_000)]
    pub num: u64,
    /// Gets (and scans) per measure.
    #[arg(long, default_value_t = 200_000)]
    pub lookups: u64,
    /// Size ratios, each run under every policy.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,10")]
    pub ratios: Vec<u64>,
    /// The memtable; level 1 aims at four of them, as RocksDB's defaults do.
    #[arg(long, default_value_t = 4 << 20)]
    pub write_buffer_size: usize,
    /// Entries a short scan reads.
    #[arg(long, default_value_t = 10)]
    pub scan_length: usize,
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
}

const COLUMNS: &[&str] = &[
    "policy",
    "size_ratio",
    "fill_seconds",
    "fill_ops_per_s",
    "write_amplification",
    "runs_per_level",
    "get_us",
    "missing_get_us",
    "scan_us",
    "space_amplification",
    "model_write_amplification",
    "model_get_blocks",
    "model_missing_blocks",
    "model_scan_blocks",
    "model_space_amplification",
];

/// A measured design: write amplification, then microseconds per get, missing get and scan.
type Point = (f64, f64, f64, f64);

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The `i`-th key of a random order (a bijection of 2^53): keys below `num` are filled.
fn scrambled(i: u64) -> Vec<u8> {
    key(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & ((1 << 53) - 1), 16)
}

fn options(policy: MergePolicy, ratio: u64, a: &Args) -> Options {
    Options {
        merge_policy: policy,
        size_ratio: ratio,
        write_buffer_size: a.write_buffer_size,
        level1_max_bytes: 4 * a.write_buffer_size as u64,
        target_file_size: a.write_buffer_size as u64,
        idle_merge_after: None,
        read_triggered_compaction: false,
        ..Options::default()
    }
}

struct Measured {
    fill_seconds: f64,
    write_amplification: f64,
    runs: Vec<usize>,
    get_us: f64,
    missing_us: f64,
    scan_us: f64,
    space_amplification: f64,
}

fn measure(dir: &Path, policy: MergePolicy, ratio: u64, a: &Args) -> Result<Measured, String> {
    let db = Db::open(dir, options(policy, ratio, a)).map_err(err)?;
    let value = vec![b'v'; a.value_size];
    let started = Instant::now();
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
        std::thread::sleep(Duration::from_millis(50));
    }
    let fill_seconds = started.elapsed().as_secs_f64();
    let s = db.stats();
    let written = s.flush_bytes_written + s.compaction_bytes_written;
    let write_amplification = written as f64 / s.user_bytes_written.max(1) as f64;
    let live = a.num * (16 + a.value_size as u64);
    let space_amplification = s.sst_bytes as f64 / live as f64;
    let stride = 0x5851_f42d_4c95_7f2d_u64;
    let timed = |f: &mut dyn FnMut(u64) -> Result<(), String>| -> Result<f64, String> {
        let started = Instant::now();
        for n in 0..a.lookups {
            f(n)?;
        }
        Ok(started.elapsed().as_secs_f64() * 1e6 / a.lookups as f64)
    };
    let ro = ReadOptions::default();
    let get_us = timed(&mut |n| {
        let i = n.wrapping_mul(stride) % a.num;
        match db.get_with(&scrambled(i), &ro).map_err(err)? {
            Some(_) => Ok(()),
            None => Err(format!("key {i} is missing")),
        }
    })?;
    let missing_us = timed(&mut |n| match db.get_with(&scrambled(a.num + n), &ro) {
        Ok(None) => Ok(()),
        Ok(Some(_)) => Err(format!("key {} should be missing", a.num + n)),
        Err(e) => Err(err(e)),
    })?;
    let mut it = db.iter(&ro).map_err(err)?;
    let scan_us = timed(&mut |n| {
        it.seek(&scrambled(n.wrapping_mul(stride) % a.num))
            .map_err(err)?;
        for _ in 0..a.scan_length {
            if !it.valid() {
                break;
            }
            it.next().map_err(err)?;
        }
        Ok(())
    })?;
    drop(it);
    db.close().map_err(err)?;
    Ok(Measured {
        fill_seconds,
        write_amplification,
        runs: s.runs_per_level,
        get_us,
        missing_us,
        scan_us,
        space_amplification,
    })
}

pub fn run(a: &Args) -> Result<(), String> {
    let mut out = Out::start("policies", &a.common, &["strata"])?;
    let mut table = Table::new(COLUMNS);
    let shape = Shape {
        entries: a.num,
        entry_bytes: 16 + a.value_size as u64,
        buffer_bytes: a.write_buffer_size as u64,
        filter_bytes: a.num * 10 / 8,
        block_bytes: 4096,
        long_scan_entries: 10_000,
    };
    // Per policy: (measured write amp, get, missing, scan µs) and the model's
    // (write amp, blocks per get + missing get) at each ratio.
    let mut measured: Vec<Vec<Point>> = vec![Vec::new(); 3];
    let mut modelled: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 3];
    for &ratio in &a.ratios {
        for (pi, policy) in MergePolicy::ALL.into_iter().enumerate() {
            let dir = out.db_dir(&format!("{}-{ratio}", policy.name()));
            let _ = std::fs::remove_dir_all(&dir);
            let m = measure(&dir, policy, ratio, a)?;
            let _ = std::fs::remove_dir_all(&dir);
            let design = Design {
                policy,
                size_ratio: u32::try_from(ratio).unwrap_or(u32::MAX),
                monkey: false,
            };
            let c = cost_model::predict(&design, &shape);
            out.say(&format!(
                "{:<13} T={ratio:<2} fill {:>6.1} s ({:>7.0}/s), write amp {:>5.2} (model \
                 {:>5.2}), runs {:?}; get {:>6.2} us, missing {:>6.2} us, scan {:>6.2} us; \
                 space {:.2} (model {:.2})",
                policy.name(),
                m.fill_seconds,
                a.num as f64 / m.fill_seconds,
                m.write_amplification,
                c.write_amplification,
                m.runs,
                m.get_us,
                m.missing_us,
                m.scan_us,
                m.space_amplification,
                c.space_amplification,
            ));
            measured[pi].push((m.write_amplification, m.get_us, m.missing_us, m.scan_us));
            modelled[pi].push((c.write_amplification, c.point_io + c.missing_io));
            let runs: Vec<String> = m.runs.iter().map(|r| r.to_string()).collect();
            table.push(vec![
                json!(policy.name()),
                json!(ratio),
                num(m.fill_seconds),
                num(a.num as f64 / m.fill_seconds),
                num(m.write_amplification),
                json!(runs.join(" ")),
                num(m.get_us),
                num(m.missing_us),
                num(m.scan_us),
                num(m.space_amplification),
                num(c.write_amplification),
                num(c.point_io),
                num(c.missing_io),
                num(c.scan_io),
                num(c.space_amplification),
            ]);
        }
    }
    let series = |f: &dyn Fn(&Point) -> f64| -> Vec<Series> {
        MergePolicy::ALL
            .into_iter()
            .zip(&measured)
            .map(|(p, points)| Series {
                name: p.name().to_string(),
                points: points.iter().map(|m| (m.0, f(m))).collect(),
            })
            .collect()
    };
    let panel = |title: &str, f: &dyn Fn(&Point) -> f64| Panel {
        title: title.into(),
        x: Axis::linear("write amplification, measured"),
        y: Axis::linear("microseconds"),
        series: series(f),
    };
    let model = Panel {
        title: "the model: blocks per get and missing get".into(),
        x: Axis::linear("write amplification, model"),
        y: Axis::linear("blocks"),
        series: MergePolicy::ALL
            .into_iter()
            .zip(&modelled)
            .map(|(p, points)| Series {
                name: p.name().to_string(),
                points: points.clone(),
            })
            .collect(),
    };
    plot::lines(
        &out.path("svg"),
        &format!(
            "Merge policies at T = {:?}: write cost against read cost ({} keys)",
            a.ratios, a.num
        ),
        &[
            panel("get of an existing key", &|m| m.1),
            panel("get of a missing key", &|m| m.2),
            panel(&format!("scan of {} entries", a.scan_length), &|m| m.3),
            model,
        ],
        2,
    )?;
    out.finish(&table)
}

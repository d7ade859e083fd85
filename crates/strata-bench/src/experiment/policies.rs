//! The policy map: each merge policy (leveling, tiering, lazy leveling) at each size ratio
//! `--ratios`, on the same `--num` random keys, and beside them RocksDB's leveled and
//! universal (tiered) compaction at the same ratio: the fill's throughput and write
//! amplification (bytes written to tables per byte put), then gets of existing keys, gets of
//! missing keys and short scans, in microseconds each, and the space the tree takes; beside
//! each, what the cost model predicts for the design (write amplification, blocks read per
//! get, per missing get and per short scan, space amplification). Then `--updates` puts of
//! keys already there, and the bytes they cost and the space the tree holds after them, where
//! the policies' garbage shows. Every engine runs through the same `Engine` calls, one put at
//! a time.

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use strata::MergePolicy;
use strata::cost_model::{self, Design, Shape};

use super::{Common, Out, Table, num};
use crate::engines::strata_engine::{self, StrataEngine};
use crate::engines::{self, Engine, Seen, Settings, Start};
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
    /// The engines: strata (its three policies) and rocksdb (leveled and universal).
    #[arg(long, value_delimiter = ',', default_value = "strata,rocksdb")]
    pub engines: Vec<String>,
    /// The memtable; level 1 aims at four of them, as RocksDB's defaults do, and compaction
    /// cuts its output into files of one memtable.
    #[arg(long, default_value_t = 4 << 20)]
    pub write_buffer_size: usize,
    /// Entries a short scan reads.
    #[arg(long, default_value_t = 10)]
    pub scan_length: u64,
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Puts of keys already there after the reads, drawn at random: new versions whose old
    /// ones the tree holds until a merge drops them.
    #[arg(long, default_value_t = 1_000_000)]
    pub updates: u64,
}

const COLUMNS: &[&str] = &[
    "engine",
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
    "update_ops_per_s",
    "update_write_amplification",
    "space_after_updates",
    "model_write_amplification",
    "model_get_blocks",
    "model_missing_blocks",
    "model_scan_blocks",
    "model_space_amplification",
];

/// A design on the map: one of Strata's policies, or RocksDB's leveled or universal
/// compaction.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Row {
    Strata(MergePolicy),
    RocksLeveled,
    RocksUniversal,
}

impl Row {
    fn engine(self) -> &'static str {
        match self {
            Row::Strata(_) => "strata",
            _ => "rocksdb",
        }
    }

    fn policy(self) -> &'static str {
        match self {
            Row::Strata(p) => p.name(),
            Row::RocksLeveled => "leveled",
            Row::RocksUniversal => "universal",
        }
    }

    fn label(self) -> String {
        format!("{} {}", self.engine(), self.policy())
    }

    /// The policy whose model stands beside the row: RocksDB's leveled compaction is
    /// leveling, its universal compaction tiering.
    fn model(self) -> MergePolicy {
        match self {
            Row::Strata(p) => p,
            Row::RocksLeveled => MergePolicy::Leveling,
            Row::RocksUniversal => MergePolicy::Tiering,
        }
    }
}

/// A measured design: write amplification, then microseconds per get, missing get and scan.
type Point = (f64, f64, f64, f64);

/// The `i`-th key of a random order (a bijection of 2^53): keys below `num` are filled.
fn scrambled(i: u64) -> Vec<u8> {
    key(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & ((1 << 53) - 1), 16)
}

/// Level-0 files that start their merge in a leveled tree, Strata's and RocksDB's alike
/// (RocksDB's default).
const LEVELED_LEVEL0_TRIGGER: usize = 4;

/// The settings every engine gets for `row` at size ratio `ratio`. Level 0 merges at
/// `LEVELED_LEVEL0_TRIGGER` files under leveling and at `T` under the tiered designs, where
/// level 0 is the first tier (RocksDB's universal compaction sets its own, `T`).
fn settings(row: Row, ratio: u64, a: &Args) -> Settings {
    let tiered = row.model() != MergePolicy::Leveling;
    Settings {
        write_buffer_size: a.write_buffer_size,
        size_ratio: Some(ratio),
        level1_bytes: Some(4 * a.write_buffer_size as u64),
        target_file_size: Some(a.write_buffer_size as u64),
        level0_trigger: Some(match tiered {
            true => usize::try_from(ratio).unwrap_or(usize::MAX),
            false => LEVELED_LEVEL0_TRIGGER,
        }),
        statistics: true,
        ..Settings::new()
    }
}

fn open(row: Row, dir: &Path, ratio: u64, a: &Args) -> Result<Box<dyn Engine>, String> {
    let s = settings(row, ratio, a);
    match row {
        Row::Strata(policy) => {
            let opts = strata::Options {
                merge_policy: policy,
                read_triggered_compaction: false,
                ..strata_engine::options(&s, false)?
            };
            Ok(Box::new(StrataEngine::with_options(dir, opts)?))
        }
        Row::RocksLeveled => engines::open("rocksdb", dir, &s),
        Row::RocksUniversal => engines::open(
            "rocksdb",
            dir,
            &Settings {
                universal: true,
                ..s
            },
        ),
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
    update_seconds: f64,
    update_write_amplification: f64,
    space_after_updates: f64,
}

fn measure(db: &dyn Engine, a: &Args) -> Result<Measured, String> {
    let value = vec![b'v'; a.value_size];
    let started = Instant::now();
    for i in 0..a.num {
        db.put(&scrambled(i), &value, false)?;
    }
    db.wait_for_compaction()?;
    let fill_seconds = started.elapsed().as_secs_f64();
    let tree = db.tree()?.ok_or("the engine does not describe its tree")?;
    let written = tree
        .table_bytes_written
        .ok_or("the engine does not count its table writes")?;
    // Per byte of keys and values put, the same for every engine.
    let put = a.num * (16 + a.value_size as u64);
    if written < put / 2 {
        return Err(format!(
            "the engine counted {written} bytes written to tables for {put} bytes put"
        ));
    }
    let write_amplification = written as f64 / put as f64;
    let space_amplification = tree.table_bytes as f64 / put as f64;
    let stride = 0x5851_f42d_4c95_7f2d_u64;
    let timed = |f: &mut dyn FnMut(u64) -> Result<(), String>| -> Result<f64, String> {
        let started = Instant::now();
        for n in 0..a.lookups {
            f(n)?;
        }
        Ok(started.elapsed().as_secs_f64() * 1e6 / a.lookups as f64)
    };
    let get_us = timed(&mut |n| {
        let i = n.wrapping_mul(stride) % a.num;
        match db.get(&scrambled(i))? {
            Some(v) if v == Seen::of(&value) => Ok(()),
            Some(v) => Err(format!("key {i} has another value ({} bytes)", v.len)),
            None => Err(format!("key {i} is missing")),
        }
    })?;
    let missing_us = timed(&mut |n| match db.get(&scrambled(a.num + n))? {
        None => Ok(()),
        Some(_) => Err(format!("key {} should be missing", a.num + n)),
    })?;
    let scan_us = timed(&mut |n| {
        let from = scrambled(n.wrapping_mul(stride) % a.num);
        let mut first = None;
        let read = db.scan(Start::Key(&from), a.scan_length, &mut |k, _| {
            first.get_or_insert_with(|| k.to_vec());
        })?;
        // Every scan starts at a key that is there.
        if first.as_deref() != Some(from.as_slice()) || read == 0 {
            return Err(format!("a scan from {from:?} did not start there"));
        }
        Ok(())
    })?;
    // Updates: the same keys again, with other values of the same size, so the live data
    // stays `put` bytes and what the tree holds beyond it is older versions.
    let value = vec![b'u'; a.value_size];
    let started = Instant::now();
    for n in 0..a.updates {
        db.put(
            &scrambled(n.wrapping_mul(0x2545_f491_4f6c_dd1d) % a.num),
            &value,
            false,
        )?;
    }
    db.wait_for_compaction()?;
    let update_seconds = started.elapsed().as_secs_f64();
    let after = db.tree()?.ok_or("the engine does not describe its tree")?;
    let updated = after
        .table_bytes_written
        .ok_or("the engine does not count its table writes")?
        .saturating_sub(written);
    let update_bytes = a.updates * (16 + a.value_size as u64);
    Ok(Measured {
        update_seconds,
        update_write_amplification: updated as f64 / update_bytes.max(1) as f64,
        space_after_updates: after.table_bytes as f64 / put as f64,
        fill_seconds,
        write_amplification,
        runs: tree.runs,
        get_us,
        missing_us,
        scan_us,
        space_amplification,
    })
}

pub fn run(a: &Args) -> Result<(), String> {
    let mut rows = Vec::new();
    for engine in &a.engines {
        match engine.as_str() {
            "strata" => rows.extend(MergePolicy::ALL.map(Row::Strata)),
            "rocksdb" => rows.extend([Row::RocksLeveled, Row::RocksUniversal]),
            other => return Err(format!("policies: no engine {other:?} (strata, rocksdb)")),
        }
    }
    let names: Vec<&str> = a.engines.iter().map(String::as_str).collect();
    let mut out = Out::start("policies", &a.common, &names)?;
    let mut table = Table::new(COLUMNS);
    let shape = Shape {
        entries: a.num,
        entry_bytes: 16 + a.value_size as u64,
        buffer_bytes: a.write_buffer_size as u64,
        filter_bytes: a.num * 10 / 8,
        block_bytes: 4096,
        long_scan_entries: 10_000,
    };
    // Per row: (measured write amp, get, missing, scan µs) at each ratio; per Strata policy,
    // the model's (write amp, blocks per get + missing get).
    let mut measured: Vec<Vec<Point>> = vec![Vec::new(); rows.len()];
    let mut modelled: Vec<Vec<(f64, f64)>> = vec![Vec::new(); MergePolicy::ALL.len()];
    for &ratio in &a.ratios {
        for (pi, policy) in MergePolicy::ALL.into_iter().enumerate() {
            let design = Design {
                policy,
                size_ratio: u32::try_from(ratio).unwrap_or(u32::MAX),
                monkey: false,
            };
            let c = cost_model::predict(&design, &shape);
            modelled[pi].push((c.write_amplification, c.point_io + c.missing_io));
        }
        for (ri, &row) in rows.iter().enumerate() {
            let dir = out.db_dir(&format!("{}-{}-{ratio}", row.engine(), row.policy()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let db = open(row, &dir, ratio, a).map_err(|e| format!("{}: {e}", row.label()))?;
            let m = measure(db.as_ref(), a).map_err(|e| format!("{}: {e}", row.label()))?;
            drop(db);
            let _ = std::fs::remove_dir_all(&dir);
            let design = Design {
                policy: row.model(),
                size_ratio: u32::try_from(ratio).unwrap_or(u32::MAX),
                monkey: false,
            };
            let c = cost_model::predict(&design, &shape);
            out.say(&format!(
                "{:<21} T={ratio:<2} fill {:>6.1} s ({:>7.0}/s), write amp {:>5.2} (model \
                 {:>5.2}), runs {:?}; get {:>6.2} us, missing {:>6.2} us, scan {:>6.2} us; \
                 space {:.2} (model {:.2}); updates {:>7.0}/s, write amp {:>5.2}, space {:.2}",
                row.label(),
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
                a.updates as f64 / m.update_seconds,
                m.update_write_amplification,
                m.space_after_updates,
            ));
            measured[ri].push((m.write_amplification, m.get_us, m.missing_us, m.scan_us));
            let runs: Vec<String> = m.runs.iter().map(|r| r.to_string()).collect();
            table.push(vec![
                json!(row.engine()),
                json!(row.policy()),
                json!(ratio),
                num(m.fill_seconds),
                num(a.num as f64 / m.fill_seconds),
                num(m.write_amplification),
                json!(runs.join(" ")),
                num(m.get_us),
                num(m.missing_us),
                num(m.scan_us),
                num(m.space_amplification),
                num(a.updates as f64 / m.update_seconds),
                num(m.update_write_amplification),
                num(m.space_after_updates),
                num(c.write_amplification),
                num(c.point_io),
                num(c.missing_io),
                num(c.scan_io),
                num(c.space_amplification),
            ]);
        }
    }
    let series = |f: &dyn Fn(&Point) -> f64| -> Vec<Series> {
        rows.iter()
            .zip(&measured)
            .map(|(row, points)| Series {
                name: row.label(),
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
                name: format!("{} (model)", p.name()),
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

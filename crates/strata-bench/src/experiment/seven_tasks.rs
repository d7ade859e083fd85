//! The library project's seven tasks (seed 002): fill sequential and random, overwrite,
//! delete sequential and random, read sequential and random, each in microseconds per entry
//! for growing entry counts, on random data and on a generated CSV data set of the shape of
//! the seed's YouTube one (see `csv_data`).
//!
//! Random data is the seed's: keys 0, 1, 2, ... (zero-padded to 16 digits, so that their
//! order as bytes is their order as numbers) and random 100-character values. The CSV data
//! set is read by the CSV reader `strata import` uses, and `strata import` itself loads
//! each file into a Strata database as an eighth task, whose every value is checked after.

use std::path::Path;
use std::time::Instant;

use serde_json::json;

use super::csv_data::{self, Records};
use super::{Common, Out, Table, num};
use crate::engines::{Engine, Seen, Settings, Start, digest};
use crate::plot::{self, Axis, Panel, Series};
use crate::workloads::{Rng, hash_key};

const TASKS: [&str; 7] = [
    "fillseq",
    "fillrandom",
    "overwrite",
    "readseq",
    "readrandom",
    "deleteseq",
    "deleterandom",
];

#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// Entry counts, one run of every task each.
    #[arg(long, default_value = "1000,10000,100000")]
    pub counts: String,
    #[arg(long, default_value = "strata,rocksdb,leveldb")]
    pub engines: String,
    /// `random` and `csv`.
    #[arg(long, default_value = "random,csv")]
    pub datasets: String,
    /// Memtable bytes for every engine (the seed's first configuration: 2 MB in memory).
    #[arg(long, default_value_t = 2 << 20)]
    pub write_buffer_size: usize,
    /// The strata binary that runs `strata import` (default: beside this one, then
    /// target/release/strata).
    #[arg(long)]
    pub strata: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 301)]
    pub seed: u64,
}

fn random_records(n: u64, seed: u64) -> Records {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let value = (0..100)
                .map(|_| CHARS[rng.below(CHARS.len() as u64) as usize])
                .collect();
            (format!("{i:016}").into_bytes(), value)
        })
        .collect()
}

fn shuffled(n: usize, rng: &mut Rng) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// Runs the seven tasks on one engine; returns seconds per task, in `TASKS` order.
fn seven(
    out: &Out,
    name: &str,
    s: &Settings,
    records: &Records,
    seed: u64,
) -> Result<Vec<f64>, String> {
    let n = records.len();
    let mut sorted: Vec<usize> = (0..n).collect();
    sorted.sort_by(|&a, &b| records[a].0.cmp(&records[b].0));
    let mut rng = Rng::new(seed);
    let random = shuffled(n, &mut rng);
    let random2 = shuffled(n, &mut rng);
    let fill = |e: &dyn Engine, order: &[usize]| -> Result<(), String> {
        for &i in order {
            e.put(&records[i].0, &records[i].1, false)?;
        }
        Ok(())
    };
    let delete = |e: &dyn Engine, order: &[usize]| -> Result<(), String> {
        for &i in order {
            e.delete(&records[i].0, false)?;
        }
        Ok(())
    };
    let empty = |e: &dyn Engine, task: &str| -> Result<(), String> {
        match e.scan(Start::First, 1, &mut |_, _| {})? {
            0 => Ok(()),
            _ => Err(format!("{name}: entries left after {task}")),
        }
    };
    let timed = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
        let start = Instant::now();
        f()?;
        Ok(start.elapsed().as_secs_f64())
    };
    let mut seconds = Vec::new();
    let e = super::open_fresh(out, name, s)?;
    seconds.push(timed(&mut || fill(e.as_ref(), &sorted))?);
    // Each database closed before the next opens in its place.
    drop(e);
    let e = super::open_fresh(out, name, s)?;
    seconds.push(timed(&mut || fill(e.as_ref(), &random))?);
    // Overwrite with new values one byte longer, made before the clock starts; the reads
    // after compare each value's bytes with the newer one's.
    let newer: Vec<Vec<u8>> = records
        .iter()
        .map(|(_, v)| v.iter().rev().copied().chain([b'!']).collect())
        .collect();
    seconds.push(timed(&mut || {
        for &i in &random2 {
            e.put(&records[i].0, &newer[i], false)?;
        }
        Ok(())
    })?);
    // The scan hashes each key and value digest in order as it goes, to be checked after.
    let (mut scanned, mut hash) = (0usize, 0u64);
    seconds.push(timed(&mut || {
        e.scan(Start::First, u64::MAX, &mut |k, v| {
            scanned += 1;
            hash = hash_key(hash.wrapping_add(digest(v)), k);
        })
        .map(|_| ())
    })?);
    let expected = sorted.iter().fold(0u64, |h, &i| {
        hash_key(h.wrapping_add(digest(&newer[i])), &records[i].0)
    });
    if (scanned, hash) != (n, expected) {
        return Err(format!(
            "{name}: readseq read {scanned} entries, not the {n} keys put in order with their \
             overwritten values"
        ));
    }
    let mut found = 0;
    seconds.push(timed(&mut || {
        for &i in &random {
            if e.get(&records[i].0)? == Some(Seen::of(&newer[i])) {
                found += 1;
            }
        }
        Ok(())
    })?);
    if found != n {
        return Err(format!(
            "{name}: readrandom found {found} of {n} keys with their overwritten values"
        ));
    }
    seconds.push(timed(&mut || delete(e.as_ref(), &sorted))?);
    empty(e.as_ref(), "deleteseq")?;
    drop(e);
    let e = super::open_fresh(out, name, s)?;
    fill(e.as_ref(), &random)?;
    seconds.push(timed(&mut || delete(e.as_ref(), &random2))?);
    empty(e.as_ref(), "deleterandom")?;
    Ok(seconds)
}

/// Loads `file` with `strata import` into a new database; returns the seconds the command
/// took, after checking that the database holds every record's value.
fn import(strata: &Path, file: &Path, dir: &Path, records: &Records) -> Result<f64, String> {
    let _ = std::fs::remove_dir_all(dir);
    let start = Instant::now();
    let output = std::process::Command::new(strata)
        .arg("import")
        .arg(dir)
        .arg(file)
        .args(["--key", "video_id", "--value", "title"])
        .output()
        .map_err(|e| format!("{}: {e}", strata.display()))?;
    let seconds = start.elapsed().as_secs_f64();
    if !output.status.success() {
        return Err(format!(
            "strata import failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let db = strata::Db::open(dir, strata::Options::default()).map_err(|e| e.to_string())?;
    for (k, v) in records {
        if db.get(k).map_err(|e| e.to_string())?.as_deref() != Some(v.as_slice()) {
            return Err(format!(
                "strata import: {} does not hold its title",
                String::from_utf8_lossy(k)
            ));
        }
    }
    Ok(seconds)
}

pub fn run(a: &Args) -> Result<(), String> {
    let counts: Vec<u64> = super::list(&a.counts, "--counts")?;
    let engines: Vec<String> = super::list(&a.engines, "--engines")?;
    let datasets: Vec<String> = super::list(&a.datasets, "--datasets")?;
    if let Some(d) = datasets.iter().find(|d| *d != "random" && *d != "csv") {
        return Err(format!("unknown data set {d:?} (random, csv)"));
    }
    let names: Vec<&str> = engines.iter().map(String::as_str).collect();
    let mut out = Out::start("seven-tasks", &a.common, &names)?;
    let strata = match datasets.iter().any(|d| d == "csv") {
        true => Some(super::strata_binary(&a.strata)?),
        false => None,
    };
    let settings = Settings {
        write_buffer_size: a.write_buffer_size,
        ..Settings::new()
    };
    out.say(&format!(
        "seven-tasks: {} entries; data sets {}; memtables of {} KiB, other settings \
         strata-bench's defaults",
        a.counts,
        a.datasets,
        a.write_buffer_size >> 10
    ));
    let mut table = Table::new(&[
        "dataset",
        "engine",
        "task",
        "entries",
        "micros_per_entry",
        "seconds",
    ]);
    // (dataset, engine, task) -> (entries, micros per entry)
    let mut points: Vec<(String, String, String, f64, f64)> = Vec::new();
    let runs = datasets.len() * counts.len() * engines.len();
    let bar = super::progress(runs as u64, "runs");
    for dataset in &datasets {
        for &n in &counts {
            let (records, file) = match dataset.as_str() {
                "csv" => {
                    let file = out.db_dir(&format!("videos-{n}.csv"));
                    csv_data::generate(&file, n, a.seed)?;
                    (csv_data::read(&file)?, Some(file))
                }
                _ => (random_records(n, a.seed), None),
            };
            out.say(&format!("\n{dataset}, {n} entries: microseconds per entry"));
            out.say(&format!(
                "{:<13}{}",
                "task",
                names.iter().map(|e| format!("{e:>12}")).collect::<String>()
            ));
            let mut by_engine = Vec::new();
            for name in &names {
                bar.set_message(format!("{dataset} {n} {name}"));
                by_engine.push(seven(&out, name, &settings, &records, a.seed)?);
                bar.inc(1);
            }
            for (t, task) in TASKS.iter().enumerate() {
                let mut line = format!("{task:<13}");
                for (name, seconds) in names.iter().zip(&by_engine) {
                    let micros = seconds[t] * 1e6 / n.max(1) as f64;
                    line.push_str(&format!("{micros:>12.3}"));
                    table.push(vec![
                        json!(dataset),
                        json!(name),
                        json!(task),
                        json!(n),
                        num(micros),
                        num(seconds[t]),
                    ]);
                    points.push((
                        dataset.clone(),
                        name.to_string(),
                        task.to_string(),
                        n as f64,
                        micros,
                    ));
                }
                out.say(&line);
            }
            if let (Some(file), Some(strata)) = (&file, &strata) {
                let seconds = import(strata, file, &out.db_dir("import"), &records)?;
                let micros = seconds * 1e6 / n.max(1) as f64;
                out.say(&format!(
                    "{:<13}{micros:>12.3} (strata import, the whole command; every value \
                     checked after)",
                    "import"
                ));
                table.push(vec![
                    json!(dataset),
                    json!("strata"),
                    json!("import"),
                    json!(n),
                    num(micros),
                    num(seconds),
                ]);
                points.push((
                    dataset.clone(),
                    "strata".into(),
                    "import".into(),
                    n as f64,
                    micros,
                ));
            }
        }
    }
    bar.finish_and_clear();
    let mut panels = Vec::new();
    for task in TASKS
        .iter()
        .copied()
        .chain(strata.is_some().then_some("import"))
    {
        let mut series: Vec<Series> = Vec::new();
        for (dataset, engine, t, n, micros) in &points {
            if t != task {
                continue;
            }
            let label = format!("{engine}, {dataset}");
            match series.iter_mut().find(|s| s.name == label) {
                Some(s) => s.points.push((*n, *micros)),
                None => series.push(Series {
                    name: label,
                    points: vec![(*n, *micros)],
                }),
            }
        }
        panels.push(Panel {
            title: if task == "import" {
                "import (strata import of the CSV file)".into()
            } else {
                task.into()
            },
            x: Axis::log("entries"),
            y: Axis::log("microseconds per entry"),
            series,
        });
    }
    plot::lines(
        &out.path("svg"),
        "Seven tasks in microseconds per entry (seed 002), random data and the CSV data set",
        &panels,
        4,
    )?;
    out.finish(&table)
}

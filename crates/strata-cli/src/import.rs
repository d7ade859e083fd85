//! `strata import`: loads a CSV file in batches, with progress and a report of bad rows.

use std::collections::HashSet;
use std::io::{IsTerminal, Read};
use std::path::Path;
use std::time::Instant;

use strata::{Db, WriteBatch, WriteOptions};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnError {
    /// Report the bad row and go on.
    Skip,
    /// Stop at the first bad row (rows before it stay imported).
    Abort,
}

pub struct ImportArgs<'a> {
    pub file: &'a Path,
    pub key: &'a str,
    pub values: &'a [String],
    pub separator: &'a str,
    pub on_error: OnError,
    pub batch_rows: usize,
}

#[derive(Debug, Default)]
pub struct Report {
    pub rows: u64,
    pub imported: u64,
    pub duplicates: u64,
    pub bad: Vec<(u64, String)>,
    pub bytes: u64,
    pub seconds: f64,
}

/// Counts the bytes the CSV reader consumes, for the progress bar.
struct Counting<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

fn column(headers: &csv::StringRecord, name: &str) -> Result<usize, String> {
    if let Some(i) = headers.iter().position(|h| h == name) {
        return Ok(i);
    }
    if let Ok(i) = name.parse::<usize>()
        && i < headers.len()
    {
        return Ok(i);
    }
    Err(format!(
        "no column {name:?} in the header (columns: {})",
        headers.iter().collect::<Vec<_>>().join(", ")
    ))
}

pub fn import(db: &Db, args: &ImportArgs<'_>) -> Result<Report, String> {
    let file =
        std::fs::File::open(args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = Counting {
        inner: std::io::BufReader::with_capacity(1 << 20, file),
        count: count.clone(),
    };
    let mut csv = csv::ReaderBuilder::new().flexible(true).from_reader(reader);
    let headers = csv
        .headers()
        .map_err(|e| format!("{}: reading the header: {e}", args.file.display()))?
        .clone();
    let key_col = column(&headers, args.key)?;
    let value_cols = args
        .values
        .iter()
        .map(|v| column(&headers, v))
        .collect::<Result<Vec<_>, _>>()?;

    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {bytes}/{total_bytes} {msg} ({bytes_per_sec}, ETA {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };

    let start = Instant::now();
    let mut report = Report::default();
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut batch = WriteBatch::new();
    let mut record = csv::StringRecord::new();
    loop {
        let line = csv.position().line();
        match csv.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                report.rows += 1;
                let key = record.get(key_col);
                let values: Option<Vec<&str>> = value_cols.iter().map(|&c| record.get(c)).collect();
                match (key, values) {
                    (Some(k), Some(vs)) => {
                        let key = k.as_bytes().to_vec();
                        if !seen.insert(key.clone()) {
                            report.duplicates += 1;
                        }
                        batch.put(&key, vs.join(args.separator).as_bytes());
                        report.imported += 1;
                    }
                    _ => {
                        let why =
                            format!("{} fields, fewer than the columns asked for", record.len());
                        report.bad.push((line, why));
                        if args.on_error == OnError::Abort {
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                report.rows += 1;
                report.bad.push((line, e.to_string()));
                if args.on_error == OnError::Abort
                    || !matches!(
                        e.kind(),
                        csv::ErrorKind::Utf8 { .. } | csv::ErrorKind::UnequalLengths { .. }
                    )
                {
                    break;
                }
            }
        }
        if batch.len() >= args.batch_rows {
            db.write(std::mem::take(&mut batch), WriteOptions::default())
                .map_err(|e| e.to_string())?;
            bar.set_position(count.load(std::sync::atomic::Ordering::Relaxed));
            let secs = start.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!(
                "{} rows, {:.0} rows/s",
                report.rows,
                report.rows as f64 / secs
            ));
        }
    }
    if !batch.is_empty() {
        db.write(batch, WriteOptions::default())
            .map_err(|e| e.to_string())?;
    }
    bar.finish_and_clear();
    report.bytes = count.load(std::sync::atomic::Ordering::Relaxed);
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

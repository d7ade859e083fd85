//! What the experiments share: their common arguments, result tables and output files.

use std::io::IsTerminal;
use std::path::PathBuf;

use serde_json::Value;

use crate::engines::{self, Engine, Settings};
use crate::machine;

/// What every experiment takes besides its own knobs.
#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Common {
    /// Directory for the results: NAME.csv, NAME.svg, NAME.txt (what was printed) and, with
    /// --json, NAME.json.
    #[arg(long, default_value = "experiments")]
    pub out: PathBuf,
    /// Scratch directory for the databases (emptied first, removed at the end).
    #[arg(long, default_value = "/tmp/strata-experiment")]
    pub db: PathBuf,
    /// Also write the results as JSON (NAME.json) and print them on stdout.
    #[arg(long)]
    pub json: bool,
    /// The results' file name (default: the experiment's), to keep several runs apart.
    #[arg(long)]
    pub name: Option<String>,
}

/// A results table: named columns, rows of numbers and text.
pub struct Table {
    pub columns: Vec<&'static str>,
    pub rows: Vec<Vec<Value>>,
}

impl Table {
    pub fn new(columns: &[&'static str]) -> Self {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    pub fn csv(&self) -> String {
        let mut out = self.columns.join(",");
        out.push('\n');
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(csv_cell).collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
        out
    }

    pub fn json(&self) -> Value {
        Value::Array(
            self.rows
                .iter()
                .map(|row| {
                    let object = self
                        .columns
                        .iter()
                        .zip(row)
                        .map(|(c, v)| (c.to_string(), v.clone()))
                        .collect();
                    Value::Object(object)
                })
                .collect(),
        )
    }
}

fn csv_cell(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// What an experiment prints, kept to be written beside its results.
pub struct Out {
    name: String,
    common: Common,
    text: String,
}

impl Out {
    /// Starts an experiment's output with a header: the command, the machine, the commit and
    /// the engines' versions.
    pub fn start(name: &'static str, common: &Common, engines: &[&str]) -> Result<Self, String> {
        std::fs::create_dir_all(&common.out)
            .map_err(|e| format!("{}: {e}", common.out.display()))?;
        let _ = std::fs::remove_dir_all(&common.db);
        std::fs::create_dir_all(&common.db).map_err(|e| format!("{}: {e}", common.db.display()))?;
        let mut out = Out {
            name: common.name.clone().unwrap_or(name.to_string()),
            common: common.clone(),
            text: String::new(),
        };
        let mut bases: Vec<&str> = Vec::new();
        for e in engines.iter().map(|e| base(e)) {
            if !bases.contains(&e) {
                bases.push(e);
            }
        }
        let command: Vec<String> = std::env::args().skip(1).collect();
        out.say(&format!("strata-bench {}", command.join(" ")));
        out.say(&format!("machine:  {}", machine::describe(&common.db)));
        out.say(&format!("commit:   {}", machine::commit()));
        out.say(&format!("engines:  {}", machine::engine_versions(&bases)));
        Ok(out)
    }

    /// Prints a line (not with --json, whose stdout is the JSON) and keeps it.
    pub fn say(&mut self, line: &str) {
        if !self.common.json {
            println!("{line}");
        }
        self.text.push_str(line);
        self.text.push('\n');
    }

    pub fn path(&self, extension: &str) -> PathBuf {
        self.common.out.join(format!("{}.{extension}", self.name))
    }

    pub fn db_dir(&self, engine: &str) -> PathBuf {
        self.common.db.join(engine)
    }

    /// Writes the table as CSV (and JSON), and what was printed; removes the databases.
    pub fn finish(mut self, table: &Table) -> Result<(), String> {
        let write = |path: PathBuf, text: &str| {
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
        };
        write(self.path("csv"), &table.csv())?;
        if self.common.json {
            let json = serde_json::json!({ "header": self.text.trim_end(), "rows": table.json() });
            let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
            write(self.path("json"), &text)?;
            println!("{text}");
        }
        let figure = match self.path("svg") {
            p if p.exists() => format!(", {}", p.display()),
            _ => String::new(),
        };
        self.say(&format!(
            "results: {} ({} rows){figure}, {}",
            self.path("csv").display(),
            table.rows.len(),
            self.path("txt").display()
        ));
        write(self.path("txt"), &self.text)?;
        let _ = std::fs::remove_dir_all(&self.common.db);
        Ok(())
    }
}

/// The engine a name stands for, for its version: `strata-btree` is Strata.
fn base(engine: &str) -> &str {
    if engine.starts_with("strata") {
        "strata"
    } else {
        engine
    }
}

/// Opens `engine` fresh (its directory emptied) under the experiment's scratch directory.
pub fn open_fresh(out: &Out, engine: &str, s: &Settings) -> Result<Box<dyn Engine>, String> {
    let dir = out.db_dir(engine);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    engines::open(engine, &dir, s).map_err(|e| format!("{engine}: {e}"))
}

/// The strata binary: the one asked for, else the one beside this binary, else
/// target/release/strata.
pub fn strata_binary(asked: &Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = asked {
        return Ok(p.clone());
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join("strata")));
    let candidates = beside
        .into_iter()
        .chain([PathBuf::from("target/release/strata")]);
    for c in candidates {
        if c.is_file() {
            return Ok(c);
        }
    }
    Err(
        "no strata binary beside strata-bench or in target/release: build it with \
         `cargo build --release -p strata-cli`, or pass --strata"
            .into(),
    )
}

/// A list of comma-separated values.
pub fn list<T: std::str::FromStr>(text: &str, what: &str) -> Result<Vec<T>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("{what}: cannot read {s:?}")))
        .collect()
}

/// A progress bar on stderr, hidden when stderr is not a terminal.
pub fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} (ETA {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    bar
}

/// Rounds to a readable number of digits for tables.
pub fn num(x: f64) -> Value {
    let rounded = if x.abs() >= 100.0 {
        x.round()
    } else {
        (x * 1000.0).round() / 1000.0
    };
    serde_json::json!(rounded)
}

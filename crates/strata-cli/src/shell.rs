//! `strata shell`: an interactive shell with history and line editing, in the manner of the
//! seed course project's shell. When standard input is not a terminal, commands are read one
//! per line with no prompt, so the shell can be driven by a script.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use strata::{
    ColumnFamily, Db, FilterKind, IndexKind, Options, ReadOptions, WriteBatch, WriteOptions,
};

use crate::text::{show, split_words};

const HELP: &str = "\
commands:
  open <dir> [memtable_bytes]   open (or create) a database
  close                         close it
  put <key> <value>             set a key
  get <key>                     show a key's value
  del <key>                     delete a key
  delrange <start> <end>        delete every key in [start, end), with one range tombstone
  scan <start> <end> [limit]    keys in [start, end) in order (limit 50 by default)
  rscan <start> <end> [limit]   the same in reverse order
  index <flat|btree>            the index new SST files get (compact to rewrite old ones)
  filter <whole|partitioned>    the Bloom filter new SST files get (likewise)
  families                      the column families, with their files and bytes
  family create <name>          create a column family
  family drop <name>            drop a column family and its keys
  use <name>                    read and write that column family (`use default` to go back)
  flush                         write the memtable to an SST
  compact                       compact the whole column family
  stats                         levels, amplification, cache
  help                          this text
  exit | quit                   close the database and leave
keys and values: plain words, or \"quoted strings\" with \\xNN, \\n, \\t, \\\\ and \\\" escapes";

const DEFAULT_SCAN_LIMIT: usize = 50;

/// The shell's state: the open database and how to reopen it.
struct Shell {
    db: Option<Db>,
    dir: Option<PathBuf>,
    options: Options,
    /// The column family the commands read and write (`None`: the default one).
    family: Option<ColumnFamily>,
}

/// What a command asks of the loop.
enum Flow {
    Continue,
    Exit,
}

/// Runs the shell on `dir` (if given), opening databases with `options`.
pub fn run(dir: Option<PathBuf>, options: &Options) -> Result<(), String> {
    let mut shell = Shell {
        db: None,
        dir: None,
        options: options.clone(),
        family: None,
    };
    if let Some(dir) = dir {
        shell.open(dir, None)?;
    }
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        run_interactive(&mut shell)
    } else {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let line = line.map_err(|e| format!("reading standard input: {e}"))?;
            if let Flow::Exit = shell.execute_line(&line) {
                break;
            }
        }
        shell.close_quietly();
        Ok(())
    }
}

fn run_interactive(shell: &mut Shell) -> Result<(), String> {
    use rustyline::error::ReadlineError;
    let mut editor = rustyline::DefaultEditor::new().map_err(|e| format!("line editor: {e}"))?;
    let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".strata_history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    println!("strata shell: type `help` for the commands, Ctrl-D to leave");
    loop {
        let prompt = match (&shell.dir, &shell.family) {
            (Some(d), Some(f)) => format!("strata {}[{}]> ", d.display(), f.name()),
            (Some(d), None) => format!("strata {}> ", d.display()),
            (None, _) => "strata> ".to_string(),
        };
        match editor.readline(&prompt) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                }
                if let Flow::Exit = shell.execute_line(&line) {
                    break;
                }
            }
            // Ctrl-C cancels the line being typed.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                shell.close_quietly();
                return Err(format!("line editor: {e}"));
            }
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    shell.close_quietly();
    Ok(())
}

impl Shell {
    fn open(&mut self, dir: PathBuf, memtable: Option<usize>) -> Result<(), String> {
        self.close_quietly();
        if let Some(m) = memtable {
            self.options.write_buffer_size = m;
        }
        let db = Db::open(&dir, self.options.clone()).map_err(|e| e.to_string())?;
        self.db = Some(db);
        self.dir = Some(dir);
        Ok(())
    }

    /// Reopens the database with the shell's options, in the same column family.
    fn reopen(&mut self) -> Result<(), String> {
        let Some(dir) = self.dir.clone() else {
            return Ok(());
        };
        let family = self.family.as_ref().map(|f| f.name().to_string());
        self.open(dir, None)?;
        if let Some(name) = family {
            self.family = self.db()?.family(&name);
        }
        Ok(())
    }

    /// The column family the commands use.
    fn cf(&self) -> Result<ColumnFamily, String> {
        let db = self.db()?;
        Ok(self.family.clone().unwrap_or_else(|| db.default_family()))
    }

    fn close_quietly(&mut self) {
        if let Some(db) = self.db.take()
            && let Err(e) = db.close()
        {
            eprintln!("error: closing: {e}");
        }
        self.dir = None;
        self.family = None;
    }

    fn db(&self) -> Result<&Db, String> {
        self.db
            .as_ref()
            .ok_or_else(|| "no database is open (use `open <dir>`)".to_string())
    }

    fn execute_line(&mut self, line: &str) -> Flow {
        let words = match split_words(line) {
            Ok(w) => w,
            Err(e) => {
                println!("error: {e}");
                return Flow::Continue;
            }
        };
        let Some((cmd, args)) = words.split_first() else {
            return Flow::Continue;
        };
        let cmd = String::from_utf8_lossy(cmd).to_lowercase();
        let result = self.execute(&cmd, args);
        let _ = std::io::stdout().flush();
        match result {
            Ok(flow) => flow,
            Err(e) => {
                println!("error: {e}");
                Flow::Continue
            }
        }
    }

    fn execute(&mut self, cmd: &str, args: &[Vec<u8>]) -> Result<Flow, String> {
        let want = |n: std::ops::RangeInclusive<usize>, usage: &str| -> Result<(), String> {
            if n.contains(&args.len()) {
                Ok(())
            } else {
                Err(format!("usage: {usage}"))
            }
        };
        let text = |b: &Vec<u8>| String::from_utf8_lossy(b).into_owned();
        match cmd {
            "help" | "?" => println!("{HELP}"),
            "exit" | "quit" => return Ok(Flow::Exit),
            "open" => {
                want(1..=2, "open <dir> [memtable_bytes]")?;
                let memtable = match args.get(1) {
                    Some(m) => Some(
                        text(m)
                            .parse::<usize>()
                            .map_err(|_| format!("{:?} is not a byte count", text(m)))?,
                    ),
                    None => None,
                };
                let dir = PathBuf::from(text(&args[0]));
                self.open(dir.clone(), memtable)?;
                println!("opened {}", dir.display());
            }
            "close" => {
                want(0..=0, "close")?;
                self.db()?;
                self.close_quietly();
                println!("closed");
            }
            "put" => {
                want(2..=2, "put <key> <value>")?;
                self.db()?
                    .put_cf(&self.cf()?, &args[0], &args[1])
                    .map_err(|e| e.to_string())?;
                println!("ok");
            }
            "get" => {
                want(1..=1, "get <key>")?;
                let value = self.db()?.get_cf(&self.cf()?, &args[0]);
                match value.map_err(|e| e.to_string())? {
                    Some(v) => println!("{}", show(&v)),
                    None => println!("(not found)"),
                }
            }
            "del" | "delete" => {
                want(1..=1, "del <key>")?;
                self.db()?
                    .delete_cf(&self.cf()?, &args[0])
                    .map_err(|e| e.to_string())?;
                println!("ok");
            }
            "delrange" => {
                want(2..=2, "delrange <start> <end>")?;
                let mut batch = WriteBatch::new();
                batch.delete_range_cf(&self.cf()?, &args[0], &args[1]);
                self.db()?
                    .write(batch, WriteOptions::default())
                    .map_err(|e| e.to_string())?;
                println!("ok");
            }
            "scan" | "rscan" => {
                want(2..=3, &format!("{cmd} <start> <end> [limit]"))?;
                let limit = match args.get(2) {
                    Some(l) => text(l)
                        .parse::<usize>()
                        .map_err(|_| format!("{:?} is not a limit", text(l)))?,
                    None => DEFAULT_SCAN_LIMIT,
                };
                self.scan(&args[0], &args[1], limit, cmd == "rscan")?;
            }
            "index" => {
                want(1..=1, "index <flat|btree>")?;
                let kind = match text(&args[0]).as_str() {
                    "flat" | "binary" => IndexKind::Flat,
                    "btree" | "b-tree" => IndexKind::BTree,
                    other => return Err(format!("unknown index {other:?} (flat or btree)")),
                };
                self.options.index_kind = kind;
                self.reopen()?;
                println!("new SST files get a {kind:?} index; `compact` rewrites the old ones");
            }
            "filter" => {
                want(1..=1, "filter <whole|partitioned>")?;
                let kind = match text(&args[0]).as_str() {
                    "whole" => FilterKind::Whole,
                    "partitioned" => FilterKind::Partitioned,
                    other => {
                        return Err(format!("unknown filter {other:?} (whole or partitioned)"));
                    }
                };
                self.options.filter_kind = kind;
                self.reopen()?;
                println!("new SST files get a {kind:?} filter; `compact` rewrites the old ones");
            }
            "flush" => {
                want(0..=0, "flush")?;
                self.db()?.flush().map_err(|e| e.to_string())?;
                println!("ok");
            }
            "compact" => {
                want(0..=0, "compact")?;
                self.db()?
                    .compact_range_cf(&self.cf()?, None, None)
                    .map_err(|e| e.to_string())?;
                println!("ok");
            }
            "stats" => {
                want(0..=0, "stats")?;
                print!("{}", crate::report::stats_text(&self.db()?.stats()));
            }
            "families" => {
                want(0..=0, "families")?;
                for f in self.db()?.stats().families {
                    let files: usize = f.levels.iter().map(|l| l.files).sum();
                    let bytes: u64 = f.levels.iter().map(|l| l.bytes).sum();
                    println!(
                        "{:<16} {files:>6} files {:>12}",
                        f.name,
                        crate::report::human_bytes(bytes)
                    );
                }
            }
            "family" | "cf" => {
                want(2..=2, "family <create|drop> <name>")?;
                let name = text(&args[1]);
                match text(&args[0]).as_str() {
                    "create" => {
                        let options = self.options.clone();
                        self.db()?
                            .create_family(&name, options)
                            .map_err(|e| e.to_string())?;
                        println!("created column family {name}");
                    }
                    "drop" => {
                        self.db()?.drop_family(&name).map_err(|e| e.to_string())?;
                        if self.family.as_ref().is_some_and(|f| f.name() == name) {
                            self.family = None;
                        }
                        println!("dropped column family {name}");
                    }
                    other => return Err(format!("unknown family command {other:?}")),
                }
            }
            "use" => {
                want(1..=1, "use <family>")?;
                let name = text(&args[0]);
                let family = self
                    .db()?
                    .family(&name)
                    .ok_or_else(|| format!("no column family {name:?} (`families` lists them)"))?;
                self.family = (family.id() != 0).then_some(family);
                println!("using column family {name}");
            }
            other => return Err(format!("unknown command {other:?} (type `help`)")),
        }
        Ok(Flow::Continue)
    }

    fn scan(&self, start: &[u8], end: &[u8], limit: usize, reverse: bool) -> Result<(), String> {
        let db = self.db()?;
        let it = db
            .scan_with(
                start.to_vec()..end.to_vec(),
                ReadOptions {
                    family: Some(self.cf()?),
                    ..ReadOptions::default()
                },
                reverse,
            )
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        let mut more = false;
        for entry in it {
            let (k, v) = entry.map_err(|e| e.to_string())?;
            if rows.len() == limit {
                more = true;
                break;
            }
            rows.push((show(&k), show(&v)));
        }
        let width = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0)
            .min(40);
        for (k, v) in &rows {
            println!("{k:<width$}  {v}");
        }
        if more {
            println!("({} shown; more remain, give a larger limit)", rows.len());
        } else {
            println!("({} entries)", rows.len());
        }
        Ok(())
    }
}

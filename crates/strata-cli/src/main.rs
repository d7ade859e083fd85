//! `strata`: the command-line tool of the Strata key-value store.
//!
//! Exit codes: 0 success, 1 an error (including damage found by `check`), 2 a usage error.

#![forbid(unsafe_code)]

mod conf;
mod import;
mod report;
mod shell;
mod text;
mod tune;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use strata::{
    BackupEngine, ColumnFamily, Db, FilterPolicy, MergePolicy, Options, WriteBatch, WriteOptions,
};

use crate::text::{hex, parse_arg, show, unhex};

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Strata: a persistent, ordered key-value store on an LSM tree"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How tables get Bloom filter bits: `uniform:BITS` (the same bits per key in every
    /// table) or `monkey:BITS` (the same memory, spread over the levels so that each
    /// level's false-positive rate is proportional to its size).
    #[arg(long, global = true, default_value = "uniform:10", value_parser = parse_filter_policy)]
    filter_policy: FilterPolicy,
    /// How sorted runs are merged: `leveling` (one run per level), `tiering` (up to T-1 runs
    /// per level, merged together into the next when full) or `lazy-leveling` (tiering
    /// above a leveled deepest level).
    #[arg(long, global = true, default_value = "leveling", value_parser = parse_merge_policy)]
    merge_policy: MergePolicy,
    /// The size ratio T between adjacent levels.
    #[arg(
        long,
        global = true,
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(2..)
    )]
    size_ratio: u64,
}

fn parse_merge_policy(s: &str) -> Result<MergePolicy, String> {
    MergePolicy::ALL
        .into_iter()
        .find(|p| p.name() == s)
        .ok_or_else(|| format!("expected leveling, tiering or lazy-leveling, not {s:?}"))
}

fn parse_filter_policy(s: &str) -> Result<FilterPolicy, String> {
    let bad = || format!("expected uniform:BITS or monkey:BITS, not {s:?}");
    let (kind, bits) = s.split_once(':').ok_or_else(bad)?;
    let bits: usize = bits.parse().map_err(|_| bad())?;
    if bits > 64 {
        return Err(format!("at most 64 bits per key, not {bits}"));
    }
    match kind {
        "uniform" => Ok(FilterPolicy::Uniform { bits_per_key: bits }),
        "monkey" => Ok(FilterPolicy::Monkey {
            total_bits_per_key: bits,
        }),
        _ => Err(bad()),
    }
}

/// Which column family a command reads or writes.
#[derive(clap::Args, Clone)]
struct FamilyArg {
    /// The column family (the default one when not given); `strata family create` makes one.
    #[arg(long)]
    family: Option<String>,
}

impl FamilyArg {
    fn resolve(&self, db: &Db) -> Result<ColumnFamily, String> {
        match &self.family {
            None => Ok(db.default_family()),
            Some(name) => db.family(name).ok_or_else(|| {
                format!(
                    "no column family {name:?} in {} (create it with `strata family create`)",
                    db.path().display()
                )
            }),
        }
    }
}

#[derive(Subcommand)]
enum FamilyCommand {
    /// List the column families, the default one first.
    List { dir: PathBuf },
    /// Create a column family.
    Create { dir: PathBuf, name: String },
    /// Drop a column family and every key it holds.
    Drop { dir: PathBuf, name: String },
}

/// How keys and values are read from the command line and written out.
#[derive(clap::Args, Clone, Copy)]
struct Format {
    /// Keys and values are hexadecimal, in and out.
    #[arg(long)]
    hex: bool,
    /// Output as JSON (strings escaped like the text form, or hex with --hex).
    #[arg(long)]
    json: bool,
}

impl Format {
    fn input(&self, s: &str) -> Result<Vec<u8>, String> {
        if self.hex { unhex(s) } else { parse_arg(s) }
    }
    fn output(&self, b: &[u8]) -> String {
        if self.hex { hex(b) } else { show(b) }
    }
}

#[derive(Subcommand)]
enum BackupCommand {
    /// Back the database up into the backup directory (created if missing).
    Create { dir: PathBuf, backups: PathBuf },
    /// List the backups: id, time, files, bytes.
    List { backups: PathBuf },
    /// Restore a backup (the newest unless --id) into a new directory, checking every
    /// file's checksum.
    Restore {
        backups: PathBuf,
        target: PathBuf,
        #[arg(long)]
        id: Option<u64>,
    },
    /// Read every file of a backup (the newest unless --id) and check its checksum.
    Verify {
        backups: PathBuf,
        #[arg(long)]
        id: Option<u64>,
    },
    /// Delete all backups but the newest --keep, and the files only they held.
    Purge {
        backups: PathBuf,
        #[arg(long)]
        keep: usize,
    },
    /// Delete one backup, and the files only it held.
    Delete { backups: PathBuf, id: u64 },
}

// Made once, from the command line: `serve`'s many flags cost nothing to keep inline.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// An interactive shell over a database (commands from stdin when it is not a terminal).
    Shell {
        /// Open this database first.
        dir: Option<PathBuf>,
    },
    /// Print the value of a key.
    Get {
        dir: PathBuf,
        key: String,
        #[command(flatten)]
        family: FamilyArg,
        #[command(flatten)]
        format: Format,
    },
    /// Set keys: one KEY VALUE pair, or tab-separated pairs from stdin with --from-stdin.
    Put {
        dir: PathBuf,
        key: Option<String>,
        value: Option<String>,
        /// Read `key<TAB>value` lines from standard input, written in batches.
        #[arg(long)]
        from_stdin: bool,
        /// Fsync before returning (survives power loss).
        #[arg(long)]
        sync: bool,
        #[command(flatten)]
        family: FamilyArg,
        #[command(flatten)]
        format: Format,
    },
    /// Delete keys.
    Del {
        dir: PathBuf,
        #[arg(required = true)]
        keys: Vec<String>,
        #[command(flatten)]
        family: FamilyArg,
        #[command(flatten)]
        format: Format,
    },
    /// Delete every key in [START, END) with one range tombstone.
    DeleteRange {
        dir: PathBuf,
        start: String,
        end: String,
        #[command(flatten)]
        family: FamilyArg,
        #[command(flatten)]
        format: Format,
    },
    /// Print the entries in [START, END) as `key<TAB>value` lines.
    Scan {
        dir: PathBuf,
        start: Option<String>,
        end: Option<String>,
        /// Stop after this many entries.
        #[arg(long)]
        limit: Option<usize>,
        /// Newest key first.
        #[arg(long)]
        reverse: bool,
        #[command(flatten)]
        family: FamilyArg,
        #[command(flatten)]
        format: Format,
    },
    /// Load a CSV file: one column as the key, one or more as the value.
    Import {
        dir: PathBuf,
        file: PathBuf,
        /// The key column (header name or 0-based index).
        #[arg(long)]
        key: String,
        /// The value columns, comma-separated; several are joined with --separator.
        #[arg(long, value_delimiter = ',', required = true)]
        value: Vec<String>,
        /// Joins several value columns.
        #[arg(long, default_value = "\t")]
        separator: String,
        /// What to do with a bad row.
        #[arg(long, value_enum, default_value = "skip")]
        on_error: import::OnError,
        /// Rows per atomic batch.
        #[arg(long, default_value_t = 1000)]
        batch_rows: usize,
    },
    /// Column families: independent trees in one database, with one WAL and atomic batches
    /// across them.
    #[command(subcommand)]
    Family(FamilyCommand),
    /// Write a consistent copy of the database into a new directory, which opens as a
    /// database of its own (tables hard-linked where the file system allows).
    Checkpoint { dir: PathBuf, target: PathBuf },
    /// Keep several backups of a database in one directory, sharing their unchanged tables.
    #[command(subcommand)]
    Backup(BackupCommand),
    /// Show the level structure: per level the files, key ranges, sizes and entry counts.
    Inspect {
        dir: PathBuf,
        /// Also draw the tree as an SVG picture into this file.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Decode one WAL, SST or MANIFEST file.
    InspectFile {
        file: PathBuf,
        /// List the entries too.
        #[arg(long)]
        entries: bool,
    },
    /// Verify every checksum of every file; exit 1 when anything is damaged.
    Check { dir: PathBuf },
    /// Rebuild a damaged database from the tables and WAL records that still read (LevelDB's
    /// RepairDB); damaged files go to DIR/lost/. The database must be closed.
    Repair { dir: PathBuf },
    /// The engine's statistics: levels, amplification, cache.
    Stats {
        dir: PathBuf,
        /// Print this property instead, by LevelDB's or RocksDB's name
        /// (`leveldb.sstables`, `rocksdb.estimate-num-keys`, ...); may be given again.
        #[arg(long = "property", value_name = "NAME")]
        properties: Vec<String>,
    },
    /// Rank the designs of the LSM space (merge policy, size ratio, filter bits) for a
    /// workload by the cost model's predicted I/O per operation.
    Tune {
        /// Shares of operations: writes, point (gets of existing keys), missing (gets of
        /// missing keys), scan (short scans), long_scan.
        #[arg(long)]
        workload: String,
        /// Entries in the database (100M, 1e8, ...).
        #[arg(long, value_parser = tune::parse_count)]
        entries: u64,
        /// Memory for Bloom filters (1GiB, 512MiB, ...).
        #[arg(long, value_parser = tune::parse_bytes)]
        memory: u64,
        /// Bytes of a key and its value.
        #[arg(long, default_value_t = 116)]
        entry_size: u64,
        /// The write buffer.
        #[arg(long, default_value = "64MiB", value_parser = tune::parse_bytes)]
        buffer: u64,
        /// Bytes of a data block.
        #[arg(long, default_value_t = 4096)]
        block_size: u64,
        /// Entries a long scan reads.
        #[arg(long, default_value_t = 10_000)]
        long_scan: u64,
        /// Size ratios to consider.
        #[arg(long, value_delimiter = ',', default_value = "2,3,4,6,8,10,12,16")]
        ratios: Vec<u32>,
        /// Designs to print, best first.
        #[arg(long, default_value_t = 12)]
        top: usize,
    },
    /// Serve the database over the Redis protocol (RESP) until SIGINT or SIGTERM.
    #[command(args_override_self = true)]
    Serve {
        /// A configuration file in Redis's format: its settings come first, the flags given
        /// here override them, and CONFIG REWRITE writes the running settings back to it.
        config: Option<PathBuf>,
        /// The database directory (created if missing).
        #[arg(long, default_value = "strata-data")]
        dir: PathBuf,
        /// The port to listen on.
        #[arg(long, default_value_t = 6380)]
        port: u16,
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        bind: String,
        /// When writes are fsynced: always (before each reply), everysec, or no.
        #[arg(long, default_value = "everysec")]
        sync: strata_server::SyncMode,
        /// Most connections at once.
        #[arg(long, default_value_t = 10_000)]
        maxclients: usize,
        /// Largest bulk string a request may carry.
        #[arg(long, default_value_t = 512 * 1024 * 1024)]
        max_request_bytes: usize,
        /// Close connections idle this many seconds (0: never).
        #[arg(long, default_value_t = 0)]
        timeout: u64,
        /// Bytes of the hot-key cache in front of the engine (0: off).
        #[arg(long, default_value_t = 64 * 1024 * 1024)]
        cache_bytes: usize,
        /// Worker threads serving connections (0: half the CPUs, at least one).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// The engine's memtable size in bytes.
        #[arg(long, default_value_t = 64 * 1024 * 1024)]
        write_buffer_size: usize,
        /// The engine's block cache in bytes. A server's default: larger than the library's
        /// 8 MiB, so that a data set of a few hundred MiB is read from memory, as Redis users
        /// expect.
        #[arg(long, default_value_t = 256 * 1024 * 1024)]
        block_cache_bytes: usize,
        /// The `default` user's password: clients must AUTH with it.
        #[arg(long)]
        requirepass: Option<String>,
        /// The ACL file: users are loaded from it at start and by ACL LOAD, saved by ACL SAVE.
        #[arg(long)]
        aclfile: Option<PathBuf>,
        /// Refuse clients from other hosts while `default` has no password: yes or no.
        #[arg(long, default_value = "yes", value_parser = ["yes", "no"])]
        protected_mode: String,
        /// Serve TLS on this port too (`--port 0` then turns the plain port off).
        #[arg(long)]
        tls_port: Option<u16>,
        /// The server's certificate chain (PEM).
        #[arg(long)]
        tls_cert_file: Option<PathBuf>,
        /// The server's private key (PEM).
        #[arg(long)]
        tls_key_file: Option<PathBuf>,
        /// The CA that signs client certificates (PEM).
        #[arg(long)]
        tls_ca_cert_file: Option<PathBuf>,
        /// Whether clients must show a certificate signed by that CA: yes, no or optional.
        #[arg(long, default_value = "yes")]
        tls_auth_clients: strata_server::ClientAuth,
        /// Close a connection whose unparsed request passes this many bytes.
        #[arg(long, default_value_t = 1 << 30)]
        client_query_buffer_limit: usize,
        /// Close a connection whose unread replies pass this many bytes (0: no limit).
        #[arg(long, default_value_t = 0)]
        client_output_buffer_limit: usize,
        /// Seconds of silence before TCP keepalive probes a connection, so that a peer gone
        /// without closing is found (0: off).
        #[arg(long, default_value_t = 300)]
        tcp_keepalive: u64,
        /// Keyspace notifications, in Redis's letters (`KEA`: every event on both channels;
        /// empty: none).
        #[arg(long, default_value = "")]
        notify_keyspace_events: String,
        /// Follow the primary at "HOST PORT" as its replica (REPLICAOF does so at run time).
        #[arg(long, value_name = "HOST PORT")]
        replicaof: Option<String>,
        /// Bytes of WAL files kept, once their writes are in tables, for replicas that
        /// fall behind to catch up from (kept an hour at most); a replica further behind is
        /// copied whole.
        #[arg(long, default_value_t = 256 << 20)]
        repl_wal_keep_bytes: u64,
    },
}

/// `--replicaof "HOST PORT"`'s two words.
fn primary_address(text: &str) -> Result<(String, u16), String> {
    match text.split_whitespace().collect::<Vec<_>>().as_slice() {
        [host, port] => Ok((
            host.to_string(),
            port.parse()
                .map_err(|_| format!("--replicaof {text:?}: the port is not a number"))?,
        )),
        _ => Err(format!("--replicaof {text:?}: expected \"HOST PORT\"")),
    }
}

fn open_existing(dir: &Path, base: &Options) -> Result<Db, String> {
    let opts = Options {
        create_if_missing: false,
        ..base.clone()
    };
    Db::open(dir, opts).map_err(|e| e.to_string())
}

fn open_or_create(dir: &Path, base: &Options) -> Result<Db, String> {
    Db::open(dir, base.clone()).map_err(|e| e.to_string())
}

fn close(db: Db) -> Result<(), String> {
    db.close().map_err(|e| e.to_string())
}

fn json_str(s: String) -> serde_json::Value {
    serde_json::Value::String(s)
}

fn family_command(cmd: FamilyCommand, base: &Options, out: &mut impl Write) -> Result<(), String> {
    let io = |e: std::io::Error| format!("writing output: {e}");
    let (dir, done) = match &cmd {
        FamilyCommand::List { dir } => (dir, None),
        FamilyCommand::Create { dir, name } => (dir, Some(format!("created column family {name}"))),
        FamilyCommand::Drop { dir, name } => (dir, Some(format!("dropped column family {name}"))),
    };
    let db = open_existing(dir, base)?;
    let result = match &cmd {
        FamilyCommand::List { .. } => {
            let stats = db.stats();
            stats.families.iter().try_for_each(|f| {
                let files: usize = f.levels.iter().map(|l| l.files).sum();
                let bytes: u64 = f.levels.iter().map(|l| l.bytes).sum();
                writeln!(
                    out,
                    "{}\t{} files\t{}",
                    f.name,
                    files,
                    report::human_bytes(bytes)
                )
                .map_err(io)
            })
        }
        FamilyCommand::Create { name, .. } => db
            .create_family(name, base.clone())
            .map(|_| ())
            .map_err(|e| e.to_string()),
        FamilyCommand::Drop { name, .. } => db.drop_family(name).map_err(|e| e.to_string()),
    };
    close(db)?;
    result?;
    if let Some(done) = done {
        writeln!(out, "{done}").map_err(io)?;
    }
    Ok(())
}

fn backup(cmd: BackupCommand, base: &Options, out: &mut impl Write) -> Result<(), String> {
    let io = |e: std::io::Error| format!("writing output: {e}");
    // Only `create` makes a backup directory; the others must find one.
    let creating = matches!(cmd, BackupCommand::Create { .. });
    let engine = |dir: &std::path::Path| {
        if !creating && !dir.join("meta").is_dir() {
            return Err(format!("no backup directory at {}", dir.display()));
        }
        BackupEngine::open(dir).map_err(|e| e.to_string())
    };
    let newest = |e: &BackupEngine, id: Option<u64>| -> Result<u64, String> {
        match id {
            Some(id) => Ok(id),
            None => e
                .list()
                .map_err(|e| e.to_string())?
                .last()
                .map(|b| b.id)
                .ok_or_else(|| "no backups yet".to_string()),
        }
    };
    match cmd {
        BackupCommand::Create { dir, backups } => {
            let db = open_existing(&dir, base)?;
            let made = engine(&backups).and_then(|e| e.create(&db).map_err(|e| e.to_string()));
            close(db)?;
            let made = made?;
            writeln!(
                out,
                "backup {} of {}: {} files, {} bytes, {} of them new",
                made.info.id,
                dir.display(),
                made.info.files,
                made.info.bytes,
                made.added_bytes
            )
            .map_err(io)?;
        }
        BackupCommand::List { backups } => {
            let list = engine(&backups)?.list().map_err(|e| e.to_string())?;
            writeln!(
                out,
                "{:>4}  {:<20}  {:>6}  {:>12}",
                "id", "created (UTC)", "files", "bytes"
            )
            .map_err(io)?;
            for b in list {
                writeln!(
                    out,
                    "{:>4}  {:<20}  {:>6}  {:>12}",
                    b.id,
                    text::utc_time(b.created_unix_secs),
                    b.files,
                    b.bytes
                )
                .map_err(io)?;
            }
        }
        BackupCommand::Restore {
            backups,
            target,
            id,
        } => {
            let e = engine(&backups)?;
            let id = newest(&e, id)?;
            e.restore(id, &target).map_err(|e| e.to_string())?;
            writeln!(out, "backup {id} restored to {}", target.display()).map_err(io)?;
        }
        BackupCommand::Verify { backups, id } => {
            let e = engine(&backups)?;
            let id = newest(&e, id)?;
            e.verify(id).map_err(|e| e.to_string())?;
            writeln!(out, "backup {id}: every file matches its checksum").map_err(io)?;
        }
        BackupCommand::Purge { backups, keep } => {
            let gone = engine(&backups)?.purge(keep).map_err(|e| e.to_string())?;
            writeln!(out, "deleted {} backups {gone:?}", gone.len()).map_err(io)?;
        }
        BackupCommand::Delete { backups, id } => {
            engine(&backups)?.delete(id).map_err(|e| e.to_string())?;
            writeln!(out, "deleted backup {id}").map_err(io)?;
        }
    }
    Ok(())
}

/// The command line, with the flags of `strata serve`'s configuration file placed before
/// its own, and the file's other settings.
fn parse_cli() -> Result<(Cli, Vec<(String, String)>), String> {
    let cli = Cli::parse();
    let Command::Serve {
        config: Some(path), ..
    } = &cli.command
    else {
        return Ok((cli, Vec::new()));
    };
    let file = conf::read(path)?;
    let args = conf::with_flags(std::env::args().collect(), &file.flags);
    Ok((Cli::parse_from(args), file.settings))
}

fn run(cli: Cli, settings: Vec<(String, String)>) -> Result<ExitCode, String> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let io = |e: std::io::Error| format!("writing output: {e}");
    let base = &Options {
        filter_policy: cli.filter_policy,
        merge_policy: cli.merge_policy,
        size_ratio: cli.size_ratio,
        ..Options::default()
    };
    match cli.command {
        Command::Serve {
            config: config_file,
            dir,
            port,
            bind,
            sync,
            maxclients,
            max_request_bytes,
            timeout,
            cache_bytes,
            threads,
            write_buffer_size,
            block_cache_bytes,
            requirepass,
            aclfile,
            protected_mode,
            tls_port,
            tls_cert_file,
            tls_key_file,
            tls_ca_cert_file,
            tls_auth_clients,
            client_query_buffer_limit,
            client_output_buffer_limit,
            tcp_keepalive,
            notify_keyspace_events,
            replicaof,
            repl_wal_keep_bytes,
        } => {
            let replicaof = replicaof.map(|r| primary_address(&r)).transpose()?;
            let tls = match (tls_cert_file, tls_key_file) {
                (Some(cert), Some(key)) => Some(strata_server::TlsFiles {
                    cert,
                    key,
                    ca: tls_ca_cert_file,
                    auth: tls_auth_clients,
                }),
                (None, None) => None,
                _ => return Err("--tls-cert-file and --tls-key-file go together".into()),
            };
            let config = strata_server::Config {
                dir: dir.clone(),
                bind,
                port,
                sync,
                max_clients: maxclients,
                max_request_bytes,
                idle_timeout: (timeout > 0).then(|| std::time::Duration::from_secs(timeout)),
                cache_bytes,
                threads,
                engine: Options {
                    write_buffer_size,
                    block_cache_bytes,
                    ..base.clone()
                },
                requirepass,
                aclfile,
                protected_mode: protected_mode == "yes",
                // As Redis: with a TLS port, port 0 turns the plain one off.
                plain: !(port == 0 && tls_port.is_some()),
                tls_port,
                tls,
                query_buffer_limit: client_query_buffer_limit,
                output_buffer_limit: client_output_buffer_limit,
                tcp_keepalive,
                notify_keyspace_events,
                config_file,
                settings,
                replicaof,
                repl_wal_keep_bytes,
                ..strata_server::Config::default()
            };
            let server = strata_server::Server::start(config)?;
            eprintln!(
                "strata serving {} on {} (sync {sync:?}); stop with Ctrl-C or SIGTERM",
                dir.display(),
                server.local_addr()
            );
            server.wait_for_signal()?;
            eprintln!("strata: shut down cleanly");
        }
        Command::Shell { dir } => shell::run(dir, base)?,
        Command::Get {
            dir,
            key,
            family,
            format,
        } => {
            let db = open_existing(&dir, base)?;
            let cf = family.resolve(&db)?;
            let key = format.input(&key)?;
            let value = db.get_cf(&cf, &key).map_err(|e| e.to_string())?;
            close(db)?;
            match value {
                Some(v) if format.json => {
                    writeln!(
                        out,
                        "{}",
                        serde_json::json!({"key": format.output(&key), "value": format.output(&v)})
                    )
                    .map_err(io)?;
                }
                Some(v) => writeln!(out, "{}", format.output(&v)).map_err(io)?,
                None => {
                    if format.json {
                        writeln!(
                            out,
                            "{}",
                            serde_json::json!({"key": format.output(&key), "value": null})
                        )
                        .map_err(io)?;
                    }
                    eprintln!("not found: {}", format.output(&key));
                    return Ok(ExitCode::from(1));
                }
            }
        }
        Command::Put {
            dir,
            key,
            value,
            from_stdin,
            sync,
            family,
            format,
        } => {
            let db = open_or_create(&dir, base)?;
            let cf = family.resolve(&db)?;
            let opts = WriteOptions { sync };
            if from_stdin {
                if key.is_some() {
                    return Err("give either KEY VALUE or --from-stdin".into());
                }
                let mut batch = WriteBatch::new();
                let mut n = 0u64;
                for (i, line) in std::io::stdin().lock().lines().enumerate() {
                    let line = line.map_err(|e| format!("reading stdin: {e}"))?;
                    if line.is_empty() {
                        continue;
                    }
                    let (k, v) = line
                        .split_once('\t')
                        .ok_or_else(|| format!("stdin line {}: expected key<TAB>value", i + 1))?;
                    let (k, v) = (
                        format
                            .input(k)
                            .map_err(|e| format!("stdin line {}: {e}", i + 1))?,
                        format
                            .input(v)
                            .map_err(|e| format!("stdin line {}: {e}", i + 1))?,
                    );
                    batch.put_cf(&cf, &k, &v);
                    n += 1;
                    if batch.len() >= 1000 {
                        db.write(std::mem::take(&mut batch), opts)
                            .map_err(|e| e.to_string())?;
                    }
                }
                db.write(batch, opts).map_err(|e| e.to_string())?;
                eprintln!("put {n} keys");
            } else {
                let (Some(k), Some(v)) = (key, value) else {
                    return Err("put needs KEY and VALUE (or --from-stdin)".into());
                };
                let mut batch = WriteBatch::new();
                batch.put_cf(&cf, &format.input(&k)?, &format.input(&v)?);
                db.write(batch, opts).map_err(|e| e.to_string())?;
            }
            close(db)?;
        }
        Command::Del {
            dir,
            keys,
            family,
            format,
        } => {
            let db = open_existing(&dir, base)?;
            let cf = family.resolve(&db)?;
            let mut batch = WriteBatch::new();
            for k in &keys {
                batch.delete_cf(&cf, &format.input(k)?);
            }
            db.write(batch, WriteOptions::default())
                .map_err(|e| e.to_string())?;
            close(db)?;
        }
        Command::DeleteRange {
            dir,
            start,
            end,
            family,
            format,
        } => {
            let db = open_existing(&dir, base)?;
            let cf = family.resolve(&db)?;
            let (start, end) = (format.input(&start)?, format.input(&end)?);
            let mut batch = WriteBatch::new();
            batch.delete_range_cf(&cf, &start, &end);
            let deleted = db
                .write(batch, WriteOptions::default())
                .map_err(|e| e.to_string());
            close(db)?;
            deleted?;
        }
        Command::Scan {
            dir,
            start,
            end,
            limit,
            reverse,
            family,
            format,
        } => {
            let db = open_existing(&dir, base)?;
            let cf = family.resolve(&db)?;
            let lo = start.map(|s| format.input(&s)).transpose()?;
            let hi = end.map(|s| format.input(&s)).transpose()?;
            let range = (
                lo.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Included),
                hi.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
            );
            let scan = db
                .scan_with(
                    range,
                    strata::ReadOptions {
                        skip_cache: true,
                        family: Some(cf),
                        ..Default::default()
                    },
                    reverse,
                )
                .map_err(|e| e.to_string())?;
            for entry in scan.take(limit.unwrap_or(usize::MAX)) {
                let (k, v) = entry.map_err(|e| e.to_string())?;
                if format.json {
                    writeln!(
                        out,
                        "{}",
                        serde_json::json!({
                            "key": json_str(format.output(&k)),
                            "value": json_str(format.output(&v))
                        })
                    )
                    .map_err(io)?;
                } else {
                    writeln!(out, "{}\t{}", format.output(&k), format.output(&v)).map_err(io)?;
                }
            }
            out.flush().map_err(io)?;
            close(db)?;
        }
        Command::Import {
            dir,
            file,
            key,
            value,
            separator,
            on_error,
            batch_rows,
        } => {
            let db = open_or_create(&dir, base)?;
            let args = import::ImportArgs {
                file: &file,
                key: &key,
                values: &value,
                separator: &separator,
                on_error,
                batch_rows: batch_rows.max(1),
            };
            let report = import::import(&db, &args);
            close(db)?;
            let report = report?;
            for (line, why) in &report.bad {
                eprintln!("bad row at line {line}: {why}");
            }
            writeln!(
                out,
                "imported {} of {} rows ({} duplicate keys, last row wins; {} bad) from {} \
                 in {:.1} s ({:.0} rows/s)",
                report.imported,
                report.rows,
                report.duplicates,
                report.bad.len(),
                report::human_bytes(report.bytes),
                report.seconds,
                report.rows as f64 / report.seconds.max(1e-9)
            )
            .map_err(io)?;
            if !report.bad.is_empty() && on_error == import::OnError::Abort {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Checkpoint { dir, target } => {
            let db = open_existing(&dir, base)?;
            let made = db.checkpoint(&target).map_err(|e| e.to_string());
            let closed = close(db);
            made?;
            closed?;
            writeln!(
                out,
                "checkpoint of {} written to {}",
                dir.display(),
                target.display()
            )
            .map_err(io)?;
        }
        Command::Backup(cmd) => backup(cmd, base, &mut out)?,
        Command::Family(cmd) => family_command(cmd, base, &mut out)?,
        Command::Inspect { dir, svg } => {
            let db = open_existing(&dir, base)?;
            let stats = db.stats();
            close(db)?;
            write!(out, "{}", report::inspect_text(&stats)).map_err(io)?;
            if let Some(path) = svg {
                let picture = report::svg(&stats, &format!("Strata: {}", dir.display()));
                std::fs::write(&path, picture).map_err(|e| format!("{}: {e}", path.display()))?;
                writeln!(out, "picture written to {}", path.display()).map_err(io)?;
            }
        }
        Command::InspectFile { file, entries } => {
            let dump = strata::inspect::dump_file(&file, entries).map_err(|e| e.to_string())?;
            writeln!(out, "{}: {:?}", file.display(), dump.kind).map_err(io)?;
            for (k, v) in &dump.summary {
                writeln!(out, "  {k}: {v}").map_err(io)?;
            }
            let what = if dump.kind == strata::inspect::FileKind::Sst {
                "data blocks"
            } else {
                "records"
            };
            writeln!(out, "  {what}: {}", dump.blocks.len()).map_err(io)?;
            for (offset, size) in &dump.blocks {
                writeln!(out, "    @{offset} {size} bytes").map_err(io)?;
            }
            for e in &dump.entries {
                let kind = match (e.deletion, e.merge, e.range_deletion) {
                    (true, _, _) => "DEL",
                    (_, true, _) => "MERGE",
                    (_, _, true) => "DELRANGE",
                    _ => "PUT",
                };
                let family = match e.family {
                    0 => String::new(),
                    f => format!(" family {f}"),
                };
                writeln!(
                    out,
                    "  {kind}{family} seq {} {}\t{}",
                    e.sequence,
                    show(&e.key),
                    show(&e.value)
                )
                .map_err(io)?;
            }
        }
        Command::Tune {
            workload,
            entries,
            memory,
            entry_size,
            buffer,
            block_size,
            long_scan,
            ratios,
            top,
        } => {
            let workload = strata::cost_model::Workload::parse(&workload)?;
            if ratios.iter().any(|&t| t < 2) {
                return Err("size ratios must be at least 2".into());
            }
            let shape = strata::cost_model::Shape {
                entries,
                entry_bytes: entry_size.max(1),
                buffer_bytes: buffer.max(1),
                filter_bytes: memory,
                block_bytes: block_size.max(1),
                long_scan_entries: long_scan,
            };
            write!(out, "{}", tune::report(&workload, &shape, &ratios, top)).map_err(io)?;
        }
        Command::Check { dir } => {
            if !dir.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
            let results = strata::inspect::check(&dir).map_err(|e| e.to_string())?;
            let damaged: Vec<_> = results.iter().filter(|r| r.error.is_some()).collect();
            if results.is_empty() {
                return Err(format!("{} holds no Strata files", dir.display()));
            }
            for r in &damaged {
                if let Some(e) = &r.error {
                    writeln!(out, "DAMAGED {}: {e}", r.path.display()).map_err(io)?;
                }
            }
            let items: u64 = results.iter().map(|r| r.items).sum();
            if damaged.is_empty() {
                writeln!(
                    out,
                    "ok: {} files verified, {items} entries and records, no damage",
                    results.len()
                )
                .map_err(io)?;
            } else {
                writeln!(out, "{} of {} files damaged", damaged.len(), results.len())
                    .map_err(io)?;
                out.flush().map_err(io)?;
                return Ok(ExitCode::from(1));
            }
        }
        Command::Repair { dir } => {
            if !dir.is_dir() {
                return Err(format!("{} is not a directory", dir.display()));
            }
            let report = strata::repair(&dir, base.clone()).map_err(|e| e.to_string())?;
            writeln!(out, "{report}").map_err(io)?;
        }
        Command::Stats { dir, properties } if !properties.is_empty() => {
            let db = open_existing(&dir, base)?;
            let values: Vec<Option<String>> = properties.iter().map(|p| db.property(p)).collect();
            close(db)?;
            for (name, value) in properties.iter().zip(values) {
                let value = value.ok_or_else(|| format!("unknown property {name:?}"))?;
                match value.contains('\n') {
                    true => write!(out, "{name}:\n{value}").map_err(io)?,
                    false => writeln!(out, "{name}: {value}").map_err(io)?,
                }
            }
        }
        Command::Stats { dir, .. } => {
            let db = open_existing(&dir, base)?;
            let stats = db.stats();
            let live = db.live_data_bytes().map_err(|e| e.to_string())?;
            close(db)?;
            write!(out, "{}", report::stats_text(&stats)).map_err(io)?;
            let ratio = if live == 0 {
                0.0
            } else {
                stats.disk_bytes() as f64 / live as f64
            };
            writeln!(
                out,
                "live data         {} (space amplification {ratio:.2})",
                report::human_bytes(live)
            )
            .map_err(io)?;
        }
    }
    out.flush().map_err(io)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let ran = parse_cli().and_then(|(cli, settings)| run(cli, settings));
    match ran {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

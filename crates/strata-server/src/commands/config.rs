//! CONFIG GET, SET, RESETSTAT and REWRITE: the parameters Redis clients and tools ask for,
//! and those the server may change while it runs.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Ctx, Outcome, upper};
use crate::conffile::memory_size;
use crate::config::SyncMode;
use crate::shared::Shared;
use crate::store::DATABASES;

/// The parameters CONFIG GET reports, and whether CONFIG SET may change each.
fn notify_flags(shared: &Shared) -> String {
    crate::notify::format(shared.notify_flags.load(Ordering::Relaxed))
}

/// `client-output-buffer-limit`: the normal class's hard limit, and the pubsub class's.
fn output_limits(shared: &Shared) -> String {
    let [h, s, t] = &shared.pubsub_output_limit;
    format!(
        "normal {} 0 0 pubsub {} {} {}",
        shared.output_buffer_limit.load(Ordering::Relaxed),
        h.load(Ordering::Relaxed),
        s.load(Ordering::Relaxed),
        t.load(Ordering::Relaxed)
    )
}

fn config_values(shared: &Shared) -> Vec<(&'static str, String, bool)> {
    let c = &shared.config;
    let tls = shared.tls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let tls_file = |f: fn(&crate::TlsFiles) -> String| {
        tls.as_ref().map_or_else(String::new, |(files, _)| f(files))
    };
    let tls_port = shared
        .tls_port
        .map_or_else(|| "0".into(), |p| p.to_string());
    let appendfsync = match shared.sync_mode() {
        SyncMode::Always => "always",
        SyncMode::EverySec => "everysec",
        SyncMode::No => "no",
    };
    let busy_ms = shared
        .scripts
        .busy_threshold_ms
        .load(Ordering::Relaxed)
        .to_string();
    vec![
        ("appendonly", "yes".into(), false),
        ("daemonize", "no".into(), false),
        ("notify-keyspace-events", notify_flags(shared), true),
        ("appendfsync", appendfsync.into(), true),
        // No timed snapshots: every acknowledged write is in the log already. CONFIG SET
        // takes the empty value, which says so.
        ("save", String::new(), true),
        ("databases", DATABASES.to_string(), false),
        (
            "maxclients",
            shared.max_clients.load(Ordering::Relaxed).to_string(),
            true,
        ),
        (
            "proto-max-bulk-len",
            shared.max_bulk_bytes.load(Ordering::Relaxed).to_string(),
            true,
        ),
        (
            "timeout",
            (shared.idle_timeout_ms.load(Ordering::Relaxed) / 1000).to_string(),
            true,
        ),
        ("port", shared.port.to_string(), false),
        ("bind", c.bind.clone(), false),
        ("dir", c.dir.display().to_string(), false),
        ("tls-port", tls_port, false),
        (
            "tcp-keepalive",
            shared.tcp_keepalive.load(Ordering::Relaxed).to_string(),
            true,
        ),
        (
            "client-query-buffer-limit",
            shared
                .query_buffer_limit
                .load(Ordering::Relaxed)
                .to_string(),
            true,
        ),
        ("client-output-buffer-limit", output_limits(shared), true),
        ("busy-reply-threshold", busy_ms.clone(), true),
        ("lua-time-limit", busy_ms, true),
        (
            "tls-cert-file",
            tls_file(|f| f.cert.display().to_string()),
            true,
        ),
        (
            "tls-key-file",
            tls_file(|f| f.key.display().to_string()),
            true,
        ),
        (
            "tls-ca-cert-file",
            tls_file(|f| {
                f.ca.as_ref()
                    .map_or_else(String::new, |p| p.display().to_string())
            }),
            true,
        ),
        (
            "tls-auth-clients",
            tls_file(|f| {
                match f.auth {
                    crate::ClientAuth::Yes => "yes",
                    crate::ClientAuth::No => "no",
                    crate::ClientAuth::Optional => "optional",
                }
                .to_string()
            }),
            true,
        ),
        // Passwords are kept as digests only: the password itself cannot be shown.
        ("requirepass", String::new(), true),
        (
            "protected-mode",
            if shared.protected_mode.load(Ordering::Relaxed) {
                "yes"
            } else {
                "no"
            }
            .into(),
            true,
        ),
        (
            "aclfile",
            c.aclfile
                .as_ref()
                .map_or_else(String::new, |p| p.display().to_string()),
            false,
        ),
    ]
    .into_iter()
    .chain(crate::replication::settings::values(shared))
    .chain(measure_values(shared))
    .chain(engine_values(shared))
    .chain(shape_values(shared))
    .collect()
}

/// Strata's own settings, fixed while the server runs (the configuration file and the
/// flags of `strata serve` use the same names).
fn engine_values(shared: &Shared) -> Vec<(&'static str, String, bool)> {
    let c = &shared.config;
    vec![
        ("threads", c.threads.to_string(), false),
        ("cache-bytes", c.cache_bytes.to_string(), false),
        (
            "write-buffer-size",
            c.engine.write_buffer_size.to_string(),
            false,
        ),
        (
            "block-cache-bytes",
            c.engine.block_cache_bytes.to_string(),
            false,
        ),
        (
            "repl-wal-keep-bytes",
            c.repl_wal_keep_bytes.to_string(),
            false,
        ),
    ]
}

/// The slow log's and the latency monitor's settings.
fn measure_values(shared: &Shared) -> Vec<(&'static str, String, bool)> {
    let s = &shared.stats;
    vec![
        (
            "slowlog-log-slower-than",
            s.slowlog.threshold.load(Ordering::Relaxed).to_string(),
            true,
        ),
        (
            "slowlog-max-len",
            s.slowlog.max_len.load(Ordering::Relaxed).to_string(),
            true,
        ),
        (
            "latency-monitor-threshold",
            s.latency.threshold.load(Ordering::Relaxed).to_string(),
            true,
        ),
    ]
}

/// Redis's thresholds between the compact and the general shape of each kind, with their
/// defaults (the `ziplist` names are the older spellings of the `listpack` ones). Strata
/// keeps one shape per kind, an engine entry per element, so they change nothing it
/// stores; they are kept and reported for clients and tools that set them.
pub(crate) const SHAPES: &[(&str, i64)] = &[
    ("hash-max-listpack-entries", 128),
    ("hash-max-listpack-value", 64),
    ("set-max-intset-entries", 512),
    ("zset-max-listpack-entries", 128),
    ("zset-max-listpack-value", 64),
    ("list-max-listpack-size", -2),
    ("list-compress-depth", 0),
    ("stream-node-max-bytes", 4096),
    ("stream-node-max-entries", 100),
];

/// The value of shape parameter `name` (one of [`SHAPES`]) as CONFIG SET left it.
pub(crate) fn shape(shared: &Shared, name: &str) -> i64 {
    let shapes = shared.shapes.lock().unwrap_or_else(|e| e.into_inner());
    let default = SHAPES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, d)| *d);
    shapes.get(name).copied().unwrap_or(default)
}

/// The name a shape parameter is kept under: its `listpack` spelling.
fn shape_name(name: &str) -> Option<&'static str> {
    let name = name.replace("ziplist", "listpack");
    SHAPES.iter().map(|(n, _)| *n).find(|n| *n == name)
}

fn shape_values(shared: &Shared) -> Vec<(&'static str, String, bool)> {
    let shapes = shared.shapes.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::new();
    for (name, default) in SHAPES {
        let v = shapes.get(name).copied().unwrap_or(*default).to_string();
        out.push((*name, v.clone(), true));
        let older = name.replace("listpack", "ziplist");
        if let Some(older) = ZIPLIST_NAMES.iter().find(|n| **n == older) {
            out.push((*older, v, true));
        }
    }
    out
}

/// The older spellings CONFIG answers beside the newer.
const ZIPLIST_NAMES: &[&str] = &[
    "hash-max-ziplist-entries",
    "hash-max-ziplist-value",
    "zset-max-ziplist-entries",
    "zset-max-ziplist-value",
    "list-max-ziplist-size",
];

/// The highest `proto-max-bulk-len`: the default, Redis's. (A value over the engine's
/// `MAX_VALUE_BYTES` is refused when written, whatever the request limit.)
const MAX_BULK_LIMIT: usize = 512 * 1024 * 1024;

/// Parameters Redis itself never changes while it runs: CONFIG SET refuses them even at the
/// value they have. The server's other fixed parameters (its port, address, directory,
/// appendonly) take a CONFIG SET of the value they have, which changes nothing, as Redis's
/// do, and refuse any other.
const IMMUTABLE: &[&str] = &["databases", "aclfile", "daemonize"];

/// A setting CONFIG SET changes, parsed and checked.
enum Setting {
    Sync(SyncMode),
    MaxClients(usize),
    MaxBulk(usize),
    TimeoutSecs(u64),
    RequirePass(Vec<u8>),
    ProtectedMode(bool),
    QueryBufferLimit(usize),
    TcpKeepalive(u64),
    BusyReplyThreshold(u64),
    Notify(u32),
    /// The normal class's hard limit and the pubsub class's three figures, each if given.
    OutputBufferLimit(Option<usize>, Option<[usize; 3]>),
    /// `tls-cert-file`, `tls-key-file`, `tls-ca-cert-file` or `tls-auth-clients`.
    Tls(&'static str, String),
    /// One of [`SHAPES`].
    Shape(&'static str, i64),
    /// `save ""`: what the server does already.
    NoSnapshots,
    SlowlogThreshold(i64),
    SlowlogMaxLen(usize),
    LatencyThreshold(u64),
    /// One of `replication::settings::NAMES`, checked.
    Replication(&'static str, String),
}

/// The TLS configuration that `changes` make, read from the files now; `None` when they
/// change no TLS setting.
fn tls_changes(
    shared: &Shared,
    changes: &[Setting],
) -> Result<Option<(crate::TlsFiles, Arc<rustls::ServerConfig>)>, String> {
    let tls: Vec<(&str, &String)> = changes
        .iter()
        .filter_map(|c| match c {
            Setting::Tls(name, value) => Some((*name, value)),
            _ => None,
        })
        .collect();
    if tls.is_empty() {
        return Ok(None);
    }
    let failed = |name: &str, why: String| {
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
    };
    let current = shared.tls.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let Some((mut files, _)) = current else {
        return Err(failed(tls[0].0, "TLS is not served (no --tls-port)".into()));
    };
    for (name, value) in &tls {
        match *name {
            "tls-cert-file" => files.cert = value.into(),
            "tls-key-file" => files.key = value.into(),
            "tls-ca-cert-file" => files.ca = Some(value.into()),
            _ => files.auth = value.parse().map_err(|e| failed(name, e))?,
        }
    }
    let config = crate::tls::server_config(&files).map_err(|e| failed(tls[0].0, e))?;
    Ok(Some((files, config)))
}

/// Parses `value` for the parameter `name`, as Redis checks it, without changing anything.
fn parse_setting(name: &str, value: &[u8]) -> Result<Setting, String> {
    let text = String::from_utf8_lossy(value);
    let invalid = |why: &str| {
        format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
    };
    let number = || text.parse::<u64>().ok();
    match name {
        "appendfsync" => text
            .parse::<SyncMode>()
            .map(Setting::Sync)
            .map_err(|_| invalid("argument(s) must be one of the following: always, everysec, no")),
        "maxclients" => number()
            .filter(|&n| n > 0)
            .map(|n| Setting::MaxClients(n as usize))
            .ok_or_else(|| invalid("argument must be a positive number")),
        "proto-max-bulk-len" => number()
            .filter(|&n| n >= 1024 * 1024 && n <= MAX_BULK_LIMIT as u64)
            .map(|n| Setting::MaxBulk(n as usize))
            .ok_or_else(|| invalid("argument must be a number of bytes from 1048576 to 536870912")),
        "timeout" => number()
            .map(Setting::TimeoutSecs)
            .ok_or_else(|| invalid("argument couldn't be parsed into an integer")),
        "requirepass" => Ok(Setting::RequirePass(value.to_vec())),
        "save" if text.trim().is_empty() => Ok(Setting::NoSnapshots),
        "save" => Err(invalid(
            "timed snapshots are not supported: every write is logged; use BGSAVE",
        )),
        "notify-keyspace-events" => crate::notify::parse(value)
            .map(Setting::Notify)
            .ok_or_else(|| invalid("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")),
        "busy-reply-threshold" | "lua-time-limit" => number()
            .map(Setting::BusyReplyThreshold)
            .ok_or_else(|| invalid("argument couldn't be parsed into an integer")),
        "slowlog-log-slower-than" => text
            .parse::<i64>()
            .map(Setting::SlowlogThreshold)
            .map_err(|_| invalid("argument couldn't be parsed into an integer")),
        "slowlog-max-len" => number()
            .filter(|&n| n <= i64::MAX as u64)
            .map(|n| Setting::SlowlogMaxLen(n as usize))
            .ok_or_else(|| invalid("argument must be a positive number")),
        "latency-monitor-threshold" => number()
            .map(Setting::LatencyThreshold)
            .ok_or_else(|| invalid("argument couldn't be parsed into an integer")),
        "tcp-keepalive" => number()
            .filter(|&n| n <= crate::config::MAX_KEEPALIVE_SECS)
            .map(Setting::TcpKeepalive)
            .ok_or_else(|| invalid("argument must be a number of seconds from 0 to 32767")),
        "client-query-buffer-limit" => memory_size(&text)
            .filter(|&n| n >= 1024 * 1024)
            .map(Setting::QueryBufferLimit)
            .ok_or_else(|| invalid("argument must be a memory value of at least 1mb")),
        "client-output-buffer-limit" => {
            let words: Vec<&str> = text.split_ascii_whitespace().collect();
            if words.is_empty() || !words.len().is_multiple_of(4) {
                return Err(invalid(
                    "Wrong number of arguments in buffer limit configuration.",
                ));
            }
            let (mut normal, mut pubsub) = (None, None);
            for class in words.chunks(4) {
                let [name, hard, soft, secs] = class else {
                    continue;
                };
                let figures = [memory_size(hard), memory_size(soft), secs.parse().ok()];
                let [Some(hard), Some(soft), Some(secs)] = figures else {
                    return Err(invalid(concat!(
                        "Error in hard, soft or soft_seconds setting in buffer limit ",
                        "configuration."
                    )));
                };
                match name.to_ascii_lowercase().as_str() {
                    "normal" if soft == 0 && secs == 0 => normal = Some(hard),
                    "normal" => {
                        return Err(invalid("soft limits of the normal class are not supported"));
                    }
                    "pubsub" => pubsub = Some([hard, soft, secs]),
                    _ => {
                        return Err(invalid("only the normal and pubsub classes are supported"));
                    }
                }
            }
            Ok(Setting::OutputBufferLimit(normal, pubsub))
        }
        "tls-cert-file" => Ok(Setting::Tls("tls-cert-file", text.into_owned())),
        "tls-key-file" => Ok(Setting::Tls("tls-key-file", text.into_owned())),
        "tls-ca-cert-file" => Ok(Setting::Tls("tls-ca-cert-file", text.into_owned())),
        "tls-auth-clients" => Ok(Setting::Tls("tls-auth-clients", text.into_owned())),
        "protected-mode" => match text.to_ascii_lowercase().as_str() {
            "yes" => Ok(Setting::ProtectedMode(true)),
            "no" => Ok(Setting::ProtectedMode(false)),
            _ => Err(invalid("argument must be 'yes' or 'no'")),
        },
        _ if let Some(&n) = crate::replication::settings::NAMES
            .iter()
            .find(|&&n| n == name) =>
        {
            crate::replication::settings::check(n, &text).map_err(|e| invalid(&e))?;
            Ok(Setting::Replication(n, text.into_owned()))
        }
        _ => match shape_name(name) {
            Some(shape) => text
                .parse::<i64>()
                .map(|n| Setting::Shape(shape, n))
                .map_err(|_| invalid("argument couldn't be parsed into an integer")),
            None => Err(invalid("unsupported parameter")),
        },
    }
}

fn apply_setting(shared: &Shared, setting: Setting) {
    // Relaxed: settings, each read on its own.
    match setting {
        Setting::Sync(m) => shared.set_sync_mode(m),
        Setting::MaxClients(n) => shared.max_clients.store(n, Ordering::Relaxed),
        Setting::MaxBulk(n) => shared.max_bulk_bytes.store(n, Ordering::Relaxed),
        Setting::TimeoutSecs(n) => shared
            .idle_timeout_ms
            .store(n.saturating_mul(1000), Ordering::Relaxed),
        Setting::RequirePass(p) => super::auth::set_requirepass(shared, &p),
        Setting::ProtectedMode(on) => shared.protected_mode.store(on, Ordering::Relaxed),
        Setting::QueryBufferLimit(n) => shared.query_buffer_limit.store(n, Ordering::Relaxed),
        Setting::TcpKeepalive(n) => shared.tcp_keepalive.store(n, Ordering::Relaxed),
        Setting::BusyReplyThreshold(ms) => shared
            .scripts
            .busy_threshold_ms
            .store(ms, Ordering::Relaxed),
        Setting::Notify(f) => shared.notify_flags.store(f, Ordering::Relaxed),
        Setting::SlowlogThreshold(n) => shared.stats.slowlog.threshold.store(n, Ordering::Relaxed),
        Setting::SlowlogMaxLen(n) => shared.stats.slowlog.max_len.store(n, Ordering::Relaxed),
        Setting::LatencyThreshold(n) => shared.stats.latency.threshold.store(n, Ordering::Relaxed),
        Setting::OutputBufferLimit(normal, pubsub) => {
            if let Some(n) = normal {
                shared.output_buffer_limit.store(n, Ordering::Relaxed);
            }
            for (to, n) in shared
                .pubsub_output_limit
                .iter()
                .zip(pubsub.into_iter().flatten())
            {
                to.store(n, Ordering::Relaxed);
            }
        }
        // Applied whole by the caller, from `tls_changes`.
        Setting::Tls(..) | Setting::NoSnapshots => {}
        Setting::Replication(name, v) => crate::replication::settings::set(shared, name, &v),
        Setting::Shape(name, n) => {
            let mut shapes = shared.shapes.lock().unwrap_or_else(|e| e.into_inner());
            shapes.insert(name, n);
        }
    }
}

/// Sets parameters as CONFIG SET sets them: every one is checked before any changes.
/// `from_file`: read from the configuration file at start, where every fixed parameter,
/// the three immutable ones too, may be given the value it has.
pub(crate) fn set_many(shared: &Shared, pairs: &[(&[u8], &[u8])], from_file: bool) -> Outcome {
    let values = config_values(shared);
    let mut changes = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let no_tls = shared.tls_port.is_none();
    for (name, value) in pairs {
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let found = values.iter().find(|(k, _, _)| *k == name);
        if found.is_some() && seen.contains(&name) {
            return Err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - \
                 duplicate parameter"
            ));
        }
        seen.push(name.clone());
        let same = found.is_some_and(|(_, v, _)| v.as_bytes() == *value);
        let fixed_ok = from_file || !IMMUTABLE.contains(&name.as_str());
        match found {
            // Unchanged: a fixed parameter, or a TLS file on a server without TLS.
            Some((_, _, false)) if same && fixed_ok => {}
            Some((_, _, true)) if same && no_tls && name.starts_with("tls-") => {}
            Some((_, _, true)) => changes.push(parse_setting(&name, value)?),
            Some((_, _, false)) => {
                return Err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - \
                     can't set immutable config"
                ));
            }
            None => {
                return Err(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                ));
            }
        }
    }
    // TLS files are read (and checked to go together) before anything changes.
    let tls = tls_changes(shared, &changes)?;
    for setting in changes {
        apply_setting(shared, setting);
    }
    if let Some(tls) = tls {
        *shared.tls.lock().unwrap_or_else(|e| e.into_inner()) = Some(tls);
    }
    Ok(())
}

/// Sets the parameters the configuration file gave, as CONFIG SET sets them.
pub(crate) fn apply_settings(shared: &Shared, settings: &[(String, String)]) -> Result<(), String> {
    let pairs: Vec<(&[u8], &[u8])> = settings
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect();
    set_many(shared, &pairs, true).map_err(|e| format!("the configuration file: {e}"))
}

/// Parameters CONFIG REWRITE leaves out: the older spellings of others.
const NOT_REWRITTEN: &[&str] = &["lua-time-limit"];

/// `CONFIG REWRITE`: writes what the server runs with into its configuration file,
/// keeping the file's comments and order. A password is kept only as its digest, so a
/// `requirepass` line stays as written (ACL files keep passwords across restarts).
fn rewrite(shared: &Shared) -> Outcome {
    let Some(path) = &shared.config.config_file else {
        return Err("ERR The server is running without a config file".into());
    };
    let failed = |e: String| format!("ERR Rewriting config file: {e}");
    // One rewrite at a time: they share the file written beside the configuration.
    static REWRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = REWRITING.lock().unwrap_or_else(|e| e.into_inner());
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(failed(e.to_string())),
    };
    let current: Vec<(&str, String)> = config_values(shared)
        .into_iter()
        .filter(|(n, _, _)| !NOT_REWRITTEN.contains(n) && !ZIPLIST_NAMES.contains(n))
        .map(|(n, v, _)| (n, v))
        .collect();
    let out = crate::conffile::rewrite(&text, &current, &["requirepass"]).map_err(failed)?;
    crate::conffile::write_atomically(path, &out).map_err(|e| failed(e.to_string()))
}

pub(super) fn config(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a[1]);
    match sub.as_str() {
        "GET" if a.len() >= 3 => {
            let values = config_values(cx.shared);
            let hits: Vec<&(&str, String, bool)> = values
                .iter()
                .filter(|(k, _, _)| {
                    a[2..]
                        .iter()
                        .any(|p| crate::glob::matches(&p.to_ascii_lowercase(), k.as_bytes()))
                })
                .collect();
            cx.out.map(hits.len());
            for (k, v, _) in hits {
                cx.out.bulk(k.as_bytes());
                cx.out.bulk(v.as_bytes());
            }
        }
        "SET" if a.len() >= 4 && a.len().is_multiple_of(2) => {
            let pairs: Vec<(&[u8], &[u8])> = a[2..].chunks(2).map(|p| (p[0], p[1])).collect();
            set_many(cx.shared, &pairs, false)?;
            cx.out.ok();
        }
        "REWRITE" if a.len() == 2 => {
            rewrite(cx.shared)?;
            cx.out.ok();
        }
        "RESETSTAT" if a.len() == 2 => {
            cx.shared.reset_stats();
            cx.out.ok();
        }
        "GET" | "SET" | "RESETSTAT" | "REWRITE" => {
            return Err(super::wrong_args(&format!("config|{}", sub.to_lowercase())));
        }
        _ => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                String::from_utf8_lossy(a[1])
            ));
        }
    }
    Ok(())
}

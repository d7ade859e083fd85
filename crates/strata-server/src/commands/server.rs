//! The connection and the server: PING, HELLO, SELECT, CLIENT, COMMAND, CONFIG, INFO, TIME.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::spec::{SPECS, Spec, lookup};
use super::{Ctx, Outcome, int_arg, upper};
use crate::config::SyncMode;
use crate::shared::{After, Shared};
use crate::store::DATABASES;

pub(super) fn ping(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    match a.len() {
        1 => cx.out.simple("PONG"),
        2 => cx.out.bulk(a[1]),
        _ => return Err(super::wrong_args("ping")),
    }
    Ok(())
}

pub(super) fn echo(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    cx.out.bulk(a[1]);
    Ok(())
}

pub(super) fn quit(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    cx.out.ok();
    cx.after = After::Close;
    Ok(())
}

pub(super) fn select(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let n = int_arg(a[1])?;
    cx.conn.db = u8::try_from(n)
        .ok()
        .filter(|&n| n < DATABASES)
        .ok_or("ERR DB index is out of range")?;
    cx.out.ok();
    Ok(())
}

pub(super) fn reset(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    cx.conn.multi = None;
    cx.conn.multi_failed = false;
    cx.conn.watched.clear();
    cx.conn.db = 0;
    cx.conn.protocol = 2;
    cx.conn.name = None;
    // Back to `default`: authenticated only if it needs no password.
    let default = super::auth::user(cx.shared, "default")
        .unwrap_or_else(|| std::sync::Arc::new(crate::acl::User::default_user()));
    cx.conn.log_in(default, false);
    cx.out.protocol(2);
    cx.out.simple("RESET");
    Ok(())
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`: switches the
/// connection's protocol and answers with a map of facts about the server.
pub(super) fn hello(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let mut protocol = cx.conn.protocol;
    if let Some(v) = a.get(1) {
        protocol = match super::parse_i64(v) {
            Some(p @ 2..=3) => p as u8,
            Some(_) => return Err("NOPROTO unsupported protocol version".into()),
            None => {
                return Err("ERR Protocol version is not an integer or out of range".into());
            }
        };
    }
    let mut name = None;
    let mut auth = None;
    let mut i = 2;
    while i < a.len() {
        match upper(a[i]).as_str() {
            "SETNAME" if i + 1 < a.len() => {
                name = Some(a[i + 1].to_vec());
                i += 2;
            }
            "AUTH" if i + 2 < a.len() => {
                auth = Some((a[i + 1], a[i + 2]));
                i += 3;
            }
            _ => {
                return Err(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(a[i])
                ));
            }
        }
    }
    if let Some((user, password)) = auth {
        super::auth::log_in(cx, user, password)?;
    } else if !cx.conn.authenticated {
        return Err(concat!(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the ",
            "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and ",
            "select the RESP protocol version at the same time"
        )
        .into());
    }
    if let Some(n) = name {
        client_name_ok(&n)?;
        cx.conn.name = Some(n);
    }
    cx.conn.protocol = protocol;
    cx.out.protocol(protocol);
    cx.out.map(7);
    for (k, v) in [("server", "redis"), ("version", REDIS_VERSION)] {
        cx.out.bulk(k.as_bytes());
        cx.out.bulk(v.as_bytes());
    }
    cx.out.bulk(b"proto");
    cx.out.int(i64::from(protocol));
    cx.out.bulk(b"id");
    cx.out.int(cx.conn.id as i64);
    for (k, v) in [("mode", "standalone"), ("role", "master")] {
        cx.out.bulk(k.as_bytes());
        cx.out.bulk(v.as_bytes());
    }
    cx.out.bulk(b"modules");
    cx.out.array(0);
    Ok(())
}

/// The Redis version whose commands and replies the server follows.
const REDIS_VERSION: &str = "7.0.15";

fn client_name_ok(name: &[u8]) -> Outcome {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(
            "ERR Client names cannot contain spaces, newlines or special characters.".into(),
        );
    }
    Ok(())
}

pub(super) fn client(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a[1]);
    match (sub.as_str(), a.len()) {
        ("SETNAME", 3) => {
            client_name_ok(a[2])?;
            cx.conn.name = (!a[2].is_empty()).then(|| a[2].to_vec());
            cx.out.ok();
        }
        ("GETNAME", 2) => match &cx.conn.name {
            Some(n) => cx.out.bulk(n),
            None => cx.out.null(),
        },
        ("ID", 2) => cx.out.int(cx.conn.id as i64),
        ("SETINFO", 4) => cx.out.ok(),
        ("INFO", 2) => {
            let line = format!(
                "id={} name={} db={} resp={}\n",
                cx.conn.id,
                String::from_utf8_lossy(cx.conn.name.as_deref().unwrap_or_default()),
                cx.conn.db,
                cx.conn.protocol
            );
            cx.out.verbatim(&line);
        }
        ("SETNAME" | "GETNAME" | "ID" | "SETINFO" | "INFO", _) => {
            return Err(super::wrong_args(&format!("client|{}", sub.to_lowercase())));
        }
        _ => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                String::from_utf8_lossy(a[1])
            ));
        }
    }
    Ok(())
}

fn command_info(cx: &mut Ctx<'_, '_>, c: &Spec) {
    cx.out.array(10);
    cx.out.bulk(c.name.as_bytes());
    cx.out.int(i64::from(c.arity));
    cx.out.set(c.flags.len());
    for f in c.flags {
        cx.out.simple(f);
    }
    cx.out.int(i64::from(c.keys.0));
    cx.out.int(i64::from(c.keys.1));
    cx.out.int(i64::from(c.keys.2));
    cx.out.set(c.categories.len());
    for cat in c.categories {
        cx.out.simple(&format!("@{cat}"));
    }
    // Tips, key specifications and subcommands: none described.
    cx.out.set(0);
    cx.out.array(0);
    cx.out.array(0);
}

pub(super) fn command(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    match a.get(1).map(|s| upper(s)).as_deref() {
        None => {
            cx.out.array(SPECS.len());
            for c in SPECS {
                command_info(cx, c);
            }
        }
        Some("COUNT") => cx.out.int(SPECS.len() as i64),
        Some("LIST") => {
            cx.out.array(SPECS.len());
            for c in SPECS {
                cx.out.bulk(c.name.as_bytes());
            }
        }
        Some("INFO") => {
            cx.out.array(a.len() - 2);
            for name in &a[2..] {
                match lookup(name) {
                    Some((_, c)) => command_info(cx, c),
                    None => cx.out.null_array(),
                }
            }
        }
        Some("DOCS") => {
            // Summaries are not kept: an empty map, which clients read as "no docs".
            cx.out.map(0);
        }
        Some(_) => {
            return Err(format!(
                "ERR unknown subcommand '{}'. Try COMMAND HELP.",
                String::from_utf8_lossy(a[1])
            ));
        }
    }
    Ok(())
}

/// The parameters CONFIG GET reports, and whether CONFIG SET may change each.
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
    vec![
        ("appendonly", "yes".into(), false),
        ("appendfsync", appendfsync.into(), true),
        ("save", String::new(), false),
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
        (
            "client-output-buffer-limit",
            format!(
                "normal {} 0 0",
                shared.output_buffer_limit.load(Ordering::Relaxed)
            ),
            true,
        ),
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
}

/// A memory size as Redis writes them: bytes, or with k, kb, m, mb, g or gb (1000s for the
/// bare letters, 1024s with b).
fn bytes(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: usize = match &lower[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

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
    OutputBufferLimit(usize),
    /// `tls-cert-file`, `tls-key-file`, `tls-ca-cert-file` or `tls-auth-clients`.
    Tls(&'static str, String),
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
            .filter(|&n| n >= 1024 * 1024 && n <= strata::MAX_VALUE_BYTES as u64)
            .map(|n| Setting::MaxBulk(n as usize))
            .ok_or_else(|| invalid("argument must be a number of bytes from 1048576 to 67108864")),
        "timeout" => number()
            .map(Setting::TimeoutSecs)
            .ok_or_else(|| invalid("argument couldn't be parsed into an integer")),
        "requirepass" => Ok(Setting::RequirePass(value.to_vec())),
        "tcp-keepalive" => number()
            .filter(|&n| n <= crate::config::MAX_KEEPALIVE_SECS)
            .map(Setting::TcpKeepalive)
            .ok_or_else(|| invalid("argument must be a number of seconds from 0 to 32767")),
        "client-query-buffer-limit" => bytes(&text)
            .filter(|&n| n >= 1024 * 1024)
            .map(Setting::QueryBufferLimit)
            .ok_or_else(|| invalid("argument must be a memory value of at least 1mb")),
        "client-output-buffer-limit" => {
            let words: Vec<&str> = text.split_ascii_whitespace().collect();
            match words.as_slice() {
                ["normal", hard, soft, secs] => {
                    let hard = bytes(hard).ok_or_else(|| invalid("Invalid argument"))?;
                    if bytes(soft) != Some(0) || *secs != "0" {
                        return Err(invalid("soft limits are not supported, only hard ones"));
                    }
                    Ok(Setting::OutputBufferLimit(hard))
                }
                _ => Err(invalid(
                    "only the normal class is supported: normal <hard> 0 0",
                )),
            }
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
        _ => Err(invalid("unsupported parameter")),
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
        Setting::OutputBufferLimit(n) => shared.output_buffer_limit.store(n, Ordering::Relaxed),
        // Applied whole by the caller, from `tls_changes`.
        Setting::Tls(..) => {}
    }
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
            let values = config_values(cx.shared);
            // Every parameter is checked before any is changed, as Redis does.
            let mut changes = Vec::new();
            for pair in a[2..].chunks(2) {
                let name = String::from_utf8_lossy(pair[0]).to_ascii_lowercase();
                match values.iter().find(|(k, _, _)| *k == name) {
                    Some((_, _, true)) => changes.push(parse_setting(&name, pair[1])?),
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
            let tls = tls_changes(cx.shared, &changes)?;
            for setting in changes {
                apply_setting(cx.shared, setting);
            }
            if let Some(tls) = tls {
                *cx.shared.tls.lock().unwrap_or_else(|e| e.into_inner()) = Some(tls);
            }
            cx.out.ok();
        }
        "RESETSTAT" if a.len() == 2 => {
            cx.shared.reset_stats();
            cx.out.ok();
        }
        "GET" | "SET" | "RESETSTAT" => {
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

pub(super) fn time(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    cx.out.array(2);
    cx.out.bulk(now.as_secs().to_string().as_bytes());
    cx.out.bulk(now.subsec_micros().to_string().as_bytes());
    Ok(())
}

/// `COMPACT`: flushes the memtable and merges the whole tree into its deepest level, which
/// drops overwritten, deleted and expired entries from disk (Kvrocks's command of that name).
pub(super) fn compact(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if a.len() > 1 {
        return Err(super::syntax());
    }
    cx.shared
        .db
        .compact_range(None, None)
        .map_err(super::engine)?;
    cx.out.ok();
    Ok(())
}

/// `LASTSAVE`: when the last SAVE or BGSAVE succeeded (the server's start before any).
pub(super) fn lastsave(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    cx.out.int(cx.shared.saves.last_save_unix() as i64);
    Ok(())
}

/// `SAVE`: a checkpoint of the database in `DIR/checkpoint`, written before the reply.
/// Other clients go on meanwhile (the checkpoint is made while writes continue).
pub(super) fn save(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    cx.shared.saves.save(&cx.shared.db, &cx.shared.config.dir)?;
    cx.out.ok();
    Ok(())
}

/// `BGSAVE [SCHEDULE]`: the same checkpoint, written by the saver thread.
pub(super) fn bgsave(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let schedule = match a {
        [_] => false,
        [_, opt] if opt.eq_ignore_ascii_case(b"schedule") => true,
        _ => return Err(super::syntax()),
    };
    match cx.shared.saves.background(schedule) {
        crate::save::Background::Started => cx.out.simple("Background saving started"),
        crate::save::Background::Scheduled => cx.out.simple("Background saving scheduled"),
        crate::save::Background::AlreadyRunning => {
            return Err("ERR Background save already in progress".into());
        }
    }
    Ok(())
}

/// INFO's sections, in order; `true` for those in the default set.
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("commandstats", false),
    ("errorstats", false),
    ("keyspace", true),
    ("lsm", true),
];

pub(super) fn info(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let asked: Vec<String> = a[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let want = |section: &str, default: bool| {
        asked.is_empty() && default
            || asked.iter().any(|x| {
                x == section
                    || x == "all" && section != "modules"
                    || x == "everything"
                    || x == "default" && default
            })
    };
    let mut o = String::new();
    for &(section, default) in SECTIONS {
        if want(section, default) {
            if !o.is_empty() {
                o.push_str("\r\n");
            }
            info_section(cx, section, &mut o)?;
        }
    }
    cx.out.verbatim(&o);
    Ok(())
}

/// Seconds of CPU time this process spent in user and system mode, from `/proc/self/stat`.
fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name, in ticks
    // of 1/100 s on Linux.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) / 100.0, ticks(12) / 100.0)
}

/// The process's resident memory in bytes, from `/proc/self/statm`.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn info_section(cx: &Ctx<'_, '_>, section: &str, o: &mut String) -> Outcome {
    let shared = cx.shared;
    let c = &shared.counters;
    let s = shared.db.stats();
    match section {
        "server" => {
            let _ = write!(
                o,
                "# Server\r\n\
                 redis_version:{REDIS_VERSION}\r\n\
                 strata_version:{}\r\n\
                 redis_mode:standalone\r\n\
                 os:{}\r\n\
                 arch_bits:64\r\n\
                 process_id:{}\r\n\
                 run_id:{:040x}\r\n\
                 tcp_port:{}\r\n\
                 uptime_in_seconds:{}\r\n\
                 uptime_in_days:{}\r\n\
                 executable:strata\r\n",
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::process::id(),
                shared.run_id,
                shared.port,
                shared.started.elapsed().as_secs(),
                shared.started.elapsed().as_secs() / 86_400,
            );
        }
        "clients" => {
            let _ = write!(
                o,
                "# Clients\r\n\
                 connected_clients:{}\r\n\
                 maxclients:{}\r\n\
                 blocked_clients:0\r\n\
                 rejected_connections:{}\r\n\
                 client_query_buffer_limit_disconnections:{}\r\n\
                 client_output_buffer_limit_disconnections:{}\r\n",
                c.connected.load(Ordering::Relaxed),
                shared.max_clients.load(Ordering::Relaxed),
                c.rejected.load(Ordering::Relaxed),
                c.query_buffer_closed.load(Ordering::Relaxed),
                c.output_buffer_closed.load(Ordering::Relaxed)
            );
        }
        "memory" => {
            // What the server holds on purpose: memtables, the engine's block cache and pinned
            // tables, and the hot-key cache; the resident set besides.
            let used = s.memtable_bytes
                + s.block_cache_bytes
                + s.table_pinned_bytes
                + shared.cache.bytes() as u64;
            let _ = write!(
                o,
                "# Memory\r\n\
                 used_memory:{used}\r\n\
                 used_memory_rss:{}\r\n\
                 maxmemory:0\r\n\
                 maxmemory_policy:noeviction\r\n\
                 hot_cache_bytes:{}\r\n",
                resident_bytes(),
                shared.cache.bytes(),
            );
        }
        "persistence" => {
            let (saving, bgsave_ok, saved_seq) = shared.saves.info();
            let _ = write!(
                o,
                "# Persistence\r\n\
                 loading:0\r\n\
                 aof_enabled:1\r\n\
                 appendfsync:{}\r\n\
                 rdb_changes_since_last_save:{}\r\n\
                 rdb_bgsave_in_progress:{}\r\n\
                 rdb_last_save_time:{}\r\n\
                 rdb_last_bgsave_status:{}\r\n",
                match shared.sync_mode() {
                    SyncMode::Always => "always",
                    SyncMode::EverySec => "everysec",
                    SyncMode::No => "no",
                },
                shared.db.snapshot().sequence().saturating_sub(saved_seq),
                u8::from(saving),
                shared.saves.last_save_unix(),
                if bgsave_ok { "ok" } else { "err" },
            );
        }
        "stats" => {
            let hits = shared.cache.hits();
            let misses = shared.cache.misses();
            let rate = if hits + misses == 0 {
                0.0
            } else {
                hits as f64 / (hits + misses) as f64
            };
            let _ = write!(
                o,
                "# Stats\r\n\
                 total_connections_received:{}\r\n\
                 total_commands_processed:{}\r\n\
                 expired_keys:{}\r\n\
                 keyspace_hits:{}\r\n\
                 keyspace_misses:{}\r\n\
                 total_error_replies:{}\r\n\
                 protocol_errors:{}\r\n\
                 hot_cache_hits:{hits}\r\n\
                 hot_cache_misses:{misses}\r\n\
                 hot_cache_hit_rate:{rate:.4}\r\n\
                 hot_cache_bypassed:{}\r\n",
                c.connections_received.load(Ordering::Relaxed),
                c.commands.load(Ordering::Relaxed),
                c.expired_keys.load(Ordering::Relaxed),
                c.keyspace_hits.load(Ordering::Relaxed),
                c.keyspace_misses.load(Ordering::Relaxed),
                shared
                    .command_stats
                    .iter()
                    .map(|s| s.failed.load(Ordering::Relaxed) + s.rejected.load(Ordering::Relaxed))
                    .sum::<u64>(),
                c.protocol_errors.load(Ordering::Relaxed),
                shared.cache.bypassed(),
            );
        }
        "replication" => {
            o.push_str(
                "# Replication\r\n\
                 role:master\r\n\
                 connected_slaves:0\r\n\
                 master_failover_state:no-failover\r\n\
                 master_repl_offset:0\r\n\
                 repl_backlog_active:0\r\n",
            );
        }
        "cpu" => {
            let (user, sys) = cpu_seconds();
            let _ = write!(
                o,
                "# CPU\r\n\
                 used_cpu_sys:{sys:.6}\r\n\
                 used_cpu_user:{user:.6}\r\n\
                 used_cpu_sys_children:0.000000\r\n\
                 used_cpu_user_children:0.000000\r\n"
            );
        }
        "commandstats" => {
            o.push_str("# Commandstats\r\n");
            for (cmd, st) in SPECS.iter().zip(&shared.command_stats) {
                let calls = st.calls.load(Ordering::Relaxed);
                let rejected = st.rejected.load(Ordering::Relaxed);
                let failed = st.failed.load(Ordering::Relaxed);
                if calls + rejected == 0 {
                    continue;
                }
                let usec = st.micros.load(Ordering::Relaxed);
                let per_call = if calls == 0 {
                    0.0
                } else {
                    usec as f64 / calls as f64
                };
                let _ = write!(
                    o,
                    "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},\
                     rejected_calls={rejected},failed_calls={failed}\r\n",
                    cmd.name
                );
            }
        }
        "errorstats" => o.push_str("# Errorstats\r\n"),
        "keyspace" => {
            o.push_str("# Keyspace\r\n");
            // Counted exactly, as DBSIZE counts: a walk over each database that holds keys.
            for db in 0..DATABASES {
                let (lo, hi) = crate::store::db_range(db);
                let (mut keys, mut expires) = (0u64, 0u64);
                let entries = shared
                    .db
                    .scan_with(lo..hi, strata::ReadOptions::default(), false)
                    .map_err(super::engine)?;
                for e in entries {
                    let (_, raw) = e.map_err(super::engine)?;
                    if let Ok((t, _)) = crate::store::parse_value(&raw)
                        && t.is_none_or(|t| t > cx.now)
                    {
                        keys += 1;
                        expires += u64::from(t.is_some());
                    }
                }
                if keys > 0 {
                    let _ = write!(o, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
                }
            }
        }
        "lsm" => {
            let _ = write!(o, "# LSM\r\n");
            let runs: Vec<String> = s.runs_per_level.iter().map(|r| r.to_string()).collect();
            let _ = write!(
                o,
                "merge_policy:{}\r\nsize_ratio:{}\r\nruns_per_level:{}\r\n",
                s.merge_policy.name(),
                s.size_ratio,
                runs.join(",")
            );
            for (i, l) in s.levels.iter().enumerate() {
                // "-" for an empty level: 0 would read as a level of filters without bits.
                let bits = l
                    .filter_bits_per_key
                    .map_or_else(|| "-".to_string(), |b| format!("{b:.3}"));
                let _ = write!(
                    o,
                    "level{i}:files={},bytes={},target_bytes={},filter_bits_per_key={bits}\r\n",
                    l.files, l.bytes, l.target_bytes,
                );
            }
            let _ = write!(
                o,
                "memtable_bytes:{}\r\n\
                 immutable_memtables:{}\r\n\
                 sst_bytes:{}\r\n\
                 wal_bytes:{}\r\n\
                 write_amplification:{:.3}\r\n\
                 block_cache_hits:{}\r\n\
                 block_cache_misses:{}\r\n\
                 block_cache_hit_rate:{:.4}\r\n\
                 table_pinned_bytes:{}\r\n\
                 flushes:{}\r\n\
                 compactions:{}\r\n\
                 read_compactions:{}\r\n\
                 idle_merges:{}\r\n\
                 idle_merges_given_up:{}\r\n\
                 write_stall_micros:{}\r\n\
                 expected_false_positives:{:.6}\r\n\
                 filter_false_positives:{}\r\n",
                s.memtable_bytes,
                s.immutable_memtables,
                s.sst_bytes,
                s.wal_bytes,
                s.write_amplification().unwrap_or(0.0),
                s.block_cache_hits,
                s.block_cache_misses,
                s.cache_hit_rate(),
                s.table_pinned_bytes,
                s.flushes,
                s.compactions,
                s.read_compactions,
                s.idle_merges,
                s.idle_merges_given_up,
                s.write_stall_micros,
                s.expected_false_positives,
                s.filter_false_positives
            );
            if let Some(p) = &s.poisoned {
                let _ = write!(o, "poisoned:{p}\r\n");
            }
        }
        _ => {}
    }
    Ok(())
}

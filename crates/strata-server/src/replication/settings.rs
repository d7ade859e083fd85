//! The replication parameters CONFIG GET shows and CONFIG SET changes, under Redis's names
//! (the older `slave` spellings too).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::shared::Shared;

/// The names CONFIG knows, each with its older spelling where Redis has one.
pub(crate) const NAMES: &[&str] = &[
    "replica-read-only",
    "slave-read-only",
    "replica-priority",
    "slave-priority",
    "min-replicas-to-write",
    "min-slaves-to-write",
    "min-replicas-max-lag",
    "min-slaves-max-lag",
    "replica-announce-ip",
    "slave-announce-ip",
    "replica-announce-port",
    "slave-announce-port",
    "masterauth",
    "masteruser",
    "repl-timeout",
    "replica-serve-stale-data",
    "slave-serve-stale-data",
    "repl-backlog-size",
    "tls-replication",
];

fn text<T: Clone>(m: &Mutex<T>) -> T {
    m.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// Every parameter with its value, as CONFIG GET lists them, with whether CONFIG SET may
/// change it; `replicaof` is set by REPLICAOF, and written back by CONFIG REWRITE.
pub(crate) fn values(shared: &Shared) -> Vec<(&'static str, String, bool)> {
    let s = &shared.replication.settings;
    // Relaxed: settings, each read on its own.
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    let read_only = yes(s.read_only.load(Ordering::Relaxed));
    let stale = yes(s.serve_stale.load(Ordering::Relaxed));
    let replicaof = shared
        .replication
        .master
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map_or_else(String::new, |l| format!("{} {}", l.host, l.port));
    vec![
        ("replicaof", replicaof, false),
        ("replica-read-only", read_only.clone(), true),
        ("slave-read-only", read_only, true),
        ("replica-priority", n(&s.priority), true),
        ("slave-priority", n(&s.priority), true),
        ("min-replicas-to-write", n(&s.min_replicas), true),
        ("min-slaves-to-write", n(&s.min_replicas), true),
        ("min-replicas-max-lag", n(&s.min_replicas_max_lag), true),
        ("min-slaves-max-lag", n(&s.min_replicas_max_lag), true),
        ("replica-announce-ip", text(&s.announce_ip), true),
        ("slave-announce-ip", text(&s.announce_ip), true),
        ("replica-announce-port", n(&s.announce_port), true),
        ("slave-announce-port", n(&s.announce_port), true),
        ("masterauth", text(&s.masterauth).unwrap_or_default(), true),
        ("masteruser", text(&s.masteruser).unwrap_or_default(), true),
        ("repl-timeout", n(&s.timeout_secs), true),
        ("replica-serve-stale-data", stale.clone(), true),
        ("slave-serve-stale-data", stale, true),
        (
            "repl-backlog-size",
            shared.replication.backlog.limit().to_string(),
            true,
        ),
        ("tls-replication", yes(s.tls.load(Ordering::Relaxed)), true),
    ]
}

/// A parameter's value, parsed.
enum Parsed {
    Flag(bool),
    Number(u64),
    Text(String),
}

fn parse(name: &str, value: &str) -> Result<Parsed, String> {
    let number = || {
        value
            .parse::<u64>()
            .map_err(|_| "argument couldn't be parsed into an integer".to_string())
    };
    Ok(match name {
        "replica-read-only"
        | "slave-read-only"
        | "replica-serve-stale-data"
        | "slave-serve-stale-data"
        | "tls-replication" => match value.to_ascii_lowercase().as_str() {
            "yes" => Parsed::Flag(true),
            "no" => Parsed::Flag(false),
            _ => return Err("argument must be 'yes' or 'no'".into()),
        },
        "replica-announce-port" | "slave-announce-port" => match number()? {
            p @ 0..=65535 => Parsed::Number(p),
            _ => return Err("argument must be between 0 and 65535".into()),
        },
        "replica-priority"
        | "slave-priority"
        | "min-replicas-to-write"
        | "min-slaves-to-write"
        | "min-replicas-max-lag"
        | "min-slaves-max-lag" => Parsed::Number(number()?),
        "repl-timeout" => Parsed::Number(number()?.max(1)),
        "repl-backlog-size" => Parsed::Number(
            crate::conffile::memory_size(value)
                .ok_or_else(|| "argument must be a memory value".to_string())? as u64,
        ),
        "replica-announce-ip" | "slave-announce-ip" | "masterauth" | "masteruser" => {
            Parsed::Text(value.to_string())
        }
        _ => return Err("unsupported parameter".into()),
    })
}

/// A parameter's value checked, before any is applied.
pub(crate) fn check(name: &str, value: &str) -> Result<(), String> {
    parse(name, value).map(|_| ())
}

/// Applies a checked parameter.
pub(crate) fn set(shared: &Shared, name: &str, value: &str) {
    let Ok(parsed) = parse(name, value) else {
        return;
    };
    let s = &shared.replication.settings;
    let put = |m: &Mutex<Option<String>>, v: String| {
        *m.lock().unwrap_or_else(|e| e.into_inner()) = Some(v).filter(|v| !v.is_empty());
    };
    // Relaxed: settings, each read on its own.
    match (name.replace("slave", "replica").as_str(), parsed) {
        ("replica-read-only", Parsed::Flag(v)) => s.read_only.store(v, Ordering::Relaxed),
        ("replica-serve-stale-data", Parsed::Flag(v)) => s.serve_stale.store(v, Ordering::Relaxed),
        ("tls-replication", Parsed::Flag(v)) => s.tls.store(v, Ordering::Relaxed),
        ("replica-priority", Parsed::Number(v)) => s.priority.store(v, Ordering::Relaxed),
        ("min-replicas-to-write", Parsed::Number(v)) => s.min_replicas.store(v, Ordering::Relaxed),
        ("min-replicas-max-lag", Parsed::Number(v)) => {
            s.min_replicas_max_lag.store(v, Ordering::Relaxed);
        }
        ("replica-announce-port", Parsed::Number(v)) => s.announce_port.store(v, Ordering::Relaxed),
        ("repl-timeout", Parsed::Number(v)) => s.timeout_secs.store(v, Ordering::Relaxed),
        ("repl-backlog-size", Parsed::Number(v)) => shared
            .replication
            .backlog
            .set_limit(usize::try_from(v).unwrap_or(usize::MAX)),
        ("replica-announce-ip", Parsed::Text(v)) => {
            *s.announce_ip.lock().unwrap_or_else(|e| e.into_inner()) = v;
        }
        ("masterauth", Parsed::Text(v)) => put(&s.masterauth, v),
        ("masteruser", Parsed::Text(v)) => put(&s.masteruser, v),
        _ => {}
    }
}

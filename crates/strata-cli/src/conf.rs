//! `strata serve FILE`: a configuration file in Redis's format. The settings the server
//! needs before it starts (port, address, directory, TLS files, ...) become the flags they
//! name, placed before the command line's own, which override them; every other directive
//! is set at start as CONFIG SET sets it, and a name the server does not know stops it.

use std::path::Path;

/// Directives that are flags of `strata serve`: the directive, its flag, and whether its
/// value is a memory size (`1gb`, `64mb`, ...), which the flag takes in bytes.
const FLAGS: &[(&str, &str, bool)] = &[
    ("port", "--port", false),
    ("bind", "--bind", false),
    ("dir", "--dir", false),
    ("appendfsync", "--sync", false),
    ("maxclients", "--maxclients", false),
    ("proto-max-bulk-len", "--max-request-bytes", true),
    ("timeout", "--timeout", false),
    ("requirepass", "--requirepass", false),
    ("aclfile", "--aclfile", false),
    ("protected-mode", "--protected-mode", false),
    ("tls-port", "--tls-port", false),
    ("tls-cert-file", "--tls-cert-file", false),
    ("tls-key-file", "--tls-key-file", false),
    ("tls-ca-cert-file", "--tls-ca-cert-file", false),
    ("tls-auth-clients", "--tls-auth-clients", false),
    ("tcp-keepalive", "--tcp-keepalive", false),
    ("notify-keyspace-events", "--notify-keyspace-events", false),
    (
        "client-query-buffer-limit",
        "--client-query-buffer-limit",
        true,
    ),
    // Strata's own.
    ("cache-bytes", "--cache-bytes", true),
    ("threads", "--threads", false),
    ("write-buffer-size", "--write-buffer-size", true),
    ("block-cache-bytes", "--block-cache-bytes", true),
    ("repl-wal-keep-bytes", "--repl-wal-keep-bytes", true),
];

/// What a configuration file says: flags for `strata serve`, and the other parameters.
#[derive(Debug)]
pub struct FromFile {
    pub flags: Vec<String>,
    pub settings: Vec<(String, String)>,
}

pub fn read(path: &Path) -> Result<FromFile, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("the configuration file {}: {e}", path.display()))?;
    let directives = strata_server::conffile::parse(&text)
        .map_err(|e| format!("the configuration file {}: {e}", path.display()))?;
    let mut out = FromFile {
        flags: Vec::new(),
        settings: Vec::new(),
    };
    for d in directives {
        let at = || format!("{} line {}", path.display(), d.line);
        // `replicaof HOST PORT` (and the older `slaveof`): one flag of two words.
        if d.name == "replicaof" || d.name == "slaveof" {
            out.flags.push("--replicaof".into());
            out.flags.push(d.args.join(" "));
            continue;
        }
        let Some(&(_, flag, memory)) = FLAGS.iter().find(|(n, _, _)| *n == d.name) else {
            let value = d.args.join(" ");
            match out.settings.iter_mut().find(|(n, _)| *n == d.name) {
                // A buffer limit per class, and save points, add up over their lines, as in
                // redis.conf; any other directive given again takes its last value.
                Some((n, v)) if n == "client-output-buffer-limit" || n == "save" => {
                    v.push(' ');
                    v.push_str(&value);
                }
                Some((_, v)) => *v = value,
                None => out.settings.push((d.name.clone(), value)),
            }
            continue;
        };
        // `bind` may name several addresses; the server listens on the first.
        let Some(value) = d.args.first() else {
            return Err(format!("{}: '{}' needs a value", at(), d.name));
        };
        // An empty file name, or TLS port 0, says "none", as redis.conf does.
        let none = value.is_empty() && d.name != "notify-keyspace-events";
        if none || (d.name == "tls-port" && value == "0") {
            continue;
        }
        let value = if memory {
            strata_server::conffile::memory_size(value)
                .ok_or_else(|| format!("{}: '{value}' is not a memory size", at()))?
                .to_string()
        } else {
            value.clone()
        };
        out.flags.push(flag.to_string());
        out.flags.push(value);
    }
    Ok(out)
}

/// The command line with the file's flags placed just after `serve`, so that the command
/// line's own come later and win.
pub fn with_flags(args: Vec<String>, flags: &[String]) -> Vec<String> {
    let at = args
        .iter()
        .position(|a| a == "serve")
        .map_or(args.len(), |i| i + 1);
    let (head, tail) = args.split_at(at);
    head.iter().chain(flags).chain(tail).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_becomes_flags_and_settings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("strata.conf");
        std::fs::write(
            &path,
            "# a server\nport 7001\nbind 0.0.0.0 ::1\nproto-max-bulk-len 64mb\n\
             aclfile \"\"\nslowlog-max-len 10\nsave \"\"\nnotify-keyspace-events \"\"\n\
             slowlog-max-len 11\nclient-output-buffer-limit normal 0 0 0\n\
             client-output-buffer-limit pubsub 32mb 8mb 60\n",
        )
        .unwrap();
        let got = read(&path).unwrap();
        assert_eq!(
            got.flags,
            [
                "--port",
                "7001",
                "--bind",
                "0.0.0.0",
                "--max-request-bytes",
                "67108864",
                "--notify-keyspace-events",
                ""
            ]
        );
        assert_eq!(
            got.settings,
            [
                ("slowlog-max-len".to_string(), "11".to_string()),
                ("save".to_string(), String::new()),
                (
                    "client-output-buffer-limit".to_string(),
                    "normal 0 0 0 pubsub 32mb 8mb 60".to_string()
                )
            ]
        );
        let args: Vec<String> = ["strata", "serve", "f.conf", "--port", "9"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let placed = with_flags(args, &["--port".into(), "7001".into()]);
        assert_eq!(
            placed,
            ["strata", "serve", "--port", "7001", "f.conf", "--port", "9"]
        );
        std::fs::write(&path, "proto-max-bulk-len lots\n").unwrap();
        assert!(read(&path).unwrap_err().contains("line 1"));
    }
}

//! The configuration file: Redis's format (one directive per line, its name then its
//! arguments, `#` comments, arguments quoted as redis.conf quotes them), read at start
//! (`strata serve FILE`) and written back by CONFIG REWRITE, which keeps the file's comments,
//! order and unknown lines, changes the lines of the parameters whose values differ from
//! what the server runs with, and appends those the file lacks.

use std::io::Write;
use std::path::Path;

/// One directive of the file: its line (from 1), its name in lower case, its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Directive {
    pub line: usize,
    pub name: String,
    pub args: Vec<String>,
}

/// Splits a line into arguments as Redis does: spaces separate them; double quotes allow
/// `\n`, `\r`, `\t`, `\"`, `\\` and `\xHH` escapes, single quotes only `\'`.
pub fn split_line(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else {
            return Ok(out);
        };
        let mut arg = String::new();
        if first == '"' || first == '\'' {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err("unbalanced quotes".into()),
                    Some(c) if c == first => break,
                    Some('\\') if first == '"' => match chars.next() {
                        Some('n') => arg.push('\n'),
                        Some('r') => arg.push('\r'),
                        Some('t') => arg.push('\t'),
                        Some('x') => {
                            let hex: String = chars.by_ref().take(2).collect();
                            match u8::from_str_radix(&hex, 16) {
                                Ok(b) => arg.push(char::from(b)),
                                Err(_) => return Err(format!("bad escape \\x{hex}")),
                            }
                        }
                        Some(c) => arg.push(c),
                        None => return Err("unbalanced quotes".into()),
                    },
                    Some('\\') if chars.peek() == Some(&'\'') => {
                        chars.next();
                        arg.push('\'');
                    }
                    Some(c) => arg.push(c),
                }
            }
            // A closing quote must end the argument.
            if chars.peek().is_some_and(|c| !c.is_whitespace()) {
                return Err("closing quote must be followed by a space".into());
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                arg.push(c);
                chars.next();
            }
        }
        out.push(arg);
    }
}

/// The directives of a configuration file's text.
pub fn parse(text: &str) -> Result<Vec<Directive>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let mut words = split_line(trimmed).map_err(|e| format!("line {}: {e}", i + 1))?;
        if words.is_empty() {
            continue;
        }
        let name = words.remove(0).to_ascii_lowercase();
        out.push(Directive {
            line: i + 1,
            name,
            args: words,
        });
    }
    Ok(out)
}

/// A memory size as Redis writes them: bytes, or with k, kb, m, mb, g or gb (1000s for the
/// bare letters, 1024s with b).
pub fn memory_size(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: usize = match lower.get(digits.len()..)? {
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

/// A value as a directive's argument: quoted when it is empty or holds spaces, quotes or
/// other bytes a bare word cannot.
pub fn quote(value: &str) -> String {
    let bare = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\'' && c != '\\');
    if bare {
        return value.to_string();
    }
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The line a parameter is written as. Parameters whose value is a list of words in
/// CONFIG GET (`client-output-buffer-limit`, `save`) keep their words apart.
fn line_of(name: &str, value: &str) -> String {
    let words = matches!(name, "client-output-buffer-limit" | "save" | "replicaof");
    if words && !value.is_empty() {
        let words: Vec<String> = value.split_whitespace().map(quote).collect();
        return format!("{name} {}", words.join(" "));
    }
    format!("{name} {}", quote(value))
}

/// A parameter whose empty value is written as no line at all.
fn gone(name: &str, value: &str) -> bool {
    name == "replicaof" && value.is_empty()
}

/// Marks where CONFIG REWRITE appends parameters the file lacked.
const GENERATED: &str = "# Generated by CONFIG REWRITE";

/// The file's text with `current` written in: the first line of each parameter gets its
/// value, its later lines go, every other line stays, and the parameters the file lacked
/// are appended. Parameters in `keep` (written by hand, which the server cannot show)
/// keep their lines as they are.
pub fn rewrite(text: &str, current: &[(&str, String)], keep: &[&str]) -> Result<String, String> {
    let directives = parse(text)?;
    let mut written: Vec<&str> = Vec::new();
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let here = directives.iter().find(|d| d.line == i + 1);
        let param = here.and_then(|d| current.iter().find(|(n, _)| *n == d.name));
        match param {
            Some((name, value)) if !keep.contains(name) => {
                // A primary has no `replicaof` line.
                if !written.contains(name) && !gone(name, value) {
                    out.push_str(&line_of(name, value));
                    out.push('\n');
                    written.push(name);
                }
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    let missing: Vec<&(&str, String)> = current
        .iter()
        .filter(|(n, v)| {
            !keep.contains(n) && !directives.iter().any(|d| d.name == *n) && !gone(n, v)
        })
        .collect();
    if !missing.is_empty() {
        if !out.contains(GENERATED) {
            if !out.is_empty() && !out.ends_with("\n\n") {
                out.push('\n');
            }
            out.push_str(GENERATED);
            out.push('\n');
        }
        for (name, value) in missing {
            out.push_str(&line_of(name, value));
            out.push('\n');
        }
    }
    Ok(out)
}

/// Writes `text` to `path` whole or not at all: a file beside it, synced, then renamed
/// over it, and the directory synced.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{}.rewrite", name.unwrap_or_default()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_as_redis_splits_them() {
        assert_eq!(split_line("save \"\"").unwrap(), ["save", ""]);
        assert_eq!(
            split_line(r#"requirepass "a b\"c\x41""#).unwrap(),
            ["requirepass", "a b\"cA"]
        );
        assert_eq!(
            split_line("bind  127.0.0.1   ::1").unwrap(),
            ["bind", "127.0.0.1", "::1"]
        );
        assert_eq!(split_line(r"x 'it\'s'").unwrap(), ["x", "it's"]);
        assert!(split_line("x \"open").is_err());
        assert!(split_line("x \"a\"b").is_err());
    }

    #[test]
    fn a_rewrite_keeps_comments_and_order_and_appends_what_was_missing() {
        let text = "# my server\nport 7000\n\n# slow log\nslowlog-max-len 10\nfuture-thing on\n\
                    slowlog-max-len 11\n";
        let current = [
            ("port", "7000".to_string()),
            ("slowlog-max-len", "64".to_string()),
            ("notify-keyspace-events", String::new()),
            (
                "client-output-buffer-limit",
                "normal 0 0 0 pubsub 1 2 3".to_string(),
            ),
        ];
        let got = rewrite(text, &current, &[]).unwrap();
        assert_eq!(
            got,
            "# my server\nport 7000\n\n# slow log\nslowlog-max-len 64\nfuture-thing on\n\n\
             # Generated by CONFIG REWRITE\nnotify-keyspace-events \"\"\n\
             client-output-buffer-limit normal 0 0 0 pubsub 1 2 3\n"
        );
        // Read back, the rewritten file says what the server runs with.
        let again = parse(&got).unwrap();
        let value = |n: &str| again.iter().find(|d| d.name == n).unwrap().args.clone();
        assert_eq!(value("slowlog-max-len"), ["64"]);
        assert_eq!(value("notify-keyspace-events"), [""]);
        // A second rewrite changes nothing.
        assert_eq!(rewrite(&got, &current, &[]).unwrap(), got);
        // A kept parameter's line is left as written.
        let kept = rewrite(
            "requirepass s3cret\n",
            &[("requirepass", String::new())],
            &["requirepass"],
        );
        assert_eq!(kept.unwrap(), "requirepass s3cret\n");
    }
}

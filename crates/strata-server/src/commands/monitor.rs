//! MONITOR: the connection is told of every command the server runs, as it runs, in
//! Redis's line: the time, the database and the client (`lua` for a script's commands),
//! then each argument quoted. Commands flagged `admin` or `skip_monitor` are not shown; a
//! script is shown before the commands it runs, everything else once it has run.

use std::fmt::Write as _;

use super::spec::Spec;
use super::{Connection, Ctx, Outcome};
use crate::pubsub::Kind;
use crate::shared::Shared;

pub(super) fn monitor(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    if cx.conn.subs.monitor.insert(Vec::new()) {
        cx.shared.pubsub.subscribe(Kind::Monitor, b"", cx.conn.at);
        if let Some(info) = &cx.conn.info {
            info.shown().monitor = true;
        }
    }
    cx.out.ok();
    Ok(())
}

/// Whether MONITOR shows `cmd` (with `args`) once it has run: not the operator's commands
/// and subcommands.
pub(super) fn shown_after(cmd: &Spec, args: &[&[u8]]) -> bool {
    let admin_sub = args
        .get(1)
        .and_then(|sub| super::spec::subcommand_categories(cmd.name, sub))
        .is_some_and(|cats| cats.contains(&"admin"));
    !admin_sub
        && !cmd
            .flags
            .iter()
            .any(|f| *f == "admin" || *f == "skip_monitor")
}

/// Tells every MONITOR connection of `args`, run by `conn` (or by a script, `from_script`).
pub(super) fn tell(shared: &Shared, conn: &Connection, args: &[&[u8]], from_script: bool) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let from = match (&conn.info, from_script) {
        (_, true) => "lua",
        (Some(info), false) => info.addr.as_str(),
        (None, false) => "?",
    };
    let mut line = format!(
        "{}.{:06} [{} {from}]",
        now.as_secs(),
        now.subsec_micros(),
        conn.db
    );
    for a in redact(args.first().map_or("", |n| name_of(n)), args) {
        line.push(' ');
        quote(&mut line, &a);
    }
    shared
        .pubsub
        .tell_monitors(line.as_bytes(), |w| shared.wake_worker(w));
}

/// A command's name as the command table spells it ("" for no command).
fn name_of(name: &[u8]) -> &'static str {
    super::spec::lookup(name).map_or("", |(_, c)| c.name)
}

/// Appends `bytes` in double quotes, with quotes, backslashes and unprintable bytes escaped.
fn quote(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            b' '..=b'~' => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
}

/// The arguments as the slow log keeps them: passwords and ACL rules as "(redacted)".
pub(super) fn redact<'a>(name: &str, args: &[&'a [u8]]) -> Vec<std::borrow::Cow<'a, [u8]>> {
    use std::borrow::Cow;
    const HIDDEN: &[u8] = b"(redacted)";
    let mut out: Vec<Cow<'a, [u8]>> = args.iter().map(|a| Cow::Borrowed(*a)).collect();
    let sub = args.get(1).map(|s| s.to_ascii_lowercase());
    let hide_from = match (name, sub.as_deref()) {
        ("auth", _) => Some(1),
        ("acl", Some(b"setuser")) => Some(2),
        _ => None,
    };
    if let Some(from) = hide_from {
        for a in out.iter_mut().skip(from) {
            *a = Cow::Borrowed(HIDDEN);
        }
    }
    // The values after these words, up to the count given.
    let secrets: &[(&[u8], usize)] = match (name, sub.as_deref()) {
        ("hello", _) => &[(b"auth", 2)],
        ("migrate", _) => &[(b"auth", 1), (b"auth2", 2)],
        ("config", Some(b"set")) => &[(b"requirepass", 1), (b"masterauth", 1)],
        _ => &[],
    };
    let mut i = 0;
    while i < args.len() {
        let word = args
            .get(i)
            .map(|a| a.to_ascii_lowercase())
            .unwrap_or_default();
        if let Some(&(_, n)) = secrets.iter().find(|(w, _)| *w == word.as_slice()) {
            for a in out.iter_mut().skip(i + 1).take(n) {
                *a = Cow::Borrowed(HIDDEN);
            }
            i += n;
        }
        i += 1;
    }
    out
}

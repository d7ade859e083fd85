//! The connection and the server: PING, HELLO, SELECT, CLIENT, COMMAND, CONFIG, INFO, TIME.

use std::time::Duration;

use super::session::ReplyMode;
use super::spec::{SPECS, SUBCOMMANDS, Spec, lookup};
use super::{Ctx, Outcome, int_arg, upper};
use crate::shared::After;
use crate::store::DATABASES;

pub(super) fn ping(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    // A RESP2 subscriber is answered in the shape of a message, which it is reading.
    if cx.conn.protocol == 2 && cx.conn.subs.any() && a.len() <= 2 {
        cx.out.array(2);
        cx.out.bulk(b"pong");
        cx.out.bulk(a.get(1).copied().unwrap_or_default());
        return Ok(());
    }
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
    super::pubsub::forget(cx.shared, cx.conn);
    cx.conn.multi = None;
    cx.conn.multi_failed = false;
    cx.conn.watched.clear();
    cx.conn.db = 0;
    cx.conn.protocol = 2;
    cx.conn.name = None;
    cx.conn.reply = ReplyMode::On;
    if let Some(info) = &cx.conn.info {
        info.shown().no_evict = false;
    }
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
        super::client::name_ok(&n)?;
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
pub(super) const REDIS_VERSION: &str = "7.0.15";

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
            let names = command_list(a)?;
            cx.out.array(names.len());
            for n in names {
                cx.out.bulk(n.as_bytes());
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
        Some("GETKEYS") => return getkeys(cx, &a[2..]),
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

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`: every
/// command and subcommand (`config|get`), or those the filter picks. No command comes from
/// a module.
fn command_list(a: &[&[u8]]) -> Result<Vec<String>, String> {
    let all = || {
        SPECS.iter().flat_map(|c| {
            let subs = SUBCOMMANDS
                .iter()
                .find(|(n, _)| *n == c.name)
                .map_or(&[][..], |(_, subs)| *subs);
            std::iter::once((c, c.name.to_string()))
                .chain(subs.iter().map(move |s| (c, format!("{}|{s}", c.name))))
        })
    };
    let names = match a.get(2..) {
        Some([]) | None => all().map(|(_, n)| n).collect(),
        Some([by, kind, value]) if upper(by) == "FILTERBY" => match upper(kind).as_str() {
            "MODULE" => Vec::new(),
            "ACLCAT" => {
                let cat = String::from_utf8_lossy(value).to_lowercase();
                let categories = |c: &Spec, n: &str| {
                    n.split_once('|')
                        .and_then(|(_, sub)| {
                            super::spec::subcommand_categories(c.name, sub.as_bytes())
                        })
                        .unwrap_or(c.categories)
                };
                all()
                    .filter(|(c, n)| categories(c, n).contains(&cat.as_str()))
                    .map(|(_, n)| n)
                    .collect()
            }
            "PATTERN" => {
                let pattern = value.to_ascii_lowercase();
                all()
                    .filter(|(_, n)| crate::glob::matches(&pattern, n.as_bytes()))
                    .map(|(_, n)| n)
                    .collect()
            }
            _ => return Err(super::syntax()),
        },
        Some(_) => return Err(super::syntax()),
    };
    Ok(names)
}

/// `COMMAND GETKEYS command arg ...`: the keys the command would name, from its row and
/// the keys whose places move.
fn getkeys(cx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> Outcome {
    if args.is_empty() {
        return Err(super::wrong_args("command|getkeys"));
    }
    let Some((_, cmd)) = args.first().and_then(|n| lookup(n)) else {
        return Err("ERR Invalid command specified".into());
    };
    if !super::spec::arity_ok(cmd, args.len()) {
        return Err("ERR Invalid number of arguments specified for command".into());
    }
    let mut at = crate::acl::command_keys(cmd, args);
    at.retain(|&i| i < args.len());
    if at.is_empty() && !cmd.flags.contains(&"no_mandatory_keys") {
        return Err("ERR The command has no key arguments".into());
    }
    cx.out.array(at.len());
    for i in at {
        cx.out.bulk(args[i]);
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

/// `CLUSTER ...`: the server is no cluster node, and says so as a Redis without cluster
/// support does, which is how clients find that they talk to a single server.
pub(super) fn cluster(_cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    Err("ERR This instance has cluster support disabled".into())
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

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`: stops the server as SIGTERM does. Every
/// acknowledged write is in the log already, so SAVE and NOSAVE shut down alike, the log
/// synced; a script still running is stopped and what it wrote is not kept. The connection
/// is closed without a reply, as Redis closes it.
pub(super) fn shutdown(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let mut save = None;
    for arg in a.iter().skip(1) {
        match super::upper(arg).as_str() {
            "NOSAVE" if save.is_none() => save = Some(false),
            "SAVE" if save.is_none() => save = Some(true),
            "NOW" | "FORCE" => {}
            "ABORT" if a.len() == 2 => return Err("ERR No shutdown in progress.".into()),
            _ => return Err(super::syntax()),
        }
    }
    cx.shared.scripts.stop_now();
    cx.shared
        .shutdown_requested
        .store(true, std::sync::atomic::Ordering::SeqCst);
    cx.after = crate::shared::After::Close;
    Ok(())
}

//! CLIENT: a connection's own settings (SETNAME, REPLY, NO-EVICT, ...) and the operator's
//! view of every connection (LIST, INFO, KILL), read from the registry in `crate::clients`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Instant;

use super::session::ReplyMode;
use super::spec::SPECS;
use super::spec::has_subcommands;
use super::{Ctx, Outcome, upper};
use crate::clients::ClientInfo;
use crate::shared::After;

pub(super) fn name_ok(name: &[u8]) -> Outcome {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(
            "ERR Client names cannot contain spaces, newlines or special characters.".into(),
        );
    }
    Ok(())
}

const HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "    * ID <client-id>",
    "      Kill connections by client id.",
    "    * MAXAGE <maxage>",
    "      Kill connections older than the specified age.",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "    * ID <client-id> [<client-id> ...]",
    "      Return clients of specified IDs only.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <LIB-NAME|LIB-VER> <value>",
    "    Accepted, and not kept.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection (always off: client-side",
    "    caching is not served).",
    "GETREDIR",
    "    Return the client ID tracking redirects to (always -1).",
    "HELP",
    "    Print this help.",
];

pub(super) fn client(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a[1]);
    match (sub.as_str(), a.len()) {
        ("SETNAME", 3) => {
            name_ok(a[2])?;
            cx.conn.name = (!a[2].is_empty()).then(|| a[2].to_vec());
            cx.out.ok();
        }
        ("GETNAME", 2) => match &cx.conn.name {
            Some(n) => cx.out.bulk(n),
            None => cx.out.null(),
        },
        ("ID", 2) => cx.out.int(cx.conn.id as i64),
        ("REPLY", 3) => {
            cx.conn.reply = match upper(a[2]).as_str() {
                "ON" => ReplyMode::On,
                "OFF" => ReplyMode::Off,
                "SKIP" => ReplyMode::SkipArmed,
                _ => return Err(super::syntax()),
            };
            cx.out.ok();
        }
        ("UNBLOCK", 3 | 4) => unblock(cx, a)?,
        ("SETINFO", 4) => cx.out.ok(),
        ("INFO", 2) => {
            cx.conn.publish();
            let line = match &cx.conn.info {
                Some(info) => describe(info, Instant::now(), Some(a)),
                None => format!("id={} cmd=client|info\n", cx.conn.id),
            };
            cx.out.verbatim(&line);
        }
        ("LIST", _) => list(cx, a)?,
        ("KILL", 3..) => kill(cx, a)?,
        ("NO-EVICT", 3) => {
            let on = match upper(a[2]).as_str() {
                "ON" => true,
                "OFF" => false,
                _ => return Err(super::syntax()),
            };
            if let Some(info) = &cx.conn.info {
                info.shown().no_evict = on;
            }
            cx.out.ok();
        }
        ("GETREDIR", 2) => cx.out.int(-1),
        ("PAUSE", 3 | 4) => {
            let ms = super::parse_i64(a[2])
                .and_then(|n| u64::try_from(n).ok())
                .ok_or("ERR timeout is not an integer or out of range")?;
            let all = match a.get(3).map(|m| upper(m)).as_deref() {
                None | Some("ALL") => true,
                Some("WRITE") => false,
                Some(_) => return Err(super::syntax()),
            };
            let now = since_start(cx.shared);
            cx.shared
                .clients
                .pause
                .start(now, now.saturating_add(ms), all);
            cx.out.ok();
        }
        ("UNPAUSE", 2) => {
            cx.shared.clients.pause.end();
            // Each worker looks at its held connections again.
            for w in 0..cx.shared.wakers.get().map_or(0, Vec::len) {
                cx.shared.wake_worker(w);
            }
            cx.out.ok();
        }
        ("TRACKINGINFO", 2) => {
            cx.out.map(3);
            cx.out.bulk(b"flags");
            cx.out.set(1);
            cx.out.bulk(b"off");
            cx.out.bulk(b"redirect");
            cx.out.int(-1);
            cx.out.bulk(b"prefixes");
            cx.out.array(0);
        }
        ("TRACKING" | "CACHING", _) => {
            return Err("ERR client-side caching (CLIENT TRACKING) is not served".into());
        }
        ("HELP", 2) => {
            cx.out.array(HELP.len());
            for line in HELP {
                cx.out.simple(line);
            }
        }
        (
            "SETNAME" | "GETNAME" | "ID" | "SETINFO" | "INFO" | "REPLY" | "UNBLOCK" | "KILL"
            | "NO-EVICT" | "GETREDIR" | "TRACKINGINFO" | "HELP" | "PAUSE" | "UNPAUSE",
            _,
        ) => {
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

/// Milliseconds since the server started: the clock CLIENT PAUSE is kept by.
pub(crate) fn since_start(shared: &crate::shared::Shared) -> u64 {
    shared.started.elapsed().as_millis() as u64
}

/// Whether a CLIENT PAUSE is in force now.
pub(crate) fn pause_in_force(shared: &crate::shared::Shared) -> bool {
    shared.clients.pause.started() && shared.clients.pause.in_force(since_start(shared)).is_some()
}

/// Whether a command named `name` waits for CLIENT PAUSE to end: under a pause of every
/// command, each; under a pause of writes, those that write or may (scripts, PUBLISH,
/// EXEC). Commands queued inside MULTI are queued as usual; EXEC waits.
pub(crate) fn paused(shared: &crate::shared::Shared, name: &[u8], in_multi: bool) -> bool {
    if !shared.clients.pause.started() {
        return false;
    }
    let Some((_, all)) = shared.clients.pause.in_force(since_start(shared)) else {
        return false;
    };
    let Some((_, cmd)) = super::spec::lookup(name) else {
        return false;
    };
    if in_multi && cmd.name != "exec" && cmd.name != "discard" {
        return false;
    }
    all || cmd
        .flags
        .iter()
        .any(|f| *f == "write" || *f == "may_replicate")
        || matches!(
            cmd.name,
            "exec" | "publish" | "spublish" | "eval" | "evalsha" | "fcall"
        )
}

fn unblock(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let id = u64::try_from(super::int_arg(a[2])?).unwrap_or(0);
    let error = match a.get(3).map(|m| upper(m)).as_deref() {
        None | Some("TIMEOUT") => false,
        Some("ERROR") => true,
        Some(_) => {
            return Err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR".into());
        }
    };
    let worker = {
        let mut b = cx.shared.blocking.lock().unwrap_or_else(|e| e.into_inner());
        b.request_unblock(id, error)
    };
    match worker {
        Some(w) => {
            cx.shared.wake_worker(w);
            cx.out.int(1);
        }
        None => cx.out.int(0),
    }
    Ok(())
}

/// A client type of CLIENT LIST and CLIENT KILL: normal, pubsub, or the replication kinds,
/// which no connection here is.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Type {
    Normal,
    PubSub,
    Replication,
}

fn parse_type(t: &[u8]) -> Result<Type, String> {
    match upper(t).as_str() {
        "NORMAL" => Ok(Type::Normal),
        "PUBSUB" => Ok(Type::PubSub),
        "MASTER" | "REPLICA" | "SLAVE" => Ok(Type::Replication),
        _ => Err(format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(t)
        )),
    }
}

fn type_of(info: &ClientInfo) -> Type {
    let s = info.shown();
    if s.sub + s.psub + s.ssub > 0 {
        Type::PubSub
    } else {
        Type::Normal
    }
}

/// `CLIENT LIST [TYPE type] [ID id ...]`.
fn list(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let mut kind = None;
    let mut ids: Option<BTreeSet<u64>> = None;
    match a.get(2).map(|o| upper(o)).as_deref() {
        None => {}
        Some("TYPE") if a.len() == 4 => kind = Some(parse_type(a[3])?),
        Some("ID") if a.len() >= 4 => {
            let mut set = BTreeSet::new();
            for id in &a[3..] {
                match std::str::from_utf8(id)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                {
                    Some(n) if n > 0 => set.insert(n),
                    _ => return Err("ERR Invalid client ID".into()),
                };
            }
            ids = Some(set);
        }
        Some(_) => return Err(super::syntax()),
    }
    cx.conn.publish();
    let now = Instant::now();
    let mut text = String::new();
    for info in cx.shared.clients.list() {
        if kind.is_some_and(|k| k != type_of(&info))
            || ids.as_ref().is_some_and(|ids| !ids.contains(&info.id))
        {
            continue;
        }
        let own = (info.id == cx.conn.id).then_some(a);
        text.push_str(&describe(&info, now, own));
    }
    cx.out.verbatim(&text);
    Ok(())
}

/// The line CLIENT LIST and CLIENT INFO give for `info`, in Redis's fields. For the
/// connection asking, `own` is the command it is running, which its query buffer holds;
/// the buffers of the others are on their workers and shown empty.
fn describe(info: &ClientInfo, now: Instant, own: Option<&[&[u8]]>) -> String {
    let (age, idle) = info.age_and_idle(now);
    let shown = info.shown().clone();
    let mut flags = String::new();
    if shown.monitor {
        flags.push('O');
    }
    if shown.sub + shown.psub + shown.ssub > 0 {
        flags.push('P');
    }
    if shown.multi >= 0 {
        flags.push('x');
    }
    if shown.no_evict {
        flags.push('e');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let cmd = match info.last_command().and_then(|i| SPECS.get(i)) {
        Some(c) if has_subcommands(c.name) && !shown.sub_cmd.is_empty() => {
            format!("{}|{}", c.name, shown.sub_cmd)
        }
        Some(c) => c.name.to_string(),
        None => "NULL".to_string(),
    };
    // The request as it arrived: `*n`, then `$len` and the bytes of each argument.
    let (qbuf, argv_mem) = own.map_or((0, 0), |args| {
        let bytes: usize = args.iter().map(|x| x.len()).sum();
        let headers: usize = args
            .iter()
            .map(|x| 1 + x.len().to_string().len() + 2 + 2)
            .sum();
        (
            1 + args.len().to_string().len() + 2 + headers + bytes,
            bytes,
        )
    });
    let mut line = String::new();
    let _ = writeln!(
        line,
        "id={} addr={} laddr={} fd={} name={} age={age} idle={idle} flags={flags} db={} \
         sub={} psub={} ssub={} multi={} qbuf={qbuf} qbuf-free=0 argv-mem={argv_mem} \
         multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem={} events=r cmd={cmd} user={} \
         redir=-1 resp={}",
        info.id,
        info.addr,
        info.laddr,
        info.fd,
        String::from_utf8_lossy(&shown.name),
        shown.db,
        shown.sub,
        shown.psub,
        shown.ssub,
        shown.multi,
        qbuf + argv_mem,
        shown.user,
        shown.resp,
    );
    line
}

/// `CLIENT KILL ip:port`, or `CLIENT KILL` with filters (ID, TYPE, USER, ADDR, LADDR, MAXAGE,
/// SKIPME): closes the connections that match every filter given. The others' workers
/// close them; the connection asking, when it matches, is closed after this reply.
fn kill(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let old_form = a.len() == 3;
    let mut addr = old_form.then(|| a[2].to_vec());
    let (mut id, mut kind, mut user, mut laddr, mut max_age) = (None, None, None, None, None);
    let mut skip_me = !old_form;
    if !old_form {
        if !a.len().is_multiple_of(2) {
            return Err(super::syntax());
        }
        for pair in a[2..].chunks(2) {
            let [option, value] = pair else {
                return Err(super::syntax());
            };
            match upper(option).as_str() {
                "ID" => {
                    let n = std::str::from_utf8(value)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok());
                    match n {
                        Some(n) if n > 0 => id = Some(n),
                        _ => return Err("ERR client-id should be greater than 0".into()),
                    }
                }
                "TYPE" => kind = Some(parse_type(value)?),
                "USER" => {
                    let name = String::from_utf8_lossy(value).into_owned();
                    if cx.shared.user(&name).is_none() {
                        return Err(format!("ERR No such user '{name}'"));
                    }
                    user = Some(name);
                }
                "ADDR" => addr = Some(value.to_vec()),
                "LADDR" => laddr = Some(value.to_vec()),
                "MAXAGE" => max_age = Some(super::int_arg(value)?),
                "SKIPME" => {
                    skip_me = match upper(value).as_str() {
                        "YES" => true,
                        "NO" => false,
                        _ => return Err(super::syntax()),
                    }
                }
                _ => return Err(super::syntax()),
            }
        }
    }
    let now = Instant::now();
    let mut killed = 0;
    let mut workers = BTreeSet::new();
    for info in cx.shared.clients.list() {
        let mine = info.id == cx.conn.id;
        let matches = id.is_none_or(|i| i == info.id)
            && kind.is_none_or(|k| k == type_of(&info))
            && user.as_ref().is_none_or(|u| *u == info.shown().user)
            && addr.as_ref().is_none_or(|x| *x == info.addr.as_bytes())
            && laddr.as_ref().is_none_or(|x| *x == info.laddr.as_bytes())
            && max_age.is_none_or(|m| info.age_and_idle(now).0 as i64 >= m)
            && !(mine && skip_me);
        if !matches {
            continue;
        }
        killed += 1;
        if mine {
            cx.after = After::Close;
        } else {
            cx.shared.clients.mark_killed(&info);
            workers.insert(info.worker);
        }
    }
    for w in workers {
        cx.shared.wake_worker(w);
    }
    if old_form {
        if killed == 0 {
            return Err("ERR No such client".into());
        }
        cx.out.ok();
    } else {
        cx.out.int(killed);
    }
    Ok(())
}

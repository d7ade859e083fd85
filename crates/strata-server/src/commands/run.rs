//! Running a command that passed dispatch's checks: its handler, then what the server
//! measures and tells of it (statistics, the slow log, the latency monitor, MONITOR, and
//! what CLIENT LIST shows of its connection).

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::session::Connection;
use super::spec::{Spec, runs_script, subcommands_of_row};
use super::{Ctx, Handler, monitor};
use crate::resp::Reply;
use crate::shared::{After, Shared};

/// Runs a command that passed the checks, under the lock its caller took, and counts it.
pub(crate) fn run(
    shared: &Shared,
    conn: &mut Connection,
    i: usize,
    cmd: &Spec,
    handlers: &'static [Handler],
    args: &[&[u8]],
    out: &mut Reply<'_>,
) -> After {
    let Some(handler) = handlers.get(i) else {
        out.error(&format!("ERR unknown command '{}'", cmd.name));
        return After::Continue;
    };
    let outer = OUTER.replace(Some(cmd.name));
    let _restore = RestoreOuter(outer);
    // What CLIENT LIST shows is the client's own command, not those a script or EXEC runs.
    if let Some(info) = conn.info.as_ref().filter(|_| outer.is_none()) {
        info.ran(i);
        if let Some(subs) = subcommands_of_row(i) {
            // A subcommand the table knows, or none: not whatever bytes a client sent.
            let sub = args
                .get(1)
                .map(|s| String::from_utf8_lossy(s).to_lowercase());
            let known = sub.filter(|s| subs.contains(&s.as_str()));
            info.shown().sub_cmd = known.unwrap_or_default();
        }
    }
    let started = Instant::now();
    let mut ctx = Ctx {
        shared,
        now: shared.clock.now_ms(),
        conn,
        out,
        after: After::Continue,
        handlers,
    };
    let notify = crate::notify::on(shared);
    if notify {
        crate::notify::clear();
    }
    let from_script = outer.is_some_and(runs_script);
    // A script is shown to MONITOR before the commands it runs.
    if outer.is_none() && runs_script(cmd.name) && shared.pubsub.monitored() {
        monitor::tell(shared, ctx.conn, args, false);
    }
    let result = match crate::replication::refusal(shared, cmd.flags) {
        Some(e) => Err(e.to_string()),
        None => handler(&mut ctx, args),
    };
    if monitor::shown_after(cmd, args) && shared.pubsub.monitored() {
        monitor::tell(shared, ctx.conn, args, from_script);
    }
    let after = ctx.after;
    if outer.is_none() && changes_what_clients_show(cmd.name) {
        ctx.conn.publish();
    }
    if notify && result.is_ok() {
        crate::notify::emit(shared, args);
    }
    let failed = result.as_ref().err().cloned();
    if let Err(e) = result {
        out.error(&e);
        shared.count_error(&e);
    }
    // A command that parks is counted once, when it is served.
    if !matches!(after, After::Block(_)) {
        let took = Took {
            nanos: started.elapsed().as_nanos() as u64,
            failed,
            outer,
        };
        measure(shared, conn, i, cmd, args, &took);
    }
    after
}

thread_local! {
    /// The command running on this thread that runs others (EXEC, EVAL), if any.
    static OUTER: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Puts back the command that ran this one, however the handler ends (a panic on the
/// script thread is caught, and the thread goes on).
struct RestoreOuter(Option<&'static str>);

impl Drop for RestoreOuter {
    fn drop(&mut self) {
        OUTER.set(self.0);
    }
}

/// How a command went, for [`measure`].
struct Took {
    nanos: u64,
    /// Its error reply, if it failed.
    failed: Option<String>,
    /// The command that ran it (EXEC, a script), if not its client.
    outer: Option<&'static str>,
}

/// Counts a command that ran into its statistics (its subcommand's, for CONFIG GET and the
/// like), the slow log and the latency monitor. EXEC goes to the slow log as the commands
/// it ran, a script as itself.
fn measure(shared: &Shared, conn: &Connection, i: usize, cmd: &Spec, args: &[&[u8]], took: &Took) {
    // Only the subcommands the table knows get statistics of their own: the map cannot be
    // grown by what clients send.
    let known = |sub: &str| subcommands_of_row(i).is_some_and(|subs| subs.contains(&sub));
    let sub = args
        .get(1)
        .map(|s| String::from_utf8_lossy(s).to_lowercase());
    let sub_stats = match sub {
        Some(sub) if known(&sub) => {
            Some(shared.stats.subcommands.get(&format!("{}|{sub}", cmd.name)))
        }
        _ => None,
    };
    if let Some(s) = sub_stats.as_deref().or(shared.command_stats.get(i)) {
        s.record(1, took.nanos);
        if took.failed.is_some() {
            s.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    let micros = took.nanos / 1000;
    let top = took.outer.is_none();
    if ((top && cmd.name != "exec") || took.outer == Some("exec"))
        && shared.stats.slowlog.wants(micros)
    {
        let (addr, name) = match &conn.info {
            Some(info) => (info.addr.as_str(), conn.name.as_deref().unwrap_or_default()),
            None => ("", conn.name.as_deref().unwrap_or_default()),
        };
        let shown = monitor::redact(cmd.name, args);
        let shown: Vec<&[u8]> = shown.iter().map(|a| a.as_ref()).collect();
        shared.stats.slowlog.add(&shown, micros, addr, name);
    }
    if top {
        let event = if cmd.flags.contains(&"fast") {
            "fast-command"
        } else {
            "command"
        };
        shared.stats.latency.note(event, took.nanos / 1_000_000);
    }
}

/// Commands that may change what CLIENT LIST shows of their connection.
fn changes_what_clients_show(name: &str) -> bool {
    matches!(
        name,
        "select"
            | "hello"
            | "client"
            | "auth"
            | "reset"
            | "multi"
            | "exec"
            | "discard"
            | "subscribe"
            | "psubscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "punsubscribe"
            | "sunsubscribe"
    )
}

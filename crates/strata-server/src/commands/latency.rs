//! SLOWLOG and LATENCY: what `crate::stats` measured of the commands, as the operator asks.

use std::fmt::Write as _;

use super::spec::SPECS;
use super::spec::has_subcommands;
use super::{Ctx, Outcome, int_arg, upper};
use crate::stats::CommandStats;

fn help(cx: &mut Ctx<'_, '_>, lines: &[&str]) {
    cx.out.array(lines.len());
    for line in lines {
        cx.out.simple(line);
    }
}

fn unknown(a: &[&[u8]], command: &str) -> String {
    format!(
        "ERR unknown subcommand '{}'. Try {command} HELP.",
        String::from_utf8_lossy(a[1])
    )
}

/// `SLOWLOG GET [count] | LEN | RESET | HELP`.
pub(super) fn slowlog(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let log = &cx.shared.stats.slowlog;
    match (upper(a[1]).as_str(), a.len()) {
        ("GET", 2 | 3) => {
            let count = match a.get(2) {
                None => Some(10),
                Some(n) => match int_arg(n)? {
                    -1 => None,
                    n if n < -1 => {
                        return Err("ERR count should be greater than or equal to -1".into());
                    }
                    n => Some(n as usize),
                },
            };
            let entries = log.newest(count);
            cx.out.array(entries.len());
            for e in entries {
                cx.out.array(6);
                cx.out.int(e.id as i64);
                cx.out.int(e.at as i64);
                cx.out.int(e.micros as i64);
                cx.out.array(e.args.len());
                for arg in &e.args {
                    cx.out.bulk(arg);
                }
                cx.out.bulk(e.addr.as_bytes());
                cx.out.bulk(&e.name);
            }
        }
        ("LEN", 2) => cx.out.int(log.len() as i64),
        ("RESET", 2) => {
            log.reset();
            cx.out.ok();
        }
        ("HELP", 2) => help(
            cx,
            &[
                "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET [<count>]",
                "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                "    Entries are made of:",
                "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                "    client name",
                "LEN",
                "    Return the length of the slowlog.",
                "RESET",
                "    Reset the slowlog.",
                "HELP",
                "    Print this help.",
            ],
        ),
        (sub @ ("GET" | "LEN" | "RESET" | "HELP"), _) => {
            return Err(super::wrong_args(&format!(
                "slowlog|{}",
                sub.to_lowercase()
            )));
        }
        _ => return Err(unknown(a, "SLOWLOG")),
    }
    Ok(())
}

/// `LATENCY LATEST | HISTORY event | RESET [event ...] | DOCTOR | GRAPH event |
/// HISTOGRAM [command ...] | HELP`.
pub(super) fn latency(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let monitor = &cx.shared.stats.latency;
    match (upper(a[1]).as_str(), a.len()) {
        ("LATEST", 2) => {
            let events = monitor.all();
            cx.out.array(events.len());
            for (name, h) in events {
                let (at, ms) = h.samples.back().copied().unwrap_or_default();
                cx.out.array(4);
                cx.out.bulk(name.as_bytes());
                cx.out.int(at as i64);
                cx.out.int(ms as i64);
                cx.out.int(h.max as i64);
            }
        }
        ("HISTORY", 3) => {
            let name = String::from_utf8_lossy(a[2]);
            let samples = monitor
                .history(&name)
                .map(|h| h.samples)
                .unwrap_or_default();
            cx.out.array(samples.len());
            for (at, ms) in samples {
                cx.out.array(2);
                cx.out.int(at as i64);
                cx.out.int(ms as i64);
            }
        }
        ("RESET", _) => {
            let names: Vec<String> = a[2..]
                .iter()
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect();
            cx.out.int(monitor.reset(&names) as i64);
        }
        ("DOCTOR", 2) => {
            let report = doctor(cx);
            cx.out.verbatim(&report);
        }
        ("GRAPH", 3) => {
            let name = String::from_utf8_lossy(a[2]).into_owned();
            let Some(h) = monitor.history(&name).filter(|h| !h.samples.is_empty()) else {
                return Err(format!("ERR No samples available for event '{name}'"));
            };
            let mut text = format!(
                "{name} - high {} ms, all time high {} ms\n",
                high(&h),
                h.max
            );
            for (at, ms) in &h.samples {
                let bar = "#".repeat((ms * 40 / h.max.max(1)).max(1) as usize);
                let _ = writeln!(text, "{at} {ms:>6} ms {bar}");
            }
            cx.out.verbatim(&text);
        }
        ("HISTOGRAM", _) => histogram(cx, &a[2..]),
        ("HELP", 2) => help(
            cx,
            &[
                "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return a human readable latency analysis report.",
                "GRAPH <event>",
                "    Return an ASCII latency graph for the <event> class.",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "    (default: reset all data for all event classes)",
                "HISTOGRAM [COMMAND ...]",
                "    Return a cumulative distribution of latencies in the format of a histogram \
                 for the specified command names.",
                "    If no commands are specified then all histograms are replied.",
                "HELP",
                "    Prints this help.",
            ],
        ),
        (sub @ ("LATEST" | "HISTORY" | "DOCTOR" | "GRAPH" | "HELP"), _) => {
            return Err(super::wrong_args(&format!(
                "latency|{}",
                sub.to_lowercase()
            )));
        }
        _ => return Err(unknown(a, "LATENCY")),
    }
    Ok(())
}

/// The highest sample kept.
fn high(h: &crate::stats::EventHistory) -> u64 {
    h.samples.iter().map(|&(_, ms)| ms).max().unwrap_or(0)
}

/// LATENCY DOCTOR's report: each event's spikes, their average and worst, and what to look at.
fn doctor(cx: &Ctx<'_, '_>) -> String {
    let events = cx.shared.stats.latency.all();
    if events.is_empty() {
        return "No latency spike was observed during the lifetime of this server \
                (latency-monitor-threshold is 0, the monitor is off, when none is ever seen)."
            .to_string();
    }
    let mut text = String::from("Latency events observed by this server:\n\n");
    for (i, (name, h)) in events.iter().enumerate() {
        let n = h.samples.len().max(1) as u64;
        let avg = h.samples.iter().map(|&(_, ms)| ms).sum::<u64>() / n;
        let first = h.samples.front().map_or(0, |s| s.0);
        let last = h.samples.back().map_or(0, |s| s.0);
        let _ = writeln!(
            text,
            "{}. {name}: {} latency spikes (average {avg}ms, over {} seconds). Worst all time \
             event {}ms.",
            i + 1,
            h.samples.len(),
            last.saturating_sub(first),
            h.max
        );
    }
    text.push_str(
        "\nAdvice: `command` and `fast-command` spikes are single commands that ran long: \
         SLOWLOG GET names them. Commands over large collections (SMEMBERS, HGETALL, KEYS, \
         ZRANGE over many members) take time in proportion to what they return; a loaded \
         or slow disk shows in every command that reads from it.\n",
    );
    text
}

/// Adds a command that ran to those LATENCY HISTOGRAM reports, once.
fn take<'a>(name: &str, s: &'a CommandStats, chosen: &mut Vec<(String, &'a CommandStats)>) {
    if s.calls.load(std::sync::atomic::Ordering::Relaxed) > 0
        && !chosen.iter().any(|(n, _)| n == name)
    {
        chosen.push((name.to_string(), s));
    }
}

/// `LATENCY HISTOGRAM [command ...]`: for each command named (a command with subcommands
/// names each of them that ran), its calls and cumulative latency buckets; every command
/// that ran when none is named. Names that are no command are passed over.
fn histogram(cx: &mut Ctx<'_, '_>, names: &[&[u8]]) {
    let subs = cx.shared.stats.subcommands.all();
    let mut chosen: Vec<(String, &CommandStats)> = Vec::new();
    let rows = SPECS.iter().zip(&cx.shared.command_stats);
    if names.is_empty() {
        for (spec, s) in rows {
            take(spec.name, s, &mut chosen);
        }
        for (name, s) in &subs {
            take(name, s, &mut chosen);
        }
    } else {
        for asked in names {
            let asked = String::from_utf8_lossy(asked).to_lowercase();
            if let Some((spec, s)) = rows.clone().find(|(spec, _)| spec.name == asked) {
                if has_subcommands(spec.name) {
                    let prefix = format!("{}|", spec.name);
                    for (name, s) in subs.iter().filter(|(n, _)| n.starts_with(&prefix)) {
                        take(name, s, &mut chosen);
                    }
                }
                take(spec.name, s, &mut chosen);
            } else if let Some((name, s)) = subs.iter().find(|(n, _)| *n == asked) {
                take(name, s, &mut chosen);
            }
        }
    }
    cx.out.map(chosen.len());
    for (name, s) in chosen {
        cx.out.bulk(name.as_bytes());
        cx.out.map(2);
        cx.out.bulk(b"calls");
        cx.out
            .int(s.calls.load(std::sync::atomic::Ordering::Relaxed) as i64);
        cx.out.bulk(b"histogram_usec");
        let buckets = s.cumulative();
        cx.out.map(buckets.len());
        for (bound, count) in buckets {
            cx.out.int(bound as i64);
            cx.out.int(count as i64);
        }
    }
}

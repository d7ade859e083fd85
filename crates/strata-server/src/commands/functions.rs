//! FUNCTION LOAD, DELETE, FLUSH, LIST, DUMP, RESTORE, STATS, KILL and HELP. The libraries
//! themselves live in `crate::scripting`; each change is written to the engine here, so that
//! the libraries outlive the process.

use strata::WriteBatch;

use super::scripting::{FUNCTION_PREFIX, flush_mode, help, library_key, unknown_subcommand};
use super::{Ctx, Outcome, engine, upper, write_opts};
use crate::glob::matches;
use crate::shared::Shared;

/// What FUNCTION DUMP's payload starts with, and its version.
const DUMP_MAGIC: &[u8] = b"STRATA-FUNCTIONS-1\n";

fn keep(shared: &Shared, batch: WriteBatch) -> Outcome {
    shared.db.write(batch, write_opts(shared)).map_err(engine)
}

fn stored_range() -> (Vec<u8>, Vec<u8>) {
    let mut end = FUNCTION_PREFIX.to_vec();
    end.push(0xFF);
    (FUNCTION_PREFIX.to_vec(), end)
}

pub(super) fn function(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let sub = upper(a.get(1).copied().unwrap_or_default());
    let shared = cx.shared;
    match (sub.as_str(), a.len()) {
        ("LOAD", n) if n >= 3 => {
            let mut replace = false;
            for opt in a.get(2..n - 1).unwrap_or_default() {
                if !opt.eq_ignore_ascii_case(b"replace") {
                    return Err(format!(
                        "ERR Unknown option given: {}",
                        String::from_utf8_lossy(opt)
                    ));
                }
                replace = true;
            }
            let code = a.last().copied().unwrap_or_default();
            let name = shared.scripts.load_library(code, replace)?;
            let mut batch = WriteBatch::new();
            batch.put(&library_key(&name), code);
            keep(shared, batch)?;
            cx.out.bulk(name.as_bytes());
        }
        ("DELETE", 3) => {
            let name = String::from_utf8_lossy(a.get(2).copied().unwrap_or_default());
            if !shared.scripts.with_functions(|f| f.delete(&name)) {
                return Err("ERR Library not found".into());
            }
            let mut batch = WriteBatch::new();
            batch.delete(&library_key(&name));
            keep(shared, batch)?;
            cx.out.ok();
        }
        ("FLUSH", 2 | 3) => {
            flush_mode(a.get(2).copied())
                .map_err(|_| "ERR FUNCTION FLUSH only supports SYNC|ASYNC option".to_string())?;
            shared.scripts.with_functions(|f| f.flush());
            let (lo, hi) = stored_range();
            let mut batch = WriteBatch::new();
            batch.delete_range(&lo, &hi);
            keep(shared, batch)?;
            cx.out.ok();
        }
        ("LIST", _) => list(cx, a)?,
        ("DUMP", 2) => {
            let payload = dump(shared);
            cx.out.bulk(&payload);
        }
        ("RESTORE", 3 | 4) => {
            restore(shared, a)?;
            cx.out.ok();
        }
        ("STATS", 2) => stats(cx),
        ("KILL", 2) => {
            shared.scripts.kill(true)?;
            cx.out.ok();
        }
        ("HELP", 2) => help(cx, FUNCTION_HELP),
        _ => return Err(unknown_subcommand("FUNCTION", &sub)),
    }
    Ok(())
}

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries.",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload.",
    "STATS",
    "    Return information about the current function running.",
    "KILL",
    "    Kill the current running function.",
    "HELP",
    "    Print this help.",
];

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
fn list(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let (mut pattern, mut with_code) = (None, false);
    let mut i = 2;
    while let Some(arg) = a.get(i) {
        match upper(arg).as_str() {
            "WITHCODE" if !with_code => with_code = true,
            "LIBRARYNAME" if pattern.is_none() => {
                i += 1;
                pattern = Some(
                    a.get(i)
                        .copied()
                        .ok_or("ERR library name argument was not given")?,
                );
            }
            _ => {
                return Err(format!(
                    "ERR Unknown argument {}",
                    String::from_utf8_lossy(arg)
                ));
            }
        }
        i += 1;
    }
    let out = &mut *cx.out;
    cx.shared.scripts.with_functions(|f| {
        let libs: Vec<_> = f
            .libraries
            .values()
            .filter(|l| pattern.is_none_or(|p| matches(p, l.name.as_bytes())))
            .collect();
        out.array(libs.len());
        for lib in libs {
            out.map(if with_code { 4 } else { 3 });
            out.bulk(b"library_name");
            out.bulk(lib.name.as_bytes());
            out.bulk(b"engine");
            out.bulk(b"LUA");
            out.bulk(b"functions");
            out.array(lib.functions.len());
            for (name, func) in &lib.functions {
                out.map(3);
                out.bulk(b"name");
                out.bulk(name.as_bytes());
                out.bulk(b"description");
                match &func.description {
                    Some(d) => out.bulk(d.as_bytes()),
                    None => out.null(),
                }
                out.bulk(b"flags");
                let flags = func.flags.names();
                out.set(flags.len());
                for flag in flags {
                    out.bulk(flag.as_bytes());
                }
            }
            if with_code {
                out.bulk(b"library_code");
                out.bulk(&lib.code);
            }
        }
    });
    Ok(())
}

/// FUNCTION DUMP's payload: the magic line, then each library's code as a length (eight
/// bytes, big-endian) and its bytes.
fn dump(shared: &Shared) -> Vec<u8> {
    let mut payload = DUMP_MAGIC.to_vec();
    shared.scripts.with_functions(|f| {
        for lib in f.libraries.values() {
            payload.extend_from_slice(&(lib.code.len() as u64).to_be_bytes());
            payload.extend_from_slice(&lib.code);
        }
    });
    payload
}

/// The libraries' code in a dump, or the error for a payload that is not one.
fn undump(payload: &[u8]) -> Result<Vec<&[u8]>, String> {
    let bad = || "ERR payload version or checksum are wrong".to_string();
    let mut rest = payload.strip_prefix(DUMP_MAGIC).ok_or_else(bad)?;
    let mut codes = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let len = usize::try_from(u64::from_be_bytes(*len)).map_err(|_| bad())?;
        if len > tail.len() {
            return Err(bad());
        }
        let (code, tail) = tail.split_at(len);
        codes.push(code);
        rest = tail;
    }
    Ok(codes)
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]: all of the payload's libraries or none.
fn restore(shared: &Shared, a: &[&[u8]]) -> Outcome {
    let policy = a.get(3).map(|p| upper(p));
    let policy =
        match policy.as_deref() {
            None | Some("APPEND") => "APPEND",
            Some(p @ ("FLUSH" | "REPLACE")) => p,
            Some(_) => return Err(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
                    .into(),
            ),
        };
    let codes = undump(a.get(2).copied().unwrap_or_default())?;
    // What the libraries were, to go back to if one of the payload's does not load.
    let before: Vec<Vec<u8>> = shared
        .scripts
        .with_functions(|f| f.libraries.values().map(|l| l.code.clone()).collect());
    if policy == "FLUSH" {
        shared.scripts.with_functions(|f| f.flush());
    }
    let mut loaded = Vec::new();
    for code in &codes {
        match shared.scripts.load_library(code, policy != "APPEND") {
            Ok(name) => loaded.push((name, code)),
            Err(e) => {
                // RESTORE names a library it cannot add without quotes, as Redis does.
                let e = e
                    .replace("Library '", "Library ")
                    .replace("' already", " already");
                shared.scripts.with_functions(|f| f.flush());
                for code in &before {
                    let _ = shared.scripts.load_library(code, true);
                }
                return Err(e);
            }
        }
    }
    let mut batch = WriteBatch::new();
    if policy == "FLUSH" {
        let (lo, hi) = stored_range();
        batch.delete_range(&lo, &hi);
    }
    for (name, code) in loaded {
        batch.put(&library_key(&name), code);
    }
    keep(shared, batch)
}

/// FUNCTION STATS: the running function, and the libraries and functions loaded.
fn stats(cx: &mut Ctx<'_, '_>) {
    let (running, libraries, functions) = cx.shared.scripts.stats();
    let out = &mut *cx.out;
    out.map(2);
    out.bulk(b"running_script");
    match running {
        None => out.null(),
        Some((name, command, ms)) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(name.as_bytes());
            out.bulk(b"command");
            out.array(command.len());
            for a in &command {
                out.bulk(a);
            }
            out.bulk(b"duration_ms");
            out.int(ms as i64);
        }
    }
    out.bulk(b"engines");
    out.map(1);
    out.bulk(b"LUA");
    out.map(2);
    out.bulk(b"libraries_count");
    out.int(libraries as i64);
    out.bulk(b"functions_count");
    out.int(functions as i64);
}

//! What crosses between Lua and the protocol: a command's reply read into Lua values for
//! `redis.call`, and a script's return value written as a reply, in RESP2 or RESP3, as
//! Redis's scripting documentation lays the two mappings out.

use mlua::{Lua, Table, Value};

use crate::resp::Reply;

/// How deep a returned table may nest before the reply stops with an error (a table that
/// holds itself would otherwise never end).
const MAX_DEPTH: usize = 1000;

/// Reads one RESP reply from `buf` at `*at` as the Lua value Redis hands a script: integers
/// as numbers, bulk strings as strings, a null as `false` (RESP2) or `nil` (RESP3), arrays as
/// tables, status replies as `{ok=...}` and errors as `{err=...}`; RESP3's maps, sets,
/// doubles, booleans, big numbers and verbatim strings as Redis documents them.
pub(crate) fn reply_to_lua(lua: &Lua, buf: &[u8], at: &mut usize) -> mlua::Result<Value> {
    let bad = || mlua::Error::runtime("ERR a reply the script could not read");
    let tag = *buf.get(*at).ok_or_else(bad)?;
    let end = buf
        .get(*at..)
        .and_then(|rest| rest.windows(2).position(|w| w == b"\r\n"))
        .ok_or_else(bad)?
        + *at;
    let line = buf.get(*at + 1..end).ok_or_else(bad)?;
    *at = end + 2;
    let number = || -> mlua::Result<i64> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)
    };
    let text = |lua: &Lua| lua.create_string(line).map(Value::String);
    let tagged = |lua: &Lua, name: &str, v: Value| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(name, v)?;
        Ok(Value::Table(t))
    };
    match tag {
        b':' => Ok(Value::Number(number()? as f64)),
        b'+' => tagged(lua, "ok", text(lua)?),
        b'-' => tagged(lua, "err", text(lua)?),
        b'$' | b'=' => {
            let n = number()?;
            if n < 0 {
                return Ok(Value::Boolean(false));
            }
            let body = buf.get(*at..*at + n as usize).ok_or_else(bad)?;
            *at += n as usize + 2;
            if tag == b'$' {
                return Ok(Value::String(lua.create_string(body)?));
            }
            let (format, string) = (body.get(..3).unwrap_or_default(), body.get(4..));
            let v = lua.create_table()?;
            v.raw_set("format", lua.create_string(format)?)?;
            v.raw_set("string", lua.create_string(string.unwrap_or_default())?)?;
            tagged(lua, "verbatim_string", Value::Table(v))
        }
        b'*' | b'~' | b'>' => {
            let n = number()?;
            if n < 0 {
                return Ok(Value::Boolean(false));
            }
            let t = lua.create_table()?;
            for i in 1..=n {
                let item = reply_to_lua(lua, buf, at)?;
                if tag == b'~' {
                    t.raw_set(item, true)?;
                } else {
                    t.raw_set(i, item)?;
                }
            }
            if tag == b'~' {
                tagged(lua, "set", Value::Table(t))
            } else {
                Ok(Value::Table(t))
            }
        }
        b'%' => {
            let t = lua.create_table()?;
            for _ in 0..number()? {
                let k = reply_to_lua(lua, buf, at)?;
                let v = reply_to_lua(lua, buf, at)?;
                t.raw_set(k, v)?;
            }
            tagged(lua, "map", Value::Table(t))
        }
        b'_' => Ok(Value::Nil),
        b'#' => Ok(Value::Boolean(line == b"t")),
        b',' => {
            let d = std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .ok_or_else(bad)?;
            tagged(lua, "double", Value::Number(d))
        }
        b'(' => tagged(lua, "big_number", text(lua)?),
        _ => Err(bad()),
    }
}

/// Items a script's reply may hold: a table that holds itself twice would otherwise make a
/// reply of 2^1000 items.
const MAX_ITEMS: usize = 1 << 24;

/// Writes a script's return value as its reply; false when it holds more than
/// [`MAX_ITEMS`] items (what was written is then to be thrown away).
pub(crate) fn lua_to_reply(value: &Value, out: &mut Reply<'_>) -> bool {
    let mut budget = MAX_ITEMS;
    write_value(value, out, 0, &mut budget);
    budget > 0
}

fn write_value(value: &Value, out: &mut Reply<'_>, depth: usize, budget: &mut usize) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    if depth > MAX_DEPTH {
        out.error("ERR reached lua stack limit");
        return;
    }
    match value {
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Boolean(b) => match (out.is_resp3(), b) {
            (true, b) => out.boolean(*b),
            (false, true) => out.int(1),
            (false, false) => out.null(),
        },
        Value::Integer(n) => out.int(*n),
        Value::Number(n) => out.int(*n as i64),
        Value::Table(t) => write_table(t, out, depth, budget),
        _ => out.null(),
    }
}

/// A double as RESP3 writes it: `inf`, `-inf`, `nan`, or the shortest text that reads back
/// as the same number.
fn double_text(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d.is_infinite() {
        if d > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{d}")
    }
}

fn field(t: &Table, name: &str) -> Value {
    t.raw_get(name).unwrap_or(Value::Nil)
}

fn write_table(t: &Table, out: &mut Reply<'_>, depth: usize, budget: &mut usize) {
    if let Value::String(e) = field(t, "err") {
        out.error_bytes(&e.as_bytes());
        return;
    }
    if let Value::String(s) = field(t, "ok") {
        out.simple_bytes(&s.as_bytes());
        return;
    }
    if let Value::Number(d) = field(t, "double") {
        out.double(&double_text(d));
        return;
    }
    if let Value::Integer(d) = field(t, "double") {
        out.double(&double_text(d as f64));
        return;
    }
    if let Value::String(s) = field(t, "big_number") {
        out.big_number(&s.as_bytes());
        return;
    }
    if let Value::Table(v) = field(t, "verbatim_string") {
        let text = match field(&v, "string") {
            Value::String(s) => s.as_bytes().to_vec(),
            _ => Vec::new(),
        };
        out.verbatim(&String::from_utf8_lossy(&text));
        return;
    }
    if let Value::Table(m) = field(t, "map") {
        out.map(pair_count(&m));
        for (k, v) in m.pairs::<Value, Value>().filter_map(Result::ok) {
            write_value(&k, out, depth + 1, budget);
            write_value(&v, out, depth + 1, budget);
        }
        return;
    }
    if let Value::Table(s) = field(t, "set") {
        out.set(pair_count(&s));
        for (k, _) in s.pairs::<Value, Value>().filter_map(Result::ok) {
            write_value(&k, out, depth + 1, budget);
        }
        return;
    }
    // An array: the items from 1 up to the first nil, counted first and then written one by
    // one, so that a long one's values are never all held at once (each held value takes a
    // slot of Lua's reference stack).
    let mut n = 0;
    while t.raw_get::<Value>(n + 1).is_ok_and(|v| !v.is_nil()) {
        n += 1;
    }
    out.array(n);
    for i in 1..=n {
        write_value(&t.raw_get(i).unwrap_or(Value::Nil), out, depth + 1, budget);
    }
}

fn pair_count(t: &Table) -> usize {
    t.pairs::<Value, Value>().filter(Result::is_ok).count()
}

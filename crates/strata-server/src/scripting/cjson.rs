//! The `cjson` library Redis ships (Lua CJSON's API): `encode`, `decode`, `null` and the
//! settings scripts may change (`encode_max_depth`, `decode_max_depth`,
//! `encode_invalid_numbers`, `decode_invalid_numbers`, `encode_keep_buffer`,
//! `encode_number_precision`, `encode_sparse_array`), with Lua CJSON's rules: a table whose
//! keys are all positive integers is an array (an excessively sparse one is refused), any
//! other table an object whose keys must be strings or numbers, and `/` is escaped.

use std::sync::{Arc, Mutex};

use mlua::{LightUserData, Lua, Table, Value};

/// What scripts may change, kept for the interpreter's life as Lua CJSON keeps it.
#[derive(Clone, Copy)]
struct Settings {
    encode_max_depth: usize,
    decode_max_depth: usize,
    /// 0: refuse NaN and infinity, 1: write them as `nan`/`inf`, 2: write `null`.
    encode_invalid: u8,
    decode_invalid: bool,
    precision: usize,
    sparse_convert: bool,
    sparse_ratio: usize,
    sparse_safe: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid: 0,
            decode_invalid: true,
            precision: 14,
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
        }
    }
}

type Shared = Arc<Mutex<Settings>>;

/// The deepest nesting encode and decode may be set to.
const MAX_DEPTH: usize = 1000;

fn settings(s: &Shared) -> Settings {
    *s.lock().unwrap_or_else(|e| e.into_inner())
}

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

pub(crate) fn library(lua: &Lua) -> mlua::Result<Table> {
    let shared: Shared = Arc::default();
    let t = lua.create_table()?;
    t.raw_set("null", null())?;
    let s = shared.clone();
    t.raw_set(
        "encode",
        lua.create_function(move |_, v: Value| {
            let mut out = Vec::new();
            encode(&v, &settings(&s), 0, &mut out).map_err(mlua::Error::runtime)?;
            Ok(mlua::BString::from(out))
        })?,
    )?;
    let s = shared.clone();
    t.raw_set(
        "decode",
        lua.create_function(move |lua, text: mlua::String| {
            let bytes = text.as_bytes();
            let mut p = Parser {
                lua,
                text: &bytes,
                at: 0,
                settings: settings(&s),
            };
            p.document().map_err(mlua::Error::runtime)
        })?,
    )?;
    let depth_setting = |field: fn(&mut Settings) -> &mut usize| {
        let s = shared.clone();
        move |_: &Lua, n: Option<f64>| {
            let mut st = s.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = n {
                if !(1.0..=2_147_483_647.0).contains(&n) {
                    return Err(mlua::Error::runtime(
                        "bad argument #1 to '?' (expected integer between 1 and 2147483647)",
                    ));
                }
                // Deeper than this, the Rust stack the encoder and decoder recurse on would
                // not do.
                *field(&mut st) = (n as usize).min(MAX_DEPTH);
            }
            Ok(*field(&mut st))
        }
    };
    t.raw_set(
        "encode_max_depth",
        lua.create_function(depth_setting(|s| &mut s.encode_max_depth))?,
    )?;
    t.raw_set(
        "decode_max_depth",
        lua.create_function(depth_setting(|s| &mut s.decode_max_depth))?,
    )?;
    t.raw_set(
        "encode_number_precision",
        lua.create_function(depth_setting(|s| &mut s.precision))?,
    )?;
    let s = shared.clone();
    t.raw_set(
        "encode_invalid_numbers",
        lua.create_function(move |_, v: Value| {
            let mut st = s.lock().unwrap_or_else(|e| e.into_inner());
            match v {
                Value::Boolean(b) => st.encode_invalid = u8::from(b),
                Value::String(s) if s.as_bytes().as_ref() == b"null" => st.encode_invalid = 2,
                Value::String(s) if s.as_bytes().as_ref() == b"on" => st.encode_invalid = 1,
                Value::String(s) if s.as_bytes().as_ref() == b"off" => st.encode_invalid = 0,
                _ => {}
            }
            Ok(st.encode_invalid != 0)
        })?,
    )?;
    let s = shared.clone();
    t.raw_set(
        "decode_invalid_numbers",
        lua.create_function(move |_, v: Option<bool>| {
            let mut st = s.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = v {
                st.decode_invalid = b;
            }
            Ok(st.decode_invalid)
        })?,
    )?;
    t.raw_set(
        "encode_keep_buffer",
        lua.create_function(|_, v: Option<bool>| Ok(v.unwrap_or(true)))?,
    )?;
    let s = shared;
    t.raw_set(
        "encode_sparse_array",
        lua.create_function(
            move |_, (convert, ratio, safe): (Option<bool>, Option<f64>, Option<f64>)| {
                let mut st = s.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(c) = convert {
                    st.sparse_convert = c;
                }
                if let Some(r) = ratio {
                    st.sparse_ratio = r.max(0.0) as usize;
                }
                if let Some(x) = safe {
                    st.sparse_safe = x.max(0.0) as usize;
                }
                Ok((st.sparse_convert, st.sparse_ratio, st.sparse_safe))
            },
        )?,
    )?;
    t.raw_set("_NAME", "cjson")?;
    t.raw_set("_VERSION", "2.1.0")?;
    Ok(t)
}

/// A number as `%.<precision>g` writes it.
fn number_text(n: f64, precision: usize) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        return format!("{}", n as i64);
    }
    let p = precision.clamp(1, 17);
    let sci = format!("{:.*e}", p - 1, n);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let m = if mantissa.contains('.') {
            mantissa.trim_end_matches('0').trim_end_matches('.')
        } else {
            mantissa
        };
        format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        let fixed = format!("{n:.decimals$}");
        if fixed.contains('.') {
            fixed
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        } else {
            fixed
        }
    }
}

fn encode_string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => {
                out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
            }
            b => out.push(b),
        }
    }
    out.push(b'"');
}

fn encode_number(n: f64, s: &Settings, out: &mut Vec<u8>) -> Result<(), String> {
    if n.is_finite() {
        out.extend_from_slice(number_text(n, s.precision).as_bytes());
        return Ok(());
    }
    match s.encode_invalid {
        0 => Err("Cannot serialise number: must not be NaN or Inf".into()),
        1 => {
            let text = if n.is_nan() {
                "nan"
            } else if n > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            out.extend_from_slice(text.as_bytes());
            Ok(())
        }
        _ => {
            out.extend_from_slice(b"null");
            Ok(())
        }
    }
}

/// The length of a table that is an array (every key a positive integer), `None` otherwise.
fn array_length(t: &Table, s: &Settings) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair.map_err(|e| e.to_string())?;
        let index = match k {
            Value::Integer(i) if i >= 1 => i as usize,
            Value::Number(f) if f >= 1.0 && f.fract() == 0.0 => f as usize,
            _ => return Ok(None),
        };
        max = max.max(index);
        items += 1;
    }
    if s.sparse_ratio > 0 && max > s.sparse_safe && max > items * s.sparse_ratio {
        if s.sparse_convert {
            return Ok(None);
        }
        return Err("Cannot serialise table: excessively sparse array".into());
    }
    Ok(Some(max))
}

fn encode(v: &Value, s: &Settings, depth: usize, out: &mut Vec<u8>) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::Number(n) => encode_number(*n, s, out)?,
        Value::String(text) => encode_string(&text.as_bytes(), out),
        Value::Table(t) => {
            let depth = depth + 1;
            if depth > s.encode_max_depth {
                return Err(format!("Cannot serialise, excessive nesting ({depth})"));
            }
            match array_length(t, s)? {
                // An empty table is an empty object, as in Lua CJSON.
                Some(0) => out.extend_from_slice(b"{}"),
                Some(n) => {
                    out.push(b'[');
                    for i in 1..=n {
                        if i > 1 {
                            out.push(b',');
                        }
                        let item: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                        encode(&item, s, depth, out)?;
                    }
                    out.push(b']');
                }
                None => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in t.pairs::<Value, Value>() {
                        let (k, item) = pair.map_err(|e| e.to_string())?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &k {
                            Value::String(text) => encode_string(&text.as_bytes(), out),
                            Value::Integer(n) => encode_string(n.to_string().as_bytes(), out),
                            Value::Number(n) => {
                                encode_string(number_text(*n, s.precision).as_bytes(), out)
                            }
                            other => {
                                return Err(format!(
                                    "Cannot serialise {}: table key must be a number or string",
                                    other.type_name()
                                ));
                            }
                        }
                        out.push(b':');
                        encode(&item, s, depth, out)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            ));
        }
    }
    Ok(())
}

struct Parser<'a> {
    lua: &'a Lua,
    text: &'a [u8],
    at: usize,
    settings: Settings,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> String {
        format!(
            "Expected {what} but found invalid token at character {}",
            self.at + 1
        )
    }

    fn skip_space(&mut self) {
        while self
            .text
            .get(self.at)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    fn document(&mut self) -> Result<Value, String> {
        let v = self.value(0)?;
        self.skip_space();
        if self.at < self.text.len() {
            return Err(self.error("the end"));
        }
        Ok(v)
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        self.skip_space();
        let lua_err = |e: mlua::Error| e.to_string();
        match self.text.get(self.at) {
            Some(b'{') | Some(b'[') => {
                let depth = depth + 1;
                if depth > self.settings.decode_max_depth {
                    return Err(format!(
                        "Found too many nested data structures ({depth}) at character {}",
                        self.at + 1
                    ));
                }
                let object = self.text.get(self.at) == Some(&b'{');
                self.at += 1;
                let t = self.lua.create_table().map_err(lua_err)?;
                let close = if object { b'}' } else { b']' };
                self.skip_space();
                if self.text.get(self.at) == Some(&close) {
                    self.at += 1;
                    return Ok(Value::Table(t));
                }
                let mut n = 0;
                loop {
                    if object {
                        self.skip_space();
                        if self.text.get(self.at) != Some(&b'"') {
                            return Err(self.error("object key string"));
                        }
                        let k = self.string()?;
                        self.skip_space();
                        if self.text.get(self.at) != Some(&b':') {
                            return Err(self.error("colon"));
                        }
                        self.at += 1;
                        let v = self.value(depth)?;
                        t.raw_set(k, v).map_err(lua_err)?;
                    } else {
                        n += 1;
                        let v = self.value(depth)?;
                        t.raw_set(n, v).map_err(lua_err)?;
                    }
                    self.skip_space();
                    match self.text.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(&b) if b == close => {
                            self.at += 1;
                            return Ok(Value::Table(t));
                        }
                        _ => return Err(self.error("comma or end")),
                    }
                }
            }
            Some(b'"') => self.string(),
            Some(b't') if self.text.get(self.at..self.at + 4) == Some(b"true") => {
                self.at += 4;
                Ok(Value::Boolean(true))
            }
            Some(b'f') if self.text.get(self.at..self.at + 5) == Some(b"false") => {
                self.at += 5;
                Ok(Value::Boolean(false))
            }
            Some(b'n') if self.text.get(self.at..self.at + 4) == Some(b"null") => {
                self.at += 4;
                Ok(null())
            }
            Some(_) => self.number(),
            None => Err(self.error("value")),
        }
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.at;
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
        {
            self.at += 1;
        }
        let token = std::str::from_utf8(self.text.get(start..self.at).unwrap_or_default())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let invalid = matches!(token.as_str(), "nan" | "-nan" | "inf" | "-inf" | "infinity");
        let n = if invalid && !self.settings.decode_invalid {
            None
        } else if token.starts_with("0x") || token.starts_with("-0x") {
            let neg = token.starts_with('-');
            let digits = token.trim_start_matches('-').trim_start_matches("0x");
            u64::from_str_radix(digits, 16)
                .ok()
                .map(|v| if neg { -(v as f64) } else { v as f64 })
        } else {
            token.parse::<f64>().ok()
        };
        match n {
            Some(n) if !token.is_empty() => Ok(Value::Number(n)),
            _ => {
                self.at = start;
                Err(self.error("value"))
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.error("unicode escape"))?;
        self.at += 4;
        Ok(digits)
    }

    fn string(&mut self) -> Result<Value, String> {
        self.at += 1;
        let mut s = Vec::new();
        loop {
            let b = *self
                .text
                .get(self.at)
                .ok_or_else(|| self.error("string end"))?;
            self.at += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let e = *self.text.get(self.at).ok_or_else(|| self.error("escape"))?;
                    self.at += 1;
                    match e {
                        b'"' | b'\\' | b'/' => s.push(e),
                        b'b' => s.push(0x08),
                        b'f' => s.push(0x0c),
                        b'n' => s.push(b'\n'),
                        b'r' => s.push(b'\r'),
                        b't' => s.push(b'\t'),
                        b'u' => {
                            let mut c = self.hex4()?;
                            if (0xD800..0xDC00).contains(&c)
                                && self.text.get(self.at..self.at + 2) == Some(b"\\u")
                            {
                                self.at += 2;
                                let low = self.hex4()?;
                                c = 0x10000
                                    + ((c - 0xD800) << 10)
                                    + (low.wrapping_sub(0xDC00) & 0x3FF);
                            }
                            let ch =
                                char::from_u32(c).ok_or_else(|| self.error("unicode escape"))?;
                            let mut buf = [0u8; 4];
                            s.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.error("escape")),
                    }
                }
                b => s.push(b),
            }
        }
        self.lua
            .create_string(&s)
            .map(Value::String)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(code: &str) -> String {
        let lua = Lua::new();
        lua.globals().set("cjson", library(&lua).unwrap()).unwrap();
        match lua.load(code).eval::<Value>() {
            Ok(Value::String(s)) => s.to_string_lossy(),
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn encodes_as_lua_cjson() {
        assert_eq!(
            eval("return cjson.encode({1, 2, 'a/b'})"),
            r#"[1,2,"a\/b"]"#
        );
        assert_eq!(
            eval("return cjson.encode({a = {true, false}})"),
            r#"{"a":[true,false]}"#
        );
        assert_eq!(eval("return cjson.encode(0.1)"), "0.1");
        assert_eq!(eval("return cjson.encode(1/3)"), "0.33333333333333");
        assert_eq!(eval("return cjson.encode(1e300)"), "1e+300");
        assert_eq!(eval("return cjson.encode({})"), "{}");
        assert_eq!(eval("return cjson.encode(cjson.null)"), "null");
        assert_eq!(eval("return cjson.encode('\\n\\1')"), r#""\n\u0001""#);
        assert_eq!(
            eval("return cjson.encode({[1] = 'a', [3] = 'c'})"),
            r#"["a",null,"c"]"#
        );
        assert!(eval("return cjson.encode({[1000] = 1})").contains("excessively sparse"));
        assert!(eval("return cjson.encode({[true] = 1})").contains("table key must be"));
        assert!(eval("return cjson.encode(0/0)").contains("NaN or Inf"));
        assert!(eval("cjson.encode_max_depth(2) return cjson.encode({{{}}})").contains("nesting"));
    }

    #[test]
    fn decodes_as_lua_cjson() {
        let concat =
            "return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')";
        assert_eq!(eval(concat), "0 -5000 -1 0.0003 1023.2 0");
        assert_eq!(
            eval(r#"return cjson.decode('{"a": {"b": "\\u00e9\\/"}}').a.b"#),
            "é/"
        );
        assert_eq!(
            eval(r#"return tostring(cjson.decode('[null]')[1] == cjson.null)"#),
            "true"
        );
        assert_eq!(eval(r#"return cjson.decode('"\\ud83d\\ude00"')"#), "😀");
        assert!(eval("return cjson.decode('[1,]')").contains("Expected value"));
        assert!(eval("return cjson.decode('{\"a\" 1}')").contains("colon"));
        assert!(eval("return cjson.decode('[1] x')").contains("the end"));
        let deep = "cjson.decode_max_depth(1) return cjson.decode('{\"obj\": {\"array\": [1]}}')";
        assert!(eval(deep).contains("too many nested"));
    }
}

//! The `cmsgpack` library Redis ships (lua-cmsgpack's API): `pack(...)`, `unpack(s)`,
//! `unpack_one(s, offset)` and `unpack_limit(s, limit, offset)`, with its rules: a table
//! whose keys are exactly 1..n is an array, any other a map; integers in the fewest bytes; a
//! float that a 32-bit float holds exactly as one; tables nested past 16 levels (a table that
//! holds itself) become nil.

use mlua::{Lua, MultiValue, Table, Value, Variadic};

/// Tables nested deeper than this are packed as nil.
const MAX_NESTING: usize = 16;

pub(crate) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|_, args: Variadic<Value>| {
            if args.is_empty() {
                return Err(mlua::Error::runtime("MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for v in args.iter() {
                pack(v, 0, &mut out)?;
            }
            Ok(mlua::BString::from(out))
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, s: mlua::String| unpack_full(lua, &s.as_bytes(), 0, 0, false))?,
    )?;
    t.raw_set(
        "unpack_one",
        lua.create_function(|lua, (s, offset): (mlua::String, Option<i64>)| {
            unpack_full(lua, &s.as_bytes(), 1, offset.unwrap_or(0), true)
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        lua.create_function(
            |lua, (s, limit, offset): (mlua::String, i64, Option<i64>)| {
                unpack_full(lua, &s.as_bytes(), limit, offset.unwrap_or(0), true)
            },
        )?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    Ok(t)
}

fn pack_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_number(n: f64, out: &mut Vec<u8>) {
    // Whole numbers an i64 holds are integers; the rest floats.
    if n.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n)
    {
        pack_int(n as i64, out);
    } else if f64::from(n as f32) == n || n.is_nan() {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_header(n: usize, fix: u8, fix_max: usize, tag16: u8, out: &mut Vec<u8>) {
    if n < fix_max {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(tag16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(tag16 + 1);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn pack_bytes(s: &[u8], out: &mut Vec<u8>) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// The length of a table whose keys are exactly 1..n, `None` for any other table.
fn array_length(t: &Table) -> mlua::Result<Option<usize>> {
    let (mut max, mut count) = (0f64, 0f64);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) => i as f64,
            Value::Number(f) => f,
            _ => return Ok(None),
        };
        if n <= 0.0 || n.fract() != 0.0 {
            return Ok(None);
        }
        max = max.max(n);
        count += 1.0;
    }
    Ok((max == count).then_some(count as usize))
}

fn pack(v: &Value, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => pack_int(*n, out),
        Value::Number(n) => pack_number(*n, out),
        Value::String(s) => pack_bytes(&s.as_bytes(), out),
        Value::Table(t) if level < MAX_NESTING => match array_length(t)? {
            Some(n) => {
                pack_header(n, 0x90, 16, 0xdc, out);
                for i in 1..=n {
                    pack(&t.raw_get::<Value>(i)?, level + 1, out)?;
                }
            }
            None => {
                // Counted first, then packed pair by pair: a large table's values are never
                // all held at once (each held value is a slot of Lua's reference stack).
                let mut n = 0;
                for pair in t.pairs::<Value, Value>() {
                    pair?;
                    n += 1;
                }
                pack_header(n, 0x80, 16, 0xde, out);
                for pair in t.pairs::<Value, Value>() {
                    let (k, item) = pair?;
                    pack(&k, level + 1, out)?;
                    pack(&item, level + 1, out)?;
                }
            }
        },
        _ => out.push(0xc0),
    }
    Ok(())
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
    /// Arrays and maps open around the value being read.
    depth: usize,
}

/// Nesting deeper than this in an input is refused: the decoder recurses on the stack.
const MAX_DEPTH: usize = 1000;

fn missing() -> mlua::Error {
    mlua::Error::runtime("Missing bytes in input.")
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> mlua::Result<&[u8]> {
        let s = self.buf.get(self.at..self.at + n).ok_or_else(missing)?;
        self.at += n;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> mlua::Result<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn value(&mut self, lua: &Lua) -> mlua::Result<Value> {
        let tag = self.uint(1)? as u8;
        let num = |n: f64| Ok(Value::Number(n));
        match tag {
            0x00..=0x7f => num(f64::from(tag)),
            0xe0..=0xff => num(f64::from(tag as i8)),
            0xc0 => Ok(Value::Nil),
            0xc2 => Ok(Value::Boolean(false)),
            0xc3 => Ok(Value::Boolean(true)),
            0xcc => num(self.uint(1)? as f64),
            0xcd => num(self.uint(2)? as f64),
            0xce => num(self.uint(4)? as f64),
            0xcf => num(self.uint(8)? as f64),
            0xd0 => num(f64::from(self.uint(1)? as u8 as i8)),
            0xd1 => num(f64::from(self.uint(2)? as u16 as i16)),
            0xd2 => num(f64::from(self.uint(4)? as u32 as i32)),
            0xd3 => num(self.uint(8)? as i64 as f64),
            0xca => num(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => num(f64::from_bits(self.uint(8)?)),
            0xa0..=0xbf => self.string(lua, usize::from(tag & 0x1f)),
            0xd9 | 0xc4 => {
                let n = self.uint(1)? as usize;
                self.string(lua, n)
            }
            0xda | 0xc5 => {
                let n = self.uint(2)? as usize;
                self.string(lua, n)
            }
            0xdb | 0xc6 => {
                let n = self.uint(4)? as usize;
                self.string(lua, n)
            }
            0x90..=0x9f => self.array(lua, usize::from(tag & 0x0f)),
            0xdc => {
                let n = self.uint(2)? as usize;
                self.array(lua, n)
            }
            0xdd => {
                let n = self.uint(4)? as usize;
                self.array(lua, n)
            }
            0x80..=0x8f => self.map(lua, usize::from(tag & 0x0f)),
            0xde => {
                let n = self.uint(2)? as usize;
                self.map(lua, n)
            }
            0xdf => {
                let n = self.uint(4)? as usize;
                self.map(lua, n)
            }
            _ => Err(mlua::Error::runtime("Bad data format in input.")),
        }
    }

    fn string(&mut self, lua: &Lua, n: usize) -> mlua::Result<Value> {
        let s = self.take(n)?;
        Ok(Value::String(lua.create_string(s)?))
    }

    fn nested(&mut self) -> mlua::Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(mlua::Error::runtime("Bad data format in input."));
        }
        Ok(())
    }

    fn array(&mut self, lua: &Lua, n: usize) -> mlua::Result<Value> {
        self.nested()?;
        // Every item takes a byte at least: a count beyond the input is a bad input, not a
        // table to make room for.
        if n > self.buf.len() - self.at {
            return Err(missing());
        }
        let t = lua.create_table_with_capacity(n, 0)?;
        for i in 1..=n {
            t.raw_set(i, self.value(lua)?)?;
        }
        self.depth -= 1;
        Ok(Value::Table(t))
    }

    fn map(&mut self, lua: &Lua, n: usize) -> mlua::Result<Value> {
        self.nested()?;
        if n > (self.buf.len() - self.at) / 2 {
            return Err(missing());
        }
        let t = lua.create_table_with_capacity(0, n)?;
        for _ in 0..n {
            let k = self.value(lua)?;
            let v = self.value(lua)?;
            if !k.is_nil() {
                t.raw_set(k, v)?;
            }
        }
        self.depth -= 1;
        Ok(Value::Table(t))
    }
}

/// Decodes up to `limit` objects (0: all) from `offset`; with `with_offset`, the offset of
/// what is left (-1: nothing) comes first.
fn unpack_full(
    lua: &Lua,
    buf: &[u8],
    limit: i64,
    offset: i64,
    with_offset: bool,
) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 || offset as u64 > buf.len() as u64 {
        return Err(mlua::Error::runtime(format!(
            "Invalid request to unpack with offset of {offset} and limit of {limit}."
        )));
    }
    let mut r = Reader {
        buf,
        at: offset as usize,
        depth: 0,
    };
    let mut values = Vec::new();
    while r.at < buf.len() && (limit == 0 || (values.len() as i64) < limit) {
        values.push(r.value(lua)?);
    }
    if with_offset {
        let next = if r.at < buf.len() { r.at as i64 } else { -1 };
        values.insert(0, Value::Integer(next));
    }
    Ok(MultiValue::from_iter(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(code: &str) -> String {
        let lua = Lua::new();
        lua.globals()
            .set("cmsgpack", library(&lua).unwrap())
            .unwrap();
        let s: mlua::String = lua.load(code).eval().unwrap();
        s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Encodings from the MessagePack specification's tables.
    #[test]
    fn packs_in_the_fewest_bytes() {
        assert_eq!(hex("return cmsgpack.pack(0.1)"), "cb3fb999999999999a");
        assert_eq!(hex("return cmsgpack.pack(0.5)"), "ca3f000000");
        assert_eq!(
            hex("return cmsgpack.pack(-1099511627776)"),
            "d3ffffff0000000000"
        );
        assert_eq!(
            hex("return cmsgpack.pack(127, 128, -32, -33)"),
            "7fcc80e0d0df"
        );
        assert_eq!(
            hex("return cmsgpack.pack(65536, -32769)"),
            "ce00010000d2ffff7fff"
        );
        assert_eq!(hex("return cmsgpack.pack(nil, true, false)"), "c0c3c2");
        assert_eq!(hex("return cmsgpack.pack('ab', {})"), "a2616290");
        assert_eq!(
            hex("return cmsgpack.pack({1, 2}, {a = 1})"),
            "920102".to_string() + "81a16101"
        );
        assert_eq!(
            &hex("return cmsgpack.pack(string.rep('x', 40))")[..4],
            "d928"
        );
    }

    #[test]
    fn unpacks_what_it_packs_and_refuses_short_input() {
        let lua = Lua::new();
        lua.globals()
            .set("cmsgpack", library(&lua).unwrap())
            .unwrap();
        let ok: bool = lua
            .load(
                "local t = cmsgpack.unpack(cmsgpack.pack({a = {1, 2.5, 'x'}, b = -70000}))
                 local o, v = cmsgpack.unpack_limit(cmsgpack.pack(1, 2), 1, 0)
                 return t.a[2] == 2.5 and t.a[3] == 'x' and t.b == -70000 and o == 1 and v == 1",
            )
            .eval()
            .unwrap();
        assert!(ok);
        let err = lua
            .load("return cmsgpack.unpack(string.sub(cmsgpack.pack('hello'), 1, 3))")
            .exec()
            .unwrap_err();
        assert!(err.to_string().contains("Missing bytes"), "{err}");
        let err = lua
            .load("return cmsgpack.unpack('\\193')")
            .exec()
            .unwrap_err();
        assert!(err.to_string().contains("Bad data format"), "{err}");
    }
}

//! The `struct` library Redis ships (Roberto Ierusalimschy's `struct`): `pack(fmt, ...)`,
//! `unpack(fmt, s [, i])` and `size(fmt)`, binary records described by a format: `<` `>` `=`
//! byte order, `!n` alignment, `x` padding, `b/B` chars, `h/H` shorts, `l/L` longs, `T`
//! size_t, `i/I[n]` n-byte integers, `f` float, `d` double, `s` zero-terminated string and
//! `c[n]` fixed-length string (`c0`: as long as the string, or in `unpack` as the number
//! before it).

use mlua::{Lua, MultiValue, Table, Value, Variadic};

fn err(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::runtime(msg.into())
}

/// One item of a format.
enum Item {
    Pad,
    Int { size: usize, signed: bool },
    Float,
    Double,
    ZString,
    Chars(usize),
}

struct Format<'a> {
    fmt: &'a [u8],
    at: usize,
    little: bool,
    max_align: usize,
}

impl Format<'_> {
    fn new(fmt: &[u8]) -> Format<'_> {
        Format {
            fmt,
            at: 0,
            little: true,
            max_align: 1,
        }
    }

    fn number(&mut self, default: usize) -> usize {
        let start = self.at;
        while self.fmt.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        std::str::from_utf8(self.fmt.get(start..self.at).unwrap_or_default())
            .ok()
            .and_then(|d| d.parse().ok())
            .unwrap_or(default)
    }

    /// The next item, after the byte-order and alignment options before it.
    fn next(&mut self) -> mlua::Result<Option<Item>> {
        loop {
            let Some(&c) = self.fmt.get(self.at) else {
                return Ok(None);
            };
            self.at += 1;
            let item = match c {
                b' ' => continue,
                b'<' | b'=' => {
                    self.little = true;
                    continue;
                }
                b'>' => {
                    self.little = false;
                    continue;
                }
                b'!' => {
                    self.max_align = self.number(8);
                    if !self.max_align.is_power_of_two() {
                        return Err(err("alignment must be power of 2"));
                    }
                    continue;
                }
                b'x' => Item::Pad,
                b'b' | b'B' => Item::Int {
                    size: 1,
                    signed: c == b'b',
                },
                b'h' | b'H' => Item::Int {
                    size: 2,
                    signed: c == b'h',
                },
                b'l' | b'L' => Item::Int {
                    size: 8,
                    signed: c == b'l',
                },
                b'T' => Item::Int {
                    size: 8,
                    signed: false,
                },
                b'i' | b'I' => {
                    let size = self.number(4);
                    if !(1..=8).contains(&size) {
                        return Err(err(format!(
                            "integral size {size} is larger than limit of 8"
                        )));
                    }
                    Item::Int {
                        size,
                        signed: c == b'i',
                    }
                }
                b'f' => Item::Float,
                b'd' => Item::Double,
                b's' => Item::ZString,
                b'c' => Item::Chars(self.number(1)),
                _ => return Err(err(format!("invalid format option '{}'", c as char))),
            };
            return Ok(Some(item));
        }
    }

    /// Padding bytes before an item of `size` bytes at `offset`.
    fn padding(&self, item: &Item, offset: usize) -> usize {
        let size = match item {
            Item::Int { size, .. } => *size,
            Item::Float => 4,
            Item::Double => 8,
            _ => 1,
        };
        let align = size.min(self.max_align);
        if align <= 1 || !size.is_power_of_two() {
            return 0;
        }
        (align - offset % align) % align
    }
}

fn put_int(out: &mut Vec<u8>, n: i64, size: usize, little: bool) {
    let bytes = n.to_le_bytes();
    let mut field: Vec<u8> = (0..size)
        .map(|i| {
            if i < 8 {
                bytes.get(i).copied().unwrap_or(0)
            } else if n < 0 {
                0xff
            } else {
                0
            }
        })
        .collect();
    if !little {
        field.reverse();
    }
    out.extend_from_slice(&field);
}

fn get_int(data: &[u8], size: usize, signed: bool, little: bool) -> f64 {
    let mut v: u64 = 0;
    for i in 0..size {
        let b = if little {
            data.get(size - 1 - i)
        } else {
            data.get(i)
        };
        v = (v << 8) | u64::from(b.copied().unwrap_or(0));
    }
    if signed && size < 8 && v >> (size * 8 - 1) & 1 == 1 {
        (v as i64 - (1i64 << (size * 8))) as f64
    } else if signed {
        v as i64 as f64
    } else {
        v as f64
    }
}

fn pack(fmt: &[u8], args: &[Value]) -> mlua::Result<Vec<u8>> {
    let mut f = Format::new(fmt);
    let mut out = Vec::new();
    let mut args = args.iter().enumerate();
    let mut arg = |what: &str| {
        args.next().map(|(i, v)| (i + 2, v)).ok_or_else(|| {
            err(format!(
                "bad argument to 'pack' ({what} expected, got no value)"
            ))
        })
    };
    let number = |(i, v): (usize, &Value)| match v {
        Value::Integer(n) => Ok(*n as f64),
        Value::Number(n) => Ok(*n),
        Value::String(s) => s
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| err(format!("bad argument #{i} to 'pack' (number expected)"))),
        _ => Err(err(format!(
            "bad argument #{i} to 'pack' (number expected)"
        ))),
    };
    while let Some(item) = f.next()? {
        out.resize(out.len() + f.padding(&item, out.len()), 0);
        match item {
            Item::Pad => out.push(0),
            Item::Int { size, .. } => {
                let n = number(arg("number")?)?;
                put_int(&mut out, n as i64, size, f.little);
            }
            Item::Float => {
                let n = number(arg("number")?)? as f32;
                out.extend_from_slice(&if f.little {
                    n.to_le_bytes()
                } else {
                    n.to_be_bytes()
                });
            }
            Item::Double => {
                let n = number(arg("number")?)?;
                out.extend_from_slice(&if f.little {
                    n.to_le_bytes()
                } else {
                    n.to_be_bytes()
                });
            }
            Item::ZString | Item::Chars(_) => {
                let (i, v) = arg("string")?;
                let Value::String(s) = v else {
                    return Err(err(format!(
                        "bad argument #{i} to 'pack' (string expected)"
                    )));
                };
                let s = s.as_bytes();
                match item {
                    Item::ZString => {
                        out.extend_from_slice(&s);
                        out.push(0);
                    }
                    Item::Chars(n) => {
                        let n = if n == 0 { s.len() } else { n };
                        if s.len() < n {
                            return Err(err(format!(
                                "bad argument #{i} to 'pack' (string too short)"
                            )));
                        }
                        out.extend_from_slice(s.get(..n).unwrap_or_default());
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(out)
}

fn unpack(lua: &Lua, fmt: &[u8], data: &[u8], init: usize) -> mlua::Result<MultiValue> {
    let mut f = Format::new(fmt);
    let mut at = init;
    let mut values = Vec::new();
    let short = || err("bad argument #2 to 'unpack' (data string too short)");
    while let Some(item) = f.next()? {
        at += f.padding(&item, at);
        match item {
            Item::Pad => at += 1,
            Item::Int { size, signed } => {
                let field = at
                    .checked_add(size)
                    .and_then(|end| data.get(at..end))
                    .ok_or_else(short)?;
                values.push(Value::Number(get_int(field, size, signed, f.little)));
                at += size;
            }
            Item::Float | Item::Double => {
                let size = if matches!(item, Item::Float) { 4 } else { 8 };
                let field = at
                    .checked_add(size)
                    .and_then(|end| data.get(at..end))
                    .ok_or_else(short)?;
                let n = get_int(field, size, false, f.little) as u64;
                values.push(Value::Number(if size == 4 {
                    f64::from(f32::from_bits(n as u32))
                } else {
                    f64::from_bits(n)
                }));
                at += size;
            }
            Item::ZString => {
                let rest = data.get(at..).ok_or_else(short)?;
                let end = rest
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or_else(|| err("unfinished string in data"))?;
                values.push(Value::String(
                    lua.create_string(rest.get(..end).unwrap_or_default())?,
                ));
                at += end + 1;
            }
            Item::Chars(n) => {
                let n = if n == 0 {
                    match values.last() {
                        Some(Value::Number(len)) if *len >= 0.0 => *len as usize,
                        _ => return Err(err("format 'c0' needs a previous size")),
                    }
                } else {
                    n
                };
                let field = at
                    .checked_add(n)
                    .and_then(|end| data.get(at..end))
                    .ok_or_else(short)?;
                values.push(Value::String(lua.create_string(field)?));
                at += n;
            }
        }
    }
    values.push(Value::Integer(at as i64 + 1));
    Ok(MultiValue::from_iter(values))
}

fn size(fmt: &[u8]) -> mlua::Result<usize> {
    let mut f = Format::new(fmt);
    let mut total: usize = 0;
    while let Some(item) = f.next()? {
        total = total.saturating_add(f.padding(&item, total));
        total = total.saturating_add(match item {
            Item::Pad => 1,
            Item::Int { size, .. } => size,
            Item::Float => 4,
            Item::Double => 8,
            Item::Chars(n) if n > 0 => n,
            _ => return Err(err("options 'c0' - 's' have undefined sizes")),
        });
    }
    Ok(total)
}

pub(crate) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|_, (fmt, args): (mlua::String, Variadic<Value>)| {
            pack(&fmt.as_bytes(), &args).map(mlua::BString::from)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(
            |lua, (fmt, data, init): (mlua::String, mlua::String, Option<i64>)| {
                let init = init.unwrap_or(1);
                if init < 1 {
                    return Err(err(
                        "bad argument #3 to 'unpack' (offset must be 1 or greater)",
                    ));
                }
                unpack(lua, &fmt.as_bytes(), &data.as_bytes(), init as usize - 1)
            },
        )?,
    )?;
    t.raw_set(
        "size",
        lua.create_function(|_, fmt: mlua::String| size(&fmt.as_bytes()))?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(code: &str) -> String {
        let lua = Lua::new();
        lua.globals().set("struct", library(&lua).unwrap()).unwrap();
        match lua.load(code).eval::<Value>() {
            Ok(Value::String(s)) => s.as_bytes().iter().map(|b| format!("{b:02x}")).collect(),
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn packs_and_unpacks_records() {
        assert_eq!(eval("return struct.pack('>I2', 258)"), "0102");
        assert_eq!(eval("return struct.pack('<i4', -2)"), "feffffff");
        assert_eq!(
            eval("return struct.pack('>bBhH', -1, 255, -2, 65535)"),
            "ffff".to_string() + "fffeffff"
        );
        assert_eq!(eval("return struct.pack('>d', 1.5)"), "3ff8000000000000");
        assert_eq!(eval("return struct.pack('sc2', 'ab', 'xyz')"), "6162007879");
        assert_eq!(
            eval("return struct.pack('!4 >b i4', 1, 2)"),
            "0100000000000002"
        );
        assert_eq!(eval("return struct.size('>i4 h c3')"), "Integer(9)");
        let round = "local a, b, n = struct.unpack('<I3 s', struct.pack('<I3 s', 70000, 'hey'))
                     return a == 70000 and b == 'hey' and n == 8";
        assert_eq!(eval(round), "Boolean(true)");
        let prefixed =
            "local len, s, n = struct.unpack('B c0', '\\3abcd') return s == 'abc' and n == 5";
        assert_eq!(eval(prefixed), "Boolean(true)");
        assert!(eval("return struct.unpack('>i4', 'ab')").contains("too short"));
        assert!(eval("return struct.size('s')").contains("undefined sizes"));
    }
}

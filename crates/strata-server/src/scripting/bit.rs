//! The `bit` library Redis ships (LuaBitOp's API): 32-bit operations on Lua numbers, whose
//! results are signed 32-bit integers.

use mlua::{Lua, Table, Variadic};

/// A Lua number as LuaBitOp reads it: wrapped to 32 bits, two's complement.
fn to_bit(n: f64) -> i32 {
    // Numbers beyond 2^53 lose their low bits first; those within wrap exactly.
    (n.rem_euclid(4_294_967_296.0) as u64) as u32 as i32
}

fn fold(args: &Variadic<f64>, op: fn(i32, i32) -> i32) -> mlua::Result<i32> {
    let mut it = args.iter();
    let first = it
        .next()
        .ok_or_else(|| mlua::Error::runtime("bad argument #1 (number expected, got no value)"))?;
    Ok(it.fold(to_bit(*first), |acc, n| op(acc, to_bit(*n))))
}

pub(crate) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("tobit", lua.create_function(|_, n: f64| Ok(to_bit(n)))?)?;
    t.raw_set("bnot", lua.create_function(|_, n: f64| Ok(!to_bit(n)))?)?;
    t.raw_set(
        "band",
        lua.create_function(|_, a: Variadic<f64>| fold(&a, |x, y| x & y))?,
    )?;
    t.raw_set(
        "bor",
        lua.create_function(|_, a: Variadic<f64>| fold(&a, |x, y| x | y))?,
    )?;
    t.raw_set(
        "bxor",
        lua.create_function(|_, a: Variadic<f64>| fold(&a, |x, y| x ^ y))?,
    )?;
    let shift = |f: fn(u32, u32) -> u32| {
        move |_: &Lua, (x, n): (f64, f64)| Ok(f(to_bit(x) as u32, (to_bit(n) as u32) & 31) as i32)
    };
    t.raw_set("lshift", lua.create_function(shift(|x, n| x << n))?)?;
    t.raw_set("rshift", lua.create_function(shift(|x, n| x >> n))?)?;
    t.raw_set(
        "arshift",
        lua.create_function(shift(|x, n| ((x as i32) >> n) as u32))?,
    )?;
    t.raw_set("rol", lua.create_function(shift(|x, n| x.rotate_left(n)))?)?;
    t.raw_set("ror", lua.create_function(shift(|x, n| x.rotate_right(n)))?)?;
    t.raw_set(
        "bswap",
        lua.create_function(|_, x: f64| Ok(to_bit(x).swap_bytes()))?,
    )?;
    t.raw_set(
        "tohex",
        lua.create_function(|_, (x, n): (f64, Option<f64>)| {
            let x = to_bit(x) as u32;
            let n = n.map_or(8, to_bit);
            let (upper, width) = (n < 0, n.unsigned_abs().min(8) as usize);
            let text = if upper {
                format!("{x:08X}")
            } else {
                format!("{x:08x}")
            };
            Ok(text.get(8 - width..).unwrap_or_default().to_string())
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval<T: mlua::FromLua>(code: &str) -> T {
        let lua = Lua::new();
        lua.globals().set("bit", library(&lua).unwrap()).unwrap();
        lua.load(code).eval().unwrap()
    }

    /// The values of LuaBitOp's own documentation.
    #[test]
    fn answers_as_luabitop_documents() {
        assert_eq!(eval::<i64>("return bit.tobit(0xffffffff)"), -1);
        assert_eq!(eval::<i64>("return bit.tobit(0xffffffff + 1)"), 0);
        assert_eq!(eval::<i64>("return bit.tobit(2^40 + 1234)"), 1234);
        assert_eq!(eval::<String>("return bit.tohex(1)"), "00000001");
        assert_eq!(eval::<String>("return bit.tohex(-1)"), "ffffffff");
        assert_eq!(eval::<String>("return bit.tohex(0xffffffff)"), "ffffffff");
        assert_eq!(eval::<String>("return bit.tohex(-1, -4)"), "FFFF");
        assert_eq!(eval::<String>("return bit.tohex(0x21, 4)"), "0021");
        assert_eq!(eval::<String>("return bit.tohex(0x87654321, 4)"), "4321");
        assert_eq!(eval::<i64>("return bit.bnot(0)"), -1);
        assert_eq!(
            eval::<String>("return bit.tohex(bit.bnot(0x12345678))"),
            "edcba987"
        );
        assert_eq!(eval::<i64>("return bit.bor(1, 2, 4, 8)"), 15);
        assert_eq!(
            eval::<String>("return bit.tohex(bit.band(0x12345678, 0xff))"),
            "00000078"
        );
        assert_eq!(
            eval::<String>("return bit.tohex(bit.bxor(0xa5a5f0f0, 0xaa55ff00))"),
            "0ff00ff0"
        );
        assert_eq!(eval::<i64>("return bit.lshift(1, 0)"), 1);
        assert_eq!(eval::<i64>("return bit.lshift(1, 8)"), 256);
        assert_eq!(eval::<i64>("return bit.lshift(1, 40)"), 256);
        assert_eq!(eval::<i64>("return bit.rshift(256, 8)"), 1);
        assert_eq!(eval::<i64>("return bit.rshift(-256, 8)"), 16777215);
        assert_eq!(eval::<i64>("return bit.arshift(256, 8)"), 1);
        assert_eq!(eval::<i64>("return bit.arshift(-256, 8)"), -1);
        assert_eq!(
            eval::<String>("return bit.tohex(bit.lshift(0x87654321, 12))"),
            "54321000"
        );
        assert_eq!(
            eval::<String>("return bit.tohex(bit.rol(0x12345678, 12))"),
            "45678123"
        );
        assert_eq!(
            eval::<String>("return bit.tohex(bit.ror(0x12345678, 12))"),
            "67812345"
        );
        assert_eq!(
            eval::<String>("return bit.tohex(bit.bswap(0x12345678))"),
            "78563412"
        );
    }
}

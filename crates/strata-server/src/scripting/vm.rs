//! The Lua interpreter scripts run in, built as Redis builds its own: Lua 5.1 with the base,
//! table, string and math libraries, the `redis` table, and a sandbox.
//!
//! The sandbox: a script sees its globals through a read-only face. Reading a global that
//! does not exist is an error ("Script attempted to access nonexistent global variable"), and
//! so is writing any ("Attempt to modify a readonly table"), as are writes to the `redis`
//! table and to the face's metatable, and `setmetatable` on any of them. `loadfile`,
//! `dofile`, `print`, `getfenv`, `setfenv`, `require` and `module` are not there, and
//! `loadstring` refuses precompiled bytecode.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mlua::{Function, HookTriggers, Lua, LuaOptions, StdLib, Table, VmState};
use sha1::{Digest, Sha1};

/// How often (in Lua instructions) a running script looks whether it was told to stop.
pub(crate) const KILL_CHECK_EVERY: u32 = 10_000;

/// The message a script stopped by `SCRIPT KILL` or `FUNCTION KILL` fails with.
pub(crate) const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

/// The interpreter and the handles the server keeps into it.
pub(crate) struct Vm {
    pub lua: Lua,
    /// The table behind the face: `KEYS` and `ARGV` are set here before an `EVAL` runs.
    pub visible: Table,
    /// The `redis` table behind its read-only face: `call`, `pcall` and `setresp` are set
    /// here for each run, bound to the command that runs the script.
    pub redis: Table,
    /// Runs a function with an error handler that turns every error into Redis's error
    /// table (`{err=...}`): `(ok, value)`. (Redis adds the script's line from the `debug`
    /// library, which the interpreter here does not load.)
    pub protected_call: Function,
    /// Makes `redis.call` of `redis.pcall`'s host function: raises an error reply.
    pub raising: Function,
    /// Wraps a compiled chunk so that it runs with the read-only globals.
    pub sandboxed: Function,
    /// The `redis` table a library sees while it loads: `register_function` is set here for
    /// each load.
    pub load_redis: Table,
    /// Gives a library's chunk its own globals: returns the chunk and the function that
    /// opens them up once it has loaded.
    pub library: Function,
    /// `register_function` outside a load: an error.
    pub not_loading: Function,
}

/// What [`SANDBOX`] returns.
type Sandbox = (
    Table,
    Table,
    Table,
    Function,
    Function,
    Function,
    Table,
    Function,
    Function,
);

/// Lua code that builds the sandbox from the full globals; it returns the face, the table
/// behind it, the `redis` table, the protected call, the raising wrapper and the chunk
/// wrapper.
const SANDBOX: &str = r##"
local G = _G
local visible = {}
local hidden = { load = true, loadfile = true, dofile = true, print = true, getfenv = true,
  setfenv = true, require = true, module = true, newproxy = true, gcinfo = true,
  collectgarbage = true, debug = true, package = true }
for k, v in pairs(G) do
  if not hidden[k] then visible[k] = v end
end
local readonly = setmetatable({}, {
  __newindex = function() error("Attempt to modify a readonly table", 2) end,
})
local faces = setmetatable({}, { __mode = "k" })
local function face_of(t, missing)
  local f = {}
  setmetatable(f, {
    __index = missing and function(_, k)
      local v = t[k]
      if v == nil then
        error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
      end
      return v
    end or t,
    __newindex = function() error("Attempt to modify a readonly table", 2) end,
    __metatable = readonly,
  })
  faces[f] = true
  return f
end
local set_metatable = G.setmetatable
visible.setmetatable = function(t, m)
  if faces[t] or t == readonly then error("Attempt to modify a readonly table", 2) end
  return set_metatable(t, m)
end
local raw_set = G.rawset
visible.rawset = function(t, k, v)
  if faces[t] or t == readonly then error("Attempt to modify a readonly table", 2) end
  return raw_set(t, k, v)
end
local load_string = G.loadstring
local set_fenv = G.setfenv
local face
visible.loadstring = function(s, name)
  if type(s) == "string" and s:byte(1) == 27 then
    return nil, "precompiled chunks are not loaded"
  end
  local f, e = load_string(s, name)
  if f then set_fenv(f, face) end
  return f, e
end
local redis = {
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
  REDIS_VERSION = "7.0.15", REDIS_VERSION_NUM = 0x07000f,
}
function redis.error_reply(e)
  if type(e) ~= "string" then error("wrong number or type of arguments", 2) end
  if e:sub(1, 1) == "-" then e = e:sub(2) end
  if not e:find(" ") then e = (e == "" and "ERR" or "ERR " .. e) end
  return { err = e }
end
function redis.status_reply(s)
  if type(s) ~= "string" then error("wrong number or type of arguments", 2) end
  return { ok = s }
end
function redis.replicate_commands() return true end
function redis.set_repl(...)
  if select("#", ...) ~= 1 then error("redis.set_repl() requires one argument.", 2) end
  local flags = ...
  if type(flags) ~= "number" or flags < 0 or flags > 3 then
    error("Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.", 2)
  end
end
function redis.breakpoint() return false end
function redis.debug() end
visible.redis = face_of(redis, false)
for _, lib in ipairs({ "string", "table", "math", "bit", "cjson", "cmsgpack", "struct" }) do
  visible[lib] = face_of(G[lib], false)
end
face = face_of(visible, true)
-- Strings' methods come through the read-only face too, and their metatable is hidden.
local string_meta = G.getmetatable("")
string_meta.__index = visible.string
string_meta.__metatable = readonly
visible._G = face
local function handler(err)
  if type(err) ~= "table" then err = { err = "ERR " .. tostring(err) } end
  return err
end
local xp = G.xpcall
local unpack = G.unpack
local function protected_call(f, ...)
  local args = { ... }
  local n = select("#", ...)
  return xp(function() return f(unpack(args, 1, n)) end, handler)
end
local function raising(host)
  return function(...)
    local r = host(...)
    if type(r) == "table" and r.err then error(r, 0) end
    return r
  end
end
local function sandboxed(f)
  set_fenv(f, face)
  return f
end
-- A library's code runs in globals of its own: while it loads, only `redis` with
-- register_function, log and the constants; once loaded, everything a script sees. Its
-- functions and helpers keep these globals, so they see the full set when they run.
local load_redis = {}
for _, k in ipairs({ "log", "LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING",
  "REDIS_VERSION", "REDIS_VERSION_NUM" }) do
  load_redis[k] = redis[k]
end
-- Outside a load (a function that kept the table), registering fails.
load_redis.register_function = function()
  error("redis.register_function can only be called on FUNCTION LOAD command", 2)
end
local not_loading = load_redis.register_function
local loading_view = { redis = face_of(load_redis, true) }
local function library(f)
  local view = loading_view
  local env = {}
  set_metatable(env, {
    __index = function(_, k)
      local v = view[k]
      if v == nil then
        error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
      end
      return v
    end,
    __newindex = function() error("Attempt to modify a readonly table", 2) end,
    __metatable = readonly,
  })
  faces[env] = true
  set_fenv(f, env)
  return f, function() view = visible end
end
return face, visible, redis, protected_call, raising, sandboxed, load_redis, library, not_loading
"##;

/// The lower-case hex SHA1 of `body`, EVAL's name for a script.
pub(crate) fn sha1_hex(body: &[u8]) -> String {
    Sha1::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `redis.log(level, ...)`: a line in the server's log (its standard error).
fn log(_: &Lua, args: mlua::Variadic<mlua::Value>) -> mlua::Result<()> {
    if args.len() < 2 {
        return Err(mlua::Error::runtime(
            "redis.log() requires two arguments or more.",
        ));
    }
    let level = match args.first() {
        Some(mlua::Value::Integer(n)) => *n,
        Some(mlua::Value::Number(n)) => *n as i64,
        _ => return Err(mlua::Error::runtime("First argument must be a number.")),
    };
    let name = match level {
        0 => "debug",
        1 => "verbose",
        2 => "notice",
        3 => "warning",
        _ => return Err(mlua::Error::runtime("Invalid debug level.")),
    };
    let text: Vec<String> = args
        .iter()
        .skip(1)
        .map(|v| match v {
            mlua::Value::String(s) => s.to_string_lossy(),
            mlua::Value::Integer(n) => n.to_string(),
            mlua::Value::Number(n) => n.to_string(),
            other => format!("({})", other.type_name()),
        })
        .collect();
    eprintln!("script {name}: {}", text.join(" "));
    Ok(())
}

/// Has a running script look at `kill` every `every` instructions. Once it is set, the script
/// fails at every instruction from then on, so that a `pcall` inside it cannot catch the
/// failure for good.
pub(crate) fn watch(lua: &Lua, kill: Arc<AtomicBool>, every: u32) {
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(every),
        move |lua, _| {
            if !kill.load(Ordering::Relaxed) {
                return Ok(VmState::Continue);
            }
            if every > 1 {
                watch(lua, kill.clone(), 1);
            }
            Err(mlua::Error::runtime(KILLED))
        },
    );
}

impl Vm {
    /// A new interpreter, sandboxed, whose scripts stop at their next check once `kill` is
    /// set.
    pub(crate) fn new(kill: Arc<AtomicBool>) -> mlua::Result<Vm> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::new())?;
        let g = lua.globals();
        g.raw_set("bit", super::bit::library(&lua)?)?;
        g.raw_set("cjson", super::cjson::library(&lua)?)?;
        g.raw_set("cmsgpack", super::msgpack::library(&lua)?)?;
        g.raw_set("struct", super::structs::library(&lua)?)?;
        let (
            _,
            visible,
            redis,
            protected_call,
            raising,
            sandboxed,
            load_redis,
            library,
            not_loading,
        ) = lua.load(SANDBOX).set_name("=sandbox").eval::<Sandbox>()?;
        redis.raw_set(
            "sha1hex",
            lua.create_function(|_, args: mlua::Variadic<mlua::String>| match args.first() {
                Some(s) if args.len() == 1 => Ok(sha1_hex(&s.as_bytes())),
                _ => Err(mlua::Error::runtime("wrong number of arguments")),
            })?,
        )?;
        redis.raw_set("log", lua.create_function(log)?)?;
        watch(&lua, kill, KILL_CHECK_EVERY);
        Ok(Vm {
            lua,
            visible,
            redis,
            protected_call,
            raising,
            sandboxed,
            load_redis,
            library,
            not_loading,
        })
    }

    /// Compiles `body` (text only, never bytecode) under `name` into a function that runs with
    /// the sandbox's globals.
    pub(crate) fn compile(&self, body: &[u8], name: &str) -> mlua::Result<Function> {
        let f = self.text_chunk(body, name)?;
        self.sandboxed.call(f)
    }

    /// Compiles a library's code with globals of its own: the chunk, and the function that
    /// gives it every global once it has loaded.
    pub(crate) fn compile_library(&self, body: &[u8]) -> mlua::Result<(Function, Function)> {
        let f = self.text_chunk(body, "@user_function")?;
        self.library.call(f)
    }

    fn text_chunk(&self, body: &[u8], name: &str) -> mlua::Result<Function> {
        self.lua
            .load(body)
            .set_name(name)
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `code` in the sandbox: `Ok` with what it returned as text, or its error.
    fn run(code: &str) -> Result<String, String> {
        let vm = Vm::new(Arc::new(AtomicBool::new(false))).unwrap();
        let f = vm.compile(code.as_bytes(), "@test").unwrap();
        let (ok, v): (bool, mlua::Value) = vm.protected_call.call(f).unwrap();
        let text = match &v {
            mlua::Value::Table(t) => t.raw_get::<String>("err").unwrap_or_default(),
            other => other.to_string().unwrap_or_default(),
        };
        if ok { Ok(text) } else { Err(text) }
    }

    /// Every way out of the sandbox tried here fails, and what a script may do still works.
    #[test]
    fn the_sandbox_holds() {
        let escapes = [
            "x = 1",
            "rawset(_G, 'x', 1)",
            "setmetatable(_G, {})",
            "getmetatable(_G).__index = {}",
            "string.upper = nil",
            "getmetatable('').__index.upper = nil",
            "setmetatable(getmetatable(''), {})",
            "redis.call = 1",
            "cjson.encode = 1",
            "bit.band = 1",
            "return load(function() return nil end)",
            "return loadstring(string.dump(function() return 1 end))()",
            "return loadfile('/etc/passwd')",
            "return dofile('/etc/passwd')",
            "return require('os')",
            "return os.exit()",
            "return io.open('/etc/passwd')",
            "return debug.getinfo(1)",
            "return getfenv(0)",
            "return setfenv(1, {})",
            "return collectgarbage('count')",
        ];
        for code in escapes {
            assert!(run(code).is_err(), "{code} ran: {:?}", run(code));
        }
        assert_eq!(
            run("return ('ab'):upper() .. string.rep('c', 2)"),
            Ok("ABcc".into())
        );
        assert_eq!(
            run("local t = {} rawset(t, 'k', 'v') return t.k"),
            Ok("v".into())
        );
        assert_eq!(run("return loadstring('return 1 + 1')()"), Ok("2".into()));
        // What loadstring compiles runs in the sandbox too.
        assert!(run("loadstring('y = 2')()").is_err());
    }
}

//! Lua scripts (`EVAL`) and functions (`FCALL`): one Lua 5.1 interpreter, as Redis's, in which
//! every script runs whole while it holds the keyspace alone.
//!
//! - `vm.rs`: the interpreter, its sandbox and the `redis` table;
//! - `convert.rs`: replies read into Lua values, and a script's value written as a reply;
//! - `functions.rs`: `FUNCTION LOAD`'s libraries, kept in the engine across restarts;
//! - `bit.rs`, `cjson.rs`, `msgpack.rs` and `structs.rs`: the libraries Redis gives scripts.
//!
//! This room knows nothing of commands: `commands/scripting.rs` answers EVAL, SCRIPT,
//! FUNCTION and FCALL and hands a running script a [`Host`], which runs what `redis.call`
//! asks for.

mod bit;
mod cjson;
mod convert;
mod functions;
mod msgpack;
mod structs;
mod vm;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use mlua::{Function, Lua, MultiValue, Table, Value};

pub(crate) use functions::FunctionFlags;
pub(crate) use vm::sha1_hex;

use crate::resp::Reply;

/// What a running script's `redis.call` reaches: the server.
pub(crate) trait Host {
    /// Runs `args` (the command's name first) for the script, and answers its reply in RESP
    /// `protocol` (2 or 3, as `redis.setresp` chose).
    fn call(&mut self, args: &[Vec<u8>], protocol: u8) -> Vec<u8>;

    /// `redis.acl_check_cmd`: whether the script's user may run `args`.
    fn acl_check(&mut self, args: &[Vec<u8>]) -> Result<bool, String>;
}

/// What is running now, for `SCRIPT KILL`, `FUNCTION KILL` and the BUSY reply.
pub(crate) struct Running {
    pub started: Instant,
    /// A function (`FCALL`) rather than a script (`EVAL`).
    pub function: bool,
    /// The script has written: stopping it now would leave half of it done in Redis, so
    /// Redis refuses to kill it, and so does Strata.
    pub wrote: bool,
    /// The function's name, and the FCALL that runs it (for FUNCTION STATS).
    pub name: String,
    pub command: Vec<Vec<u8>>,
}

/// A function running now: its name, its FCALL, and how long it has run (milliseconds).
pub(crate) type RunningFunction = (String, Vec<Vec<u8>>, u64);

/// The interpreter, EVAL's script cache and FUNCTION's libraries.
pub(crate) struct Scripts {
    vm: Mutex<State>,
    kill: Arc<AtomicBool>,
    pub running: Mutex<Option<Running>>,
    /// Libraries and functions loaded, for FUNCTION STATS while a script holds the interpreter.
    counts: Mutex<(usize, usize)>,
    /// Scripts handed to the script thread and not yet done, and the one running: while
    /// any, every command waits or is answered BUSY. What every command looks at first.
    active: AtomicUsize,
    /// `busy-reply-threshold` (`lua-time-limit`): after this long a running script makes
    /// other clients' commands answer BUSY.
    pub busy_threshold_ms: AtomicU64,
}

/// Scripts between two full collections of the interpreter's garbage.
const GC_PERIOD: u64 = 50;

struct State {
    /// Scripts run, for the collector's period.
    runs: u64,
    vm: vm::Vm,
    /// EVAL's scripts by SHA1 (lower-case hex), compiled.
    cache: HashMap<String, (Function, FunctionFlags)>,
    functions: functions::Functions,
}

/// What a script is asked to run.
pub(crate) enum Target<'a> {
    /// `EVAL`: the body, compiled and cached by its SHA1.
    Body(&'a [u8]),
    /// `EVALSHA`: a cached script.
    Sha(&'a [u8]),
    /// `FCALL`: a loaded function.
    Function(&'a [u8]),
}

/// A script's keys and arguments.
pub(crate) struct Invocation<'a> {
    pub keys: &'a [&'a [u8]],
    pub args: &'a [&'a [u8]],
    /// The whole command, as FUNCTION STATS shows it.
    pub command: &'a [&'a [u8]],
}

fn lua_error(e: mlua::Error) -> String {
    format!("ERR Error compiling script (new function): {e}")
}

impl Scripts {
    pub(crate) fn new() -> Result<Scripts, String> {
        let kill = Arc::new(AtomicBool::new(false));
        let vm = vm::Vm::new(kill.clone()).map_err(|e| format!("cannot start Lua: {e}"))?;
        Ok(Scripts {
            vm: Mutex::new(State {
                runs: 0,
                vm,
                cache: HashMap::new(),
                functions: Default::default(),
            }),
            kill,
            running: Mutex::new(None),
            counts: Mutex::new((0, 0)),
            active: AtomicUsize::new(0),
            busy_threshold_ms: AtomicU64::new(5000),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.vm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `SCRIPT LOAD`: compiles and caches `body`, answering its SHA1.
    pub(crate) fn load(&self, body: &[u8]) -> Result<String, String> {
        let mut st = self.state();
        let (sha, _) = st.cached(body)?;
        Ok(sha)
    }

    /// `SCRIPT EXISTS`.
    pub(crate) fn exists(&self, sha: &[u8]) -> bool {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.state().cache.contains_key(&sha)
    }

    /// `SCRIPT FLUSH`.
    pub(crate) fn flush(&self) {
        self.state().cache.clear();
    }

    /// Scripts in EVAL's cache (`INFO memory`'s `number_of_cached_scripts`).
    pub(crate) fn cached_count(&self) -> usize {
        self.state().cache.len()
    }

    /// Bytes the interpreter holds (`INFO memory`'s `used_memory_lua`).
    pub(crate) fn memory(&self) -> usize {
        self.state().vm.lua.used_memory()
    }

    /// `SCRIPT KILL` (`function` false) or `FUNCTION KILL`: stops the running script unless it
    /// has written.
    pub(crate) fn kill(&self, function: bool) -> Result<(), String> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        match running.as_ref() {
            None => Err("NOTBUSY No scripts in execution right now.".into()),
            Some(r) if r.function != function => Err(if function {
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL.".into()
            } else {
                "BUSY Redis is busy running a function. You can only call FUNCTION KILL.".into()
            }),
            Some(r) if r.wrote => Err(
                "UNKILLABLE Sorry the script already executed write commands against the \
                 dataset. You can either wait the script termination or kill the server in a \
                 hard way using the SHUTDOWN NOSAVE command."
                    .into(),
            ),
            Some(_) => {
                self.kill.store(true, Ordering::SeqCst);
                Ok(())
            }
        }
    }

    /// Stops the running script whatever it has done (the server is shutting down).
    pub(crate) fn stop_now(&self) {
        if self.active() {
            self.kill.store(true, Ordering::SeqCst);
        }
    }

    /// A script is handed to the script thread: commands wait for it from now on.
    pub(crate) fn queued(&self) {
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    /// A script handed to the script thread is done.
    pub(crate) fn done(&self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
    }

    /// True while a script runs or waits to.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Acquire) > 0
    }

    /// How long the running script has run, when one runs.
    pub(crate) fn running_for(&self) -> Option<std::time::Duration> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.as_ref().map(|r| r.started.elapsed())
    }

    /// True when what runs is a function (`FCALL`), not a script.
    pub(crate) fn running_function(&self) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.as_ref().is_some_and(|r| r.function)
    }

    /// Notes that the running script has written (it can no longer be killed).
    pub(crate) fn note_write(&self) {
        if let Some(r) = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            r.wrote = true;
        }
    }

    /// The flags of a cached script (`None`: not cached).
    pub(crate) fn script_flags(&self, sha: &[u8]) -> Option<FunctionFlags> {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.state().cache.get(&sha).map(|(_, flags)| *flags)
    }

    /// The flags a function was registered with, for the checks made before it runs.
    pub(crate) fn function_flags(&self, name: &[u8]) -> Option<FunctionFlags> {
        self.state().functions.flags(name)
    }

    /// Flags of an EVAL body's `#!lua` line (none without one).
    pub(crate) fn body_flags(body: &[u8]) -> Result<FunctionFlags, String> {
        functions::shebang_flags(body)
    }

    /// Runs a script or function and writes its reply (or its error) in `out`. Errors found
    /// before it runs (no such script, no such function) are the `Err`.
    pub(crate) fn run(
        &self,
        target: Target<'_>,
        call: &Invocation<'_>,
        host: &mut dyn Host,
        out: &mut Reply<'_>,
    ) -> Result<(), String> {
        let mut st = self.state();
        let (f, name, is_function) = match target {
            Target::Body(body) => {
                let (sha, f) = st.cached(body)?;
                (f, format!("f_{sha}"), false)
            }
            Target::Sha(sha) => {
                let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
                let f =
                    st.cache.get(&sha).map(|(f, _)| f.clone()).ok_or_else(|| {
                        "NOSCRIPT No matching script. Please use EVAL.".to_string()
                    })?;
                (f, format!("f_{sha}"), false)
            }
            Target::Function(name) => {
                let f = st
                    .functions
                    .callback(name)
                    .ok_or_else(|| "ERR Function not found".to_string())?;
                (f, String::from_utf8_lossy(name).into_owned(), true)
            }
        };
        self.kill.store(false, Ordering::SeqCst);
        vm::watch(&st.vm.lua, self.kill.clone(), vm::KILL_CHECK_EVERY);
        let command = call.command.iter().map(|a| a.to_vec()).collect();
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(Running {
            started: Instant::now(),
            function: is_function,
            wrote: false,
            name: name.clone(),
            command,
        });
        self.active.fetch_add(1, Ordering::AcqRel);
        // The reply is made aside, so that a script that fails half-way leaves no half
        // reply behind.
        let mut reply = Vec::new();
        let protocol = if out.is_resp3() { 3 } else { 2 };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut aside = Reply::new(&mut reply, protocol);
            st.invoke(&f, is_function, call, host, &mut aside, &name)
        }));
        let result = result.unwrap_or_else(|_| {
            // The interpreter may be left in any state: it is made again, with the libraries
            // loaded again, and EVAL's cache starts empty.
            drop(f);
            st.restart(&self.kill);
            Err(mlua::Error::runtime("the script stopped the interpreter"))
        });
        self.active.fetch_sub(1, Ordering::AcqRel);
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let killed = self.kill.swap(false, Ordering::SeqCst);
        match result {
            // Stopped by SCRIPT KILL: the script failed, whatever caught the error inside it.
            Err(_) if killed => out.error(vm::KILLED),
            Ok(()) if killed && reply.first() == Some(&b'-') => out.error(vm::KILLED),
            Err(e) => out.error(&format!("ERR {e}")),
            Ok(()) => out.raw(&reply),
        }
        Ok(())
    }

    /// `FUNCTION LOAD`: compiles a library, registering its functions; answers its name.
    pub(crate) fn load_library(&self, code: &[u8], replace: bool) -> Result<String, String> {
        let mut st = self.state();
        let State { vm, functions, .. } = &mut *st;
        let loaded = functions.load(vm, code, replace);
        self.count(functions);
        loaded
    }

    /// FUNCTION's other subcommands work on the libraries.
    pub(crate) fn with_functions<R>(&self, f: impl FnOnce(&mut functions::Functions) -> R) -> R {
        let mut st = self.state();
        let r = f(&mut st.functions);
        self.count(&st.functions);
        r
    }

    fn count(&self, functions: &functions::Functions) {
        let n = functions
            .libraries
            .values()
            .map(|l| l.functions.len())
            .sum();
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()) = (functions.libraries.len(), n);
    }

    /// FUNCTION STATS, without waiting for the running script: the running function (its
    /// name, its FCALL and how long it has run, in milliseconds), the libraries and the
    /// functions loaded.
    pub(crate) fn stats(&self) -> (Option<RunningFunction>, usize, usize) {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let now = running.as_ref().filter(|r| r.function).map(|r| {
            (
                r.name.clone(),
                r.command.clone(),
                r.started.elapsed().as_millis() as u64,
            )
        });
        let (libraries, functions) = *self.counts.lock().unwrap_or_else(|e| e.into_inner());
        (now, libraries, functions)
    }
}

impl State {
    /// A new interpreter in place of this one, with the same libraries loaded.
    fn restart(&mut self, kill: &Arc<AtomicBool>) {
        let Ok(vm) = vm::Vm::new(kill.clone()) else {
            return;
        };
        self.vm = vm;
        self.cache.clear();
        let codes: Vec<Vec<u8>> = self
            .functions
            .libraries
            .values()
            .map(|l| l.code.clone())
            .collect();
        self.functions = Default::default();
        for code in codes {
            let _ = self.functions.load(&self.vm, &code, true);
        }
    }

    /// The compiled script of `body`, compiling and caching it when new.
    fn cached(&mut self, body: &[u8]) -> Result<(String, Function), String> {
        let sha = sha1_hex(body);
        if let Some((f, _)) = self.cache.get(&sha) {
            return Ok((sha, f.clone()));
        }
        let flags = functions::shebang_flags(body)?;
        let text = functions::without_shebang(body);
        let f = self.vm.compile(&text, "@user_script").map_err(lua_error)?;
        self.cache.insert(sha.clone(), (f.clone(), flags));
        Ok((sha, f))
    }

    /// Calls `f` with `redis.call` bound to `host`, and writes what it returns.
    fn invoke(
        &mut self,
        f: &Function,
        is_function: bool,
        call: &Invocation<'_>,
        host: &mut dyn Host,
        out: &mut Reply<'_>,
        name: &str,
    ) -> mlua::Result<()> {
        let vm = &self.vm;
        let lua = &vm.lua;
        let keys = strings(lua, call.keys)?;
        let argv = strings(lua, call.args)?;
        if !is_function {
            vm.visible.raw_set("KEYS", keys.clone())?;
            vm.visible.raw_set("ARGV", argv.clone())?;
        }
        let protocol = Cell::new(2u8);
        let host = RefCell::new(host);
        lua.scope(|scope| {
            let pcall = scope.create_function(|lua, args: MultiValue| {
                command(lua, &host, protocol.get(), args)
            })?;
            let setresp = scope.create_function(|_, n: Value| {
                match n {
                    Value::Integer(2) => protocol.set(2),
                    Value::Integer(3) => protocol.set(3),
                    Value::Number(x) if x == 2.0 || x == 3.0 => protocol.set(x as u8),
                    _ => return Err(mlua::Error::runtime("RESP version must be 2 or 3.")),
                }
                Ok(())
            })?;
            let acl_check = scope.create_function(|_, args: MultiValue| {
                let argv = command_args(&args).map_err(|_| {
                    mlua::Error::runtime(
                        "ERR Lua redis lib command arguments must be strings or integers",
                    )
                })?;
                let mut host = host
                    .try_borrow_mut()
                    .map_err(|_| mlua::Error::runtime("redis.acl_check_cmd inside redis.call"))?;
                host.acl_check(&argv).map_err(mlua::Error::runtime)
            })?;
            vm.redis.raw_set("acl_check_cmd", acl_check)?;
            let raising: Function = vm.raising.call(pcall.clone())?;
            vm.redis.raw_set("pcall", pcall)?;
            vm.redis.raw_set("call", raising)?;
            vm.redis.raw_set("setresp", setresp)?;
            let (ok, value): (bool, Value) = vm.protected_call.call((f.clone(), keys, argv))?;
            if ok {
                if !convert::lua_to_reply(&value, out) {
                    return Err(mlua::Error::runtime("the script's reply is too large"));
                }
            } else {
                write_error(&value, name, out);
            }
            Ok(())
        })?;
        for k in ["pcall", "call", "setresp", "acl_check_cmd"] {
            vm.redis.raw_set(k, Value::Nil)?;
        }
        if !is_function {
            vm.visible.raw_set("KEYS", Value::Nil)?;
            vm.visible.raw_set("ARGV", Value::Nil)?;
        }
        // What scripts leave behind (tables, strings) is collected every GC_PERIOD scripts,
        // as Redis collects it, a step at a time between.
        self.runs += 1;
        if self.runs.is_multiple_of(GC_PERIOD) {
            self.vm.lua.gc_collect()?;
        } else {
            self.vm.lua.gc_step()?;
        }
        Ok(())
    }
}

/// A Lua array of byte strings.
fn strings(lua: &Lua, items: &[&[u8]]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

/// An error table (`{err=...}`) as `redis.pcall` answers it.
fn error_table(lua: &Lua, msg: &str) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("err", msg)?;
    Ok(Value::Table(t))
}

/// `redis.pcall`: runs a command through the host and reads its reply into Lua.
fn command(
    lua: &Lua,
    host: &RefCell<&mut dyn Host>,
    protocol: u8,
    args: MultiValue,
) -> mlua::Result<Value> {
    if args.is_empty() {
        return error_table(
            lua,
            "ERR Please specify at least one argument for this redis lib call",
        );
    }
    let Ok(argv) = command_args(&args) else {
        return error_table(
            lua,
            "ERR Lua redis lib command arguments must be strings or integers",
        );
    };
    let reply = host
        .try_borrow_mut()
        .map_err(|_| mlua::Error::runtime("redis.call from inside redis.call"))?
        .call(&argv, protocol);
    let mut at = 0;
    convert::reply_to_lua(lua, &reply, &mut at)
}

/// A command's arguments from Lua: strings and numbers, as Redis takes them.
fn command_args(args: &MultiValue) -> Result<Vec<Vec<u8>>, ()> {
    args.iter()
        .map(|a| match a {
            Value::String(s) => Ok(s.as_bytes().to_vec()),
            Value::Integer(n) => Ok(n.to_string().into_bytes()),
            Value::Number(n) => Ok(lua_number_text(*n).into_bytes()),
            _ => Err(()),
        })
        .collect()
}

/// A number as Lua 5.1 turns it into a string (`%.14g`).
fn lua_number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        return format!("{}", n as i64);
    }
    let s = format!("{n:.13e}");
    // Re-read through `%g`'s rules: fixed notation where the exponent allows it.
    let exp: i32 = s
        .rsplit_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0);
    if (-5..14).contains(&exp) {
        let digits = (13 - exp).max(0) as usize;
        let fixed = format!("{n:.digits$}");
        let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
        trimmed.to_string()
    } else {
        let (mantissa, _) = s.split_once('e').unwrap_or((&s, ""));
        let m = mantissa.trim_end_matches('0').trim_end_matches('.');
        format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// A script's failure as its reply: Redis's `-<err> script: <name>, on <source>:<line>.`
fn write_error(value: &Value, name: &str, out: &mut Reply<'_>) {
    let Value::Table(t) = value else {
        let msg = match value {
            Value::String(s) => s.to_string_lossy(),
            _ => "execution failure".into(),
        };
        out.error(&format!("ERR Error running script {name}, {msg}"));
        return;
    };
    let msg = match t.raw_get::<Value>("err") {
        Ok(Value::String(s)) => s.to_string_lossy(),
        _ => "ERR unknown error".into(),
    };
    let msg = if msg.is_empty() { "ERR".into() } else { msg };
    match (t.raw_get::<Value>("source"), t.raw_get::<Value>("line")) {
        (Ok(Value::String(source)), Ok(line)) if !line.is_nil() => {
            let line = match line {
                Value::Integer(n) => n.to_string(),
                Value::Number(n) => (n as i64).to_string(),
                _ => "?".into(),
            };
            out.error(&format!(
                "{msg} script: {name}, on {}:{line}.",
                source.to_string_lossy()
            ));
        }
        _ => out.error(&msg),
    }
}

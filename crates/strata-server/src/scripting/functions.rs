//! `FUNCTION LOAD`'s libraries, and the `#!lua` line that opens a library or a script.
//!
//! A library is Lua code whose first line is `#!lua name=<library>`; running it registers
//! functions with `redis.register_function`. The server keeps each library's code in the
//! engine (`commands/scripting.rs`) and loads them all again when it starts.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use mlua::{Function, Table, Value};

use super::vm::Vm;

/// How long a library's code may run while it loads.
const LOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// The flags a script (`#!lua flags=...`) or a function (`flags={...}`) declares.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct FunctionFlags {
    pub no_writes: bool,
    pub allow_oom: bool,
    pub allow_stale: bool,
    pub no_cluster: bool,
    pub allow_cross_slot_keys: bool,
    /// The flags were declared (a function, or a script with a `#!lua` line): a script
    /// that may write is refused before it runs where writes would be.
    pub declared: bool,
}

impl FunctionFlags {
    fn set(&mut self, name: &str) -> bool {
        match name {
            "no-writes" => self.no_writes = true,
            "allow-oom" => self.allow_oom = true,
            "allow-stale" => self.allow_stale = true,
            "no-cluster" => self.no_cluster = true,
            "allow-cross-slot-keys" => self.allow_cross_slot_keys = true,
            _ => return false,
        }
        true
    }

    /// The flags' names, as FUNCTION LIST shows them.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        [
            (self.no_writes, "no-writes"),
            (self.allow_oom, "allow-oom"),
            (self.allow_stale, "allow-stale"),
            (self.no_cluster, "no-cluster"),
            (self.allow_cross_slot_keys, "allow-cross-slot-keys"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// A loaded library.
pub(crate) struct Library {
    pub name: String,
    pub code: Vec<u8>,
    pub functions: BTreeMap<String, Func>,
}

/// A registered function.
pub(crate) struct Func {
    callback: Function,
    pub flags: FunctionFlags,
    pub description: Option<String>,
}

/// Every loaded library, and each function's library by the function's name.
#[derive(Default)]
pub(crate) struct Functions {
    pub libraries: BTreeMap<String, Library>,
    owners: HashMap<String, String>,
}

/// The first line when it is a shebang (`#!...`), without the `#!`.
fn shebang(code: &[u8]) -> Option<&[u8]> {
    let rest = code.strip_prefix(b"#!")?;
    let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    rest.get(..end)
}

/// A script's body with its shebang line made a comment (line numbers stay).
pub(crate) fn without_shebang(body: &[u8]) -> Vec<u8> {
    let mut text = body.to_vec();
    if text.starts_with(b"#!")
        && let Some(head) = text.get_mut(..2)
    {
        head.copy_from_slice(b"--");
    }
    text
}

/// The flags an EVAL body's `#!lua flags=...` line declares.
pub(crate) fn shebang_flags(body: &[u8]) -> Result<FunctionFlags, String> {
    let mut flags = FunctionFlags::default();
    let Some(line) = shebang(body) else {
        return Ok(flags);
    };
    flags.declared = true;
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_ascii_whitespace();
    let engine = parts.next().unwrap_or("");
    if engine != "lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {part}"));
        };
        for f in list.split(',').filter(|f| !f.is_empty()) {
            if !flags.set(f) {
                return Err(format!("ERR Unexpected flag in script shebang: {f}"));
            }
        }
    }
    Ok(flags)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The library name of a `#!lua name=...` line.
fn library_name(code: &[u8]) -> Result<String, String> {
    let line = shebang(code).ok_or("ERR Missing library metadata")?;
    let line = String::from_utf8_lossy(line);
    // The engine runs to the first space; the options follow, a value in quotes or not.
    let (engine, options) = line.split_once(' ').unwrap_or((&line, ""));
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("ERR Engine '{engine}' not found"));
    }
    let mut name = None;
    for part in options.split_ascii_whitespace() {
        match part.strip_prefix("name=") {
            Some(_) if name.is_some() => {
                return Err(
                    "ERR Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            Some(n) => {
                let unquoted = n
                    .strip_prefix('"')
                    .and_then(|n| n.strip_suffix('"'))
                    .unwrap_or(n);
                name = Some(unquoted.to_string());
            }
            None => return Err(format!("ERR Invalid metadata value given: {part}")),
        }
    }
    let name = name.ok_or("ERR Library name was not given")?;
    if !valid_name(&name) {
        return Err(
            "ERR Library names can only contain letters, numbers, or underscores(_) \
                    and must be at least one character long"
                .into(),
        );
    }
    Ok(name)
}

/// One `redis.register_function` call's arguments, read.
fn registration(args: mlua::MultiValue) -> Result<(String, Func), String> {
    if args.len() > 2 || args.is_empty() {
        return Err("wrong number of arguments to redis.register_function".into());
    }
    let mut args = args.into_iter();
    let (name, callback, flags, description) = match (args.next(), args.next()) {
        (Some(Value::Table(t)), None) => named_registration(&t)?,
        (Some(_), None) => {
            return Err(
                "calling redis.register_function with a single argument is only \
                        applicable to Lua table (representing named arguments)."
                    .into(),
            );
        }
        (Some(Value::String(name)), Some(Value::Function(f))) => (name, f, None, None),
        (Some(Value::String(_)), Some(_)) => {
            return Err("second argument to redis.register_function must be a function".into());
        }
        _ => return Err("first argument to redis.register_function must be a string".into()),
    };
    let name = name.to_string_lossy();
    if !valid_name(&name) {
        return Err(
            "Library names can only contain letters, numbers, or underscores(_) and \
                    must be at least one character long"
                .into(),
        );
    }
    let mut f = FunctionFlags {
        declared: true,
        ..FunctionFlags::default()
    };
    if let Some(flags) = flags {
        for v in flags.sequence_values::<Value>() {
            let Ok(Value::String(s)) = v else {
                return Err("unknown flag given".into());
            };
            if !f.set(&s.to_string_lossy()) {
                return Err("unknown flag given".into());
            }
        }
    }
    Ok((
        name,
        Func {
            callback,
            flags: f,
            description,
        },
    ))
}

type Named = (mlua::String, Function, Option<Table>, Option<String>);

fn named_registration(t: &Table) -> Result<Named, String> {
    let (mut name, mut callback, mut flags, mut description) = (None, None, None, None);
    for pair in t.pairs::<String, Value>() {
        let (k, v) = pair.map_err(|_| "unknown argument given to redis.register_function")?;
        let wrong = |what: &str| {
            Err(format!(
                "{what} argument given to redis.register_function must be {}",
                match what {
                    "function_name" | "description" => "a string",
                    _ => "a function",
                }
            ))
        };
        match (k.as_str(), v) {
            ("function_name", Value::String(s)) => name = Some(s),
            ("function_name", _) => return wrong("function_name"),
            ("callback", Value::Function(f)) => callback = Some(f),
            ("callback", _) => return wrong("callback"),
            ("flags", Value::Table(t)) => flags = Some(t),
            ("flags", _) => {
                return Err("flags argument to redis.register_function must be a table \
                            representing function flags"
                    .into());
            }
            ("description", Value::String(s)) => description = Some(s.to_string_lossy()),
            ("description", _) => return wrong("description"),
            _ => return Err("unknown argument given to redis.register_function".into()),
        }
    }
    Ok((
        name.ok_or("redis.register_function must get a function name argument")?,
        callback.ok_or("redis.register_function must get a callback argument")?,
        flags,
        description,
    ))
}

impl Functions {
    /// Compiles and runs a library's code, registering its functions; answers the library's
    /// name.
    pub(crate) fn load(&mut self, vm: &Vm, code: &[u8], replace: bool) -> Result<String, String> {
        let name = library_name(code)?;
        if self.libraries.contains_key(&name) && !replace {
            return Err(format!("ERR Library '{name}' already exists"));
        }
        let body = without_shebang(code);
        let (chunk, opened) = vm
            .compile_library(&body)
            .map_err(|e| format!("ERR Error compiling function: {e}"))?;
        let registered: RefCell<Vec<(String, Func)>> = RefCell::new(Vec::new());
        let failure: RefCell<Option<String>> = RefCell::new(None);
        let ran = vm.lua.scope(|scope| {
            let register = scope.create_function(|_, args: mlua::MultiValue| {
                let checked = registration(args).and_then(|(name, f)| {
                    let mut all = registered.borrow_mut();
                    if all.iter().any(|(n, _)| n.eq_ignore_ascii_case(&name)) {
                        return Err("Function already exists in the library".to_string());
                    }
                    all.push((name, f));
                    Ok(())
                });
                if let Err(e) = checked {
                    failure.borrow_mut().get_or_insert(e.clone());
                    return Err(mlua::Error::runtime(e));
                }
                Ok(())
            })?;
            vm.load_redis.raw_set("register_function", register)?;
            // A library's code runs at most LOAD_TIMEOUT, as in Redis.
            let deadline = std::time::Instant::now() + LOAD_TIMEOUT;
            vm.lua.set_hook(
                mlua::HookTriggers::new().every_nth_instruction(10_000),
                move |_, _| {
                    if std::time::Instant::now() > deadline {
                        Err(mlua::Error::runtime("FUNCTION LOAD timeout"))
                    } else {
                        Ok(mlua::VmState::Continue)
                    }
                },
            );
            let r: (bool, Value) = vm.protected_call.call(chunk)?;
            vm.lua.remove_hook();
            vm.load_redis
                .raw_set("register_function", vm.not_loading.clone())?;
            Ok(r)
        });
        let (ok, err) = ran.map_err(|e| format!("ERR Error registering functions: {e}"))?;
        if let Some(e) = failure.into_inner() {
            return Err(format!("ERR {e}"));
        }
        if !ok {
            let msg = match err {
                Value::Table(t) => t.raw_get::<String>("err").unwrap_or_default(),
                _ => "ERR error".into(),
            };
            return Err(format!("ERR Error registering functions: {msg}"));
        }
        opened
            .call::<()>(())
            .map_err(|e| format!("ERR Error registering functions: {e}"))?;
        let registered = registered.into_inner();
        if registered.is_empty() {
            return Err("ERR No functions registered".into());
        }
        let mut functions = BTreeMap::new();
        for (fname, f) in registered {
            if self
                .owners
                .get(&fname.to_ascii_lowercase())
                .is_some_and(|owner| *owner != name)
            {
                return Err(format!("ERR Function {fname} already exists"));
            }
            functions.insert(fname, f);
        }
        self.delete(&name);
        for fname in functions.keys() {
            self.owners.insert(fname.to_ascii_lowercase(), name.clone());
        }
        self.libraries.insert(
            name.clone(),
            Library {
                name: name.clone(),
                code: code.to_vec(),
                functions,
            },
        );
        Ok(name)
    }

    /// Removes a library; false when there is none of that name.
    pub(crate) fn delete(&mut self, name: &str) -> bool {
        let Some(lib) = self.libraries.remove(name) else {
            return false;
        };
        for f in lib.functions.keys() {
            self.owners.remove(&f.to_ascii_lowercase());
        }
        true
    }

    pub(crate) fn flush(&mut self) {
        self.libraries.clear();
        self.owners.clear();
    }

    /// A function by its name, in any case (Redis's function names are case-insensitive).
    fn func(&self, name: &[u8]) -> Option<&Func> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        let lib = self.libraries.get(self.owners.get(&name)?)?;
        lib.functions
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(&name))
            .map(|(_, f)| f)
    }

    pub(crate) fn callback(&self, name: &[u8]) -> Option<Function> {
        self.func(name).map(|f| f.callback.clone())
    }

    pub(crate) fn flags(&self, name: &[u8]) -> Option<FunctionFlags> {
        self.func(name).map(|f| f.flags)
    }
}

//! What a reader needs to judge a run: the machine, the file system under the database, the
//! commit, and each engine's version.

use std::path::Path;

/// The versions of the engines, from the workspace's lock file as it was built.
const LOCK: &str = include_str!("../../../Cargo.lock");

fn locked_version(package: &str) -> Option<&'static str> {
    let pattern = format!("name = \"{package}\"\nversion = \"");
    let at = LOCK.find(&pattern)? + pattern.len();
    LOCK[at..].split('"').next()
}

/// `strata 0.1.0, rocksdb 0.24.0 (librocksdb-sys 0.17.3+10.4.2), ...` for the engines named.
pub fn engine_versions(engines: &[&str]) -> String {
    engines
        .iter()
        .map(|&e| match e {
            "rocksdb" => {
                let sys = locked_version("librocksdb-sys").unwrap_or("?");
                format!(
                    "rocksdb crate {} (librocksdb-sys {sys}, RocksDB {})",
                    locked_version("rocksdb").unwrap_or("?"),
                    sys.split('+').nth(1).unwrap_or("?")
                )
            }
            "leveldb" => format!(
                "leveldb-sys {} (LevelDB {})",
                locked_version("leveldb-sys").unwrap_or("?"),
                leveldb_version()
            ),
            "fjall" => format!(
                "fjall {} (lsm-tree {})",
                locked_version("fjall").unwrap_or("?"),
                locked_version("lsm-tree").unwrap_or("?")
            ),
            other => format!("{other} {}", env!("CARGO_PKG_VERSION")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(feature = "compare")]
fn leveldb_version() -> String {
    crate::engines::leveldb_engine::version()
}

#[cfg(not(feature = "compare"))]
fn leveldb_version() -> String {
    "not built in".into()
}

/// The commit of the checkout this binary was built in, with `-dirty` if its code (the
/// crates and the lock file, not the results this run writes under docs/) differs from it.
pub fn commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(["-C", dir])
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short=10", "HEAD"]) else {
        return "unknown (not run from a git checkout)".into();
    };
    let top = git(&["rev-parse", "--show-toplevel"]).unwrap_or_default();
    let changes = git(&[
        "-C",
        &top,
        "status",
        "--porcelain",
        "--",
        "crates",
        "Cargo.toml",
        "Cargo.lock",
    ]);
    match changes {
        Some(c) if c.is_empty() => head,
        _ => format!("{head}-dirty"),
    }
}

fn first_line_field(file: &str, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    Some(line[name.len()..].trim().to_string())
}

/// The file system type mounted at the deepest mount point above `dir`.
fn file_system(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, at, fs) = (f.next()?, f.next()?, f.next()?);
            dir.starts_with(at)
                .then(|| (at.len(), format!("{fs} on {dev}")))
        })
        .max_by_key(|(len, _)| *len)
        .map_or("unknown".into(), |(_, fs)| fs)
}

/// A memory limit on this process's control group (cgroup v1 or v2), if one is set.
fn memory_limit() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let file = match controllers {
            c if c.split(',').any(|c| c == "memory") => {
                format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
            }
            "" => format!("/sys/fs/cgroup{path}/memory.max"),
            _ => continue,
        };
        if let Some(limit) = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&l| l < 1 << 60)
        {
            return Some(limit);
        }
    }
    None
}

/// One line on the machine: cores, memory (and the process's limit), kernel, file system.
pub fn describe(dir: &Path) -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = first_line_field("/proc/cpuinfo", "model name")
        .map(|m| m.trim_start_matches(':').trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_kb: u64 = first_line_field("/proc/meminfo", "MemTotal:")
        .and_then(|m| m.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or("unknown".into(), |k| k.trim().to_string());
    let limit = memory_limit().map_or(String::new(), |l| {
        format!(
            " (this process limited to {} MiB, page cache included)",
            l >> 20
        )
    });
    format!(
        "{cores} cores ({cpu}), {:.1} GiB memory{limit}, Linux {kernel}, {}",
        mem_kb as f64 / 1_048_576.0,
        file_system(dir)
    )
}

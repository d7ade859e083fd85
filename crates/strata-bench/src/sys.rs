//! Facts about this process and the disk: peak memory, bytes written, directory sizes.

use std::path::Path;

fn proc_field(file: &str, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The process's peak resident set size in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_field("/proc/self/status", "VmHWM:").map(|kb| kb * 1024)
}

/// Bytes this process has caused to be written to storage (all its threads): what it
/// dirtied in the page cache or wrote directly, less what was dropped before it reached the
/// disk (a file deleted or truncated while still dirty). The same count for every engine.
pub fn write_bytes() -> Option<u64> {
    let written = proc_field("/proc/self/io", "write_bytes:")?;
    let cancelled = proc_field("/proc/self/io", "cancelled_write_bytes:").unwrap_or(0);
    Some(written.saturating_sub(cancelled))
}

/// The size of every file under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

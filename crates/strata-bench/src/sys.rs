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

/// The CPU time this process has used so far, all its threads: (user, system) seconds.
/// Over a read workload, system time above user time is the mark of the kernel working
/// for the reads (page faults, reclaim of the page cache under a memory limit) more than
/// the engine does.
pub fn cpu_seconds() -> Option<(f64, f64)> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a whole `rusage` to the pointer it is given on success.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the call succeeded, so the value is written.
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some((secs(usage.ru_utime), secs(usage.ru_stime)))
}

/// Starts the peak resident set size over from the current size (Linux's `clear_refs`), so
/// that the peak measured next is one engine's, not the largest of the engines run before.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Bytes this process has written to storage (all its threads): the file pages it dirtied,
/// through `write` or a shared mapping alike, and its direct writes. The same count for
/// every engine. A page dirtied again before the kernel writes it back counts once; a file
/// deleted while still dirty counts in full (Linux's `cancelled_write_bytes`, left aside here,
/// depends on writeback timing and can be charged to a later workload).
pub fn write_bytes() -> Option<u64> {
    proc_field("/proc/self/io", "write_bytes:")
}

/// Bytes this process (all its threads) caused to be read from storage: the pages the kernel
/// fetched from the device for its reads and page faults, not those the page cache already
/// held. Over a read workload beyond memory, this per lookup is what the disk was asked for.
pub fn read_bytes() -> Option<u64> {
    proc_field("/proc/self/io", "read_bytes:")
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

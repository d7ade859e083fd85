//! The memory the process may use, from which the defaults of the memory budgets are taken
//! ([`crate::Options::table_pinned_bytes`], [`crate::Options::table_map_bytes`]).
//!
//! A process in a control group may use what the group's memory limit allows (page cache
//! included), which can be far less than the machine has: the limit of cgroup v2
//! (`memory.max`) or v1 (`memory.limit_in_bytes`) of the process's group and of each group
//! above it, the smallest of them. Without a limit, the machine's physical memory.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Bytes of memory the process may use: its control group's limit where one is set, else
/// the machine's physical memory (4 GiB where neither can be read). Read once.
pub fn process_memory_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let physical = physical_memory().unwrap_or(4 << 30);
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        cgroup_limit(&cgroups, Path::new("/sys/fs/cgroup")).map_or(physical, |l| l.min(physical))
    })
}

/// Gives the heap's free memory back to the system. The C library's allocator keeps what
/// compactions and flushes free (their block, index and filter buffers, tens of megabytes
/// across its arenas) for later allocations, and the process is charged for it; under a
/// memory limit that counts the page cache, each of those megabytes is a megabyte less of
/// the tables the page cache can hold. Called when background work goes idle: 20M entries
/// under 384 MiB, the process's anonymous memory went from 95 to 56 MB and the page cache
/// from 284 to 322 MB. Where the allocator is not glibc's, does nothing.
pub(crate) fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim walks the allocator's own free lists under its own locks, and
    // returns only memory no allocation holds.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The machine's physical memory, from `/proc/meminfo`.
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The smallest memory limit set on the groups `cgroups` (the text of `/proc/self/cgroup`)
/// names and on their ancestors, under the hierarchies mounted at `root`.
fn cgroup_limit(cgroups: &str, root: &Path) -> Option<u64> {
    let mut limits = Vec::new();
    for line in cgroups.lines() {
        // `ID:CONTROLLERS:PATH`; v2 has ID 0 and no controllers.
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            limits.extend(walk_up(
                &root.join("memory"),
                relative,
                "memory.limit_in_bytes",
            ));
        } else if id == "0" && controllers.is_empty() {
            for base in [root.to_path_buf(), root.join("unified")] {
                limits.extend(walk_up(&base, relative, "memory.max"));
            }
        }
    }
    limits.into_iter().min()
}

/// The limits in file `name` of the group at `base/relative` and of each group above it up
/// to `base`; a missing file, `max` and v1's "no limit" (near `i64::MAX`) give none.
fn walk_up(base: &Path, relative: &str, name: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut dir: PathBuf = base.join(relative);
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join(name))
            && let Ok(limit) = text.trim().parse::<u64>()
            && limit < (1 << 60)
        {
            out.push(limit);
        }
        if dir == base || !dir.pop() || !dir.starts_with(base) {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn the_smallest_limit_of_the_group_and_its_ancestors_counts() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        // v1: a limit on a parent group, none on the process's own.
        write(
            &root.join("memory/jobs/memory.limit_in_bytes"),
            "402653184\n",
        );
        write(
            &root.join("memory/jobs/bench/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        let v1 = "4:memory:/jobs/bench\n0::/\n";
        assert_eq!(cgroup_limit(v1, root), Some(402653184));
        // v2: the process's group sets one, its parent says `max`.
        write(&root.join("svc/memory.max"), "max\n");
        write(&root.join("svc/db/memory.max"), "1073741824\n");
        assert_eq!(cgroup_limit("0::/svc/db\n", root), Some(1 << 30));
        // No limit anywhere, or no such files: none.
        assert_eq!(cgroup_limit("0::/svc\n", root), None);
        assert_eq!(cgroup_limit("0::/elsewhere\n", root), None);
        assert_eq!(cgroup_limit("garbage\n\n4:memory\n", root), None);
    }

    #[test]
    fn the_process_limit_is_at_most_the_machine() {
        let limit = process_memory_limit();
        assert!(limit >= 1 << 20, "{limit}");
        if let Some(physical) = physical_memory() {
            assert!(limit <= physical);
        }
    }
}

//! The memory a flushed memtable held leaves the process.
//!
//! Its own test binary, with one test: the resident set is the whole process's, so nothing
//! else may allocate beside it.

#![cfg(target_os = "linux")]

mod common;

use std::time::{Duration, Instant};

use strata::{Db, Options};

const MIB: u64 = 1 << 20;

/// The process's resident anonymous memory: the heap and private mappings, not file pages.
fn resident_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("RssAnon in /proc/self/status");
    kib * 1024
}

/// Fills and flushes the memtable three times. Each round, about 50 MiB of entries join the
/// resident set and must leave it once flushed. Memory the allocator kept after the first
/// round's free would be handed out again in the next without leaving the process, and the
/// resident set would stay up after the later rounds' flushes.
#[test]
fn a_flushed_memtable_gives_its_memory_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        Options {
            write_buffer_size: 256 << 20,
            idle_merge_after: None,
            read_triggered_compaction: false,
            ..common::options()
        },
    )
    .unwrap();
    let value = vec![b'v'; 200];
    for round in 0..3u64 {
        let before = resident_anon();
        for i in 0..200_000u64 {
            let key = format!("{:016}", (i * 7_919 + round) % 1_000_003);
            db.put(key.as_bytes(), &value).unwrap();
        }
        let full = resident_anon();
        assert!(
            full > before + 40 * MIB,
            "round {round}: 200,000 entries of 216 bytes added only {} MiB",
            (full.saturating_sub(before)) / MIB
        );
        db.flush().unwrap();
        // The flush thread drops its hold on the memtable just after the flush is done.
        let start = Instant::now();
        let mut after = resident_anon();
        while after > before + 10 * MIB && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
            after = resident_anon();
        }
        assert!(
            after <= before + 10 * MIB,
            "round {round}: {} MiB resident before the writes, {} MiB with them, {} MiB after \
             their flush",
            before / MIB,
            full / MIB,
            after / MIB
        );
        assert_eq!(db.stats().memtable_bytes, 0);
    }
}

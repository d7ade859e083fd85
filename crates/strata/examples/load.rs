//! Loads random keys into a database and reports the shape of the tree: per level the files,
//! bytes and target, write amplification, and on-disk size against live data before and after
//! a full compaction.
//!
//! ```text
//! cargo run --release -p strata --example load -- --num 10000000 --ratio 10 --dir /tmp/strata-load
//! ```
//!
//! `--keep` skips the final full compaction, leaving the tree as the load shaped it.

use std::time::Instant;

use strata::{Db, Options, Stats};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn print_levels(s: &Stats) {
    println!("  level  files        bytes       target");
    for (i, l) in s.levels.iter().enumerate() {
        if l.files == 0 && l.target_bytes == 0 {
            continue;
        }
        println!(
            "  L{i:<5} {:>5} {:>12} {:>12}",
            l.files, l.bytes, l.target_bytes
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let num: u64 = arg(&args, "--num", "1000000").parse()?;
    let ratio: u64 = arg(&args, "--ratio", "10").parse()?;
    let value_size: usize = arg(&args, "--value-size", "100").parse()?;
    let dir = arg(&args, "--dir", "/tmp/strata-load");
    let _ = std::fs::remove_dir_all(&dir);
    let opts = Options {
        size_ratio: ratio,
        ..Options::default()
    };
    let db = Db::open(&dir, opts)?;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let value = vec![b'v'; value_size];
    let start = Instant::now();
    for _ in 0..num {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = format!("{:016}", x % 10_000_000_000_000_000);
        db.put(key.as_bytes(), &value)?;
    }
    let elapsed = start.elapsed();
    println!(
        "loaded {num} random 16-byte keys with {value_size}-byte values, T = {ratio}: \
         {:.1} s, {:.0} ops/s",
        elapsed.as_secs_f64(),
        num as f64 / elapsed.as_secs_f64()
    );
    db.flush()?;
    // Let background compaction catch up.
    loop {
        let s = db.stats();
        let l0 = s.levels[0].files;
        let over = s.levels.iter().skip(1).any(|l| l.bytes > l.target_bytes);
        if l0 < 4 && !over {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let s = db.stats();
    print_levels(&s);
    let live = db.live_data_bytes()?;
    println!(
        "write amplification {:.2}; on disk {} bytes, live data {} bytes, ratio {:.3}",
        s.write_amplification().unwrap_or(0.0),
        s.disk_bytes(),
        live,
        s.disk_bytes() as f64 / live as f64
    );
    if args.iter().any(|a| a == "--keep") {
        db.close()?;
        return Ok(());
    }
    let start = Instant::now();
    db.compact_range(None, None)?;
    let s = db.stats();
    println!(
        "after a full compaction ({:.1} s):",
        start.elapsed().as_secs_f64()
    );
    print_levels(&s);
    println!(
        "on disk {} bytes, live data {} bytes, ratio {:.3}",
        s.disk_bytes(),
        live,
        s.disk_bytes() as f64 / live as f64
    );
    db.close()?;
    Ok(())
}

//! `strata tune`: the cost model's predictions for every candidate design, ranked for a
//! workload, as a table.

use std::fmt::Write as _;

use strata::cost_model::{self, Shape, Workload};

/// Parses `64MiB`, `1GiB`, `4096` and the like into bytes.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("unknown unit {other:?} in {s:?}")),
    };
    Ok((n * scale) as u64)
}

/// Parses a count such as `100000000`, `100M` or `1e8`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (number, scale) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('m' | 'M') => (&t[..t.len() - 1], 1e6),
        Some('g' | 'G' | 'b' | 'B') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a count"))?;
    if !(n * scale).is_finite() || n * scale < 1.0 {
        return Err(format!("{s:?}: at least one entry"));
    }
    Ok((n * scale) as u64)
}

/// The ranked table: every design, its predicted costs and the workload's cost.
pub fn report(w: &Workload, s: &Shape, ratios: &[u32], top: usize) -> String {
    let ranked = cost_model::tune(w, s, ratios);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} entries of {} bytes, {} write buffer, {:.2} filter bits per key; \
         blocks read or written per operation",
        s.entries,
        s.entry_bytes,
        crate::report::human_bytes(s.buffer_bytes),
        s.filter_bytes as f64 * 8.0 / s.entries.max(1) as f64
    );
    let _ = writeln!(
        out,
        "{:>4}  {:<26} {:>6} {:>5} {:>9} {:>9} {:>8} {:>8} {:>6} {:>9} {:>6}  {:>9}",
        "rank",
        "design",
        "levels",
        "runs",
        "write amp",
        "write I/O",
        "get I/O",
        "missing",
        "scan",
        "long scan",
        "space",
        "cost"
    );
    for (i, (d, c, cost)) in ranked.iter().enumerate().take(top.max(1)) {
        let design = format!(
            "{} T={} {}",
            d.policy.name(),
            d.size_ratio,
            if d.monkey { "monkey" } else { "uniform" },
        );
        let _ = writeln!(
            out,
            "{:>4}  {:<26} {:>6} {:>5} {:>9.2} {:>9.4} {:>8.4} {:>8.4} {:>6} {:>9.1} \
             {:>6.2}  {:>9.4}",
            i + 1,
            design,
            c.levels,
            c.runs,
            c.write_amplification,
            c.write_io,
            c.point_io,
            c.missing_io,
            c.scan_io,
            c.long_scan_io,
            c.space_amplification,
            cost
        );
    }
    if let Some((d, _, cost)) = ranked.first() {
        let _ = writeln!(
            out,
            "best: {} with size ratio {} and {} filter bits, {cost:.4} blocks per operation",
            d.policy.name(),
            d.size_ratio,
            if d.monkey { "Monkey's" } else { "uniform" }
        );
    }
    if let Some((d, _, _)) = ranked.first() {
        let _ = writeln!(
            out,
            "run it: strata --merge-policy {} --size-ratio {} --filter-policy {}:BITS ...",
            d.policy.name(),
            d.size_ratio,
            if d.monkey { "monkey" } else { "uniform" }
        );
    }
    out
}

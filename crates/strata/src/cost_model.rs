//! A cost model of the LSM design space, after Monkey (SIGMOD 2017) and Dostoevsky (SIGMOD
//! 2018): given a merge policy, a size ratio `T`, a filter policy and the data (entries,
//! entry size, write buffer, filter memory), it predicts the I/O of each operation, and
//! [`tune`] ranks the candidate designs for a workload.
//!
//! The tree has `L = ceil(log_T(N E / buffer * (T - 1) / T))` levels (at least one), level
//! `i` holding `T^(i - L)` of the last level's entries. Per policy:
//!
//! | policy | runs per level | write amplification | long scan |
//! | --- | --- | --- | --- |
//! | leveling | 1 | `L (T + 1) / 2` | `s/B * T/(T-1)` |
//! | tiering | `T - 1` | `L` | `s/B * (T - 1)` |
//! | lazy leveling | `T - 1`, 1 at the last level | `(L - 1) + (T + 1) / 2` | `s/B * T/(T-1)` |
//!
//! Write amplification counts how many times an entry is written to tables (a leveled merge
//! rewrites the level below `(T + 1) / 2` times per entry on average; a tiered merge writes
//! each entry once per level); divided by `B`, the entries per block, it is the I/O per
//! write. A lookup of a missing key reads one block per run whose filter passes: the sum of
//! the runs' false-positive rates, with the same bits everywhere or Monkey's allocation
//! ([`crate::FilterPolicy`]); one of an existing key reads its block in the last level and
//! pays the false positives of the runs above it. A short scan reads one block per run;
//! space amplification is `1 + 1/T` with a leveled last level and `T - 1` for tiering
//! (every run of the last level may hold a version of every key). Filters are modeled as
//! Bloom filters (`FilterFormat::Bloom`); Ribbon filters waste about a fifth of their reads.

use crate::filter_policy::monkey_bits;
pub use crate::options::MergePolicy;
use crate::sstable::filter::false_positive_rate;

/// A point of the design space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Design {
    /// How runs are merged.
    pub policy: MergePolicy,
    /// The size ratio `T` between adjacent levels (at least 2).
    pub size_ratio: u32,
    /// Monkey's filter bits per level (true) or the same bits everywhere.
    pub monkey: bool,
}

/// The data and memory a design is judged for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Entries (`N`).
    pub entries: u64,
    /// Bytes of a key and its value (`E`).
    pub entry_bytes: u64,
    /// Bytes of the write buffer (the memtable).
    pub buffer_bytes: u64,
    /// Bytes of Bloom filters for the whole tree.
    pub filter_bytes: u64,
    /// Bytes of a data block (entries per block: `B = block / E`).
    pub block_bytes: u64,
    /// Entries a long scan reads (`s`).
    pub long_scan_entries: u64,
}

/// Shares of the operations of a workload (they need not add up to one).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Workload {
    /// Puts and deletes.
    pub writes: f64,
    /// Gets of keys that exist.
    pub point: f64,
    /// Gets of keys that do not.
    pub missing: f64,
    /// Short range scans (one block per run).
    pub scan: f64,
    /// Long range scans of [`Shape::long_scan_entries`].
    pub long_scan: f64,
}

impl Workload {
    /// Parses `"writes=0.5,point=0.4,missing=0.05,scan=0.05"` (any subset; `long_scan=` too).
    pub fn parse(text: &str) -> Result<Workload, String> {
        let mut w = Workload::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not NAME=SHARE"))?;
            let share: f64 = value
                .trim()
                .parse()
                .map_err(|_| format!("{value:?} is not a number"))?;
            if !(0.0..=1e9).contains(&share) {
                return Err(format!("the share of {name} must be a number at least 0"));
            }
            let slot = match name.trim() {
                "writes" => &mut w.writes,
                "point" => &mut w.point,
                "missing" => &mut w.missing,
                "scan" => &mut w.scan,
                "long_scan" => &mut w.long_scan,
                other => {
                    return Err(format!(
                        "unknown operation {other:?} (writes, point, missing, scan, long_scan)"
                    ));
                }
            };
            *slot = share;
        }
        if w.writes + w.point + w.missing + w.scan + w.long_scan <= 0.0 {
            return Err("the workload has no operations".into());
        }
        Ok(w)
    }
}

/// What a design is predicted to cost, in blocks read or written per operation (write
/// amplification and space amplification as ratios).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Levels of the tree.
    pub levels: u32,
    /// Sorted runs a lookup may probe.
    pub runs: u32,
    /// Filter bits per key over the whole tree.
    pub bits_per_key: f64,
    /// Times each entry is written to tables.
    pub write_amplification: f64,
    /// Block writes per put: write amplification over entries per block.
    pub write_io: f64,
    /// Blocks read by a get of an existing key.
    pub point_io: f64,
    /// Blocks read by a get of a missing key: the sum of the runs' false-positive rates.
    pub missing_io: f64,
    /// Blocks read by a short scan.
    pub scan_io: f64,
    /// Blocks read by a long scan.
    pub long_scan_io: f64,
    /// Bytes stored per byte of live data.
    pub space_amplification: f64,
}

impl Costs {
    /// The workload's blocks per operation.
    pub fn weighted(&self, w: &Workload) -> f64 {
        let total = w.writes + w.point + w.missing + w.scan + w.long_scan;
        (w.writes * self.write_io
            + w.point * self.point_io
            + w.missing * self.missing_io
            + w.scan * self.scan_io
            + w.long_scan * self.long_scan_io)
            / total
    }
}

/// The predicted costs of `d` for `s`.
pub fn predict(d: &Design, s: &Shape) -> Costs {
    let t = f64::from(d.size_ratio.max(2));
    let n = s.entries.max(1) as f64;
    let data = n * s.entry_bytes.max(1) as f64;
    let buffer = s.buffer_bytes.max(1) as f64;
    let levels = ((data / buffer * (t - 1.0) / t).ln() / t.ln())
        .ceil()
        .max(1.0) as u32;
    let per_block = (s.block_bytes as f64 / s.entry_bytes.max(1) as f64).max(1.0);
    let runs_at = |level: u32| -> u32 {
        match d.policy {
            MergePolicy::Leveling => 1,
            MergePolicy::Tiering => d.size_ratio.max(2) - 1,
            MergePolicy::LazyLeveling if level == levels => 1,
            MergePolicy::LazyLeveling => d.size_ratio.max(2) - 1,
        }
    };
    // Entries per run, level 1 down: level i holds T^(i-L) of the last level's, and the
    // levels together hold N.
    let weights: Vec<f64> = (1..=levels)
        .map(|i| t.powi(i as i32 - levels as i32))
        .collect();
    let scale = n / weights.iter().sum::<f64>();
    let mut runs = Vec::new();
    for (i, w) in (1..=levels).zip(&weights) {
        let k = runs_at(i);
        for _ in 0..k {
            runs.push(((w * scale) / f64::from(k)).max(1.0) as u64);
        }
    }
    let bits_per_key = s.filter_bytes as f64 * 8.0 / n;
    let bits: Vec<f64> = if d.monkey {
        monkey_bits(&runs, bits_per_key)
    } else {
        vec![bits_per_key; runs.len()]
    };
    let rates: Vec<f64> = bits.iter().map(|&b| false_positive_rate(b)).collect();
    let missing_io: f64 = rates.iter().sum();
    // An existing key is most likely in the last level: its own block, and the false
    // positives of the runs above (of the last level's other runs, half on average).
    let last_runs = runs_at(levels) as usize;
    let above = runs.len() - last_runs;
    let last_level_rate: f64 = rates[above..].iter().sum();
    let point_io = 1.0
        + rates[..above].iter().sum::<f64>()
        + last_level_rate / 2.0 * {
            // With one run at the bottom, no other run of it is probed.
            if last_runs > 1 {
                (last_runs - 1) as f64 / last_runs as f64
            } else {
                0.0
            }
        };
    let l = f64::from(levels);
    let write_amplification = match d.policy {
        MergePolicy::Leveling => l * (t + 1.0) / 2.0,
        MergePolicy::Tiering => l,
        MergePolicy::LazyLeveling => (l - 1.0) + (t + 1.0) / 2.0,
    };
    let blocks = s.long_scan_entries as f64 / per_block;
    let (long_scan_io, space_amplification) = match d.policy {
        MergePolicy::Leveling | MergePolicy::LazyLeveling => {
            (blocks * t / (t - 1.0), 1.0 + 1.0 / t)
        }
        MergePolicy::Tiering => (blocks * (t - 1.0), t - 1.0),
    };
    Costs {
        levels,
        runs: runs.len() as u32,
        bits_per_key,
        write_amplification,
        write_io: write_amplification / per_block,
        point_io,
        missing_io,
        scan_io: runs.len() as f64,
        long_scan_io,
        space_amplification,
    }
}

/// Every design with a size ratio in `ratios`, each policy and both filter policies, ranked
/// by the workload's blocks per operation, cheapest first.
pub fn tune(w: &Workload, s: &Shape, ratios: &[u32]) -> Vec<(Design, Costs, f64)> {
    let mut ranked = Vec::new();
    for &size_ratio in ratios {
        for policy in MergePolicy::ALL {
            for monkey in [false, true] {
                let d = Design {
                    policy,
                    size_ratio,
                    monkey,
                };
                let c = predict(&d, s);
                ranked.push((d, c, c.weighted(w)));
            }
        }
    }
    ranked.sort_by(|a, b| a.2.total_cmp(&b.2));
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            entries: 100_000_000,
            entry_bytes: 116,
            buffer_bytes: 64 << 20,
            filter_bytes: 100_000_000 * 10 / 8,
            block_bytes: 4096,
            long_scan_entries: 100_000,
        }
    }

    fn design(policy: MergePolicy, size_ratio: u32, monkey: bool) -> Design {
        Design {
            policy,
            size_ratio,
            monkey,
        }
    }

    #[test]
    fn levels_follow_the_size_ratio() {
        // 11.6 GB over 64 MiB buffers: 173 buffers, * 0.9: 3 levels at T = 10 (10, 100, 1000).
        let c = predict(&design(MergePolicy::Leveling, 10, false), &shape());
        assert_eq!(c.levels, 3);
        assert_eq!(c.runs, 3);
        assert_eq!(
            predict(&design(MergePolicy::Leveling, 2, false), &shape()).levels,
            7
        );
        let tiered = predict(&design(MergePolicy::Tiering, 10, false), &shape());
        assert_eq!(tiered.runs, 27);
        let lazy = predict(&design(MergePolicy::LazyLeveling, 10, false), &shape());
        assert_eq!(lazy.runs, 19);
    }

    #[test]
    fn tiering_writes_less_and_reads_more_than_leveling() {
        for t in [3, 4, 8, 10] {
            let lev = predict(&design(MergePolicy::Leveling, t, false), &shape());
            let tier = predict(&design(MergePolicy::Tiering, t, false), &shape());
            let lazy = predict(&design(MergePolicy::LazyLeveling, t, false), &shape());
            assert!(tier.write_amplification < lazy.write_amplification);
            assert!(lazy.write_amplification < lev.write_amplification, "T={t}");
            assert!(tier.missing_io > lazy.missing_io && lazy.missing_io > lev.missing_io);
            assert!(tier.space_amplification > lev.space_amplification);
            assert_eq!(lazy.space_amplification, lev.space_amplification);
        }
    }

    #[test]
    fn uniform_bits_cost_what_their_rate_says_and_monkey_costs_less() {
        let lev = predict(&design(MergePolicy::Leveling, 10, false), &shape());
        assert!((lev.missing_io - 3.0 * false_positive_rate(10.0)).abs() < 1e-12);
        for policy in MergePolicy::ALL {
            for t in [2, 4, 10] {
                let uniform = predict(&design(policy, t, false), &shape());
                let monkey = predict(&design(policy, t, true), &shape());
                assert!(monkey.missing_io < uniform.missing_io, "{policy:?} T={t}");
            }
        }
    }

    #[test]
    fn the_tuner_follows_the_workload() {
        let s = shape();
        let ratios = [2, 4, 6, 8, 10, 16];
        let writes = Workload::parse("writes=1").unwrap();
        assert_eq!(tune(&writes, &s, &ratios)[0].0.policy, MergePolicy::Tiering);
        let reads = Workload::parse("point=0.5,missing=0.5").unwrap();
        let best = tune(&reads, &s, &ratios)[0].0;
        assert_ne!(best.policy, MergePolicy::Tiering);
        assert!(best.monkey);
        let ranked = tune(
            &Workload::parse("writes=0.5,point=0.5").unwrap(),
            &s,
            &ratios,
        );
        assert_eq!(ranked.len(), ratios.len() * 3 * 2);
        assert!(ranked.windows(2).all(|w| w[0].2 <= w[1].2));
    }

    #[test]
    fn workloads_parse_or_say_why_not() {
        let w = Workload::parse("writes=0.5, point=0.4,missing=0.05,scan=0.05").unwrap();
        assert_eq!(
            (w.writes, w.point, w.missing, w.scan),
            (0.5, 0.4, 0.05, 0.05)
        );
        assert!(
            Workload::parse("reads=1")
                .unwrap_err()
                .contains("unknown operation")
        );
        assert!(Workload::parse("writes=x").is_err());
        assert!(Workload::parse("writes").is_err());
        assert!(Workload::parse("writes=0").is_err());
        assert!(Workload::parse("writes=-1").is_err());
    }
}

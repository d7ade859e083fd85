//! How many Bloom filter bits each table gets: the same per key everywhere, or spread over
//! the tree's sorted runs as Monkey (SIGMOD 2017) spreads them.
//!
//! A lookup of a missing key probes one table per sorted run (each level-0 file, then one
//! file per deeper level), and each probe whose filter passes reads a block in vain: the
//! expected number of such probes is the sum of the runs' false-positive rates. With the
//! same bits per key everywhere, every run has the same rate, and the small runs near the
//! top cost as much as the large one at the bottom while holding a tenth of its keys. For a
//! fixed total of filter memory, the sum is smallest when each run's rate is proportional
//! to its number of entries (setting the derivative of `sum p_i` under the budget
//! `sum n_i ln(1/p_i) / ln(2)^2` to zero gives `p_i = c n_i`). Runs whose rate would reach 1
//! get no filter at all, and their bits go to the others.

/// How Bloom filter memory is given out, from [`crate::Options::filter_policy`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FilterPolicy {
    /// Every table gets `bits_per_key` (as LevelDB and RocksDB do). 10 bits give about 1%
    /// false positives per table with Bloom filters, 0.2% with Ribbon filters.
    Uniform {
        /// Bits per key of every table's filter; 0 writes filters that pass every key.
        bits_per_key: usize,
    },
    /// The same memory as `Uniform { bits_per_key: total_bits_per_key }`, spread over the
    /// sorted runs so that each run's false-positive rate is proportional to its share of
    /// the entries: deeper, larger levels get fewer bits per key, and the last may get none.
    /// Bits are chosen from the level sizes of the moment a table is written (by a flush or
    /// a compaction).
    Monkey {
        /// The filter bits per key of the whole tree.
        total_bits_per_key: usize,
    },
}

impl Default for FilterPolicy {
    fn default() -> Self {
        FilterPolicy::Uniform { bits_per_key: 10 }
    }
}

impl FilterPolicy {
    /// The bits per key of the whole tree.
    pub fn bits_per_key(&self) -> usize {
        match *self {
            FilterPolicy::Uniform { bits_per_key } => bits_per_key,
            FilterPolicy::Monkey { total_bits_per_key } => total_bits_per_key,
        }
    }
}

/// The structure of the filters tables are written with, from
/// [`crate::Options::filter_format`]. Every format is read whatever the option says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FilterFormat {
    /// Ribbon filters for the tables compactions write while the database's tables take
    /// more than half the memory the process may use, cache-local Bloom filters otherwise
    /// (and for flushes, which then take the bits that match the Ribbon filters' false
    /// positives). A false positive costs a read of a block: from the page cache, a
    /// microsecond, less than Ribbon's slower probes save; from the disk, a hundred.
    #[default]
    Auto,
    /// Cache-local Bloom filters: each key's probes within one 64-byte line. About 1% false
    /// positives at 10 bits per key; the quickest to build and to probe.
    Bloom,
    /// Ribbon filters: for the same bits per key, about a fifth of a Bloom filter's false
    /// positives (0.2% at 10 bits), at several times the cost to build and about twice the
    /// cost to probe (a lookup reads three or four adjacent cache lines). Tables whose bits
    /// per key give a Bloom filter the lower rate (some below about 3.3) get Bloom filters.
    Ribbon,
}

impl FilterFormat {
    /// The format a table is written in when the database's tables take `table_bytes` and
    /// the process may use `memory` bytes: [`FilterFormat::Auto`] decided.
    pub(crate) fn decide(self, table_bytes: u64, memory: u64) -> FilterFormat {
        match self {
            FilterFormat::Auto if table_bytes > memory / 2 => FilterFormat::Ribbon,
            FilterFormat::Auto => FilterFormat::Bloom,
            chosen => chosen,
        }
    }
}

/// The most bits per key a table gets, however small its run (the most the options allow).
const MAX_BITS_PER_KEY: f64 = 64.0;

/// Monkey's bits per key for runs of `entries` each, spending `total_bits_per_key` times
/// their sum: `ln(1/p_i) / ln(2)^2` with `p_i` proportional to `entries[i]`, 0 for runs whose
/// `p_i` would reach 1.
pub(crate) fn monkey_bits(entries: &[u64], total_bits_per_key: f64) -> Vec<f64> {
    let ln2sq = std::f64::consts::LN_2 * std::f64::consts::LN_2;
    let sizes: Vec<f64> = entries.iter().map(|&n| (n.max(1)) as f64).collect();
    let total: f64 = sizes.iter().sum();
    let budget = total * total_bits_per_key;
    // With p_i = n_i / e^x, run i gets max(0, x - ln n_i) / ln(2)^2 bits per key; the bits
    // spent grow with x, which is found by bisection.
    let bits = |x: f64| -> Vec<f64> {
        sizes
            .iter()
            .map(|n| ((x - n.ln()) / ln2sq).clamp(0.0, MAX_BITS_PER_KEY))
            .collect()
    };
    let spent = |x: f64| -> f64 { bits(x).iter().zip(&sizes).map(|(b, n)| b * n).sum() };
    let (mut lo, mut hi) = (0.0f64, sizes.iter().fold(0.0f64, |m, n| m.max(n.ln())));
    hi += MAX_BITS_PER_KEY * ln2sq;
    if budget <= 0.0 {
        return vec![0.0; sizes.len()];
    }
    if spent(hi) <= budget {
        return bits(hi);
    }
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if spent(mid) < budget {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    bits(lo)
}

/// The bits per key of a table written into run `target` of runs holding `entries`.
pub(crate) fn table_bits(policy: FilterPolicy, entries: &[u64], target: usize) -> f64 {
    match policy {
        FilterPolicy::Uniform { bits_per_key } => bits_per_key as f64,
        FilterPolicy::Monkey { total_bits_per_key } => {
            monkey_bits(entries, total_bits_per_key as f64)
                .get(target)
                .copied()
                .unwrap_or(total_bits_per_key as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_ribbon_filters_once_the_tables_outgrow_half_the_memory() {
        let auto = FilterFormat::Auto;
        assert_eq!(auto.decide(0, 1 << 30), FilterFormat::Bloom);
        assert_eq!(auto.decide(512 << 20, 1 << 30), FilterFormat::Bloom);
        assert_eq!(auto.decide((512 << 20) + 1, 1 << 30), FilterFormat::Ribbon);
        for chosen in [FilterFormat::Bloom, FilterFormat::Ribbon] {
            assert_eq!(chosen.decide(0, 1 << 30), chosen);
            assert_eq!(chosen.decide(u64::MAX, 1 << 30), chosen);
        }
    }
    use crate::sstable::filter::false_positive_rate;

    fn spent(entries: &[u64], bits: &[f64]) -> f64 {
        entries.iter().zip(bits).map(|(&n, b)| n as f64 * b).sum()
    }

    #[test]
    fn monkey_spends_the_uniform_budget() {
        for entries in [
            vec![1_000u64, 10_000, 100_000],
            vec![5_000, 5_000, 40_000, 400_000],
        ] {
            for total in [2.0, 5.0, 10.0] {
                let bits = monkey_bits(&entries, total);
                let budget = total * entries.iter().sum::<u64>() as f64;
                assert!(
                    (spent(&entries, &bits) - budget).abs() < budget * 1e-6,
                    "{entries:?} at {total}: spent {} of {budget}",
                    spent(&entries, &bits)
                );
            }
        }
    }

    #[test]
    fn monkey_rates_are_proportional_to_run_sizes() {
        let entries = [1_000u64, 10_000, 100_000, 1_000_000];
        let bits = monkey_bits(&entries, 10.0);
        // In the continuous model p = e^(-b ln(2)^2): each rate over its run's entries is the
        // same constant.
        let ln2sq = std::f64::consts::LN_2.powi(2);
        let ratio: Vec<f64> = entries
            .iter()
            .zip(&bits)
            .map(|(&n, b)| (-b * ln2sq).exp() / n as f64)
            .collect();
        for r in &ratio {
            assert!((r / ratio[0] - 1.0).abs() < 1e-6, "{ratio:?}");
        }
        assert!(
            bits.windows(2).all(|w| w[0] > w[1]),
            "deeper runs get fewer bits: {bits:?}"
        );
    }

    #[test]
    fn monkey_beats_uniform_at_the_same_memory() {
        let entries = [64_000u64, 64_000, 2_560_000, 25_600_000];
        for total in [5usize, 10] {
            let uniform: f64 = entries
                .iter()
                .map(|_| false_positive_rate(total as f64))
                .sum();
            let bits = monkey_bits(&entries, total as f64);
            let monkey: f64 = bits.iter().map(|&b| false_positive_rate(b)).sum();
            assert!(
                monkey < uniform * 0.8,
                "at {total}: monkey {monkey} uniform {uniform}"
            );
        }
    }

    #[test]
    fn the_last_level_gets_no_bits_when_memory_is_scarce() {
        let entries = [10_000u64, 100_000, 1_000_000, 10_000_000];
        // Half a bit per key: less than the upper levels need at the rates that make the last
        // level's reach 1.
        let bits = monkey_bits(&entries, 0.5);
        assert_eq!(bits[3], 0.0, "{bits:?}");
        assert!(bits[0] > bits[1] && bits[1] > 0.0, "{bits:?}");
    }

    #[test]
    fn one_run_gets_every_bit_and_uniform_ignores_sizes() {
        assert!((monkey_bits(&[12_345], 7.0)[0] - 7.0).abs() < 1e-9);
        let uniform = FilterPolicy::Uniform { bits_per_key: 6 };
        assert_eq!(table_bits(uniform, &[1, 1_000_000], 1), 6.0);
    }

    #[test]
    fn false_positive_rates() {
        assert_eq!(false_positive_rate(0.0), 1.0);
        // Cache-local filters: 0.96% at 10 bits per key with 6 probes (the Poisson sum over
        // a line's keys, computed apart from this code), where a spread filter has 0.82%.
        assert!((false_positive_rate(10.0) - 0.00958).abs() < 0.0002);
        assert!((false_positive_rate(5.0) - 0.09289).abs() < 0.001);
        assert!(false_positive_rate(5.0) > false_positive_rate(6.0));
    }
}

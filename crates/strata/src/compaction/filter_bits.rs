//! Filter bits for the tables a flush or a compaction writes, from the tree's shape and
//! [`FilterPolicy`](crate::FilterPolicy) (see `filter_policy` for Monkey's allocation).
//!
//! Bits are chosen when a table is written, for the tree's shape as its lookups will see it
//! over the table's life: the deepest level at its size of the moment, the levels above at
//! their size capped at their targets, and level-0 files only for level-0 tables (see
//! [`runs`]). Entries move down the tree and are written again with the bits of their new
//! level, so the bits the tree holds per entry approach the budget without meeting it
//! exactly.
//!
//! Each table records the bits it was built with in its filter, so reads need nothing new;
//! the MANIFEST records them too, for [`expected_false_positives`].

use std::sync::Arc;

use super::{Compaction, LevelTargets};
use crate::filter_policy::{FilterFormat, FilterPolicy, table_bits};
use crate::sstable::filter::{false_positive_rate, format_rate};
use crate::sstable::{FilterKind, IndexKind, TableOptions};
use crate::version::{FileMeta, Version};

/// What the allocation knows of the tree's shape besides the version: the level targets and
/// the write buffer.
pub(crate) struct TreeModel<'a> {
    pub targets: &'a LevelTargets,
    pub buffer_bytes: u64,
}

/// The sorted runs a table's lookups will probe over its life, as Monkey's allocation sees
/// them. `add` entries join level `l` (`Some((l, n))`, a compaction's output, whose inputs
/// `removed` leave their levels) or a new level-0 file (`None`, a flush of a write buffer).
/// Returns the runs and the index of the one written.
///
/// - Levels 1 and down: each level at its size, those above the deepest at most at their
///   targets. A level above the deepest is over its target only until compaction takes the
///   excess down: a compaction from level 0 into level 1 swells it to several times its
///   target, and allocating for that size would give its tables fewer bits than the level
///   below. An empty level counts for nothing: after an idle merge the one run left gets
///   the whole budget.
/// - Level 0 counts only for level-0 tables, each file a run: its files live for seconds,
///   and a level-1 table allocated beside them would give its bits to runs that are gone
///   by the time it is read.
///
/// The sizes of the moment for every level (`git show 7dab2c1`) gave 4.6 bits per entry for
/// a budget of 5, and more false positives than uniform bits: a level is at its fullest when
/// written into; counting level 0 always, at half its trigger, gave 3.7
/// (docs/DESIGN-SPACE.md).
pub(crate) fn runs(
    version: &Version,
    removed: &[&Arc<FileMeta>],
    add: Option<(usize, u64)>,
    model: &TreeModel<'_>,
) -> (Vec<u64>, usize) {
    let kept = |f: &&Arc<FileMeta>| !removed.iter().any(|r| Arc::ptr_eq(r, f));
    let (bytes, entries) = version
        .files()
        .fold((0u64, 0u64), |(b, n), (_, f)| (b + f.size, n + f.entries));
    let entry_bytes = bytes.checked_div(entries).map_or(128, |b| b.max(1));
    let mut level_entries: Vec<u64> = version
        .levels
        .iter()
        .map(|files| files.iter().filter(kept).map(|f| f.entries).sum())
        .collect();
    if let Some((l, n)) = add {
        level_entries[l] += n;
    }
    let deepest = (1..level_entries.len())
        .rev()
        .find(|&l| level_entries[l] > 0)
        .unwrap_or(0);
    let mut runs = Vec::new();
    let mut target = 0;
    if add.is_none() {
        runs.push((model.buffer_bytes / entry_bytes).max(1));
        runs.extend(
            version.levels[0]
                .iter()
                .filter(kept)
                .map(|f| f.entries.max(1)),
        );
    }
    for (l, &n) in level_entries.iter().enumerate().take(deepest + 1).skip(1) {
        if add.is_some_and(|(al, _)| al == l) {
            target = runs.len();
        }
        let size = if l == deepest {
            n
        } else {
            n.min(model.targets.target_bytes(l) / entry_bytes)
        };
        runs.push(size.max(1));
    }
    (runs, target)
}

/// `base` with the filter bits of a flush of a memtable into level 0 of `version`.
pub(crate) fn flush_options(
    policy: FilterPolicy,
    base: &TableOptions,
    version: &Version,
    model: &TreeModel<'_>,
) -> TableOptions {
    let (runs, target) = runs(version, &[], None, model);
    TableOptions {
        bloom_bits_per_key: table_bits(policy, &runs, target),
        ..base.clone()
    }
}

/// `base` with the filter bits of the output of compaction `c`, whose level will hold what it
/// holds now but `c`'s files from it, with all of `c`'s input entries.
pub(crate) fn compaction_options(
    policy: FilterPolicy,
    base: &TableOptions,
    c: &Compaction,
    model: &TreeModel<'_>,
) -> TableOptions {
    let removed: Vec<&Arc<FileMeta>> = c.input_files().map(|(_, f)| f).collect();
    let entries = removed.iter().map(|f| f.entries).sum();
    let (runs, target) = runs(
        &c.version,
        &removed,
        Some((c.output_level(), entries)),
        model,
    );
    TableOptions {
        bloom_bits_per_key: table_bits(policy, &runs, target),
        ..base.clone()
    }
}

/// `opts`, or partitioned filters and B-tree indexes in their place when the filters and
/// indexes of the tables of `versions` (every family's), each held whole, would take more
/// than `budget` bytes (`Options::table_pinned_bytes`): past it, tables would keep letting
/// theirs go and reading them whole again, where a partitioned table holds two small blocks
/// and a lookup reads a partition of about a block. Tables are counted as if whole whatever
/// their layout, so the decision does not swing as compaction rewrites them, and follows
/// the tree's size both ways.
pub(crate) fn metadata_layout(
    opts: TableOptions,
    versions: &[Arc<Version>],
    budget: usize,
) -> TableOptions {
    if opts.filter_kind == FilterKind::Partitioned && opts.index_kind == IndexKind::BTree {
        return opts;
    }
    let whole: u64 = versions
        .iter()
        .flat_map(|v| v.levels.iter().flatten())
        .map(|f| whole_metadata_bytes(f, opts.block_size, opts.bloom_bits_per_key))
        .sum();
    if whole <= budget as u64 {
        return opts;
    }
    TableOptions {
        filter_kind: FilterKind::Partitioned,
        index_kind: IndexKind::BTree,
        ..opts
    }
}

/// `opts` with [`FilterFormat::Auto`] decided from the size of the tables of `versions`
/// (every family's) against the `memory` the process may use.
pub(crate) fn filter_format(
    opts: TableOptions,
    versions: &[Arc<Version>],
    memory: u64,
) -> TableOptions {
    let tables = versions.iter().flat_map(|v| v.levels.iter().flatten());
    let bytes = tables.map(|f| f.size).sum();
    TableOptions {
        filter_format: opts.filter_format.decide(bytes, memory),
        ..opts
    }
}

/// `opts` of a flush with [`FilterFormat::Auto`] decided as [`filter_format`] decides it for
/// compactions, but for the filter's build: where compactions write Ribbon filters, a flush
/// writes a cache-local Bloom filter (quicker to build while writers wait on the flush) with
/// the fewest bits that give it the Ribbon filter's false positives. A format asked for by
/// name is written as asked. Level 0's tables are
/// consulted by every lookup, several at a time: at 20 million keys under 384 MiB, seven of
/// them with Bloom filters of the levels' 10 bits a key cost each lookup of a missing key 7%
/// of a block read from the disk, five times what the two levels below cost together.
pub(crate) fn flush_filter(
    opts: TableOptions,
    versions: &[Arc<Version>],
    memory: u64,
) -> TableOptions {
    let asked = opts.filter_format;
    let decided = filter_format(opts, versions, memory);
    if asked != FilterFormat::Auto {
        return decided;
    }
    if decided.filter_format != FilterFormat::Ribbon || decided.bloom_bits_per_key <= 0.0 {
        return TableOptions {
            filter_format: FilterFormat::Bloom,
            ..decided
        };
    }
    TableOptions {
        filter_format: FilterFormat::Bloom,
        bloom_bits_per_key: bloom_bits_for(format_rate(
            FilterFormat::Ribbon,
            decided.bloom_bits_per_key,
        )),
        ..decided
    }
}

/// The fewest bits a key, in quarters, that give a cache-local Bloom filter no more false
/// positives than `rate` (64 at most).
fn bloom_bits_for(rate: f64) -> f64 {
    (4..=256)
        .map(|quarters| f64::from(quarters) / 4.0)
        .find(|&bits| false_positive_rate(bits) <= rate)
        .unwrap_or(64.0)
}

/// What a table's whole filter and flat index take, from the MANIFEST's figures: its
/// entries times its filter's bits, and an index entry per data block (a key of about the
/// length of its bounds, its sequence number and a block handle). Blocks are counted from
/// the file's size, which undercounts those of compressed tables (cut at `block_size`
/// before compression); the filter, most of the sum, is exact.
fn whole_metadata_bytes(f: &FileMeta, block_size: usize, fallback_bits: f64) -> u64 {
    let filter = f.entries as f64 * f.filter_bits().unwrap_or(fallback_bits) / 8.0;
    let key = (f.smallest_user_key().len() + f.largest_user_key().len()) / 2;
    let blocks = f.size / block_size.max(1) as u64 + 1;
    filter as u64 + blocks * (key as u64 + 8 + 12)
}

/// The bits per key of `files`, averaged over their entries (`None` without entries).
pub(crate) fn level_bits(files: &[Arc<FileMeta>], fallback_bits: f64) -> Option<f64> {
    let entries: u64 = files.iter().map(|f| f.entries).sum();
    let bits: f64 = files
        .iter()
        .map(|f| f.filter_bits().unwrap_or(fallback_bits) * f.entries as f64)
        .sum();
    (entries > 0).then(|| bits / entries as f64)
}

/// The expected number of tables a lookup of a missing key reads a block of in vain: the sum
/// over sorted runs of their false-positive rates, each level's being the average of its
/// files' weighted by entries (a key falls in one file's range). Files whose bits the
/// MANIFEST does not record (written before it did) count with `fallback_bits`. Every file
/// counts as written in the format `asked` decides to for a database of `table_bytes` in
/// `memory` (the MANIFEST does not record a table's), but level 0's as a flush writes them
/// ([`flush_filter`]: Bloom filters under [`FilterFormat::Auto`]).
pub(crate) fn expected_false_positives(
    version: &Version,
    fallback_bits: f64,
    asked: FilterFormat,
    (table_bytes, memory): (u64, u64),
) -> f64 {
    let format = asked.decide(table_bytes, memory);
    let flushed = match asked {
        FilterFormat::Auto => FilterFormat::Bloom,
        other => other,
    };
    let bits = |f: &Arc<FileMeta>| f.filter_bits().unwrap_or(fallback_bits);
    let rate = |f: &Arc<FileMeta>| format_rate(format, bits(f));
    let mut sum: f64 = version.levels[0]
        .iter()
        .map(|f| format_rate(flushed, bits(f)))
        .sum();
    for files in version.levels.iter().skip(1) {
        let entries: u64 = files.iter().map(|f| f.entries).sum();
        if entries > 0 {
            let weighted: f64 = files.iter().map(|f| rate(f) * f.entries as f64).sum();
            sum += weighted / entries as f64;
        }
    }
    sum
}

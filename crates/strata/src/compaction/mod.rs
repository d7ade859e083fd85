//! Compaction: the shape the tree aims for ([`LevelTargets`]), choosing what to merge
//! (`picker`: [`pick`], [`idle_merge`]) and merging it (`job`: [`run`]), with the filter
//! bits of what it writes (`filter_bits`).
//!
//! Level 0 holds flushed files that may overlap; levels 1 and below are sorted runs whose
//! target sizes grow by the size ratio `T`. A level whose score (file count for L0, bytes over
//! target below) reaches 1 is compacted into the next: the file with the fewest bytes beneath
//! it per byte of its own (ties taken round-robin), or all of L0, with every file of the next
//! level that overlaps it. A single input with nothing beneath it moves down without being
//! rewritten.
//!
//! When no level is over its target, a file that reads consulted in vain too often (lookups
//! that went on to another file, and iterator samples; see `FileMeta::charge_read`) is merged
//! down the same way: once writes stop, the tree's shape stays as they left it, and every
//! read would go on paying for the extra sorted runs.
//!
//! Once writes have stopped for a while, a tree whose upper levels hold much more than their
//! share of the deepest level's bytes is merged into the deepest level in one job
//! ([`idle_merge`]); see `Options::idle_merge_after`.

mod filter_bits;
mod job;
mod picker;
#[cfg(test)]
mod tests;

pub(crate) use filter_bits::{
    TreeModel, compaction_options, expected_false_positives, filter_format, flush_filter,
    flush_options, level_bits, metadata_layout,
};
pub(crate) use job::{JobContext, fold_operands, run, trivial_move_edit};
pub(crate) use picker::{idle_merge, idle_merge_output_level, pick, with_next_level};

use std::sync::Arc;

use crate::key::NUM_LEVELS;
use crate::options::MergePolicy;
use crate::version::{FileMeta, Version};

/// The shape of the tree the picker aims for.
///
/// Under leveling, level `i` of the tree is physical level `i`, one sorted run. Under tiering
/// and lazy leveling, level `i >= 1` of the tree is `T - 1` physical levels (its run slots),
/// `1 + (i-1)(T-1) .. 1 + i(T-1)`: runs arrive in the slot above the level's newest run and
/// fill it from the bottom up, so that a lower physical level always holds newer data, and
/// reads, which walk physical levels in order, need nothing new.
#[derive(Debug, Clone)]
pub(crate) struct LevelTargets {
    pub l0_trigger: usize,
    pub level1_bytes: u64,
    pub size_ratio: u64,
    pub policy: MergePolicy,
    /// The write buffer's bytes: level 0's files merge down `l0_trigger` of them at a time.
    pub buffer_bytes: u64,
}

impl LevelTargets {
    pub(crate) fn of(o: &crate::Options) -> LevelTargets {
        LevelTargets {
            l0_trigger: o.level0_compaction_trigger,
            level1_bytes: o.level1_max_bytes,
            size_ratio: o.size_ratio,
            policy: o.merge_policy,
            buffer_bytes: o.write_buffer_size as u64,
        }
    }

    /// What level `i >= 1` of a lazily leveled tree holds before it stops being leveled: the
    /// run level 0 merges down (`l0_trigger` write buffers) times `T^i`, so that, as in
    /// Dostoevsky, a tree of `L` levels holds about `T^L` such runs and its deepest level
    /// most of them.
    pub(crate) fn lazy_capacity(&self, i: usize) -> u64 {
        let mut c = (self.l0_trigger as u64).saturating_mul(self.buffer_bytes.max(1));
        for _ in 0..i {
            c = c.saturating_mul(self.size_ratio);
        }
        c
    }

    /// Run slots per level of the tree below level 0.
    pub(crate) fn slots(&self) -> usize {
        match self.policy {
            MergePolicy::Leveling => 1,
            MergePolicy::Tiering | MergePolicy::LazyLeveling => {
                usize::try_from(self.size_ratio.saturating_sub(1))
                    .unwrap_or(usize::MAX)
                    .clamp(1, NUM_LEVELS - 1)
            }
        }
    }

    /// The physical levels of level `i >= 1` of the tree (the deepest may have fewer).
    pub(crate) fn physical(&self, i: usize) -> std::ops::Range<usize> {
        let s = self.slots();
        let start = (1 + (i.max(1) - 1) * s).min(NUM_LEVELS);
        start..(start + s).min(NUM_LEVELS)
    }

    /// The deepest level of the tree that has a slot.
    pub(crate) fn deepest(&self) -> usize {
        1 + (NUM_LEVELS - 2) / self.slots()
    }

    /// The level of the tree that physical level `p` belongs to.
    pub(crate) fn tree_level(&self, p: usize) -> usize {
        if p == 0 {
            0
        } else {
            1 + (p - 1) / self.slots()
        }
    }

    pub(crate) fn target_bytes(&self, level: usize) -> u64 {
        let mut t = self.level1_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.size_ratio);
        }
        t
    }

    /// Compaction score per level (the last level has none).
    pub(crate) fn scores(&self, v: &Version) -> Vec<f64> {
        (0..NUM_LEVELS - 1)
            .map(|l| {
                if l == 0 {
                    v.levels[0].len() as f64 / self.l0_trigger as f64
                } else {
                    v.level_bytes(l) as f64 / self.target_bytes(l) as f64
                }
            })
            .collect()
    }
}

/// A chosen compaction.
pub(crate) struct Compaction {
    pub level: usize,
    /// `level + 1`, or `level` itself when a manual compaction rewrites a level in place.
    pub output_level: usize,
    pub inputs: Vec<Arc<FileMeta>>,
    /// Whole levels between `level` and `output_level`, merged too (an idle merge, a tiered merge).
    pub between: Vec<(usize, Vec<Arc<FileMeta>>)>,
    pub next_inputs: Vec<Arc<FileMeta>>,
    /// The version the inputs were chosen from (kept alive while the job runs).
    pub version: Arc<Version>,
    /// Asked for by reads (see `FileMeta::charge_read`), not by a level's size.
    pub for_reads: bool,
    /// Merges the whole tree once writes stopped ([`idle_merge`]); a write gives it up.
    pub idle_merge: bool,
}

impl Compaction {
    pub(crate) fn output_level(&self) -> usize {
        self.output_level
    }

    pub(crate) fn is_trivial_move(&self) -> bool {
        self.inputs.len() == 1 && self.between.is_empty() && self.next_inputs.is_empty()
    }

    /// Every input file with its level.
    pub(crate) fn input_files(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> {
        let between = self
            .between
            .iter()
            .flat_map(|(level, files)| files.iter().map(|f| (*level, f)));
        self.inputs
            .iter()
            .map(|f| (self.level, f))
            .chain(between)
            .chain(self.next_inputs.iter().map(|f| (self.output_level, f)))
    }

    pub(crate) fn input_bytes(&self) -> u64 {
        self.input_files().map(|(_, f)| f.size).sum()
    }
}

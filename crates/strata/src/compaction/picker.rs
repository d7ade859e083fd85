//! Choosing what to compact: the most urgent level, the file reads asked for, an idle merge.

use std::sync::Arc;

use super::{Compaction, LevelTargets};
use crate::key::NUM_LEVELS;
use crate::options::MergePolicy;
use crate::version::{FileMeta, ReadCompaction, Version};

impl LevelTargets {
    /// Whether the tree needs a compaction: a level over its target, or (tiered) a level of
    /// the tree whose run slots are full.
    pub(crate) fn needs_work(&self, v: &Version) -> bool {
        match self.policy {
            MergePolicy::Leveling => self.scores(v).iter().any(|&s| s >= 1.0),
            _ => pick_tiered(v, self, &[false; NUM_LEVELS]).is_some(),
        }
    }
}

/// Picks the most urgent compaction whose levels are not busy, if any level needs one, or
/// else the compaction of the file reads asked for (`read`), while it is still in `v`.
pub(crate) fn pick(
    v: &Arc<Version>,
    targets: &LevelTargets,
    busy: &[bool; NUM_LEVELS],
    pointers: &[Vec<u8>; NUM_LEVELS],
    read: Option<&ReadCompaction>,
) -> Option<Compaction> {
    if targets.policy != MergePolicy::Leveling {
        let version: &Version = v;
        return pick_tiered(version, targets, busy).map(|c| Compaction {
            version: v.clone(),
            ..c
        });
    }
    let scores = targets.scores(v);
    let mut order: Vec<usize> = (0..scores.len()).filter(|&l| scores[l] >= 1.0).collect();
    order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
    for level in order {
        if busy[level] || busy[level + 1] {
            continue;
        }
        let inputs: Vec<Arc<FileMeta>> = if level == 0 {
            v.levels[0].clone()
        } else {
            vec![least_overlapping(v, level, &pointers[level])?.clone()]
        };
        return Some(with_next_level(v, level, inputs));
    }
    let ReadCompaction { level, file } = read?;
    let level = *level;
    if !v.holds(level, file) || level + 1 >= NUM_LEVELS || busy[level] || busy[level + 1] {
        return None;
    }
    // All of level 0 goes down together, as when it is over its trigger.
    let inputs = if level == 0 {
        v.levels[0].clone()
    } else {
        vec![file.clone()]
    };
    Some(Compaction {
        for_reads: true,
        ..with_next_level(v, level, inputs)
    })
}

/// The merge of every level into the deepest one holding data, for a tree whose levels above
/// the deepest hold more than twice their share of its bytes: with size ratio `T`, a tree
/// in shape holds about `1/(T-1)` of the deepest level's bytes above it, and those levels'
/// older versions below are what makes the tree larger than its live data. A tree fed by
/// random writes is far from that shape while its deepest level fills: at 10 million keys,
/// level 0 and level 1 held twice the bytes of level 2. The merge writes each live byte once
/// and leaves one sorted run, in the deepest level or, when the tree's bytes exceed that
/// level's target, in the first level below whose target they fit, so that no level is left
/// over its target to be moved down again. `None` when the tree is in shape, or holds a
/// single sorted run.
pub(crate) fn idle_merge(v: &Arc<Version>, targets: &LevelTargets) -> Option<Compaction> {
    let output = idle_merge_output_level(v, targets, 0)?;
    Some(Compaction {
        level: 0,
        output_level: output,
        inputs: v.levels[0].clone(),
        between: (1..output)
            .filter(|&l| !v.levels[l].is_empty())
            .map(|l| (l, v.levels[l].clone()))
            .collect(),
        next_inputs: v.levels[output].clone(),
        version: v.clone(),
        for_reads: false,
        idle_merge: true,
    })
}

/// Whether [`idle_merge`] would merge the tree, were `pending_bytes` of unflushed memtables
/// flushed first (they count as one more run above), and the level the merged run would go
/// to. Reads sizes only: the database asks it whenever it reports or looks for idle work.
pub(crate) fn idle_merge_output_level(
    v: &Version,
    targets: &LevelTargets,
    pending_bytes: u64,
) -> Option<usize> {
    let deepest_physical = (1..NUM_LEVELS)
        .rev()
        .find(|&l| !v.levels[l].is_empty())
        .unwrap_or(1);
    // Under the tiered policies the deepest level of the tree is all its run slots, and
    // the merge goes into its bottom slot, so that the tree's shape stays the policy's.
    let deepest = match targets.policy {
        MergePolicy::Leveling => deepest_physical,
        _ => targets
            .physical(targets.tree_level(deepest_physical))
            .start
            .max(1),
    };
    let deepest_bytes: u64 = (deepest..=deepest_physical).map(|l| v.level_bytes(l)).sum();
    let above: u64 = (0..deepest).map(|l| v.level_bytes(l)).sum::<u64>() + pending_bytes;
    let runs = v.levels[0].len()
        + (1..=deepest_physical)
            .filter(|&l| !v.levels[l].is_empty())
            .count()
        + usize::from(pending_bytes > 0);
    let in_shape = u128::from(above) * u128::from(targets.size_ratio.saturating_sub(1).max(1))
        <= 2 * u128::from(deepest_bytes);
    if runs < 2 || in_shape {
        return None;
    }
    if targets.policy != MergePolicy::Leveling {
        return Some(targets.physical(targets.tree_level(deepest_physical)).end - 1);
    }
    let total = above.saturating_add(deepest_bytes);
    let mut output = deepest;
    while output + 1 < NUM_LEVELS && targets.target_bytes(output) < total {
        output += 1;
    }
    Some(output)
}

/// The file of `level` (at least 1) that costs least to merge down: the one with the fewest
/// bytes beneath it per byte of its own, as RocksDB's default "minimum overlapping ratio"
/// priority. Under random writes some key ranges of a level fill faster than others; merging
/// the densest first rewrites fewer bytes of the next level per byte moved. Ties go to the
/// first file after the level's compaction pointer, round-robin, so that equal files take
/// turns.
fn least_overlapping<'v>(
    v: &'v Version,
    level: usize,
    pointer: &[u8],
) -> Option<&'v Arc<FileMeta>> {
    let files = &v.levels[level];
    let start = files
        .iter()
        .position(|f| {
            pointer.is_empty()
                || v.order
                    .user(f.largest_user_key(), crate::key::user_key(pointer))
                    .is_gt()
        })
        .unwrap_or(0);
    let overlap = |f: &FileMeta| -> u64 {
        v.overlapping(
            level + 1,
            Some(f.smallest_user_key()),
            Some(f.largest_user_key()),
        )
        .iter()
        .map(|b| b.size)
        .sum()
    };
    files[start..]
        .iter()
        .chain(&files[..start])
        .map(|f| (u128::from(overlap(f)) * 1024 / u128::from(f.size.max(1)), f))
        .reduce(|best, next| if next.0 < best.0 { next } else { best })
        .map(|(_, f)| f)
}

/// The tiered picker (tiering and lazy leveling). Once level 0 holds
/// `level0_compaction_trigger` files they merge into one run of level 1. A run arriving in a
/// level goes into the slot above its newest run; a level whose slots are full (`T - 1`
/// runs, or its top slot taken) is merged together with the arriving run into one run of
/// the level below, and so on down to a level with room. So a level holds up to `T - 1`
/// runs, merges them when another must come in, and each run of level `i` holds `T` of
/// level `i - 1`'s. The exception is the level that lazy leveling levels, the deepest
/// holding data: while its bytes stay under its capacity
/// ([`LevelTargets::lazy_capacity`]) arriving runs merge with its run into its bottom slot,
/// and past its capacity it goes down with them into a new deepest level. When every level
/// is full, everything merges into the bottom slot of the deepest level of the tree.
fn pick_tiered(
    v: &Version,
    targets: &LevelTargets,
    busy: &[bool; NUM_LEVELS],
) -> Option<Compaction> {
    let runs = |i: usize| -> Vec<usize> {
        targets
            .physical(i)
            .filter(|&p| !v.levels[p].is_empty())
            .collect()
    };
    let bytes = |i: usize| -> u64 { targets.physical(i).map(|p| v.level_bytes(p)).sum() };
    let deepest = targets.deepest();
    let deepest_data = (1..=deepest).rev().find(|&i| !runs(i).is_empty());
    // Whether level `i` merges an arriving run with its own, into its bottom slot.
    let leveled = |i: usize| -> bool {
        targets.policy == MergePolicy::LazyLeveling
            && deepest_data.is_none_or(|d| i >= d)
            && (i == deepest || bytes(i) < targets.lazy_capacity(i))
    };
    // No room for another run: every slot taken, or the top one.
    let full = |i: usize| -> bool {
        let r = runs(i);
        let slots = targets.physical(i);
        !r.is_empty() && (r.len() >= slots.len() || r.first() == Some(&slots.start))
    };
    // The merge of physical levels `sources` (ascending, non-empty) into level `dest`.
    // The merge of level 0 and every level above `dest` into one run of `dest`: in its
    // bottom slot with the files there that the inputs' keys fall among (`into_bottom`, or
    // a leveled `dest`), or else in the slot above its newest run.
    let merge = |dest: usize, into_bottom: bool| -> Option<Compaction> {
        let sources = [0];
        let slots = targets.physical(dest);
        let bottom = slots.end.checked_sub(1)?;
        let output = if into_bottom || leveled(dest) {
            bottom
        } else {
            match runs(dest).first() {
                Some(&newest) => newest.checked_sub(1).filter(|s| slots.contains(s))?,
                None => bottom,
            }
        };
        let level = *sources.first()?;
        if busy[level..=output].iter().any(|&b| b) {
            return None;
        }
        let between: Vec<(usize, Vec<Arc<FileMeta>>)> = (level + 1..output)
            .filter(|&p| !v.levels[p].is_empty())
            .map(|p| (p, v.levels[p].clone()))
            .collect();
        // Of the output level's run, the files the inputs' keys fall among (a run merged
        // into it leaves the rest of it in place, as leveling does).
        let files = || {
            v.levels[level]
                .iter()
                .chain(between.iter().flat_map(|(_, f)| f.iter()))
        };
        let lo = v.order.least(files().map(|f| f.smallest_user_key()));
        let hi = v.order.greatest(files().map(|f| f.largest_user_key()));
        let next_inputs = if output > level {
            v.overlapping(output, lo, hi)
        } else {
            Vec::new()
        };
        Some(Compaction {
            level,
            output_level: output,
            inputs: v.levels[level].clone(),
            between,
            next_inputs,
            version: Arc::new(Version::default()),
            for_reads: false,
            idle_merge: false,
        })
    };
    // Level 0's files, with the runs of every full level in their way, merge into one run
    // of the first level with room: a run of level `i` is made of `T - 1` runs of level
    // `i - 1` and the run that found it full, `T` times their size.
    if v.levels[0].len() < targets.l0_trigger {
        return None;
    }
    // Under lazy leveling the deepest level holding data takes no run beside its own: past
    // its capacity it goes down with the rest, into a new deepest level.
    let lazy = targets.policy == MergePolicy::LazyLeveling;
    let room = (1..deepest).find(|&i| leveled(i) || !(full(i) || lazy && deepest_data == Some(i)));
    match room {
        Some(i) => merge(i, false),
        // Nowhere deeper to go: everything merges into the deepest level's bottom slot.
        None => merge(deepest, leveled(deepest) || full(deepest)),
    }
}

/// Builds the compaction of `inputs` (from `level`) with the overlapping files beneath.
pub(crate) fn with_next_level(
    v: &Arc<Version>,
    level: usize,
    inputs: Vec<Arc<FileMeta>>,
) -> Compaction {
    let smallest = v
        .order
        .least(inputs.iter().map(|f| f.smallest_user_key()))
        .unwrap_or_default();
    let largest = v
        .order
        .greatest(inputs.iter().map(|f| f.largest_user_key()))
        .unwrap_or_default();
    let next_inputs = v.overlapping(level + 1, Some(smallest), Some(largest));
    Compaction {
        level,
        output_level: level + 1,
        inputs,
        between: Vec::new(),
        next_inputs,
        version: v.clone(),
        for_reads: false,
        idle_merge: false,
    }
}

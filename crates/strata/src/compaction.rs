//! Leveled compaction: choosing what to merge ([`pick`]) and merging it ([`run`]).
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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::compaction_filter::{CompactionFilter, FilterDecision};
use crate::cost_model::MergePolicy;
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::iter::level::LevelIterator;
use crate::iter::merge::MergingIterator;
use crate::iter::{BoxedIter, InternalIterator};
use crate::key::{
    FileNumber, Level, NUM_LEVELS, SeqNo, ValueKind, internal_key, parse_internal_key,
};
use crate::merge::MergeOperator;
use crate::range_del::{Fragmented, RangeTombstone};
use crate::sstable::TableOptions;
use crate::sstable::builder::TableBuilder;
use crate::version::edit::{NewFile, VersionEdit};
use crate::version::{FileMeta, ReadCompaction, TableStore, Version};

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

    /// Whether the tree needs a compaction: a level over its target, or (tiered) a level of
    /// the tree whose run slots are full.
    pub(crate) fn needs_work(&self, v: &Version) -> bool {
        match self.policy {
            MergePolicy::Leveling => self.scores(v).iter().any(|&s| s >= 1.0),
            _ => pick_tiered(v, self, &[false; NUM_LEVELS]).is_some(),
        }
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
        .position(|f| pointer.is_empty() || f.largest_user_key() > crate::key::user_key(pointer))
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
        let lo = files().map(|f| f.smallest_user_key()).min();
        let hi = files().map(|f| f.largest_user_key()).max();
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
    let smallest = inputs
        .iter()
        .map(|f| f.smallest_user_key())
        .min()
        .unwrap_or_default();
    let largest = inputs
        .iter()
        .map(|f| f.largest_user_key())
        .max()
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

/// True when no level below `output_level` may hold `user_key`, so a tombstone for it has
/// nothing left to hide.
fn is_bottom_for_key(v: &Version, output_level: usize, user_key: &[u8]) -> bool {
    for files in v.levels.iter().skip(output_level + 1) {
        let i = files.partition_point(|f| f.largest_user_key() < user_key);
        if files
            .get(i)
            .is_some_and(|f| f.smallest_user_key() <= user_key)
        {
            return false;
        }
    }
    true
}

/// What a compaction job needs from the database.
pub(crate) struct JobContext<'a> {
    pub store: &'a Arc<TableStore>,
    pub table_options: &'a TableOptions,
    pub target_file_bytes: u64,
    /// The oldest sequence number any reader may still ask for.
    pub smallest_snapshot: SeqNo,
    /// The newest sequence number a snapshot holds (`None`: no snapshot lives).
    pub newest_snapshot: Option<SeqNo>,
    pub new_file_number: &'a dyn Fn() -> FileNumber,
    pub shutting_down: &'a AtomicBool,
    /// Asked now and then while the job runs; true gives the job up (see [`run`]).
    pub cancel: &'a dyn Fn() -> bool,
    /// The user's filter, shown the newest version of each key that every reader sees.
    pub filter: Option<&'a dyn CompactionFilter>,
    /// Folds merge operands that every reader sees into the versions beneath them.
    pub merge: Option<&'a dyn MergeOperator>,
}

/// The outcome of a compaction job: the edit to log and what it cost.
pub(crate) struct JobResult {
    pub edit: VersionEdit,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// Merges the inputs into new files of the output level; `None` when `ctx.cancel` gave the
/// job up. Files written before a failure or the cancellation are removed again.
pub(crate) fn run(c: &Compaction, ctx: &JobContext<'_>) -> Result<Option<JobResult>> {
    let mut outputs: Vec<NewFile> = Vec::new();
    let result = merge_into(c, ctx, &mut outputs);
    if !matches!(result, Ok(Some(_))) {
        ctx.store.forget_warmed(outputs.iter().map(|f| f.number));
        for f in &outputs {
            let _ = ctx.store.fs.remove(&ctx.store.table_path(f.number));
        }
    }
    let Some(bytes_written) = result? else {
        return Ok(None);
    };
    let mut edit = VersionEdit::default();
    for (level, f) in c.input_files() {
        edit.deleted.push((Level(level), f.number));
    }
    edit.added = outputs;
    if c.level > 0
        && let Some(last) = c.inputs.last()
    {
        edit.compact_pointers
            .push((Level(c.level), last.largest.clone()));
    }
    Ok(Some(JobResult {
        edit,
        bytes_read: c.input_bytes(),
        bytes_written,
    }))
}

/// Writes the merged inputs to `outputs`; the bytes written, or `None` when cancelled.
fn merge_into(
    c: &Compaction,
    ctx: &JobContext<'_>,
    outputs: &mut Vec<NewFile>,
) -> Result<Option<u64>> {
    let mut children: Vec<BoxedIter> = Vec::new();
    if c.level == 0 {
        for f in &c.inputs {
            children.push(Box::new(f.table()?.iter(false)));
        }
    } else {
        children.push(Box::new(LevelIterator::new(c.inputs.clone(), false)));
    }
    // The inputs' range tombstones, by begin. Each goes into the output file being written
    // when the merge reaches its begin, and a file is not cut until the merge is past the
    // end of every tombstone in it: a file's range covers its tombstones whole, and files of
    // a level stay apart.
    let tombstones = input_tombstones(c)?;
    // Deeper inputs that a tombstone hides whole are left out of the merge, unread.
    let unread = |files: &[Arc<FileMeta>]| -> Result<Vec<Arc<FileMeta>>> {
        let mut kept = Vec::with_capacity(files.len());
        for f in files {
            if !hidden_whole(f, &tombstones, ctx.smallest_snapshot)? {
                kept.push(f.clone());
            }
        }
        Ok(kept)
    };
    for (_, files) in &c.between {
        children.push(Box::new(LevelIterator::new(unread(files)?, false)));
    }
    if !c.next_inputs.is_empty() {
        children.push(Box::new(LevelIterator::new(unread(&c.next_inputs)?, false)));
    }
    let mut it = MergingIterator::new(children);
    it.seek_to_first()?;

    let fs: &dyn FileSystem = ctx.store.fs.as_ref();
    let mut builder: Option<(TableBuilder, FileNumber)> = None;
    let mut current_key: Vec<u8> = Vec::new();
    let mut have_key = false;
    let mut last_seq_for_key = SeqNo::MAX;
    let mut bytes_written = 0u64;
    let mut since_check = 0u32;
    let covered = Fragmented::new(&tombstones);
    let mut next_tombstone = 0;

    while it.valid() {
        since_check += 1;
        if since_check >= 1024 {
            since_check = 0;
            // Relaxed: a late observation only delays the abort.
            if ctx.shutting_down.load(Ordering::Relaxed) {
                return Err(Error::Closed);
            }
            if (ctx.cancel)() {
                return Ok(None);
            }
        }
        let key = it.key();
        let p = parse_internal_key(key).ok_or_else(|| malformed(ctx))?;
        let new_user_key = !have_key || p.user_key != current_key.as_slice();
        if new_user_key {
            // Cut output files only between user keys, so a key never spans two files. The
            // file's range tombstones end just past its last key (`last + [0]`, the next key
            // in byte order), and go on from there in the next file: the files of a level
            // stay apart, and no key loses a tombstone that covered it.
            if let Some((b, _)) = &mut builder
                && b.estimated_size() >= ctx.target_file_bytes
                && let Some(last) = b.last_user_key()
            {
                let at = [last, &[0]].concat();
                let carried = b.clip_range_tombstones(&at);
                if let Some((b, number)) = builder.take() {
                    bytes_written +=
                        finish_output(b, number, c.output_level(), outputs, ctx.store)?;
                }
                for t in &carried {
                    open_builder(&mut builder, ctx, fs)?.add_range_tombstone(t);
                }
            }
            // Tombstones that begin by this key (after the last file's last key).
            while let Some(t) = tombstones
                .get(next_tombstone)
                .filter(|t| t.begin.as_slice() <= p.user_key)
            {
                next_tombstone += 1;
                if !drop_tombstone(c, ctx, t) {
                    open_builder(&mut builder, ctx, fs)?.add_range_tombstone(t);
                }
            }
            current_key.clear();
            current_key.extend_from_slice(p.user_key);
            have_key = true;
            last_seq_for_key = SeqNo::MAX;
        }
        // The filter may change only what reads of the present see: an entry that a
        // snapshot sees stays as it is.
        let filterable =
            last_seq_for_key == SeqNo::MAX && ctx.newest_snapshot.is_none_or(|s| p.seq > s);
        let removed = filterable
            && p.kind == ValueKind::Value
            && ctx.filter.is_some_and(|f| {
                f.filter(c.output_level(), p.user_key, it.value()) == FilterDecision::Remove
            });
        let drop = if last_seq_for_key <= ctx.smallest_snapshot {
            // A newer version of this key is visible to every reader.
            true
        } else if covered.covering(p.user_key, ctx.smallest_snapshot) > p.seq {
            // So is a range tombstone newer than this version.
            true
        } else {
            (p.kind == ValueKind::Delete || removed)
                && p.seq <= ctx.smallest_snapshot
                && is_bottom_for_key(&c.version, c.output_level(), p.user_key)
        };
        if !drop
            && p.kind == ValueKind::Merge
            && p.seq <= ctx.smallest_snapshot
            && let Some(op) = ctx.merge
        {
            // Every reader sees this operand and all older versions alike: fold them.
            let seq = p.seq;
            let bottom = is_bottom_for_key(&c.version, c.output_level(), &current_key);
            let cover = covered.covering(&current_key, ctx.smallest_snapshot);
            let folded =
                fold_operands(&mut it, &current_key, op, bottom, cover, &|| malformed(ctx))?;
            let b = open_builder(&mut builder, ctx, fs)?;
            for (k, v) in &folded {
                b.add(k, v)?;
            }
            // Older versions of the key that the fold stopped above are dropped.
            last_seq_for_key = seq;
            continue;
        }
        // An operand written as it is hides nothing older: its fold needs what lies beneath.
        if p.kind != ValueKind::Merge {
            last_seq_for_key = p.seq;
        }
        if !drop {
            let b = open_builder(&mut builder, ctx, fs)?;
            if removed {
                // Older versions of the key may lie below the output level: a tombstone
                // in the removed entry's place keeps them hidden until it reaches them.
                b.add(&internal_key(p.user_key, p.seq, ValueKind::Delete), &[])?;
            } else {
                b.add(key, it.value())?;
            }
        }
        it.next()?;
    }
    for t in tombstones.get(next_tombstone..).unwrap_or_default() {
        if !drop_tombstone(c, ctx, t) {
            open_builder(&mut builder, ctx, fs)?.add_range_tombstone(t);
        }
    }
    if let Some((b, number)) = builder.take() {
        bytes_written += finish_output(b, number, c.output_level(), outputs, ctx.store)?;
    }
    Ok(Some(bytes_written))
}

/// Whether every entry of `f` is older than a range tombstone that covers the whole file and
/// that every reader sees: the file then holds nothing any read can find, and a compaction
/// drops it without reading it (only its properties, for its newest sequence number). A file
/// with range tombstones of its own is read as any other.
fn hidden_whole(
    f: &FileMeta,
    tombstones: &[RangeTombstone],
    smallest_snapshot: SeqNo,
) -> Result<bool> {
    let candidates = tombstones.iter().filter(|t| {
        t.seq <= smallest_snapshot
            && t.begin.as_slice() <= f.smallest_user_key()
            && f.largest_user_key() < t.end.as_slice()
    });
    let Some(newest) = candidates.map(|t| t.seq).max() else {
        return Ok(false);
    };
    if f.range_deletions > 0 {
        return Ok(false);
    }
    Ok(f.table()?.largest_seq()?.is_some_and(|s| s < newest))
}

/// The range tombstones of every input file, by begin.
fn input_tombstones(c: &Compaction) -> Result<Vec<RangeTombstone>> {
    let mut all = Vec::new();
    for (_, f) in c.input_files() {
        if f.range_deletions > 0
            && let Some(t) = f.table()?.range_tombstones()?
        {
            all.extend(t.list.iter().cloned());
        }
    }
    all.sort_by(|a, b| a.begin.cmp(&b.begin));
    Ok(all)
}

/// Whether a range tombstone has nothing left to hide: every reader sees it, and no level
/// below the output holds a key of its range (what it covered in the inputs is dropped).
fn drop_tombstone(c: &Compaction, ctx: &JobContext<'_>, t: &RangeTombstone) -> bool {
    t.seq <= ctx.smallest_snapshot
        && c.version
            .levels
            .iter()
            .skip(c.output_level() + 1)
            .all(|files| {
                files.iter().all(|f| {
                    f.largest_user_key() < t.begin.as_slice()
                        || f.smallest_user_key() >= t.end.as_slice()
                })
            })
}

fn malformed(ctx: &JobContext<'_>) -> Error {
    Error::corruption(
        ctx.store.dir.clone(),
        0,
        "malformed internal key in compaction input",
    )
}

/// The output file being written, opened on first use.
fn open_builder<'b>(
    builder: &'b mut Option<(TableBuilder, FileNumber)>,
    ctx: &JobContext<'_>,
    fs: &dyn FileSystem,
) -> Result<&'b mut TableBuilder> {
    if builder.is_none() {
        let number = (ctx.new_file_number)();
        let path = ctx.store.table_path(number);
        let file = fs
            .create(&path)
            .map_err(|e| Error::io("create", &path, e))?;
        *builder = Some((
            TableBuilder::new(file, path, ctx.table_options.clone()),
            number,
        ));
    }
    builder
        .as_mut()
        .map(|(b, _)| b)
        .ok_or_else(|| Error::InvalidArgument("no output file".into()))
}

/// With `it` on a merge operand of `key` that every reader sees, reads the operands after
/// it down to a value or deletion of the key (consumed too), a version older than `cover`
/// (a range tombstone that every reader sees), or to the key's last entry, and
/// returns the entries to write instead, at the first operand's sequence number:
/// - a value, folded over the value found, over nothing after a deletion, or over nothing
///   when no level below the output may hold the key (`bottom`);
/// - otherwise one operand combining them all (the operator is associative), for a later
///   compaction to fold into the value beneath;
/// - the entries as they were when the operator fails on them.
pub(crate) fn fold_operands(
    it: &mut dyn InternalIterator,
    key: &[u8],
    op: &dyn MergeOperator,
    bottom: bool,
    cover: SeqNo,
    malformed: &dyn Fn() -> Error,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut raw: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut operands: Vec<Vec<u8>> = Vec::new();
    let mut seq = None;
    // `Some(None)`: a deletion; `Some(Some(v))`: a value.
    let mut base: Option<Option<Vec<u8>>> = None;
    while it.valid() {
        let p = parse_internal_key(it.key()).ok_or_else(malformed)?;
        if p.user_key != key {
            break;
        }
        if p.seq < cover {
            // Older than a range tombstone every reader sees: as after a deletion.
            base = Some(None);
            break;
        }
        seq.get_or_insert(p.seq);
        raw.push((it.key().to_vec(), it.value().to_vec()));
        match p.kind {
            ValueKind::Merge => operands.push(it.value().to_vec()),
            ValueKind::Value => base = Some(Some(it.value().to_vec())),
            ValueKind::Delete | ValueKind::RangeDelete => base = Some(None),
        }
        it.next()?;
        if base.is_some() {
            break;
        }
    }
    let seq = seq.unwrap_or_default();
    let folded = match (&base, bottom) {
        (Some(value), _) => crate::merge::fold(
            Some(op),
            key,
            value.as_deref(),
            operands.iter().map(Vec::as_slice),
        )
        .map(|v| (ValueKind::Value, v)),
        (None, true) => crate::merge::fold(Some(op), key, None, operands.iter().map(Vec::as_slice))
            .map(|v| (ValueKind::Value, v)),
        (None, false) => {
            // Oldest first: the oldest operand is the start of the combination.
            let mut oldest_first = operands.iter().rev();
            let first = oldest_first.next().cloned().unwrap_or_default();
            oldest_first
                .try_fold(first, |acc, newer| op.merge(key, Some(&acc), newer))
                .map_err(|reason| Error::Merge {
                    key: key.to_vec(),
                    reason,
                })
                .map(|v| (ValueKind::Merge, v))
        }
    };
    Ok(match folded {
        Ok((kind, value)) => vec![(internal_key(key, seq, kind), value)],
        Err(_) => raw,
    })
}

/// Finishes output table `number` and records it in `outputs`; the table is opened and its
/// filter and index read before the edit installs it ([`TableStore::warm`]).
fn finish_output(
    b: TableBuilder,
    number: FileNumber,
    level: usize,
    outputs: &mut Vec<NewFile>,
    store: &TableStore,
) -> Result<u64> {
    // Record the file first so that a failure below still removes it.
    outputs.push(NewFile {
        level: Level(level),
        number,
        size: 0,
        smallest: Vec::new(),
        largest: Vec::new(),
        entries: 0,
        deletions: 0,
        range_deletions: 0,
        filter_millibits: None,
        family: 0,
    });
    let s = b.finish()?;
    if let Some(last) = outputs.last_mut() {
        last.size = s.file_size;
        last.smallest = s.smallest;
        last.largest = s.largest;
        last.entries = s.entries;
        last.deletions = s.deletions;
        last.range_deletions = s.range_deletions;
        last.filter_millibits = Some(s.filter_millibits);
    }
    store.warm(number);
    Ok(s.file_size)
}

/// Builds the edit for a trivial move: the file changes level, its bytes stay.
pub(crate) fn trivial_move_edit(c: &Compaction) -> VersionEdit {
    let mut edit = VersionEdit::default();
    for f in &c.inputs {
        edit.deleted.push((Level(c.level), f.number));
        edit.added.push(NewFile {
            level: Level(c.output_level()),
            number: f.number,
            size: f.size,
            smallest: f.smallest.clone(),
            largest: f.largest.clone(),
            entries: f.entries,
            deletions: f.deletions,
            range_deletions: f.range_deletions,
            filter_millibits: f.filter_millibits,
            family: 0,
        });
    }
    edit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::BlockCache;
    use crate::fs::MemFs;
    use crate::key::internal_key;
    use crate::sstable::mapped::MappedPages;
    use crate::sstable::pinned::PinBudget;

    /// A version from `(level, smallest, largest, size)` rows; the files exist only as
    /// metadata, which is all the picker reads.
    fn version(rows: &[(usize, &str, &str, u64)]) -> Arc<Version> {
        let store = Arc::new(TableStore::new(
            Arc::new(MemFs::new()),
            "/db".into(),
            Arc::new(BlockCache::new(1 << 20)),
            Arc::new(MappedPages::new(0)),
            Arc::new(PinBudget::new(0)),
        ));
        let mut levels: [Vec<Arc<FileMeta>>; NUM_LEVELS] = Default::default();
        for (i, &(level, smallest, largest, size)) in rows.iter().enumerate() {
            let f = NewFile {
                level: Level(level),
                number: FileNumber(i as u64 + 1),
                size,
                smallest: internal_key(smallest.as_bytes(), SeqNo(1), ValueKind::Value),
                largest: internal_key(largest.as_bytes(), SeqNo(1), ValueKind::Value),
                entries: 1,
                deletions: 0,
                range_deletions: 0,
                filter_millibits: None,
                family: 0,
            };
            levels[level].push(Arc::new(FileMeta::new(store.clone(), &f)));
        }
        Arc::new(Version {
            levels,
            ..Version::default()
        })
    }

    fn picked(v: &Arc<Version>, pointer: &str) -> (FileNumber, Vec<FileNumber>) {
        let targets = LevelTargets {
            l0_trigger: 4,
            level1_bytes: 100,
            size_ratio: 10,
            policy: MergePolicy::Leveling,
            buffer_bytes: 10,
        };
        let mut pointers: [Vec<u8>; NUM_LEVELS] = Default::default();
        if !pointer.is_empty() {
            pointers[1] = internal_key(pointer.as_bytes(), SeqNo(1), ValueKind::Value);
        }
        let c = pick(v, &targets, &[false; NUM_LEVELS], &pointers, None)
            .expect("level 1 is over its target");
        assert_eq!(c.level, 1);
        let next = c.next_inputs.iter().map(|f| f.number).collect();
        (c.inputs[0].number, next)
    }

    /// What the tiered picker chooses: (first input level, output level, levels merged in
    /// between, whether the output level's files are merged in).
    fn tiered(v: &Arc<Version>, policy: MergePolicy) -> Option<(usize, usize, Vec<usize>, bool)> {
        let targets = LevelTargets {
            l0_trigger: 2,
            level1_bytes: 100,
            size_ratio: 4,
            policy,
            buffer_bytes: 10,
        };
        assert_eq!(targets.physical(1), 1..4);
        assert_eq!(targets.physical(2), 4..7);
        let none = Default::default();
        let c = pick(v, &targets, &[false; NUM_LEVELS], &none, None)?;
        let between = c.between.iter().map(|(l, _)| *l).collect();
        Some((c.level, c.output_level, between, !c.next_inputs.is_empty()))
    }

    #[test]
    fn tiering_stacks_runs_from_the_bottom_slot_up_and_merges_a_full_level_down() {
        use MergePolicy::{LazyLeveling, Tiering};
        // Level 0 over its trigger, level 1 empty: into level 1's bottom slot.
        let v = version(&[(0, "a", "z", 10), (0, "a", "z", 10)]);
        assert_eq!(tiered(&v, Tiering), Some((0, 3, vec![], false)));
        // One run there already: the next goes above it, not merged with it.
        let v = version(&[(0, "a", "z", 10), (0, "a", "z", 10), (3, "a", "z", 20)]);
        assert_eq!(tiered(&v, Tiering), Some((0, 2, vec![], false)));
        // Under lazy leveling the deepest level, under its capacity (two 10-byte buffers
        // times 4), is leveled.
        assert_eq!(tiered(&v, LazyLeveling), Some((0, 3, vec![], true)));
        // Past its capacity it goes down with level 0 into a new deepest level.
        let v = version(&[(0, "a", "z", 10), (0, "a", "z", 10), (3, "a", "z", 200)]);
        assert_eq!(tiered(&v, LazyLeveling), Some((0, 6, vec![3], false)));
        // Tiering adds a run above it instead.
        assert_eq!(tiered(&v, Tiering), Some((0, 2, vec![], false)));
        // A full level 1 (three slots) merges with level 0 into one run of level 2, in its
        // bottom slot: four runs' worth.
        let full = [(1, "a", "z", 20), (2, "a", "z", 20), (3, "a", "z", 20)];
        let mut rows = vec![(0, "a", "z", 10), (0, "a", "z", 10)];
        rows.extend(full);
        let v = version(&rows);
        assert_eq!(tiered(&v, Tiering), Some((0, 6, vec![1, 2, 3], false)));
        // With a run in level 2 already, above it.
        rows.push((6, "a", "z", 60));
        let v = version(&rows);
        assert_eq!(tiered(&v, Tiering), Some((0, 5, vec![1, 2, 3], false)));
        // Under lazy leveling level 2, the deepest, is leveled: merged into its run.
        assert_eq!(tiered(&v, LazyLeveling), Some((0, 6, vec![1, 2, 3], true)));
        // Nothing to do: level 0 under its trigger, no level full.
        let v = version(&[(0, "a", "z", 10), (3, "a", "z", 20), (6, "a", "z", 60)]);
        assert_eq!(tiered(&v, Tiering), None);
    }

    #[test]
    fn tiering_at_ratio_2_carries_full_levels_down_and_never_runs_out_of_levels() {
        let targets = LevelTargets {
            l0_trigger: 2,
            level1_bytes: 100,
            size_ratio: 2,
            policy: MergePolicy::Tiering,
            buffer_bytes: 10,
        };
        let none = Default::default();
        let picked = |rows: &[(usize, &str, &str, u64)]| {
            let v = version(rows);
            let c = pick(&v, &targets, &[false; NUM_LEVELS], &none, None)?;
            let between: Vec<usize> = c.between.iter().map(|(l, _)| *l).collect();
            Some((c.level, c.output_level, between, !c.next_inputs.is_empty()))
        };
        // One slot a level: levels 1 to 3 full, so level 0 and all three merge into level 4.
        let mut rows = vec![(0, "a", "z", 1), (0, "a", "z", 1)];
        rows.extend([(1, "a", "z", 2), (2, "a", "z", 4), (3, "a", "z", 8)]);
        assert_eq!(picked(&rows), Some((0, 4, vec![1, 2, 3], false)));
        // Every level full, the deepest included: all of it into the deepest level.
        let mut rows = vec![(0, "a", "z", 1), (0, "a", "z", 1)];
        rows.extend((1..NUM_LEVELS).map(|l| (l, "a", "z", 1 << l.min(40))));
        let deepest = NUM_LEVELS - 1;
        let between: Vec<usize> = (1..deepest).collect();
        assert_eq!(picked(&rows), Some((0, deepest, between, true)));
    }

    #[test]
    fn level_compaction_takes_the_file_with_least_beneath_it_per_byte() {
        // Level 1 (files 1-3) is over its 100 bytes. File 2 has 10 bytes beneath per byte of
        // its own, file 1 has 2, file 3 has 1.5: file 3 goes first, whatever the pointer.
        let v = version(&[
            (1, "a", "c", 50),
            (1, "d", "f", 10),
            (1, "g", "i", 80),
            (2, "a", "b", 100),
            (2, "d", "e", 100),
            (2, "g", "h", 120),
        ]);
        for pointer in ["", "c", "f", "i"] {
            assert_eq!(picked(&v, pointer), (FileNumber(3), vec![FileNumber(6)]));
        }
    }

    #[test]
    fn an_idle_merge_takes_a_tree_out_of_shape_into_its_deepest_level() {
        let targets = LevelTargets {
            l0_trigger: 4,
            level1_bytes: 100,
            size_ratio: 10,
            policy: MergePolicy::Leveling,
            buffer_bytes: 10,
        };
        // Levels 0 and 1 hold 300 bytes above level 2's 600: more than 2/9 of it.
        let v = version(&[
            (0, "a", "z", 100),
            (1, "a", "m", 100),
            (1, "n", "z", 100),
            (2, "a", "z", 600),
        ]);
        let c = idle_merge(&v, &targets).expect("out of shape");
        assert_eq!((c.level, c.output_level, c.idle_merge), (0, 2, true));
        let numbers: Vec<u64> = c.input_files().map(|(_, f)| f.number.0).collect();
        assert_eq!(numbers, [1, 2, 3, 4]);
        let levels: Vec<usize> = c.input_files().map(|(l, _)| l).collect();
        assert_eq!(levels, [0, 1, 1, 2]);
        assert!(!c.is_trivial_move());

        // In shape: 100 bytes above 600 is under 2/9 of it, memtable included.
        let v = version(&[(1, "a", "m", 100), (2, "a", "z", 600)]);
        assert!(idle_merge(&v, &targets).is_none());
        assert!(idle_merge_output_level(&v, &targets, 33).is_none());
        assert!(idle_merge_output_level(&v, &targets, 34).is_some());

        // A single sorted run has nothing to merge, nor has an empty tree; a memtable over
        // one run is two.
        let v = version(&[(1, "a", "m", 100), (1, "n", "z", 100)]);
        assert!(idle_merge(&v, &targets).is_none());
        assert!(idle_merge_output_level(&v, &targets, 100).is_some());
        assert!(idle_merge(&version(&[]), &targets).is_none());

        // Level 0 alone goes into level 1.
        let v = version(&[(0, "a", "z", 10), (0, "b", "y", 10)]);
        let c = idle_merge(&v, &targets).expect("two runs in level 0");
        assert_eq!((c.level, c.output_level), (0, 1));

        // 400 bytes exceed level 1's target of 100: they go to level 2 (1,000), level 1
        // merged in on the way.
        let v = version(&[(0, "a", "z", 100), (1, "a", "m", 150), (1, "n", "z", 150)]);
        let c = idle_merge(&v, &targets).expect("level 0 is a third of level 1");
        assert_eq!((c.output_level, c.next_inputs.len()), (2, 0));
        let levels: Vec<usize> = c.input_files().map(|(l, _)| l).collect();
        assert_eq!(levels, [0, 1, 1]);
    }

    #[test]
    fn equal_files_take_turns_from_the_pointer() {
        // Nothing beneath any file: each would move down without a rewrite, so the pointer
        // decides, wrapping around at the end of the level.
        let v = version(&[(1, "a", "c", 60), (1, "d", "f", 60), (1, "g", "i", 60)]);
        assert_eq!(picked(&v, "").0, FileNumber(1));
        assert_eq!(picked(&v, "c").0, FileNumber(2));
        assert_eq!(picked(&v, "f").0, FileNumber(3));
        assert_eq!(picked(&v, "i").0, FileNumber(1));
    }
}

//! Running a chosen compaction: merging its inputs into new tables at its output level.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Compaction;
use crate::compaction_filter::{CompactionFilter, FilterDecision};
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::iter::level::LevelIterator;
use crate::iter::merge::MergingIterator;
use crate::iter::{BoxedIter, InternalIterator};
use crate::key::{
    FileNumber, Level, ParsedKey, SeqNo, ValueKind, internal_key, parse_internal_key,
};
use crate::merge::MergeOperator;
use crate::range_del::{Fragmented, RangeTombstone};
use crate::sstable::TableOptions;
use crate::sstable::builder::TableBuilder;
use crate::version::edit::{NewFile, VersionEdit};
use crate::version::{FileMeta, TableStore, Version};

/// True when no level below `output_level` may hold `user_key`, so a tombstone for it has
/// nothing left to hide.
fn is_bottom_for_key(v: &Version, output_level: usize, user_key: &[u8]) -> bool {
    let cmp = |a: &[u8], b: &[u8]| v.order.user(a, b);
    for files in v.levels.iter().skip(output_level + 1) {
        let i = files.partition_point(|f| cmp(f.largest_user_key(), user_key).is_lt());
        if files
            .get(i)
            .is_some_and(|f| cmp(f.smallest_user_key(), user_key).is_le())
        {
            return false;
        }
    }
    true
}

/// Answers `is_bottom_for_key` for keys met in increasing order, as a compaction meets them:
/// one cursor per level below the output, moved forward, instead of a search per key.
struct Beneath<'a> {
    levels: Vec<(&'a [Arc<FileMeta>], usize)>,
    order: &'a KeyOrder,
}

impl<'a> Beneath<'a> {
    fn new(v: &'a Version, output_level: usize) -> Beneath<'a> {
        let levels = v.levels.iter().skip(output_level + 1);
        Beneath {
            levels: levels.map(|files| (files.as_slice(), 0)).collect(),
            order: &v.order,
        }
    }

    /// True when no level below the output may hold `user_key`; keys asked must not go back.
    fn holds_nothing_of(&mut self, user_key: &[u8]) -> bool {
        let order = self.order;
        for (files, at) in &mut self.levels {
            while files
                .get(*at)
                .is_some_and(|f| order.user(f.largest_user_key(), user_key).is_lt())
            {
                *at += 1;
            }
            if files
                .get(*at)
                .is_some_and(|f| order.user(f.smallest_user_key(), user_key).is_le())
            {
                return false;
            }
        }
        true
    }
}

/// What a compaction job needs from the database.
pub(crate) struct JobContext<'a> {
    pub store: &'a Arc<TableStore>,
    pub table_options: &'a TableOptions,
    pub target_file_bytes: u64,
    /// The oldest sequence number any reader may still ask for.
    pub smallest_snapshot: SeqNo,
    /// Values at or below it that every reader sees may be written with sequence number
    /// zero: `smallest_snapshot`, or the oldest [`crate::SequencePin`] if older.
    pub zero_floor: SeqNo,
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

/// Finishes the output being written once it reaches its target size, before the entries of
/// a new user key: a key never spans two files. The bytes written.
///
/// The file's range tombstones end just past its last key (`last + [0]`, the next key in
/// byte order), and go on from there in the next file: the files of a level stay apart, and
/// no key loses a tombstone that covered it. In another order no key is known to come next
/// after `last`: a file is cut only where no tombstone goes on past its last key, and has
/// nothing to carry.
fn cut_when_full(
    c: &Compaction,
    ctx: &JobContext<'_>,
    outputs: &mut Vec<NewFile>,
    builder: &mut Option<(TableBuilder, FileNumber)>,
) -> Result<u64> {
    let order = &ctx.store.order;
    let Some((b, _)) = builder else {
        return Ok(0);
    };
    let Some(last) = b.last_user_key() else {
        return Ok(0);
    };
    if b.estimated_size() < ctx.target_file_bytes
        || !order.is_bytewise() && b.range_tombstones_go_past(last)
    {
        return Ok(0);
    }
    let carried = match order.is_bytewise() {
        true => b.clip_range_tombstones(&[last, &[0]].concat()),
        false => Vec::new(),
    };
    let mut bytes_written = 0;
    if let Some((b, number)) = builder.take() {
        bytes_written += finish_output(b, number, c.output_level(), outputs, ctx.store)?;
    }
    for t in &carried {
        open_builder(builder, ctx, ctx.store.fs.as_ref())?.add_range_tombstone(t);
    }
    Ok(bytes_written)
}

/// Merges the inputs into new files of the output level; `None` when `ctx.cancel` gave the
/// job up. Files written before a failure or the cancellation are removed again.
pub(crate) fn run(c: &Compaction, ctx: &JobContext<'_>) -> Result<Option<JobResult>> {
    let mut outputs: Vec<NewFile> = Vec::new();
    let mut builder: Option<(TableBuilder, FileNumber)> = None;
    let result = merge_into(c, ctx, &mut outputs, &mut builder);
    if !matches!(result, Ok(Some(_))) {
        ctx.store.forget_warmed(outputs.iter().map(|f| f.number));
        // The finished files, and the one being written when the merge stopped (the
        // database closing in the middle of it leaves no partial table behind).
        let unfinished = builder.take().map(|(b, number)| {
            drop(b);
            number
        });
        for number in outputs.iter().map(|f| f.number).chain(unfinished) {
            let _ = ctx.store.fs.remove(&ctx.store.table_path(number));
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
    builder: &mut Option<(TableBuilder, FileNumber)>,
) -> Result<Option<u64>> {
    let (mut it, tombstones) = merge_inputs(c, ctx)?;
    it.seek_to_first()?;

    let fs: &dyn FileSystem = ctx.store.fs.as_ref();
    let mut current_key: Vec<u8> = Vec::new();
    let mut have_key = false;
    let mut last_seq_for_key = SeqNo::MAX;
    let mut bytes_written = 0u64;
    let mut since_check = 0u32;
    let order = &ctx.store.order;
    let covered = Fragmented::new(order, &tombstones);
    let mut next_tombstone = 0;
    let mut beneath = Beneath::new(&c.version, c.output_level());

    while it.valid() {
        since_check += 1;
        if since_check >= 1024 {
            since_check = 0;
            if let Some(stop) = interrupted(ctx) {
                return stop;
            }
        }
        let key = it.key();
        let p = parse_internal_key(key).ok_or_else(|| malformed(ctx))?;
        let new_user_key = !have_key || p.user_key != current_key.as_slice();
        if new_user_key {
            bytes_written += cut_when_full(c, ctx, outputs, builder)?;
            // Tombstones that begin by this key (after the last file's last key).
            while let Some(t) = tombstones
                .get(next_tombstone)
                .filter(|t| order.user(&t.begin, p.user_key).is_le())
            {
                next_tombstone += 1;
                if !drop_tombstone(c, ctx, t) {
                    open_builder(builder, ctx, fs)?.add_range_tombstone(t);
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
        let drop = obsolete(c, ctx, &p, last_seq_for_key, &covered, removed);
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
            let b = open_builder(builder, ctx, fs)?;
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
            let zeroed = !removed && forgets_sequence(c, ctx, &p, &covered, &mut beneath);
            let b = open_builder(builder, ctx, fs)?;
            if removed {
                // Older versions of the key may lie below the output level: a tombstone
                // in the removed entry's place keeps them hidden until it reaches them.
                b.add(&internal_key(p.user_key, p.seq, ValueKind::Delete), &[])?;
            } else if zeroed {
                b.add(&internal_key(p.user_key, SeqNo(0), p.kind), it.value())?;
                b.note_forgotten_sequence(p.seq);
            } else {
                b.add(key, it.value())?;
            }
        }
        it.next()?;
    }
    let rest = tombstones.get(next_tombstone..).unwrap_or_default();
    add_tombstones(c, ctx, fs, builder, rest)?;
    if let Some((b, number)) = builder.take() {
        bytes_written += finish_output(b, number, c.output_level(), outputs, ctx.store)?;
    }
    Ok(Some(bytes_written))
}

/// One iterator over every input of `c`, leaving out the deeper inputs that one of the
/// inputs' range tombstones hides whole, and those tombstones.
fn merge_inputs(
    c: &Compaction,
    ctx: &JobContext<'_>,
) -> Result<(MergingIterator, Vec<RangeTombstone>)> {
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
    let tombstones = input_tombstones(c, &ctx.store.order)?;
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
    Ok((
        MergingIterator::new(ctx.store.order.clone(), children),
        tombstones,
    ))
}

/// Whether the merge drops entry `p`: a newer version of its key (last seen at
/// `last_seq_for_key`) or a range tombstone newer than it is visible to every reader, or it is
/// a deletion (or an entry the filter `removed`) that every reader sees with nothing older
/// beneath the output level.
fn obsolete(
    c: &Compaction,
    ctx: &JobContext<'_>,
    p: &ParsedKey<'_>,
    last_seq_for_key: SeqNo,
    covered: &Fragmented,
    removed: bool,
) -> bool {
    if last_seq_for_key <= ctx.smallest_snapshot {
        // A newer version of this key is visible to every reader.
        true
    } else if covered.covering(p.user_key, ctx.smallest_snapshot) > p.seq {
        // So is a range tombstone newer than this version.
        true
    } else {
        (p.kind == ValueKind::Delete || removed)
            && p.seq <= ctx.smallest_snapshot
            && is_bottom_for_key(&c.version, c.output_level(), p.user_key)
    }
}

/// Whether the kept value `p` goes out with sequence number zero, as RocksDB writes the
/// bottom of its tree: every reader sees it (its sequence is at most the oldest snapshot's,
/// and no sequence pin asks to keep it),
/// it is the key's oldest version left, nothing older lies beneath the output level, and no
/// range tombstone of the inputs covers its key (a kept tombstone older than the value would
/// otherwise hide it). Its sequence then tells a read nothing, and zeros compress to almost
/// nothing. Level 0 keeps every sequence: its files overlap one another.
fn forgets_sequence(
    c: &Compaction,
    ctx: &JobContext<'_>,
    p: &ParsedKey<'_>,
    covered: &Fragmented,
    beneath: &mut Beneath<'_>,
) -> bool {
    p.kind == ValueKind::Value
        && p.seq != SeqNo(0)
        && p.seq <= ctx.zero_floor
        && c.output_level() > 0
        && covered.covering(p.user_key, SeqNo::MAX) == SeqNo(0)
        && beneath.holds_nothing_of(p.user_key)
}

/// Adds to the output file the `tombstones` that some reader may still need.
fn add_tombstones(
    c: &Compaction,
    ctx: &JobContext<'_>,
    fs: &dyn FileSystem,
    builder: &mut Option<(TableBuilder, FileNumber)>,
    tombstones: &[RangeTombstone],
) -> Result<()> {
    for t in tombstones {
        if !drop_tombstone(c, ctx, t) {
            open_builder(builder, ctx, fs)?.add_range_tombstone(t);
        }
    }
    Ok(())
}

/// What a merge returns when it stops early: the database is closing, or the job was
/// cancelled (`ctx.cancel`).
fn interrupted(ctx: &JobContext<'_>) -> Option<Result<Option<u64>>> {
    // Relaxed: a late observation only delays the abort.
    if ctx.shutting_down.load(Ordering::Relaxed) {
        return Some(Err(Error::Closed));
    }
    if (ctx.cancel)() {
        return Some(Ok(None));
    }
    None
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
    let order = f.order();
    let candidates = tombstones.iter().filter(|t| {
        t.seq <= smallest_snapshot
            && order.user(&t.begin, f.smallest_user_key()).is_le()
            && order.user(f.largest_user_key(), &t.end).is_lt()
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
fn input_tombstones(c: &Compaction, order: &KeyOrder) -> Result<Vec<RangeTombstone>> {
    let mut all = Vec::new();
    for (_, f) in c.input_files() {
        if f.range_deletions > 0
            && let Some(t) = f.table()?.range_tombstones()?
        {
            all.extend(t.list.iter().cloned());
        }
    }
    all.sort_by(|a, b| order.user(&a.begin, &b.begin));
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
                    let order = f.order();
                    order.user(f.largest_user_key(), &t.begin).is_lt()
                        || order.user(f.smallest_user_key(), &t.end).is_ge()
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
    outputs.push(NewFile::blank(Level(level), number));
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

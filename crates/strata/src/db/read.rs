//! The read path: point lookups, one key or many, over the current super-version.

use std::sync::atomic::Ordering;

use std::sync::Arc;

use super::family::Family;
use super::family::SuperVersion;
use super::read_options::ReadOptions;
use super::state::DbInner;
use crate::error::{Error, Result};
use crate::iter::InternalIterator as _;
use crate::key::{
    LookupKey, SEEK_KIND, SeqNo, ValueKind, append_internal_key, lookup_key, parse_internal_key,
};
use crate::memtable::Lookup;
use crate::mutex::lock;
use crate::range_del::Fragmented;
use crate::sstable::reader::TableEntry;
use crate::version::{Probes, ReadCompaction};

impl DbInner {
    /// The column family a read names.
    pub(super) fn family_of<'a>(&'a self, options: &'a ReadOptions) -> &'a Arc<Family> {
        options
            .family
            .as_ref()
            .map_or(&self.default, |cf| &cf.family)
    }
}

/// Keys [`Db::get_many`] looks up together.
pub(super) const GET_MANY_BATCH: usize = 32;

impl DbInner {
    /// The sequence number of the newest entry (value or deletion) of `key` in the whole
    /// tree, or `None` when the key was never written (or its history compacted away, which
    /// happens only to entries older than every snapshot). Exact: it reads the memtables and
    /// then the tables, as a lookup of the newest version does.
    pub(super) fn newest_seq(&self, key: &[u8]) -> Result<Option<SeqNo>> {
        let sv = self.default.super_version();
        // A range tombstone changes the key only where it hides a value: the first one after
        // the key's newest value deletes it, and later ones, over a key already absent,
        // change nothing (as Redis's FLUSHDB touches only the keys that exist).
        let newest = |seq: SeqNo, live: bool| -> Result<Option<SeqNo>> {
            if !live {
                return Ok(Some(seq));
            }
            Ok(Some(
                self.first_tombstone_after(&sv, key, seq)?.unwrap_or(seq),
            ))
        };
        for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
            match m.get(key, SeqNo::MAX) {
                Lookup::Found(_, seq) | Lookup::Merge(seq) => return newest(seq, true),
                Lookup::Deleted(seq) => return newest(seq, false),
                Lookup::Absent => {}
            }
        }
        let found = sv.version.get(
            LookupKey::new(key, SeqNo::MAX).bytes(),
            key,
            true,
            &mut None,
        )?;
        match found {
            Some(e) => newest(e.seq, e.kind != ValueKind::Delete),
            None => Ok(None),
        }
    }

    /// The newest range tombstone covering `key` that a read at `seq` sees, from every
    /// memtable and table of `sv` (`SeqNo(0)`: none). Free when there are none.
    pub(super) fn covering_tombstone(
        &self,
        sv: &SuperVersion,
        key: &[u8],
        seq: SeqNo,
    ) -> Result<SeqNo> {
        let mut newest = SeqNo(0);
        for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
            if let Some(t) = m.range_tombstones() {
                newest = newest.max(t.covering(key, seq));
            }
        }
        for f in sv.version.range_del_files_holding(key) {
            if let Some(t) = f.table()?.range_tombstones()? {
                newest = newest.max(t.fragmented.covering(key, seq));
            }
        }
        Ok(newest)
    }

    /// The oldest range tombstone of `sv` covering `key` newer than `after`.
    fn first_tombstone_after(
        &self,
        sv: &SuperVersion,
        key: &[u8],
        after: SeqNo,
    ) -> Result<Option<SeqNo>> {
        let mut first: Option<SeqNo> = None;
        let mut see = |s: Option<SeqNo>| {
            if let Some(s) = s {
                first = Some(first.map_or(s, |f| f.min(s)));
            }
        };
        for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
            if let Some(t) = m.range_tombstones() {
                see(t.first_covering_after(key, after));
            }
        }
        for f in sv.version.range_del_files_holding(key) {
            if let Some(t) = f.table()?.range_tombstones()? {
                see(t.fragmented.first_covering_after(key, after));
            }
        }
        Ok(first)
    }

    /// The range tombstones of every memtable and table of `sv`, each fragmented as its
    /// memtable or table holds them, for a cursor (empty when there are none).
    pub(super) fn all_tombstones(&self, sv: &SuperVersion) -> Result<Vec<Arc<Fragmented>>> {
        let mut all: Vec<Arc<Fragmented>> = std::iter::once(&sv.mem)
            .chain(sv.imm.iter())
            .filter_map(|m| m.range_tombstones())
            .collect();
        if sv.version.range_del_files.is_empty() {
            return Ok(all);
        }
        for f in sv.version.levels[0]
            .iter()
            .filter(|f| f.range_deletions > 0)
        {
            if let Some(t) = f.table()?.range_tombstones()? {
                all.push(t.fragmented.clone());
            }
        }
        // The tables of a deeper level hold apart ranges, in order: their fragments join
        // into one sorted list, searched once per key rather than once per table.
        for files in sv.version.levels.iter().skip(1) {
            let mut parts = Vec::new();
            for f in files.iter().filter(|f| f.range_deletions > 0) {
                if let Some(t) = f.table()?.range_tombstones()? {
                    parts.push(t.fragmented.clone());
                }
            }
            match parts.len() {
                0 => {}
                1 => all.extend(parts),
                _ => all.push(Arc::new(Fragmented::concat(&sv.version.order, &parts))),
            }
        }
        all.retain(|t| !t.is_empty());
        Ok(all)
    }

    pub(super) fn get(&self, key: &[u8], options: &ReadOptions) -> Result<Option<Vec<u8>>> {
        let family = self.family_of(options);
        let (seq, sv) = self.read_view(options);
        // The newest version found is hidden by a newer range tombstone.
        let cover = self.covering_tombstone(&sv, key, seq)?;
        for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
            match m.get(key, seq) {
                Lookup::Found(v, s) => return Ok((s > cover).then_some(v)),
                Lookup::Deleted(_) => return Ok(None),
                Lookup::Merge(s) if s > cover => return self.get_merged(family, &sv, key, seq),
                Lookup::Merge(_) => return Ok(None),
                Lookup::Absent => {}
            }
        }
        let lookup = LookupKey::new(key, seq);
        let mut exhausted = None;
        let found = sv
            .version
            .get(lookup.bytes(), key, !options.skip_cache, &mut exhausted);
        if let Some(rc) = exhausted {
            self.ask_read_compaction(family.id, rc);
        }
        match found? {
            Some(e) if e.seq < cover => Ok(None),
            Some(e) if e.kind == ValueKind::Value => Ok(Some(e.value)),
            Some(e) if e.kind == ValueKind::Merge => self.get_merged(family, &sv, key, seq),
            _ => Ok(None),
        }
    }

    /// The value of `key` at `seq` when its newest visible version is a merge operand: the
    /// operands, newest first, down to a value, a deletion or the key's oldest version,
    /// gathered through a cursor over the whole tree and folded.
    fn get_merged(
        &self,
        family: &Family,
        sv: &SuperVersion,
        key: &[u8],
        seq: SeqNo,
    ) -> Result<Option<Vec<u8>>> {
        // Versions older than a range tombstone that covers the key end the operands, as a
        // deletion does.
        let cover = self.covering_tombstone(sv, key, seq)?;
        let mut it = super::merged::internal_iter(sv, true);
        it.seek(&lookup_key(key, seq))?;
        let mut operands: Vec<Vec<u8>> = Vec::new();
        let mut base = None;
        while it.valid() {
            let p = parse_internal_key(it.key())
                .ok_or_else(|| Error::corruption("", 0, "malformed internal key"))?;
            if p.user_key != key || p.seq < cover {
                break;
            }
            match p.kind {
                ValueKind::Merge => operands.push(it.value().to_vec()),
                ValueKind::Value => {
                    base = Some(it.value().to_vec());
                    break;
                }
                ValueKind::Delete | ValueKind::RangeDelete => break,
            }
            it.next()?;
        }
        if operands.is_empty() {
            // The entry that sent the read here went away meanwhile? Not in one super-version.
            return Ok(base);
        }
        crate::merge::fold(
            family.opts.merge_operator.as_deref(),
            key,
            base.as_deref(),
            operands.iter().map(Vec::as_slice),
        )
        .map(Some)
    }

    pub(super) fn get_many<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        options: &ReadOptions,
        mut each: impl FnMut(Result<Option<Vec<u8>>>),
    ) {
        let family = self.family_of(options);
        let (seq, sv) = self.read_view(options);
        // Held across the caller's keys and callbacks and the batch's reads: counted, so that
        // it does not take one of the thread's few uncounted guards for all that time.
        let sv = arc_swap::Guard::into_inner(sv);
        let tombstones = sv.mem.range_tombstones().is_some()
            || sv.imm.iter().any(|m| m.range_tombstones().is_some())
            || !sv.version.range_del_files.is_empty();
        let mut keys = keys.into_iter();
        let mut probes = Probes::default();
        let mut exhausted = None;
        // A batch's lookup keys, end to end; kept from batch to batch.
        let mut lookup_bytes = Vec::new();
        // Lines asked for must still be in the first-level cache when they are read: a batch
        // of 32 lookups asks for a few hundred.
        loop {
            let mut batch: [&[u8]; GET_MANY_BATCH] = [&[]; GET_MANY_BATCH];
            // `batch` first: a full batch leaves the next key in `keys`.
            let n = batch
                .iter_mut()
                .zip(keys.by_ref())
                .map(|(b, k)| *b = k)
                .count();
            if n == 0 {
                break;
            }
            let keys = batch.get(..n).unwrap_or_default();
            let mut found: [Option<Result<Option<TableEntry>>>; GET_MANY_BATCH] =
                std::array::from_fn(|_| None);
            let out = found.get_mut(..n).unwrap_or_default();
            for m in std::iter::once(&sv.mem).chain(sv.imm.iter()) {
                for (k, _) in keys.iter().zip(out.iter()).filter(|(_, o)| o.is_none()) {
                    m.prefetch_bucket(k);
                }
                for (k, _) in keys.iter().zip(out.iter()).filter(|(_, o)| o.is_none()) {
                    m.prefetch_chain(k);
                }
                for (k, o) in keys.iter().zip(out.iter_mut()).filter(|(_, o)| o.is_none()) {
                    *o = match m.get(k, seq) {
                        Lookup::Found(value, seq) => Some(Ok(Some(TableEntry {
                            kind: ValueKind::Value,
                            value,
                            seq,
                        }))),
                        Lookup::Deleted(_) => Some(Ok(None)),
                        // Gathered and folded below, after the tables' lookups.
                        Lookup::Merge(seq) => Some(Ok(Some(TableEntry {
                            kind: ValueKind::Merge,
                            value: Vec::new(),
                            seq,
                        }))),
                        Lookup::Absent => None,
                    };
                }
            }
            // The lookup keys of the keys the memtables did not answer (empty for the rest).
            lookup_bytes.clear();
            let mut ends = [0usize; GET_MANY_BATCH];
            for ((k, o), end) in keys.iter().zip(out.iter()).zip(&mut ends) {
                if o.is_none() {
                    append_internal_key(&mut lookup_bytes, k, seq, SEEK_KIND);
                }
                *end = lookup_bytes.len();
            }
            let lookups: [&[u8]; GET_MANY_BATCH] = std::array::from_fn(|i| {
                let start = i.checked_sub(1).map_or(0, |p| ends[p]);
                lookup_bytes.get(start..ends[i]).unwrap_or_default()
            });
            sv.version.get_many(
                lookups.get(..n).unwrap_or_default(),
                keys,
                !options.skip_cache,
                out,
                &mut probes,
                &mut exhausted,
            );
            for (k, o) in keys.iter().zip(out.iter_mut()) {
                if tombstones && let Some(Ok(Some(e))) = o {
                    match self.covering_tombstone(&sv, k, seq) {
                        Ok(cover) if e.seq < cover => *o = Some(Ok(None)),
                        Ok(_) => {}
                        Err(err) => *o = Some(Err(err)),
                    }
                }
                each(match o.take() {
                    Some(Ok(Some(e))) if e.kind == ValueKind::Value => Ok(Some(e.value)),
                    Some(Ok(Some(e))) if e.kind == ValueKind::Merge => {
                        self.get_merged(family, &sv, k, seq)
                    }
                    Some(Err(e)) => Err(e),
                    _ => Ok(None),
                });
            }
        }
        if let Some(rc) = exhausted {
            self.ask_read_compaction(family.id, rc);
        }
    }

    /// The sequence number a read sees and the super-version it reads. The number is
    /// loaded first: every write at or below it is in a memtable or table that this
    /// super-version (or a later one) holds. A flush or compaction that finished between
    /// the two loads may have folded or dropped versions up to a newer number than the
    /// read's (its `horizon`): the read then takes the sequence number again, as of a
    /// moment within the call. A snapshot's number is never below a horizon, as every job
    /// keeps what live snapshots see.
    pub(super) fn read_view(
        &self,
        options: &ReadOptions,
    ) -> (SeqNo, arc_swap::Guard<Arc<SuperVersion>>) {
        loop {
            let seq = self.read_seq(options);
            let sv = self.family_of(options).super_version_guard();
            if seq >= sv.horizon || options.snapshot.is_some() {
                return (seq, sv);
            }
        }
    }

    /// The sequence number a read sees: its snapshot's, or the last visible write's.
    pub(super) fn read_seq(&self, options: &ReadOptions) -> SeqNo {
        match &options.snapshot {
            Some(s) => s.seq(),
            None => SeqNo(self.visible.load(Ordering::Acquire)),
        }
    }

    /// Hands a file that reads used up to the compaction thread, unless it has one already.
    pub(super) fn ask_read_compaction(&self, family: u32, rc: ReadCompaction) {
        if !self.opts.read_triggered_compaction {
            return;
        }
        let mut st = lock(&self.state);
        if let Some(f) = st.family_mut(family)
            && f.family.targets.policy == crate::options::MergePolicy::Leveling
            && f.read_compaction.is_none()
        {
            f.read_compaction = Some(rc);
            self.bg_cv.notify_all();
        }
    }
}

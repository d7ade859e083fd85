//! The version set: the current level structure, the MANIFEST that logs its changes, and the
//! counters persisted with it (next file number, last sequence, oldest live WAL).
//!
//! Every change is one [`VersionEdit`] appended to the MANIFEST and synced before the new
//! version is installed, so a crash at any instant reopens to the structure before or after
//! the edit. CURRENT names the MANIFEST and is replaced atomically (write a temporary file,
//! sync it, rename it over CURRENT, sync the directory).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::edit::VersionEdit;
use super::{FileMeta, TableStore, Version, io_err, manifest_file_name};
use crate::comparator::BytewiseComparator;
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::key::{FileNumber, Level, NUM_LEVELS, SeqNo};
use crate::log::{LogKind, LogWriter, RecoveryMode, header_record, read_log, strip_header};

/// Roll over to a fresh MANIFEST past this size.
const MANIFEST_ROLLOVER_BYTES: u64 = 64 * 1024 * 1024;

/// The name of the column family every database has, which the calls without a family use.
pub const DEFAULT_FAMILY: &str = "default";

/// One column family's tree.
#[derive(Clone)]
pub(crate) struct FamilyVersion {
    pub name: String,
    pub current: Arc<Version>,
    /// Per level, where the next compaction of that level starts (round-robin over keys).
    pub compact_pointers: [Vec<u8>; NUM_LEVELS],
}

impl FamilyVersion {
    fn empty(name: &str) -> Self {
        FamilyVersion {
            name: name.to_string(),
            current: Arc::new(Version::default()),
            compact_pointers: Default::default(),
        }
    }
}

/// The column families by id; 0 is the default one, which is never dropped.
pub(crate) type Families = BTreeMap<u32, FamilyVersion>;

pub(crate) struct VersionSet {
    store: Arc<TableStore>,
    families: Families,
    /// The id the next column family created gets: ids are never reused, so that a WAL
    /// record of a dropped family never lands in a new one.
    next_family: u32,
    manifest: Option<LogWriter>,
    manifest_number: FileNumber,
    next_file: u64,
    /// WAL files numbered below this hold nothing that is not in an SST.
    pub log_number: FileNumber,
    /// The last sequence number recorded in the MANIFEST.
    pub last_sequence: SeqNo,
}

impl VersionSet {
    /// The state of a database that has never been written.
    pub(crate) fn empty(store: Arc<TableStore>) -> Self {
        VersionSet {
            store,
            families: BTreeMap::from([(0, FamilyVersion::empty(DEFAULT_FAMILY))]),
            next_family: 1,
            manifest: None,
            manifest_number: FileNumber(0),
            next_file: 1,
            log_number: FileNumber(0),
            last_sequence: SeqNo(0),
        }
    }

    /// Rebuilds the version set from CURRENT and the MANIFEST it names.
    pub(crate) fn recover(store: Arc<TableStore>) -> Result<Self> {
        let current_path = store.dir.join("CURRENT");
        let current = store
            .fs
            .read_all(&current_path)
            .map_err(io_err("read", &current_path))?;
        let name = current
            .strip_suffix(b"\n")
            .and_then(|n| std::str::from_utf8(n).ok())
            .filter(|n| n.starts_with("MANIFEST-") && !n.contains('/'))
            .ok_or_else(|| {
                Error::corruption(&current_path, 0, "CURRENT does not name a MANIFEST")
            })?;
        let manifest_number = name
            .trim_start_matches("MANIFEST-")
            .parse::<u64>()
            .map_err(|_| {
                Error::corruption(&current_path, 0, "CURRENT names a malformed MANIFEST")
            })?;
        let path = store.dir.join(name);
        let data = store.fs.read_all(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::corruption(
                &current_path,
                0,
                format!("CURRENT names {name}, which does not exist"),
            ),
            _ => Error::io("read", &path, e),
        })?;
        // A torn last edit was never acknowledged: it is dropped like a torn WAL record.
        let records = strip_header(
            &path,
            read_log(&path, &data, RecoveryMode::Strict)?,
            LogKind::Manifest,
        )?;
        let mut set = VersionSet::empty(store);
        set.manifest_number = FileNumber(manifest_number);
        let (mut have_log, mut have_next, mut have_seq) = (false, false, false);
        for (i, (offset, record)) in records.into_iter().enumerate() {
            let edit = VersionEdit::decode(&record).map_err(|e| e.at(&path, offset))?;
            // The first edit names the order, by its silence when bytewise.
            let recorded = match (i, &edit.comparator) {
                (_, Some(name)) => Some(name.as_str()),
                (0, None) => Some(BytewiseComparator::NAME),
                _ => None,
            };
            if let Some(name) = recorded
                && name != set.store.order.name()
            {
                return Err(Error::InvalidArgument(format!(
                    "the database's keys are ordered by comparator {name}, not by {}",
                    set.store.order.name()
                )));
            }
            set.families = set
                .apply(&set.families, &edit)
                .map_err(|reason| Error::corruption(&path, offset, reason))?;
            if let Some(n) = edit.next_family {
                set.next_family = set.next_family.max(n);
            }
            if let Some(n) = edit.log_number {
                set.log_number = n;
                have_log = true;
            }
            if let Some(n) = edit.next_file_number {
                set.next_file = n;
                have_next = true;
            }
            if let Some(s) = edit.last_sequence {
                set.last_sequence = s;
                have_seq = true;
            }
            set.set_compact_pointers(&edit);
        }
        if !(have_log && have_next && have_seq) {
            return Err(Error::corruption(
                &path,
                0,
                "MANIFEST lacks the log number, next file number or last sequence",
            ));
        }
        let max_file = set.files().map(|(_, _, f)| f.number.0).max().unwrap_or(0);
        let max_family = set.families.keys().max().copied().unwrap_or(0);
        set.next_file = set.next_file.max(max_file + 1).max(manifest_number + 1);
        set.next_family = set.next_family.max(max_family + 1);
        Ok(set)
    }

    /// The tree of column family `id` (an empty one for a family that is not there).
    pub(crate) fn current(&self, id: u32) -> Arc<Version> {
        self.families
            .get(&id)
            .map_or_else(|| Arc::new(Version::default()), |f| f.current.clone())
    }

    /// The trees of every family.
    pub(crate) fn all_current(&self) -> Vec<Arc<Version>> {
        self.families.values().map(|f| f.current.clone()).collect()
    }

    pub(crate) fn families(&self) -> &Families {
        &self.families
    }

    /// Where the next compaction of each level of family `id` starts.
    pub(crate) fn compact_pointers(&self, id: u32) -> &[Vec<u8>; NUM_LEVELS] {
        static NONE: [Vec<u8>; NUM_LEVELS] = [const { Vec::new() }; NUM_LEVELS];
        self.families
            .get(&id)
            .map_or(&NONE, |f| &f.compact_pointers)
    }

    /// Every file of every family, with its family and level.
    pub(crate) fn files(&self) -> impl Iterator<Item = (u32, Level, &Arc<FileMeta>)> {
        self.families
            .iter()
            .flat_map(|(id, f)| f.current.files().map(move |(level, m)| (*id, level, m)))
    }

    /// The id a new column family gets; the caller logs it in an edit's `next_family`.
    pub(crate) fn new_family_id(&mut self) -> u32 {
        let id = self.next_family;
        self.next_family += 1;
        id
    }

    fn set_compact_pointers(&mut self, edit: &VersionEdit) {
        if let Some(f) = self.families.get_mut(&edit.family) {
            for (level, key) in &edit.compact_pointers {
                if let Some(p) = f.compact_pointers.get_mut(level.0) {
                    p.clone_from(key);
                }
            }
        }
    }

    pub(crate) fn new_file_number(&mut self) -> FileNumber {
        let n = self.next_file;
        self.next_file += 1;
        FileNumber(n)
    }

    /// Makes sure new file numbers do not collide with `n`, found in the directory.
    pub(crate) fn mark_file_number_used(&mut self, n: FileNumber) {
        self.next_file = self.next_file.max(n.0 + 1);
    }

    pub(crate) fn manifest_number(&self) -> FileNumber {
        self.manifest_number
    }

    /// Applies an edit to the families of `base`: first the families it creates, then its
    /// files, then the families it drops. An impossible edit (deleting a file that is not
    /// there, overlapping files in a sorted level, a family created twice or dropped when
    /// absent) is reported as a reason string.
    fn apply(&self, base: &Families, edit: &VersionEdit) -> Result<Families, String> {
        let mut families = base.clone();
        for (id, name) in &edit.added_families {
            if families.contains_key(id) || families.values().any(|f| f.name == *name) {
                return Err(format!("column family {id} ({name}) is created twice"));
            }
            families.insert(*id, FamilyVersion::empty(name));
        }
        let mut touched: Vec<u32> = edit.added.iter().map(|f| f.family).collect();
        if !edit.deleted.is_empty() {
            touched.push(edit.family);
        }
        touched.sort_unstable();
        touched.dedup();
        for id in touched {
            let family = families
                .get_mut(&id)
                .ok_or_else(|| format!("edit changes column family {id}, which is absent"))?;
            let deleted: &[(Level, FileNumber)] = if id == edit.family {
                &edit.deleted
            } else {
                &[]
            };
            let added = edit.added.iter().filter(|f| f.family == id);
            family.current = Arc::new(self.apply_files(&family.current, deleted, added)?);
        }
        for id in &edit.dropped_families {
            if *id == 0 || families.remove(id).is_none() {
                return Err(format!("column family {id} cannot be dropped"));
            }
        }
        Ok(families)
    }

    /// Applies deleted and added files to one family's tree.
    fn apply_files<'e>(
        &self,
        base: &Version,
        deleted: &[(Level, FileNumber)],
        added: impl Iterator<Item = &'e super::edit::NewFile>,
    ) -> Result<Version, String> {
        let mut v = base.clone();
        // Files that move between levels keep their `FileMeta` (and open table).
        let mut removed = std::collections::HashMap::new();
        for (level, number) in deleted {
            let files = v.levels.get_mut(level.0).ok_or("level out of range")?;
            let Some(pos) = files.iter().position(|f| f.number == *number) else {
                return Err(format!(
                    "edit deletes file {} which is not in level {}",
                    number.0, level.0
                ));
            };
            removed.insert(*number, files.remove(pos));
        }
        for f in added {
            let files = v.levels.get_mut(f.level.0).ok_or("level out of range")?;
            let meta = removed
                .remove(&f.number)
                .unwrap_or_else(|| Arc::new(FileMeta::new(self.store.clone(), f)));
            files.push(meta);
        }
        for (level, files) in v.levels.iter_mut().enumerate() {
            if level == 0 {
                files.sort_by_key(|f| std::cmp::Reverse(f.number));
            } else {
                let order = &self.store.order;
                files.sort_by(|a, b| order.internal(&a.smallest, &b.smallest));
                for pair in files.windows(2) {
                    if let [a, b] = pair
                        && order
                            .user(a.largest_user_key(), b.smallest_user_key())
                            .is_ge()
                    {
                        return Err(format!(
                            "files {} and {} overlap in level {level}",
                            a.number.0, b.number.0
                        ));
                    }
                }
            }
        }
        v.index_files();
        Ok(v)
    }

    /// Logs `edit` durably and installs the version it makes. On error nothing is installed,
    /// and the caller must treat the database as poisoned: the MANIFEST may hold the edit.
    pub(crate) fn log_and_apply(&mut self, mut edit: VersionEdit) -> Result<()> {
        if self
            .manifest
            .as_ref()
            .is_none_or(|m| m.bytes_written() > MANIFEST_ROLLOVER_BYTES)
        {
            self.write_new_manifest()?;
        }
        edit.next_file_number = Some(self.next_file);
        if edit.last_sequence.is_none() {
            edit.last_sequence = Some(self.last_sequence);
        }
        let families = self.apply(&self.families, &edit).map_err(|reason| {
            Error::corruption(
                self.store
                    .dir
                    .join(manifest_file_name(self.manifest_number)),
                0,
                reason,
            )
        })?;
        let manifest = self.manifest.as_mut().ok_or(Error::Closed)?;
        let logged = manifest
            .add_record(&edit.encode())
            .and_then(|()| manifest.sync());
        if let Err(e) = logged {
            // The file may now end in part of a record: never append after it. A later edit
            // starts a fresh MANIFEST instead.
            self.manifest = None;
            return Err(e);
        }
        self.install(edit, families);
        Ok(())
    }

    fn install(&mut self, edit: VersionEdit, families: Families) {
        let old = self.families.get(&edit.family).map(|f| &f.current);
        for (level, number) in &edit.deleted {
            if edit.added.iter().any(|a| a.number == *number) {
                continue; // moved, not removed
            }
            if let Some(f) = old
                .and_then(|v| v.levels.get(level.0))
                .and_then(|fs| fs.iter().find(|f| f.number == *number))
            {
                f.mark_obsolete();
            }
        }
        // A dropped family's files go once no reader holds them.
        for id in &edit.dropped_families {
            if let Some(f) = self.families.get(id) {
                f.current.files().for_each(|(_, m)| m.mark_obsolete());
            }
        }
        if let Some(n) = edit.next_family {
            self.next_family = self.next_family.max(n);
        }
        if let Some(n) = edit.log_number {
            self.log_number = n;
        }
        if let Some(s) = edit.last_sequence {
            self.last_sequence = s;
        }
        self.families = families;
        self.set_compact_pointers(&edit);
    }

    /// The whole current state as one edit: what a new MANIFEST starts with.
    pub(crate) fn snapshot_edit(&self) -> VersionEdit {
        let mut snapshot = VersionEdit {
            log_number: Some(self.log_number),
            next_file_number: Some(self.next_file),
            last_sequence: Some(self.last_sequence),
            next_family: (self.next_family > 1).then_some(self.next_family),
            comparator: self.store.order.name_to_record(),
            ..Default::default()
        };
        // The default family's compact pointers; the other families' start over, as hints.
        for (level, key) in self.compact_pointers(0).iter().enumerate() {
            if !key.is_empty() {
                snapshot.compact_pointers.push((Level(level), key.clone()));
            }
        }
        for (id, f) in self.families.iter().filter(|(id, _)| **id != 0) {
            snapshot.added_families.push((*id, f.name.clone()));
        }
        for (family, level, f) in self.files() {
            snapshot.added.push(super::edit::NewFile {
                level,
                number: f.number,
                size: f.size,
                smallest: f.smallest.clone(),
                largest: f.largest.clone(),
                entries: f.entries,
                deletions: f.deletions,
                range_deletions: f.range_deletions,
                filter_millibits: f.filter_millibits,
                family,
            });
        }
        snapshot
    }

    /// Starts a new MANIFEST holding the whole current state, and points CURRENT at it.
    pub(crate) fn write_new_manifest(&mut self) -> Result<()> {
        let number = self.new_file_number();
        let fs = &self.store.fs;
        let dir = &self.store.dir;
        let writer = write_manifest(fs.as_ref(), dir, number, &self.snapshot_edit())?;
        let old = self.manifest_number;
        self.manifest = Some(writer);
        self.manifest_number = number;
        if old.0 != 0 {
            // The old MANIFEST is unreachable now; a failure leaves garbage for the next open.
            let _ = fs.remove(&dir.join(manifest_file_name(old)));
        }
        Ok(())
    }
}

/// Writes MANIFEST `number` into `dir`, holding `snapshot`, syncs it and points CURRENT at
/// it; returns the writer, for the edits that follow.
pub(crate) fn write_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    number: FileNumber,
    snapshot: &VersionEdit,
) -> Result<LogWriter> {
    let path = dir.join(manifest_file_name(number));
    let file = fs.create(&path).map_err(io_err("create", &path))?;
    let mut writer = LogWriter::new(file, path.clone());
    writer.add_record(&header_record(LogKind::Manifest))?;
    writer.add_record(&snapshot.encode())?;
    writer.sync()?;
    set_current(fs, dir, number)?;
    Ok(writer)
}

/// Points CURRENT at MANIFEST `number`, atomically and durably.
pub(crate) fn set_current(fs: &dyn FileSystem, dir: &Path, number: FileNumber) -> Result<()> {
    // The new MANIFEST's directory entry must be durable before CURRENT can name it.
    fs.sync_dir(dir).map_err(io_err("fsync", dir))?;
    let tmp = dir.join(format!("{:06}.dbtmp", number.0));
    let mut f = fs.create(&tmp).map_err(io_err("create", &tmp))?;
    f.append(format!("{}\n", manifest_file_name(number)).as_bytes())
        .and_then(|()| f.sync())
        .map_err(io_err("write", &tmp))?;
    drop(f);
    let current = dir.join("CURRENT");
    fs.rename(&tmp, &current).map_err(io_err("rename", &tmp))?;
    fs.sync_dir(dir).map_err(io_err("fsync", dir))?;
    Ok(())
}

#[cfg(all(test, feature = "test-util"))]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cache::BlockCache;
    use crate::fs::FaultFs;
    use crate::fs::{FileSystem, MemFs};
    use crate::sstable::mapped::MappedPages;
    use crate::sstable::pinned::PinBudget;

    /// Regression (found by short writes in the fault sweep): after a failed MANIFEST append,
    /// the next edit went after the partial record, so recovery met damage mid-file. A later
    /// edit must start a new MANIFEST, and the database must recover to the edits logged.
    #[test]
    fn an_edit_after_a_failed_manifest_append_starts_a_new_manifest() {
        let mem = MemFs::new();
        let fault = FaultFs::new(Arc::new(mem.clone()));
        let dir = Path::new("/db");
        fault.create_dir_all(dir).unwrap();
        let store = |fs: Arc<dyn FileSystem>| {
            Arc::new(TableStore::new(
                fs,
                dir.to_path_buf(),
                Arc::new(BlockCache::new(1 << 20)),
                Arc::new(MappedPages::new(0)),
                Arc::new(PinBudget::new(1 << 20)),
                crate::comparator::KeyOrder::Bytewise,
            ))
        };
        let mut versions = VersionSet::empty(store(Arc::new(fault.clone())));
        let edit = |seq: u64| VersionEdit {
            last_sequence: Some(SeqNo(seq)),
            ..VersionEdit::default()
        };
        versions.log_and_apply(edit(1)).unwrap();
        fault.short_write_nth(1, 50);
        assert!(versions.log_and_apply(edit(2)).is_err());
        versions.log_and_apply(edit(3)).unwrap();
        // What the files hold now, read by a new process.
        let recovered = VersionSet::recover(store(Arc::new(mem.process_crash_copy()))).unwrap();
        assert_eq!(recovered.last_sequence, SeqNo(3));
    }
}

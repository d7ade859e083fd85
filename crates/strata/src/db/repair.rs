//! Repair: a database rebuilt from whatever of it can still be read, when its MANIFEST or
//! CURRENT is damaged or gone, or some of its tables or WAL records are damaged (LevelDB's
//! `RepairDB`).
//!
//! Every table is read through; one that fails a check is set aside in `lost/`. The WAL
//! records newer than every kept table are replayed, stepping over damaged bytes to the next
//! intact record. The kept tables and the replayed records of each column family are then
//! merged, as a compaction merges, into new tables in the deepest level, and a new MANIFEST
//! names them. The next [`Db::open`](crate::Db::open) deletes the old tables and MANIFESTs
//! as it deletes any obsolete file.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::background::build_table_from_memtable;
use super::state::parse_file_name;
use crate::batch::decode_record;
use crate::compaction::{self, Compaction, JobContext};
use crate::comparator::KeyOrder;
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{FileNumber, Level, NUM_LEVELS, SeqNo};
use crate::log::{LogKind, header_record, read_log_stepping_over_damage};
use crate::memtable::MemTable;
use crate::options::Options;
use crate::sstable::TableOptions;
use crate::version::edit::{NewFile, VersionEdit};
use crate::version::set::{VersionSet, write_manifest};
use crate::version::{FileMeta, TableStore, Version, io_err, wal_file_name};
use crate::wal::create_wal;

/// What [`repair`] kept, set aside and wrote.
#[derive(Debug, Clone, Default)]
pub struct RepairReport {
    /// The old MANIFEST could be read: its column families were kept, and the WALs older
    /// than the oldest it names were not replayed.
    pub manifest_read: bool,
    /// The column families of the repaired database, the default one first.
    pub families: Vec<String>,
    /// Tables read through and kept.
    pub tables_kept: usize,
    /// The entries the kept tables held.
    pub table_entries: u64,
    /// Files moved into `lost/`, each with the reason.
    pub set_aside: Vec<(String, String)>,
    /// WAL records replayed.
    pub wal_records: u64,
    /// The entries the replayed records held.
    pub wal_entries: u64,
    /// WAL records left out because a kept table already holds them.
    pub wal_records_in_tables: u64,
    /// Bytes of WAL files stepped over as damage (no intact record in them).
    pub wal_bytes_lost: u64,
    /// Entries of WAL records that name a column family the repair does not know (the old
    /// MANIFEST, which names them, could not be read): put in the default family, as the
    /// tables of every family are then.
    pub wal_entries_of_unknown_families: u64,
    /// Tables the repaired database holds.
    pub tables_written: usize,
    /// The sequence number of the newest write kept.
    pub last_sequence: u64,
}

impl std::fmt::Display for RepairReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let manifest = if self.manifest_read {
            "read"
        } else {
            "unreadable or missing"
        };
        writeln!(f, "old MANIFEST: {manifest}")?;
        writeln!(f, "column families: {}", self.families.join(", "))?;
        writeln!(
            f,
            "tables kept: {} ({} entries)",
            self.tables_kept, self.table_entries
        )?;
        writeln!(
            f,
            "WAL records replayed: {} ({} entries); already in tables: {}",
            self.wal_records, self.wal_entries, self.wal_records_in_tables
        )?;
        writeln!(f, "WAL bytes lost to damage: {}", self.wal_bytes_lost)?;
        if self.wal_entries_of_unknown_families > 0 {
            writeln!(
                f,
                "WAL entries of unknown column families put in the default one: {}",
                self.wal_entries_of_unknown_families
            )?;
        }
        for (name, why) in &self.set_aside {
            writeln!(f, "set aside in lost/: {name}: {why}")?;
        }
        write!(
            f,
            "tables written: {}; last sequence number: {}",
            self.tables_written, self.last_sequence
        )
    }
}

/// What the old MANIFEST tells, when it can be read.
struct OldManifest {
    families: Vec<(u32, String)>,
    family_of: HashMap<FileNumber, u32>,
    log_number: FileNumber,
    last_sequence: SeqNo,
}

/// Rebuilds the database in `path` from the tables and WAL records that can be read, setting
/// damaged files aside in `path/lost/`, and reports what it kept and what it lost. The
/// database must be closed (repair takes its lock). `options` gives the file system and the
/// table format of the tables written.
pub fn repair(path: impl AsRef<Path>, options: Options) -> Result<RepairReport> {
    let dir = path.as_ref().to_path_buf();
    let fs = options.fs.clone();
    if !fs.exists(&dir) {
        return Err(Error::InvalidArgument(format!(
            "{} does not exist",
            dir.display()
        )));
    }
    refuse_other_directories(fs.as_ref(), &dir)?;
    let lock_path = dir.join("LOCK");
    let _lock = fs.lock(&lock_path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Locked(dir.clone()),
        _ => Error::io("lock", &lock_path, e),
    })?;
    let store = super::recovery::table_store(&dir, &options);
    let mut names = fs.list(&dir).map_err(io_err("list", &dir))?;
    names.sort();
    let mut report = RepairReport::default();
    let old = read_old_manifest(&store, &dir, &names)?;
    report.manifest_read = old.is_some();
    let families = match &old {
        Some(o) => o.families.clone(),
        None => vec![(0, "default".to_string())],
    };
    report.families = families.iter().map(|(_, n)| n.clone()).collect();
    let used = names
        .iter()
        .filter_map(|n| parse_file_name(n).map(|(n, _)| n.0))
        .chain(
            names
                .iter()
                .filter_map(|n| n.strip_prefix("MANIFEST-")?.parse().ok()),
        )
        .max()
        .unwrap_or(0);
    let next = Cell::new(used + 1);
    let new_number = || {
        let n = next.get();
        next.set(n + 1);
        FileNumber(n)
    };

    let mut tables = keep_tables(&store, &names, old.as_ref(), &mut report)?;
    let flushed = tables.iter().map(|t| t.2).max().unwrap_or(SeqNo(0));
    let mut last = old
        .as_ref()
        .map_or(SeqNo(0), |o| o.last_sequence)
        .max(flushed);
    let first_wal = old.as_ref().map_or(FileNumber(0), |o| o.log_number);
    let (mems, damaged) = replay_wals(&store, &names, first_wal, flushed, &families, &mut report)?;
    for (family, mem) in &mems {
        last = last.max(mem.largest_seq);
        if mem.mem.is_empty() {
            continue;
        }
        let number = new_number();
        let opts = table_options(&options);
        let mut f = build_table_from_memtable(&store, &opts, number, &mem.mem, None)?;
        f.family = *family;
        tables.push((
            *family,
            Arc::new(FileMeta::new(store.clone(), &f)),
            SeqNo(0),
        ));
    }

    let mut added = Vec::new();
    for (id, _) in &families {
        let inputs: Vec<Arc<FileMeta>> = tables
            .iter()
            .filter(|t| t.0 == *id)
            .map(|t| t.1.clone())
            .collect();
        added.extend(merge_family(
            &store,
            &options,
            *id,
            inputs,
            last,
            &new_number,
        )?);
    }
    report.tables_written = added.len();
    report.last_sequence = last.0;

    // The new MANIFEST names an empty WAL, as every MANIFEST does.
    let wal = new_number();
    drop(create_wal(&store, wal)?);
    let manifest = new_number();
    let edit = VersionEdit {
        log_number: Some(wal),
        next_file_number: Some(next.get()),
        last_sequence: Some(last),
        added_families: families.iter().filter(|f| f.0 != 0).cloned().collect(),
        next_family: families.iter().map(|f| f.0 + 1).max().filter(|n| *n > 1),
        added,
        comparator: store.order.name_to_record(),
        ..VersionEdit::default()
    };
    fs.sync_dir(&dir).map_err(io_err("fsync", &dir))?;
    drop(write_manifest(fs.as_ref(), &dir, manifest, &edit)?);
    clear_old_logs(&store, &names, &damaged, &mut report)?;
    Ok(report)
}

/// Once the new MANIFEST is in place: the tables noted as set aside go to `lost/`; the WALs
/// replayed are in tables, and the old MANIFESTs name tables merged away. Those that read
/// whole go; the others (`damaged` WALs, a MANIFEST that could not be read) are set aside.
/// Until then a repair cut short changes nothing another repair needs.
fn clear_old_logs(
    store: &TableStore,
    names: &[String],
    damaged: &[String],
    report: &mut RepairReport,
) -> Result<()> {
    for (name, _) in &report.set_aside {
        move_to_lost(store, name)?;
    }
    for name in names {
        let wal = parse_file_name(name).is_some_and(|(_, ext)| ext == "wal");
        if !wal && !name.starts_with("MANIFEST-") {
            continue;
        }
        let why = if damaged.iter().any(|d| d == name) {
            "damaged WAL: its intact records were replayed"
        } else if wal || report.manifest_read {
            let _ = store.fs.remove(&store.dir.join(name));
            continue;
        } else {
            "the MANIFEST could not be read"
        };
        move_to_lost(store, name)?;
        report.set_aside.push((name.clone(), why.to_string()));
    }
    Ok(())
}

/// Refuses a directory that holds none of a database's files: repair would make it one.
fn refuse_other_directories(fs: &dyn crate::fs::FileSystem, dir: &Path) -> Result<()> {
    let database_file = |n: &String| {
        n == "CURRENT"
            || n.starts_with("MANIFEST-")
            || parse_file_name(n).is_some_and(|(_, ext)| ext == "sst" || ext == "wal")
    };
    if fs
        .list(dir)
        .map_err(io_err("list", dir))?
        .iter()
        .any(database_file)
    {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{} holds no database files (no CURRENT, MANIFEST, table or WAL)",
        dir.display()
    )))
}

/// What the old MANIFEST tells; `None` when it is missing or damaged, or when it reads but
/// names a missing table or WAL (it lost edits at its end, and would set aside the newest
/// tables as strangers). Any other error (a read that fails) ends the repair.
fn read_old_manifest(
    store: &Arc<TableStore>,
    dir: &Path,
    names: &[String],
) -> Result<Option<OldManifest>> {
    let recovered = match VersionSet::recover(store.clone()) {
        Ok(v) => Some(v),
        Err(Error::Corruption { .. } | Error::UnsupportedFormat { .. }) => None,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let recovered = recovered
        .filter(|v| super::recovery::check_manifest_against_directory(v, dir, names).is_ok());
    Ok(recovered.map(|v| OldManifest {
        families: v
            .families()
            .iter()
            .map(|(id, f)| (*id, f.name.clone()))
            .collect(),
        family_of: v.files().map(|(family, _, f)| (f.number, family)).collect(),
        log_number: v.log_number,
        last_sequence: v.last_sequence,
    }))
}

/// The table options of the tables repair writes: the database's, with Bloom filters at the
/// bits per key its policy gives a tree of one level.
fn table_options(options: &Options) -> TableOptions {
    let family = super::family::Family::new(0, "default", options.clone(), placeholder());
    compaction::flush_options(
        options.filter_policy,
        &family.table_options,
        &Version::default(),
        &family.tree_model(),
    )
}

fn placeholder() -> super::family::SuperVersion {
    super::family::SuperVersion {
        mem: Arc::new(MemTable::new(FileNumber(0), 1024, KeyOrder::Bytewise, None)),
        imm: Vec::new(),
        version: Arc::new(Version::default()),
        horizon: SeqNo(0),
    }
}

/// Reads every table through; returns those that read whole, each with its column family
/// and the newest sequence number it holds. The damaged ones, and tables a readable MANIFEST
/// does not name (left behind by a compaction cut short), are noted in `report.set_aside`,
/// to be moved to `lost/` once the new MANIFEST is in place. An error that is not damage (a
/// table that cannot be opened for want of descriptors, say) ends the repair, changing
/// nothing.
fn keep_tables(
    store: &Arc<TableStore>,
    names: &[String],
    old: Option<&OldManifest>,
    report: &mut RepairReport,
) -> Result<Vec<(u32, Arc<FileMeta>, SeqNo)>> {
    let mut kept = Vec::new();
    for name in names {
        let Some((number, "sst")) = parse_file_name(name) else {
            continue;
        };
        let family = match old {
            Some(o) => match o.family_of.get(&number) {
                Some(f) => *f,
                None => {
                    let why = "not named by the MANIFEST".to_string();
                    report.set_aside.push((name.clone(), why));
                    continue;
                }
            },
            None => 0,
        };
        match read_table(store, number) {
            Ok((meta, entries, newest)) => {
                report.tables_kept += 1;
                report.table_entries += entries;
                kept.push((family, meta, newest));
            }
            Err(e @ (Error::Corruption { .. } | Error::UnsupportedFormat { .. })) => {
                report.set_aside.push((name.clone(), e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(kept)
}

/// Opens table `number` and checks every block of it; its description for a merge, its
/// entries and the newest sequence number it holds.
fn read_table(store: &Arc<TableStore>, number: FileNumber) -> Result<(Arc<FileMeta>, u64, SeqNo)> {
    let path = store.table_path(number);
    let size = store.fs.file_size(&path).map_err(io_err("size", &path))?;
    let mut f = NewFile {
        size,
        ..NewFile::blank(Level(0), number)
    };
    let probe = FileMeta::new(store.clone(), &f);
    let table = probe.table()?.clone();
    f.entries = table.verify()?;
    f.range_deletions = table.range_tombstones()?.map_or(0, |t| t.list.len() as u64);
    let mut it = table.iter(false);
    it.seek_to_first()?;
    if it.valid() {
        f.smallest = it.key().to_vec();
    }
    it.seek_to_last()?;
    if it.valid() {
        f.largest = it.key().to_vec();
    }
    let newest = table.largest_seq()?.unwrap_or(SeqNo(0));
    Ok((
        Arc::new(FileMeta::new(store.clone(), &f)),
        f.entries,
        newest,
    ))
}

/// Moves `name` into `lost/`.
fn move_to_lost(store: &TableStore, name: &str) -> Result<()> {
    let lost = store.dir.join("lost");
    store
        .fs
        .create_dir_all(&lost)
        .map_err(io_err("create directory", &lost))?;
    let from = store.dir.join(name);
    store
        .fs
        .rename(&from, &lost.join(name))
        .map_err(io_err("move", &from))
}

/// A column family's replayed writes.
struct Replayed {
    mem: Arc<MemTable>,
    largest_seq: SeqNo,
}

/// Replays the records of the WALs numbered from `first` on whose writes are newer than
/// `flushed` (the newest a kept table holds), into a memtable per known column family; the
/// memtables, and the names of the WALs with damage in them.
fn replay_wals(
    store: &TableStore,
    names: &[String],
    first: FileNumber,
    flushed: SeqNo,
    families: &[(u32, String)],
    report: &mut RepairReport,
) -> Result<(BTreeMap<u32, Replayed>, Vec<String>)> {
    let mut mems: BTreeMap<u32, Replayed> = families
        .iter()
        .map(|(id, _)| {
            let mem = Arc::new(MemTable::new(
                FileNumber(0),
                1 << 20,
                store.order.clone(),
                None,
            ));
            (
                *id,
                Replayed {
                    mem,
                    largest_seq: SeqNo(0),
                },
            )
        })
        .collect();
    let mut wals: Vec<FileNumber> = names
        .iter()
        .filter_map(|n| parse_file_name(n).filter(|(_, ext)| *ext == "wal"))
        .map(|(n, _)| n)
        .filter(|n| *n >= first)
        .collect();
    wals.sort();
    let header = header_record(LogKind::Wal);
    let mut damaged = Vec::new();
    for number in wals {
        let path = store.dir.join(wal_file_name(number));
        let data = store.fs.read_all(&path).map_err(io_err("read", &path))?;
        let contents = read_log_stepping_over_damage(&data);
        report.wal_bytes_lost += contents.salvaged_bytes;
        let mut lost = contents.salvaged_bytes;
        for (_, record) in contents.records {
            if record.starts_with(&header[..8]) {
                continue;
            }
            let Ok((seq, batch)) = decode_record(&record) else {
                report.wal_bytes_lost += record.len() as u64;
                lost += record.len() as u64;
                continue;
            };
            if seq.0 + u64::from(batch.count()) <= flushed.0 + 1 {
                report.wal_records_in_tables += 1;
                continue;
            }
            // A record whose operations do not all decode is lost whole: a batch is atomic.
            let Ok(ops) = batch.iter().collect::<std::result::Result<Vec<_>, _>>() else {
                report.wal_bytes_lost += record.len() as u64;
                lost += record.len() as u64;
                continue;
            };
            report.wal_records += 1;
            for (s, op) in (seq.0..).zip(ops) {
                // Without the MANIFEST the families are unknown: their writes join the
                // default family, as their tables do.
                let family = if mems.contains_key(&op.family) {
                    op.family
                } else {
                    0
                };
                if family != op.family {
                    report.wal_entries_of_unknown_families += 1;
                }
                if let Some(r) = mems.get_mut(&family) {
                    r.mem.add(SeqNo(s), op.kind, op.key, op.value);
                    r.largest_seq = r.largest_seq.max(SeqNo(s));
                    report.wal_entries += 1;
                }
            }
        }
        if lost > 0 {
            damaged.push(wal_file_name(number));
        }
    }
    Ok((mems, damaged))
}

/// Merges a column family's tables into new tables of the deepest level, as a full
/// compaction does with no snapshot alive (`last` is the newest write kept: the newest
/// version of each key is kept); their descriptions.
fn merge_family(
    store: &Arc<TableStore>,
    options: &Options,
    family: u32,
    inputs: Vec<Arc<FileMeta>>,
    last: SeqNo,
    new_number: &dyn Fn() -> FileNumber,
) -> Result<Vec<NewFile>> {
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    let c = Compaction {
        level: 0,
        output_level: NUM_LEVELS - 1,
        inputs,
        between: Vec::new(),
        next_inputs: Vec::new(),
        version: Arc::new(Version::default()),
        for_reads: false,
        idle_merge: false,
    };
    let opts = table_options(options);
    let never = AtomicBool::new(false);
    let ctx = JobContext {
        store,
        table_options: &opts,
        target_file_bytes: options.target_file_size,
        smallest_snapshot: last,
        zero_floor: last,
        newest_snapshot: None,
        new_file_number: new_number,
        shutting_down: &never,
        cancel: &|| false,
        filter: None,
        merge: None,
    };
    let done = compaction::run(&c, &ctx)?
        .ok_or_else(|| Error::InvalidArgument("repair's merge was cancelled".into()))?;
    let mut added = done.edit.added;
    for f in &mut added {
        f.family = family;
    }
    Ok(added)
}

/// Deletes the database in `path` (LevelDB's `DestroyDB`): its tables, WALs, MANIFESTs,
/// CURRENT and lock, then the directory itself when nothing else is left in it (a `lost/`
/// folder of a repair, or files that are not the database's, keep it). A missing directory
/// is no error; an open database is (`Error::Locked`).
pub fn destroy(path: impl AsRef<Path>, options: &Options) -> Result<()> {
    let dir = path.as_ref();
    let fs = &options.fs;
    if !fs.exists(dir) {
        return Ok(());
    }
    let lock_path = dir.join("LOCK");
    let lock = fs.lock(&lock_path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Locked(dir.to_path_buf()),
        _ => Error::io("lock", &lock_path, e),
    })?;
    let names = fs.list(dir).map_err(io_err("list", dir))?;
    for name in &names {
        let ours = parse_file_name(name)
            .is_some_and(|(_, ext)| matches!(ext, "sst" | "wal" | "dbtmp"))
            || name.starts_with("MANIFEST-")
            || name == "CURRENT";
        if ours {
            let path = dir.join(name);
            fs.remove(&path).map_err(io_err("remove", &path))?;
        }
    }
    drop(lock);
    let _ = fs.remove(&lock_path);
    if fs.list(dir).map_err(io_err("list", dir))?.is_empty() {
        fs.remove_dir(dir).map_err(io_err("remove", dir))?;
    }
    Ok(())
}

//! Looking inside a database without opening it: verifying every checksum of every file
//! ([`check`]) and decoding a single WAL, SST or MANIFEST file ([`dump_file`]), in the manner
//! of LevelDB's `dumpfile` and RocksDB's `sst_dump`.
//!
//! These read files as they are on disk and take no lock; run them on a closed database, or
//! expect files being written at that moment to look torn.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::decode_record;
use crate::cache::BlockCache;
use crate::comparator::{BytewiseComparator, KeyOrder, ReverseBytewiseComparator};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, StdFs};
use crate::iter::InternalIterator;
use crate::key::{FileNumber, ValueKind, parse_internal_key};
use crate::log::{LogKind, RecoveryMode, read_log, strip_header};
use crate::sstable::reader::Table;
use crate::version::edit::VersionEdit;

/// The kinds of files in a database directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileKind {
    /// A write-ahead log (`NNNNNN.wal`).
    Wal,
    /// A sorted string table (`NNNNNN.sst`).
    Sst,
    /// The log of level-structure edits (`MANIFEST-NNNNNN`).
    Manifest,
    /// The pointer to the live MANIFEST.
    Current,
}

impl FileKind {
    /// The kind a file name says, if it is one of Strata's.
    pub fn from_name(name: &str) -> Option<FileKind> {
        if name == "CURRENT" {
            Some(FileKind::Current)
        } else if name.starts_with("MANIFEST-") {
            Some(FileKind::Manifest)
        } else if name.ends_with(".sst") {
            Some(FileKind::Sst)
        } else if name.ends_with(".wal") {
            Some(FileKind::Wal)
        } else {
            None
        }
    }
}

/// The verdict on one file.
#[derive(Debug)]
pub struct FileCheck {
    /// The file.
    pub path: PathBuf,
    /// What it is.
    pub kind: FileKind,
    /// Entries (SST) or records (WAL, MANIFEST) verified.
    pub items: u64,
    /// The damage found, if any: a [`Error::Corruption`] names the file and offset.
    pub error: Option<Error>,
}

/// Verifies the checksum of every block of every SST and every record of every WAL and
/// MANIFEST in `dir`, and that CURRENT names a MANIFEST. A torn WAL tail is reported as
/// such only in `items`; it is not damage.
pub fn check(dir: &Path) -> Result<Vec<FileCheck>> {
    check_fs(&StdFs, dir)
}

/// [`check`] on any file system (an in-memory one in tests, for example).
pub fn check_fs(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<FileCheck>> {
    let order = recorded_order(fs, dir)?;
    let mut names = fs.list(dir).map_err(|e| Error::io("list", dir, e))?;
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let Some(kind) = FileKind::from_name(&name) else {
            continue;
        };
        let path = dir.join(&name);
        let (items, error) = match verify_file(fs, &path, kind, &order) {
            Ok(n) => (n, None),
            Err(e) => (0, Some(e)),
        };
        out.push(FileCheck {
            path,
            kind,
            items,
            error,
        });
    }
    Ok(out)
}

fn file_number(path: &Path) -> FileNumber {
    let n = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    FileNumber(n)
}

/// The order of the keys of the database in `dir`, as the first edit of its MANIFEST names
/// it: byte order when it names none, or when there is no MANIFEST to read (whose damage
/// [`check`] reports for itself). A comparator other than the built-in ones is refused: these
/// tools cannot order its keys.
fn recorded_order(fs: &dyn FileSystem, dir: &Path) -> Result<KeyOrder> {
    let first_edit = || -> Option<VersionEdit> {
        let current = fs.read_all(&dir.join("CURRENT")).ok()?;
        let name = std::str::from_utf8(current.strip_suffix(b"\n")?).ok()?;
        if !name.starts_with("MANIFEST-") || name.contains('/') {
            return None;
        }
        let path = dir.join(name);
        let data = fs.read_all(&path).ok()?;
        let records = read_log(&path, &data, RecoveryMode::Strict).ok()?;
        let records = strip_header(&path, records, LogKind::Manifest).ok()?;
        VersionEdit::decode(&records.first()?.1).ok()
    };
    match first_edit().and_then(|e| e.comparator).as_deref() {
        None | Some(BytewiseComparator::NAME) => Ok(KeyOrder::Bytewise),
        Some(ReverseBytewiseComparator::NAME) => Ok(KeyOrder::Reverse),
        Some(other) => Err(Error::InvalidArgument(format!(
            "the database in {} orders its keys by comparator {other}, which only the \
             program that defines it can read",
            dir.display()
        ))),
    }
}

fn open_table(fs: &dyn FileSystem, path: &Path, order: &KeyOrder) -> Result<Arc<Table>> {
    let file = fs.open(path).map_err(|e| Error::io("open", path, e))?;
    Ok(Arc::new(Table::open(
        file,
        path,
        file_number(path),
        Arc::new(BlockCache::new(0)),
        order.clone(),
    )?))
}

/// [`open_table`] in the order the MANIFEST of the table's directory records.
fn open_table_of_dir(fs: &dyn FileSystem, path: &Path) -> Result<Arc<Table>> {
    let dir = path.parent().unwrap_or(Path::new("."));
    open_table(fs, path, &recorded_order(fs, dir)?)
}

fn verify_file(fs: &dyn FileSystem, path: &Path, kind: FileKind, order: &KeyOrder) -> Result<u64> {
    match kind {
        FileKind::Sst => open_table(fs, path, order)?.verify(),
        FileKind::Wal | FileKind::Manifest => {
            let data = fs.read_all(path).map_err(|e| Error::io("read", path, e))?;
            let log_kind = if kind == FileKind::Wal {
                LogKind::Wal
            } else {
                LogKind::Manifest
            };
            let records =
                strip_header(path, read_log(path, &data, RecoveryMode::Strict)?, log_kind)?;
            for (offset, record) in &records {
                if kind == FileKind::Wal {
                    decode_record(record).map_err(|e| e.at(path, *offset))?;
                } else {
                    VersionEdit::decode(record).map_err(|e| e.at(path, *offset))?;
                }
            }
            Ok(records.len() as u64)
        }
        FileKind::Current => {
            let data = fs.read_all(path).map_err(|e| Error::io("read", path, e))?;
            let ok = data.starts_with(b"MANIFEST-") && data.ends_with(b"\n");
            if !ok {
                return Err(Error::corruption(
                    path,
                    0,
                    "CURRENT does not name a MANIFEST",
                ));
            }
            Ok(1)
        }
    }
}

/// One decoded entry of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpEntry {
    /// The user key.
    pub key: Vec<u8>,
    /// Its sequence number.
    pub sequence: u64,
    /// `true` for a tombstone.
    pub deletion: bool,
    /// `true` for a merge operand (the value is the operand).
    pub merge: bool,
    /// `true` for a range tombstone: `key` is the range's begin, `value` its end.
    pub range_deletion: bool,
    /// The value (empty for a tombstone).
    pub value: Vec<u8>,
    /// The column family of a WAL entry (0: the default one; SST entries say 0, a table
    /// holding one family's keys).
    pub family: u32,
}

/// A decoded file.
#[derive(Debug, Clone)]
pub struct FileDump {
    /// What the file is.
    pub kind: FileKind,
    /// Named facts: properties of an SST, record counts of a log, edits of a MANIFEST.
    pub summary: Vec<(String, String)>,
    /// Blocks of an SST as (offset, size), or records of a log as (offset, length).
    pub blocks: Vec<(u64, u64)>,
    /// Entries, when asked for: SST entries and WAL writes.
    pub entries: Vec<DumpEntry>,
}

/// Decodes the file at `path`; with `with_entries` also lists its entries.
pub fn dump_file(path: &Path, with_entries: bool) -> Result<FileDump> {
    let fs = StdFs;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let kind = FileKind::from_name(name).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{} is not a Strata file (expected NNNNNN.sst, NNNNNN.wal, MANIFEST-NNNNNN or CURRENT)",
            path.display()
        ))
    })?;
    let mut dump = FileDump {
        kind,
        summary: Vec::new(),
        blocks: Vec::new(),
        entries: Vec::new(),
    };
    match kind {
        FileKind::Sst => {
            let table = open_table_of_dir(&fs, path)?;
            let footer = table.footer();
            dump.summary
                .push(("format".into(), format!("SST v{}", footer.version())));
            dump.summary.push((
                "index".into(),
                format!("{:?}, depth {}", footer.index_kind, footer.index_depth),
            ));
            let filter = match table.whole_filter_layout()? {
                Some(layout) => format!("{:?}, {layout}", footer.filter_kind),
                None => format!("{:?}", footer.filter_kind),
            };
            dump.summary.push(("filter".into(), filter));
            for (name, value) in table.properties()? {
                dump.summary.push((name, value.to_string()));
            }
            dump.blocks = table
                .data_block_handles()?
                .into_iter()
                .map(|h| (h.offset, h.size))
                .collect();
            if with_entries {
                let mut it = table.iter(false);
                it.seek_to_first()?;
                while it.valid() {
                    let p = parse_internal_key(it.key())
                        .ok_or_else(|| Error::corruption(path, 0, "malformed internal key"))?;
                    dump.entries.push(DumpEntry {
                        key: p.user_key.to_vec(),
                        sequence: p.seq.0,
                        deletion: p.kind == ValueKind::Delete,
                        merge: p.kind == ValueKind::Merge,
                        range_deletion: false,
                        value: it.value().to_vec(),
                        family: 0,
                    });
                    it.next()?;
                }
                for t in table.range_tombstones()?.iter().flat_map(|r| r.list.iter()) {
                    dump.entries.push(DumpEntry {
                        key: t.begin.clone(),
                        sequence: t.seq.0,
                        deletion: false,
                        merge: false,
                        range_deletion: true,
                        value: t.end.clone(),
                        family: 0,
                    });
                }
            }
        }
        FileKind::Wal | FileKind::Manifest => {
            let data = fs.read_all(path).map_err(|e| Error::io("read", path, e))?;
            let contents = read_log(path, &data, RecoveryMode::Strict)?;
            let torn = contents.torn_tail_bytes;
            let log_kind = if kind == FileKind::Wal {
                LogKind::Wal
            } else {
                LogKind::Manifest
            };
            let records = strip_header(path, contents, log_kind)?;
            dump.summary
                .push(("records".into(), records.len().to_string()));
            dump.summary
                .push(("torn tail bytes".into(), torn.to_string()));
            for (offset, record) in &records {
                dump.blocks.push((*offset, record.len() as u64));
                if kind == FileKind::Wal {
                    let (seq, batch) = decode_record(record).map_err(|e| e.at(path, *offset))?;
                    if with_entries {
                        for (i, op) in batch.iter().enumerate() {
                            let op = op.map_err(|e| e.at(path, *offset))?;
                            dump.entries.push(DumpEntry {
                                key: op.key.to_vec(),
                                sequence: seq.0 + i as u64,
                                deletion: op.kind == ValueKind::Delete,
                                merge: op.kind == ValueKind::Merge,
                                range_deletion: op.kind == ValueKind::RangeDelete,
                                value: op.value.to_vec(),
                                family: op.family,
                            });
                        }
                    }
                } else {
                    let edit = VersionEdit::decode(record).map_err(|e| e.at(path, *offset))?;
                    dump.summary
                        .push((format!("edit @{offset}"), describe_edit(&edit)));
                }
            }
        }
        FileKind::Current => {
            let data = fs.read_all(path).map_err(|e| Error::io("read", path, e))?;
            dump.summary.push((
                "manifest".into(),
                String::from_utf8_lossy(&data).trim_end().to_string(),
            ));
        }
    }
    Ok(dump)
}

fn describe_edit(e: &VersionEdit) -> String {
    let mut parts = Vec::new();
    if let Some(name) = &e.comparator {
        parts.push(format!("comparator {name}"));
    }
    if let Some(n) = e.log_number {
        parts.push(format!("log {}", n.0));
    }
    if let Some(n) = e.next_file_number {
        parts.push(format!("next file {n}"));
    }
    if let Some(s) = e.last_sequence {
        parts.push(format!("last seq {}", s.0));
    }
    if let Some(n) = e.next_family {
        parts.push(format!("next family {n}"));
    }
    for (id, name) in &e.added_families {
        parts.push(format!("+family {id} {name:?}"));
    }
    // Files of the default family (0) name none.
    let family = |id: u32| match id {
        0 => String::new(),
        id => format!(" family {id}"),
    };
    for (l, n) in &e.deleted {
        parts.push(format!("-L{} #{}{}", l.0, n.0, family(e.family)));
    }
    for f in &e.added {
        parts.push(format!(
            "+L{} #{} ({} bytes, {} entries){}",
            f.level.0,
            f.number.0,
            f.size,
            f.entries,
            family(f.family)
        ));
    }
    for id in &e.dropped_families {
        parts.push(format!("-family {id}"));
    }
    parts.join(", ")
}

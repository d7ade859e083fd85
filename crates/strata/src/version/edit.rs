//! A version edit: one change of the level structure, a record of the MANIFEST.
//!
//! An edit is a sequence of tagged fields (`tag: varint` then the field). Tags are written to
//! disk: never renumber them; retired tags stay reserved.

#![deny(clippy::indexing_slicing)]

use crate::coding::{Reader, put_len_prefixed, put_varint};
use crate::error::DecodeError;
use crate::key::{FileNumber, Level, NUM_LEVELS, SeqNo};

mod tag {
    pub const LOG_NUMBER: u64 = 1;
    pub const NEXT_FILE_NUMBER: u64 = 2;
    pub const LAST_SEQUENCE: u64 = 3;
    pub const COMPACT_POINTER: u64 = 4;
    pub const DELETED_FILE: u64 = 5;
    pub const NEW_FILE: u64 = 6;
    /// A new file with range tombstones: `NEW_FILE`'s fields, then their count.
    pub const NEW_FILE_WITH_RANGE_DELETIONS: u64 = 7;
    pub const FILE_FILTER_BITS: u64 = 8;
    /// The column family of the edit's deleted files and compact pointers (absent: 0).
    pub const EDIT_FAMILY: u64 = 9;
    /// The column family of an added file: its number, then the family (absent: 0).
    pub const FILE_FAMILY: u64 = 10;
    /// A column family created: its id, then its name.
    pub const ADD_FAMILY: u64 = 11;
    /// A column family dropped: its id.
    pub const DROP_FAMILY: u64 = 12;
    /// The id the next column family created gets.
    pub const NEXT_FAMILY: u64 = 13;
    /// The name of the comparator that orders the keys (absent: bytewise).
    pub const COMPARATOR: u64 = 14;
}

/// A file added by an edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewFile {
    pub level: Level,
    pub number: FileNumber,
    pub size: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub entries: u64,
    pub deletions: u64,
    /// Range tombstones in the file (written under their own tag when there are any).
    pub range_deletions: u64,
    /// Bloom filter bits per key in thousandths; written as a tag of its own after the
    /// file's (see `docs/format.md`).
    pub filter_millibits: Option<u64>,
    /// The column family whose tree the file joins (0: the default one).
    pub family: u32,
}

impl NewFile {
    /// File `number` of `level` in the default family, its size, bounds and counts to be
    /// filled in.
    pub(crate) fn blank(level: Level, number: FileNumber) -> NewFile {
        NewFile {
            level,
            number,
            size: 0,
            smallest: Vec::new(),
            largest: Vec::new(),
            entries: 0,
            deletions: 0,
            range_deletions: 0,
            filter_millibits: None,
            family: 0,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VersionEdit {
    /// WAL files numbered below this are no longer needed.
    pub log_number: Option<FileNumber>,
    pub next_file_number: Option<u64>,
    pub last_sequence: Option<SeqNo>,
    pub compact_pointers: Vec<(Level, Vec<u8>)>,
    /// The column family of `deleted` and `compact_pointers`.
    pub family: u32,
    pub deleted: Vec<(Level, FileNumber)>,
    pub added: Vec<NewFile>,
    /// Column families created, with their names; applied before the files.
    pub added_families: Vec<(u32, String)>,
    /// Column families dropped, with every file they held; applied after the files.
    pub dropped_families: Vec<u32>,
    pub next_family: Option<u32>,
    /// The comparator's name: recorded by the first edit of each MANIFEST, for any order but
    /// bytewise (whose databases keep the format they had before comparators).
    pub comparator: Option<String>,
}

impl VersionEdit {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        if let Some(name) = &self.comparator {
            put_varint(&mut v, tag::COMPARATOR);
            put_len_prefixed(&mut v, name.as_bytes());
        }
        if let Some(n) = self.log_number {
            put_varint(&mut v, tag::LOG_NUMBER);
            put_varint(&mut v, n.0);
        }
        if let Some(n) = self.next_file_number {
            put_varint(&mut v, tag::NEXT_FILE_NUMBER);
            put_varint(&mut v, n);
        }
        if let Some(s) = self.last_sequence {
            put_varint(&mut v, tag::LAST_SEQUENCE);
            put_varint(&mut v, s.0);
        }
        if self.family != 0 {
            put_varint(&mut v, tag::EDIT_FAMILY);
            put_varint(&mut v, u64::from(self.family));
        }
        if let Some(n) = self.next_family {
            put_varint(&mut v, tag::NEXT_FAMILY);
            put_varint(&mut v, u64::from(n));
        }
        for (id, name) in &self.added_families {
            put_varint(&mut v, tag::ADD_FAMILY);
            put_varint(&mut v, u64::from(*id));
            put_len_prefixed(&mut v, name.as_bytes());
        }
        for (level, key) in &self.compact_pointers {
            put_varint(&mut v, tag::COMPACT_POINTER);
            put_varint(&mut v, level.0 as u64);
            put_len_prefixed(&mut v, key);
        }
        for (level, number) in &self.deleted {
            put_varint(&mut v, tag::DELETED_FILE);
            put_varint(&mut v, level.0 as u64);
            put_varint(&mut v, number.0);
        }
        for f in &self.added {
            // A file without range tombstones keeps the tag every release reads.
            put_varint(
                &mut v,
                if f.range_deletions > 0 {
                    tag::NEW_FILE_WITH_RANGE_DELETIONS
                } else {
                    tag::NEW_FILE
                },
            );
            put_varint(&mut v, f.level.0 as u64);
            put_varint(&mut v, f.number.0);
            put_varint(&mut v, f.size);
            put_len_prefixed(&mut v, &f.smallest);
            put_len_prefixed(&mut v, &f.largest);
            put_varint(&mut v, f.entries);
            put_varint(&mut v, f.deletions);
            if f.range_deletions > 0 {
                put_varint(&mut v, f.range_deletions);
            }
            if let Some(bits) = f.filter_millibits {
                put_varint(&mut v, tag::FILE_FILTER_BITS);
                put_varint(&mut v, f.number.0);
                put_varint(&mut v, bits);
            }
            if f.family != 0 {
                put_varint(&mut v, tag::FILE_FAMILY);
                put_varint(&mut v, f.number.0);
                put_varint(&mut v, u64::from(f.family));
            }
        }
        for id in &self.dropped_families {
            put_varint(&mut v, tag::DROP_FAMILY);
            put_varint(&mut v, u64::from(*id));
        }
        v
    }

    pub(crate) fn decode(src: &[u8]) -> Result<VersionEdit, DecodeError> {
        let mut r = Reader::new(src);
        let mut e = VersionEdit::default();
        let level = |r: &mut Reader<'_>| -> Result<Level, DecodeError> {
            let l = r.varint_usize()?;
            if l >= NUM_LEVELS {
                return Err(DecodeError("level out of range"));
            }
            Ok(Level(l))
        };
        let family = |r: &mut Reader<'_>| -> Result<u32, DecodeError> {
            u32::try_from(r.varint()?).map_err(|_| DecodeError("column family id out of range"))
        };
        while !r.is_empty() {
            match r.varint()? {
                tag::LOG_NUMBER => e.log_number = Some(FileNumber(r.varint()?)),
                tag::NEXT_FILE_NUMBER => e.next_file_number = Some(r.varint()?),
                tag::LAST_SEQUENCE => {
                    let s = r.varint()?;
                    if s > SeqNo::MAX.0 {
                        return Err(DecodeError("sequence number out of range"));
                    }
                    e.last_sequence = Some(SeqNo(s));
                }
                tag::COMPACT_POINTER => {
                    let l = level(&mut r)?;
                    e.compact_pointers.push((l, r.len_prefixed()?.to_vec()));
                }
                tag::DELETED_FILE => {
                    let l = level(&mut r)?;
                    e.deleted.push((l, FileNumber(r.varint()?)));
                }
                t @ (tag::NEW_FILE | tag::NEW_FILE_WITH_RANGE_DELETIONS) => {
                    let l = level(&mut r)?;
                    let mut f = NewFile {
                        level: l,
                        number: FileNumber(r.varint()?),
                        size: r.varint()?,
                        smallest: r.len_prefixed()?.to_vec(),
                        largest: r.len_prefixed()?.to_vec(),
                        entries: r.varint()?,
                        deletions: r.varint()?,
                        range_deletions: 0,
                        filter_millibits: None,
                        family: 0,
                    };
                    if t == tag::NEW_FILE_WITH_RANGE_DELETIONS {
                        f.range_deletions = r.varint()?;
                    }
                    if f.smallest.len() < 8 || f.largest.len() < 8 {
                        return Err(DecodeError("file bounds are not internal keys"));
                    }
                    e.added.push(f);
                }
                tag::FILE_FILTER_BITS => {
                    let number = FileNumber(r.varint()?);
                    let bits = r.varint()?;
                    let file = e.added.iter_mut().rev().find(|f| f.number == number);
                    match file {
                        Some(f) if bits <= 1_000_000 => f.filter_millibits = Some(bits),
                        Some(_) => return Err(DecodeError("filter bits out of range")),
                        None => return Err(DecodeError("filter bits for a file not added")),
                    }
                }
                tag::EDIT_FAMILY => e.family = family(&mut r)?,
                tag::FILE_FAMILY => {
                    let number = FileNumber(r.varint()?);
                    let id = family(&mut r)?;
                    match e.added.iter_mut().rev().find(|f| f.number == number) {
                        Some(f) => f.family = id,
                        None => return Err(DecodeError("a family for a file not added")),
                    }
                }
                tag::ADD_FAMILY => {
                    let id = family(&mut r)?;
                    let name = std::str::from_utf8(r.len_prefixed()?)
                        .map_err(|_| DecodeError("a column family name is not UTF-8"))?;
                    e.added_families.push((id, name.to_string()));
                }
                tag::DROP_FAMILY => e.dropped_families.push(family(&mut r)?),
                tag::NEXT_FAMILY => e.next_family = Some(family(&mut r)?),
                tag::COMPARATOR => {
                    let name = std::str::from_utf8(r.len_prefixed()?)
                        .map_err(|_| DecodeError("a comparator name is not UTF-8"))?;
                    e.comparator = Some(name.to_string());
                }
                _ => return Err(DecodeError("unknown version edit tag")),
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::key::{ValueKind, internal_key};

    #[test]
    fn edits_round_trip() {
        let e = VersionEdit {
            log_number: Some(FileNumber(7)),
            next_file_number: Some(12),
            last_sequence: Some(SeqNo(99)),
            compact_pointers: vec![(Level(2), b"k".to_vec())],
            deleted: vec![(Level(1), FileNumber(3))],
            added: vec![NewFile {
                level: Level(1),
                number: FileNumber(11),
                size: 4096,
                smallest: internal_key(b"a", SeqNo(1), ValueKind::Value),
                largest: internal_key(b"z", SeqNo(2), ValueKind::Delete),
                entries: 10,
                deletions: 1,
                range_deletions: 2,
                filter_millibits: Some(7_250),
                family: 3,
            }],
            family: 3,
            added_families: vec![(3, "users".into())],
            dropped_families: vec![2],
            next_family: Some(4),
            comparator: Some("rocksdb.ReverseBytewiseComparator".into()),
        };
        assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(VersionEdit::decode(&[99]).is_err());
        // A level past the deepest.
        assert!(VersionEdit::decode(&[tag::DELETED_FILE as u8, NUM_LEVELS as u8, 1]).is_err());
        // The family of a file the edit does not add.
        assert!(VersionEdit::decode(&[tag::FILE_FAMILY as u8, 4, 1]).is_err());
        let e = VersionEdit {
            log_number: Some(FileNumber(1)),
            ..Default::default()
        }
        .encode();
        assert!(VersionEdit::decode(&e[..e.len() - 1]).is_err());
        // Filter bits of a file the edit does not add.
        assert!(VersionEdit::decode(&[tag::FILE_FILTER_BITS as u8, 4, 10]).is_err());
    }
}

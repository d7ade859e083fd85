//! Record framing shared by the WAL and the MANIFEST (specified in `docs/format.md`).
//!
//! A log file is a sequence of records, each
//! `masked_crc32c: u32 LE | length: u32 LE | length_crc: u32 LE | payload: length bytes`,
//! where the first checksum covers the length bytes and the payload, and `length_crc` is the
//! masked CRC32C of the length bytes alone, so that a damaged length is told from a record cut
//! short by a crash. A crash leaves at most the last record incomplete.
//!
//! Reading tells a torn tail apart from damage. The last record is torn, and silently
//! dropped, when the file ends inside it and no intact record follows (a damaged length
//! field also makes a record seem to run past the end, but then the records after it are
//! still there to be found), or when it fails its checks and everything from some point
//! inside it to the end of the file is zero. Zeros end a file in two ways: a file system may
//! extend a file with zeros after a power loss, and a WAL written through a memory mapping
//! is reserved ahead in zeroed chunks, so a process killed while copying a record leaves the
//! rest of that record zero. Otherwise a crash leaves a record cut short, never a whole one
//! with wrong bytes, so a complete record whose checksum fails is corruption, reported with
//! the file and offset, even at the very end: dropping it could silently lose a write that
//! was synced.
//!
//! One more crash artefact: a power loss keeps unsynced bytes a page at a time, in no order
//! (the page cache writes dirty pages back when it likes), so a page in the unsynced tail
//! may come back as it was at the last sync, or empty, while a later page came back whole.
//! A damaged record is taken for such a page, and the log ends there, when the part of it
//! in some 4 KiB page is zero from the record's first byte to the page's end, or when a
//! whole page inside it is zero. Every record after it was written after the last sync, or
//! that sync would have written the page. What this costs: a record whose own bytes are
//! zero over a whole page (a value of zeros), or a synced page the disk returns as zeros,
//! reads as a tear when damaged, and the log silently ends there; and a page written back
//! in the middle of a record and then lost reads as corruption (open with
//! [`RecoveryMode::Salvage`] to keep what comes before it).

#![deny(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

use crate::coding::{checksum_ok, masked_crc, u32_at};
use crate::error::{Error, Result};
use crate::fs::WritableFile;

pub(crate) const HEADER_BYTES: usize = 12;

/// Appends records to a log file.
pub(crate) struct LogWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    bytes: u64,
}

impl LogWriter {
    pub(crate) fn new(file: Box<dyn WritableFile>, path: PathBuf) -> Self {
        LogWriter {
            file,
            path,
            bytes: 0,
        }
    }

    pub(crate) fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Appends one record. It reaches the operating system only at [`LogWriter::flush`].
    pub(crate) fn add_record(&mut self, payload: &[u8]) -> Result<()> {
        self.add_record_parts(&[payload])
    }

    /// Appends one record whose payload is `parts` concatenated (saves copying them into
    /// one buffer first).
    pub(crate) fn add_record_parts(&mut self, parts: &[&[u8]]) -> Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let len = u32::try_from(total)
            .map_err(|_| Error::InvalidArgument("log record over 4 GiB".into()))?;
        let len_bytes = len.to_le_bytes();
        let mut crc = crc32c::crc32c(&len_bytes);
        for p in parts {
            crc = crc32c::crc32c_append(crc, p);
        }
        let crc = crc.rotate_right(15).wrapping_add(0xa282_ead8);
        let mut header = [0u8; HEADER_BYTES];
        header[..4].copy_from_slice(&crc.to_le_bytes());
        header[4..8].copy_from_slice(&len_bytes);
        header[8..].copy_from_slice(&masked_crc(&[&len_bytes]).to_le_bytes());
        let mut result = self.file.append(&header);
        for p in parts {
            result = result.and_then(|()| self.file.append(p));
        }
        result.map_err(|e| Error::io("append", &self.path, e))?;
        self.bytes += (HEADER_BYTES + total) as u64;
        Ok(())
    }

    /// Hands the appended records to the operating system (survives a process crash).
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.file
            .flush()
            .map_err(|e| Error::io("write", &self.path, e))
    }

    /// Makes every appended record durable (survives power loss).
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.file
            .sync()
            .map_err(|e| Error::io("fsync", &self.path, e))
    }

    /// [`LogWriter::sync`] whose wait on the disk happens in the returned value's `finish`,
    /// after the writer has been let go.
    pub(crate) fn begin_sync(&mut self) -> Result<LogSync> {
        match self.file.begin_sync() {
            Ok(pending) => Ok(LogSync {
                pending,
                path: self.path.clone(),
            }),
            Err(e) => Err(Error::io("fsync", &self.path, e)),
        }
    }
}

/// A log sync begun by [`LogWriter::begin_sync`].
pub(crate) struct LogSync {
    pending: crate::fs::PendingSync,
    path: PathBuf,
}

impl LogSync {
    /// Makes the records appended before the sync began durable.
    pub(crate) fn finish(self) -> Result<()> {
        self.pending
            .finish()
            .map_err(|e| Error::io("fsync", &self.path, e))
    }
}

/// What to do with a damaged record that is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Report [`Error::Corruption`] naming the file and offset (the default).
    #[default]
    Strict,
    /// Keep the records before the damage and drop everything from it on; the loss is
    /// reported in the statistics.
    Salvage,
}

/// The outcome of reading a whole log.
pub(crate) struct LogContents {
    /// Each intact record with its offset in the file.
    pub records: Vec<(u64, Vec<u8>)>,
    /// Bytes at the end that were dropped as a torn record.
    pub torn_tail_bytes: u64,
    /// Bytes dropped in salvage mode because of damage.
    pub salvaged_bytes: u64,
}

/// Splits a log file's bytes into records.
pub(crate) fn read_log(path: &Path, data: &[u8], mode: RecoveryMode) -> Result<LogContents> {
    let mut out = LogContents {
        records: Vec::new(),
        torn_tail_bytes: 0,
        salvaged_bytes: 0,
    };
    // Where the run of zeros that ends the file begins.
    let zeros_from = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let mut off = 0usize;
    while off < data.len() {
        let rest = data.get(off..).unwrap_or_default();
        match next_record(rest, zeros_from.saturating_sub(off)) {
            Next::Record(payload) => {
                out.records.push((off as u64, payload.to_vec()));
                off += HEADER_BYTES + payload.len();
            }
            // Zeros from a record boundary on are not a record: the file's reserve, or the
            // zeros a file system added after a power loss.
            Next::Torn if off >= zeros_from => break,
            Next::Torn => {
                out.torn_tail_bytes = rest.len() as u64;
                break;
            }
            Next::Damaged(_, span) if in_a_lost_page(data, off, off.saturating_add(span)) => {
                out.torn_tail_bytes = rest.len() as u64;
                break;
            }
            Next::Damaged(reason, _) => match mode {
                RecoveryMode::Strict => return Err(Error::corruption(path, off as u64, reason)),
                RecoveryMode::Salvage => {
                    out.salvaged_bytes = rest.len() as u64;
                    break;
                }
            },
        }
    }
    Ok(out)
}

/// Every intact record of a damaged log, for repair: damage is stepped over a byte at a time
/// to the next offset where a record's checksums hold. `salvaged_bytes` counts the bytes
/// stepped over; a torn last record counts in `torn_tail_bytes`, as in [`read_log`].
pub(crate) fn read_log_stepping_over_damage(data: &[u8]) -> LogContents {
    let mut out = LogContents {
        records: Vec::new(),
        torn_tail_bytes: 0,
        salvaged_bytes: 0,
    };
    let zeros_from = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let mut off = 0usize;
    let mut stepping = false;
    while off < zeros_from {
        let rest = data.get(off..).unwrap_or_default();
        match next_record(rest, zeros_from - off) {
            Next::Record(payload) => {
                out.records.push((off as u64, payload.to_vec()));
                off += HEADER_BYTES + payload.len();
                stepping = false;
            }
            Next::Torn if !stepping => {
                out.torn_tail_bytes = (zeros_from - off) as u64;
                break;
            }
            // Damage, or what looks torn from inside the damage: one byte on.
            Next::Torn | Next::Damaged(..) => {
                out.salvaged_bytes += 1;
                off += 1;
                stepping = true;
            }
        }
    }
    out
}

/// What starts at some offset of a log.
enum Next<'a> {
    /// An intact record's payload.
    Record(&'a [u8]),
    /// The end of the file cuts the last record short: a normal crash artefact.
    Torn,
    /// A record that a crash of the process cannot explain, and the bytes it claims.
    Damaged(&'static str, usize),
}

/// The unit in which a power loss keeps or loses unsynced bytes.
const PAGE_BYTES: usize = 4096;

/// True when the record at `data[start..end]` lies in a page that a power loss returned as
/// of the last sync: zero from `start` to the end of `start`'s page, or zero over a whole
/// page (or to the end of the data) that begins inside the record.
fn in_a_lost_page(data: &[u8], start: usize, end: usize) -> bool {
    let end = end.min(data.len());
    let all_zero = |from: usize, to: usize| {
        data.get(from..to)
            .is_some_and(|b| !b.is_empty() && b.iter().all(|&x| x == 0))
    };
    let first_page_end = (start - start % PAGE_BYTES + PAGE_BYTES).min(data.len());
    if all_zero(start, first_page_end) {
        return true;
    }
    let mut page = first_page_end;
    while page < end {
        if all_zero(page, (page + PAGE_BYTES).min(data.len())) {
            return true;
        }
        page += PAGE_BYTES;
    }
    false
}

/// The record at the start of `rest`, where everything from `zeros_from` on is zero.
fn next_record(rest: &[u8], zeros_from: usize) -> Next<'_> {
    if zeros_from == 0 {
        return Next::Torn;
    }
    let crc = u32_at(rest, 0).ok();
    let len = u32_at(rest, 4).ok();
    if let (Some(len), Ok(check)) = (len, u32_at(rest, 8))
        && !checksum_ok(masked_crc(&[&len.to_le_bytes()]), check)
    {
        return if zeros_from < HEADER_BYTES {
            // The header was being written when the writer died.
            Next::Torn
        } else {
            Next::Damaged("log record length is damaged", HEADER_BYTES)
        };
    }
    let payload = len.and_then(|len| rest.get(HEADER_BYTES..HEADER_BYTES + len as usize));
    let (Some(crc), Some(len), Some(payload)) = (crc, len, payload) else {
        // The file ends inside this record: a tear, unless intact records follow.
        return if intact_record_after(rest) {
            Next::Damaged(
                "log record runs past the end of the file, yet records follow",
                rest.len(),
            )
        } else {
            Next::Torn
        };
    };
    if !checksum_ok(masked_crc(&[&len.to_le_bytes(), payload]), crc) {
        return if zeros_from < HEADER_BYTES + payload.len() {
            // Zero from inside this record to the end of the file: it was being copied into
            // a reserved, zeroed region when the writer died.
            Next::Torn
        } else {
            Next::Damaged("log record checksum mismatch", HEADER_BYTES + payload.len())
        };
    }
    Next::Record(payload)
}

/// True when an intact record (length within the data, checksum right) starts anywhere after
/// the first byte of `rest`.
fn intact_record_after(rest: &[u8]) -> bool {
    (1..rest.len().saturating_sub(HEADER_BYTES - 1)).any(|start| {
        let Some(at) = rest.get(start..) else {
            return false;
        };
        let (Ok(crc), Ok(len), Ok(check)) = (u32_at(at, 0), u32_at(at, 4), u32_at(at, 8)) else {
            return false;
        };
        checksum_ok(masked_crc(&[&len.to_le_bytes()]), check)
            && at
                .get(HEADER_BYTES..HEADER_BYTES + len as usize)
                .is_some_and(|payload| checksum_ok(masked_crc(&[&len.to_le_bytes(), payload]), crc))
    })
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, MemFs};

    fn write_log(records: &[&[u8]]) -> Vec<u8> {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let p = Path::new("/d/log");
        let mut w = LogWriter::new(fs.create(p).unwrap(), p.to_path_buf());
        for r in records {
            w.add_record(r).unwrap();
        }
        w.flush().unwrap();
        fs.read_all(p).unwrap()
    }

    #[test]
    fn records_round_trip_including_empty_ones() {
        let data = write_log(&[b"one", b"", b"three"]);
        let c = read_log(Path::new("log"), &data, RecoveryMode::Strict).unwrap();
        let got: Vec<_> = c.records.iter().map(|(_, r)| r.clone()).collect();
        assert_eq!(got, vec![b"one".to_vec(), vec![], b"three".to_vec()]);
        assert_eq!(c.torn_tail_bytes, 0);
    }

    #[test]
    fn every_truncation_drops_only_the_torn_tail() {
        let data = write_log(&[b"alpha", b"beta", b"gamma"]);
        for cut in 0..data.len() {
            let c = read_log(Path::new("log"), &data[..cut], RecoveryMode::Strict).unwrap();
            let complete = [17usize, 33, 50].iter().filter(|&&end| end <= cut).count();
            assert_eq!(c.records.len(), complete, "cut at {cut}");
        }
    }

    #[test]
    fn damage_in_the_middle_is_corruption_with_offset() {
        let mut data = write_log(&[b"alpha", b"beta", b"gamma"]);
        data[20] ^= 1; // inside "beta", the second record at offset 17
        let err = read_log(Path::new("log"), &data, RecoveryMode::Strict)
            .err()
            .unwrap();
        match err {
            Error::Corruption { offset, .. } => assert_eq!(offset, 17),
            other => panic!("unexpected {other}"),
        }
        let c = read_log(Path::new("log"), &data, RecoveryMode::Salvage).unwrap();
        assert_eq!(c.records.len(), 1);
        assert!(c.salvaged_bytes > 0);
    }

    #[test]
    fn a_damaged_length_is_corruption_not_a_tear() {
        let mut data = write_log(&[b"alpha", b"beta", b"gamma"]);
        data[4 + 2] ^= 0x10; // the first record's length now runs past the end
        let err = read_log(Path::new("log"), &data, RecoveryMode::Strict)
            .err()
            .unwrap();
        assert!(err.is_corruption(), "{err}");
    }

    #[test]
    fn damaged_last_record_is_corruption_and_a_zero_tail_ends_the_log() {
        let mut data = write_log(&[b"alpha", b"beta"]);
        let n = data.len();
        data[n - 1] ^= 0xff;
        let err = read_log(Path::new("log"), &data, RecoveryMode::Strict)
            .err()
            .unwrap();
        assert!(
            err.is_corruption(),
            "a whole record with a bad checksum is damage, not a tear"
        );
        let c = read_log(Path::new("log"), &data, RecoveryMode::Salvage).unwrap();
        assert_eq!(c.records.len(), 1);
        let mut zeroed = write_log(&[b"alpha"]);
        zeroed.extend_from_slice(&[0u8; 100]);
        let c = read_log(Path::new("log"), &zeroed, RecoveryMode::Strict).unwrap();
        assert_eq!(c.records.len(), 1);
        assert_eq!(
            c.torn_tail_bytes, 0,
            "zeros at a record boundary are not a record"
        );
    }

    #[test]
    fn a_record_cut_short_inside_a_zeroed_reserve_is_torn_anywhere() {
        // A log reserved ahead in zeros: a writer killed while copying the last record leaves
        // any prefix of it, then zeros.
        let whole = write_log(&[b"alpha", b"the last record, cut anywhere"]);
        let last_start = HEADER_BYTES + 5;
        for cut in last_start + 1..whole.len() {
            let mut data = whole[..cut].to_vec();
            data.resize(whole.len() + 64, 0);
            let c = read_log(Path::new("log"), &data, RecoveryMode::Strict)
                .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            assert_eq!(c.records.len(), 1, "cut at {cut}");
            // Unless the part written happened to be all zeros, it is a torn record.
            let written_zero = whole[last_start..cut].iter().all(|&b| b == 0);
            let torn = if written_zero {
                0
            } else {
                data.len() - last_start
            };
            assert_eq!(c.torn_tail_bytes, torn as u64, "cut at {cut}");
        }
        // A payload ending in zero bytes is still a whole record.
        let mut data = write_log(&[b"alpha", b"ends in zeros\0\0\0"]);
        data.resize(data.len() + 64, 0);
        let c = read_log(Path::new("log"), &data, RecoveryMode::Strict).unwrap();
        assert_eq!(c.records.len(), 2);
        // Damage followed by anything other than zeros is still damage.
        let mut data = write_log(&[b"alpha", b"beta", b"gamma"]);
        data[HEADER_BYTES + 5 + HEADER_BYTES] ^= 0x01;
        data.resize(data.len() + 64, 0);
        assert!(
            read_log(Path::new("log"), &data, RecoveryMode::Strict)
                .err()
                .is_some_and(|e| e.is_corruption())
        );
    }

    #[test]
    fn a_page_lost_to_a_power_loss_ends_the_log_but_damage_elsewhere_does_not() {
        let records: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i + 1; 300]).collect();
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let whole = write_log(&refs);
        assert!(whole.len() > 3 * PAGE_BYTES);
        let starts: Vec<usize> = (0..records.len())
            .map(|i| i * (HEADER_BYTES + 300))
            .collect();
        // The second page lost whole, or from the first record that starts in it (as it was
        // at a sync there); the third page kept.
        let first_in_second = starts.iter().copied().find(|&s| s >= PAGE_BYTES).unwrap();
        for lost_from in [PAGE_BYTES, first_in_second] {
            let mut data = whole.clone();
            data[lost_from..2 * PAGE_BYTES].fill(0);
            let c = read_log(Path::new("log"), &data, RecoveryMode::Strict)
                .unwrap_or_else(|e| panic!("lost from {lost_from}: {e}"));
            let intact = starts
                .iter()
                .filter(|&&s| s + HEADER_BYTES + 300 <= lost_from)
                .count();
            assert_eq!(c.records.len(), intact, "lost from {lost_from}");
            for (i, (_, r)) in c.records.iter().enumerate() {
                assert_eq!(r, &records[i]);
            }
            assert!(c.torn_tail_bytes > 0);
        }
        // Damage that does not look like a lost page is corruption: zeros that stop short of
        // a page's end; zeros from inside a record (not its start) to a page's end.
        for (from, to) in [
            (PAGE_BYTES + 100, PAGE_BYTES + 200),
            (first_in_second + 5, 2 * PAGE_BYTES),
        ] {
            let mut data = whole.clone();
            data[from..to].fill(0);
            assert!(
                read_log(Path::new("log"), &data, RecoveryMode::Strict)
                    .err()
                    .is_some_and(|e| e.is_corruption()),
                "zeros at {from}..{to}"
            );
        }
    }

    #[test]
    fn a_bit_flip_in_a_record_that_ends_a_page_with_a_zero_is_corruption() {
        // Records of 300 bytes whose payload is zero at the page boundary they straddle.
        let records: Vec<Vec<u8>> = (0..30u8)
            .map(|i| {
                (0..300)
                    .map(|j| if j % 50 == 0 { 0 } else { i + 1 })
                    .collect()
            })
            .collect();
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let mut data = write_log(&refs);
        let straddler = (0..records.len())
            .map(|i| i * (HEADER_BYTES + 300))
            .find(|s| s + HEADER_BYTES + 300 > PAGE_BYTES)
            .unwrap();
        data[PAGE_BYTES - 1] = 0;
        data[PAGE_BYTES + 10] ^= 0x04;
        let err = read_log(Path::new("log"), &data, RecoveryMode::Strict)
            .err()
            .expect("the flip must be reported, not read as a tear");
        match err {
            Error::Corruption { offset, .. } => assert_eq!(offset, straddler as u64),
            other => panic!("{other}"),
        }
    }
}

/// What a log file holds; its first record names it, with the format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogKind {
    Wal,
    Manifest,
}

/// The version of the WAL and MANIFEST formats written by this build.
pub(crate) const LOG_FORMAT_VERSION: u32 = 1;

impl LogKind {
    fn magic(self) -> u64 {
        match self {
            LogKind::Wal => u64::from_le_bytes(*b"STRATAwl"),
            LogKind::Manifest => u64::from_le_bytes(*b"STRATAmf"),
        }
    }
}

/// The first record of every log file: `magic: u64 LE | version: u32 LE`.
pub(crate) fn header_record(kind: LogKind) -> Vec<u8> {
    let mut v = Vec::with_capacity(12);
    crate::coding::put_u64(&mut v, kind.magic());
    crate::coding::put_u32(&mut v, LOG_FORMAT_VERSION);
    v
}

/// Checks the header record and returns the records after it. An empty log (a crash before
/// the header reached the disk) has no records.
pub(crate) fn strip_header(
    path: &Path,
    contents: LogContents,
    kind: LogKind,
) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut records = contents.records.into_iter();
    let Some((_, first)) = records.next() else {
        return Ok(Vec::new());
    };
    let magic = crate::coding::u64_at(&first, 0).map_err(|e| e.at(path, 0))?;
    if magic != kind.magic() {
        return Err(Error::corruption(
            path,
            0,
            format!("not a {kind:?} file: bad magic number"),
        ));
    }
    let version = u32_at(&first, 8).map_err(|e| e.at(path, 0))?;
    if version != LOG_FORMAT_VERSION {
        return Err(Error::UnsupportedFormat {
            file: path.to_path_buf(),
            reason: format!("{kind:?} format version {version}"),
        });
    }
    Ok(records.collect())
}

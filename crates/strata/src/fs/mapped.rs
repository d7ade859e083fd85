//! Log files written through a shared memory mapping.
//!
//! A WAL append written with `write(2)` costs a system call per record, and that call was
//! the larger part of a small write's time. A shared mapping of the file puts the bytes in
//! the page cache with a plain copy, where they survive a crash of the process exactly as
//! written bytes do; `fdatasync` makes them durable as it does written bytes.
//!
//! The file grows a chunk at a time with `fallocate`, which reserves the disk blocks (so a
//! full disk is an error from `fallocate`, never a fault on a store into the mapping) and
//! extends the file with zeros. Dropping the file unmaps it and cuts it back to the bytes
//! appended. After a crash the zeros remain; the log reader takes a zero tail for the end of
//! the log.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::ptr;
use std::sync::Arc;

use super::WritableFile;

/// Bytes mapped (and reserved) at a time; a multiple of the page size.
pub(super) const CHUNK: usize = 1 << 20;

/// Write groups of at least this many bytes make the next group go out with one `pwrite`
/// rather than through the mapping. A store into the mapping saves a system call, but each
/// page it reaches costs a fault into the file system first (reading the reserve's zeros in,
/// then making the page writable) and an unmapping after; a system call that writes pages
/// whole skips both. Single puts stay far below this; batches of dozens of entries reach it.
const GATHER_BYTES: u64 = 4096;

pub(crate) struct MappedLog {
    file: File,
    /// A descriptor of its own for [`WritableFile::begin_sync`].
    syncer: Arc<File>,
    /// The mapping of `[chunk_start, chunk_start + CHUNK)`, or null.
    map: *mut u8,
    chunk_start: u64,
    /// Bytes appended.
    len: u64,
    /// The end of the reserved chunks, a multiple of [`CHUNK`]: what the file covers until
    /// it is dropped and cut back to `len`.
    reserved: u64,
    /// Bytes appended since the last flush or sync: the size of the write group.
    group: u64,
    /// True when the last group was large: what comes next is gathered in `pending` and
    /// written with one `pwrite` at the next flush or sync (see [`GATHER_BYTES`]).
    large_groups: bool,
    /// True when the last record was synced rather than flushed: what comes next is
    /// gathered in `pending` and written with one `pwrite` at the next flush or sync, not
    /// stored into the mapping. `fdatasync` write-protects the pages it cleans, and the
    /// first store into one faults into the file system, which costs more than the
    /// system call (docs/design.md, "Constants and their reasons").
    after_sync: bool,
    /// Bytes appended after a sync or a large group and not yet written: a record's header
    /// and payload come as separate appends, and one system call for the pieces is
    /// cheaper than one for each.
    pending: Vec<u8>,
}

// SAFETY: the mapping is owned by this value alone and touched only through `&mut self`.
unsafe impl Send for MappedLog {}

impl MappedLog {
    /// A new, empty log at `path`; `None` when the file system cannot reserve space
    /// with `fallocate` or map the file, and the caller should write the file the
    /// ordinary way (which truncates it again).
    pub(crate) fn create(path: &Path) -> io::Result<Option<MappedLog>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        let mut log = MappedLog {
            file,
            syncer: Arc::new(File::open(path)?),
            map: ptr::null_mut(),
            chunk_start: 0,
            len: 0,
            reserved: 0,
            group: 0,
            large_groups: false,
            after_sync: false,
            pending: Vec::new(),
        };
        match log.map_chunk(false) {
            Ok(()) => Ok(Some(log)),
            // No fallocate, or no shared mappings, on this file system.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::ENODEV)
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Reserves the chunk that starts at the log's end, when the end has reached the file's.
    fn reserve(&mut self) -> io::Result<()> {
        if self.len < self.reserved {
            return Ok(());
        }
        // Chunks are laid end to end from offset 0, so the end of the reserve starts the
        // next one (or, after a failed attempt, the one that failed).
        let offset = libc::off_t::try_from(self.reserved)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a plain system call on a descriptor this value owns.
        let r = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, offset, CHUNK as libc::off_t) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        self.reserved += CHUNK as u64;
        Ok(())
    }

    /// Reserves (if need be) and maps the chunk that holds the log's end, replacing the
    /// current mapping.
    fn map_chunk(&mut self, populate: bool) -> io::Result<()> {
        self.unmap();
        self.reserve()?;
        let start = self.len - self.len % CHUNK as u64;
        let fd = self.file.as_raw_fd();
        let offset = libc::off_t::try_from(start)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a new shared mapping of a range the file now covers; nothing else
        // maps it, and it is unmapped before the file is closed.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                CHUNK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        if populate {
            // Each page's first store would otherwise fault on its own, one trap a page for
            // the writer; asked for together, the kernel sets them all up in one call. The
            // pages are then dirty zeroes, which the next sync writes out whole, so only a
            // chunk that stores through the mapping asks (not one `pwrite` fills after a
            // sync). A kernel without MADV_POPULATE_WRITE (before Linux 5.14) refuses, and
            // the stores fault as before.
            // SAFETY: advice on the mapping just made, of its whole length.
            let _ = unsafe { libc::madvise(p, CHUNK, libc::MADV_POPULATE_WRITE) };
        }
        self.map = p.cast();
        self.chunk_start = start;
        Ok(())
    }

    /// Writes `pending` at the end of the log. On an error, what was not written stays
    /// pending; the buffer is kept for reuse.
    fn write_pending(&mut self) -> io::Result<()> {
        let mut pending = std::mem::take(&mut self.pending);
        let mut written = 0;
        let result = self.write_at_end(&pending, &mut written);
        pending.drain(..written);
        self.pending = pending;
        result
    }

    /// Writes `bytes` after the log's end with `pwrite`, reserving chunks as it crosses
    /// them, and counts in `written` how many made it.
    fn write_at_end(&mut self, bytes: &[u8], written: &mut usize) -> io::Result<()> {
        while let Some(rest) = bytes.get(*written..).filter(|r| !r.is_empty()) {
            self.reserve()?;
            let room = (self.reserved - self.len) as usize;
            let (head, _) = rest.split_at(rest.len().min(room));
            // Within the reserved chunk: the file's length does not change.
            self.file.write_all_at(head, self.len)?;
            self.len += head.len() as u64;
            *written += head.len();
        }
        Ok(())
    }

    /// Picks how the next write group goes out, by the size of the one just written.
    fn end_group(&mut self) {
        self.large_groups = self.group >= GATHER_BYTES;
        self.group = 0;
    }

    fn unmap(&mut self) {
        if !self.map.is_null() {
            // SAFETY: `map` came from `mmap` with length CHUNK and is unmapped once.
            unsafe { libc::munmap(self.map.cast(), CHUNK) };
            self.map = ptr::null_mut();
        }
    }
}

impl WritableFile for MappedLog {
    fn append(&mut self, mut data: &[u8]) -> io::Result<()> {
        self.group += data.len() as u64;
        if self.after_sync || self.large_groups {
            self.pending.extend_from_slice(data);
            return Ok(());
        }
        while !data.is_empty() {
            let chunk_end = self.chunk_start + CHUNK as u64;
            // `pwrite`s may have moved the end past the mapped chunk.
            if self.map.is_null() || self.len >= chunk_end || self.len < self.chunk_start {
                self.map_chunk(true)?;
            }
            let at = (self.len - self.chunk_start) as usize;
            let n = data.len().min(CHUNK - at);
            let (head, _) = data.split_at(n);
            // SAFETY: `at + n <= CHUNK`, inside the mapping, which the file covers.
            unsafe { copy_in_order(head, self.map.add(at)) };
            self.len += n as u64;
            data = data.get(n..).unwrap_or_default();
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Stores into a shared mapping are in the page cache already.
        self.write_pending()?;
        self.after_sync = false;
        self.end_group();
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.write_pending()?;
        self.end_group();
        // On Linux, fdatasync writes back pages dirtied through a mapping too.
        self.after_sync = true;
        self.file.sync_data()
    }

    fn begin_sync(&mut self) -> io::Result<super::PendingSync> {
        self.write_pending()?;
        self.end_group();
        self.after_sync = true;
        Ok(super::PendingSync::of(self.syncer.clone()))
    }
}

/// Copies `src` to `dst` one 8-byte word at a time, front to back, so that a process
/// killed during the copy leaves a prefix of `src` followed by the reserve's zeros: the
/// torn tail the log reader recognises. `memcpy` may store a copy's last bytes before
/// its first ones (glibc's does, for some sizes), and a record cut that way reads as
/// damage.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes that do not overlap `src`.
unsafe fn copy_in_order(src: &[u8], dst: *mut u8) {
    // Bytes up to the first 8-byte boundary of `dst`, then aligned words, then the rest.
    let lead = dst.align_offset(8).min(src.len());
    let (lead_bytes, rest) = src.split_at(lead);
    let mut words = rest.chunks_exact(8);
    let mut at = 0;
    for &byte in lead_bytes {
        // SAFETY: `at < src.len()`; volatile keeps the stores separate and in order.
        unsafe { ptr::write_volatile(dst.add(at), byte) };
        at += 1;
    }
    for word in &mut words {
        let word = u64::from_ne_bytes(word.try_into().unwrap_or_default());
        // SAFETY: `at + 8 <= src.len()`, and `dst + at` is 8-byte aligned.
        unsafe { ptr::write_volatile(dst.add(at).cast::<u64>(), word) };
        at += 8;
    }
    for &byte in words.remainder() {
        // SAFETY: `at < src.len()`.
        unsafe { ptr::write_volatile(dst.add(at), byte) };
        at += 1;
    }
}

impl Drop for MappedLog {
    fn drop(&mut self) {
        // As a buffered writer does, hand over what is pending; an error here leaves the
        // log ending at the last record written.
        let _ = self.write_pending();
        self.unmap();
        // Cut off the reserved zeros; if this fails the reader still takes them for the
        // end of the log.
        let _ = self.file.set_len(self.len);
    }
}

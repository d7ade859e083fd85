//! The file system seen by the engine. Every byte Strata reads or writes goes through
//! [`FileSystem`], so that tests can run on memory and inject faults.
//!
//! Two implementations live here: [`StdFs`] on `std::fs`, and [`MemFs`], which keeps files in
//! memory and remembers what was synced, so that a test can throw away everything a power
//! loss would lose ([`MemFs::power_loss_copy`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::mutex::lock;

/// A file being written from start to end.
pub trait WritableFile: Send {
    /// Appends bytes; they may sit in a user-space buffer until [`WritableFile::flush`].
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Hands buffered bytes to the operating system: they survive a process crash.
    fn flush(&mut self) -> io::Result<()>;
    /// Makes everything appended durable: it survives power loss.
    fn sync(&mut self) -> io::Result<()>;
    /// [`WritableFile::sync`] in two steps, so that the file's writer need not wait on the
    /// disk: this one hands everything appended so far to the operating system, and
    /// [`PendingSync::finish`], which may run while the file is written again, makes it
    /// durable. The default does the whole sync here.
    fn begin_sync(&mut self) -> io::Result<PendingSync> {
        self.sync()?;
        Ok(PendingSync::done())
    }
}

/// The second step of [`WritableFile::begin_sync`]: the disk's part of a sync.
pub struct PendingSync(Option<Box<dyn FnOnce() -> io::Result<()> + Send>>);

impl PendingSync {
    /// A sync with nothing left to do.
    pub fn done() -> Self {
        PendingSync(None)
    }

    /// A sync left to `fdatasync` on `file`: a descriptor of the file written, opened on
    /// its own (not duplicated) when the file was created, so that a write-back error is
    /// reported to this sync whatever other syncs of the file see.
    pub fn of(file: Arc<File>) -> Self {
        Self::with(move || file.sync_data())
    }

    /// A sync left to `finish`.
    pub fn with(finish: impl FnOnce() -> io::Result<()> + Send + 'static) -> Self {
        PendingSync(Some(Box::new(finish)))
    }

    /// Makes what [`WritableFile::begin_sync`] handed over durable.
    pub fn finish(self) -> io::Result<()> {
        match self.0 {
            Some(f) => f(),
            None => Ok(()),
        }
    }
}

/// A file read at arbitrary offsets, from many threads at once.
pub trait RandomAccessFile: Send + Sync {
    /// Reads exactly `len` bytes at `offset`; a short file is an error.
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// The file's length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// The whole file mapped into memory for reading, where the file system can map files.
    /// Only files that never change while open may be mapped (SSTs are written once).
    fn map(&self) -> Option<Arc<FileMap>> {
        None
    }
    /// The operating system's descriptor of the file, where reads of it may go around this
    /// trait: batched lookups read many blocks at once through io_uring
    /// (`sstable/parallel_read.rs`). A file system that must see every read (one that
    /// injects faults, or keeps files in memory) has none.
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// A read-only shared mapping of a whole file, unmapped when dropped.
///
/// Reading a block through the mapping skips the system call, the page-cache lookup and the
/// copy that `pread` makes. The pages the process touches count in its resident set until
/// [`FileMap::release_resident`] drops them again.
pub struct FileMap {
    ptr: *const u8,
    len: usize,
    /// True when `ptr` and `len` are a heap allocation this value owns (a file system that
    /// keeps files in memory), false for a mapping made by `mmap`.
    heap: bool,
}

// SAFETY: the mapping is read-only and lives until drop; shared reads from many threads are
// as safe as reads of any immutable memory.
unsafe impl Send for FileMap {}
// SAFETY: as above.
unsafe impl Sync for FileMap {}

impl FileMap {
    /// Maps `file` whole; `None` for an empty file or when the mapping fails.
    #[cfg(target_os = "linux")]
    fn new(file: &File) -> Option<FileMap> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: a new read-only shared mapping of `len` bytes of an open file; it is
        // unmapped exactly once, in drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        (p != libc::MAP_FAILED).then(|| FileMap {
            ptr: p.cast::<u8>().cast_const(),
            len,
            heap: false,
        })
    }

    /// A mapping of bytes held in memory; `None` when there are none.
    fn from_heap(bytes: Box<[u8]>) -> Option<FileMap> {
        if bytes.is_empty() {
            return None;
        }
        let len = bytes.len();
        // The allocation is ours from here until drop, which gives it back.
        let ptr = Box::into_raw(bytes).cast::<u8>().cast_const();
        Some(FileMap {
            ptr,
            len,
            heap: true,
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Drops the process's hold on the mapping's pages: they leave its resident set (the page
    /// cache keeps them) and come back on the next touch.
    pub fn release_resident(&self) {
        if self.heap {
            return;
        }
        #[cfg(target_os = "linux")]
        // SAFETY: advice on a range this value maps. MADV_DONTNEED on a shared file mapping
        // discards no data: a later read faults the same file bytes back in.
        unsafe {
            libc::madvise(self.ptr.cast_mut().cast(), self.len, libc::MADV_DONTNEED);
        }
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        if self.heap {
            let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.cast_mut(), self.len);
            // SAFETY: `ptr` and `len` came from `Box::into_raw` of a `Box<[u8]>` in
            // `from_heap`, and are given back once, here.
            drop(unsafe { Box::from_raw(slice) });
            return;
        }
        #[cfg(target_os = "linux")]
        // SAFETY: `ptr` came from mmap with length `len` and is unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast_mut().cast(), self.len);
        }
    }
}

/// A range of a [`FileMap`], checked against the mapping once, when made.
#[derive(Clone)]
pub(crate) struct MappedBytes {
    map: Arc<FileMap>,
    start: usize,
    len: usize,
}

impl MappedBytes {
    /// `len` bytes at `start`; `None` when the range leaves the mapping.
    pub(crate) fn new(map: Arc<FileMap>, start: usize, len: usize) -> Option<MappedBytes> {
        let end = start.checked_add(len)?;
        (end <= map.len).then_some(MappedBytes { map, start, len })
    }

    /// The first `len` bytes of this range (all of it if `len` is larger).
    pub(crate) fn truncated(mut self, len: usize) -> MappedBytes {
        self.len = self.len.min(len);
        self
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `start + len <= map.len` was checked in `new`, and the mapping lives as
        // long as `self.map`.
        unsafe { std::slice::from_raw_parts(self.map.ptr.add(self.start), self.len) }
    }
}

/// An exclusive lock on a database directory; released when dropped.
pub trait FileLock: Send + Sync {}

/// The operations the engine needs from a file system.
pub trait FileSystem: Send + Sync {
    /// Creates (or truncates) a file for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Creates (or truncates) a log file: small appends, each handed to the operating system
    /// at once. A file system may serve these better than [`FileSystem::create`] does; the
    /// contract is the same.
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.create(path)
    }
    /// Opens an existing file for random reads.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>>;
    /// Reads a whole file.
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Renames atomically, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Names (not paths) of the entries of a directory.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;
    /// True when the path exists.
    fn exists(&self, path: &Path) -> bool;
    /// Makes the directory's entries (creates, renames, removes) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive lock, failing with `WouldBlock` when someone else holds it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>>;
    /// Size of a file in bytes.
    fn file_size(&self, path: &Path) -> io::Result<u64>;
    /// Makes `to` a durable file with `from`'s bytes, for a file never written again: a
    /// hard link where the file system allows one, a synced copy where not. The default
    /// copies.
    fn link_or_copy(&self, from: &Path, to: &Path) -> io::Result<()> {
        let data = self.read_all(from)?;
        let mut f = self.create(to)?;
        f.append(&data)?;
        f.sync()
    }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

struct StdWritable {
    file: io::BufWriter<File>,
    /// For logs, a descriptor of its own for [`WritableFile::begin_sync`].
    syncer: Option<Arc<File>>,
}

impl StdWritable {
    /// Creates (or truncates) `path`; a log gets a descriptor of its own for `begin_sync`.
    fn create(path: &Path, log: bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(StdWritable {
            file: io::BufWriter::with_capacity(64 * 1024, file),
            syncer: match log {
                true => Some(Arc::new(File::open(path)?)),
                false => None,
            },
        })
    }
}

impl WritableFile for StdWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
    fn sync(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_data()
    }
    fn begin_sync(&mut self) -> io::Result<PendingSync> {
        let Some(syncer) = &self.syncer else {
            self.sync()?;
            return Ok(PendingSync::done());
        };
        self.file.flush()?;
        Ok(PendingSync::of(syncer.clone()))
    }
}

struct StdRandomAccess {
    file: File,
}

impl RandomAccessFile for StdRandomAccess {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::os::fd::AsRawFd;
        // Read straight into the vector's spare capacity: zero-filling a block buffer before
        // overwriting it cost as much as the read itself.
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        let mut done = 0usize;
        while done < len {
            let at = offset
                .checked_add(done as u64)
                .and_then(|o| libc::off_t::try_from(o).ok())
                .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
            // SAFETY: the destination is the vector's allocation from `done` to `len`, which
            // is within its capacity; pread writes at most `len - done` bytes there.
            let n = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    buf.as_mut_ptr().add(done).cast(),
                    len - done,
                    at,
                )
            };
            match n {
                n if n > 0 => done += n as usize,
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        // SAFETY: pread initialised exactly `len` bytes.
        unsafe { buf.set_len(len) };
        Ok(buf)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    #[cfg(target_os = "linux")]
    fn map(&self) -> Option<Arc<FileMap>> {
        FileMap::new(&self.file).map(Arc::new)
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.file.as_raw_fd())
    }
}

struct StdLock {
    _file: File,
}
impl FileLock for StdLock {}

impl FileSystem for StdFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        Ok(Box::new(StdWritable::create(path, false)?))
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        #[cfg(target_os = "linux")]
        if let Some(log) = mapped::MappedLog::create(path)? {
            return Ok(Box::new(log));
        }
        Ok(Box::new(StdWritable::create(path, true)?))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        Ok(Arc::new(StdRandomAccess {
            file: File::open(path)?,
        }))
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut v = Vec::new();
        File::open(path)?.read_to_end(&mut v)?;
        Ok(v)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn link_or_copy(&self, from: &Path, to: &Path) -> io::Result<()> {
        // A link shares the synced bytes. Another file system, or one without links, gets a
        // copy; any other failure (`to` exists, say) is an error, and nothing is truncated.
        match std::fs::hard_link(from, to) {
            Ok(()) => return Ok(()),
            Err(e)
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EXDEV | libc::EPERM | libc::EOPNOTSUPP | libc::EMLINK)
                ) =>
            {
                return Err(e);
            }
            Err(_) => {}
        }
        let mut src = File::open(from)?;
        let mut dst = OpenOptions::new().write(true).create_new(true).open(to)?;
        io::copy(&mut src, &mut dst)?;
        dst.sync_all()
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(StdLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }
}

/// Log files written through a shared memory mapping.
///
/// A WAL append written with `write(2)` costs a system call per record, and that call was
/// the larger part of a small write's time. A shared mapping of the file puts the bytes in
/// the page cache with a plain copy, where they survive a crash of the process exactly as
/// written bytes do; `fdatasync` makes them durable as it does written bytes.
///
/// The file grows a chunk at a time with `fallocate`, which reserves the disk blocks (so a
/// full disk is an error from `fallocate`, never a fault on a store into the mapping) and
/// extends the file with zeros. Dropping the file unmaps it and cuts it back to the bytes
/// appended. After a crash the zeros remain; the log reader takes a zero tail for the end of
/// the log.
#[cfg(target_os = "linux")]
mod mapped {
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

    pub(crate) struct MappedLog {
        file: File,
        /// A descriptor of its own for [`WritableFile::begin_sync`].
        syncer: Arc<File>,
        /// The mapping of `[chunk_start, chunk_start + CHUNK)`, or null.
        map: *mut u8,
        chunk_start: u64,
        /// Bytes appended.
        len: u64,
        /// True when the last record was synced rather than flushed: what comes next is
        /// gathered in `pending` and written with one `pwrite` at the next flush or sync, not
        /// stored into the mapping. `fdatasync` write-protects the pages it cleans, and the
        /// first store into one faults into the file system, which costs more than the
        /// system call (docs/design.md, "Constants and their reasons").
        after_sync: bool,
        /// Bytes appended after a sync and not yet written: a record's header and payload
        /// come as separate appends, and one system call for the three pieces is cheaper
        /// than three.
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
                after_sync: false,
                pending: Vec::new(),
            };
            match log.map_chunk(0) {
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

        /// Reserves and maps the chunk at `start`, replacing the current mapping.
        fn map_chunk(&mut self, start: u64) -> io::Result<()> {
            self.unmap();
            let fd = self.file.as_raw_fd();
            let offset = libc::off_t::try_from(start)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            // SAFETY: plain system calls on a descriptor this value owns.
            let r = unsafe { libc::fallocate(fd, 0, offset, CHUNK as libc::off_t) };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
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
                if self.map.is_null() || self.len == self.chunk_start + CHUNK as u64 {
                    self.map_chunk(self.len - self.len % CHUNK as u64)?;
                }
                let room = (self.chunk_start + CHUNK as u64 - self.len) as usize;
                let (head, _) = rest.split_at(rest.len().min(room));
                // Within the reserved chunk: the file's length does not change.
                self.file.write_all_at(head, self.len)?;
                self.len += head.len() as u64;
                *written += head.len();
            }
            Ok(())
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
            if self.after_sync {
                self.pending.extend_from_slice(data);
                return Ok(());
            }
            while !data.is_empty() {
                let chunk_end = self.chunk_start + CHUNK as u64;
                if self.map.is_null() || self.len == chunk_end {
                    // Chunks are laid end to end from offset 0, so `len` starts the next one
                    // (or, after a failed attempt, the one that failed).
                    self.map_chunk(self.len - self.len % CHUNK as u64)?;
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
            Ok(())
        }

        fn sync(&mut self) -> io::Result<()> {
            self.write_pending()?;
            // On Linux, fdatasync writes back pages dirtied through a mapping too.
            self.after_sync = true;
            self.file.sync_data()
        }

        fn begin_sync(&mut self) -> io::Result<super::PendingSync> {
            self.write_pending()?;
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
}

/// The page size of the simulated disk: a power loss keeps or loses unsynced bytes a whole
/// page at a time, as the page cache writes them back.
const MEM_PAGE: usize = 4096;

/// How far a [`MemFs`] log file is reserved ahead of its end with zeros, as the mapped log
/// of [`StdFs`] reserves chunks (smaller here, to keep copies cheap).
const MEM_LOG_RESERVE: usize = 64 * 1024;

/// One file of a [`MemFs`]: its bytes, and how many of them a power loss would keep.
#[derive(Default)]
struct MemFile {
    data: Vec<u8>,
    synced_len: usize,
    /// The file's length with its reserve of zeros, while a log writer holds it (0 once the
    /// writer is gone and the file was cut back to `data`).
    reserved: usize,
}

impl MemFile {
    /// The bytes a reader sees: the data, then the reserve's zeros.
    fn visible(&self) -> Vec<u8> {
        let mut v = self.data.clone();
        v.resize(self.reserved.max(self.data.len()), 0);
        v
    }

    /// The bytes left after a power loss. Unsynced pages each either reach the disk whole
    /// or not at all, as `keep_page` decides (page writeback has no order); a page that
    /// holds synced bytes keeps at least those.
    fn after_power_loss(&self, keep_page: &mut dyn FnMut() -> bool) -> Vec<u8> {
        let synced = self.synced_len.min(self.data.len());
        let mut v = self.data.get(..synced).unwrap_or_default().to_vec();
        let mut page = synced - synced % MEM_PAGE;
        while page < self.data.len() {
            let end = (page + MEM_PAGE).min(self.data.len());
            if keep_page() {
                v.resize(page, 0);
                v.extend_from_slice(self.data.get(page..end).unwrap_or_default());
            }
            page = end;
        }
        // A reserved log keeps its length: the reserve was made before any page of it was
        // written.
        v.resize(v.len().max(self.reserved), 0);
        v
    }
}

#[derive(Default)]
struct MemState {
    /// What a running process sees: path to file contents.
    files: BTreeMap<PathBuf, Arc<Mutex<MemFile>>>,
    /// What survives a power loss: the directory entries as of each directory's last sync.
    durable_entries: BTreeMap<PathBuf, Arc<Mutex<MemFile>>>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
}

/// A file system in memory, for tests and for embedding without a disk.
///
/// It keeps track of durability the way a disk does: bytes appended to a file are kept by
/// [`MemFs::power_loss_copy`] only up to the file's last `sync`, and a create, rename or
/// remove only once its directory was synced. Appends wait in the writer, as in a buffered
/// writer, until `flush` or `sync` hands them over, and a process crash
/// ([`MemFs::process_crash_copy`]) loses what waits. Log files ([`FileSystem::create_log`])
/// are reserved ahead with zeros, as [`StdFs`] reserves its mapped logs, and files can be
/// mapped for reading ([`RandomAccessFile::map`]), so tests run the engine's production paths.
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<MemState>>,
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFs").finish_non_exhaustive()
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

/// splitmix64, for the pages a torn power loss keeps.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl MemFs {
    /// An empty in-memory file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new, independent file system holding what a power loss at this instant would leave:
    /// each file up to its last `sync`, and only the directory entries made durable by a
    /// directory sync. The original goes on unchanged, so a test can crash a database that
    /// is still running and open the copy.
    pub fn power_loss_copy(&self) -> MemFs {
        self.copy(|st| Self::files_of(&st.durable_entries, |f| f.after_power_loss(&mut || false)))
    }

    /// Like [`MemFs::power_loss_copy`], but each page written and not synced reaches the
    /// disk or not by the draw of a generator seeded with `seed`: later pages may survive
    /// where earlier ones did not, and a log's unsynced tail can come back with holes of
    /// zeros at page boundaries.
    pub fn torn_power_loss_copy(&self, seed: u64) -> MemFs {
        let mut state = seed;
        self.copy(|st| {
            Self::files_of(&st.durable_entries, |f| {
                f.after_power_loss(&mut || next_random(&mut state) & 1 == 0)
            })
        })
    }

    /// A new, independent file system holding what a crash of the process at this instant
    /// would leave: every byte handed to the file system, synced or not, and the zeros a
    /// log is reserved ahead with.
    pub fn process_crash_copy(&self) -> MemFs {
        self.copy(|st| Self::files_of(&st.files, MemFile::visible))
    }

    fn files_of(
        files: &BTreeMap<PathBuf, Arc<Mutex<MemFile>>>,
        mut contents: impl FnMut(&MemFile) -> Vec<u8>,
    ) -> BTreeMap<PathBuf, Arc<Mutex<MemFile>>> {
        files
            .iter()
            .map(|(p, f)| {
                let data = contents(&lock(f));
                let file = MemFile {
                    synced_len: data.len(),
                    data,
                    reserved: 0,
                };
                (p.clone(), Arc::new(Mutex::new(file)))
            })
            .collect()
    }

    fn copy(
        &self,
        files: impl FnOnce(&MemState) -> BTreeMap<PathBuf, Arc<Mutex<MemFile>>>,
    ) -> MemFs {
        let st = lock(&self.state);
        let files = files(&st);
        MemFs {
            state: Arc::new(Mutex::new(MemState {
                durable_entries: files.clone(),
                files,
                dirs: st.dirs.clone(),
                locks: BTreeSet::new(),
            })),
        }
    }

    /// Applies `f` to the bytes of an existing file (for corruption tests).
    pub fn mutate_file(&self, path: &Path, f: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        let st = lock(&self.state);
        let file = st.files.get(path).ok_or_else(|| not_found(path))?;
        let mut file = lock(file);
        f(&mut file.data);
        let len = file.data.len();
        file.synced_len = file.synced_len.min(len);
        Ok(())
    }

    fn file(&self, path: &Path) -> io::Result<Arc<Mutex<MemFile>>> {
        lock(&self.state)
            .files
            .get(path)
            .cloned()
            .ok_or_else(|| not_found(path))
    }

    fn create_file(&self, path: &Path, reserved: usize) -> io::Result<Box<dyn WritableFile>> {
        let mut st = lock(&self.state);
        if let Some(parent) = path.parent()
            && !st.dirs.contains(parent)
        {
            return Err(not_found(parent));
        }
        let file = Arc::new(Mutex::new(MemFile {
            reserved,
            ..MemFile::default()
        }));
        st.files.insert(path.to_path_buf(), file.clone());
        Ok(Box::new(MemWritable {
            file,
            pending: Vec::new(),
            log: reserved > 0,
        }))
    }
}

struct MemWritable {
    file: Arc<Mutex<MemFile>>,
    /// Appended, not yet handed over by `flush` or `sync`.
    pending: Vec<u8>,
    /// A log: its reserve of zeros grows ahead of its end and is cut off when it closes.
    log: bool,
}

impl MemWritable {
    fn hand_over(&mut self) -> MutexGuard<'_, MemFile> {
        let mut f = lock(&self.file);
        f.data.append(&mut self.pending);
        if self.log && f.data.len() > f.reserved {
            f.reserved = f.data.len().next_multiple_of(MEM_LOG_RESERVE);
        }
        f
    }
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.pending.extend_from_slice(data);
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        drop(self.hand_over());
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        let mut f = self.hand_over();
        f.synced_len = f.data.len();
        Ok(())
    }
    fn begin_sync(&mut self) -> io::Result<PendingSync> {
        // What is handed over now becomes durable at `finish`; what is appended in between
        // does not.
        let len = self.hand_over().data.len();
        let file = self.file.clone();
        Ok(PendingSync::with(move || {
            let mut f = lock(&file);
            f.synced_len = f.synced_len.max(len).min(f.data.len());
            Ok(())
        }))
    }
}

impl Drop for MemWritable {
    fn drop(&mut self) {
        // As a buffered writer does, and a log cuts off its reserve.
        let mut f = self.hand_over();
        f.reserved = 0;
    }
}

struct MemRandomAccess {
    file: Arc<Mutex<MemFile>>,
}

impl RandomAccessFile for MemRandomAccess {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let f = lock(&self.file);
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(len).ok_or(io::ErrorKind::UnexpectedEof)?;
        f.data
            .get(start..end)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
    }
    fn size(&self) -> io::Result<u64> {
        Ok(lock(&self.file).data.len() as u64)
    }
    /// A copy of the bytes as they are now: files are mapped only when they no longer change.
    fn map(&self) -> Option<Arc<FileMap>> {
        let bytes = lock(&self.file).data.clone().into_boxed_slice();
        FileMap::from_heap(bytes).map(Arc::new)
    }
}

struct MemLock {
    state: Arc<Mutex<MemState>>,
    path: PathBuf,
}

impl FileLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        lock(&self.state).locks.remove(&self.path);
    }
}

impl FileSystem for MemFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.create_file(path, 0)
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.create_file(path, MEM_LOG_RESERVE)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        Ok(Arc::new(MemRandomAccess {
            file: self.file(path)?,
        }))
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let file = self.file(path)?;
        let data = lock(&file).visible();
        Ok(data)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        let file = st.files.remove(from).ok_or_else(|| not_found(from))?;
        st.files.insert(to.to_path_buf(), file);
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let st = lock(&self.state);
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        Ok(st
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        for a in dir.ancestors() {
            st.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        if !st.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let in_use = st.files.keys().any(|p| p.starts_with(dir))
            || st.dirs.iter().any(|d| d != dir && d.starts_with(dir));
        if in_use {
            return Err(io::ErrorKind::DirectoryNotEmpty.into());
        }
        st.dirs.remove(dir);
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let st = lock(&self.state);
        st.files.contains_key(path) || st.dirs.contains(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        let st = &mut *st;
        st.durable_entries.retain(|p, _| p.parent() != Some(dir));
        for (p, f) in &st.files {
            if p.parent() == Some(dir) {
                st.durable_entries.insert(p.clone(), f.clone());
            }
        }
        Ok(())
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let mut st = lock(&self.state);
        if !st.locks.insert(path.to_path_buf()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(Box::new(MemLock {
            state: self.state.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        let file = self.file(path)?;
        let f = lock(&file);
        let len = f.reserved.max(f.data.len()) as u64;
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfs_power_loss_keeps_only_synced_bytes_and_synced_entries() {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let mut a = fs.create(&dir.join("a")).unwrap();
        a.append(b"hello").unwrap();
        a.sync().unwrap();
        a.append(b" world").unwrap();
        a.flush().unwrap();
        a.append(b" unflushed").unwrap();
        fs.sync_dir(dir).unwrap();
        let mut b = fs.create(&dir.join("b")).unwrap();
        b.append(b"lost").unwrap();
        b.sync().unwrap();
        let after = fs.power_loss_copy();
        assert_eq!(after.read_all(&dir.join("a")).unwrap(), b"hello");
        assert!(
            !after.exists(&dir.join("b")),
            "entry was never made durable"
        );
        let crashed = fs.process_crash_copy();
        assert_eq!(crashed.read_all(&dir.join("a")).unwrap(), b"hello world");
        assert_eq!(crashed.read_all(&dir.join("b")).unwrap(), b"lost");
        drop(a);
        assert_eq!(
            fs.process_crash_copy().read_all(&dir.join("a")).unwrap(),
            b"hello world unflushed",
            "a writer hands over what it holds when it closes"
        );
    }

    #[test]
    fn memfs_logs_keep_a_reserve_of_zeros_and_lose_unsynced_pages_one_by_one() {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let path = dir.join("log");
        let mut log = fs.create_log(&path).unwrap();
        let synced: Vec<u8> = (0..5000u32).map(|i| (i % 251 + 1) as u8).collect();
        log.append(&synced).unwrap();
        log.sync().unwrap();
        fs.sync_dir(dir).unwrap();
        let unsynced: Vec<u8> = (0..3 * MEM_PAGE as u32)
            .map(|i| (i % 13 + 1) as u8)
            .collect();
        log.append(&unsynced).unwrap();
        log.flush().unwrap();
        let all = [&synced[..], &unsynced[..]].concat();
        // A crash of the process: every byte handed over, then the reserve's zeros.
        let crashed = fs.process_crash_copy().read_all(&path).unwrap();
        assert_eq!(crashed.len(), MEM_LOG_RESERVE);
        assert_eq!(&crashed[..all.len()], &all[..]);
        assert!(crashed[all.len()..].iter().all(|&b| b == 0));
        // A clean power loss keeps the synced bytes only.
        let lost = fs.power_loss_copy().read_all(&path).unwrap();
        assert_eq!(&lost[..synced.len()], &synced[..]);
        assert!(lost[synced.len()..].iter().all(|&b| b == 0));
        // A torn one keeps whole pages: each page of the copy is all new or all old.
        let mut kept_later_than_lost = false;
        for seed in 0..64 {
            let torn = fs.torn_power_loss_copy(seed).read_all(&path).unwrap();
            assert_eq!(&torn[..synced.len()], &synced[..], "seed {seed}");
            let mut lost_one = false;
            for page in (synced.len() / MEM_PAGE)..all.len().div_ceil(MEM_PAGE) {
                let start = (page * MEM_PAGE).max(synced.len());
                let end = ((page + 1) * MEM_PAGE).min(all.len());
                let got = &torn[start..end];
                if got == &all[start..end] {
                    kept_later_than_lost |= lost_one;
                } else {
                    assert!(
                        got.iter().all(|&b| b == 0),
                        "seed {seed}: page {page} torn inside"
                    );
                    lost_one = true;
                }
            }
        }
        assert!(kept_later_than_lost, "no copy kept a page after a lost one");
        drop(log);
        assert_eq!(
            fs.read_all(&path).unwrap(),
            all,
            "closing cuts the reserve off"
        );
    }

    #[test]
    fn memfs_maps_files_for_reading() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/db")).unwrap();
        let mut f = fs.create(Path::new("/db/t")).unwrap();
        f.append(b"table bytes").unwrap();
        drop(f);
        let map = fs.open(Path::new("/db/t")).unwrap().map().unwrap();
        assert_eq!(map.bytes(), b"table bytes");
    }

    #[test]
    fn memfs_rename_is_durable_only_after_dir_sync() {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        fs.create_dir_all(dir).unwrap();
        let mut a = fs.create(&dir.join("tmp")).unwrap();
        a.append(b"x").unwrap();
        a.sync().unwrap();
        fs.sync_dir(dir).unwrap();
        fs.rename(&dir.join("tmp"), &dir.join("final")).unwrap();
        let after = fs.power_loss_copy();
        assert!(after.exists(&dir.join("tmp")));
        assert!(!after.exists(&dir.join("final")));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_mapped_log_keeps_every_byte_across_chunks_and_ends_at_its_length_synced_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut expect = Vec::new();
        {
            let mut log = StdFs.create_log(&path).unwrap();
            // Pieces of awkward sizes, so that some straddle the chunk boundaries.
            for i in 0..2_000usize {
                let piece: Vec<u8> = (0..(i * 37) % 3001 + 1).map(|j| (i + j) as u8).collect();
                // A record comes in pieces, as the log writer appends a header and payload.
                let (head, tail) = piece.split_at(piece.len() / 3);
                log.append(head).unwrap();
                log.append(tail).unwrap();
                expect.extend_from_slice(&piece);
                // Synced and flushed records mixed: a record after a synced one is gathered
                // and written with pwrite, one after a flushed one stored into the mapping.
                if i % 3 == 0 {
                    log.sync().unwrap();
                } else {
                    log.flush().unwrap();
                }
            }
            assert!(expect.len() > 2 * mapped::CHUNK);
            // While the log is open, the bytes are readable by others, zeros after them.
            let seen = StdFs.read_all(&path).unwrap();
            assert_eq!(&seen[..expect.len()], &expect[..]);
            assert!(seen[expect.len()..].iter().all(|&b| b == 0));
            // Appended after a sync and never flushed: closing the log writes it.
            log.sync().unwrap();
            log.append(b"last words").unwrap();
            expect.extend_from_slice(b"last words");
        }
        assert_eq!(StdFs.read_all(&path).unwrap(), expect);
    }

    #[test]
    fn locks_are_exclusive_until_dropped() {
        for fs in [
            Box::new(MemFs::new()) as Box<dyn FileSystem>,
            Box::new(StdFs) as Box<dyn FileSystem>,
        ] {
            let dir = tempfile::tempdir().unwrap();
            fs.create_dir_all(dir.path()).unwrap();
            let p = dir.path().join("LOCK");
            let l = fs.lock(&p).unwrap();
            assert_eq!(
                fs.lock(&p).err().map(|e| e.kind()),
                Some(io::ErrorKind::WouldBlock)
            );
            drop(l);
            fs.lock(&p).unwrap();
        }
    }
}

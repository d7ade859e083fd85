//! The file system seen by the engine. Every byte Strata reads or writes goes through
//! [`FileSystem`], so that tests can run on memory and inject faults.
//!
//! Two implementations live beside this file: [`StdFs`] on `std::fs` (`disk.rs`, with its
//! mapped WAL writer in `mapped.rs`), and [`MemFs`] (`mem.rs`), which keeps files in memory
//! and remembers what was synced, so that a test can throw away everything a power loss would
//! lose ([`MemFs::power_loss_copy`]). `fault.rs` wraps either to fail on purpose.

mod disk;
#[cfg(feature = "test-util")]
mod fault;
#[cfg(target_os = "linux")]
mod mapped;
mod mem;
#[cfg(test)]
mod tests;

pub use disk::StdFs;
#[cfg(feature = "test-util")]
pub use fault::{FaultFs, FaultOp};
pub use mem::MemFs;

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

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
    /// The file as it is open now, kept open for as long as the handle lives, for a file
    /// that may be closed and opened again between reads (the table cache's files): a read
    /// that goes around this trait through [`RandomAccessFile::raw_fd`] takes the descriptor
    /// from the handle. `None`: this file stays open as long as it lives.
    fn pinned(&self) -> Option<Arc<dyn RandomAccessFile>> {
        None
    }
    /// Tells the operating system that the file is read at random places
    /// (`POSIX_FADV_RANDOM`): a read brings in the pages it asks for and no more, where the
    /// kernel would otherwise take a read beside pages it holds for part of a sequential
    /// stream and read ahead of it, spending the device and the page cache on blocks no
    /// lookup wants. Reads in order then ask for what they will read next
    /// ([`RandomAccessFile::will_need`]).
    fn advise_random(&self) {}
    /// Asks the operating system to start reading `len` bytes at `offset` into its page
    /// cache (`POSIX_FADV_WILLNEED`), without waiting for them. A wrapper that forwards
    /// [`RandomAccessFile::advise_random`] must forward this too, or reads in order get no
    /// readahead at all.
    fn will_need(&self, _offset: u64, _len: u64) {}
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

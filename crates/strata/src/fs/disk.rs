//! [`StdFs`]: the real file system, through `std::fs`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use super::{FileLock, FileMap, FileSystem, PendingSync, RandomAccessFile, WritableFile};

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
    #[cfg(target_os = "linux")]
    fn advise_random(&self) {
        self.advise(0, 0, libc::POSIX_FADV_RANDOM);
    }
    #[cfg(target_os = "linux")]
    fn will_need(&self, offset: u64, len: u64) {
        self.advise(offset, len, libc::POSIX_FADV_WILLNEED);
    }
}

impl StdRandomAccess {
    /// Advice is a hint: a kernel that refuses it reads as before, so its answer is not
    /// looked at.
    #[cfg(target_os = "linux")]
    fn advise(&self, offset: u64, len: u64, advice: libc::c_int) {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len))
        else {
            return;
        };
        // SAFETY: posix_fadvise reads nothing from memory; the descriptor is this file's.
        unsafe { libc::posix_fadvise(self.file.as_raw_fd(), offset, len, advice) };
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
        if let Some(log) = super::mapped::MappedLog::create(path)? {
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

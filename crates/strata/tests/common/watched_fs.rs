//! `StdFs` with hooks on the calls a test watches: which thread removes a file, how many
//! table files are open at once.

use std::io;
use std::path::Path;
use std::sync::Arc;

use strata::{FileLock, FileSystem, RandomAccessFile, StdFs, WritableFile};

/// What a test watches; every call not hooked goes to `StdFs` unchanged.
pub trait Hooks: Send + Sync {
    /// A file was opened for reading: the handle the engine gets.
    fn opened(&self, _path: &Path, file: Arc<dyn RandomAccessFile>) -> Arc<dyn RandomAccessFile> {
        file
    }
    /// A file is about to be removed.
    fn removing(&self, _path: &Path) {}
    /// A file (not a log) is about to be created.
    fn creating(&self, _path: &Path) {}
}

/// `StdFs` with `hooks`.
pub struct WatchedFs<H> {
    pub fs: StdFs,
    pub hooks: H,
}

impl<H: Hooks> WatchedFs<H> {
    pub fn new(hooks: H) -> Self {
        WatchedFs { fs: StdFs, hooks }
    }
}

impl<H: Hooks> FileSystem for WatchedFs<H> {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.hooks.creating(path);
        self.fs.create(path)
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.fs.create_log(path)
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        Ok(self.hooks.opened(path, self.fs.open(path)?))
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.fs.read_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.fs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.hooks.removing(path);
        self.fs.remove(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.fs.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.fs.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.fs.remove_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.fs.exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.fs.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.fs.lock(path)
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.fs.file_size(path)
    }
}

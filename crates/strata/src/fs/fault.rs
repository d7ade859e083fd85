//! A file system that fails on purpose, for tests of what the engine promises when the disk
//! misbehaves: it wraps another [`FileSystem`] and makes chosen calls fail.
//!
//! Faults are armed per kind of call: fail the Nth call from now, fail every call (a disk
//! that has gone bad), or, for appends, write only part of the bytes before failing (a
//! short write). [`FaultFs::disk_full`] makes every append, create and rename fail with
//! `ENOSPC` until [`FaultFs::free_space`].

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::fs::{FileLock, FileMap, FileSystem, RandomAccessFile, WritableFile};

/// The kinds of calls a fault can be armed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultOp {
    /// `WritableFile::append`.
    Append,
    /// `WritableFile::sync`.
    Sync,
    /// `WritableFile::flush`: where buffered bytes reach the operating system.
    Flush,
    /// `FileSystem::create`.
    Create,
    /// `FileSystem::rename`.
    Rename,
    /// `FileSystem::remove`.
    Remove,
    /// `RandomAccessFile::read_at` and `FileSystem::read_all`.
    Read,
    /// `FileSystem::sync_dir`.
    SyncDir,
}

impl FaultOp {
    /// Every kind, in a fixed order.
    pub const ALL: [FaultOp; 8] = OPS;
}

const OPS: [FaultOp; 8] = [
    FaultOp::Append,
    FaultOp::Sync,
    FaultOp::Flush,
    FaultOp::Create,
    FaultOp::Rename,
    FaultOp::Remove,
    FaultOp::Read,
    FaultOp::SyncDir,
];

fn index(op: FaultOp) -> usize {
    OPS.iter().position(|o| *o == op).unwrap_or(0)
}

#[derive(Default)]
struct Armed {
    /// Calls of this kind left before the fault fires (`None`: not armed).
    countdown: Option<u64>,
    /// Fail every call once fired, instead of only one.
    sticky: bool,
    fired: bool,
    /// For appends: write this share (in percent) of the bytes before failing.
    short_write_percent: Option<u8>,
}

struct State {
    /// Creates of paths ending so wait while the gate is closed.
    gate: Mutex<Option<String>>,
    gate_cv: std::sync::Condvar,
    /// Creates waiting at the gate now.
    held: AtomicU64,
    armed: Mutex<[Armed; 8]>,
    calls: [AtomicU64; 8],
    faults: AtomicU64,
    disk_full: AtomicBool,
}

/// A [`FileSystem`] wrapper that injects failures. Cloning shares the fault state.
#[derive(Clone)]
pub struct FaultFs {
    inner: Arc<dyn FileSystem>,
    state: Arc<State>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultFs")
            .field("faults", &self.faults_injected())
            .finish_non_exhaustive()
    }
}

enum Verdict {
    Pass,
    Fail,
    Short(u8),
}

impl FaultFs {
    /// Wraps `inner`, with no fault armed.
    pub fn new(inner: Arc<dyn FileSystem>) -> Self {
        FaultFs {
            inner,
            state: Arc::new(State {
                gate: Mutex::new(None),
                gate_cv: std::sync::Condvar::new(),
                held: AtomicU64::new(0),
                armed: Mutex::new(Default::default()),
                calls: Default::default(),
                faults: AtomicU64::new(0),
                disk_full: AtomicBool::new(false),
            }),
        }
    }

    fn armed(&self) -> std::sync::MutexGuard<'_, [Armed; 8]> {
        self.state.armed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the `n`th call of kind `op` from now fail (`n = 1`: the next one). With `sticky`,
    /// every later call of that kind fails too.
    pub fn fail_nth(&self, op: FaultOp, n: u64, sticky: bool) {
        let mut a = self.armed();
        a[index(op)] = Armed {
            countdown: Some(n.max(1)),
            sticky,
            fired: false,
            short_write_percent: None,
        };
    }

    /// Makes the `n`th append from now write only `percent` of its bytes, then fail.
    pub fn short_write_nth(&self, n: u64, percent: u8) {
        let mut a = self.armed();
        a[index(FaultOp::Append)] = Armed {
            countdown: Some(n.max(1)),
            sticky: false,
            fired: false,
            short_write_percent: Some(percent.min(99)),
        };
    }

    /// Makes every create of a path ending in `suffix` wait until [`FaultFs::open_gate`]
    /// (to hold flushes back, for example, while writes go on).
    pub fn close_gate(&self, suffix: &str) {
        *self.state.gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(suffix.to_string());
    }

    /// Lets the creates held by [`FaultFs::close_gate`] go on.
    pub fn open_gate(&self) {
        *self.state.gate.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.state.gate_cv.notify_all();
    }

    fn wait_at_gate(&self, path: &Path) {
        let name = path.to_string_lossy();
        let mut gate = self.state.gate.lock().unwrap_or_else(|e| e.into_inner());
        if !gate.as_deref().is_some_and(|s| name.ends_with(s)) {
            return;
        }
        self.state.held.fetch_add(1, Ordering::SeqCst);
        while gate.as_deref().is_some_and(|s| name.ends_with(s)) {
            gate = self
                .state
                .gate_cv
                .wait(gate)
                .unwrap_or_else(|e| e.into_inner());
        }
        self.state.held.fetch_sub(1, Ordering::SeqCst);
    }

    /// Creates waiting at the closed gate now: how a test knows that a background job has
    /// reached its first output file.
    pub fn held_at_gate(&self) -> u64 {
        self.state.held.load(Ordering::SeqCst)
    }

    /// Disarms every fault and frees the disk.
    pub fn clear(&self) {
        *self.armed() = Default::default();
        self.state.disk_full.store(false, Ordering::SeqCst);
    }

    /// Every append, create and rename fails with `ENOSPC` until [`FaultFs::free_space`].
    pub fn disk_full(&self) {
        self.state.disk_full.store(true, Ordering::SeqCst);
    }

    /// Ends [`FaultFs::disk_full`].
    pub fn free_space(&self) {
        self.state.disk_full.store(false, Ordering::SeqCst);
    }

    /// Calls of kind `op` seen so far.
    pub fn calls(&self, op: FaultOp) -> u64 {
        self.state.calls[index(op)].load(Ordering::SeqCst)
    }

    /// Faults injected so far.
    pub fn faults_injected(&self) -> u64 {
        self.state.faults.load(Ordering::SeqCst)
    }

    fn check(&self, op: FaultOp) -> Verdict {
        self.state.calls[index(op)].fetch_add(1, Ordering::SeqCst);
        if self.state.disk_full.load(Ordering::SeqCst)
            && matches!(op, FaultOp::Append | FaultOp::Create | FaultOp::Rename)
        {
            self.state.faults.fetch_add(1, Ordering::SeqCst);
            return Verdict::Fail;
        }
        let mut armed = self.armed();
        let a = &mut armed[index(op)];
        if a.fired && a.sticky {
            self.state.faults.fetch_add(1, Ordering::SeqCst);
            return Verdict::Fail;
        }
        match a.countdown {
            Some(1) => {
                a.countdown = None;
                a.fired = true;
                self.state.faults.fetch_add(1, Ordering::SeqCst);
                match a.short_write_percent {
                    Some(p) => Verdict::Short(p),
                    None => Verdict::Fail,
                }
            }
            Some(n) => {
                a.countdown = Some(n - 1);
                Verdict::Pass
            }
            None => Verdict::Pass,
        }
    }

    fn error(&self, op: FaultOp) -> io::Error {
        if self.state.disk_full.load(Ordering::SeqCst) {
            io::Error::from_raw_os_error(28) // ENOSPC
        } else {
            io::Error::other(format!("injected fault on {op:?}"))
        }
    }

    fn gate(&self, op: FaultOp) -> io::Result<()> {
        match self.check(op) {
            Verdict::Pass => Ok(()),
            Verdict::Fail | Verdict::Short(_) => Err(self.error(op)),
        }
    }
}

impl FaultFs {
    /// A file made by `create` on the inner file system, behind the create gate and with
    /// faults injected into its writes.
    fn wrap_created(
        &self,
        path: &Path,
        create: impl FnOnce(&dyn FileSystem) -> io::Result<Box<dyn WritableFile>>,
    ) -> io::Result<Box<dyn WritableFile>> {
        self.wait_at_gate(path);
        self.gate(FaultOp::Create)?;
        Ok(Box::new(FaultWritable {
            inner: create(self.inner.as_ref())?,
            fs: self.clone(),
        }))
    }
}

struct FaultWritable {
    inner: Box<dyn WritableFile>,
    fs: FaultFs,
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        match self.fs.check(FaultOp::Append) {
            Verdict::Pass => self.inner.append(data),
            Verdict::Fail => Err(self.fs.error(FaultOp::Append)),
            Verdict::Short(p) => {
                // A short write(2): the bytes it took are in the operating system's hands.
                let n = data.len() * usize::from(p) / 100;
                self.inner.append(data.get(..n).unwrap_or_default())?;
                self.inner.flush()?;
                Err(self.fs.error(FaultOp::Append))
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        self.fs.gate(FaultOp::Flush)?;
        self.inner.flush()
    }
    fn sync(&mut self) -> io::Result<()> {
        self.fs.gate(FaultOp::Sync)?;
        self.inner.sync()
    }
}

struct FaultReader {
    inner: Arc<dyn RandomAccessFile>,
    fs: FaultFs,
}

impl RandomAccessFile for FaultReader {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.fs.gate(FaultOp::Read)?;
        self.inner.read_at(offset, len)
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    /// Mapping the file counts as a read: a fault makes the mapping fail, and the engine
    /// reads the file with `read_at` instead. (A read through a mapping cannot fail with an
    /// error; a disk that fails under one kills the process with `SIGBUS`.)
    fn map(&self) -> Option<Arc<FileMap>> {
        match self.fs.check(FaultOp::Read) {
            Verdict::Pass => self.inner.map(),
            Verdict::Fail | Verdict::Short(_) => None,
        }
    }
    fn advise_random(&self) {
        self.inner.advise_random();
    }
    fn will_need(&self, offset: u64, len: u64) {
        self.inner.will_need(offset, len);
    }
}

impl FileSystem for FaultFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.wrap_created(path, |fs| fs.create(path))
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.wrap_created(path, |fs| fs.create_log(path))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        Ok(Arc::new(FaultReader {
            inner: self.inner.open(path)?,
            fs: self.clone(),
        }))
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.gate(FaultOp::Read)?;
        self.inner.read_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.gate(FaultOp::Rename)?;
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.gate(FaultOp::Remove)?;
        self.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        self.gate(FaultOp::Remove)?;
        self.inner.remove_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.gate(FaultOp::SyncDir)?;
        self.inner.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.inner.file_size(path)
    }
}

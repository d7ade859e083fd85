//! [`MemFs`]: files in memory, with what a power loss would keep.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{FileLock, FileMap, FileSystem, PendingSync, RandomAccessFile, WritableFile};
use crate::mutex::lock;

/// The page size of the simulated disk: a power loss keeps or loses unsynced bytes a whole
/// page at a time, as the page cache writes them back.
pub(super) const MEM_PAGE: usize = 4096;

/// How far a [`MemFs`] log file is reserved ahead of its end with zeros, as the mapped log
/// of [`StdFs`] reserves chunks (smaller here, to keep copies cheap).
pub(super) const MEM_LOG_RESERVE: usize = 64 * 1024;

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
/// are reserved ahead with zeros, as [`StdFs`](crate::StdFs) reserves its mapped logs, and
/// files can be mapped for reading ([`RandomAccessFile::map`]), so tests run the engine's
/// production paths.
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

    /// Applies `f` to the bytes of an existing file (for corruption tests; with the
    /// `test-util` feature).
    #[cfg(feature = "test-util")]
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

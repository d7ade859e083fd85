//! The table cache's bound on open files: at most `Options::max_open_files` table files hold
//! a descriptor at once.
//!
//! An open table keeps its metadata (filter, index, mapping) for as long as its file is in
//! the tree, but its descriptor only while it is in use. Each table reads its file through a
//! [`ReopeningFile`], which opens the file on demand. When more files are open than the
//! bound allows, a clock hand passes over them: a file read since the hand last passed is
//! spared (and marked unread), the first one not read is closed. A read of a closed file opens
//! it again, transparently. A read in flight holds its own handle on the descriptor, so a
//! file closed by the hand stays open until that read is done; the hand may therefore leave a
//! few more descriptors open for a moment, never more than the reads in flight.
//!
//! Tables read through a mapping touch their descriptor only to map the file, so a database
//! whose tables are mapped holds few descriptors whatever its size.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::fs::{FileMap, FileSystem, RandomAccessFile};
use crate::mutex::lock;

/// The default bound: half the descriptors the process may open (its `RLIMIT_NOFILE` soft
/// limit), leaving the rest to the WAL, the MANIFEST, directories and, in a server, sockets;
/// at least 64.
pub(crate) fn default_max_open_files() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, which lives for the call.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let soft = if ok { limit.rlim_cur } else { 1024 };
    usize::try_from(soft / 2).unwrap_or(usize::MAX).max(64)
}

/// The open table files of a database and the bound on them.
pub(crate) struct OpenFiles {
    limit: usize,
    /// Files holding a descriptor now (each counted once, while its slot is filled).
    open: AtomicUsize,
    clock: Mutex<Clock>,
}

#[derive(Default)]
struct Clock {
    files: Vec<Weak<ReopeningFile>>,
    hand: usize,
    /// The length past which entries of tables gone are dropped.
    prune_at: usize,
}

impl OpenFiles {
    pub(crate) fn new(limit: usize) -> Arc<OpenFiles> {
        Arc::new(OpenFiles {
            limit: limit.max(1),
            open: AtomicUsize::new(0),
            clock: Mutex::new(Clock::default()),
        })
    }

    /// Table files that hold a descriptor now.
    pub(crate) fn open_now(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// `file` has just been opened: counts it, and closes others past the bound.
    fn opened(&self, file: &Arc<ReopeningFile>) {
        self.open.fetch_add(1, Ordering::Relaxed);
        let mut clock = lock(&self.clock);
        if !file.tracked.swap(true, Ordering::Relaxed) {
            clock.files.push(Arc::downgrade(file));
            // Entries of tables gone are dropped when the hand meets them; a clock that
            // never turns (fewer files than the bound) drops them here, each time it has
            // doubled since, so that it stays about the size of the tables there are.
            if clock.files.len() > clock.prune_at {
                clock.files.retain(|w| w.strong_count() > 0);
                clock.hand = 0;
                clock.prune_at = 2 * clock.files.len() + 64;
            }
        }
        // Two passes spare every file once; after them every file is unread, so this ends.
        let mut steps = 2 * clock.files.len();
        while self.open.load(Ordering::Relaxed) > self.limit && steps > 0 && !clock.files.is_empty()
        {
            steps -= 1;
            let at = clock.hand % clock.files.len();
            let Some(f) = clock.files.get(at).and_then(Weak::upgrade) else {
                // The table is gone: so is its entry.
                clock.files.swap_remove(at);
                continue;
            };
            clock.hand = at + 1;
            if Arc::ptr_eq(&f, file) || f.read.swap(false, Ordering::Relaxed) {
                continue;
            }
            f.close();
        }
    }
}

/// A table's file, open while in use (see the module's comment).
pub(crate) struct ReopeningFile {
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    size: u64,
    files: Arc<OpenFiles>,
    /// The open file, if it is open.
    slot: Mutex<Option<Arc<dyn RandomAccessFile>>>,
    /// Read since the clock hand last passed.
    read: AtomicBool,
    /// Has an entry in the clock.
    tracked: AtomicBool,
    this: Weak<ReopeningFile>,
}

impl ReopeningFile {
    /// Opens the file at `path` (an error here is the open's error), counted in `files`.
    pub(crate) fn open(
        fs: Arc<dyn FileSystem>,
        path: PathBuf,
        files: &Arc<OpenFiles>,
    ) -> io::Result<Arc<ReopeningFile>> {
        let file = fs.open(&path)?;
        file.advise_random();
        let size = file.size()?;
        let f = Arc::new_cyclic(|this| ReopeningFile {
            fs,
            path,
            size,
            files: files.clone(),
            slot: Mutex::new(Some(file)),
            read: AtomicBool::new(true),
            tracked: AtomicBool::new(false),
            this: this.clone(),
        });
        files.opened(&f);
        Ok(f)
    }

    /// The open file, opened again if the clock hand closed it.
    fn file(&self) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.read.store(true, Ordering::Relaxed);
        let mut slot = lock(&self.slot);
        if let Some(f) = slot.as_ref() {
            return Ok(f.clone());
        }
        let f = self.fs.open(&self.path)?;
        f.advise_random();
        *slot = Some(f.clone());
        drop(slot);
        if let Some(this) = self.this.upgrade() {
            self.files.opened(&this);
        }
        Ok(f)
    }

    /// Lets the descriptor go (reads in flight keep theirs until they end).
    fn close(&self) {
        if lock(&self.slot).take().is_some() {
            self.files.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether the file holds a descriptor now.
    #[cfg(test)]
    fn is_open(&self) -> bool {
        lock(&self.slot).is_some()
    }
}

impl Drop for ReopeningFile {
    fn drop(&mut self) {
        if self
            .slot
            .get_mut()
            .map(|s| s.take().is_some())
            .unwrap_or_else(|e| e.into_inner().take().is_some())
        {
            self.files.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl RandomAccessFile for ReopeningFile {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.file()?.read_at(offset, len)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.size)
    }

    fn map(&self) -> Option<Arc<FileMap>> {
        // The mapping outlives the descriptor it was made from.
        self.file().ok()?.map()
    }

    fn pinned(&self) -> Option<Arc<dyn RandomAccessFile>> {
        self.file().ok()
    }

    /// Only a file open now takes the hint: a hint is not a read, so it neither opens the
    /// file again nor counts as a use of it for the clock hand.
    fn will_need(&self, offset: u64, len: u64) {
        let open = lock(&self.slot).clone();
        if let Some(f) = open {
            f.will_need(offset, len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use std::path::Path;

    fn files(n: usize, limit: usize) -> (Arc<OpenFiles>, Vec<Arc<ReopeningFile>>) {
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/t")).unwrap();
        let open = OpenFiles::new(limit);
        let mut out = Vec::new();
        for i in 0..n {
            let path = PathBuf::from(format!("/t/{i}"));
            let mut w = fs.create(&path).unwrap();
            w.append(format!("file {i:04}").as_bytes()).unwrap();
            w.sync().unwrap();
            drop(w);
            out.push(ReopeningFile::open(fs.clone(), path, &open).unwrap());
        }
        (open, out)
    }

    #[test]
    fn no_more_files_stay_open_than_the_bound_and_every_read_is_right() {
        let (open, files) = files(40, 8);
        assert!(open.open_now() <= 8, "{} open", open.open_now());
        for round in 0..3 {
            for (i, f) in files.iter().enumerate().rev() {
                assert_eq!(f.read_at(0, 9).unwrap(), format!("file {i:04}").as_bytes());
                assert!(
                    open.open_now() <= 8,
                    "round {round}: {} open",
                    open.open_now()
                );
            }
        }
        assert_eq!(
            open.open_now(),
            files.iter().filter(|f| f.is_open()).count()
        );
    }

    #[test]
    fn dropped_files_give_their_count_back() {
        let (open, files) = files(10, 4);
        assert_eq!(open.open_now(), 4);
        drop(files);
        assert_eq!(open.open_now(), 0);
    }

    #[test]
    fn entries_of_tables_gone_do_not_pile_up() {
        let (open, files) = files(1, 1000);
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/u")).unwrap();
        let path = PathBuf::from("/u/f");
        fs.create(&path).unwrap().sync().unwrap();
        for _ in 0..2000 {
            drop(ReopeningFile::open(fs.clone(), path.clone(), &open).unwrap());
        }
        let entries = lock(&open.clock).files.len();
        assert!(
            entries <= 2 * 64 + 2,
            "{entries} entries for {} files",
            files.len()
        );
    }
}

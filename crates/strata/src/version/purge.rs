//! Deleting the tables compaction left behind, off the readers' threads.
//!
//! A compacted table's file is deleted when the last reference to it drops, and that may be a
//! reader's: a lookup or an iterator that held the old version. Closing the table (unmapping
//! its file) and unlinking it are system calls a reader should not wait for, so while the
//! database runs, the last reference hands the table to the purge thread (`strata-purge`),
//! which closes and deletes it. Before the thread starts and after it stops (a database
//! opening or closing, or tables used without a database), the last reference deletes the
//! file itself, as then no reader waits.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use crate::cache::BlockCache;
use crate::fs::FileSystem;
use crate::key::FileNumber;
use crate::mutex::lock;
use crate::sstable::reader::Table;

/// A compacted table waiting to be deleted.
pub(crate) struct Obsolete {
    pub number: FileNumber,
    pub path: PathBuf,
    /// The open table, if it was opened: closed (and unmapped) before its file is deleted.
    pub table: Option<Arc<Table>>,
}

#[derive(Default)]
struct Queue {
    files: Vec<Obsolete>,
    /// A purge thread takes what is handed over.
    running: bool,
    /// The purge thread is asked to finish.
    stop: bool,
    /// Tables handed to the purge thread, and those it has deleted, since it started.
    handed: u64,
    deleted: u64,
}

/// The hand-over between the last references of compacted tables and the purge thread.
#[derive(Default)]
pub(crate) struct Purge {
    queue: Mutex<Queue>,
    cv: Condvar,
}

impl Purge {
    /// Deletes `o`: on the purge thread while one runs, else here and now.
    pub(crate) fn hand_over(&self, fs: &dyn FileSystem, cache: &BlockCache, o: Obsolete) {
        let mut q = lock(&self.queue);
        if q.running {
            q.files.push(o);
            q.handed += 1;
            self.cv.notify_all();
            return;
        }
        drop(q);
        delete(fs, cache, o);
    }

    /// The purge thread's loop: deletes what is handed over until [`Purge::stop`], then what
    /// is left.
    pub(crate) fn run(&self, fs: &dyn FileSystem, cache: &BlockCache) {
        let mut q = lock(&self.queue);
        q.running = true;
        loop {
            while q.files.is_empty() && !q.stop {
                q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
            if q.files.is_empty() {
                // Stopped with nothing left: from now on the last reference deletes.
                q.running = false;
                q.stop = false;
                self.cv.notify_all();
                return;
            }
            let files = std::mem::take(&mut q.files);
            let n = files.len() as u64;
            drop(q);
            for o in files {
                // A panic while deleting one (in a file system of the user's) loses that
                // deletion, which the next open makes (it removes files no version names),
                // and not the thread: waits for the purge would otherwise never end.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(|| delete(fs, cache, o)));
            }
            q = lock(&self.queue);
            q.deleted += n;
            self.cv.notify_all();
        }
    }

    /// Waits until every table handed over before the call is deleted (not those handed
    /// over meanwhile): a call that compacted or dropped tables returns with the files of
    /// those no reader holds gone.
    pub(crate) fn wait_idle(&self) {
        let mut q = lock(&self.queue);
        let target = q.handed;
        while q.running && q.deleted < target {
            q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Asks the purge thread to delete what is left and end.
    pub(crate) fn stop(&self) {
        lock(&self.queue).stop = true;
        self.cv.notify_all();
    }
}

/// Closes a compacted table and deletes its file and its cached blocks. A failure leaves a
/// stray file behind, which the next open removes.
fn delete(fs: &dyn FileSystem, cache: &BlockCache, o: Obsolete) {
    drop(o.table);
    let _ = fs.remove(&o.path);
    cache.erase_file(o.number.0);
}

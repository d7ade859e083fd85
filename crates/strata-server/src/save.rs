//! SAVE and BGSAVE: a checkpoint of the database in `DIR/checkpoint`, which opens as a
//! database of its own (`strata scan DIR/checkpoint`, or a server started on it). Each save
//! replaces the last one whole: it is written beside it as `checkpoint.tmp` and renamed into
//! place. One save runs at a time, in the command's thread for SAVE and in the saver thread
//! for BGSAVE.

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::sync::atomic::{AtomicBool, Ordering};

use strata::Db;

/// The name of the checkpoint in the data directory.
pub(crate) const CHECKPOINT: &str = "checkpoint";

#[derive(Default)]
struct State {
    /// A BGSAVE asked for and not begun.
    requested: bool,
    /// A save is being written.
    running: bool,
    /// Unix seconds of the last save that succeeded (the server's start before any).
    last_save_unix: u64,
    /// Whether the last BGSAVE succeeded.
    last_bgsave_ok: bool,
    /// The database's sequence number when the last save that succeeded began.
    last_save_seq: u64,
}

/// What SAVE, BGSAVE, LASTSAVE and INFO share.
pub(crate) struct Saves {
    state: Mutex<State>,
    cv: Condvar,
}

/// What BGSAVE answers.
pub(crate) enum Background {
    Started,
    Scheduled,
    AlreadyRunning,
}

impl Saves {
    pub(crate) fn new(started_unix: u64, seq: u64) -> Saves {
        Saves {
            state: Mutex::new(State {
                last_save_unix: started_unix,
                last_bgsave_ok: true,
                last_save_seq: seq,
                ..State::default()
            }),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// SAVE: writes the checkpoint of `db` into `dir` now, unless a save is under way or asked
    /// for.
    pub(crate) fn save(&self, db: &Db, dir: &Path) -> Result<(), String> {
        {
            let mut st = self.lock();
            if st.running || st.requested {
                return Err("ERR Background save already in progress".into());
            }
            st.running = true;
        }
        let result = self.run(db, dir);
        let mut st = self.lock();
        st.running = false;
        self.cv.notify_all();
        result
    }

    /// BGSAVE: asks the saver thread for a save; with `schedule`, one under way makes it
    /// wait for that one to end rather than fail.
    pub(crate) fn background(&self, schedule: bool) -> Background {
        let mut st = self.lock();
        if st.running || st.requested {
            if schedule {
                st.requested = true;
                return Background::Scheduled;
            }
            return Background::AlreadyRunning;
        }
        st.requested = true;
        self.cv.notify_all();
        Background::Started
    }

    /// The saver thread: runs each BGSAVE asked for (a checkpoint of `db` into `dir`), until
    /// `shutdown` is set.
    pub(crate) fn saver_loop(&self, db: &Db, dir: &Path, shutdown: &AtomicBool) {
        loop {
            let mut st = self.lock();
            while !st.requested || st.running {
                if shutdown.load(Ordering::SeqCst) {
                    return;
                }
                st = self
                    .cv
                    .wait_timeout(st, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            st.requested = false;
            st.running = true;
            drop(st);
            let ok = self.run(db, dir).is_ok();
            let mut st = self.lock();
            st.running = false;
            st.last_bgsave_ok = ok;
            self.cv.notify_all();
        }
    }

    /// Wakes the saver thread to see the shutdown.
    pub(crate) fn wake(&self) {
        self.cv.notify_all();
    }

    /// Unix seconds of the last save that succeeded.
    pub(crate) fn last_save_unix(&self) -> u64 {
        self.lock().last_save_unix
    }

    /// For INFO: (a save running, the last BGSAVE's status, the sequence number then).
    pub(crate) fn info(&self) -> (bool, bool, u64) {
        let st = self.lock();
        (st.running, st.last_bgsave_ok, st.last_save_seq)
    }

    fn run(&self, db: &Db, dir: &Path) -> Result<(), String> {
        let seq = db.snapshot().sequence();
        write_checkpoint(db, dir)?;
        let mut st = self.lock();
        st.last_save_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        st.last_save_seq = seq;
        Ok(())
    }
}

/// Writes `dir/checkpoint.tmp` and renames it over `dir/checkpoint`.
fn write_checkpoint(db: &Db, dir: &Path) -> Result<(), String> {
    let path = |suffix: &str| -> PathBuf { dir.join(format!("{CHECKPOINT}{suffix}")) };
    let (tmp, old, target) = (path(".tmp"), path(".old"), path(""));
    let err = |what: &str, p: &Path, e: std::io::Error| format!("ERR {what} {}: {e}", p.display());
    // A save cut short between its two renames left the last checkpoint as `.old`.
    if !target.exists() && old.exists() {
        std::fs::rename(&old, &target).map_err(|e| err("renaming", &old, e))?;
    }
    for leftover in [&tmp, &old] {
        if leftover.exists() {
            std::fs::remove_dir_all(leftover).map_err(|e| err("removing", leftover, e))?;
        }
    }
    db.checkpoint(&tmp).map_err(|e| format!("ERR {e}"))?;
    if target.exists() {
        std::fs::rename(&target, &old).map_err(|e| err("renaming", &target, e))?;
    }
    std::fs::rename(&tmp, &target).map_err(|e| err("renaming", &tmp, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| err("syncing", dir, e))?;
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(|e| err("removing", &old, e))?;
    }
    Ok(())
}

//! What SPOP remembers of the sets it draws from: runs of members known to be gone, so that
//! the next pop seeks past them (the walk is in `commands/set_pops.rs`). Kept by version,
//! each set's entry read and written under its stripe lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What pops remember of one set.
#[derive(Default)]
pub(crate) struct Gaps {
    /// Start member to end member, both included: no live member lies in between.
    pub runs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// A member at least as large as every live member.
    pub top: Vec<u8>,
}

/// The most sets remembered at once; past it, all are forgotten.
const MAX_SETS: usize = 4096;

/// What pops remember of every set, by version.
#[derive(Default)]
pub(crate) struct SetGaps {
    sets: Mutex<HashMap<u64, Gaps>>,
    /// How many sets `sets` holds (0: SADD need not look).
    in_use: AtomicUsize,
}

impl SetGaps {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Gaps>> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called for every member added to set `version`: a gap that holds it goes, and the
    /// upper bound rises to it.
    pub(crate) fn added(&self, version: u64, member: &[u8]) {
        // Relaxed: a set's entry is read and written under its stripe lock, which orders them.
        if self.in_use.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut all = self.lock();
        let Some(g) = all.get_mut(&version) else {
            return;
        };
        if let Some((start, end)) = g.runs.range(..=member.to_vec()).next_back()
            && end.as_slice() >= member
        {
            let start = start.clone();
            g.runs.remove(&start);
        }
        if member > g.top.as_slice() {
            g.top = member.to_vec();
        }
    }

    /// Takes what is remembered of set `version`, for a pop to change and [`SetGaps::keep`].
    pub(crate) fn take(&self, version: u64) -> Option<Gaps> {
        self.lock().remove(&version)
    }

    pub(crate) fn keep(&self, version: u64, g: Gaps) {
        let mut all = self.lock();
        if all.len() >= MAX_SETS {
            all.clear();
        }
        all.insert(version, g);
        self.in_use.store(all.len(), Ordering::Relaxed);
    }

    /// Forgets every set (a write that failed may have left gaps that hold live members).
    pub(crate) fn forget_all(&self) {
        let mut all = self.lock();
        all.clear();
        self.in_use.store(0, Ordering::Relaxed);
    }

    /// Forgets set `version` (emptied, or its gaps no longer trusted).
    pub(crate) fn forget(&self, version: u64) {
        if self.in_use.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut all = self.lock();
        all.remove(&version);
        self.in_use.store(all.len(), Ordering::Relaxed);
    }
}

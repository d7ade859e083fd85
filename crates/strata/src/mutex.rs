//! Locking a mutex whatever another thread did while holding it.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`. Poisoning only means that another thread panicked while holding the lock; the
/// engine tracks its own consistency (a database's background error, a file's synced length),
/// so carry on with the data as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

//! The connections as CLIENT LIST, CLIENT INFO and CLIENT KILL see them from any worker: each
//! connection's fixed facts, the time and name of its last command (two atomics, written as
//! it runs), and the few facts that change now and then (name, user, database, protocol,
//! transaction, subscriptions), which the connection publishes when one of them changes.
//!
//! A connection lives on one worker, in that worker's memory; CLIENT KILL from another
//! worker marks it here and wakes its worker, which closes it ([`Clients::take_kills`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// One connection, as the others see it.
pub(crate) struct ClientInfo {
    pub id: u64,
    /// The peer's address and the server's end, as `ip:port`.
    pub addr: String,
    pub laddr: String,
    pub fd: i64,
    /// The worker that serves it.
    pub worker: usize,
    pub since: Instant,
    /// When it last sent bytes, in milliseconds after `since`.
    last: AtomicU64,
    /// Its last command: its row of the command table plus one (0: none yet).
    cmd: AtomicUsize,
    /// CLIENT KILL asked for it to be closed; its worker has not yet.
    kill: AtomicBool,
    shown: Mutex<Shown>,
}

/// What a connection publishes when it changes.
#[derive(Clone, Default)]
pub(crate) struct Shown {
    pub name: Vec<u8>,
    pub user: String,
    pub db: u8,
    pub resp: u8,
    /// Commands queued since MULTI (-1: no transaction open).
    pub multi: i64,
    pub sub: usize,
    pub psub: usize,
    pub ssub: usize,
    /// The last command's subcommand, for commands that have them (`client|list`).
    pub sub_cmd: String,
    pub no_evict: bool,
    pub monitor: bool,
}

impl ClientInfo {
    pub(crate) fn new(id: u64, worker: usize, addr: String, laddr: String, fd: i64) -> Self {
        ClientInfo {
            id,
            addr,
            laddr,
            fd,
            worker,
            since: Instant::now(),
            last: AtomicU64::new(0),
            cmd: AtomicUsize::new(0),
            kill: AtomicBool::new(false),
            shown: Mutex::new(Shown {
                user: "default".into(),
                resp: 2,
                multi: -1,
                ..Shown::default()
            }),
        }
    }

    /// It sent bytes at `at`. Relaxed: a figure read on its own.
    pub(crate) fn seen(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.since).as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }

    /// It ran the command of row `row` of the command table.
    pub(crate) fn ran(&self, row: usize) {
        self.cmd.store(row + 1, Ordering::Relaxed);
    }

    /// The row of its last command, if it ran one.
    pub(crate) fn last_command(&self) -> Option<usize> {
        self.cmd.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Seconds since it connected, and since it last sent bytes.
    pub(crate) fn age_and_idle(&self, now: Instant) -> (u64, u64) {
        let age = now.saturating_duration_since(self.since).as_millis() as u64;
        let last = self.last.load(Ordering::Relaxed);
        (age / 1000, age.saturating_sub(last) / 1000)
    }

    pub(crate) fn shown(&self) -> MutexGuard<'_, Shown> {
        self.shown.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marked by CLIENT KILL.
    pub(crate) fn killed(&self) -> bool {
        self.kill.load(Ordering::Acquire)
    }
}

/// CLIENT PAUSE: until when (milliseconds after the server started, 0: no pause) and
/// whether every command waits or only those that write.
#[derive(Default)]
pub(crate) struct Pause {
    until_ms: AtomicU64,
    all: AtomicBool,
}

impl Pause {
    /// Pauses until `until_ms` (after the server started; `now_ms` is now). A pause in
    /// force is lengthened, never shortened, and a pause of every command stays one until it
    /// ends; a pause that has run out is replaced whole.
    pub(crate) fn start(&self, now_ms: u64, until_ms: u64, all: bool) {
        let before = self.until_ms.load(Ordering::Acquire);
        if before <= now_ms {
            self.all.store(all, Ordering::Release);
            self.until_ms.store(until_ms, Ordering::Release);
            return;
        }
        self.all.fetch_or(all, Ordering::AcqRel);
        self.until_ms.fetch_max(until_ms, Ordering::AcqRel);
    }

    /// Whether a pause was started and not ended (it may have run out).
    pub(crate) fn started(&self) -> bool {
        self.until_ms.load(Ordering::Relaxed) != 0
    }

    pub(crate) fn end(&self) {
        self.until_ms.store(0, Ordering::Release);
        self.all.store(false, Ordering::Release);
    }

    /// The pause in force at `now_ms`: how long it has left, and whether it holds every
    /// command.
    pub(crate) fn in_force(&self, now_ms: u64) -> Option<(u64, bool)> {
        let until = self.until_ms.load(Ordering::Acquire);
        (until > now_ms).then(|| (until - now_ms, self.all.load(Ordering::Acquire)))
    }
}

/// Every open connection, by client ID.
#[derive(Default)]
pub(crate) struct Clients {
    /// CLIENT PAUSE.
    pub pause: Pause,
    all: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    /// Connections marked by CLIENT KILL that their workers have not closed: while 0, a
    /// woken worker need not look for any.
    kills: AtomicUsize,
}

impl Clients {
    fn map(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<ClientInfo>>> {
        self.all.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn add(&self, info: Arc<ClientInfo>) {
        self.map().insert(info.id, info);
    }

    /// The connection closed.
    pub(crate) fn remove(&self, info: &ClientInfo) {
        let mut map = self.map();
        map.remove(&info.id);
        if info.kill.swap(false, Ordering::AcqRel) {
            self.kills.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Every open connection, in the order of their IDs.
    pub(crate) fn list(&self) -> Vec<Arc<ClientInfo>> {
        self.map().values().cloned().collect()
    }

    /// Marks `info` to be closed by its worker; the caller wakes the worker.
    pub(crate) fn mark_killed(&self, info: &ClientInfo) {
        // Under the map's lock, as `remove` takes it: a connection that has closed already
        // is not counted, so the count never stays above what the workers will find.
        let map = self.map();
        if map.contains_key(&info.id) && !info.kill.swap(true, Ordering::AcqRel) {
            self.kills.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether any connection waits to be closed by CLIENT KILL.
    pub(crate) fn kills_pending(&self) -> bool {
        self.kills.load(Ordering::Acquire) > 0
    }
}

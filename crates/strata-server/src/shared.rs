//! The state every connection and background thread shares: [`Shared`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use strata::Db;

use crate::acl::{self, User};
use crate::config::{Config, SyncMode};
use crate::hotcache::HotCache;
use crate::save;
use crate::store::Clock;
use crate::tls::TlsFiles;

pub(crate) const STRIPES: usize = 1024;
const MAX_SCAN_CURSORS: usize = 100_000;

#[derive(Default)]
pub(crate) struct Counters {
    pub connections_received: AtomicU64,
    pub connected: AtomicUsize,
    pub rejected: AtomicU64,
    pub commands: AtomicU64,
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    pub protocol_errors: AtomicU64,
    /// Connections closed for a request past `client-query-buffer-limit`.
    pub query_buffer_closed: AtomicU64,
    /// Connections closed for unread replies past `client-output-buffer-limit`.
    pub output_buffer_closed: AtomicU64,
    pub expired_keys: AtomicU64,
}

/// State shared by every connection.
pub(crate) struct Shared {
    pub db: Db,
    /// The versions new collections are stored under.
    pub versions: crate::store::Versions,
    /// The prefix each database's keys are stored under (SWAPDB changes it).
    pub databases: crate::store::Databases,
    pub config: Config,
    pub clock: Clock,
    pub cache: HotCache,
    /// Per-key locks for read-modify-write commands, chosen by hash.
    pub stripes: Vec<Mutex<()>>,
    /// FLUSHALL takes it for writing; every command that touches keys, for reading.
    pub keyspace: RwLock<()>,
    pub counters: Counters,
    /// Users and the log of refusals.
    pub acl: RwLock<acl::Acl>,
    /// Bumped by every change of a user, so that connections pick up the change.
    pub acl_generation: AtomicU64,
    /// `protected-mode`, which CONFIG SET may change.
    pub protected_mode: AtomicBool,
    /// The TLS port's files and the configuration made of them; CONFIG SET of a file reads
    /// them again, for the connections that come after.
    pub tls: Mutex<Option<(TlsFiles, Arc<rustls::ServerConfig>)>>,
    /// The TLS port, when one is served.
    pub tls_port: Option<u16>,
    /// `client-query-buffer-limit`, which CONFIG SET may change.
    pub query_buffer_limit: AtomicUsize,
    /// The hard `client-output-buffer-limit` of normal clients (0: none).
    pub output_buffer_limit: AtomicUsize,
    /// `tcp-keepalive` in seconds, for connections accepted from now on.
    pub tcp_keepalive: AtomicU64,
    /// One row per row of the command table.
    pub command_stats: Vec<CommandStats>,
    pub started: Instant,
    /// SAVE, BGSAVE and LASTSAVE.
    pub saves: save::Saves,
    pub run_id: u128,
    pub shutdown: AtomicBool,
    /// SHUTDOWN asked for the server to stop: the main thread stops it as on SIGTERM.
    pub shutdown_requested: AtomicBool,
    /// SCAN cursors: cursor number to the database and key to continue after.
    pub cursors: Mutex<CursorTable>,
    pub port: u16,
    /// Settings CONFIG SET may change while the server runs.
    pub max_clients: AtomicUsize,
    pub max_bulk_bytes: AtomicUsize,
    /// 0: never.
    pub idle_timeout_ms: AtomicU64,
    pub(crate) sync: AtomicU8,
    pub(crate) next_client_id: AtomicU64,
    pub(crate) random: AtomicU64,
    /// The active-expiry cycle removed every index entry due before this time (Unix ms).
    pub expiry_floor: AtomicU64,
    /// The shape parameters CONFIG SET changed (`commands::config::SHAPES`).
    pub shapes: Mutex<HashMap<&'static str, i64>>,
    /// The connections blocking commands parked, by key.
    pub blocking: Mutex<Blocking>,
    /// How many connections are parked (0: writes need not look at `blocking`).
    pub parked: AtomicUsize,
    /// For sorted sets popped from (by version, and whether from the high end), the score
    /// key of the last member popped: no member lies beyond it, so the next pop seeks past
    /// the deleted ones instead of walking over their tombstones. Kept under the set's
    /// stripe lock by ZPOPMIN/ZPOPMAX, dropped by any write of a member beyond it.
    pub pop_edges: Mutex<HashMap<(u64, bool), Vec<u8>>>,
    /// For sets SPOP draws from, the runs of members known to be gone
    /// (`commands/set_pops.rs`).
    pub set_gaps: crate::set_gaps::SetGaps,
    /// Each worker's waker, by index, set once the workers run.
    pub wakers: std::sync::OnceLock<Vec<Arc<mio::Waker>>>,
    /// Pub/sub's subscribers and the messages on their way to them.
    pub pubsub: crate::pubsub::PubSub,
    /// The `pubsub` class of `client-output-buffer-limit`: the hard limit, the soft one and
    /// its seconds (0: none).
    pub pubsub_output_limit: [AtomicUsize; 3],
    /// Error replies of commands, by their code (`INFO errorstats`).
    pub error_stats: Mutex<std::collections::BTreeMap<String, u64>>,
    /// `notify-keyspace-events`, as `crate::notify` reads it (0: off).
    pub notify_flags: std::sync::atomic::AtomicU32,
    /// Lua: EVAL's script cache and FUNCTION's libraries.
    pub scripts: crate::scripting::Scripts,
    /// Where workers hand scripts to the script thread.
    pub script_jobs: std::sync::OnceLock<Mutex<std::sync::mpsc::Sender<ScriptJob>>>,
    /// Scripts' replies, for their workers to take.
    pub script_done: Mutex<Vec<ScriptDone>>,
    /// Every open connection, for CLIENT LIST and CLIENT KILL.
    pub clients: crate::clients::Clients,
    /// Subcommands' statistics, the slow log and the latency monitor.
    pub stats: crate::stats::Stats,
    /// This server's primary, when it is a replica, and its own replicas.
    pub replication: crate::replication::state::Replication,
    /// Compaction drops expired values (off on a replica, whose keys expire by its
    /// primary's deletions).
    pub expiry_filter: Arc<AtomicBool>,
    /// The server itself, for the threads it starts while it runs (a replica's link).
    pub me: std::sync::OnceLock<std::sync::Weak<Shared>>,
}

#[derive(Default)]
pub(crate) struct CursorTable {
    pub next: u64,
    pub map: HashMap<u64, (u8, Vec<u8>)>,
    pub order: std::collections::VecDeque<u64>,
}

impl Shared {
    // Relaxed throughout: settings and counters, each read on its own.
    pub(crate) fn sync_mode(&self) -> SyncMode {
        match self.sync.load(Ordering::Relaxed) {
            0 => SyncMode::Always,
            1 => SyncMode::EverySec,
            _ => SyncMode::No,
        }
    }

    pub(crate) fn set_sync_mode(&self, mode: SyncMode) {
        let n = match mode {
            SyncMode::Always => 0,
            SyncMode::EverySec => 1,
            SyncMode::No => 2,
        };
        self.sync.store(n, Ordering::Relaxed);
    }

    /// The TLS configuration new connections to the TLS port get.
    pub(crate) fn tls_config(&self) -> Option<Arc<rustls::ServerConfig>> {
        let tls = self.tls.lock().unwrap_or_else(|e| e.into_inner());
        tls.as_ref().map(|(_, c)| c.clone())
    }

    pub(crate) fn new_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A pseudo-random number (xorshift), for RANDOMKEY.
    pub(crate) fn random_seed(&self) -> u64 {
        let mut x = self.random.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random.store(x, Ordering::Relaxed);
        x
    }

    /// Counts an error reply under its code (its first word).
    pub(crate) fn count_error(&self, line: &str) {
        let code = line.split(' ').next().unwrap_or_default();
        let mut stats = self.error_stats.lock().unwrap_or_else(|e| e.into_inner());
        *stats.entry(code.to_string()).or_default() += 1;
    }

    pub(crate) fn reset_stats(&self) {
        self.error_stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        for s in &self.command_stats {
            s.reset();
        }
        self.stats.subcommands.reset();
        let c = &self.counters;
        for n in [
            &c.commands,
            &c.keyspace_hits,
            &c.keyspace_misses,
            &c.protocol_errors,
            &c.expired_keys,
            &c.rejected,
        ] {
            n.store(0, Ordering::Relaxed);
        }
    }

    /// The user named `name`, as the ACL holds it now.
    pub(crate) fn user(&self, name: &str) -> Option<Arc<User>> {
        self.acl
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .users
            .get(name)
            .cloned()
    }

    /// A new SCAN cursor that names `key` in database `db` (a client key, or a collection's
    /// member), to continue after; the oldest cursors expire.
    pub(crate) fn new_cursor(&self, db: u8, key: Vec<u8>) -> u64 {
        let mut table = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        table.next += 1;
        let id = table.next;
        table.map.insert(id, (db, key));
        table.order.push_back(id);
        while table.order.len() > MAX_SCAN_CURSORS {
            if let Some(old) = table.order.pop_front() {
                table.map.remove(&old);
            }
        }
        id
    }

    pub(crate) fn stripe(&self, key: &[u8]) -> usize {
        let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
        for &b in key {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        (h as usize) % STRIPES
    }
}

pub(crate) use crate::stats::CommandStats;

/// What a command asks of the connection.
pub(crate) enum After {
    Continue,
    Close,
    /// Park the connection until one of the keys is written or the deadline passes, then run
    /// the command again.
    Block(Block),
    /// A script (EVAL, FCALL): the worker hands it to the script thread and serves its other
    /// connections while it runs; the reply comes back through [`Shared::script_done`].
    Script,
    /// PSYNC: the worker hands the connection's socket to the replication threads.
    Replicate(Box<crate::replication::state::Handoff>),
}

/// A script handed to the script thread: it runs with the server.
pub(crate) type ScriptJob = Box<dyn FnOnce(&Shared) + Send>;

/// A script's reply on its way back: the worker, the connection's slot and ID, the bytes.
pub(crate) type ScriptDone = (usize, usize, u64, Vec<u8>);

/// A parked command: the engine keys whose writes may let it through, and when it gives up.
pub(crate) struct Block {
    pub keys: Vec<Vec<u8>>,
    pub deadline: Option<Instant>,
    /// The command to run again, when not the one that parked (XREAD's `$` made IDs).
    pub argv: Option<Vec<Vec<u8>>>,
}

/// A connection waiting on a key: its worker, its slot there, and its place in line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Waiter {
    pub worker: usize,
    pub client: usize,
    pub ticket: u64,
}

/// The connections parked on each key, in the order they blocked, and for each worker the
/// parked connections whose keys were written since it last looked.
#[derive(Default)]
pub(crate) struct Blocking {
    waiters: HashMap<Vec<u8>, Vec<Waiter>>,
    ready: HashMap<usize, Vec<Waiter>>,
    next_ticket: u64,
    /// The worker of each parked connection, by client ID (CLIENT UNBLOCK).
    workers: HashMap<u64, usize>,
    /// For each worker, the parked connections CLIENT UNBLOCK asked to let go: client ID,
    /// and whether with an error rather than as a timeout.
    unblocks: HashMap<usize, Vec<(u64, bool)>>,
}

impl Blocking {
    /// Parks connection `id` (slot `client` of `worker`) on `keys`; returns its ticket.
    pub(crate) fn park(&mut self, worker: usize, client: usize, id: u64, keys: &[Vec<u8>]) -> u64 {
        self.workers.insert(id, worker);
        self.next_ticket += 1;
        let w = Waiter {
            worker,
            client,
            ticket: self.next_ticket,
        };
        for k in keys {
            let line = self.waiters.entry(k.clone()).or_default();
            if !line.contains(&w) {
                line.push(w);
            }
        }
        w.ticket
    }

    /// Asks the worker of parked connection `id` to let it go; false when it is not parked.
    pub(crate) fn request_unblock(&mut self, id: u64, error: bool) -> Option<usize> {
        let worker = *self.workers.get(&id)?;
        self.unblocks.entry(worker).or_default().push((id, error));
        Some(worker)
    }

    /// The CLIENT UNBLOCK requests for `worker`'s parked connections.
    pub(crate) fn take_unblocks(&mut self, worker: usize) -> Vec<(u64, bool)> {
        self.unblocks.remove(&worker).unwrap_or_default()
    }

    /// Takes parked connection `id` off every line.
    pub(crate) fn unpark(&mut self, w: Waiter, id: u64, keys: &[Vec<u8>]) {
        self.workers.remove(&id);
        if let Some(asked) = self.unblocks.get_mut(&w.worker) {
            asked.retain(|&(x, _)| x != id);
        }
        self.leave_lines(w, keys);
    }

    fn leave_lines(&mut self, w: Waiter, keys: &[Vec<u8>]) {
        for k in keys {
            if let Some(line) = self.waiters.get_mut(k) {
                line.retain(|x| *x != w);
                if line.is_empty() {
                    self.waiters.remove(k);
                }
            }
        }
    }

    /// Moves parked connection `w` from the lines of keys `from` to those of `to`, keeping
    /// its ticket.
    pub(crate) fn move_lines(&mut self, w: Waiter, from: &[Vec<u8>], to: &[Vec<u8>]) {
        self.leave_lines(w, from);
        for k in to {
            let line = self.waiters.entry(k.clone()).or_default();
            if !line.contains(&w) {
                line.push(w);
                line.sort_unstable_by_key(|x| x.ticket);
            }
        }
    }

    /// Has parked connection `w` look again, as if its keys were written.
    pub(crate) fn make_ready(&mut self, w: Waiter) {
        self.ready.entry(w.worker).or_default().push(w);
    }

    /// The parked connections of `worker` whose keys were written, in ticket order.
    pub(crate) fn take_ready(&mut self, worker: usize) -> Vec<Waiter> {
        let mut ready = self.ready.remove(&worker).unwrap_or_default();
        ready.sort_unstable_by_key(|w| w.ticket);
        ready.dedup();
        ready
    }
}

impl Shared {
    /// Wakes worker `w` (for messages published to its connections, or writes that let a
    /// parked one through).
    pub(crate) fn wake_worker(&self, w: usize) {
        if let Some(waker) = self.wakers.get().and_then(|all| all.get(w)) {
            let _ = waker.wake();
        }
    }

    /// Tells every parked connection that its keys may have changed (FLUSHDB, FLUSHALL).
    pub(crate) fn notify_all_parked(&self) {
        if self.parked.load(Ordering::Acquire) == 0 {
            return;
        }
        let keys: Vec<Vec<u8>> = {
            let b = self.blocking.lock().unwrap_or_else(|e| e.into_inner());
            b.waiters.keys().cloned().collect()
        };
        self.notify_written(&keys);
    }

    /// Tells the parked connections waiting on any of `keys` that it was written, waking their
    /// workers. Costs one atomic load when no connection is parked.
    pub(crate) fn notify_written(&self, keys: &[Vec<u8>]) {
        // Acquire: pairs with the release of a worker that parks a connection.
        if self.parked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut workers = Vec::new();
        {
            let mut b = self.blocking.lock().unwrap_or_else(|e| e.into_inner());
            let Blocking { waiters, ready, .. } = &mut *b;
            for k in keys {
                for w in waiters.get(k).into_iter().flatten() {
                    ready.entry(w.worker).or_default().push(*w);
                    workers.push(w.worker);
                }
            }
        }
        workers.sort_unstable();
        workers.dedup();
        for w in workers {
            self.wake_worker(w);
        }
    }
}

//! A server that speaks the Redis protocol (RESP2 and RESP3) over a Strata database, so that
//! redis-cli, redis-benchmark and every Redis client library work with it unchanged.
//!
//! Sixteen databases (`SELECT 0` to `15`) and key expiry are laid out in the engine as the
//! `store` module describes. Expired keys are invisible to reads at once; an active-expiry
//! thread removes those that nothing reads, and compaction drops what is left of them
//! through the engine's compaction filter.
//!
//! A few worker threads each poll their share of the connections (the `net` module); requests
//! of a connection are answered in order and may be pipelined. Commands that read and then
//! write a key (SETNX, INCR, APPEND, SET NX/XX, GETDEL, and every write, which must keep the
//! hot-key cache coherent) hold that key's stripe lock, so they are atomic with respect to
//! each other; reads that hit the hot-key cache take no stripe lock.
//!
//! ```no_run
//! let config = strata_server::Config { dir: "./data".into(), ..Default::default() };
//! let server = strata_server::Server::start(config)?;
//! println!("listening on {}", server.local_addr());
//! server.wait_for_signal()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod acl;
mod commands;
mod glob;
mod hotcache;
mod net;
pub mod resp;
mod save;
mod store;
mod tls;

pub use store::Clock;
pub use tls::{ClientAuth, TlsFiles};

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use strata::{Db, Options};

use crate::hotcache::HotCache;

/// When writes become durable, in Redis's `appendfsync` words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Every write is fsynced before its reply.
    Always,
    /// The WAL is fsynced once a second; a power loss loses at most about a second.
    EverySec,
    /// The operating system decides; a process crash loses nothing, a power loss may.
    No,
}

impl std::str::FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(SyncMode::Always),
            "everysec" => Ok(SyncMode::EverySec),
            "no" => Ok(SyncMode::No),
            other => Err(format!(
                "unknown sync mode {other:?} (always, everysec or no)"
            )),
        }
    }
}

/// How the server runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The database directory (created if missing).
    pub dir: PathBuf,
    /// Address to listen on.
    pub bind: String,
    /// Port to listen on (0 picks a free one).
    pub port: u16,
    /// Durability of writes.
    pub sync: SyncMode,
    /// Connections beyond this are refused with an error.
    pub max_clients: usize,
    /// A bulk string longer than this gets an error and the connection is closed.
    pub max_request_bytes: usize,
    /// Close connections idle this long (`None`: never).
    pub idle_timeout: Option<Duration>,
    /// Bytes of the hot-key cache (0 turns it off).
    pub cache_bytes: usize,
    /// Worker threads serving connections (0: half the CPUs, at least one).
    pub threads: usize,
    /// Engine options (the directory's database is opened with them; the server adds its
    /// compaction filter, which drops expired keys).
    pub engine: Options,
    /// The clock expiry is judged by.
    pub clock: Clock,
    /// How often the active-expiry cycle looks for due keys (`None`: never; reads still
    /// hide expired keys, and compaction still removes them).
    pub active_expiry: Option<Duration>,
    /// The `default` user's password (`requirepass`): clients must `AUTH` with it.
    pub requirepass: Option<String>,
    /// The file ACL users are loaded from at start and by `ACL LOAD`, and saved to by
    /// `ACL SAVE`.
    pub aclfile: Option<PathBuf>,
    /// Refuse clients from other hosts while `default` has no password. (Bound to the
    /// loopback address, the server has no clients from other hosts to refuse.)
    pub protected_mode: bool,
    /// Serve plain TCP on `port` (off: only the TLS port, as Redis's `--port 0`).
    pub plain: bool,
    /// The TLS port (0 picks a free one), when TLS is served.
    pub tls_port: Option<u16>,
    /// A connection whose unparsed input passes this many bytes is closed.
    pub query_buffer_limit: usize,
    /// A connection whose unread replies pass this many bytes is closed (0: no limit).
    pub output_buffer_limit: usize,
    /// Seconds of silence before TCP keepalive probes a connection (0: none).
    pub tcp_keepalive: u64,
    /// The certificate, key and client-certificate settings of the TLS port.
    pub tls: Option<TlsFiles>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dir: PathBuf::from("strata-data"),
            bind: "127.0.0.1".into(),
            port: 6380,
            sync: SyncMode::EverySec,
            max_clients: 10_000,
            max_request_bytes: 512 * 1024 * 1024,
            idle_timeout: None,
            cache_bytes: 64 * 1024 * 1024,
            threads: 0,
            engine: Options::default(),
            clock: Clock::system(),
            active_expiry: Some(Duration::from_millis(100)),
            requirepass: None,
            aclfile: None,
            protected_mode: true,
            plain: true,
            tls_port: None,
            tls: None,
            // Redis's defaults: 1 GiB, and no hard limit for normal clients.
            query_buffer_limit: 1 << 30,
            output_buffer_limit: 0,
            // Redis's default.
            tcp_keepalive: 300,
        }
    }
}

const STRIPES: usize = 1024;

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
    pub command_stats: Vec<commands::CommandStats>,
    pub started: Instant,
    /// SAVE, BGSAVE and LASTSAVE.
    pub saves: save::Saves,
    pub run_id: u128,
    pub shutdown: AtomicBool,
    /// SCAN cursors: cursor number to the database and key to continue after.
    pub cursors: Mutex<CursorTable>,
    pub port: u16,
    /// Settings CONFIG SET may change while the server runs.
    pub max_clients: AtomicUsize,
    pub max_bulk_bytes: AtomicUsize,
    /// 0: never.
    pub idle_timeout_ms: AtomicU64,
    sync: AtomicU8,
    next_client_id: AtomicU64,
    random: AtomicU64,
    /// The active-expiry cycle removed every index entry due before this time (Unix ms).
    pub expiry_floor: AtomicU64,
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

    pub(crate) fn reset_stats(&self) {
        for s in &self.command_stats {
            s.calls.store(0, Ordering::Relaxed);
            s.micros.store(0, Ordering::Relaxed);
            s.rejected.store(0, Ordering::Relaxed);
            s.failed.store(0, Ordering::Relaxed);
        }
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

    pub(crate) fn stripe(&self, key: &[u8]) -> usize {
        let mut h: u64 = 0x9e37_79b9_7f4a_7c15;
        for &b in key {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        (h as usize) % STRIPES
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    accept: Option<JoinHandle<()>>,
    syncer: Option<JoinHandle<()>>,
    saver: Option<JoinHandle<()>>,
    workers: Arc<Vec<net::WorkerHandle>>,
}

impl Server {
    /// Opens the database and starts listening.
    pub fn start(config: Config) -> Result<Server, String> {
        let mut engine = config.engine.clone();
        let filter_enabled = Arc::new(AtomicBool::new(false));
        engine.compaction_filter = Some(Arc::new(store::ExpiryFilter {
            clock: config.clock.clone(),
            enabled: filter_enabled.clone(),
        }));
        let db = Db::open(&config.dir, engine).map_err(|e| e.to_string())?;
        store::prepare_layout(&db)?;
        // Release: compactions that see the flag see the converted layout.
        filter_enabled.store(true, Ordering::Release);
        let mut users = acl::Acl::new();
        if let Some(path) = &config.aclfile {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the ACL file {}: {e}", path.display()))?;
            let default = users.users.remove("default");
            users.users = acl::Acl::parse_file(&text, &path.display().to_string())?;
            // A file without `default` leaves it as a fresh server has it.
            if let Some(d) = default {
                users.users.entry("default".into()).or_insert(d);
            }
        }
        if let Some(pass) = &config.requirepass {
            acl::set_requirepass(&mut users, pass.as_bytes());
        }
        let tls_config = match (&config.tls, config.tls_port) {
            (Some(files), Some(_)) => Some((files.clone(), tls::server_config(files)?)),
            (None, Some(_)) => {
                return Err("--tls-port needs --tls-cert-file and --tls-key-file".into());
            }
            _ => None,
        };
        let listen = |port: u16| -> Result<(TcpListener, SocketAddr), String> {
            let listener = TcpListener::bind((config.bind.as_str(), port))
                .map_err(|e| format!("cannot listen on {}:{port}: {e}", config.bind))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok((listener, addr))
        };
        let mut listeners = Vec::new();
        let mut addr = None;
        if config.plain {
            let (l, a) = listen(config.port)?;
            listeners.push((l, false));
            addr = Some(a);
        }
        let mut tls_addr = None;
        if let Some(port) = config.tls_port {
            let (l, a) = listen(port)?;
            listeners.push((l, true));
            tls_addr = Some(a);
        }
        let addr = addr
            .or(tls_addr)
            .ok_or("nothing to listen on: the plain port is off and no --tls-port is given")?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let saves = save::Saves::new(now.as_secs(), db.snapshot().sequence());
        let shared = Arc::new(Shared {
            db,
            clock: config.clock.clone(),
            cache: HotCache::new(config.cache_bytes),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            keyspace: RwLock::new(()),
            counters: Counters::default(),
            acl: RwLock::new(users),
            acl_generation: AtomicU64::new(0),
            protected_mode: AtomicBool::new(config.protected_mode),
            tls: Mutex::new(tls_config),
            tls_port: tls_addr.map(|a| a.port()),
            query_buffer_limit: AtomicUsize::new(config.query_buffer_limit),
            output_buffer_limit: AtomicUsize::new(config.output_buffer_limit),
            tcp_keepalive: AtomicU64::new(config.tcp_keepalive),
            command_stats: commands::TABLE.iter().map(|_| Default::default()).collect(),
            started: Instant::now(),
            saves,
            run_id: now.as_nanos() ^ (u128::from(std::process::id()) << 64),
            shutdown: AtomicBool::new(false),
            cursors: Mutex::new(CursorTable::default()),
            port: addr.port(),
            max_clients: AtomicUsize::new(config.max_clients),
            max_bulk_bytes: AtomicUsize::new(config.max_request_bytes),
            idle_timeout_ms: AtomicU64::new(
                config.idle_timeout.map_or(0, |t| t.as_millis() as u64),
            ),
            sync: AtomicU8::new(0),
            next_client_id: AtomicU64::new(0),
            random: AtomicU64::new((now.as_nanos() as u64) | 1),
            expiry_floor: AtomicU64::new(0),
            config,
        });
        shared.set_sync_mode(shared.config.sync);
        let threads = match shared.config.threads {
            // Half the CPUs: the rest is left to the engine's flush and compaction threads.
            0 => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
            n => n,
        };
        let workers: Vec<net::WorkerHandle> = (0..threads)
            .map(|i| net::WorkerHandle::spawn(shared.clone(), i))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
        let workers = Arc::new(workers);
        let accept = {
            let shared = shared.clone();
            let workers = workers.clone();
            let poll = mio::Poll::new().map_err(|e| e.to_string())?;
            std::thread::Builder::new()
                .name("strata-accept".into())
                .spawn(move || net::accept_loop(listeners, shared, workers, poll))
                .map_err(|e| e.to_string())?
        };
        // Once a second, the WAL is synced when the mode (which CONFIG SET may change) is
        // everysec; and every `active_expiry`, due keys are removed.
        let syncer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("strata-background".into())
                .spawn(move || background(&shared))
                .map_err(|e| e.to_string())?
        };
        // BGSAVE's checkpoints.
        let saver = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("strata-save".into())
                .spawn(move || shared.saves.saver_loop(&shared))
                .map_err(|e| e.to_string())?
        };
        Ok(Server {
            shared,
            addr,
            tls_addr,
            accept: Some(accept),
            syncer: Some(syncer),
            saver: Some(saver),
            workers,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the TLS port, when one is served.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Blocks until SIGINT or SIGTERM, then shuts down cleanly.
    pub fn wait_for_signal(self) -> Result<(), String> {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, flag.clone())
                .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
        }
        while !flag.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.shutdown()
    }

    /// Stops accepting, lets connections finish the replies they owe, flushes the memtable
    /// and closes the database.
    pub fn shutdown(mut self) -> Result<(), String> {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        if let Some(t) = self.syncer.take() {
            let _ = t.join();
        }
        // A BGSAVE under way finishes first.
        self.shared.saves.wake();
        if let Some(t) = self.saver.take() {
            let _ = t.join();
        }
        for w in self.workers.iter() {
            w.wake();
        }
        // The acceptor is joined, so this is the last handle to the workers.
        if let Some(workers) = Arc::get_mut(&mut self.workers) {
            for w in workers.iter_mut() {
                w.join();
            }
        }
        self.shared.db.flush().map_err(|e| e.to_string())?;
        self.shared.db.sync_wal().map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The server's background duties: the everysec WAL sync and the active-expiry cycle.
fn background(shared: &Shared) {
    /// Time one round of active expiry may take when many keys are due (Redis gives its
    /// cycle a quarter of a core).
    const EXPIRY_BUDGET: Duration = Duration::from_millis(25);
    /// The expiry cycle's floor goes back to the start this often, for a clock that went back.
    const FLOOR_RESET: Duration = Duration::from_secs(10);
    let mut last_sync = Instant::now();
    let mut last_expiry = Instant::now();
    let mut last_floor_reset = Instant::now();
    while !shared.shutdown.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if shared.sync_mode() == SyncMode::EverySec && last_sync.elapsed() >= Duration::from_secs(1)
        {
            // A failure poisons the database; writes then report it.
            let _ = shared.db.sync_wal();
            last_sync = Instant::now();
        }
        if let Some(every) = shared.config.active_expiry
            && last_expiry.elapsed() >= every
        {
            if last_floor_reset.elapsed() >= FLOOR_RESET {
                shared.expiry_floor.store(0, Ordering::Relaxed);
                last_floor_reset = Instant::now();
            }
            let started = Instant::now();
            // An error (a poisoned database) is reported to the writes that follow.
            while let Ok((_, true)) = commands::expire_cycle(shared, shared.clock.now_ms()) {
                if started.elapsed() >= EXPIRY_BUDGET || shared.shutdown.load(Ordering::SeqCst) {
                    break;
                }
            }
            last_expiry = Instant::now();
        }
    }
}

/// What a command asks of the connection.
pub(crate) enum After {
    Continue,
    Close,
}

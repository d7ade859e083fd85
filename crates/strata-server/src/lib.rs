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
mod clients;
mod commands;
pub mod conffile;
mod config;
mod glob;
mod hotcache;
mod net;
mod notify;
mod pubsub;
mod replication;
pub mod resp;
mod save;
mod scripting;
mod set_gaps;
mod shared;
mod stats;
mod store;
mod tls;

pub use config::{Config, SyncMode};
pub use store::Clock;
pub use tls::{ClientAuth, TlsFiles};

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use strata::Db;

use crate::hotcache::HotCache;
use crate::shared::{Counters, CursorTable, STRIPES, Shared};

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    accept: Option<JoinHandle<()>>,
    syncer: Option<JoinHandle<()>>,
    saver: Option<JoinHandle<()>>,
    scripts: Option<JoinHandle<()>>,
    workers: Arc<Vec<net::WorkerHandle>>,
}

/// The TLS port's files and the configuration made of them, when one is served.
fn tls_setup(config: &Config) -> Result<Option<(TlsFiles, Arc<rustls::ServerConfig>)>, String> {
    match (&config.tls, config.tls_port) {
        (Some(files), Some(_)) => Ok(Some((files.clone(), tls::server_config(files)?))),
        (None, Some(_)) => Err("--tls-port needs --tls-cert-file and --tls-key-file".into()),
        _ => Ok(None),
    }
}

/// The worker threads to serve connections with.
fn worker_threads(config: &Config) -> usize {
    match config.threads {
        // Half the CPUs: the rest is left to the engine's flush and compaction threads.
        0 => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
        n => n,
    }
}

impl Server {
    /// Opens the database and starts listening.
    pub fn start(config: Config) -> Result<Server, String> {
        let (db, backlog, expiry_filter) = open_database(&config)?;
        let users = load_users(&config)?;
        let tls_config = tls_setup(&config)?;
        let (listeners, addr, tls_addr) = listen_all(&config)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let saves = save::Saves::new(now.as_secs(), db.snapshot().sequence());
        let (notify_flags, threads) = (notify_flags(&config)?, worker_threads(&config));
        let shared = Arc::new(Shared {
            versions: store::Versions::open(&db)?,
            databases: store::Databases::open(&db)?,
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
            command_stats: commands::SPECS.iter().map(|_| Default::default()).collect(),
            started: Instant::now(),
            saves,
            run_id: now.as_nanos() ^ (u128::from(std::process::id()) << 64),
            shutdown: AtomicBool::new(false),
            shutdown_requested: AtomicBool::new(false),
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
            shapes: Mutex::new(Default::default()),
            blocking: Mutex::new(Default::default()),
            parked: AtomicUsize::new(0),
            pop_edges: Mutex::new(Default::default()),
            set_gaps: Default::default(),
            wakers: std::sync::OnceLock::new(),
            pubsub: pubsub::PubSub::new(threads),
            pubsub_output_limit: config.pubsub_output_limit.map(AtomicUsize::new),
            notify_flags: std::sync::atomic::AtomicU32::new(notify_flags),
            error_stats: Default::default(),
            scripts: scripting::Scripts::new()?,
            script_jobs: Default::default(),
            script_done: Default::default(),
            clients: Default::default(),
            stats: Default::default(),
            replication: replication::state::Replication::new(backlog, now.as_nanos()),
            me: std::sync::OnceLock::new(),
            expiry_filter,
            config,
        });
        commands::load_libraries(&shared)?;
        let _ = shared.me.set(Arc::downgrade(&shared));
        commands::apply_settings(&shared, &shared.config.settings)?;
        if let Some((host, port)) = &shared.config.replicaof {
            commands::become_replica(&shared, host, *port)?;
        }
        let scripts = Some(net::spawn_script_thread(shared.clone())?);
        shared.set_sync_mode(shared.config.sync);
        let workers: Vec<net::WorkerHandle> = (0..threads)
            .map(|i| net::WorkerHandle::spawn(shared.clone(), i))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
        let _ = shared
            .wakers
            .set(workers.iter().map(net::WorkerHandle::waker).collect());
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
                .spawn(move || {
                    let s = &shared;
                    s.saves.saver_loop(&s.db, &s.config.dir, &s.shutdown)
                })
                .map_err(|e| e.to_string())?
        };
        Ok(Server {
            shared,
            addr,
            tls_addr,
            accept: Some(accept),
            syncer: Some(syncer),
            saver: Some(saver),
            scripts,
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
        while !flag.load(Ordering::SeqCst) && !self.shared.shutdown_requested.load(Ordering::SeqCst)
        {
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
        // A script still running stops (its writes are not kept), and the script thread ends.
        self.shared.scripts.stop_now();
        if let Some(t) = self.scripts.take() {
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
        self.shared.replication.shut_down();
        self.shared.db.flush().map_err(|e| e.to_string())?;
        self.shared.db.sync_wal().map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// The database, the replication backlog its writes reach, and the switch of its expiry
/// filter.
type Opened = (Db, Arc<replication::Backlog>, Arc<AtomicBool>);

/// `--notify-keyspace-events`, checked.
fn notify_flags(config: &Config) -> Result<u32, String> {
    notify::parse(config.notify_keyspace_events.as_bytes()).ok_or_else(|| {
        format!(
            "--notify-keyspace-events {:?}: the letters are Ag$lshzxeKEtmdn",
            config.notify_keyspace_events
        )
    })
}

/// Opens the database with the expiry filter, and brings its layout up to date; the
/// replication backlog is told of its writes.
fn open_database(config: &Config) -> Result<Opened, String> {
    let mut engine = config.engine.clone();
    let backlog = Arc::new(replication::Backlog::new());
    engine.wal_listener = Some(backlog.clone());
    // Replicas that fell behind catch up from the WAL files kept.
    engine.wal_size_limit = config.repl_wal_keep_bytes;
    engine.wal_ttl = (config.repl_wal_keep_bytes > 0).then(|| Duration::from_secs(3600));
    let filter_enabled = Arc::new(AtomicBool::new(false));
    engine.compaction_filter = Some(Arc::new(store::ExpiryFilter {
        clock: config.clock.clone(),
        enabled: filter_enabled.clone(),
    }));
    let db = Db::open(&config.dir, engine).map_err(|e| e.to_string())?;
    store::prepare_layout(&db)?;
    // Release: compactions that see the flag see the converted layout.
    filter_enabled.store(true, Ordering::Release);
    Ok((db, backlog, filter_enabled))
}

/// The users: a fresh server's, or the ACL file's, with `requirepass` applied.
fn load_users(config: &Config) -> Result<acl::Acl, String> {
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
    Ok(users)
}

/// Listening sockets, each with whether it is the TLS port.
type Listeners = Vec<(TcpListener, bool)>;

/// The listening sockets, the address of the first and that of the TLS port.
fn listen_all(config: &Config) -> Result<(Listeners, SocketAddr, Option<SocketAddr>), String> {
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
    Ok((listeners, addr, tls_addr))
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
        // A client pause holds the expiry cycle too, as in Redis: it writes.
        if let Some(every) = shared.config.active_expiry
            && last_expiry.elapsed() >= every
            && !commands::pause_in_force(shared)
            // A replica's keys expire by its primary's deletions.
            && !shared.replication.replica()
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
            let took = started.elapsed().as_millis() as u64;
            shared.stats.latency.note("expire-cycle", took);
            last_expiry = Instant::now();
        }
    }
}

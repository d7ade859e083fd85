//! What replication keeps while the server runs: the role, the link to a primary, the
//! replicas attached, and the parameters; the threads that act on it are in `follower.rs`
//! and `primary.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::backlog::Backlog;

/// The replication state of a server.
pub(crate) struct Replication {
    /// Drawn at start: 40 hexadecimal digits.
    pub replid: String,
    /// The recent batches, for replicas that follow.
    pub backlog: Arc<Backlog>,
    /// The primary this server follows, when it is a replica.
    pub master: Mutex<Option<Link>>,
    /// A replica: refuse writes, leave expiry to the primary.
    pub is_replica: AtomicBool,
    /// A full copy is being loaded: commands are answered LOADING.
    pub loading: AtomicBool,
    /// A replica's primary changed its function libraries: they are read again before the
    /// next command.
    pub functions_stale: AtomicBool,
    /// The replicas attached to this server.
    pub replicas: Mutex<Vec<Arc<Attached>>>,
    pub settings: Settings,
    /// INFO stats: full copies served, partial resyncs accepted and refused.
    pub full_syncs: AtomicU64,
    pub partial_ok: AtomicU64,
    pub partial_err: AtomicU64,
    /// Those threads, joined at shutdown (they hold the database open).
    pub threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Replication {
    pub(crate) fn new(backlog: Arc<Backlog>, seed: u128) -> Replication {
        Replication {
            replid: replication_id(seed),
            backlog,
            master: Mutex::new(None),
            is_replica: AtomicBool::new(false),
            loading: AtomicBool::new(false),
            functions_stale: AtomicBool::new(false),
            replicas: Mutex::new(Vec::new()),
            settings: Settings::default(),
            full_syncs: AtomicU64::new(0),
            partial_ok: AtomicU64::new(0),
            partial_err: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Writes from clients are refused: a replica with `replica-read-only yes`.
    pub(crate) fn refuses_writes(&self) -> bool {
        // Relaxed: a role and a setting, each read on its own.
        self.is_replica.load(Ordering::Relaxed) && self.settings.read_only.load(Ordering::Relaxed)
    }

    /// A replica: expiry is the primary's.
    pub(crate) fn replica(&self) -> bool {
        self.is_replica.load(Ordering::Relaxed)
    }

    /// Runs `f` on a thread of its own, joined at shutdown.
    pub(crate) fn spawn(
        &self,
        name: &str,
        f: impl FnOnce() + Send + 'static,
    ) -> Result<(), String> {
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map_err(|e| format!("ERR cannot start a replication thread: {e}"))?;
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
        Ok(())
    }

    /// Stops following, ends every replica's link and waits for their threads.
    pub(crate) fn shut_down(&self) {
        if let Some(link) = self
            .master
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            link.stop();
        }
        for r in self.attached() {
            r.closed.store(true, Ordering::Release);
        }
        self.backlog.wake();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }

    pub(crate) fn attached(&self) -> Vec<Arc<Attached>> {
        self.replicas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// 40 hexadecimal digits from the server's start time and process, mixed.
fn replication_id(seed: u128) -> String {
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C834;
    let mut out = String::with_capacity(40);
    while out.len() < 40 {
        // splitmix-style steps, each giving 16 digits.
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = (x as u64) ^ ((x >> 64) as u64);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.push_str(&format!("{z:016x}"));
    }
    out.truncate(40);
    out
}

/// The parameters of `settings.rs`.
pub(crate) struct Settings {
    /// `replica-read-only`.
    pub read_only: AtomicBool,
    /// `replica-priority`: Sentinel promotes the lowest nonzero first.
    pub priority: AtomicU64,
    /// `min-replicas-to-write` (0: off) and `min-replicas-max-lag` (seconds).
    pub min_replicas: AtomicU64,
    pub min_replicas_max_lag: AtomicU64,
    /// `replica-announce-ip` (empty: the address the primary sees) and `-port` (0: own).
    pub announce_ip: Mutex<String>,
    pub announce_port: AtomicU64,
    /// `masterauth` and `masteruser`: how this replica logs in to its primary.
    pub masterauth: Mutex<Option<String>>,
    pub masteruser: Mutex<Option<String>>,
    /// `repl-timeout`: a link silent this long is dropped, in seconds.
    pub timeout_secs: AtomicU64,
    /// `replica-serve-stale-data`: answer reads while the link is down.
    pub serve_stale: AtomicBool,
    /// `tls-replication`: a replica connects to its primary's TLS port with the server's own
    /// certificate, trusting `tls-ca-cert-file`.
    pub tls: AtomicBool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            read_only: AtomicBool::new(true),
            priority: AtomicU64::new(100),
            min_replicas: AtomicU64::new(0),
            min_replicas_max_lag: AtomicU64::new(10),
            announce_ip: Mutex::new(String::new()),
            announce_port: AtomicU64::new(0),
            masterauth: Mutex::new(None),
            masteruser: Mutex::new(None),
            timeout_secs: AtomicU64::new(60),
            serve_stale: AtomicBool::new(true),
            tls: AtomicBool::new(false),
        }
    }
}

/// A replica attached to this server.
pub(crate) struct Attached {
    pub ip: String,
    /// The port it listens on (`REPLCONF listening-port`).
    pub port: AtomicU64,
    /// The offset it acknowledged applying.
    pub acked: AtomicU64,
    last_ack: Mutex<Instant>,
    /// Copied and streaming.
    streaming: AtomicBool,
    /// Asked for an acknowledgement (WAIT).
    pub getack: AtomicBool,
    /// The link is to end (its socket closed, CLIENT KILL, a role change, shutdown).
    pub closed: AtomicBool,
}

impl Attached {
    pub(crate) fn new(ip: String, port: u64) -> Attached {
        Attached {
            ip,
            port: AtomicU64::new(port),
            acked: AtomicU64::new(0),
            last_ack: Mutex::new(Instant::now()),
            streaming: AtomicBool::new(false),
            getack: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// Copied: it follows the batches from now on.
    pub(crate) fn streams(&self) {
        self.streaming.store(true, Ordering::Release);
    }

    /// It acknowledged `offset` just now.
    pub(crate) fn acknowledged(&self, offset: u64) {
        self.acked.fetch_max(offset, Ordering::AcqRel);
        *self.last_ack.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(crate) fn online(&self) -> bool {
        self.streaming.load(Ordering::Acquire) && !self.closed.load(Ordering::Acquire)
    }

    /// Seconds since its last acknowledgement.
    pub(crate) fn lag_secs(&self, now: Instant) -> u64 {
        let last = *self.last_ack.lock().unwrap_or_else(|e| e.into_inner());
        now.saturating_duration_since(last).as_secs()
    }
}

/// What PSYNC asked for: the primary's replication ID the replica followed and the first
/// offset it lacks (`None`: a full copy, SYNC or `PSYNC ? -1`).
pub(crate) struct Handoff {
    pub asked: Option<(String, u64)>,
    pub ip: String,
    pub port: u64,
}

/// What INFO and ROLE show of a replica's link.
#[derive(Default)]
pub(crate) struct LinkState {
    up: AtomicBool,
    /// The primary's offset applied.
    pub applied: AtomicU64,
    last_io: Mutex<Option<Instant>>,
    down_since: Mutex<Option<Instant>>,
    /// "connect", "connecting", "sync" or "connected", as ROLE says.
    phase: Mutex<&'static str>,
    /// The link's thread has ended.
    pub done: AtomicBool,
}

impl LinkState {
    pub(crate) fn up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub(crate) fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    pub(crate) fn phase(&self) -> &'static str {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn last_io_secs(&self) -> Option<u64> {
        let last = *self.last_io.lock().unwrap_or_else(|e| e.into_inner());
        last.map(|t| t.elapsed().as_secs())
    }

    pub(crate) fn down_secs(&self) -> u64 {
        let since = *self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        since.map_or(0, |t| t.elapsed().as_secs())
    }

    pub(crate) fn set_phase(&self, phase: &'static str) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase;
    }

    pub(crate) fn heard(&self) {
        *self.last_io.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    pub(crate) fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::Release);
        let mut since = self.down_since.lock().unwrap_or_else(|e| e.into_inner());
        *since = if up {
            None
        } else {
            since.or(Some(Instant::now()))
        };
    }
}

/// The link to the primary this server follows.
#[derive(Clone)]
pub(crate) struct Link {
    pub host: String,
    pub port: u16,
    pub state: Arc<LinkState>,
    stop: Arc<AtomicBool>,
}

impl Link {
    /// A link to `host:port`, not followed yet.
    pub(crate) fn new(host: &str, port: u16) -> Link {
        let link = Link {
            host: host.to_string(),
            port,
            state: Arc::new(LinkState::default()),
            stop: Arc::new(AtomicBool::new(false)),
        };
        link.state.set_phase("connect");
        link.state.set_up(false);
        link
    }

    /// Ends the link; its thread stops within a poll.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Waits for the link's thread to end, for at most a few seconds (a batch being written
    /// lands first).
    pub(crate) fn wait_stopped(&self) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while !self.state.done.load(Ordering::Acquire) {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// REPLICAOF ended it.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

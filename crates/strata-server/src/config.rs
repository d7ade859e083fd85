//! How the server runs: [`Config`], and the settings CONFIG SET may change at run time.

use std::path::PathBuf;
use std::time::Duration;

use strata::Options;

use crate::store::Clock;
use crate::tls::TlsFiles;

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
    /// The `pubsub` class of `client-output-buffer-limit`: a subscriber whose unread
    /// messages pass the hard limit (bytes), or stay past the soft limit (bytes) for the
    /// seconds given, is closed. 0: none.
    pub pubsub_output_limit: [usize; 3],
    /// `notify-keyspace-events` at start, in Redis's letters (empty: none).
    pub notify_keyspace_events: String,
    /// Seconds of silence before TCP keepalive probes a connection (0: none).
    pub tcp_keepalive: u64,
    /// The certificate, key and client-certificate settings of the TLS port.
    pub tls: Option<TlsFiles>,
    /// The configuration file the server was started from, which CONFIG REWRITE writes.
    pub config_file: Option<PathBuf>,
    /// Follow this primary (`--replicaof "HOST PORT"`, `replicaof` in the file).
    pub replicaof: Option<(String, u16)>,
    /// Bytes of WAL files kept, once their writes are in tables, for replicas that fall
    /// behind (kept an hour at most; 0 keeps none).
    pub repl_wal_keep_bytes: u64,
    /// Parameters set at start as CONFIG SET sets them (from the configuration file), each
    /// with its value.
    pub settings: Vec<(String, String)>,
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
            pubsub_output_limit: [32 << 20, 8 << 20, 60],
            notify_keyspace_events: String::new(),
            // Redis's default.
            tcp_keepalive: 300,
            config_file: None,
            replicaof: None,
            repl_wal_keep_bytes: 256 << 20,
            settings: Vec::new(),
        }
    }
}

/// The longest idle time the kernel takes for its first keepalive probe.
pub(crate) const MAX_KEEPALIVE_SECS: u64 = 32_767;

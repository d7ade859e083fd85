//! Replication: a primary streams its engine's write batches to its replicas, which apply
//! them in order.
//!
//! - **Offsets** are engine sequence numbers. A primary's offset is its engine's newest
//!   sequence number; a replica's is the primary's sequence number of the last batch it
//!   applied, stored in its own engine (`0xFF "replication"`, [`OFFSET_KEY`]) in the same
//!   batch as the writes it applied, so that a replica that restarts knows exactly where it
//!   stands.
//! - **A replica connects** (`follower.rs`), authenticates, announces its port and asks
//!   `PSYNC replid next` for the writes from `next` on. The primary (`primary.rs`) answers
//!   `+CONTINUE` when its memory backlog or its WAL files (kept for this, see
//!   `Options::wal_ttl`) still hold them, and streams the batches from there; else
//!   `+FULLRESYNC replid seq`, then every key and value of a snapshot at `seq`, then the
//!   batches after it.
//! - **Frames** after that line: a tag byte, a 4-byte little-endian length, the payload.
//!   The replica acknowledges with `REPLCONF ACK offset` in RESP, as Redis replicas do.
//! - **The replication ID** is drawn when the server starts: a primary that restarted may
//!   have lost its last unsynced writes, which its replicas hold, so they copy it whole.
//!
//! A replica writes only what its primary sends: commands that write are refused
//! (`READONLY`), keys are not expired on its clock, and its hot-key cache is off.

pub(crate) mod backlog;
pub(crate) mod follower;
pub(crate) mod primary;
pub(crate) mod settings;
pub(crate) mod state;

use std::sync::atomic::Ordering;
use std::time::Instant;

pub(crate) use backlog::Backlog;

use crate::shared::Shared;

/// Where a replica records its primary's replication ID and the offset it applied.
pub(crate) const OFFSET_KEY: &[u8] = b"\xFFreplication";
/// Set while a replica loads a copy of its primary, deleted when the copy is whole.
pub(crate) const COPYING_KEY: &[u8] = b"\xFFreplication-copying";
/// What a replica refuses writes with.
pub(crate) const READONLY: &str = "READONLY You can't write against a read only replica.";

/// Frame tags, primary to replica.
pub(crate) mod frame {
    /// Keys and values of the snapshot: `[u32 len][key][u32 len][value]` repeated.
    pub const PAIRS: u8 = b'P';
    /// The snapshot is whole.
    pub const SNAPSHOT_END: u8 = b'E';
    /// One WAL record: a write batch and its first sequence number.
    pub const BATCH: u8 = b'B';
    /// Acknowledge now (WAIT is waiting).
    pub const GETACK: u8 = b'G';
    /// Nothing to send for a while: the link is alive.
    pub const PING: u8 = b'H';
}

/// Why a command with `flags` may not run now: a write on a read-only replica, a write
/// with too few replicas (`min-replicas-to-write`), or a command that needs the data while
/// a replica loads its copy or has lost its primary (`replica-serve-stale-data no`).
pub(crate) fn refusal(shared: &Shared, flags: &[&str]) -> Option<&'static str> {
    let r = &shared.replication;
    let write = flags.contains(&"write");
    if !r.replica() {
        return (write && too_few_replicas(shared))
            .then_some("NOREPLICAS Not enough good replicas to write.");
    }
    if r.loading.load(Ordering::Acquire) && !flags.contains(&"loading") {
        return Some("LOADING Redis is loading the dataset in memory");
    }
    if write && r.refuses_writes() {
        return Some(READONLY);
    }
    // Relaxed: a setting. The link is looked at only when stale data is not served.
    if r.settings.serve_stale.load(Ordering::Relaxed) || flags.contains(&"stale") {
        return None;
    }
    let down = !r
        .master
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|l| l.state.up());
    if down {
        return Some(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        );
    }
    None
}

/// Whether plain GETs and SETs may take the worker's batched paths, which skip
/// [`refusal`]: not on a replica, nor with `min-replicas-to-write` set.
pub(crate) fn batches_allowed(shared: &Shared) -> bool {
    // Relaxed: a role and a setting.
    !shared.replication.replica()
        && shared
            .replication
            .settings
            .min_replicas
            .load(Ordering::Relaxed)
            == 0
}

/// The replicas that acknowledged at least `offset`, counted for WAIT.
pub(crate) fn acknowledged(shared: &Shared, offset: u64) -> usize {
    shared
        .replication
        .attached()
        .iter()
        .filter(|r| r.online() && r.acked.load(Ordering::Acquire) >= offset)
        .count()
}

/// Asks every replica to acknowledge now.
pub(crate) fn ask_for_acks(shared: &Shared) {
    for r in shared.replication.attached() {
        r.getack.store(true, Ordering::Release);
    }
    shared.replication.backlog.wake();
}

/// `min-replicas-to-write`: too few replicas acknowledged within `min-replicas-max-lag`
/// seconds for a write to be taken.
pub(crate) fn too_few_replicas(shared: &Shared) -> bool {
    let s = &shared.replication.settings;
    // Relaxed: settings.
    let need = s.min_replicas.load(Ordering::Relaxed);
    if need == 0 || shared.replication.replica() {
        return false;
    }
    let lag = s.min_replicas_max_lag.load(Ordering::Relaxed);
    let good = shared
        .replication
        .attached()
        .iter()
        .filter(|r| r.online() && r.lag_secs(Instant::now()) <= lag)
        .count();
    (good as u64) < need
}

/// The replica's record of its primary: its replication ID and the offset applied.
pub(crate) fn encode_offset(replid: &str, offset: u64) -> Vec<u8> {
    let mut v = replid.as_bytes().to_vec();
    v.extend_from_slice(&offset.to_be_bytes());
    v
}

/// [`encode_offset`]'s fields back, when the record is well formed.
pub(crate) fn decode_offset(v: &[u8]) -> Option<(String, u64)> {
    let (id, offset) = v.split_at_checked(v.len().checked_sub(8)?)?;
    let id = std::str::from_utf8(id).ok()?;
    Some((id.to_string(), u64::from_be_bytes(offset.try_into().ok()?)))
}

/// The lines of `INFO replication`.
pub(crate) fn info(shared: &Shared) -> Vec<(String, String)> {
    let r = &shared.replication;
    let mut lines: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: String| lines.push((k.to_string(), v));
    let own = shared.db.latest_sequence();
    let link = r.master.lock().unwrap_or_else(|e| e.into_inner()).clone();
    match &link {
        Some(link) => {
            push("role", "slave".into());
            push("master_host", link.host.clone());
            push("master_port", link.port.to_string());
            let up = link.state.up();
            push("master_link_status", if up { "up" } else { "down" }.into());
            push(
                "master_last_io_seconds_ago",
                link.state
                    .last_io_secs()
                    .map_or(-1, |s| s as i64)
                    .to_string(),
            );
            push(
                "master_sync_in_progress",
                u8::from(r.loading.load(Ordering::Relaxed)).to_string(),
            );
            push("slave_read_repl_offset", link.state.applied().to_string());
            push("slave_repl_offset", link.state.applied().to_string());
            if !up {
                push(
                    "master_link_down_since_seconds",
                    link.state.down_secs().to_string(),
                );
            }
            push(
                "slave_priority",
                r.settings.priority.load(Ordering::Relaxed).to_string(),
            );
            push(
                "slave_read_only",
                u8::from(r.settings.read_only.load(Ordering::Relaxed)).to_string(),
            );
            push("replica_announced", "1".into());
        }
        None => push("role", "master".into()),
    }
    let replicas = r.attached();
    let online: Vec<_> = replicas.iter().filter(|x| x.online()).collect();
    push("connected_slaves", online.len().to_string());
    let now = Instant::now();
    for (i, x) in online.iter().enumerate() {
        push(
            &format!("slave{i}"),
            format!(
                "ip={},port={},state=online,offset={},lag={}",
                x.ip,
                x.port.load(Ordering::Relaxed),
                x.acked.load(Ordering::Acquire),
                x.lag_secs(now)
            ),
        );
    }
    if link.is_none() {
        push(
            "min_slaves_good_slaves",
            online
                .iter()
                .filter(|x| {
                    x.lag_secs(now) <= r.settings.min_replicas_max_lag.load(Ordering::Relaxed)
                })
                .count()
                .to_string(),
        );
    }
    push("master_failover_state", "no-failover".into());
    push("master_replid", r.replid.clone());
    push("master_replid2", "0".repeat(40));
    push("master_repl_offset", own.to_string());
    push("second_repl_offset", "-1".into());
    push(
        "repl_backlog_active",
        u8::from(r.backlog.active()).to_string(),
    );
    let (first, bytes) = r.backlog.extent();
    push("repl_backlog_size", r.backlog.limit().to_string());
    push("repl_backlog_first_byte_offset", first.to_string());
    push("repl_backlog_histlen", bytes.to_string());
    lines
}

//! What the server measures of its commands: calls, time and a latency histogram per
//! command (INFO commandstats, LATENCY HISTOGRAM), the slow log (SLOWLOG), and the latency
//! monitor's events (LATENCY LATEST and HISTORY).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Latency buckets: bucket `k` holds calls that took at most 1,024 << k nanoseconds (about a
/// microsecond, doubling), the last everything longer.
pub(crate) const BUCKETS: usize = 36;

/// Calls, time and latencies of one command (or subcommand).
pub(crate) struct CommandStats {
    pub calls: AtomicU64,
    pub micros: AtomicU64,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
    pub latencies: [AtomicU64; BUCKETS],
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats {
            calls: AtomicU64::new(0),
            micros: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            latencies: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// The bucket of a call that took `nanos`.
pub(crate) fn bucket(nanos: u64) -> usize {
    let units = nanos.div_ceil(1024).max(1);
    // The smallest k with units <= 2^k.
    let k = (u64::BITS - (units - 1).leading_zeros()) as usize;
    k.min(BUCKETS - 1)
}

impl CommandStats {
    /// Counts `calls` calls that took `nanos` in all. Relaxed: statistics.
    pub(crate) fn record(&self, calls: u64, nanos: u64) {
        self.calls.fetch_add(calls, Ordering::Relaxed);
        self.micros.fetch_add(nanos / 1000, Ordering::Relaxed);
        let each = nanos / calls.max(1);
        if let Some(b) = self.latencies.get(bucket(each)) {
            b.fetch_add(calls, Ordering::Relaxed);
        }
    }

    pub(crate) fn reset(&self) {
        for n in [&self.calls, &self.micros, &self.rejected, &self.failed] {
            n.store(0, Ordering::Relaxed);
        }
        for b in &self.latencies {
            b.store(0, Ordering::Relaxed);
        }
    }

    /// LATENCY HISTOGRAM's buckets: each bucket's upper bound in microseconds, with the calls
    /// at or under it, for the bounds where that count grows (as Redis reports them).
    pub(crate) fn cumulative(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut total = 0;
        for (k, b) in self.latencies.iter().enumerate() {
            let n = b.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            total += n;
            out.push(((1024u64 << k) / 1000, total));
        }
        out
    }
}

/// Statistics of subcommands (`config|get`), by full name, made as they are first called.
#[derive(Default)]
pub(crate) struct SubcommandStats(Mutex<BTreeMap<String, Arc<CommandStats>>>);

impl SubcommandStats {
    pub(crate) fn get(&self, name: &str) -> Arc<CommandStats> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get(name) {
            return s.clone();
        }
        map.entry(name.to_string()).or_default().clone()
    }

    pub(crate) fn all(&self) -> Vec<(String, Arc<CommandStats>)> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub(crate) fn reset(&self) {
        for (_, s) in self.all() {
            s.reset();
        }
    }
}

/// What the server measures besides the rows of its command table.
#[derive(Default)]
pub(crate) struct Stats {
    pub subcommands: SubcommandStats,
    pub slowlog: SlowLog,
    pub latency: LatencyMonitor,
}

/// A slow log entry's arguments are cut to this many, the last saying how many more there were.
const MAX_ARGS: usize = 32;
/// And each argument to this many bytes.
const MAX_ARG_BYTES: usize = 128;

/// One command the slow log kept.
#[derive(Clone)]
pub(crate) struct SlowEntry {
    pub id: u64,
    /// Unix seconds when it ran.
    pub at: u64,
    pub micros: u64,
    pub args: Vec<Vec<u8>>,
    pub addr: String,
    pub name: Vec<u8>,
}

/// SLOWLOG: the newest commands that took `slowlog-log-slower-than` microseconds or more.
pub(crate) struct SlowLog {
    /// Microseconds; negative: the log is off.
    pub threshold: AtomicI64,
    pub max_len: AtomicUsize,
    entries: Mutex<(u64, VecDeque<SlowEntry>)>,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            threshold: AtomicI64::new(10_000),
            max_len: AtomicUsize::new(128),
            entries: Mutex::new((0, VecDeque::new())),
        }
    }
}

impl SlowLog {
    fn entries(&self) -> MutexGuard<'_, (u64, VecDeque<SlowEntry>)> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a command that took `micros` is kept.
    pub(crate) fn wants(&self, micros: u64) -> bool {
        let t = self.threshold.load(Ordering::Relaxed);
        t >= 0 && micros >= t as u64
    }

    /// Keeps a command that took `micros`, its arguments cut to size.
    pub(crate) fn add(&self, args: &[&[u8]], micros: u64, addr: &str, name: &[u8]) {
        let mut kept: Vec<Vec<u8>> = Vec::new();
        for (i, a) in args.iter().enumerate() {
            if i + 1 == MAX_ARGS && args.len() > MAX_ARGS {
                let more = args.len() - i;
                kept.push(format!("... ({more} more arguments)").into_bytes());
                break;
            }
            let mut v = a.get(..MAX_ARG_BYTES).unwrap_or(a).to_vec();
            if a.len() > MAX_ARG_BYTES {
                let more = a.len() - MAX_ARG_BYTES;
                v.extend_from_slice(format!("... ({more} more bytes)").as_bytes());
            }
            kept.push(v);
        }
        let max = self.max_len.load(Ordering::Relaxed);
        let mut guard = self.entries();
        let (next_id, entries) = &mut *guard;
        entries.push_front(SlowEntry {
            id: *next_id,
            at: unix_seconds(),
            micros,
            args: kept,
            addr: addr.to_string(),
            name: name.to_vec(),
        });
        *next_id += 1;
        entries.truncate(max);
    }

    /// The newest `count` entries (all: `None`), newest first.
    pub(crate) fn newest(&self, count: Option<usize>) -> Vec<SlowEntry> {
        let max = self.max_len.load(Ordering::Relaxed);
        let mut guard = self.entries();
        guard.1.truncate(max);
        let n = count.unwrap_or(usize::MAX).min(guard.1.len());
        guard.1.iter().take(n).cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        let max = self.max_len.load(Ordering::Relaxed);
        self.entries().1.len().min(max)
    }

    pub(crate) fn reset(&self) {
        self.entries().1.clear();
    }
}

pub(crate) fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Samples kept per event, as Redis keeps.
const SAMPLES: usize = 160;

/// One event's samples: (Unix seconds, milliseconds), oldest first, and the worst seen.
#[derive(Default, Clone)]
pub(crate) struct EventHistory {
    pub samples: VecDeque<(u64, u64)>,
    pub max: u64,
}

/// The latency monitor: events (`command`, `fast-command`, `expire-cycle`) that took
/// `latency-monitor-threshold` milliseconds or more.
#[derive(Default)]
pub(crate) struct LatencyMonitor {
    /// Milliseconds; 0: the monitor is off.
    pub threshold: AtomicU64,
    events: Mutex<BTreeMap<String, EventHistory>>,
}

impl LatencyMonitor {
    fn events(&self) -> MutexGuard<'_, BTreeMap<String, EventHistory>> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that `event` took `millis`, if that reaches the threshold. Samples of the same
    /// second are one sample, the worst of them.
    pub(crate) fn note(&self, event: &str, millis: u64) {
        let t = self.threshold.load(Ordering::Relaxed);
        if t == 0 || millis < t {
            return;
        }
        let now = unix_seconds();
        let mut events = self.events();
        let h = events.entry(event.to_string()).or_default();
        h.max = h.max.max(millis);
        match h.samples.back_mut() {
            Some((at, ms)) if *at == now => *ms = (*ms).max(millis),
            _ => {
                h.samples.push_back((now, millis));
                if h.samples.len() > SAMPLES {
                    h.samples.pop_front();
                }
            }
        }
    }

    pub(crate) fn all(&self) -> Vec<(String, EventHistory)> {
        self.events()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub(crate) fn history(&self, event: &str) -> Option<EventHistory> {
        self.events().get(event).cloned()
    }

    /// Forgets the events named (all: empty); how many there were.
    pub(crate) fn reset(&self, names: &[String]) -> usize {
        let mut events = self.events();
        if names.is_empty() {
            let n = events.len();
            events.clear();
            return n;
        }
        names.iter().filter(|n| events.remove(*n).is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double_from_a_microsecond() {
        // Written out, not computed: 1,024 ns and under is the first bucket, and so on.
        let cases = [
            (0, 0),
            (1, 0),
            (1024, 0),
            (1025, 1),
            (2048, 1),
            (2049, 2),
            (4096, 2),
            (1_000_000, 10),
            (u64::MAX, BUCKETS - 1),
        ];
        for (nanos, want) in cases {
            assert_eq!(bucket(nanos), want, "{nanos} ns");
        }
    }

    #[test]
    fn the_slow_log_cuts_long_commands_and_keeps_the_newest() {
        let log = SlowLog::default();
        log.max_len.store(2, Ordering::Relaxed);
        let long = vec![b'A'; 130];
        let mut args: Vec<&[u8]> = vec![b"sadd", b"s", &long];
        let numbers: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        args.extend(numbers.iter().map(|n| n.as_bytes()));
        log.add(&args, 5, "1.2.3.4:5", b"me");
        log.add(&[b"get", b"a"], 6, "1.2.3.4:5", b"me");
        log.add(&[b"get", b"b"], 7, "1.2.3.4:5", b"me");
        let got = log.newest(None);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].args, vec![b"get".to_vec(), b"b".to_vec()]);
        assert_eq!((got[0].id, got[1].id), (2, 1));
        log.max_len.store(3, Ordering::Relaxed);
        log.reset();
        log.add(&args, 5, "1.2.3.4:5", b"me");
        let e = &log.newest(Some(1))[0];
        assert_eq!(e.args.len(), 32);
        assert_eq!(e.args[31], b"... (12 more arguments)".to_vec());
        let mut cut = vec![b'A'; 128];
        cut.extend_from_slice(b"... (2 more bytes)");
        assert_eq!(e.args[2], cut);
    }
}

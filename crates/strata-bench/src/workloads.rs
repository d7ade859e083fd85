//! db_bench's workloads: keys and values made as db_bench makes them, each workload timed
//! op by op into a latency histogram.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::engines::{Engine, Result, Seen, Start, digest};

pub const ALL: &[&str] = &[
    "fillseq",
    "fillrandom",
    "overwrite",
    "fillsync",
    "readrandom",
    "readmissing",
    "multireadrandom",
    "readseq",
    "readreverse",
    "seekrandom",
    "deleteseq",
    "deleterandom",
    "readwhilewriting",
];

/// What one run of a workload measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: String,
    pub ops: u64,
    pub seconds: f64,
    pub bytes: u64,
    pub found: u64,
    /// For reads, a hash of what they answered, to compare engines by: of every key a scan
    /// read and its value's digest, in order; of every key a lookup found with its value's
    /// digest, or the key a seek landed on, in any order.
    pub answer_hash: Option<u64>,
    pub hist: Histogram<u64>,
    /// For readwhilewriting: its writer's puts and the bytes per second they wrote.
    pub writer: Option<(u64, f64)>,
}

impl Outcome {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }
    pub fn micros_per_op(&self) -> f64 {
        self.seconds * 1e6 / self.ops.max(1) as f64
    }
}

/// Parameters shared by the workloads.
#[derive(Clone)]
pub struct Params {
    pub num: u64,
    pub reads: u64,
    pub threads: usize,
    pub key_size: usize,
    pub value_size: usize,
    pub seed: u64,
    /// Keys per batched lookup in multireadrandom.
    pub batch_size: usize,
    /// Sync every write, in every workload (fillsync always does).
    pub sync: bool,
    /// Bytes per second readwhilewriting's writer may write (db_bench's
    /// `--benchmark_write_rate_limit`); 0 for as fast as it can.
    pub write_rate_limit: u64,
    /// Which write this is of the run (the workload's place in the list): a key's value
    /// depends on the key and the generation alone, so engines that ran the same list hold
    /// the same values whatever the threads' interleaving, and an engine answering a value
    /// of an earlier write answers differently.
    pub generation: u64,
}

/// db_bench's key: the number zero-padded to `key_size` digits.
pub fn key(n: u64, size: usize) -> Vec<u8> {
    let mut k = Vec::with_capacity(size.max(1));
    key_into(n, size, &mut k);
    k
}

/// [`key`] into `out`, replacing what it held: the workloads' loops keep one buffer rather
/// than format and allocate a key for every operation, as db_bench does. A number with more
/// digits than `size` keeps its first `size` (and a size of 0 its first digit).
pub fn key_into(mut n: u64, size: usize, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = &digits[start..];
    let size = size.max(1);
    out.clear();
    out.resize(size.saturating_sub(digits.len()), b'0');
    out.extend_from_slice(&digits[..digits.len().min(size)]);
}

/// A small, fast generator (xorshift*), seeded per thread.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Values as db_bench makes them: slices of a block of random bytes, half of each value
/// repeated so that it compresses to about half.
pub struct Values {
    data: Vec<u8>,
    pos: usize,
}

impl Values {
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut data = Vec::with_capacity(1 << 20);
        while data.len() < 1 << 20 {
            let piece: Vec<u8> = (0..50).map(|_| b' ' + (rng.below(95) as u8)).collect();
            data.extend_from_slice(&piece);
            data.extend_from_slice(&piece);
        }
        Values { data, pos: 0 }
    }
    /// The value of key number `n` as written by write `generation`: a slice of the block
    /// at a place drawn from both, at the start of a repeated piece as `next` slices it, so
    /// that values compress as db_bench's do.
    pub fn of_key(&self, n: u64, generation: u64, len: usize) -> &[u8] {
        let room = self.data.len().saturating_sub(len) as u64 / 100 + 1;
        let mut h = (n ^ generation.rotate_left(40)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 31;
        let at = (h.wrapping_mul(0xff51_afd7_ed55_8ccd) % room) as usize * 100;
        &self.data[at..at + len]
    }
    pub fn next(&mut self, len: usize) -> &[u8] {
        if self.pos + len > self.data.len() {
            self.pos = 0;
        }
        let v = &self.data[self.pos..self.pos + len];
        self.pos += len;
        v
    }
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

/// What the threads of a workload measured together: latencies, ops, bytes, found, seconds.
type Measured = (Histogram<u64>, u64, u64, u64, f64);

/// Runs `body` on `threads` threads, each given its index and a histogram; returns the
/// merged histogram, total ops, bytes and found counts, and the wall time.
fn run_threads<F>(threads: usize, progress: &Arc<AtomicU64>, body: F) -> Result<Measured>
where
    F: Fn(usize, &mut Histogram<u64>, &AtomicU64) -> Result<(u64, u64, u64)> + Sync,
{
    let start = Instant::now();
    type PerThread = (Histogram<u64>, u64, u64, u64);
    let results: Vec<Result<PerThread>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let body = &body;
                let progress = progress.clone();
                s.spawn(move || {
                    let mut h = new_hist();
                    let (ops, bytes, found) = body(t, &mut h, &progress)?;
                    Ok((h, ops, bytes, found))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a benchmark thread panicked".into()))
            })
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut hist = new_hist();
    let (mut ops, mut bytes, mut found) = (0, 0, 0);
    for r in results {
        let (h, o, b, f) = r?;
        hist.add(&h).map_err(|e| e.to_string())?;
        ops += o;
        bytes += b;
        found += f;
    }
    Ok((hist, ops, bytes, found, seconds))
}

fn record(h: &mut Histogram<u64>, start: Instant) {
    let _ = h.record(start.elapsed().as_nanos().max(1) as u64);
}

#[derive(Clone, Copy)]
enum Order {
    Seq,
    Random,
}

fn write(
    engine: &dyn Engine,
    p: &Params,
    name: &str,
    count: u64,
    order: Order,
    sync: bool,
    progress: &Arc<AtomicU64>,
) -> Result<Outcome> {
    let per_thread = count / p.threads as u64;
    let (hist, ops, bytes, found, seconds) = run_threads(p.threads, progress, |t, h, progress| {
        let mut rng = Rng::new(p.seed + t as u64 * 7919 + 1);
        let values = Values::new(p.seed);
        let mut bytes = 0;
        let mut k = Vec::with_capacity(p.key_size);
        for i in 0..per_thread {
            let n = match order {
                Order::Seq => t as u64 * per_thread + i,
                Order::Random => rng.below(p.num),
            };
            key_into(n, p.key_size, &mut k);
            let v = values.of_key(n, p.generation, p.value_size);
            let start = Instant::now();
            engine.put(&k, v, sync)?;
            record(h, start);
            bytes += (k.len() + v.len()) as u64;
            progress.fetch_add(1, Ordering::Relaxed);
        }
        Ok((per_thread, bytes, 0))
    })?;
    Ok(Outcome {
        name: name.into(),
        ops,
        seconds,
        bytes,
        found,
        answer_hash: None,
        hist,
        writer: None,
    })
}

fn delete(
    engine: &dyn Engine,
    p: &Params,
    name: &str,
    order: Order,
    progress: &Arc<AtomicU64>,
) -> Result<Outcome> {
    let per_thread = p.num / p.threads as u64;
    let (hist, ops, bytes, found, seconds) = run_threads(p.threads, progress, |t, h, progress| {
        let mut rng = Rng::new(p.seed + t as u64 * 31 + 5);
        let mut k = Vec::with_capacity(p.key_size);
        for i in 0..per_thread {
            let n = match order {
                Order::Seq => t as u64 * per_thread + i,
                Order::Random => rng.below(p.num),
            };
            key_into(n, p.key_size, &mut k);
            let start = Instant::now();
            engine.delete(&k, p.sync)?;
            record(h, start);
            progress.fetch_add(1, Ordering::Relaxed);
        }
        Ok((per_thread, 0, 0))
    })?;
    Ok(Outcome {
        name: name.into(),
        ops,
        seconds,
        bytes,
        found,
        answer_hash: None,
        hist,
        writer: None,
    })
}

fn read_random(
    engine: &dyn Engine,
    p: &Params,
    name: &str,
    missing: bool,
    stop: Option<&AtomicBool>,
    progress: &Arc<AtomicU64>,
) -> Result<Outcome> {
    let answers = AtomicU64::new(0);
    let (hist, ops, bytes, found, seconds) = run_threads(p.threads, progress, |t, h, progress| {
        let mut rng = Rng::new(p.seed + t as u64 * 104_729 + 3);
        let (mut bytes, mut found, mut hash) = (0, 0, 0u64);
        let mut k = Vec::with_capacity(p.key_size);
        for _ in 0..p.reads {
            key_into(rng.below(p.num), p.key_size, &mut k);
            if missing {
                // db_bench's missing keys: a real key with one byte changed past the digits.
                if let Some(last) = k.last_mut() {
                    *last = b'.';
                }
            }
            let start = Instant::now();
            let got = engine.get(&k)?;
            record(h, start);
            if let Some(v) = got {
                found += 1;
                bytes += (k.len() + v.len) as u64;
                hash = hash.wrapping_add(hash_found(&k, v));
            }
            progress.fetch_add(1, Ordering::Relaxed);
        }
        answers.fetch_add(hash, Ordering::Relaxed);
        Ok((p.reads, bytes, found))
    })?;
    if let Some(s) = stop {
        s.store(true, Ordering::SeqCst);
    }
    Ok(Outcome {
        name: name.into(),
        ops,
        seconds,
        bytes,
        found,
        answer_hash: Some(answers.into_inner()),
        hist,
        writer: None,
    })
}

/// readrandom's keys, looked up `batch_size` at a time through the engine's batched lookup;
/// each key is charged its share of its batch's time.
fn multi_read_random(
    engine: &dyn Engine,
    p: &Params,
    progress: &Arc<AtomicU64>,
) -> Result<Outcome> {
    let batch = p.batch_size.max(1);
    let answers = AtomicU64::new(0);
    let (hist, ops, bytes, found, seconds) = run_threads(p.threads, progress, |t, h, progress| {
        let mut rng = Rng::new(p.seed + t as u64 * 104_729 + 3);
        let (mut bytes, mut found, mut done, mut hash) = (0, 0, 0, 0u64);
        let mut keys = Vec::with_capacity(batch);
        while done < p.reads {
            let n = batch.min((p.reads - done) as usize);
            keys.clear();
            keys.extend((0..n).map(|_| key(rng.below(p.num), p.key_size)));
            let start = Instant::now();
            let got = engine.get_many(&keys)?;
            let each = (start.elapsed().as_nanos() / n as u128).max(1) as u64;
            for (k, v) in keys.iter().zip(&got) {
                let _ = h.record(each);
                if let Some(v) = v {
                    found += 1;
                    bytes += (k.len() + v.len) as u64;
                    hash = hash.wrapping_add(hash_found(k, *v));
                }
            }
            done += n as u64;
            progress.fetch_add(n as u64, Ordering::Relaxed);
        }
        answers.fetch_add(hash, Ordering::Relaxed);
        Ok((p.reads, bytes, found))
    })?;
    Ok(Outcome {
        name: "multireadrandom".into(),
        ops,
        seconds,
        bytes,
        found,
        answer_hash: Some(answers.into_inner()),
        hist,
        writer: None,
    })
}

fn seek_random(engine: &dyn Engine, p: &Params, progress: &Arc<AtomicU64>) -> Result<Outcome> {
    let answers = AtomicU64::new(0);
    let (hist, ops, bytes, found, seconds) = run_threads(p.threads, progress, |t, h, progress| {
        let mut rng = Rng::new(p.seed + t as u64 * 15_485_863 + 11);
        let (mut found, mut hash) = (0, 0u64);
        let mut k = Vec::with_capacity(p.key_size);
        for _ in 0..p.reads {
            key_into(rng.below(p.num), p.key_size, &mut k);
            let start = Instant::now();
            let landed = engine.seek(&k, &mut |at| hash = hash.wrapping_add(hash_key(0, at)))?;
            record(h, start);
            found += u64::from(landed);
            progress.fetch_add(1, Ordering::Relaxed);
        }
        answers.fetch_add(hash, Ordering::Relaxed);
        Ok((p.reads, 0, found))
    })?;
    Ok(Outcome {
        name: "seekrandom".into(),
        ops,
        seconds,
        bytes,
        found,
        answer_hash: Some(answers.into_inner()),
        hist,
        writer: None,
    })
}

/// The hash of one lookup's answer, summed over lookups in any order.
pub fn hash_found(key: &[u8], v: Seen) -> u64 {
    hash_key(v.digest, key)
}

/// Folds one key into an order-sensitive hash of a scan's keys.
pub fn hash_key(hash: u64, key: &[u8]) -> u64 {
    let mut h = (hash ^ key.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for chunk in key.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(word)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 29;
    }
    h
}

fn scan(
    engine: &dyn Engine,
    p: &Params,
    reverse: bool,
    progress: &Arc<AtomicU64>,
) -> Result<Outcome> {
    let name = if reverse { "readreverse" } else { "readseq" };
    let hashes = std::sync::Mutex::new(Vec::new());
    let (hist, ops, bytes, found, seconds) = run_threads(p.threads, progress, |_, h, progress| {
        let start = Instant::now();
        let (mut bytes, mut hash) = (0u64, 0u64);
        let n = engine.scan(
            if reverse { Start::Last } else { Start::First },
            p.reads,
            &mut |k, v| {
                bytes += (k.len() + v.len()) as u64;
                hash = hash_key(hash ^ digest(v).rotate_left(32), k);
            },
        )?;
        // One histogram sample per entry, at the average cost: a scan is timed as a whole.
        let per = (start.elapsed().as_nanos() as u64 / n.max(1)).max(1);
        let _ = h.record_n(per, n.max(1));
        progress.fetch_add(n, Ordering::Relaxed);
        hashes
            .lock()
            .map_err(|_| "a scan thread panicked".to_string())?
            .push(hash);
        Ok((n, bytes, n))
    })?;
    // Every thread scans the same entries: one hash stands for them all.
    let hashes = hashes.into_inner().unwrap_or_default();
    if hashes.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!(
            "{name}: the scanning threads read different entries"
        ));
    }
    Ok(Outcome {
        name: name.into(),
        ops,
        seconds,
        bytes,
        found,
        answer_hash: hashes.first().copied(),
        hist,
        writer: None,
    })
}

/// Runs workload `name`.
pub fn run(
    engine: &Arc<dyn Engine>,
    p: &Params,
    name: &str,
    progress: &Arc<AtomicU64>,
) -> Result<Outcome> {
    let e = engine.as_ref();
    match name {
        "fillseq" => write(e, p, name, p.num, Order::Seq, p.sync, progress),
        "fillrandom" | "overwrite" => write(e, p, name, p.num, Order::Random, p.sync, progress),
        "fillsync" => write(
            e,
            p,
            name,
            (p.num / 100).max(1),
            Order::Random,
            true,
            progress,
        ),
        "readrandom" => read_random(e, p, name, false, None, progress),
        "readmissing" => read_random(e, p, name, true, None, progress),
        "multireadrandom" => multi_read_random(e, p, progress),
        "readseq" => scan(e, p, false, progress),
        "readreverse" => scan(e, p, true, progress),
        "seekrandom" => seek_random(e, p, progress),
        "deleteseq" => delete(e, p, name, Order::Seq, progress),
        "deleterandom" => delete(e, p, name, Order::Random, progress),
        "readwhilewriting" => {
            let stop = Arc::new(AtomicBool::new(false));
            let writer = {
                let engine = engine.clone();
                let stop = stop.clone();
                let p = p.clone();
                std::thread::spawn(move || -> Result<(u64, f64)> {
                    let mut rng = Rng::new(p.seed ^ 0xabcdef);
                    let mut values = Values::new(p.seed ^ 0x1234);
                    let (mut n, mut bytes) = (0u64, 0u64);
                    let start = Instant::now();
                    while !stop.load(Ordering::SeqCst) {
                        let k = key(rng.below(p.num), p.key_size);
                        let v = values.next(p.value_size);
                        engine.put(&k, v, p.sync)?;
                        n += 1;
                        bytes += (k.len() + v.len()) as u64;
                        if p.write_rate_limit > 0 {
                            // Ahead of the rate: wait until the bytes written are due.
                            let due =
                                Duration::from_secs_f64(bytes as f64 / p.write_rate_limit as f64);
                            if let Some(wait) = due.checked_sub(start.elapsed()) {
                                std::thread::sleep(wait);
                            }
                        } else if n % 1024 == 0 {
                            // db_bench rate-limits nothing here; yield so readers keep a core.
                            std::thread::sleep(Duration::from_micros(1));
                        }
                    }
                    Ok((n, bytes as f64 / start.elapsed().as_secs_f64().max(1e-9)))
                })
            };
            let out = read_random(e, p, name, false, Some(&stop), progress);
            stop.store(true, Ordering::SeqCst);
            let written = writer
                .join()
                .map_err(|_| "the writer thread panicked".to_string())??;
            out.map(|o| Outcome {
                writer: Some(written),
                ..o
            })
        }
        other => Err(format!(
            "unknown benchmark {other:?} (one of {})",
            ALL.join(", ")
        )),
    }
}

/// True for workloads that start from an empty database in db_bench.
pub fn fresh_db(name: &str) -> bool {
    matches!(name, "fillseq" | "fillrandom" | "fillsync")
}

/// True for workloads that write.
pub fn writes(name: &str) -> bool {
    matches!(
        name,
        "fillseq" | "fillrandom" | "overwrite" | "fillsync" | "deleteseq" | "deleterandom"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys are db_bench's: the number zero-padded to the size, by the standard
    /// formatter, cut to the size when the number is longer.
    #[test]
    fn keys_are_zero_padded_numbers_cut_to_the_size() {
        let mut buf = b"left over".to_vec();
        for size in [0usize, 1, 2, 5, 16, 20, 24] {
            for n in [0u64, 7, 42, 99_999, 123_456_789, 10_000_000_000, u64::MAX] {
                let mut expected = format!("{n:0size$}").into_bytes();
                expected.truncate(size.max(1));
                key_into(n, size, &mut buf);
                assert_eq!(buf, expected, "n {n}, size {size}");
                assert_eq!(key(n, size), expected, "n {n}, size {size}");
            }
        }
    }
}

//! The seed server's workload: clients drive a Redis-protocol server with GET/SET mixes over
//! keys drawn from a Zipf distribution, closed-loop or at a target arrival rate, and report
//! throughput with average, median, p95 and p99 latency.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::workloads::Rng;

#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Args {
    /// The server's address.
    #[arg(long, default_value = "127.0.0.1:6380")]
    pub addr: String,
    /// Concurrent connections.
    #[arg(long, default_value_t = 25)]
    pub clients: usize,
    /// Distinct keys.
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    pub value_size: usize,
    /// Share of requests that are GETs (the rest are SETs).
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// The Zipf exponent is chosen so that this share of requests...
    #[arg(long, default_value_t = 0.9)]
    pub hot_requests: f64,
    /// ...goes to this share of the keys.
    #[arg(long, default_value_t = 0.1)]
    pub hot_keys: f64,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Requests per second over all clients (open loop); closed loop when absent.
    #[arg(long)]
    pub rate: Option<f64>,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Zipf over ranks 1..=n with exponent `s`, sampled by inverting the CDF.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n as usize);
        let mut total = 0.0;
        for k in 1..=n {
            total += 1.0 / (k as f64).powf(s);
            cdf.push(total);
        }
        for c in &mut cdf {
            *c /= total;
        }
        Zipf { cdf }
    }

    /// The share of samples falling on the first `k` ranks.
    pub fn head_share(&self, k: usize) -> f64 {
        k.checked_sub(1)
            .and_then(|i| self.cdf.get(i))
            .copied()
            .unwrap_or(0.0)
    }

    /// The exponent for which the first `hot_keys` of `n` ranks take `hot_requests` of the
    /// samples (by bisection).
    pub fn calibrate(n: u64, hot_keys: f64, hot_requests: f64) -> f64 {
        let k = ((n as f64 * hot_keys).round() as usize).max(1);
        let (mut lo, mut hi) = (0.0f64, 5.0f64);
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if Zipf::new(n, mid).head_share(k) < hot_requests {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2.0
    }

    /// A rank in 0..n (0 the most popular).
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u) as u64
    }
}

/// One connection speaking RESP.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    line: String,
    scratch: Vec<u8>,
}

impl Conn {
    fn connect(addr: &str) -> Result<Conn, String> {
        let s = TcpStream::connect(addr).map_err(|e| format!("{addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Conn {
            reader: BufReader::with_capacity(64 * 1024, s.try_clone().map_err(|e| e.to_string())?),
            writer: s,
            line: String::new(),
            scratch: Vec::new(),
        })
    }

    fn send(&mut self, args: &[&[u8]]) -> Result<(), String> {
        let mut req = Vec::with_capacity(64 + args.iter().map(|a| a.len()).sum::<usize>());
        req.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&req).map_err(|e| e.to_string())
    }

    /// Reads one reply (status, error, integer or bulk); an error reply is an error.
    fn reply(&mut self) -> Result<(), String> {
        self.line.clear();
        if self
            .reader
            .read_line(&mut self.line)
            .map_err(|e| e.to_string())?
            == 0
        {
            return Err("server closed the connection".into());
        }
        let line = self.line.trim_end();
        match line.as_bytes().first() {
            Some(b'-') => Err(format!("server error: {line}")),
            Some(b'$') => {
                let n: i64 = line[1..]
                    .parse()
                    .map_err(|_| format!("bad reply {line:?}"))?;
                if n >= 0 {
                    self.scratch.resize(n as usize + 2, 0);
                    self.reader
                        .read_exact(&mut self.scratch)
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            }
            Some(b'+' | b':') => Ok(()),
            _ => Err(format!("unexpected reply {line:?}")),
        }
    }
}

struct ClientResult {
    hist: Histogram<u64>,
    gets: u64,
    sets: u64,
}

fn client(
    args: &Args,
    zipf: &Zipf,
    id: usize,
    start: Instant,
    stop: &AtomicBool,
) -> Result<ClientResult, String> {
    let mut conn = Conn::connect(&args.addr)?;
    let mut rng = Rng::new(args.seed + id as u64 * 7_777);
    let value: Vec<u8> = (0..args.value_size)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
    let (mut gets, mut sets) = (0u64, 0u64);
    // Open loop: each client sends at rate/clients, latency counted from the intended send
    // time, so a stalled server is not hidden (no coordinated omission).
    let interval = args
        .rate
        .map(|r| Duration::from_secs_f64(args.clients as f64 / r));
    let mut next_send = start
        + interval.map_or(Duration::ZERO, |i| {
            i.mul_f64(id as f64 / args.clients as f64)
        });
    while !stop.load(Ordering::Relaxed) {
        let intended = match interval {
            Some(i) => {
                let now = Instant::now();
                if next_send > now {
                    std::thread::sleep(next_send - now);
                }
                let t = next_send;
                next_send += i;
                t
            }
            None => Instant::now(),
        };
        let key = format!("key:{:08}", zipf.sample(&mut rng));
        let is_get = (rng.next_u64() % 10_000) as f64 / 10_000.0 < args.get_ratio;
        if is_get {
            conn.send(&[b"GET", key.as_bytes()])?;
            gets += 1;
        } else {
            conn.send(&[b"SET", key.as_bytes(), &value])?;
            sets += 1;
        }
        conn.reply()?;
        let _ = hist.record(intended.elapsed().as_nanos().max(1) as u64);
    }
    Ok(ClientResult { hist, gets, sets })
}

pub fn run(args: &Args) -> Result<(), String> {
    let s = Zipf::calibrate(args.keys, args.hot_keys, args.hot_requests);
    let zipf = Arc::new(Zipf::new(args.keys, s));
    // Load every key once so GETs find values.
    let mut conn = Conn::connect(&args.addr)?;
    let value: Vec<u8> = vec![b'x'; args.value_size];
    for k in 0..args.keys {
        conn.send(&[b"SET", format!("key:{k:08}").as_bytes(), &value])?;
    }
    for _ in 0..args.keys {
        conn.reply()?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let results: Vec<Result<ClientResult, String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..args.clients)
            .map(|id| {
                let (zipf, stop) = (zipf.clone(), stop.clone());
                sc.spawn(move || client(args, &zipf, id, start, &stop))
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(args.duration));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("client thread panicked".into()))
            })
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
    let (mut gets, mut sets) = (0, 0);
    for r in results {
        let r = r?;
        hist.add(&r.hist).map_err(|e| e.to_string())?;
        gets += r.gets;
        sets += r.sets;
    }
    let total = gets + sets;
    let ms = |ns: u64| ns as f64 / 1e6;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "addr": args.addr, "clients": args.clients, "keys": args.keys, "value_size": args.value_size,
                "get_ratio": args.get_ratio, "zipf_exponent": s, "rate": args.rate, "seconds": elapsed,
                "requests": total, "requests_per_sec": total as f64 / elapsed,
                "avg_ms": hist.mean() / 1e6, "p50_ms": ms(hist.value_at_quantile(0.5)),
                "p95_ms": ms(hist.value_at_quantile(0.95)), "p99_ms": ms(hist.value_at_quantile(0.99)),
            })
        );
    } else {
        println!(
            "{} clients, {} keys (Zipf s={s:.3}: {:.0}% of requests on {:.0}% of keys), {} B values, GET ratio {:.2}, {}",
            args.clients,
            args.keys,
            args.hot_requests * 100.0,
            args.hot_keys * 100.0,
            args.value_size,
            args.get_ratio,
            args.rate.map_or("closed loop".to_string(), |r| format!(
                "target {r:.0} req/s"
            ))
        );
        println!(
            "{total} requests ({gets} GET, {sets} SET) in {elapsed:.1} s: {:.0} req/s; latency avg {:.3} ms, median {:.3} ms, p95 {:.3} ms, p99 {:.3} ms",
            total as f64 / elapsed,
            hist.mean() / 1e6,
            ms(hist.value_at_quantile(0.5)),
            ms(hist.value_at_quantile(0.95)),
            ms(hist.value_at_quantile(0.99))
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrated_zipf_puts_the_asked_share_on_the_hot_keys() {
        let s = Zipf::calibrate(1000, 0.1, 0.9);
        let z = Zipf::new(1000, s);
        assert!((z.head_share(100) - 0.9).abs() < 0.001);
        let mut rng = Rng::new(1);
        let hot = (0..100_000).filter(|_| z.sample(&mut rng) < 100).count();
        assert!((hot as f64 / 100_000.0 - 0.9).abs() < 0.01, "{hot}");
    }
}

//! The seed server's workload: clients drive a Redis-protocol server with GET/SET mixes over
//! keys drawn from a Zipf distribution, closed-loop or at a target arrival rate, and report
//! throughput with average, median, p95 and p99 latency.
//!
//! Each load thread drives its connections from one event loop, one request outstanding per
//! connection, so that the client is not the bottleneck: a thread per connection spends more
//! on switching between threads than the server spends on the requests.

use std::io::{Read, Write};
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
    /// Load threads, each driving its share of the connections from one event loop.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
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
    /// `getset`: GETs and SETs; `transfer`: WATCH/GET/GET/MULTI/SET/SET/EXEC transfers
    /// between accounts (the `--keys`), retried when EXEC answers null.
    #[arg(long, value_enum, default_value = "getset")]
    pub mix: Mix,
}

/// What the clients send.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    Getset,
    Transfer,
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

/// A request in RESP form.
pub(crate) fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// The length of the complete reply (status, error, integer or bulk) at the start of `buf`,
/// `None` while it is incomplete; an error reply or a malformed one is an error.
pub(crate) fn reply_len(buf: &[u8]) -> Result<Option<usize>, String> {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = String::from_utf8_lossy(buf.get(..eol).unwrap_or_default());
    match line.as_bytes().first() {
        Some(b'-') => Err(format!("server error: {line}")),
        Some(b'+' | b':') => Ok(Some(eol + 2)),
        Some(b'$') => {
            let n: i64 = line
                .get(1..)
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("bad reply {line:?}"))?;
            let total = eol + 2 + if n >= 0 { n as usize + 2 } else { 0 };
            Ok((buf.len() >= total).then_some(total))
        }
        _ => Err(format!("unexpected reply {line:?}")),
    }
}

/// One connection of a load thread, with at most one request outstanding.
struct Conn {
    stream: mio::net::TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    sent: usize,
    /// When the outstanding request was (or should have been) sent; `None`: none outstanding.
    intended: Option<Instant>,
    /// Open loop: when the next request is due.
    next_due: Instant,
    rng: Rng,
    want_write: bool,
    /// The outstanding request is a GET.
    outstanding_get: bool,
}

/// What one load thread measured.
struct ClientResult {
    hist: Histogram<u64>,
    gets: u64,
    sets: u64,
}

/// A load thread: drives its connections from one event loop until `until`.
struct Load<'a> {
    args: &'a Args,
    zipf: &'a Zipf,
    value: Vec<u8>,
    /// Open loop: time between two requests of one connection.
    interval: Option<Duration>,
    result: ClientResult,
}

impl Load<'_> {
    /// Queues the connection's next request and sends what the socket takes.
    fn send_next(&mut self, c: &mut Conn, intended: Instant) -> Result<(), String> {
        let key = format!("key:{:08}", self.zipf.sample(&mut c.rng));
        let is_get = (c.rng.next_u64() % 10_000) as f64 / 10_000.0 < self.args.get_ratio;
        if is_get {
            encode(&mut c.output, &[b"GET", key.as_bytes()]);
            self.result.gets += 1;
        } else {
            encode(&mut c.output, &[b"SET", key.as_bytes(), &self.value]);
            self.result.sets += 1;
        }
        c.intended = Some(intended);
        c.outstanding_get = is_get;
        if let Some(i) = self.interval {
            c.next_due = intended + i;
        }
        flush(c)
    }

    /// Reads the replies that arrived, records their latency, and sends the next requests.
    fn receive(&mut self, c: &mut Conn, buf: &mut [u8]) -> Result<(), String> {
        loop {
            match c.stream.read(buf) {
                Ok(0) => return Err("server closed the connection".into()),
                Ok(n) => c.input.extend_from_slice(buf.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        while let Some(n) = reply_len(&c.input)? {
            c.input.drain(..n);
            let Some(t) = c.intended.take() else {
                return Err("a reply to no request".into());
            };
            let _ = self
                .result
                .hist
                .record(t.elapsed().as_nanos().max(1) as u64);
            // Closed loop: the next request goes now. Open loop: when due (now if late).
            if self.interval.is_none() || c.next_due <= Instant::now() {
                let intended = if self.interval.is_some() {
                    c.next_due
                } else {
                    Instant::now()
                };
                self.send_next(c, intended)?;
            }
        }
        Ok(())
    }
}

fn flush(c: &mut Conn) -> Result<(), String> {
    while c.sent < c.output.len() {
        match c.stream.write(c.output.get(c.sent..).unwrap_or_default()) {
            Ok(0) => return Err("server closed the connection".into()),
            Ok(n) => c.sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    if c.sent == c.output.len() {
        c.output.clear();
        c.sent = 0;
    }
    Ok(())
}

/// A one-shot monotonic timer (Linux `timerfd`) with nanosecond resolution, for an event
/// loop to wait on beside its sockets.
struct Timer {
    fd: std::os::fd::RawFd,
}

impl Timer {
    fn new() -> Result<Self, String> {
        // SAFETY: plain system calls; the descriptor is owned by the Timer and closed in Drop.
        // The thread's timer slack (50 us by default) is cut to 1 us, so that it wakes on time.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
            let fd = libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            );
            if fd < 0 {
                return Err(format!("timerfd: {}", std::io::Error::last_os_error()));
            }
            Ok(Timer { fd })
        }
    }

    /// Fires once, `after` from now (at once for zero).
    fn arm(&self, after: Duration) -> Result<(), String> {
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
        match unsafe { libc::timerfd_settime(self.fd, 0, &spec, std::ptr::null_mut()) } {
            0 => Ok(()),
            _ => Err(format!("timerfd: {}", std::io::Error::last_os_error())),
        }
    }

    /// Reads the expiry count, so that the descriptor is no longer readable.
    fn clear(&self) {
        let mut n = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `n`; a failed read (nothing expired) is harmless.
        unsafe { libc::read(self.fd, n.as_mut_ptr().cast(), n.len()) };
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: the descriptor is the Timer's own and closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// Connects `count` connections (numbered from `first`) and runs them until `until`.
fn load_thread(
    args: &Args,
    zipf: &Zipf,
    first: usize,
    count: usize,
    start: Instant,
    until: Instant,
) -> Result<ClientResult, String> {
    use mio::{Events, Interest, Poll, Token};
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    let interval = args
        .rate
        .map(|r| Duration::from_secs_f64(args.clients as f64 / r));
    let mut conns = Vec::with_capacity(count);
    for i in 0..count {
        let id = first + i;
        let std_stream =
            std::net::TcpStream::connect(&args.addr).map_err(|e| format!("{}: {e}", args.addr))?;
        std_stream.set_nodelay(true).map_err(|e| e.to_string())?;
        std_stream
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let mut stream = mio::net::TcpStream::from_std(std_stream);
        poll.registry()
            .register(&mut stream, Token(i), Interest::READABLE)
            .map_err(|e| e.to_string())?;
        // Open loop: connections start spread over one interval.
        let offset = interval.map_or(Duration::ZERO, |iv| {
            iv.mul_f64(id as f64 / args.clients as f64)
        });
        conns.push(Conn {
            stream,
            input: Vec::new(),
            output: Vec::new(),
            sent: 0,
            intended: None,
            next_due: start + offset,
            rng: Rng::new(args.seed + id as u64 * 7_777),
            want_write: false,
            outstanding_get: false,
        });
    }
    let mut load = Load {
        args,
        zipf,
        value: (0..args.value_size)
            .map(|i| b'a' + (i % 26) as u8)
            .collect(),
        interval,
        result: ClientResult {
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?,
            gets: 0,
            sets: 0,
        },
    };
    // Open loop: a timer wakes the loop when the next request is due. The poll's own
    // timeout is whole milliseconds, which would send each request up to a millisecond
    // late and count that as the server's response time.
    let timer = match interval {
        Some(_) => {
            let t = Timer::new()?;
            poll.registry()
                .register(
                    &mut mio::unix::SourceFd(&t.fd),
                    Token(usize::MAX),
                    Interest::READABLE,
                )
                .map_err(|e| e.to_string())?;
            Some(t)
        }
        None => None,
    };
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        // Idle connections whose request is due send it.
        let mut wake = until;
        for c in conns.iter_mut() {
            if c.intended.is_none() {
                if c.next_due <= now {
                    let intended = if load.interval.is_some() {
                        c.next_due
                    } else {
                        now
                    };
                    load.send_next(c, intended)?;
                } else {
                    wake = wake.min(c.next_due);
                }
            }
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let want_write = !c.output.is_empty();
            if want_write != c.want_write {
                let interest = if want_write {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                poll.registry()
                    .reregister(&mut c.stream, Token(i), interest)
                    .map_err(|e| e.to_string())?;
                c.want_write = want_write;
            }
        }
        let timeout = wake.saturating_duration_since(Instant::now());
        if let Some(t) = &timer {
            t.arm(timeout)?;
        }
        match poll.poll(&mut events, Some(timeout.min(Duration::from_millis(10)))) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        }
        for event in events.iter() {
            if event.token() == Token(usize::MAX) {
                if let Some(t) = &timer {
                    t.clear();
                }
                continue;
            }
            let Some(c) = conns.get_mut(event.token().0) else {
                continue;
            };
            if event.is_writable() {
                flush(c)?;
            }
            if event.is_readable() || event.is_read_closed() || event.is_error() {
                load.receive(c, &mut buf)?;
            }
        }
    }
    // Requests still unanswered at the end are not counted.
    for c in &conns {
        match c.intended.map(|_| c.outstanding_get) {
            Some(true) => load.result.gets -= 1,
            Some(false) => load.result.sets -= 1,
            None => {}
        }
    }
    Ok(load.result)
}

/// Writes every key once, pipelined, so that GETs find values.
fn preload(args: &Args) -> Result<(), String> {
    let mut s =
        std::net::TcpStream::connect(&args.addr).map_err(|e| format!("{}: {e}", args.addr))?;
    let value = vec![b'x'; args.value_size];
    let mut req = Vec::new();
    for k in 0..args.keys {
        encode(
            &mut req,
            &[b"SET", format!("key:{k:08}").as_bytes(), &value],
        );
    }
    s.write_all(&req).map_err(|e| e.to_string())?;
    let (mut input, mut buf, mut replies) = (Vec::new(), vec![0u8; 64 * 1024], 0);
    while replies < args.keys {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("server closed the connection".into());
        }
        input.extend_from_slice(buf.get(..n).unwrap_or_default());
        while let Some(len) = reply_len(&input)? {
            input.drain(..len);
            replies += 1;
        }
    }
    Ok(())
}

/// What a run measured.
pub struct Report {
    /// The calibrated Zipf exponent.
    pub exponent: f64,
    pub elapsed: f64,
    /// Requests answered.
    pub gets: u64,
    pub sets: u64,
    /// Latency in nanoseconds.
    pub hist: Histogram<u64>,
}

/// Preloads the keys, runs the workload and gathers the load threads' measurements.
pub fn measure(args: &Args) -> Result<Report, String> {
    let s = Zipf::calibrate(args.keys, args.hot_keys, args.hot_requests);
    let zipf = Zipf::new(args.keys, s);
    preload(args)?;
    let threads = args.threads.clamp(1, args.clients.max(1));
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(args.duration);
    let results: Vec<Result<ClientResult, String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                // Connections dealt as evenly as they go.
                let first = args.clients * t / threads;
                let count = args.clients * (t + 1) / threads - first;
                let zipf = &zipf;
                sc.spawn(move || load_thread(args, zipf, first, count, start, until))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("load thread panicked".into()))
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
    Ok(Report {
        exponent: s,
        elapsed,
        gets,
        sets,
        hist,
    })
}

/// Runs the workload and prints its report. The transfer mix has a runner of its own
/// (`transfer_load::run`).
pub fn run(args: &Args) -> Result<(), String> {
    let Report {
        exponent: s,
        elapsed,
        gets,
        sets,
        hist,
    } = measure(args)?;
    let total = gets + sets;
    let ms = |ns: u64| ns as f64 / 1e6;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "addr": args.addr, "clients": args.clients, "keys": args.keys,
                "value_size": args.value_size, "get_ratio": args.get_ratio, "zipf_exponent": s,
                "rate": args.rate, "seconds": elapsed,
                "requests": total, "requests_per_sec": total as f64 / elapsed,
                "avg_ms": hist.mean() / 1e6, "p50_ms": ms(hist.value_at_quantile(0.5)),
                "p95_ms": ms(hist.value_at_quantile(0.95)),
                "p99_ms": ms(hist.value_at_quantile(0.99)),
            })
        );
    } else {
        println!(
            "{} clients, {} keys (Zipf s={s:.3}: {:.0}% of requests on {:.0}% of keys), \
             {} B values, GET ratio {:.2}, {}",
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
            "{total} requests ({gets} GET, {sets} SET) in {elapsed:.1} s: {:.0} req/s; \
             latency avg {:.3} ms, median {:.3} ms, p95 {:.3} ms, p99 {:.3} ms",
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

    #[test]
    fn replies_are_framed_and_errors_reported() {
        assert_eq!(reply_len(b"+OK\r\n+O"), Ok(Some(5)));
        assert_eq!(reply_len(b":12\r\n"), Ok(Some(5)));
        assert_eq!(reply_len(b"$3\r\nabc\r\n"), Ok(Some(9)));
        assert_eq!(reply_len(b"$3\r\nab"), Ok(None));
        assert_eq!(reply_len(b"$-1\r\n"), Ok(Some(5)));
        assert_eq!(reply_len(b"+OK"), Ok(None));
        assert!(reply_len(b"-ERR no\r\n").is_err());
        assert!(reply_len(b"*1\r\n").is_err());
    }

    #[test]
    fn drives_a_server_closed_and_open_loop() {
        let dir = tempfile::tempdir().unwrap();
        let server = strata_server::Server::start(strata_server::Config {
            dir: dir.path().into(),
            port: 0,
            ..Default::default()
        })
        .unwrap();
        let mut args = Args {
            addr: server.local_addr().to_string(),
            clients: 5,
            keys: 100,
            value_size: 64,
            get_ratio: 0.5,
            hot_requests: 0.9,
            hot_keys: 0.1,
            threads: 2,
            duration: 0.5,
            rate: None,
            seed: 3,
            json: false,
            mix: Mix::Getset,
        };
        let closed = measure(&args).unwrap();
        assert!(
            closed.gets > 100 && closed.sets > 100,
            "{} {}",
            closed.gets,
            closed.sets
        );
        assert_eq!(closed.hist.len(), closed.gets + closed.sets);
        // Open loop at 1,000 requests/s: about 500 in half a second.
        args.rate = Some(1000.0);
        let open = measure(&args).unwrap();
        let n = open.gets + open.sets;
        assert!((350..=650).contains(&n), "{n} requests");
        assert_eq!(open.hist.len(), n);
        server.shutdown().unwrap();
    }
}

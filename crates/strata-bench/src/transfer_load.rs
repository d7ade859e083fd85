//! Transfers through a Redis-protocol server, as a client of WATCH and MULTI/EXEC does them:
//! WATCH two accounts, GET both, then MULTI, SET both, EXEC, and again from the WATCH when
//! EXEC answers null because another client wrote one of them. Each client is a thread with
//! one blocking connection, which sends each step's commands together.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::server_load::{Args, Zipf, encode};
use crate::workloads::Rng;

/// One reply: a status or integer line, a bulk string (`None` when null), or an array of
/// simple replies (`None` when null).
enum Reply {
    Line,
    Bulk(Option<Vec<u8>>),
    Array(Option<usize>),
}

/// Reads replies from a blocking connection.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn line(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(eol) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf[..eol].to_vec();
                self.buf.drain(..eol + 2);
                return Ok(line);
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    fn reply(&mut self) -> Result<Reply, String> {
        let line = self.line()?;
        let n = || -> Result<i64, String> {
            String::from_utf8_lossy(&line[1..])
                .parse()
                .map_err(|_| format!("bad reply {:?}", String::from_utf8_lossy(&line)))
        };
        match line.first() {
            Some(b'+' | b':') => Ok(Reply::Line),
            Some(b'$') if n()? < 0 => Ok(Reply::Bulk(None)),
            Some(b'$') => {
                let len = n()? as usize;
                while self.buf.len() < len + 2 {
                    self.fill()?;
                }
                let data = self.buf[..len].to_vec();
                self.buf.drain(..len + 2);
                Ok(Reply::Bulk(Some(data)))
            }
            Some(b'*') if n()? < 0 => Ok(Reply::Array(None)),
            Some(b'*') => {
                let items = n()? as usize;
                for _ in 0..items {
                    self.line()?;
                }
                Ok(Reply::Array(Some(items)))
            }
            _ => Err(format!("server error: {}", String::from_utf8_lossy(&line))),
        }
    }

    fn send(&mut self, out: &[u8]) -> Result<(), String> {
        self.stream.write_all(out).map_err(|e| e.to_string())
    }
}

fn account(i: u64) -> Vec<u8> {
    format!("account:{i:08}").into_bytes()
}

fn balance(r: Reply) -> Result<i64, String> {
    match r {
        Reply::Bulk(Some(v)) => String::from_utf8_lossy(&v)
            .parse()
            .map_err(|_| "a balance that is not a number".into()),
        _ => Err("an account without a balance".into()),
    }
}

/// Transfers until `stop`; returns (committed, aborted, latency of each committed transfer).
fn client(
    args: &Args,
    zipf: &Zipf,
    seed: u64,
    stop: &AtomicBool,
) -> Result<(u64, u64, Histogram<u64>), String> {
    let stream = TcpStream::connect(&args.addr).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut c = Conn {
        stream,
        buf: Vec::new(),
    };
    let mut rng = Rng::new(seed);
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let (mut committed, mut aborted) = (0u64, 0u64);
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let a = zipf.sample(&mut rng).min(args.keys - 1);
        let mut b = zipf.sample(&mut rng).min(args.keys - 1);
        if b == a {
            b = (a + 1) % args.keys;
        }
        let (from, to) = (account(a), account(b));
        let started = Instant::now();
        loop {
            out.clear();
            encode(&mut out, &[b"WATCH", &from, &to]);
            encode(&mut out, &[b"GET", &from]);
            encode(&mut out, &[b"GET", &to]);
            c.send(&out)?;
            c.reply()?;
            let (x, y) = (balance(c.reply()?)?, balance(c.reply()?)?);
            out.clear();
            encode(&mut out, &[b"MULTI"]);
            encode(&mut out, &[b"SET", &from, (x - 1).to_string().as_bytes()]);
            encode(&mut out, &[b"SET", &to, (y + 1).to_string().as_bytes()]);
            encode(&mut out, &[b"EXEC"]);
            c.send(&out)?;
            for _ in 0..3 {
                c.reply()?;
            }
            match c.reply()? {
                Reply::Array(Some(_)) => break,
                Reply::Array(None) => aborted += 1,
                _ => return Err("EXEC answered neither an array nor null".into()),
            }
        }
        committed += 1;
        let _ = hist.record(started.elapsed().as_nanos() as u64);
    }
    Ok((committed, aborted, hist))
}

/// Sets every account's balance, then runs the clients for `args.duration` and prints
/// transfers a second, the share of EXECs aborted, and latency.
pub fn run(args: &Args) -> Result<(), String> {
    let keys = args.keys.max(2);
    {
        let stream = TcpStream::connect(&args.addr).map_err(|e| e.to_string())?;
        let mut c = Conn {
            stream,
            buf: Vec::new(),
        };
        let mut out = Vec::new();
        for i in 0..keys {
            encode(&mut out, &[b"SET", &account(i), b"1000000"]);
        }
        c.send(&out)?;
        for _ in 0..keys {
            c.reply()?;
        }
    }
    let s = Zipf::calibrate(keys, args.hot_keys, args.hot_requests);
    let zipf = Arc::new(Zipf::new(keys, s));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let clients: Vec<_> = (0..args.clients)
        .map(|i| {
            let (args, zipf, stop) = (args.clone(), zipf.clone(), stop.clone());
            std::thread::spawn(move || client(&args, &zipf, args.seed + i as u64, &stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(args.duration));
    stop.store(true, Ordering::Relaxed);
    let (mut committed, mut aborted) = (0u64, 0u64);
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for c in clients {
        let (d, a, h) = c.join().map_err(|_| "a client panicked".to_string())??;
        committed += d;
        aborted += a;
        hist.add(h).map_err(|e| e.to_string())?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let ms = |ns: u64| ns as f64 / 1e6;
    println!(
        "{} clients, {keys} accounts (Zipf s={s:.3}), \
         transfers by WATCH/GET/GET/MULTI/SET/SET/EXEC",
        args.clients
    );
    println!(
        "{committed} transfers in {elapsed:.1} s: {:.0} transfers/s; {:.2}% of EXECs aborted; \
         latency median {:.3} ms, p99 {:.3} ms",
        committed as f64 / elapsed,
        100.0 * aborted as f64 / (committed + aborted).max(1) as f64,
        ms(hist.value_at_quantile(0.5)),
        ms(hist.value_at_quantile(0.99))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_load::Mix;

    #[test]
    fn transfers_move_units_and_keep_the_total() {
        let dir = tempfile::tempdir().unwrap();
        let server = strata_server::Server::start(strata_server::Config {
            dir: dir.path().into(),
            port: 0,
            ..Default::default()
        })
        .unwrap();
        let args = Args {
            addr: server.local_addr().to_string(),
            clients: 4,
            keys: 20,
            value_size: 0,
            get_ratio: 0.0,
            hot_requests: 0.9,
            hot_keys: 0.1,
            threads: 1,
            duration: 0.5,
            rate: None,
            seed: 3,
            json: false,
            mix: Mix::Transfer,
        };
        run(&args).unwrap();
        let mut c = Conn {
            stream: TcpStream::connect(&args.addr).unwrap(),
            buf: Vec::new(),
        };
        let mut total = 0;
        let mut moved = false;
        for i in 0..args.keys {
            let mut out = Vec::new();
            encode(&mut out, &[b"GET", &account(i)]);
            c.send(&out).unwrap();
            let b = balance(c.reply().unwrap()).unwrap();
            moved |= b != 1_000_000;
            total += b;
        }
        assert_eq!(total, 1_000_000 * args.keys as i64);
        assert!(moved, "no transfer happened");
    }
}

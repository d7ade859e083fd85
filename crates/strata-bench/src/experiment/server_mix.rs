//! The LSM server's workload (seed 001): 25 clients send GETs and SETs of 1 KB values over
//! 1,000 keys drawn from a Zipf distribution that puts 90% of the requests on 10% of the
//! keys, for several GET ratios, closed loop and open loop at a fixed arrival rate. The
//! same runs go to `strata serve` and to redis-server with AOF fsynced every second, one
//! server after the other on the same machine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Common, Out, Table, num};
use crate::plot::{self, Axis, Panel, Series};
use crate::server_load::{self, Mix};

#[derive(clap::Args, Debug, Clone)]
#[command(rename_all = "snake_case")]
pub struct Args {
    #[command(flatten)]
    pub common: Common,
    /// Shares of GETs, one run each (the rest are SETs).
    #[arg(long, default_value = "0.1,0.5,0.9,0.99")]
    pub ratios: String,
    /// Seconds per run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Requests per second over all clients in the open-loop runs.
    #[arg(long, default_value_t = 5000.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 25)]
    pub clients: usize,
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    #[arg(long, default_value_t = 1024)]
    pub value_size: usize,
    /// Servers: `strata` (strata serve --sync everysec) and `redis` (redis-server with
    /// appendonly yes, appendfsync everysec).
    #[arg(long, default_value = "strata,redis")]
    pub servers: String,
    /// The strata binary (default: beside this one, then target/release/strata).
    #[arg(long)]
    pub strata: Option<PathBuf>,
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Rounds, each starting every server afresh, the first server rotating each round;
    /// the table and the figure show each run's median round by throughput.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

/// A server process, stopped when dropped.
pub(super) struct Server {
    child: Child,
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

fn start(name: &str, a: &Args, dir: &Path) -> Result<Server, String> {
    start_server(name, &a.strata, &a.redis_server, dir)
}

/// Starts `strata serve` or redis-server (AOF on, everysec) over `dir`, on a free port.
pub(super) fn start_server(
    name: &str,
    strata: &Option<PathBuf>,
    redis_server: &Path,
    dir: &Path,
) -> Result<Server, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let port = free_port()?;
    let mut cmd = match name {
        "strata" => {
            let mut c = Command::new(super::strata_binary(strata)?);
            c.arg("serve").arg("--dir").arg(dir.join("db"));
            c.args(["--port", &port.to_string(), "--sync", "everysec"]);
            c
        }
        "redis" => {
            let mut c = Command::new(redis_server);
            c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"]);
            c.arg("--dir").arg(dir);
            c.args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
            ]);
            c
        }
        other => return Err(format!("unknown server {other:?} (strata, redis)")),
    };
    let log = std::fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
    let child = cmd
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{name}: cannot start {:?}: {e}", cmd.get_program()))?;
    let server = Server {
        child,
        addr: format!("127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if ping(&server.addr) {
            return Ok(server);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "{name} did not answer PING on {} within 20 s (see {})",
        server.addr,
        dir.join("server.log").display()
    ))
}

fn ping(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 16];
    s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && s.read(&mut buf)
            .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
}

/// One run's figures, response times in milliseconds.
struct Run {
    round: usize,
    server: String,
    ratio: f64,
    open: bool,
    throughput: f64,
    avg: f64,
    median: f64,
    p95: f64,
    p99: f64,
    requests: u64,
    /// The distribution: (milliseconds, share of requests answered within it).
    cdf: Vec<(f64, f64)>,
}

pub fn run(a: &Args) -> Result<(), String> {
    let ratios: Vec<f64> = super::list(&a.ratios, "--ratios")?;
    let servers: Vec<String> = super::list(&a.servers, "--servers")?;
    let mut out = Out::start("server-mix", &a.common, &["strata"])?;
    out.say(&format!(
        "server-mix: {} clients, {} keys, {}-byte values, Zipf with exponent {:.6} (90% of \
         requests on 10% of the keys); {} s per run; open loop at {} requests/s",
        a.clients,
        a.keys,
        a.value_size,
        server_load::Zipf::calibrate(a.keys, 0.1, 0.9),
        a.duration,
        a.rate
    ));
    let mut all = Vec::new();
    let rounds = a.rounds.max(1);
    let bar = super::progress((rounds * servers.len() * ratios.len() * 2) as u64, "runs");
    for round in 0..rounds {
        for k in 0..servers.len() {
            let name = &servers[(round + k) % servers.len()];
            all.push(server_runs(
                a,
                &out.db_dir(&format!("{name}-{round}")),
                name,
                round,
                &ratios,
                &bar,
            )?);
        }
    }
    bar.finish_and_clear();
    if servers.iter().any(|s| s == "redis") {
        let version = Command::new(&a.redis_server)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or("version unknown (redis-server --version failed)".into());
        out.say(&format!("redis:    {version}"));
    }
    let all: Vec<Run> = all.into_iter().flatten().collect();
    // Each (server, ratio, loop) by its median round.
    let mut runs: Vec<&Run> = Vec::new();
    for name in &servers {
        for &ratio in &ratios {
            for open in [false, true] {
                let mut rounds: Vec<&Run> = all
                    .iter()
                    .filter(|r| &r.server == name && r.ratio == ratio && r.open == open)
                    .collect();
                rounds.sort_by(|x, y| x.throughput.total_cmp(&y.throughput));
                runs.push(rounds[rounds.len() / 2]);
            }
        }
    }

    let mut table = Table::new(&[
        "round",
        "median_round",
        "server",
        "get_ratio",
        "loop",
        "throughput_req_per_sec",
        "avg_ms",
        "median_ms",
        "p95_ms",
        "p99_ms",
        "requests",
    ]);
    for r in &all {
        table.push(vec![
            json!(r.round + 1),
            json!(runs.iter().any(|m| std::ptr::eq(*m, r))),
            json!(r.server),
            json!(r.ratio),
            json!(if r.open { "open" } else { "closed" }),
            num(r.throughput),
            num(r.avg),
            num(r.median),
            num(r.p95),
            num(r.p99),
            json!(r.requests),
        ]);
    }
    out.say("");
    out.say(&format!(
        "the median of {rounds} rounds by throughput (every round is in the CSV; p99 in each \
         round in brackets)"
    ));
    out.say(&format!(
        "{:<8} {:>6} {:<18} {:>12} {:>8} {:>8} {:>8} {:>8}  {}",
        "server", "ratio", "loop", "req/s", "avg ms", "med ms", "p95 ms", "p99 ms", "p99 by round"
    ));
    for r in &runs {
        let p99s: Vec<String> = all
            .iter()
            .filter(|x| x.server == r.server && x.ratio == r.ratio && x.open == r.open)
            .map(|x| format!("{:.3}", x.p99))
            .collect();
        let mode = if r.open {
            format!("open, {} req/s", a.rate)
        } else {
            "closed".to_string()
        };
        out.say(&format!(
            "{:<8} {:>6} {:<18} {:>12.0} {:>8.3} {:>8.3} {:>8.3} {:>8.3}  [{}]",
            r.server,
            r.ratio,
            mode,
            r.throughput,
            r.avg,
            r.median,
            r.p95,
            r.p99,
            p99s.join(", ")
        ));
    }
    let mut panels = Vec::new();
    for name in &servers {
        for open in [false, true] {
            let title = match open {
                false => format!("{name}: closed loop"),
                true => format!("{name}: open loop at {} req/s", a.rate),
            };
            panels.push(Panel {
                title,
                x: Axis::log("response time (ms)"),
                y: Axis::linear("share of requests answered within"),
                series: runs
                    .iter()
                    .filter(|r| &r.server == name && r.open == open)
                    .map(|r| Series {
                        name: format!("GET ratio {}", r.ratio),
                        points: r.cdf.clone(),
                    })
                    .collect(),
            });
        }
    }
    plot::lines(
        &out.path("svg"),
        &format!(
            "Response time distribution per GET ratio, {} clients, {} B values (seed 001)",
            a.clients, a.value_size
        ),
        &panels,
        2,
    )?;
    out.finish(&table)
}

/// Starts server `name` in `dir` and runs every ratio on it, closed loop then open loop.
fn server_runs(
    a: &Args,
    dir: &Path,
    name: &str,
    round: usize,
    ratios: &[f64],
    bar: &indicatif::ProgressBar,
) -> Result<Vec<Run>, String> {
    let mut runs = Vec::new();
    {
        let server = start(name, a, dir)?;
        for &ratio in ratios {
            for open in [false, true] {
                bar.set_message(format!(
                    "{name} {ratio} {}",
                    if open { "open" } else { "closed" }
                ));
                let args = server_load::Args {
                    addr: server.addr.clone(),
                    clients: a.clients,
                    keys: a.keys,
                    value_size: a.value_size,
                    get_ratio: ratio,
                    hot_requests: 0.9,
                    hot_keys: 0.1,
                    threads: 1,
                    duration: a.duration,
                    rate: open.then_some(a.rate),
                    seed: 7,
                    json: false,
                    mix: Mix::Getset,
                };
                let r = server_load::measure(&args)?;
                let ms = |q: f64| r.hist.value_at_quantile(q) as f64 / 1e6;
                let mut cdf: Vec<(f64, f64)> = (1..=100)
                    .map(|i| (ms(i as f64 / 100.0), i as f64 / 100.0))
                    .collect();
                cdf.extend([0.995, 0.999].map(|q| (ms(q), q)));
                cdf.sort_by(|x, y| x.1.total_cmp(&y.1));
                let requests = r.gets + r.sets;
                runs.push(Run {
                    round,
                    server: name.to_string(),
                    ratio,
                    open,
                    throughput: requests as f64 / r.elapsed,
                    avg: r.hist.mean() / 1e6,
                    median: ms(0.5),
                    p95: ms(0.95),
                    p99: ms(0.99),
                    requests,
                    cdf,
                });
                bar.inc(1);
            }
        }
        drop(server);
    }
    Ok(runs)
}

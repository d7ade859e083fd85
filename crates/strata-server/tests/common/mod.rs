//! What the server's test files share: starting a server, connecting to it.
#![allow(dead_code)]

use strata_server::{Config, Server, SyncMode};

/// The engine's default options under the merge policy `STRATA_MERGE_POLICY` names
/// (`leveling`, `tiering` or `lazy`; leveling when unset), so that the server's tests run
/// under each (`scripts/test.sh`). A name it does not know fails the test.
pub fn engine_options() -> strata::Options {
    let merge_policy = match std::env::var("STRATA_MERGE_POLICY").as_deref() {
        Err(_) | Ok("leveling") => strata::MergePolicy::Leveling,
        Ok("tiering") => strata::MergePolicy::Tiering,
        Ok("lazy") => strata::MergePolicy::LazyLeveling,
        Ok(other) => panic!("STRATA_MERGE_POLICY={other}: leveling, tiering or lazy"),
    };
    strata::Options {
        merge_policy,
        ..strata::Options::default()
    }
}

/// A server on a free port over `dir`, with `tweak` applied to its configuration.
pub fn start(dir: &std::path::Path, tweak: impl FnOnce(&mut Config)) -> Server {
    let mut config = Config {
        dir: dir.to_path_buf(),
        port: 0,
        sync: SyncMode::EverySec,
        engine: engine_options(),
        ..Config::default()
    };
    tweak(&mut config);
    Server::start(config).unwrap()
}

/// A connection to the server at `addr`, for threads that cannot borrow the server.
pub fn connect(addr: std::net::SocketAddr) -> redis::Connection {
    redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// A random test's seed: `STRATA_SEED` when set (to replay a run), else drawn from the clock;
/// printed either way.
pub fn seed() -> u64 {
    let seed = std::env::var("STRATA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("STRATA_SEED={seed}");
    seed
}

//! What the server's test files share: starting a server, connecting to it.

use strata_server::{Config, Server, SyncMode};

/// A server on a free port over `dir`, with `tweak` applied to its configuration.
pub fn start(dir: &std::path::Path, tweak: impl FnOnce(&mut Config)) -> Server {
    let mut config = Config {
        dir: dir.to_path_buf(),
        port: 0,
        sync: SyncMode::EverySec,
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

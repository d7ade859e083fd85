//! A connection that sent PSYNC leaves its worker: its socket, the replies it is owed and
//! the bytes it sent after go to the replication threads (`crate::replication::primary`).

use std::sync::Arc;

use super::client::Client;
use crate::replication::primary::Wire;
use crate::shared::Shared;
use crate::tls::Stream;

pub(super) fn start(shared: Arc<Shared>, mut c: Client) {
    let Some(h) = c.handoff.take() else {
        return;
    };
    let owed = c.output.get(c.sent..).unwrap_or_default().to_vec();
    let input = std::mem::take(&mut c.input);
    let wire = match c.stream {
        Stream::Plain(sock) => {
            let sock: std::net::TcpStream = sock.into();
            sock.set_nonblocking(false).map(|()| Wire::plain(sock))
        }
        Stream::Tls { sock, tls } => {
            let sock: std::net::TcpStream = sock.into();
            sock.set_nonblocking(false)
                .and_then(|()| Wire::tls(sock, *tls))
        }
    };
    // A socket that cannot be taken over is closed: the replica connects again.
    if let Ok(wire) = wire {
        crate::replication::primary::start(shared, wire, owed, input, *h);
    }
}

//! A connection that sent PSYNC leaves its worker: its socket, the replies it is owed and
//! the bytes it sent after go to the replication threads (`crate::replication::primary`).

use std::sync::Arc;

use super::client::Client;
use crate::shared::Shared;
use crate::tls::Stream;

pub(super) fn start(shared: Arc<Shared>, mut c: Client) {
    let Some(h) = c.handoff.take() else {
        return;
    };
    let owed = c.output.get(c.sent..).unwrap_or_default().to_vec();
    let input = std::mem::take(&mut c.input);
    match c.stream {
        Stream::Plain(sock) => {
            let sock: std::net::TcpStream = sock.into();
            if sock.set_nonblocking(false).is_ok() {
                crate::replication::primary::start(shared, sock, owed, input, *h);
            }
        }
        // A replica's link over TLS is not served: the connection is closed, and the
        // replica reports the primary's silence.
        Stream::Tls { .. } => {
            eprintln!("strata: a replica asked to sync over TLS, which is not served yet");
        }
    }
}

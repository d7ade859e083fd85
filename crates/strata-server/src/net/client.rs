//! One connection's stream and buffers, as its worker holds them.

use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use crate::clients::ClientInfo;
use crate::shared::Shared;

use crate::commands::Connection;
use crate::tls::Stream;

/// One connection and what the worker knows of it.
pub(super) struct Client {
    pub(super) stream: Stream,
    pub(super) input: Vec<u8>,
    pub(super) output: Vec<u8>,
    /// Bytes at the front of `output` already sent.
    pub(super) sent: usize,
    pub(super) state: Connection,
    /// The socket may hold bytes not yet read (cleared when a read would block).
    pub(super) readable: bool,
    /// Send what is owed, then close (QUIT, a protocol error, the peer's end of input).
    pub(super) closing: bool,
    /// Closed for breaking a limit: the session is cut off, not ended.
    pub(super) cut_off: bool,
    /// SETs and GETs of this connection waiting in the worker's batch.
    pub(super) in_batch: usize,
    /// Of those, the GETs.
    pub(super) gets_in_batch: usize,
    /// Registered for writability because replies are waiting on a full socket.
    pub(super) want_write: bool,
    /// In the next round's list already.
    pub(super) queued: bool,
    pub(super) last_activity: Instant,
    /// The blocking command the connection waits on, if it is parked.
    pub(super) parked: Option<Parked>,
    /// Its script runs on the script thread: its later commands wait for the reply.
    pub(super) awaiting_script: bool,
    /// When its unsent replies last went past its class's soft output limit.
    pub(super) over_soft_since: Option<Instant>,
    /// It sent PSYNC: its socket goes to the replication threads after this round.
    pub(super) handoff: Option<Box<crate::replication::state::Handoff>>,
}

/// A parked connection's command, and where it waits.
pub(super) struct Parked {
    /// The connection's client ID.
    pub(super) id: u64,
    pub(super) argv: Vec<Vec<u8>>,
    pub(super) keys: Vec<Vec<u8>>,
    pub(super) deadline: Option<Instant>,
    pub(super) ticket: u64,
}

impl Client {
    /// Bytes of replies not yet sent (1 for encrypted bytes that wait, under TLS).
    pub(super) fn unsent(&self) -> usize {
        self.output.len() - self.sent + usize::from(self.stream.has_pending())
    }

    /// Ends the connection without its owed replies: a broken limit or a broken socket.
    pub(super) fn cut_off(&mut self) {
        self.readable = false;
        self.closing = true;
        self.cut_off = true;
        self.output.clear();
        self.sent = 0;
    }

    /// Writes unsent replies until they are all sent or the socket is full.
    pub(super) fn write_out(&mut self) -> Written {
        while self.output.len() > self.sent {
            match self
                .stream
                .write(self.output.get(self.sent..).unwrap_or_default())
            {
                Ok(0) => return Written::Broken,
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Written::Blocked,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Written::Broken,
            }
        }
        match self.stream.flush_pending() {
            Ok(()) => Written::All,
            Err(e) if e.kind() == ErrorKind::WouldBlock => Written::Blocked,
            Err(_) => Written::Broken,
        }
    }
}

impl Client {
    /// Enters the connection in the registry CLIENT LIST reads, as served by `worker`.
    pub(super) fn register(&mut self, shared: &Shared, worker: usize) {
        let sock = self.stream.socket();
        let shown = |a: std::io::Result<std::net::SocketAddr>| {
            a.map_or_else(|_| "?:0".to_string(), |a| a.to_string())
        };
        let info = Arc::new(ClientInfo::new(
            self.state.id,
            worker,
            shown(sock.peer_addr()),
            shown(sock.local_addr()),
            i64::from(sock.as_raw_fd()),
        ));
        shared.clients.add(info.clone());
        self.state.info = Some(info);
    }
}

/// The slots of the connections CLIENT KILL marked.
pub(super) fn killed(shared: &Shared, clients: &[Option<Client>]) -> Vec<usize> {
    if !shared.clients.kills_pending() {
        return Vec::new();
    }
    let marked = |c: &Client| c.state.info.as_ref().is_some_and(|i| i.killed());
    (0..clients.len())
        .filter(|&i| clients.get(i).and_then(Option::as_ref).is_some_and(marked))
        .collect()
}

/// How far [`Client::write_out`] got.
#[derive(PartialEq, Eq)]
pub(super) enum Written {
    All,
    /// The socket's buffer is full; the rest waits for it to drain.
    Blocked,
    /// The peer is gone.
    Broken,
}

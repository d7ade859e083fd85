//! The acceptor: new connections, dealt to the workers in turn.

use std::io::{ErrorKind, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};

use crate::shared::Shared;

use super::worker::{TICK, WorkerHandle};

const LISTEN: Token = Token(usize::MAX - 1);

/// Accepts connections until shutdown and deals them to the workers in turn. Each listener
/// comes with whether it is the TLS port.
pub(crate) fn accept_loop(
    listeners: Vec<(std::net::TcpListener, bool)>,
    shared: Arc<Shared>,
    workers: Arc<Vec<WorkerHandle>>,
    mut poll: Poll,
) {
    let mut listeners: Vec<(TcpListener, bool)> = listeners
        .into_iter()
        .map(|(l, tls)| (TcpListener::from_std(l), tls))
        .collect();
    for (i, (listener, _)) in listeners.iter_mut().enumerate() {
        if poll
            .registry()
            .register(listener, Token(LISTEN.0 - i), Interest::READABLE)
            .is_err()
        {
            return;
        }
    }
    let mut events = Events::with_capacity(64);
    let mut next = 0usize;
    while !shared.shutdown.load(Ordering::SeqCst) {
        if let Err(e) = poll.poll(&mut events, Some(TICK))
            && e.kind() != ErrorKind::Interrupted
        {
            std::thread::sleep(TICK);
        }
        for (listener, tls) in &listeners {
            next = accept_all(listener, *tls, &shared, &workers, next);
        }
    }
}

/// Accepts what waits on one listener; `next` is the worker whose turn it is, returned moved
/// on.
fn accept_all(
    listener: &TcpListener,
    tls: bool,
    shared: &Shared,
    workers: &[WorkerHandle],
    mut next: usize,
) -> usize {
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // Out of descriptors and the like: wait for the next readiness or tick.
            Err(_) => break,
        };
        let counters = &shared.counters;
        counters
            .connections_received
            .fetch_add(1, Ordering::Relaxed);
        let _ = stream.set_nodelay(true);
        keep_alive(&stream, shared.tcp_keepalive.load(Ordering::Relaxed));
        if counters.connected.load(Ordering::SeqCst) >= shared.max_clients.load(Ordering::Relaxed) {
            counters.rejected.fetch_add(1, Ordering::Relaxed);
            // A best-effort note to the refused client; the socket is fresh and empty.
            let mut s = stream;
            let _ = s.write(b"-ERR max number of clients reached\r\n");
            continue;
        }
        let Some(worker) = workers.get(next % workers.len().max(1)) else {
            return next;
        };
        next = next.wrapping_add(1);
        // Convert back to a std stream to cross the channel; the worker registers it.
        let std_stream = std::net::TcpStream::from(stream);
        counters.connected.fetch_add(1, Ordering::SeqCst);
        if worker.sender.send((std_stream, tls)).is_err() {
            counters.connected.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        worker.wake();
    }
    next
}

/// Turns on TCP keepalive probes after `secs` idle seconds (0: off), as Redis's
/// `tcp-keepalive`: a peer that vanished without closing (a half-open connection) is found
/// and closed by the kernel, and its connection with it.
pub(crate) fn keep_alive<S: std::os::fd::AsFd>(stream: &S, secs: u64) {
    if secs == 0 {
        return;
    }
    // As Redis: probes after `secs`, then every third of it, three times.
    let secs = secs.min(crate::config::MAX_KEEPALIVE_SECS);
    let probe = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(secs))
        .with_interval(Duration::from_secs((secs / 3).max(1)))
        .with_retries(3);
    // Best effort, as Redis: a socket that refuses keeps working without it.
    let _ = socket2::SockRef::from(stream).set_tcp_keepalive(&probe);
}

#[cfg(test)]
mod keepalive_tests {
    use super::*;

    #[test]
    fn accepted_sockets_get_the_keepalive_asked_for() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, _) = listener.accept().unwrap();
        let sock = socket2::SockRef::from(&server_side);
        assert!(!sock.keepalive().unwrap());
        keep_alive(&server_side, 0);
        assert!(!sock.keepalive().unwrap(), "0 leaves keepalive off");
        keep_alive(&server_side, 300);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.keepalive_time().unwrap(), Duration::from_secs(300));
        assert_eq!(sock.keepalive_interval().unwrap(), Duration::from_secs(100));
        assert_eq!(sock.keepalive_retries().unwrap(), 3);
    }
}

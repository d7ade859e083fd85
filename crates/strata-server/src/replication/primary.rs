//! The primary's side of a replica's link: PSYNC hands the connection's socket to a sender
//! thread, which copies a snapshot when the replica needs one and then streams the write
//! batches; a reader thread beside it takes the replica's acknowledgements.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata::{Error, ReadOptions};

use super::backlog::From;
use super::state::{Attached, Handoff};
use super::{OFFSET_KEY, frame};
use crate::shared::Shared;

/// The engine key WAIT parks its connections on: acknowledgements "write" it.
pub(crate) const WAIT_KEY: &[u8] = b"\xFFwait";
/// Bytes of keys and values in one frame of a snapshot.
const PAIRS_FRAME_BYTES: usize = 256 << 10;
/// A link with nothing to send says it is alive this often.
const PING_EVERY: Duration = Duration::from_secs(1);
/// Under a steady stream of writes a sender gathers for this long before it sends, so that
/// one system call carries many batches rather than one each.
const GATHER: Duration = Duration::from_micros(2000);
/// A replica that takes nothing for this long is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// A replica's link as the primary holds it: the socket, and the TLS session over it when
/// the replica came to the TLS port. The sender writes and the reader reads at once: over
/// TLS they take turns on the session, the reader for a millisecond at a time.
pub(crate) struct Wire {
    sock: TcpStream,
    tls: Option<Mutex<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>>,
}

impl Wire {
    pub(crate) fn plain(sock: TcpStream) -> Wire {
        Wire { sock, tls: None }
    }

    pub(crate) fn tls(sock: TcpStream, session: rustls::ServerConnection) -> io::Result<Wire> {
        let control = sock.try_clone()?;
        Ok(Wire {
            sock: control,
            tls: Some(Mutex::new(rustls::StreamOwned::new(session, sock))),
        })
    }

    fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        match &self.tls {
            None => (&self.sock).write_all(buf),
            Some(t) => {
                let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
                t.write_all(buf)?;
                t.flush()
            }
        }
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.tls {
            None => (&self.sock).read(buf),
            Some(t) => t.lock().unwrap_or_else(|e| e.into_inner()).read(buf),
        }
    }

    /// How long a read waits: over TLS briefly, since the sender waits for the session.
    fn read_wait(&self) -> Duration {
        if self.tls.is_some() {
            Duration::from_millis(1)
        } else {
            Duration::from_secs(1)
        }
    }
}

/// Takes over a connection that sent PSYNC: `out` holds replies it is owed, `input` the
/// bytes it sent after PSYNC.
pub(crate) fn start(shared: Arc<Shared>, wire: Wire, out: Vec<u8>, input: Vec<u8>, h: Handoff) {
    let r = &shared.replication;
    // Before the snapshot is taken: every batch after it reaches the backlog or the WAL.
    r.backlog.activate();
    let attached = Arc::new(Attached::new(h.ip.clone(), h.port));
    r.replicas
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(attached.clone());
    let spawned = r.spawn("strata-repl-send", {
        let attached = attached.clone();
        let shared = shared.clone();
        move || {
            let _ = wire.sock.set_nodelay(true);
            let _ = wire.sock.set_write_timeout(Some(WRITE_TIMEOUT));
            let _ = wire.sock.set_read_timeout(Some(wire.read_wait()));
            let wire = Arc::new(wire);
            let acks = {
                let (shared, attached, wire) = (shared.clone(), attached.clone(), wire.clone());
                std::thread::Builder::new()
                    .name("strata-repl-acks".into())
                    .spawn(move || read_acks(&shared, &attached, &wire, input))
            };
            let _ = send(&shared, &attached, &wire, out, h.asked);
            detach(&shared, &attached);
            let _ = wire.sock.shutdown(std::net::Shutdown::Both);
            if let Ok(acks) = acks {
                let _ = acks.join();
            }
        }
    });
    if spawned.is_err() {
        detach(&shared, &attached);
    }
}

fn detach(shared: &Shared, attached: &Arc<Attached>) {
    attached.closed.store(true, Ordering::Release);
    shared
        .replication
        .replicas
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|x| !Arc::ptr_eq(x, attached));
    shared.notify_written(&[WAIT_KEY.to_vec()]);
}

/// Writes frames, buffering them until `flush`.
struct Frames<'s> {
    wire: &'s Wire,
    buf: Vec<u8>,
}

impl Frames<'_> {
    fn frame(&mut self, tag: u8, payload: &[u8]) -> std::io::Result<()> {
        let len =
            u32::try_from(payload.len()).map_err(|_| std::io::Error::other("frame over 4 GiB"))?;
        self.buf.push(tag);
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(payload);
        if self.buf.len() >= 64 << 10 {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.wire.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Where the replica starts: the offset asked for when this server still holds the writes
/// from there on, else `None` (a full copy).
fn resumable(shared: &Shared, asked: Option<(String, u64)>) -> Option<u64> {
    let (id, next) = asked?;
    if id != shared.replication.replid || next == 0 || next > shared.db.latest_sequence() + 1 {
        return None;
    }
    if let From::Here(_) = shared.replication.backlog.from(next) {
        return Some(next);
    }
    match shared.db.updates_since(next).ok()?.next() {
        None | Some(Ok(_)) => Some(next),
        Some(Err(_)) => None,
    }
}

fn send(
    shared: &Shared,
    attached: &Attached,
    wire: &Wire,
    owed: Vec<u8>,
    asked: Option<(String, u64)>,
) -> std::io::Result<()> {
    let r = &shared.replication;
    let mut w = Frames { wire, buf: owed };
    let partial = asked.is_some();
    let mut next = match resumable(shared, asked) {
        Some(next) => {
            r.partial_ok.fetch_add(1, Ordering::Relaxed);
            w.buf
                .extend_from_slice(format!("+CONTINUE {}\r\n", r.replid).as_bytes());
            next
        }
        None => {
            if partial {
                r.partial_err.fetch_add(1, Ordering::Relaxed);
            }
            r.full_syncs.fetch_add(1, Ordering::Relaxed);
            send_snapshot(shared, &mut w)?
        }
    };
    w.flush()?;
    // Counted by WAIT from its first acknowledgement: a copy sent is not yet applied.
    attached.streams();
    let mut last_sent = Instant::now();
    loop {
        if attached.closed.load(Ordering::Acquire) || shared.shutdown.load(Ordering::Relaxed) {
            break;
        }
        if attached.getack.swap(false, Ordering::AcqRel) {
            w.frame(frame::GETACK, &[])?;
        }
        match r.backlog.from(next) {
            From::Here(records) if records.is_empty() => {
                if last_sent.elapsed() >= PING_EVERY {
                    w.frame(frame::PING, &[])?;
                }
                if !w.buf.is_empty() {
                    w.flush()?;
                    last_sent = Instant::now();
                }
                r.backlog.wait(next, PING_EVERY);
                if last_sent.elapsed() < GATHER * 5 && !attached.getack.load(Ordering::Acquire) {
                    r.backlog.gather(GATHER);
                }
                continue;
            }
            From::Here(records) => {
                for rec in records {
                    w.frame(frame::BATCH, &rec.bytes)?;
                    next = rec.end;
                }
            }
            // Nothing newer than what it has: wait for a write rather than read the WALs.
            From::Before if shared.db.latest_sequence() < next => {
                r.backlog.wait(next, PING_EVERY);
                continue;
            }
            From::Before => {
                let before = next;
                next = send_from_wal(shared, &mut w, next)?;
                // Nothing logged since: wait for the next write rather than read again.
                if next == before {
                    r.backlog.wait(next, PING_EVERY);
                    continue;
                }
            }
        }
        w.flush()?;
        last_sent = Instant::now();
    }
    Ok(())
}

/// Sends the batches the WAL files hold from `next` on; the link ends when they no longer
/// hold it (the replica then asks again and is copied whole).
fn send_from_wal(shared: &Shared, w: &mut Frames, mut next: u64) -> std::io::Result<u64> {
    let updates = shared
        .db
        .updates_since(next)
        .map_err(std::io::Error::other)?;
    for item in updates {
        match item {
            Ok((first, batch)) => {
                w.frame(frame::BATCH, &batch.to_record(first))?;
                next = first + batch.len() as u64;
            }
            Err(e @ Error::UpdatesGone { .. }) => return Err(std::io::Error::other(e)),
            Err(e) => return Err(std::io::Error::other(e)),
        }
    }
    Ok(next)
}

/// `+FULLRESYNC`, then every key and value of a snapshot, then its end; the offset after it.
fn send_snapshot(shared: &Shared, w: &mut Frames) -> std::io::Result<u64> {
    let snapshot = shared.db.snapshot();
    let seq = snapshot.sequence();
    w.buf.extend_from_slice(
        format!("+FULLRESYNC {} {seq}\r\n", shared.replication.replid).as_bytes(),
    );
    let options = ReadOptions {
        snapshot: Some(snapshot),
        skip_cache: true,
        ..Default::default()
    };
    let mut it = shared.db.iter(&options).map_err(std::io::Error::other)?;
    it.seek_to_first().map_err(std::io::Error::other)?;
    let mut pairs = Vec::with_capacity(PAIRS_FRAME_BYTES + 1024);
    while it.valid() {
        if it.key() != OFFSET_KEY {
            for part in [it.key(), it.value()] {
                pairs.extend_from_slice(&(part.len() as u32).to_le_bytes());
                pairs.extend_from_slice(part);
            }
            if pairs.len() >= PAIRS_FRAME_BYTES {
                w.frame(frame::PAIRS, &pairs)?;
                pairs.clear();
            }
        }
        it.next().map_err(std::io::Error::other)?;
        if shared.shutdown.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("shutting down"));
        }
    }
    if !pairs.is_empty() {
        w.frame(frame::PAIRS, &pairs)?;
    }
    w.frame(frame::SNAPSHOT_END, &[])?;
    Ok(seq + 1)
}

/// Reads `REPLCONF ACK offset` from the replica until its link ends.
fn read_acks(shared: &Shared, attached: &Attached, wire: &Wire, mut input: Vec<u8>) {
    let limits = crate::resp::Limits::default();
    let mut args = crate::resp::Args::default();
    let mut chunk = vec![0u8; 4096];
    loop {
        let mut pos = 0;
        while let Ok(crate::resp::Parsed::Command(n)) =
            crate::resp::parse(input.get(pos..).unwrap_or_default(), &limits, &mut args)
        {
            pos += n;
            let ack = args
                .get(0)
                .is_some_and(|a| a.eq_ignore_ascii_case(b"replconf"))
                && args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"ack"));
            let offset = args
                .get(2)
                .and_then(|o| std::str::from_utf8(o).ok()?.parse::<u64>().ok());
            if let (true, Some(offset)) = (ack, offset) {
                attached.acknowledged(offset);
                shared.notify_written(&[WAIT_KEY.to_vec()]);
            }
        }
        input.drain(..pos);
        if attached.closed.load(Ordering::Acquire) {
            return;
        }
        match wire.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => input.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                // Over TLS the sender takes its turn on the session meanwhile.
                if wire.tls.is_some() {
                    std::thread::sleep(Duration::from_millis(4));
                }
            }
            Err(_) => break,
        }
        if input.len() > 1 << 20 {
            break;
        }
    }
    attached.closed.store(true, Ordering::Release);
    let _ = wire.sock.shutdown(std::net::Shutdown::Both);
    shared.replication.backlog.wake();
}

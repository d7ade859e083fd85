//! The replica's side: a thread that connects to the primary, logs in, asks for the writes
//! from its offset on, loads a full copy when the primary sends one, and applies each batch
//! in the primary's order, acknowledging its offset.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use strata::{WriteBatch, WriteOptions};

use super::state::Link;
use super::{COPYING_KEY, OFFSET_KEY, decode_offset, encode_offset, frame};
use crate::shared::Shared;
use crate::store::LAYOUT_KEY;

/// How long a read waits before the thread looks at its stop flag.
const POLL: Duration = Duration::from_millis(200);
/// Acknowledge at least this often, as Redis replicas do, so that the primary sees the lag.
const ACK_EVERY: Duration = Duration::from_secs(1);
/// Acknowledge a change no sooner than this after the last acknowledgement, unless WAIT asks.
const ACK_SOON: Duration = Duration::from_millis(100);
/// Where the server keeps its function libraries (`commands/scripting.rs`).
const FUNCTIONS: &[u8] = b"\xFFfunction";
/// Most bytes of the primary's batches gathered into one write.
const GATHER_BYTES: usize = 1 << 20;
/// The most bytes of one frame (a batch the engine accepted is far smaller).
const MAX_FRAME: usize = 1 << 30;

/// Starts following `host:port` on a thread of its own.
pub(crate) fn start(shared: &Shared, host: &str, port: u16) -> Result<Link, String> {
    let link = Link::new(host, port);
    // A copy that a crash cut short: its keys are a part of one until the next is whole.
    if let Ok(Some(_)) = shared.db.get(COPYING_KEY) {
        shared.replication.loading.store(true, Ordering::Release);
    }
    if let Ok(v) = shared.db.get(OFFSET_KEY)
        && let Some((_, offset)) = v.as_deref().and_then(decode_offset)
    {
        link.state.applied.store(offset, Ordering::Release);
    }
    let server = shared
        .me
        .get()
        .and_then(std::sync::Weak::upgrade)
        .ok_or("ERR the server is stopping")?;
    let l = link.clone();
    shared
        .replication
        .spawn("strata-replica", move || follow(&server, &l))?;
    Ok(link)
}

fn stopped(link: &Link, shared: &Shared) -> bool {
    link.stopping() || shared.shutdown.load(Ordering::Relaxed)
}

fn follow(shared: &Shared, link: &Link) {
    while !stopped(link, shared) {
        link.state.set_phase("connecting");
        if let Err(e) = session(shared, link)
            && !stopped(link, shared)
        {
            eprintln!("strata: replication from {}:{}: {e}", link.host, link.port);
        }
        link.state.set_up(false);
        shared.replication.loading.store(false, Ordering::Release);
        link.state.set_phase("connect");
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && !stopped(link, shared) {
            std::thread::sleep(POLL / 4);
        }
    }
    link.state.done.store(true, Ordering::Release);
}

/// Bytes read from the primary and not yet taken.
/// The link to the primary: a socket, or a TLS session over one (`tls-replication`).
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(t) => t.flush(),
        }
    }
}

struct Incoming {
    sock: Conn,
    buf: Vec<u8>,
    pos: usize,
}

impl Incoming {
    /// Reads what the socket has; false when a poll passed without bytes.
    fn fill(&mut self) -> Result<bool, String> {
        // What was taken goes, so that the buffer holds only what is not yet taken.
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let mut chunk = [0u8; 64 << 10];
        match self.sock.read(&mut chunk) {
            Ok(0) => Err("the primary closed the link".into()),
            Ok(n) => {
                self.buf
                    .extend_from_slice(chunk.get(..n).unwrap_or_default());
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(format!("reading from the primary: {e}")),
        }
    }

    fn rest(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// A line the primary sent, without its CRLF, once one is whole.
    fn line(&mut self) -> Option<String> {
        let rest = self.rest();
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(rest.get(..end)?).into_owned();
        self.pos += end + 2;
        Some(line)
    }

    /// A frame, once one is whole: its tag and payload.
    fn frame(&mut self) -> Result<Option<(u8, Vec<u8>)>, String> {
        let rest = self.rest();
        let (Some(&tag), Some(len)) = (rest.first(), rest.get(1..5)) else {
            return Ok(None);
        };
        let len = u32::from_le_bytes(len.try_into().map_err(|_| "short frame")?) as usize;
        if len > MAX_FRAME {
            return Err(format!("a frame of {len} bytes from the primary"));
        }
        let Some(payload) = rest.get(5..5 + len) else {
            return Ok(None);
        };
        let out = (tag, payload.to_vec());
        self.pos += 5 + len;
        Ok(Some(out))
    }
}

/// Sends a command and waits for its one-line reply.
fn ask(shared: &Shared, link: &Link, inc: &mut Incoming, args: &[&[u8]]) -> Result<String, String> {
    let mut out = Vec::new();
    crate::resp::Reply::new(&mut out, 2).array(args.len());
    for a in args {
        crate::resp::Reply::new(&mut out, 2).bulk(a);
    }
    inc.sock
        .write_all(&out)
        .map_err(|e| format!("writing to the primary: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(line) = inc.line() {
            return Ok(line);
        }
        if stopped(link, shared) || Instant::now() > deadline {
            return Err("no reply from the primary".into());
        }
        inc.fill()?;
    }
}

fn connect(shared: &Shared, link: &Link) -> Result<Conn, String> {
    let addr = (link.host.as_str(), link.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", link.host))?
        .next()
        .ok_or_else(|| format!("no address for {}", link.host))?;
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("cannot connect: {e}"))?;
    sock.set_read_timeout(Some(POLL))
        .and_then(|()| sock.set_write_timeout(Some(Duration::from_secs(5))))
        .and_then(|()| sock.set_nodelay(true))
        .map_err(|e| e.to_string())?;
    // Relaxed: a setting.
    if !shared.replication.settings.tls.load(Ordering::Relaxed) {
        return Ok(Conn::Plain(sock));
    }
    let files = shared
        .tls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|(files, _)| files.clone())
        .ok_or("tls-replication needs the server's own TLS files (--tls-cert-file, ...)")?;
    let config = crate::tls::client_config(&files)?;
    let name = rustls::pki_types::ServerName::try_from(link.host.clone())
        .map_err(|e| format!("{}: {e}", link.host))?;
    let session = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    Ok(Conn::Tls(Box::new(rustls::StreamOwned::new(session, sock))))
}

/// Logs in, announces this server, and asks for the writes it lacks; the primary's answer.
fn handshake(shared: &Shared, link: &Link, inc: &mut Incoming) -> Result<String, String> {
    let s = &shared.replication.settings;
    let auth = s
        .masterauth
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let user = s
        .masteruser
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(pass) = auth {
        let reply = match &user {
            Some(u) => ask(shared, link, inc, &[b"AUTH", u.as_bytes(), pass.as_bytes()])?,
            None => ask(shared, link, inc, &[b"AUTH", pass.as_bytes()])?,
        };
        if !reply.starts_with('+') {
            return Err(format!("the primary refused the login: {reply}"));
        }
    }
    let port = match s.announce_port.load(Ordering::Relaxed) {
        0 => u64::from(shared.port),
        p => p,
    };
    ask(
        shared,
        link,
        inc,
        &[b"REPLCONF", b"listening-port", port.to_string().as_bytes()],
    )?;
    let ip = s
        .announce_ip
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if !ip.is_empty() {
        ask(
            shared,
            link,
            inc,
            &[b"REPLCONF", b"ip-address", ip.as_bytes()],
        )?;
    }
    ask(shared, link, inc, &[b"REPLCONF", b"capa", b"psync2"])?;
    let stored = shared.db.get(OFFSET_KEY).map_err(|e| e.to_string())?;
    let (id, next) = match stored.as_deref().and_then(decode_offset) {
        Some((id, offset)) => (id, (offset + 1).to_string()),
        None => ("?".to_string(), "-1".to_string()),
    };
    ask(
        shared,
        link,
        inc,
        &[b"PSYNC", id.as_bytes(), next.as_bytes()],
    )
}

fn session(shared: &Shared, link: &Link) -> Result<(), String> {
    let sock = connect(shared, link)?;
    let mut inc = Incoming {
        sock,
        buf: Vec::new(),
        pos: 0,
    };
    let answer = handshake(shared, link, &mut inc)?;
    let words: Vec<&str> = answer.split_whitespace().collect();
    let replid = match words.as_slice() {
        ["+FULLRESYNC", id, seq] => {
            let seq: u64 = seq.parse().map_err(|_| format!("bad reply: {answer}"))?;
            link.state.set_phase("sync");
            load(shared, link, &mut inc, id, seq)?;
            id.to_string()
        }
        ["+CONTINUE", id, ..] => id.to_string(),
        _ => return Err(format!("the primary answered PSYNC with {answer}")),
    };
    link.state.set_phase("connected");
    link.state.set_up(true);
    link.state.heard();
    stream(shared, link, &mut inc, &replid)
}

/// Replaces every key with the primary's snapshot at `seq`.
fn load(
    shared: &Shared,
    link: &Link,
    inc: &mut Incoming,
    id: &str,
    seq: u64,
) -> Result<(), String> {
    let r = &shared.replication;
    r.loading.store(true, Ordering::Release);
    let engine = |e: strata::Error| format!("loading the copy: {e}");
    // Everything goes but the layout's version (the copy has the same), this record too,
    // and a mark says a copy is under way: a replica restarted before it ends knows its
    // keys are a part of one, answers LOADING, and is copied again.
    let mut clear = WriteBatch::new();
    clear.delete_range(b"", LAYOUT_KEY);
    clear.delete_range(&after(LAYOUT_KEY), &[0xFF; 64]);
    clear.put(COPYING_KEY, b"1");
    shared
        .db
        .write(clear, WriteOptions::default())
        .map_err(engine)?;
    link.state.applied.store(0, Ordering::Release);
    let timeout = Duration::from_secs(r.settings.timeout_secs.load(Ordering::Relaxed));
    let mut heard = Instant::now();
    loop {
        if stopped(link, shared) {
            return Err("stopped".into());
        }
        let Some((tag, payload)) = inc.frame()? else {
            if inc.fill()? {
                heard = Instant::now();
                link.state.heard();
            } else if heard.elapsed() > timeout {
                return Err("the primary went silent during the copy".into());
            }
            continue;
        };
        match tag {
            frame::PAIRS => {
                let mut batch = WriteBatch::new();
                let mut rest = payload.as_slice();
                while !rest.is_empty() {
                    let (key, after) = take_part(rest)?;
                    let (value, after) = take_part(after)?;
                    batch.put(key, value);
                    rest = after;
                }
                shared
                    .db
                    .write(batch, WriteOptions::default())
                    .map_err(engine)?;
            }
            frame::SNAPSHOT_END => break,
            frame::PING => {}
            other => return Err(format!("frame {other} in a copy")),
        }
    }
    let mut done = WriteBatch::new();
    done.put(OFFSET_KEY, &encode_offset(id, seq));
    done.delete(COPYING_KEY);
    shared
        .db
        .write(done, WriteOptions { sync: true })
        .map_err(engine)?;
    link.state.applied.store(seq, Ordering::Release);
    reload(shared)?;
    r.loading.store(false, Ordering::Release);
    Ok(())
}

/// The first key after `key`.
fn after(key: &[u8]) -> Vec<u8> {
    let mut k = key.to_vec();
    k.push(0);
    k
}

fn take_part(rest: &[u8]) -> Result<(&[u8], &[u8]), String> {
    let bad = || "a damaged copy frame".to_string();
    let len = rest.get(..4).ok_or_else(bad)?;
    let len = u32::from_le_bytes(len.try_into().map_err(|_| bad())?) as usize;
    let part = rest.get(4..4 + len).ok_or_else(bad)?;
    Ok((part, rest.get(4 + len..).unwrap_or_default()))
}

/// The server's own records that a copy may have changed.
fn reload(shared: &Shared) -> Result<(), String> {
    shared
        .replication
        .functions_stale
        .store(true, Ordering::Release);
    shared.databases.reload(&shared.db)?;
    shared.versions.reload(&shared.db)
}

/// Applies batches until the link ends, acknowledging as it goes.
fn stream(shared: &Shared, link: &Link, inc: &mut Incoming, replid: &str) -> Result<(), String> {
    let timeout = Duration::from_secs(
        shared
            .replication
            .settings
            .timeout_secs
            .load(Ordering::Relaxed),
    );
    let mut heard = Instant::now();
    // The first acknowledgement goes at once: WAIT counts a replica from it.
    let mut acked_at = Instant::now()
        .checked_sub(ACK_EVERY)
        .unwrap_or_else(Instant::now);
    let mut acked = None;
    loop {
        let mut ack_now = false;
        // The batches that arrived together are written together.
        let mut gathered = Gathered::new(link.state.applied());
        while let Some((tag, payload)) = inc.frame()? {
            if stopped(link, shared) {
                return Ok(());
            }
            match tag {
                frame::BATCH => {
                    gathered.add(shared, &payload)?;
                    if gathered.batch.approximate_size() >= GATHER_BYTES {
                        gathered.write(shared, link, replid)?;
                    }
                }
                frame::GETACK => {
                    gathered.write(shared, link, replid)?;
                    ack_now = true;
                }
                frame::PING => {}
                other => return Err(format!("unknown frame {other}")),
            }
        }
        gathered.write(shared, link, replid)?;
        let applied = link.state.applied();
        let since = acked_at.elapsed();
        // When WAIT asks, soon after a change, and once a second regardless.
        if ack_now || (acked != Some(applied) && since >= ACK_SOON) || since >= ACK_EVERY {
            let msg = format!(
                "*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n${}\r\n{applied}\r\n",
                applied.to_string().len()
            );
            inc.sock
                .write_all(msg.as_bytes())
                .map_err(|e| format!("writing to the primary: {e}"))?;
            acked = Some(applied);
            acked_at = Instant::now();
        }
        if stopped(link, shared) {
            return Ok(());
        }
        if inc.fill()? {
            heard = Instant::now();
            link.state.heard();
        } else if heard.elapsed() > timeout {
            return Err("the primary went silent".into());
        }
    }
}

/// The primary's batches gathered for one write, with the offset they reach.
struct Gathered {
    batch: WriteBatch,
    /// The last offset applied or gathered.
    offset: u64,
    /// A batch changed the database map (SWAPDB).
    swapped: bool,
    /// A batch changed the function libraries.
    functions: bool,
    /// The keys written, when connections are parked on keys (BLPOP on a replica).
    written: Vec<Vec<u8>>,
}

impl Gathered {
    fn new(applied: u64) -> Gathered {
        Gathered {
            batch: WriteBatch::new(),
            offset: applied,
            swapped: false,
            functions: false,
            written: Vec::new(),
        }
    }

    fn add(&mut self, shared: &Shared, record: &[u8]) -> Result<(), String> {
        // Acquire: pairs with the release of a worker that parks a connection.
        let parked = shared.parked.load(Ordering::Acquire) > 0;
        let (first, batch) = WriteBatch::from_record(record).map_err(|e| e.to_string())?;
        let expected = self.offset + 1;
        if first != expected {
            return Err(format!(
                "the primary sent the batch at {first} where {expected} was due"
            ));
        }
        for e in batch.entries() {
            let e = e.map_err(|e| e.to_string())?;
            self.swapped |= e.key == crate::store::DATABASES_KEY;
            self.functions |= e.key.starts_with(FUNCTIONS);
            if parked {
                self.written.push(e.key.to_vec());
            }
        }
        self.offset += batch.len() as u64;
        self.batch.append(&batch);
        Ok(())
    }

    /// Applies what was gathered, with the offset it reaches, in one write.
    fn write(&mut self, shared: &Shared, link: &Link, replid: &str) -> Result<(), String> {
        if self.offset == link.state.applied() {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut self.batch);
        batch.put(OFFSET_KEY, &encode_offset(replid, self.offset));
        let sync = shared.sync_mode() == crate::SyncMode::Always;
        shared
            .db
            .write(batch, WriteOptions { sync })
            .map_err(|e| format!("applying the primary's batch: {e}"))?;
        link.state.applied.store(self.offset, Ordering::Release);
        if std::mem::take(&mut self.swapped) {
            shared.databases.reload(&shared.db)?;
        }
        if std::mem::take(&mut self.functions) {
            shared
                .replication
                .functions_stale
                .store(true, Ordering::Release);
        }
        // Connections parked on these keys look again, as after a write of their own.
        shared.notify_written(&std::mem::take(&mut self.written));
        Ok(())
    }
}

//! A worker: polls its connections and answers them in rounds.

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::commands::{self, Connection};
use crate::resp::{self, Args, Limits, Parsed, Reply};
use crate::shared::{After, Shared};
use crate::tls::Stream;

use super::batch::Batch;
use super::client::{Client, Written};
use super::parking::{after_command, unpark, wait_on};

/// Stop running a connection's commands while this many reply bytes wait to be sent to it.
pub(crate) const OUTPUT_LIMIT: usize = 64 * 1024;
/// Most bytes read from one connection in one round.
const READ_PER_ROUND: usize = 256 * 1024;
/// How long a worker polls without sleeping, after a round of clients in lockstep, before it
/// blocks.
const SPIN: Duration = Duration::from_micros(50);
/// How long shutdown waits for a connection to take the replies it is owed.
const SHUTDOWN_SEND: Duration = Duration::from_secs(2);
const WAKE: Token = Token(usize::MAX);
/// Most GETs of one connection in a batch. Their replies are made together, before the
/// output limit is checked again, so this bounds how far a batch can overshoot it.
const MAX_BATCH_GETS_PER_CONNECTION: usize = 32;
/// How often an idle worker looks up to check for shutdown and idle connections.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// A worker as the acceptor sees it: where to send new connections and how to wake it.
pub(crate) struct WorkerHandle {
    /// New connections, each with whether it came to the TLS port.
    pub(super) sender: Sender<(std::net::TcpStream, bool)>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    pub(crate) fn spawn(shared: Arc<Shared>, index: usize) -> std::io::Result<WorkerHandle> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let (sender, receiver) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("strata-worker-{index}"))
            .spawn(move || Worker::new(shared, poll, receiver, index).run())?;
        Ok(WorkerHandle {
            sender,
            waker,
            thread: Some(thread),
        })
    }

    /// What wakes the worker: for the writes that let its parked connections through.
    pub(crate) fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// Wakes the worker so that it sees the shutdown flag now rather than at its next tick.
    pub(crate) fn wake(&self) {
        let _ = self.waker.wake();
    }

    pub(crate) fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What running a connection's input came to.
enum Advance {
    /// Nothing more to do until the socket says so.
    Idle,
    /// More to do, but its share of this round is spent (or its replies are backed up).
    Later,
    /// The next command must wait until the batch is done.
    NeedFlush,
    /// The next command waits for CLIENT PAUSE to end.
    Paused,
}

struct Worker {
    shared: Arc<Shared>,
    poll: Poll,
    incoming: Receiver<(std::net::TcpStream, bool)>,
    clients: Vec<Option<Client>>,
    free: Vec<usize>,
    batch: Batch,
    limits: Limits,
    /// The command being run, parsed.
    args: Args,
    scratch: Vec<u8>,
    /// Commands run in the current round.
    round_commands: u64,
    /// This worker's place among the workers (parked connections are filed under it).
    index: usize,
    /// Messages published to this worker's connections, kept from turn to turn.
    inbox: Vec<crate::pubsub::Delivery>,
    /// Connections whose next command waits for CLIENT PAUSE to end.
    paused: Vec<usize>,
}

impl Worker {
    fn new(
        shared: Arc<Shared>,
        poll: Poll,
        incoming: Receiver<(std::net::TcpStream, bool)>,
        index: usize,
    ) -> Self {
        let limits = Limits {
            max_bulk_bytes: shared.config.max_request_bytes,
            ..Limits::default()
        };
        Worker {
            shared,
            poll,
            incoming,
            clients: Vec::new(),
            free: Vec::new(),
            batch: Batch::default(),
            limits,
            args: Args::default(),
            scratch: vec![0; 64 * 1024],
            round_commands: 0,
            index,
            inbox: Vec::new(),
            paused: Vec::new(),
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut ready: Vec<usize> = Vec::new();
        let mut last_tick = Instant::now();
        // The last round's clients each sent about one command, and wait for its reply
        // before they send the next (redis-benchmark's `-P 1`, most client libraries).
        let mut lockstep = false;
        loop {
            if ready.is_empty() && lockstep {
                self.poll_briefly(&mut events);
            } else {
                let timeout = if ready.is_empty() {
                    self.next_deadline().map_or(TICK, |d| {
                        d.saturating_duration_since(Instant::now()).min(TICK)
                    })
                } else {
                    Duration::ZERO
                };
                self.poll_for(&mut events, timeout);
            }
            for event in events.iter() {
                match event.token() {
                    WAKE => {
                        self.take_new_connections(&mut ready);
                        let _ = self.serve_parked(&mut ready);
                        self.deliver(&mut ready);
                        super::scripts::collect(
                            &self.shared,
                            self.index,
                            &mut self.clients,
                            &mut ready,
                        );
                        for idx in super::client::killed(&self.shared, &self.clients) {
                            self.close(idx);
                        }
                    }
                    Token(idx) => {
                        if let Some(Some(c)) = self.clients.get_mut(idx) {
                            if event.is_readable() || event.is_read_closed() || event.is_error() {
                                c.readable = true;
                            }
                            if !c.queued {
                                c.queued = true;
                                ready.push(idx);
                            }
                        }
                    }
                }
            }
            if self.shared.shutdown.load(Ordering::SeqCst) {
                break;
            }
            self.expire_parked(&mut ready);
            self.resume_paused(&mut ready);
            let round = std::mem::take(&mut ready);
            self.round_commands = 0;
            self.run_round(&round, &mut ready);
            super::scripts::hand_on(&self.shared);
            lockstep = self.round_commands > 0 && self.round_commands <= 2 * round.len() as u64;
            if last_tick.elapsed() >= TICK {
                last_tick = Instant::now();
                self.close_idle();
            }
        }
        self.shut_down();
    }

    /// Once CLIENT PAUSE has ended, the connections it held go on.
    fn resume_paused(&mut self, ready: &mut Vec<usize>) {
        if self.paused.is_empty() || commands::pause_in_force(&self.shared) {
            return;
        }
        for idx in std::mem::take(&mut self.paused) {
            if let Some(Some(c)) = self.clients.get_mut(idx)
                && !c.queued
            {
                c.queued = true;
                ready.push(idx);
            }
        }
    }

    fn poll_for(&mut self, events: &mut Events, timeout: Duration) {
        if let Err(e) = self.poll.poll(events, Some(timeout))
            && e.kind() != ErrorKind::Interrupted
        {
            std::thread::sleep(TICK);
        }
    }

    /// After a round of clients in lockstep, looks for more without sleeping for up to
    /// [`SPIN`] before blocking. A worker asleep in `epoll_wait` must be woken by the client's
    /// `send`, and that wake-up costs the client more than the spin costs the worker: at `-P
    /// 1` on two cores, the worker's context switches fell from about 29,000 to 3,200 in four
    /// seconds of SETs. Clients that pipeline are left to gather while the worker sleeps, so
    /// that their rounds stay large.
    fn poll_briefly(&mut self, events: &mut Events) {
        let start = Instant::now();
        loop {
            self.poll_for(events, Duration::ZERO);
            if !events.is_empty() {
                return;
            }
            if start.elapsed() >= SPIN {
                break;
            }
            std::hint::spin_loop();
        }
        self.poll_for(events, TICK);
    }

    fn take_new_connections(&mut self, ready: &mut Vec<usize>) {
        loop {
            let (stream, tls) = match self.incoming.try_recv() {
                Ok(s) => s,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            };
            if stream.set_nonblocking(true).is_err() {
                self.shared
                    .counters
                    .connected
                    .fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            // Protected mode answers every command of a client from another host with an
            // error, and closes (having read what it sent, so that the error arrives).
            let denied = commands::protected(&self.shared, stream.peer_addr().ok());
            let stream = TcpStream::from_std(stream);
            let mut stream = match (tls, self.shared.tls_config()) {
                (false, _) => Stream::Plain(stream),
                (true, Some(config)) => match rustls::ServerConnection::new(config) {
                    Ok(conn) => Stream::Tls {
                        sock: stream,
                        tls: Box::new(conn),
                    },
                    Err(_) => {
                        self.shared
                            .counters
                            .connected
                            .fetch_sub(1, Ordering::SeqCst);
                        continue;
                    }
                },
                (true, None) => {
                    self.shared
                        .counters
                        .connected
                        .fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
            };
            let idx = self.free.pop().unwrap_or(self.clients.len());
            if self
                .poll
                .registry()
                .register(stream.socket(), Token(idx), Interest::READABLE)
                .is_err()
            {
                self.free.push(idx);
                self.shared
                    .counters
                    .connected
                    .fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            let mut client = Client {
                stream,
                input: Vec::new(),
                output: Vec::new(),
                sent: 0,
                state: Connection::new(self.shared.new_client_id(), &self.shared, denied),
                // Bytes may have arrived before registration; look once.
                readable: true,
                closing: false,
                cut_off: false,
                in_batch: 0,
                gets_in_batch: 0,
                want_write: false,
                queued: true,
                last_activity: Instant::now(),
                parked: None,
                awaiting_script: false,
                over_soft_since: None,
                handoff: None,
            };
            client.state.at = crate::pubsub::Subscriber {
                worker: self.index,
                slot: idx,
                id: client.state.id,
            };
            client.register(&self.shared, self.index);
            if idx == self.clients.len() {
                self.clients.push(Some(client));
            } else {
                self.clients[idx] = Some(client);
            }
            ready.push(idx);
        }
    }

    /// Runs the ready connections, writes the round's SETs, sends the replies; connections
    /// with work left are put in `next`.
    fn run_round(&mut self, round: &[usize], next: &mut Vec<usize>) {
        // CONFIG SET may have changed it. Relaxed: a setting, read on its own.
        self.limits.max_bulk_bytes = self.shared.max_bulk_bytes.load(Ordering::Relaxed);
        let mut again = Vec::new();
        for (n, &idx) in round.iter().enumerate() {
            if let Some(Some(c)) = self.clients.get_mut(idx) {
                c.queued = false;
            }
            loop {
                match self.advance(idx) {
                    Advance::NeedFlush => self.flush_batch(),
                    Advance::Later => {
                        again.push(idx);
                        break;
                    }
                    Advance::Idle => {
                        self.hand_off(idx);
                        break;
                    }
                    Advance::Paused => {
                        if !self.paused.contains(&idx) {
                            self.paused.push(idx);
                        }
                        break;
                    }
                }
            }
            // A script waits to be handed on at the round's end: the connections after it
            // wait for the next round, where they wait for the script.
            if super::scripts::holding() {
                for &rest in round.get(n + 1..).unwrap_or_default() {
                    if let Some(Some(c)) = self.clients.get_mut(rest) {
                        c.queued = false;
                    }
                    again.push(rest);
                }
                break;
            }
        }
        self.flush_batch();
        // The round's scripts go to the script thread before parked connections run again:
        // one of them may wait for a script.
        super::scripts::hand_on(&self.shared);
        // Parked connections this round's writes let through are served before its replies
        // go out, as Redis serves them before answering the write; one served may write a
        // key another waits on (two moves in a circle), so until none is left.
        for _ in 0..1024 {
            if !self.serve_parked(next) {
                break;
            }
        }
        for &idx in round {
            self.send(idx);
        }
        for idx in again {
            if let Some(Some(c)) = self.clients.get_mut(idx)
                && !c.queued
                && c.unsent() < OUTPUT_LIMIT
            {
                c.queued = true;
                next.push(idx);
            }
        }
    }

    /// Runs the complete commands in a connection's input, reading more while its share of
    /// the round lasts.
    fn advance(&mut self, idx: usize) -> Advance {
        let Some(Some(c)) = self.clients.get_mut(idx) else {
            return Advance::Idle;
        };
        let shared = &*self.shared;
        let mut read_this_round = 0;
        if c.parked.is_some() || c.awaiting_script {
            return read_while_parked(c, &mut self.scratch, shared);
        }
        loop {
            let mut pos = 0;
            let mut commands_run = 0u64;
            let stopped = loop {
                if c.closing {
                    break Some(Advance::Idle);
                }
                if c.unsent() >= OUTPUT_LIMIT {
                    break Some(Advance::Later);
                }
                let rest = c.input.get(pos..).unwrap_or_default();
                let args = &mut self.args;
                match resp::parse(rest, &self.limits, args) {
                    Ok(Parsed::Command(n)) => {
                        if args.is_empty() {
                            pos += n;
                            continue;
                        }
                        let name = args.get(0).unwrap_or_default();
                        if commands::paused(shared, name, c.state.multi.is_some()) {
                            let held = c.in_batch > 0;
                            break Some(if held {
                                Advance::NeedFlush
                            } else {
                                Advance::Paused
                            });
                        }
                        // Inside MULTI every command is queued, through `execute`; a command
                        // the connection's user may not run is refused there.
                        if commands::is_plain_set(args) && c.state.may_batch(shared, args) {
                            // A SET after a GET of this connection must not be written
                            // before that GET reads.
                            if self.batch.full() || c.gets_in_batch > 0 {
                                break Some(Advance::NeedFlush);
                            }
                            pos += n;
                            commands_run += 1;
                            c.in_batch += 1;
                            self.batch.add_set(idx, c.state.db, args, n);
                            continue;
                        }
                        if commands::is_plain_get(args) && c.state.may_batch(shared, args) {
                            if self.batch.full() || c.gets_in_batch >= MAX_BATCH_GETS_PER_CONNECTION
                            {
                                break Some(Advance::NeedFlush);
                            }
                            pos += n;
                            commands_run += 1;
                            c.in_batch += 1;
                            c.gets_in_batch += 1;
                            self.batch.add_get(idx, c.state.db, args, n);
                            continue;
                        }
                        if c.in_batch > 0 {
                            break Some(Advance::NeedFlush);
                        }
                        pos += n;
                        commands_run += 1;
                        let argv: Vec<&[u8]> = args.iter().collect();
                        let protocol = c.state.protocol;
                        let start = c.output.len();
                        let after = commands::execute(
                            shared,
                            &mut c.state,
                            &argv,
                            &mut Reply::new(&mut c.output, protocol),
                        );
                        c.state.silence(&argv, &mut c.output, start);
                        if after_command(shared, (self.index, idx), c, &argv, after) {
                            break Some(Advance::Idle);
                        }
                    }
                    Ok(Parsed::Incomplete) => break None,
                    Err(e) => {
                        // The well-formed commands before the damage are answered first.
                        if c.in_batch > 0 {
                            break Some(Advance::NeedFlush);
                        }
                        shared
                            .counters
                            .protocol_errors
                            .fetch_add(1, Ordering::Relaxed);
                        Reply::new(&mut c.output, c.state.protocol)
                            .error(&format!("ERR Protocol error: {}", e.0));
                        c.closing = true;
                    }
                }
            };
            c.input.drain(..pos);
            self.round_commands += commands_run;
            if commands_run > 0 {
                shared
                    .counters
                    .commands
                    .fetch_add(commands_run, Ordering::Relaxed);
            }
            if let Some(outcome) = stopped {
                return outcome;
            }
            if let Some(outcome) = read_more(c, &mut self.scratch, shared, &mut read_this_round) {
                return outcome;
            }
        }
    }

    /// Writes the batched SETs, then reads the batched GETs, and appends each one's reply to
    /// its connection.
    fn flush_batch(&mut self) {
        super::batch::flush_sets(&self.shared, &mut self.batch, &mut self.clients);
        super::batch::flush_gets(&self.shared, &mut self.batch, &mut self.clients);
        self.batch.bytes = 0;
    }

    /// Sends what the socket takes; registers for writability when it takes less than all.
    /// Closes the connection when it is finished or broken.
    fn send(&mut self, idx: usize) {
        let Some(Some(c)) = self.clients.get_mut(idx) else {
            return;
        };
        let mut broken = c.write_out() == Written::Broken;
        // Replies left unread past the output buffer limit of the connection's class close it.
        if !broken && super::deliver::over_limit(&self.shared, c) {
            self.shared
                .counters
                .output_buffer_closed
                .fetch_add(1, Ordering::Relaxed);
            broken = true;
        }
        if c.unsent() == 0 {
            c.output.clear();
            c.sent = 0;
            if c.output.capacity() > 4 * OUTPUT_LIMIT {
                c.output.shrink_to(OUTPUT_LIMIT);
            }
        }
        if broken || (c.closing && c.unsent() == 0 && c.in_batch == 0 && !c.awaiting_script) {
            // A session that ends whole (QUIT, the peer's end of input) says so under TLS; one
            // cut off (a limit, a broken socket) does not, so the peer can tell them apart.
            if !broken && !c.cut_off {
                c.stream.close_notify();
            }
            self.close(idx);
            return;
        }
        let want_write = c.unsent() > 0;
        if want_write != c.want_write {
            let interest = if want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if self
                .poll
                .registry()
                .reregister(c.stream.socket(), Token(idx), interest)
                .is_err()
            {
                self.close(idx);
                return;
            }
            c.want_write = want_write;
        }
    }

    /// The soonest deadline of a parked connection of this worker.
    fn next_deadline(&self) -> Option<Instant> {
        if self.shared.parked.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.clients
            .iter()
            .flatten()
            .filter_map(|c| c.parked.as_ref()?.deadline)
            .min()
    }

    /// Runs again the parked commands whose keys were written, first parked first; those
    /// that now get an answer leave the registry and go on with their input.
    fn serve_parked(&mut self, ready: &mut Vec<usize>) -> bool {
        if self.shared.parked.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let waiters = {
            let mut b = self
                .shared
                .blocking
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            b.take_ready(self.index)
        };
        let any = !waiters.is_empty();
        let shared = &*self.shared;
        for w in waiters {
            let Some(Some(c)) = self.clients.get_mut(w.client) else {
                continue;
            };
            let Client { parked, state, .. } = &mut *c;
            let Some(p) = parked.as_ref().filter(|p| p.ticket == w.ticket) else {
                continue;
            };
            let argv: Vec<&[u8]> = p.argv.iter().map(Vec::as_slice).collect();
            let mut out = Vec::new();
            state.retrying = true;
            let protocol = state.protocol;
            let after =
                commands::execute(shared, state, &argv, &mut Reply::new(&mut out, protocol));
            state.retrying = false;
            if let After::Block(block) = after {
                wait_on(shared, self.index, w.client, c, block.keys);
                continue;
            }
            if let Some(p) = c.parked.take() {
                unpark(shared, self.index, w.client, &p);
            }
            c.output.extend_from_slice(&out);
            c.closing |= matches!(after, After::Close);
            if !c.queued {
                c.queued = true;
                ready.push(w.client);
            }
        }
        any
    }

    /// Appends the messages published to this worker's connections to their output.
    fn deliver(&mut self, ready: &mut Vec<usize>) {
        let mut inbox = std::mem::take(&mut self.inbox);
        let overflowed = self.shared.pubsub.take(self.index, &mut inbox);
        for sub in overflowed {
            if let Some(Some(c)) = self.clients.get_mut(sub.slot)
                && c.state.id == sub.id
            {
                super::deliver::overflowed(&self.shared, c);
                if !c.queued {
                    c.queued = true;
                    ready.push(sub.slot);
                }
            }
        }
        for d in inbox.drain(..) {
            let Some(Some(c)) = self.clients.get_mut(d.to.slot) else {
                continue;
            };
            if c.state.id != d.to.id {
                continue;
            }
            super::deliver::append(&self.shared, c, &d);
            if !c.queued {
                c.queued = true;
                ready.push(d.to.slot);
            }
        }
        self.inbox = inbox;
    }

    /// Answers null to the parked connections whose timeout passed.
    /// Answers the parked connections whose time ran out, or that CLIENT UNBLOCK let go, as
    /// a timeout answers (or with CLIENT UNBLOCK's error).
    fn expire_parked(&mut self, ready: &mut Vec<usize>) {
        if self.shared.parked.load(Ordering::Relaxed) == 0 {
            return;
        }
        let asked = {
            let mut b = self
                .shared
                .blocking
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            b.take_unblocks(self.index)
        };
        let now = Instant::now();
        for idx in 0..self.clients.len() {
            let Some(Some(c)) = self.clients.get_mut(idx) else {
                continue;
            };
            let Some(p) = c.parked.as_ref() else { continue };
            let unblock = asked.iter().find(|&&(id, _)| id == p.id).map(|&(_, e)| e);
            if unblock.is_none() && p.deadline.is_none_or(|d| d > now) {
                continue;
            }
            let Some(p) = c.parked.take() else { continue };
            unpark(&self.shared, self.index, idx, &p);
            let mut out = Reply::new(&mut c.output, c.state.protocol);
            // The moves answer a null string, the pops a null array.
            match p.argv.first().map(|n| n.to_ascii_lowercase()).as_deref() {
                _ if unblock == Some(true) => {
                    out.error("UNBLOCKED client unblocked via CLIENT UNBLOCK")
                }
                Some(b"blmove" | b"brpoplpush") => out.null(),
                Some(b"wait") => out.int(commands::wait_timed_out(&self.shared, &mut c.state)),
                _ => out.null_array(),
            }
            if !c.queued {
                c.queued = true;
                ready.push(idx);
            }
        }
    }

    fn close(&mut self, idx: usize) {
        if let Some(slot) = self.clients.get_mut(idx)
            && let Some(mut c) = slot.take()
        {
            if let Some(p) = c.parked.take() {
                unpark(&self.shared, self.index, idx, &p);
            }
            commands::forget_subscriptions(&self.shared, &mut c.state);
            if let Some(info) = &c.state.info {
                self.shared.clients.remove(info);
            }
            let _ = self.poll.registry().deregister(c.stream.socket());
            self.free.push(idx);
            self.shared
                .counters
                .connected
                .fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Hands a connection that sent PSYNC to the replication threads, with the replies it is
    /// owed and the bytes it sent after.
    fn hand_off(&mut self, idx: usize) {
        if self
            .clients
            .get(idx)
            .and_then(Option::as_ref)
            .is_none_or(|c| c.handoff.is_none())
        {
            return;
        }
        self.flush_batch();
        let Some(mut c) = self.clients.get_mut(idx).and_then(Option::take) else {
            return;
        };
        if let Some(p) = c.parked.take() {
            unpark(&self.shared, self.index, idx, &p);
        }
        commands::forget_subscriptions(&self.shared, &mut c.state);
        let _ = self.poll.registry().deregister(c.stream.socket());
        if let Some(info) = &c.state.info {
            self.shared.clients.remove(info);
        }
        self.free.push(idx);
        self.shared
            .counters
            .connected
            .fetch_sub(1, Ordering::SeqCst);
        super::handoff::start(self.shared.clone(), c);
    }

    fn close_idle(&mut self) {
        let limit = match self.shared.idle_timeout_ms.load(Ordering::Relaxed) {
            0 => return,
            ms => Duration::from_millis(ms),
        };
        for idx in 0..self.clients.len() {
            if let Some(Some(c)) = self.clients.get(idx)
                && c.in_batch == 0
                && c.last_activity.elapsed() >= limit
            {
                self.close(idx);
            }
        }
    }

    /// Answers the complete commands already received, sends the replies (waiting a little
    /// for slow readers), and closes every connection.
    fn shut_down(&mut self) {
        for idx in 0..self.clients.len() {
            if let Some(Some(c)) = self.clients.get_mut(idx) {
                c.readable = false;
            }
            while let Advance::NeedFlush = self.advance(idx) {
                self.flush_batch();
            }
        }
        self.flush_batch();
        let deadline = Instant::now() + SHUTDOWN_SEND;
        for idx in 0..self.clients.len() {
            if let Some(Some(c)) = self.clients.get_mut(idx) {
                while c.write_out() == Written::Blocked && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            self.close(idx);
        }
    }
}

/// Reads what a parked connection sends, without running it: its end of input closes it
/// (and takes it out of the registry, so that no element goes to a connection that is gone).
fn read_while_parked(c: &mut Client, scratch: &mut [u8], shared: &Shared) -> Advance {
    let mut read_this_round = 0;
    loop {
        if let Some(outcome) = read_more(c, scratch, shared, &mut read_this_round) {
            return outcome;
        }
    }
}

/// Reads more of a connection's input, within its share of the round (`read_this_round`
/// bytes so far); `Some` when the connection is done for this round.
fn read_more(
    c: &mut Client,
    scratch: &mut [u8],
    shared: &Shared,
    read_this_round: &mut usize,
) -> Option<Advance> {
    if !c.readable {
        return Some(Advance::Idle);
    }
    if *read_this_round >= READ_PER_ROUND {
        return Some(Advance::Later);
    }
    match c.stream.read(scratch) {
        Ok(0) => {
            // The peer is done sending: answer what it sent, then close.
            c.readable = false;
            c.closing = true;
            return Some(Advance::Idle);
        }
        Ok(n) => {
            *read_this_round += n;
            c.input
                .extend_from_slice(scratch.get(..n).unwrap_or_default());
            c.last_activity = Instant::now();
            if let Some(info) = &c.state.info {
                info.seen(c.last_activity);
            }
            // A request that grows past the query buffer limit closes its connection.
            if c.input.len() > shared.query_buffer_limit.load(Ordering::Relaxed) {
                shared
                    .counters
                    .query_buffer_closed
                    .fetch_add(1, Ordering::Relaxed);
                c.cut_off();
                return Some(Advance::Idle);
            }
            // A short read emptied the socket; bytes that come later raise a new
            // readiness edge, so asking again now would only hear WouldBlock.
            if n < scratch.len() && c.stream.short_read_drains() {
                c.readable = false;
            }
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            c.readable = false;
            return Some(Advance::Idle);
        }
        Err(e) if e.kind() == ErrorKind::Interrupted => {}
        Err(_) => {
            c.cut_off();
            return Some(Advance::Idle);
        }
    }
    None
}

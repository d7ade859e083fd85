//! The event loop: an acceptor thread hands new connections round-robin to a few workers, and
//! each worker polls its own connections (epoll through mio) and answers them in rounds.
//!
//! A round reads what every ready connection has sent, runs the complete commands in order,
//! and sends the replies. Plain SETs are not written one by one: the SETs of every connection
//! in the round join one batch, written (and under `--sync always` fsynced) once, the way
//! Redis writes its append-only file once per event-loop turn. Plain GETs join the batch too,
//! and are read together after its SETs are written, in one batched lookup of the engine
//! whose cache misses overlap. A connection's commands stay in order: its GETs in the batch
//! all follow its SETs there (a SET after a GET of the same connection waits for the next
//! batch), and before any other command of a connection runs, the batch holding its earlier
//! SETs and GETs is done. A SET is acknowledged only after its batch is written; a reader on
//! another connection may see the value just before the SET is answered, which
//! linearizability allows.
//!
//! Backpressure: a connection whose unsent replies pass `OUTPUT_LIMIT` is not read from
//! until they drain, so a client that pipelines without reading costs bounded memory and does
//! not hold up the others. No connection gets more than `READ_PER_ROUND` bytes of reading
//! per round, so a busy one cannot starve the rest.
//!
//! The acceptor is in `accept.rs`, the workers in `worker.rs`, a connection's buffers in
//! `client.rs`, and the thread scripts run on in `scripts.rs`.

mod accept;
mod batch;
mod client;
mod deliver;
mod handoff;
mod parking;
mod scripts;
mod worker;

pub(crate) use accept::accept_loop;
pub(crate) use scripts::spawn_script_thread;
pub(crate) use worker::WorkerHandle;

//! The round's batch of plain SETs and GETs (see `mod.rs`): written, then read, together,
//! each answered on its own connection, counted, and kept in the slow log when the batch
//! took as long as a command the log keeps.

use std::time::Instant;

use crate::commands;
use crate::resp::{Args, Reply};
use crate::shared::Shared;
use crate::store;

use super::client::Client;

/// A batch is done once it holds this many SETs and GETs, or this many bytes of them.
const MAX_BATCH_COMMANDS: usize = 1024;
const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// The SETs and GETs of a round, with the connections they came from. Their keys and values
/// are copied end to end into buffers kept from batch to batch.
#[derive(Default)]
pub(super) struct Batch {
    /// The connection of each SET, in order.
    pub(super) set_conns: Vec<usize>,
    /// Each SET's key, then its value.
    pub(super) set_args: Args,
    /// The connection of each GET, in order.
    pub(super) get_conns: Vec<usize>,
    /// Each GET's key.
    pub(super) get_keys: Args,
    /// Each GET's value once read, and what reading keeps from batch to batch.
    get_values: Vec<Result<Option<Vec<u8>>, String>>,
    read_scratch: commands::ReadScratch,
    pub(super) bytes: usize,
}

impl Batch {
    /// Adds the SET `args` (`n` bytes of request) of connection `idx`, in database `db`.
    pub(super) fn add_set(&mut self, idx: usize, db: u8, args: &Args, n: usize) {
        self.bytes += n;
        self.set_conns.push(idx);
        self.set_args
            .push_with(|dst| store::data_key_into(db, args.get(1).unwrap_or_default(), dst));
        self.set_args
            .push_with(|dst| store::encode_value_into(args.get(2).unwrap_or_default(), None, dst));
    }

    /// Adds the GET `args` of connection `idx`, in database `db`.
    pub(super) fn add_get(&mut self, idx: usize, db: u8, args: &Args, n: usize) {
        self.bytes += n;
        self.get_conns.push(idx);
        self.get_keys
            .push_with(|dst| store::data_key_into(db, args.get(1).unwrap_or_default(), dst));
    }

    pub(super) fn full(&self) -> bool {
        self.set_conns.len() + self.get_conns.len() >= MAX_BATCH_COMMANDS
            || self.bytes >= MAX_BATCH_BYTES
    }
}

/// Reads the batched GETs and appends each one's reply to its connection.
pub(super) fn flush_gets(shared: &Shared, batch: &mut Batch, clients: &mut [Option<Client>]) {
    if batch.get_conns.is_empty() {
        return;
    }
    let started = Instant::now();
    commands::read_gets(
        shared,
        batch.get_keys.iter(),
        &mut batch.read_scratch,
        &mut batch.get_values,
    );
    // Expiry is judged once for the batch, after the reads, as a GET judges it once.
    let now = shared.clock.now_ms();
    for (idx, value) in batch.get_conns.iter().zip(batch.get_values.drain(..)) {
        if let Some(Some(c)) = clients.get_mut(*idx) {
            c.in_batch = c.in_batch.saturating_sub(1);
            c.gets_in_batch = c.gets_in_batch.saturating_sub(1);
            let mut reply = Reply::new(&mut c.output, c.state.protocol);
            commands::answer_get(shared, value, now, &mut reply);
        }
    }
    let nanos = started.elapsed().as_nanos() as u64;
    commands::count_batched(shared, b"get", batch.get_conns.len() as u64, nanos);
    shared.stats.latency.note("fast-command", nanos / 1_000_000);
    if shared.stats.slowlog.wants(nanos / 1000) {
        for (idx, key) in batch.get_conns.iter().zip(batch.get_keys.iter()) {
            log_slow(
                shared,
                clients,
                *idx,
                &[b"GET", store::user_key(key)],
                nanos,
            );
        }
    }
    batch.get_conns.clear();
    batch.get_keys.clear();
}

/// Writes the batched SETs as one engine write and answers each.
pub(super) fn flush_sets(shared: &Shared, batch: &mut Batch, clients: &mut [Option<Client>]) {
    if batch.set_conns.is_empty() {
        return;
    }
    let args = &batch.set_args;
    let pairs = (0..batch.set_conns.len()).map(|i| {
        let arg = |j| args.get(j).unwrap_or_default();
        (arg(2 * i), arg(2 * i + 1))
    });
    let started = Instant::now();
    let result = commands::write_sets(shared, pairs.clone());
    let nanos = started.elapsed().as_nanos() as u64;
    commands::count_batched(shared, b"set", batch.set_conns.len() as u64, nanos);
    shared.stats.latency.note("fast-command", nanos / 1_000_000);
    for idx in &batch.set_conns {
        if let Some(Some(c)) = clients.get_mut(*idx) {
            c.in_batch = c.in_batch.saturating_sub(1);
            let mut reply = Reply::new(&mut c.output, c.state.protocol);
            match &result {
                Ok(()) => reply.ok(),
                // The message carries its code already.
                Err(e) => reply.error(e),
            }
        }
    }
    if shared.stats.slowlog.wants(nanos / 1000) {
        for (idx, (key, value)) in batch.set_conns.iter().zip(pairs) {
            let value = store::decode_value(value)
                .map(|v| v.data)
                .unwrap_or_default();
            log_slow(
                shared,
                clients,
                *idx,
                &[b"SET", store::user_key(key), &value],
                nanos,
            );
        }
    }
    batch.set_conns.clear();
    batch.set_args.clear();
}

/// Keeps a batched command in the slow log, with the batch's time: each of its commands
/// waited that long for its reply.
fn log_slow(shared: &Shared, clients: &[Option<Client>], idx: usize, args: &[&[u8]], nanos: u64) {
    let Some(Some(c)) = clients.get(idx) else {
        return;
    };
    let addr = c.state.info.as_ref().map_or("", |i| i.addr.as_str());
    let name = c.state.name.as_deref().unwrap_or_default();
    shared.stats.slowlog.add(args, nanos / 1000, addr, name);
}

//! Parking a connection whose blocking command found nothing, and taking it out again.

use std::sync::atomic::Ordering;

use crate::shared::{After, Shared};

use super::client::{Client, Parked};

/// Does what a command asked of connection `at` (worker, slot); true when it parked it.
pub(super) fn after_command(
    shared: &Shared,
    at: (usize, usize),
    c: &mut Client,
    argv: &[&[u8]],
    after: After,
) -> bool {
    match after {
        After::Close => c.closing = true,
        After::Block(mut block) => {
            let argv = block
                .argv
                .take()
                .unwrap_or_else(|| argv.iter().map(|a| a.to_vec()).collect());
            park(shared, at.0, at.1, c, argv, block);
            return true;
        }
        After::Continue => {}
    }
    false
}

/// Parks connection `idx` on the keys of its command `argv` (see `commands::blocking`).
fn park(
    shared: &Shared,
    worker: usize,
    idx: usize,
    c: &mut Client,
    argv: Vec<Vec<u8>>,
    block: crate::shared::Block,
) {
    let mut b = shared.blocking.lock().unwrap_or_else(|e| e.into_inner());
    let ticket = b.park(worker, idx, &block.keys);
    // Release: a writer that sees the count sees the connection in the registry.
    shared.parked.fetch_add(1, Ordering::Release);
    c.parked = Some(Parked {
        argv,
        keys: block.keys,
        deadline: block.deadline,
        ticket,
    });
}

/// Takes a parked connection out of the registry.
pub(super) fn unpark(shared: &Shared, worker: usize, idx: usize, p: &Parked) {
    let mut b = shared.blocking.lock().unwrap_or_else(|e| e.into_inner());
    let w = crate::shared::Waiter {
        worker,
        client: idx,
        ticket: p.ticket,
    };
    b.unpark(w, &p.keys);
    shared.parked.fetch_sub(1, Ordering::Release);
}

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
            let keys = park(shared, at.0, at.1, c, argv, block);
            // A push from another worker between the command's look and the park found no
            // one to wake: the connection looks once more now that it is parked.
            if shared.wakers.get().is_some_and(|w| w.len() > 1) {
                shared.notify_written(&keys);
            }
            return true;
        }
        After::Continue => {}
    }
    false
}

/// Parks connection `idx` on the keys of its command `argv` (see `commands::blocking`);
/// returns the keys.
fn park(
    shared: &Shared,
    worker: usize,
    idx: usize,
    c: &mut Client,
    argv: Vec<Vec<u8>>,
    block: crate::shared::Block,
) -> Vec<Vec<u8>> {
    let mut b = shared.blocking.lock().unwrap_or_else(|e| e.into_inner());
    let ticket = b.park(worker, idx, c.state.id, &block.keys);
    // Release: a writer that sees the count sees the connection in the registry.
    shared.parked.fetch_add(1, Ordering::Release);
    c.parked = Some(Parked {
        id: c.state.id,
        argv,
        keys: block.keys.clone(),
        deadline: block.deadline,
        ticket,
    });
    block.keys
}

/// A parked connection that looked again and must go on waiting, now on `keys`: when a
/// SWAPDB moved its database, its keys are stored elsewhere, and it waits there, keeping
/// its deadline.
pub(super) fn wait_on(
    shared: &Shared,
    worker: usize,
    idx: usize,
    c: &mut Client,
    keys: Vec<Vec<u8>>,
) {
    let Some(p) = c.parked.take_if(|p| p.keys != keys) else {
        return;
    };
    unpark(shared, worker, idx, &p);
    let block = crate::shared::Block {
        keys,
        deadline: p.deadline,
        argv: None,
    };
    park(shared, worker, idx, c, p.argv, block);
}

/// Takes a parked connection out of the registry.
pub(super) fn unpark(shared: &Shared, worker: usize, idx: usize, p: &Parked) {
    let mut b = shared.blocking.lock().unwrap_or_else(|e| e.into_inner());
    let w = crate::shared::Waiter {
        worker,
        client: idx,
        ticket: p.ticket,
    };
    b.unpark(w, p.id, &p.keys);
    shared.parked.fetch_sub(1, Ordering::Release);
}

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
            look_again(shared, at.0, at.1, c);
            return true;
        }
        After::Script => {
            super::scripts::submit(shared, at, c, argv);
            return true;
        }
        After::Replicate(h) => {
            c.handoff = Some(h);
            return true;
        }
        After::Continue => {}
    }
    false
}

/// With several workers, a push from another between a command's look and its park found no
/// one to wake: the parked connection looks once more, alone, now that it is in the registry.
fn look_again(shared: &Shared, worker: usize, idx: usize, c: &Client) {
    let (Some(p), true) = (&c.parked, shared.wakers.get().is_some_and(|w| w.len() > 1)) else {
        return;
    };
    registry(shared).make_ready(waiter(worker, idx, p));
    shared.wake_worker(worker);
}

fn waiter(worker: usize, client: usize, p: &Parked) -> crate::shared::Waiter {
    crate::shared::Waiter {
        worker,
        client,
        ticket: p.ticket,
    }
}

fn registry(shared: &Shared) -> std::sync::MutexGuard<'_, crate::shared::Blocking> {
    shared.blocking.lock().unwrap_or_else(|e| e.into_inner())
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
    let ticket = b.park(worker, idx, c.state.id, &block.keys);
    // Release: a writer that sees the count sees the connection in the registry.
    shared.parked.fetch_add(1, Ordering::Release);
    c.parked = Some(Parked {
        id: c.state.id,
        argv,
        keys: block.keys,
        deadline: block.deadline,
        ticket,
    });
}

/// A parked connection that looked again and must go on waiting, now on `keys`: when a
/// SWAPDB moved its database, its keys are stored elsewhere, and it waits there, keeping its
/// place in line, its deadline and any CLIENT UNBLOCK asked of it; then it looks once more.
pub(super) fn wait_on(
    shared: &Shared,
    worker: usize,
    idx: usize,
    c: &mut Client,
    keys: Vec<Vec<u8>>,
) {
    let Some(p) = c.parked.as_mut().filter(|p| p.keys != keys) else {
        return;
    };
    registry(shared).move_lines(waiter(worker, idx, p), &p.keys, &keys);
    p.keys = keys;
    look_again(shared, worker, idx, c);
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

//! Messages published to a worker's connections, appended to their output, and the output
//! limits that bound what a connection leaves unread.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::pubsub::{Delivery, Kind};
use crate::resp::Reply;
use crate::shared::Shared;

use super::client::Client;

/// Appends message `d` to subscriber `c` in its protocol. A subscriber whose user may no
/// longer hear the channel, or whose unread messages pass the `pubsub` class's hard limit,
/// is cut off (and its subscriptions end when its worker closes it).
pub(super) fn append(shared: &Shared, c: &mut Client, d: &Delivery) {
    if c.closing {
        return;
    }
    let subscribed = match d.kind {
        Kind::Channel => c.state.subs.channels.contains(&*d.channel),
        Kind::Pattern => d
            .pattern
            .as_ref()
            .is_some_and(|p| c.state.subs.patterns.contains(&**p)),
        Kind::Shard => c.state.subs.shard.contains(&*d.channel),
        Kind::Monitor => !c.state.subs.monitor.is_empty(),
    };
    // Unsubscribed since the message was filed.
    if !subscribed {
        return;
    }
    if !c.state.refresh_user(shared) || !may_hear(c, d) {
        c.cut_off();
        return;
    }
    crate::pubsub::encode(&mut Reply::new(&mut c.output, c.state.protocol), d);
    let hard = shared.pubsub_output_limit[0].load(Ordering::Relaxed);
    if hard > 0 && c.unsent() > hard {
        shared
            .counters
            .output_buffer_closed
            .fetch_add(1, Ordering::Relaxed);
        c.cut_off();
    }
}

/// Closes a subscriber whose messages overflowed its worker's inbox, as one past its
/// output limit.
pub(super) fn overflowed(shared: &Shared, c: &mut Client) {
    if !c.closing {
        shared
            .counters
            .output_buffer_closed
            .fetch_add(1, Ordering::Relaxed);
    }
    c.cut_off();
}

/// Whether the connection's user may still hear what `d` was subscribed by (a user's
/// channel rules may change while it listens).
fn may_hear(c: &Client, d: &Delivery) -> bool {
    if c.state.unrestricted || d.kind == Kind::Monitor {
        return true;
    }
    match &d.pattern {
        Some(p) => c.state.user.channel_allowed(p, true),
        None => c.state.user.channel_allowed(&d.channel, false),
    }
}

/// Whether a connection's unsent replies break its class's output limit: the hard limit at
/// once, the soft limit once they stayed past it for its seconds (Relaxed loads: settings).
pub(super) fn over_limit(shared: &Shared, c: &mut Client) -> bool {
    let unsent = c.unsent();
    let (hard, soft, secs) = if c.state.subs.any() {
        let [h, s, t] = &shared.pubsub_output_limit;
        (
            h.load(Ordering::Relaxed),
            s.load(Ordering::Relaxed),
            t.load(Ordering::Relaxed),
        )
    } else {
        (shared.output_buffer_limit.load(Ordering::Relaxed), 0, 0)
    };
    if hard > 0 && unsent > hard {
        return true;
    }
    if soft == 0 || unsent <= soft {
        c.over_soft_since = None;
        return false;
    }
    let since = *c.over_soft_since.get_or_insert_with(Instant::now);
    since.elapsed().as_secs() >= secs as u64
}

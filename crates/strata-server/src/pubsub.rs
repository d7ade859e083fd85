//! Pub/sub: who listens to which channel, and the messages on their way to them.
//!
//! A connection lives on one worker thread, and a PUBLISH runs on whichever worker its
//! publisher lives on. So PUBLISH writes to no subscriber's buffer itself: it finds the
//! subscribers in the [`Registry`], files one [`Delivery`] per subscriber in the inbox of
//! that subscriber's worker, and wakes the worker, which appends the message to the
//! connection's output in the connection's own protocol (a push frame under RESP3) on its
//! next turn. A publisher's messages enter every inbox in the order it published them, and
//! a worker empties its inbox in order, so each subscriber sees one publisher's messages in
//! publish order. What a subscriber leaves unread is bounded by the `pubsub` class of
//! `client-output-buffer-limit`: past it the worker closes the connection.
//!
//! Three namespaces: channels (SUBSCRIBE), patterns over channels (PSUBSCRIBE, matched as
//! `glob` matches) and shard channels (SSUBSCRIBE, one shard: the whole server).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::glob;

/// The namespace a subscription lives in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Channel,
    Pattern,
    Shard,
    /// A command a MONITOR connection is told of.
    Monitor,
}

impl Kind {
    /// The word a message of this namespace is announced with.
    pub(crate) fn message(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"message",
            Kind::Pattern => b"pmessage",
            Kind::Shard => b"smessage",
            Kind::Monitor => b"monitor",
        }
    }
}

/// A subscribed connection: its worker, its slot there, and its client id (a slot is reused
/// by later connections, the id never).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Subscriber {
    pub worker: usize,
    pub slot: usize,
    pub id: u64,
}

/// One message for one subscriber.
pub(crate) struct Delivery {
    pub to: Subscriber,
    pub kind: Kind,
    /// The pattern that matched, for a pattern's message.
    pub pattern: Option<Arc<[u8]>>,
    pub channel: Arc<[u8]>,
    pub payload: Arc<[u8]>,
}

/// The subscribers of every channel, pattern and shard channel, each in the order it
/// subscribed.
#[derive(Default)]
struct Registry {
    channels: HashMap<Vec<u8>, Vec<Subscriber>>,
    patterns: HashMap<Vec<u8>, Vec<Subscriber>>,
    shard: HashMap<Vec<u8>, Vec<Subscriber>>,
    /// MONITOR connections, under the empty name.
    monitors: HashMap<Vec<u8>, Vec<Subscriber>>,
}

impl Registry {
    fn of(&mut self, kind: Kind) -> &mut HashMap<Vec<u8>, Vec<Subscriber>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
            Kind::Monitor => &mut self.monitors,
        }
    }

    fn get(&self, kind: Kind) -> &HashMap<Vec<u8>, Vec<Subscriber>> {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
            Kind::Shard => &self.shard,
            Kind::Monitor => &self.monitors,
        }
    }
}

/// Most bytes of messages one worker's inbox holds. A worker busy for long while publishers
/// go on fills it; messages past it are not filed, and their subscribers are closed instead,
/// as a subscriber past its output limit is: memory stays bounded whatever the publishers do.
const INBOX_BYTES: usize = 64 << 20;

/// One worker's messages on their way, and the subscribers that overflowed it.
#[derive(Default)]
struct Inbox {
    deliveries: Vec<Delivery>,
    bytes: usize,
    overflowed: Vec<Subscriber>,
}

impl Delivery {
    /// What the message takes in an inbox, roughly.
    fn bytes(&self) -> usize {
        64 + self.channel.len() + self.payload.len()
    }
}

/// The registry and the workers' inboxes.
pub(crate) struct PubSub {
    registry: RwLock<Registry>,
    inboxes: Vec<Mutex<Inbox>>,
    /// Per worker: its inbox holds something (so that an empty one costs a load, no lock).
    waiting: Vec<AtomicBool>,
    /// Subscriptions of every connection: 0 lets PUBLISH answer without a lock.
    subscriptions: AtomicUsize,
    /// MONITOR connections: 0 lets a command go without telling any.
    monitoring: AtomicUsize,
}

impl PubSub {
    /// A registry for `workers` worker threads.
    pub(crate) fn new(workers: usize) -> Self {
        PubSub {
            registry: RwLock::default(),
            inboxes: (0..workers).map(|_| Mutex::default()).collect(),
            waiting: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            subscriptions: AtomicUsize::new(0),
            monitoring: AtomicUsize::new(0),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.registry.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `sub` to the listeners of `name` (the caller knows it was not one).
    pub(crate) fn subscribe(&self, kind: Kind, name: &[u8], sub: Subscriber) {
        self.write()
            .of(kind)
            .entry(name.to_vec())
            .or_default()
            .push(sub);
        self.subscriptions.fetch_add(1, Ordering::AcqRel);
        if kind == Kind::Monitor {
            self.monitoring.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Takes `sub` off the listeners of `name`.
    pub(crate) fn unsubscribe(&self, kind: Kind, name: &[u8], sub: Subscriber) {
        let mut registry = self.write();
        let map = registry.of(kind);
        let Some(line) = map.get_mut(name) else {
            return;
        };
        let before = line.len();
        line.retain(|s| *s != sub);
        let removed = before - line.len();
        if line.is_empty() {
            map.remove(name);
        }
        self.subscriptions.fetch_sub(removed, Ordering::AcqRel);
        if kind == Kind::Monitor {
            self.monitoring.fetch_sub(removed, Ordering::AcqRel);
        }
    }

    /// Whether any connection runs MONITOR.
    pub(crate) fn monitored(&self) -> bool {
        self.monitoring.load(Ordering::Acquire) > 0
    }

    /// Files `line` (a command, as MONITOR shows it) for every MONITOR connection.
    pub(crate) fn tell_monitors(&self, line: &[u8], wake: impl Fn(usize)) {
        let line: Arc<[u8]> = line.into();
        let registry = self.read();
        let out: Vec<Delivery> = registry
            .monitors
            .values()
            .flatten()
            .map(|&to| Delivery {
                to,
                kind: Kind::Monitor,
                pattern: None,
                channel: Arc::from(&b""[..]),
                payload: line.clone(),
            })
            .collect();
        let workers = self.file(out);
        drop(registry);
        for w in workers {
            wake(w);
        }
    }

    /// Files `payload` for every subscriber of `channel` (and, for a plain channel, of every
    /// pattern matching it), wakes their workers with `wake`, and returns how many
    /// deliveries were filed.
    pub(crate) fn publish(
        &self,
        shard: bool,
        channel: &[u8],
        payload: &[u8],
        wake: impl Fn(usize),
    ) -> usize {
        if self.subscriptions.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let channel: Arc<[u8]> = channel.into();
        let payload: Arc<[u8]> = payload.into();
        let mut out: Vec<Delivery> = Vec::new();
        // The registry is held until the messages are filed, so that a subscriber's
        // UNSUBSCRIBE, answered after this, is answered after its messages are filed.
        let registry = self.read();
        let kind = if shard { Kind::Shard } else { Kind::Channel };
        for &to in registry.get(kind).get(&*channel).into_iter().flatten() {
            out.push(Delivery {
                to,
                kind,
                pattern: None,
                channel: channel.clone(),
                payload: payload.clone(),
            });
        }
        if !shard {
            for (pattern, subs) in &registry.patterns {
                if !glob::matches(pattern, &channel) {
                    continue;
                }
                let pattern: Arc<[u8]> = pattern.as_slice().into();
                for &to in subs {
                    out.push(Delivery {
                        to,
                        kind: Kind::Pattern,
                        pattern: Some(pattern.clone()),
                        channel: channel.clone(),
                        payload: payload.clone(),
                    });
                }
            }
        }
        let n = out.len();
        let workers = self.file(out);
        drop(registry);
        for w in workers {
            wake(w);
        }
        n
    }

    /// Files deliveries in their workers' inboxes; the workers to wake.
    fn file(&self, mut out: Vec<Delivery>) -> Vec<usize> {
        let mut workers: Vec<usize> = out.iter().map(|d| d.to.worker).collect();
        workers.sort_unstable();
        workers.dedup();
        for &w in &workers {
            let (Some(inbox), Some(flag)) = (self.inboxes.get(w), self.waiting.get(w)) else {
                continue;
            };
            let mut inbox = inbox.lock().unwrap_or_else(|e| e.into_inner());
            for d in out.extract_if(.., |d| d.to.worker == w) {
                if inbox.bytes + d.bytes() > INBOX_BYTES {
                    if !inbox.overflowed.contains(&d.to) {
                        inbox.overflowed.push(d.to);
                    }
                    continue;
                }
                inbox.bytes += d.bytes();
                inbox.deliveries.push(d);
            }
            flag.store(true, Ordering::Release);
        }
        workers
    }

    /// Takes out of its worker's inbox the messages filed for `sub` through `name` of `kind`
    /// (which it is leaving), in order.
    pub(crate) fn take_for(&self, sub: Subscriber, kind: Kind, name: &[u8]) -> Vec<Delivery> {
        let Some(inbox) = self.inboxes.get(sub.worker) else {
            return Vec::new();
        };
        let mut inbox = inbox.lock().unwrap_or_else(|e| e.into_inner());
        let via = |d: &Delivery| match d.kind {
            Kind::Pattern => d.pattern.as_deref() == Some(name),
            _ => &*d.channel == name,
        };
        let taken: Vec<Delivery> = inbox
            .deliveries
            .extract_if(.., |d| d.to == sub && d.kind == kind && via(d))
            .collect();
        inbox.bytes -= taken.iter().map(Delivery::bytes).sum::<usize>();
        taken
    }

    /// The messages waiting for `worker`'s connections, in the order they were filed, and
    /// the subscribers whose messages overflowed the inbox (to be closed).
    pub(crate) fn take(&self, worker: usize, into: &mut Vec<Delivery>) -> Vec<Subscriber> {
        let Some(flag) = self.waiting.get(worker) else {
            return Vec::new();
        };
        if !flag.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        let Some(inbox) = self.inboxes.get(worker) else {
            return Vec::new();
        };
        let mut inbox = inbox.lock().unwrap_or_else(|e| e.into_inner());
        into.append(&mut inbox.deliveries);
        inbox.bytes = 0;
        std::mem::take(&mut inbox.overflowed)
    }

    /// The channels (or shard channels) with a subscriber, those matching `pattern` if given.
    pub(crate) fn channels(&self, shard: bool, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let registry = self.read();
        let kind = if shard { Kind::Shard } else { Kind::Channel };
        let mut names: Vec<Vec<u8>> = registry
            .get(kind)
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob::matches(p, c)))
            .cloned()
            .collect();
        names.sort_unstable();
        names
    }

    /// How many connections subscribe to `name`.
    pub(crate) fn count(&self, kind: Kind, name: &[u8]) -> usize {
        self.read().get(kind).get(name).map_or(0, Vec::len)
    }

    /// How many distinct patterns have a subscriber.
    pub(crate) fn patterns(&self) -> usize {
        self.read().patterns.len()
    }
}

/// Appends message `d` to a subscriber's output, in its protocol (a push frame in RESP3).
pub(crate) fn encode(out: &mut crate::resp::Reply<'_>, d: &Delivery) {
    if d.kind == Kind::Monitor {
        out.simple(&String::from_utf8_lossy(&d.payload));
        return;
    }
    out.push(if d.pattern.is_some() { 4 } else { 3 });
    out.bulk(d.kind.message());
    if let Some(p) = &d.pattern {
        out.bulk(p);
    }
    out.bulk(&d.channel);
    out.bulk(&d.payload);
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn sub(worker: usize, slot: usize) -> Subscriber {
        Subscriber {
            worker,
            slot,
            id: (worker * 100 + slot) as u64,
        }
    }

    fn texts(d: &[Delivery]) -> Vec<(usize, &'static [u8], String)> {
        d.iter()
            .map(|d| {
                let pattern = d.pattern.as_deref().map(String::from_utf8_lossy);
                let what = format!(
                    "{}:{}:{}",
                    pattern.unwrap_or_default(),
                    String::from_utf8_lossy(&d.channel),
                    String::from_utf8_lossy(&d.payload)
                );
                (d.to.slot, d.kind.message(), what)
            })
            .collect()
    }

    #[test]
    fn messages_reach_channel_then_pattern_subscribers_in_publish_order() {
        let ps = PubSub::new(2);
        ps.subscribe(Kind::Channel, b"news", sub(0, 1));
        ps.subscribe(Kind::Pattern, b"n*", sub(0, 1));
        ps.subscribe(Kind::Channel, b"news", sub(1, 2));
        ps.subscribe(Kind::Shard, b"news", sub(1, 3));
        let woken = std::cell::RefCell::new(Vec::new());
        assert_eq!(
            ps.publish(false, b"news", b"a", |w| woken.borrow_mut().push(w)),
            3
        );
        assert_eq!(ps.publish(false, b"nope", b"b", |_| {}), 1);
        assert_eq!(ps.publish(false, b"other", b"c", |_| {}), 0);
        assert_eq!(ps.publish(true, b"news", b"d", |_| {}), 1);
        assert_eq!(*woken.borrow(), vec![0, 1]);
        let (mut w0, mut w1) = (Vec::new(), Vec::new());
        ps.take(0, &mut w0);
        ps.take(1, &mut w1);
        assert_eq!(
            texts(&w0),
            vec![
                (1, &b"message"[..], ":news:a".to_string()),
                (1, &b"pmessage"[..], "n*:news:a".to_string()),
                (1, &b"pmessage"[..], "n*:nope:b".to_string()),
            ]
        );
        assert_eq!(
            texts(&w1),
            vec![
                (2, &b"message"[..], ":news:a".to_string()),
                (3, &b"smessage"[..], ":news:d".to_string()),
            ]
        );
        // Emptied: a second take finds nothing.
        ps.take(0, &mut w1);
        assert_eq!(w1.len(), 2);
    }

    #[test]
    fn an_inbox_past_its_bound_files_no_more_and_names_who_lost_messages() {
        let ps = PubSub::new(1);
        ps.subscribe(Kind::Channel, b"big", sub(0, 1));
        let payload = vec![7u8; 1 << 20];
        for _ in 0..100 {
            assert_eq!(ps.publish(false, b"big", &payload, |_| {}), 1);
        }
        let mut got = Vec::new();
        let overflowed = ps.take(0, &mut got);
        assert_eq!(overflowed, vec![sub(0, 1)]);
        // 64 MiB held about 64 of the 100 messages of 1 MiB, each whole.
        assert!((60..64).contains(&got.len()), "{} filed", got.len());
        assert!(got.iter().all(|d| *d.payload == payload[..]));
        // Taken, the inbox holds nothing and files again.
        assert_eq!(ps.publish(false, b"big", b"x", |_| {}), 1);
        let mut next = Vec::new();
        assert_eq!(ps.take(0, &mut next), vec![]);
        assert_eq!(next.len(), 1);
    }

    #[test]
    fn unsubscribed_connections_get_nothing_and_counts_follow() {
        let ps = PubSub::new(1);
        ps.subscribe(Kind::Channel, b"a", sub(0, 1));
        ps.subscribe(Kind::Channel, b"a", sub(0, 2));
        ps.subscribe(Kind::Pattern, b"a*", sub(0, 2));
        ps.subscribe(Kind::Pattern, b"a*", sub(0, 3));
        assert_eq!(ps.count(Kind::Channel, b"a"), 2);
        assert_eq!(ps.patterns(), 1);
        ps.unsubscribe(Kind::Channel, b"a", sub(0, 1));
        ps.unsubscribe(Kind::Pattern, b"a*", sub(0, 2));
        ps.unsubscribe(Kind::Pattern, b"a*", sub(0, 3));
        assert_eq!(ps.patterns(), 0);
        assert_eq!(ps.channels(false, None), vec![b"a".to_vec()]);
        assert_eq!(ps.channels(false, Some(b"b*")), Vec::<Vec<u8>>::new());
        assert_eq!(ps.publish(false, b"a", b"x", |_| {}), 1);
        let mut got = Vec::new();
        ps.take(0, &mut got);
        assert_eq!(texts(&got), vec![(2, &b"message"[..], ":a:x".to_string())]);
        ps.unsubscribe(Kind::Channel, b"a", sub(0, 2));
        assert_eq!(ps.channels(false, None), Vec::<Vec<u8>>::new());
        assert_eq!(
            ps.publish(false, b"a", b"y", |_| panic!("nobody to wake")),
            0
        );
    }
}

//! A connection's state: its database, protocol, transaction, watched keys and user.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::acl::User;
use crate::pubsub::{Kind, Subscriber};
use crate::shared::Shared;

/// Per-connection state.
pub(crate) struct Connection {
    pub id: u64,
    pub name: Option<Vec<u8>>,
    /// The database `SELECT` chose.
    pub db: u8,
    /// 2 or 3, as `HELLO` chose.
    pub protocol: u8,
    /// Commands queued since `MULTI`, when one is open.
    pub multi: Option<Vec<Vec<Vec<u8>>>>,
    /// A command failed to queue since `MULTI`: `EXEC` discards the transaction.
    pub multi_failed: bool,
    /// Keys `WATCH`ed, as they were then.
    pub watched: Vec<Watched>,
    /// The user the connection runs as.
    pub user: Arc<User>,
    /// False until the connection authenticates, when `default` needs a password.
    pub authenticated: bool,
    /// The user may run every command on every key: nothing to check.
    pub unrestricted: bool,
    /// [`Shared::acl_generation`] when `user` was read.
    pub(super) acl_seen: u64,
    /// Refused by protected mode: every command is answered with its error, then closed.
    pub denied: bool,
    /// Where the user's key patterns are walked from: the one that granted the last key.
    pub acl_hint: usize,
    /// Running a parked blocking command again: a key of another kind is passed over as
    /// empty (it may become the right kind again), not answered with WRONGTYPE.
    pub retrying: bool,
    /// Where the connection lives, for the messages published to it.
    pub at: crate::pubsub::Subscriber,
    /// The channels, patterns and shard channels it subscribes to.
    pub subs: Subscriptions,
    /// `CLIENT REPLY`.
    pub reply: ReplyMode,
    /// How other connections see it (CLIENT LIST); none for a script's own client.
    pub info: Option<Arc<crate::clients::ClientInfo>>,
    /// What a replica said of itself before PSYNC: the port it listens on and its address.
    pub replica_port: u64,
    pub replica_ip: Option<String>,
    /// A parked WAIT: the offset it waits for, and when it gives up.
    pub wait: Option<(u64, Option<std::time::Instant>)>,
}

/// Whether a connection's commands are answered (`CLIENT REPLY ON|OFF|SKIP`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ReplyMode {
    On,
    Off,
    /// `CLIENT REPLY SKIP` was just run: it and the command after it go unanswered.
    SkipArmed,
    /// The next command goes unanswered.
    Skip,
}

/// A connection's subscriptions.
#[derive(Default)]
pub(crate) struct Subscriptions {
    pub channels: BTreeSet<Vec<u8>>,
    pub patterns: BTreeSet<Vec<u8>>,
    pub shard: BTreeSet<Vec<u8>>,
    /// The empty name while the connection runs MONITOR.
    pub monitor: BTreeSet<Vec<u8>>,
}

impl Subscriptions {
    /// Channels and patterns: the count SUBSCRIBE and PSUBSCRIBE answer with.
    pub(crate) fn plain(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Any subscription at all: a RESP2 connection is in subscribed mode.
    pub(crate) fn any(&self) -> bool {
        self.plain() + self.shard.len() > 0
    }

    pub(crate) fn of(&mut self, kind: Kind) -> &mut BTreeSet<Vec<u8>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
            Kind::Monitor => &mut self.monitor,
        }
    }
}

impl Connection {
    pub(crate) fn new(id: u64, shared: &Shared, denied: bool) -> Self {
        let user = shared
            .user("default")
            .unwrap_or_else(|| Arc::new(User::default_user()));
        let mut c = Connection {
            id,
            name: None,
            db: 0,
            protocol: 2,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            authenticated: false,
            unrestricted: false,
            acl_seen: 0,
            user: user.clone(),
            denied,
            acl_hint: 0,
            retrying: false,
            at: Subscriber {
                worker: usize::MAX,
                slot: usize::MAX,
                id,
            },
            subs: Subscriptions::default(),
            reply: ReplyMode::On,
            info: None,
            replica_port: 0,
            replica_ip: None,
            wait: None,
        };
        c.log_in(user, false);
        c
    }

    /// Runs as `user` from now on; `authenticated`: it gave its password (else it is
    /// authenticated only if it needs none).
    pub(crate) fn log_in(&mut self, user: Arc<User>, authenticated: bool) {
        // The user was read before now: the next command reads it again ([`refresh_user`]),
        // in case it changed or went in between.
        self.acl_seen = u64::MAX;
        self.authenticated = authenticated || (user.enabled && user.nopass);
        self.unrestricted = user.unrestricted();
        self.user = user;
    }

    /// Shows others (CLIENT LIST) its name, user, database, protocol, transaction and
    /// subscriptions as they are now.
    pub(crate) fn publish(&self) {
        let Some(info) = &self.info else { return };
        let mut s = info.shown();
        s.name.clear();
        s.name
            .extend_from_slice(self.name.as_deref().unwrap_or_default());
        if s.user != self.user.name {
            s.user = self.user.name.clone();
        }
        s.db = self.db;
        s.resp = self.protocol;
        s.multi = self.multi.as_ref().map_or(-1, |q| q.len() as i64);
        s.sub = self.subs.channels.len();
        s.psub = self.subs.patterns.len();
        s.ssub = self.subs.shard.len();
    }

    /// Drops what command `argv` appended to `output` after `start` when replies are off
    /// or skipped; pub/sub's confirmations are messages, and always go out.
    pub(crate) fn silence(&mut self, argv: &[&[u8]], output: &mut Vec<u8>, start: usize) {
        let pubsub = argv.first().is_some_and(|n| {
            let n = n.to_ascii_lowercase();
            n.ends_with(b"subscribe")
        });
        let drop = match self.reply {
            ReplyMode::On => return,
            ReplyMode::Off => !pubsub,
            ReplyMode::SkipArmed => {
                self.reply = ReplyMode::Skip;
                true
            }
            ReplyMode::Skip => {
                self.reply = ReplyMode::On;
                !pubsub
            }
        };
        if drop {
            output.truncate(start);
        }
    }

    /// Picks up a change of the connection's user. False when the user was deleted: the
    /// connection is closed, as Redis closes it.
    pub(crate) fn refresh_user(&mut self, shared: &Shared) -> bool {
        let seen = shared.acl_generation.load(Ordering::Acquire);
        if seen == self.acl_seen {
            return true;
        }
        let Some(user) = shared
            .user(&self.user.name)
            .filter(|u| u.id == self.user.id)
        else {
            return false;
        };
        self.acl_seen = seen;
        self.unrestricted = user.unrestricted();
        self.user = user;
        true
    }
}

/// A key as `WATCH` saw it.
pub(crate) struct Watched {
    /// The database it was watched in, by number, and its engine key then (a SWAPDB since
    /// may have moved the database).
    pub db: u8,
    /// How many SWAPDBs that database had taken part in when the key was watched.
    pub swaps: u64,
    pub key: Vec<u8>,
    /// The engine's sequence number when it was watched: a write of the key since has a
    /// larger one.
    pub since: u64,
    /// Held until the watch ends, so that no compaction rewrites the sequence number of a
    /// write made since (the bottom of the tree writes those every reader sees as zero). It
    /// keeps no old version alive: an abandoned WATCH costs the tree nothing.
    pub _pin: std::sync::Arc<strata::SequencePin>,
    /// When it expires, if it was live and expiring.
    pub expires_at: Option<u64>,
    /// It was stored but had expired already: its removal by expiry changes nothing.
    pub expired: bool,
    /// No value was stored, live or expired.
    pub absent: bool,
}

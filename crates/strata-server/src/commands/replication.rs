//! REPLICAOF (and SLAVEOF), ROLE and WAIT, and what a replica sends its primary: REPLCONF,
//! PSYNC and SYNC (`crate::replication` does the copying and streaming).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Connection, Ctx, Outcome, exec_state, int_arg};
use crate::replication::follower;
use crate::replication::primary::WAIT_KEY;
use crate::replication::state::Handoff;
use crate::replication::{acknowledged, ask_for_acks};
use crate::shared::{After, Block, Shared};

/// `REPLICAOF host port` follows a primary; `REPLICAOF NO ONE` stops and takes writes.
pub(super) fn replicaof(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if a[1].eq_ignore_ascii_case(b"no") && a[2].eq_ignore_ascii_case(b"one") {
        become_primary(cx.shared)?;
        cx.out.ok();
        return Ok(());
    }
    let port = std::str::from_utf8(a[2])
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|&p| p > 0)
        .ok_or("ERR Invalid master port")?;
    let host = String::from_utf8_lossy(a[1]).into_owned();
    let same = cx
        .shared
        .replication
        .master
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|l| l.host == host && l.port == port);
    if same {
        cx.out.simple("OK Already connected to specified master");
        return Ok(());
    }
    become_replica(cx.shared, &host, port)?;
    cx.out.ok();
    Ok(())
}

/// Follows `host:port` from now on, ending the link to any primary before.
pub(crate) fn become_replica(shared: &Shared, host: &str, port: u16) -> Result<(), String> {
    let r = &shared.replication;
    stop_following(shared)?;
    r.is_replica.store(true, Ordering::SeqCst);
    shared.cache.set_off(true);
    shared.expiry_filter.store(false, Ordering::Release);
    let link = follower::start(shared, host, port)?;
    *r.master.lock().unwrap_or_else(|e| e.into_inner()) = Some(link);
    Ok(())
}

/// Ends the link to the primary, if any, and waits for its thread: a batch being written
/// lands first.
fn stop_following(shared: &Shared) -> Result<bool, String> {
    let old = shared
        .replication
        .master
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let Some(old) = old else {
        return Ok(false);
    };
    old.stop();
    if !old.wait_stopped() {
        return Err("ERR the link to the primary did not stop in time; try again".into());
    }
    Ok(true)
}

/// Stops following and takes writes, handing out collection versions from where the
/// primary's batches left them.
fn become_primary(shared: &Shared) -> Result<(), String> {
    let r = &shared.replication;
    if !stop_following(shared)? {
        return Ok(());
    }
    // Writes of its own follow: pointed at its old primary again, it is copied whole
    // rather than resuming over them.
    let mut forget = strata::WriteBatch::new();
    forget.delete(crate::replication::OFFSET_KEY);
    forget.delete(crate::replication::COPYING_KEY);
    shared
        .db
        .write(forget, strata::WriteOptions { sync: true })
        .map_err(super::engine)?;
    r.loading.store(false, Ordering::Release);
    shared.expiry_filter.store(true, Ordering::Release);
    shared.databases.reload(&shared.db)?;
    shared.versions.reload(&shared.db)?;
    shared.cache.set_off(false);
    r.is_replica.store(false, Ordering::SeqCst);
    Ok(())
}

/// `ROLE`: `master, offset, [[ip, port, offset], ...]` or `slave, host, port, state,
/// offset`.
pub(super) fn role(cx: &mut Ctx<'_, '_>, _a: &[&[u8]]) -> Outcome {
    let r = &cx.shared.replication;
    let link = r.master.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(link) = link {
        cx.out.array(5);
        cx.out.bulk(b"slave");
        cx.out.bulk(link.host.as_bytes());
        cx.out.int(i64::from(link.port));
        cx.out.bulk(link.state.phase().as_bytes());
        cx.out.int(link.state.applied() as i64);
        return Ok(());
    }
    let replicas: Vec<_> = r.attached().into_iter().filter(|x| x.online()).collect();
    cx.out.array(3);
    cx.out.bulk(b"master");
    cx.out.int(cx.shared.db.latest_sequence() as i64);
    cx.out.array(replicas.len());
    for x in replicas {
        cx.out.array(3);
        cx.out.bulk(x.ip.as_bytes());
        cx.out
            .bulk(x.port.load(Ordering::Relaxed).to_string().as_bytes());
        cx.out
            .bulk(x.acked.load(Ordering::Acquire).to_string().as_bytes());
    }
    Ok(())
}

/// `WAIT numreplicas timeout`: waits until that many replicas acknowledged every write made
/// before it, or `timeout` milliseconds passed (0: no limit); answers how many did.
pub(super) fn wait(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if cx.shared.replication.replica() {
        return Err(
            "ERR WAIT cannot be used with replica instances. Please also note that \
                    since Redis 4.0 if a replica is configured to be writable (which is not \
                    the default) writes to replicas are just local and are not propagated."
                .into(),
        );
    }
    let want = int_arg(a[1])?;
    let ms = int_arg(a[2])?;
    if ms < 0 {
        return Err("ERR timeout is negative".into());
    }
    let first = cx.conn.wait.is_none();
    let (target, deadline) = cx.conn.wait.take().unwrap_or_else(|| {
        let deadline = (ms > 0).then(|| Instant::now() + Duration::from_millis(ms as u64));
        (cx.shared.db.latest_sequence(), deadline)
    });
    let got = acknowledged(cx.shared, target);
    let late = deadline.is_some_and(|d| Instant::now() >= d);
    if got as i64 >= want || late || exec_state::in_exec() {
        cx.out.int(got as i64);
        return Ok(());
    }
    // Asked once: each acknowledgement wakes the WAIT again, which must not ask again.
    if first {
        ask_for_acks(cx.shared);
    }
    cx.conn.wait = Some((target, deadline));
    cx.after = After::Block(Block {
        keys: vec![WAIT_KEY.to_vec()],
        deadline,
        argv: None,
    });
    Ok(())
}

/// A parked WAIT's answer when its time is up: the replicas that acknowledged by then.
pub(crate) fn wait_timed_out(shared: &Shared, conn: &mut Connection) -> i64 {
    conn.wait
        .take()
        .map_or(0, |(target, _)| acknowledged(shared, target) as i64)
}

/// `REPLCONF option value ...`: what a replica says of itself before PSYNC.
pub(super) fn replconf(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    if a.len().is_multiple_of(2) {
        return Err(super::syntax());
    }
    for pair in a[1..].chunks(2) {
        let value = String::from_utf8_lossy(pair[1]);
        match pair[0].to_ascii_lowercase().as_slice() {
            b"listening-port" => {
                cx.conn.replica_port = value.parse().map_err(|_| super::not_an_integer())?;
            }
            b"ip-address" => cx.conn.replica_ip = Some(value.into_owned()),
            b"capa" | b"rdb-only" | b"rdb-filter-only" => {}
            // Sent on a replica's link, which this connection is not: nothing to answer.
            b"ack" | b"getack" => return Ok(()),
            _ => {
                return Err(format!(
                    "ERR Unrecognized REPLCONF option: {}",
                    String::from_utf8_lossy(pair[0])
                ));
            }
        }
    }
    cx.out.ok();
    Ok(())
}

/// `PSYNC replid offset` and `SYNC`: the connection becomes a replica's link; the
/// replication thread answers (`+FULLRESYNC` or `+CONTINUE`).
pub(super) fn psync(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let asked = match a {
        [_, id, offset] if *id != b"?" => std::str::from_utf8(offset)
            .ok()
            .and_then(|o| o.parse::<u64>().ok())
            .map(|o| (String::from_utf8_lossy(id).into_owned(), o)),
        _ => None,
    };
    let peer = cx.conn.info.as_ref().map(|i| i.addr.clone());
    let ip = cx.conn.replica_ip.clone().unwrap_or_else(|| {
        let addr = peer.unwrap_or_default();
        addr.rsplit_once(':')
            .map_or(addr.clone(), |(ip, _)| ip.to_string())
    });
    cx.after = After::Replicate(Box::new(Handoff {
        asked,
        ip,
        port: cx.conn.replica_port,
    }));
    Ok(())
}

//! INFO: the server's state in Redis's sections, and Strata's own (`lsm`).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::server::REDIS_VERSION;
use super::spec::SPECS;
use super::{Ctx, Outcome};
use crate::config::SyncMode;
use crate::store::DATABASES;

/// INFO's sections, in order; `true` for those in the default set.
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("commandstats", false),
    ("errorstats", false),
    ("cluster", true),
    ("keyspace", true),
    ("lsm", true),
];

pub(super) fn info(cx: &mut Ctx<'_, '_>, a: &[&[u8]]) -> Outcome {
    let asked: Vec<String> = a[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    let want = |section: &str, default: bool| {
        asked.is_empty() && default
            || asked.iter().any(|x| {
                x == section
                    || x == "all" && section != "modules"
                    || x == "everything"
                    || x == "default" && default
            })
    };
    let mut o = String::new();
    for &(section, default) in SECTIONS {
        if want(section, default) {
            if !o.is_empty() {
                o.push_str("\r\n");
            }
            info_section(cx, section, &mut o)?;
        }
    }
    cx.out.verbatim(&o);
    Ok(())
}

/// Seconds of CPU time this process spent in user and system mode, from `/proc/self/stat`.
fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name, in ticks
    // of 1/100 s on Linux.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) / 100.0, ticks(12) / 100.0)
}

/// The process's resident memory in bytes, from `/proc/self/statm`.
pub(super) fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn info_section(cx: &Ctx<'_, '_>, section: &str, o: &mut String) -> Outcome {
    let shared = cx.shared;
    let c = &shared.counters;
    match section {
        "server" => server_section(cx, o)?,
        "clients" => {
            let _ = write!(
                o,
                "# Clients\r\n\
                 connected_clients:{}\r\n\
                 maxclients:{}\r\n\
                 blocked_clients:{}\r\n\
                 rejected_connections:{}\r\n\
                 client_query_buffer_limit_disconnections:{}\r\n\
                 client_output_buffer_limit_disconnections:{}\r\n\
                 tracking_clients:0\r\n",
                c.connected.load(Ordering::Relaxed),
                shared.max_clients.load(Ordering::Relaxed),
                shared.parked.load(Ordering::Relaxed),
                c.rejected.load(Ordering::Relaxed),
                c.query_buffer_closed.load(Ordering::Relaxed),
                c.output_buffer_closed.load(Ordering::Relaxed)
            );
        }
        "memory" => memory_section(cx, o)?,
        "persistence" => persistence_section(cx, o)?,
        "stats" => stats_section(cx, o)?,
        "replication" => {
            o.push_str("# Replication\r\n");
            for (k, v) in crate::replication::info(shared) {
                let _ = write!(o, "{k}:{v}\r\n");
            }
        }
        "cpu" => {
            let (user, sys) = cpu_seconds();
            let _ = write!(
                o,
                "# CPU\r\n\
                 used_cpu_sys:{sys:.6}\r\n\
                 used_cpu_user:{user:.6}\r\n\
                 used_cpu_sys_children:0.000000\r\n\
                 used_cpu_user_children:0.000000\r\n"
            );
        }
        "commandstats" => commandstats_section(cx, o)?,
        "errorstats" => {
            o.push_str("# Errorstats\r\n");
            let stats = cx
                .shared
                .error_stats
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for (code, n) in stats.iter() {
                let _ = write!(o, "errorstat_{code}:count={n}\r\n");
            }
        }
        // Not a cluster node: CLUSTER answers that cluster support is disabled.
        "cluster" => o.push_str("# Cluster\r\ncluster_enabled:0\r\n"),
        "keyspace" => keyspace_section(cx, o)?,
        "lsm" => lsm_section(cx, o)?,
        _ => {}
    }
    Ok(())
}

/// INFO's `server` section.
fn server_section(cx: &Ctx<'_, '_>, o: &mut String) -> Outcome {
    let shared = cx.shared;
    let _ = write!(
        o,
        "# Server\r\n\
         redis_version:{REDIS_VERSION}\r\n\
         strata_version:{}\r\n\
         redis_mode:standalone\r\n\
         os:{}\r\n\
         arch_bits:64\r\n\
         process_id:{}\r\n\
         run_id:{:040x}\r\n\
         tcp_port:{}\r\n\
         uptime_in_seconds:{}\r\n\
         uptime_in_days:{}\r\n\
         multiplexing_api:epoll\r\n\
         server_time_usec:{}\r\n\
         executable:strata\r\n\
         config_file:{}\r\n",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::process::id(),
        shared.run_id,
        shared.port,
        shared.started.elapsed().as_secs(),
        shared.started.elapsed().as_secs() / 86_400,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros()),
        shared
            .config
            .config_file
            .as_ref()
            .map_or_else(String::new, |p| p.display().to_string()),
    );
    Ok(())
}

/// Bytes as Redis's `_human` fields show them: `1.50M`, `512B`.
fn human(bytes: u64) -> String {
    let units = [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    match units.iter().find(|(_, size)| bytes >= *size) {
        Some((unit, size)) => format!("{:.2}{unit}", bytes as f64 / *size as f64),
        None => format!("{bytes}B"),
    }
}

/// INFO's `memory` section.
fn memory_section(cx: &Ctx<'_, '_>, o: &mut String) -> Outcome {
    let shared = cx.shared;
    let s = shared.db.stats();
    // What the server holds on purpose: memtables (and flushed ones' memory kept for the
    // next), the engine's block cache and pinned tables, and the hot-key cache; the resident
    // set besides.
    let memtables = s.memtable_bytes + s.recycled_memtable_bytes;
    let used = memtables + s.block_cache_bytes + s.table_pinned_bytes + shared.cache.bytes() as u64;
    let _ = write!(
        o,
        "# Memory\r\n\
         used_memory:{used}\r\n\
         used_memory_rss:{}\r\n\
         maxmemory:0\r\n\
         maxmemory_policy:noeviction\r\n\
         used_memory_human:{}\r\n\
         used_memory_rss_human:{}\r\n\
         used_memory_lua:{}\r\n\
         used_memory_lua_human:{}\r\n\
         number_of_cached_scripts:{}\r\n\
         number_of_functions:{}\r\n\
         number_of_libraries:{}\r\n\
         hot_cache_bytes:{}\r\n",
        resident_bytes(),
        human(used),
        human(resident_bytes()),
        shared.scripts.memory(),
        human(shared.scripts.memory() as u64),
        shared.scripts.cached_count(),
        shared.scripts.stats().2,
        shared.scripts.stats().1,
        shared.cache.bytes(),
    );
    Ok(())
}

/// INFO's `persistence` section.
fn persistence_section(cx: &Ctx<'_, '_>, o: &mut String) -> Outcome {
    let shared = cx.shared;
    let (saving, bgsave_ok, saved_seq) = shared.saves.info();
    let _ = write!(
        o,
        "# Persistence\r\n\
         loading:0\r\n\
         aof_enabled:1\r\n\
         appendfsync:{}\r\n\
         rdb_changes_since_last_save:{}\r\n\
         rdb_bgsave_in_progress:{}\r\n\
         rdb_last_save_time:{}\r\n\
         rdb_last_bgsave_status:{}\r\n",
        match shared.sync_mode() {
            SyncMode::Always => "always",
            SyncMode::EverySec => "everysec",
            SyncMode::No => "no",
        },
        shared.db.snapshot().sequence().saturating_sub(saved_seq),
        u8::from(saving),
        shared.saves.last_save_unix(),
        if bgsave_ok { "ok" } else { "err" },
    );
    Ok(())
}

/// INFO's `stats` section.
fn stats_section(cx: &Ctx<'_, '_>, o: &mut String) -> Outcome {
    let shared = cx.shared;
    let c = &shared.counters;
    let hits = shared.cache.hits();
    let misses = shared.cache.misses();
    let rate = if hits + misses == 0 {
        0.0
    } else {
        hits as f64 / (hits + misses) as f64
    };
    let _ = write!(
        o,
        "# Stats\r\n\
         total_connections_received:{}\r\n\
         total_commands_processed:{}\r\n\
         expired_keys:{}\r\n\
         keyspace_hits:{}\r\n\
         keyspace_misses:{}\r\n\
         total_error_replies:{}\r\n\
         protocol_errors:{}\r\n\
         pubsub_channels:{}\r\n\
         pubsub_patterns:{}\r\n\
         pubsubshard_channels:{}\r\n\
         hot_cache_hits:{hits}\r\n\
         hot_cache_misses:{misses}\r\n\
         hot_cache_hit_rate:{rate:.4}\r\n\
         hot_cache_bypassed:{}\r\n\
         sync_full:{}\r\n\
         sync_partial_ok:{}\r\n\
         sync_partial_err:{}\r\n",
        c.connections_received.load(Ordering::Relaxed),
        c.commands.load(Ordering::Relaxed),
        c.expired_keys.load(Ordering::Relaxed),
        c.keyspace_hits.load(Ordering::Relaxed),
        c.keyspace_misses.load(Ordering::Relaxed),
        shared
            .command_stats
            .iter()
            .map(|s| s.failed.load(Ordering::Relaxed) + s.rejected.load(Ordering::Relaxed))
            .sum::<u64>(),
        c.protocol_errors.load(Ordering::Relaxed),
        shared.pubsub.channels(false, None).len(),
        shared.pubsub.patterns(),
        shared.pubsub.channels(true, None).len(),
        shared.cache.bypassed(),
        shared.replication.full_syncs.load(Ordering::Relaxed),
        shared.replication.partial_ok.load(Ordering::Relaxed),
        shared.replication.partial_err.load(Ordering::Relaxed),
    );
    Ok(())
}

/// INFO's `commandstats` section.
fn commandstats_section(cx: &Ctx<'_, '_>, o: &mut String) -> Outcome {
    let shared = cx.shared;
    o.push_str("# Commandstats\r\n");
    let subs = shared.stats.subcommands.all();
    let rows = SPECS.iter().map(|c| c.name).zip(&shared.command_stats);
    let subs_shown = subs.iter().map(|(n, s)| (n.as_str(), &**s));
    for (name, st) in rows.chain(subs_shown) {
        let calls = st.calls.load(Ordering::Relaxed);
        let rejected = st.rejected.load(Ordering::Relaxed);
        let failed = st.failed.load(Ordering::Relaxed);
        if calls + rejected == 0 {
            continue;
        }
        let usec = st.micros.load(Ordering::Relaxed);
        let per_call = if calls == 0 {
            0.0
        } else {
            usec as f64 / calls as f64
        };
        let _ = write!(
            o,
            "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={per_call:.2},\
             rejected_calls={rejected},failed_calls={failed}\r\n"
        );
    }
    Ok(())
}

/// INFO's `keyspace` section.
fn keyspace_section(cx: &Ctx<'_, '_>, o: &mut String) -> Outcome {
    let shared = cx.shared;
    o.push_str("# Keyspace\r\n");
    // Counted exactly, as DBSIZE counts: a walk over each database that holds keys.
    for db in 0..DATABASES {
        let (lo, hi) = crate::store::db_range(shared.databases.prefix(db));
        let (mut keys, mut expires) = (0u64, 0u64);
        let entries = shared
            .db
            .scan_with(lo..hi, strata::ReadOptions::default(), false)
            .map_err(super::engine)?;
        for e in entries {
            let (_, raw) = e.map_err(super::engine)?;
            if let Ok((_, t, _)) = crate::store::parse_stored(&raw)
                && t.is_none_or(|t| t > cx.now)
            {
                keys += 1;
                expires += u64::from(t.is_some());
            }
        }
        if keys > 0 {
            let _ = write!(o, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
        }
    }
    Ok(())
}

/// INFO's `lsm` section.
fn lsm_section(cx: &Ctx<'_, '_>, o: &mut String) -> Outcome {
    let shared = cx.shared;
    let s = shared.db.stats();
    let _ = write!(o, "# LSM\r\n");
    let runs: Vec<String> = s.runs_per_level.iter().map(|r| r.to_string()).collect();
    let _ = write!(
        o,
        "merge_policy:{}\r\nsize_ratio:{}\r\nruns_per_level:{}\r\n",
        s.merge_policy.name(),
        s.size_ratio,
        runs.join(",")
    );
    for (i, l) in s.levels.iter().enumerate() {
        // "-" for an empty level: 0 would read as a level of filters without bits.
        let bits = l
            .filter_bits_per_key
            .map_or_else(|| "-".to_string(), |b| format!("{b:.3}"));
        let _ = write!(
            o,
            "level{i}:files={},bytes={},target_bytes={},filter_bits_per_key={bits}\r\n",
            l.files, l.bytes, l.target_bytes,
        );
    }
    let _ = write!(
        o,
        "memtable_bytes:{}\r\n\
         immutable_memtables:{}\r\n\
         sst_bytes:{}\r\n\
         wal_bytes:{}\r\n\
         write_amplification:{:.3}\r\n\
         block_cache_hits:{}\r\n\
         block_cache_misses:{}\r\n\
         block_cache_hit_rate:{:.4}\r\n\
         table_pinned_bytes:{}\r\n\
         open_table_files:{}\r\n\
         flushes:{}\r\n\
         compactions:{}\r\n\
         read_compactions:{}\r\n\
         idle_merges:{}\r\n\
         idle_merges_given_up:{}\r\n\
         write_stall_micros:{}\r\n\
         expected_false_positives:{:.6}\r\n\
         filter_false_positives:{}\r\n",
        s.memtable_bytes,
        s.immutable_memtables,
        s.sst_bytes,
        s.wal_bytes,
        s.write_amplification().unwrap_or(0.0),
        s.block_cache_hits,
        s.block_cache_misses,
        s.cache_hit_rate(),
        s.table_pinned_bytes,
        s.open_table_files,
        s.flushes,
        s.compactions,
        s.read_compactions,
        s.idle_merges,
        s.idle_merges_given_up,
        s.write_stall_micros,
        s.expected_false_positives,
        s.filter_false_positives
    );
    if let Some(p) = &s.poisoned {
        let _ = write!(o, "poisoned:{p}\r\n");
    }
    Ok(())
}

//! The command table: one row per command the server answers, with its name, arity, flags,
//! ACL categories, key positions and handler. Adding a command is one row here and one
//! handler.
//!
//! The rows are one list, which [`command_rows`] hands to a macro of its caller's: `spec.rs`
//! makes of them the commands' descriptions ([`super::spec::SPECS`]), which dispatch, ACL
//! checks, `COMMAND` and `INFO commandstats` read, and `handlers.rs` the handlers, in the same
//! order. So the descriptions need none of the handlers' code, and a row's description and
//! handler cannot part.

/// Calls `$emit!` with every row: `(name, arity, flags, [categories], key positions,
/// handler)`.
macro_rules! command_rows {
    ($emit:ident) => {
        $emit! {
            // Strings.
            ("get", 2, R, ["read", "string", "fast"], ONE, strings::get),
            (
                "set",
                -3,
                WS,
                ["write", "string", "slow"],
                ONE,
                strings::set
            ),
            (
                "setnx",
                3,
                W,
                ["write", "string", "fast"],
                ONE,
                strings::setnx
            ),
            (
                "setex",
                4,
                WS,
                ["write", "string", "slow"],
                ONE,
                strings::setex
            ),
            (
                "psetex",
                4,
                WS,
                ["write", "string", "slow"],
                ONE,
                strings::setex
            ),
            (
                "getex",
                -2,
                &["write", "fast"],
                ["write", "string", "fast"],
                ONE,
                strings::getex
            ),
            (
                "getdel",
                2,
                &["write", "fast"],
                ["write", "string", "fast"],
                ONE,
                strings::getdel
            ),
            (
                "getset",
                3,
                W,
                ["write", "string", "fast"],
                ONE,
                strings::getset
            ),
            (
                "mget",
                -2,
                R,
                ["read", "string", "fast"],
                ALL,
                strings::mget
            ),
            (
                "mset",
                -3,
                WS,
                ["write", "string", "slow"],
                (1, -1, 2),
                strings::mset
            ),
            (
                "msetnx",
                -3,
                WS,
                ["write", "string", "slow"],
                (1, -1, 2),
                strings::msetnx
            ),
            (
                "incr",
                2,
                W,
                ["write", "string", "fast"],
                ONE,
                strings::incr
            ),
            (
                "decr",
                2,
                W,
                ["write", "string", "fast"],
                ONE,
                strings::incr
            ),
            (
                "incrby",
                3,
                W,
                ["write", "string", "fast"],
                ONE,
                strings::incr
            ),
            (
                "decrby",
                3,
                W,
                ["write", "string", "fast"],
                ONE,
                strings::incr
            ),
            (
                "incrbyfloat",
                3,
                W,
                ["write", "string", "fast"],
                ONE,
                strings::incrbyfloat
            ),
            (
                "append",
                3,
                W,
                ["write", "string", "fast"],
                ONE,
                strings::append
            ),
            (
                "strlen",
                2,
                R,
                ["read", "string", "fast"],
                ONE,
                strings::strlen
            ),
            (
                "getrange",
                4,
                RS,
                ["read", "string", "slow"],
                ONE,
                strings::getrange
            ),
            (
                "substr",
                4,
                RS,
                ["read", "string", "slow"],
                ONE,
                strings::getrange
            ),
            (
                "setrange",
                4,
                WS,
                ["write", "string", "slow"],
                ONE,
                strings::setrange
            ),
            (
                "lcs",
                -3,
                RS,
                ["read", "string", "slow"],
                (1, 2, 1),
                strings::lcs
            ),
            (
                "setbit",
                4,
                W,
                ["write", "bitmap", "slow"],
                ONE,
                strings::setbit
            ),
            (
                "getbit",
                3,
                R,
                ["read", "bitmap", "fast"],
                ONE,
                strings::getbit
            ),
            (
                "bitcount",
                -2,
                RS,
                ["read", "bitmap", "slow"],
                ONE,
                strings::bitcount
            ),
            (
                "bitpos",
                -3,
                RS,
                ["read", "bitmap", "slow"],
                ONE,
                strings::bitpos
            ),
            // Hashes.
            ("hset", -4, W, ["write", "hash", "fast"], ONE, hashes::hset),
            ("hsetnx", 4, W, ["write", "hash", "fast"], ONE, hashes::hsetnx),
            ("hmset", -4, W, ["write", "hash", "fast"], ONE, hashes::hset),
            ("hget", 3, R, ["read", "hash", "fast"], ONE, hashes::hget),
            ("hmget", -3, R, ["read", "hash", "fast"], ONE, hashes::hmget),
            ("hdel", -3, WF, ["write", "hash", "fast"], ONE, hashes::hdel),
            ("hlen", 2, R, ["read", "hash", "fast"], ONE, hashes::hlen),
            ("hstrlen", 3, R, ["read", "hash", "fast"], ONE, hashes::hstrlen),
            ("hexists", 3, R, ["read", "hash", "fast"], ONE, hashes::hexists),
            ("hincrby", 4, W, ["write", "hash", "fast"], ONE, hashes::hincrby),
            (
                "hincrbyfloat",
                4,
                W,
                ["write", "hash", "fast"],
                ONE,
                hashes::hincrbyfloat
            ),
            ("hkeys", 2, RS, ["read", "hash", "slow"], ONE, hashes::hgetall),
            ("hvals", 2, RS, ["read", "hash", "slow"], ONE, hashes::hgetall),
            ("hgetall", 2, RS, ["read", "hash", "slow"], ONE, hashes::hgetall),
            (
                "hrandfield",
                -2,
                RS,
                ["read", "hash", "slow"],
                ONE,
                hashes::hrandfield
            ),
            ("hscan", -3, RS, ["read", "hash", "slow"], ONE, hashes::hscan),
            // Sets.
            ("sadd", -3, W, ["write", "set", "fast"], ONE, sets::sadd),
            ("srem", -3, WF, ["write", "set", "fast"], ONE, sets::srem),
            ("scard", 2, R, ["read", "set", "fast"], ONE, sets::scard),
            ("sismember", 3, R, ["read", "set", "fast"], ONE, sets::sismember),
            ("smismember", -3, R, ["read", "set", "fast"], ONE, sets::sismember),
            ("smembers", 2, RS, ["read", "set", "slow"], ONE, sets::smembers),
            ("spop", -2, WF, ["write", "set", "fast"], ONE, sets::spop),
            (
                "srandmember",
                -2,
                RS,
                ["read", "set", "slow"],
                ONE,
                sets::srandmember
            ),
            ("smove", 4, WF, ["write", "set", "fast"], (1, 2, 1), sets::smove),
            ("sinter", -2, RS, ["read", "set", "slow"], ALL, sets::algebra),
            ("sunion", -2, RS, ["read", "set", "slow"], ALL, sets::algebra),
            ("sdiff", -2, RS, ["read", "set", "slow"], ALL, sets::algebra),
            ("sinterstore", -3, WS, ["write", "set", "slow"], ALL, sets::store),
            ("sunionstore", -3, WS, ["write", "set", "slow"], ALL, sets::store),
            ("sdiffstore", -3, WS, ["write", "set", "slow"], ALL, sets::store),
            // Every argument after numkeys counts as a key for ACL checks and EXEC's locks
            // (LIMIT and its number too): never fewer keys than the command reads.
            (
                "sintercard",
                -3,
                RM,
                ["read", "set", "slow"],
                (2, -1, 1),
                sets::sintercard
            ),
            ("sscan", -3, RS, ["read", "set", "slow"], ONE, sets::sscan),
            // Lists.
            ("lpush", -3, W, ["write", "list", "fast"], ONE, lists::push),
            ("rpush", -3, W, ["write", "list", "fast"], ONE, lists::push),
            ("lpushx", -3, W, ["write", "list", "fast"], ONE, lists::push),
            ("rpushx", -3, W, ["write", "list", "fast"], ONE, lists::push),
            ("lpop", -2, WF, ["write", "list", "fast"], ONE, lists::pop),
            ("rpop", -2, WF, ["write", "list", "fast"], ONE, lists::pop),
            ("llen", 2, R, ["read", "list", "fast"], ONE, lists::llen),
            ("lindex", 3, RS, ["read", "list", "slow"], ONE, lists::lindex),
            ("lrange", 4, RS, ["read", "list", "slow"], ONE, lists::lrange),
            ("lset", 4, WS, ["write", "list", "slow"], ONE, lists::lset),
            ("ltrim", 4, &["write"], ["write", "list", "slow"], ONE, lists::ltrim),
            ("lrem", 4, &["write"], ["write", "list", "slow"], ONE, lists::lrem),
            ("linsert", 5, WS, ["write", "list", "slow"], ONE, lists::linsert),
            ("lpos", -3, RS, ["read", "list", "slow"], ONE, lists::lpos),
            ("lmove", 5, WS, ["write", "list", "slow"], (1, 2, 1), lists::lmove),
            ("rpoplpush", 3, WS, ["write", "list", "slow"], (1, 2, 1), lists::lmove),
            ("lmpop", -4, WM, ["write", "list", "slow"], (2, -1, 1), lists::lmpop),
            (
                "blpop",
                -3,
                &["write", "noscript", "blocking"],
                ["write", "list", "slow", "blocking"],
                (1, -2, 1),
                blocking::blpop
            ),
            (
                "brpop",
                -3,
                &["write", "noscript", "blocking"],
                ["write", "list", "slow", "blocking"],
                (1, -2, 1),
                blocking::blpop
            ),
            (
                "blmove",
                6,
                &["write", "denyoom", "noscript", "blocking"],
                ["write", "list", "slow", "blocking"],
                (1, 2, 1),
                blocking::blmove
            ),
            (
                "brpoplpush",
                4,
                &["write", "denyoom", "noscript", "blocking"],
                ["write", "list", "slow", "blocking"],
                (1, 2, 1),
                blocking::blmove
            ),
            (
                "blmpop",
                -5,
                WBM,
                ["write", "list", "slow", "blocking"],
                (3, -1, 1),
                blocking::blmpop
            ),
            // Sorted sets.
            ("zadd", -4, W, ["write", "sortedset", "fast"], ONE, zsets::zadd),
            ("zincrby", 4, W, ["write", "sortedset", "fast"], ONE, zsets::zincrby),
            ("zrem", -3, WF, ["write", "sortedset", "fast"], ONE, zsets::zrem),
            ("zcard", 2, R, ["read", "sortedset", "fast"], ONE, zsets::zcard),
            ("zscore", 3, R, ["read", "sortedset", "fast"], ONE, zsets::zscore),
            ("zmscore", -3, R, ["read", "sortedset", "fast"], ONE, zsets::zscore),
            ("zrank", 3, R, ["read", "sortedset", "fast"], ONE, zsets::zrank),
            ("zrevrank", 3, R, ["read", "sortedset", "fast"], ONE, zsets::zrank),
            ("zcount", 4, R, ["read", "sortedset", "fast"], ONE, zrange::zcount),
            ("zlexcount", 4, R, ["read", "sortedset", "fast"], ONE, zrange::zcount),
            ("zrange", -4, RS, ["read", "sortedset", "slow"], ONE, zrange::zrange),
            ("zrevrange", -4, RS, ["read", "sortedset", "slow"], ONE, zrange::zrange),
            ("zrangebyscore", -4, RS, ["read", "sortedset", "slow"], ONE, zrange::zrange),
            ("zrevrangebyscore", -4, RS, ["read", "sortedset", "slow"], ONE, zrange::zrange),
            ("zrangebylex", -4, RS, ["read", "sortedset", "slow"], ONE, zrange::zrange),
            ("zrevrangebylex", -4, RS, ["read", "sortedset", "slow"], ONE, zrange::zrange),
            ("zrangestore", -5, WS, ["write", "sortedset", "slow"], (1, 2, 1), zrange::zrangestore),
            (
                "zremrangebyrank",
                4,
                &["write"],
                ["write", "sortedset", "slow"],
                ONE,
                zrange::zremrange
            ),
            (
                "zremrangebyscore",
                4,
                &["write"],
                ["write", "sortedset", "slow"],
                ONE,
                zrange::zremrange
            ),
            (
                "zremrangebylex",
                4,
                &["write"],
                ["write", "sortedset", "slow"],
                ONE,
                zrange::zremrange
            ),
            ("zpopmin", -2, WF, ["write", "sortedset", "fast"], ONE, zsets::zpop),
            ("zpopmax", -2, WF, ["write", "sortedset", "fast"], ONE, zsets::zpop),
            // numkeys comes first: every argument after it counts as a key (see sintercard).
            ("zmpop", -4, WM, ["write", "sortedset", "slow"], (2, -1, 1), zsets::zmpop),
            ("zrandmember", -2, RS, ["read", "sortedset", "slow"], ONE, zsets::zrandmember),
            ("zscan", -3, RS, ["read", "sortedset", "slow"], ONE, zsets::zscan),
            // Places, kept in sorted sets.
            ("geoadd", -5, WS, ["write", "geo", "slow"], ONE, geo::geoadd),
            ("geodist", -4, RS, ["read", "geo", "slow"], ONE, geo::geodist),
            ("geohash", -2, RS, ["read", "geo", "slow"], ONE, geo::geohash),
            ("geopos", -2, RS, ["read", "geo", "slow"], ONE, geo::geopos),
            ("georadius", -6, WSM, ["write", "geo", "slow"], ONE, geo::georadius),
            ("georadius_ro", -6, RS, ["read", "geo", "slow"], ONE, geo::georadius),
            ("georadiusbymember", -5, WSM, ["write", "geo", "slow"], ONE, geo::georadius),
            ("georadiusbymember_ro", -5, RS, ["read", "geo", "slow"], ONE, geo::georadius),
            ("geosearch", -7, RS, ["read", "geo", "slow"], ONE, geo::geosearch),
            ("geosearchstore", -8, WS, ["write", "geo", "slow"], (1, 2, 1), geo::geosearch),
            ("zunion", -3, RM, ["read", "sortedset", "slow"], (2, -1, 1), zalgebra::zcombine),
            ("zinter", -3, RM, ["read", "sortedset", "slow"], (2, -1, 1), zalgebra::zcombine),
            ("zdiff", -3, RM, ["read", "sortedset", "slow"], (2, -1, 1), zalgebra::zcombine),
            ("zunionstore", -4, WSM, ["write", "sortedset", "slow"], ALL, zalgebra::zcombine_store),
            ("zinterstore", -4, WSM, ["write", "sortedset", "slow"], ALL, zalgebra::zcombine_store),
            ("zdiffstore", -4, WSM, ["write", "sortedset", "slow"], ALL, zalgebra::zcombine_store),
            // The last argument is the timeout: every argument after the name counts as a key.
            (
                "bzpopmin",
                -3,
                &["write", "noscript", "blocking"],
                ["write", "sortedset", "fast", "blocking"],
                (1, -2, 1),
                blocking::bzpop
            ),
            (
                "bzpopmax",
                -3,
                &["write", "noscript", "blocking"],
                ["write", "sortedset", "fast", "blocking"],
                (1, -2, 1),
                blocking::bzpop
            ),
            (
                "bzmpop",
                -5,
                WBM,
                ["write", "sortedset", "slow", "blocking"],
                (3, -1, 1),
                blocking::bzmpop
            ),
            ("zintercard", -3, RM, ["read", "sortedset", "slow"], (2, -1, 1), zalgebra::zintercard),
            // The keyspace and expiry.
            ("memory", -2, RS, ["slow"], (2, 2, 1), keys::memory),
            (
                "del",
                -2,
                &["write"],
                ["keyspace", "write", "slow"],
                ALL,
                keys::del
            ),
            (
                "unlink",
                -2,
                &["write", "fast"],
                ["keyspace", "write", "fast"],
                ALL,
                keys::del
            ),
            (
                "exists",
                -2,
                R,
                ["keyspace", "read", "fast"],
                ALL,
                keys::exists
            ),
            (
                "touch",
                -2,
                R,
                ["keyspace", "read", "fast"],
                ALL,
                keys::exists
            ),
            ("type", 2, R, ["keyspace", "read", "fast"], ONE, keys::type_),
            ("object", -2, RS, ["keyspace", "read", "slow"], TWO, keys::object),
            (
                "sort",
                -2,
                SORT,
                ["write", "set", "sortedset", "list", "slow", "dangerous"],
                ONE,
                sort::sort
            ),
            (
                "sort_ro",
                -2,
                SORT_RO,
                ["read", "set", "sortedset", "list", "slow", "dangerous"],
                ONE,
                sort::sort
            ),
            (
                "keys",
                2,
                RS,
                ["keyspace", "read", "slow", "dangerous"],
                NONE,
                keys::keys
            ),
            (
                "scan",
                -2,
                RS,
                ["keyspace", "read", "slow"],
                NONE,
                keys::scan
            ),
            (
                "randomkey",
                1,
                RS,
                ["keyspace", "read", "slow"],
                NONE,
                keys::randomkey
            ),
            (
                "rename",
                3,
                &["write"],
                ["keyspace", "write", "slow"],
                (1, 2, 1),
                keys::rename
            ),
            (
                "renamenx",
                3,
                W,
                ["keyspace", "write", "fast"],
                (1, 2, 1),
                keys::rename
            ),
            (
                "copy",
                -3,
                WS,
                ["keyspace", "write", "slow"],
                (1, 2, 1),
                keys::copy
            ),
            (
                "swapdb",
                3,
                &["write", "fast"],
                ["keyspace", "write", "fast", "dangerous"],
                NONE,
                keys::swapdb
            ),
            (
                "move",
                3,
                &["write", "fast"],
                ["keyspace", "write", "fast"],
                ONE,
                keys::move_
            ),
            (
                "dbsize",
                1,
                R,
                ["keyspace", "read", "fast"],
                NONE,
                keys::dbsize
            ),
            (
                "flushdb",
                -1,
                &["write"],
                ["keyspace", "write", "slow", "dangerous"],
                NONE,
                keys::flushdb
            ),
            (
                "flushall",
                -1,
                &["write"],
                ["keyspace", "write", "slow", "dangerous"],
                NONE,
                keys::flushall
            ),
            (
                "expire",
                -3,
                &["write", "fast"],
                ["keyspace", "write", "fast"],
                ONE,
                keys::expire
            ),
            (
                "pexpire",
                -3,
                &["write", "fast"],
                ["keyspace", "write", "fast"],
                ONE,
                keys::expire
            ),
            (
                "expireat",
                -3,
                &["write", "fast"],
                ["keyspace", "write", "fast"],
                ONE,
                keys::expire
            ),
            (
                "pexpireat",
                -3,
                &["write", "fast"],
                ["keyspace", "write", "fast"],
                ONE,
                keys::expire
            ),
            ("ttl", 2, R, ["keyspace", "read", "fast"], ONE, keys::ttl),
            ("pttl", 2, R, ["keyspace", "read", "fast"], ONE, keys::ttl),
            (
                "expiretime",
                2,
                R,
                ["keyspace", "read", "fast"],
                ONE,
                keys::ttl
            ),
            (
                "pexpiretime",
                2,
                R,
                ["keyspace", "read", "fast"],
                ONE,
                keys::ttl
            ),
            (
                "persist",
                2,
                &["write", "fast"],
                ["keyspace", "write", "fast"],
                ONE,
                keys::persist
            ),
            // Streams.
            ("xadd", -5, W, ["write", "stream", "fast"], ONE, streams::xadd),
            ("xrange", -4, RS, ["read", "stream", "slow"], ONE, streams::xrange),
            ("xrevrange", -4, RS, ["read", "stream", "slow"], ONE, streams::xrange),
            ("xlen", 2, R, ["read", "stream", "fast"], ONE, streams::xlen),
            ("xdel", -3, WF, ["write", "stream", "fast"], ONE, streams::xdel),
            ("xtrim", -4, WS, ["write", "stream", "slow"], ONE, streams::xtrim),
            ("xsetid", -3, W, ["write", "stream", "fast"], ONE, streams::xsetid),
            ("xread", -4, XR, ["read", "stream", "slow", "blocking"], NONE, streams::xread),
            (
                "xreadgroup",
                -7,
                XW,
                ["write", "stream", "slow", "blocking"],
                NONE,
                xgroups::xreadgroup
            ),
            ("xgroup", -2, WS, ["write", "stream", "slow"], TWO, xgroups::xgroup),
            ("xack", -4, WF, ["write", "stream", "fast"], ONE, xgroups::xack),
            ("xpending", -3, RS, ["read", "stream", "slow"], ONE, xclaim::xpending),
            ("xclaim", -6, WF, ["write", "stream", "fast"], ONE, xclaim::xclaim),
            ("xautoclaim", -6, WF, ["write", "stream", "fast"], ONE, xclaim::xautoclaim),
            ("xinfo", -2, RS, ["read", "stream", "slow"], TWO, xinfo::xinfo),
            // Pub/sub.
            ("subscribe", -2, PS, ["pubsub", "slow"], NONE, pubsub::subscribe),
            ("unsubscribe", -1, PS, ["pubsub", "slow"], NONE, pubsub::unsubscribe),
            ("psubscribe", -2, PS, ["pubsub", "slow"], NONE, pubsub::psubscribe),
            ("punsubscribe", -1, PS, ["pubsub", "slow"], NONE, pubsub::punsubscribe),
            ("ssubscribe", -2, PS, ["pubsub", "slow"], NONE, pubsub::ssubscribe),
            ("sunsubscribe", -1, PS, ["pubsub", "slow"], NONE, pubsub::sunsubscribe),
            ("publish", 3, PF, ["pubsub", "fast"], NONE, pubsub::publish),
            ("spublish", 3, PF, ["pubsub", "fast"], NONE, pubsub::spublish),
            ("pubsub", -2, PL, ["pubsub", "slow"], NONE, pubsub::pubsub),
            // The connection and the server.
            ("ping", -1, CA, ["fast", "connection"], NONE, server::ping),
            ("echo", 2, CA, ["fast", "connection"], NONE, server::echo),
            ("quit", -1, C, ["fast", "connection"], NONE, server::quit),
            (
                "select",
                2,
                CA,
                ["fast", "connection"],
                NONE,
                server::select
            ),
            ("auth", -2, C, ["fast", "connection"], NONE, auth::auth),
            (
                "monitor",
                1,
                &["admin", "noscript", "loading", "stale"],
                ["admin", "slow", "dangerous"],
                NONE,
                monitor::monitor
            ),
            (
                "acl",
                -2,
                A,
                ["admin", "slow", "dangerous"],
                NONE,
                auth::acl
            ),
            ("hello", -1, C, ["fast", "connection"], NONE, server::hello),
            ("reset", 1, C, ["fast", "connection"], NONE, server::reset),
            (
                "client",
                -2,
                &["loading", "stale"],
                ["slow", "connection"],
                NONE,
                client::client
            ),
            (
                "command",
                -1,
                &["loading", "stale"],
                ["slow", "connection"],
                NONE,
                server::command
            ),
            (
                "config",
                -2,
                A,
                ["admin", "slow", "dangerous"],
                NONE,
                config::config
            ),
            (
                "cluster",
                -2,
                &["loading", "stale"],
                ["slow"],
                NONE,
                server::cluster
            ),
            (
                "slowlog",
                -2,
                &["admin", "loading", "stale"],
                ["admin", "slow", "dangerous"],
                NONE,
                latency::slowlog
            ),
            (
                "latency",
                -2,
                &["admin", "noscript", "loading", "stale"],
                ["admin", "slow", "dangerous"],
                NONE,
                latency::latency
            ),
            (
                "info",
                -1,
                &["loading", "stale"],
                ["slow", "dangerous"],
                NONE,
                info::info
            ),
            (
                "time",
                1,
                &["loading", "stale", "fast"],
                ["fast"],
                NONE,
                server::time
            ),
            (
                "shutdown",
                -1,
                &["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"],
                ["admin", "slow", "dangerous"],
                NONE,
                server::shutdown
            ),
            (
                "compact",
                -1,
                A,
                ["admin", "slow", "dangerous"],
                NONE,
                server::compact
            ),
            // Scripts and functions.
            ("eval", -3, SCRIPT, ["slow", "scripting"], NONE, scripting::eval),
            ("evalsha", -3, SCRIPT, ["slow", "scripting"], NONE, scripting::eval),
            ("eval_ro", -3, SCRIPT_RO, ["slow", "scripting"], NONE, scripting::eval),
            ("evalsha_ro", -3, SCRIPT_RO, ["slow", "scripting"], NONE, scripting::eval),
            ("fcall", -3, SCRIPT, ["slow", "scripting"], NONE, scripting::fcall),
            ("fcall_ro", -3, SCRIPT_RO, ["slow", "scripting"], NONE, scripting::fcall),
            (
                "script",
                -2,
                &["noscript", "stale"],
                ["slow", "scripting"],
                NONE,
                scripting::script
            ),
            (
                "function",
                -2,
                &["noscript", "stale"],
                ["slow", "scripting"],
                NONE,
                functions::function
            ),
            // Transactions.
            (
                "multi",
                1,
                TX,
                ["fast", "transaction"],
                NONE,
                transaction::multi
            ),
            (
                "exec",
                1,
                &["noscript", "loading", "stale", "skip_slowlog"],
                ["slow", "transaction"],
                NONE,
                transaction::exec
            ),
            (
                "discard",
                1,
                TX,
                ["fast", "transaction"],
                NONE,
                transaction::discard
            ),
            (
                "watch",
                -2,
                TX,
                ["fast", "transaction"],
                ALL,
                transaction::watch
            ),
            (
                "unwatch",
                1,
                TX,
                ["fast", "transaction"],
                NONE,
                transaction::unwatch
            ),
            (
                "save",
                1,
                &["admin", "noscript", "no_async_loading", "no_multi"],
                ["admin", "slow", "dangerous"],
                NONE,
                persistence::save
            ),
            (
                "bgsave",
                -1,
                &["admin", "noscript", "no_async_loading"],
                ["admin", "slow", "dangerous"],
                NONE,
                persistence::bgsave
            ),
            (
                "lastsave",
                1,
                &["loading", "stale", "fast"],
                ["fast", "admin", "dangerous"],
                NONE,
                persistence::lastsave
            ),
            // Replication.
            ("replicaof", 3, REPL, ["admin", "slow", "dangerous"], NONE, replication::replicaof),
            ("slaveof", 3, REPL, ["admin", "slow", "dangerous"], NONE, replication::replicaof),
            ("role", 1, ROLE, ["admin", "fast", "dangerous"], NONE, replication::role),
            ("wait", 3, &["noscript"], ["slow", "connection"], NONE, replication::wait),
            ("psync", -3, PSYNC, ["admin", "slow", "dangerous"], NONE, replication::psync),
            ("sync", 1, PSYNC, ["admin", "slow", "dangerous"], NONE, replication::psync),
            ("replconf", -1, A, ["admin", "slow", "dangerous"], NONE, replication::replconf),
        }
    };
}

pub(crate) use command_rows;

"""redis-py against `strata serve`: the default client (redis-py 8 says HELLO 3) and RESP2.

Usage: python3 redis_py.py PORT. Exits non-zero, with the failed check, on any wrong answer.
"""
import sys
import time

import redis

port = int(sys.argv[1])


def check(name, got, want):
    if got != want:
        sys.exit(f"redis-py: {name}: got {got!r}, want {want!r}")


for protocol in (None, 2, 3):
    kwargs = {} if protocol is None else {"protocol": protocol}
    label = "default" if protocol is None else f"protocol={protocol}"
    r = redis.Redis(port=port, **kwargs)
    r.flushall()
    check(f"{label} ping", r.ping(), True)
    check(f"{label} set", r.set("k", "v"), True)
    check(f"{label} get", r.get("k"), b"v")
    check(f"{label} get missing", r.get("missing"), None)
    r.set("empty", "")
    # The MGET sequence that once answered nil for a cached empty value.
    r.mget("empty", "k00150", "k00281")
    r.mget("k00110", "empty", "k00240")
    check(f"{label} mget", r.mget("empty", "k00106"), [b"", None])
    check(f"{label} incr", r.incr("n"), 1)
    check(f"{label} incrbyfloat", r.incrbyfloat("f", 1.5), 1.5)
    check(f"{label} set ex", r.set("t", "v", ex=100), True)
    ttl = r.ttl("t")
    check(f"{label} ttl", 99 <= ttl <= 100, True)
    check(f"{label} set px", r.set("gone", "v", px=50), True)
    time.sleep(0.1)
    check(f"{label} expired", r.get("gone"), None)
    check(f"{label} exists", r.exists("k", "gone", "t"), 2)
    check(f"{label} config get", r.config_get("appendonly"), {"appendonly": "yes"})
    check(f"{label} info", r.info("server")["redis_version"], "7.0.15")
    check(f"{label} scan", sorted(r.scan_iter(match="k*")), [b"k"])
    check(f"{label} getex", r.getex("k", persist=True), b"v")
    check(f"{label} keys", sorted(r.keys("*")), [b"empty", b"f", b"k", b"n", b"t"])
    check(f"{label} lcs", r.lcs("k", "empty"), b"")
    check(f"{label} setrange", r.setrange("k", 1, "xy"), 3)
    check(f"{label} getrange", r.getrange("k", 0, -1), b"vxy")
    check(f"{label} rename", r.rename("k", "k2"), True)
    check(f"{label} type", r.type("k2"), b"string")
    check(f"{label} select", redis.Redis(port=port, db=3, **kwargs).get("k2"), None)
    pipe = r.pipeline(transaction=False)
    pipe.set("p", 1).incr("p").get("p")
    check(f"{label} pipeline", pipe.execute(), [True, 2, b"2"])
    check(f"{label} dbsize", r.dbsize(), 6)
    # The default pipeline wraps its commands in MULTI/EXEC.
    pipe = r.pipeline()
    pipe.set("m", 1).incr("m").get("m")
    check(f"{label} transaction pipeline", pipe.execute(), [True, 2, b"2"])

    def add_one(p):
        n = int(p.get("m"))
        p.multi()
        p.set("m", n + 1)

    r.transaction(add_one, "m")
    check(f"{label} transaction with watch", r.get("m"), b"3")
    other = redis.Redis(port=port, **kwargs)
    pipe = r.pipeline()
    pipe.watch("m")
    other.set("m", 10)
    pipe.multi()
    pipe.set("m", 11)
    try:
        pipe.execute()
        sys.exit(f"redis-py: {label}: EXEC ran although a watched key changed")
    except redis.WatchError:
        pass
    check(f"{label} watched key kept", r.get("m"), b"10")
    other.close()
    r.close()
print("redis-py", redis.__version__, "ok: default, RESP2 and RESP3")

# Hashes, lists, sets and sorted sets, and a blocking pop woken by another connection.
for protocol in (None, 2, 3):
    kwargs = {} if protocol is None else {"protocol": protocol}
    label = "default" if protocol is None else f"protocol={protocol}"
    r = redis.Redis(port=port, **kwargs)
    r.flushall()
    check(f"{label} hset", r.hset("h", mapping={"a": "1", "b": "2"}), 2)
    check(f"{label} hgetall", r.hgetall("h"), {b"a": b"1", b"b": b"2"})
    check(f"{label} hincrby", r.hincrby("h", "a", 5), 6)
    check(f"{label} hmget", r.hmget("h", "a", "zz"), [b"6", None])
    check(f"{label} sadd", r.sadd("s", "x", "y", "x"), 2)
    check(f"{label} smembers", r.smembers("s"), {b"x", b"y"})
    check(f"{label} sinter", r.sinter("s", "missing"), set())
    check(f"{label} zadd", r.zadd("z", {"a": 1.5, "b": 0.5}), 2)
    got = [tuple(x) for x in r.zrange("z", 0, -1, withscores=True)]
    check(f"{label} zrange withscores", got, [(b"b", 0.5), (b"a", 1.5)])
    check(f"{label} zscore", r.zscore("z", "a"), 1.5)
    check(f"{label} zincrby", r.zincrby("z", 1, "b"), 1.5)
    check(f"{label} rpush", r.rpush("l", "1", "2", "3"), 3)
    check(f"{label} lpush", r.lpush("l", "0"), 4)
    check(f"{label} lrange", r.lrange("l", 0, -1), [b"0", b"1", b"2", b"3"])
    check(f"{label} type", [r.type(k) for k in ("h", "s", "z", "l")],
          [b"hash", b"set", b"zset", b"list"])
    try:
        r.get("h")
        sys.exit(f"redis-py: {label}: GET of a hash answered")
    except redis.ResponseError as e:
        check(f"{label} wrongtype", str(e).startswith("WRONGTYPE"), True)
    import threading
    popped = []
    waiter = threading.Thread(
        target=lambda: popped.append(redis.Redis(port=port, **kwargs).blpop("q", timeout=5)))
    waiter.start()
    time.sleep(0.2)
    r.rpush("q", "job")
    waiter.join()
    check(f"{label} blpop woken by rpush", tuple(popped[0]), (b"q", b"job"))
    r.close()
print("redis-py", redis.__version__, "ok: hashes, lists, sets, sorted sets, BLPOP; each protocol")

# Pub/sub: PubSub with get_message, patterns, and a listener thread, in each protocol.
for protocol in (2, 3):
    label = f"protocol={protocol}"
    r = redis.Redis(port=port, protocol=protocol)
    p = r.pubsub()
    p.subscribe("news")
    p.psubscribe("sport.*")
    for want in ({"type": "subscribe", "pattern": None, "channel": b"news", "data": 1},
                 {"type": "psubscribe", "pattern": None, "channel": b"sport.*", "data": 2}):
        check(f"{label} subscribe confirmed", p.get_message(timeout=5), want)
    check(f"{label} publish", r.publish("news", "hello"), 1)
    check(f"{label} publish to pattern", r.publish("sport.golf", "par"), 1)
    check(f"{label} publish to nobody", r.publish("weather", "rain"), 0)
    check(f"{label} message", p.get_message(timeout=5),
          {"type": "message", "pattern": None, "channel": b"news", "data": b"hello"})
    check(f"{label} pmessage", p.get_message(timeout=5),
          {"type": "pmessage", "pattern": b"sport.*", "channel": b"sport.golf", "data": b"par"})
    check(f"{label} numsub", r.pubsub_numsub("news", "weather"), [(b"news", 1), (b"weather", 0)])
    check(f"{label} numpat", r.pubsub_numpat(), 1)
    check(f"{label} channels", r.pubsub_channels(), [b"news"])
    heard = []
    q = r.pubsub()
    q.subscribe(**{"jobs": lambda m: heard.append(m["data"])})
    listener = q.run_in_thread(sleep_time=0.01)
    for _ in range(100):
        if r.pubsub_numsub("jobs") == [(b"jobs", 1)]:
            break
        time.sleep(0.01)
    for i in range(50):
        r.publish("jobs", f"job{i}")
    for _ in range(500):
        if len(heard) == 50:
            break
        time.sleep(0.01)
    listener.stop()
    listener.join(timeout=5)
    check(f"{label} listener thread", heard, [f"job{i}".encode() for i in range(50)])
    p.unsubscribe()
    p.punsubscribe()
    p.close()
    q.close()
    r.close()
print("redis-py", redis.__version__, "ok: PubSub, patterns, a listener thread; RESP2 and RESP3")

# A stream's consumer group shared by two clients: each entry goes to one of them, once.
for protocol in (2, 3):
    label = f"protocol={protocol}"
    r = redis.Redis(port=port, protocol=protocol)
    r.delete("jobs")
    added = [r.xadd("jobs", {"n": str(i)}) for i in range(20)]
    check(f"{label} xlen", r.xlen("jobs"), 20)
    check(f"{label} xgroup create", r.xgroup_create("jobs", "workers", id="0"), True)
    workers = [redis.Redis(port=port, protocol=protocol) for _ in range(2)]
    got = {0: [], 1: []}
    while True:
        progress = False
        for i, w in enumerate(workers):
            reply = w.xreadgroup("workers", f"w{i}", {"jobs": ">"}, count=3)
            # RESP2 answers a list of [stream, entries], RESP3 a map of stream to entries.
            entries = reply.get(b"jobs", [[]])[0] if isinstance(reply, dict) else (
                reply[0][1] if reply else [])
            for entry_id, fields in entries:
                got[i].append((entry_id, fields[b"n"]))
                progress = True
            if entries:
                check(f"{label} xack", w.xack("jobs", "workers", *[e for e, _ in entries]),
                      len(entries))
        if not progress:
            break
    check(f"{label} both workers got some", bool(got[0]) and bool(got[1]), True)
    check(f"{label} each entry once", sorted(got[0] + got[1]),
          sorted(zip(added, [str(i).encode() for i in range(20)])))
    check(f"{label} nothing pending", r.xpending("jobs", "workers")["pending"], 0)
    for w in workers:
        w.close()
    r.close()
print("redis-py", redis.__version__, "ok: a consumer group shared by two clients; RESP2, RESP3")

# With credentials: the ACL user `app` (made by run.sh, keys app:* only), in each protocol.
for protocol in (None, 2, 3):
    kwargs = {} if protocol is None else {"protocol": protocol}
    label = "default" if protocol is None else f"protocol={protocol}"
    r = redis.Redis(port=port, username="app", password="apppass", **kwargs)
    check(f"{label} auth set", r.set("app:k", "v"), True)
    check(f"{label} auth get", r.get("app:k"), b"v")
    check(f"{label} auth whoami", r.execute_command("ACL", "WHOAMI"), b"app")
    try:
        r.get("other")
        sys.exit(f"redis-py: {label}: a key outside app:* was read")
    except redis.exceptions.NoPermissionError:
        pass
    r.close()
    try:
        redis.Redis(port=port, username="app", password="wrong", **kwargs).ping()
        sys.exit(f"redis-py: {label}: a wrong password was taken")
    except redis.AuthenticationError:
        pass
print("redis-py", redis.__version__, "ok: username and password, each protocol")

# redis-py's Lock (acquire and release are scripts: EVALSHA, falling back to SCRIPT LOAD), and
# register_script, in each protocol; a second client cannot take a held lock, nor release it.
for protocol in (None, 2, 3):
    kwargs = {} if protocol is None else {"protocol": protocol}
    label = "default" if protocol is None else f"protocol={protocol}"
    r = redis.Redis(port=port, **kwargs)
    other = redis.Redis(port=port, **kwargs)
    r.script_flush()
    r.delete("resource")
    lock = r.lock("resource", timeout=10, blocking=False)
    check(f"{label} lock acquire", lock.acquire(), True)
    check(f"{label} lock owned", lock.owned(), True)
    check(f"{label} lock taken by another", other.lock("resource", blocking=False).acquire(), False)
    # Another client's release (its token is not the holder's) is refused by the script.
    impostor = other.lock("resource")
    impostor.local.token = b"not-the-holder"
    try:
        impostor.release()
        sys.exit(f"redis-py: {label}: a lock was released by a client that does not hold it")
    except redis.exceptions.LockNotOwnedError:
        pass
    check(f"{label} lock still held", lock.owned(), True)
    check(f"{label} lock extend", lock.extend(5), True)
    check(f"{label} lock ttl", 10 < r.pttl("resource") / 1000 <= 15, True)
    lock.release()
    check(f"{label} lock released", r.exists("resource"), 0)
    check(f"{label} lock again", other.lock("resource", blocking=False).acquire(), True)
    add = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    r.delete("counter")
    check(f"{label} register_script", [add(keys=["counter"], args=[n]) for n in (2, 3)], [2, 5])
    r.close()
    other.close()
print("redis-py", redis.__version__, "ok: Lock and register_script, each protocol")

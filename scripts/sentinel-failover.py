#!/usr/bin/env python3
"""Redis Sentinel in charge of Strata: three sentinels (redis-server --sentinel) watch a
`strata serve` primary and two replicas, each started from a configuration file. A client
writes through redis-py's Sentinel.master_for, each write followed by WAIT 1; the primary is
SIGKILLed halfway. Checked: a replica is promoted, the client goes on, every write WAIT
acknowledged is on the new primary with its value, the configuration files say the new
roles (Sentinel's failover transaction ran CONFIG REWRITE), and the old primary, started
again, becomes a replica of the new one and converges to it.

    scripts/sentinel-failover.py target/release/strata [--writes 400]
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import redis
from redis.sentinel import Sentinel


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.1)
    sys.exit(f"sentinel-failover: timed out waiting for {what}")


class Node:
    def __init__(self, binary, root, name, port, primary=None):
        self.dir = os.path.join(root, name)
        self.conf = os.path.join(root, f"{name}.conf")
        self.port = port
        self.binary = binary
        with open(self.conf, "w") as f:
            f.write(f"port {port}\ndir {self.dir}\n")
            if primary:
                f.write(f"replicaof 127.0.0.1 {primary}\n")
        self.log = open(os.path.join(root, f"{name}.log"), "a")
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "serve", self.conf], stdout=self.log, stderr=self.log
        )
        wait_for(f"port {self.port}", lambda: self.client().ping())

    def client(self):
        return redis.Redis(port=self.port, socket_timeout=5, decode_responses=True)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def role(self):
        return self.client().execute_command("ROLE")


def start_sentinels(root, primary_port, count=3):
    procs, ports = [], []
    for i in range(count):
        port = free_port()
        conf = os.path.join(root, f"sentinel-{i}.conf")
        with open(conf, "w") as f:
            f.write(
                f"port {port}\ndir {root}\n"
                f"sentinel monitor main 127.0.0.1 {primary_port} 2\n"
                # Two seconds: a node busy for one on the two-core machine is not down.
                "sentinel down-after-milliseconds main 2000\n"
                "sentinel failover-timeout main 10000\n"
                "sentinel parallel-syncs main 2\n"
            )
        log = open(os.path.join(root, f"sentinel-{i}.log"), "w")
        procs.append(
            subprocess.Popen(["redis-server", conf, "--sentinel"], stdout=log, stderr=log)
        )
        ports.append(port)
    return procs, ports


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("strata", help="the strata binary")
    ap.add_argument("--writes", type=int, default=400, help="acknowledged writes on each side")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="strata-sentinel-")
    p0, p1, p2 = free_port(), free_port(), free_port()
    primary = Node(args.strata, root, "a", p0)
    replicas = [Node(args.strata, root, "b", p1, p0), Node(args.strata, root, "c", p2, p0)]
    nodes = [primary] + replicas
    sentinels, sports = start_sentinels(root, p0)
    try:
        run(args, root, primary, replicas, nodes, sports)
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                n.kill()
        for s in sentinels:
            s.kill()
            s.wait()
    print(f"sentinel-failover: ok ({root})")


def run(args, root, primary, replicas, nodes, sports):
    s0 = redis.Redis(port=sports[0], decode_responses=True)
    wait_for(
        "the sentinels to find both replicas and each other",
        lambda: len(s0.sentinel_slaves("main")) == 2 and len(s0.sentinel_sentinels("main")) == 2,
    )
    sentinel = Sentinel([("127.0.0.1", p) for p in sports], socket_timeout=1)
    client = sentinel.master_for("main", socket_timeout=1, decode_responses=True)
    acked = {}
    killed_at = None
    i = 0
    deadline = time.time() + 120
    while len(acked) < 2 * args.writes:
        if time.time() > deadline:
            sys.exit(f"sentinel-failover: only {len(acked)} writes acknowledged in 120 s")
        key, value = f"k{i}", f"v{i}-{time.time_ns()}"
        i += 1
        try:
            client.set(key, value)
            if client.execute_command("WAIT", 1, 1000) >= 1:
                acked[key] = value
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
            time.sleep(0.1)
            continue
        if killed_at is None and len(acked) == args.writes:
            primary.kill()
            killed_at = time.time()
    host, port = sentinel.discover_master("main")
    assert port in (replicas[0].port, replicas[1].port), f"promoted: {host}:{port}"
    promoted = next(r for r in replicas if r.port == port)
    print(f"sentinel-failover: {port} promoted {time.time() - killed_at:.1f} s after the kill")
    new = promoted.client()
    missing = [k for k, v in acked.items() if new.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged writes lost, first {missing[:5]}"
    # The old primary comes back and is told to follow. Sentinel may fail over once more
    # meanwhile (on a loaded machine a new primary can miss its pings for a while): the
    # checks follow whichever node it names once the three agree.
    primary.start()

    def head():
        _, now = sentinel.discover_master("main")
        return next(n for n in nodes if n.port == now)

    def settled():
        h = head()
        return h.role()[0] == "master" and all(
            n.role()[0] == "slave" and n.role()[2] == h.port and n.role()[3] == "connected"
            for n in nodes
            if n is not h
        )

    wait_for("the old primary to follow the new one", settled)
    h = head()
    if h is not promoted:
        print(f"sentinel-failover: Sentinel failed over again, to {h.port}")
    # Sentinel's failover transactions rewrote the configuration files.
    with open(h.conf) as f:
        assert "replicaof" not in f.read(), "the primary's file still follows"
    new = h.client()
    assert new.execute_command("WAIT", 2, 10000) == 2, "both replicas acknowledge"
    for n in nodes:
        if n is h:
            continue
        with open(n.conf) as f:
            assert f"replicaof 127.0.0.1 {h.port}" in f.read(), f"{n.port}'s file"
        c = n.client()
        assert c.dbsize() == new.dbsize(), (c.dbsize(), new.dbsize())
        values = c.mget(list(acked))
        assert values == list(acked.values()), "a replica's values differ"

if __name__ == "__main__":
    main()

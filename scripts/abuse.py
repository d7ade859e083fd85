"""Abuse against a running Redis-protocol server, with a well-behaved client timing its answers.

Usage: python3 scripts/abuse.py PORT SERVER_PID [SLOW_CONNECTIONS] [SECONDS] [CORPUS_DIR...]

With STRATA_ABUSE_MAX_RSS_MIB set, it also fails when the server's resident set passes that
many MiB (CI runs it so; its timings are printed, never asserted).

At once, for SECONDS:
- SLOW_CONNECTIONS connections each send a PING one byte a second;
- a flooder pipelines GETs of a 256 KiB value and never reads a reply;
- every file of the corpus directories (the fuzzer's RESP inputs) is sent on a connection
  of its own, a few at a time;
- one client runs SET and GET in turn and times every answer.

Prints the client's latency percentiles, how many answers it got, the server's largest
resident set (sampled from /proc) and the flooder's and slow connections' fate. Exits
non-zero if the client got a wrong answer or none.
"""
import asyncio
import os
import resource
import sys
import time

port = int(sys.argv[1])
server_pid = int(sys.argv[2])
slow_count = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 20
corpora = sys.argv[5:]

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, slow_count + 1000)), hard))

PING = b"*1\r\n$4\r\nPING\r\n"
stop = time.monotonic() + seconds
stats = {"slow_open": 0, "slow_closed": 0, "flood_sent": 0, "flood_closed": False,
         "frames": 0, "rss_max_kb": 0}


async def slow(i):
    try:
        _, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    stats["slow_open"] += 1
    await asyncio.sleep(i % 1000 / 1000)
    pos = 0
    try:
        while time.monotonic() < stop:
            w.write(PING[pos:pos + 1])
            await w.drain()
            pos = (pos + 1) % len(PING)
            await asyncio.sleep(1)
    except (ConnectionError, OSError):
        stats["slow_closed"] += 1
    w.close()


async def flood():
    _, w = await asyncio.open_connection("127.0.0.1", port)
    burst = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 1000
    try:
        while time.monotonic() < stop:
            w.write(burst)
            await asyncio.wait_for(w.drain(), timeout=max(0.1, stop - time.monotonic()))
            stats["flood_sent"] += len(burst)
    except asyncio.TimeoutError:
        pass
    except (ConnectionError, OSError):
        stats["flood_closed"] = True
    w.close()


async def frames():
    files = [os.path.join(d, f) for d in corpora if os.path.isdir(d) for f in sorted(os.listdir(d))]
    for path in files:
        if time.monotonic() >= stop:
            break
        with open(path, "rb") as f:
            data = f.read()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(data)
            await w.drain()
            try:
                await asyncio.wait_for(r.read(65536), timeout=0.05)
            except asyncio.TimeoutError:
                pass
            w.close()
        except (ConnectionError, OSError):
            pass
        stats["frames"] += 1


async def rss():
    while time.monotonic() < stop:
        with open(f"/proc/{server_pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    stats["rss_max_kb"] = max(stats["rss_max_kb"], int(line.split()[1]))
        await asyncio.sleep(0.1)


async def good(latencies):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    while time.monotonic() < stop:
        value = str(i).encode()
        for cmd, want in (
            (b"*3\r\n$3\r\nSET\r\n$4\r\ngood\r\n$%d\r\n%s\r\n" % (len(value), value), b"+OK\r\n"),
            (b"*2\r\n$3\r\nGET\r\n$4\r\ngood\r\n", b"$%d\r\n%s\r\n" % (len(value), value)),
        ):
            t = time.perf_counter()
            w.write(cmd)
            await w.drain()
            try:
                got = await asyncio.wait_for(r.readexactly(len(want)), timeout=10)
            except asyncio.TimeoutError:
                sys.exit("the well-behaved client waited 10 s for an answer")
            latencies.append(time.perf_counter() - t)
            if got != want:
                sys.exit(f"wrong answer: {got!r}, want {want!r}")
        i += 1
        await asyncio.sleep(0.001)
    w.close()


async def main():
    r, w = await asyncio.open_connection("127.0.0.1", port)
    big = b"v" * (256 * 1024)
    w.write(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n%s\r\n" % (len(big), big))
    await w.drain()
    assert await r.readexactly(5) == b"+OK\r\n"
    w.close()
    latencies = []
    tasks = [asyncio.create_task(slow(i)) for i in range(slow_count)]
    await asyncio.sleep(2)  # the slow connections open first
    tasks += [asyncio.create_task(t) for t in (flood(), frames(), rss(), good(latencies))]
    await asyncio.gather(*tasks)
    if not latencies:
        sys.exit("the well-behaved client got no answer")
    latencies.sort()
    pct = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000
    print(f"well-behaved client: {len(latencies)} answers, all right; "
          f"p50 {pct(0.5):.2f} ms, p99 {pct(0.99):.2f} ms, max {latencies[-1] * 1000:.2f} ms")
    print(f"slow connections: {stats['slow_open']} opened, {stats['slow_closed']} closed by the "
          f"server; flooder: {stats['flood_sent'] / 1e6:.1f} MB of GETs sent, "
          f"{'closed by the server' if stats['flood_closed'] else 'still open'}; "
          f"malformed frames: {stats['frames']} sent")
    print(f"server's largest resident set: {stats['rss_max_kb'] / 1024:.0f} MiB")
    bound = os.environ.get("STRATA_ABUSE_MAX_RSS_MIB")
    if bound and stats["rss_max_kb"] > int(bound) * 1024:
        sys.exit(f"the server's resident set passed {bound} MiB")


asyncio.run(main())

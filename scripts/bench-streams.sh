#!/usr/bin/env bash
# XADD and XREADGROUP through redis-benchmark against `strata serve` and redis-server side by
# side, on this machine, each with its log synced once a second (strata --sync everysec,
# redis-server appendonly yes with appendfsync everysec), at -P 1 and at -P 16; prints one
# table of requests a second and Strata's ratio, after checking what each server holds:
#   scripts/bench-streams.sh [REQUESTS]      (default 100000; CI runs it with 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100000}"
command -v redis-benchmark >/dev/null && command -v redis-server >/dev/null || {
  echo "bench-streams: redis-benchmark and redis-server are needed (Debian: redis-tools, redis-server)"
  exit 1
}
cargo build --release -q -p strata-cli
work=$(mktemp -d)
strata_port=16393
redis_port=16394
./target/release/strata serve --dir "$work/strata" --port $strata_port --sync everysec \
  2>"$work/strata.log" &
strata_pid=$!
redis-server --port $redis_port --dir "$work" --save '' --appendonly yes \
  --appendfsync everysec --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
trap 'kill $strata_pid $redis_pid 2>/dev/null || true; wait 2>/dev/null; rm -rf "$work"' EXIT
for port in $strata_port $redis_port; do
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
done

value=$(printf 'v%.0s' $(seq 100))
# requests a second of one redis-benchmark run of the command given
rps() {
  local port=$1 pipeline=$2
  shift 2
  redis-benchmark -p "$port" -n "$n" -c 50 -P "$pipeline" --csv "$@" 2>/dev/null |
    tail -n 1 | tr -d '"' | awk -F, '{print $2}'
}
# What a server holds after the runs: the stream's length, the group's pending count and the
# first entry's value must be what the commands sent made.
check() {
  local port=$1
  test "$(redis-cli -p "$port" xlen bench:stream)" = "$n" ||
    { echo "bench-streams: port $port holds $(redis-cli -p "$port" xlen bench:stream) entries, not $n"; exit 1; }
  local pending
  pending=$(redis-cli -p "$port" xpending bench:stream g | head -1)
  test "$pending" = "$n" || { echo "bench-streams: port $port has $pending pending, not $n"; exit 1; }
  test "$(redis-cli -p "$port" xrange bench:stream - + count 1 | tail -1)" = "$value" ||
    { echo "bench-streams: port $port's first entry lost its value"; exit 1; }
}
echo "redis-benchmark -n $n -c 50: XADD of a 100-byte field, then XREADGROUP COUNT 1 of each"
echo "entry by one group; at -P 1 and -P 16"
echo "$(nproc) cores, $(uname -r); strata at $(git rev-parse --short HEAD)"
for pipeline in 1 16; do
  printf '\n-P %s\n%-40s %12s %12s %7s\n' "$pipeline" test strata redis-server ratio
  declare -A got=()
  for port in $strata_port $redis_port; do
    redis-cli -p $port flushall >/dev/null
    # Probed once for its exact reply before it is timed.
    test "$(redis-cli -p $port xadd probe 1-1 f "$value")" = 1-1
    got[xadd-$port]=$(rps $port "$pipeline" XADD bench:stream '*' field "$value")
    test "$(redis-cli -p $port xgroup create bench:stream g 0)" = OK
    got[read-$port]=$(rps $port "$pipeline" XREADGROUP GROUP g c COUNT 1 STREAMS bench:stream '>')
    check $port
  done
  for t in xadd read; do
    name=$t; [ $t = read ] && name="xreadgroup count 1"
    awk -v t="$name" -v s="${got[$t-$strata_port]}" -v r="${got[$t-$redis_port]}" \
      'BEGIN {printf "%-40s %12.0f %12.0f %6.2fx\n", t, s, r, s / r}'
  done
done

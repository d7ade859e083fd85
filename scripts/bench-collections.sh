#!/usr/bin/env bash
# redis-benchmark's collection tests against `strata serve` and redis-server side by side, on
# this machine, each with its log synced once a second (strata --sync everysec, redis-server
# appendonly yes with appendfsync everysec), at -P 1 and at -P 16; prints one table of
# requests a second and Strata's ratio:
#   scripts/bench-collections.sh [REQUESTS]      (default 100000; CI runs it with 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100000}"
tests="lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,lrange_300,lrange_600,mset"
command -v redis-benchmark >/dev/null && command -v redis-server >/dev/null || {
  echo "bench-collections: redis-benchmark and redis-server are needed (Debian: redis-tools, redis-server)"
  exit 1
}
cargo build --release -q -p strata-cli
work=$(mktemp -d)
strata_port=16391
redis_port=16392
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

# One run: `name rps` lines, the CSV of redis-benchmark read back.
run() {
  redis-benchmark -p "$1" -n "$n" -r 100000 -c 50 -P "$2" -t "$tests" --csv 2>/dev/null |
    tail -n +2 | tr -d '"' | awk -F, '{print $1 "," $2}'
}
echo "redis-benchmark -n $n -r 100000 -c 50 -t $tests, at -P 1 and -P 16"
echo "$(nproc) cores, $(uname -r); strata at $(git rev-parse --short HEAD)"
for pipeline in 1 16; do
  redis-cli -p $strata_port flushall >/dev/null
  redis-cli -p $redis_port flushall >/dev/null
  run $strata_port "$pipeline" >"$work/strata-$pipeline.csv"
  run $redis_port "$pipeline" >"$work/redis-$pipeline.csv"
  printf '\n-P %s\n%-40s %12s %12s %7s\n' "$pipeline" test strata redis-server ratio
  join -t, <(sort "$work/strata-$pipeline.csv") <(sort "$work/redis-$pipeline.csv") |
    awk -F, '{printf "%-40s %12.0f %12.0f %6.2fx\n", $1, $2, $3, $2 / $3}'
done

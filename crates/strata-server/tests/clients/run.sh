#!/usr/bin/env bash
# The client matrix: redis-cli, redis-py (default handshake, RESP2, RESP3; its Lock), node-redis
# (RESP2 and RESP3) and ioredis, each a scripted session that checks its answers (collections, pub/sub
# subscribers, a stream consumer group shared by two clients), against a running
# `strata serve` on PORT. redis-rs is checked by `cargo test` (crates/strata-server/tests).
#
#   run.sh PORT NODE_MODULES
set -euo pipefail
port=$1
node_modules=$2
here=$(cd "$(dirname "$0")" && pwd)
cli() { redis-cli -p "$port" "$@"; }

cli flushall >/dev/null
test "$(cli set greeting hello ex 100)" = OK
test "$(cli get greeting)" = hello
test "$(cli ttl greeting)" = 100
test "$(cli set empty '')" = OK
test "$(cli strlen empty)" = 0
test "$(cli -3 hello 3 | grep ^proto)" = "proto 3"
test "$(cli -3 incrbyfloat f 2.5)" = 2.5
test "$(cli select 15)" = OK
test "$(cli -n 15 exists greeting)" = 0
test "$(cli persist greeting)" = 1
test "$(cli ttl greeting)" = -1
echo "redis-cli $(redis-cli --version | awk '{print $2}') ok"

# An ACL user limited to app:* keys, for the sessions with credentials.
cli acl setuser app reset on '>apppass' '~app:*' '+@all' >/dev/null
python3 "$here/redis_py.py" "$port"
NODE_PATH="$node_modules" node "$here/node.js" "$port"

# Credentials: the ACL user (above), then requirepass for `default`.
as_app() { redis-cli -p "$port" --user app --pass apppass --no-auth-warning "$@"; }
test "$(as_app set app:x 1)" = OK
test "$(as_app get app:x)" = 1
test "$(as_app get other 2>&1)" = \
  "NOPERM this user has no permissions to access one of the keys used as arguments"
test "$(redis-cli -p "$port" --user app --pass wrong --no-auth-warning ping 2>&1 | head -1)" = \
  "AUTH failed: WRONGPASS invalid username-password pair or user is disabled."
cli config set requirepass rootpw >/dev/null
test "$(cli ping 2>&1)" = "NOAUTH Authentication required."
test "$(redis-cli -p "$port" -a rootpw --no-auth-warning ping)" = PONG
redis-cli -p "$port" -a rootpw --no-auth-warning config set requirepass '' >/dev/null
test "$(cli ping)" = PONG
cli acl deluser app >/dev/null
echo "credentials ok: redis-cli (-a, --user), redis-py, node-redis and ioredis"

#!/usr/bin/env bash
# The TLS port with real clients: certificates made with openssl, `strata serve` with the plain
# port off (--port 0) and client certificates required; redis-cli --tls, redis-py ssl=True and
# redis-benchmark --tls against it, and a client without a certificate refused.
#
#   tls.sh STRATA_BINARY PORT NODE_MODULES
set -euo pipefail
strata=$1
port=$2
node_modules=$3
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=strata test CA" \
  -keyout ca.key -out ca.crt 2>/dev/null
for who in server client; do
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$who" -keyout $who.key -out $who.csr 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext.cnf
  openssl x509 -req -in $who.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile ext.cnf -out $who.crt 2>/dev/null
done
"$strata" serve --dir db --port 0 --tls-port "$port" --tls-cert-file server.crt \
  --tls-key-file server.key --tls-ca-cert-file ca.crt 2>serve.log &
pid=$!
tls=(--tls --cacert ca.crt --cert client.crt --key client.key)
for _ in $(seq 50); do redis-cli -p "$port" "${tls[@]}" ping >/dev/null 2>&1 && break; sleep 0.1; done
test "$(redis-cli -p "$port" "${tls[@]}" ping)" = PONG
test "$(redis-cli -p "$port" "${tls[@]}" set k over-tls)" = OK
test "$(redis-cli -p "$port" "${tls[@]}" get k)" = over-tls
# Without a client certificate the handshake is refused.
if redis-cli -p "$port" --tls --cacert ca.crt ping >/dev/null 2>&1; then
  echo "a client without a certificate was served"; exit 1
fi
# The plain port is off: the server says it serves the TLS port alone.
grep -q "on 127.0.0.1:$port " serve.log || { cat serve.log; exit 1; }
python3 - "$port" <<'PY'
import sys
import redis
r = redis.Redis(port=int(sys.argv[1]), ssl=True, ssl_ca_certs="ca.crt",
                ssl_certfile="client.crt", ssl_keyfile="client.key")
assert r.get("k") == b"over-tls", r.get("k")
assert r.pipeline().set("p", 1).incr("p").execute() == [True, 2]
try:
    redis.Redis(port=int(sys.argv[1]), ssl=True, ssl_ca_certs="ca.crt").ping()
    sys.exit("redis-py: a client without a certificate was served")
except redis.ConnectionError:
    pass
print("redis-py ssl=True ok")
PY
redis-cli -p "$port" "${tls[@]}" acl setuser app on '>apppass' '~app:*' '+@all' >/dev/null
NODE_PATH="$node_modules" node - "$port" <<'JS'
const assert = require("node:assert");
const fs = require("node:fs");
const { createClient } = require("redis");
const Redis = require("ioredis");
const port = Number(process.argv[2]);
const tls = { ca: fs.readFileSync("ca.crt"), cert: fs.readFileSync("client.crt"),
              key: fs.readFileSync("client.key") };
(async () => {
  const url = `rediss://app:apppass@localhost:${port}`;
  const c = createClient({ url, socket: { tls: true, ...tls } });
  await c.connect();
  assert.equal(await c.set("app:t", "1"), "OK");
  await assert.rejects(c.get("other"), /NOPERM/);
  await c.quit();
  const io = new Redis(url, { tls, lazyConnect: true });
  await io.connect();
  assert.equal(await io.incr("app:t"), 2);
  await io.quit();
  console.log("node-redis and ioredis over TLS with a user and password ok");
})().catch((e) => { console.error(e); process.exit(1); });
JS
# redis-benchmark's figures say nothing of the replies: probe its commands first, and fail
# on any error it reports.
test "$(redis-cli -p "$port" "${tls[@]}" set key:000000000001 xxx)" = OK
test "$(redis-cli -p "$port" "${tls[@]}" get key:000000000001)" = xxx
bench_out=$(redis-benchmark -p "$port" "${tls[@]}" -t set,get -n 20000 -r 10000 -c 20 -q 2>&1)
echo "$bench_out"
if grep -qi "error" <<<"$bench_out"; then echo "redis-benchmark --tls met an error reply"; exit 1; fi
echo "TLS ok: redis-cli --tls, redis-py ssl=True, node-redis, ioredis, redis-benchmark --tls"

// node-redis and ioredis against `strata serve`.
// Usage: node node.js PORT (with both packages where Node finds them). Exits non-zero, with the
// failed check, on any wrong answer.
const assert = require("node:assert/strict");
const { createClient } = require("redis");
const Redis = require("ioredis");

const port = Number(process.argv[2]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function nodeRedis(resp) {
  const c = createClient({ socket: { port }, RESP: resp });
  await c.connect();
  await c.flushAll();
  assert.equal(await c.set("k", "v"), "OK");
  assert.equal(await c.get("k"), "v");
  assert.equal(await c.get("missing"), null);
  await c.set("empty", "");
  await c.mGet(["empty", "k00150"]);
  await c.mGet(["k00110", "empty"]);
  assert.deepEqual(await c.mGet(["empty", "k00106"]), ["", null]);
  assert.equal(await c.incr("n"), 1);
  assert.equal(await c.set("t", "v", { EX: 100 }), "OK");
  assert.ok((await c.ttl("t")) >= 99);
  await c.set("gone", "v", { PX: 50 });
  await sleep(100);
  assert.equal(await c.get("gone"), null);
  assert.equal(await c.exists(["k", "gone", "t"]), 2);
  const [a, b] = await Promise.all([c.incr("p"), c.incr("p")]);
  assert.deepEqual([a, b].sort(), [1, 2]);
  assert.equal(await c.dbSize(), 5);
  // .multi() is MULTI ... EXEC.
  assert.deepEqual(await c.multi().set("m", "1").incr("m").get("m").exec(), ["OK", 2, "2"]);
  await c.quit();
  return `node-redis RESP${resp}`;
}

async function ioredis() {
  const c = new Redis({ port, lazyConnect: true });
  await c.connect();
  await c.flushall();
  assert.equal(await c.set("k", "v", "EX", 100), "OK");
  assert.equal(await c.get("k"), "v");
  assert.equal(await c.get("missing"), null);
  assert.equal(await c.incrbyfloat("f", "1.5"), "1.5");
  const res = await c.pipeline().set("a", "1").incr("a").get("a").exec();
  assert.deepEqual(res.map(([err, v]) => [err, v]), [[null, "OK"], [null, 2], [null, "2"]]);
  assert.equal(await c.pexpire("a", 50), 1);
  await sleep(100);
  assert.equal(await c.exists("a"), 0);
  const keys = [];
  for await (const batch of c.scanStream({ match: "*", count: 1 })) keys.push(...batch);
  assert.deepEqual(keys.sort(), ["f", "k"]);
  const multi = await c.multi().set("m", "1").incr("m").get("m").exec();
  assert.deepEqual(multi.map(([err, v]) => [err, v]), [[null, "OK"], [null, 2], [null, "2"]]);
  await c.quit();
  return "ioredis";
}

// Hashes, lists, sets and sorted sets, and a blocking pop that another connection wakes.
async function nodeRedisCollections(resp) {
  const c = createClient({ socket: { port }, RESP: resp });
  const waiter = createClient({ socket: { port }, RESP: resp });
  await c.connect();
  await waiter.connect();
  await c.flushAll();
  assert.equal(await c.hSet("h", { a: "1", b: "2" }), 2);
  assert.deepEqual({ ...(await c.hGetAll("h")) }, { a: "1", b: "2" });
  assert.equal(await c.hIncrBy("h", "a", 5), 6);
  assert.equal(await c.sAdd("s", ["x", "y", "x"]), 2);
  assert.deepEqual([...(await c.sMembers("s"))].sort(), ["x", "y"]);
  assert.equal(await c.zAdd("z", [{ score: 1.5, value: "a" }, { score: 0.5, value: "b" }]), 2);
  assert.deepEqual(await c.zRange("z", 0, -1), ["b", "a"]);
  assert.equal(Number(await c.zScore("z", "a")), 1.5);
  assert.equal(await c.rPush("l", ["1", "2"]), 2);
  assert.equal(await c.lPush("l", "0"), 3);
  assert.deepEqual(await c.lRange("l", 0, -1), ["0", "1", "2"]);
  await assert.rejects(c.get("h"), /WRONGTYPE/);
  const popped = waiter.blPop("q", 5);
  await sleep(200);
  await c.rPush("q", "job");
  const got = await popped;
  assert.deepEqual([got.key, got.element], ["q", "job"]);
  await waiter.quit();
  await c.quit();
  return `node-redis RESP${resp} collections`;
}

async function ioredisCollections() {
  const c = new Redis({ port, lazyConnect: true });
  const waiter = new Redis({ port, lazyConnect: true });
  await c.connect();
  await waiter.connect();
  await c.flushall();
  assert.equal(await c.hset("h", "a", "1", "b", "2"), 2);
  assert.deepEqual(await c.hgetall("h"), { a: "1", b: "2" });
  assert.equal(await c.sadd("s", "x", "y"), 2);
  assert.deepEqual((await c.smembers("s")).sort(), ["x", "y"]);
  assert.equal(await c.zadd("z", 1.5, "a", 0.5, "b"), 2);
  assert.deepEqual(await c.zrange("z", 0, -1, "WITHSCORES"), ["b", "0.5", "a", "1.5"]);
  assert.equal(await c.rpush("l", "1", "2"), 2);
  assert.deepEqual(await c.lrange("l", 0, -1), ["1", "2"]);
  const popped = waiter.brpop("q", 5);
  await sleep(200);
  await c.lpush("q", "job");
  assert.deepEqual(await popped, ["q", "job"]);
  await waiter.quit();
  await c.quit();
  return "ioredis collections";
}

// Subscribers: node-redis (a duplicate connection in subscriber mode, a pattern too) and
// ioredis ("message" and "pmessage" events), each hearing what another connection publishes.
async function nodeRedisPubSub(resp) {
  const c = createClient({ socket: { port }, RESP: resp });
  await c.connect();
  const sub = c.duplicate();
  await sub.connect();
  const heard = [];
  await sub.subscribe("news", (message, channel) => heard.push(`${channel}:${message}`));
  await sub.pSubscribe("sport.*", (message, channel) => heard.push(`p ${channel}:${message}`));
  assert.equal(await c.publish("news", "hello"), 1);
  assert.equal(await c.publish("sport.golf", "par"), 1);
  assert.equal(await c.publish("weather", "rain"), 0);
  for (let i = 0; i < 100 && heard.length < 2; i++) await sleep(10);
  assert.deepEqual(heard, ["news:hello", "p sport.golf:par"]);
  assert.deepEqual(await c.pubSubNumSub(["news"]), { news: 1 });
  await sub.unsubscribe();
  await sub.pUnsubscribe();
  assert.equal(await c.publish("news", "again"), 0);
  await sub.quit();
  await c.quit();
  return `node-redis RESP${resp} subscriber`;
}

async function ioredisPubSub() {
  const c = new Redis({ port, lazyConnect: true });
  const sub = new Redis({ port, lazyConnect: true });
  await c.connect();
  await sub.connect();
  const heard = [];
  sub.on("message", (channel, message) => heard.push(`${channel}:${message}`));
  sub.on("pmessage", (pattern, channel, message) => heard.push(`${pattern} ${channel}:${message}`));
  assert.equal(await sub.subscribe("news", "jobs"), 2);
  assert.equal(await sub.psubscribe("sport.*"), 3);
  for (let i = 0; i < 20; i++) await c.publish("jobs", `job${i}`);
  await c.publish("sport.golf", "par");
  for (let i = 0; i < 100 && heard.length < 21; i++) await sleep(10);
  const want = Array.from({ length: 20 }, (_, i) => `jobs:job${i}`);
  assert.deepEqual(heard, [...want, "sport.* sport.golf:par"]);
  sub.disconnect();
  await c.quit();
  return "ioredis subscriber";
}

// With credentials in the URL: the ACL user `app` (made by run.sh, keys app:* only).
async function withPassword() {
  const url = `redis://app:apppass@127.0.0.1:${port}`;
  for (const resp of [2, 3]) {
    const c = createClient({ url, RESP: resp });
    await c.connect();
    assert.equal(await c.set("app:n", "1"), "OK");
    assert.equal(await c.get("app:n"), "1");
    await assert.rejects(c.get("other"), /NOPERM/);
    await c.quit();
  }
  const io = new Redis(url, { lazyConnect: true });
  await io.connect();
  assert.equal(await io.incr("app:n"), 2);
  await assert.rejects(io.get("other"), /NOPERM/);
  await io.quit();
  const bad = createClient({
    url: `redis://app:wrong@127.0.0.1:${port}`,
    socket: { reconnectStrategy: false },
  });
  bad.on("error", () => {});
  await assert.rejects(bad.connect(), /WRONGPASS/);
  return "node-redis and ioredis with credentials";
}

(async () => {
  const done = [
    await nodeRedis(2),
    await nodeRedis(3),
    await ioredis(),
    await nodeRedisCollections(2),
    await nodeRedisCollections(3),
    await ioredisCollections(),
    await nodeRedisPubSub(2),
    await nodeRedisPubSub(3),
    await ioredisPubSub(),
    await withPassword(),
  ];
  console.log(`${done.join(", ")} ok`);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});

// Unit tests of the client against a small in-test WebSocket server (the
// ws package) that speaks the frames of the contract. Node's own WebSocket
// (--experimental-websocket on Node 20) plays the browser. The real server
// is exercised by test/browser.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import WS, { WebSocketServer } from "ws";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { anyPack, StringValueSchema } from "@bufbuild/protobuf/wkt";
import { Backoff, CloseCode, closeCodeOfKickout, CloseRange, connect, decide, describeBody, KickoutReason, msgpb, Option, PullError, SeqSet } from "../dist/index.js";

const { ClientPayloadSchema, ServerPayloadSchema } = msgpb;

// waitFor polls cond until it holds or the deadline passes.
async function waitFor(what, cond, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

// fakeBoat accepts sockets, records what clients send and lets the test send frames.
async function fakeBoat(t) {
  const wss = new WebSocketServer({
    port: 0,
    host: "127.0.0.1",
    handleProtocols: (protocols) => (protocols.has("gomsg.v1.proto") ? "gomsg.v1.proto" : false),
  });
  await new Promise((r) => wss.once("listening", r));
  const conns = [];
  wss.on("connection", (ws, req) => {
    const c = { ws, url: req.url, protocols: req.headers["sec-websocket-protocol"], got: [], closed: null };
    ws.on("message", (data, isBinary) => {
      assert.ok(isBinary, "client frames are binary");
      c.got.push(fromBinary(ClientPayloadSchema, new Uint8Array(data)));
    });
    ws.on("close", (code) => (c.closed = code));
    c.send = (body) => ws.send(toBinary(ServerPayloadSchema, create(ServerPayloadSchema, { body })));
    c.acks = () => c.got.filter((p) => p.body.case === "ack").flatMap((p) => p.body.value.seqs);
    conns.push(c);
  });
  t.after(() => {
    for (const c of conns) c.ws.terminate();
    wss.close();
  });
  return { url: `ws://127.0.0.1:${wss.address().port}/v1/connect`, conns };
}

function msg(seq, options = Option.NEED_ACK, text = `m${seq}`) {
  return { seq: BigInt(seq), options, timestamp: 1n, body: anyPack(StringValueSchema, create(StringValueSchema, { value: text })) };
}

const fast = { backoff: { initialMs: 20, maxMs: 40 }, pingIntervalMs: 0 };

test("decide follows the close code's range and the kickout", () => {
  assert.deepEqual(CloseRange, { ReconnectMin: 4000, ReconnectMax: 4499, StopMin: 4500, StopMax: 4999 });
  const cases = [
    [CloseCode.NewSession, undefined, "stop"],
    [1006, KickoutReason.NEW_SESSION, "stop"],
    [CloseCode.Unauthenticated, undefined, "stop"],
    [4516, undefined, "stop"],
    [CloseCode.InvalidArgument, undefined, "stop"],
    [4503, undefined, "stop"],
    [CloseCode.PermissionDenied, undefined, "stop"],
    [4500, undefined, "stop"],
    [4999, undefined, "stop"],
    [4777, undefined, "stop"], // unknown, placed by its range
    [4444, undefined, "backoff"], // unknown, placed by its range
    [4499, undefined, "backoff"],
    [5000, undefined, "backoff"],
    [3003, undefined, "backoff"],
    [CloseCode.ServerDraining, undefined, "reconnect-now"],
    [4105, undefined, "reconnect-now"],
    [1006, KickoutReason.SERVER_DRAINING, "reconnect-now"],
    [CloseCode.AckTimeout, KickoutReason.ACK_TIMEOUT, "backoff"],
    [CloseCode.SlowConsumer, undefined, "backoff"],
    [CloseCode.ResourceExhausted, undefined, "backoff"],
    [CloseCode.Unavailable, undefined, "backoff"],
    [1001, undefined, "backoff"],
    [1006, undefined, "backoff"],
  ];
  for (const [code, kick, want] of cases) assert.equal(decide(code, kick), want, `code ${code} kickout ${kick}`);
  assert.equal(closeCodeOfKickout(KickoutReason.NEW_SESSION), 4601);
  assert.equal(closeCodeOfKickout(KickoutReason.BY_REQUEST), 4102);
  assert.equal(closeCodeOfKickout(KickoutReason.SERVER_DRAINING), 4105);
});

test("SeqSet forgets the oldest beyond its size", () => {
  const s = new SeqSet(3);
  for (const x of [1n, 2n, 3n, 2n, 4n]) s.add(x);
  assert.equal(s.length, 3);
  assert.deepEqual([1n, 2n, 3n, 4n].map((x) => s.has(x)), [false, true, true, true]);
  assert.throws(() => new SeqSet(0), RangeError);
});

test("Backoff grows, is capped, jitters within [d/2, d) and resets", () => {
  let r = 0;
  const b = new Backoff({ initialMs: 100, maxMs: 1000, random: () => r });
  assert.deepEqual([b.next(), b.next(), b.next(), b.next(), b.next(), b.next()], [50, 100, 200, 400, 500, 500]);
  r = 0.999;
  b.reset();
  assert.equal(b.next(), 100);
  assert.equal(b.next(), 200);
});

test("offers the bearer subprotocol, ACKs NEED_ACK messages after the handler, de-duplicates", async (t) => {
  const boat = await fakeBoat(t);
  const handled = [];
  let release;
  const gate = new Promise((r) => (release = r));
  const client = connect(boat.url, async () => "tok.en-1", {
    ...fast,
    onMessage: async (m) => {
      if (m.seq === 1n) await gate; // the first message is slow
      handled.push({ seq: m.seq, text: describeBody(m.body), replay: m.replay });
    },
  });
  t.after(() => client.close());
  const states = [];
  const dups = [];
  client.on("state", (s) => states.push(s));
  client.on("duplicate", (m) => dups.push(m.seq));
  const c = await waitFor("a connection", () => boat.conns[0]);
  assert.equal(c.protocols, "gomsg.v1.proto, bearer.tok.en-1");
  c.send({ case: "connected", value: { sid: "s1", uid: "u", platform: "web" } });
  c.send({ case: "messages", value: { msgs: [msg(1), msg(2, Option.OPTION_NONE)] } });
  c.send({ case: "ready", value: {} });
  c.send({ case: "messages", value: { msgs: [msg(3)] } });
  await waitFor("connected state", () => states.includes("connected"));
  // Nothing is ACKed while the handler of seq 1 has not returned, and the
  // frames after it wait their turn (order).
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(c.acks(), []);
  assert.deepEqual(handled, []);
  assert.ok(!states.includes("ready"), "Ready is handled after the replay before it");
  release();
  await waitFor("acks of 1 and 3", () => c.acks().length === 2);
  assert.deepEqual(c.acks(), [1n, 3n]);
  assert.deepEqual(handled, [
    { seq: 1n, text: "m1", replay: true },
    { seq: 2n, text: "m2", replay: true },
    { seq: 3n, text: "m3", replay: false },
  ]);
  assert.equal(client.state, "ready");
  // A redelivery is ACKed again but not handed to the handler.
  c.send({ case: "messages", value: { msgs: [msg(3), msg(4)] } });
  await waitFor("acks of 3 and 4", () => c.acks().length === 4);
  assert.deepEqual(c.acks(), [1n, 3n, 3n, 4n]);
  assert.deepEqual(handled.map((h) => h.seq), [1n, 2n, 3n, 4n]);
  assert.deepEqual(dups, [3n]);
});

test("a handler that throws: earlier messages ACKed, no later one handled, socket closed 3003, redelivered after a reconnect", async (t) => {
  const boat = await fakeBoat(t);
  let fail = true;
  const handled = [];
  const client = connect(boat.url, "t", {
    ...fast,
    onMessage: (m) => {
      if (m.seq === 2n && fail) {
        fail = false;
        throw new Error("boom");
      }
      handled.push(m.seq);
    },
  });
  t.after(() => client.close());
  const errors = [];
  const closes = [];
  client.on("error", (e) => errors.push(e));
  client.on("close", (i) => closes.push(i));
  const c = await waitFor("a connection", () => boat.conns[0]);
  c.send({ case: "connected", value: { sid: "s1" } });
  // 3 asks for an ACK, 4 does not; 5 comes in the next frame.
  c.send({ case: "messages", value: { msgs: [msg(1), msg(2), msg(3), msg(4, Option.OPTION_NONE)] } });
  c.send({ case: "messages", value: { msgs: [msg(5)] } });
  await waitFor("the server sees the close", () => c.closed !== null);
  assert.equal(c.closed, CloseCode.ClientHandlerFailed);
  assert.equal(closes.length, 1);
  assert.equal(closes[0].code, CloseCode.ClientHandlerFailed);
  assert.equal(closes[0].action, "backoff");
  assert.deepEqual(c.acks(), [1n], "only the message processed before the failure is ACKed");
  const failures = errors.filter((e) => /message handler failed/.test(e.message));
  assert.equal(failures.length, 1);
  assert.match(failures[0].message, /seq 2\): boom/);
  assert.equal(failures[0].cause.message, "boom");
  // The server redelivers what was not ACKed on the next socket.
  const c2 = await waitFor("a second connection", () => boat.conns[1]);
  c2.send({ case: "connected", value: { sid: "s2" } });
  c2.send({ case: "messages", value: { msgs: [msg(2), msg(3), msg(5)] } });
  await waitFor("the acks of 2, 3 and 5", () => c2.acks().length === 3);
  assert.deepEqual(c2.acks(), [2n, 3n, 5n]);
  assert.deepEqual(handled, [1n, 2n, 3n, 5n], "nothing after the failed message reached the handler on the first socket");
  assert.equal(boat.conns.length, 2);
});

test("after a reconnect, handlers stay one at a time and in order, and the old socket's frames are dropped", async (t) => {
  const boat = await fakeBoat(t);
  let release;
  const gate = new Promise((r) => (release = r));
  let active = 0;
  let maxActive = 0;
  const handled = [];
  const client = connect(boat.url, "t", {
    ...fast,
    connectTimeoutMs: 100,
    onMessage: async (m) => {
      active++;
      maxActive = Math.max(maxActive, active);
      await gate; // the first handler is slow; the others find the gate open
      handled.push(m.seq);
      active--;
    },
  });
  t.after(() => client.close());
  const states = [];
  const kicks = [];
  const closes = [];
  const dups = [];
  let readies = 0;
  let pongs = 0;
  client.on("state", (s) => states.push(s));
  client.on("kickout", (r) => kicks.push(r));
  client.on("close", (i) => closes.push(i));
  client.on("duplicate", (m) => dups.push(m.seq));
  client.on("ready", () => readies++);
  client.on("pong", () => pongs++);
  const c = await waitFor("a connection", () => boat.conns[0]);
  c.send({ case: "connected", value: { sid: "s1" } });
  c.send({ case: "messages", value: { msgs: [msg(1), msg(2)] } });
  c.send({ case: "ready", value: {} });
  c.send({ case: "messages", value: { msgs: [msg(3)] } });
  await waitFor("the first handler", () => active === 1);
  // The boat drains while the handler of 1 still runs: the client reconnects at once.
  c.send({ case: "kickout", value: { reason: KickoutReason.SERVER_DRAINING, message: "drain" } });
  c.ws.close(CloseCode.ServerDraining, "drain");
  const c2 = await waitFor("a second connection", () => boat.conns[1]);
  c2.send({ case: "connected", value: { sid: "s2" } });
  c2.send({ case: "messages", value: { msgs: [msg(1), msg(2), msg(3)] } });
  c2.send({ case: "ready", value: {} });
  c2.send({ case: "messages", value: { msgs: [msg(4)] } });
  // Pongs skip the queue: once this one is heard, the client holds every frame above.
  c2.send({ case: "pong", value: { id: 99n } });
  await waitFor("the pong", () => pongs === 1);
  assert.deepEqual(kicks, [KickoutReason.SERVER_DRAINING], "the kickout is heard while the handler runs");
  assert.equal(closes.length, 1);
  assert.equal(closes[0].kickout, KickoutReason.SERVER_DRAINING);
  assert.equal(closes[0].action, "reconnect-now");
  assert.equal(maxActive, 1, "the second socket's messages wait for the first socket's handler");
  assert.deepEqual(handled, []);
  assert.deepEqual(c2.acks(), []);
  assert.equal(readies, 0, "no Ready while the replay before it waits");
  // A Connected frame stuck behind a slow handler still counts as in time.
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(c2.closed, null, "no connect timeout while Connected waits for the handler");
  release();
  await waitFor("the acks of 1 to 4 on the second socket", () => c2.acks().length === 4);
  assert.deepEqual(c2.acks(), [1n, 2n, 3n, 4n]);
  assert.deepEqual(handled, [1n, 2n, 3n, 4n], "each message once, in order");
  assert.deepEqual(dups, [1n], "the old socket's 2 was not handled after that socket closed");
  assert.equal(maxActive, 1);
  assert.equal(readies, 1, "the old socket's Ready was dropped");
  assert.deepEqual(states, ["connected", "backoff", "connecting", "connected", "ready"]);
  assert.equal(client.state, "ready");
  assert.equal(boat.conns.length, 2);
});

test("after close() no message reaches the handler, not even one already received", async (t) => {
  const boat = await fakeBoat(t);
  let release;
  const gate = new Promise((r) => (release = r));
  const started = [];
  const handled = [];
  const client = connect(boat.url, "t", {
    ...fast,
    onMessage: async (m) => {
      started.push(m.seq);
      await gate;
      handled.push(m.seq);
    },
  });
  t.after(() => client.close());
  let pongs = 0;
  client.on("pong", () => pongs++);
  const c = await waitFor("a connection", () => boat.conns[0]);
  c.send({ case: "connected", value: { sid: "s1" } });
  c.send({ case: "messages", value: { msgs: [msg(1), msg(2)] } });
  c.send({ case: "messages", value: { msgs: [msg(3)] } });
  c.send({ case: "pong", value: { id: 7n } }); // heard out of band: the frames above are queued
  await waitFor("the pong", () => pongs === 1);
  assert.deepEqual(started, [1n]);
  client.close();
  release();
  await waitFor("the handler of 1 returned", () => handled.length === 1);
  await waitFor("the server sees the close", () => c.closed === 1000);
  assert.deepEqual(handled, [1n]);
  assert.deepEqual(c.acks(), []);
  assert.equal(client.state, "closed");
});

test("NEW_SESSION, INVALID_ARGUMENT and a refused static token stop; SERVER_DRAINING reconnects at once; others back off", async (t) => {
  for (const [name, kick, code, want] of [
    ["new session", KickoutReason.NEW_SESSION, 4601, "stop"],
    ["unauthenticated", undefined, 4516, "stop"],
    ["invalid argument", undefined, 4503, "stop"],
    ["draining", KickoutReason.SERVER_DRAINING, 4105, "reconnect-now"],
    ["ack timeout", KickoutReason.ACK_TIMEOUT, 4103, "backoff"],
    ["going away", undefined, 1001, "backoff"],
  ]) {
    await t.test(name, async (t) => {
      const boat = await fakeBoat(t);
      const client = connect(boat.url, "t", fast);
      t.after(() => client.close());
      const closes = [];
      const kicks = [];
      client.on("close", (i) => closes.push(i));
      client.on("kickout", (r) => kicks.push(r));
      const c = await waitFor("a connection", () => boat.conns[0]);
      c.send({ case: "connected", value: { sid: "s1" } });
      await waitFor("connected", () => client.state === "connected");
      if (kick !== undefined) c.send({ case: "kickout", value: { reason: kick, message: "bye" } });
      c.ws.close(code, "bye");
      await waitFor("the close", () => closes.length === 1);
      assert.equal(closes[0].code, code);
      assert.equal(closes[0].action, want);
      assert.deepEqual(kicks, kick === undefined ? [] : [kick]);
      if (want === "stop") {
        assert.equal(client.state, "closed");
        return;
      }
      assert.equal(closes[0].delayMs === 0, want === "reconnect-now");
      if (want === "backoff") assert.ok(closes[0].delayMs >= 10 && closes[0].delayMs <= 20, `delay ${closes[0].delayMs}`);
      await waitFor("a second connection", () => boat.conns[1]);
      assert.equal(boat.conns[1].protocols, "gomsg.v1.proto, bearer.t");
    });
  }
});

test("a refused token is tried once more at once with a fresh one from the token function, then stops", async (t) => {
  const boat = await fakeBoat(t);
  let n = 0;
  const client = connect(boat.url, () => `tok-${++n}`, fast);
  t.after(() => client.close());
  const closes = [];
  client.on("close", (i) => closes.push(i));
  const c1 = await waitFor("a connection", () => boat.conns[0]);
  c1.ws.close(CloseCode.Unauthenticated, "INVALID_TOKEN: expired");
  const c2 = await waitFor("a second connection", () => boat.conns[1]);
  assert.equal(c2.protocols, "gomsg.v1.proto, bearer.tok-2", "the second connect has a fresh token");
  assert.equal(closes[0].action, "reconnect-now");
  assert.equal(closes[0].delayMs, 0);
  // A session that comes up makes the next refusal a first one again.
  c2.send({ case: "connected", value: { sid: "s2" } });
  await waitFor("connected", () => client.state === "connected");
  c2.ws.close(CloseCode.Unauthenticated, "INVALID_TOKEN: revoked");
  const c3 = await waitFor("a third connection", () => boat.conns[2]);
  assert.equal(c3.protocols, "gomsg.v1.proto, bearer.tok-3");
  c3.ws.close(CloseCode.Unauthenticated, "INVALID_TOKEN: revoked");
  await waitFor("closed", () => client.state === "closed");
  assert.deepEqual(closes.map((i) => i.action), ["reconnect-now", "reconnect-now", "stop"]);
  assert.equal(boat.conns.length, 3);
});

test("room answers are matched by id, in order for a boat that echoes none", async (t) => {
  const boat = await fakeBoat(t);
  const client = connect(boat.url, "t", fast);
  t.after(() => client.close());
  const c = await waitFor("a connection", () => boat.conns[0]);
  c.send({ case: "connected", value: { sid: "s1" } });
  await waitFor("connected", () => client.state === "connected");
  const a = client.joinRoom("a");
  const b = client.joinRoom("b");
  const joins = await waitFor("two joins", () => {
    const j = c.got.filter((x) => x.body.case === "joinRoom").map((x) => x.body.value);
    return j.length === 2 ? j : undefined;
  });
  assert.notEqual(joins[0].id, joins[1].id);
  c.send({ case: "roomAnswer", value: { room: "b", join: true, status: 7, id: joins[1].id } });
  c.send({ case: "roomAnswer", value: { room: "a", join: true, status: 0, id: joins[0].id } });
  assert.equal((await a).room, "a");
  assert.equal((await b).room, "b");
  assert.equal((await b).status, 7);
  const d = client.leaveRoom("a");
  await waitFor("the leave", () => c.got.find((x) => x.body.case === "leaveRoom"));
  c.send({ case: "roomAnswer", value: { room: "a", join: false, status: 0 } }); // no id
  assert.equal((await d).room, "a");
});

test("pings keep the link; a missing pong closes the socket and reconnects", async (t) => {
  const boat = await fakeBoat(t);
  const client = connect(boat.url, "t", { ...fast, pingIntervalMs: 30, pongTimeoutMs: 100 });
  t.after(() => client.close());
  const pongs = [];
  const closes = [];
  client.on("pong", (id) => pongs.push(id));
  client.on("close", (i) => closes.push(i));
  const c = await waitFor("a connection", () => boat.conns[0]);
  c.send({ case: "connected", value: { sid: "s1" } });
  // Answer two pings, then stay silent.
  await waitFor("two pings", () => c.got.filter((p) => p.body.case === "ping").length >= 2);
  for (const p of c.got.filter((p) => p.body.case === "ping").slice(0, 2)) c.send({ case: "pong", value: { id: p.body.value.id } });
  await waitFor("two pongs", () => pongs.length === 2);
  assert.deepEqual(pongs, [1n, 2n]);
  await waitFor("the pong timeout", () => closes.length === 1, 3000);
  assert.equal(closes[0].code, CloseCode.ClientPongTimeout);
  assert.equal(closes[0].action, "backoff");
  await waitFor("the server sees the close", () => c.closed === CloseCode.ClientPongTimeout);
  await waitFor("a second connection", () => boat.conns[1]);
});

test("joinRoom resolves with the answer and the room is joined again after a reconnect", async (t) => {
  const boat = await fakeBoat(t);
  const client = connect(boat.url, "t", fast);
  t.after(() => client.close());
  const c = await waitFor("a connection", () => boat.conns[0]);
  c.send({ case: "connected", value: { sid: "s1" } });
  await waitFor("connected", () => client.state === "connected");
  const p = client.joinRoom("news");
  await waitFor("the join", () => c.got.find((x) => x.body.case === "joinRoom"));
  c.send({ case: "roomAnswer", value: { room: "news", join: true, status: 0 } });
  const a = await p;
  assert.equal(a.status, 0);
  const rooms = [];
  client.on("room", (r) => rooms.push(r));
  c.send({ case: "roomMessages", value: { room: "news", msgs: [msg(9, Option.OPTION_NONE, "hi")] } });
  await waitFor("the room push", () => rooms.length === 1);
  assert.equal(describeBody(rooms[0].msgs[0].body), "hi");
  assert.deepEqual(c.acks(), [], "room messages are never ACKed");
  c.ws.close(1001);
  const c2 = await waitFor("a second connection", () => boat.conns[1]);
  c2.send({ case: "connected", value: { sid: "s2" } });
  const j = await waitFor("the join again", () => c2.got.find((x) => x.body.case === "joinRoom"));
  assert.equal(j.body.value.room, "news");
});

test("an injected WebSocket implementation (the ws package) is the one used", async (t) => {
  const boat = await fakeBoat(t);
  let made = 0;
  class Injected extends WS {
    constructor(...args) {
      super(...args);
      made++;
    }
  }
  const handled = [];
  const client = connect(boat.url, "t", { ...fast, WebSocket: Injected, onMessage: (m) => void handled.push(m.seq) });
  t.after(() => client.close());
  const c = await waitFor("a connection", () => boat.conns[0]);
  assert.deepEqual(c.protocols.split(/, */), ["gomsg.v1.proto", "bearer.t"]);
  c.send({ case: "connected", value: { sid: "s1" } });
  c.send({ case: "messages", value: { msgs: [msg(1)] } });
  await waitFor("the ack", () => c.acks().length === 1);
  assert.deepEqual(handled, [1n]);
  assert.equal(made, 1);
});

test("a token that cannot be a subprotocol is refused before connecting", async (t) => {
  const boat = await fakeBoat(t);
  const client = connect(boat.url, "has space", fast);
  const errors = [];
  client.on("error", (e) => errors.push(e.message));
  await waitFor("closed", () => client.state === "closed");
  assert.match(errors.join(), /characters a subprotocol cannot carry/);
  assert.equal(boat.conns.length, 0);
});

test("pull: ?offline=pull, one pull at a time, answers by id, refusals reject with PullError, a closed socket rejects", async (t) => {
  const boat = await fakeBoat(t);
  const client = connect(boat.url, "tok", { ...fast, pullOffline: true });
  t.after(() => client.close());
  const c = await waitFor("a connection", () => boat.conns[0]);
  assert.equal(c.url, "/v1/connect?offline=pull");
  c.send({ case: "connected", value: { sid: "s1", uid: "u", platform: "web" } });
  await waitFor("connected state", () => client.state === "connected");
  const pulls = () => c.got.filter((p) => p.body.case === "pull").map((p) => p.body.value);
  const first = client.pull(2, [5n]);
  const second = client.pull();
  const p1 = await waitFor("the first pull", () => pulls()[0]);
  assert.equal(p1.limit, 2);
  assert.deepEqual(p1.ack, [5n]);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(pulls().length, 1, "the second pull waits for the first answer");
  c.send({ case: "pullResult", value: { id: p1.id, msgs: [msg(6), msg(7)], more: true } });
  const page = await first;
  assert.deepEqual(page.msgs.map((m) => m.seq), [6n, 7n]);
  assert.equal(page.more, true);
  const p2 = await waitFor("the second pull", () => pulls()[1]);
  assert.notEqual(p2.id, p1.id);
  assert.equal(p2.limit, 0);
  c.send({ case: "pullResult", value: { id: p2.id, status: 3, message: "seq 0 must be positive", error: { field: "ack" } } });
  await assert.rejects(second, (err) => err instanceof PullError && err.status === 3 && err.field === "ack");
  // Pulled messages are not ACKed with Ack frames: the next pull's ack does it.
  assert.deepEqual(c.acks(), []);
  const third = client.pull(0, [6n, 7n]);
  await waitFor("the third pull", () => pulls()[2]);
  c.ws.close(4014, "gone");
  await assert.rejects(third, /socket closed/);
});

test("pull: a pull refused for the session's request rate is sent again after a wait, not rejected", async (t) => {
  const boat = await fakeBoat(t);
  const client = connect(boat.url, "tok", { ...fast, pullOffline: true });
  t.after(() => client.close());
  const c = await waitFor("a connection", () => boat.conns[0]);
  c.send({ case: "connected", value: { sid: "s1", uid: "u", platform: "web" } });
  await waitFor("connected state", () => client.state === "connected");
  const pulls = () => c.got.filter((p) => p.body.case === "pull").map((p) => p.body.value);
  const page = client.pull(1, [4n]);
  const p1 = await waitFor("the pull", () => pulls()[0]);
  const limited = { status: 8, message: "more than 50 requests per second", error: { field: "--session-request-rate" } };
  c.send({ case: "pullResult", value: { id: p1.id, ...limited } });
  const p2 = await waitFor("the pull sent again", () => pulls()[1]);
  assert.deepEqual([p2.limit, p2.ack], [1, [4n]], "the same pull, its ACKs included");
  c.send({ case: "pullResult", value: { id: p2.id, ...limited } });
  const p3 = await waitFor("the pull sent a third time", () => pulls()[2]);
  c.send({ case: "pullResult", value: { id: p3.id, msgs: [msg(5)], more: false } });
  const got = await page;
  assert.deepEqual(got.msgs.map((m) => m.seq), [5n]);
  // Another limit is the caller's to handle.
  const other = client.pull();
  const p4 = await waitFor("another pull", () => pulls()[3]);
  c.send({ case: "pullResult", value: { id: p4.id, status: 8, message: "a Pull is already in flight" } });
  await assert.rejects(other, (err) => err instanceof PullError && err.status === 8);
});

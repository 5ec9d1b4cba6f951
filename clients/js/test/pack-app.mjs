// Run by scripts/js-pack-test.sh inside a scratch project that installed the
// packed @gomsg/client tarball (and ws): it starts a real `gomsg dev` on free
// ports, connects two devices through the installed package — one on
// Node's global WebSocket, one on an injected implementation (the ws
// package, as a React Native or older Node app would inject its own) —
// pushes one message to each and checks each arrives once, with a bigint seq.
// Usage: node pack-app.mjs /path/to/gomsg
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:net";
import assert from "node:assert/strict";
import { connect, bodyText } from "@gomsg/client";
import WS from "ws";

// InjectedWS is ws's WebSocket, counting the sockets the client made with it.
let injected = 0;
class InjectedWS extends WS {
  constructor(...args) {
    super(...args);
    injected++;
  }
}

const bin = process.argv[2];
const apiKey = "gomsg-dev-key-do-not-use-in-production";
// gomsg refuses GOMSG_* variables it does not know: give it none of ours.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("GOMSG_")));

async function freePort(next = false) {
  for (;;) {
    const p = await new Promise((res, rej) => {
      const s = createServer();
      s.once("error", rej);
      s.listen(0, "127.0.0.1", () => {
        const port = s.address().port;
        s.close(() => res(port));
      });
    });
    if (!next) return p;
    const ok = await new Promise((res) => {
      const s = createServer();
      s.once("error", () => res(false));
      s.listen(p + 1, "127.0.0.1", () => s.close(() => res(true)));
    });
    if (ok) return p; // embedded etcd takes the next port too
  }
}

async function waitFor(what, cond, ms = 60000) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v;
    } catch {}
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const a = (p) => `127.0.0.1:${p}`;
// Ports found free may be taken before gomsg dev binds them (it then exits
// at once): it starts again on others, three tries in all.
let port, dev;
let exited = false;
for (let attempt = 1; ; attempt++) {
  port = {};
  for (const k of ["redis", "kafka", "pushGRPC", "pushHTTP", "stationInternal", "ops", "client", "boatInternal", "ws"]) port[k] = await freePort();
  port.etcd = await freePort(true);
  exited = false;
  dev = spawn(bin, ["dev", "--log-level", "warn",
    "--embedded-redis-addr", a(port.redis), "--embedded-kafka-addr", a(port.kafka), "--embedded-etcd-addr", a(port.etcd),
    "--push-grpc-addr", a(port.pushGRPC), "--push-http-addr", a(port.pushHTTP), "--station-internal-addr", a(port.stationInternal),
    "--ops-addr", a(port.ops), "--client-addr", a(port.client), "--boat-internal-addr", a(port.boatInternal), "--ws-addr", a(port.ws), "--console-addr=", "--mqtt-addr="],
    { stdio: ["ignore", "inherit", "inherit"], env });
  dev.on("exit", () => (exited = true));
  const up = await waitFor("gomsg dev ready", async () => exited || (await fetch(`http://${a(port.ops)}/readyz`)).ok).catch(() => false);
  if (up && !exited) break;
  if (!exited || attempt >= 3) {
    if (!exited) dev.kill("SIGKILL");
    console.log("FAIL gomsg dev did not start (its output is above)");
    process.exit(1);
  }
  console.log(`gomsg dev exited while starting (a port taken meanwhile?); again with other ports`);
}
const clients = [];
let passed = 0;
let failed = 0;
try {
  for (const [uid, WebSocket] of [["node-global", undefined], ["injected-ws", InjectedWS]]) {
    try {
      const token = execFileSync(bin, ["token", "--dev", "--uid", uid, "--platform", "web"], { env }).toString().trim();
      const got = [];
      const client = connect(`ws://${a(port.ws)}/v1/connect`, token, { WebSocket, onMessage: (m) => void got.push(m) });
      clients.push(client);
      await waitFor(`${uid}: ready`, () => client.state === "ready", 30000);
      const r = await fetch(`http://${a(port.pushHTTP)}/v1/push`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
        body: JSON.stringify({ uids: [uid], platform_config: { platforms: ["web"] },
          msg_bodies: [{ "@type": "type.googleapis.com/google.protobuf.StringValue", value: `hello ${uid}` }], msg_options: 3 }),
      });
      assert.equal(r.status, 200, await r.text());
      await waitFor(`${uid}: the push`, () => got.length >= 1, 30000);
      assert.equal(got.length, 1);
      assert.equal(bodyText(got[0].body), `hello ${uid}`);
      assert.equal(typeof got[0].seq, "bigint");
      assert.equal(injected, WebSocket ? 1 : 0, "sockets made with the injected WebSocket");
      console.log(`ok   ${uid}: received "hello ${uid}" (seq ${got[0].seq})`);
      passed++;
    } catch (err) {
      console.log(`FAIL ${uid}: ${err.stack || err}`);
      failed++;
    }
  }
} finally {
  for (const c of clients) c.close();
  dev.kill("SIGTERM");
  await waitFor("gomsg dev to exit", () => exited, 20000).catch(() => dev.kill("SIGKILL"));
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed === 2 ? 0 : 1);

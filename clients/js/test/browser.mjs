// Browser end-to-end test: a real `gomsg dev` cluster, the demo page in
// headless Chromium (Debian's /usr/bin/chromium driven by playwright-core).
//
// Two processes: `gomsg dev --services station,carrier,horn` with the
// embedded backends, and `gomsg dev --services boat` on those backends, so
// that boat alone can be restarted. The page is served by boat's WebSocket
// listener (the demo handler), same origin as /v1/connect.
//
// It checks, in order:
//   1. a push (Push API, HTTP/JSON, NEED_ACK|NEED_OFFLINE) arrives in the page;
//   2. the server saw the page's ACK: boat's ack-latency histogram counts it
//      (boat observes it only when the ACK of a NEED_ACK message came back);
//   3. the page survives a boat restart: it reconnects by itself and gets a
//      message pushed while boat was down and one pushed after;
//   4. bad input: a WebSocket without a token is closed with 4516, a bad token
//      makes the page stop with 4516, a foreign Origin is refused (no upgrade);
//   5. a second tab with the same uid takes the session: the first shows the
//      NEW_SESSION kickout (close 4601) and does not reconnect.
// A screenshot of the first tab goes to clients/js/test-results/demo.png, or
// to BROWSER_TEST_SCREENSHOT (relative to the repository root):
// BROWSER_TEST_SCREENSHOT=docs/demo.png refreshes the committed one.
//
// Environment: CHROMIUM (default /usr/bin/chromium), BROWSER_TEST_GOMSG_BIN (a built
// gomsg binary; default: go build), KEEP_LOGS=1 prints the servers' logs.
import { mkdirSync } from "node:fs";
import { resolve, dirname } from "node:path";
import assert from "node:assert/strict";
import { Harness, root, waitFor, freePort, freePair, httpOK } from "./harness.mjs";

const apiKey = "gomsg-dev-key-do-not-use-in-production";
const h = new Harness("browser");
const log = (...a) => h.log(...a);
const startProc = (name, bin, args) => h.startProc(name, bin, args);
const stopProc = (rec, ms) => h.stopProc(rec, ms);
const step = (name, fn) => h.step(name, fn);

// metric reads one sample of boat's Prometheus text (0 when absent).
async function metric(opsAddr, name) {
  const text = await (await fetch(`http://${opsAddr}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " ") || l.startsWith(name + "{"));
  return line ? Number(line.split(" ").pop()) : 0;
}

let pushes = 0;
async function push(pushHTTP, uid, text, options) {
  const r = await fetch(`http://${pushHTTP}/v1/push`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({
      uids: [uid],
      platform_config: { platforms: ["web"] },
      msg_bodies: [{ "@type": "type.googleapis.com/google.protobuf.StringValue", value: text }],
      msg_options: options,
    }),
  });
  const body = await r.text();
  assert.equal(r.status, 200, `push ${text}: ${r.status} ${body}`);
  pushes++;
  return JSON.parse(body);
}

const NEED_ACK = 1;
const NEED_OFFLINE = 2;

// Page helpers: the demo page's DOM is the test's view of the client.
const state = (page) => page.locator("#state").getAttribute("data-state");
const count = async (page, name) => Number(await page.locator(`#count-${name}`).textContent());
const events = (page, kind) => page.locator(`#events li[data-kind="${kind}"]`).allTextContents();
const bodies = (page) => page.locator("#messages li").evaluateAll((els) => els.map((e) => e.dataset.body));

async function connectPage(page, url, uid, token = "") {
  await page.goto(url);
  await page.fill("#uid", uid);
  await page.fill("#token", token);
  await page.click("#connect");
}

async function main() {
  const bin = h.gomsgBin();

  // Ports found free may be taken before the processes bind them: the
  // cluster starts again on others then.
  const a = (p) => `127.0.0.1:${p}`;
  const watchExit = (rec) => h.watchExit(rec);
  const boatReady = async (rec, port) => {
    await waitFor("boat ready", async () => (watchExit(rec)(), await httpOK(`http://${a(port.opsBoat)}/readyz`)), 30000);
    await waitFor("the demo page at / of the WebSocket listener (gomsg dev mounts demo.Handler as boat's WSHandler)", async () => (watchExit(rec)(), await httpOK(`http://${a(port.ws)}/`)), 10000);
  };
  const cluster = await h.withFreshPorts(async () => {
    const port = {};
    for (const k of ["redis", "kafka", "pushGRPC", "pushHTTP", "stationInternal", "opsCore", "client", "boatInternal", "ws", "opsBoat"]) {
      port[k] = await freePort();
    }
    port.etcd = await freePair();
    const common = ["--ack-wait", "3s", "--log-level", "warn"];
    const core = startProc("core", bin, [
      "dev", "--services", "station,carrier,horn", ...common,
      "--embedded-redis-addr", a(port.redis), "--embedded-kafka-addr", a(port.kafka), "--embedded-etcd-addr", a(port.etcd),
      "--push-grpc-addr", a(port.pushGRPC), "--push-http-addr", a(port.pushHTTP),
      "--station-internal-addr", a(port.stationInternal), "--ops-addr", a(port.opsCore), "--console-addr=",
    ]);
    const boatArgs = [
      "dev", "--services", "boat", ...common,
      "--redis-addrs", a(port.redis), "--kafka-brokers", a(port.kafka), "--etcd-endpoints", a(port.etcd),
      "--station-addr", a(port.stationInternal),
      "--client-addr", a(port.client), "--boat-internal-addr", a(port.boatInternal), "--ws-addr", a(port.ws),
      "--ops-addr", a(port.opsBoat), "--mqtt-addr=",
    ];
    await waitFor("station, carrier and horn ready", async () => (watchExit(core)(), await httpOK(`http://${a(port.opsCore)}/readyz`)), 60000);
    const boat = startProc("boat", bin, boatArgs);
    await boatReady(boat, port);
    return { port, boatArgs, boat };
  });
  const { port, boatArgs } = cluster;
  let { boat } = cluster;
  log("cluster up");

  const ctx = await h.launch();
  const pageURL = `http://${a(port.ws)}/`;
  const uid = `web-e2e-${process.pid}-${Date.now()}`;
  const tab1 = await ctx.newPage();
  const consoleErrors = [];
  tab1.on("pageerror", (e) => consoleErrors.push(e.message));

  await step("the page connects as a web device and gets Ready", async () => {
    await connectPage(tab1, pageURL, uid);
    await waitFor("state ready", async () => (await state(tab1)) === "ready");
    const connected = (await events(tab1, "connected")).join("\n");
    assert.match(connected, new RegExp(`uid ${uid} platform web`));
  });

  await step("a push arrives and the server sees the page's ACK", async () => {
    const acksBefore = await metric(a(port.opsBoat), "gomsg_boat_ack_latency_seconds_count");
    await push(a(port.pushHTTP), uid, "hello from the Push API", NEED_ACK | NEED_OFFLINE);
    await waitFor("the message in the page", async () => (await bodies(tab1)).includes("hello from the Push API"));
    await waitFor("boat to count the ACK", async () => (await metric(a(port.opsBoat), "gomsg_boat_ack_latency_seconds_count")) === acksBefore + 1, 5000);
    await waitFor("the page to show it ACKed", async () => (await count(tab1, "acked")) === 1);
    assert.equal(await tab1.locator("#messages li.acked").count(), 1);
  });

  await step("the page survives a boat restart and gets what was pushed meanwhile and after", async () => {
    const connectsBefore = await count(tab1, "connects");
    const exit = await stopProc(boat);
    assert.equal(exit.code, 0, `boat exit ${JSON.stringify(exit)}:\n${boat.out}`);
    await waitFor("the page to notice", async () => (await state(tab1)) !== "ready");
    // A draining boat kicks its sessions SERVER_DRAINING; the client comes back at once.
    await waitFor("the close event", async () => (await events(tab1, "close")).length > 0);
    const closes = (await events(tab1, "close")).join("\n");
    assert.match(closes, /code 4105 .*kickout SERVER_DRAINING; reconnecting in 0 ms/, `the page's close events:\n${closes}`);
    assert.doesNotMatch(closes, /not reconnecting/);
    await push(a(port.pushHTTP), uid, "pushed while boat was down", NEED_ACK | NEED_OFFLINE);
    boat = startProc("boat", bin, boatArgs);
    await boatReady(boat, port);
    await waitFor("the page to reconnect", async () => (await state(tab1)) === "ready" && (await count(tab1, "connects")) === connectsBefore + 1, 20000);
    await waitFor("the message pushed while boat was down", async () => (await bodies(tab1)).includes("pushed while boat was down"), 10000);
    await push(a(port.pushHTTP), uid, "pushed after the restart", NEED_ACK | NEED_OFFLINE);
    await waitFor("the message pushed after the restart", async () => (await bodies(tab1)).includes("pushed after the restart"));
    await waitFor("every NEED_ACK message ACKed", async () => (await count(tab1, "acked")) >= 3);
    const got = await bodies(tab1);
    assert.equal(new Set(got).size, got.length, `a message shown twice: ${got}`);
    assert.deepEqual(got.slice().reverse(), ["hello from the Push API", "pushed while boat was down", "pushed after the restart"]);
    // The only errors allowed: the token fetch while boat (which serves the page's /dev/token) was down.
    const errs = (await events(tab1, "error")).filter((e) => !/token source failed/.test(e));
    assert.deepEqual(errs, [], "the client reported errors");
  });

  await step("bad input: no token → 4516; a bad token stops the page with 4516; a foreign Origin is refused", async () => {
    const tab = await ctx.newPage();
    await tab.goto(pageURL);
    const wsURL = `ws://${a(port.ws)}/v1/connect`;
    const raw = (url, protocols) => tab.evaluate(([url, protocols]) => new Promise((res) => {
      const ws = new WebSocket(url, protocols);
      let opened = false;
      ws.onopen = () => (opened = true);
      ws.onclose = (e) => res({ code: e.code, reason: e.reason, opened, protocol: ws.protocol });
    }), [url, protocols]);
    const noToken = await raw(wsURL, ["gomsg.v1.proto"]);
    assert.equal(noToken.code, 4516, `no token: ${JSON.stringify(noToken)}`);
    assert.ok(noToken.opened, "4516 comes after the upgrade, so the page can read it");
    const badToken = await raw(wsURL, ["gomsg.v1.proto", "bearer.not-a-jwt"]);
    assert.equal(badToken.code, 4516, `bad token: ${JSON.stringify(badToken)}`);
    // Through the client: a bad token makes it stop, not retry.
    await connectPage(tab, pageURL, "someone", "not-a-jwt");
    await waitFor("the page to stop", async () => (await state(tab)) === "closed");
    assert.match((await events(tab, "close")).join("\n"), /code 4516.*not reconnecting/);
    assert.equal(await count(tab, "connects"), 0);
    // The page loaded from another origin (localhost is not 127.0.0.1): refused before the upgrade.
    await tab.goto(`http://localhost:${port.ws}/`);
    const foreign = await raw(wsURL, ["gomsg.v1.proto", "bearer.x"]);
    assert.equal(foreign.opened, false, `a foreign Origin must be refused: ${JSON.stringify(foreign)}`);
    assert.equal(foreign.code, 1006);
    await tab.close();
  });

  await step("a second tab with the same uid takes the session; the first shows NEW_SESSION and stays closed", async () => {
    const tab2 = await ctx.newPage();
    await connectPage(tab2, pageURL, uid);
    await waitFor("tab 2 ready", async () => (await state(tab2)) === "ready");
    await waitFor("tab 1 closed", async () => (await state(tab1)) === "closed");
    assert.match((await events(tab1, "kickout")).join("\n"), /NEW_SESSION/);
    assert.match((await events(tab1, "close")).join("\n"), /code 4601.*kickout NEW_SESSION; not reconnecting/);
    const connects1 = await count(tab1, "connects");
    // Tab 1 must not come back: its backoff is at most 5 s, so watch 6 s.
    // Coming back would also kick tab 2 out.
    const until = Date.now() + 6000;
    while (Date.now() < until) {
      assert.equal(await state(tab1), "closed");
      assert.equal(await state(tab2), "ready");
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(await count(tab1, "connects"), connects1);
    await push(a(port.pushHTTP), uid, "for the second tab", NEED_ACK | NEED_OFFLINE);
    await waitFor("the second tab gets the next push", async () => (await bodies(tab2)).includes("for the second tab"));
    assert.ok(!(await bodies(tab1)).includes("for the second tab"));
    const shot = resolve(root, process.env.BROWSER_TEST_SCREENSHOT || "clients/js/test-results/demo.png");
    mkdirSync(dirname(shot), { recursive: true });
    await tab1.screenshot({ path: shot, fullPage: false });
    log(`screenshot ${shot}`);
  });
  assert.deepEqual(consoleErrors, [], "the page threw");
}

await h.run(main);

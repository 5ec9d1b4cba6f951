// The admin console in headless Chromium, on a real cluster of three
// `gomsg dev` processes: station, carrier and horn on the embedded backends
// (with the console on), and two boats on those backends. Two demo-page tabs
// are devices (alice on boat-a, bob on boat-b); a third tab is the console.
//
// It checks, in order:
//   1. a key without the console scope cannot log in (403 shown);
//   2. logged in, Cluster shows both boats with one session each;
//   3. a push from the Push form reaches alice's tab and shows DELIVERED;
//   4. User shows alice's session on boat-a and the delivery;
//   5. a push to bob while boat-b is paused (SIGSTOP) dies after its retries;
//      Dead letters lists it, shows it, and once boat-b runs again a redrive
//      delivers it to bob's tab;
//   6. a key with only the console scope sees 403 for a push and for dead
//      letters; the key is in no URL, cookie or localStorage.
// Screenshots of each page go to clients/js/test-results/, or to
// CONSOLE_TEST_SCREENSHOTS (relative to the repository root):
// CONSOLE_TEST_SCREENSHOTS=docs refreshes the committed ones.
//
// Environment: as browser.mjs (CHROMIUM, BROWSER_TEST_GOMSG_BIN, KEEP_LOGS).
import { createHash } from "node:crypto";
import { mkdirSync } from "node:fs";
import { resolve } from "node:path";
import assert from "node:assert/strict";
import { Harness, root, waitFor, freePort, freePair, httpOK } from "./harness.mjs";

const h = new Harness("console");
const sha256 = (s) => createHash("sha256").update(s).digest("hex");
const keys = {
  admin: "console-e2e-admin-key-0123456789",
  reader: "console-e2e-reader-key-0123456789",
  backend: "console-e2e-backend-key-0123456789",
};
const keyLines = [
  `${sha256(keys.admin)} console,push,kickout,dlq,delivery admin`,
  `${sha256(keys.reader)} console reader`,
  `${sha256(keys.backend)} push backend`,
].join(";");
const shots = resolve(root, process.env.CONSOLE_TEST_SCREENSHOTS || "clients/js/test-results");

// The demo page's DOM (see browser.mjs).
const state = (page) => page.locator("#state").getAttribute("data-state");
const bodies = (page) => page.locator("#messages li").evaluateAll((els) => els.map((e) => e.dataset.body));

async function main() {
  const bin = h.gomsgBin();
  // Ports found free may be taken before the processes bind them: the
  // cluster starts again on others then.
  const a = (p) => `127.0.0.1:${p}`;
  const { port, boats } = await h.withFreshPorts(async () => {
    const port = {};
    for (const k of ["redis", "kafka", "pushGRPC", "pushHTTP", "stationInternal", "opsCore", "console"]) port[k] = await freePort();
    port.etcd = await freePair();
    const common = ["--log-level", "warn"];
    const core = h.startProc("core", bin, [
      "dev", "--services", "station,carrier,horn", ...common,
      "--embedded-redis-addr", a(port.redis), "--embedded-kafka-addr", a(port.kafka), "--embedded-etcd-addr", a(port.etcd),
      "--push-grpc-addr", a(port.pushGRPC), "--push-http-addr", a(port.pushHTTP),
      "--station-internal-addr", a(port.stationInternal), "--ops-addr", a(port.opsCore), "--console-addr", a(port.console),
      // A delivery to a paused boat fails fast and dies after one retry.
      "--ack-wait", "1s", "--call-timeout", "500ms", "--max-retries", "1", "--retry-backoff-min", "100ms", "--retry-backoff-max", "200ms",
    ], { GOMSG_API_KEYS: keyLines });
    await waitFor("station, carrier and horn ready", async () => (h.watchExit(core)(), await httpOK(`http://${a(port.opsCore)}/readyz`)), 60000);
    const boats = {};
    for (const id of ["boat-a", "boat-b"]) {
      const p = {};
      for (const k of ["client", "internal", "ws", "ops"]) p[k] = await freePort();
      const rec = h.startProc(id, bin, [
        "dev", "--services", "boat", ...common, "--boat-id", id,
        "--redis-addrs", a(port.redis), "--kafka-brokers", a(port.kafka), "--etcd-endpoints", a(port.etcd),
        "--station-addr", a(port.stationInternal),
        "--client-addr", a(p.client), "--boat-internal-addr", a(p.internal), "--ws-addr", a(p.ws), "--ops-addr", a(p.ops),
        "--mqtt-addr=", // two boats: not both on dev's fixed MQTT port
      ]);
      boats[id] = { rec, page: `http://${a(p.ws)}/`, ops: `http://${a(p.ops)}/readyz` };
    }
    for (const [id, b] of Object.entries(boats)) {
      await waitFor(`${id} ready`, async () => (h.watchExit(b.rec)(), await httpOK(b.ops)), 30000);
      await waitFor(`${id}'s demo page`, async () => httpOK(b.page), 10000);
    }
    return { port, boats };
  });
  h.log("cluster up");

  const ctx = await h.launch();
  const devices = {};
  for (const [uid, boat] of [["alice", "boat-a"], ["bob", "boat-b"]]) {
    const tab = await ctx.newPage();
    await tab.goto(boats[boat].page);
    await tab.fill("#uid", uid);
    await tab.fill("#token", "");
    await tab.click("#connect");
    await waitFor(`${uid} ready on ${boat}`, async () => (await state(tab)) === "ready");
    devices[uid] = tab;
  }
  const page = await ctx.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  const base = `http://${a(port.console)}/`;
  const errorBox = page.locator("#error");
  const shot = async (name) => {
    mkdirSync(shots, { recursive: true });
    await page.screenshot({ path: resolve(shots, name), fullPage: true });
  };
  const login = async (key) => {
    await page.goto(base);
    await page.fill("#key", key);
    await page.click("#login-btn");
  };
  const logout = () => page.click("#logout");
  const forbidden = async (what, scope) => {
    await waitFor(`403 for ${what}`, async () => (await errorBox.getAttribute("data-status")) === "403");
    assert.match(await errorBox.textContent(), new RegExp(`403 PERMISSION_DENIED: .*"${scope}"`));
  };

  await h.step("a key without the console scope cannot log in", async () => {
    await login(keys.backend);
    await forbidden("the backend key", "console");
    assert.equal(await page.locator("#nav").isVisible(), false);
  });

  await h.step("logged in, Cluster shows both boats with one session each", async () => {
    await login(keys.admin);
    await waitFor("the nav", () => page.locator("#nav").isVisible());
    assert.match(await page.locator("#whoami").textContent(), /key admin · push, kickout, delivery, dlq, console/);
    for (const id of ["boat-a", "boat-b"]) {
      await waitFor(`${id} with 1 session`, async () => {
        const row = page.locator(`#boats tr[data-boat="${id}"] td.sessions`);
        if ((await row.count()) === 1 && (await row.textContent()) === "1") return true;
        await page.click("#cluster-refresh");
        return false;
      });
    }
    assert.equal(await page.locator("#boats tbody tr").count(), 2);
    assert.match(await page.locator("#dlq-depth").textContent(), /^0 dead letters/);
    // Lag from the brokers for each carrier group; rates of station's
    // counters, carrier's too (it runs in station's process here).
    for (const topic of ["gomsg.tasks", "gomsg.tasks.retry", "gomsg.broadcast", "gomsg.receipts"]) {
      assert.match(await page.locator(`#lag tr[data-topic="${topic}"] td.lag`).textContent(), /^\d+$/, topic);
    }
    for (const name of ["push calls accepted", "tasks accepted", "deliveries acked"]) {
      assert.equal(await page.locator(`#rates tr[data-series="${name}"]`).count(), 1, name);
    }
    await shot("console-cluster.png");
  });

  await h.step("a push from the form reaches alice and shows DELIVERED", async () => {
    await page.click('#nav [data-page="push"]');
    await page.fill("#push-targets", "alice");
    await page.fill("#push-platforms", "web");
    await page.fill("#push-body", "hello from the console");
    await page.click("#push-send");
    await waitFor("the seqs", async () => /^seqs: \d+$/.test(await page.locator("#push-seqs").textContent()));
    await waitFor("DELIVERED", async () => (await page.locator('#push-status tr[data-state="DELIVERED"]').count()) === 1);
    await waitFor("the message in alice's tab", async () => (await bodies(devices.alice)).includes("hello from the console"));
    await shot("console-push.png");
  });

  await h.step("User shows alice's session on boat-a and the delivery", async () => {
    await page.click('#nav [data-page="user"]');
    await page.fill("#uid", "alice");
    await page.click("#lookup");
    await waitFor("alice's session", async () => (await page.locator("#user-sessions tbody tr").count()) === 1);
    const cells = await page.locator("#user-sessions tbody tr td").allTextContents();
    assert.equal(cells[0], "web");
    assert.equal(cells[1], "boat-a");
    await waitFor("the delivery", async () => (await page.locator("#user-deliveries .state-DELIVERED").count()) === 1);
    await shot("console-user.png");
  });

  await h.step("a push to bob on a paused boat dies, and a redrive delivers it once the boat runs", async () => {
    boats["boat-b"].rec.p.kill("SIGSTOP");
    await page.click('#nav [data-page="push"]');
    await page.fill("#push-targets", "bob");
    await page.fill("#push-platforms", "web");
    await page.fill("#push-body", "for bob, after a redrive");
    await page.uncheck("#opt-offline");
    const before = await page.locator("#push-seqs").textContent();
    await page.click("#push-send");
    await waitFor("the new seqs", async () => {
      const t = await page.locator("#push-seqs").textContent();
      return t !== before && /^seqs: \d+$/.test(t);
    });
    const seq = (await page.locator("#push-seqs").textContent()).slice("seqs: ".length);
    await page.click('#nav [data-page="dlq"]');
    await page.fill("#dlq-uid", "bob");
    await waitFor("bob's dead letter", async () => {
      if ((await page.locator(`#dlq tr[data-seq]`).count()) === 1) return true;
      await page.click("#dlq-list");
      await new Promise((r) => setTimeout(r, 200));
      return false;
    }, 20000);
    const row = page.locator("#dlq tr[data-seq]");
    assert.match(await row.textContent(), /bob.*to_uid.*web/);
    boats["boat-b"].rec.p.kill("SIGCONT");
    await waitFor("boat-b ready again", async () => httpOK(boats["boat-b"].ops), 20000);
    await waitFor("bob's tab ready", async () => (await state(devices.bob)) === "ready", 20000);
    await row.locator("button[data-show]").click();
    await waitFor("the record", async () => (await page.locator("#dlq-record").textContent()).includes("for bob, after a redrive"));
    const recSeq = await row.getAttribute("data-seq");
    await shot("console-dlq.png");
    await row.locator("button[data-redrive]").click();
    await waitFor("the redrive's answer", async () => (await page.locator("#dlq-result").textContent()).startsWith(`redriven: ${recSeq}`));
    await waitFor("the message in bob's tab", async () => (await bodies(devices.bob)).includes("for bob, after a redrive"), 20000);
    // The dead letter carries the message pushed, under its own seq.
    assert.match(await page.locator("#dlq-record").textContent(), new RegExp(`"msgSeqs": \\[\\s*"${seq}"`));
  });

  await h.step("a key with only the console scope sees 403 for actions; the key is in no URL, cookie or localStorage", async () => {
    await logout();
    await login(keys.reader);
    await waitFor("the nav", () => page.locator("#nav").isVisible());
    await page.click('#nav [data-page="push"]');
    await page.fill("#push-targets", "alice");
    await page.fill("#push-body", "not allowed");
    await page.click("#push-send");
    await forbidden("a push", "push");
    await shot("console-403.png");
    await page.click('#nav [data-page="dlq"]');
    await page.click("#dlq-list");
    await forbidden("dead letters", "dlq");
    assert.ok(!page.url().includes(keys.reader), page.url());
    const stored = await page.evaluate(() => ({ cookie: document.cookie, local: localStorage.length, session: sessionStorage.getItem("gomsg.console.key") }));
    assert.deepEqual(stored, { cookie: "", local: 0, session: keys.reader });
    assert.ok(!(await bodies(devices.alice)).includes("not allowed"));
  });
  assert.deepEqual(pageErrors, [], "the console threw");
}

await h.run(main);

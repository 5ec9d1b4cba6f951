// Shared by the browser end-to-end tests: free ports, `gomsg dev`
// processes, polling with a deadline, named steps, Chromium, and the
// run/cleanup around a test's main.
import { spawn, execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
export const root = resolve(here, "../../..");
export const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
// gomsg refuses GOMSG_* variables it does not know, and the developer's own
// settings must not change the test: the servers get none but ours.
const gomsgFreeEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("GOMSG_")));

// waitFor polls cond (sync or async) until it returns a truthy value or the deadline passes.
export async function waitFor(what, cond, ms = 15000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v;
    } catch (err) {
      if (err.fatal) throw err;
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? ` (last error: ${last.message})` : ""}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => res(p));
    });
  });
}

// freePair gives a port whose next port is free too (embedded etcd's peer port).
export async function freePair() {
  for (;;) {
    const p = await freePort();
    const ok = await new Promise((res) => {
      const s = createServer();
      s.once("error", () => res(false));
      s.listen(p + 1, "127.0.0.1", () => s.close(() => res(true)));
    });
    if (ok) return p;
  }
}

export async function httpOK(url) {
  const r = await fetch(url);
  await r.arrayBuffer();
  return r.ok;
}

// Harness holds one test run: its temp dir, its processes (one cluster:
// they share the internal token, as each `gomsg dev` makes its own
// otherwise), its browser and its step counts.
export class Harness {
  constructor(name) {
    this.name = name;
    this.started = Date.now();
    this.tmp = mkdtempSync(join(tmpdir(), `gomsg-${name}-`));
    this.procs = [];
    this.internalToken = randomBytes(24).toString("hex");
    this.browser = null;
    this.passed = 0;
    this.failed = 0;
  }

  log(...a) {
    console.log(`[${((Date.now() - this.started) / 1000).toFixed(1)}s]`, ...a);
  }

  // gomsgBin is BROWSER_TEST_GOMSG_BIN, or a gomsg built into the temp dir.
  gomsgBin() {
    if (process.env.BROWSER_TEST_GOMSG_BIN) return process.env.BROWSER_TEST_GOMSG_BIN;
    const bin = join(this.tmp, "gomsg");
    this.log("go build ./cmd/gomsg");
    execFileSync("go", ["build", "-o", bin, "./cmd/gomsg"], { cwd: root, stdio: "inherit" });
    return bin;
  }

  startProc(name, bin, args, env = {}) {
    const p = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...gomsgFreeEnv, GOMSG_INTERNAL_TOKEN: this.internalToken, ...env } });
    const rec = { name, p, out: "", exited: null };
    p.stdout.on("data", (d) => (rec.out += d));
    p.stderr.on("data", (d) => (rec.out += d));
    p.on("exit", (code, sig) => (rec.exited = { code, sig }));
    this.procs.push(rec);
    return rec;
  }

  async stopProc(rec, ms = 15000) {
    if (rec.exited) return rec.exited;
    rec.p.kill("SIGCONT"); // a paused process cannot handle SIGTERM
    rec.p.kill("SIGTERM");
    try {
      await waitFor(`${rec.name} to exit`, () => rec.exited, ms);
    } catch (err) {
      rec.p.kill("SIGKILL");
      await waitFor(`${rec.name} to die`, () => rec.exited, 5000);
      throw err;
    }
    return rec.exited;
  }

  // watchExit returns a check that throws (fatally for waitFor) once rec exited.
  watchExit(rec) {
    return () => {
      if (rec.exited) throw Object.assign(new Error(`${rec.name} exited (${JSON.stringify(rec.exited)}):\n${rec.out}`), { fatal: true });
    };
  }

  // withFreshPorts runs start, which picks free ports and starts processes
  // on them, again (three tries in all) when one of its processes exits
  // because a port was taken before it bound it: a port found free is free
  // only until another process binds it.
  async withFreshPorts(start) {
    for (let attempt = 1; ; attempt++) {
      const before = this.procs.length;
      try {
        return await start();
      } catch (err) {
        if (attempt >= 3 || !/address already in use/.test(String(err && err.message))) throw err;
        const started = this.procs.splice(before);
        await Promise.all(started.map((p) => this.stopProc(p).catch(() => {})));
        this.log(`a port was taken before it was bound (${err.message.split("\n").find((l) => /address already in use/.test(l))}); again with other ports`);
      }
    }
  }

  async step(name, fn) {
    const t0 = Date.now();
    try {
      await fn();
      this.passed++;
      this.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (err) {
      this.failed++;
      this.log(`FAIL ${name}: ${err.stack || err}`);
      throw err;
    }
  }

  // launch starts Chromium with a fresh profile in the temp dir; the
  // background-networking flags keep it from stalling on a closed network.
  async launch() {
    if (!existsSync(chromiumPath)) {
      throw new Error(`no Chromium at ${chromiumPath}: install Debian's chromium (scripts/browser-test.sh does) or set CHROMIUM`);
    }
    this.browser = await chromium.launchPersistentContext(join(this.tmp, "chromium-profile"), {
      executablePath: chromiumPath,
      headless: true,
      viewport: { width: 1280, height: 800 },
      args: [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
      ],
    });
    return this.browser;
  }

  // run runs main, prints the processes' logs on failure (or with
  // KEEP_LOGS=1), stops everything and exits with the result.
  async run(main) {
    let exitCode = 0;
    try {
      await main();
    } catch (err) {
      exitCode = 1;
      if (!this.failed) {
        this.failed++;
        this.log(`FAIL setup: ${err.stack || err}`);
      }
      for (const p of this.procs) console.log(`----- ${p.name} log -----\n${p.out}`);
    } finally {
      if (this.browser) await this.browser.close().catch(() => {});
      await Promise.all(this.procs.map((p) => this.stopProc(p).catch(() => {})));
      if (process.env.KEEP_LOGS && !exitCode) for (const p of this.procs) console.log(`----- ${p.name} log -----\n${p.out}`);
      rmSync(this.tmp, { recursive: true, force: true });
    }
    this.log("done");
    console.log(`${this.name}: ${this.passed} passed, ${this.failed} failed`);
    process.exit(exitCode);
  }
}

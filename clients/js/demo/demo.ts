// The demo page served by `gomsg dev`: a web device that shows what it gets,
// what it ACKs, kickouts, closes and reconnects. Bundled by
// scripts/bundle.mjs into internal/demo/static/gomsg-demo.js.
import { type Client, connect, describeBody, KickoutReason, type PushMessage } from "../src/index.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

let client: Client | undefined;
const counts = { received: 0, acked: 0, duplicates: 0, connects: 0 };
const items = new Map<bigint, HTMLLIElement>();

function count(name: keyof typeof counts, by = 1): void {
  counts[name] += by;
  $("count-" + name).textContent = String(counts[name]);
}

function time(): string {
  return new Date().toISOString().slice(11, 23);
}

function event(kind: string, text: string): void {
  const li = document.createElement("li");
  li.className = "ev-" + kind;
  li.dataset.kind = kind;
  li.textContent = `${time()} ${kind} ${text}`;
  $("events").prepend(li);
}

function setState(state: string): void {
  const el = $("state");
  el.textContent = state;
  el.dataset.state = state;
}

function showMessage(m: PushMessage): void {
  const li = document.createElement("li");
  li.dataset.seq = String(m.seq);
  li.dataset.body = describeBody(m.body);
  if (m.replay) li.classList.add("replay");
  const flags = [m.needAck ? "NEED_ACK" : "", m.replay ? "offline" : ""].filter(Boolean).join(",");
  li.textContent = `#${m.seq} ${new Date(Number(m.timestamp)).toISOString().slice(11, 23)} ${flags ? "[" + flags + "] " : ""}${li.dataset.body}`;
  $("messages").prepend(li);
  items.set(m.seq, li);
}

// The page connects only to the boat that served it: no parameter may point
// it (and a token pasted into it) at another server.
function wsURL(): string {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/connect";
}

async function mint(uid: string): Promise<string> {
  const r = await fetch("dev/token", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ uid }),
  });
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`dev/token: ${r.status} ${j.error ?? ""}`);
  return j.token;
}

function setConnected(on: boolean): void {
  $<HTMLButtonElement>("connect").disabled = on;
  $<HTMLButtonElement>("disconnect").disabled = !on;
  $<HTMLButtonElement>("join").disabled = !on;
  $<HTMLButtonElement>("leave").disabled = !on;
}

function start(uid: string, pasted: string): void {
  client?.close();
  const tokenSource = pasted ? pasted : () => mint(uid);
  const c = connect(wsURL(), tokenSource, {
    backoff: { initialMs: 500, maxMs: 5000 },
    onMessage: (m) => {
      count("received");
      showMessage(m);
    },
  });
  client = c;
  setConnected(true);
  event("connect", `uid ${uid} → ${wsURL()}`);
  c.on("state", (s) => {
    if (c !== client) return;
    setState(s);
    if (s === "closed") setConnected(false);
  });
  c.on("connected", (info) => {
    count("connects");
    $("sid").textContent = info.sid;
    event("connected", `sid ${info.sid} uid ${info.uid} platform ${info.platform}`);
  });
  c.on("ready", () => event("ready", "offline replay done; live"));
  c.on("ack", (seqs) => {
    count("acked", seqs.length);
    for (const s of seqs) items.get(s)?.classList.add("acked");
    event("ack", seqs.join(","));
  });
  c.on("duplicate", (m) => {
    count("duplicates");
    event("duplicate", `#${m.seq} (seen before; ACKed again if asked)`);
  });
  c.on("kickout", (reason, message) => event("kickout", `${KickoutReason[reason] ?? reason}${message ? ": " + message : ""}`));
  c.on("close", (i) => {
    const kick = i.kickout === undefined ? "" : ` kickout ${KickoutReason[i.kickout]}`;
    const next = i.action === "stop" ? "not reconnecting" : `reconnecting in ${i.delayMs} ms`;
    const what = i.code === 0 ? i.reason : `code ${i.code}${i.reason ? " (" + i.reason + ")" : ""}`;
    event("close", `${what}${kick}; ${next}`);
  });
  c.on("room", (p) => {
    for (const m of p.msgs) event("room", `${p.room || "(everyone)"} #${m.seq} ${describeBody(m.body)}`);
  });
  c.on("roomAnswer", (a) => event("room", `${a.join ? "join" : "leave"} ${a.room}: ${a.status === 0 ? "OK" : `status ${a.status} ${a.message}`}`));
  c.on("error", (e) => event("error", e.message));
}

function main(): void {
  $("endpoint").textContent = wsURL();
  $("connect-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const uid = $<HTMLInputElement>("uid").value.trim();
    if (uid) start(uid, $<HTMLInputElement>("token").value.trim());
  });
  $("disconnect").addEventListener("click", () => {
    client?.close();
    event("disconnect", "closed by the user");
  });
  $("room-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const room = $<HTMLInputElement>("room").value.trim();
    if (room) client?.joinRoom(room).catch((e) => event("error", String(e)));
  });
  $("leave").addEventListener("click", () => {
    const room = $<HTMLInputElement>("room").value.trim();
    if (room) client?.leaveRoom(room).catch((e) => event("error", String(e)));
  });
}

main();

// gomsg admin console. Plain script, no dependencies. The API key is kept
// in sessionStorage (this tab only) and sent as "Authorization: Bearer";
// it never goes into a URL. Everything from the server is put in the page
// as text (textContent), never as HTML.
"use strict";

const KEY = "gomsg.console.key";
const PUSHED = "gomsg.console.pushed";
const TERMINAL = new Set(["DELIVERED", "DEAD_LETTERED", "DROPPED", "EXPIRED"]);
const $ = (sel) => document.querySelector(sel);
let scopes = [];
let pollTimer = null;

class APIError extends Error {
  constructor(httpStatus, body) {
    super(`${httpStatus} ${body.status || ""}: ${body.message || ""}`);
    this.httpStatus = httpStatus;
    this.body = body;
  }
}

async function api(path, body) {
  const init = { headers: { authorization: "Bearer " + sessionStorage.getItem(KEY) }, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  let data = {};
  try { data = text ? JSON.parse(text) : {}; } catch { data = { message: text }; }
  if (!r.ok) throw new APIError(r.status, data);
  return data;
}

function showError(err) {
  const box = $("#error");
  if (!err) { box.hidden = true; box.textContent = ""; delete box.dataset.status; return; }
  box.hidden = false;
  box.textContent = err.message;
  box.dataset.status = err.httpStatus || "";
}

// run calls fn, showing its error (and clearing the last one).
async function run(fn) {
  showError(null);
  try { await fn(); } catch (err) { showError(err); }
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(tbody, cells) {
  const tr = document.createElement("tr");
  for (const c of cells) {
    if (c instanceof Node) { const td = document.createElement("td"); td.append(c); tr.append(td); }
    else tr.append(el("td", c));
  }
  tbody.append(tr);
  return tr;
}

function button(text, onclick, attrs = {}) {
  const b = el("button", text);
  b.type = "button";
  for (const [k, v] of Object.entries(attrs)) b.dataset[k] = v;
  b.addEventListener("click", () => run(onclick));
  return b;
}

const when = (ms) => (Number(ms) > 0 ? new Date(Number(ms)).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "");

// ---- pages ----

function show(page) {
  for (const s of document.querySelectorAll(".page")) s.hidden = s.id !== "page-" + page;
  for (const b of document.querySelectorAll("#nav [data-page]")) b.classList.toggle("active", b.dataset.page === page);
  if (page === "cluster") run(loadCluster);
  if (page === "dlq" && scopes.includes("dlq")) run(loadDLQ);
}

async function login(key) {
  sessionStorage.setItem(KEY, key);
  try {
    const me = await api("/v1/console/whoami");
    scopes = me.scopes;
    $("#whoami").textContent = `key ${me.name || "(unnamed)"} · ${scopes.join(", ")}`;
    $("#nav").hidden = false;
    show("cluster");
  } catch (err) {
    sessionStorage.removeItem(KEY);
    throw err;
  }
}

function logout() {
  sessionStorage.removeItem(KEY);
  scopes = [];
  $("#nav").hidden = true;
  $("#whoami").textContent = "";
  for (const s of document.querySelectorAll(".page")) s.hidden = s.id !== "page-login";
}

async function loadCluster() {
  const c = await api("/v1/console/cluster");
  const boats = $("#boats tbody");
  boats.replaceChildren();
  for (const b of c.boats) {
    const tr = row(boats, [b.id, b.addr, b.sessions < 0 ? "?" : b.sessions, b.rooms < 0 ? "?" : b.rooms, b.leaseTtlS < 0 ? "?" : `${b.leaseTtlS} s / ${b.leaseGrantedS} s`]);
    tr.dataset.boat = b.id;
    tr.children[2].className = "num sessions";
  }
  const members = $("#members tbody");
  members.replaceChildren();
  for (const m of c.members) row(members, [m.node, m.service, m.leaseTtlS < 0 ? "?" : `${m.leaseTtlS} s`]);
  const d = c.dlq;
  $("#dlq-depth").textContent = !d.available ? "not available on this station (NATS queue)"
    : d.records < 0 ? `unknown: ${d.error}` : `${d.records} dead letters${d.oldestMs ? `, oldest ${when(d.oldestMs)}` : ""}`;
  showLag(c.lag);
  showRates(c.rates);
  $("#cluster-errors").textContent = c.errors.join("; ");
}

function showLag(l) {
  const tbody = $("#lag tbody");
  tbody.replaceChildren();
  $("#lag-note").textContent = l.available ? "" : (l.note || "lag not available");
  $("#lag").hidden = !l.available;
  for (const t of l.topics) {
    const behind = t.partitions.filter((p) => p.lag > 0);
    const parts = t.error ? `unknown: ${t.error}`
      : behind.length === 0 ? "none"
      : behind.map((p) => `${p.partition}: ${p.lag} (${p.committed < 0 ? "none" : p.committed} / ${p.end})`).join(", ");
    const tr = row(tbody, [t.topic, t.group, t.error ? "?" : t.partitions.length, t.error ? "?" : behind.length, t.lag < 0 ? "?" : t.lag, parts]);
    tr.dataset.topic = t.topic;
    for (const i of [2, 3]) tr.children[i].className = "num";
    tr.children[4].className = "num lag";
    if (t.error) tr.children[5].className = "warn";
  }
}

function showRates(r) {
  const tbody = $("#rates tbody");
  tbody.replaceChildren();
  $("#rates-window").textContent = r.error ? `unknown: ${r.error}`
    : r.measured ? `over the last ${r.windowS.toFixed(1)} s`
    : "first reading: rates show from the next refresh (2 s or more later)";
  for (const s of r.series) {
    const tr = row(tbody, [s.name, r.measured ? s.perS.toFixed(2) : "–", r.measured ? s.delta : "–", s.total]);
    tr.dataset.series = s.name;
    for (const i of [1, 2, 3]) tr.children[i].className = "num";
  }
}

function pushed() {
  try { return JSON.parse(sessionStorage.getItem(PUSHED) || "{}"); } catch { return {}; }
}

function remember(uids, seqs) {
  const p = pushed();
  for (const u of uids) p[u] = [...seqs, ...(p[u] || [])].slice(0, 20);
  sessionStorage.setItem(PUSHED, JSON.stringify(p));
}

async function loadUser(uid) {
  const u = await api("/v1/console/user?uid=" + encodeURIComponent(uid));
  $("#user").hidden = false;
  $("#user").dataset.uid = u.uid;
  const ss = $("#user-sessions tbody");
  ss.replaceChildren();
  for (const s of u.sessions) {
    const kick = scopes.includes("kickout")
      ? button("Kick", async () => { await api("/v1/kickout", { uid: u.uid, sid: s.sid }); await loadUser(u.uid); }, { sid: s.sid })
      : el("span", "");
    row(ss, [s.platform, s.boatId, s.sid, when(s.sinceMs), kick]).dataset.sid = s.sid;
  }
  const off = $("#user-offline tbody");
  off.replaceChildren();
  for (const b of u.offline) row(off, [b.platform, b.count, b.newest.join(", ")]);
  const dev = $("#user-devices tbody");
  dev.replaceChildren();
  for (const d of u.devices) row(dev, [d.platform, d.provider, d.tokenSha256, d.appId, when(d.registeredAt)]);
  const seqs = [...new Set([...(pushed()[u.uid] || []), ...u.offline.flatMap((b) => b.newest)])].slice(0, 20);
  const del = $("#user-deliveries tbody");
  del.replaceChildren();
  for (const seq of seqs) {
    let d;
    try { d = await api("/v1/delivery", { seq, uid: u.uid }); } catch (err) {
      if (err.httpStatus === 404) { row(del, [seq, "", "no record", ""]); continue; }
      throw err;
    }
    for (const t of d.targets) {
      row(del, [seq, t.platform, el("span", t.state, "state-" + t.state), t.steps.map((s) => `${s.state}${s.boatId ? "@" + s.boatId : ""}`).join(" → ")]);
    }
  }
}

async function doPush() {
  clearTimeout(pollTimer);
  $("#push-seqs").textContent = "";
  $("#push-status tbody").replaceChildren();
  const kind = $("#push-kind").value;
  const targets = $("#push-targets").value.split(/[\s,]+/).filter(Boolean);
  const platforms = $("#push-platforms").value.split(/[\s,]+/).filter(Boolean);
  const bodies = [{ "@type": "type.googleapis.com/google.protobuf.StringValue", value: $("#push-body").value }];
  let opts = 0;
  if ($("#opt-ack").checked) opts |= 1;
  if ($("#opt-offline").checked) opts |= 2;
  if ($("#opt-receipts").checked) opts |= 8;
  let r;
  if (kind === "room") {
    r = await api("/v1/broadcast/room", { rooms: targets, msg_bodies: bodies });
  } else {
    r = await api("/v1/push", { uids: targets, platform_config: { platforms }, msg_bodies: bodies, msg_options: opts });
    remember(targets, r.seqs);
  }
  $("#push-seqs").textContent = "seqs: " + r.seqs.join(", ");
  $("#push-status tbody").replaceChildren();
  if (kind === "uids" && opts & 8) followDelivery(r.seqs);
}

// followDelivery polls the receipts of seqs until every target reached a
// final state, or for a minute.
function followDelivery(seqs) {
  clearTimeout(pollTimer);
  const end = Date.now() + 60000;
  const tick = async () => {
    const tbody = $("#push-status tbody");
    const rows = [];
    let done = true;
    for (const seq of seqs) {
      try {
        const d = await api("/v1/delivery", { seq });
        for (const t of d.targets) {
          rows.push([seq, t.uid, t.platform, t.state]);
          if (!TERMINAL.has(t.state)) done = false;
        }
      } catch (err) {
        if (err.httpStatus !== 404) { showError(err); return; }
        rows.push([seq, "", "", "waiting for a receipt"]);
        done = false;
      }
    }
    tbody.replaceChildren();
    for (const [seq, uid, platform, state] of rows) {
      const tr = row(tbody, [seq, uid, platform, el("span", state, "state-" + state)]);
      tr.dataset.state = state;
    }
    if (!done && Date.now() < end) pollTimer = setTimeout(tick, 500);
  };
  tick();
}

async function loadDLQ() {
  const uid = $("#dlq-uid").value.trim();
  const r = await api("/v1/dlq/list", uid ? { uid, limit: 100 } : { limit: 100 });
  $("#dlq-matched").textContent = `${r.matched} matching`;
  const tbody = $("#dlq tbody");
  tbody.replaceChildren();
  for (const d of r.records) {
    const actions = el("span");
    actions.append(
      button("Show", async () => { $("#dlq-record").textContent = JSON.stringify(await api("/v1/dlq/show", { seq: d.seq }), null, 2); }, { show: d.seq }),
      " ",
      button("Redrive", async () => {
        const res = await api("/v1/dlq/redrive", { seq: d.seq });
        $("#dlq-result").textContent = `redriven: ${res.redriven.map((x) => x.seq).join(", ") || "none"}; refused: ${res.refused.map((x) => `${x.seq} (${x.reason})`).join(", ") || "none"}`;
        await loadDLQ();
      }, { redrive: d.seq }),
    );
    row(tbody, [d.seq, d.uid, d.kind, d.platforms.join(","), d.attempts, d.redriveCount, d.lastError, when(d.deadAt), actions]).dataset.seq = d.seq;
  }
}

// ---- wiring ----

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", (e) => { e.preventDefault(); run(() => login($("#key").value.trim())); $("#key").value = ""; });
  $("#logout").addEventListener("click", logout);
  for (const b of document.querySelectorAll("#nav [data-page]")) b.addEventListener("click", () => show(b.dataset.page));
  $("#cluster-refresh").addEventListener("click", () => run(loadCluster));
  $("#user-form").addEventListener("submit", (e) => { e.preventDefault(); run(() => loadUser($("#uid").value.trim())); });
  $("#push-form").addEventListener("submit", (e) => { e.preventDefault(); run(doPush); });
  $("#dlq-form").addEventListener("submit", (e) => { e.preventDefault(); run(loadDLQ); });
  if (sessionStorage.getItem(KEY)) run(() => login(sessionStorage.getItem(KEY)));
});

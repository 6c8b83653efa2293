// wasmgate status page: polls /v1/status and renders it. No framework, no build step.
// Everything is inserted with textContent, never innerHTML. Formatting: format.js.
"use strict";

const REFRESH_MS = 2000;
const { el, count, ago, badge, yesno, short, num, ms, facts, card, pastError, version, vtext } = window.wg;

// Where the nodes run: "OpenVINOExecutionProvider 100% (5/5)" -> "OpenVINO 100%", else the
// provider list, "CPUExecutionProvider" -> "CPU"; placement and fallback notes on hover.
function provider(row) {
  const where = row.placement
    ? row.placement.replace(/ExecutionProvider/g, "").replace(/ \(\d+\/\d+\)/g, "")
    : row.provider.replace(/ExecutionProvider$/, "");
  const node = el("span", `${where || "–"}${row.precision ? ` · ${row.precision}` : ""}`, "text");
  node.title = [`${row.placement || row.provider} ${row.precision}`, row.notes]
    .filter(Boolean).join("\n");
  return node;
}

function sources(row) {
  const parts = Object.entries(row.sources || {}).map(([k, v]) => `${k} ${count(v)}`);
  return el("span", parts.join(", ") || "–", parts.length ? "text" : "muted");
}

function errors(n) {
  return n ? badge(count(n), "bad") : num("0");
}

// Column: [header, cell(row), numeric?, key for data-col]
const ADAPTER_COLUMNS = [
  ["Name", (r) => el("span", r.name, "text"), false, "name"],
  ["Bundle", (r) => el("span", r.bundle, "text"), false, "bundle"],
  ["Version", (r) => version(r.version), false, "version"],
  ["Ready", (r) => yesno(r.ready, true), false, "ready"],
  ["Requests", (r) => num(count(r.requests)), true, "requests"],
  ["Errors", (r) => errors(r.errors), true, "errors"],
  ["p50", (r) => num(ms(r.p50_ms)), true, "p50"],
  ["p99", (r) => num(ms(r.p99_ms)), true, "p99"],
  ["Sources", sources, false, "sources"],
];
const COLUMN = Object.fromEntries(ADAPTER_COLUMNS.map((c) => [c[3], c]));
// What an operator looks for first comes first: on a phone the rest scrolls into view.
const ADAPTER_ORDER = ["name", "ready", "requests", "errors", "p50", "p99", "sources", "bundle", "version"];
COLUMN["runs-on"] = ["Runs on", provider, false, "runs-on"];
COLUMN["adapter-calls"] = ["Adapter calls", (r) => num(count(r.adapter_calls)), true, "adapter-calls"];
const MODEL_ORDER = ["name", "ready", "requests", "adapter-calls", "errors", "p50", "p99", "runs-on",
  "sources", "bundle", "version"];
const ADAPTER_TABLE = ADAPTER_ORDER.map((k) => COLUMN[k]);
const MODEL_TABLE = MODEL_ORDER.map((k) => COLUMN[k]);

function renderTable(id, rows, columns, none) {
  const t = document.getElementById(id);
  const head = t.tHead.rows[0];
  if (!head.cells.length) columns.forEach(([h, , n]) => head.append(el("th", h, n ? "num" : undefined)));
  const body = t.tBodies[0];
  body.replaceChildren();
  if (rows.length === 0) {
    const td = el("td", none, "muted");
    td.colSpan = columns.length;
    body.insertRow().append(td);
    return;
  }
  for (const row of rows) {
    const tr = body.insertRow();
    tr.dataset.name = row.name;
    for (const [, cell, numeric, key] of columns) {
      const td = el("td", undefined, numeric ? "num" : undefined);
      td.dataset.col = key;
      td.append(cell(row));
      tr.append(td);
    }
  }
}

// What the Traffic section says when it has no chart: never "no requests yet" while the
// tables below count requests (the charts cover only the last minutes).
function trafficNote(box, total, windowS) {
  const text = total === 0 ? "no requests yet"
    : `no requests${windowS ? ` in the last ${window.wg.duration(windowS)}` : " sampled yet"}: `
      + `${count(total)} since the start (tables below)`;
  box.replaceChildren(el("p", text, "muted"));
}

function renderTraffic(history, total) {
  const box = document.getElementById("traffic");
  if (!history || history.t.length === 0) {
    trafficNote(box, total, 0);
    return;
  }
  const windowS = Math.max(history.interval_s * 12, -history.t[0] + history.interval_s);
  document.getElementById("window").textContent = `last ${window.wg.duration(windowS)}`;
  const names = Object.keys(history.series).filter(
    (n) => history.series[n].rps.some((v) => v > 0) || history.series[n].queue.some((v) => v > 0),
  );
  if (names.length === 0) {
    trafficNote(box, total, windowS);
    return;
  }
  box.replaceChildren(...names.map(
    (n) => window.wasmgateCharts.trafficCard(n, history.series[n], history.t, windowS),
  ));
}

// A staged candidate's metric gates next to what has been measured so far, so an operator
// sees why a candidate will be promoted or aborted before the window ends.
function gateFacts(staged) {
  const g = staged.gates;
  if (!g) return null;
  const m = staged.measured || {};
  const shown = (x) => (x === null || x === undefined ? "–" : String(x));
  const rows = [];
  if (g.min_requests !== null) rows.push(["requests", `${shown(m.requests)} (min ${g.min_requests})`]);
  if (g.max_error_share !== null) rows.push(["error share", `${shown(m.error_share)} (max ${g.max_error_share})`]);
  if (g.max_p99_ratio !== null) rows.push(["p99 ratio", `${shown(m.p99_ratio)} (max ${g.max_p99_ratio})`]);
  if (g.window_s !== null) rows.push(["window", window.wg.duration(g.window_s)]);
  return facts(rows);
}

// The last gate decision in one line, with the reasons it gave.
function verdictLine(v) {
  const why = v.reasons && v.reasons.length ? v.reasons.join("; ") : "all gates held";
  return `gates ${v.outcome === "abort" ? "aborted" : "promoted"} ${vtext(v.version)}: ${why}`;
}

function bundleCard(b, now) {
  const shown = version(b.version);
  shown.classList.add("muted");
  const c = card(b.name, shown);
  c.dataset.bundle = b.name;
  if (b.staged) {
    const pct = Number(b.staged.percent) || 0;
    c.append(el("div", `staged ${vtext(b.staged.version)}: ${pct}% of requests`, "muted"));
    const bar = el("div", undefined, "bar");
    const fill = el("span");
    fill.style.width = `${Math.max(0, Math.min(100, pct))}%`;
    bar.append(fill);
    c.append(bar);
    const gates = gateFacts(b.staged);
    if (gates) c.append(gates);
  }
  if (b.release) c.append(el("div", verdictLine(b.release), b.release.outcome === "abort" ? "error-line" : "muted"));
  c.append(facts([
    ["adapter", b.adapter || "–"],
    ["models", Object.keys(b.models || {}).join(", ") || "–"],
    ["installed", b.installed_at ? ago(b.installed_at, now) : undefined],
    ["digest", b.digest ? short(b.digest) : undefined],
    ["in flight", b.in_flight ? num(count(b.in_flight)) : undefined],
  ]));
  if (b.last_error) {
    // A failed install of this name: history (the version above serves).
    c.append(pastError(b.last_error.message, b.last_error.at, now, false));
  }
  return c;
}

function renderBundles(bundles, now) {
  const section = document.getElementById("bundles-section");
  const box = document.getElementById("bundles");
  section.hidden = !bundles;
  if (!bundles) return;
  box.replaceChildren();
  for (const b of bundles.serving || []) box.append(bundleCard(b, now));
  for (const f of bundles.failures || []) {
    const c = card(`refused: ${f.name || f.source}`, badge("refused", "bad"));
    c.append(facts([["source", f.source], ["when", ago(f.at, now)], ["reason", f.message]]));
    box.append(c);
  }
  if (!box.childElementCount) box.append(el("p", "no bundles installed", "muted"));
  renderRecent(bundles.recent || [], now);
}

// The last bundle changes, folded: one line until opened.
function renderRecent(recent, now) {
  const box = document.getElementById("recent");
  box.hidden = recent.length === 0;
  document.getElementById("recent-count").textContent = `(${recent.length})`;
  const list = document.getElementById("recent-list");
  list.replaceChildren();
  for (const e of recent.slice().reverse()) {
    const li = el("li", undefined, e.ok ? "" : "error-line");
    li.append(ago(e.at, now), ` · ${e.name || e.source} `);
    if (e.version) li.append(version(e.version));
    li.append(`: ${e.message}`);
    list.append(li);
  }
}

const ELSEWHERE = new Set(["bundles", "fleet", "paths", "cpus"]);

function renderComponents(components, now) {
  const box = document.getElementById("components");
  box.replaceChildren();
  const names = Object.keys(components).filter((n) => !ELSEWHERE.has(n));
  if (names.length === 0) box.append(el("p", "none reported", "muted"));
  for (const name of names) {
    const node = window.wgComponents.render(name, components[name] || {}, now);
    node.id = `component-${name}`;
    box.append(node);
  }
}

function renderBadges(components) {
  const box = document.getElementById("badges");
  box.replaceChildren();
  const client = components.mqtt && components.mqtt.client;
  if (client && "connected" in client) {
    // the same word as the MQTT card's badge: connected / disconnected
    const b = badge(client.connected ? "MQTT connected" : "MQTT disconnected", client.connected ? "ok" : "bad");
    b.id = "mqtt-badge";
    b.title = components.mqtt.broker || "";
    box.append(b);
  }
  const breaker = components.cloud && components.cloud.breaker && components.cloud.breaker.state;
  if (breaker) box.append(badge(`cloud breaker ${breaker.replace("_", "-")}`, breaker === "closed" ? "ok" : "bad"));
  const streams = (components.store && components.store.streams) || {};
  for (const [name, st] of Object.entries(streams)) {
    // One badge per store stream that holds or lost something: what waits for a link.
    const dropped = st.dropped_full + st.dropped_expired;
    if (!st.depth && !dropped) continue;
    const age = st.depth ? `, oldest ${window.wg.duration(st.oldest_age_s)}` : "";
    const lost = dropped ? `, ${count(dropped)} dropped` : "";
    box.append(badge(`store ${name}: ${count(st.depth)} waiting${age}${lost}`, dropped ? "bad" : "warn"));
  }
}

// The start-up loading (components.loading): the daemon listens before its bundles are
// loaded, so a long start shows how far it has come instead of an empty page.
function renderLoading(loading) {
  const line = document.getElementById("loading");
  line.hidden = !loading || loading.state === "done";
  if (line.hidden) return;
  const now = loading.loading.length ? `: ${loading.loading.join(", ")}` : "";
  const count = loading.state === "waiting" ? "…" : ` ${loading.loaded}/${loading.total}${now}`;
  line.textContent = `loading bundles${count} (${loading.elapsed_s} s)`;
}

function render(status) {
  const now = status.time || Date.now() / 1000;
  document.getElementById("version").textContent = `v${status.version}`;
  if (status.gateway) {  // several gateways' tabs tell apart
    document.getElementById("gateway").textContent = status.gateway;
    document.title = `${status.gateway} · wasmgate status`;
  }
  window.wgAttention.header(status);
  document.getElementById("uptime").textContent = `up ${window.wg.duration(status.uptime_s)}`;
  renderBadges(status.components);
  renderLoading(status.components.loading);
  renderTraffic(status.history, status.models.reduce((n, m) => n + m.requests, 0));
  const adapters = status.models.filter((m) => m.kind === "adapter");
  const models = status.models.filter((m) => m.kind !== "adapter");
  renderTable("adapters", adapters, ADAPTER_TABLE, "no adapters installed");
  renderTable("models", models, MODEL_TABLE, "no models installed");
  renderBundles(status.components.bundles, now);
  window.wgFleet.render(status, now);
  renderComponents(status.components, now);
  window.wgAttention.errors(status.errors, now);
  window.wgAttention.scrollHints();
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  document.getElementById("error").textContent = "";
  // Read by the headless-browser test: the page must never scroll sideways.
  const root = document.documentElement;
  document.body.dataset.hscroll = root.scrollWidth > root.clientWidth ? "yes" : "no";
  document.body.dataset.state = "loaded";
}

async function refresh() {
  try {
    const response = await fetch("/v1/status", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
  } catch (err) {
    document.getElementById("error").textContent = `status unavailable: ${err.message}`;
    document.body.dataset.state = "error";
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

refresh();

// wasmgate status page: polls /v1/status and renders it. No framework, no build step.
// Everything is inserted with textContent, never innerHTML.
"use strict";

const REFRESH_MS = 2000;
const COLUMNS = [
  "name", "kind", "version", "bundle", "provider", "precision", "ready",
  "requests", "errors", "p50_ms", "p99_ms", "last_ms", "sources",
];
const NUMERIC = new Set(["requests", "errors", "p50_ms", "p99_ms", "last_ms"]);
const GOOD = new Set(["closed", "connected", "ok", "serving", "true"]);
const BAD = new Set(["open", "disconnected", "failed", "error", "false"]);

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function cell(row, key) {
  const value = row[key];
  if (value === null || value === undefined || value === "") return "–";
  if (key.endsWith("_ms")) return value.toFixed(2);
  if (key === "ready") return value ? "yes" : "no";
  if (key === "sources") {
    return Object.entries(value).map(([k, v]) => `${k} ${v}`).join(", ") || "–";
  }
  return String(value);
}

function renderModels(models) {
  const body = document.querySelector("#models tbody");
  body.replaceChildren();
  if (models.length === 0) {
    const td = el("td", "no adapters or models installed", "muted");
    td.colSpan = COLUMNS.length;
    const tr = el("tr");
    tr.append(td);
    body.append(tr); // append() returns nothing: chaining it broke every page with no models
    return;
  }
  for (const row of models) {
    const tr = el("tr");
    tr.dataset.name = row.name;
    for (const key of COLUMNS) {
      tr.append(el("td", cell(row, key), NUMERIC.has(key) ? "num" : undefined));
    }
    body.append(tr);
  }
}

function renderTraffic(history) {
  const box = document.getElementById("traffic");
  if (!history || history.t.length === 0) return;
  const windowS = Math.max(history.interval_s * 12, -history.t[0] + history.interval_s);
  document.getElementById("window").textContent = `last ${Math.round(windowS / 60 * 10) / 10} min`;
  const names = Object.keys(history.series).filter(
    (n) => history.series[n].rps.some((v) => v > 0) || history.series[n].queue.some((v) => v > 0),
  );
  if (names.length === 0) return;
  box.replaceChildren(...names.map(
    (n) => window.wasmgateCharts.trafficCard(n, history.series[n], history.t, windowS),
  ));
}

// A value as text, a state badge, or a nested list: never raw JSON on the page.
function value(v) {
  if (v === null || v === undefined) return el("span", "–", "muted");
  if (Array.isArray(v)) {
    if (v.every((x) => typeof x !== "object" || x === null)) return el("span", v.join(", ") || "–");
    const list = el("div");
    v.forEach((item) => list.append(value(item)));
    return list;
  }
  if (typeof v === "object") {
    const dl = el("dl");
    for (const [k, x] of Object.entries(v)) {
      const dd = el("dd");
      dd.append(value(x));
      dl.append(el("dt", k), dd);
    }
    return dl;
  }
  const text = String(v);
  if (GOOD.has(text) || BAD.has(text)) return el("span", text, `badge ${GOOD.has(text) ? "ok" : "bad"}`);
  return el("span", text);
}

function card(title, body, id) {
  const node = el("div", undefined, "card");
  if (id) node.id = id;
  node.append(el("h3", title));
  node.append(value(body));
  return node;
}

// A staged candidate's metric gates next to what has been measured so far, so an operator
// sees why a candidate will be promoted or aborted before the window ends.
function gateFacts(staged) {
  const g = staged.gates;
  if (!g) return null;
  const m = staged.measured || {};
  const shown = (x) => (x === null || x === undefined ? "–" : String(x));
  const facts = {};
  if (g.min_requests !== null) facts.requests = `${shown(m.requests)} (min ${g.min_requests})`;
  if (g.max_error_share !== null) facts["error share"] = `${shown(m.error_share)} (max ${g.max_error_share})`;
  if (g.max_p99_ratio !== null) facts["p99 ratio"] = `${shown(m.p99_ratio)} (max ${g.max_p99_ratio})`;
  if (g.window_s !== null) facts.window = `${g.window_s} s`;
  return facts;
}

// The last gate decision in one line, with the reasons it gave.
function verdictLine(v) {
  const why = v.reasons && v.reasons.length ? v.reasons.join("; ") : "all gates held";
  return `gates ${v.outcome === "abort" ? "aborted" : "promoted"} v${v.version}: ${why}`;
}

function renderBundles(bundles) {
  const section = document.getElementById("bundles-section");
  const box = document.getElementById("bundles");
  section.hidden = !bundles;
  if (!bundles) return;
  box.replaceChildren();
  for (const b of bundles.serving || []) {
    const c = el("div", undefined, "card");
    c.dataset.bundle = b.name;
    c.append(el("h3", `${b.name} v${b.version}`));
    if (b.staged) {
      const pct = Number(b.staged.percent) || 0;
      c.append(el("div", `staged v${b.staged.version}: ${pct}% of requests`, "muted"));
      const bar = el("div", undefined, "bar");
      const fill = el("span");
      fill.style.width = `${Math.max(0, Math.min(100, pct))}%`;
      bar.append(fill);
      c.append(bar);
      const gates = gateFacts(b.staged);
      if (gates) c.append(value(gates));
    }
    if (b.release) c.append(el("div", verdictLine(b.release), b.release.outcome === "abort" ? "bad" : "muted"));
    const facts = { adapter: b.adapter, models: Object.keys(b.models || {}).join(", ") };
    if (b.last_error) facts["last error"] = b.last_error.message;
    c.append(value(facts));
    box.append(c);
  }
  for (const f of bundles.failures || []) {
    box.append(card(`refused: ${f.name || f.source}`, { source: f.source, reason: f.message }));
  }
  if (!box.childElementCount) box.append(el("p", "no bundles installed", "muted"));
}

function renderComponents(components) {
  const box = document.getElementById("components");
  box.replaceChildren();
  const names = Object.keys(components).filter((n) => n !== "bundles" && !isFleet(n));
  if (names.length === 0) box.append(el("p", "none reported", "muted"));
  for (const name of names) box.append(card(name, components[name], `component-${name}`));
}

function isFleet(name) {
  return name === "fleet";
}

// The deployment report (components.fleet): the document's serial and state, why it
// waits or failed, the last refused document, and one row per bundle with its state.
function fleetCard(report) {
  const c = el("div", undefined, "card");
  c.id = "fleet-report";
  c.append(el("h3", `serial ${report.serial === null ? "–" : report.serial}`));
  c.append(value({ state: report.state || "no document", groups: report.groups, reason: report.reason }));
  if (report.refused) {
    c.append(el("div", `refused ${report.refused.serial ?? ""}: ${report.refused.error}`, "bad"));
  }
  const table = el("table");
  table.append(el("tr"));
  ["bundle", "version", "state", "error"].forEach((h) => table.rows[0].append(el("th", h)));
  for (const [name, b] of Object.entries(report.bundles || {})) {
    const row = table.insertRow();
    row.dataset.name = name;
    const pct = b.staged_percent ? ` (${b.staged_percent}%)` : "";
    const down = b.downgraded_from ? ` (down from v${b.downgraded_from})` : "";
    [name, `v${b.version}${pct}${down}`].forEach((t) => row.append(el("td", t)));
    const state = el("td");
    state.append(el("span", b.state, `badge ${FLEET_GOOD.has(b.state) ? "ok" : b.state === "failed" ? "bad" : ""}`));
    row.append(state, el("td", b.error || "–"));
  }
  c.append(table);
  return c;
}

const FLEET_GOOD = new Set(["applied", "local"]);

function renderFleet(status) {
  const report = status.components.fleet;
  const section = document.getElementById("fleet-section");
  section.hidden = !report || (report.serial === null && !report.refused);
  if (section.hidden) return;
  document.getElementById("fleet").replaceChildren(fleetCard(report));
}

function renderBadges(components) {
  const box = document.getElementById("badges");
  box.replaceChildren();
  const breaker = components.cloud && components.cloud.breaker && components.cloud.breaker.state;
  if (breaker) box.append(el("span", `cloud breaker ${breaker}`, `badge ${breaker === "closed" ? "ok" : "bad"}`));
  if (components.mqtt && "connected" in components.mqtt) {
    const up = components.mqtt.connected;
    box.append(el("span", up ? "mqtt connected" : "mqtt down", `badge ${up ? "ok" : "bad"}`));
  }
  const streams = (components.store && components.store.streams) || {};
  for (const [name, st] of Object.entries(streams)) {
    // One line per store stream that holds or lost something: what waits for a link.
    const dropped = st.dropped_full + st.dropped_expired;
    if (!st.depth && !dropped) continue;
    const age = st.depth ? `, oldest ${Math.round(st.oldest_age_s)} s` : "";
    const lost = dropped ? `, ${dropped} dropped` : "";
    box.append(el("span", `store ${name}: ${st.depth} waiting${age}${lost}`, `badge ${dropped ? "bad" : ""}`));
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
  document.getElementById("version").textContent = `v${status.version}`;
  const ready = document.getElementById("ready");
  ready.textContent = status.ready ? "ready" : "not ready";
  ready.className = `badge ${status.ready ? "ok" : "bad"}`;
  document.getElementById("uptime").textContent = `up ${Math.round(status.uptime_s)} s`;
  renderBadges(status.components);
  renderLoading(status.components.loading);
  renderTraffic(status.history);
  renderModels(status.models);
  renderBundles(status.components.bundles);
  renderFleet(status);
  renderComponents(status.components);
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

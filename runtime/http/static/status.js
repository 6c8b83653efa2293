// wasmgate status page: polls /v1/status and renders it. No framework, no build step.
// Everything is inserted with textContent, never innerHTML.
"use strict";

const REFRESH_MS = 2000;
const COLUMNS = [
  "name", "kind", "version", "bundle", "provider", "precision", "ready",
  "requests", "errors", "p50_ms", "p99_ms", "last_ms", "sources",
];
const NUMERIC = new Set(["requests", "errors", "p50_ms", "p99_ms", "last_ms"]);

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
    body.append(el("tr")).append(td);
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

function renderComponents(components) {
  const box = document.getElementById("components");
  box.replaceChildren();
  const names = Object.keys(components);
  if (names.length === 0) {
    box.append(el("p", "none reported", "muted"));
    return;
  }
  for (const name of names) {
    const card = el("div", undefined, "card");
    card.id = `component-${name}`;
    card.append(el("h3", name));
    const list = el("dl");
    for (const [key, value] of Object.entries(components[name])) {
      list.append(el("dt", key), el("dd", typeof value === "object" ? JSON.stringify(value) : String(value)));
    }
    card.append(list);
    box.append(card);
  }
}

function render(status) {
  document.getElementById("version").textContent = `v${status.version}`;
  const ready = document.getElementById("ready");
  ready.textContent = status.ready ? "ready" : "not ready";
  ready.className = `badge ${status.ready ? "ok" : "bad"}`;
  document.getElementById("uptime").textContent = `up ${Math.round(status.uptime_s)} s`;
  renderModels(status.models);
  renderComponents(status.components);
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  document.getElementById("error").textContent = "";
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

// wasmgate status page: small hand-written SVG line charts (no library, no network).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const CHART_W = 300;
const CHART_H = 56;

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

// One chart over the history window. `lines`: [{values, cls}], values aligned with `t`
// (seconds before now, negative); nulls leave gaps. Returns {svg, max}.
function lineChart(t, windowS, lines) {
  const values = lines.flatMap((l) => l.values.filter((v) => v !== null && Number.isFinite(v)));
  const max = Math.max(1e-9, ...values);
  const svg = svgEl("svg", {
    class: "chart", viewBox: `0 0 ${CHART_W} ${CHART_H}`, preserveAspectRatio: "none",
    role: "img",
  });
  const x = (s) => CHART_W * (1 + s / windowS);
  const y = (v) => CHART_H - 3 - (CHART_H - 6) * (v / max);
  for (const line of lines) {
    let run = [];
    const dots = line.values.length <= 30; // sparse history: every point visible
    const flush = () => {
      if (run.length > 1) {
        svg.append(svgEl("polyline", { class: line.cls, points: run.join(" ") }));
      }
      if (dots || run.length === 1) {
        // A dot is a zero-length line with round caps and a non-scaling stroke: it stays
        // round and the same size however the chart is stretched (a circle would not).
        for (const point of run) {
          const [cx, cy] = point.split(",");
          svg.append(svgEl("polyline", { class: `${line.cls} dot`, points: `${cx},${cy} ${cx},${cy}` }));
        }
      }
      run = [];
    };
    line.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) { flush(); return; }
      run.push(`${x(t[i]).toFixed(1)},${y(v).toFixed(1)}`);
    });
    flush();
  }
  return { svg, max };
}

function last(values) {
  for (let i = values.length - 1; i >= 0; i -= 1) if (values[i] !== null) return values[i];
  return null;
}

function fmt(v, digits = 1) {
  return v === null || v === undefined ? "–" : Number(v).toFixed(digits);
}

// A card for one adapter/model: req/s, latency p50/p99, errors/fallback %.
function trafficCard(name, series, t, windowS) {
  const card = document.createElement("div");
  card.className = "card";
  card.dataset.chart = name;
  const title = document.createElement("h3");
  title.append(name);
  const kind = document.createElement("span");
  kind.className = "muted";
  kind.textContent = series.kind;
  title.append(kind);
  card.append(title);
  // Short labels and values: on a phone the three charts stand side by side.
  const rows = [
    ["req/s", [{ values: series.rps, cls: "s1" }], fmt(last(series.rps), 2)],
    ["p50 · p99 ms", [{ values: series.p50_ms, cls: "s1" }, { values: series.p99_ms, cls: "s2" }],
      `${fmt(last(series.p50_ms), 2)} · ${fmt(last(series.p99_ms), 2)}`],
    ["err · fallback %", [{ values: series.error_pct, cls: "s3" },
      { values: series.fallback_pct, cls: "s4" }],
    `${fmt(last(series.error_pct))} · ${fmt(last(series.fallback_pct))}`],
  ];
  for (const [label, lines, now] of rows) {
    const head = document.createElement("div");
    head.className = "chart-label";
    const { svg, max } = lineChart(t, windowS, lines);
    svg.setAttribute("aria-label", `${label}, scale 0 to ${fmt(max, 2)}`);
    const left = document.createElement("span");
    left.textContent = label;
    const scale = document.createElement("span");
    scale.className = "chart-scale";
    scale.textContent = ` (max ${fmt(max, 2)})`;
    left.append(scale);
    const right = document.createElement("span");
    right.className = "num";
    right.textContent = now;
    head.append(left, right);
    const row = document.createElement("div");
    row.className = "chart-row";
    row.append(head, svg);
    card.append(row);
  }
  const extra = document.createElement("div");
  extra.className = "chart-label chart-extra";
  // A mean of whole batch sizes: "1", "1.5", never "1.0".
  const { count } = window.wg;
  extra.textContent = `batch size ${count(last(series.batch))} · queue ${count(last(series.queue))}`;
  card.append(extra);
  return card;
}

window.wasmgateCharts = { trafficCard, lineChart };

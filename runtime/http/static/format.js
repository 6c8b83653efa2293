// wasmgate status page: every value formatted for a person, and the small DOM builders the
// other scripts share. Nothing is inserted as HTML: text goes through textContent.
"use strict";

(() => {
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function missing(v) {
    return v === null || v === undefined || v === "";
  }

  // 11883 -> "11,883"; 0.123456 -> "0.12". Never a raw long number.
  function count(n) {
    if (missing(n)) return "–";
    const v = Number(n);
    if (!Number.isFinite(v)) return String(n);
    const digits = Number.isInteger(v) ? 0 : Math.abs(v) < 10 ? 2 : 1;
    return v.toLocaleString("en-US", { maximumFractionDigits: digits });
  }

  // 67108864 -> "64 MiB"; 1536 -> "1.5 KiB".
  function bytes(n) {
    if (missing(n)) return "–";
    let v = Number(n);
    let unit = 0;
    while (Math.abs(v) >= 1024 && unit < UNITS.length - 1) {
      v /= 1024;
      unit += 1;
    }
    const shown = unit === 0 || Number.isInteger(v) || v >= 100 ? Math.round(v) : v.toFixed(1);
    return `${shown} ${UNITS[unit]}`;
  }

  // Seconds -> "350 ms", "4.2 s", "12 min", "3 h 5 min", "7 d".
  function duration(s) {
    if (missing(s)) return "–";
    const v = Math.abs(Number(s));
    if (v < 1) return `${Math.round(v * 1000)} ms`;
    if (v < 10) return `${Number(v.toFixed(1))} s`;
    if (v < 60) return `${Math.round(v)} s`;
    if (v < 600) {  // under 10 min the seconds still matter
      const whole = Math.round(v);
      const rest = whole % 60;
      return rest ? `${Math.floor(whole / 60)} min ${rest} s` : `${whole / 60} min`;
    }
    if (v < 3600) return `${Math.round(v / 60)} min`;
    const h = Math.floor(v / 3600);
    const restMin = Math.round((v - h * 3600) / 60);
    if (v < 86400) return restMin ? `${h} h ${restMin} min` : `${h} h`;
    const d = Math.floor(v / 86400);
    const restH = Math.round((v - d * 86400) / 3600);
    return restH ? `${d} d ${restH} h` : `${d} d`;
  }

  // Milliseconds of a latency: "0.95 ms", "12.4 ms", "1.2 s".
  function ms(v) {
    if (missing(v)) return "–";
    const x = Number(v);
    if (x >= 1000) return duration(x / 1000);
    return `${x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : Math.round(x)} ms`;
  }

  // POSIX seconds or an ISO string -> Date (null if neither).
  function toDate(at) {
    if (missing(at)) return null;
    const d = typeof at === "number" ? new Date(at * 1000) : new Date(String(at));
    return Number.isNaN(d.getTime()) ? null : d;
  }

  // "3 min ago" measured on the daemon's clock (`now`: its POSIX time), the exact time on
  // hover (title): local time and UTC.
  function ago(at, now) {
    const d = toDate(at);
    if (d === null) return el("span", "–", "muted");
    const diff = now - d.getTime() / 1000;
    let text;
    if (Math.abs(diff) < 5) text = "just now";
    else if (diff > 0) text = `${duration(diff)} ago`;
    else text = `in ${duration(-diff)}`;
    const node = el("time", text, "when");
    node.dateTime = d.toISOString();
    node.title = `${d.toLocaleString()} (${d.toISOString().replace(".000Z", "Z")})`;
    return node;
  }

  // A badge readable in every state: "ok" green, "bad" red, "warn" amber, "" neutral grey.
  function badge(text, kind) {
    return el("span", text, `badge${kind ? ` ${kind}` : ""}`);
  }

  // A boolean as a word: yes/no. `good`: which value is the healthy one (null: neither).
  function yesno(v, good = null) {
    const kind = good === null ? "" : v === good ? "ok" : "bad";
    return badge(v ? "yes" : "no", kind);
  }

  // A long identifier (digest) shortened, the whole of it on hover.
  function short(id, keep = 12) {
    if (missing(id)) return el("span", "–", "muted");
    const text = String(id).replace(/^sha256:/, "");
    const node = el("code", text.length > keep ? `${text.slice(0, keep)}…` : text, "ident");
    node.title = String(id);
    return node;
  }

  // A version or serial that is a timestamp (the demo's bundle versions are their build
  // time in seconds, a rollout's serials its time in ms) as the date it is, in UTC; the
  // number itself on hover. Any other version as "v7".
  function stamp(v) {
    const n = Number(v);
    if (!Number.isInteger(n)) return null;
    const ms = n >= 1e9 && n < 4e9 ? n * 1000 : n >= 1e12 && n < 4e12 ? n : null;
    return ms === null ? null : new Date(ms).toISOString().slice(0, 16).replace("T", " ");
  }

  function version(v, what = "version") {
    if (missing(v)) return el("span", "–", "muted");
    const date = stamp(v);
    const plain = what === "version" ? `v${v}` : String(v);
    const node = el("span", date === null ? plain : `${date} UTC`, "ident");
    if (date !== null) node.title = `${what} ${v}: a timestamp, shown as its date (UTC)`;
    return node;
  }

  // A version / a fleet serial as text: its date when it is a timestamp, else "v7" / "7".
  function vtext(v) {
    const date = stamp(v);
    return date === null ? `v${v}` : `${date} UTC`;
  }

  function stext(v) {
    const date = stamp(v);
    return date === null ? String(v) : `${date} UTC`;
  }

  function num(text) {
    return el("span", text, "num");
  }

  // A node for a plain value whose meaning only its key tells (generic sections).
  function byKey(key, v, now) {
    if (missing(v)) return el("span", "–", "muted");
    if (typeof v === "boolean") return yesno(v);
    const k = key.toLowerCase();
    if (k === "at" || k === "since" || k === "time" || k.endsWith("_at") || k.endsWith("_time")
      || k.endsWith("_floor")) return ago(v, now);
    if (typeof v === "number") {
      if (k.includes("bytes")) return num(bytes(v));
      if (k.endsWith("_s")) return num(duration(v));
      if (k.endsWith("_ms")) return num(ms(v));
      return num(count(v));
    }
    if (k === "digest" || k.endsWith("sha256")) return short(v);
    return el("span", String(v), "text");
  }

  function label(key) {
    return key.replace(/_s$/, "").replace(/_/g, " ");
  }

  // Labelled values: [[label, node or text], ...] -> <dl class="facts">, one <div> per pair
  // so that a label never ends a line without its value. Undefined values are left out.
  function facts(rows) {
    const dl = el("dl", undefined, "facts");
    for (const [name, value] of rows) {
      if (value === undefined) continue;
      const pair = el("div", undefined, "pair");
      const dd = el("dd");
      dd.append(value instanceof Node ? value : el("span", String(value), "text"));
      pair.append(el("dt", name), dd);
      dl.append(pair);
    }
    return dl;
  }

  // A small table: header labels, rows of nodes/text; scrolls inside its card when wide.
  function table(headers, rows, numeric = new Set()) {
    const wrap = el("div", undefined, "table-wrap");
    const t = el("table");
    const head = t.createTHead().insertRow();
    headers.forEach((h, i) => head.append(el("th", h, numeric.has(i) ? "num" : undefined)));
    const body = t.createTBody();
    for (const row of rows) {
      const tr = body.insertRow();
      row.forEach((v, i) => {
        const td = el("td", undefined, numeric.has(i) ? "num" : undefined);
        td.append(v instanceof Node ? v : String(v));
        tr.append(td);
      });
    }
    wrap.append(t);
    return wrap;
  }

  // A past error: only with its time; as history (muted) once `current` is false.
  function pastError(message, at, now, current) {
    if (missing(message)) return null;
    const line = el("div", undefined, current ? "error-line" : "history");
    line.append(current ? "error " : "last error ");
    if (at !== null && at !== undefined) line.append(ago(at, now));
    else line.append(el("span", "(time unknown)", "muted"));
    line.append(`: ${message}`);
    return line;
  }

  function card(title, extra) {
    const node = el("div", undefined, "card");
    const h = el("h3");
    h.append(el("span", title, "title"));
    if (extra) h.append(extra);
    node.append(h);
    return node;
  }

  window.wg = {
    el, missing, count, bytes, duration, ms, ago, badge, yesno, short, num, byKey, label,
    facts, table, pastError, card, toDate, version, stamp, vtext, stext,
  };
})();

// wasmgate status page: one card per component section of /v1/status (`components`).
// Known sections get their own layout; any other is laid out by `generic`: labelled values,
// nested maps of maps as a table. Never a raw JSON or key-value dump.
"use strict";

(() => {
  const { el, count, bytes, duration, ago, badge, yesno, num, byKey, label, facts, table,
    pastError, card, missing } = window.wg;

  const TIME_KEY = /(^at$|^since$|^time$|_at$)/;

  function isPlain(v) {
    return v === null || typeof v !== "object";
  }

  // An object whose values are all objects of plain values: a table (rows = keys).
  function asTable(obj, now) {
    const rows = Object.entries(obj);
    const cols = [...new Set(rows.flatMap(([, v]) => Object.keys(v)))];
    const numeric = new Set();
    cols.forEach((c, i) => {
      if (rows.every(([, v]) => typeof v[c] === "number" && !TIME_KEY.test(c))) numeric.add(i + 1);
    });
    return table(["", ...cols.map(label)],
      rows.map(([k, v]) => [el("span", k, "text"), ...cols.map((c) => byKey(c, v[c], now))]),
      numeric);
  }

  function listValue(key, arr, now) {
    if (arr.every(isPlain)) return el("span", arr.length ? arr.map(String).join(", ") : "–", "text");
    const obj = {};
    arr.forEach((item, i) => { obj[String(i + 1)] = item; });
    return asTable(obj, now);
  }

  // Nested maps as "parent child" rows, however deep; a list of maps as its length.
  function flatten(prefix, obj, rows, now) {
    for (const [k, x] of Object.entries(obj)) {
      const name = `${prefix} ${label(k)}`;
      if (Array.isArray(x)) rows.push([name, x.every(isPlain) ? listValue(k, x, now) : num(`${count(x.length)} items`)]);
      else if (isPlain(x)) rows.push([name, byKey(k, x, now)]);
      else flatten(name, x, rows, now);
    }
  }

  // Any section: plain values as labelled values, maps as "parent key" rows or a table.
  // Titles of the sections without a layout of their own; any other key is capitalised.
  const TITLES = { loading: "Start-up loading", grpc: "gRPC" };

  function generic(name, doc, now) {
    const words = label(name);
    const c = card(TITLES[name] || words.charAt(0).toUpperCase() + words.slice(1));
    if (Object.keys(doc).length === 1 && typeof doc.error === "string") {
      c.append(el("div", `unavailable: ${doc.error}`, "error-line"));
      return c;
    }
    const rows = [];
    const blocks = [];
    for (const [key, v] of Object.entries(doc)) {
      if (key === "last_error" || key.endsWith("_at") && doc[key.slice(0, -3)] !== undefined) continue;
      if (Array.isArray(v)) rows.push([label(key), listValue(key, v, now)]);
      else if (isPlain(v)) rows.push([label(key), byKey(key, v, now)]);
      else if (Object.values(v).length && Object.values(v).every((x) => x && !isPlain(x) && !Array.isArray(x)
        && Object.values(x).every(isPlain))) {
        blocks.push(el("div", label(key), "sub"), asTable(v, now));
      } else {
        flatten(label(key), v, rows, now);
      }
    }
    c.append(facts(rows), ...blocks);
    const err = pastError(doc.last_error, doc.last_error_at, now, true);
    if (err) c.append(err);
    return c;
  }

  function mqtt(doc, now) {
    const client = doc.client || {};
    const up = Boolean(client.connected);
    const c = card("MQTT", badge(up ? "connected" : "disconnected", up ? "ok" : "bad"));
    const state = el("span");
    if (up) state.append("connected ", ago(client.since, now));
    else if (client.connects) state.append("lost ", ago(client.since, now));
    else state.append("never connected yet");
    const main = [
      ["broker", el("span", doc.broker, "ident")],
      ["state", state],
      ["gateway", doc.gateway],
      ["session kept", yesno(Boolean(client.session_present))],
      ["connects", num(`${count(client.connects)} (${count(client.disconnects)} lost)`)],
      ["requests", num(`${count(doc.received)} received · ${count(doc.answered)} answered`)],
      ["errors", num(count(doc.errors))],
      ["in flight", num(count(doc.in_flight))],
    ];
    const optional = ["duplicates", "redelivered", "expired", "busy_retries", "retained_ignored",
      "replies_refused", "stored", "resent"];
    for (const key of optional) {
      const v = key === "resent" ? client.resent : doc[key];
      if (v) main.push([label(key), num(count(v))]);
    }
    const statuses = Object.entries(doc.by_status || {});
    if (statuses.length) main.push(["by status", statuses.map(([s, n]) => `${s}: ${count(n)}`).join(", ")]);
    c.append(facts(main));
    // Entries kept while the broker was away: a table only while some wait or failed.
    const drain = Object.entries(doc.drain || {});
    if (drain.some(([, d]) => d.in_flight || d.failed)) {
      c.append(el("div", "stored entries sent", "sub"), asTable(doc.drain, now));
    } else if (drain.some(([, d]) => d.sent)) {
      const sent = drain.filter(([, d]) => d.sent).map(([k, d]) => `${k} ${count(d.delivered)}`);
      c.append(facts([["stored entries delivered", num(sent.join(", "))]]));
    }
    const err = pastError(client.last_error, client.last_error_at, now, !up);
    if (err) c.append(err);
    return c;
  }

  function limit(st) {
    return `${bytes(st.max_bytes)} · ${st.max_age_s ? duration(st.max_age_s) : "no age limit"}`;
  }

  function store(doc) {
    const c = card("Store (undelivered)");
    const streams = Object.entries(doc.streams || {});
    const limits = new Set(streams.map(([, st]) => limit(st)));
    const perStream = limits.size > 1;
    const rows = streams.map(([name, st]) => {
      const dropped = st.dropped_full + st.dropped_expired;
      const row = [
        el("span", name, "text"), num(count(st.depth)), num(bytes(st.bytes)),
        st.depth ? num(duration(st.oldest_age_s)) : el("span", "–", "muted"),
        dropped ? badge(count(dropped), "bad") : num("0"),
      ];
      return perStream ? [...row, num(limit(st))] : row;
    });
    const headers = ["stream", "waiting", "size", "oldest", "dropped"];
    const idle = streams.every(([, st]) => !st.depth && !st.dropped_full && !st.dropped_expired);
    // Empty and nothing lost: one line says it; a table only when something waits.
    if (idle) c.append(facts([["waiting", "nothing"], ["streams", streams.map(([n]) => n).join(", ")]]));
    else c.append(table(perStream ? [...headers, "limit"] : headers, rows, new Set([1, 2, 3, 4, 5])));
    if (!perStream && limits.size) c.append(facts([["limit per stream", num([...limits][0])]]));
    const file = el("div", doc.path, "path muted");
    file.title = doc.path;
    c.append(file);
    return c;
  }

  function trust(doc, now) {
    const c = card("Trust");
    c.append(facts([
      ["trust version", num(count(doc.version))],
      ["root-signed", yesno(Boolean(doc.root_signed))],
      ["clock floor", ago(doc.clock_floor, now)],
    ]));
    return c;
  }

  function variables(doc, now) {
    const c = card("Variables");
    const bundles = Object.entries(doc.bundles || {});
    const wrap = table(["name", "value", "range"], [], new Set([1, 2]));
    const body = wrap.querySelector("tbody");
    for (const [bundle, vars] of bundles) {
      const group = el("th", bundle, "group");
      group.colSpan = 3;
      body.insertRow().append(group);
      for (const [name, v] of Object.entries(vars)) {
        const tr = body.insertRow();
        const nameCell = el("td", name);
        if (v.description) nameCell.title = v.description;
        const value = el("td", undefined, "num");
        // Where the value comes from, unless it is the signed default.
        value.append(String(v.value), v.source === "default" ? "" : " ", v.source === "default" ? "" : badge(v.source, "warn"));
        const range = missing(v.min) && missing(v.max) ? "–" : `${count(v.min)} – ${count(v.max)}`;
        tr.append(nameCell, value, el("td", range, "num"));
      }
    }
    if (bundles.length) c.append(wrap);
    else c.append(el("div", "no bundle declares variables", "muted"));
    const err = pastError(doc.last_refusal, doc.last_refusal_at, now, false);
    if (err) c.append(err);
    return c;
  }

  function samples(doc) {
    const c = card("Samples for retraining");
    const skipped = Object.entries(doc.skipped || {}).filter(([, n]) => n);
    c.append(facts([
      ["kept", num(count(doc.kept))],
      ["skipped", skipped.length ? skipped.map(([k, n]) => `${count(n)} (${k})`).join(", ") : num("0")],
    ]));
    return c;
  }

  function cloud(doc, now) {
    const b = doc.breaker || {};
    const c = card("Cloud fallback", badge(`breaker ${String(b.state || "?").replace("_", "-")}`,
      b.state === "closed" ? "ok" : "bad"));
    c.append(facts([
      ["endpoint", doc.url],
      ["requests", num(`${count(doc.requests)} (${count(doc.failures)} failed)`)],
      ["in flight", num(count(doc.in_flight))],
      ["breaker opened", num(`${count(b.opens)} times`)],
      ["rejected", num(count(b.rejected))],
      ["retry in", b.retry_in_s ? num(duration(b.retry_in_s)) : undefined],
    ]));
    const err = pastError(doc.last_error, doc.last_error_at, now, b.state !== "closed");
    if (err) c.append(err);
    return c;
  }

  // Data-plane worker processes ([workers] count > 1): one row each, the bad ones marked.
  const WORKER_STATE = { serving: "ok", starting: "warn", restarting: "warn", crashing: "bad" };

  function workers(doc) {
    const list = doc.workers || [];
    const down = list.filter((w) => w.state !== "serving").length;
    const c = card("Workers", badge(down ? `${down} of ${list.length} not serving` : `${list.length} serving`,
      down ? "warn" : "ok"));
    c.append(facts([["why", doc.why]]));
    c.append(table(["worker", "state", "pid", "up", "restarts", "last exit"],
      list.map((w) => [num(String(w.index)), badge(w.state, WORKER_STATE[w.state] || "warn"),
        el("span", w.pid === null ? "–" : String(w.pid), "ident"),
        num(w.pid === null ? "–" : duration(w.uptime_s)),
        num(count(w.restarts)), el("span", w.last_exit || "–", "text")]),
      new Set([0, 3, 4])));
    return c;
  }

  const KNOWN = { mqtt, store, trust, variables, samples, cloud, workers };

  window.wgComponents = {
    render(name, doc, now) {
      if (doc && Object.keys(doc).length === 1 && typeof doc.error === "string") return generic(name, doc, now);
      return (KNOWN[name] || ((d, n) => generic(name, d, n)))(doc, now);
    },
  };
})();

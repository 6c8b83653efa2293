// wasmgate status page: what needs an operator's attention (the header), the recent failed
// requests, and the hint on tables wider than their card. Text only via textContent.
"use strict";

(() => {
  const { el, count, ago, badge } = window.wg;

  // Header: "ready" is green only when nothing needs attention (/v1/status `attention`);
  // each problem but MQTT's (it has its own badge) gets a red badge, its whole text on hover.
  const SHORT = {
    bundles: (a) => a.message.split(":")[0],
    fleet: () => "fleet rollout failed",
  };

  function header(status) {
    const attention = status.attention || [];
    const ready = document.getElementById("ready");
    ready.textContent = status.ready ? "ready" : "not ready";
    ready.className = `badge ${!status.ready ? "bad" : attention.length ? "warn" : "ok"}`;
    ready.title = attention.map((a) => a.message).join("\n");
    const box = document.getElementById("attention");
    box.replaceChildren();
    for (const a of attention) {
      if (!SHORT[a.what]) continue;
      const b = badge(SHORT[a.what](a), "bad");
      b.id = `attention-${a.what}`;
      b.title = a.message;
      box.append(b);
    }
  }

  // The last failed requests, newest first: when, transport, name, status and the message
  // the client got (never its payload: the daemon keeps none).
  const SHOWN = 10;

  function errors(doc, now) {
    const section = document.getElementById("errors-section");
    const recent = (doc && doc.recent) || [];
    section.hidden = recent.length === 0;
    if (section.hidden) return;
    const shown = recent.slice(-SHOWN).reverse();
    document.getElementById("errors-count").textContent =
      `(${count(shown.length)} newest of ${count(doc.total)} since the start)`;
    const list = document.getElementById("errors-list");
    list.replaceChildren();
    for (const e of shown) {
      const li = el("li");
      li.dataset.status = String(e.status);
      li.append(ago(e.at, now), ` · ${e.transport} · ${e.kind} `, el("span", e.name, "ident"), " ");
      li.append(badge(`${e.status} ${e.code}`, e.status >= 500 ? "bad" : "warn"), ` ${e.message}`);
      list.append(li);
    }
  }

  // A table wider than its card scrolls inside it (the page never does): say so under it,
  // so a phone's reader knows the columns past the edge are there.
  function scrollHints() {
    for (const wrap of document.querySelectorAll(".table-wrap")) {
      const wide = wrap.scrollWidth > wrap.clientWidth + 1;
      let hint = wrap.nextElementSibling;
      if (!hint || !hint.classList.contains("scroll-hint")) {
        hint = el("div", "more columns: scroll the table sideways →", "scroll-hint");
        wrap.after(hint);
      }
      hint.hidden = !wide;
      wrap.classList.toggle("scrolls", wide);
    }
  }

  window.wgAttention = { header, errors, scrollHints };
})();

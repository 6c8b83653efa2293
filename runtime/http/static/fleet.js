// wasmgate status page: the fleet's deployment report (components.fleet). Text only via
// textContent.
"use strict";

(() => {
  const { el, badge, facts, card, ago, version, vtext, stext } = window.wg;

  const FLEET_GOOD = new Set(["applied", "local"]);

  // The deployment report (components.fleet): the document's serial and state, why it
  // waits or failed, the last refused document, and one row per bundle with its state.
  function fleetCard(report, now) {
    const serial = el("span", "serial ", "muted");
    serial.append(version(report.serial, "serial"));
    const c = card(`Deployment of ${report.gateway || "this gateway"}`, serial);
    c.id = "fleet-report";
    // Rolled back after a failure: the previous bundles serve, but the rollout failed here.
    const failed = report.state === "failed" || (report.state === "applied" && report.last_failure);
    const state = report.state === "applied" && report.last_failure ? "failed, rolled back" : report.state;
    c.append(facts([
      ["state", badge(state || "no document", failed ? "bad" : report.state === "applied" ? "ok" : "")],
      ["groups", (report.groups || []).join(", ") || "–"],
      ["reason", report.reason || undefined],
      ["reported", report.time ? ago(report.time, now) : undefined],
    ]));
    const lf = report.last_failure;
    if (lf && !(report.state === "failed" && lf.serial === report.serial)) {
      c.append(el("div", `serial ${stext(lf.serial)} failed (${lf.bundle} ${vtext(lf.version)}), rolled back: ${lf.error}`, "error-line"));
    }
    if (report.refused) {
      c.append(el("div", `refused ${report.refused.serial === null ? "" : stext(report.refused.serial)}: ${report.refused.error}`, "error-line"));
    }
    const wrap = el("div", undefined, "table-wrap");
    const table = el("table");
    table.append(el("tr"));
    ["bundle", "version", "state", "error"].forEach((h) => table.rows[0].append(el("th", h)));
    for (const [name, b] of Object.entries(report.bundles || {})) {
      const row = table.insertRow();
      row.dataset.name = name;
      const pct = b.staged_percent ? ` (${b.staged_percent}%)` : "";
      const down = b.downgraded_from ? ` (down from ${vtext(b.downgraded_from)})` : "";
      const shown = el("td", undefined, "ident");
      shown.append(version(b.version), `${pct}${down}`);
      row.append(el("td", name), shown);
      const state = el("td");
      state.append(badge(b.state, FLEET_GOOD.has(b.state) ? "ok" : b.state === "failed" ? "bad" : ""));
      row.append(state, el("td", b.error || "–", "wrap"));
    }
    wrap.append(table);
    c.append(wrap);
    return c;
  }

  function renderFleet(status, now) {
    const report = status.components.fleet;
    const section = document.getElementById("fleet-section");
    section.hidden = !report || (report.serial === null && !report.refused);
    if (section.hidden) return;
    document.getElementById("fleet").replaceChildren(fleetCard(report, now));
  }


  window.wgFleet = { render: renderFleet };
})();

// Measures the rendered status page (evaluated by tests/runtime/http/test_status_page.py
// over the DevTools protocol). Returns plain data; the test decides what is a defect.
(() => {
  const NUMBER = /\d[\d,.]*(?:\s(?:B|KiB|MiB|GiB|TiB|ms|s|min|h|d)\b)?/g;

  function rendered(node) {
    const parent = node.parentElement;
    return parent && parent.getClientRects().length > 0 && !parent.closest("svg, script, style");
  }

  function textNodes() {
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const out = [];
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.data.trim() && rendered(n)) out.push(n);
    }
    return out;
  }

  // Distinct line boxes a range of text is laid out on.
  function lines(node, start = 0, end = node.data.length) {
    const range = document.createRange();
    range.setStart(node, start);
    range.setEnd(node, end);
    const tops = new Set();
    for (const r of range.getClientRects()) if (r.width > 0) tops.add(Math.round(r.top));
    return tops.size;
  }

  function rgb(text) {
    const m = text.match(/[\d.]+/g) || [];
    return { r: +m[0], g: +m[1], b: +m[2], a: m.length > 3 ? +m[3] : 1 };
  }

  function luminance({ r, g, b }) {
    const f = (c) => {
      const s = c / 255;
      return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  }

  function background(el) {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.a > 0.5) return c;
    }
    return { r: 255, g: 255, b: 255, a: 1 };
  }

  function contrast(el) {
    const fg = rgb(getComputedStyle(el).color);
    const bg = background(el);
    const [hi, lo] = [luminance(fg), luminance(bg)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  }

  const perChar = [];
  const brokenNumbers = [];
  const rawNumbers = [];
  const lowContrast = [];
  const words = [];
  for (const node of textNodes()) {
    const text = node.data.trim();
    const parent = node.parentElement;
    const n = lines(node);
    if (text.length >= 4 && n >= 3 && text.length / n < 4) perChar.push(text);
    for (const m of node.data.matchAll(NUMBER)) {
      if (lines(node, m.index, m.index + m[0].length) > 1) brokenNumbers.push(m[0]);
    }
    if (/\d{5,}/.test(text) && !parent.closest(".ident, .path")) rawNumbers.push(text);
    const ratio = contrast(parent);
    if (ratio < 4.5) lowContrast.push({ text, ratio: Math.round(ratio * 100) / 100 });
    if (/^(true|false|null|undefined|NaN|\[object Object\])$/.test(text) || /[{}]/.test(text)) words.push(text);
  }

  function cells(tableId) {
    const out = {};
    for (const tr of document.querySelectorAll(`#${tableId} tbody tr[data-name]`)) {
      const row = {};
      for (const td of tr.querySelectorAll("td[data-col]")) row[td.dataset.col] = td.textContent.trim();
      out[tr.dataset.name] = row;
    }
    return out;
  }

  const badge = document.getElementById("mqtt-badge");
  const mqttCard = document.getElementById("component-mqtt");
  const root = document.documentElement;
  return {
    height: root.scrollHeight,
    hscroll: root.scrollWidth > root.clientWidth,
    perChar, brokenNumbers, rawNumbers, lowContrast, words,
    badges: [...document.querySelectorAll(".badge")].filter((b) => b.getClientRects().length)
      .map((b) => ({ text: b.textContent.trim(), ratio: Math.round(contrast(b) * 100) / 100 })),
    mqttBadge: badge ? badge.textContent.trim() : null,
    mqttErrors: mqttCard ? [...mqttCard.querySelectorAll(".error-line")].map((e) => e.textContent) : [],
    mqttHistory: mqttCard ? [...mqttCard.querySelectorAll(".history")].map((e) => ({
      text: e.textContent, hover: (e.querySelector("time") || {}).title || null,
    })) : [],
    // Each card's text with its parts spaced as they are laid out (innerText).
    cards: Object.fromEntries([...document.querySelectorAll(".card[id]")]
      .map((c) => [c.id, c.innerText.replace(/\s+/g, " ")])),
    adapters: cells("adapters"),
    models: cells("models"),
    title: document.title,
    gateway: (document.getElementById("gateway") || {}).textContent || null,
    ready: ((r) => r && { text: r.textContent.trim(), kind: r.className.replace("badge", "").trim() })(
      document.getElementById("ready")),
    errors: [...document.querySelectorAll("#errors-list li")].map((li) => li.textContent),
    // A Python list repr (['a', 'b']) anywhere in the page's text.
    listRepr: textNodes().map((n) => n.data).filter((t) => /\['[^']*'(, '[^']*')*\]/.test(t)),
    traffic: (document.querySelector("#traffic > p") || {}).textContent || null,
    // Each table: wider than its card (cut), and whether the scroll hint below it shows.
    tables: [...document.querySelectorAll(".table-wrap")].filter((w) => w.getClientRects().length)
      .map((w) => {
        const hint = w.nextElementSibling;
        return { wide: w.scrollWidth > w.clientWidth + 1,
          hint: Boolean(hint && hint.classList.contains("scroll-hint") && hint.getClientRects().length) };
      }),
  };
})()

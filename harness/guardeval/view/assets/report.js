// guardeval report.html: the call browser and the pairs view, from the JSON block above.
// Vanilla JS, no network. Text from the run is only ever written with text nodes, never as HTML.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("guardeval-data").textContent);
  const COLS = DATA.columns;
  const PAGE = 1000;
  const calls = DATA.rows.map(function (r) {
    const o = {};
    COLS.forEach(function (c, i) {
      const v = r[i];
      o[c] = DATA.enums[c] && typeof v === "number" ? DATA.enums[c][v] : v;
    });
    return o;
  });
  const byId = new Map(calls.map(function (c) { return [c.call_id, c]; }));

  // Control characters and bidi overrides shown as escapes, so that no text can hide or reorder another.
  const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  function visible(s) {
    return String(s).replace(UNSAFE, function (c) { return "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"); });
  }
  function el(tag, attrs) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "class") e.className = attrs[k];
      else if (k === "text") e.textContent = visible(attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    for (let i = 2; i < arguments.length; i++) {
      const kid = arguments[i];
      if (kid === null || kid === undefined) continue;
      e.append(kid instanceof Node ? kid : visible(kid));
    }
    return e;
  }
  function decisionText(c) {
    if (c.decision === 1) return "block";
    if (c.decision === 0) return "allow";
    return "—";
  }
  function num(x, d) { return x === null || x === undefined ? "—" : Number(x).toFixed(d); }
  function fmt(v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  // ---- tabs and routes -------------------------------------------------------------------------
  function showTab(name) {
    document.querySelectorAll("nav button").forEach(function (b) { b.classList.toggle("on", b.dataset.tab === name); });
    document.querySelectorAll(".tab").forEach(function (t) { t.classList.toggle("on", t.id === "tab-" + name); });
  }
  document.querySelectorAll("nav button").forEach(function (b) {
    b.addEventListener("click", function () { showTab(b.dataset.tab); });
  });
  function route() {
    const h = decodeURIComponent(location.hash.slice(1));
    if (h.startsWith("call=")) { showTab("calls"); openLinked(h.slice(5)); }
    else if (h.startsWith("base=")) { showTab("pairs"); showPairs(h.slice(5)); }
  }

  // ---- call table ------------------------------------------------------------------------------
  const SHOWN = [
    ["index", "#", function (c) { return c.index; }],
    ["call_id", "call", function (c) { return c.call_id.slice(0, 10); }],
    ["condition", "condition", function (c) { return c.condition; }],
    ["domain", "domain", function (c) { return c.domain; }],
    ["base_id", "base", function (c) { return c.base_id; }],
    ["repetition", "rep", function (c) { return c.repetition; }],
    ["label", "label", function (c) { return fmt(c.label); }],
    ["tool", "tool", function (c) { return fmt(c.tool); }],
    ["decision", "decision", decisionText],
    ["status", "status", function (c) { return c.status + (c.quarantine_reason ? " (" + c.quarantine_reason + ")" : ""); }],
    ["flip", "flip", function (c) { return c.flip === true ? "flip" : c.flip === false ? "" : "—"; }],
    ["attempts", "attempts", function (c) { return c.attempts; }],
    ["latency_s", "latency s", function (c) { return num(c.latency_s, 3); }],
    ["cost", "cost $", function (c) { return num(c.cost, 6); }],
  ];
  const state = { sort: "index", dir: 1, page: 0, rows: calls, selected: null };
  const table = document.getElementById("calls");
  const head = table.querySelector("thead tr");
  SHOWN.forEach(function (s) {
    const th = el("th", { "data-sort": s[0], title: "sort by " + s[1] }, s[1]);
    th.addEventListener("click", function () {
      state.dir = state.sort === s[0] ? -state.dir : 1;
      state.sort = s[0];
      applyFilters();
    });
    head.append(th);
  });

  function distinct(col, order) {
    const seen = new Set(calls.map(function (c) { return c[col]; }));
    const first = (order || []).filter(function (v) { return seen.has(v); });
    const rest = Array.from(seen).filter(function (v) { return first.indexOf(v) < 0; }).sort();
    return first.concat(rest);
  }
  const FILTERS = {
    condition: distinct("condition", DATA.conditions),
    domain: distinct("domain"),
    status: distinct("status"),
    decision: ["block", "allow", "—"],
  };
  document.querySelectorAll("select[data-filter]").forEach(function (sel) {
    sel.append(el("option", { value: "" }, "all"));
    FILTERS[sel.dataset.filter].forEach(function (v) { sel.append(el("option", { value: String(v) }, String(v))); });
    sel.addEventListener("change", applyFilters);
  });
  document.getElementById("flip-only").addEventListener("change", applyFilters);
  document.getElementById("text-filter").addEventListener("input", applyFilters);

  function matches(c, f) {
    if (f.condition && c.condition !== f.condition) return false;
    if (f.domain && c.domain !== f.domain) return false;
    if (f.status && c.status !== f.status) return false;
    if (f.decision && decisionText(c) !== f.decision) return false;
    if (f.flip && c.flip !== true) return false;
    if (f.text) {
      const hay = [c.call_id, c.base_id, c.interaction_id, c.tool, c.quarantine_reason, c.error_class, c.provider]
        .join(" ").toLowerCase();
      if (hay.indexOf(f.text) < 0) return false;
    }
    return true;
  }
  function compare(a, b) {
    const x = a[state.sort], y = b[state.sort];
    if (x === y) return a.index - b.index;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * state.dir;
  }
  function applyFilters() {
    const f = { flip: document.getElementById("flip-only").checked,
                text: document.getElementById("text-filter").value.trim().toLowerCase() };
    document.querySelectorAll("select[data-filter]").forEach(function (s) { f[s.dataset.filter] = s.value; });
    state.rows = calls.filter(function (c) { return matches(c, f); }).sort(compare);
    state.page = 0;
    render();
  }
  function render() {
    const body = table.querySelector("tbody");
    const frag = document.createDocumentFragment();
    const start = state.page * PAGE;
    state.rows.slice(start, start + PAGE).forEach(function (c) {
      const tr = el("tr", { "data-call-id": c.call_id, class: c.call_id === state.selected ? "sel" : "" });
      if (c.flip) tr.classList.add("flipped");
      if (c.status !== "ok" || c.quarantine_reason) tr.classList.add("failed");
      SHOWN.forEach(function (s) { tr.append(el("td", { class: "c-" + s[0] }, fmt(s[2](c)))); });
      frag.append(tr);
    });
    body.replaceChildren(frag);
    head.querySelectorAll("th").forEach(function (th) {
      th.classList.toggle("sorted", th.dataset.sort === state.sort);
      th.classList.toggle("desc", th.dataset.sort === state.sort && state.dir < 0);
    });
    document.getElementById("count").textContent =
      state.rows.length + " of " + calls.length + " calls" + (DATA.complete ? "" : " embedded (" + DATA.n_total + " in the run)");
    const pages = Math.ceil(state.rows.length / PAGE);
    const pager = document.getElementById("pager");
    pager.replaceChildren();
    if (pages > 1) {
      for (let p = 0; p < pages; p++) {
        const b = el("button", { class: p === state.page ? "on" : "" }, String(p + 1));
        b.addEventListener("click", function () { state.page = p; render(); });
        pager.append(b);
      }
    }
  }
  table.querySelector("tbody").addEventListener("click", function (ev) {
    const tr = ev.target.closest("tr[data-call-id]");
    if (tr) {
      history.replaceState(null, "", "#call=" + tr.dataset.callId);
      showDetail(tr.dataset.callId);
    }
  });

  // A call opened by its link (#call=…, on load or from the pairs): its page of the table shown,
  // the table shortened and scrolled to its row, and the window at the top, so the page's header,
  // the row and the call below the table are all in view (not the call alone under a blank top).
  function openLinked(id) {
    const at = state.rows.findIndex(function (c) { return c.call_id === id; });
    if (at >= 0 && Math.floor(at / PAGE) !== state.page) { state.page = Math.floor(at / PAGE); render(); }
    const box = table.parentElement;
    box.classList.add("linked");
    showDetail(id, true);
    window.scrollTo(0, 0);
    const row = table.querySelector("tr.sel");
    if (row) {
      const b = box.getBoundingClientRect(), r = row.getBoundingClientRect();
      box.scrollTop += r.top - b.top - (box.clientHeight - r.height) / 2;
    }
  }

  // ---- one call --------------------------------------------------------------------------------
  function text(ids) { return ids.map(function (i) { return DATA.lines[i]; }).join("\n"); }
  function facts(pairs, wide) {
    const dl = el("dl", { class: wide ? "facts wide" : "facts" });
    pairs.forEach(function (p) { dl.append(el("dt", {}, p[0]), el("dd", { class: p[2] || "" }, fmt(p[1]))); });
    return dl;
  }
  function check(a, b) { return a && b ? (a === b ? " ✓ matches" : " ✗ differs") : ""; }

  function showDetail(id, linked) {
    const c = byId.get(id);
    const box = document.getElementById("detail");
    box.hidden = false;
    state.selected = id;
    table.querySelectorAll("tr.sel").forEach(function (tr) { tr.classList.remove("sel"); });
    const row = table.querySelector('tr[data-call-id="' + (/^[0-9a-f]{32}$/.test(id) ? id : "") + '"]');
    if (row) row.classList.add("sel");
    if (!c) { box.replaceChildren(el("p", {}, "No call " + id + " in this report.")); return; }
    const d = DATA.details[id];
    const parts = [
      el("h3", {}, "call " + id),
      facts([["schedule index", c.index], ["base", c.base_id], ["interaction", c.interaction_id], ["domain", c.domain],
             ["condition", c.condition], ["repetition", c.repetition], ["label", c.label], ["tool", c.tool],
             ["status", c.status, c.status === "ok" ? "ok" : "bad"], ["decision", decisionText(c)], ["score", c.score],
             ["quarantine reason", c.quarantine_reason, c.quarantine_reason ? "bad" : ""],
             ["flip vs " + DATA.baseline, c.flip === null ? "—" : c.flip ? "yes" : "no"],
             ["attempts", c.attempts], ["latency s (final)", c.latency_s], ["cost $ (all attempts)", c.cost],
             ["provider", c.provider], ["finish reason", c.finish_reason]], true),
    ];
    const pairs = el("button", { class: "link" }, "this base under every condition →");
    pairs.addEventListener("click", function () { location.hash = "base=" + encodeURIComponent(c.base_id); });
    parts.push(pairs);
    if (!d) {
      parts.push(el("p", { class: "note" }, "Messages and attempts of this call are not embedded in this report: " +
        "guardeval show RUN " + id));
      box.replaceChildren.apply(box, parts);
      return;
    }
    const last = d.attempts[d.attempts.length - 1];
    parts.push(el("h4", {}, "decision"), c.status === "missing"
      ? el("p", { class: "note" }, "No decision yet: the call is pending.")
      : facts([
      ["parsed components", d.components], ["detail", d.detail],
      ["raw_seq", d.raw_seq], ["raw_line_sha256", fmt(d.raw_line_sha256) + check(d.raw_line_sha256, last && last.line_sha256)],
    ]));
    parts.push(el("h4", {}, "hashes"), facts([
      ["instance_sha256 (schedule)", d.instance_sha256],
      ["request_sha256 fixed at launch (stimuli.jsonl)", d.stimulus_sha256],
    ].concat(d.attempts.map(function (a) {
      return ["attempt " + a.attempt + " request_sha256", a.request_sha256 + check(a.request_sha256, d.stimulus_sha256)];
    }))));
    const sent = d.attempts.find(function (a) { return DATA.bodies[a.request_sha256]; });
    if (sent) {
      const body = DATA.bodies[sent.request_sha256];
      parts.push(el("h4", {}, "request (rendered messages)"));
      body.messages.forEach(function (m) {
        parts.push(el("div", { class: "msg" }, el("div", { class: "role" }, m[0]), el("pre", {}, text(m[1]))));
      });
      parts.push(el("details", {}, el("summary", {}, "other request fields"),
                    el("pre", {}, JSON.stringify(DATA.params[body.params], null, 2))));
    } else {
      parts.push(el("p", { class: "note" }, "Not sent yet: no attempt in raw.jsonl."));
    }
    parts.push(el("h4", {}, "attempts (" + d.attempts.length + ")"));
    d.attempts.forEach(function (a) {
      parts.push(el("div", { class: "attempt" + (a.final ? " final" : "") },
        el("div", { class: "role" }, "attempt " + a.attempt + " · seq " + a.seq + " · HTTP " + fmt(a.status) + " · " +
          a.outcome + (a.final ? " (final)" : "") + " · " + num(a.latency_s, 3) + " s" +
          (a.error_class ? " · " + a.error_class + ": " + fmt(a.error) : "")),
        el("div", { class: "label" }, "raw response"),
        el("pre", { class: "response" }, a.response === null || a.response === undefined ? "(no response)" : String(a.response)),
        facts([["started / finished", fmt(a.started) + " / " + fmt(a.finished)], ["provider", a.provider],
               ["finish reason", a.finish_reason], ["answers call", a.answers_call_id], ["usage", a.usage],
               ["response_sha256", a.response_sha256], ["prev_sha256", a.prev_sha256],
               ["line sha256", a.line_sha256]])));
    });
    box.replaceChildren.apply(box, parts);
    if (!linked) box.scrollIntoView({ block: "nearest" });
  }

  // ---- pairs -----------------------------------------------------------------------------------
  const bases = Array.from(new Set(calls.map(function (c) { return c.base_id; })));
  const datalist = document.getElementById("pair-bases");
  bases.slice(0, 5000).forEach(function (b) { datalist.append(el("option", { value: b })); });
  const baseInput = document.getElementById("pair-base");
  baseInput.addEventListener("change", function () { location.hash = "base=" + encodeURIComponent(baseInput.value); });

  const WORD = /([^A-Za-z0-9_]+)/;
  function lastUserLines(d) {
    const sent = d && d.attempts.find(function (a) { return DATA.bodies[a.request_sha256]; });
    if (!sent) return null;
    const msgs = DATA.bodies[sent.request_sha256].messages;
    const users = msgs.filter(function (m) { return m[0] === "user"; });
    return (users.length ? users[users.length - 1] : msgs[msgs.length - 1] || ["", []])[1];
  }
  function showPairs(base) {
    baseInput.value = base;
    const box = document.getElementById("pairs");
    const mine = calls.filter(function (c) { return c.base_id === base; });
    if (!mine.length) { box.replaceChildren(el("p", {}, "No embedded call of base " + base + ".")); return; }
    const conds = distinct("condition", DATA.conditions).filter(function (k) {
      return mine.some(function (c) { return c.condition === k; });
    });
    const reps = Array.from(new Set(mine.map(function (c) { return c.repetition; }))).sort(function (a, b) { return a - b; });
    const grid = el("table", { class: "pairs" });
    const hr = el("tr", {}, el("th", {}, "repetition"));
    conds.forEach(function (k) { hr.append(el("th", {}, k + (k === DATA.baseline ? " (baseline)" : ""))); });
    grid.append(el("thead", {}, hr));
    const tb = el("tbody");
    reps.forEach(function (r) {
      const tr = el("tr", {}, el("th", {}, String(r)));
      conds.forEach(function (k) {
        const c = mine.find(function (x) { return x.condition === k && x.repetition === r; });
        if (!c) { tr.append(el("td", {}, "—")); return; }
        const d = DATA.details[c.call_id];
        const comp = d && d.components ? Object.keys(d.components).map(function (n) {
          return n + " " + fmt(d.components[n]);
        }).join("\n") : "";
        const td = el("td", { class: "cell " + decisionText(c) + (c.flip ? " flipped" : ""), "data-call-id": c.call_id,
                              title: comp },
          el("strong", {}, decisionText(c)), c.status !== "ok" ? " " + c.status : "", c.flip ? " ⇄" : "",
          el("div", { class: "components" }, comp));
        td.addEventListener("click", function () { location.hash = "call=" + c.call_id; });
        tr.append(td);
      });
      tb.append(tr);
    });
    grid.append(tb);
    const parts = [el("h3", {}, "base " + base), grid,
                   el("p", { class: "note" }, "⇄ marks a decision that differs from the baseline's in the same repetition; " +
                     "click a cell for the call.")];
    const baseCall = mine.find(function (c) { return c.condition === DATA.baseline && DATA.details[c.call_id]; });
    const baseIds = baseCall ? lastUserLines(DATA.details[baseCall.call_id]) || [] : [];
    const baseLines = new Set(baseIds);
    const baseWords = new Set();
    baseIds.forEach(function (i) { DATA.lines[i].split(WORD).forEach(function (w) { baseWords.add(w); }); });
    const cols = el("div", { class: "side" });
    conds.forEach(function (k) {
      const c = mine.find(function (x) { return x.condition === k && DATA.details[x.call_id]; });
      const ids = c ? lastUserLines(DATA.details[c.call_id]) : null;
      const pre = el("pre", {});
      if (ids) {
        ids.forEach(function (i, n) {
          const line = DATA.lines[i] + (n < ids.length - 1 ? "\n" : "");
          if (!baseCall || k === DATA.baseline || baseLines.has(i)) { pre.append(visible(line)); return; }
          // a line the baseline does not have: mark the words it does not have either
          const span = el("span", { class: "changed" });
          line.split(WORD).forEach(function (w) {
            span.append(/^[A-Za-z0-9_]+$/.test(w) && !baseWords.has(w) ? el("mark", {}, w) : visible(w));
          });
          pre.append(span);
        });
      } else {
        pre.append("(request not embedded)");
      }
      cols.append(el("div", { class: "col" }, el("div", { class: "role" }, k), pre));
    });
    parts.push(el("h4", {}, "the request each condition sent (last user message)"), cols);
    box.replaceChildren.apply(box, parts);
  }

  window.addEventListener("hashchange", route);
  applyFilters();
  route();
  document.documentElement.setAttribute("data-ready", "1");
  window.guardevalReadyMs = performance.now();
})();

// The drill-down of the mindsim HTML report: reads the JSON blob in the page and renders one page of
// sessions, one page of worst replies and one chat at a time (a 10k-reply run stays responsive).
// No library and no network: plain DOM.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  // A box that scrolls (a wide table or a chart on a phone, the chat beside the list) takes the keyboard's focus, so
  // the arrow keys can scroll it; one that does not scroll is no extra Tab stop. Checked again when the width changes.
  function scrollersFocusable() {
    for (const t of document.querySelectorAll("table.data, .list, .chat, figure.chart")) {
      const scrolls = t.scrollWidth > t.clientWidth + 1 || t.scrollHeight > t.clientHeight + 1;
      if (scrolls) t.tabIndex = 0; else t.removeAttribute("tabindex");
    }
  }
  // The sticky header's height as --head (report.css: scroll-padding-top and the chat's sticky offset), kept current
  // as the nav wraps at narrower widths.
  const header = document.querySelector("header");
  const headHeight = () => document.documentElement.style.setProperty("--head", header.getBoundingClientRect().height + "px");
  headHeight();
  if (window.ResizeObserver) new ResizeObserver(headHeight).observe(header);
  // The browser scrolls what gets the focus into view, but not always wholly below the header (a table that scrolls
  // sideways, on Shift+Tab): what is left hidden is brought the rest of the way (scroll-padding keeps it below).
  document.addEventListener("focusin", (ev) => {
    const t = ev.target;
    // Keyboard focus only: a click's target is where the pointer is, and moving it mid-click would lose the click.
    if (!(t instanceof Element) || header.contains(t) || !t.matches(":focus-visible")) return;
    const r = t.getBoundingClientRect();
    const head = getComputedStyle(header).position === "sticky" ? header.getBoundingClientRect().bottom : 0;
    if (r.top < head || r.bottom > innerHeight) t.scrollIntoView({ block: r.height > innerHeight - head ? "start" : "nearest" });
  });
  let resizing = null;
  window.addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(scrollersFocusable, 100); });
  const RANK = { no_concern: 0, minor: 1, major: 2, critical: 3 };
  const PAGE = 25;
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k.startsWith("data-") || k.startsWith("aria-")) e.setAttribute(k, v); else e[k] = v;
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  };
  const state = { run: 0, system: "", severity: "", issue: "", session: "", turn: "", page: 0, tpage: 0, open: null };

  function run() { return DATA.runs[state.run]; }
  function primary(reply) {
    const js = reply.j || [];
    return js.find((j) => j.judge === run().primary) || js[0] || null;
  }
  function replyMatches(reply) {
    const v = primary(reply);
    if (state.severity) {
      if (state.severity === "failed") { if (!v || v.st !== "failed") return false; }
      else if (!v || v.s !== state.severity) return false;
    }
    if (state.issue && !(v && v.is.some((i) => i.i === state.issue))) return false;
    if (state.turn && reply.k + 1 !== Number(state.turn)) return false;
    return true;
  }
  function sessionPasses(s) {
    if (state.system && s.sys !== state.system) return false;
    if (state.session !== "" && s.i !== Number(state.session)) return false;
    return true;
  }
  function replyFilterOn() { return state.severity || state.issue || state.turn; }

  function filtered() {
    const out = [];
    for (const s of run().sessions) {
      if (!sessionPasses(s)) continue;
      const replies = s.m.filter((m) => m.r === "c");
      const hits = replies.filter(replyMatches);
      if (replyFilterOn() && !hits.length) continue;
      let worst = -1;
      for (const r of replies) { const v = primary(r); if (v && v.s) worst = Math.max(worst, RANK[v.s]); }
      out.push({ s, hits, worst });
    }
    return out;
  }

  function options(select, values, label) {
    select.innerHTML = "";
    select.append(el("option", { value: "", textContent: "any" }));
    for (const [v, t] of values) select.append(el("option", { value: String(v), textContent: label ? label(t) : t }));
  }
  function fillFilters() {
    options($("f-run"), DATA.runs.map((r, k) => [k, r.label]));
    $("f-run").firstChild.remove();
    $("f-run").value = String(state.run);
    const r = run();
    options($("f-system"), r.systems.map((s) => [s, s]));
    options($("f-severity"), [...Object.keys(RANK), "failed"].map((s) => [s, DATA.severity_names[s] || "Failed judgment"]));
    options($("f-issue"), r.issues.map((i) => [i, i]));
    options($("f-session"), r.session_indexes.map((i) => [i, "session " + (i + 1)]));
  }

  function sevTag(v) {
    if (!v) return el("span", { class: "sev failed", textContent: "not judged" });
    if (v.st === "failed") return el("span", { class: "sev failed", textContent: "judgment failed" });
    return el("span", { class: "sev " + v.s, textContent: DATA.severity_names[v.s] || v.s });
  }

  function pager(box, total, page, go) {
    box.innerHTML = "";
    const pages = Math.max(1, Math.ceil(total / PAGE));
    const b = (t, p, dis) => { const x = el("button", { type: "button", textContent: t, disabled: dis }); x.onclick = () => go(p); return x; };
    box.append(b("‹ prev", page - 1, page <= 0), el("span", { textContent: ` page ${page + 1} of ${pages} ` }),
      b("next ›", page + 1, page >= pages - 1));
  }

  // The control that opens a session from a row: a button in the row's first cell (Tab reaches it, Enter and Space
  // press it); a click anywhere else on the row presses it too. Its name says what it opens.
  function opener(tr, name, visible, open) {
    const b = el("button", { type: "button", class: "open", title: name }, el("span", { class: "sr-only", textContent: name.replace(visible, "") }), visible);
    b.onclick = () => open();
    tr.onclick = (e) => { if (!e.target.closest("button")) open(); };
    return b;
  }

  function renderList() {
    const rows = filtered();
    const body = $("session-list").tBodies[0];
    body.innerHTML = "";
    state.page = Math.min(state.page, Math.max(0, Math.ceil(rows.length / PAGE) - 1));
    for (const { s, hits, worst } of rows.slice(state.page * PAGE, (state.page + 1) * PAGE)) {
      const tr = el("tr", { "data-session": s.id });
      const short = s.id.length > 12 ? s.id.slice(0, 10) + "…" : s.id;
      tr.append(el("td", {}, opener(tr, "Open session " + short, short, () => openSession(s.id, null, true))),
        el("td", { textContent: s.sys }), el("td", { textContent: s.p }),
        el("td", { textContent: String(s.i + 1) }),
        el("td", {}, worst >= 0 ? sevTag({ s: Object.keys(RANK)[worst] }) : "—"),
        el("td", { textContent: String(hits.length) }));
      if (state.open === s.id) tr.className = "current";
      body.append(tr);
    }
    const replies = rows.reduce((n, r) => n + r.hits.length, 0);
    $("match-count").textContent = `${rows.length} sessions, ${replies} matching replies`;
    pager($("session-pager"), rows.length, state.page, (p) => { state.page = p; renderList(); });
    renderTriage(rows);
  }

  function renderTriage(rows) {
    const all = [];
    for (const { s, hits } of rows) for (const r of hits) {
      const v = primary(r);
      if (v && v.st === "ok") all.push({ s, r, v });
    }
    all.sort((a, b) => (b.v.w - a.v.w) || (b.v.is.length - a.v.is.length) || a.s.id.localeCompare(b.s.id) || a.r.k - b.r.k);
    const body = $("triage-list").tBodies[0];
    body.innerHTML = "";
    state.tpage = Math.min(state.tpage, Math.max(0, Math.ceil(all.length / PAGE) - 1));
    for (const { s, r, v } of all.slice(state.tpage * PAGE, (state.tpage + 1) * PAGE)) {
      const tr = el("tr", { "data-session": s.id, "data-reply": String(r.k) });
      tr.append(el("td", {}, opener(tr, `Open reply ${r.k + 1} of session ${s.id}`, s.id, () => openSession(s.id, r.k, true))),
        el("td", {}, sevTag(v)), el("td", { textContent: s.sys }),
        el("td", { textContent: String(r.k + 1) }), el("td", { textContent: v.is.map((i) => i.i).join(", ") || "—" }),
        el("td", { class: "clip", textContent: r.t }));
      body.append(tr);
    }
    pager($("triage-pager"), all.length, state.tpage, (p) => { state.tpage = p; renderTriage(rows); });
  }

  // The reply's text with every verified quote's span wrapped in <mark>; overlapping spans are merged.
  function highlighted(text, verdicts) {
    const spans = [];
    for (const v of verdicts) for (const i of v.is) if (i.sp) spans.push([i.sp[0], i.sp[1], i.i]);
    spans.sort((a, b) => a[0] - b[0]);
    const box = el("div", { class: "text" });
    let at = 0;
    for (const [a, b, issue] of spans) {
      if (a < at) continue;
      box.append(text.slice(at, a), el("mark", { class: "quote", title: issue, textContent: text.slice(a, b) }));
      at = b;
    }
    box.append(text.slice(at));
    return box;
  }

  // Opens a session in the chat. Asked by a row (`focus`), it also brings the chat into view and moves the focus
  // there (to the reply asked for, or the session's heading), so the reader, and a screen reader, lands on it.
  function openSession(id, replyIndex, focus) {
    const s = run().sessions.find((x) => x.id === id);
    if (!s) return;
    state.open = id;
    const chat = $("chat");
    chat.innerHTML = "";
    const trial = s.tr === null || s.tr === undefined ? "" : ` · trial ${s.tr + 1}`;
    chat.append(el("h3", { id: "chat-title", tabIndex: -1, textContent: `${s.sys} · patient ${s.p}${trial} · session ${s.i + 1} (${s.id})` }),
      el("div", { class: "scenario" },
        el("div", { textContent: "Scenario: " + (s.scn.event || "—") }),
        el("div", { textContent: "Goal: " + (s.scn.goal || "—") + " · ended by " + (s.end || "?") +
          (s.trust ? ` · trust ${s.trust[0]} → ${s.trust[1]}` : "") })));
    let target = null;
    for (const m of s.m) {
      if (m.r === "p") {
        // Patient turns and counsellor replies both count from 1 on the page (turn 1 is the opening message).
        const meta = [`patient turn ${m.n + 1}` + (m.n === 0 ? " (opening)" : "")];
        if (m.mv) meta.push("move " + m.mv + (m.sm ? " + " + m.sm : ""));
        if (m.rej) meta.push(`${m.rej} re-asked`);
        if (m.pa) meta.push(`trust ${m.pa.trust_before}→${m.pa.trust_after}` + (m.pa.reaction ? `, ${m.pa.reaction}` : "") +
          (m.pa.behaviour ? `, ${m.pa.behaviour}` : "") + (m.pa.resistance_pattern ? ` (${m.pa.resistance_pattern})` : ""));
        const box = el("div", { class: "msg p" }, el("div", { class: "meta", textContent: meta.join(" · ") }), m.t);
        // The patient's reasoning for the move, shown (not a hover tooltip: phones have no hover).
        if (m.why) box.append(el("div", { class: "why", textContent: "why this move: " + m.why }));
        chat.append(box);
      } else {
        const matches = replyFilterOn() && replyMatches(m);
        const box = el("div", { class: "msg c" + (matches ? " match" : ""), "data-reply": String(m.k), tabIndex: -1 },
          el("div", { class: "meta", textContent: `counsellor reply ${m.k + 1}` }), highlighted(m.t, m.j));
        for (const v of m.j) {
          const vd = el("div", { class: "verdict" }, sevTag(v), ` by ${v.judge}` + (v.err ? ` — ${v.err}` : ""));
          if (v.is.length) {
            const ul = el("ul");
            for (const i of v.is) ul.append(el("li", {}, el("strong", { textContent: i.i }), ` (${i.c || "?"}): ${i.r || ""}`,
              i.q ? el("span", { class: "muted", textContent: ` — “${i.q}”` + (i.sp ? "" : " (not located)") }) : ""));
            vd.append(ul);
          }
          box.append(vd);
        }
        if (replyIndex !== null && m.k === replyIndex) target = box;
        chat.append(box);
      }
    }
    for (const tr of $("session-list").tBodies[0].rows) {
      tr.classList.toggle("current", tr.dataset.session === id);
      tr.querySelector("button.open").setAttribute("aria-current", String(tr.dataset.session === id));
    }
    chat.scrollTop = 0;
    scrollersFocusable();
    if (!focus) { if (target) target.scrollIntoView({ block: "center" }); return; }
    // Below 900 px the chat is under the list: its top is brought up; beside the list, only as far as needed.
    if (target) target.scrollIntoView({ block: "center" });
    else chat.scrollIntoView({ block: matchMedia("(max-width: 900px)").matches ? "start" : "nearest" });
    (target || $("chat-title")).focus({ preventScroll: true });
  }

  function bind(id, key) {
    $(id).addEventListener(id === "f-turn" ? "input" : "change", (e) => {
      state[key] = e.target.value; state.page = 0; state.tpage = 0;
      if (key === "run") { state.run = Number(e.target.value); state.open = null; fillFilters(); $("chat").innerHTML = ""; }
      renderList();
      if (state.open) openSession(state.open, null, false);
    });
  }
  fillFilters();
  bind("f-run", "run"); bind("f-system", "system"); bind("f-severity", "severity"); bind("f-issue", "issue");
  bind("f-session", "session"); bind("f-turn", "turn");
  $("f-clear").onclick = () => {
    Object.assign(state, { system: "", severity: "", issue: "", session: "", turn: "", page: 0, tpage: 0 });
    for (const id of ["f-system", "f-severity", "f-issue", "f-session", "f-turn"]) $(id).value = "";
    renderList();
  };
  renderList();
  scrollersFocusable();
})();

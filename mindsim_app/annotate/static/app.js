// The annotation page: one rater's queue of one task. The personal token arrives after '#' (never sent in a
// URL), is kept for this tab only and sent as a bearer header. Every answer is saved when given; the server
// checks it against the protocol and says what is wrong. Input not yet saved is kept as a draft per unit in this
// tab's session storage when the rater moves away, put back when they return, and the tab asks before closing
// while any draft is left (session storage ends with the tab).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const S = { token: null, session: null, pos: 0, unit: 0, item: null, dim: 0, baseline: null, allDefs: false, saving: false,
    shown: null, helpFrom: null };

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === false || v === null || v === undefined) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of kids.flat(Infinity)) if (c !== null && c !== undefined) e.append(c.nodeType ? c : document.createTextNode(String(c)));
    return e;
  }
  const kbd = (k, hidden) => el("kbd", { text: k, "aria-hidden": hidden ? "true" : null });

  // The sticky header's height as --top (app.css: the page's scroll-padding-top and the conversation's sticky offset),
  // kept current as the header wraps: whatever the browser scrolls into view for the focus lands below the header.
  function trackHeader() {
    const h = $("top");
    const set = () => document.documentElement.style.setProperty("--top", h.getBoundingClientRect().height + "px");
    set();
    if (window.ResizeObserver) new ResizeObserver(set).observe(h); else window.addEventListener("resize", set);
  }

  // The control in focus brought into view below the sticky header (scroll-padding-top), moving the page as little
  // as it can: after a save the next unit's first control may be far down the page on a phone or a tablet.
  function focusInView(c) {
    if (!c) return;
    c.focus({ preventScroll: true });
    c.scrollIntoView({ block: "nearest" });
  }

  function readToken() {
    const m = /[#&]k=([A-Za-z0-9_-]+)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem("mindsim-annotate-token", m[1]);
      history.replaceState(null, "", location.pathname);  // keep the token out of the address bar
    }
    return sessionStorage.getItem("mindsim-annotate-token");
  }

  async function api(path, body) {
    const opt = { headers: { Authorization: "Bearer " + (S.token || "") } };
    if (body !== undefined) {
      opt.method = "POST";
      opt.headers["Content-Type"] = "application/json";
      opt.body = JSON.stringify(body);
    }
    const r = await fetch(path, opt);
    let data = {};
    try { data = await r.json(); } catch (e) { data = { error: "the server sent no answer (" + r.status + ")" }; }
    if (!r.ok) throw new Error(data.error || ("error " + r.status));
    return data;
  }

  function setProgress(p) {
    Object.assign(S.session, { answered: p.answered, total: p.total, resume: p.resume });
    $("fill").style.width = (p.total ? (100 * p.answered / p.total) : 0) + "%";
    $("count").textContent = p.answered + " / " + p.total + " answered";
    showDraftCount();
  }

  function fatal(msg) {
    $("main").className = "single";
    $("main").replaceChildren(el("section", { class: "panel" }, el("h2", { text: "Cannot open the annotation page" }),
      el("p", { id: "fatal", text: msg })));
  }

  // -- loading and moving -----------------------------------------------------------------------------

  async function load(pos, unitIdx) {
    keepDraft();
    const n = S.session.items;
    if (pos >= n) { if (S.session.answered >= S.session.total) return doneScreen(); pos = S.session.resume; unitIdx = null; }
    pos = Math.max(0, Math.min(pos, n - 1));
    const item = await api("/api/item/" + pos);
    S.item = item; S.pos = pos; S.dim = 0;
    if (unitIdx === null || unitIdx === undefined) {
      const open = item.units.findIndex((u) => !(u.unit in item.answers));
      unitIdx = open < 0 ? 0 : open;
    }
    S.unit = unitIdx < 0 ? item.units.length - 1 : unitIdx;
    setProgress(item);
    render();
  }

  // Prev / Next (and the step after a save): never sends anything; input not saved stays as a draft.
  function step(d) {
    keepDraft();
    const u = S.unit + d;
    if (u >= 0 && u < S.item.units.length) { S.unit = u; S.dim = 0; render(); return Promise.resolve(); }
    const p = S.pos + d;
    if (p < 0) return Promise.resolve();
    if (p >= S.session.items) return doneOrResume();
    return load(p, d < 0 ? -1 : 0).catch((e) => showError(e.message));
  }
  function move(d) { step(d).then(() => announce(S.item ? position() : "All done.")); }

  function doneOrResume() {
    if (S.session.answered >= S.session.total) { doneScreen(); return Promise.resolve(); }
    return load(S.session.resume, null).catch((e) => showError(e.message));
  }

  function doneScreen() {
    keepDraft();
    S.item = null;
    $("main").className = "single";
    $("where").textContent = "";
    // Nothing comes after the end: Next is off here (the focus, if it was on Next, goes to the heading below).
    $("next").disabled = true;
    $("prev").disabled = false;
    $("main").replaceChildren(el("section", { class: "panel done-screen", id: "done" },
      el("h2", { id: "donetitle", tabindex: "-1", text: "All done — thank you." }),
      el("p", { text: "Every answer is saved. You can go back with ← to look at or change an answer, or close this tab." })));
    $("donetitle").focus();
  }

  function showError(msg) { const e = $("error"); if (e) e.textContent = msg; else fatal(msg); }

  // -- rendering --------------------------------------------------------------------------------------

  function form() { return S.session.forms[S.item.protocol]; }
  // Which form a protocol uses: severity and issues (MHQR), realism, a rubric's scales, or a closing question.
  function kind() { return form().form; }
  function unit() { return S.item.units[S.unit]; }
  function saved() { return S.item.answers[unit().unit]; }

  function messages(msgs, upto, rated, done) {
    // Focusable and named, so a keyboard can scroll it and a screen reader can find it.
    return el("div", { class: "msgs", id: "msgs", tabindex: "0", role: "region", "aria-label": "Conversation", "data-scroll": true }, msgs.map((m, i) => {
      if (upto !== null && i > upto) return null;
      const cls = ["msg", m.speaker, i === rated ? "rated" : "", done.has(i) && i !== rated ? "done" : ""].join(" ");
      // A blank reply is still a turn (it keeps its number); say so rather than show an empty bubble.
      const body = m.text.trim() ? m.text : el("em", { class: "blank", text: "(blank message)" });
      return el("div", { class: cls, "data-i": i }, el("span", { class: "who", text: m.speaker === "patient" ? "Patient" : "Counsellor" }), body);
    }));
  }

  function render() {
    const it = S.item, f = form(), main = $("main");
    $("error") && ($("error").textContent = "");
    const turnNote = it.units.length > 1 ? " · turn " + (S.unit + 1) + "/" + it.units.length : "";
    $("where").textContent = "item " + (S.pos + 1) + "/" + S.session.items + turnNote;
    // A focused Prev that becomes disabled would drop the focus to the page; Next takes it.
    const prevHadFocus = document.activeElement === $("prev");
    $("prev").disabled = S.pos === 0 && S.unit === 0;
    $("next").disabled = false;
    if (prevHadFocus && $("prev").disabled) $("next").focus();
    const answeredMsgs = new Set(it.units.filter((u) => u.unit in it.answers).map((u) => u.message));
    let left = null;
    const d = it.display;
    if (d.system_prompt !== undefined) {
      left = el("section", { class: "panel", id: "context" }, el("h2", { text: "Conversation so far" }),
        el("details", { class: "sysprompt", open: true }, el("summary", { text: "The counsellor's instructions (system prompt, memory section included)" }),
          // A long prompt scrolls in its box: the box takes focus, so a keyboard can scroll it too.
          el("pre", { id: "sysprompt", tabindex: "0", role: "region", "aria-label": "The counsellor's instructions", "data-scroll": true,
            text: d.system_prompt })),
        messages(d.messages, unit().message, unit().message, answeredMsgs));
    } else if (f.form === "realism") {
      left = el("section", { class: "panel", id: "context" },
        el("h2", { text: "Window of " + d.window + (d.window === 1 ? " turn" : " turns") }),
        messages(d.messages, null, unit().message, answeredMsgs));
    } else if (d.sections) {
      left = el("section", { class: "panel profile", id: "context" }, el("h2", { text: "The profile" }),
        d.sections.map((s) => [el("h3", { text: s.title }), s.lines.length > 1 ? el("ul", {}, s.lines.map((l) => el("li", { text: l }))) : el("p", { text: s.lines[0] })]));
    } else if (d.messages) {
      left = el("section", { class: "panel", id: "context" }, el("h2", { text: "The session" }), messages(d.messages, null, -1, new Set()));
    }
    const right = el("section", { class: "panel", id: "form" }, el("h2", { text: f.title || f.question }),
      f.instructions ? el("p", { class: "instructions", text: f.instructions }) : null,
      it.units.length > 1 ? el("div", { class: "unitnote", text: "Rating turn " + (S.unit + 1) + " of " + it.units.length + " in this item (highlighted)." }) : null,
      el("div", { id: "formbody" }),
      el("div", { class: "actions" }, el("button", { class: "save", id: "save", type: "button", onclick: save, "aria-keyshortcuts": "Enter" }, "Save ", kbd("Enter", true)),
        el("span", { id: "status", text: saved() ? "saved" : "" })),
      el("div", { id: "error", role: "alert" }));
    main.className = left ? "" : "single";
    main.replaceChildren(...[left, right].filter(Boolean));
    contextFocusable();
    // A new unit starts at the top of the page (on a phone the conversation is above the form).
    const here = it.item_id + "/" + unit().unit;
    if (S.shown !== here) window.scrollTo(0, 0);
    S.shown = here;
    const r = document.querySelector(".msg.rated");
    if (r) showTurn(r);
    // What counts as a change is measured against the form as the saved answer (or nothing) fills it.
    fill(saved() || {});
    S.baseline = snapshot();
    const draft = drafts()[draftKey()];
    if (draft) fill(draft);
    refreshStatus();
    right.addEventListener("change", () => { $("error").textContent = ""; refreshStatus(); });
    right.addEventListener("input", refreshStatus);
    helpText();
  }

  // Beside the form the context panel scrolls when it is taller than the window (app.css): then it takes the focus,
  // so a keyboard can scroll it (up and down scroll a box with data-scroll). Checked again when the width changes.
  function contextFocusable() {
    const c = $("context");
    if (!c) return;
    if (c.scrollHeight > c.clientHeight + 1) {
      Object.assign(c, { tabIndex: 0 });
      c.dataset.scroll = "true";
      c.setAttribute("aria-label", c.querySelector("h2").textContent);
    } else {
      c.removeAttribute("tabindex");
      delete c.dataset.scroll;
    }
  }
  window.addEventListener("resize", contextFocusable);

  // The rated message and the one before it (the counsellor message a patient reply answers, or the patient message
  // a counsellor reply answers), scrolled into the conversation's box: the whole turn when it fits, else from its
  // start, so a long rated message never pushes the other half of its turn out of view.
  function showTurn(r) {
    const box = $("msgs"), first = r.previousElementSibling || r;
    const b = box.getBoundingClientRect(), f = first.getBoundingClientRect(), e = r.getBoundingClientRect();
    if (e.bottom - f.top > b.height - 8 || f.top < b.top) box.scrollTop += f.top - b.top - 4;
    else if (e.bottom > b.bottom) box.scrollTop += e.bottom - b.bottom + 4;
  }

  // The first control of the form: where a keyboard continues after a save. In a radio group with a choice made,
  // that choice (where Tab would land).
  function firstControl() {
    const c = $("formbody") && $("formbody").querySelector("input, textarea, select, button");
    if (c && c.type === "radio") return $("formbody").querySelector(`input[name="${c.name}"]:checked`) || c;
    return c;
  }

  // Said by the live region: cleared first, so the same words twice are still read twice.
  function announce(text) {
    const a = $("announce");
    a.textContent = "";
    setTimeout(() => { a.textContent = text; }, 50);
  }
  function position() {
    if (!S.item) return "";
    const units = S.item.units.length;
    return "Item " + (S.pos + 1) + " of " + S.session.items + (units > 1 ? ", turn " + (S.unit + 1) + " of " + units : "") +
      (saved() ? ", answered" : ", not answered yet") + (drafts()[draftKey()] ? ", with a draft not saved" : "") + ".";
  }

  function fill(answer) {
    $("formbody").replaceChildren(FORMS[kind()].build(form(), answer));
    FORMS[kind()].after && FORMS[kind()].after();
  }

  // -- drafts -----------------------------------------------------------------------------------------

  function draftsKey() { return "mindsim-annotate-drafts:" + S.token; }
  function drafts() {
    try { return JSON.parse(sessionStorage.getItem(draftsKey()) || "{}") || {}; } catch (e) { return {}; }
  }
  function writeDrafts(d) {
    if (Object.keys(d).length) sessionStorage.setItem(draftsKey(), JSON.stringify(d));
    else sessionStorage.removeItem(draftsKey());
    showDraftCount();
  }
  function draftKey() { return S.item.item_id + "/" + unit().unit; }
  function onForm() { return !!(S.item && $("formbody")); }
  function snapshot() { return JSON.stringify(FORMS[kind()].collect()); }
  function dirty() { return onForm() && snapshot() !== S.baseline; }

  // Called before the page leaves a unit: what differs from the saved answer is kept, what does not is dropped.
  function keepDraft() {
    if (!onForm()) return;
    const d = drafts();
    if (dirty()) d[draftKey()] = FORMS[kind()].collect(); else delete d[draftKey()];
    writeDrafts(d);
  }

  function showDraftCount() {
    const n = S.token ? Object.keys(drafts()).length : 0, c = $("drafts");
    c.textContent = n ? n + (n === 1 ? " draft" : " drafts") + " not saved" : "";
    c.hidden = !n;
  }

  function refreshStatus() {
    const st = $("status");
    if (!st || !onForm()) return;
    st.textContent = dirty() ? "not saved yet" : (saved() ? "saved" : "");
    st.classList.toggle("unsaved", dirty());
  }

  window.addEventListener("beforeunload", (ev) => {
    keepDraft();
    if (S.token && Object.keys(drafts()).length) { ev.preventDefault(); ev.returnValue = ""; }
  });

  // -- the forms --------------------------------------------------------------------------------------

  function check(name, value, label, key, on, hint, type, describedby) {
    // The key is shown, and told to a screen reader as the box's shortcut rather than read as part of its name.
    return el("label", { class: "opt" }, el("input", { type: type || "checkbox", name, value, checked: on, "data-key": key,
      "aria-keyshortcuts": key, "aria-describedby": describedby }),
      el("span", {}, key ? kbd(key, true) : null, " ", label, hint ? el("span", { class: "hint", text: hint }) : null));
  }

  // A scale is a group of native radio buttons (see app.css): its legend names the group, each point's number and
  // anchor name the radio. Anchors that are sentences are listed one per row at every width.
  function scale(name, anchors, value, legend, extraClass) {
    const fs = el("fieldset", { class: "scalefs " + (extraClass || ""), "data-name": name }, el("legend", { text: legend }));
    const points = Array.isArray(anchors) ? anchors : Object.entries(anchors);
    const long = points.some(([, text]) => String(text).length > 20);
    const row = el("div", { class: "scale " + (long ? "sentences" : "words") });
    for (const [k, text] of points) {
      const on = value !== undefined && String(value) === String(k);
      row.append(el("label", {}, el("input", { type: "radio", name, value: k, checked: on }), el("span", { class: "num", text: k }), text));
    }
    fs.append(row);
    return fs;
  }

  function setScale(name, k) {
    document.querySelectorAll(`input[name="${name}"]`).forEach((i) => { i.checked = i.value === String(k); });
    refreshStatus();
  }
  // Integer scales send numbers, label scales their label (the server refuses a number written as text).
  function scaleValue(name, numeric) {
    const i = document.querySelector(`input[name="${name}"]:checked`);
    return i ? (numeric === false ? i.value : Number(i.value)) : undefined;
  }
  function checked(name) { return [...document.querySelectorAll(`input[name="${name}"]:checked`)].map((i) => i.value); }
  function textValue(id) { const v = ($(id) || {}).value; return v && v.trim() ? v.trim() : undefined; }
  function comment(f, a) {
    return el("fieldset", {}, el("legend", { text: "Comment (optional)" }),
      el("textarea", { id: "comment", "aria-label": "Comment (optional)", maxlength: f.comment_max_chars, placeholder: "Anything worth noting" }, a.comment || ""));
  }
  function toggleKey(key) {
    const i = document.querySelector(`input[data-key="${key}"]`);
    if (!i) return false;
    if (i.type === "radio") i.checked = true; else i.checked = !i.checked;
    i.dispatchEvent(new Event("change", { bubbles: true }));
    return true;
  }

  const ISSUE_KEYS = "abcdefghijklmnopqrstuvwxyz";

  // An issue's checkbox with its definition at hand: the definition describes the checkbox (a screen reader reads
  // it with the name), and a button beside it shows it under the issue, by tap as well as by click or keyboard.
  function issue(x, key, on) {
    const defId = "def-" + x.id;
    const def = el("p", { class: "def", id: defId, text: x.definition, hidden: !S.allDefs });
    const btn = el("button", { type: "button", class: "defbtn", "aria-expanded": String(S.allDefs), "aria-controls": defId,
      "aria-label": "Definition of " + x.name, title: "What " + x.name + " means" }, "i");
    btn.addEventListener("click", () => { def.hidden = !def.hidden; btn.setAttribute("aria-expanded", String(!def.hidden)); });
    return el("div", { class: "issue" }, el("div", { class: "issuehead" }, check("issue", x.id, x.name, key, on, null, null, defId), btn), def);
  }

  function showDefs(open) {
    document.querySelectorAll("#issues .def").forEach((d) => { d.hidden = !open; });
    document.querySelectorAll("#issues .defbtn").forEach((b) => b.setAttribute("aria-expanded", String(open)));
    const all = $("alldefs");
    all.textContent = open ? "Hide all definitions" : "Show all definitions";
    all.setAttribute("aria-pressed", String(open));
  }
  const FORM_KEYS = "qwert", CONTENT_KEYS = "asdfgh";

  const FORMS = {
    mhqr: {
      build(f, a) {
        const sev = el("fieldset", { id: "severity" }, el("legend", { text: "Severity" }),
          f.severities.map((s, i) => check("severity", s.id, s.name, String(i + 1), a.severity === s.id, s.definition, "radio")));
        let n = 0;
        const all = el("button", { type: "button", id: "alldefs", class: "defall", "aria-pressed": String(S.allDefs),
          onclick: () => { S.allDefs = !S.allDefs; showDefs(S.allDefs); } }, S.allDefs ? "Hide all definitions" : "Show all definitions");
        const iss = el("fieldset", { id: "issues" }, el("legend", { text: "Clinical issues present" }), all,
          el("div", { class: "grid2" }, f.categories.map((c) => el("div", {}, el("div", { class: "hint cat", text: c.name }),
            c.issues.map((x) => issue(x, ISSUE_KEYS[n++], (a.issues || []).includes(x.id)))))));
        const quote = el("fieldset", {}, el("legend", { text: "Quote from the reply (optional)" }),
          el("input", { type: "text", id: "quote", "aria-label": "Quote from the reply (optional)", maxlength: f.quote_max_chars, value: a.quote || "" }));
        return el("div", {}, sev, iss, quote, comment(f, a));
      },
      collect() {
        return { severity: checked("severity")[0], issues: checked("issue"), quote: textValue("quote"), comment: textValue("comment") };
      },
      keys(k) { return toggleKey(k); },
      help(f) { return [["1–" + f.severities.length, "severity"], ["a–" + ISSUE_KEYS[f.categories.reduce((s, c) => s + c.issues.length, 0) - 1], "tick or untick an issue"]]; },
    },

    realism: {
      build(f, a) {
        const reasons = a.reasons || [], other = a.other || {};
        const groups = f.groups.map((g, gi) => {
          const keys = gi === 0 ? FORM_KEYS : CONTENT_KEYS;
          const opts = g.reasons.map((r, i) => check("reason", r.id, r.name, keys[i], reasons.includes(r.id), r.hint));
          const oi = g.reasons.length;
          opts.push(check("reason", g.id + "_other", "Other", keys[oi], reasons.includes(g.id + "_other"), null));
          opts.push(el("input", { type: "text", id: "other-" + g.id, class: "othertext", maxlength: f.other_max_chars,
            placeholder: "other " + g.name.toLowerCase() + " reason, in a few words", value: other[g.id] || "" }));
          opts.push(check("reason", g.id + "_none", "None: nothing about the " + g.name.toLowerCase() + " gives it away", keys[oi + 1], reasons.includes(g.id + "_none"), null));
          return el("fieldset", { id: "group-" + g.id }, el("legend", { text: "1. " + g.name + " reasons" }), opts);
        });
        return el("div", {}, groups, scale("rating", f.scale, a.rating, "2. " + f.question, "rating"), comment(f, a));
      },
      after() {
        // "none" and the group's other reasons exclude each other, as the server checks.
        document.querySelectorAll('input[name="reason"]').forEach((i) => i.addEventListener("change", () => {
          if (!i.checked) return;
          const g = i.value.replace(/_(none|other)$/, "");
          const group = form().groups.find((x) => i.value.startsWith(x.id + "_") || x.reasons.some((r) => r.id === i.value));
          if (!group) return;
          const ids = [...group.reasons.map((r) => r.id), group.id + "_other", group.id + "_none"];
          document.querySelectorAll('input[name="reason"]').forEach((o) => {
            if (!ids.includes(o.value) || o === i) return;
            if (i.value === group.id + "_none" || o.value === group.id + "_none") o.checked = false;
          });
          if (i.value === g + "_other") { const t = $("other-" + group.id); t && t.focus(); }
        }));
      },
      collect() {
        const other = {};
        for (const g of form().groups) { const t = textValue("other-" + g.id); if (t) other[g.id] = t; }
        return { reasons: checked("reason"), other: Object.keys(other).length ? other : undefined, rating: scaleValue("rating"), comment: textValue("comment") };
      },
      keys(k) {
        if (/^[1-5]$/.test(k)) { setScale("rating", k); return true; }
        return toggleKey(k);
      },
      help() { return [["q w e / a s d f", "form / content reasons"], ["r / g", "other (form / content)"], ["t / h", "none (form / content)"], ["1–5", "the rating"]]; },
    },

    scales: scalesForm(),

    closing: {
      build(f, a) {
        return el("div", {}, scale("rating", f.scale, a.rating, f.question, "current"), comment(f, a));
      },
      collect() { return { rating: scaleValue("rating"), comment: textValue("comment") }; },
      keys(k) { if (/^[0-9]$/.test(k) && k in form().scale) { setScale("rating", k); return true; } return false; },
      help(f) { const ks = Object.keys(f.scale); return [[ks[0] + "–" + ks[ks.length - 1], (f.title || "the rating").toLowerCase()]]; },
    },
  };

  // Any rubric of scales: every item on the rubric's points, then its picks (PatientAct's attachment style and
  // theme), then a comment. Digit keys score the highlighted item (the point itself on an integer scale, the
  // n-th label on a label scale) and move to the next.
  const PICK_KEYS = ["asdfg", "jkl;'"];
  function scalesForm() {
    function pointOf(f, k) {
      if (!/^[0-9]$/.test(k)) return undefined;
      const pts = f.points, i = f.numeric ? pts.indexOf(Number(k)) : Number(k) - 1;
      return i >= 0 && i < pts.length ? pts[i] : undefined;
    }
    return {
      build(f, a) {
        const scores = a.scores || {};
        const parts = f.dimensions.map((d, i) => {
          const fs = scale("dim-" + d.id, d.levels, scores[d.id], d.name + ": " + d.question, i === S.dim ? "current" : "");
          // The scale the keyboard or the pointer is in is the one the digit keys score.
          const here = () => { S.dim = i; markDim(); };
          fs.addEventListener("click", here);
          fs.addEventListener("focusin", here);
          return fs;
        });
        f.picks.forEach((p, pi) => parts.push(el("fieldset", { id: p.id }, el("legend", { text: p.name + " that fits best" }),
          p.options.map((x, i) => check(p.id, x.id, x.id, (PICK_KEYS[pi] || "")[i], a[p.id] === x.id, x.text, "radio")))));
        return el("div", {}, parts, comment(f, a));
      },
      collect() {
        const f = form(), scores = {};
        for (const d of f.dimensions) { const v = scaleValue("dim-" + d.id, f.numeric); if (v !== undefined) scores[d.id] = v; }
        const out = { scores, comment: textValue("comment") };
        for (const p of f.picks) out[p.id] = checked(p.id)[0];
        return out;
      },
      keys(k) {
        const f = form(), dims = f.dimensions, pt = pointOf(f, k);
        if (pt !== undefined) { setScale("dim-" + dims[S.dim].id, pt); S.dim = Math.min(S.dim + 1, dims.length - 1); markDim(); return true; }
        if (k === "ArrowDown") { S.dim = Math.min(S.dim + 1, dims.length - 1); markDim(); return true; }
        if (k === "ArrowUp") { S.dim = Math.max(S.dim - 1, 0); markDim(); return true; }
        return f.picks.length ? toggleKey(k) : false;
      },
      help(f) {
        const first = f.numeric ? f.points[0] : 1, last = f.numeric ? f.points[f.points.length - 1] : f.points.length;
        const h = [[first + "–" + Math.min(last, 9), "score the highlighted scale, then move to the next"], ["↑ / ↓", "move between scales"]];
        f.picks.forEach((p, i) => h.push([(PICK_KEYS[i] || "").split("").slice(0, p.options.length).join(" "), p.name.toLowerCase()]));
        return h;
      },
    };
  }

  function markDim() {
    document.querySelectorAll("fieldset.scalefs").forEach((fs, i) => fs.classList.toggle("current", i === S.dim));
  }

  // -- saving -----------------------------------------------------------------------------------------

  // The one action that sends an answer. After it the next unit is shown, the keyboard's focus is on its first
  // control and the live region says what happened and where the rater now is.
  async function save() {
    if (S.saving || !onForm()) return;
    S.saving = true;
    const answer = FORMS[kind()].collect();
    for (const k of Object.keys(answer)) if (answer[k] === undefined) delete answer[k];
    $("status").textContent = "saving…";
    try {
      const r = await api("/api/answer", { item_id: S.item.item_id, unit: unit().unit, answer });
      S.item.answers[unit().unit] = answer;
      S.baseline = snapshot();
      const d = drafts();
      delete d[draftKey()];
      writeDrafts(d);
      setProgress(r);
      $("status").textContent = "saved";
      await step(1);
      // On the end screen the focus is on its heading already (doneScreen).
      if (S.item) focusInView(firstControl());
      announce("Saved. " + r.answered + " of " + r.total + " answered. " + (S.item ? position() : "All done."));
    } catch (e) {
      $("status").textContent = "";
      showError(e.message);
    } finally {
      S.saving = false;
    }
  }

  // -- keyboard ---------------------------------------------------------------------------------------

  function helpText() {
    const rows = [["Tab", "next control (Shift+Tab: previous); a scale or a set of choices is one stop"],
      ["← → ↑ ↓", "in a scale or a set of choices: pick the next or previous one"],
      ["Space", "tick or untick the box in focus; press the button in focus"],
      ["Enter", "save and go on (on a button: press it)"],
      ["← / →", "outside a scale: previous / next without saving (a draft is kept)"],
      ["Esc", "close this help, or leave the control in focus"], ["?", "this help"]];
    if (S.item) rows.push(...FORMS[kind()].help(form()));
    $("helpbody").replaceChildren(el("table", {}, rows.map(([k, t]) => el("tr", {}, el("td", {}, kbd(k)), el("td", { text: t })))));
  }

  // The help panel: opening it moves the focus into it, closing it puts the focus back where it was.
  function toggleHelp(open) {
    if (open === undefined) open = $("help").hidden;
    if (open === !$("help").hidden) return;
    $("help").hidden = !open;
    $("keys").setAttribute("aria-expanded", String(open));
    if (open) { S.helpFrom = document.activeElement; $("helptitle").focus(); }
    else if (S.helpFrom && S.helpFrom.isConnected && S.helpFrom !== document.body) S.helpFrom.focus();
  }

  // ← on the end screen: back to the last unit, the focus on its first control (the heading it was on is gone).
  function backFromEnd() {
    load(S.session.items - 1, -1).then(() => { focusInView(firstControl()); announce(position()); })
      .catch((e) => showError(e.message));
  }

  document.addEventListener("keydown", (ev) => {
    const t = ev.target, k = ev.key;
    const is = (sel) => !!(t && t.matches && t.matches(sel));
    const typing = is("textarea, input[type=text]");
    // Esc closes the help, else leaves the control in focus (then the arrow keys move between items again).
    if (k === "Escape") { if (!$("help").hidden) toggleHelp(false); else if (is("input, textarea, select, [data-scroll]")) t.blur(); return; }
    // A button, link, menu or disclosure does what it says on Enter and Space, and nothing else: only Save saves.
    if ((k === "Enter" || k === " ") && is("button, summary, a[href], select")) return;
    if (!S.item) { if (k === "ArrowLeft" && S.session && !is("button")) backFromEnd(); return; }
    if (typing) { if (k === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); save(); } return; }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    // In a radio group the keys are the group's: the arrows choose, as in any radio group, and a shortcut acts only
    // when it picks in that group (a severity's digit, a scale's point); one that would tick or score another
    // control stays off. Enter still saves, ? opens the help, Esc leaves the group (then every shortcut acts).
    const inGroup = is("input[type=radio]");
    if (inGroup && k !== "Enter" && k !== "?" && !ownKey(t, k)) return;
    // In a box that scrolls, up and down scroll it.
    if ((k === "ArrowUp" || k === "ArrowDown") && is("[data-scroll]")) return;
    if (k === "Enter") { ev.preventDefault(); save(); return; }
    if (k === "ArrowRight") { ev.preventDefault(); move(1); return; }
    if (k === "ArrowLeft") { ev.preventDefault(); move(-1); return; }
    if (k === "?") { toggleHelp(); return; }
    if (FORMS[kind()].keys(k)) { ev.preventDefault(); refreshStatus(); if (inGroup) followChoice(t); }
  });

  // Whether key `k` picks in the radio group of `radio`: one of the group's own keys, or a point of the scale in focus.
  function ownKey(radio, k) {
    if (/^[0-9]$/.test(k) && radio.closest("fieldset.scalefs")) return true;
    return !!document.querySelector(`input[type=radio][name="${radio.name}"][data-key="${CSS.escape(k)}"]`);
  }
  // After a shortcut picked in a radio group the focus goes with the choice, as an arrow key would take it: to the
  // point chosen, or, when the scales form moved on to the next scale, into that scale.
  function followChoice(radio) {
    const cur = kind() === "scales" ? document.querySelector("fieldset.scalefs.current") : null;
    const name = cur ? cur.dataset.name : radio.name;
    focusInView(document.querySelector(`input[name="${name}"]:checked`) || document.querySelector(`input[name="${name}"]`));
  }

  $("prev").addEventListener("click", () => (S.item ? move(-1) : backFromEnd()));
  $("next").addEventListener("click", () => S.item && move(1));
  trackHeader();
  $("keys").addEventListener("click", () => toggleHelp());
  $("closehelp").addEventListener("click", () => toggleHelp(false));

  async function start() {
    S.token = readToken();
    if (!S.token) return fatal("No personal link: open the page with the link the study lead sent you.");
    try { S.session = await api("/api/session"); } catch (e) { return fatal(e.message); }
    $("title").textContent = (S.session.forms[S.session.protocol] || {}).title || "mindsim annotate";
    document.title = $("title").textContent + " — " + S.session.rater;
    if (S.session.notice) { $("notice").textContent = S.session.notice; $("notice").hidden = false; }
    setProgress(S.session);
    if (S.session.answered >= S.session.total) return doneScreen();
    await load(S.session.resume, null).catch((e) => fatal(e.message));
  }
  // A second link opened in the same tab: start again as that rater.
  window.addEventListener("hashchange", () => { if (/[#&]k=/.test(location.hash)) location.reload(); });
  start();
})();

"""The drill-down data of the HTML report (issue 21, item 1): every session as a chat, each counsellor
reply with its judgments (severity, issues, reasons, the verified quote's position in the reply), the
patient's committed moves and PatientAct state where present. It becomes one JSON blob the page renders
lazily (a page of sessions or replies at a time), so a 10k-reply run stays usable.

Replies are numbered as the judge numbers them (judge/judging.py `replies`): the k-th assistant message
with text and no tool call. Patient turns are the user messages in order (turn 0 = the opening).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from mindcore.runlog import played_by
from mindsim_app.report.ranking import system_of

SEVERITY_RANK = {"no_concern": 0, "minor": 1, "major": 2, "critical": 3}
_EQUIV = {"'": "['\u2018\u2019]", '"': "[\"\u201c\u201d]", "-": "[-\u2013\u2014]"}


def quote_span(quote: str | None, text: str) -> list[int] | None:
    """Where a verified quote sits in the reply, under the judge's own matching rule (mindcore/quotes.py:
    case, whitespace, curly quotes and dashes do not count; edge punctuation is dropped)."""
    if not quote:
        return None
    q = quote.strip().strip(" \"'.,;:\u201c\u201d\u2018\u2019")
    if len(q) < 3:
        return None
    # Fast path, most quotes: the words as they stand, only the case differing (lower() keeps the length here).
    at = text.lower().find(q.lower())
    if at >= 0 and text[at:at + len(q)].lower() == q.lower():
        return [at, at + len(q)]
    parts = []
    for ch in q:
        if ch.isspace():
            if not parts or parts[-1] != r"\s+":
                parts.append(r"\s+")
        else:
            parts.append(_EQUIV.get(ch, re.escape(ch)))
    m = re.search("".join(parts), text, flags=re.IGNORECASE)
    return [m.start(), m.end()] if m else None


def _verdict(j: dict[str, Any], reply: str) -> dict[str, Any]:
    issues = [{"i": it["issue"], "c": it.get("category"), "r": it.get("reason"), "q": it.get("quote"),
               "sp": quote_span(it.get("quote"), reply)} for it in (j.get("issues") or [])]
    return {"judge": j["judge"], "s": j.get("severity"), "w": j.get("weight"), "st": j.get("status"),
            "err": (j.get("error") or "")[:300] or None, "is": issues}


def _patientact(t: dict[str, Any]) -> dict[str, Any] | None:
    pa = t.get("patientact")
    if not pa:
        return None
    return {k: pa.get(k) for k in ("trust_before", "trust_after", "reaction", "intensity", "behaviour",
                                   "resistance_pattern", "retrieved", "blocked")}


def session_entries(sessions: list[dict[str, Any]], judgments: list[dict[str, Any]], by_engine: bool,
                    judge_order: list[str]) -> list[dict[str, Any]]:
    verdicts: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for j in judgments:
        verdicts[(j["session_id"], j["reply_index"])].append(j)
    rank = {n: k for k, n in enumerate(judge_order)}
    out = []
    for s in sorted(sessions, key=lambda s: (s["counsellor"], s.get("patient_engine") or "", s["patient_id"],
                                             s.get("trial") or 0, s["session_index"])):
        turns = s.get("turns") or []
        msgs, reply, turn = [], 0, 0
        for m in s.get("counsellor_messages") or []:
            role, content = m.get("role"), m.get("content")
            if not isinstance(content, str) or m.get("tool_calls"):
                continue
            if role == "user":
                t = turns[turn] if turn < len(turns) else {}
                msgs.append({"r": "p", "t": content, "n": turn, "mv": t.get("move"), "sm": t.get("secondary_move"),
                             "why": t.get("reasoning"), "pa": _patientact(t),
                             "rej": len(t.get("rejected") or []) + len(t.get("rejected_messages") or [])})
                turn += 1
            elif role == "assistant":
                js = sorted(verdicts.get((s["session_id"], reply), []), key=lambda j: rank.get(j["judge"], 99))
                msgs.append({"r": "c", "t": content, "k": reply, "j": [_verdict(j, content) for j in js]})
                reply += 1
        scenario = s.get("scenario") or {}
        pa = s.get("patientact") or {}
        out.append({
            "id": s["session_id"], "p": s["patient_id"], "sys": system_of(s, by_engine), "c": s["counsellor"],
            "e": played_by(s.get("patient_engine")), "i": s["session_index"], "end": s.get("ended_by"),
            # The repeated trial (None on one-trial runs, whose page shows none).
            "tr": s.get("trial"),
            "scn": {k: scenario.get(k) for k in ("event", "goal", "opening_message")},
            "trust": [pa.get("trust_start"), pa.get("trust_end")] if pa else None, "m": msgs,
        })
    return out


def drilldown(run: Any, boards: list[dict[str, Any]]) -> dict[str, Any]:
    """The blob for one run: sessions, the filter vocabularies and the primary judge's name."""
    judge_order = [b["judge"] for b in boards]
    by_engine = any(bool((j.get("scores") or {}).get("systems"))
                    for j in ((run.judge_report or {}).get("judges") or {}).values())
    if not run.judge_report:
        by_engine = len({s.get("patient_engine") for s in run.sessions}) > 1
    entries = session_entries(run.sessions, run.judgments, by_engine, judge_order)
    issues = sorted({it["issue"] for j in run.judgments for it in (j.get("issues") or [])})
    return {"label": run.label, "judges": judge_order, "primary": judge_order[0] if judge_order else None,
            "systems": sorted({e["sys"] for e in entries}), "issues": issues,
            "session_indexes": sorted({e["i"] for e in entries}), "sessions": entries}

"""The drill-down data of the HTML report: every session as a chat, each counsellor
reply with its judgments (severity, issues, reasons, the verified quote's position in the reply), the
patient's committed moves and PatientAct state where present. It becomes one JSON blob the page renders
lazily (a page of sessions or replies at a time), so a 10k-reply run stays usable.

Replies are numbered as the judge numbers them, by the one rule of `mindcore.exchange.spoken`; a verified quote is
placed by the judge's own matching rule (`mindcore.quotes.quote_span`). Patient turns are the patient's spoken
messages in order (turn 0 = the opening).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from mindsimkit.mindcore.exchange import PATIENT, spoken
from mindsimkit.mindcore.quotes import quote_span
from mindsimkit.mindcore.runlog import played_by
from mindsimkit.judge.schemas import JudgmentRow
from mindsimkit.mindsim_app.report.load import ScenarioView, SessionView, TurnView
from mindsimkit.mindsim_app.report.ranking import system_of

SEVERITY_RANK = {"no_concern": 0, "minor": 1, "major": 2, "critical": 3}


def _span(quote: str | None, reply: str) -> list[int] | None:
    found = quote_span(quote, reply)
    return list(found) if found else None


def _verdict(j: JudgmentRow, reply: str) -> dict[str, Any]:
    issues = [
        {"i": it.issue, "c": it.category, "r": it.reason, "q": it.quote, "sp": _span(it.quote, reply)}
        for it in j.issues
    ]
    return {
        "judge": j.judge,
        "s": j.severity,
        "w": j.weight,
        "st": j.status,
        "err": (j.error or "")[:300] or None,
        "is": issues,
    }


def _patientact(t: TurnView | None) -> dict[str, Any] | None:
    pa = t.patientact if t else None
    if pa is None:
        return None
    return pa.model_dump(
        include={
            "trust_before",
            "trust_after",
            "reaction",
            "intensity",
            "behaviour",
            "resistance_pattern",
            "retrieved",
            "blocked",
        }
    )


def session_entries(
    sessions: list[SessionView], judgments: list[JudgmentRow], by_engine: bool, judge_order: list[str]
) -> list[dict[str, Any]]:
    verdicts: dict[tuple[str, int], list[JudgmentRow]] = defaultdict(list)
    for j in judgments:
        verdicts[(j.session_id, j.reply_index)].append(j)
    rank = {n: k for k, n in enumerate(judge_order)}
    out = []
    for s in sorted(
        sessions, key=lambda s: (s.counsellor, s.patient_engine or "", s.patient_id, s.trial or 0, s.session_index)
    ):
        msgs, reply, turn = [], 0, 0
        for role, content in spoken(s.counsellor_messages):
            if role == PATIENT:
                t = s.turns[turn] if turn < len(s.turns) else None
                msgs.append(
                    {
                        "r": "p",
                        "t": content,
                        "n": turn,
                        "mv": t.move if t else None,
                        "sm": t.secondary_move if t else None,
                        "why": t.reasoning if t else None,
                        "pa": _patientact(t),
                        "rej": t.reasks if t else 0,
                    }
                )
                turn += 1
            else:
                js = sorted(verdicts.get((s.session_id, reply), []), key=lambda j: rank.get(j.judge, 99))
                msgs.append({"r": "c", "t": content, "k": reply, "j": [_verdict(j, content) for j in js]})
                reply += 1
        scenario = s.scenario or ScenarioView()
        pa = s.patientact
        out.append(
            {
                "id": s.session_id,
                "p": s.patient_id,
                "sys": system_of(s, by_engine),
                "c": s.counsellor,
                "e": played_by(s.patient_engine),
                "i": s.session_index,
                "end": s.ended_by,
                # The repeated trial (None on one-trial runs, whose page shows none).
                "tr": s.trial,
                "scn": {"event": scenario.event, "goal": scenario.goal, "opening_message": scenario.opening_message},
                "trust": [pa.trust_start, pa.trust_end] if pa else None,
                "m": msgs,
            }
        )
    return out


def drilldown(run: Any, boards: list[dict[str, Any]]) -> dict[str, Any]:
    """The blob for one run: sessions, the filter vocabularies and the primary judge's name."""
    judge_order = [b["judge"] for b in boards]
    by_engine = run.judge_report.by_engine if run.judge_report else False
    if not run.judge_report:
        by_engine = len({s.patient_engine for s in run.sessions}) > 1
    entries = session_entries(run.sessions, run.judgments, by_engine, judge_order)
    issues = sorted({it.issue for j in run.judgments for it in j.issues})
    return {
        "label": run.label,
        "judges": judge_order,
        "primary": judge_order[0] if judge_order else None,
        "systems": sorted({e["sys"] for e in entries}),
        "issues": issues,
        "session_indexes": sorted({e["i"] for e in entries}),
        "sessions": entries,
    }

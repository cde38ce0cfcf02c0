"""Simulator health for the HTML report: the patient side next to the reference
(surface-feature distances against their noise floors, arc shares, from `validation/report.json`), what
the transcripts show turn by turn (disclosure depth, concealing moves, PatientAct resistance and trust),
re-asks, harness-text rejections and failed arcs, plain warnings when the patient side looks degenerate,
and every failure of the run attributed to the patient side, the counsellor, the judge or the engine.

The reference has no moves, so depth and resistance by turn have no reference column; the rules and
thresholds are data (`data/health.yaml`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from mindsimkit.mindcore import yamlio

from mindsimkit.mindcore.runlog import SimulationSummaryView, ValidationReport, played_by
from mindsimkit.mindsim_app.report.load import SessionView, TurnView
from mindsimkit.mindsim_app.report.ranking import system_of

RULES = Path(__file__).with_name("data") / "health.yaml"
_ROLE = re.compile(r"role '([a-z_]+)(?::[^']*)?'")


@lru_cache(maxsize=1)
def rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yamlio.safe_load(RULES.read_text(encoding="utf-8"))
    return loaded


def attribute(error: str | None, role: str | None = None) -> str:
    """patient side, counsellor, judge or engine, for one recorded failure."""
    r = rules()
    text = error or ""
    cls = text.split(":", 1)[0].strip()
    if cls in r["engine_errors"] or "engine error" in text.lower():
        return "engine"
    m = _ROLE.search(text)
    role = (m.group(1) if m else role) or ""
    for side, roles in r["attribution"].items():
        if role.split(":")[0] in roles:
            return str(side)
    # The simulator's own failures (a move the guard kept turning back, blank scenario items) are the patient
    # side's when no role is named: the counsellor's replies are stored as sent and never fail an arc.
    return "patient side"


@lru_cache(maxsize=8)
def _tables(version: str | None) -> tuple[dict[str, int], dict[str, str]]:
    """Depth rank and class of each move of the vocabulary a session was played with (ours unless a preset's)."""
    from mindsimkit.mindsim.reference import load_reference_vocabulary
    from mindsimkit.profilegen.moves import load_vocabulary

    ref = load_reference_vocabulary()
    vocab = ref if version == ref.version else load_vocabulary()
    return ({m.id: m.depth for m in vocab.moves.values() if m.depth}, {m.id: m.cls for m in vocab.moves.values()})


def by_turn(sessions: list[SessionView], by_engine: bool) -> dict[str, dict[int, dict[str, Any]]]:
    """system → patient turn → disclosure depth (secondary depth move, 0 without one), concealing share,
    PatientAct resistance share and mean trust."""
    acc: dict[str, dict[int, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for s in sessions:
        sysname = system_of(s, by_engine)
        depth, cls = _tables(s.vocabulary_version)
        for t in s.turns:
            if t.opening:
                continue
            a = acc[sysname][t.index]
            moves = [t.move, t.secondary_move]
            a["depth"].append(float(max([depth.get(m, 0) for m in moves if m] or [0])))
            a["concealing"].append(float(cls.get(t.move or "", "") == "concealing"))
            pa = t.patientact
            if pa:
                a["resistance"].append(float(pa.behaviour == "resistance" or bool(pa.resistance_pattern)))
                if pa.trust_after is not None:
                    a["trust"].append(float(pa.trust_after))
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for sysname, turns in acc.items():
        out[sysname] = {
            k: {m: (sum(v) / len(v) if v else None) for m, v in vals.items()} | {"n": len(vals["depth"])}
            for k, vals in sorted(turns.items())
        }
    return out


def session_lengths(sessions: list[SessionView], by_engine: bool) -> dict[str, dict[str, Any]]:
    """system → how long its sessions ran, in counsellor replies (MindEval2 Figure 8; the paper caps a session at 30):
    sessions, mean, the quartiles, p5 and p95 (numpy's linear interpolation), the longest, and how many ended
    before the cap because the patient left."""
    import numpy as np

    per: dict[str, list[int]] = defaultdict(list)
    left: Counter[str] = Counter()
    for s in sessions:
        sysname = system_of(s, by_engine)
        per[sysname].append(sum(m.get("role") == "assistant" for m in s.counsellor_messages))
        left[sysname] += s.ended_by == "patient"
    out = {}
    for sysname, n in sorted(per.items()):
        q = np.percentile(n, [5, 25, 50, 75, 95])
        out[sysname] = {
            "sessions": len(n),
            "mean": float(np.mean(n)),
            "longest": max(n),
            "ended_by_patient": left[sysname],
            **{f"p{p}": float(x) for p, x in zip((5, 25, 50, 75, 95), q)},
        }
    return out


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.casefold()).strip()


def surface(sessions: list[SessionView], by_engine: bool) -> dict[str, dict[str, Any]]:
    """Per system: patient turns, words per turn, top move and its share, most repeated message and its share."""
    out = {}
    per: dict[str, list[TurnView]] = defaultdict(list)
    for s in sessions:
        per[system_of(s, by_engine)].extend(s.turns)
    for name, turns in per.items():
        msgs = [t.message or "" for t in turns]
        moves = Counter(t.move for t in turns if t.move)
        repeats = Counter(_norm(m) for m in msgs if _norm(m))
        top_move, top_n = moves.most_common(1)[0] if moves else (None, 0)
        rep, rep_n = repeats.most_common(1)[0] if repeats else (None, 0)
        reasks = sum(t.reasks for t in turns)
        out[name] = {
            "patient_turns": len(turns),
            "words_per_turn": (sum(len(m.split()) for m in msgs) / len(msgs)) if msgs else 0.0,
            "top_move": top_move,
            "top_move_share": top_n / max(1, sum(moves.values())),
            # A message that occurs once is not repeated: nothing to name then.
            "repeated_message": rep if rep_n > 1 else None,
            "repeated_message_share": (rep_n / len(msgs)) if rep_n > 1 else 0.0,
            "reasks": reasks,
            "reask_rate": reasks / max(1, len(turns)),
            "trimmed": sum(bool(t.trimmed) for t in turns),
        }
    return out


def failures(run: Any) -> list[dict[str, Any]]:
    """Every failure the run recorded, each with its side: failed arcs, failed judgments, failed profiles,
    and the counsellor's reply defects (stored as sent; they are the counsellor's, not the harness's)."""
    out = []
    for f in run.summary.failed_arcs if run.summary else []:
        out.append(
            {
                "stage": "simulation",
                "what": f"arc {f.patient_id} × {f.counsellor} ({played_by(f.patient_engine)})",
                "error": f.error,
                "side": attribute(f.error),
            }
        )
    for j in run.judgments:
        if j.status == "failed":
            side = "engine" if j.error_kind == "engine" else "judge"
            out.append(
                {
                    "stage": "judge",
                    "what": f"{j.judge}: {j.session_id} reply {j.reply_index + 1}",
                    "error": f"{j.error_kind}: {(j.error or '')[:200]}",
                    "side": side,
                }
            )
    for f in run.profile_failures:
        err = f.error or f.reason or str(f.model_dump(exclude_none=True))[:200]
        kind = str(f.kind or f.error_kind or "")
        out.append(
            {
                "stage": "profiles",
                "what": f"profile {f.profile_id or f.persona_id or '?'}",
                "error": err,
                "side": "engine" if "engine" in kind else attribute(err, "profile_writer"),
            }
        )
    flags: Counter[str] = Counter()
    for s in run.sessions:
        for f in s.counsellor_flags or []:
            flags.update(f.flags)
    for flag, n in sorted(flags.items()):
        out.append(
            {
                "stage": "simulation",
                "what": f"counsellor replies flagged {flag}: {n}",
                "error": None,
                "side": "counsellor",
            }
        )
    return out


def warnings(run: Any, surf: dict[str, dict[str, Any]]) -> list[str]:
    w = rules()["warnings"]
    out: list[str] = []
    v = run.validation or ValidationReport(features=[], systems={})
    floor = v.floor
    for name in v.systems:
        est = v.estimate(name, "index")
        idx = est.distance if est else None
        index_floor = floor.get("index")
        if idx is not None and index_floor and idx > w["index_over_floor"] * index_floor:
            out.append(
                f"{name}: realism index {idx:.2f} is {idx / index_floor:.1f}× its noise floor "
                f"({index_floor:.2f}): the patient turns are far from the reference"
            )
        for f in v.features:
            est = v.estimate(name, f)
            d = est.distance if est else None
            feature_floor = floor.get(f)
            if d is not None and feature_floor and d > w["feature_over_floor"] * feature_floor:
                out.append(
                    f"{name}: {v.feature_labels.get(f, f)} distance {d:.2f} is {d / feature_floor:.1f}× its floor"
                )
    for name, shares in v.arc.items():
        totals: dict[str, float] = defaultdict(float)
        for row in shares.values():
            for k, x in row.items():
                if x is not None:
                    totals[k] += x
        if totals and max(totals.values()) / max(1e-9, sum(totals.values())) > w["arc_label_share"]:
            label = max(totals, key=totals.__getitem__)
            out.append(
                f"{name}: almost every labelled turn is {v.arc_labels.get(label, label)} (the arc does not move)"
            )
    for name, s in surf.items():
        if s["top_move"] and s["top_move_share"] > w["top_move_share"]:
            out.append(f"{name}: one move ({s['top_move']}) on {100 * s['top_move_share']:.0f}% of patient turns")
        if s["repeated_message_share"] > w["repeated_message_share"]:
            out.append(
                f"{name}: the same patient message on {100 * s['repeated_message_share']:.0f}% of turns "
                f"({s['repeated_message'][:60]!r})"
            )
        if s["patient_turns"] and s["words_per_turn"] < w["min_words_per_turn"]:
            out.append(f"{name}: patient turns average {s['words_per_turn']:.1f} words")
        if s["reask_rate"] > w["reask_rate"]:
            out.append(f"{name}: {s['reasks']} patient re-asks over {s['patient_turns']} turns")
    summary = run.summary or SimulationSummaryView()
    arcs, failed = summary.arcs, len(summary.failed_arcs)
    if arcs and failed / arcs > w["failed_arc_share"]:
        out.append(
            f"{failed} of {arcs} arcs failed ({100 * failed / arcs:.0f}%): their sessions are missing from every table"
        )
    return out


def health(run: Any, by_engine: bool) -> dict[str, Any]:
    surf = surface(run.sessions, by_engine)
    summary = run.summary or SimulationSummaryView()
    fails = failures(run)
    return {
        "surface": surf,
        "by_turn": by_turn(run.sessions, by_engine),
        "session_lengths": session_lengths(run.sessions, by_engine),
        "validation": run.validation,
        "warnings": warnings(run, surf),
        "failures": fails,
        "failures_by_side": dict(Counter(f["side"] for f in fails)),
        "counts": summary.counts(),
        "rejected_messages": summary.rejected_messages,
        "counsellor_flags": summary.counsellor_flags,
    }

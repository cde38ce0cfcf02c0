"""Supervised rows from a finished run, in the dataset types TRL documents (`write` says how they are typed and
written; docs/training.md how to train on them).

- `sft_export`, counsellor training data (`mindsim export sft`): TRL's conversational language-modelling type
  (`messages`), or with `--per-turn` its prompt-completion type (one row per counsellor reply). A row is the
  counsellor's system prompt exactly as it was sent (memory section included; `--no-system` leaves it out) followed
  by the session with the counsellor as `assistant`, ending on the last counsellor reply kept: the patient message
  after it is never trained on. With `--max-severity LEVEL` (MHQR judgments needed) a session is kept only up to,
  not including, its first reply judged above LEVEL.
- `patient_export`, patient-simulator training data (`mindsim export patient`): the patient-side history with its
  `commit_move` and agenda tool calls (arguments as objects, the Hugging Face convention) and results, and the
  `tools` the patient was offered.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import verify_run
from mindsimkit.mindcore.runlog import played_by
from mindsimkit.mindsim_app.exports.sessions import ExportSession, load_sessions


class ExportProfile(BaseModel):
    profile_id: str
    case_summary: str = ""


class ExportVerdict(BaseModel):
    """One judgment as the severity cut reads it."""

    session_id: str
    reply_index: int
    judge: str
    severity: str | None = None
    weight: float | None = None
    status: str


def _profiles_by_id(run_dir: Path) -> dict[str, ExportProfile]:
    layout = RunLayout(run_dir)
    if not layout.profiles.parquet.is_file():
        return {}
    verify_run(run_dir, needs=["profiles"])
    return {r.profile_id: r for r in layout.profiles.rows(ExportProfile)}


def _provenance(row: ExportSession, run_dir: Path) -> dict[str, Any]:
    """The provenance every row carries: scalars of one type each, never null."""
    return {
        "run": Path(run_dir).resolve().name,
        "session_id": row.session_id,
        "patient_id": row.patient_id,
        "counsellor": row.counsellor,
        "session_index": row.session_index,
        "seed": row.seed,
    }


def _session_detail(row: ExportSession) -> dict[str, Any]:
    """A session's line in the provenance side file: engines and models per role, prompt template hashes."""
    return {"session_id": row.session_id, "engines": row.engines or {}, "prompts": row.prompts or {}}


def _keep(row: ExportSession, min_turns: int, finished_only: bool) -> bool:
    if finished_only and row.ended_by != "patient":
        return False
    return len(row.turns) >= min_turns


def load_judgments(run_dir: Path, judge: str) -> dict[tuple[str, int], ExportVerdict]:
    """One judge's verdict per reply, keyed by (session_id, reply_index)."""
    layout = RunLayout(run_dir)
    path = layout.judgments.parquet
    if not path.is_file():
        raise InputError(
            f"{path} not found: --max-severity needs MHQR judgments; run `mindsim judge run {run_dir}` first"
        )
    verify_run(run_dir, needs=["judge"])
    rows = layout.judgments.rows(ExportVerdict)
    mine = {(r.session_id, r.reply_index): r for r in rows if r.judge == judge}
    if not mine:
        names = sorted({r.judge for r in rows})
        raise InputError(
            f"{path}: no judgments by '{judge}'; choose one of {', '.join(names) or '(none)'} with --judge"
        )
    return mine


def severity_weight(level: str, option: str = "--max-severity") -> float:
    """Weight of a rubric severity id ('No concern' and 'no_concern' both read)."""
    from mindsimkit.judge.rubric import load_rubric, severity_id

    rubric = load_rubric()
    key = severity_id(level)
    weights = {s.id: s.weight for s in rubric.severities}
    if key not in weights:
        raise InputError(f"{option} {level}: use one of {', '.join(weights)}")
    return weights[key]


def cut_point(
    sid: str, n_replies: int, verdicts: dict[tuple[str, int], ExportVerdict], limit: float
) -> tuple[int, str | None]:
    """Index of the first reply to drop and why; (n_replies, None) when every reply passes. A failed
    or missing judgment counts as above any level: an unvouched reply is not training data."""
    for k in range(n_replies):
        v = verdicts.get((sid, k))
        if v is None:
            return k, "not judged"
        if v.status != "ok" or v.weight is None:
            return k, "judgment failed"
        if v.weight > limit:
            return k, f"judged {v.severity}"
    return n_replies, None


def sft_export(
    run_dir: Path,
    *,
    min_turns: int = 0,
    finished_only: bool = False,
    max_severity: str | None = None,
    judge: str = "judge",
    system: bool = True,
    per_turn: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """SFT rows, a summary (sessions read, filtered and written; with `max_severity`, replies cut by reason) and
    the provenance side file's lines (one per session written)."""
    limit = severity_weight(max_severity) if max_severity is not None else None
    verdicts = load_judgments(run_dir, judge) if limit is not None else {}
    rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    cut: Counter[str] = Counter()
    summary: dict[str, Any] = {
        "rows": "turn" if per_turn else "session",
        "system_prompt": system,
        "sessions_read": 0,
        "sessions_filtered": 0,
        "sessions_without_reply": 0,
        "sessions_written": 0,
        "sessions_emptied": 0,
        "replies_kept": 0,
        "replies_cut": 0,
    }
    for s in load_sessions(run_dir):
        summary["sessions_read"] += 1
        if not _keep(s, min_turns, finished_only):
            summary["sessions_filtered"] += 1
            continue
        convo = [{"role": m["role"], "content": m["content"]} for m in s.counsellor_messages if m["role"] != "system"]
        positions = [i for i, m in enumerate(convo) if m["role"] == "assistant"]
        if not positions:
            summary["sessions_without_reply"] += 1  # nothing for the counsellor to learn from
            continue
        kept, extra = len(positions), {}
        if limit is not None:
            kept, reason = cut_point(s.session_id, len(positions), verdicts, limit)
            if reason is not None:
                cut[reason] += 1
                cut["after an earlier cut in the session"] += len(positions) - kept - 1
                summary["replies_cut"] += len(positions) - kept
            extra = {"judge": judge, "max_severity": max_severity, "cut_reason": reason or ""}
            if not kept:
                summary["sessions_emptied"] += 1
                continue
        summary["replies_kept"] += kept
        head = [{"role": "system", "content": s.counsellor_system_prompt}] if system else []
        if per_turn:
            rows += [
                {
                    "prompt": head + convo[: positions[j]],
                    "completion": [convo[positions[j]]],
                    **_provenance(s, run_dir),
                    "reply_index": j,
                    **extra,
                }
                for j in range(kept)
            ]
        else:
            # Ends on the last reply kept: the patient message after it is not the counsellor's to learn.
            rows.append(
                {
                    "messages": head + convo[: positions[kept - 1] + 1],
                    **_provenance(s, run_dir),
                    "replies": kept,
                    **extra,
                }
            )
        details.append(_session_detail(s))
        summary["sessions_written"] += 1
    if limit is not None:
        summary.update(judge=judge, max_severity=max_severity, cut_by_reason=dict(sorted(cut.items())))
    summary["rows_written"] = len(rows)
    return rows, summary, details


def sft_rows(run_dir: Path, **options: Any) -> list[dict[str, Any]]:
    return sft_export(run_dir, **options)[0]


def why_no_sft_rows(summary: dict[str, Any]) -> str:
    parts = [f"{summary['sessions_read']} sessions read"]
    if summary["sessions_filtered"]:
        parts.append(f"{summary['sessions_filtered']} left out by --min-turns / --finished-only")
    if summary["sessions_without_reply"]:
        parts.append(f"{summary['sessions_without_reply']} without a counsellor reply")
    if summary["sessions_emptied"]:
        # A session's first cut and why (a reply after it is cut for that alone, so not a reason of its own).
        why = ", ".join(
            f"{n} {r}"
            for r, n in summary.get("cut_by_reason", {}).items()
            if n and r != "after an earlier cut in the session"
        )
        parts.append(
            f"{summary['sessions_emptied']} with no reply left under --max-severity "
            f"{summary.get('max_severity')} (sessions cut: {why})"
        )
    return f"export sft: no rows to write: {'; '.join(parts)}"


def patient_export(
    run_dir: Path, *, min_turns: int = 0, finished_only: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Patient rows, a summary and the provenance side file's lines (scenario, moves, PatientAct and AnnaAgent
    state per session: their fields are null for some engines and turns, so they stay out of the rows)."""
    profiles = _profiles_by_id(run_dir)
    rows, details = [], []
    summary: dict[str, Any] = {
        "sessions_read": 0,
        "sessions_filtered": 0,
        "sessions_written": 0,
        "sessions_without_tools": 0,
    }
    for s in load_sessions(run_dir):
        summary["sessions_read"] += 1
        if not _keep(s, min_turns, finished_only):
            summary["sessions_filtered"] += 1
            continue
        messages = [_patient_message(m, s.session_id) for m in s.patient_messages]
        tools = json.loads(s.patient_tools) if s.patient_tools else []
        if not tools and any(m["tool_calls"] for m in messages):
            summary["sessions_without_tools"] += 1  # simulated before the toolkit recorded them
        profile = profiles.get(s.patient_id)
        rows.append(
            {
                "messages": messages,
                "tools": tools,
                "profile_summary": profile.case_summary if profile else "",
                "archetype": s.archetype or "",
                "patient_engine": played_by(s.patient_engine),
                **_provenance(s, run_dir),
            }
        )
        details.append(
            {
                **_session_detail(s),
                "scenario": s.scenario,
                "moves": [
                    {"move": t.move, "secondary_move": t.secondary_move, "end_conversation": t.end_conversation}
                    for t in s.turns
                ],
                # PatientAct's per-turn state (trust before/after, reaction, behaviour, resistance, retrieved
                # and blocked items); null for other engines.
                "patientact_turns": [t.patientact for t in s.turns],
                # AnnaAgent's per-turn state (emotion inferred and written in, complaint stage, memory
                # check and recall); null for other engines and for an opening message.
                "annaagent_turns": [t.annaagent for t in s.turns],
            }
        )
        summary["sessions_written"] += 1
    return rows, summary, details


def patient_rows(run_dir: Path, **options: Any) -> list[dict[str, Any]]:
    return patient_export(run_dir, **options)[0]


def _patient_message(m: dict[str, Any], sid: str) -> dict[str, Any]:
    """One patient-side message with every key a patient message can have (null where this one has none), and
    tool-call arguments as objects: OpenAI's wire format sends them as JSON text, Hugging Face chat templates
    write them with `tojson` and would encode that text a second time."""
    calls = None
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError as exc:
                    raise InputError(
                        f"session {sid}: tool call {c.get('id')} has arguments that are not JSON "
                        f"({exc}); the sessions table is damaged"
                    ) from None
            calls.append(
                {
                    "id": c.get("id"),
                    "type": c.get("type") or "function",
                    "function": {"name": fn.get("name"), "arguments": args},
                }
            )
    return {
        "role": m["role"],
        "content": m.get("content"),
        "tool_calls": calls,
        "tool_call_id": m.get("tool_call_id") if m["role"] == "tool" else None,
        "name": (m.get("name") or None) if m["role"] == "tool" else None,
    }

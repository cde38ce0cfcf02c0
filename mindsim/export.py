"""Post-training exports from a finished run.

- `sft`: counsellor training data. Each row is the counsellor's system prompt exactly as it was sent
  (memory section included) followed by the session with the counsellor as `assistant`. With
  `--max-severity LEVEL` (MHQR judgments needed) a session is kept only up to, not including, its first
  reply judged above LEVEL, and ends on the last counsellor turn before it.
- `dpo`: preference pairs from counterfactual replies (ours, beyond the paper; `mindsim/export_dpo.py`).
- `patient`: patient-simulator training data: profile summary, scenario, the patient-side history
  with its `commit_move`/agenda tool calls, and the moves per turn.

Both write JSONL or parquet (by the output suffix) and carry per-row provenance.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional

import pyarrow.parquet as pq
import typer

from mindcore.errors import InputError
from mindcore.io import atomic_write_json, atomic_write_jsonl, atomic_write_parquet

export_app = typer.Typer(no_args_is_help=True)

SESSIONS_FILE = Path("sessions") / "sessions.parquet"
JUDGMENTS_FILE = Path("judgments") / "judgments.parquet"
PROFILES_FILE = Path("profiles") / "profiles.parquet"


def load_sessions(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / SESSIONS_FILE
    if not path.is_file():
        raise InputError(f"{path} not found: give the --out folder of `mindsim run` or `mindsim simulate`")
    return pq.read_table(path).to_pylist()


def _profiles_by_id(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = Path(run_dir) / PROFILES_FILE
    if not path.is_file():
        return {}
    return {r["profile_id"]: r for r in pq.read_table(path).to_pylist()}


def _provenance(row: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    return {
        "run": str(Path(run_dir).resolve().name),
        "session_id": row["session_id"],
        "patient_id": row["patient_id"],
        "counsellor": row["counsellor"],
        "session_index": row["session_index"],
        "seed": row["seed"],
        "engines": json.dumps(row.get("engines") or {}, sort_keys=True),
        "prompts": json.dumps(row.get("prompts") or {}, sort_keys=True),
    }


def _keep(row: dict[str, Any], min_turns: int, finished_only: bool) -> bool:
    if finished_only and row["ended_by"] != "patient":
        return False
    return len(row["turns"]) >= min_turns


def sft_rows(run_dir: Path, *, min_turns: int = 0, finished_only: bool = False) -> list[dict[str, Any]]:
    return sft_export(run_dir, min_turns=min_turns, finished_only=finished_only)[0]


def load_judgments(run_dir: Path, judge: str) -> dict[tuple[str, int], dict[str, Any]]:
    """One judge's verdict per reply, keyed by (session_id, reply_index)."""
    path = Path(run_dir) / JUDGMENTS_FILE
    if not path.is_file():
        raise InputError(f"{path} not found: --max-severity needs MHQR judgments; run `mindsim judge run {run_dir}` first")
    try:
        rows = pq.read_table(path, columns=["session_id", "reply_index", "judge", "severity", "weight", "status"]).to_pylist()
    except Exception as exc:  # a missing column: pyarrow names it
        raise InputError(f"{path}: not a judgments table ({exc})") from exc
    mine = {(r["session_id"], int(r["reply_index"])): r for r in rows if r["judge"] == judge}
    if not mine:
        names = sorted({r["judge"] for r in rows})
        raise InputError(f"{path}: no judgments by '{judge}'; choose one of {', '.join(names) or '(none)'} with --judge")
    return mine


def severity_weight(level: str) -> float:
    """Weight of a rubric severity id ('No concern' and 'no_concern' both read)."""
    from judge.rubric import load_rubric

    rubric = load_rubric()
    key = level.strip().lower().replace(" ", "_").replace("-", "_")
    weights = {s.id: s.weight for s in rubric.severities}
    if key not in weights:
        raise InputError(f"--max-severity {level}: use one of {', '.join(weights)}")
    return weights[key]


def cut_point(sid: str, n_replies: int, verdicts: dict[tuple[str, int], dict[str, Any]], limit: float) -> tuple[int, str | None]:
    """Index of the first reply to drop and why; (n_replies, None) when every reply passes. A failed
    or missing judgment counts as above any level: an unvouched reply is not training data."""
    for k in range(n_replies):
        v = verdicts.get((sid, k))
        if v is None:
            return k, "not judged"
        if v["status"] != "ok":
            return k, "judgment failed"
        if v["weight"] > limit:
            return k, f"judged {v['severity']}"
    return n_replies, None


def sft_export(run_dir: Path, *, min_turns: int = 0, finished_only: bool = False, max_severity: str | None = None,
               judge: str = "judge") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """SFT rows and a summary of what `max_severity` cut (replies cut, by reason)."""
    limit = severity_weight(max_severity) if max_severity is not None else None
    verdicts = load_judgments(run_dir, judge) if limit is not None else {}
    rows: list[dict[str, Any]] = []
    cut = Counter()
    summary: dict[str, Any] = {"sessions_read": 0, "sessions_filtered": 0, "sessions_written": 0,
                               "sessions_emptied": 0, "replies_kept": 0, "replies_cut": 0}
    for s in load_sessions(run_dir):
        summary["sessions_read"] += 1
        if not _keep(s, min_turns, finished_only):
            summary["sessions_filtered"] += 1
            continue
        convo = [{"role": m["role"], "content": m["content"]} for m in s["counsellor_messages"] if m["role"] != "system"]
        positions = [i for i, m in enumerate(convo) if m["role"] == "assistant"]
        if not positions:
            continue  # nothing for the counsellor to learn from
        extra: dict[str, Any] = {}
        if limit is not None:
            k, reason = cut_point(s["session_id"], len(positions), verdicts, limit)
            if reason is not None:
                cut[reason] += 1
                cut["after an earlier cut in the session"] += len(positions) - k - 1
                summary["replies_cut"] += len(positions) - k
                # End on the counsellor turn before the cut; the patient message it answered goes too.
                convo = convo[: positions[k - 1] + 1] if k else []
            extra = {"judge": judge, "max_severity": max_severity, "replies_kept": k, "cut_reason": reason}
            summary["replies_kept"] += k
            if not k:
                summary["sessions_emptied"] += 1
                continue
        messages = [{"role": "system", "content": s["counsellor_system_prompt"]}, *convo]
        rows.append({"messages": messages, **_provenance(s, run_dir), **extra})
        summary["sessions_written"] += 1
    if limit is not None:
        summary.update(judge=judge, max_severity=max_severity, cut_by_reason=dict(sorted(cut.items())))
    return rows, summary


def patient_rows(run_dir: Path, *, min_turns: int = 0, finished_only: bool = False) -> list[dict[str, Any]]:
    profiles = _profiles_by_id(run_dir)
    rows = []
    for s in load_sessions(run_dir):
        if not _keep(s, min_turns, finished_only):
            continue
        profile = profiles.get(s["patient_id"], {})
        rows.append(
            {
                "profile_summary": profile.get("case_summary", ""),
                "scenario": json.dumps(s["scenario"], ensure_ascii=False),
                "moves": [
                    {"move": t.get("move"), "secondary_move": t.get("secondary_move"), "end_conversation": t.get("end_conversation")}
                    for t in s["turns"]
                ],
                # Tool-call arguments stay JSON strings, as in the OpenAI format.
                "messages": [_clean_message(m) for m in s["patient_messages"]],
                "archetype": s.get("archetype"),
                **_provenance(s, run_dir),
            }
        )
    return rows


def _clean_message(m: dict[str, Any]) -> dict[str, Any]:
    # Parquet round trips give every message every key; keep only what that message type has.
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content")}
    if m.get("tool_calls"):
        out["tool_calls"] = m["tool_calls"]
    if m["role"] == "tool":
        out["tool_call_id"] = m.get("tool_call_id")
        if m.get("name"):
            out["name"] = m["name"]
    return out


def write_rows(rows: Iterable[dict[str, Any]], out: Path) -> Path:
    rows = list(rows)
    suffix = Path(out).suffix.lower()
    if suffix == ".jsonl":
        return atomic_write_jsonl(out, rows)
    if suffix == ".parquet":
        # Messages with tool calls differ in shape; store them as JSON text so the column has one type.
        flat = [{k: (json.dumps(v, ensure_ascii=False) if k == "messages" else v) for k, v in r.items()} for r in rows]
        return atomic_write_parquet(out, flat)
    raise InputError(f"--out {out}: use a .jsonl or .parquet file name")


@export_app.command("sft")
def sft_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    min_turns: int = typer.Option(0, help="Keep sessions with at least this many patient turns"),
    finished_only: bool = typer.Option(False, help="Keep only sessions the patient ended (not the turn cap)"),
    max_severity: Optional[str] = typer.Option(
        None, help="Keep each session only up to its first reply judged above this level (no_concern, minor, "
        "major, critical); needs `mindsim judge run` first"
    ),
    judge: str = typer.Option("judge", help="Whose judgments --max-severity reads, when several judges ran"),
) -> None:
    """Counsellor SFT data: system prompt as sent, then the session with the counsellor as assistant."""
    rows, summary = sft_export(run_dir, min_turns=min_turns, finished_only=finished_only,
                               max_severity=max_severity, judge=judge)
    typer.echo(f"wrote {len(rows)} conversations to {write_rows(rows, out)}")
    if max_severity is not None:
        atomic_write_json(Path(out).with_suffix(".summary.json"), summary)
        why = ", ".join(f"{n} {r}" for r, n in summary["cut_by_reason"].items() if n) or "none"
        typer.echo(f"kept {summary['replies_kept']} replies, cut {summary['replies_cut']} ({why}); "
                   f"{summary['sessions_emptied']} sessions had no reply left")


@export_app.command("patient")
def patient_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    min_turns: int = typer.Option(0, help="Keep sessions with at least this many patient turns"),
    finished_only: bool = typer.Option(False, help="Keep only sessions the patient ended"),
) -> None:
    """Patient-simulator data: profile summary, scenario, moves and the tool-using patient history."""
    rows = patient_rows(run_dir, min_turns=min_turns, finished_only=finished_only)
    typer.echo(f"wrote {len(rows)} sessions to {write_rows(rows, out)}")

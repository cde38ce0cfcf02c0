"""Post-training exports from a finished run.

- `sft`: counsellor training data. Each row is the counsellor's system prompt exactly as it was sent
  (memory section included) followed by the session with the counsellor as `assistant`.
- `patient`: patient-simulator training data: profile summary, scenario, the patient-side history
  with its `commit_move`/agenda tool calls, and the moves per turn.

Both write JSONL or parquet (by the output suffix) and carry per-row provenance.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

import pyarrow.parquet as pq
import typer

from mindcore.errors import InputError
from mindcore.io import atomic_write_jsonl, atomic_write_parquet

export_app = typer.Typer(no_args_is_help=True)

SESSIONS_FILE = Path("sessions") / "sessions.parquet"
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
    rows = []
    for s in load_sessions(run_dir):
        if not _keep(s, min_turns, finished_only):
            continue
        convo = [m for m in s["counsellor_messages"] if m["role"] != "system"]
        if not any(m["role"] == "assistant" for m in convo):
            continue  # nothing for the counsellor to learn from
        messages = [{"role": "system", "content": s["counsellor_system_prompt"]}]
        messages += [{"role": m["role"], "content": m["content"]} for m in convo]
        rows.append({"messages": messages, **_provenance(s, run_dir)})
    return rows


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
        None, help="Filter by MHQR judge severity — needs judge labels, which this version does not produce"
    ),
) -> None:
    """Counsellor SFT data: system prompt as sent, then the session with the counsellor as assistant."""
    if max_severity is not None:
        raise InputError("--max-severity needs MHQR judge labels on the sessions; no judge stage exists yet")
    rows = sft_rows(run_dir, min_turns=min_turns, finished_only=finished_only)
    typer.echo(f"wrote {len(rows)} conversations to {write_rows(rows, out)}")


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

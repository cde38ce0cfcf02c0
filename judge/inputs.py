"""The judge's input: sessions from any simulator. Our runs supply `RUN_DIR/sessions/sessions.parquet`
(read through `mindcore.runlog.read_table` as plain columns, so the judge does not import the simulator); other simulators write
JSONL with the fields of `SessionInput` (`messages` may be called `counsellor_messages`). `patient_engine`
is optional in both: a run whose sessions name several patient engines is scored per counsellor and engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import read_jsonl
from mindsimkit.mindcore.layout import ProfilesFolder, RunLayout
from mindsimkit.mindcore.recipe import format_validation_error
from mindsimkit.mindcore.runlog import read_table
from mindsimkit.judge.schemas import SessionInput

_NEEDED = ("session_id", "patient_id", "counsellor", "session_index", "counsellor_system_prompt", "counsellor_messages")


def session_input(d: dict[str, Any], where: str) -> SessionInput:
    """One session as the judge reads it, from a stored row or a line of another simulator's JSONL: the counsellor's
    model taken from the row's `engines` when it names none; InputError naming `where` and the field otherwise."""
    d = dict(d)
    if "messages" not in d and "counsellor_messages" in d:
        d["messages"] = d.pop("counsellor_messages")
    if d.get("counsellor_model") is None:
        # Our sessions record each role's engine and model; the counsellor's gives the family check.
        engines = d.get("engines") or {}
        if isinstance(engines, str):
            engines = json.loads(engines)
        d["counsellor_model"] = ((engines or {}).get("counsellor") or {}).get("model")
    if d.get("counsellor_flags") is None:
        d.pop("counsellor_flags", None)
    fields = {k: d.get(k) for k in SessionInput.model_fields if k in d}
    try:
        return SessionInput.model_validate(fields)
    except ValidationError as exc:
        problem = format_validation_error(exc, where, limit=1, top="(row)", plain=True)
        raise InputError(f"{problem} (each session needs {', '.join(SessionInput.model_fields)})") from exc


class _StoredSession(BaseModel):
    """The columns of a sessions parquet the judge reads (ours, or another simulator's with the same names)."""

    session_id: Any
    patient_id: Any
    counsellor: Any
    session_index: Any
    counsellor_system_prompt: Any
    counsellor_messages: Any
    counsellor_model: Any = None
    engines: Any = None
    patient_engine: Any = None
    counsellor_flags: Any = None
    in_benchmark: Any = None
    trial: Any = None


_REMAKE = "rerun the simulation, or pass --sessions FILE.jsonl"


def read_sessions_parquet(path: Path) -> list[SessionInput]:
    # Read through the run log's one table reader; each row is then checked as a `SessionInput`, whose errors name
    # the field (the stored columns are typed loosely so that check is the one that speaks).
    rows = read_table(path, _StoredSession, what="sessions table", remake=_REMAKE)
    return [session_input(r.model_dump(exclude_unset=True), f"{path} row {i}") for i, r in enumerate(rows)]


def read_sessions_jsonl(path: Path) -> list[SessionInput]:
    if not path.is_file():
        raise InputError(f"{path}: sessions file not found")
    out = []
    for line, obj in read_jsonl(path):
        if not isinstance(obj, dict):
            raise InputError(f"{path}:{line}: each line must be a JSON object (one session)")
        out.append(session_input(obj, f"{path}:{line}"))
    return out


def load_sessions(run_dir: Path, sessions: Path | None = None) -> list[SessionInput]:
    """`sessions` (JSONL or parquet) if given, else the run folder's sessions parquet. Ids must be unique."""
    if sessions is None:
        src = RunLayout(run_dir).sessions.parquet
        rows = read_sessions_parquet(src)
    elif str(sessions).endswith(".parquet"):
        rows, src = read_sessions_parquet(Path(sessions)), Path(sessions)
    else:
        rows, src = read_sessions_jsonl(Path(sessions)), Path(sessions)
    if not rows:
        raise InputError(f"{src}: no sessions to judge")
    seen: set[str] = set()
    for r in rows:
        if r.session_id in seen:
            raise InputError(f"{src}: session_id {r.session_id!r} appears twice; ids must be unique")
        seen.add(r.session_id)
    return sorted(
        rows,
        key=lambda r: (r.counsellor, r.patient_engine or "", r.patient_id, r.trial or 0, r.session_index, r.session_id),
    )


def benchmark_patients(
    sessions: list[SessionInput], run_dir: Path | None, profiles: Path | None = None
) -> tuple[set[str] | None, str | None]:
    """The patients of the benchmark subset (MindEval2 App. G "Pool") and where that came from:
    the sessions' own `in_benchmark` when any session carries it; else the profiles table read as plain
    data (`profile_id`, `in_benchmark` columns; the judge does not import the profile generator): the
    given file or folder, else `RUN_DIR/profiles/profiles.parquet`. (None, None) when neither exists."""
    if any(s.in_benchmark is not None for s in sessions):
        return {s.patient_id for s in sessions if s.in_benchmark}, "sessions column in_benchmark"
    if profiles is not None:
        path = Path(profiles)
        path = ProfilesFolder(path).parquet if path.is_dir() else path
        if not path.is_file():
            raise InputError(
                f"judge.profiles {profiles}: no profiles.parquet there; give the folder written "
                "by `mindsim profiles` (or drop the setting)"
            )
    elif run_dir is not None and RunLayout(run_dir).profiles.parquet.is_file():
        path = RunLayout(run_dir).profiles.parquet
    else:
        return None, None
    rows = read_table(
        path,
        _BenchmarkMark,
        what="profiles table (profile_id, in_benchmark)",
        remake="give the profiles folder of the same run (judge.profiles)",
    )
    # The run's own table is named inside the run (RUN/profiles/…): a report then reads the same wherever the
    # folder is, so judging a copied or moved run again from the cache is no change to it.
    own = run_dir is not None and profiles is None
    return {r.profile_id for r in rows if r.in_benchmark}, (
        f"RUN/{path.relative_to(run_dir).as_posix()}" if own and run_dir is not None else str(path)
    )


class _BenchmarkMark(BaseModel):
    profile_id: str
    in_benchmark: bool | None = Field(description="Whether the profile is in the benchmark subset of the pool")

"""Reading one run folder for the HTML report (issue 21): the only module of the report that touches the
run folder, through its layout (`mindcore.layout.RunLayout`). Each reader returns plain data and tolerates a
stage that did not run (no judge section, no arc labels, no PatientAct rubric): the report says what is
missing instead of failing.

Bad input (not a run folder, a file that is not what its name says) raises `InputError` naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mindcore.errors import InputError
from mindcore.layout import RunLayout
from mindcore.runlog import RunHeader

# Columns of sessions.parquet the report needs: the prompts as sent and the patient-side history are
# the bulk of the file and are not shown (a 10k-reply run reads in a fraction of the time without them).
SESSION_COLUMNS = ("session_id", "patient_id", "counsellor", "session_index", "ended_by", "scenario",
                   "counsellor_messages", "turns", "patient_engine", "patientact", "counsellor_flags",
                   "rejected_messages", "engines", "scenario_shared", "trial")


@dataclass
class RunData:
    """What one run folder holds, as the report reads it; a stage that did not run is None / empty."""

    path: Path
    info: RunHeader | None  # None for a folder of `mindsim simulate` (no run.json)
    summary: dict[str, Any] | None
    sessions: list[dict[str, Any]]
    validation: dict[str, Any] | None
    judge_report: dict[str, Any] | None
    judgments: list[dict[str, Any]]
    patientact: dict[str, Any] | None
    profiles_summary: dict[str, Any] | None
    profile_failures: list[dict[str, Any]] = field(default_factory=list)
    # What `mindcore.manifest.check_run` found wrong when the report was asked for anyway (`--allow-partial`).
    partial: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        recipe = self.info.recipe.name if self.info and self.info.recipe else None
        return f"{recipe or self.path.name} ({self.info.run_id if self.info else '?'})"


def _json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable JSON ({type(exc).__name__}); rerun the stage that writes it") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object; rerun the stage that writes it")
    return data


def _parquet(path: Path, columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        cols = [c for c in columns if c in names] if columns else None
        return pq.read_table(path, columns=cols).to_pylist()
    except Exception as exc:  # pyarrow raises several classes for a file that is not parquet
        raise InputError(f"{path}: not a readable parquet file ({type(exc).__name__}); rerun the stage that "
                         "writes it") from exc


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    from mindcore.io import read_jsonl

    return [row for _, row in read_jsonl(path)]


def load_run(path: str | Path, *, allow_partial: bool = False) -> RunData:
    """One run folder, verified against its manifest first (refused with the first problem unless
    `allow_partial`: a run still in progress, whose page then lists what is missing or changed)."""
    from mindcore.manifest import verify_run

    path = Path(path)
    run = RunLayout(path)
    if not path.is_dir():
        raise InputError(f"{path}: not a folder; give a run folder written by `mindsim run` (it holds run.json)")
    info = run.header() if run.run_json.is_file() else None
    if info is None and not run.sessions.parquet.is_file():
        raise InputError(f"{path}: not a run folder (no run.json and no sessions/sessions.parquet); give the --out "
                         "folder of `mindsim run` or `mindsim simulate`")
    check = verify_run(path, needs=["simulation"], allow_partial=allow_partial)
    judgments = _parquet(run.judgments.parquet)
    for j in judgments:
        if isinstance(j.get("prompt_hashes"), str):
            j["prompt_hashes"] = json.loads(j["prompt_hashes"] or "{}")
    return RunData(
        path=path, info=info, summary=_json(run.sessions.summary),
        sessions=_parquet(run.sessions.parquet, SESSION_COLUMNS), validation=_json(run.validation.report_json),
        judge_report=_json(run.judgments.report_json), judgments=judgments,
        patientact=_json(run.patientact_judge.report_json), profiles_summary=_json(run.profiles.summary),
        profile_failures=_jsonl(run.profiles.failures), partial=check.problems,
    )


def default_output(run_dir: str | Path) -> Path:
    return RunLayout(Path(run_dir)).report_html

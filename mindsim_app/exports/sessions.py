"""The session rows the post-training exports read (`sessions/sessions.parquet` of a finished run), shared by
`sft` (counsellor and patient rows) and `dpo` (preference pairs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import verify_run


class ExportTurn(BaseModel):
    """What the exports take from a patient turn."""

    move: str | None = None
    secondary_move: str | None = None
    end_conversation: bool | None = None
    patientact: dict[str, Any] | None = None
    annaagent: dict[str, Any] | None = None


class ExportSession(BaseModel):
    """What the exports read of a session row (`sessions/sessions.parquet`). Messages stay OpenAI chat dicts: their
    shape differs by role (tool calls, tool answers)."""

    session_id: str
    patient_id: str
    counsellor: str
    session_index: int
    seed: int
    ended_by: str | None = None
    turns: list[ExportTurn] = Field(default_factory=list)
    scenario: dict[str, Any] | None = None
    counsellor_system_prompt: str
    counsellor_messages: list[dict[str, Any]]
    patient_messages: list[dict[str, Any]] = Field(default_factory=list)
    archetype: str | None = None
    patient_engine: str | None = None
    engines: dict[str, Any] | None = None
    prompts: dict[str, str | None] | None = None
    patient_tools: str | None = None  # JSON text, as the simulator records it


def load_sessions(run_dir: Path) -> list[ExportSession]:
    layout = RunLayout(run_dir)
    if not layout.sessions.parquet.is_file():
        raise InputError(
            f"{layout.sessions.parquet} not found: give the --out folder of `mindsim run` or `mindsim simulate`"
        )
    verify_run(run_dir, needs=["simulation"])
    return layout.sessions.rows(ExportSession)

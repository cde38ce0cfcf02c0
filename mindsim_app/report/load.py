"""Reading one run folder for the HTML report: the only module of the report that touches the
run folder, through its layout's typed readers (`mindcore.layout.RunLayout`, `mindcore.runlog`). Sessions come as
`SessionView` rows, judgments as the judge's `JudgmentRow`s, the validation report and the summaries as their
`mindcore.runlog` models; a stage that did not run (no judge section, no arc labels, no PatientAct rubric) is
None or empty, and the report says what is missing instead of failing.

Bad input (not a run folder, a file that is not what its name says) raises `InputError` naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.judge.schemas import JudgmentRow
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.runlog import (
    JudgeReport,
    ProfilesSummaryView,
    RubricReport,
    RunHeader,
    SimulationSummaryView,
    ValidationReport,
)


class _View(BaseModel):
    # Nested values carry more than the page shows; what it does not show is left out, not refused.
    model_config = ConfigDict(extra="ignore")


class PatientActTurnView(_View):
    trust_before: float | None = None
    trust_after: float | None = None
    reaction: str | None = None
    intensity: str | None = None
    behaviour: str | None = None
    resistance_pattern: str | None = None
    retrieved: list[str] = Field(default_factory=list)
    blocked: list[str] = Field(default_factory=list)


class TurnView(_View):
    index: int
    opening: bool = False
    move: str | None = None
    secondary_move: str | None = None
    message: str | None = None
    reasoning: str | None = None
    rejected: list[Any] = Field(default_factory=list)
    rejected_messages: list[Any] = Field(default_factory=list)
    trimmed: bool | None = False
    patientact: PatientActTurnView | None = None

    @property
    def reasks(self) -> int:
        return len(self.rejected) + len(self.rejected_messages)


class ScenarioView(_View):
    event: str | None = None
    goal: str | None = None
    opening_message: str | None = None


class PatientActSessionView(_View):
    trust_start: float | None = None
    trust_end: float | None = None


class ReplyFlagsView(_View):
    reply_index: int
    flags: list[str] = Field(default_factory=list)


class SessionView(BaseModel):
    """The columns of `sessions.parquet` the page shows. The prompts as sent and the patient-side history are the
    bulk of the file and are not read (a 10k-reply run reads in a fraction of the time without them)."""

    session_id: str
    patient_id: str
    counsellor: str
    session_index: int
    ended_by: str | None = None
    scenario: ScenarioView | None = None
    counsellor_messages: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[TurnView] = Field(default_factory=list)
    patient_engine: str | None = None
    patientact: PatientActSessionView | None = None
    counsellor_flags: list[ReplyFlagsView] | None = None
    engines: dict[str, Any] | None = None
    scenario_shared: bool | None = None
    trial: int | None = None
    # Which move vocabulary the patient played (a preset's differs from ours): the depth and class tables by turn.
    vocabulary_version: str | None = None


class ProfileFailure(_View):
    """A line of `profiles/failures.jsonl`, as the health section attributes it."""

    profile_id: str | None = None
    persona_id: str | None = None
    stage: str | None = None
    error: str | None = None
    reason: str | None = None
    kind: str | None = None
    error_kind: str | None = None


@dataclass
class RunData:
    """What one run folder holds, as the report reads it; a stage that did not run is None / empty."""

    path: Path
    info: RunHeader | None  # None for a folder of `mindsim simulate` (no run.json)
    summary: SimulationSummaryView | None
    sessions: list[SessionView]
    validation: ValidationReport | None
    judge_report: JudgeReport | None
    judgments: list[JudgmentRow]
    patientact: dict[str, Any] | None
    profiles_summary: ProfilesSummaryView | None
    profile_failures: list[ProfileFailure] = field(default_factory=list)
    # What `mindcore.manifest.check_run` found wrong when the report was asked for anyway (`--allow-partial`).
    partial: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        recipe = self.info.recipe.name if self.info and self.info.recipe else None
        return f"{recipe or self.path.name} ({self.info.run_id if self.info else '?'})"


def load_run(path: str | Path, *, allow_partial: bool = False) -> RunData:
    """One run folder, verified against its manifest first (refused with the first problem unless
    `allow_partial`: a run still in progress, whose page then lists what is missing or changed)."""
    from mindsimkit.mindcore.manifest import RUN_STAGES, verify_run

    path = Path(path)
    run = RunLayout(path)
    if not path.is_dir():
        raise InputError(f"{path}: not a folder; give a run folder written by `mindsim run` (it holds run.json)")
    info = run.header() if run.run_json.is_file() else None
    if info is None and not run.sessions.parquet.is_file():
        raise InputError(
            f"{path}: not a run folder (no run.json and no sessions/sessions.parquet); give the --out "
            "folder of `mindsim run` or `mindsim simulate`"
        )
    check = verify_run(path, needs=["simulation"], optional=RUN_STAGES, allow_partial=allow_partial)
    patientact = run.patientact_judge.report(RubricReport)
    return RunData(
        path=path,
        info=info,
        summary=run.sessions.read_summary(SimulationSummaryView),
        sessions=run.sessions.rows(SessionView),
        validation=run.validation.report(ValidationReport),
        judge_report=run.judgments.report(JudgeReport),
        judgments=run.judgments.rows(JudgmentRow) if run.judgments.parquet.is_file() else [],
        # Read typed; the page template takes the rubric's tables as the JSON they are.
        patientact=patientact.model_dump() if patientact else None,
        profiles_summary=run.profiles.read_summary(ProfilesSummaryView),
        profile_failures=run.profiles.failure_rows(ProfileFailure),
        partial=check.problems,
    )


def default_output(run_dir: str | Path) -> Path:
    return RunLayout(Path(run_dir)).report_html

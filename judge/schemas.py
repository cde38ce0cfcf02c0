"""Typed rows of the MHQR judge (MindEval2 §3, Appendix A, Appendix G).

- `SessionInput`: what the judge needs from any simulator's session: ids, the counsellor's system
  prompt exactly as sent and the counsellor-side messages (OpenAI chat format: counsellor =
  `assistant`, patient = `user`).
- `JudgmentRow`: one row of `judgments/judgments.parquet`: one counsellor reply judged by one judge.
  A failed judgment is a row too (status `failed`, `error` set, no severity), never a missing row.

`read_judgments` / `write_judgments` are the one way in and out of the parquet file, so other
modules (agreement, sampling) read the rows back as these models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

from mindsimkit.mindcore.io import atomic_write_parquet
from mindsimkit.mindcore.runlog import read_table, remake

Severity = Literal["no_concern", "minor", "major", "critical"]
SEVERITIES: tuple[str, ...] = ("no_concern", "minor", "major", "critical")
Status = Literal["ok", "failed"]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionInput(_Row):
    """One session to judge. Our runs supply it from `sessions/sessions.parquet`; other simulators
    write the same fields as JSONL (`messages` may also be called `counsellor_messages`)."""

    session_id: str = Field(min_length=1, description="Unique id of the session")
    patient_id: str = Field(min_length=1, description="Patient id: bootstrap intervals resample patients")
    counsellor: str = Field(min_length=1, description="Name of the counsellor under test")
    session_index: int = Field(ge=0, description="0-based index of this session in the patient's arc")
    counsellor_system_prompt: str = Field(description="The counsellor's system prompt exactly as sent")
    messages: list[dict[str, Any]] = Field(
        description="Counsellor-side history, OpenAI chat format; a leading system message is ignored "
        "(the judge is shown counsellor_system_prompt)"
    )
    counsellor_model: str | None = Field(None, description="Model behind the counsellor, if known (family check)")
    patient_engine: str | None = Field(
        None,
        description="Patient engine that played the patient (mindsim, patientact, ...), if the simulator says; "
        "with several in one input each counsellor is scored once per engine",
    )
    counsellor_flags: list[ReplyFlags] = Field(
        default_factory=list,
        description="Defects the simulator flagged per reply (speaks_as_patient: the "
        "counsellor wrote the patient's lines); the report re-ranks without those replies",
    )
    in_benchmark: bool | None = Field(
        None, description="Whether the patient is in the benchmark subset of the pool, if the simulator says"
    )
    trial: int | None = Field(
        None,
        ge=0,
        description="Repeated trial of the session's arc (`simulation.trials`), if the simulator ran "
        "several: the trials' sessions are sessions of the same counsellor",
    )

    def reply_flags(self, reply_index: int) -> list[str]:
        return sorted({f for r in self.counsellor_flags if r.reply_index == reply_index for f in r.flags})


class ReplyFlags(BaseModel):
    """The simulator's defect flags on one counsellor reply (our sessions' `counsellor_flags` column)."""

    model_config = ConfigDict(extra="ignore")
    reply_index: int = Field(ge=0, description="0-based counsellor reply in the session")
    flags: list[str] = Field(default_factory=list, description="e.g. speaks_as_patient, cut_off, tool_syntax")


class IssueRecord(_Row):
    """One clinical issue flagged on a reply, with its evidence."""

    issue: str = Field(description="Issue id from the rubric, e.g. over_exploring")
    category: str = Field(description="The issue's category id from the rubric")
    reason: str = Field(description="The judge's short reason")
    quote: str | None = Field(
        None, description="Verbatim words of the reply, verified; null for omissions or dropped quotes"
    )


class JudgmentRow(_Row):
    """One counsellor reply judged by one judge."""

    session_id: str = Field(description="Session the reply belongs to")
    patient_id: str = Field(description="Patient of the session")
    counsellor: str = Field(description="Counsellor under test")
    counsellor_model: str | None = Field(None, description="Counsellor's model, when the input names it")
    session_index: int = Field(ge=0, description="0-based session index in the patient's arc")
    reply_index: int = Field(ge=0, description="0-based index of the reply among the counsellor's replies")
    reply: str = Field(description="The judged reply text")
    judge: str = Field(description="Judge role name: 'judge' or 'judge:NAME'")
    judge_model: str = Field(description="Model the judge role called")
    judge_engine: str = Field(description="Engine the judge role called")
    severity: Severity | None = Field(None, description="Turn-level severity; null when the judgment failed")
    weight: float | None = Field(None, description="Severity weight (0/1/5/10); null when failed")
    expected_weight: float | None = Field(
        None,
        description="Expected severity weight under the judge's probabilities of the severity labels (from "
        "token log probabilities, judge.grading); null where not asked for or the engine sent none. Not part of MHQR",
    )
    severity_probs: dict[str, float] | None = Field(
        None, description="The judge's probability of each severity label behind expected_weight; null as it is"
    )
    issues: list[IssueRecord] = Field(default_factory=list, description="Flagged issues")
    dropped_quotes: int = Field(0, ge=0, description="Quotes the judge gave that were not found in the reply")
    status: Status = Field(description="ok, or failed (then error is set)")
    error: str | None = Field(None, description="Why the judgment failed")
    error_kind: Literal["invalid_output", "engine"] | None = Field(None, description="Class of failure")
    rubric_version: str = Field(description="Version of judge/data/rubric.yaml used")
    prompt_hashes: dict[str, str] = Field(description="Prompt template -> sha256 prefix")
    cache_key: str = Field(description="Content key of the judgment (judge, model, rubric, prompts, context)")
    patient_engine: str | None = Field(None, description="Patient engine of the session, when its input names one")
    counsellor_flags: list[str] = Field(
        default_factory=list,
        description="The simulator's defect flags on this reply (from the session), e.g. speaks_as_patient",
    )
    trial: int | None = Field(None, ge=0, description="Repeated trial of the session, when its input names one")

    @field_validator("prompt_hashes", mode="before")
    @classmethod
    def _stored_as_text(cls, value: Any) -> Any:
        # The parquet column is JSON text (a parquet map reads back as pairs): `write_judgments`.
        return json.loads(value or "{}") if isinstance(value, str) else value

    @field_validator("severity_probs", mode="before")
    @classmethod
    def _probs_as_text(cls, value: Any) -> Any:
        # JSON text in the parquet file, like prompt_hashes.
        return json.loads(value) if isinstance(value, str) else value

    @field_validator("counsellor_flags", mode="before")
    @classmethod
    def _absent_in_older_files(cls, value: Any) -> Any:
        return value or []


_ISSUE = pa.struct([("issue", pa.string()), ("category", pa.string()), ("reason", pa.string()), ("quote", pa.string())])

# Explicit schema: a batch where no reply has an issue must still give `issues` its struct type.
JUDGMENT_SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("patient_id", pa.string()),
        ("counsellor", pa.string()),
        ("counsellor_model", pa.string()),
        ("session_index", pa.int64()),
        ("reply_index", pa.int64()),
        ("reply", pa.string()),
        ("judge", pa.string()),
        ("judge_model", pa.string()),
        ("judge_engine", pa.string()),
        ("severity", pa.string()),
        ("weight", pa.float64()),
        ("issues", pa.list_(_ISSUE)),
        ("dropped_quotes", pa.int64()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("error_kind", pa.string()),
        ("rubric_version", pa.string()),
        ("prompt_hashes", pa.string()),
        ("cache_key", pa.string()),
        ("patient_engine", pa.string()),
        ("counsellor_flags", pa.list_(pa.string())),
    ]
)
# Only in files where a judge was asked for graded severities.
GRADED_FIELDS = [pa.field("expected_weight", pa.float64()), pa.field("severity_probs", pa.string())]


def write_judgments(path: str | Path, rows: list[JudgmentRow]) -> Path:
    # prompt_hashes goes in as a JSON string: a parquet map reads back as (key, value) pairs.
    data = []
    for r in rows:
        d = r.model_dump(mode="json")
        d["prompt_hashes"] = json.dumps(d["prompt_hashes"], sort_keys=True)
        if d["severity_probs"] is not None:
            d["severity_probs"] = json.dumps(d["severity_probs"], sort_keys=True)
        data.append(d)
    # The trial column only where a session has one: files of one-trial runs keep their columns.
    schema = (
        JUDGMENT_SCHEMA.append(pa.field("trial", pa.int64()))
        if any(r.trial is not None for r in rows)
        else JUDGMENT_SCHEMA
    )
    if any(r.severity_probs is not None for r in rows):
        for f in GRADED_FIELDS:
            schema = schema.append(f)
    else:
        for d in data:
            del d["expected_weight"], d["severity_probs"]
    return atomic_write_parquet(path, pa.Table.from_pylist(data, schema=schema))


def read_judgments(path: str | Path) -> list[JudgmentRow]:
    """A judgments table (`RUN/judgments/judgments.parquet` or an ablation's), typed."""
    return read_table(path, JudgmentRow, what="judgments table", remake=remake("judge", Path(path).parent.parent))


class JudgeRanking(BaseModel):
    """One judge's model and its counsellor ranking (best first) in a run."""

    model_config = ConfigDict(extra="forbid")
    model: str | None
    ranking: list[str]


class PatientActRunSummary(BaseModel):
    """What `mindsim judge run --rubric patientact` did, in numbers (the command line prints these)."""

    model_config = ConfigDict(extra="forbid")
    judged: int
    ok: int
    failed: int
    means: dict[str, dict[str, float]]  # system → dimension → mean judge score
    outputs: dict[str, Path]


class JudgeRunSummary(BaseModel):
    """What `mindsim judge run` (MHQR) did, in numbers: the command line and the job read these fields."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    sessions: int
    judgments: int
    ok: int
    failed: int
    critical: int
    dropped_quotes: int
    judges: dict[str, JudgeRanking]
    outputs: dict[str, Path]
    prompt_hashes: dict[str, str]

"""The run folder as a typed, versioned log: models of what a run writes, read back through `RunLayout`.

`run.json` is a `RunHeader` (`read_header` / `write_header`, `RunLayout.header()`); its `log_version` says which
format wrote it, so an older header is read (version 1 keyed its counts by English labels, read through the
aliases) and a newer one is refused in one line. Who played a row's patient when the row does not say is decided
here too (`played_by`). This module is the bottom of every reading path (judge/ and validation/ import it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mindcore.errors import InputError

# Who played the patient of a row that names no engine is decided here (`played_by`), nowhere else. Rows of our
# own run folders written before `patient_engine` existed were played by MindSim's patient; rows from another
# simulator that does not say are unnamed.
DEFAULT_ENGINE = "mindsim"
UNNAMED_ENGINE = "unknown"


def played_by(engine: str | None, *, ours: bool = True) -> str:
    """The patient engine of a row that says `engine` (None or "" when it says none). `ours`: the row comes from a
    run folder of this toolkit (then a missing engine is MindSim's), not from another simulator's transcripts."""
    if engine:
        return engine
    return DEFAULT_ENGINE if ours else UNNAMED_ENGINE


# --- run.json ---------------------------------------------------------------------------------------------------

# The run header's format. 1: run.json before this field existed (counts and schedule keyed by English labels);
# 2: typed counts and schedule. A header newer than this toolkit knows is refused, not half-read.
LOG_VERSION = 2


class _Log(BaseModel):
    # Aliases are the English labels version 1 wrote as keys (and the card still shows): old logs read as they are.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def labelled(self) -> dict[str, Any]:
        """Label → value, as the dataset card lists them (fields left unset are left out)."""
        return {f.alias or name: _show(getattr(self, name)) for name, f in type(self).model_fields.items()
                if getattr(self, name) is not None}


def _show(value: Any) -> Any:
    if isinstance(value, dict):  # counts by reason or flag, largest first as the card has always listed them
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()) if v) or "none"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return value


def _pair(value: Any) -> tuple[int, int] | None:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _reasons(value: Any) -> dict[str, int]:
    """'too_long 2, not_speech 1' (version 1's text) → {'too_long': 2, 'not_speech': 1}; 'none' → {}; a trailing
    '(of N replies)' → {'replies': N}."""
    if isinstance(value, dict):
        return value
    out = {}
    text = str(value)
    m = re.search(r"\(of (\d+) replies\)\s*$", text)
    if m:
        out["replies"] = int(m.group(1))
        text = text[: m.start()]
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\S+)\s+(\d+)\s*", part)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


class Pair(_Log):
    """Two counts shown as `a / b` (pool / benchmark, written / expected, ok / failed)."""

    first: int = Field(ge=0)
    second: int = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        pair = _pair(data) if isinstance(data, str) else None
        return {"first": pair[0], "second": pair[1]} if pair else data

    def __str__(self) -> str:
        return f"{self.first} / {self.second}"


class RunCounts(_Log):
    """What each stage counted, as the dataset card lists it."""

    personas_read: int = Field(alias="personas read")
    under_18_skipped: int = Field(alias="under-18 personas skipped")
    candidates: int = Field(alias="candidate profiles")
    kept: int = Field(alias="profiles kept (clean + minor)")
    dropped_serious: int = Field(alias="profiles dropped as serious")
    profile_failures: int = Field(alias="profile failures (engine or invalid output)")
    pool_benchmark: Pair = Field(alias="pool / benchmark patients")
    pool_verdicts: list[str] = Field(alias="pool drawn from verdicts")
    sessions: Pair = Field(alias="sessions written / expected")
    trials: int | None = Field(None, alias="repeated trials per arc (simulation.trials)",
                               description="Only with repeated trials, so one-trial cards read as before")
    failed_arcs: int = Field(alias="failed arcs")
    ended_by_patient: int = Field(alias="sessions the patient ended")
    rejected_commits: int = Field(alias="rejected move commits")
    rejected_messages: dict[str, int] = Field(alias="patient messages re-asked (not stored), by reason")
    messages_trimmed: int = Field(alias="patient messages ended at their last complete sentence")
    scenario_drafts: Pair = Field(alias="scenario drafts written (re-drafts included) / sessions")
    counsellor_flags: dict[str, int] = Field(alias="counsellor replies flagged (stored as sent), by flag")
    judged: Pair | None = Field(None, alias="judged replies (ok / failed)")
    critical: int | None = Field(None, alias="critical replies (listed for review in judgments/report.md)")

    @model_validator(mode="before")
    @classmethod
    def _version_1(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            for key in ("pool drawn from verdicts", "pool_verdicts"):
                if isinstance(data.get(key), str):
                    data[key] = [v.strip() for v in data[key].split(",") if v.strip()]
            for key in ("patient messages re-asked (not stored), by reason", "rejected_messages",
                        "counsellor replies flagged (stored as sent), by flag", "counsellor_flags"):
                if key in data:
                    data[key] = _reasons(data[key])
        return data

    def labelled(self) -> dict[str, Any]:
        out = super().labelled()
        for name in ("pool_benchmark", "sessions", "scenario_drafts", "judged"):
            label = type(self).model_fields[name].alias
            if label in out:
                out[label] = str(getattr(self, name))
        # The flag counts carry the number of replies they are out of under "replies".
        label = type(self).model_fields["counsellor_flags"].alias
        flags = {k: v for k, v in self.counsellor_flags.items() if k != "replies"}
        out[label] = f"{_show(flags)} (of {self.counsellor_flags.get('replies', 0)} replies)"
        return out


class ScheduleSettings(_Log):
    """The simulation settings the card states."""

    sessions: int = Field(alias="sessions per patient")
    turn_cap: int = Field(alias="turn cap")
    gap_hours: str = Field(alias="gap before follow-ups (hours)")
    counsellors: list[str] = Field(alias="counsellors")
    memory_cap: int = Field(alias="memory cap (entries)")
    seed: int = Field(alias="seed")

    @model_validator(mode="before")
    @classmethod
    def _version_1(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("counsellors"), str):
            data = {**data, "counsellors": [c.strip() for c in data["counsellors"].split(",") if c.strip()]}
        return data


class RunRecipe(BaseModel):
    """The recipe as run: name, path and seed, and its content (free-form: every section a recipe may hold)."""

    model_config = ConfigDict(extra="allow")

    name: str
    path: str
    seed: int


class RunHeader(BaseModel):
    """`run.json`: the job's id, recipe hash and status, and once finished what ran and what it counted."""

    model_config = ConfigDict(extra="forbid")

    log_version: int = Field(1, ge=1, description="The header's format (`LOG_VERSION`); absent in version 1")
    run_id: str = Field(min_length=1)
    recipe_hash: str = Field(min_length=1)
    status: Literal["running", "finished"]
    recipe: RunRecipe | None = None
    runner: dict[str, Any] | None = Field(None, description="Which runner ran each stage (the last run, on resume)")
    provenance: dict[str, Any] = Field(default_factory=dict)
    engines: dict[str, Any] = Field(default_factory=dict, description="Role → engine, model and sampling")
    engine_backends: dict[str, Any] = Field(default_factory=dict)
    preflight: list[str] = Field(default_factory=list)
    usage: dict[str, Any] = Field(default_factory=dict)
    persona_source: str | None = None
    rates_note: str | None = None
    prompt_hashes: dict[str, str | None] = Field(default_factory=dict)
    prompt_overrides: dict[str, dict[str, str]] = Field(default_factory=dict)
    schedule_settings: ScheduleSettings | None = None
    counts: RunCounts | None = None
    pool_verdicts: list[str] = Field(default_factory=lambda: ["clean"])
    reference_is_mibot: bool = False
    notices: list[str] = Field(default_factory=list)
    pretty_name: str | None = None
    repo_id: str | None = None
    release_gate: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status == "finished"


def read_header(path: str | Path) -> RunHeader:
    """A run folder's `run.json`, typed; one `InputError` line naming the file and the fix otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: missing; give the --out folder of `mindsim run` (it writes run.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable JSON ({type(exc).__name__}); rerun `mindsim run` with the same "
                         "recipe and --out to rewrite it") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object; rerun `mindsim run` with the same recipe and --out")
    version = data.get("log_version", 1)
    if isinstance(version, int) and version > LOG_VERSION:
        raise InputError(f"{path}: written by a newer mindsim (run log version {version}; this one reads up to "
                         f"{LOG_VERSION}); upgrade mindsim to read it")
    try:
        return RunHeader.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(f"{path}: not a run header this mindsim reads ({where}: {first['msg']}); rerun `mindsim run` "
                         "with the same recipe and --out to rewrite it") from None


def write_header(path: str | Path, header: RunHeader) -> None:
    """Write `run.json` atomically, in the current format."""
    from mindcore.io import atomic_write_json

    header = header.model_copy(update={"log_version": LOG_VERSION})
    atomic_write_json(Path(path), header.model_dump(mode="json", exclude_none=False))

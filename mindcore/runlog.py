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
from typing import Any, Iterable, Iterator, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mindsimkit.mindcore.errors import InputError

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
# 2: typed counts and schedule; 3: `presets`. A header newer than this toolkit knows is refused, not half-read.
LOG_VERSION = 3


class _Log(BaseModel):
    # Aliases are the English labels version 1 wrote as keys (and the card still shows): old logs read as they are.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def labelled(self) -> dict[str, Any]:
        """Label → value, as the dataset card lists them (fields left unset are left out)."""
        return {
            f.alias or name: _show(getattr(self, name))
            for name, f in type(self).model_fields.items()
            if getattr(self, name) is not None
        }


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
    trials: int | None = Field(
        None,
        alias="repeated trials per arc (simulation.trials)",
        description="Only with repeated trials, so one-trial cards read as before",
    )
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
            for key in (
                "patient messages re-asked (not stored), by reason",
                "rejected_messages",
                "counsellor replies flagged (stored as sent), by flag",
                "counsellor_flags",
            ):
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
        label = type(self).model_fields["counsellor_flags"].alias or "counsellor_flags"
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
    tool_calls: dict[str, str] = Field(
        default_factory=dict,
        description="Tool-calling role → how its calls travelled: 'native' tool calls (the "
        "server parsed them), 'native-template' (native tool calls the toolkit rendered and parsed itself: the "
        "embedded engine), or 'json-schema' answers (an engine without native tool calls, or one that answered a "
        "forced call with text)",
    )
    usage: dict[str, Any] = Field(default_factory=dict)
    plan: dict[str, Any] | None = Field(None, description="`mindsim plan`'s figures for this run, written at its start")
    plan_vs_actual: dict[str, Any] | None = Field(
        None,
        description="Per role the plan's expected requests, tokens and cost beside the usage, per stage the "
        "planned and measured wall time, each with actual / planned",
    )
    persona_source: str | None = None
    rates_note: str | None = None
    prompt_hashes: dict[str, str | None] = Field(default_factory=dict)
    prompt_overrides: dict[str, dict[str, str]] = Field(default_factory=dict)
    schedule_settings: ScheduleSettings | None = None
    presets: dict[str, str] = Field(
        default_factory=dict,
        description="Patient engine (and `judge`) → the preset it ran under ('ours' or a "
        "paper's reference); empty in headers written before presets existed (all 'ours')",
    )
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


def _json_object(path: Path, what: str, remake: str) -> dict[str, Any]:
    """A run file's JSON object; one `InputError` line when it is not readable JSON or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable JSON ({type(exc).__name__}); {remake}") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, as a {what} is; {remake}")
    return data


def read_header(path: str | Path) -> RunHeader:
    """A run folder's `run.json`, typed; one `InputError` line naming the file and the fix otherwise."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: missing; give the --out folder of `mindsim run` (it writes run.json)")
    data = _json_object(path, "run header", "rerun `mindsim run` with the same recipe and --out to rewrite it")
    version = data.get("log_version", 1)
    if isinstance(version, int) and version > LOG_VERSION:
        raise InputError(
            f"{path}: written by a newer mindsim (run log version {version}; this one reads up to "
            f"{LOG_VERSION}); upgrade mindsim to read it"
        )
    try:
        return RunHeader.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(
            f"{path}: not a run header this mindsim reads ({where}: {first['msg']}); rerun `mindsim run` "
            "with the same recipe and --out to rewrite it"
        ) from None


def write_header(path: str | Path, header: RunHeader) -> None:
    """Write `run.json` atomically, in the current format."""
    from mindsimkit.mindcore.io import atomic_write_json

    header = header.model_copy(update={"log_version": LOG_VERSION})
    atomic_write_json(Path(path), header.model_dump(mode="json", exclude_none=False))


# --- tables and reports ------------------------------------------------------------------------------------------

# How to write a stage's files again, by stage (RUN: the run folder); the manifest check and the readers say it.
REMAKE = {
    "profiles": "rerun `mindsim run RECIPE --out RUN` (finished work is kept)",
    "simulation": "rerun `mindsim run RECIPE --out RUN` or `mindsim simulate … --out RUN` (finished sessions are kept)",
    "validation": "rerun `mindsim run RECIPE --out RUN`",
    "judge": "rerun `mindsim judge run RUN` (cached judgments are kept)",
    "patientact_judge": "rerun `mindsim judge patientact RUN` (cached judgments are kept)",
    "run": "rerun `mindsim run RECIPE --out RUN` to finish the run",
    "dataset": "rebuild it from the run with `mindsim publish RUN --repo-id OWNER/NAME --dry-run`",
}


def remake(stage: str, run_dir: str | Path) -> str:
    return REMAKE.get(stage, "rerun the command that made the folder").replace("RUN", str(run_dir))


M = TypeVar("M", bound=BaseModel)


def _columns(model: type[BaseModel]) -> dict[str, bool]:
    """Column name → required, for each field of `model` (a field's alias is its column name)."""
    return {(f.alias or name): f.is_required() for name, f in model.model_fields.items()}


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc']) or '(row)'}: {first['msg']}"


def read_table(path: str | Path, model: type[M], *, what: str, remake: str) -> list[M]:
    """Every row of a run table (parquet) as `model`: only the model's fields are read, a column the file does not
    have takes the field's default (files written before the column existed), and a file that is missing, is not
    parquet, lacks a required column or holds a row the model refuses is one `InputError` line naming the file
    (and row) with `remake`, how to write it again. The one place run tables are read (`iter_table` row by row)."""
    return list(iter_table(path, model, what=what, remake=remake, whole=True))


# Rows decoded at a time by `iter_table`. Small on purpose: the simulator reads its profiles this way, and what a
# batch allocates (Arrow's pool, then the rows' Python objects) stays in the process as fragments between what it
# keeps; 64-row batches on one thread kept 5 MiB less than the whole file at 1,000 profiles.
TABLE_BATCH_ROWS = 64


def iter_table(path: str | Path, model: type[M], *, what: str, remake: str, whole: bool = False) -> Iterator[M]:
    """`read_table`'s rows one at a time, decoded `TABLE_BATCH_ROWS` at once on this thread (`whole`: the file at
    once, on Arrow's threads), for a reader that keeps only what it makes of each row (the simulator packs its
    profiles). The file, its format and its columns are checked before this returns; a bad row is the same error
    when the iteration reaches it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: missing; {remake}")

    def unreadable(exc: BaseException) -> InputError:
        return InputError(f"{path}: not a readable parquet {what} ({str(exc).splitlines()[0][:160]}); {remake}")

    try:
        file = pq.ParquetFile(path)
        names = set(file.schema_arrow.names)
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(exc) from exc
    wanted = _columns(model)
    missing = [c for c, required in wanted.items() if required and c not in names]
    if missing:
        file.close()
        raise InputError(f"{path}: not a {what} (no column {', '.join(missing)}); {remake}")

    def rows() -> Iterator[tuple[str, Any]]:
        n = 0
        columns = [c for c in wanted if c in names]
        try:
            batches = (
                file.read(columns=columns).to_batches()
                if whole
                else file.iter_batches(batch_size=TABLE_BATCH_ROWS, columns=columns, use_threads=False)
            )
            for batch in batches:
                for row in batch.to_pylist():
                    yield f"row {n}", row
                    n += 1
        except (pa.ArrowException, OSError) as exc:
            raise unreadable(exc) from exc
        finally:
            file.close()

    return _validated(rows(), model, path, what, remake)


def _validated(rows: Iterable[tuple[str, Any]], model: type[M], path: Path, what: str, remake: str) -> Iterator[M]:
    """Each (where, row) as `model`; the first row that does not fit is one line naming the file and the row."""
    for where, row in rows:
        try:
            yield model.model_validate(row)
        except ValidationError as exc:
            raise InputError(f"{path} {where}: not a {what} row ({_first_error(exc)}); {remake}") from None


def read_arrow(path: str | Path, *, what: str, remake: str) -> Any:
    """A run table as an Arrow table, whole, for copying it as it is (the dataset folder); same errors as
    `read_table`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: missing; {remake}")
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable parquet {what} ({str(exc).splitlines()[0][:160]}); {remake}") from exc


def read_json_model(path: str | Path, model: type[M], *, what: str, remake: str) -> M | None:
    """A stage's JSON file (report or summary) as `model`; None when the stage did not write it; one `InputError`
    line when it is not the JSON object the model describes."""
    path = Path(path)
    if not path.is_file():
        return None
    data = _json_object(path, what, remake)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{path}: not a {what} this mindsim reads ({_first_error(exc)}); {remake}") from None


class _Report(BaseModel):
    # Reports grow keys between versions: a key this version does not model is kept, not refused.
    model_config = ConfigDict(extra="allow")


class Estimate(_Report):
    """A distance to the reference with its bootstrap interval."""

    distance: float | None
    ci: tuple[float | None, float | None] | None = None


class ValidationReport(_Report):
    """`validation/report.json` (`validation.report.build_report`): per system, a Wasserstein-1 `Estimate` per
    surface feature and for the realism `index` (plus `joint`, a distance without interval); the noise floor per
    feature; arc-label shares per system and stretch; what was read and how."""

    features: list[str]
    feature_labels: dict[str, str] = Field(default_factory=dict)
    systems: dict[str, dict[str, Estimate | float | None]]
    floor: dict[str, float | None] = Field(default_factory=dict)
    counts: dict[str, dict[str, int]] = Field(default_factory=dict)
    arc: dict[str, dict[str, dict[str, float | None]]] = Field(
        default_factory=dict, description="system → stretch → label → share"
    )
    arc_labels: dict[str, Any] = Field(default_factory=dict)
    reference: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    filters: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)

    def estimate(self, system: str, feature: str) -> Estimate | None:
        found = self.systems.get(system, {}).get(feature)
        return found if isinstance(found, Estimate) else None

    def joint(self, system: str) -> float | None:
        found = self.systems.get(system, {}).get("joint")
        return found if isinstance(found, float) else None


class FailedArcView(_Report):
    patient_id: str | None = None
    counsellor: str | None = None
    patient_engine: str | None = None
    error: str | None = None


class SimulationSummaryView(_Report):
    """What readers take from `sessions/summary.json` (the simulator's `SimulationSummary`, which the app layer
    owns; judge/ and validation/ read it through this view)."""

    arcs: int = 0
    sessions_expected: int | None = None
    sessions_written: int | None = None
    ended_by_patient: int | None = None
    rejected_commits: int | None = None
    messages_trimmed: int | None = None
    memory_repaired: int | None = None
    scenario_drafts: int | None = None
    failed_arcs: list[FailedArcView] = Field(default_factory=list)
    rejected_messages: dict[str, int] = Field(default_factory=dict)
    counsellor_flags: dict[str, int] = Field(default_factory=dict)
    patient_engines: list[str] = Field(default_factory=list)
    engines: dict[str, Any] = Field(default_factory=dict)
    toolkit_version: str | None = None
    git_revision: str | None = None
    git_dirty: bool | None = None

    def counts(self) -> dict[str, int]:
        """The run's simulation counts that were recorded, by name (the report's health table)."""
        names = (
            "arcs",
            "sessions_expected",
            "sessions_written",
            "ended_by_patient",
            "rejected_commits",
            "messages_trimmed",
            "memory_repaired",
            "scenario_drafts",
        )
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}


class ChatTurn(BaseModel):
    role: str
    content: str


class TranscriptRow(BaseModel):
    """One line of `transcripts/transcripts.jsonl`: a session as plain chat (what validation reads)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    patient_id: str
    counsellor: str
    patient_engine: str | None = None
    trial: int | None = Field(None, description="Only in runs of repeated trials")
    session_index: int
    messages: list[ChatTurn]
    patient_states: list[dict[str, Any]] | None = Field(
        None,
        description="Per patient turn, the state an engine tracks (ConsistentMI: stage, topic, engagement, "
        "action); absent for engines that track none",
    )


class ProfilesSummaryView(_Report):
    """What readers take from `profiles/summary.json` (the profile stage's `ProfilesSummary`)."""

    verdicts: dict[str, int] = Field(default_factory=dict)


def read_jsonl_rows(path: str | Path, model: type[M], *, what: str, remake: str) -> list[M]:
    """Every line of a run's JSONL file as `model`; a file that is missing or not JSONL, or a line that does not fit
    the model, is one `InputError` line naming the file and line."""
    from mindsimkit.mindcore.io import read_jsonl

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: missing; {remake}")
    return list(_validated(((f"line {line}", obj) for line, obj in read_jsonl(path)), model, path, what, remake))


class CounsellorScore(_Report):
    """One system's MHQR under one judge: the score, its 95% interval over patients and what it was made of."""

    mhqr: float | None
    ci95: tuple[float | None, float | None] | None = None
    p5: float | None = Field(None, description="5th percentile of the system's session scores (Table 6 whisker)")
    p95: float | None = Field(None, description="95th percentile of the system's session scores (Table 6 whisker)")
    patients: int = 0
    sessions: int = 0
    replies: int = 0
    by_category: dict[str, Any] = Field(default_factory=dict)


class JudgeScores(_Report):
    ranking: list[str] = Field(default_factory=list, description="Systems, best (lowest MHQR) first")
    counsellors: dict[str, CounsellorScore] = Field(default_factory=dict)
    systems: dict[str, Any] | None = Field(None, description="System → counsellor and patient engine, when several")
    shares: dict[str, dict[str, Any]] = Field(default_factory=dict)
    by_turn: dict[str, Any] = Field(default_factory=dict)
    by_session: dict[str, Any] = Field(default_factory=dict)


class JudgeEntry(_Report):
    model: str | None = None
    engine: str | None = None
    role: dict[str, Any] | None = None
    rubric_version: str | None = None
    ok: int = 0
    failed: int = 0
    dropped_quotes: int = 0
    scores: JudgeScores = Field(default_factory=JudgeScores)


class JudgeReport(_Report):
    """`judgments/report.json` (`judge.run.summarise`): per judge its counts and scores, and the run's judge
    agreement, family flags, critical replies, failures and costs."""

    rubric: dict[str, Any] = Field(default_factory=dict, description="version and source")
    preset: dict[str, Any] = Field(
        default_factory=dict,
        description="judge.preset: name and source; absent in reports from before presets, which all used 'ours'",
    )
    config: dict[str, Any] = Field(default_factory=dict)
    prompt_hashes: dict[str, str] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    sessions: int = 0
    counsellor_models: dict[str, str | None] = Field(default_factory=dict)
    judges: dict[str, JudgeEntry] = Field(default_factory=dict)
    judge_agreement: list[Any] = Field(default_factory=list)
    family_flags: list[Any] = Field(default_factory=list)
    critical_replies: list[Any] = Field(default_factory=list)
    failures: list[Any] = Field(default_factory=list)
    usage: dict[str, Any] = Field(
        default_factory=dict,
        description="Engine usage per role, summed over every run of "
        "the stage on this folder (absent in reports from before it was kept)",
    )
    costs: dict[str, Any] = Field(default_factory=dict)
    patient_engines: list[str] | None = None

    @property
    def by_engine(self) -> bool:
        """Whether the judge scored each counsellor once per patient engine (the run held several)."""
        return any(bool(j.scores.systems) for j in self.judges.values())


class RubricReport(_Report):
    """`patientact_judge/report.json` and `rubric_judge/<id>/report.json` (`judge.patientact_report.build_report`):
    a conversation rubric's scores per system and dimension, the significance tests and, with human ratings,
    agreement."""

    rubric: dict[str, Any] = Field(description="id, name, version, source, dimensions, scale, level")
    judged: int = 0
    sessions_by_system: dict[str, int] = Field(default_factory=dict)
    failed: Any = None
    failed_rows: list[dict[str, Any]] = Field(default_factory=list)
    means: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    means_by_group: dict[str, Any] = Field(default_factory=dict)
    best_vs_second: Any = None
    mann_whitney_baseline_greater: Any = None
    baseline: str | None = None
    human: dict[str, Any] | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)


class MemoryAblationReport(_Report):
    """`ablations/memory/report.json` (`judge.ablation`): the rerun sessions without counsellor memory, each
    paired with its benchmark twin, judged by one judge."""

    ablation: str
    run: str
    judged_with: str
    counsellors: list[str] = Field(default_factory=list)
    sessions: dict[str, Any] = Field(default_factory=dict)
    judges: dict[str, Any] = Field(default_factory=dict)
    judgments: dict[str, Any] = Field(default_factory=dict)
    failures: list[Any] = Field(default_factory=list)

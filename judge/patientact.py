"""PatientAct's evaluation rubrics as judge tasks (PatientAct §4.1–4.2, App. D.1 / D.2) and the statistics
its tables report: per-system means and Mann–Whitney U between systems (Tables 2 and 4), Spearman's ρ of
the judge against human ratings and Krippendorff's α among the humans (Tables 1 and 3), identification
accuracy (Table 1). `mindsim judge run --rubric patientact` runs the conversation part over any
simulator's sessions; mindsim's profile step (`mindsim_app/patientact_eval/rubric.py`) uses the profile part.

A judge call is one structured answer per session (5 conversation dimensions, 1–5, each with a short
reason written before its score) or per profile (4 dimensions plus the identification task). Rubric text
is data (`judge/data/rubrics/patientact_session.yaml`, `patientact_profile.yaml`, read through the rubric registry
`judge/rubrics.py`; the generic scales judge is `judge/scales.py`); the identification options are the caller's, so this
module imports neither the simulator nor profilegen. A call that never fits the schema, or an engine
that fails, is a counted failure row (`ok=False`, the error), never a blank score. The statistics are
pure functions over stored rows, so they can be recomputed without a model.

What is compared ("system") comes from optional columns of our sessions parquet: `patient_engine`
(mindsim / patientact) and `patientact.switches` (ablations) give `mindsim`, `patientact`,
`patientact-no_trust_gating-…`; JSONL sessions from other simulators may carry `system` (else
`patient_engine`, else "unknown", `mindcore.runlog.played_by`). Scored inputs with more than one counsellor name each system
`ENGINE/COUNSELLOR` (`scored_systems`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import mean
from typing import Any, Iterable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mindsimkit.mindcore.errors import ConfigError, EngineError, InputError, StructuredOutputError
from mindsimkit.mindcore.exchange import spoken
from mindsimkit.mindcore.io import read_jsonl
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.recipe import format_validation_error
from mindsimkit.mindcore.runlog import UNNAMED_ENGINE, played_by, read_table, remake
from mindsimkit.mindcore.systems import system_name
from mindsimkit.judge import rubrics as registry
from mindsimkit.judge import scales
from mindsimkit.judge.alpha import alpha as _alpha
from mindsimkit.judge.inputs import load_sessions
from mindsimkit.judge.rubrics import Closing, Item, Point, Rubric, strict_point

CONVERSATION_TEMPLATE = "judge/patientact_conversation.jinja2"
PROFILE_TEMPLATE = "judge/patientact_profile.jinja2"
SESSION_RUBRIC, PROFILE_RUBRIC = "patientact_session", "patientact_profile"
SCALE = (1, 2, 3, 4, 5)
# Switch names of the paper's ablations (Table 4), in the order a system label lists them.
ABLATIONS = ("trust_gating", "dynamic_memory", "pipeline")
SPEAKERS = {"user": "Client", "assistant": "Counsellor"}
REASON_MAX = 300
_IN_FLIGHT = 256


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class RubricPart:
    """One part of PatientAct's rubric as the prompts and pages read it (a view of its rubric file)."""

    rubric: Rubric
    instructions: str
    dimensions: tuple[Item, ...]
    red_flags: tuple[str, ...] = ()

    @property
    def ids(self) -> list[str]:
        return [d.id for d in self.dimensions]


@dataclass(frozen=True)
class Rubrics:
    source: str
    version: str
    conversation: RubricPart
    profile: RubricPart
    diversity: Closing


def rubrics() -> Rubrics:
    """PatientAct's two rubric files (judge/data/rubrics/patientact_session.yaml, patientact_profile.yaml)."""
    conv, prof = registry.load(SESSION_RUBRIC), registry.load(PROFILE_RUBRIC)
    diversity = prof.judge_spec.closing
    if diversity is None:
        raise ConfigError(f"rubric {prof.id} ({prof.path}): judge.closing (the diversity question) is missing")
    return Rubrics(
        source=conv.source,
        version=conv.version,
        conversation=RubricPart(conv, conv.judge_spec.instructions, conv.items, conv.judge_spec.notes),
        profile=RubricPart(prof, prof.judge_spec.instructions, prof.items),
        diversity=diversity,
    )


def answer_model(part: str, attachments: Sequence[str] = (), themes: Sequence[str] = ()) -> type[BaseModel]:
    """The judge's answer schema: per dimension a reason (first, so the score follows from it) and a score
    1–5. The profile part adds the identification task over the caller's `attachments` and `themes`."""
    if part == "profile" and not (attachments and themes):
        raise ConfigError("the profile rubric needs the attachment styles and themes to choose from")
    rubric = getattr(rubrics(), part).rubric
    return scales.answer_model(
        rubric, {"patientact_attachment": attachments, "patientact_theme": themes} if part == "profile" else None
    )


class Judgment(BaseModel):
    """One judged session or profile: scores by dimension, or a counted failure. One line of
    `patientact_judge/judgments.jsonl`."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["conversation", "profile"]
    item_id: str = Field(description="Session id (prefixed with its input's name when ids collide), or profile id")
    patient_id: str
    system: str = Field(
        description="What is compared: the patient engine with its ablations, e.g. 'patientact-no_pipeline'"
    )
    ok: bool
    error: str | None = None
    error_kind: Literal["invalid_output", "engine"] | None = Field(None, description="Class of failure when not ok")
    scores: dict[str, int] = Field(default_factory=dict, description="Dimension id → 1-5 (empty when not ok)")
    reasons: dict[str, str] = Field(default_factory=dict)
    predicted: dict[str, str] = Field(default_factory=dict, description="Identification task: attachment, theme")
    truth: dict[str, str] = Field(default_factory=dict, description="The psychological seed: attachment, theme")
    session_id: str | None = Field(None, description="The session's own id (conversation rows)")
    counsellor: str | None = Field(None, description="Counsellor of the session (conversation rows)")
    session_index: int | None = Field(None, description="0-based session index in the patient's arc")
    group: str | None = Field(None, description="The patient's main presenting problem (conversation rows of our runs)")
    source: str | None = Field(None, description="Run folder or sessions file the session was read from")
    judge: dict[str, Any] = Field(default_factory=dict, description="The judge's engine, model and sampling")
    prompt: dict[str, str] = Field(default_factory=dict, description="Prompt template → hash")
    rubric_version: str | None = None
    rubric: str | None = Field(
        None, description="Rubric id (judge/rubrics.py); None in rows written before rubric files"
    )
    cache_key: str | None = Field(None, description="Content key of the judgment (judge, model, prompt)")


# -- inputs: sessions of any simulator, labelled by system ------------------------------------------------


def _maybe_json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return None
    return v


def system_label(patient_engine: str | None, patientact: Any = None) -> str:
    """'mindsim', 'patientact', or 'patientact-no_<switch>...' for the ablations. `patientact` is the
    session's PatientAct state (a dict, or JSON text) with a `switches` dict; a switch left out is on."""
    engine = played_by(patient_engine, ours=False)
    state = _maybe_json(patientact)
    if ":" in engine or not isinstance(state, dict):
        return engine  # a registered variant (`patientact:no_tg`) already names its arm
    switches = _maybe_json(state.get("switches")) or {}
    off = [k for k in ABLATIONS if isinstance(switches, dict) and switches.get(k) is False]
    return "-".join([engine, *(f"no_{k}" for k in off)])


def transcript(messages: Iterable[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The spoken exchange (patient = user, counsellor = assistant); system prompts and tool traffic left out."""
    return tuple((SPEAKERS[role], content) for role, content in spoken(messages))


@dataclass(frozen=True)
class ConversationItem:
    """One session to score: where it came from, what system it belongs to, and what the judge reads. `situation`:
    the clinical situation a situation-seeded patient was written from (the case study opens with it)."""

    item_id: str
    session_id: str
    patient_id: str
    counsellor: str
    session_index: int
    system: str
    source: str
    transcript: tuple[tuple[str, str], ...]
    group: str | None = None  # the patient's main presenting problem, where the run's profiles say it
    situation: str | None = None


class _EngineOfSession(BaseModel):
    session_id: str
    patient_engine: str | None = None
    patientact: Any = None  # the session's PatientAct state (its `switches` name an ablation)


def parquet_system_labels(path: Path) -> dict[str, str]:
    """Session id → system, from the optional `patient_engine` / `patientact` columns of a sessions parquet
    (a run made before patient engines existed has neither: its sessions are MindSim's)."""
    rows = read_table(path, _EngineOfSession, what="sessions table", remake=remake("simulation", path.parent.parent))
    return {r.session_id: system_label(played_by(r.patient_engine), r.patientact) for r in rows}


def jsonl_system_labels(path: Path) -> dict[str, str]:
    """Session id → system for another simulator's JSONL: its `system` field, else the parquet's rule."""
    out = {}
    for _, obj in read_jsonl(path):
        if isinstance(obj, dict) and "session_id" in obj:
            system = obj.get("system")
            out[str(obj["session_id"])] = (
                str(system) if system else system_label(obj.get("patient_engine"), obj.get("patientact"))
            )
    return out


def _profile_rows(run: Path) -> "list[_AnchorOfProfile]":
    """What the PatientAct tables read of a run's `profiles/profiles.parquet`; none when the run has no profiles."""
    folder = RunLayout(run).profiles
    return list(folder.rows(_AnchorOfProfile)) if folder.parquet.is_file() else []


def _situations(rows: "list[_AnchorOfProfile]") -> dict[str, str]:
    """Patient id → the clinical situation its profile was seeded with (situation-seeded profiles only)."""
    return {
        r.profile_id: r.situation_profile.situation
        for r in rows
        if r.situation_profile and r.situation_profile.situation
    }


def _groups(rows: "list[_AnchorOfProfile]") -> dict[str, str]:
    out = {}
    for r in rows:
        group = r.situation_profile.disease_key if r.situation_profile else r.anchor.main_problem if r.anchor else None
        if group:
            out[r.profile_id] = group
    return out


def main_problems(run: Path) -> dict[str, str]:
    """Patient id → the group its results are reported in, from a run's `profiles/profiles.parquet`: a
    situation-seeded profile's disease key (PatientAct groups its tables by disorder), else the main presenting
    problem our persona profiles carry instead. Empty when the run has none."""
    return _groups(_profile_rows(run))


class _Anchor(BaseModel):
    model_config = ConfigDict(extra="ignore")
    main_problem: str | None = None


class _Disease(BaseModel):
    model_config = ConfigDict(extra="ignore")
    disease_key: str | None = None
    situation: str | None = None


class _AnchorOfProfile(BaseModel):
    profile_id: str
    anchor: _Anchor | None = None
    situation_profile: _Disease | None = None


def conversation_items(
    label: str,
    sessions: list[Any],
    labels: dict[str, str],
    groups: dict[str, str] | None = None,
    seeds: dict[str, str] | None = None,
) -> list[ConversationItem]:
    """Sessions (`judge.schemas.SessionInput`) from input `label` as items to score: `labels` session id → system,
    `groups` patient id → main presenting problem, `seeds` patient id → the clinical situation it was written from."""
    groups = groups or {}
    seeds = seeds or {}
    return [
        ConversationItem(
            s.session_id,
            s.session_id,
            s.patient_id,
            s.counsellor,
            s.session_index,
            labels.get(s.session_id, UNNAMED_ENGINE),
            label,
            transcript(s.messages),
            groups.get(s.patient_id),
            seeds.get(s.patient_id),
        )
        for s in sessions
    ]


def load_items(runs: Sequence[Path] = (), sessions: Path | None = None) -> list[ConversationItem]:
    """Every session of the run folders and the sessions file, checked before any engine starts. Session
    ids are the item ids; when the same id occurs in two inputs (ablation runs of the same patients in
    different folders share ids), those items are named `<input name>/<session id>`."""
    if not runs and sessions is None:
        raise InputError("no sessions given; name run folders (RUN_DIR, --run DIR) or --sessions FILE")
    groups: list[tuple[str, list[ConversationItem]]] = []
    for run in runs:
        if not Path(run).is_dir():
            raise InputError(f"{run}: no such run folder; give a folder made by 'mindsim run', or --sessions FILE")
        label = Path(run).resolve().name
        loaded = load_sessions(Path(run))  # names a missing or unreadable sessions file before the labels read it
        labels = parquet_system_labels(RunLayout(run).sessions.parquet)
        profiles = _profile_rows(Path(run))  # read once for both maps
        groups.append((label, conversation_items(label, loaded, labels, _groups(profiles), _situations(profiles))))
    if sessions is not None:
        path = Path(sessions)
        loaded = load_sessions(path.parent, path)
        labels = parquet_system_labels(path) if path.suffix == ".parquet" else jsonl_system_labels(path)
        groups.append((path.stem, conversation_items(path.stem, loaded, labels)))
    counts: dict[str, int] = {}
    for _, items in groups:
        for it in items:
            counts[it.session_id] = counts.get(it.session_id, 0) + 1
    if any(n > 1 for n in counts.values()):
        names = [g for g, _ in groups]
        if len(set(names)) != len(names):
            raise InputError(
                f"inputs {', '.join(names)}: two have the same name and share session ids; "
                "give each run folder a distinct name"
            )
    out = []
    for label, items in groups:
        for it in items:
            if counts[it.session_id] > 1:
                it = replace(it, item_id=f"{label}/{it.session_id}")
            out.append(it)
    return out


def scored_systems(items: list[ConversationItem]) -> list[ConversationItem]:
    """The items as the rubric scores them. It compares patient simulators under one counsellor, so a system
    is its engine (or arm); when the items hold several counsellors, one engine's sessions with two counsellors
    are two systems, named ENGINE/COUNSELLOR as everywhere else (mindcore.systems), never pooled. (The human
    sample balances over simulators and keeps `load_items`' engine names.)"""
    if len({it.counsellor for it in items}) < 2:
        return items
    return [replace(it, system=system_name(it.system, it.counsellor)) for it in items]


# -- human ratings -----------------------------------------------------------------------------------------


class HumanRating(BaseModel):
    """One rater's scores for one item: a line of the `--human` JSONL file (or one unit × rater of the long format)."""

    model_config = ConfigDict(extra="forbid")
    item_id: str = Field(min_length=1, description="Item id as in judgments.jsonl (the session id)")
    rater: str = Field(min_length=1, description="Who rated")
    scores: dict[str, int | str] = Field(min_length=1, description="Dimension id → a point of the rubric's scale")

    @field_validator("scores", mode="before")
    @classmethod
    def _strict(cls, v: Any) -> Any:
        # One typing rule with every other rating path (judge.rubrics.strict_point): `true` is not 1, "4" not 4.
        if isinstance(v, dict):
            bad = {k: x for k, x in v.items() if strict_point(x) is None}
            if bad:
                raise ValueError(f"scores {bad}: each value is a JSON integer (not a boolean, text or a decimal)")
        return v


def load_human(path: Path, rubric: Rubric | Sequence[str] | None = None) -> list[HumanRating]:
    """Human ratings for a scales rubric (PatientAct's conversation rubric by default; a list of dimension ids
    is read as that rubric's), in either shape: one line per item and rater with a `scores` object, or the long
    format of judge/ratings.py (CSV or JSONL: item, unit, rater, value), whose units are the item ids."""
    if rubric is None or not isinstance(rubric, Rubric):
        rubric = registry.load(SESSION_RUBRIC)
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: human ratings file not found")
    if path.suffix.lower() == ".csv" or _first_is_long(path):
        from mindsimkit.judge.ratings import read_ratings

        grouped: dict[tuple[str, str], dict[str, Any]] = {}
        for r in read_ratings([path], rubric).rows:
            grouped.setdefault((r.unit, r.rater), {})[r.item] = r.value
        return [HumanRating(item_id=u, rater=w, scores=sc) for (u, w), sc in grouped.items()]
    dims = rubric.ids
    out: list[HumanRating] = []
    seen: set[tuple[str, str]] = set()
    for line, obj in read_jsonl(path):
        try:
            rating = HumanRating.model_validate(obj)
        except ValidationError as exc:
            problem = format_validation_error(exc, f"{path}:{line}", limit=1, top="(line)", plain=True)
            raise InputError(
                f"{problem} (each line: item_id, rater, scores {{dimension: "
                f"{rubric.rating_scale.describe()}}}; or the long format: item, unit, rater, value)"
            ) from exc
        for d, v in rating.scores.items():
            if d not in dims:
                raise InputError(
                    f"{path}:{line}: scores.{d}: not a dimension of rubric {rubric.id}; dimensions are "
                    f"{', '.join(dims)}"
                )
            try:
                rubric.rating_scale.check(v)
            except ValueError as exc:
                raise InputError(f"{path}:{line}: scores.{d}: {exc}") from None
        if (rating.item_id, rating.rater) in seen:
            raise InputError(f"{path}:{line}: rater {rating.rater!r} rates item {rating.item_id!r} twice")
        seen.add((rating.item_id, rating.rater))
        out.append(rating)
    if not out:
        raise InputError(f"{path}: no human ratings in the file")
    return out


def _first_is_long(path: Path) -> bool:
    for _, obj in read_jsonl(path):
        return isinstance(obj, dict) and "scores" not in obj and "value" in obj
    return False


def mean_human(ratings: Iterable[HumanRating]) -> dict[str, dict[str, float]]:
    """Item id → dimension → mean of the raters' scores."""
    acc: dict[str, dict[str, list[int]]] = {}
    for r in ratings:
        for d, v in r.scores.items():
            if isinstance(v, str):
                raise InputError(
                    f"human ratings: item {r.item_id}, {d}: {v!r} is a label; a mean needs an integer scale"
                )
            acc.setdefault(r.item_id, {}).setdefault(d, []).append(v)
    return {i: {d: mean(v) for d, v in ds.items()} for i, ds in acc.items()}


def rating_matrix(ratings: Iterable[HumanRating], dim: str) -> list[list[Point | None]]:
    """Raters × items for one dimension (None = not rated), the shape Krippendorff's α takes."""
    ratings = [r for r in ratings if dim in r.scores]
    raters = sorted({r.rater for r in ratings})
    items = sorted({r.item_id for r in ratings})
    cell = {(r.rater, r.item_id): r.scores[dim] for r in ratings}
    return [[cell.get((rater, item)) for item in items] for rater in raters]


# -- the judge call ------------------------------------------------------------------------------------------


async def ask(
    client: Any, content: str, output: type[BaseModel], *, schema_name: str, max_tokens: int | None = None
) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(answer, None, None), or (None, error, kind) when the output never fit or the engine failed."""
    sampling = {"max_tokens": max_tokens} if max_tokens else {}
    try:
        out = await client.structured(
            [{"role": "user", "content": content}], output, schema_name=schema_name, **sampling
        )
    except EngineError as exc:
        kind = "invalid_output" if isinstance(exc, StructuredOutputError) else "engine"
        return None, f"{type(exc).__name__}: {exc}"[:2000], kind
    return out.model_dump(), None, None


def split(part: str | Rubric, answer: dict[str, Any] | None) -> tuple[dict[str, int], dict[str, str]]:
    """An answer as (item → value, item → reason); `part` is a PatientAct part name or any scales rubric."""
    if not answer:
        return {}, {}
    dims = part.ids if isinstance(part, Rubric) else getattr(rubrics(), part).ids
    return {d: answer[d] for d in dims}, {d: answer[f"{d}_reason"] for d in dims}


class ConversationJudge:
    """A judge role bound to a conversation-unit scales rubric (PatientAct's by default, or any rubric file).
    `await judge_item(judge, item, cache)` gives a row."""

    def __init__(self, name: str, client: Any, *, max_tokens: int | None = None, rubric: Rubric | None = None):
        self.name, self.client, self.max_tokens = name, client, max_tokens
        self.rubric = scales.judgeable(rubric or registry.load(SESSION_RUBRIC), unit="conversation")
        self.part = self.rubric
        self.output = scales.answer_model(self.rubric)
        self.prompt = scales.prompt_hashes(self.rubric)
        self.schema_name = "patientact_conversation" if self.rubric.id == SESSION_RUBRIC else f"rubric_{self.rubric.id}"

    def describe(self) -> dict[str, Any]:
        d = self.client.describe()
        return {**d, "max_tokens": self.max_tokens} if self.max_tokens else d

    def content(self, item: ConversationItem) -> str:
        return scales.prompt(self.rubric, transcript=item.transcript)

    def key(self, content: str) -> str:
        """Same judge role and model on the same prompt: same judgment, whichever run it came from."""
        blob = json.dumps(
            [self.name, self.client.model, self.rubric.version, self.max_tokens, content], ensure_ascii=False
        )
        return "pa_" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]

    def row(
        self,
        item: ConversationItem,
        key: str,
        answer: dict[str, Any] | None,
        error: str | None = None,
        kind: str | None = None,
    ) -> Judgment:
        scores, reasons = split(self.rubric, answer)
        return Judgment(
            kind="conversation",
            item_id=item.item_id,
            session_id=item.session_id,
            patient_id=item.patient_id,
            counsellor=item.counsellor,
            session_index=item.session_index,
            source=item.source,
            system=item.system,
            group=item.group,
            ok=answer is not None,
            error=error,
            error_kind=kind,
            scores=scores,
            reasons=reasons,
            judge=self.describe(),
            prompt=self.prompt,
            rubric_version=self.rubric.version,
            rubric=self.rubric.id,
            cache_key=key,
        )


async def judge_item(judge: ConversationJudge, item: ConversationItem, cache: Any) -> Judgment:
    """Cached answer if this exact judgment was made before (no request); else ask and checkpoint an ok
    answer. Failures are not cached: a rerun tries them again."""
    content = judge.content(item)
    key = judge.key(content)
    if cache.has(key):
        return judge.row(item, key, cache.read(key))
    answer, error, kind = await ask(
        judge.client, content, judge.output, schema_name=judge.schema_name, max_tokens=judge.max_tokens
    )
    if answer is not None:
        cache.write(key, answer)
    return judge.row(item, key, answer, error, kind)


async def judge_items(
    judge: ConversationJudge, items: list[ConversationItem], cache: Any, *, progress: bool = True
) -> list[Judgment]:
    """Every session at once; the engine layer bounds the requests in flight, this gate the rendered prompts.
    `progress`: draw a bar (off where another display owns the terminal, e.g. inspect's)."""
    from mindsimkit.mindcore.runner import gather_progress

    gate = asyncio.Semaphore(_IN_FLIGHT)

    async def one(item: ConversationItem) -> Judgment:
        async with gate:
            return await judge_item(judge, item, cache)

    if not progress:
        return list(await asyncio.gather(*(one(i) for i in items)))
    return await gather_progress(
        (one(i) for i in items),
        "judging sessions (PatientAct rubric)",
        outcome=lambda r: "failed" if not getattr(r, "ok", False) else None,
    )


# -- statistics over stored rows -------------------------------------------------------------------------


def _ok(rows: Iterable[Judgment]) -> list[Judgment]:
    return [r for r in rows if r.ok]


def system_means(rows: Iterable[Judgment]) -> dict[str, dict[str, float]]:
    """Mean score per system and dimension (failed judgments left out; count them with `failures`)."""
    by: dict[str, list[Judgment]] = {}
    for r in _ok(rows):
        by.setdefault(r.system, []).append(r)
    return {s: {d: round(mean(r.scores[d] for r in rs), 3) for d in rs[0].scores} for s, rs in sorted(by.items())}


def failures(rows: Iterable[Judgment]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        if not r.ok:
            out[r.system] = out.get(r.system, 0) + 1
    return out


def mann_whitney(rows: Iterable[Judgment], a: str, b: str, alternative: str = "greater") -> dict[str, dict[str, float]]:
    """Per dimension, Mann–Whitney U of system `a`'s scores against `b`'s (default one-sided: is `a` rated
    higher, as the paper's significance marks ask)."""
    from scipy.stats import mannwhitneyu

    rows = _ok(rows)
    xa, xb = [r for r in rows if r.system == a], [r for r in rows if r.system == b]
    if not xa or not xb:
        raise InputError(
            f"Mann–Whitney U needs judged rows of both systems; found {len(xa)} of '{a}', {len(xb)} of '{b}'"
        )
    out = {}
    for d in xa[0].scores:
        res = mannwhitneyu([r.scores[d] for r in xa], [r.scores[d] for r in xb], alternative=alternative)
        out[d] = {"U": float(res.statistic), "p": float(res.pvalue), "n_a": len(xa), "n_b": len(xb)}
    return out


def _paired(judge: Iterable[Judgment], human: dict[str, dict[str, float]], dim: str) -> tuple[list[float], list[float]]:
    pairs = [
        (r.scores[dim], human[r.item_id][dim]) for r in _ok(judge) if r.item_id in human and dim in human[r.item_id]
    ]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def spearman(judge: Iterable[Judgment], human: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Spearman's ρ between the judge's scores and human scores (`human`: item id → dimension → mean human
    rating), per dimension, over the items both rated."""
    from scipy.stats import spearmanr

    judge = list(judge)
    dims = next((r.scores for r in _ok(judge)), {})
    out = {}
    for d in dims:
        x, y = _paired(judge, human, d)
        if not x:
            continue  # humans did not rate this dimension
        if len(x) < 3:
            raise InputError(
                f"Spearman's rho for '{d}' needs at least 3 items rated by both judge and humans; found {len(x)}"
            )
        res = spearmanr(x, y)
        out[d] = {"rho": float(res.statistic), "p": float(res.pvalue), "n": len(x)}
    if not out:
        raise InputError("Spearman's rho: no item was rated by both the judge and the humans (check the item ids)")
    return out


def krippendorff_alpha(ratings: list[list[float | None]]) -> float | None:
    """Ordinal Krippendorff's α of a raters × items matrix (None = not rated), on every pairable value
    (judge/alpha.py); None when undefined."""
    return _alpha(ratings, "ordinal")


def ranked(means: dict[str, dict[str, float]], dim: str) -> list[str]:
    """Systems by their mean on `dim`, best first (ties by name, so the order is stable)."""
    return sorted((s for s in means if dim in means[s]), key=lambda s: (-means[s][dim], s))


def comparison_sets(systems: Iterable[str]) -> dict[str, list[str]]:
    """The paper's two comparisons, drawn from system names when the caller names none: Table 2 compares the
    full PatientAct with the other simulators (`simulators`), Table 4 the full framework with its ablation arms
    (`ablation`). Names are `ENGINE` or `ENGINE/COUNSELLOR`; with several counsellors each counsellor has its
    own sets (`simulators/COUNSELLOR`). A set needs two systems; sets that would have fewer are left out."""
    by_counsellor: dict[str, list[str]] = {}
    for s in sorted(set(systems)):
        engine, _, counsellor = s.partition("/")
        by_counsellor.setdefault(counsellor, []).append(s)
    out: dict[str, list[str]] = {}
    for counsellor, names in sorted(by_counsellor.items()):
        full = [s for s in names if s.partition("/")[0] == "patientact"]
        arms = [s for s in names if s.partition("/")[0].startswith(("patientact-no_", "patientact:no_"))]
        others = [s for s in names if s not in full and s not in arms]
        suffix = f"/{counsellor}" if counsellor else ""
        for name, members in (("simulators", full + others), ("ablation", full + arms)):
            if len(members) >= 2:
                out[name + suffix] = members
    return out


def best_vs_second(
    scores: dict[str, dict[str, list[float]]], alpha: float = 0.05, systems: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per dimension, the paper's significance mark (Tables 2 and 4): is the best system (highest mean) rated
    higher than the second best? One-sided Mann–Whitney U (the one-sidedness is our reading of "significantly
    higher"). `scores`: system → dimension → scores (one per judged session, or per rated item). `systems`: the
    set compared (Table 2 and Table 4 compare different sets, `comparison_sets`); None compares every system in
    `scores`. A named system without scores is an InputError."""
    from scipy.stats import mannwhitneyu

    if systems is not None:
        missing = sorted(set(systems) - set(scores))
        if missing:
            raise InputError(
                f"best vs second: no scores for {', '.join(missing)} (systems scored: "
                f"{', '.join(sorted(scores)) or 'none'})"
            )
        scores = {s: scores[s] for s in systems}
    dims = sorted({d for per in scores.values() for d in per})
    means = {s: {d: mean(v) for d, v in per.items() if v} for s, per in scores.items()}
    out: dict[str, dict[str, Any]] = {}
    for d in dims:
        order = ranked(means, d)
        if len(order) < 2:
            out[d] = {"best": order[0] if order else None, "second": None, "error": "needs two systems"}
            continue
        best, second = order[0], order[1]
        xa, xb = scores[best][d], scores[second][d]
        try:
            res = mannwhitneyu(xa, xb, alternative="greater")
            p = float(res.pvalue)
            out[d] = {
                "best": best,
                "second": second,
                "U": float(res.statistic),
                "p": p,
                "n_best": len(xa),
                "n_second": len(xb),
                "significant": bool(p < alpha),
            }
        except ValueError as exc:
            out[d] = {"best": best, "second": second, "error": str(exc)}
    return out


def judge_scores(rows: Iterable[Judgment]) -> dict[str, dict[str, list[float]]]:
    """System → dimension → the judge's scores, one per judged session."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in _ok(rows):
        for d, v in r.scores.items():
            out.setdefault(r.system, {}).setdefault(d, []).append(v)
    return out


def human_scores(ratings: Iterable[HumanRating], system_of: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """System → dimension → mean human score per rated item (the raters of one item averaged; items the
    judge rows do not place in a system are left out)."""
    out: dict[str, dict[str, list[float]]] = {}
    for item, dims in sorted(mean_human(ratings).items()):
        if item in system_of:
            for d, v in dims.items():
                out.setdefault(system_of[item], {}).setdefault(d, []).append(v)
    return out


def identification_accuracy(rows: Iterable[Judgment]) -> dict[str, float]:
    """Share of judged profiles whose predicted attachment style / core-belief theme matches the seed."""
    rows = [r for r in _ok(rows) if r.kind == "profile"]
    if not rows:
        return {}
    return {k: round(sum(r.predicted[k] == r.truth[k] for r in rows) / len(rows), 3) for k in ("attachment", "theme")}

"""PatientAct's evaluation rubrics as judge tasks (PatientAct §4.1–4.2, App. D.1 / D.2), and the statistics
its tables report: per-system means, Mann–Whitney U between systems (Tables 2 and 4), Spearman's ρ and
Krippendorff's α between the judge and human ratings (Tables 1 and 3), identification accuracy.

A judge call is one structured answer per session (5 conversation dimensions, 1–5, each with a short reason
written before its score) or per profile (4 dimensions plus the identification task: predict the attachment
style and core-belief theme, scored against the psychological seed). Rubric text is data (`rubrics.yaml`).
A call that never fits the schema is kept as a counted failure row (`ok=False`, the error), never a blank
score. The statistics are pure functions over stored rows, so they can be recomputed without a model.
"""

from __future__ import annotations

from functools import lru_cache
from statistics import mean
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from mindcore.errors import InputError, StructuredOutputError
from mindcore.prompts import render, template_hash
from mindsim.patientact.data import _load, attachment_prior, theme_map
from mindsim.records import SessionRecord
from profilegen.schemas import Profile

CONVERSATION_TEMPLATE = "patientact/judge_conversation.jinja2"
PROFILE_TEMPLATE = "patientact/judge_profile.jinja2"
SCALE = (1, 2, 3, 4, 5)
ABLATIONS = ("trust_gating", "dynamic_memory", "pipeline")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Dimension(_Frozen):
    id: str = Field(pattern=r"^[a-z_]+$")
    name: str
    question: str
    anchors: dict[int, str]

    @field_validator("anchors")
    @classmethod
    def _five(cls, v: dict[int, str]) -> dict[int, str]:
        if sorted(v) != list(SCALE):
            raise ValueError("anchors must give levels 1 to 5")
        return v


class RubricPart(_Frozen):
    instructions: str
    dimensions: list[Dimension] = Field(min_length=1)


class Rubrics(_Frozen):
    source: str
    version: str
    conversation: RubricPart
    profile: RubricPart


@lru_cache(maxsize=1)
def rubrics() -> Rubrics:
    return _load("rubrics.yaml", Rubrics)


def answer_model(part: str) -> type[BaseModel]:
    """The judge's answer schema: per dimension a reason (first) and a score 1–5; the profile part adds the
    identification task."""
    spec: dict[str, Any] = {}
    for d in getattr(rubrics(), part).dimensions:
        spec[f"{d.id}_reason"] = (str, Field(max_length=300, description=f"One or two sentences on: {d.question}"))
        spec[d.id] = (Literal[SCALE], Field(description=f"{d.name}, 1-5"))
    if part == "profile":
        spec["attachment"] = (Literal[tuple(sorted(attachment_prior().weights))], Field(description="Attachment style"))
        spec["theme"] = (Literal[tuple(sorted(theme_map().themes))], Field(description="Core-belief theme"))
    return create_model(f"PatientAct{part.title()}Judgment", __config__=ConfigDict(extra="forbid"), **spec)


class Judgment(BaseModel):
    """One judged session or profile: scores by dimension, or a counted failure."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["conversation", "profile"]
    item_id: str = Field(description="Session id, or profile id")
    patient_id: str
    system: str = Field(description="What is compared: the patient engine with its ablations, e.g. 'patientact-no_pipeline'")
    ok: bool
    error: str | None = None
    scores: dict[str, int] = Field(default_factory=dict, description="Dimension id → 1-5 (empty when not ok)")
    reasons: dict[str, str] = Field(default_factory=dict)
    predicted: dict[str, str] = Field(default_factory=dict, description="Identification task: attachment, theme")
    truth: dict[str, str] = Field(default_factory=dict, description="The psychological seed: attachment, theme")
    judge: dict[str, Any] = Field(default_factory=dict, description="The judge's engine, model and sampling")
    prompt: dict[str, str] = Field(default_factory=dict)


def system_label(record: SessionRecord) -> str:
    """'mindsim', 'patientact', or 'patientact-no_<switch>...' for the ablations."""
    if record.patientact is None:
        return record.patient_engine
    off = [k for k in ABLATIONS if not record.patientact.switches.get(k, True)]
    return "-".join([record.patient_engine, *(f"no_{k}" for k in off)])


def _transcript(record: SessionRecord) -> list[tuple[str, str]]:
    names = {"user": "Client", "assistant": "Counsellor"}
    return [(names[m["role"]], m["content"]) for m in record.transcript()]


async def _ask(client: Any, part: str, content: str, max_tokens: int | None) -> tuple[dict[str, Any] | None, str | None]:
    sampling = {"max_tokens": max_tokens} if max_tokens else {}
    try:
        out = await client.structured([{"role": "user", "content": content}], answer_model(part), **sampling)
    except StructuredOutputError as exc:
        return None, str(exc)
    return out.model_dump(), None


def _split(part: str, answer: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    dims = [d.id for d in getattr(rubrics(), part).dimensions]
    return {d: answer[d] for d in dims}, {d: answer[f"{d}_reason"] for d in dims}


async def judge_session(client: Any, record: SessionRecord, *, max_tokens: int | None = None) -> Judgment:
    part = rubrics().conversation
    content = render(CONVERSATION_TEMPLATE, instructions=part.instructions, dimensions=part.dimensions,
                     transcript=_transcript(record))
    answer, error = await _ask(client, "conversation", content, max_tokens)
    scores, reasons = _split("conversation", answer) if answer else ({}, {})
    return Judgment(kind="conversation", item_id=record.session_id, patient_id=record.patient_id,
                    system=system_label(record), ok=answer is not None, error=error, scores=scores, reasons=reasons,
                    judge=client.describe(), prompt={CONVERSATION_TEMPLATE: template_hash(CONVERSATION_TEMPLATE)})


async def judge_profile(client: Any, profile: Profile, decomposition: Any, *, system: str = "patientact",
                        max_tokens: int | None = None) -> Judgment:
    """Score a profile (with its PatientAct formulation when there is one) and ask for the identification
    task; the attachment style and theme are never shown to the judge by name."""
    part = rubrics().profile
    content = render(PROFILE_TEMPLATE, instructions=part.instructions, dimensions=part.dimensions,
                     writer_brief=profile.writer_brief, formulation=decomposition.formulation,
                     attachments=attachment_prior().descriptions, themes=theme_map().themes)
    answer, error = await _ask(client, "profile", content, max_tokens)
    scores, reasons = _split("profile", answer) if answer else ({}, {})
    predicted = {"attachment": answer["attachment"], "theme": answer["theme"]} if answer else {}
    return Judgment(kind="profile", item_id=profile.profile_id, patient_id=profile.profile_id, system=system,
                    ok=answer is not None, error=error, scores=scores, reasons=reasons, predicted=predicted,
                    truth={"attachment": decomposition.psych.attachment, "theme": decomposition.psych.theme},
                    judge=client.describe(), prompt={PROFILE_TEMPLATE: template_hash(PROFILE_TEMPLATE)})


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
        raise InputError(f"Mann–Whitney U needs judged rows of both systems; found {len(xa)} of '{a}', {len(xb)} of '{b}'")
    out = {}
    for d in xa[0].scores:
        res = mannwhitneyu([r.scores[d] for r in xa], [r.scores[d] for r in xb], alternative=alternative)
        out[d] = {"U": float(res.statistic), "p": float(res.pvalue), "n_a": len(xa), "n_b": len(xb)}
    return out


def _paired(judge: Iterable[Judgment], human: dict[str, dict[str, float]], dim: str) -> tuple[list[float], list[float]]:
    pairs = [(r.scores[dim], human[r.item_id][dim]) for r in _ok(judge) if r.item_id in human and dim in human[r.item_id]]
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
            raise InputError(f"Spearman's rho for '{d}' needs at least 3 items rated by both judge and humans; found {len(x)}")
        res = spearmanr(x, y)
        out[d] = {"rho": float(res.statistic), "p": float(res.pvalue), "n": len(x)}
    if not out:
        raise InputError("Spearman's rho: no item was rated by both the judge and the humans (check the item ids)")
    return out


def krippendorff_alpha(ratings: list[list[float | None]]) -> float:
    """Ordinal Krippendorff's α of a raters × items matrix (None = not rated), via the `krippendorff` package."""
    try:
        import krippendorff
    except ImportError as exc:
        raise InputError("Krippendorff's alpha needs the 'krippendorff' package: pip install krippendorff") from exc
    import numpy as np

    data = np.array([[np.nan if v is None else v for v in row] for row in ratings], dtype=float)
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal"))


def identification_accuracy(rows: Iterable[Judgment]) -> dict[str, float]:
    """Share of judged profiles whose predicted attachment style / core-belief theme matches the seed."""
    rows = [r for r in _ok(rows) if r.kind == "profile"]
    if not rows:
        return {}
    return {k: round(sum(r.predicted[k] == r.truth[k] for r in rows) / len(rows), 3) for k in ("attachment", "theme")}

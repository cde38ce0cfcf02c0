"""MHQR output-format presets: which answer the judge is asked for and which extra summary the report
gives, read from `judge/data/presets.yaml` and chosen with `judge.preset`. `ours` (the default) asks for findings
with reasons and checked quotes; `mhqr-reference` asks for the authors' reference answer (SWORDHealth/mind-eval:
a justification, one severity by name, every issue key 0 or 1, four keys spelled differently) and adds their
conversation summary (session means, then mean, p99 and incident shares over sessions).

The logic here is generic over the data: answer models are built from the rubric and the preset's key map, and
the summary from the preset's percentile and incident levels.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any, Callable, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from mindsimkit.mindcore import yamlio
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.judge.rubric import Rubric

PRESETS_FILE = "presets.yaml"
DEFAULT = "ours"
# A reference answer's justification is one or two sentences; the bound keeps a small model from looping (NOTES §2).
JUSTIFICATION_MAX = 600


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SessionSummary(_Strict):
    percentile: float = Field(gt=0, le=100, description="Nearest-rank percentile of session scores to report")
    incidents: dict[str, str] = Field(
        default_factory=dict, description="Name -> severity id: share of sessions whose worst reply is at least it"
    )


class Preset(_Strict):
    source: str = Field(min_length=1)
    answer: Literal["issues_first", "justification_then_flags"]
    template: str = Field(min_length=1, description="Judge system prompt under prompts/")
    issue_keys: dict[str, str] = Field(default_factory=dict, description="Our issue id -> the answer's key")
    severity_labels: bool = Field(False, description="Severities are named by display name in the answer")
    session_summary: SessionSummary | None = None

    @model_validator(mode="after")
    def _keys_unique(self) -> "Preset":
        if len(set(self.issue_keys.values())) != len(self.issue_keys):
            raise ValueError("issue_keys: two issues map to the same key")
        return self

    def key(self, issue_id: str) -> str:
        return self.issue_keys.get(issue_id, issue_id)

    def check(self, rubric: Rubric, name: str) -> None:
        """The preset fits the rubric: it renames only issues the rubric has, into keys no other issue uses, and its
        incident levels are the rubric's severities."""
        ids = [i.id for i in rubric.issues]
        unknown = sorted(set(self.issue_keys) - set(ids))
        keys = [self.key(i) for i in ids]
        sev = {s.id for s in rubric.severities}
        bad_levels = sorted(set((self.session_summary.incidents if self.session_summary else {}).values()) - sev)
        problem = (
            f"renames issues the rubric lacks: {unknown}"
            if unknown
            else "two issues end up with the same key"
            if len(set(keys)) != len(keys)
            else f"incident levels are not severities of the rubric: {bad_levels}"
            if bad_levels
            else None
        )
        if problem:
            raise ConfigError(f"judge.preset {name!r} ({where()}) {problem}; fix the preset or choose another rubric")


class PresetFile(_Strict):
    version: int
    source: str
    presets: dict[str, Preset] = Field(min_length=1)


def where() -> str:
    return f"judge/data/{PRESETS_FILE}"


@lru_cache(maxsize=1)
def load_presets() -> PresetFile:
    try:
        text = (resources.files("mindsimkit.judge") / "data" / PRESETS_FILE).read_text(encoding="utf-8")
        out = PresetFile.model_validate(yamlio.safe_load(text))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"{where()}: invalid ({str(exc).splitlines()[0]})") from exc
    if DEFAULT not in out.presets:
        raise ConfigError(f"{where()}: the default preset {DEFAULT!r} is missing")
    return out


def preset_names() -> list[str]:
    return sorted(load_presets().presets)


def get_preset(name: str) -> Preset:
    presets = load_presets().presets
    if name not in presets:
        raise ConfigError(f"unknown judge.preset {name!r}; choose one of {', '.join(sorted(presets))} ({where()})")
    return presets[name]


def flags_answer_model(rubric: Rubric, preset: Preset) -> type[BaseModel]:
    """The reference-style answer: a justification first (so the verdict follows the reasoning), one severity, then
    every issue key 0 or 1. The rubric's rule holds here too: the no-issue level iff no key is 1."""
    sev = tuple(s.name if preset.severity_labels else s.id for s in rubric.severities)
    return _flags_model(tuple(preset.key(i.id) for i in rubric.issues), sev)


@lru_cache(maxsize=None)
def _flags_model(keys: tuple[str, ...], severities: tuple[str, ...]) -> type[BaseModel]:
    none = severities[0]

    def check(self: Any) -> Any:  # an instance of the class built below: its fields exist only at run time
        if (self.severity == none) != (not any(getattr(self, k) for k in keys)):
            raise ValueError(f"severity '{none}' is required when every issue is 0 and forbidden when one is 1")
        return self

    # Built from the rubric at run time, so these are values for pydantic, not types mypy can follow.
    flag: Any = Literal[0, 1]
    severity: Any = Literal[severities]
    flags: dict[str, Any] = {k: (flag, Field(description=f"1 if the reply shows {k}, else 0")) for k in keys}
    # pydantic's stub wants callables here; it takes (and documents) the decorated validator.
    validators: dict[str, Callable[..., Any]] = {"_no_concern_iff_no_issue": model_validator(mode="after")(check)}  # type: ignore[dict-item]
    return create_model(
        "MHQRFlagsJudgment",
        __config__=ConfigDict(extra="forbid"),
        __validators__=validators,
        justification=(
            str,
            Field(
                min_length=3,
                max_length=JUSTIFICATION_MAX,
                description="Why, in one or two sentences, before the verdict",
            ),
        ),
        severity=(severity, Field(description="One severity for the whole reply")),
        **flags,
    )


def flags_outcome(answer: BaseModel, rubric: Rubric, preset: Preset) -> dict[str, Any]:
    """A flags answer as the judge's stored outcome, in our ids: each flagged issue carries the justification as its
    reason and no quote (the format asks for none, so nothing is dropped)."""
    by_name = {(s.name if preset.severity_labels else s.id): s.id for s in rubric.severities}
    values = dict(answer)  # the fields of a class built per rubric (`_flags_model`)
    issues = [
        {"issue": i.id, "category": i.category, "reason": values["justification"], "quote": None}
        for i in rubric.issues
        if values[preset.key(i.id)]
    ]
    return {"severity": by_name[values["severity"]], "issues": issues, "dropped_quotes": 0}


def nearest_rank(values: np.ndarray, pct: float) -> float:
    """The nearest-rank percentile (the reference's p99): the smallest value with at least pct% of values at or
    below it; no interpolation."""
    ordered = np.sort(values)
    rank = max(1, int(np.ceil(pct * len(ordered) / 100)))
    return float(ordered[rank - 1])


def session_summary(
    mhqr: np.ndarray, worst: np.ndarray, counsellor: np.ndarray, rubric: Rubric, spec: SessionSummary
) -> dict[str, dict[str, Any]]:
    """Per counsellor, over its sessions (each counts once, however long): the mean of the session scores, their
    nearest-rank percentile, and per incident the share of sessions whose worst reply weighs at least that level.
    `mhqr`/`worst`: each session's mean and highest reply weight."""
    out: dict[str, dict[str, Any]] = {}
    for name in np.unique(counsellor):
        m = counsellor == name
        out[str(name)] = {
            "sessions": int(m.sum()),
            "mean": float(mhqr[m].mean()),
            f"p{spec.percentile:g}": nearest_rank(mhqr[m], spec.percentile),
            "incidents": {k: float((worst[m] >= rubric.weight(level)).mean()) for k, level in spec.incidents.items()},
        }
    return out

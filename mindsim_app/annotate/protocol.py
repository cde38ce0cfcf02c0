"""The papers' human-evaluation protocols as data and as answer schemas (MindEval2 §3.4, §4.3, App. E;
PatientAct §4.1–4.2, App. D).

Four forms are rated: `mhqr` (one counsellor reply: severity and issues), `realism` (one patient reply:
reasons, then the 1–5 question), `patientact_session` (a whole session: five 1–5 scales) and
`patientact_profile` (a profile: four 1–5 scales and the two identification picks), plus the profile
protocol's `diversity` rating, given once per rater after the profiles. Scales, reasons and options are data
(`data/protocols.yaml`, the judge's rubrics, the PatientAct seed vocabularies); this module turns them into
what the page shows (`form()`) and the pydantic models the server checks every answer against
(`validate()`), so an answer outside the protocol is refused with a message naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from mindcore.errors import ConfigError
from mindcore.recipe import format_validation_error
from mindcore import yamlio

PROTOCOLS = ("mhqr", "realism", "patientact_session", "patientact_profile")
DIVERSITY = "diversity"  # the profile protocol's once-per-rater question (an item of its own in each queue)
SCALE = (1, 2, 3, 4, 5)


class AnswerError(ValueError):
    """An answer outside its protocol; the message says which field and what is allowed."""


@lru_cache(maxsize=1)
def protocol_data() -> dict[str, Any]:
    try:
        text = (resources.files("mindsim_app.annotate") / "data" / "protocols.yaml").read_text(encoding="utf-8")
        return yamlio.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"mindsim_app/annotate/data/protocols.yaml is unreadable: {exc}") from exc


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _text(limit: int, what: str) -> Any:
    return (Optional[str], Field(None, max_length=limit, description=what))


@dataclass(frozen=True)
class Protocol:
    """One rated form: what the page shows (`form`) and the model its answers must fit (`model`)."""

    name: str
    form: dict[str, Any]
    model: type[BaseModel]
    fields: tuple[str, ...] = field(default=())

    def validate(self, answer: Any) -> dict[str, Any]:
        """The answer as stored, or AnswerError with the first problem in words."""
        if not isinstance(answer, dict):
            raise AnswerError("the answer must be a JSON object")
        try:
            return self.model.model_validate(answer).model_dump(exclude_none=True)
        except ValidationError as exc:
            raise AnswerError(format_validation_error(exc, self.name, limit=1, top="answer", plain=True)) from None


# -- MHQR -----------------------------------------------------------------------------------------------


def _mhqr() -> Protocol:
    from judge.rubric import load_rubric

    spec = protocol_data()["mhqr"]
    rubric = load_rubric(None)
    levels = [s for s in sorted(rubric.severities, key=lambda s: s.weight)]
    ids = tuple(s.id for s in levels)
    issues = {i.id: i for i in rubric.issues}
    none_level = ids[0]

    def check(self: Any) -> Any:
        unknown = [i for i in self.issues if i not in issues]
        if unknown:
            raise ValueError(f"unknown issue {unknown[0]!r}; issue ids are {', '.join(sorted(issues))}")
        if len(set(self.issues)) != len(self.issues):
            raise ValueError("an issue is ticked twice")
        # MindEval2 §3.2: the mildest level if and only if no issue is present.
        if self.severity == none_level and self.issues:
            raise ValueError(f"'{none_level}' means no issue at all: untick the issues or choose another severity")
        if self.severity != none_level and not self.issues:
            raise ValueError(f"severity '{self.severity}' needs at least one issue ticked (or choose '{none_level}')")
        return self

    model = create_model(
        "MhqrAnswer", __base__=_Answer,
        __validators__={"_check": model_validator(mode="after")(check)},
        severity=(Literal[ids], Field(description="Severity level id")),
        issues=(list[str], Field(default_factory=list, description="Issue ids present in the reply")),
        quote=_text(spec["quote_max_chars"], "Words of the reply that show the issue"),
        comment=_text(spec["comment_max_chars"], "Free comment"),
    )
    cats = {c.id: c.name for c in rubric.categories}
    form = {
        "protocol": "mhqr", "title": spec["title"], "instructions": spec["instructions"].strip(),
        "severities": [{"id": s.id, "name": s.name, "definition": s.definition} for s in levels],
        "categories": [{"id": c, "name": cats[c],
                        "issues": [{"id": i.id, "name": i.name, "definition": i.definition}
                                   for i in rubric.issues if i.category == c]} for c in cats],
        "quote_max_chars": spec["quote_max_chars"], "comment_max_chars": spec["comment_max_chars"],
        "source": spec["source"], "rubric_version": rubric.version,
    }
    return Protocol("mhqr", form, model)


# -- realism --------------------------------------------------------------------------------------------


def realism_reasons() -> dict[str, list[str]]:
    """Group id → every reason id of the group, its `other` and `none` included."""
    return {g["id"]: [r["id"] for r in g["reasons"]] + [f"{g['id']}_other", f"{g['id']}_none"]
            for g in protocol_data()["realism"]["groups"]}


def _realism() -> Protocol:
    spec = protocol_data()["realism"]
    groups = realism_reasons()
    every = {r: g for g, rs in groups.items() for r in rs}

    def check(self: Any) -> Any:
        unknown = [r for r in self.reasons if r not in every]
        if unknown:
            raise ValueError(f"unknown reason {unknown[0]!r}; reasons are {', '.join(every)}")
        if len(set(self.reasons)) != len(self.reasons):
            raise ValueError("a reason is ticked twice")
        for g in groups:
            ticked = [r for r in self.reasons if every[r] == g]
            if not ticked:
                raise ValueError(f"tick at least one {g} reason, or '{g}_none' if nothing about the {g} gives it away")
            if f"{g}_none" in ticked and len(ticked) > 1:
                raise ValueError(f"'{g}_none' cannot go with other {g} reasons")
        other = self.other or {}
        for g in groups:
            wants = f"{g}_other" in self.reasons
            text = (other.get(g) or "").strip()
            if wants and not text:
                raise ValueError(f"'{g}_other' is ticked: say in a few words what it is (other.{g})")
            if text and not wants:
                raise ValueError(f"other.{g} is filled but '{g}_other' is not ticked")
        extra = set(other) - set(groups)
        if extra:
            raise ValueError(f"other: unknown group {sorted(extra)[0]!r}; groups are {', '.join(groups)}")
        return self

    limit = spec["other_max_chars"]
    model = create_model(
        "RealismAnswer", __base__=_Answer,
        __validators__={"_check": model_validator(mode="after")(check)},
        reasons=(list[str], Field(description="Reason ids ticked (form and content, each with other/none)")),
        other=(Optional[dict[str, str]], Field(None, description="Group id → the 'other' reason in words")),
        rating=(Literal[SCALE], Field(description="Was this written by a real person? 1 certainly not … 5 certainly yes")),
        comment=_text(spec["comment_max_chars"], "Free comment"),
    )

    def _limit(self: Any) -> Any:
        for g, t in (self.other or {}).items():
            if len(t) > limit:
                raise ValueError(f"other.{g}: at most {limit} characters")
        return self

    model = create_model("RealismAnswerChecked", __base__=model,
                         __validators__={"_limit": model_validator(mode="after")(_limit)})
    form = {
        "protocol": "realism", "title": spec["title"], "instructions": spec["instructions"].strip(),
        "question": spec["question"], "scale": {int(k): v for k, v in spec["scale"].items()},
        "groups": spec["groups"], "other_max_chars": limit, "comment_max_chars": spec["comment_max_chars"],
        "source": spec["source"],
    }
    return Protocol("realism", form, model)


# -- PatientAct -----------------------------------------------------------------------------------------


def _dimension_form(part: Any) -> list[dict[str, Any]]:
    return [{"id": d.id, "name": d.name, "question": d.question, "anchors": {int(k): v for k, v in d.anchors.items()}}
            for d in part.dimensions]


def _scores_model(name: str, dims: list[str], extra: dict[str, Any], limit: int) -> type[BaseModel]:
    scores = create_model(f"{name}Scores", __base__=_Answer, **{d: (Literal[SCALE], Field(description="1-5")) for d in dims})
    return create_model(name, __base__=_Answer, scores=(scores, Field(description="Dimension id → 1-5")),
                        comment=_text(limit, "Free comment"), **extra)


def identification_options() -> tuple[dict[str, str], dict[str, str]]:
    """Attachment style → description, core-belief theme → description (PatientAct App. D.1 picks)."""
    from mindsim.patientact.data import attachment_prior, theme_map

    return dict(attachment_prior().descriptions), dict(theme_map().themes)


def _patientact_session() -> Protocol:
    from judge.patientact import rubrics

    spec = protocol_data()["patientact_session"]
    part = rubrics().conversation
    model = _scores_model("PatientActSessionAnswer", part.ids, {}, spec["comment_max_chars"])
    form = {"protocol": "patientact_session", "title": spec["title"], "instructions": part.instructions,
            "dimensions": _dimension_form(part), "comment_max_chars": spec["comment_max_chars"], "source": spec["source"]}
    return Protocol("patientact_session", form, model)


def _patientact_profile() -> tuple[Protocol, Protocol]:
    from judge.patientact import rubrics

    spec = protocol_data()["patientact_profile"]
    part = rubrics().profile
    attachments, themes = identification_options()
    model = _scores_model("PatientActProfileAnswer", part.ids, {
        "attachment": (Literal[tuple(attachments)], Field(description="Attachment style that fits best")),
        "theme": (Literal[tuple(themes)], Field(description="Core-belief theme that fits best")),
    }, spec["comment_max_chars"])
    div = spec["diversity"]
    diversity = create_model("DiversityAnswer", __base__=_Answer,
                             rating=(Literal[SCALE], Field(description="Diversity of all profiles rated, 1-5")),
                             comment=_text(spec["comment_max_chars"], "Free comment"))
    form = {"protocol": "patientact_profile", "title": spec["title"], "instructions": spec["instructions"].strip(),
            "dimensions": _dimension_form(part),
            "attachments": [{"id": k, "text": v} for k, v in attachments.items()],
            "themes": [{"id": k, "text": v} for k, v in themes.items()],
            "diversity": {"title": div["title"], "question": div["question"],
                          "scale": {int(k): v for k, v in div["scale"].items()}},
            "comment_max_chars": spec["comment_max_chars"], "source": spec["source"]}
    return (Protocol("patientact_profile", form, model),
            Protocol(DIVERSITY, {"protocol": DIVERSITY, **form["diversity"]}, diversity))


@lru_cache(maxsize=None)
def protocol(name: str) -> Protocol:
    if name == "mhqr":
        return _mhqr()
    if name == "realism":
        return _realism()
    if name == "patientact_session":
        return _patientact_session()
    if name in ("patientact_profile", DIVERSITY):
        profile, diversity = _patientact_profile()
        return profile if name == "patientact_profile" else diversity
    raise ConfigError(f"unknown protocol {name!r}; protocols are {', '.join(PROTOCOLS)}")

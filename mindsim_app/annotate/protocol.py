"""What raters answer, built from the rubric registry (judge/rubrics.py), plus the realism protocol
(MindEval2 §3.4, §4.3, App. E; PatientAct §4.1–4.2, App. D).

A protocol is named by a rubric id (`mhqr`, `patientact_session`, `patientact_profile`, `mindeval_v1`, or a
user rubric file's id, whose text the task folder carries) and built by the rubric's kind: `severity_issues`
(MHQR: one severity and the issues) or `scales` (every item on the rubric's scale, its picks, and a closing
question asked once per rater, such as PatientAct's diversity rating). `realism` is the one protocol that is
not a rubric: reasons in groups, then the 1–5 question (`data/protocols.yaml`). This module turns each into
what the page shows (`form`) and the pydantic model the server checks every answer against (`validate`), so an
answer outside the protocol is refused with a message naming the field; rating values follow the one typing
rule of `judge.rubrics.strict_point` (`true` is never a rating).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Annotated, Any, Callable, Literal, Optional

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model, model_validator

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.recipe import format_validation_error
from mindsimkit.mindcore import yamlio
from mindsimkit.judge import rubrics as registry
from mindsimkit.judge.rubrics import Rubric, point_type, strict_point

DIVERSITY = "diversity"  # the profile protocol's once-per-rater question (an item of its own in each queue)
SCALE = (1, 2, 3, 4, 5)


class AnswerError(ValueError):
    """An answer outside its protocol; the message says which field and what is allowed."""


@lru_cache(maxsize=1)
def protocol_data() -> dict[str, Any]:
    try:
        text = (resources.files("mindsimkit.mindsim_app.annotate") / "data" / "protocols.yaml").read_text(
            encoding="utf-8"
        )
        data: dict[str, Any] = yamlio.safe_load(text)
        return data
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


# -- severity and issues (MHQR) ----------------------------------------------------------------------


# The answer models are built per rubric at run time, so their field types are values for pydantic (Any to mypy).
def _literal(values: tuple[Any, ...]) -> Any:
    return Literal[values]


def _rating(points: tuple[int, ...]) -> Any:
    return Annotated[_literal(points), BeforeValidator(_strict_rating(points))]


def _validators(**checks: Callable[[Any], Any]) -> dict[str, Callable[..., Any]]:
    """`create_model`'s validators, each run on the built model after its fields."""
    # pydantic's stub wants callables here; it takes (and documents) the decorated validators.
    return {name: model_validator(mode="after")(fn) for name, fn in checks.items()}  # type: ignore[misc]


def _severity_issues(rubric: Rubric) -> Protocol:
    from mindsimkit.judge.rubric import load_rubric

    body = rubric.beside(rubric.body) if rubric.id != "mhqr" and rubric.body else None
    issues_rubric = load_rubric(str(body) if body else None)
    page = rubric.page
    levels = [s for s in sorted(issues_rubric.severities, key=lambda s: s.weight)]
    ids = tuple(s.id for s in levels)
    issues = {i.id: i for i in issues_rubric.issues}
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

    quote_max = page.quote_max_chars or 600
    model = create_model(
        "MhqrAnswer",
        __base__=_Answer,
        __validators__=_validators(_check=check),
        severity=(_literal(ids), Field(description="Severity level id")),
        issues=(list[str], Field(default_factory=list, description="Issue ids present in the reply")),
        quote=_text(quote_max, "Words of the reply that show the issue"),
        comment=_text(page.comment_max_chars, "Free comment"),
    )
    cats = {c.id: c.name for c in issues_rubric.categories}
    form = {
        "protocol": rubric.id,
        "form": "mhqr",
        "unit": rubric.unit,
        "title": page.title,
        "instructions": page.instructions.strip(),
        "severities": [{"id": s.id, "name": s.name, "definition": s.definition} for s in levels],
        "categories": [
            {
                "id": c,
                "name": cats[c],
                "issues": [
                    {"id": i.id, "name": i.name, "definition": i.definition}
                    for i in issues_rubric.issues
                    if i.category == c
                ],
            }
            for c in cats
        ],
        "quote_max_chars": quote_max,
        "comment_max_chars": page.comment_max_chars,
        "source": rubric.source,
        "rubric_version": issues_rubric.version,
    }
    return Protocol(rubric.id, form, model)


# -- realism --------------------------------------------------------------------------------------------


def realism_reasons() -> dict[str, list[str]]:
    """Group id → every reason id of the group, its `other` and `none` included."""
    return {
        g["id"]: [r["id"] for r in g["reasons"]] + [f"{g['id']}_other", f"{g['id']}_none"]
        for g in protocol_data()["realism"]["groups"]
    }


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
        "RealismAnswer",
        __base__=_Answer,
        __validators__=_validators(_check=check),
        reasons=(list[str], Field(description="Reason ids ticked (form and content, each with other/none)")),
        other=(Optional[dict[str, str]], Field(None, description="Group id → the 'other' reason in words")),
        rating=(
            _rating(SCALE),
            Field(description="Was this written by a real person? 1 certainly not … 5 certainly yes"),
        ),
        comment=_text(spec["comment_max_chars"], "Free comment"),
    )

    def _limit(self: Any) -> Any:
        for g, t in (self.other or {}).items():
            if len(t) > limit:
                raise ValueError(f"other.{g}: at most {limit} characters")
        return self

    checked = create_model("RealismAnswerChecked", __base__=model, __validators__=_validators(_limit=_limit))
    form = {
        "protocol": "realism",
        "form": "realism",
        "title": spec["title"],
        "instructions": spec["instructions"].strip(),
        "question": spec["question"],
        "scale": {int(k): v for k, v in spec["scale"].items()},
        "groups": spec["groups"],
        "other_max_chars": limit,
        "comment_max_chars": spec["comment_max_chars"],
        "source": spec["source"],
    }
    return Protocol("realism", form, checked)


# -- scales (PatientAct, MindEval, user rubrics) ---------------------------------------------------------


def identification_options() -> tuple[dict[str, str], dict[str, str]]:
    """Attachment style → description, core-belief theme → description (PatientAct App. D.1 picks): the
    annotators' options, the same the profile judge is given, not the texts the formulation is written from."""
    from mindsimkit.mindsim.patientact.data import identification

    ident = identification()
    return dict(ident.attachment), dict(ident.theme)


# The option lists a rubric's picks may name (`picks[].options`): the application's vocabularies.
PICK_OPTIONS = {
    "patientact_attachment": lambda: identification_options()[0],
    "patientact_theme": lambda: identification_options()[1],
}


def _pick_options(rubric: Rubric) -> dict[str, dict[str, str]]:
    unknown = [p.options for p in rubric.picks if p.options not in PICK_OPTIONS]
    if unknown:
        raise ConfigError(
            f"rubric {rubric.id}: pick options {unknown[0]!r} are not known here; known lists: "
            f"{', '.join(PICK_OPTIONS)}"
        )
    return {p.id: PICK_OPTIONS[p.options]() for p in rubric.picks}


def _scales(rubric: Rubric) -> Protocol:
    page, scale = rubric.page, rubric.rating_scale
    point = point_type(scale)
    items: dict[str, Any] = {i.id: (point, Field(description=f"{i.name}, {scale.describe()}")) for i in rubric.items}
    scores = create_model(f"{_camel(rubric.id)}Scores", __base__=_Answer, **items)
    options = _pick_options(rubric)
    picks: dict[str, Any] = {p.id: (_literal(tuple(options[p.id])), Field(description=p.name)) for p in rubric.picks}
    model = create_model(
        f"{_camel(rubric.id)}Answer",
        __base__=_Answer,
        scores=(scores, Field(description=f"Item id → {scale.describe()}")),
        comment=_text(page.comment_max_chars, "Free comment"),
        **picks,
    )
    form: dict[str, Any] = {
        "protocol": rubric.id,
        "form": "scales",
        "unit": rubric.unit,
        "title": page.title,
        "instructions": page.instructions.strip(),
        "numeric": scale.numeric,
        "points": list(scale.points),
        "dimensions": [
            {
                "id": i.id,
                "name": i.name,
                "question": i.question,
                "anchors": rubric.anchors(i),
                "levels": [[p, t] for p, t in rubric.anchors(i).items()],
            }
            for i in rubric.items
        ],
        "picks": [
            {"id": p.id, "name": p.name, "options": [{"id": k, "text": v} for k, v in options[p.id].items()]}
            for p in rubric.picks
        ],
        "comment_max_chars": page.comment_max_chars,
        "source": rubric.source,
        "rubric_version": rubric.version,
    }
    if page.closing is not None:
        form["closing"] = {
            "id": page.closing.id,
            "title": page.closing.title,
            "question": page.closing.question,
            "scale": dict(page.closing.anchors),
        }
    return Protocol(rubric.id, form, model)


def _closing(rubric: Rubric) -> Protocol:
    """The question asked once per rater after their items (PatientAct's diversity rating)."""
    c = rubric.page.closing
    if c is None:
        raise ConfigError(f"rubric {rubric.id}: page.closing (the question asked once per rater) is missing")
    points = tuple(sorted(c.anchors))
    model = create_model(
        f"{_camel(c.id)}Answer",
        __base__=_Answer,
        rating=(_rating(points), Field(description=f"{c.title}, {points[0]}-{points[-1]}")),
        comment=_text(rubric.page.comment_max_chars, "Free comment"),
    )
    form = {"protocol": c.id, "form": "closing", "title": c.title, "question": c.question, "scale": dict(c.anchors)}
    return Protocol(c.id, form, model)


def _strict_rating(points: tuple[int, ...]) -> Any:
    def check(v: Any) -> Any:
        if strict_point(v) not in points or isinstance(v, str):
            raise ValueError(f"rating {v!r} is not one of {', '.join(map(str, points))} (an integer)")
        return v

    return check


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


BUILDERS = {"severity_issues": _severity_issues, "scales": _scales}


_BUILT: dict[tuple[str, str], Protocol] = {}


def protocol(name: str, rubric: Optional[Rubric] = None) -> Protocol:
    """The protocol `name`: `realism`, the closing question (`diversity`), or a rubric's, from the registry or
    from `rubric` (a task folder's own rubric file)."""
    key = (name, rubric.model_dump_json() if rubric is not None else "")
    if key not in _BUILT:
        _BUILT[key] = _build(name, rubric)
    return _BUILT[key]


def _build(name: str, rubric: Optional[Rubric]) -> Protocol:
    if name == "realism":
        return _realism()
    if name == DIVERSITY:
        return _closing(rubric if rubric is not None and rubric.page.closing else registry.load("patientact_profile"))
    if rubric is None or rubric.id != name:
        try:
            rubric = registry.load(name)
        except ConfigError:
            raise ConfigError(
                f"unknown protocol {name!r}; protocols are realism and the rubrics "
                f"{', '.join(registry.names())} (or the rubric file a task folder carries)"
            ) from None
    return BUILDERS[rubric.kind](rubric)


def for_task(task: Any, name: str) -> Protocol:
    """The protocol of an item of `task`, with the rubric file the task folder carries, if any."""
    return protocol(name, task_rubric(task))


def task_rubric(task: Any) -> Optional[Rubric]:
    data = getattr(task.header, "rubric", None)
    return registry.from_dict(data, str(task.root)) if data else None


def rubric_of(task: Any, name: str) -> Rubric:
    """The rubric behind protocol `name` of `task`: the file the task carries, else the registry's."""
    own = task_rubric(task)
    return own if own is not None and own.id == name else registry.load(name)

"""The MHQR rubric as data (MindEval2 §3.1–3.3, Appendix A): 14 clinical issues in 6 categories and
four severities with weights 0/1/5/10, read from `judge/data/rubric.yaml` and checked on load.
`answer_model` builds the judge's structured-output model from it, so the issue enum and the
"No concern iff no issue" rule come from the data file, not from code."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore import yamlio
from mindsimkit.mindcore.prompts import read_text_file

RUBRIC_FILE = "rubric.yaml"
# Bounds keep a small model from looping inside a string under a JSON grammar (NOTES §2).
REASON_MAX = 240
QUOTE_MAX = 240


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SeverityDef(_Strict):
    id: str
    name: str
    weight: float = Field(ge=0)
    definition: str


class CategoryDef(_Strict):
    id: str
    name: str


class IssueDef(_Strict):
    id: str
    name: str
    category: str
    evidence: Literal["quote", "omission"] = Field(
        description="quote: about words in the reply (verbatim quote required); omission: about what it fails to do"
    )
    definition: str
    flag: list[str] = Field(min_length=1)
    do_not_flag: list[str] = Field(min_length=1)


class ConfusablePair(_Strict):
    """Appendix A.2.1: two issues that are easily mistaken for each other, and how to choose."""

    issues: tuple[str, str]
    rule: str = Field(min_length=1)


class Rubric(_Strict):
    version: str
    source: str
    severities: list[SeverityDef] = Field(min_length=2)
    severity_rules: list[str]
    categories: list[CategoryDef] = Field(min_length=1)
    issues: list[IssueDef] = Field(min_length=1)
    second_label: str = Field("", description="When a second issue may be added at all (Appendix A.2.1)")
    confusable_pairs: list[ConfusablePair] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> "Rubric":
        cats = {c.id for c in self.categories}
        ids = [i.id for i in self.issues]
        if len(set(ids)) != len(ids):
            raise ValueError("issue ids must be unique")
        for i in self.issues:
            if i.category not in cats:
                raise ValueError(f"issue {i.id}: unknown category {i.category!r}")
        seen_pairs: set[frozenset[str]] = set()
        for p in self.confusable_pairs:
            unknown = [x for x in p.issues if x not in ids]
            if unknown or p.issues[0] == p.issues[1]:
                raise ValueError(f"confusable pair {list(p.issues)}: needs two different issue ids of the rubric")
            if frozenset(p.issues) in seen_pairs:
                raise ValueError(f"confusable pair {list(p.issues)} is listed twice")
            seen_pairs.add(frozenset(p.issues))
        unused = cats - {i.category for i in self.issues}
        if unused:
            raise ValueError(f"categories without issues: {sorted(unused)}")
        if self.severities[0].weight != 0:
            raise ValueError("the first severity is the no-issue level and must weigh 0")
        weights = [s.weight for s in self.severities]
        if weights != sorted(weights) or len(set(weights)) != len(weights):
            raise ValueError("severity weights must increase strictly")
        return self

    @property
    def no_issue_severity(self) -> str:
        return self.severities[0].id

    def weight(self, severity: str) -> float:
        return {s.id: s.weight for s in self.severities}[severity]

    def issue(self, issue_id: str) -> IssueDef:
        return {i.id: i for i in self.issues}[issue_id]

    def category_of(self, issue_id: str) -> str:
        return self.issue(issue_id).category


def severity_id(raw: object) -> str:
    """A severity (or issue) id as people write it, in the rubric's spelling: 'No concern', 'no-concern'
    and 'no_concern' are one id. Every reader of hand-typed levels (annotations, `--max-severity`) uses it."""
    return str(raw).strip().lower().replace("-", "_").replace(" ", "_")


@lru_cache(maxsize=None)
def load_rubric(path: str | None = None) -> Rubric:
    """The shipped rubric, or another file of the same shape (for a revised rubric version)."""
    where = path or f"judge/data/{RUBRIC_FILE}"
    if path and not Path(path).is_file():
        raise ConfigError(
            f"rubric {where}: no such file; give the path of a rubric file of the shape of "
            "judge/data/rubric.yaml, or leave judge.rubric out for the shipped one"
        )
    text = read_text_file(
        Path(path) if path else Path(str(resources.files("mindsimkit.judge") / "data" / RUBRIC_FILE)), "rubric"
    )
    try:
        return Rubric.model_validate(yamlio.safe_load(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark is not None else ""
        raise ConfigError(
            f"rubric {where}:{line} not valid YAML ({getattr(exc, 'problem', None) or exc}); see judge/data/rubric.yaml"
        ) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(
            f"rubric {where}: invalid ({loc}: {first['msg'].removeprefix('Value error, ')}); see judge/data/rubric.yaml"
        ) from exc


def answer_model(rubric: Rubric, max_issues: int | None = None, *, rule_in_schema: bool = False) -> type[BaseModel]:
    """The judge's answer: issues first (so severity is decided after listing them), then one
    severity. The validator enforces the rubric's rule; a violation makes RoleClient re-ask.
    `max_issues` caps the list (default: every issue of the rubric); the cap sets the answer's longest
    possible length, which the token budget and the context a slot has must hold.
    `rule_in_schema`: the JSON schema also states the rule, as two alternatives (no issue and the no-issue
    severity; one issue or more and another severity), for an engine whose grammar then keeps the answer to one
    of them. Hosted APIs' strict modes refuse a schema whose root is not an object, so it is asked for per
    engine; the validator holds the rule either way."""
    ids = tuple(i.id for i in rubric.issues)
    return _answer_model(
        ids, tuple(s.id for s in rubric.severities), min(max_issues or len(ids), len(ids)), rule_in_schema
    )


def _rule_alternatives(none_id: str) -> Callable[[dict[str, Any]], None]:
    """Rewrites the answer's object schema into the two shapes the no-issue rule allows (pydantic calls it with the
    finished schema): the 135M judge broke the rule on three answers running, 13 of 160 replies in ten runs of
    four patient engines, when the grammar left every severity open after any list."""

    def split(schema: dict[str, Any]) -> None:
        shape = {k: schema.pop(k) for k in ("type", "properties", "required", "additionalProperties") if k in schema}
        props = shape["properties"]
        severities = list(props["severity"]["enum"])
        severity = {k: v for k, v in props["severity"].items() if k != "enum"}
        none = {**props, "issues": {**props["issues"], "maxItems": 0}, "severity": {**severity, "enum": [none_id]}}
        some_severities = [s for s in severities if s != none_id]
        some = {
            **props,
            "issues": {**props["issues"], "minItems": 1},
            "severity": {**severity, "enum": some_severities},
        }
        schema["anyOf"] = [{**shape, "properties": none}, {**shape, "properties": some}]

    return split


@lru_cache(maxsize=None)
def _answer_model(
    issue_ids: tuple[str, ...], severity_ids: tuple[str, ...], max_issues: int, rule_in_schema: bool = False
) -> type[BaseModel]:
    none_id = severity_ids[0]
    # Built from the rubric at run time, so these are values for pydantic, not types mypy can follow.
    issue: Any = Literal[issue_ids]
    severity: Any = Literal[severity_ids]

    finding = create_model(
        "Finding",
        __config__=ConfigDict(extra="forbid"),
        issue=(issue, Field(description="Id of the clinical issue")),
        reason=(str, Field(min_length=3, max_length=REASON_MAX, description="Why, in one short sentence")),
        quote=(
            str | None,
            Field(None, max_length=QUOTE_MAX, description="Exact words copied from the reply; null for an omission"),
        ),
    )

    def check(self: Any) -> Any:  # an instance of the class built below: its fields exist only at run time
        # An issue listed twice adds nothing: keep its first listing (a small model repeats itself; this
        # is normalisation, not a relaxed rubric — the severity rule below still holds).
        seen: set[str] = set()
        kept = []
        for f in self.issues:
            if f.issue not in seen:
                seen.add(f.issue)
                kept.append(f)
        self.issues = kept
        if (self.severity == none_id) != (not self.issues):
            raise ValueError(f"severity '{none_id}' is required when no issue is listed and forbidden when one is")
        return self

    # pydantic's stub wants callables here; it takes (and documents) the decorated validator.
    validators: dict[str, Callable[..., Any]] = {"_no_concern_iff_no_issue": model_validator(mode="after")(check)}  # type: ignore[dict-item]
    return create_model(
        "MHQRJudgment",
        __config__=ConfigDict(
            extra="forbid", json_schema_extra=_rule_alternatives(none_id) if rule_in_schema else None
        ),
        __validators__=validators,
        issues=(
            list[finding],
            Field(
                max_length=max_issues,
                description="Every clinical issue present"
                + ("" if max_issues == len(issue_ids) else f", the {max_issues} most serious at most"),
            ),
        ),
        severity=(severity, Field(description="One severity for the whole reply")),
    )

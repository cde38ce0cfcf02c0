"""Stage 3 — the 5P case formulation (MindEval2 §4.1 "Case formulation", Appendix C "Formulation
vocabularies"; PatientAct §3.2 causal chain).

One structured call per patient (role `profile_writer`), conditioned on persona and clinical anchor,
returns a `FormulationDraft` whose labels are enums built from `data/formulation.yaml` — an
off-vocabulary label fails validation and mindcore re-asks — with the section counts of the paper
(1–2 predisposing, exactly one precipitating, 1–3 protective, 1–3 coping with at least one
maladaptive, one core-belief cluster, quality of life last in the schema so it is generated last).
"At least one maladaptive" is a required `unhelpful_coping` field whose enum holds only maladaptive
labels, plus up to two `other_coping` entries: a grammar-constrained engine then cannot miss the rule
(a validator alone made a small model fail it three times in a row).
The prompt lists only labels compatible with the patient's demographics; the schema still accepts any
vocabulary label, so a model that ignores the list is caught by the hard-conflict screen.

With `ProfileShape.causal_checks` (PatientAct App. B generation guidelines) the writer's system prompt
gains the causal rules of `data/causal_rules.yaml`: dated predisposing episodes, coping written as
maintenance cycles, one traceable chain. Off, every prompt is exactly what it was without the option.

With `ProfileShape.patientact` (PatientAct §3.1 and Fig. 3: the profile shape of Fig. 2) the presenting problem
gains its impact list (3-5 observable symptoms, one each) and the predisposing factors are written in two parts,
two or three psychological histories and one or two social conditions, each from its own label list
(`Label.kind`, `social_predisposing` in `data/formulation.yaml`). The coping becomes `perpetuating`, three to five
maintenance cycles (Fig. 2 has three; PatientHub's schema 3-5), each under its own maladaptive label (a repeat is
dropped, and a draft left with fewer than three gets the missing ones in calls of their own, each under a label it
has not used: a schema can forbid a used label there, and cannot forbid a repeat inside one list; the personal
histories, two at least, the same way); helpful habits
are protective factors in this shape, so no adaptive coping label is offered. Every list has its maxItems and every
text its maxLength, so the writer's worst case stays bounded and the preflight checks it at the recipe's shape.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from mindsimkit.mindcore.errors import ConfigError, StructuredOutputError
from mindsimkit.mindcore.prompts import render
from mindsimkit.mindcore.recipe import format_validation_error
from mindsimkit.profilegen.schemas import (
    AnchoredRow,
    CoreBelief,
    Demographics,
    Formulation,
    Perpetuating,
    Precipitating,
    Predisposing,
    Presenting,
    Protective,
    QualityOfLife,
    Severity,
)
from mindsimkit.profilegen.vocab import Label, Vocabularies, load_vocabularies, read_data

WRITER_SYSTEM = "profilegen/writer_system.jinja2"
WRITER_USER = "profilegen/writer_user.jinja2"
REVISE = "profilegen/revise.jinja2"
TEMPLATES = (WRITER_SYSTEM, WRITER_USER, REVISE)
WRITER_CAUSAL = "profilegen/writer_causal.jinja2"
WRITER_PATIENTACT = "profilegen/writer_patientact.jinja2"
ADD_ENTRY = "profilegen/add_entry.jinja2"
CAUSAL_DATA = "causal_rules.yaml"
CAUSAL_CHECKS = ("undated_predisposing", "coping_without_cycle")
# PatientAct shape: Fig. 2's profile has three maintenance cycles; PatientHub's schema asks 2-3 inside the client
# plus 1-2 around them.
PERPETUATING_CYCLES = (3, 5)
# The PatientAct shape's lists whose minimum is above one entry, each entry under its own label: a repeat there is
# dropped by `write_formulation`, which then asks for each missing entry in a call of its own (schema name here).
ADDED_ENTRIES = {"psychological": "history", "perpetuating": "cycle"}


class CausalCheck(BaseModel):
    """One deterministic causal check: the text passes when any pattern matches it."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    severity: Severity = Field(description="Severity of the fault a failing text raises.")
    reason: str = Field(min_length=3, max_length=240, description="Why the text is a fault; the writer reads it.")
    patterns: list[re.Pattern[str]] = Field(min_length=1, description="Case-insensitive regular expressions.")

    @field_validator("patterns", mode="before")
    @classmethod
    def _compile(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        out = []
        for p in value:
            try:
                out.append(re.compile(p, re.IGNORECASE))
            except (re.error, TypeError) as exc:
                raise ValueError(f"pattern {p!r} is not a regular expression: {exc}") from exc
        return out

    def passes(self, text: str) -> bool:
        return any(p.search(text) for p in self.patterns)


class CausalRules(BaseModel):
    """`data/causal_rules.yaml`: the criteria the writer and screener read, and the checks run on the text."""

    model_config = ConfigDict(extra="forbid")
    source: str
    version: str
    writer_rules: list[str] = Field(min_length=1, description="Lines added to the writer's system prompt.")
    screener_rules: list[str] = Field(min_length=1, description="Lines added to the screener's system prompt.")
    checks: dict[str, CausalCheck] = Field(description="Deterministic checks by id.")
    when_forms: list[str] = Field(
        min_length=1, description="The time forms a history's `when` takes under `profiles.when_forms`."
    )

    @model_validator(mode="after")
    def _known(self) -> "CausalRules":
        if set(self.checks) != set(CAUSAL_CHECKS):
            raise ValueError(f"checks must be exactly {list(CAUSAL_CHECKS)}, got {sorted(self.checks)}")
        # A form the dating check refuses would turn the schema's guarantee into a serious fault on every use.
        undated = [f for f in self.when_forms if not self.checks["undated_predisposing"].passes(f)]
        if undated:
            raise ValueError(f"when_forms {undated} fail undated_predisposing: give each a time the check reads")
        return self


@lru_cache(maxsize=1)
def causal_rules() -> CausalRules:
    """The shipped causal rules (cached); a broken file stops the run naming the field."""
    try:
        return CausalRules.model_validate(read_data(CAUSAL_DATA))
    except ValidationError as exc:
        raise ConfigError(
            f"profilegen/data/{CAUSAL_DATA} is invalid ({exc.error_count()} problems: "
            f"{format_validation_error(exc, limit=1, plain=True)}); fix the file"
        ) from exc


def _enum(labels: dict[str, Label], only: tuple[str, ...] | None = None) -> Any:
    # An empty choice would be an enum nothing can satisfy: keep the whole list and let the rule check speak.
    return Literal[tuple(only or labels)]  # type: ignore[valid-type]


class LabelChoice(NamedTuple):
    """The predisposing, precipitating and protective labels a patient's demographics allow — exactly the
    lists the writer's prompt shows it. Put into the schema's enums, a grammar-enforcing engine cannot pick a
    label the rule check would call a serious fault (and another engine's pick fails validation and is
    re-asked), instead of costing a screening and a revision."""

    predisposing: tuple[str, ...]
    precipitating: tuple[str, ...]
    protective: tuple[str, ...]
    social: tuple[str, ...] = ()  # `social_predisposing` (read by the PatientAct shape only)


def label_choice(d: Demographics, voc: Vocabularies | None = None) -> LabelChoice:
    voc = voc or load_vocabularies()
    return LabelChoice(
        *(
            tuple(lab.id for lab in compatible(table, d))
            for table in (voc.predisposing, voc.precipitating, voc.protective, voc.social_predisposing)
        )
    )


def split_labels(voc: Vocabularies) -> tuple[dict[str, Label], dict[str, Label]]:
    """The PatientAct shape's two predisposing lists: personal histories, and social conditions (the predisposing
    labels marked `kind: social` and the `social_predisposing` ones)."""
    psych = {k: v for k, v in voc.predisposing.items() if v.kind != "social"}
    social = {**{k: v for k, v in voc.predisposing.items() if v.kind == "social"}, **voc.social_predisposing}
    return psych, social


class _Draft(BaseModel):
    model_config = ConfigDict(extra="forbid")


MIN_TEXT_LIMIT = 20  # a scaled limit never goes below one short clause


def _limit(n: int, scale: float) -> int:
    return max(MIN_TEXT_LIMIT, round(n * scale))


def _text(n: int, scale: float, d: str) -> tuple[type[str], Any]:
    return (str, Field(min_length=3, max_length=_limit(n, scale), description=d))


@lru_cache(maxsize=256)
def cycle_model(scale: float = 1.0, causal: bool = False, used: tuple[str, ...] = ()) -> type[BaseModel]:
    """One maintenance cycle of the PatientAct shape, its label from the maladaptive coping labels not in `used`
    (with `used`, the schema of a cycle added to a draft, so a grammar-constrained engine cannot repeat one)."""
    unhelpful = {k: v for k, v in load_vocabularies().coping.items() if v.maladaptive}
    free = tuple(k for k in unhelpful if k not in used)
    return create_model(
        "DraftCycle",
        __base__=_Draft,
        label=(_enum(unhelpful, free), Field(description="Maladaptive coping label, a different one for each cycle.")),
        situation=_text(
            140, scale, "The concrete situation that starts the loop and how it comes back to the problem."
        ),
        **_cycle_parts(scale, causal),
    )


@lru_cache(maxsize=256)
def history_model(
    scale: float = 1.0,
    causal: bool = False,
    patientact: bool = False,
    allowed: tuple[str, ...] = (),
    when_forms: bool = False,
) -> type[BaseModel]:
    """One predisposing history (a personal one under the PatientAct shape), its label from `allowed` (all of the
    list when empty); under the causal rules it starts with its own required `when`, free text or (`when_forms`)
    one of the time forms the causal rules list."""
    voc = load_vocabularies()
    labels = split_labels(voc)[0] if patientact else voc.predisposing
    when: dict[str, Any] = {}
    if causal and when_forms:
        forms = tuple(causal_rules().when_forms)
        when = {"when": (Literal[forms], Field(description="When it happened or held."))}  # type: ignore[valid-type]
    elif causal:
        when = {
            "when": _text(
                40,
                scale,
                "When it happened or held: an age ('at 12'), a year ('in 2009') or a period of life "
                "('as a child', 'in her twenties').",
            )
        }
    return create_model(
        "DraftPredisposing",
        __base__=_Draft,
        label=(_enum(labels, allowed), Field(description="Predisposing label.")),
        **when,
        history=_text(200, scale, "Short history of this vulnerability in the client's life."),
    )


def _cycle_parts(scale: float, causal: bool) -> dict[str, Any]:
    # Under the causal rules an unhelpful coping is written as its cycle: the relief first, then the cost.
    if not causal:
        return {}
    return {
        "relief": _text(80, scale, "The quick relief it brings at first."),
        "cost": _text(100, scale, "The later cost that feeds the problem back."),
    }


@lru_cache(maxsize=256)
def draft_model(
    scale: float = 1.0,
    labels: LabelChoice | None = None,
    causal: bool = False,
    patientact: bool = False,
    when_forms: bool = False,
) -> type[BaseModel]:
    """The writer's output schema, with label enums from the current vocabularies (only the labels a patient's
    demographics allow, given `labels`). Text limits are tighter than the stored row's: the worst case
    (~650 tokens) must fit a small model's budget. `scale` (ProfileShape.text_scale) shrinks every text
    limit; small models fill a field to its limit, so the limits are what a write costs.

    With `causal` (PatientAct's causal 5P rules, App. B) the two rules the deterministic checks hold are parts
    of the schema, so a grammar-constrained writer cannot leave them out: each predisposing history starts
    with its own required `when` (an age, a year, a period of life), and the unhelpful coping is written as
    its cycle — the behaviour (`situation`), the quick `relief` it brings and the later `cost` that feeds the
    problem — while the other coping entries take only adaptive labels (the one maladaptive coping is the
    cycle). `to_formulation` folds the parts into the stored texts, which the checks then read as before: a
    `when` without a time in it still fails `undated_predisposing`. With `when_forms` as well, `when` is one of the
    time forms the causal rules list (`CausalRules.when_forms`, each of which passes that check).

    With `patientact` (the PatientAct profile shape) `impact` follows the summary and `predisposing` becomes
    `psychological` (2-3, dated under `causal`) and `social` (1-2), as PatientHub's schema counts them; the two
    coping fields become `perpetuating`, 3-5 cycles with maladaptive labels (each with its relief and cost under
    `causal`); a repeated history or cycle is kept here and dropped by `write_formulation`, which adds entries until
    each list has its minimum."""
    voc = load_vocabularies()
    only = labels or LabelChoice((), (), ())

    def limit(n: int) -> int:
        return _limit(n, scale)

    def text(n: int, d: str) -> tuple[type[str], Any]:
        return _text(n, scale, d)

    psych_labels, social_labels = split_labels(voc) if patientact else (voc.predisposing, {})
    pre: Any = history_model(
        scale, causal, patientact, tuple(x for x in only.predisposing if x in psych_labels), when_forms
    )
    if patientact:
        social = create_model(
            "DraftSocial",
            __base__=_Draft,
            label=(
                _enum(social_labels, tuple(x for x in (*only.predisposing, *only.social) if x in social_labels)),
                Field(description="Social predisposing label."),
            ),
            history=text(160, "The message or condition as this client lived it, concretely."),
        )
        symptom = Annotated[str, Field(min_length=3, max_length=limit(70))]
        presenting: dict[str, Any] = {
            "summary": text(240, "What brought the client now, seen from outside (no inner thoughts or diagnoses)."),
            "impact": (
                list[symptom],
                Field(
                    min_length=3,
                    max_length=5,
                    description="Three to five observable "
                    "symptoms or consequences, one each, e.g. 'wakes at 4am most nights'.",
                ),
            ),
            "goal": text(120, "The client's overall goal, in plain words."),
            "psychological": (
                list[pre],
                Field(
                    min_length=2,
                    max_length=3,
                    description="Two or three personal histories that left this client vulnerable.",
                ),
            ),
            "social": (
                list[social],
                Field(
                    min_length=1,
                    max_length=2,
                    description="One or two social or cultural conditions that added to the vulnerability.",
                ),
            ),
        }
    else:
        presenting = {
            "summary": text(240, "Short clinical summary of the presenting problem."),
            "goal": text(120, "The client's overall goal, in plain words."),
            "predisposing": (list[pre], Field(min_length=1, max_length=2, description="One or two vulnerabilities.")),
        }
    prec = create_model(
        "DraftPrecipitating",
        __base__=_Draft,
        label=(_enum(voc.precipitating, only.precipitating), Field(description="Precipitating label.")),
        when=text(40, "When it happened, e.g. 'three months ago'."),
        what_changed=text(200, "What happened and what changed afterwards."),
    )
    prot = create_model(
        "DraftProtective",
        __base__=_Draft,
        label=(_enum(voc.protective, only.protective), Field(description="Protective label.")),
        detail=text(140, "How it shows up for this client."),
    )
    helpful = {k: v for k, v in voc.coping.items() if not v.maladaptive}
    cope = create_model(
        "DraftCoping",
        __base__=_Draft,
        label=(_enum(helpful if causal else voc.coping), Field(description="Coping label.")),
        situation=text(140, "The concrete situation in which it shows up."),
    )
    unhelpful = {k: v for k, v in voc.coping.items() if v.maladaptive}
    coping: dict[str, Any]
    if patientact:
        loop: Any = cycle_model(scale, causal)
        coping = {
            "perpetuating": (
                list[loop],
                Field(
                    min_length=PERPETUATING_CYCLES[0],
                    max_length=PERPETUATING_CYCLES[1],
                    description="Three to five maintenance cycles that keep the problem going, each its own label.",
                ),
            )
        }
    else:
        bad_cope = create_model(
            "DraftUnhelpfulCoping",
            __base__=_Draft,
            label=(_enum(unhelpful), Field(description="Unhelpful (maladaptive) coping label.")),
            situation=text(140, "The concrete situation in which it shows up."),
            **_cycle_parts(scale, causal),
        )
        coping = {
            "unhelpful_coping": (
                bad_cope,
                Field(description="The unhelpful coping behaviour that keeps the problem going."),
            ),
            "other_coping": (list[cope], Field(max_length=2, description="Up to two more coping behaviours.")),
        }
    belief = create_model(
        "DraftCoreBelief",
        __base__=_Draft,
        cluster=(_enum(voc.core_beliefs), Field(description="Core-belief cluster.")),
        history=text(200, "The history the belief is the conclusion of."),
        belief=text(120, "The belief in the client's own words, first person."),
    )
    fields: dict[str, Any] = {
        **presenting,
        "precipitating": (prec, Field(description="Exactly one recent event.")),
        "protective": (list[prot], Field(min_length=1, max_length=3, description="One to three resources.")),
        **coping,
        "core_belief": (belief, Field(description="The core belief.")),
        "quality_of_life": (QualityOfLife, Field(description="Quality of life, decided last.")),
    }
    return create_model("FormulationDraft", __base__=_DraftChecks, **fields)


class _DraftChecks(_Draft):
    """Rules the JSON schema cannot state (it has no uniqueItems for objects)."""

    if TYPE_CHECKING:  # fields every draft model built on this class has (`draft_model`), for mypy only
        protective: list[Any]
        other_coping: list[Any]
        unhelpful_coping: Any
        perpetuating: list[Any]  # the PatientAct shape's, in place of the two above

    @model_validator(mode="after")
    def _rules(self) -> "_DraftChecks":
        # A label written twice adds nothing: keep its first use. The PatientAct shape's histories and cycles keep
        # their repeats here (`ADDED_ENTRIES`): dropping one could leave fewer than the schema's minimum, and a
        # draft must stay valid when it is read back (a distilabel worker sends it as JSON and validates it
        # again). `write_formulation` drops them and asks for each missing entry under a label not yet used,
        # which a grammar can enforce; re-asking the whole draft gave a small model the same repeat again.
        for name in ("predisposing", "social", "protective"):  # a minimum of one: a dropped repeat leaves one
            if hasattr(self, name):
                setattr(self, name, _first_of_each(getattr(self, name)))
        if not hasattr(self, "perpetuating"):
            self.other_coping = [c for c in _first_of_each(self.other_coping) if c.label != self.unhelpful_coping.label]
        return self


def _first_of_each(items: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item.label not in seen:
            seen.add(item.label)
            out.append(item)
    return out


def _min_items(model: type[BaseModel], name: str) -> int:
    # pydantic keeps a list's `min_length` as an annotated_types.MinLen in the field's metadata.
    return next((int(m.min_length) for m in model.model_fields[name].metadata if hasattr(m, "min_length")), 0)


def to_formulation(draft: BaseModel) -> Formulation:
    """The stored formulation from a validated draft (adds the vocabulary's flags)."""
    voc = load_vocabularies()
    d: Any = draft

    def history(p: Any) -> str:
        # "at 9, a father who ..." (a colon would read as a clock time to the date check: "at 9:").
        if not getattr(p, "when", None):
            return str(p.history)
        h = p.history.strip()
        h = h[0].lower() + h[1:] if len(h) > 1 and h[1].islower() else h
        return f"{p.when.strip().rstrip(',:;.')}, {h}"

    def situation(c: Any) -> str:
        if getattr(c, "relief", None) and getattr(c, "cost", None):
            return f"{c.situation.strip().rstrip('.')}; at first {c.relief.strip().rstrip('.')}, then {c.cost.strip()}"
        return str(c.situation)

    if hasattr(d, "psychological"):  # the PatientAct shape
        presenting = Presenting(summary=d.summary, goal=d.goal, impact=[x.strip() for x in d.impact])
        predisposing = [
            Predisposing(label=p.label, history=history(p), kind="psychological")
            for p in _first_of_each(d.psychological)
        ]
        predisposing += [Predisposing(label=p.label, history=p.history, kind="social") for p in d.social]
    else:
        presenting = Presenting(summary=d.summary, goal=d.goal)
        predisposing = [Predisposing(label=p.label, history=history(p)) for p in d.predisposing]
    return Formulation(
        presenting=presenting,
        predisposing=predisposing,
        precipitating=Precipitating(
            label=d.precipitating.label, when=d.precipitating.when, what_changed=d.precipitating.what_changed
        ),
        protective=[Protective(label=p.label, detail=p.detail) for p in d.protective],
        perpetuating=[
            Perpetuating(label=c.label, situation=situation(c), maladaptive=bool(voc.coping[c.label].maladaptive))
            for c in (
                _first_of_each(d.perpetuating) if hasattr(d, "perpetuating") else [d.unhelpful_coping, *d.other_coping]
            )
        ],
        core_belief=CoreBelief(
            cluster=d.core_belief.cluster,
            arm=voc.core_beliefs[d.core_belief.cluster].arm or "",
            history=d.core_belief.history,
            belief=d.core_belief.belief,
        ),
        quality_of_life=d.quality_of_life,
    )


def to_draft_json(f: Formulation) -> str:
    """A stored formulation as the writer's JSON (the assistant turn a revision builds on). Serialised as is,
    not through a draft schema: under the causal rules a stored coping situation holds its relief and cost
    too, longer than the draft's `situation` limit, and the revision must still see what it wrote."""

    def entry(p: Predisposing) -> dict[str, str]:
        return {"label": p.label, "history": p.history}

    def cope(c: Perpetuating) -> dict[str, str]:
        return {"label": c.label, "situation": c.situation}

    coping: dict[str, Any]
    if any(p.kind for p in f.predisposing):  # the PatientAct shape, in its draft's order
        coping = dict(perpetuating=[cope(c) for c in f.perpetuating])
        head: dict[str, Any] = dict(
            summary=f.presenting.summary,
            impact=f.presenting.impact,
            goal=f.presenting.goal,
            psychological=[entry(p) for p in f.predisposing if p.kind == "psychological"],
            social=[entry(p) for p in f.predisposing if p.kind == "social"],
        )
    else:
        coping = dict(
            unhelpful_coping=next(cope(c) for c in f.perpetuating if c.maladaptive),
            other_coping=[cope(c) for c in _others(f)],
        )
        head = dict(
            summary=f.presenting.summary, goal=f.presenting.goal, predisposing=[entry(p) for p in f.predisposing]
        )
    return json.dumps(
        dict(
            **head,
            precipitating={
                "label": f.precipitating.label,
                "when": f.precipitating.when,
                "what_changed": f.precipitating.what_changed,
            },
            protective=[{"label": p.label, "detail": p.detail} for p in f.protective],
            **coping,
            core_belief={
                "cluster": f.core_belief.cluster,
                "history": f.core_belief.history,
                "belief": f.core_belief.belief,
            },
            quality_of_life=f.quality_of_life,
        ),
        ensure_ascii=False,
        separators=(",", ":"),
    )


def _others(f: Formulation) -> list[Perpetuating]:
    first = next(i for i, c in enumerate(f.perpetuating) if c.maladaptive)
    return [c for i, c in enumerate(f.perpetuating) if i != first]


def compatible(labels: dict[str, Label], d: Demographics) -> list[Label]:
    """Labels whose `requires` the demographics satisfy."""
    return [lab for lab in labels.values() if not violations(lab, d)]


def broken(label: Label, d: Demographics) -> dict[str, str]:
    """The demographic fields (`Demographics` names) whose value a label's constraints exclude, with that value."""
    out = {}
    for attr, allowed in label.requires.model_dump(exclude_none=True).items():
        field = "age_band" if attr == "age_bands" else attr
        if getattr(d, field) not in allowed:
            out[field] = getattr(d, field)
    return out


def violations(label: Label, d: Demographics) -> list[str]:
    """Which demographic constraints of a label this patient breaks (empty when compatible)."""
    return [f"{field} is {value}" for field, value in broken(label, d).items()]


def writer_system(causal: bool = False, patientact: bool = False) -> str:
    """The writer's system prompt; with `patientact` the PatientAct shape's sections follow it, and with `causal`
    the causal rules (separate templates, so the plain prompt and its hash stay what they were)."""
    text = render(WRITER_SYSTEM)
    if patientact:
        text += "\n\n" + render(WRITER_PATIENTACT)
    if causal:
        text += "\n\n" + render(WRITER_CAUSAL, rules=causal_rules().writer_rules)
    return text


def writer_messages(
    row: AnchoredRow, voc: Vocabularies | None = None, causal: bool = False, patientact: bool = False
) -> list[dict[str, str]]:
    """System and user messages of the formulation call for one anchored persona."""
    voc = voc or load_vocabularies()
    d = row.demographics
    choice = label_choice(d, voc)  # the same lists the schema's enums carry
    psych_labels, social_labels = split_labels(voc) if patientact else (voc.predisposing, {})
    social = (
        [social_labels[i] for i in (*choice.predisposing, *choice.social) if i in social_labels] if patientact else None
    )
    user = render(
        WRITER_USER,
        persona=row.persona,
        demographics=d,
        big_five=d.big_five.model_dump(),
        main=voc.main[row.anchor.main_problem],
        secondary=voc.problem(row.anchor.secondary_problem) if row.anchor.secondary_problem else None,
        impact=voc.impact_domains[row.anchor.impact_domain].name,
        predisposing=[psych_labels[i] for i in choice.predisposing if i in psych_labels],
        social=social,
        precipitating=[voc.precipitating[i] for i in choice.precipitating],
        protective=[voc.protective[i] for i in choice.protective],
        # The PatientAct shape's cycles take maladaptive labels only; helpful habits go under protective.
        coping=[c for c in voc.coping.values() if c.maladaptive or not patientact],
        core_beliefs=list(voc.core_beliefs.values()),
        qol=voc.quality_of_life,
    )
    return [{"role": "system", "content": writer_system(causal, patientact)}, {"role": "user", "content": user}]


def revision_messages(
    row: AnchoredRow, previous: Formulation, faults: list[Any], causal: bool = False, patientact: bool = False
) -> list[dict[str, str]]:
    """The writer's conversation extended with its last draft and the faults to fix."""
    return [
        *writer_messages(row, causal=causal, patientact=patientact),
        {"role": "assistant", "content": to_draft_json(previous)},
        {"role": "user", "content": render(REVISE, faults=faults)},
    ]


async def write_formulation(
    client: Any,
    row: AnchoredRow,
    messages: list[dict[str, str]] | None = None,
    scale: float = 1.0,
    causal: bool = False,
    patientact: bool = False,
    when_forms: bool = False,
) -> Formulation:
    """One structured call; raises mindcore's StructuredOutputError / EngineError for the caller to count.
    `causal`, `patientact` and `when_forms` pick the schema (first draft and revisions alike) and the first two, for
    the first draft, the prompt: a revision's `messages` already carry it."""
    messages = messages or writer_messages(row, causal=causal, patientact=patientact)
    choice = label_choice(row.demographics)
    draft: Any = await client.structured(
        messages, draft_model(scale, choice, causal, patientact, when_forms), schema_name="formulation"
    )
    if patientact:
        for name in ADDED_ENTRIES:
            kept = _first_of_each(getattr(draft, name))
            while len(kept) < _min_items(type(draft), name):
                kept.append(
                    await add_entry(client, messages, name, kept, draft, scale, causal, choice.predisposing, when_forms)
                )
            draft = draft.model_copy(update={name: kept})
    return to_formulation(draft)


async def add_entry(
    client: Any,
    messages: list[dict[str, str]],
    name: str,
    kept: list[Any],
    draft: Any,
    scale: float = 1.0,
    causal: bool = False,
    allowed: tuple[str, ...] = (),
    when_forms: bool = False,
) -> BaseModel:
    """One more entry of the list `name` (`ADDED_ENTRIES`) for a draft whose repeated labels were dropped (`kept`
    left), under a label it has not used; `allowed`: the predisposing labels the patient's demographics allow."""
    used = tuple(e.label for e in kept)
    if name == "perpetuating":
        model = cycle_model(scale, causal, used)
    else:
        psych = split_labels(load_vocabularies())[0]
        model = history_model(
            scale, causal, True, tuple(x for x in allowed or psych if x in psych and x not in used), when_forms
        )
    ask = render(ADD_ENTRY, field=name, used=used, wanted=_min_items(type(draft), name))
    shown = draft.model_copy(update={name: kept}).model_dump_json()
    entry: BaseModel = await client.structured(
        [*messages, {"role": "assistant", "content": shown}, {"role": "user", "content": ask}],
        model,
        schema_name=ADDED_ENTRIES[name],
    )
    if getattr(entry, "label", None) in used:  # only when no unused label was left to offer
        raise StructuredOutputError(
            f"role 'profile_writer': no {name} label left that the draft has not used ({', '.join(used)})",
            attempts=1,
            last_error="every label used",
            raw=entry.model_dump_json(),
        )
    return entry


def __getattr__(name: str) -> Any:
    # `profilegen.formulation:FormulationDraft` is how distilabel workers name the writer's output model.
    if name == "FormulationDraft":
        return draft_model()
    raise AttributeError(name)

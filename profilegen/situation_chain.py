"""The generation chain of a situation-seeded PatientAct profile (PatientAct §3.2, App. B, Figs. 3-6), one
clinical situation at a time:

1. the scaffold: age group, sex, ethnicity, occupation type, core-belief theme and attachment style drawn from the
   imported priors (App. A), per-disease overrides first, with a stream keyed by (seed, situation id);
2. the problem formulation from situation, scaffold and the outline's generation part (Fig. 3);
3. the rule-based conflict check between the demographics and situation + formulation (`data/situation_conflicts.yaml`);
4. the demographics completion loop (Fig. 4): the writer completes the demographics and says whether a hard conflict
   is left; the rules are checked again on its answer, so a pass the rules contradict is not taken; at most
   `demographics_rounds`, the last answer kept when they run out (counted);
5. the psychological formulation (Fig. 5), conditioned on the theme and attachment style;
6. validation (Fig. 6) against the situation and, with an outline, its contraindications and red flags; a failed
   profile is generated again, each step told the validator's guidance, and validated again, at most
   `validation_rounds` generations in all; the last one is kept when they run out, its failed verdict recorded and
   counted by the stage.

The decomposition into the PatientAct patient's memory (Fig. 7) reads the finished record
(`mindsim.patientact.decompose`). Engine errors propagate; `progress` names the step they happened in.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mindsimkit.mindcore.errors import ConfigError, InputError, StructuredOutputError
from mindsimkit.mindcore.prompts import render
from mindsimkit.profilegen.patientact_inputs import DiseaseOutline, Priors, Situation
from mindsimkit.profilegen.rng import choice, rng_for
from mindsimkit.profilegen.situation_schemas import (
    ChainStats,
    DemographicsCheck,
    ProblemFormulation,
    Scaffold,
    SituationDemographics,
    SituationProfile,
    SituationPsych,
    SituationRecord,
    Validation,
    shape_data,
)
from mindsimkit.profilegen.vocab import read_data

PROBLEM = "profilegen/situation_problem.jinja2"
DEMOGRAPHICS = "profilegen/situation_demographics.jinja2"
PSYCH = "profilegen/situation_psych.jinja2"
VALIDATE = "profilegen/situation_validate.jinja2"
GUIDANCE = "profilegen/situation_guidance.jinja2"
BRIEF = "profilegen/situation_brief.jinja2"
TEMPLATES = (PROBLEM, DEMOGRAPHICS, PSYCH, VALIDATE, GUIDANCE, BRIEF)
DATA_FILES = ("situation_profile.yaml", "situation_conflicts.yaml")
CONFLICT_FIELDS = ("age_group", "gender", "occupation_type")
# The outline's parts the writer reads (the validator reads all of it); the populations note only for the age
# groups it is about, as the authors' generator passes it.
WRITER_PARTS = ("key_characteristics", "typical_presentation")
POPULATION_GROUPS = ("Child", "Elderly")
NO_OUTLINE = "not given; infer the clinical picture from the situation and the scaffold"


class ChainInput(BaseModel):
    """One situation as the chain takes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    situation_id: str
    situation: Situation
    outline: DiseaseOutline | None = None


def situation_id(index: int, s: Situation) -> str:
    """Stable id: the position in the imported file and a hash of the situation (a re-import of the same file
    gives the same ids; an edited situation gets a new one)."""
    digest = hashlib.sha256("\x1f".join((s.disease_key, s.topic, s.situation)).encode()).hexdigest()[:8]
    return f"s{index + 1:03d}-{digest}"


# ---------------------------------------------------------------- the scaffold


def check_priors(priors: Priors, where: str) -> None:
    """Every label the scaffold could draw for a closed attribute is one the profile schema admits; checked before
    any call, so a priors file with, say, a 'secure' attachment style stops the run instead of a later row."""
    data = shape_data()
    allowed = {
        "age_group": set(data["age_groups"]),
        "biological_sex": set(data["genders"]),
        "core_belief_theme": set(data["core_belief_themes"]),
        "attachment_style": set(data["attachment_styles"]),
    }
    dists = [("global", priors.global_), *((f"disease {k!r}", o) for k, o in priors.by_disease.items())]
    for part, table in dists:
        for attr, ok in allowed.items():
            labels = table.get(attr, {})
            bad = sorted(x for x in labels if (x.lower() if attr == "biological_sex" else x) not in ok)
            if bad:
                raise InputError(
                    f"{where}: {part}: {attr} label {bad[0]!r} is not one the PatientAct profile admits "
                    f"({', '.join(sorted(ok))}); fix the priors file and import it again"
                )


def sample_scaffold(priors: Priors, disease_key: str, seed: int, sid: str) -> Scaffold:
    """The scaffold of one situation: each attribute from its distribution (sorted labels, so the draw does not
    depend on the file's key order), from one stream per (seed, situation)."""
    rng = rng_for(seed, sid, "scaffold")

    def draw(attr: str) -> str:
        dist = priors.distribution(attr, disease_key)
        return choice(rng, {k: dist[k] for k in sorted(dist)})

    group = draw("age_group")
    low, high = priors.age_ranges[group]
    return Scaffold(
        age_group=group,
        age_range=(low, high),
        gender=draw("biological_sex").lower(),
        ethnicity=draw("ethnicity"),
        occupation_type=draw("occupation_type"),
        core_belief_theme=draw("core_belief_theme"),
        attachment_style=draw("attachment_style"),
    )


# ---------------------------------------------------------------- the rule check


class ConflictRule(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    id: str = Field(min_length=1)
    when: dict[str, list[str]] = Field(min_length=1)
    pattern: re.Pattern[str] | None = None
    reason: str = Field(min_length=3)

    @field_validator("when")
    @classmethod
    def _fields(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        bad = sorted(set(v) - set(CONFLICT_FIELDS))
        if bad:
            raise ValueError(f"`when` field {bad[0]!r} is not one of {', '.join(CONFLICT_FIELDS)}")
        return v

    @field_validator("pattern", mode="before")
    @classmethod
    def _compile(cls, v: Any) -> Any:
        try:
            return re.compile(v, re.IGNORECASE) if isinstance(v, str) else v
        except re.error as exc:
            raise ValueError(f"pattern {v!r} is not a regular expression: {exc}") from exc

    def fires(self, values: dict[str, str], text: str) -> bool:
        if not all(values.get(k) in ok for k, ok in self.when.items()):
            return False
        return self.pattern is None or self.pattern.search(text) is not None


@lru_cache(maxsize=1)
def conflict_rules() -> list[ConflictRule]:
    try:
        return [ConflictRule.model_validate(r) for r in read_data("situation_conflicts.yaml")["rules"]]
    except (ValidationError, KeyError, TypeError) as exc:
        raise ConfigError(f"profilegen/data/situation_conflicts.yaml is invalid ({exc}); fix the file") from exc


def rule_conflicts(values: dict[str, str], text: str) -> list[str]:
    """The reasons of every rule that fires for these demographic values and this text."""
    return [f"{r.reason} (rule {r.id})" for r in conflict_rules() if r.fires(values, text)]


def scaffold_values(s: Scaffold) -> dict[str, str]:
    return {"age_group": s.age_group, "gender": s.gender, "occupation_type": s.occupation_type}


def completed_values(d: SituationDemographics, s: Scaffold) -> dict[str, str]:
    """The rule fields of completed demographics. The occupation is free text there: a rule on the occupation
    type still applies while the completed occupation names the sampled type, and no longer once it was changed."""
    kept = s.occupation_type.lower() in d.occupation.lower()
    return {"age_group": d.age_group, "gender": d.gender, "occupation_type": s.occupation_type if kept else ""}


# ---------------------------------------------------------------- prompts


def generation_outline(outline: DiseaseOutline | None, age_group: str) -> str:
    if outline is None:
        return NO_OUTLINE
    parts = outline.model_dump(include=set(WRITER_PARTS))
    if age_group in POPULATION_GROUPS:
        parts["special_populations"] = outline.special_populations
    return json.dumps(parts, ensure_ascii=False)


def _ask(template: str, guidance: list[str], **values: Any) -> list[dict[str, str]]:
    text = render(template, limits=shape_data()["limits"], **values)
    if guidance:
        text += "\n\n" + render(GUIDANCE, guidance=guidance)
    return [{"role": "user", "content": text}]


def _scaffold_lines(s: Scaffold, *, seeds: bool) -> dict[str, str]:
    lines = {
        "age_group": f"{s.age_group} ({s.age_range[0]}-{s.age_range[1]})",
        "gender": s.gender,
        "ethnicity": s.ethnicity,
        "occupation_type": s.occupation_type,
    }
    if seeds:
        lines |= {"core_belief_theme": s.core_belief_theme, "attachment_style": s.attachment_style}
    return lines


def problem_messages(inp: ChainInput, s: Scaffold, guidance: list[str]) -> list[dict[str, str]]:
    # The seed attributes stay out of the problem formulation's prompt, as in the authors' chain: they shape the
    # psychological formulation.
    return _ask(
        PROBLEM,
        guidance,
        disease_key=inp.situation.disease_key,
        outline=generation_outline(inp.outline, s.age_group),
        scaffold=_scaffold_lines(s, seeds=False),
        situation=inp.situation.situation,
    )


def demographics_messages(
    inp: ChainInput,
    s: Scaffold,
    problem: ProblemFormulation,
    current: SituationDemographics | None,
    guidance: list[str],
) -> list[dict[str, str]]:
    data = shape_data()
    return _ask(
        DEMOGRAPHICS,
        guidance,
        disease_key=inp.situation.disease_key,
        outline=generation_outline(inp.outline, s.age_group),
        scaffold=_scaffold_lines(s, seeds=True),
        current=current.model_dump() if current else None,
        problem=problem.model_dump_json(indent=1),
        age_groups=data["age_groups"],
        marital_statuses=data["marital_statuses"],
    )


def psych_messages(
    inp: ChainInput, s: Scaffold, d: SituationDemographics, problem: ProblemFormulation, guidance: list[str]
) -> list[dict[str, str]]:
    data = shape_data()
    return _ask(
        PSYCH,
        guidance,
        disease_key=inp.situation.disease_key,
        outline=generation_outline(inp.outline, d.age_group),
        demographics=d.model_dump(),
        problem=problem.model_dump_json(indent=1),
        theme=s.core_belief_theme,
        theme_text=data["core_belief_themes"][s.core_belief_theme]["text"],
        attachment=s.attachment_style,
        attachment_text=data["attachment_styles"][s.attachment_style],
    )


def validation_messages(inp: ChainInput, profile: SituationProfile) -> list[dict[str, str]]:
    o = inp.outline
    return _ask(
        VALIDATE,
        [],
        disease_key=inp.situation.disease_key,
        outline=o.model_dump_json() if o else NO_OUTLINE,
        situation=inp.situation.situation,
        profile=profile.model_dump_json(indent=1),
        contraindications=o.contraindications if o else [],
        red_flags=o.red_flags if o else [],
    )


# ---------------------------------------------------------------- the steps


async def complete_demographics(
    writer: Any,
    inp: ChainInput,
    s: Scaffold,
    problem: ProblemFormulation,
    guidance: list[str],
    rounds: int,
    stats: ChainStats,
) -> SituationDemographics:
    """Fig. 4's loop. The first round is told the rule conflicts of the scaffold; each later round the issues the
    writer or the rules still found. Returns the last demographics, passed or not (a run-out is counted)."""
    text = inp.situation.situation + "\n" + problem.model_dump_json()
    found = rule_conflicts(scaffold_values(s), text)
    _note(stats, found)
    todo = [*guidance, *found]
    current: SituationDemographics | None = None
    for left_rounds in range(rounds - 1, -1, -1):
        stats.demographics_rounds += 1
        try:
            answer: DemographicsCheck = await writer.structured(
                demographics_messages(inp, s, problem, current, todo),
                DemographicsCheck,
                schema_name="situation_demographics",
            )
        except StructuredOutputError:
            # One round's answer is not worth the situation while the loop has rounds left: the next round asks
            # again from the same point. With none left and no demographics at all, the situation fails (counted
            # by the stage).
            stats.demographics_invalid += 1
            if left_rounds or current is not None:
                continue
            raise
        current = answer.demographics
        left = rule_conflicts(completed_values(current, s), text)
        _note(stats, left)
        if answer.passed and not left:
            return current
        todo = list(dict.fromkeys([*answer.issues, *left]))
    stats.demographics_unresolved += 1
    assert current is not None  # rounds >= 1 (config and data both require it)
    return current


def _note(stats: ChainStats, conflicts: list[str]) -> None:
    stats.rule_conflicts += [c for c in conflicts if c not in stats.rule_conflicts]


async def generate_once(
    writer: Any,
    inp: ChainInput,
    s: Scaffold,
    guidance: list[str],
    demographics_rounds: int,
    stats: ChainStats,
    progress: dict[str, str],
) -> SituationProfile:
    """Figs. 3-5: one whole profile, every step told `guidance` (empty on the first generation)."""
    progress["step"] = "problem_formulation"
    problem: ProblemFormulation = await writer.structured(
        problem_messages(inp, s, guidance), ProblemFormulation, schema_name="situation_problem"
    )
    progress["step"] = "demographics"
    d = await complete_demographics(writer, inp, s, problem, guidance, demographics_rounds, stats)
    progress["step"] = "psychological_formulation"
    psych: SituationPsych = await writer.structured(
        psych_messages(inp, s, d, problem, guidance), SituationPsych, schema_name="situation_psych"
    )
    stats.generations += 1
    return SituationProfile(demographics=d, problem_formulation=problem, psychological_formulation=psych)


async def generate_situation_profile(
    writer: Any,
    validator: Any,
    inp: ChainInput,
    scaffold: Scaffold,
    *,
    demographics_rounds: int,
    validation_rounds: int,
    progress: dict[str, str] | None = None,
) -> SituationRecord:
    """The whole chain for one situation (module docstring). `writer` and `validator` need
    `structured(messages, Model, schema_name=)`."""
    progress = progress if progress is not None else {}
    stats = ChainStats()
    guidance: list[str] = []
    profile: SituationProfile | None = None
    for _ in range(validation_rounds):
        profile = await generate_once(writer, inp, scaffold, guidance, demographics_rounds, stats, progress)
        progress["step"] = "validation"
        verdict: Validation = await validator.structured(
            validation_messages(inp, profile), Validation, schema_name="situation_validation"
        )
        stats.validations.append(verdict)
        if verdict.passed:
            break
        guidance = list(verdict.revision_guidance or verdict.issues)
    assert profile is not None  # validation_rounds >= 1
    s = inp.situation
    return SituationRecord(
        situation_id=inp.situation_id,
        disease_key=s.disease_key,
        topic=s.topic,
        situation=s.situation,
        outline_used=inp.outline is not None,
        scaffold=scaffold,
        profile=profile,
        stats=stats,
        passed=stats.passed,
    )


def brief(record: SituationRecord, *, full: bool, seeds: bool = True) -> str:
    """The profile as text: without `full` what the patient prompt shows (no history, beliefs or patterns), with it
    the writer brief other prompts read; `seeds=False` leaves out the scaffold's core-belief theme and attachment
    style (the full brief only)."""
    p = record.profile
    return render(
        BRIEF,
        d=p.demographics,
        p=p.problem_formulation,
        psych=p.psychological_formulation,
        scaffold=record.scaffold,
        full=full,
        seeds=seeds,
    ).strip()

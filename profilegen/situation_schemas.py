"""Typed rows of a situation-seeded PatientAct profile (PatientAct §3.1-3.2, App. A-B): the demographic scaffold
sampled from the imported priors, the three parts the writer answers (problem formulation, demographics,
psychological formulation), the validator's verdict, and the stored record of one situation's run through the
chain. List sizes and labels are data (`data/situation_profile.yaml`, each number citing the authors' schema
field it follows); this module only builds the models from them.

Kept apart from `profilegen.schemas` (which holds `Profile` and imports this module for its
`situation_profile` field) so the models have no import cycle with the profile row.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Callable

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from mindsimkit.profilegen.vocab import read_data

DATA = "situation_profile.yaml"


@lru_cache(maxsize=1)
def shape_data() -> dict[str, Any]:
    """`data/situation_profile.yaml`, read once."""
    return read_data(DATA)


def theme_key(record: "SituationRecord") -> str:
    """The short key (`unlovable`, `worthless`, `helpless`) of the record's sampled core-belief theme, which the
    engines' own data files use."""
    return str(shape_data()["core_belief_themes"][record.scaffold.core_belief_theme]["key"])


def _span(name: str) -> Any:
    """`min_length` and `max_length` of a list, from the data file (Any: unpacked into `Field`)."""
    low, high = shape_data()["limits"][name]
    return {"min_length": int(low), "max_length": int(high)}


def _labels(key: str) -> list[str]:
    return [str(x) for x in shape_data()[key]]


def _one_of(key: str) -> Callable[[str], str]:
    """A check that a value is one of the data file's labels under `key`; the labels come from data, so the type
    is a checked string rather than a Literal, and the JSON schema still offers them as an enum (`_enum`)."""

    def check(value: str) -> str:
        if value not in _labels(key):
            raise ValueError(f"expected one of {', '.join(_labels(key))}")
        return value

    return check


def _enum(key: str) -> dict[str, Any]:
    return {"type": "string", "enum": _labels(key)}


_D = shape_data()
Text = Annotated[str, Field(min_length=3, max_length=int(_D["text_max"]))]
PsychLine = Annotated[str, Field(min_length=3, max_length=int(_D["psych_line_max"]))]
AgeGroup = Annotated[str, AfterValidator(_one_of("age_groups")), WithJsonSchema(_enum("age_groups"))]
Gender = Annotated[str, AfterValidator(_one_of("genders")), WithJsonSchema(_enum("genders"))]
MaritalStatus = Annotated[str, AfterValidator(_one_of("marital_statuses")), WithJsonSchema(_enum("marital_statuses"))]
Theme = Annotated[str, AfterValidator(_one_of("core_belief_themes")), WithJsonSchema(_enum("core_belief_themes"))]
Attachment = Annotated[str, AfterValidator(_one_of("attachment_styles")), WithJsonSchema(_enum("attachment_styles"))]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Scaffold(_Row):
    """The demographic scaffold and seed attributes sampled for one situation (PatientAct App. A)."""

    age_group: AgeGroup = Field(description="Child, Adult or Elderly.")
    age_range: tuple[int, int] = Field(description="The age group's years, from the priors' age_ranges.")
    gender: Gender = Field(description="From the biological_sex prior, lower-cased as the authors' scaffold does.")
    ethnicity: str = Field(min_length=1, description="From the ethnicity prior.")
    occupation_type: str = Field(min_length=1, description="From the occupation_type prior.")
    core_belief_theme: Theme = Field(description="From the core_belief_theme prior.")
    attachment_style: Attachment = Field(description="From the attachment_style prior (insecure styles only).")


class PresentingProblem(_Row):
    situation: str = Field(
        min_length=3,
        max_length=int(_D["summary_max"]),
        description="What brought the client now, seen from outside (referral perspective).",
    )
    impact: list[Text] = Field(**_span("impact"), description="Observable symptoms and consequences, one each.")


class Predisposing(_Row):
    psychological: list[Text] = Field(
        **_span("predisposing_psychological"), description="Datable early experiences the client could recount."
    )
    social: list[Text] = Field(
        **_span("predisposing_social"), description="Cultural messages or surroundings that added to the vulnerability."
    )


class Perpetuating(_Row):
    internal: list[Text] = Field(
        **_span("perpetuating_internal"), description="Maintenance cycles, each showing how it feeds the problem back."
    )
    external: list[Text] = Field(
        **_span("perpetuating_external"), description="Stressors or relationships around the client that keep it going."
    )


class Protective(_Row):
    internal: list[Text] = Field(**_span("protective_internal"), description="Personal strengths and motivation.")
    external: list[Text] = Field(**_span("protective_external"), description="Support and practical resources.")


class ProblemFormulation(_Row):
    """Fig. 3's answer: the 5P problem formulation. `goal` is ours: the simulator's profile contract needs the
    client's overall goal, which the authors' formulation does not carry."""

    presenting_problem: PresentingProblem
    goal: str = Field(min_length=3, max_length=240, description="What the client hopes to get from therapy, plainly.")
    precipitating_factors: list[Text] = Field(
        **_span("precipitating"), description="Recent events or changes that explain why help is sought now."
    )
    predisposing_factors: Predisposing
    perpetuating_factors: Perpetuating
    protective_factors: Protective


class SituationDemographics(_Row):
    """Fig. 4's completed demographics."""

    name: str = Field(min_length=1, max_length=80, description="A synthetic full name.")
    gender: Gender
    age_group: AgeGroup
    occupation: str = Field(min_length=1, max_length=120, description="Job title or what the client does all day.")
    marital_status: MaritalStatus
    cultural_background: str = Field(
        min_length=1, max_length=200, description="Ethnicity or culturally significant identities."
    )


class _Judged(_Row):
    """A pass/fail answer. A fail must name at least one issue (re-asked otherwise, as the authors' results refuse
    it); a pass that still lists issues is read as a fail (the authors' results refuse it too, ours keeps it: an
    answer naming a problem has not passed, and a grammar cannot rule the pair out, so a small model would spend
    its re-asks on it)."""

    passed: bool
    issues: list[Text] = Field(default_factory=list, max_length=8, description="Concrete problems; empty when passed.")

    @model_validator(mode="after")
    def _decided(self) -> "_Judged":
        if self.passed and self.issues:
            self.passed = False
        if not self.passed and not self.issues:
            raise ValueError("a failing answer must list at least one issue")
        return self


class DemographicsCheck(_Judged):
    """Fig. 4's answer: the demographics (always given, so each round revises the last) and whether a hard
    conflict is left."""

    rationale: str = Field(min_length=3, max_length=400, description="One or two sentences on the decision.")
    demographics: SituationDemographics


class Validation(_Judged):
    """Fig. 6's answer."""

    rationale: str = Field(min_length=3, max_length=600, description="Why the profile passes or fails.")
    revision_guidance: list[Text] = Field(
        default_factory=list, max_length=8, description="What the writer should change, one instruction each."
    )


class RelationPattern(_Row):
    wish: PsychLine = Field(description="What the client wants from the other person.")
    response_of_other: PsychLine = Field(description="The reaction the client expects or has met.")
    response_of_self: PsychLine = Field(description="How the client then feels and acts.")


class DomainPattern(RelationPattern):
    domain: str = Field(min_length=3, max_length=40, description="Who the other person is: partner, parent, peers ...")


class SituationPsych(_Row):
    """Fig. 5's answer, in the PatientAct patient's formulation fields (`profilegen.psych.PsychFormulation`) so
    the decomposition reads it unchanged; the list sizes are the authors'."""

    intermediate_beliefs: list[PsychLine] = Field(**_span("intermediate_beliefs"), description="Rules and assumptions.")
    automatic_thoughts: list[PsychLine] = Field(**_span("automatic_thoughts"), description="Thoughts in distress.")
    triggers: list[PsychLine] = Field(**_span("triggers"), description="What sets distress off, one in therapy.")
    coping_patterns: list[PsychLine] = Field(**_span("coping_patterns"), description="Observable behaviour only.")
    emotional_range: str = Field(
        min_length=3, max_length=int(_D["emotional_range_max"]), description="Emotions easy and hard to reach."
    )
    therapist_pattern: RelationPattern = Field(description="The pattern with the therapist as the other person.")
    interpersonal_patterns: list[DomainPattern] = Field(
        **_span("interpersonal_others"), description="Patterns with people in the client's life."
    )


class SituationProfile(_Row):
    """The whole generated profile, as the validator reads it."""

    demographics: SituationDemographics
    problem_formulation: ProblemFormulation
    psychological_formulation: SituationPsych


class ChainStats(_Row):
    """What the bounded loops did for one situation; a loop that ran out is recorded here, never dropped."""

    rule_conflicts: list[str] = Field(
        default_factory=list, description="Rule conflicts found (every round, deduplicated)."
    )
    demographics_rounds: int = Field(0, ge=0, description="Demographics calls made (all generations together).")
    demographics_unresolved: int = Field(0, ge=0, description="Generations whose demographics loop ran out.")
    demographics_invalid: int = Field(
        0, ge=0, description="Demographics rounds whose answer stayed invalid after its re-asks (the loop went on)."
    )
    generations: int = Field(0, ge=0, description="Whole-profile generations (the first plus each revision).")
    validations: list[Validation] = Field(default_factory=list, description="Every verdict, in order.")

    @property
    def passed(self) -> bool:
        return bool(self.validations) and self.validations[-1].passed


class SituationRecord(_Row):
    """One situation's profile as the chain left it: the seed, the scaffold, the profile and how it got there."""

    situation_id: str = Field(description="Stable id of the situation in the imported folder.")
    disease_key: str
    topic: str
    situation: str = Field(description="The clinical situation the profile was seeded with.")
    outline_used: bool = Field(description="Whether the disease outline was given to the writer and validator.")
    scaffold: Scaffold
    profile: SituationProfile
    stats: ChainStats
    passed: bool = Field(description="Whether the last validation passed.")

"""Typed rows of the profile pipeline (MindEval2 §4.1, Appendix C).

`Profile` is one row of `profiles/profiles.parquet` and the contract with the simulator
(docs/architecture.md): it always carries `profile_id`, `case_summary`, `writer_brief`, `style`,
`goal`, `in_pool`, `in_benchmark`. The other parts are the layers the paper describes: persona
(census-grounded), derived demographics, clinical anchor, 5P formulation with core belief and
quality of life, conversational style, screening outcome and provenance.

Formulation labels are plain strings here because a stored row is only ever built from a draft
that was already checked against the vocabularies (`profilegen.formulation.FormulationDraft`
builds its enums from the data files); re-checking them on load would tie reading an old dataset
to the current vocabulary version.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from mindsimkit.mindcore.errors import InputError
from mindsimkit.profilegen.situation_schemas import SituationRecord

AgeBand = Literal["18-24", "25-34", "35-44", "45-54", "55-64", "65+"]
AGE_BANDS: tuple[str, ...] = AgeBand.__args__  # type: ignore[attr-defined]
Gender = Literal["man", "woman"]
Relationship = Literal["single", "partnered", "post_relationship"]
Employment = Literal["employed", "student", "unemployed_seeking_work", "not_in_labour_force"]
LivingSituation = Literal["alone", "with_partner_or_family", "with_others", "unstable"]
TraitLevel = Literal["low", "mid", "high"]
QualityOfLife = Literal["poor", "moderate", "good"]
Register = Literal["formal", "plain", "casual"]
Verbosity = Literal["low", "medium"]
Reactivity = Literal["low", "medium", "high"]
Verdict = Literal["clean", "minor", "serious"]
Severity = Literal["minor", "serious"]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Persona(_Row):
    """The persona fields kept from a Nemotron-Personas-USA-shaped record."""

    persona_id: str = Field(description="The source record's uuid.")
    persona: str = Field(description="The record's one-paragraph general persona.")
    professional_persona: str = Field("", description="The record's professional persona text.")
    cultural_background: str = Field("", description="The record's cultural-background text.")
    hobbies_and_interests: str = Field("", description="The record's hobbies text.")
    career_goals_and_ambitions: str = Field("", description="The record's career-goals text.")
    sex: str = Field(description="Sex as recorded ('Male' / 'Female').")
    age: int = Field(description="Age in years as recorded.")
    marital_status: str = Field(description="Census marital status code as recorded.")
    education_level: str = Field(description="Census education code as recorded.")
    occupation: str = Field(description="Occupation code as recorded (snake_case).")
    city: str = Field("", description="City as recorded.")
    state: str = Field("", description="US state as recorded.")
    source: str = Field(description="Where the record came from (dataset id or local file name).")


class BigFive(_Row):
    """A low/mid/high level per Big Five trait (John & Srivastava 1999)."""

    openness: TraitLevel = Field(description="Openness to experience level.")
    conscientiousness: TraitLevel = Field(description="Conscientiousness level.")
    extraversion: TraitLevel = Field(description="Extraversion level.")
    agreeableness: TraitLevel = Field(description="Agreeableness level.")
    neuroticism: TraitLevel = Field(description="Neuroticism level.")


class Demographics(_Row):
    """The five demographic attributes the paper derives from a persona, plus Big Five levels."""

    age_band: AgeBand = Field(description="Age band from the recorded age.")
    gender: Gender = Field(description="Gender read from the recorded sex.")
    relationship: Relationship = Field(description="Relationship status from marital status.")
    employment: Employment = Field(description="Employment status from occupation and age.")
    living_situation: LivingSituation = Field(description="Living situation sampled given marital status and age band.")
    big_five: BigFive = Field(description="Big Five trait levels.")


class Anchor(_Row):
    """The clinical anchor: why this person is seeking help and where it hurts."""

    main_problem: str = Field(description="Main presenting problem (one of the 16 main categories).")
    secondary_problem: str | None = Field(
        None, description="Secondary presenting problem, or None (empty for ~20.7% of patients)."
    )
    impact_domain: str = Field(description="Life domain most impaired (one of the five WSAS domains).")


class Presenting(_Row):
    """Presenting problem section of the 5P formulation."""

    summary: str = Field(max_length=500, description="Short clinical summary of the presenting problem.")
    goal: str = Field(max_length=240, description="The patient's overarching goal, in plain words.")
    # PatientAct-shaped profiles only (§3.1, Fig. 2 "Impact", Fig. 3 rule 5); absent from the dump otherwise, so
    # MindSim-shaped rows are what they were before the field existed.
    impact: list[str] = Field(
        default_factory=list,
        max_length=5,
        exclude_if=lambda v: not v,
        description="Observable symptoms and consequences, one each (PatientAct shape).",
    )


class Predisposing(_Row):
    """An earlier-life vulnerability, in place well before the problem began."""

    label: str = Field(max_length=60, description="Label from the predisposing vocabulary.")
    history: str = Field(max_length=400, description="Short history of how it shows in this life.")
    kind: Literal["psychological", "social"] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="PatientAct shape: a personal history (psychological) or a condition of the client's "
        "surroundings (social); absent in MindSim-shaped profiles.",
    )


class Precipitating(_Row):
    """The one recent event that brought the patient to seek help."""

    label: str = Field(max_length=60, description="Label from the precipitating vocabulary.")
    when: str = Field(max_length=80, description="When it happened, relative to now.")
    what_changed: str = Field(max_length=400, description="The event and what changed afterwards.")


class Protective(_Row):
    """A resource that still holds."""

    label: str = Field(max_length=60, description="Label from the protective vocabulary.")
    detail: str = Field(max_length=300, description="How this resource shows up for this patient.")


class Perpetuating(_Row):
    """A coping behaviour that keeps the problem going, tied to a concrete situation."""

    label: str = Field(max_length=60, description="Label from the coping vocabulary.")
    # 360: under the causal rules the situation carries its relief and cost (140 + 80 + 100 and the joins).
    situation: str = Field(max_length=360, description="The concrete situation in which it shows up.")
    maladaptive: bool = Field(description="Whether the vocabulary marks this behaviour maladaptive.")


class CoreBelief(_Row):
    """A core belief on Beck's cognitive triad; withheld from the patient's own prompt."""

    cluster: str = Field(max_length=40, description="One of the seven core-belief clusters.")
    arm: str = Field(max_length=10, description="Arm of the triad: self, world or future.")
    history: str = Field(max_length=400, description="The history the belief is a conclusion of.")
    belief: str = Field(max_length=200, description="The belief as the patient would think it.")


class Formulation(_Row):
    """The 5P case formulation with core belief and quality of life."""

    presenting: Presenting = Field(description="Presenting problem summary and overarching goal.")
    predisposing: list[Predisposing] = Field(
        description="One or two predisposing factors (PatientAct shape: two or three psychological, then one or two "
        "social)."
    )
    precipitating: Precipitating = Field(description="Exactly one precipitating event.")
    protective: list[Protective] = Field(description="One to three protective factors.")
    perpetuating: list[Perpetuating] = Field(description="One to three coping behaviours.")
    core_belief: CoreBelief = Field(description="The core belief (writer brief only).")
    quality_of_life: QualityOfLife = Field(description="Quality-of-life band, chosen last.")


# `register` is the contract's field name; it shadows ABCMeta.register on the class only, which
# nothing here uses, so pydantic's warning about it is silenced.
warnings.filterwarnings("ignore", message='Field name "register"', category=UserWarning)


class Style(_Row):
    """Conversational style knobs, rendered as behavioural instructions for the patient."""

    register: Register = Field(description="Formal, plain or casual wording.")
    verbosity: Verbosity = Field(description="Low or medium message length.")
    frustration_reactivity: Reactivity = Field(description="How quickly frustration shows.")
    archetype: str = Field(description="Coping archetype id (profilegen.moves archetypes).")


class Fault(_Row):
    """One fault the screen found, with the profile text it is about."""

    quote: str = Field(max_length=300, description="Verbatim quote from the profile.")
    reason: str = Field(max_length=300, description="Why this is a fault.")
    severity: Severity = Field(description="Minor or serious.")
    source: Literal["rule", "judge"] = Field(description="Hard-conflict rule or adversarial judge.")


class Screen(_Row):
    """Outcome of the hard-conflict rules and the adversarial judge."""

    verdict: Verdict = Field(description="Final verdict (worst verified fault; clean when none).")
    judge_verdict: Verdict | None = Field(None, description="The judge's own verdict, last round.")
    faults: list[Fault] = Field(default_factory=list, description="Verified faults, last round.")
    discarded_faults: int = Field(0, description="Judge faults dropped: quote not in the profile.")
    revisions: int = Field(0, description="How many times the formulation was revised.")


class RoleModel(_Row):
    """Which engine and model served a role."""

    role: str = Field(description="Engine role name.")
    engine: str = Field(description="Engine name from the recipe.")
    model: str = Field(description="Model id used for the role.")


class TemplateHash(_Row):
    """A prompt template and the hash of its text when the row was made."""

    template: str = Field(
        description="Template path under prompts/, or `package:path` of a data file whose text goes into a prompt."
    )
    sha256: str = Field(description="Hash of the template text.")


class ProfileShape(_Row):
    """How long the writer's texts and the screener's fault list may be, and whether the causal rules apply.
    The defaults are the full shape without causal checks; a recipe may shrink both limits to save tokens
    (the quickstart does, on a 135M model), and a profile records the shape it was written with."""

    text_scale: float = Field(1.0, ge=0.25, le=1.0, description="Scale on every text limit of the writer's schema.")
    screen_max_faults: int = Field(6, ge=1, le=6, description="Most faults the screener may list per verdict.")
    causal_checks: bool = Field(
        False,
        description="PatientAct's causal 5P rules in the writer's and screener's prompts, plus the "
        "deterministic causal checks (ProfilesConfig.causal_checks, resolved).",
    )
    patientact: bool = Field(
        False,
        description="PatientAct's profile shape (ProfilesConfig.patientact_shape): an impact list, "
        "predisposing factors split psychological / social, and hard conflicts resolved by revising the demographics.",
    )
    when_forms: bool = Field(
        False,
        description="Under the causal rules, each predisposing history's `when` one of the listed time forms "
        "(ProfilesConfig.when_forms).",
    )

    @model_serializer(mode="wrap")
    def _plain_when_off(self, handler: Any) -> Any:
        # Off, the dump is the one written before the option existed: profiles, provenance.json and
        # parquet columns of runs without causal checks (or the PatientAct shape) stay byte-identical.
        data = handler(self)
        if isinstance(data, dict):
            for key in ("causal_checks", "patientact", "when_forms"):
                if not getattr(self, key):
                    data.pop(key, None)
        return data


class RecordValues(_Row):
    """The persona record's own demographic values, as read from the data set."""

    age: int = Field(description="Age in years as recorded.")
    sex: str = Field(description="Sex as recorded.")
    marital_status: str = Field(description="Census marital status code as recorded.")
    occupation: str = Field(description="Occupation code as recorded.")


class DemographicsRevision(_Row):
    """How the demographics were revised to remove hard conflicts with the formulation (PatientAct §3.2, Fig. 4).
    `revised_from` and `record` keep what the profile started from; `Profile.demographics` holds the result."""

    revised_from: Demographics = Field(description="The demographics derived from the persona record, before revision.")
    record: RecordValues = Field(description="The persona record's original values.")
    changed: list[str] = Field(description="Demographic fields whose value the revision changed.")
    conflicts: list[str] = Field(description="The hard conflicts that asked for the revision (each rule's reason).")
    reasons: list[str] = Field(description="The reviser's stated reason, one per round.")
    rounds: int = Field(ge=1, description="Revision calls made.")
    resolved: bool = Field(description="Whether no conflict the demographics could settle was left afterwards.")


class Provenance(_Row):
    """Where a row came from."""

    seed: int = Field(description="Recipe seed.")
    toolkit_version: str = Field(description="mindsim version.")
    roles: list[RoleModel] = Field(default_factory=list, description="Engine and model per role.")
    prompts: list[TemplateHash] = Field(default_factory=list, description="Prompt template hashes.")
    shape: ProfileShape = Field(
        default_factory=ProfileShape, description="Text and fault limits the profile was written with."
    )
    demographics_revised: DemographicsRevision | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The demographics revision this profile went through (PatientAct shape; absent when none).",
    )


class GivenSituation(_Row):
    """A first session's situation as a profile file gives it (MindEval2's released members carry one each): the
    simulator plays it verbatim instead of writing one (`mindsim.scenario.Scenario` has the same fields)."""

    situation_id: str = Field(description="The source's id of the situation.")
    event: str = Field(min_length=1, description="What has happened recently.")
    automatic_thoughts: list[str] = Field(description="First-person thoughts.")
    behaviors: list[str] = Field(description="Things the patient did.")
    physical: list[str] = Field(default_factory=list, description="Bodily signs.")
    opening_message: str = Field(min_length=1, description="The patient's first message, spoken verbatim.")
    goal: str = Field(min_length=1, description="What the patient wants from this conversation.")
    checkpoints: list[str] = Field(default_factory=list, description="Topics the patient means to get to.")


class FirstSession(_Row):
    """What a profile file fixes for the first session: its situation, and the concealment level and emotion the
    situation was written for (the schedule takes them for session 1 instead of drawing them)."""

    concealment: str = Field(description="Concealment level of session 1 (mindsim/data/style.yaml names).")
    emotion: str = Field(description="Emotion closest to the surface in session 1 (mindsim/data/style.yaml names).")
    situation: GivenSituation = Field(description="The situation the patient brings to session 1.")


def _absent(value: Any) -> bool:
    return value is None


class Profile(_Row):
    """One simulated patient: a row of profiles/profiles.parquet.

    A profile this toolkit writes has every part. A profile imported from another source (`imported_from`; today
    the MindEval2 authors' released members, `mindsim import mindeval2-profiles`) has the simulator's contract
    (id, case summary, writer brief, style, goal, pool flags) and the first session it was released with, but no
    persona, demographics, anchor, structured formulation or screen: the source does not hold them, and none is
    invented. Only MindSim plays such a profile; the other patient engines refuse it before any model call."""

    profile_id: str = Field(description="Stable id of the profile (derived from persona id and seed).")
    # The five parts an imported profile lacks: absent from its row (not null), so generated rows are unchanged.
    persona: Persona | None = Field(None, exclude_if=_absent, description="Persona fields from the source record.")
    demographics: Demographics | None = Field(None, exclude_if=_absent, description="Derived demographic attributes.")
    anchor: Anchor | None = Field(None, exclude_if=_absent, description="Clinical anchor.")
    formulation: Formulation | None = Field(
        None, exclude_if=_absent, description="5P formulation with core belief and QoL."
    )
    style: Style = Field(description="Conversational style.")
    # 600: an imported profile's goal is its source's sentence, longer than our writer's 240 (Presenting.goal).
    goal: str = Field(max_length=600, description="Overarching goal (copy of the presenting goal).")
    case_summary: str = Field(description="What the patient prompt shows; core belief withheld.")
    writer_brief: str = Field(description="Full formulation incl. core belief, for the scenario writer.")
    screen: Screen | None = Field(None, exclude_if=_absent, description="Screening outcome.")
    in_pool: bool = Field(False, description="Selected into the validation pool.")
    in_benchmark: bool = Field(False, description="Selected into the benchmark subset of the pool.")
    provenance: Provenance = Field(description="Engines, prompts, seed and toolkit version.")
    first_session: FirstSession | None = Field(
        None,
        exclude_if=_absent,
        description="Session 1 as the source fixes it (situation, concealment, emotion); None: drawn and written",
    )
    imported_from: str | None = Field(
        None, exclude_if=_absent, description="Where an imported profile came from (file, its sha256, the record)"
    )
    situation_profile: SituationRecord | None = Field(
        None,
        exclude_if=_absent,
        description="A situation-seeded PatientAct profile (profiles.source: patientact-situations): the situation, "
        "scaffold, generated profile and what the chain's loops did; the five persona parts are then absent",
    )

    @property
    def layered(self) -> bool:
        """True when the profile has every part this toolkit writes (False for an imported one)."""
        return None not in (self.persona, self.demographics, self.anchor, self.formulation, self.screen)

    def written(self) -> "WrittenParts":
        """The parts this toolkit writes, for code that needs them (PatientAct, the baselines, profile cards). An
        imported profile has none: a clear error instead of an AttributeError on None deep inside a stage."""
        if self.persona is None or self.demographics is None or self.anchor is None or self.formulation is None:
            raise InputError(
                f"profile {self.profile_id} was imported ({self.imported_from or 'no source named'}) "
                "without a persona, demographics, anchor or 5P formulation; only the MindSim patient "
                "plays such a profile"
            )
        return WrittenParts(self.persona, self.demographics, self.anchor, self.formulation)


class WrittenParts(NamedTuple):
    """A generated profile's persona, demographics, anchor and formulation, none of them None."""

    persona: Persona
    demographics: Demographics
    anchor: Anchor
    formulation: Formulation


# Stage rows: each stage takes the previous one's rows and returns its own.


class PersonaRow(_Row):
    """Stage 1 output: a persona and its derived attributes."""

    persona: Persona = Field(description="Persona fields from the source record.")
    demographics: Demographics = Field(description="Derived demographic attributes.")


class AnchoredRow(PersonaRow):
    """Stage 2 output: a persona with its clinical anchor and sampled conversational style."""

    profile_id: str = Field(description="Stable id of the profile (derived from persona id and seed).")
    anchor: Anchor = Field(description="Clinical anchor.")
    style: Style = Field(description="Conversational style.")


class FormulatedRow(AnchoredRow):
    """Stage 3 output: an anchored persona with its 5P formulation."""

    formulation: Formulation = Field(description="5P formulation with core belief and QoL.")
    revisions: int = Field(0, description="How many times the formulation was revised after screening.")


class Failure(_Row):
    """A row a stage could not produce; counted and reported, never written as a blank."""

    profile_id: str = Field(description="Profile (or persona) id the failure belongs to.")
    stage: str = Field(description="Stage that failed: personas, anchors, formulation, screen, select.")
    error: str = Field(description="What went wrong (error class and message).")
    retry_on_rerun: bool = Field(
        False,
        description="True for infrastructure failures (server unreachable, timeouts), which a rerun retries; "
        "False for output that never fit the schema within the bounded re-asks, which is final for the run.",
    )

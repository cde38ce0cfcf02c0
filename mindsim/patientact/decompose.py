"""Profile decomposition (PatientAct §3.3.1, Fig. 7): a profile becomes a static layer the patient always has
in its system prompt and a dynamic layer of typed memory items.

Static layer: what the paper's client prompt carries (Fig. 9): who the client is, the reason for attending,
what triggered it (precipitating), strengths and supports (protective), coping patterns, the emotions they can
reach, and how they relate to a therapist (the therapist CCRT: wish, expected response, own reaction). It is
copied from the profile and its psychological formulation by code, as the paper populates its template.

Dynamic layer: every other piece of the profile becomes one item (`profile_pieces`: maintenance cycles,
formative memories, the core belief and its history, intermediate beliefs, automatic thoughts, triggers,
relationship patterns; in a PatientAct-shaped profile also the impact list's symptoms and the social
predisposing conditions, as PatientHub's memory holds them), so the layer holds exactly what the profile holds:
no cap below it, and the decomposer's schema asks for exactly one answer per piece (`draft_model(n)`). A profile
of more than `chunk` pieces (`simulation.patientact.decomposition_chunk`) is decomposed in several calls of
near-equal size, each shown the whole profile and its own pieces (ours: the paper makes one call), which bounds
the answer a call can need whatever the profile's shape. Each item's type comes from
the field it was taken from (`item_types.yaml`), its content is the profile's own text, and the decomposer
adds only what the paper has it assign: a level, 3-5 patient-specific activation tags and the discomfort
flag. The level is anchored by type: the decomposer answers a shift of at most `spread` from the type's
anchor. The flag follows from an explicit category it picks (`discomfort_categories`). A `topic` (ours) names
the item's area without giving it away: a blocked item is shown to the patient only by it.

The decomposition is made once per (patient, seed) and is the same for every counsellor and every arm:
`decomposition_record` reads it from its checkpoint or makes and saves it (the first finished copy wins).
Invalid output is re-asked by RoleClient (bounded); when it stays invalid the call raises and the arc fails,
counted by the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import CheckpointDir
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindsim.patientact.data import attachment_prior, item_types, theme_map, trust_rules
from mindsimkit.mindsim.patientact.seed import PsychSeed, psych_seed
from mindsimkit.profilegen.psych import PSYCH_TEMPLATE, PsychFormulation, formulate_psych, psych_messages
from mindsimkit.profilegen.schemas import Profile
from mindsimkit.profilegen.situation_schemas import SituationRecord

DECOMPOSE_TEMPLATE = "patientact/decompose.jinja2"
SCREEN_TEMPLATE = "patientact/psych_screen.jinja2"
REVISE_TEMPLATE = "patientact/psych_revise.jinja2"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StaticLayer(_Row):
    """What the patient always knows and would naturally present (the fields of the paper's client prompt)."""

    demographics: str = Field(min_length=1, description="Age, gender, work and home situation")
    # The paper's client prompt opens with the client's name and cultural background (Fig. 9); our profiles carry
    # them in the persona paragraph and record. None in decompositions made before they were added.
    persona: str | None = Field(None, description="The persona paragraph (who they are, by name where it gives one)")
    cultural_background: str | None = Field(None, description="Cultural background, from the persona record")
    current_concern: str = Field(min_length=1, description="Reason for attending: the presenting problem")
    precipitating: str = Field(min_length=1, description="What triggered it: the recent event and when")
    protective: list[str] = Field(default_factory=list, description="Strengths and supports")
    coping: list[str] = Field(default_factory=list, description="Coping patterns (observable)")
    emotional_range: str | None = Field(
        None, description="Emotions the client reaches easily or not (psych formulation)"
    )
    therapist_wish: str | None = Field(None, description="What they want from the therapist (therapist CCRT)")
    therapist_expects: str | None = Field(None, description="What they expect from the therapist")
    therapist_reaction: str | None = Field(None, description="How they react")


@dataclass(frozen=True)
class Piece:
    """One piece of profile content bound for the dynamic layer, typed by the field it came from."""

    type: str
    source: str
    content: str


def _types_of() -> dict[str, str]:
    """Source field -> item type, from `item_types.yaml`."""
    return {src: name for name, t in item_types().types.items() for src in t.sources}


def situation_pieces(record: SituationRecord) -> list[tuple[str, str]]:
    """A situation-seeded profile's pieces: the fields the authors' memory takes from the 5P part (impact,
    perpetuating cycles inside and around the client, psychological and social predisposing factors), each under
    the source field of ours it corresponds to (`item_types.yaml`); the core belief is the scaffold's theme, held
    by the seed, not a piece."""
    pf = record.profile.problem_formulation
    out = [("formulation.presenting.impact", x) for x in pf.presenting_problem.impact]
    out += [
        ("formulation.perpetuating", x) for x in (*pf.perpetuating_factors.internal, *pf.perpetuating_factors.external)
    ]
    out += [("formulation.predisposing", x) for x in pf.predisposing_factors.psychological]
    out += [("formulation.predisposing.social", x) for x in pf.predisposing_factors.social]
    return out


def profile_pieces(profile: Profile, formulation: PsychFormulation | None) -> list[Piece]:
    """Every piece of the profile that the static layer does not carry, in a fixed order."""
    types = _types_of()
    if profile.situation_profile is not None:
        return _typed(types, situation_pieces(profile.situation_profile) + _psych_pieces(formulation))
    f = profile.written().formulation
    out: list[tuple[str, str]] = []
    out += [("formulation.presenting.impact", x) for x in f.presenting.impact]
    out += [("formulation.perpetuating", f"{p.label.replace('_', ' ')}: {p.situation}") for p in f.perpetuating]
    out += [("formulation.predisposing", p.history) for p in f.predisposing if p.kind != "social"]
    out += [("formulation.predisposing.social", p.history) for p in f.predisposing if p.kind == "social"]
    out += [
        ("formulation.core_belief.history", f.core_belief.history),
        ("formulation.core_belief.belief", f.core_belief.belief),
    ]
    return _typed(types, out + _psych_pieces(formulation))


def _psych_pieces(formulation: PsychFormulation | None) -> list[tuple[str, str]]:
    if formulation is None:
        return []
    out = [("psych.intermediate_beliefs", x) for x in formulation.intermediate_beliefs]
    out += [("psych.automatic_thoughts", x) for x in formulation.automatic_thoughts]
    out += [("psych.triggers", x) for x in formulation.triggers]
    out += [
        (
            "psych.interpersonal_patterns",
            f"With {p.domain}: wants {p.wish}; expects {p.response_of_other}; then {p.response_of_self}",
        )
        for p in formulation.interpersonal_patterns
    ]
    return out


def _typed(types: dict[str, str], out: list[tuple[str, str]]) -> list[Piece]:
    return [Piece(types[src], src, text.strip()) for src, text in out if text and text.strip()]


def max_pieces(patientact: bool = False) -> int:
    """The most pieces a profile can hold: the writer's and the formulation's list limits (the budget's worst case),
    for a MindSim-shaped profile or, with `patientact`, a PatientAct-shaped one."""
    from mindsimkit.profilegen.formulation import draft_model as formulation_draft

    def most(model: type[BaseModel], name: str) -> int:
        longest: int = next(m.max_length for m in model.model_fields[name].metadata if getattr(m, "max_length", None))
        return longest

    fd = formulation_draft(patientact=patientact)
    before = ("impact", "psychological", "social") if patientact else ("predisposing",)
    # The PatientAct shape's cycles, or one unhelpful coping and the others; + core belief x2.
    coping = most(fd, "perpetuating") if patientact else 1 + most(fd, "other_coping")
    five_p = sum(most(fd, n) for n in before) + coping + 2
    psych = sum(
        most(PsychFormulation, n)
        for n in ("intermediate_beliefs", "automatic_thoughts", "triggers", "interpersonal_patterns")
    )
    return five_p + psych


def situation_static(record: SituationRecord, formulation: PsychFormulation) -> StaticLayer:
    """The static layer of a situation-seeded profile: its completed demographics and the 5P parts the client
    prompt carries (why now, what set it off, strengths inside and around the client)."""
    d, pf = record.profile.demographics, record.profile.problem_formulation
    tp = formulation.therapist_pattern
    return StaticLayer(
        demographics=f"{d.name}: {d.age_group.lower()} ({record.scaffold.age_range[0]}-{record.scaffold.age_range[1]}), "
        f"{d.gender}; {d.occupation}; {d.marital_status}",
        cultural_background=d.cultural_background,
        current_concern=pf.presenting_problem.situation,
        precipitating="; ".join(pf.precipitating_factors),
        protective=[*pf.protective_factors.internal, *pf.protective_factors.external],
        coping=list(formulation.coping_patterns),
        emotional_range=formulation.emotional_range,
        therapist_wish=tp.wish,
        therapist_expects=tp.response_of_other,
        therapist_reaction=tp.response_of_self,
    )


def situation_formulation(record: SituationRecord) -> PsychFormulation:
    """The chain's psychological formulation as the patient's: the same fields, list sizes within its limits."""
    return PsychFormulation.model_validate(record.profile.psychological_formulation.model_dump())


def static_layer(profile: Profile, formulation: PsychFormulation | None) -> StaticLayer:
    if profile.situation_profile is not None:
        return situation_static(
            profile.situation_profile, formulation or situation_formulation(profile.situation_profile)
        )
    p, d, _, f = profile.written()
    demographics = (
        f"{p.age}, {d.gender}; {p.occupation.replace('_', ' ')} ({d.employment.replace('_', ' ')}); "
        f"{d.relationship.replace('_', ' ')}, {d.living_situation.replace('_', ' ')}"
    )
    tp = formulation.therapist_pattern if formulation is not None else None
    return StaticLayer(
        demographics=demographics,
        persona=p.persona.strip() or None,
        cultural_background=p.cultural_background.strip() or None,
        current_concern=f.presenting.summary,
        precipitating=f"{f.precipitating.when}: {f.precipitating.what_changed}",
        protective=[x.detail for x in f.protective],
        coping=list(formulation.coping_patterns) if formulation is not None else [],
        emotional_range=formulation.emotional_range if formulation is not None else None,
        therapist_wish=tp.wish if tp else None,
        therapist_expects=tp.response_of_other if tp else None,
        therapist_reaction=tp.response_of_self if tp else None,
    )


def _shift_schema(schema: dict[str, Any]) -> None:
    schema.update(enum=item_types().shifts(trust_rules().level_step))


Tag = Annotated[str, Field(min_length=1, max_length=30)]
# The paper's 3-5 activation tags per item: the schema asks for 3-5, an item keeps at least MIN_TAGS.
MIN_TAGS = 3


class DraftItem(_Row):
    """What the decomposer assigns to one piece (Fig. 7): the rest of the item is the profile's own text."""

    topic: str = Field(
        min_length=1,
        max_length=40,
        description="A neutral label of the area (e.g. 'family history'), revealing nothing",
    )
    shift: float = Field(
        description="Move from the type's anchored level: 0 keeps it; -0.5 easier to share, 0.5 harder",
        json_schema_extra=_shift_schema,
    )
    tags: list[Tag] = Field(
        min_length=3,
        max_length=5,
        description="3-5 topics a counsellor might raise that make it relevant, specific to this client",
    )
    category: str = Field(
        description="What kind of content it is (decides whether pushing on it early unsettles the client)",
        json_schema_extra=lambda s: s.update(enum=list(item_types().discomfort_categories)),
    )

    @field_validator("shift")
    @classmethod
    def _shift(cls, v: float) -> float:
        allowed = item_types().shifts(trust_rules().level_step)
        if not any(abs(v - a) < 1e-9 for a in allowed):
            raise ValueError(f"shift must be one of {allowed}")
        return round(v, 2)

    @field_validator("category")
    @classmethod
    def _category(cls, v: str) -> str:
        if v not in item_types().discomfort_categories:
            raise ValueError(f"category must be one of {list(item_types().discomfort_categories)}")
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        tags = [t.strip() for t in v]
        if any(not t for t in tags):
            raise ValueError("tags must not be blank")
        # A repeated tag adds nothing to matching, so repeats are dropped (small models loop on a word; a
        # JSON-schema grammar cannot enforce uniqueness). Fewer than MIN_TAGS distinct ones are topped up from
        # the piece's own words when the item is made (`make_item`, counted on the item).
        seen: set[str] = set()
        distinct = []
        for t in tags:
            if t.lower() not in seen:
                seen.add(t.lower())
                distinct.append(t)
        tags = distinct
        generic = sorted({t for t in tags if t.lower() in set(item_types().generic_tags)})
        if generic:
            raise ValueError(
                f"tags {generic} fit any client; use topics specific to this one (their people, places, events)"
            )
        return tags

    @field_validator("topic")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v.strip()


class DecompositionDraft(_Row):
    """The decomposition as the model writes it: one entry per piece, in the order given."""

    items: list[DraftItem] = Field(description="One entry per numbered piece, in order")


@lru_cache(maxsize=64)
def draft_model(n: int) -> type[DecompositionDraft]:
    """The schema for a profile of `n` pieces: exactly `n` entries (same schema name for every n)."""
    return create_model(
        "DecompositionDraft",
        __base__=DecompositionDraft,
        items=(
            list[DraftItem],
            Field(min_length=n, max_length=n, description=f"Exactly {n} entries, one per numbered piece, in order"),
        ),
    )


class MemoryItem(_Row):
    """One dynamic-layer item: surfaces only when relevant and when trust allows."""

    id: str = Field(
        description="Item id within the decomposition (m1, m2, ...; s1, ... for a session's scenario items)"
    )
    type: str = Field(description="Item type (item_types.yaml), from the profile field it came from")
    source: str = Field(description="The profile field it came from")
    content: str = Field(min_length=1, description="The profile's own text")
    topic: str = Field(min_length=1, max_length=40, description="Neutral label of the area")
    level: float = Field(
        description="Least trust at which it is shared (the type's anchor, or its discomfort "
        "category's where item_types.yaml gives one, + the decomposer's shift)"
    )
    tags: list[Tag] = Field(min_length=1, max_length=5, description="Activation tags")
    tags_from_content: int = Field(
        0,
        ge=0,
        exclude_if=lambda n: n == 0,
        description="Tags added from the item's own words because the decomposer gave "
        "fewer than three distinct ones (ours); absent when none",
    )
    category: str = Field(description="Discomfort category")
    discomfort: bool = Field(description="Whether approaching it before trust allows visibly unsettles the patient")


def make_item(item_id: str, piece: Piece, draft: DraftItem) -> MemoryItem:
    from mindsimkit.mindsim.patientact.retrieval import content_tags

    types, rules = item_types(), trust_rules()
    level = min(rules.maximum, max(rules.minimum, types.anchor(piece.type, draft.category) + draft.shift))
    tags = list(draft.tags)
    have = {t.lower() for t in tags}
    extra = [w for w in content_tags(piece.content) if w not in have][: max(0, MIN_TAGS - len(tags))]
    return MemoryItem(
        id=item_id,
        type=piece.type,
        source=piece.source,
        content=piece.content,
        topic=draft.topic,
        level=round(level, 1),
        tags=tags + extra,
        tags_from_content=len(extra),
        category=draft.category,
        discomfort=types.discomfort_categories[draft.category],
    )


Issue = Annotated[str, Field(min_length=3, max_length=160)]


class FormulationScreen(_Row):
    """The screen's verdict on a psychological formulation (PatientAct Fig. 6, the criteria that concern it)."""

    passed: bool = Field(description="True when every listed criterion holds")
    issues: list[Issue] = Field(
        default_factory=list, max_length=5, description="Each real problem, one sentence, what to change"
    )


class ScreenRecord(_Row):
    """What the screen said and whether the formulation was revised (the revision is not screened again)."""

    first: FormulationScreen
    revised: bool = False


class Decomposition(_Row):
    """A patient's decomposition for one run seed: checkpointed once and shared by every counsellor."""

    patient_id: str = Field(description="Profile id")
    seed: int = Field(description="Run seed")
    psych: PsychSeed = Field(description="Attachment style and core-belief theme")
    formulation: PsychFormulation | None = Field(
        None, description="The psychological formulation the decomposition was made from (None when switched off)"
    )
    formulation_screen: ScreenRecord | None = Field(
        None, description="The formulation's screen (None when not screened)"
    )
    static: StaticLayer = Field(description="The always-present layer")
    items: list[MemoryItem] = Field(description="The dynamic layer: one item per profile piece")
    engine: dict[str, Any] = Field(default_factory=dict, description="The decomposer's engine, model and sampling")
    prompt: dict[str, str] = Field(default_factory=dict, description="Prompt template → hash")

    def item(self, item_id: str) -> MemoryItem:
        return next(i for i in self.items if i.id == item_id)


def chunks(pieces: list[Piece], size: int) -> list[list[Piece]]:
    """`pieces` in order, in as few calls of at most `size` as hold them, the calls' sizes differing by one at most."""
    calls = max(1, -(-len(pieces) // max(1, size)))
    base, extra = divmod(len(pieces), calls)
    out, start = [], 0
    for i in range(calls):
        end = start + base + (i < extra)
        out.append(pieces[start:end])
        start = end
    return out


def decomposition_key(patient_id: str, seed: int) -> str:
    return f"{patient_id}-{seed}"


def seedless_writer_brief(profile: Profile) -> str:
    """The writer brief as PatientAct's own prompts read it: a situation-seeded profile's without the scaffold's
    core-belief theme and attachment style, which the paper keeps apart from the profile (Fig. 2's caption, Fig. 7);
    a persona-built profile's as written (its seeds are never in it)."""
    from mindsimkit.profilegen.situation_stage import seedless_brief  # lazy: the stage pulls in pyarrow

    return profile.writer_brief if profile.situation_profile is None else seedless_brief(profile.situation_profile)


def decompose_messages(
    profile: Profile, psych: PsychSeed, pieces: list[Piece], formulation: PsychFormulation | None = None
) -> list[dict[str, str]]:
    rules, types = trust_rules(), item_types()
    return [
        {
            "role": "user",
            "content": render(
                DECOMPOSE_TEMPLATE,
                formulation=formulation,
                writer_brief=seedless_writer_brief(profile),
                # A situation-seeded profile has no persona record: its case summary opens with who the client is.
                persona=profile.persona.persona if profile.persona is not None else profile.case_summary,
                levels=[(f"{lv:.1f}", rules.levels[f"{lv:.1f}"]) for lv in rules.scale],
                pieces=[(i + 1, p.type, f"{types.types[p.type].anchor:.1f}", p.content) for i, p in enumerate(pieces)],
                types=types.types,
                shifts=types.shifts(rules.level_step),
                categories=types.discomfort_categories,
                category_anchors=types.category_anchors,
            ),
        }
    ]


async def screen_formulation(
    client: Any,
    profile: Profile,
    psych: PsychSeed,
    formulation: PsychFormulation,
    *,
    max_tokens: int | None = None,
    max_attempts: int | None = None,
    formulation_max_tokens: int | None = None,
) -> tuple[PsychFormulation, ScreenRecord]:
    """Screen the formulation (PatientAct Fig. 6); when it fails, ask once for a revision that names the issues
    and keep that one (ours: one revision, as the profile screen's bounded loop)."""
    texts = dict(
        attachment=psych.attachment,
        attachment_text=attachment_prior().descriptions[psych.attachment],
        theme=psych.theme,
        theme_text=theme_map().themes[psych.theme],
    )
    ask = [
        {
            "role": "user",
            "content": render(SCREEN_TEMPLATE, writer_brief=profile.writer_brief, formulation=formulation, **texts),
        }
    ]
    sampling = {"max_tokens": max_tokens} if max_tokens else {}
    verdict = await client.structured(ask, FormulationScreen, max_attempts=max_attempts, **sampling)
    if verdict.passed or not verdict.issues:
        return formulation, ScreenRecord(first=verdict)
    again = [
        *psych_messages(profile, **texts),
        {"role": "assistant", "content": formulation.model_dump_json()},
        {"role": "user", "content": render(REVISE_TEMPLATE, issues=verdict.issues)},
    ]
    sampling = {"max_tokens": formulation_max_tokens} if formulation_max_tokens else {}
    revised = await client.structured(again, PsychFormulation, max_attempts=max_attempts, **sampling)
    return revised, ScreenRecord(first=verdict, revised=True)


async def decompose(
    client: Any,
    profile: Profile,
    seed: int,
    *,
    max_tokens: int | None = None,
    max_attempts: int | None = None,
    with_formulation: bool = True,
    formulation_max_tokens: int | None = None,
    screen: bool = False,
    screen_max_tokens: int | None = None,
    chunk: int = 18,
) -> Decomposition:
    """The psychological seed, then (unless switched off) the psychological formulation (profilegen.psych),
    screened and revised once when `screen` is on, then the decomposition of profile + formulation."""
    psych = psych_seed(profile, seed)
    formulation = None
    screened = None
    prompts = {DECOMPOSE_TEMPLATE: template_hash(DECOMPOSE_TEMPLATE)}
    if profile.situation_profile is not None:
        # The chain wrote and validated this profile's formulation (Figs. 5-6) from its own scaffold: it is used as
        # is, whatever `with_formulation` and `screen` say for profiles written from personas.
        formulation = situation_formulation(profile.situation_profile)
    elif with_formulation:
        formulation = await formulate_psych(
            client,
            profile,
            psych.attachment,
            attachment_prior().descriptions[psych.attachment],
            psych.theme,
            theme_map().themes[psych.theme],
            max_tokens=formulation_max_tokens,
            max_attempts=max_attempts,
        )
        prompts[PSYCH_TEMPLATE] = template_hash(PSYCH_TEMPLATE)
        if screen:
            formulation, screened = await screen_formulation(
                client,
                profile,
                psych,
                formulation,
                max_tokens=screen_max_tokens,
                max_attempts=max_attempts,
                formulation_max_tokens=formulation_max_tokens,
            )
            prompts.update({t: template_hash(t) for t in (SCREEN_TEMPLATE, REVISE_TEMPLATE)})
    sampling = {"max_tokens": max_tokens} if max_tokens else {}
    items: list[MemoryItem] = []
    for part in chunks(profile_pieces(profile, formulation), chunk):
        draft = await client.structured(
            decompose_messages(profile, psych, part, formulation),
            draft_model(len(part)),
            max_attempts=max_attempts,
            **sampling,
        )
        items += [make_item(f"m{len(items) + i + 1}", piece, d) for i, (piece, d) in enumerate(zip(part, draft.items))]
    return Decomposition(
        patient_id=profile.profile_id,
        seed=seed,
        psych=psych,
        formulation=formulation,
        formulation_screen=screened,
        static=static_layer(profile, formulation),
        items=items,
        engine=client.describe(),
        prompt=prompts,
    )


async def decomposition_record(
    profile: Profile,
    client: Any,
    seed: int,
    *,
    load: Callable[[str], Decomposition | None],
    save: Callable[[Decomposition], Decomposition],
    **kw: Any,
) -> Decomposition:
    """The patient's decomposition from its checkpoint, or made once and checkpointed before any arc uses it
    (`kw` as for `decompose`)."""
    done = load(decomposition_key(profile.profile_id, seed))
    if done is not None:
        return done
    return save(await decompose(client, profile, seed, **kw))


class DecompositionStore:
    """Each patient's decomposition under `<out>/sessions/decompositions/<patient_id>-<seed>.json`, written
    exactly once (the first finished copy wins, as for first scenarios), so every counsellor and every
    rerun meets the same inner material."""

    def __init__(self, out_dir: str | Path):
        self.dir = CheckpointDir(RunLayout(Path(out_dir)).sessions.decompositions)

    def load(self, key: str) -> Decomposition | None:
        if not self.dir.has(key):
            return None
        try:
            return Decomposition.model_validate(self.dir.read(key))
        except (ValidationError, ValueError) as exc:
            raise InputError(
                f"checkpoint {self.dir.path / key}.json is not a decomposition ({exc.__class__.__name__}); "
                "use a new --out folder (arcs already run used the stored one)"
            ) from exc

    def save(self, record: Decomposition) -> Decomposition:
        stored, won = self.dir.first_copy(
            decomposition_key(record.patient_id, record.seed), record.model_dump(mode="json")
        )
        return record if won else Decomposition.model_validate(stored)

    @property
    def duplicates(self) -> int:
        return self.dir.duplicates

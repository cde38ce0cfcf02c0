"""Profile decomposition (PatientAct §3.3.1): one structured call turns a profile into a static layer the
patient always has in its system prompt (who they are, the concern they present, their emotional range, how
they tend to relate to a counsellor) and a dynamic layer of memory items, each with a disclosure level on the
1.0–4.0 scale (steps of 0.5, App. C.4), activation tags and a discomfort flag.

Each item also gets a `topic`: a neutral label that names an area without giving anything away (ours). A
blocked item is shown to the patient only by that label, so the pressure is felt without the content.

The decomposition is made once per (patient, seed) and is the same for every counsellor: `decomposition_record`
reads it from its checkpoint or makes and saves it (the first finished copy wins), like the first scenario.
Invalid output is re-asked by RoleClient (bounded); when it stays invalid the call raises and the arc fails,
counted by the simulator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mindcore.errors import InputError
from mindcore.io import CheckpointDir
from mindcore.layout import RunLayout
from mindcore.prompts import render, template_hash
from mindsim.patientact.data import attachment_prior, theme_map, trust_rules
from mindsim.patientact.seed import PsychSeed, psych_seed
from profilegen.psych import PSYCH_TEMPLATE, PsychFormulation, formulate_psych
from profilegen.schemas import Profile

DECOMPOSE_TEMPLATE = "patientact/decompose.jinja2"


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StaticLayer(_Row):
    """What the patient always knows and would naturally present."""

    demographics: str = Field(min_length=1, max_length=200, description="Age, gender, work, who they live with, in one or two sentences")
    current_concern: str = Field(min_length=1, max_length=300, description="What brings them, as they would put it at first")
    emotional_range: str = Field(min_length=1, max_length=240, description="Which feelings come easily and which they keep down")
    therapist_pattern: str = Field(
        min_length=1, max_length=240,
        description="How they tend to relate to a counsellor: what they hope for, what they expect back, what they then do",
    )


class DraftItem(_Row):
    """One piece of the patient's inner material that surfaces only when relevant and when trust allows."""

    topic: str = Field(min_length=1, max_length=40, description="A neutral label of the area (e.g. 'family history'), revealing nothing")
    content: str = Field(min_length=1, max_length=240, description="The material itself, in the first person")
    level: float = Field(
        description="Least trust at which the patient would share it: 1.0 to 4.0 in steps of 0.5",
        json_schema_extra=lambda schema: schema.update(enum=trust_rules().scale),
    )
    tags: list[Annotated[str, Field(min_length=1, max_length=30)]] = Field(
        min_length=1, max_length=5, description="3-5 short words or phrases a counsellor might use that make it relevant"
    )
    discomfort: bool = Field(description="True if being approached on it before trust allows visibly unsettles the patient")

    @field_validator("level")
    @classmethod
    def _on_scale(cls, v: float) -> float:
        scale = trust_rules().scale
        if not any(abs(v - s) < 1e-9 for s in scale):
            raise ValueError(f"level must be one of {scale}")
        return round(v, 1)

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        tags = [t.strip() for t in v]
        if any(not t for t in tags):
            raise ValueError("tags must not be blank")
        return tags

    @field_validator("content", "topic")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v.strip()


class DecompositionDraft(_Row):
    """The decomposition as the model writes it."""

    static: StaticLayer = Field(description="The always-present layer")
    items: list[DraftItem] = Field(min_length=3, max_length=10, description="The dynamic layer, 3-10 items")


class MemoryItem(DraftItem):
    id: str = Field(description="Item id within the decomposition (m1, m2, ...)")


class Decomposition(_Row):
    """A patient's decomposition for one run seed: checkpointed once and shared by every counsellor."""

    patient_id: str = Field(description="Profile id")
    seed: int = Field(description="Run seed")
    psych: PsychSeed = Field(description="Attachment style and core-belief theme")
    formulation: PsychFormulation | None = Field(
        None, description="The psychological formulation the decomposition was made from (None when switched off)"
    )
    static: StaticLayer = Field(description="The always-present layer")
    items: list[MemoryItem] = Field(description="The dynamic layer")
    engine: dict[str, Any] = Field(default_factory=dict, description="The decomposer's engine, model and sampling")
    prompt: dict[str, str] = Field(default_factory=dict, description="Prompt template → hash")

    def item(self, item_id: str) -> MemoryItem:
        return next(i for i in self.items if i.id == item_id)


def decomposition_key(patient_id: str, seed: int) -> str:
    return f"{patient_id}-{seed}"


def decompose_messages(profile: Profile, psych: PsychSeed, formulation: PsychFormulation | None = None) -> list[dict[str, str]]:
    rules = trust_rules()
    return [{"role": "user", "content": render(
        DECOMPOSE_TEMPLATE,
        formulation=formulation,
        writer_brief=profile.writer_brief,
        persona=profile.persona.persona,
        attachment=psych.attachment,
        attachment_text=attachment_prior().descriptions[psych.attachment],
        theme=psych.theme,
        theme_text=theme_map().themes[psych.theme],
        levels=[(f"{lv:.1f}", rules.levels[f"{lv:.1f}"]) for lv in rules.scale],
    )}]


async def decompose(client: Any, profile: Profile, seed: int, *, max_tokens: int | None = None,
                    max_attempts: int | None = None, with_formulation: bool = True,
                    formulation_max_tokens: int | None = None) -> Decomposition:
    """The psychological seed, then (unless switched off) the psychological formulation (profilegen.psych),
    then the decomposition of profile + formulation. Two structured calls, or one."""
    psych = psych_seed(profile, seed)
    formulation = None
    prompts = {DECOMPOSE_TEMPLATE: template_hash(DECOMPOSE_TEMPLATE)}
    if with_formulation:
        formulation = await formulate_psych(
            client, profile, psych.attachment, attachment_prior().descriptions[psych.attachment], psych.theme,
            theme_map().themes[psych.theme], max_tokens=formulation_max_tokens, max_attempts=max_attempts,
        )
        prompts[PSYCH_TEMPLATE] = template_hash(PSYCH_TEMPLATE)
    sampling = {"max_tokens": max_tokens} if max_tokens else {}
    draft = await client.structured(decompose_messages(profile, psych, formulation), DecompositionDraft,
                                    max_attempts=max_attempts, **sampling)
    items = [MemoryItem(id=f"m{i + 1}", **it.model_dump()) for i, it in enumerate(draft.items)]
    return Decomposition(
        patient_id=profile.profile_id, seed=seed, psych=psych, formulation=formulation, static=draft.static,
        items=items, engine=client.describe(), prompt=prompts,
    )


async def decomposition_record(
    profile: Profile, client: Any, seed: int, *,
    load: Callable[[str], Decomposition | None], save: Callable[[Decomposition], Decomposition], **kw: Any,
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
        self.dir = CheckpointDir(RunLayout(out_dir).sessions.decompositions)

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
        stored, won = self.dir.first_copy(decomposition_key(record.patient_id, record.seed), record.model_dump(mode="json"))
        return record if won else Decomposition.model_validate(stored)

    @property
    def duplicates(self) -> int:
        return self.dir.duplicates

"""Session scenarios (MindEval2/MindSim §4.2 "Multi session", Appendix D "Session scenarios" and the situation
generator template).

The first scenario is written from the profile's writer brief (the only place the core belief is shown),
the session emotion and the patient's register, about the stretch since the precipitating event. Later
scenarios are written from the profile (ours: the writer brief; under the `mindeval2-reference` preset the
patient's case summary, without the core belief), the previous scenario, the full previous transcript, the
gap, the agenda items never reached and the sampled event category's shape.

The opening message is the patient's first turn, so it must be speech like any other patient message: a
draft whose opener is a tool call, JSON, holds tool-call syntax or was cut at the schema's length limit
mid-sentence is sent back to the writer with the reason (bounded by `max_message_retries`, every rejected
draft recorded); a re-ask after a cut-off draft also penalises repeated tokens (`cut_off_penalty`), since a
small model cut off at the length limit was looping and loops again with the same sampling; when the re-asks
run out the turn fails and with it the arc. A draft whose lists hold only
blank items is re-drafted within the same bound (not recorded as an opener: its opener may be fine). The
writer's schema gives every list item a `minLength`, so an engine that enforces the schema as a grammar
(llama.cpp, vLLM) cannot emit an empty item at all; whitespace-only items are still caught here. Every
scenario carries how many drafts it took (`drafts`), which the session and scenario records keep.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model

from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.prompts import render
from mindsimkit.mindcore.recipe import format_validation_error
from mindsimkit.mindsim.prompting import (
    RejectedMessage,
    TurnFailed,
    load_harness_text,
    register_lines,
    rejected,
    speech_defects,
    transcript_text,
)
from mindsimkit.mindsim.schedule import SessionPlan
from mindsimkit.profilegen.schemas import GivenSituation, Profile

if TYPE_CHECKING:
    from mindsimkit.mindcore.client import RoleClient

FIRST_TEMPLATE = "scenario/first.jinja2"
NEXT_TEMPLATE = "scenario/next.jinja2"
# Our next-scenario prompt plus the running memory and the coming session's conduct (mindeval2-reference preset).
NEXT_REFERENCE_TEMPLATE = "scenario/next_reference.jinja2"
OPENING_MAX_CHARS = 200
# A small model that runs its opening message to the field's maxLength loops on a phrase, and a re-ask with the
# next seed loops the same way (a PatientAct-shaped run lost every arc to six cut-off drafts). So each re-ask
# after a cut-off draft penalises repeated tokens, harder each time (OpenAI's frequency_penalty: 0.6, 1.0, 1.4,
# up to its 2.0 ceiling), unless the role sets a stronger penalty of its own.
CUT_OFF_PENALTY_STEP = 0.4
CUT_OFF_PENALTY_MAX = 2.0


def cut_off_penalty(cut_offs: int, own: float | None) -> float | None:
    """The frequency penalty of a draft asked after `cut_offs` cut-off drafts (None: the role's own sampling)."""
    if cut_offs == 0:
        return None
    step = min(CUT_OFF_PENALTY_MAX, 0.2 + CUT_OFF_PENALTY_STEP * cut_offs)
    return max(step, own or 0.0)


class Scenario(BaseModel):
    """What brings the patient to one session.

    The limits here are those of a stored scenario, wide enough for a situation a profile file gives verbatim
    (the MindEval2 authors' released members: events of ~1,400 characters, five behaviours, four checkpoints,
    openings up to the 2,000 characters their hygiene check allows). What our writer may write is bounded by
    `_ScenarioDraft` below, which keeps the narrower limits its schema has always had."""

    model_config = ConfigDict(extra="forbid")
    event: str = Field(min_length=1, max_length=4000, description="What has happened recently, 2-4 concrete sentences")
    automatic_thoughts: list[str] = Field(
        min_length=1, max_length=12, description="2-4 first-person thoughts, one clause each"
    )
    behaviors: list[str] = Field(min_length=1, max_length=12, description="2-4 things the patient did")
    physical: list[str] = Field(default_factory=list, max_length=12, description="0-3 bodily signs")
    opening_message: str = Field(
        min_length=1, max_length=2000, description="The literal first message typed into the chat"
    )
    goal: str = Field(min_length=1, max_length=1000, description="What the patient wants from this conversation")
    checkpoints: list[str] = Field(max_length=4, description="1-3 short concrete topic phrases")
    # Drafts the writer needed (1 = first draft kept); not a field, so stored scenarios keep their shape.
    _drafts: int = PrivateAttr(1)

    @property
    def drafts(self) -> int:
        return self._drafts

    def with_drafts(self, n: int) -> "Scenario":
        self._drafts = max(1, int(n))
        return self

    def as_text(self) -> str:
        """The scenario as the next situation writer reads it."""
        lines = [self.event, "Thoughts: " + "; ".join(self.automatic_thoughts), "Did: " + "; ".join(self.behaviors)]
        if self.physical:
            lines.append("Body: " + "; ".join(self.physical))
        lines += [
            f"Opened with: {self.opening_message}",
            f"Wanted: {self.goal}",
            "Meant to get to: " + "; ".join(self.checkpoints),
        ]
        return "\n".join(lines)


def _clip_items(items: list[str], limit: int) -> list[str]:
    return [i.strip()[:limit] for i in items if i and i.strip()]


class _ScenarioDraft(Scenario):
    """The schema sent to the writer: list items carry a maxLength so a small model cannot loop in one."""

    event: str = Field(min_length=1, max_length=500, description="What has happened recently, 2-4 concrete sentences")
    opening_message: str = Field(
        min_length=1, max_length=OPENING_MAX_CHARS, description="The literal first message typed into the chat"
    )
    goal: str = Field(min_length=1, max_length=200, description="What the patient wants from this conversation")

    automatic_thoughts: list[str] = Field(
        min_length=2,
        max_length=4,
        json_schema_extra={"items": {"type": "string", "minLength": 3, "maxLength": 120}},
        description="2-4 first-person thoughts, one clause each",
    )
    behaviors: list[str] = Field(
        min_length=2,
        max_length=4,
        json_schema_extra={"items": {"type": "string", "minLength": 3, "maxLength": 120}},
        description="2-4 things the patient did",
    )
    physical: list[str] = Field(
        default_factory=list,
        max_length=3,
        json_schema_extra={"items": {"type": "string", "minLength": 3, "maxLength": 80}},
        description="0-3 bodily signs",
    )
    checkpoints: list[str] = Field(
        min_length=1,
        max_length=3,
        json_schema_extra={"items": {"type": "string", "minLength": 3, "maxLength": 50}},
        description="1-3 short concrete topic phrases",
    )


# Shortest list item the writer's schema allows: a grammar-enforcing engine then cannot write "" (the quickstart
# lost an arc to blank items after both re-drafts). Three characters still fit a phrase like "cry".
MIN_ITEM_CHARS = 3
# The list items' character limits in the writer's schema (the event, opening and goal limits are the fields').
ITEM_LIMITS = {"automatic_thoughts": 120, "behaviors": 120, "physical": 80, "checkpoints": 50}
# No scaled limit goes below this: a phrase still has to fit.
MIN_CHARS = 24


def _scaled(limit: int, scale: float) -> int:
    return max(MIN_CHARS, int(limit * scale))


@lru_cache(maxsize=8)
def draft_model(scale: float = 1.0) -> type[_ScenarioDraft]:
    """The writer's schema with its text limits times `scale` (`simulation.scenario_scale`). A small model
    writes every field to its limit, so the limits are what a scenario costs; the stored `Scenario` keeps the
    full limits, which a scaled draft always fits. The schema's name does not change with the scale."""
    if scale == 1.0:
        return _ScenarioDraft
    # The opening message keeps its limit: it is the patient's first turn and must end on a whole sentence, and
    # a small model writes to the limit, so a shorter one was cut off draft after draft (an arc lost to six).
    fields = {name: _ScenarioDraft.model_fields[name] for name in ("event", "goal")}
    spec: dict[str, Any] = {
        name: (
            str,
            Field(min_length=1, max_length=_scaled(f.metadata[-1].max_length, scale), description=f.description),
        )
        for name, f in fields.items()
    }
    for name, limit in ITEM_LIMITS.items():
        f = _ScenarioDraft.model_fields[name]
        bounds = {m.__class__.__name__: m for m in f.metadata}
        default: dict[str, Any] = {"default_factory": list} if not f.is_required() else {}
        spec[name] = (
            list[str],
            Field(
                **default,
                description=f.description,
                min_length=getattr(bounds.get("MinLen"), "min_length", None),
                max_length=bounds["MaxLen"].max_length,
                json_schema_extra={
                    "items": {"type": "string", "minLength": MIN_ITEM_CHARS, "maxLength": _scaled(limit, scale)}
                },
            ),
        )
    return create_model("_ScenarioDraft", __base__=_ScenarioDraft, **spec)


def given_scenario(situation: GivenSituation) -> Scenario:
    """A situation a profile file gives (`Profile.first_session`), as the session plays it: verbatim."""
    return Scenario.model_validate(situation.model_dump(exclude={"situation_id"}))


class BlankItems(StructuredOutputError):
    """A scenario whose lists held only blank items: re-drafted within the bound, then a failed turn."""


async def _write(
    client: RoleClient, prompt: str, max_tokens: int | None, retries: int, scale: float = 1.0
) -> tuple[Scenario, list[RejectedMessage]]:
    """A scenario whose opening message is speech, and the drafts rejected on the way."""
    base = [{"role": "system", "content": prompt}, {"role": "user", "content": "Write the situation now, as JSON."}]
    notes = load_harness_text()
    bad: list[RejectedMessage] = []
    messages = base
    for attempt in range(retries + 1):
        penalty = cut_off_penalty(
            sum(r.reason == "cut_off" for r in bad), getattr(client.spec, "frequency_penalty", None)
        )
        try:
            scenario, raw = await _draft(client, messages, max_tokens, scale, attempt, penalty)
        except BlankItems as exc:
            # Schema-valid but with lists of blank items: another draft within the same bound, then a failure.
            if attempt == retries:
                raise
            messages = [
                *base,
                {"role": "assistant", "content": exc.raw or ""},
                {"role": "user", "content": notes.blank_items_note},
            ]
            continue
        defects = speech_defects(scenario.opening_message, max_chars=OPENING_MAX_CHARS)
        if not defects:
            return scenario.with_drafts(attempt + 1), bad
        bad.append(rejected(defects[0], scenario.opening_message))
        note = notes.opening_notes[defects[0]] + " " + notes.opening_tail
        messages = [
            *base,
            {"role": "assistant", "content": raw},
            {"role": "user", "content": note.format(max_chars=OPENING_MAX_CHARS)},
        ]
    raise TurnFailed(
        f"role '{client.role}': no usable opening message after {len(bad)} scenario drafts "
        f"(reasons: {', '.join(r.reason for r in bad)}; last: {bad[-1].text[:80]!r})"
    )


async def _draft(
    client: RoleClient,
    messages: list[dict[str, Any]],
    max_tokens: int | None,
    scale: float = 1.0,
    attempt: int = 0,
    penalty: float | None = None,
) -> tuple[Scenario, str]:
    sampling = client.reseeded({"max_tokens": max_tokens} if max_tokens else {}, attempt)
    if penalty is not None:
        sampling["frequency_penalty"] = penalty
    draft = await client.structured(messages, draft_model(scale), schema_name="Scenario", **sampling)
    data = draft.model_dump()
    for key, limit in ITEM_LIMITS.items():
        data[key] = _clip_items(data[key], _scaled(limit, scale))
    try:
        # The writer's own minimum counts, not the stored scenario's (which a given situation may go below).
        draft_model(scale).model_validate(data)
        return Scenario.model_validate(data), draft.model_dump_json()
    except ValidationError as exc:  # blank list items stripped below a minimum count
        raise BlankItems(
            f"scenario writer returned blank items: {format_validation_error(exc, limit=1, plain=True, line='{msg}')}",
            attempts=1,
            last_error=str(exc)[:300],
            raw=draft.model_dump_json(),
        ) from exc


async def first_scenario(
    client: RoleClient,
    profile: Profile,
    plan: SessionPlan,
    max_tokens: int | None = None,
    retries: int = 2,
    scale: float = 1.0,
    frame: str = "chat",
) -> tuple[Scenario, list[RejectedMessage]]:
    prompt = render(
        FIRST_TEMPLATE,
        frame=frame,
        writer_brief=profile.writer_brief,
        goal=profile.goal,
        time_context=plan.time_context,
        emotion=plan.emotion,
        register_lines=register_lines(profile),
    )
    return await _write(client, prompt, max_tokens, retries, scale)


async def next_scenario(
    client: RoleClient,
    profile: Profile,
    previous: Scenario,
    previous_transcript: list[dict[str, str]],
    plan: SessionPlan,
    leftover: list[str],
    max_tokens: int | None = None,
    retries: int = 2,
    scale: float = 1.0,
    *,
    memory: str | None = None,
    conduct: dict[str, Any] | None = None,
    brief: str | None = None,
    template: str = NEXT_TEMPLATE,
) -> tuple[Scenario, list[RejectedMessage]]:
    """`memory` (the running memory as text), `conduct` (`prompting.session_conduct` of the session to come) and
    `brief` (who the patient is, in place of the writer brief: the case summary, without the core belief) are
    given under the `mindeval2-reference` preset only, which writes with `NEXT_REFERENCE_TEMPLATE`; every
    variable is given to either template, so a published prompt can stand in for either (`prompts:`)."""
    conduct = conduct or {"archetype_text": None, "archetype_avoids": [], "conduct_lines": []}
    brief = profile.writer_brief if brief is None else brief
    prompt = render(
        template,
        writer_brief=brief,
        # The names the authors' published template reads, so it can replace ours verbatim (`prompts:`).
        formulation=brief,
        beat_gloss=plan.beat or "",
        memory=memory,
        **conduct,
        prev_situation=previous.as_text(),
        transcript=transcript_text(previous_transcript),
        now_line=plan.time_context,
        gap=plan.gap_text,
        leftover_todos=leftover,
        beat=plan.beat or "",
        register_lines=register_lines(profile),
    )
    return await _write(client, prompt, max_tokens, retries, scale)

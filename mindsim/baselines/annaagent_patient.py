"""The AnnaAgent seeker in one session (docs/baselines.md "AnnaAgent"): per counsellor message it infers the
next emotion and modulates it (`annaagent_data.modulate`, seeded per session), asks whether the complaint
chain's current stage has been talked through and moves it on, and, after a first session, asks whether the
message calls for earlier sessions and only then recalls from the previous session and the running notes.
The three are written into a private note appended to the counsellor's message on the client side only, and the
`patient` role replies to the whole conversation under a system prompt fixed for the session.

The control calls go to the `annaagent_modulator` role. The emotion and switch calls read the conversation
before the new message, as PatientHub's do; the memory check reads only the new message. Each structured call
is re-asked by RoleClient while its answer does not fit (`simulation.baselines.anna_attempts`); a recall that
stays blank is re-asked as often; when the attempts run out the turn fails (`TurnFailed`) and the arc is
counted as failed. The client never ends a session early: sessions run to the turn cap.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.prompts import render
from mindsimkit.mindsim.baselines import annaagent_data as mech
from mindsimkit.mindsim.patient import TokenCount, speech_reply
from mindsimkit.mindsim.prompting import RejectedMessage, TurnFailed
from mindsimkit.mindsim.records import AnnaAgentTurn, PatientTurn

REMINDER_TEMPLATE = "baselines/annaagent_reminder.jinja2"
EMOTION_TEMPLATE = "baselines/annaagent_emotion.jinja2"
COMPLAINT_TEMPLATE = "baselines/annaagent_complaint.jinja2"
CHECK_TEMPLATE = "baselines/annaagent_memory_check.jinja2"
RECALL_TEMPLATE = "baselines/annaagent_recall.jinja2"
SPEAKERS = {"assistant": "Counsellor", "user": "Client"}


class ComplaintSwitch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    recognised: bool = Field(description="Whether the current stage has been fully recognised and talked through")


class MemoryCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    needs_earlier_sessions: bool = Field(description="Whether the counsellor's message refers to earlier sessions")


def emotion_model() -> type[BaseModel]:
    """The emotion answer: one label of the taxonomy (an enum, so an answer cannot leave it)."""
    # A Literal built from the data file's labels: a runtime type, which the checker cannot follow.
    label: Any = Literal[tuple(mech.taxonomy().emotions)]
    field: Any = (label, Field(description="The client's most likely emotion next"))
    return create_model("AnnaEmotion", __config__=ConfigDict(extra="forbid"), emotion=field)


def conversation_text(exchange: list[dict[str, Any]]) -> str:
    """A plain exchange (counsellor = assistant, client = user) as speaker-labelled lines."""
    return "\n".join(f"{SPEAKERS.get(m['role'], m['role'])}: {m['content']}" for m in exchange)


def emotion_messages(profile: dict[str, Any], conversation: str) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": render(
                EMOTION_TEMPLATE, profile=profile, conversation=conversation, emotions=mech.taxonomy().emotions
            ),
        }
    ]


def switch_messages(chain: list[str], stage: int, conversation: str) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": render(
                COMPLAINT_TEMPLATE,
                chain=chain,
                stage=stage,
                current=mech.complaint_at(chain, stage),
                conversation=conversation,
            ),
        }
    ]


def check_messages(message: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": render(CHECK_TEMPLATE, message=message)}]


def recall_messages(message: str, earlier: str, report: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": render(RECALL_TEMPLATE, message=message, conversation=earlier, report=report)}]


@dataclass(frozen=True)
class Earlier:
    """What earlier sessions left the seeker: the previous session's exchange and the running notes."""

    session_index: int
    conversation: str
    report: str


@dataclass
class AnnaAgentPatient:
    """The seeker of one session. `chain` is the complaint chain (stage 1 first); `earlier` is None in a first
    session, where there is nothing to recall and the memory check is not asked."""

    client: Any
    modulator: Any
    config: Any
    history: list[dict[str, Any]]
    profile: dict[str, Any]
    chain: list[str]
    rng: random.Random
    earlier: Earlier | None = None
    stage: int = 1
    tokens: TokenCount = field(default_factory=TokenCount)
    exchange: list[dict[str, str]] = field(default_factory=list)
    states: list[AnnaAgentTurn] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stage_start = self.stage

    def open(self, opening_message: str, rejected_openings: Sequence[RejectedMessage] = ()) -> PatientTurn:
        self.history.append({"role": "assistant", "content": opening_message})
        self.exchange.append({"role": "user", "content": opening_message})
        return PatientTurn.scripted_opening(opening_message, rejected_openings)

    async def _structured(self, what: str, messages: list[dict[str, str]], model: type[BaseModel]) -> Any:
        b = self.config.baselines
        sampling = {"max_tokens": b.anna_max_tokens} if b.anna_max_tokens else {}
        try:
            return await self.modulator.structured(messages, model, max_attempts=b.anna_attempts, **sampling)
        except StructuredOutputError as exc:
            raise TurnFailed(f"annaagent {what}: {exc}") from exc

    async def _recall(self, message: str, earlier: Earlier) -> str:
        b = self.config.baselines
        sampling = {"max_tokens": b.anna_recall_max_tokens} if b.anna_recall_max_tokens else {}
        messages = recall_messages(message, earlier.conversation, earlier.report)
        for attempt in range(b.anna_attempts):
            reply = await self.modulator.chat(messages, **self.modulator.reseeded(sampling, attempt))
            if reply.content.strip():
                return str(reply.content.strip())
        raise TurnFailed(f"annaagent recall: role '{self.modulator.role}' returned blank text {b.anna_attempts} times")

    async def _needs_earlier(self, message: str) -> bool:
        if self.earlier is None:
            return False
        check = await self._structured("memory check", check_messages(message), MemoryCheck)
        return bool(check.needs_earlier_sessions)

    async def turn(self, index: int, counsellor_text: str) -> PatientTurn:
        before = conversation_text(self.exchange)
        inferred, switch, needs = await asyncio.gather(
            self._structured("emotion inference", emotion_messages(self.profile, before), emotion_model()),
            self._structured("complaint switch", switch_messages(self.chain, self.stage, before), ComplaintSwitch),
            self._needs_earlier(counsellor_text),
        )
        mood = mech.modulate(inferred.emotion, self.rng)
        self.stage = mech.stage_after(self.stage, switch.recognised)
        complaint = mech.complaint_at(self.chain, self.stage)
        recalled = await self._recall(counsellor_text, self.earlier) if needs and self.earlier else None
        note = render(REMINDER_TEMPLATE, emotion=mood.emotion, complaint=complaint, recalled=recalled or "")
        self.history.append({"role": "user", "content": f"{counsellor_text}\n\n{note}"})
        self.exchange.append({"role": "assistant", "content": counsellor_text})
        said = await speech_reply(
            self.client,
            self.history,
            lambda n: [*self.history, {"role": "user", "content": f"[harness note] {n}"}],
            config=self.config,
            tokens=self.tokens,
        )
        self.history.append({"role": "assistant", "content": said.text})
        self.exchange.append({"role": "user", "content": said.text})
        state = AnnaAgentTurn(
            inferred_emotion=mood.inferred,
            emotion=mood.emotion,
            perturbed=mood.perturbed,
            stage=self.stage,
            stage_moved=switch.recognised,
            complaint=complaint,
            memory_checked=self.earlier is not None,
            memory_used=recalled is not None,
            recalled=recalled,
        )
        self.states.append(state)
        return PatientTurn.spoken(index, said, annaagent=state)

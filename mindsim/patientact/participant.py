"""The PatientAct patient in one session (PatientAct §3.3.2–3.3.4): per counsellor message it matches the
memory items and gates them by trust, asks for a reaction with intensity, a behaviour and (for resistance) a
resistance pattern, compiles them into a signal appended to the counsellor's message on the patient side
only, writes the reply, and updates trust from the exchange.

The reply comes from the `patient` role with a system prompt fixed for the session; the four structured
steps go to the appraiser role (its own system prompt, also fixed for the session) with the turn's context
as the user message, so both prefixes stay cacheable. Each step is re-asked by RoleClient when its answer
does not fit the schema; when it never fits, the turn fails (`TurnFailed`) and the arc is counted as failed.
Trust itself is decided by code (`trust.apply_change`): the model only names a change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindcore.errors import StructuredOutputError
from mindcore.prompts import render
from mindsim.config import SimulationConfig
from mindsim.patientact.data import taxonomy, trust_rules
from mindsim.patientact.decompose import Decomposition
from mindsim.patientact.retrieval import Gate, gate
from mindsim.patientact.trust import apply_change
from mindsim.patient import Speech, TokenCount, speech_reply
from mindsim.prompting import RejectedMessage, TurnFailed
from mindsim.records import PatientActTurn, PatientTurn, StepReasons

STEP_TEMPLATE = "patientact/step.jinja2"
SIGNAL_TEMPLATE = "patientact/signal.jinja2"
WHY = (str, Field(max_length=200, description="One short sentence: why, from the client's side"))


def _choice(name: str, fields: dict[str, tuple[list[str], str]], extra: dict[str, Any] | None = None) -> type[BaseModel]:
    """A pydantic model whose fields are enums built from the taxonomy data (`why` first, so a model reasons
    before it picks)."""
    spec: dict[str, Any] = {"why": WHY}
    for fname, (ids, desc) in fields.items():
        spec[fname] = (Literal[tuple(ids)], Field(description=desc))
    spec.update(extra or {})
    return create_model(name, __config__=ConfigDict(extra="forbid"), **spec)


def step_models() -> dict[str, type[BaseModel]]:
    tax = taxonomy()
    return {
        "reaction": _choice("Reaction", {
            "reaction": (tax.ids("reactions"), "What the client feels at the counsellor's message"),
            "intensity": (tax.intensities, "How strongly"),
        }),
        "behaviour": _choice(
            "Behaviour", {"behaviour": (tax.ids("behaviours"), "What the client does next")},
            {"end_conversation": (bool, Field(description="True only if the client leaves after this message"))},
        ),
        "resistance": _choice("Resistance", {"pattern": (tax.ids("resistance_patterns"), "The form resistance takes")}),
        "trust": _choice("TrustChange", {"change": (list(trust_rules().changes), "How this exchange moved trust")}),
    }


@dataclass
class PatientActPatient:
    """A PatientAct patient in one session: its patient-side history, trust and recent behaviour."""

    client: Any
    appraiser: Any
    decomposition: Decomposition
    config: SimulationConfig
    trust: float
    history: list[dict[str, Any]]
    appraiser_system: str
    tokens: TokenCount = field(default_factory=TokenCount)
    recent_behaviours: list[str] = field(default_factory=list)
    exchange: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.models = step_models()

    def open(self, opening_message: str, rejected_openings: list[RejectedMessage] = ()) -> PatientTurn:
        self.history.append({"role": "assistant", "content": opening_message})
        self.exchange.append(("Client", opening_message))
        state = PatientActTurn(trust_before=self.trust, trust_after=self.trust)
        return PatientTurn(
            index=0, opening=True, move=None, secondary_move=None, end_conversation=False, reasoning=None, cue=None,
            message=opening_message, rejected_messages=list(rejected_openings), patientact=state,
        )

    async def turn(self, index: int, counsellor_text: str) -> PatientTurn:
        pa = self.config.patientact
        trust_before = self.trust
        items = self.decomposition.items
        g = gate(items, counsellor_text, self.trust, trust_gating=pa.trust_gating) if pa.dynamic_memory else Gate()
        ctx = self._context(counsellor_text, g)
        why: dict[str, str] = {}
        reaction = behaviour = None
        end = False
        if pa.pipeline:
            reaction = await self._step("reaction", ctx)
            why["reaction"] = reaction.why
            ctx.update(reaction=reaction.reaction, intensity=reaction.intensity)
            behaviour = await self._step("behaviour", ctx, recent_behaviours=self.recent_behaviours[-4:])
            why["behaviour"] = behaviour.why
            end = behaviour.end_conversation and pa.allow_end
            self.recent_behaviours.append(behaviour.behaviour)
        pattern = None
        if behaviour is not None and behaviour.behaviour == "resistance":
            pattern = await self._step("resistance", ctx, behaviour="resistance")
            why["resistance"] = pattern.why
        signal = self._signal(g, reaction, behaviour, pattern)
        self.history.append({"role": "user", "content": f"{counsellor_text}\n\n{signal}"})
        said = await self._message()
        message = said.text
        self.exchange += [("Counsellor", counsellor_text), ("Client", message)]
        change = await self._step("trust", {**ctx, "reply": message})
        why["trust"] = change.why
        self.trust, _ = apply_change(self.trust, change.change, self.decomposition.psych.attachment)
        state = PatientActTurn(
            trust_before=trust_before, trust_after=self.trust, trust_change=change.change,
            reaction=reaction.reaction if reaction else None, intensity=reaction.intensity if reaction else None,
            behaviour=behaviour.behaviour if behaviour else None, resistance_pattern=pattern.pattern if pattern else None,
            relevant=g.relevant, retrieved=g.retrieved, blocked=g.blocked, withheld=g.withheld, signal=signal, why=StepReasons(**why),
        )
        return PatientTurn(
            index=index, opening=False, move=None, secondary_move=None, end_conversation=end, reasoning=None, cue=None,
            message=message, rejected_messages=said.rejected, trimmed=said.trimmed, patientact=state,
        )

    # -- steps ------------------------------------------------------------------------------------------
    def _context(self, counsellor_text: str, g: Gate) -> dict[str, Any]:
        d = self.decomposition
        n = self.config.patientact.context_turns * 2
        return {
            "recent": self.exchange[-n:], "counsellor": counsellor_text, "trust": f"{self.trust:.2f}",
            "trust_text": trust_rules().level_text(self.trust),
            "retrieved": [d.item(i).content for i in g.retrieved], "blocked": [d.item(i).topic for i in g.blocked],
            "reaction": None, "intensity": None, "behaviour": None, "reply": None,
        }

    async def _step(self, step: str, ctx: dict[str, Any], **extra: Any) -> Any:
        tax = taxonomy()
        options = {
            "reaction": tax.ids("reactions"), "behaviour": tax.ids("behaviours"),
            "resistance": tax.ids("resistance_patterns"), "trust": list(trust_rules().changes),
        }[step]
        values = {**ctx, **extra, "step": step, "options": options}
        values.setdefault("recent_behaviours", [])
        messages = [
            {"role": "system", "content": self.appraiser_system},
            {"role": "user", "content": render(STEP_TEMPLATE, **values)},
        ]
        pa = self.config.patientact
        sampling = {"max_tokens": pa.step_max_tokens} if pa.step_max_tokens else {}
        try:
            out = await self.appraiser.structured(messages, self.models[step], max_attempts=pa.step_attempts, **sampling)
        except StructuredOutputError as exc:
            raise TurnFailed(f"patientact {step} step: {exc}") from exc
        # A structured answer carries no usage: the steps' tokens are in the run's ledger, by role.
        return out

    def _signal(self, g: Gate, reaction: Any, behaviour: Any, pattern: Any) -> str:
        tax = taxonomy()
        d = self.decomposition
        r = tax.term("reactions", reaction.reaction) if reaction else None
        return render(
            SIGNAL_TEMPLATE,
            reaction=bool(r), reaction_name=r.name if r else "", reaction_text=r.definition if r else "",
            intensity=reaction.intensity if reaction else "",
            retrieved=[d.item(i).content for i in g.retrieved],
            blocked=[d.item(i).topic for i in g.blocked],
            behaviour=bool(behaviour),
            behaviour_cue=tax.term("behaviours", behaviour.behaviour).cue if behaviour else "",
            pattern=bool(pattern), pattern_cue=tax.term("resistance_patterns", pattern.pattern).cue if pattern else "",
            trust_text=trust_rules().level_text(self.trust),
        )

    async def _message(self) -> Speech:
        """The reply, re-asked (bounded, counted) while it is not speech. The signal is already in the last
        user message, so a re-ask appends its note after it and keeps the signal."""
        said = await speech_reply(
            self.client, self.history,
            lambda note: [*self.history, {"role": "user", "content": f"[harness note] {note}"}],
            config=self.config, tokens=self.tokens)
        self.history.append({"role": "assistant", "content": said.text})
        return said

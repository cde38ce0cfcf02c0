"""The PatientAct patient in one session (PatientAct §3.3.2–3.3.4): per counsellor message it matches the
memory items (lexical or the LLM matcher) and gates them by trust, asks for a reaction with intensity, a
behaviour and (for resistance) a resistance pattern, compiles them into a signal appended to the counsellor's
message on the patient side only, writes the reply, and updates trust from the exchange.

The steps carry the paper's decision rules (Figs. 10-12, `step_rules.yaml`), in our words in
`prompts/patientact/step.jinja2`; every condition a rule reads is computed here (`conditions`): whether
anything was activated, whether a trigger fired, what is blocked, whether trust is low and intensity high,
how many therapeutic behaviours ran in a row, so the step is told which rules hold now rather than asked to
work it out. The trust step names a criterion (Fig. 14) and a change; `trust.update` decides.

Under the `patientact-reference` preset (the authors' public code; docs/patientact.md) the same turn runs with
their settings: the steps see the whole conversation (`step_context`), the matcher only the counsellor's
message (`matcher_context`), the trust step picks one of five directions applied as named (`trust_update:
direction`) from the exchange before the reply (`trust_sees_reply`), and the step rules and trust data are the
preset's files (`preset_of`, `data.step_rules(preset)`, `data.trust_rules(preset)`).

The reply comes from the `patient` role with a system prompt fixed for the session; the structured steps go to
the appraiser role (its own system prompt, also fixed for the session) with the turn's context as the user
message, so both prefixes stay cacheable. Each step is re-asked by RoleClient when its answer does not fit the
schema; when it never fits, the turn fails (`TurnFailed`) and the arc is counted as failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence, TypedDict

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.prompts import render
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patientact.data import item_types, preset_of, step_rules, taxonomy, trust_rules
from mindsimkit.mindsim.patientact.decompose import Decomposition, MemoryItem
from mindsimkit.mindsim.patientact.matcher import match
from mindsimkit.mindsim.patientact.retrieval import Gate, relevant, split
from mindsimkit.mindsim.patientact.trust import apply_change, update
from mindsimkit.mindsim.patient import Speech, TokenCount, speech_reply
from mindsimkit.mindsim.prompting import RejectedMessage, TurnFailed
from mindsimkit.mindsim.records import PatientActTurn, PatientTurn, StepReasons

STEP_TEMPLATE = "patientact/step.jinja2"
SIGNAL_TEMPLATE = "patientact/signal.jinja2"
WHY = (str, Field(max_length=200, description="One short sentence: why, from the client's side"))


def _choice(
    name: str, fields: dict[str, tuple[list[str], str]], extra: dict[str, Any] | None = None
) -> type[BaseModel]:
    """A pydantic model whose fields are enums built from the taxonomy data (`why` first, so a model reasons
    before it picks)."""
    spec: dict[str, Any] = {"why": WHY}
    for fname, (ids, desc) in fields.items():
        spec[fname] = (Literal[tuple(ids)], Field(description=desc))
    spec.update(extra or {})
    return create_model(name, __config__=ConfigDict(extra="forbid"), **spec)


def step_models(
    preset: str | None = None, trust_update: str = "criterion", allow_end: bool = True
) -> dict[str, type[BaseModel]]:
    """The four steps' answer schemas. Under `trust_update: direction` (the authors' code) the trust step names
    only the change, one of five directions; under `criterion` (ours) it names the criterion first. Without
    `allow_end` the behaviour step is not offered `end_conversation`: a field whose answer is thrown away would
    only invite the model to spend a decision on leaving."""
    tax, rules = taxonomy(), trust_rules(preset)
    trust_fields = {"change": (list(rules.changes), "How this exchange moved trust")}
    if trust_update == "criterion":
        trust_fields = {
            "criterion": (rules.criterion_ids, "The one listed description that fits the counsellor's last message"),
            **trust_fields,
        }
    return {
        "reaction": _choice(
            "Reaction",
            {
                "reaction": (tax.ids("reactions"), "What the client feels at the counsellor's message"),
                "intensity": (tax.intensities, "How strongly"),
            },
        ),
        "behaviour": _choice(
            "Behaviour",
            {"behaviour": (tax.ids("behaviours"), "What the client does next")},
            {"end_conversation": (bool, Field(description="True only if the client leaves after this message"))}
            if allow_end
            else None,
        ),
        "resistance": _choice("Resistance", {"pattern": (tax.ids("resistance_patterns"), "The form resistance takes")}),
        "trust": _choice("TrustChange", trust_fields),
    }


def trailing_therapeutic(behaviours: list[str], preset: str | None = None) -> int:
    """How many of the latest behaviours, counted back from the last, are therapeutic without a break."""
    therapeutic = set(step_rules(preset).therapeutic_behaviours)
    n = 0
    for b in reversed(behaviours):
        if b not in therapeutic:
            break
        n += 1
    return n


def same_run(behaviours: list[str]) -> int:
    """How many of the latest behaviours are the same behaviour, counted back from the last."""
    n = 0
    for b in reversed(behaviours):
        if b != behaviours[-1]:
            break
        n += 1
    return n


class GateFlags(TypedDict):
    """What the gate let through this turn, as the step rules read it."""

    activated: bool
    blocked: bool
    trigger: bool


def conditions(
    *,
    activated: bool,
    blocked: bool,
    trigger: bool,
    trust: float,
    reaction: str | None = None,
    intensity: str | None = None,
    behaviours: Sequence[str] = (),
    preset: str | None = None,
) -> list[str]:
    """The ids of the step rules that hold (step_rules.yaml; the template words each one)."""
    r = step_rules(preset)
    held = []
    if not activated and not blocked:
        held.append("nothing_activated")
    if trigger:
        held.append("trigger")
    if blocked:
        held.append("blocked")
    if reaction is not None:
        if not activated and not blocked and reaction in r.neutral_reactions:
            held.append("nothing_activated_neutral")
        if intensity == r.high_intensity and trust <= r.low_trust_at_most + 1e-9:
            held.append("high_intensity_low_trust")
        if reaction in r.positive_reactions and intensity == r.moderate_intensity:
            held.append("positive_moderate")
        if trailing_therapeutic(list(behaviours), preset) >= r.pullback_after:
            held.append("pullback")
        if r.neutral_or_low and (reaction in r.neutral_reactions or intensity == r.default_intensity):
            held.append("neutral_or_low")
        if r.same_behaviour_run and behaviours and same_run(list(behaviours)) >= r.same_behaviour_run - 1:
            held.append("same_run")
    return held


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
    step_inputs: dict[str, Any] = field(default_factory=dict)
    session_items: list[MemoryItem] = field(default_factory=list)
    matcher: Any = None
    tokens: TokenCount = field(default_factory=TokenCount)
    recent_behaviours: list[str] = field(default_factory=list)
    moves: list[float] = field(default_factory=list)
    exchange: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.preset = preset_of(self.config)
        self.models = step_models(self.preset, self.config.patientact.trust_update, self.config.patientact.allow_end)

    @property
    def items(self) -> list[MemoryItem]:
        """The dynamic layer this session: the decomposition's items and the scenario's."""
        return [*self.decomposition.items, *self.session_items]

    def item(self, item_id: str) -> MemoryItem:
        return next(i for i in self.items if i.id == item_id)

    def open(self, opening_message: str, rejected_openings: Sequence[RejectedMessage] = ()) -> PatientTurn:
        self.history.append({"role": "assistant", "content": opening_message})
        self.exchange.append(("Client", opening_message))
        state = PatientActTurn(trust_before=self.trust, trust_after=self.trust)
        return PatientTurn.scripted_opening(opening_message, rejected_openings, patientact=state)

    async def _gate(self, counsellor_text: str, why: dict[str, str]) -> Gate:
        pa = self.config.patientact
        if not pa.dynamic_memory:
            return Gate()
        items = self.items
        if pa.retrieval == "llm":
            # The authors' matcher reads the counsellor's latest message alone (`matcher_context: message`).
            recent = self._recent() if pa.matcher_context == "recent" else []
            ids, why["matcher"] = await match(
                self.matcher or self.appraiser,
                items,
                recent,
                counsellor_text,
                max_tokens=pa.matcher_max_tokens,
                max_attempts=pa.step_attempts,
            )
        else:
            ids = relevant(items, counsellor_text)
        return split(items, ids, self.trust, trust_gating=pa.trust_gating)

    async def turn(self, index: int, counsellor_text: str) -> PatientTurn:
        pa = self.config.patientact
        trust_before = self.trust
        why: dict[str, str] = {}
        g = await self._gate(counsellor_text, why)
        ctx = self._context(counsellor_text, g)
        reaction = behaviour = None
        end = False
        held: list[str] = []
        if pa.pipeline:
            reaction = await self._step("reaction", ctx)
            why["reaction"] = reaction.why
            ctx.update(reaction=reaction.reaction, intensity=reaction.intensity)
            held = conditions(
                **self._flags(g),
                trust=self.trust,
                reaction=reaction.reaction,
                intensity=reaction.intensity,
                behaviours=self.recent_behaviours,
                preset=self.preset,
            )
            shown = step_rules(self.preset).recent_behaviours
            behaviour = await self._step(
                "behaviour",
                ctx,
                rules=held,
                recent_behaviours=self.recent_behaviours[-shown:],
                streak=trailing_therapeutic(self.recent_behaviours, self.preset),
                last_behaviour=self.recent_behaviours[-1] if self.recent_behaviours else None,
            )
            why["behaviour"] = behaviour.why
            end = bool(getattr(behaviour, "end_conversation", False)) and pa.allow_end
            self.recent_behaviours.append(behaviour.behaviour)
        pattern = None
        if behaviour is not None and behaviour.behaviour == "resistance":
            pattern = await self._step("resistance", ctx, behaviour="resistance")
            why["resistance"] = pattern.why
        signal = self._signal(g, reaction, behaviour, pattern)
        # The signal lives one turn: the history keeps the counsellor's plain words, and only the request for
        # this reply carries the signal. Were it stored, items retrieved at a higher trust would stay in view
        # after trust fell (the authors' code appends it to a copy of the history, as here).
        self.history.append({"role": "user", "content": counsellor_text})
        said = await self._message(signal)
        message = said.text
        self.exchange += [("Counsellor", counsellor_text), ("Client", message)]
        # The authors' trust step reads the conversation as it stood before the reply (`trust_sees_reply` off).
        change = await self._step("trust", {**ctx, "reply": message if pa.trust_sees_reply else None})
        why["trust"] = change.why
        criterion = getattr(change, "criterion", None)
        if pa.trust_update == "direction":
            self.trust, move = apply_change(self.trust, change.change, self.decomposition.psych.attachment, self.preset)
        else:
            self.trust, move = update(
                self.trust,
                change.criterion,
                change.change,
                self.decomposition.psych.attachment,
                self.moves,
                self.preset,
            )
        self.moves.append(move)
        state = PatientActTurn(
            trust_before=trust_before,
            trust_after=self.trust,
            trust_change=change.change,
            trust_criterion=criterion,
            rules=held,
            reaction=reaction.reaction if reaction else None,
            intensity=reaction.intensity if reaction else None,
            behaviour=behaviour.behaviour if behaviour else None,
            resistance_pattern=pattern.pattern if pattern else None,
            relevant=g.relevant,
            retrieved=g.retrieved,
            blocked=g.blocked,
            withheld=g.withheld,
            signal=signal,
            why=StepReasons(**why),
        )
        return PatientTurn.spoken(index, said, end=end, message=message, patientact=state)

    # -- steps ------------------------------------------------------------------------------------------
    def _recent(self) -> list[tuple[str, str]]:
        """The exchanges the steps see: the last `context_turns` (ours) or the whole conversation so far."""
        pa = self.config.patientact
        return list(self.exchange) if pa.step_context == "whole" else self.exchange[-pa.context_turns * 2 :]

    def _flags(self, g: Gate) -> GateFlags:
        return {
            "activated": bool(g.retrieved),
            "blocked": bool(g.blocked),
            "trigger": any(self.item(i).type == "trigger" for i in g.retrieved),
        }

    def _context(self, counsellor_text: str, g: Gate) -> dict[str, Any]:
        s = self.decomposition.static
        return {
            "recent": self._recent(),
            "counsellor": counsellor_text,
            "trust": f"{self.trust:.2f}",
            "trust_text": trust_rules(self.preset).level_text(self.trust),
            "activated": [(self.item(i).type, self.item(i).content) for i in g.retrieved],
            "blocked": [self.item(i).topic for i in g.blocked],
            "held": conditions(**self._flags(g), trust=self.trust, preset=self.preset),
            "expects": s.therapist_expects,
            "rules": [],
            "streak": 0,
            **self.step_inputs,
            "reaction": None,
            "intensity": None,
            "behaviour": None,
            "reply": None,
        }

    async def _step(self, step: str, ctx: dict[str, Any], **extra: Any) -> Any:
        tax, trules, srules = taxonomy(), trust_rules(self.preset), step_rules(self.preset)
        options = {
            "reaction": tax.ids("reactions"),
            "behaviour": tax.ids("behaviours"),
            "resistance": tax.ids("resistance_patterns"),
            "trust": list(trules.changes),
        }[step]
        values = {
            **ctx,
            **extra,
            "step": step,
            "options": options,
            "srules": srules,
            "criteria": trules.criteria,
            "default_criterion": trules.default_criterion,
            "by_direction": self.config.patientact.trust_update == "direction",
            "allow_end": self.config.patientact.allow_end,
        }
        values.setdefault("recent_behaviours", [])
        messages = [
            {"role": "system", "content": self.appraiser_system},
            {"role": "user", "content": render(STEP_TEMPLATE, **values)},
        ]
        pa = self.config.patientact
        sampling = {"max_tokens": pa.step_max_tokens} if pa.step_max_tokens else {}
        try:
            out = await self.appraiser.structured(
                messages, self.models[step], max_attempts=pa.step_attempts, **sampling
            )
        except StructuredOutputError as exc:
            raise TurnFailed(f"patientact {step} step: {exc}") from exc
        # A structured answer carries no usage: the steps' tokens are in the run's ledger, by role.
        return out

    def _signal(self, g: Gate, reaction: Any, behaviour: Any, pattern: Any) -> str:
        tax = taxonomy()
        r = tax.term("reactions", reaction.reaction) if reaction else None
        b = tax.term("behaviours", behaviour.behaviour) if behaviour else None
        p = tax.term("resistance_patterns", pattern.pattern) if pattern else None
        return render(
            SIGNAL_TEMPLATE,
            reaction=r,
            intensity=reaction.intensity if reaction else "",
            behaviour=b,
            pattern=p,
            activated=[(self.item(i).type, self.item(i).content) for i in g.retrieved],
            blocked=[self.item(i).topic for i in g.blocked],
            trust_text=trust_rules(self.preset).level_text(self.trust),
            pipeline=self.config.patientact.pipeline,
        )

    async def _message(self, signal: str) -> Speech:
        """The reply, re-asked (bounded, counted) while it is not speech: the request is the history with this
        turn's signal after the counsellor's last message; a re-ask appends its note after that and keeps the
        signal."""
        last = self.history[-1]
        request = [*self.history[:-1], {**last, "content": f"{last['content']}\n\n{signal}"}]
        said = await speech_reply(
            self.client,
            request,
            lambda note: [*request, {"role": "user", "content": f"[harness note] {note}"}],
            config=self.config,
            tokens=self.tokens,
        )
        self.history.append({"role": "assistant", "content": said.text})
        return said


def session_items(scenario: Any) -> list[MemoryItem]:
    """The scenario's inner material as this session's items (ours): its automatic thoughts, bodily signs and
    behaviours go through the same gate as the profile's items instead of sitting in the patient's prompt,
    at their type's anchored level, tagged by their own content words."""
    from mindsimkit.mindsim.patientact.retrieval import content_tags

    types = item_types()
    kinds = [
        (
            "thought",
            "scenario.automatic_thoughts",
            "emotional_state",
            "a thought about it",
            scenario.automatic_thoughts,
        ),
        ("symptom", "scenario.physical", "physical_symptom", "how the body reacts", scenario.physical),
        ("behaviour", "scenario.behaviors", "behaviour_change", "what they did", scenario.behaviors),
    ]
    out: list[MemoryItem] = []
    for kind, source, category, topic, texts in kinds:
        for text in texts:
            tags = content_tags(text)
            if not text.strip() or not tags:
                continue
            out.append(
                MemoryItem(
                    id=f"s{len(out) + 1}",
                    type=kind,
                    source=source,
                    content=text.strip(),
                    topic=topic,
                    level=types.types[kind].anchor,
                    tags=tags,
                    category=category,
                    discomfort=types.discomfort_categories[category],
                )
            )
    return out

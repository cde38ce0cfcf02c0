"""The ConsistentMI patient engine (Yang et al., 2025, ACL; as a baseline: PatientAct §4.2, Table 2; docs/baselines.md
"ConsistentMI"): a client in motivational interviewing whose every reply carries out one dialogue action, drawn
for the stage of change it is in, and whose engagement follows how close the counsellor's topic is to the topic
that would motivate it. The mechanism is PatientHub's client (the code the PatientAct paper ran); its tables are
data (`mindsim/data/baselines/consistentmi.yaml`), its prompts ours.

Per counsellor message (`ConsistentMIPatient.turn`):
1. stage: a contemplating client with no sustaining belief left moves to preparation;
2. topic: the `consistentmi_tracker` role places the message on one topic of the graph; the shortest weighted path
   from the client's motivation topic to it gives the engagement (1-4) and counts off-topic turns; on the
   motivation topic itself the tracker is asked whether the counsellor spoke to the client's motivation, and a yes
   makes the client motivated for one turn (it acknowledges, then contemplates);
3. action: forced (acknowledge when motivated; terminate after five off-topic turns in precontemplation) or drawn,
   seeded per session, from the tracker's weights over the stage's five actions (plus the receptivity band's
   weights in precontemplation), with actions whose profile list is empty set to 0;
4. grounding: the persona, belief or plan the reply rests on (a sustaining belief used to hesitate is used up, and
   so is a plan once proposed);
5. reply: the patient's model answers the conversation with a private instruction (stage, action, engagement,
   grounding) appended to the counsellor's message for that one request.

The client comes from our profile (`fixed_fields` and the `baseline_mapper`'s one call, `map_model`): what to change
and the aim, second-person facts, the beliefs that sustain the behaviour, acceptable plans and the motivation
(a topic of the graph and a sentence). That call is the per-patient preparation, checkpointed once. Every tracker
answer is re-asked (bounded) while it does not fit; one that never fits fails the turn, counted with the arc.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.budget import PromptSize, RoleSchema, StageBudget, fill_text, messages_tokens
from mindsimkit.mindcore.errors import ConfigError, InputError, StructuredOutputError
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindsim.baselines import common
from mindsimkit.mindsim.engine_names import recipe_runs
from mindsimkit.mindsim.patient import TokenCount, speech_reply
from mindsimkit.mindsim.patient_engines.base import PatientEngine, TalkStart
from mindsimkit.mindsim.prompting import RejectedMessage, TurnFailed
from mindsimkit.mindsim.records import ConsistentMITurn, PatientTurn

NAME = "consistentmi"
SYSTEM_TEMPLATE = "baselines/consistentmi_system.jinja2"
MAP_TEMPLATE = "baselines/consistentmi_map.jinja2"
TRACKER_TEMPLATE = "baselines/consistentmi_tracker.jinja2"
INSTRUCTION_TEMPLATE = "baselines/consistentmi_instruction.jinja2"
TRACKER_ROLE = "consistentmi_tracker"
TRACKER_KEY = "tracker"  # its key in Roles.extra and SessionRecord.engines
LISTS = ("personas", "beliefs", "plans")
Line = Annotated[str, Field(min_length=3, max_length=140)]


# -- the tables ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Band:
    band: str
    below: float | None
    weights: dict[str, int]


@dataclass(frozen=True)
class Tables:
    """`mindsim/data/baselines/consistentmi.yaml`, checked."""

    stages: dict[str, str]
    motivated: str
    first_stage: str
    actions: dict[str, list[str]]
    forced: dict[str, str]
    terminate_after: int
    action_text: dict[str, str]
    grounding: dict[str, dict[str, Any]]
    needs: dict[str, dict[str, Any]]
    fallback_action: str
    bands: list[Band]
    prior_stage: str
    receptivity: dict[str, float]
    engagement: dict[str, Any]
    chain_length: int
    off_topic_after: int
    reset_at_most: float
    context_messages: int
    links: dict[str, dict[str, float]]
    parents: dict[str, str | None]

    def band(self, receptivity: float) -> Band:
        """The receptivity band a value falls in (the first whose `below` it is under; the last has none)."""
        return next(b for b in self.bands if b.below is None or receptivity < b.below)

    def chain(self, topic: str) -> list[str]:
        """The topic, its parent, its parent's parent, … up to a root."""
        out = [topic]
        while (up := self.parents.get(out[-1])) is not None and up not in out:
            out.append(up)
        return out

    def motivation_topics(self) -> list[str]:
        """Topics with a full chain (the engagement instruction walks three levels)."""
        return [t for t in self.links if len(self.chain(t)) >= self.chain_length]

    def all_actions(self) -> list[str]:
        return sorted({a for acts in self.actions.values() for a in acts} | set(self.forced.values()))


def _fail(what: str) -> ConfigError:
    return ConfigError(f"mindsim/data/baselines/consistentmi.yaml: {what}; fix the data file")


@lru_cache(maxsize=1)
def tables() -> Tables:
    d = common.load_data(NAME)
    try:
        topics = d["topics"]
        t = Tables(
            stages=dict(d["stages"]),
            motivated=d["motivated_stage"],
            first_stage=d["first_stage"],
            actions={k: list(v) for k, v in d["actions"].items()},
            forced=dict(d["forced"]),
            terminate_after=int(d["terminate_after"]),
            action_text=dict(d["action_text"]),
            grounding=dict(d["grounding"]),
            needs=dict(d["needs"]),
            fallback_action=d["fallback_action"],
            bands=[Band(b["band"], b["below"], dict(b["weights"])) for b in d["receptivity_bands"]],
            prior_stage=d["prior_stage"],
            receptivity={k: float(v) for k, v in d["receptivity"].items()},
            engagement=dict(d["engagement"]),
            chain_length=int(d["chain_length"]),
            off_topic_after=int(d["off_topic_after"]),
            reset_at_most=float(d["reset_at_most"]),
            context_messages=int(d["context_messages"]),
            links={k: {n: float(w) for n, w in (v.get("links") or {}).items()} for k, v in topics.items()},
            parents={k: v.get("parent") for k, v in topics.items()},
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise _fail(f"missing or malformed entry ({exc.__class__.__name__}: {exc})") from exc
    _check(t)
    return t


def _check(t: Tables) -> None:
    if set(t.actions) != set(t.stages) or t.first_stage not in t.stages or t.prior_stage not in t.stages:
        raise _fail("`actions`, `first_stage` and `prior_stage` must name the stages listed under `stages`")
    unknown = set(t.all_actions()) - set(t.action_text)
    if unknown:
        raise _fail(f"actions without a text under `action_text`: {sorted(unknown)}")
    for action, spec in [*t.grounding.items(), *t.needs.items()]:
        if action not in t.action_text or spec.get("list") not in LISTS:
            raise _fail(f"`{action}` must be an action drawing on one of {', '.join(LISTS)}")
    for b in t.bands:
        if set(b.weights) != set(t.actions[t.prior_stage]):
            raise _fail(f"receptivity band {b.band}: weights must cover exactly the {t.prior_stage} actions")
    if t.bands[-1].below is not None:
        raise _fail("the last receptivity band must have `below: null`")
    stray = {n for v in t.links.values() for n in v} | {p for p in t.parents.values() if p is not None}
    if stray - set(t.links):
        raise _fail(f"links or parents name topics that are not listed: {sorted(stray - set(t.links))}")
    if not t.motivation_topics():
        raise _fail(f"no topic has a chain of {t.chain_length} levels")


# -- pure rules ------------------------------------------------------------------------------------------------
def distance(start: str, target: str) -> float:
    """Shortest weighted path along the graph's directed links (infinite when `target` cannot be reached)."""
    links = tables().links
    best = {start: 0.0}
    queue = [(0.0, start)]
    while queue:
        d, node = heapq.heappop(queue)
        if node == target:
            return d
        if d > best.get(node, float("inf")):
            continue
        for nxt, w in links.get(node, {}).items():
            if d + w < best.get(nxt, float("inf")):
                best[nxt] = d + w
                heapq.heappush(queue, (d + w, nxt))
    return float("inf")


def engagement_level(motivation_topic: str, topic: str) -> tuple[int, float]:
    """(engagement 1-4, distance) of the counsellor's topic seen from the client's motivation topic."""
    e = tables().engagement
    if topic == motivation_topic:
        return int(e["match"]), 0.0
    dist = distance(motivation_topic, topic)
    for band in e["bands"]:
        if dist <= band["at_most"]:
            return int(band["level"]), dist
    return int(e["beyond"]), dist


def stage_after_update(stage: str, beliefs: list[str]) -> str:
    """The turn's first rule: a contemplating client with no sustaining belief left is ready to prepare."""
    t = tables()
    order = list(t.stages)
    contemplation, preparation = order[1], order[2]
    return preparation if stage == contemplation and not beliefs else stage


def constrained(weights: dict[str, int], stage: str, lists: dict[str, list[str]]) -> dict[str, int]:
    """`weights` with every action whose profile list is empty (in the stages that need it) set to 0."""
    out = dict(weights)
    for action, need in tables().needs.items():
        if action in out and stage in need["stages"] and not lists.get(need["list"]):
            out[action] = 0
    return out


def draw_action(weights: dict[str, int], rng: random.Random) -> str:
    """One action drawn in proportion to its weight; the fallback action when every weight is 0."""
    total = sum(weights.values())
    if total <= 0:
        return tables().fallback_action
    return rng.choices(list(weights), weights=list(weights.values()), k=1)[0]


def session_rng(sid: str) -> random.Random:
    """The session's own random source: a rerun of the same session draws the same actions."""
    return random.Random(int.from_bytes(hashlib.sha256(f"{NAME}|{sid}".encode()).digest()[:8], "big"))


# -- the mapping from our profile ---------------------------------------------------------------------------
def _coping(label: str) -> str:
    from mindsimkit.profilegen.vocab import load_vocabularies

    coping = load_vocabularies().coping
    return coping[label].description.rstrip(".") if label in coping else label.replace("_", " ")


def fixed_fields(profile: Any) -> dict[str, Any]:
    """The client fields our profile carries, rendered without a model: the behaviour to change (the first
    maladaptive coping behaviour, else the first one), the second-person facts ConsistentMI calls personas (our
    presenting problem, its impact, the precipitating event, the predisposing histories and the protective
    factors), and the starting receptivity (our frustration_reactivity, `receptivity` in the data file)."""
    if profile.situation_profile is not None:
        target, personas = _situation_parts(profile.situation_profile)
        return {**_client_state(profile), "target": target, "personas": personas}
    f = profile.written().formulation
    if not f.perpetuating:
        raise InputError(
            f"profile {profile.profile_id}: no perpetuating (coping) behaviour for ConsistentMI to target; "
            "drop consistentmi from simulation.patient_engine for it"
        )
    target = next((p for p in f.perpetuating if p.maladaptive), f.perpetuating[0])
    personas = [
        f.presenting.summary,
        *f.presenting.impact,
        f"{f.precipitating.what_changed.rstrip('.')} ({f.precipitating.when}).",
        *(p.history for p in f.predisposing),
        *(p.detail for p in f.protective),
    ]
    return {
        **_client_state(profile),
        "target": f"{_coping(target.label)}: {target.situation.rstrip('.')}",
        "personas": [p.strip() for p in personas if p and p.strip()],
    }


def _client_state(profile: Any) -> dict[str, Any]:
    """The starting receptivity (from the profile's conversational style) and stage."""
    reactivity = profile.style.frustration_reactivity
    table = tables().receptivity
    if reactivity not in table:
        raise InputError(
            f"profile {profile.profile_id}: frustration_reactivity '{reactivity}' has no receptivity in "
            f"mindsim/data/baselines/consistentmi.yaml (known: {', '.join(table)})"
        )
    return {"receptivity": table[reactivity], "stage": tables().first_stage}


def _situation_parts(record: Any) -> tuple[str, list[str]]:
    """A situation-seeded profile's behaviour to change (its first internal perpetuating factor: the loop the client
    keeps up) and its facts (the situation, its impact, what set it off, the predisposing histories and conditions,
    the protective factors); PatientAct's Table 2 runs ConsistentMI on the paper's situations."""
    pf = record.profile.problem_formulation
    personas = [
        record.situation,
        *pf.presenting_problem.impact,
        *pf.precipitating_factors,
        *pf.predisposing_factors.psychological,
        *pf.predisposing_factors.social,
        *pf.protective_factors.internal,
        *pf.protective_factors.external,
    ]
    target = pf.perpetuating_factors.internal[0].strip().rstrip(".")
    return target, [p.strip() for p in personas if p and p.strip()]


def one_of(options: list[str]) -> Any:
    """A closed set as a schema enum (the answer cannot leave it; one that does is re-asked)."""
    return Literal[tuple(options)]


def map_model() -> type[BaseModel]:
    """What the mapper writes: the behaviour and the aim in ConsistentMI's terms, the sustaining beliefs, the
    acceptable plans, and the motivation (one topic of the graph with a full chain, and a sentence)."""
    return create_model(
        "ConsistentMIMap",
        __config__=ConfigDict(extra="forbid"),
        behavior=(str, Field(min_length=3, max_length=80, description="The behaviour to change, a short noun phrase")),
        goal=(str, Field(min_length=3, max_length=120, description="The change the counsellor works towards")),
        beliefs=(
            list[Line],
            Field(min_length=2, max_length=4, description="Second-person beliefs that keep the behaviour going"),
        ),
        plans=(
            list[Line],
            Field(min_length=0, max_length=2, description="Second-person first steps the client could accept"),
        ),
        motivation_topic=(
            one_of(tables().motivation_topics()),
            Field(description="The topic that would move the client"),
        ),
        motivation=(
            str,
            Field(min_length=10, max_length=200, description="Second person: why that topic would move them"),
        ),
    )


def map_messages(profile: Any, fixed: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": render(
                MAP_TEMPLATE,
                persona=common.who(profile),
                writer_brief=profile.writer_brief,
                goal=profile.goal,
                target=fixed["target"],
                personas=fixed["personas"],
                topics=tables().motivation_topics(),
            ),
        }
    ]


async def client_profile(profile: Any, seed: int, client: Any, config: Any) -> common.BaselinePreparation:
    """The patient's ConsistentMI client: our fields, the mapper's, and the motivation chain."""
    fixed = fixed_fields(profile)
    mapped = (await common.map_fields(client, map_messages(profile, fixed), map_model(), config)).model_dump()
    chain = tables().chain(mapped["motivation_topic"])
    return common.BaselinePreparation(
        engine=NAME,
        patient_id=profile.profile_id,
        seed=seed,
        profile={**fixed, **mapped, "motivation_chain": chain},
        filled=sorted(mapped),
        mapper=client.describe(),
        prompt={MAP_TEMPLATE: template_hash(MAP_TEMPLATE)},
    )


# -- the tracker's answers --------------------------------------------------------------------------------
class MotivationCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    analysis: str = Field(max_length=400, description="Two or three sentences: what the counsellor spoke to")
    answer: bool = Field(description="True if the counsellor's last message speaks to the client's own motivation")


def topic_model() -> type[BaseModel]:
    return create_model(
        "ConsistentMITopic",
        __config__=ConfigDict(extra="forbid"),
        topic=(one_of(list(tables().links)), Field(description="The topic the message is about")),
    )


def weights_model(stage: str) -> type[BaseModel]:
    fields: dict[str, Any] = {
        a: (int, Field(ge=0, le=100, description=tables().action_text[a])) for a in tables().actions[stage]
    }
    return create_model(f"ConsistentMIWeights_{stage}", __config__=ConfigDict(extra="forbid"), **fields)


def grounding_model(n: int) -> type[BaseModel]:
    return create_model(
        "ConsistentMIGrounding",
        __config__=ConfigDict(extra="forbid"),
        item=(int, Field(ge=0, le=n, description="Number of the first item that fits; 0 if none")),
    )


def tracker_messages(task: str, **values: Any) -> list[dict[str, str]]:
    return [{"role": "user", "content": render(TRACKER_TEMPLATE, task=task, **values)}]


# -- the session's client -----------------------------------------------------------------------------------
@dataclass
class ConsistentMIPatient:
    """A ConsistentMI client in one session: its stage, what it has left to draw on and its off-topic count."""

    client: Any
    tracker: Any
    config: Any
    history: list[dict[str, Any]]
    client_fields: dict[str, Any]
    stage: str
    beliefs: list[str]
    plans: list[str]
    rng: random.Random
    tokens: TokenCount = field(default_factory=TokenCount)
    exchange: list[tuple[str, str]] = field(default_factory=list)
    off_topic: int = 0
    counsellor_messages: int = 0

    @property
    def lists(self) -> dict[str, list[str]]:
        return {"personas": list(self.client_fields["personas"]), "beliefs": self.beliefs, "plans": self.plans}

    def open(self, opening_message: str, rejected_openings: Sequence[RejectedMessage] = ()) -> PatientTurn:
        self.history.append({"role": "assistant", "content": opening_message})
        self.exchange.append(("Client", opening_message))
        return PatientTurn.scripted_opening(opening_message, rejected_openings)

    async def turn(self, index: int, counsellor_text: str) -> PatientTurn:
        t = tables()
        self.counsellor_messages += 1
        self.exchange.append(("Counsellor", counsellor_text))
        self.stage = stage_after_update(self.stage, self.beliefs)
        topic, engagement, motivated = await self._topic(counsellor_text)
        stage = self.stage
        weights: dict[str, int] = {}
        if stage == t.motivated:
            action = t.forced["motivated"]
        elif stage == t.prior_stage and self.off_topic >= t.terminate_after:
            action = t.forced["off_topic"]
        else:
            weights = await self._weights(stage)
            action = draw_action(weights, self.rng)
        grounding = await self._grounding(action, counsellor_text)
        instruction = self._instruction(stage, action, engagement, grounding)
        if stage == t.motivated:
            self.stage = list(t.stages)[1]  # an acknowledged motivation opens contemplation
        said = await self._reply(counsellor_text, instruction)
        self.exchange.append(("Client", said.text))
        end = action == t.forced["off_topic"] and bool(self.config.consistentmi.end_on_terminate)
        state = ConsistentMITurn(
            stage=stage,
            stage_after=self.stage,
            receptivity=self.client_fields["receptivity"],
            topic=topic,
            engagement=engagement,
            off_topic=self.off_topic,
            motivated=motivated,
            weights=json.dumps(weights) if weights else None,
            action=action,
            grounding=grounding,
            instruction=instruction,
        )
        return PatientTurn.spoken(index, said, end=end, consistentmi=state)

    # -- steps -----------------------------------------------------------------------------------------------
    def _context(self) -> list[tuple[str, str]]:
        return self.exchange[-tables().context_messages :]

    async def _ask(self, task: str, model: type[BaseModel], **values: Any) -> Any:
        c = self.config.consistentmi
        sampling = {"max_tokens": c.tracker_max_tokens} if c.tracker_max_tokens else {}
        try:
            return await self.tracker.structured(
                tracker_messages(task, **values), model, max_attempts=c.tracker_attempts, **sampling
            )
        except StructuredOutputError as exc:
            raise TurnFailed(f"consistentmi {task}: {exc}") from exc

    async def _topic(self, counsellor_text: str) -> tuple[str | None, int | None, bool | None]:
        """Place the message on a topic; engagement, the off-topic count and the motivation check follow."""
        t = tables()
        chain = self.client_fields["motivation_chain"]
        if not chain:
            return None, None, None
        topic = (await self._ask("topic", topic_model(), message=counsellor_text, topics=list(t.links))).topic
        engagement, dist = engagement_level(chain[0], topic)
        motivated = None
        if dist <= t.reset_at_most:
            self.off_topic = 0
        elif engagement == t.engagement["beyond"] and self.counsellor_messages > t.off_topic_after:
            self.off_topic += 1
        if engagement == t.engagement["match"]:
            check = await self._ask(
                "motivation",
                MotivationCheck,
                context=self._context(),
                goal=self.client_fields["goal"],
                motivation=self.client_fields["motivation"],
            )
            motivated = bool(check.answer)
            if motivated:
                self.stage = t.motivated
        return topic, engagement, motivated

    async def _weights(self, stage: str) -> dict[str, int]:
        t = tables()
        answer = await self._ask(
            "weights",
            weights_model(stage),
            context=self._context(),
            stage=stage,
            stage_text=t.stages[stage],
            actions=[(a, t.action_text[a]) for a in t.actions[stage]],
        )
        weights = {a: int(getattr(answer, a)) for a in t.actions[stage]}
        if stage == t.prior_stage:
            prior = t.band(self.client_fields["receptivity"]).weights
            weights = {a: w + prior[a] for a, w in weights.items()}
        return constrained(weights, stage, self.lists)

    async def _grounding(self, action: str, counsellor_text: str) -> str | None:
        """The item the reply rests on: the next plan for a plan; for the others, only when the counsellor asked
        something, the first item the tracker finds fitting (else one at random), used up where the data says."""
        spec = tables().grounding.get(action)
        if spec is None:
            return None
        items = (
            self.beliefs
            if spec["list"] == "beliefs"
            else self.plans
            if spec["list"] == "plans"
            else self.lists["personas"]
        )
        if not items:
            return None
        if spec["list"] == "plans":
            chosen = items[0]
        elif "?" not in counsellor_text:
            return None
        else:
            pick = (
                await self._ask(
                    "grounding",
                    grounding_model(len(items)),
                    message=counsellor_text,
                    action=tables().action_text[action],
                    items=items,
                )
            ).item
            chosen = items[pick - 1] if pick else self.rng.choice(items)
        if spec["consume"]:
            items.remove(chosen)
        return str(chosen)

    def _instruction(self, stage: str, action: str, engagement: int | None, grounding: str | None) -> str:
        t = tables()
        f = self.client_fields
        chain = f["motivation_chain"]
        return render(
            INSTRUCTION_TEMPLATE,
            stage=stage,
            motivated=stage == t.motivated,
            engage_stage=stage in (t.prior_stage, t.motivated),
            stage_text=t.stages.get(stage, ""),
            behavior=f["behavior"],
            goal=f["goal"],
            action_text=t.action_text[action],
            engagement=engagement if len(chain) >= t.chain_length else None,
            chain=chain,
            motivation=f["motivation"],
            grounding=grounding,
            is_plan=t.grounding.get(action, {}).get("list") == "plans",
        )

    async def _reply(self, counsellor_text: str, instruction: str) -> Any:
        """The reply, re-asked (bounded, counted) while it is not speech. The instruction rides on this one request;
        the history keeps the counsellor's plain words (PatientHub keeps its instructions in the history)."""
        self.history.append({"role": "user", "content": counsellor_text})
        request = [*self.history[:-1], {"role": "user", "content": f"{counsellor_text}\n\n{instruction}"}]
        said = await speech_reply(
            self.client,
            request,
            lambda note: [*request, {"role": "user", "content": f"[harness note] {note}"}],
            config=self.config,
            tokens=self.tokens,
        )
        self.history.append({"role": "assistant", "content": said.text})
        return said


def system_prompt(prep: common.BaselinePreparation, talk: Any) -> str:
    f = prep.profile
    return render(
        SYSTEM_TEMPLATE,
        behavior=f["behavior"],
        goal=f["goal"],
        personas=f["personas"],
        beliefs=f["beliefs"],
        **common.session_context(talk),
    )


# -- budgets and prompt sizes ------------------------------------------------------------------------------
def _section(recipe: Any) -> dict[str, Any]:
    return dict(((getattr(recipe, "simulation", None) or {}).get(NAME) or {}))


def tracker_budget(recipe: Any) -> StageBudget:
    from mindsimkit.mindsim.config import ConsistentMIConfig

    section = _section(recipe)
    explicit = "tracker_max_tokens" in section
    value = section["tracker_max_tokens"] if explicit else ConsistentMIConfig.model_fields["tracker_max_tokens"].default
    return StageBudget(value, f"simulation.{NAME}.tracker_max_tokens", explicit)


def tracker_schemas() -> dict[str, type[BaseModel]]:
    t = tables()
    most = max(len(t.action_text), 16)
    return {
        "ConsistentMITopic": topic_model(),
        "MotivationCheck": MotivationCheck,
        **{f"ConsistentMIWeights_{s}": weights_model(s) for s in t.stages},
        "ConsistentMIGrounding": grounding_model(most),
    }


def tracker_prompt(inp: Any, sz: Any) -> PromptSize:
    """The tracker's largest prompt: each task at the recipe's reply budgets, the grounding task with every
    persona a profile can hold at its length limit."""
    from mindsimkit.mindsim.stage_sizes import message_texts

    t = tables()
    patient, counsellor = message_texts(inp, sz)
    context = [
        ("Counsellor" if i % 2 else "Client", counsellor if i % 2 else patient) for i in range(t.context_messages)
    ]
    items = [fill_text(500)] * 13  # summary, five impacts, the event, three histories, three resources
    stage = max(t.stages, key=lambda s: sum(len(t.action_text[a]) for a in t.actions[s]))
    parts = {
        "topic": messages_tokens(tracker_messages("topic", message=counsellor, topics=list(t.links)), sz),
        "motivation": messages_tokens(
            tracker_messages("motivation", context=context, goal=fill_text(120), motivation=fill_text(200)), sz
        ),
        "weights": messages_tokens(
            tracker_messages(
                "weights",
                context=context,
                stage=stage,
                stage_text=t.stages[stage],
                actions=[(a, t.action_text[a]) for a in t.actions[stage]],
            ),
            sz,
        ),
        "grounding": messages_tokens(
            tracker_messages("grounding", message=counsellor, items=items, action=max(t.action_text.values(), key=len)),
            sz,
        ),
    }
    # Typical: the three questions most turns ask (topic, action weights, grounding); the motivation check is rare.
    usual = (parts["topic"] + parts["weights"] + parts["grounding"]) / 3
    return PromptSize(TRACKER_ROLE, round(usual) if inp.typical else max(parts.values()), parts)


# -- the engine ------------------------------------------------------------------------------------------------
class ConsistentMIEngine(common.PromptedBaselineEngine, PatientEngine):
    name = NAME
    description = "ConsistentMI (Yang et al. 2025): stage-of-change tracking and per-turn MI action selection"
    what = "client profile"
    system_template, map_template = SYSTEM_TEMPLATE, MAP_TEMPLATE
    roles: ClassVar[Mapping[str, str]] = {common.MAPPER_ROLE: common.MAPPER_KEY, TRACKER_ROLE: TRACKER_KEY}
    settings_section = NAME
    session_client = True  # a client in a counselling session
    reads_situations = True  # PatientAct's Table 2 runs it on the situation-seeded profiles (`_situation_parts`)
    # Tracker calls per patient turn for `mindsim plan`: the topic and the action weights nearly every turn, a
    # grounding pick on most questions, the motivation check only on the motivation topic (expected); all four
    # at most (a turn on the motivation topic whose check says no, then weights and a grounding pick).
    tracker_calls = (3.0, 4)

    def system_prompt(self, prep: Any, talk: Any) -> str:
        return system_prompt(prep, talk)

    def mapper_messages(self, profile: Any) -> list[dict[str, str]]:
        return map_messages(profile, fixed_fields(profile))

    def fixed_fields(self, profile: Any) -> dict[str, Any]:
        return fixed_fields(profile)

    def build(self, profile: Any, seed: int, client: Any, config: Any) -> Any:
        return client_profile(profile, seed, client, config)

    def participant(self, talk: TalkStart) -> Any:
        prep = talk.arc.preparation
        if prep is None or prep.engine != self.name:
            raise ValueError("a ConsistentMI session needs the patient's client profile (its preparation)")
        start = talk.inp.carried or {}
        f = prep.profile
        return ConsistentMIPatient(
            client=talk.arc.roles.patient,
            tracker=talk.arc.roles.get(TRACKER_KEY),
            config=talk.config,
            history=[{"role": "system", "content": system_prompt(prep, talk)}],
            client_fields=f,
            stage=start.get("stage", f["stage"]),
            beliefs=list(start.get("beliefs", f["beliefs"])),
            plans=list(start.get("plans", f["plans"])),
            rng=session_rng(talk.sid),
        )

    def carry(self, plan: Any, previous: Any, config: Any) -> dict[str, Any] | None:
        """The stage, beliefs and plans the previous session ended with (None: start from the client profile)."""
        b = previous.baseline if previous is not None else None
        if not config.consistentmi.carry_state or b is None or b.stage_end is None or b.left is None:
            return None
        return {
            "stage": b.stage_end,
            "beliefs": list(b.left.get("beliefs", [])),
            "plans": list(b.left.get("plans", [])),
        }

    def record_fields(self, talk: Any) -> dict[str, Any]:
        from mindsimkit.mindsim.records import BaselineSession

        prep, patient = talk.arc.preparation, talk.patient
        start = (talk.inp.carried or {}).get("stage", prep.profile["stage"])
        return {
            "baseline": BaselineSession(
                engine=self.name,
                filled=prep.filled,
                preparation=prep.model_dump(mode="json"),
                stage_start=start,
                stage_end=patient.stage,
                left={"beliefs": list(patient.beliefs), "plans": list(patient.plans)},
            )
        }

    def prompt_names(self) -> list[str]:
        return [SYSTEM_TEMPLATE, MAP_TEMPLATE, TRACKER_TEMPLATE, INSTRUCTION_TEMPLATE]

    def check_profiles(self, profiles: Any) -> None:
        for p in profiles:
            fixed_fields(p)

    def role_schemas(self) -> list[RoleSchema]:
        def active(recipe: Any) -> bool:
            return recipe_runs(recipe, NAME)

        mapper = RoleSchema(
            common.MAPPER_ROLE,
            "consistentmi:ConsistentMIMap",
            lambda: map_model().model_json_schema(),
            common.SIMULATE,
            budget=common.mapper_budget,
            active=active,
        )
        return [
            mapper,
            *(
                RoleSchema(
                    TRACKER_ROLE,
                    f"consistentmi:{n}",
                    m.model_json_schema,
                    common.SIMULATE,
                    budget=tracker_budget,
                    active=active,
                )
                for n, m in tracker_schemas().items()
            ),
        ]

    def prompt_estimates(self) -> dict[str, Any]:
        return {TRACKER_ROLE: tracker_prompt}

    def card_section(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Its sessions by the stage they ended in, and its turns by action."""
        from collections import Counter

        states = common.card_rows(rows, NAME)
        actions = Counter(
            t["consistentmi"]["action"] for r in rows for t in r.get("turns") or [] if t.get("consistentmi")
        )
        ends = Counter(s.get("stage_end") for s in states)
        return {
            "record_fields": True,
            "sessions_note": "; ConsistentMI sessions carry their client profile and stages (`baseline`) and each "
            "patient turn its stage, topic, engagement and action (`turns[].consistentmi`)",
            "attribution": "Sessions played by the ConsistentMI engine follow the ConsistentMI design (Yang et al. 2025) "
            "as PatientHub runs it: stage-of-change tracking and per-turn MI action selection, in our own prompts.",
            "patients": len({(s["preparation"]["patient_id"], s["preparation"]["seed"]) for s in states}),
            "stage_end": sorted(ends.items(), key=lambda kv: (-kv[1], str(kv[0]))),
            "actions": sorted(actions.items(), key=lambda kv: (-kv[1], kv[0])),
        }


ENGINE = ConsistentMIEngine()

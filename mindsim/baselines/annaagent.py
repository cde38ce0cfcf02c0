"""The AnnaAgent patient engine (Wang et al., 2025, ACL Findings; as a baseline: PatientAct §4.2 Table 2, run
through PatientHub; docs/baselines.md "AnnaAgent"): a seeker with a short profile whose emotion, chief
complaint and memory of earlier sessions change turn by turn (`annaagent_patient`, `annaagent_data`).

Our profile feeds AnnaAgent's seeker (`fixed_fields`, `map_messages`, the session's `situation` and memory):
- without a model: age (persona), gender (demographics), marital status (demographics' relationship),
  occupation (persona), symptoms (the presenting summary and, on PatientAct-shaped profiles, its impact list);
- one structured call (`baseline_mapper`, once per patient, checkpointed like the other baselines'): the
  current status, a few example statements, the speaking style and the complaint chain (3-7 stages);
- per session: the situation is the session's scenario; the previous session's exchange (`carry`) and the
  running memory the harness keeps (AnnaAgent's case report) are what recall reads.
The per-turn control calls go to the `annaagent_modulator` role (falls back to the patient's binding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.budget import PromptSize, RoleSchema, StageBudget, fill_text, largest_instance, messages_tokens
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindsim.baselines import annaagent_data as mech
from mindsimkit.mindsim.baselines import annaagent_patient as seeker
from mindsimkit.mindsim.baselines import common
from mindsimkit.mindsim.engine_names import recipe_runs
from mindsimkit.mindsim.patient_engines.base import PatientEngine

NAME = "annaagent"
SYSTEM_TEMPLATE = "baselines/annaagent_system.jinja2"
MAP_TEMPLATE = "baselines/annaagent_map.jinja2"
MODULATOR_ROLE = "annaagent_modulator"
MODULATOR_KEY = "modulator"
Line = Annotated[str, Field(min_length=3, max_length=200)]
Trait = Annotated[str, Field(min_length=2, max_length=60)]


def _words(code: str) -> str:
    return code.replace("_", " ")


def fixed_fields(profile: Any) -> dict[str, Any]:
    """The seeker's profile fields our profile carries, rendered without a model. `age` stays a number: every
    baseline's preparation shares one column of the sessions table, where MindEval's age is a number too."""
    if profile.situation_profile is not None:
        return situation_fields(profile.situation_profile)
    persona, demo, presenting = profile.persona, profile.demographics, profile.formulation.presenting
    symptoms = " ".join([presenting.summary.strip(), *(f"{i.rstrip('.')}." for i in presenting.impact)])
    return {
        "age": persona.age,
        "gender": _words(demo.gender),
        "marital_status": _words(demo.relationship),
        "occupation": _words(persona.occupation),
        "symptoms": symptoms,
    }


def situation_fields(record: Any) -> dict[str, Any]:
    """The same fields from a situation-seeded profile (PatientAct's Table 2 runs AnnaAgent on the paper's
    situations): the scaffold's age range (its middle year), the generated demographics, and the situation with the
    presenting problem's observable impact as the symptoms."""
    d, (low, high) = record.profile.demographics, record.scaffold.age_range
    impact = record.profile.problem_formulation.presenting_problem.impact
    return {
        "age": (low + high) // 2,
        "gender": _words(d.gender),
        "marital_status": _words(d.marital_status),
        "occupation": d.occupation,
        "symptoms": " ".join([record.situation.strip(), *(f"{i.rstrip('.')}." for i in impact)]),
    }


def _bounds() -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    d = mech.data()
    return d["statements"], d["style_traits"], d["complaint_chain"]


def map_model() -> type[BaseModel]:
    """What the mapper writes; the list lengths are the data file's."""
    statements, style, chain = _bounds()
    return create_model(
        "AnnaAgentMap",
        __config__=ConfigDict(extra="forbid"),
        status=(str, Field(min_length=20, max_length=500, description="How the client is doing now, in 2-4 sentences")),
        statements=(
            list[Line],
            Field(
                min_length=statements["min"],
                max_length=statements["max"],
                description="Things the client might say in a session",
            ),
        ),
        style=(
            list[Trait],
            Field(min_length=style["min"], max_length=style["max"], description="How the client talks"),
        ),
        complaint_chain=(
            list[Line],
            Field(
                min_length=chain["min_stages"],
                max_length=chain["max_stages"],
                description="The chief complaint's stages, first as brought, in order",
            ),
        ),
    )


def map_messages(profile: Any, fixed: dict[str, Any]) -> list[dict[str, str]]:
    statements, style, chain = _bounds()
    return [
        {
            "role": "user",
            "content": render(
                MAP_TEMPLATE,
                persona=common.who(profile),
                writer_brief=profile.writer_brief,
                statements=statements,
                style=style,
                chain=chain,
                **fixed,
            ),
        }
    ]


async def seeker_profile(profile: Any, seed: int, client: Any, config: Any) -> common.BaselinePreparation:
    """The patient's AnnaAgent profile: our fields and the mapper's."""
    fixed = fixed_fields(profile)
    b = config.baselines
    sampling = {"max_tokens": b.anna_map_max_tokens} if b.anna_map_max_tokens else {}
    mapped = await client.structured(
        map_messages(profile, fixed), map_model(), max_attempts=b.mapper_attempts, **sampling
    )
    filled = mapped.model_dump()
    return common.BaselinePreparation(
        engine=NAME,
        patient_id=profile.profile_id,
        seed=seed,
        profile={**fixed, **filled},
        filled=sorted(filled),
        mapper=client.describe(),
        prompt={MAP_TEMPLATE: template_hash(MAP_TEMPLATE)},
    )


def system_prompt(prep: common.BaselinePreparation, talk: Any) -> str:
    """The session's system prompt: the profile, the session's situation (its scenario) and the role's rules.
    The running memory is not in it: earlier sessions reach the seeker only through recall."""
    return render(
        SYSTEM_TEMPLATE,
        profile=prep.profile,
        situation=talk.inp.scenario.event,
        time_context=talk.inp.plan.time_context,
    )


@dataclass(frozen=True)
class Carried:
    """What the previous session of the arc left for recall: its index and its plain exchange."""

    session_index: int
    exchange: list[dict[str, str]]


def earlier_of(carried: Carried | None, memory: list[str]) -> seeker.Earlier | None:
    from mindsimkit.mindsim.memory import format_log

    if carried is None:
        return None
    return seeker.Earlier(
        carried.session_index, seeker.conversation_text(carried.exchange), format_log(memory) if memory else ""
    )


def _budget(key: str) -> Any:
    def budget(recipe: Any) -> StageBudget:
        from mindsimkit.mindsim.config import BaselinesConfig

        section = (getattr(recipe, "simulation", None) or {}).get("baselines") or {}
        explicit = key in section
        value = section[key] if explicit else BaselinesConfig.model_fields[key].default
        return StageBudget(value, f"simulation.baselines.{key}", explicit)

    return budget


def _active(recipe: Any) -> bool:
    return recipe_runs(recipe, NAME)


def worst_profile(inp: Any, sz: Any) -> dict[str, Any]:
    """The seeker's profile at its largest for the recipe: the worst-case symptoms and every mapped field full."""
    from mindsimkit.mindsim.stage_sizes import session_fixtures

    fx = session_fixtures(inp, sz)
    presenting = fx["f"].presenting
    mapped = largest_instance(map_model().model_json_schema())
    return {
        "age": 100,
        "gender": "prefer not to say",
        "marital_status": "separated or divorced",
        "occupation": fill_text(60),
        "symptoms": " ".join([presenting.summary, *presenting.impact]),
        **mapped,
    }


def modulator_prompt(inp: Any, sz: Any) -> PromptSize:
    """The modulator's largest prompt: the emotion and switch calls over a whole session at the reply budgets,
    the memory check, and recall over a previous session as long and the running memory at its budget."""
    from mindsimkit.mindsim.memory import format_log
    from mindsimkit.mindsim.stage_sizes import session_fixtures

    fx = session_fixtures(inp, sz)
    profile = worst_profile(inp, sz)
    # Typically a turn's calls read the session so far: half of it on average.
    shown = fx["transcript"][: len(fx["transcript"]) // 2 + 1] if inp.typical else fx["transcript"]
    conversation = seeker.conversation_text(shown)
    message = next((m["content"] for m in fx["transcript"] if m["role"] == "assistant"), fill_text(400))
    chain = profile["complaint_chain"]
    parts = {
        "emotion inference": messages_tokens(seeker.emotion_messages(profile, conversation), sz),
        "complaint switch": messages_tokens(seeker.switch_messages(chain, 1, conversation), sz),
        "memory check": messages_tokens(seeker.check_messages(message), sz),
        "recall": messages_tokens(seeker.recall_messages(message, conversation, format_log(fx["memory"])), sz),
    }
    # Typical: the two calls every client turn makes (the memory check and recall come only after a first session).
    every_turn = (parts["emotion inference"] + parts["complaint switch"]) / 2
    return PromptSize(MODULATOR_ROLE, round(every_turn) if inp.typical else max(parts.values()), parts)


class AnnaAgentEngine(common.PromptedBaselineEngine, PatientEngine):
    name = NAME
    description = "AnnaAgent (Wang et al. 2025): emotion modulation, a complaint chain and multi-session memory"
    what = "seeker profile"
    system_template, map_template = SYSTEM_TEMPLATE, MAP_TEMPLATE
    roles = {common.MAPPER_ROLE: common.MAPPER_KEY, MODULATOR_ROLE: MODULATOR_KEY}
    session_client = True  # a seeker in a counselling session
    reads_situations = True  # PatientAct's Table 2 runs it on the situation-seeded profiles (`situation_fields`)

    def system_prompt(self, prep: Any, talk: Any) -> str:
        return system_prompt(prep, talk)

    def build(self, profile: Any, seed: int, client: Any, config: Any) -> Any:
        return seeker_profile(profile, seed, client, config)

    def participant(self, talk: Any) -> Any:
        prep = talk.arc.preparation
        if prep is None or prep.engine != self.name:
            raise ValueError("an AnnaAgent session needs the patient's seeker profile (its preparation)")
        return seeker.AnnaAgentPatient(
            client=talk.arc.roles.patient,
            modulator=talk.arc.roles.get(MODULATOR_KEY),
            config=talk.config,
            history=[{"role": "system", "content": self.system_prompt(prep, talk)}],
            profile=prep.profile,
            chain=list(prep.profile["complaint_chain"]),
            rng=mech.session_rng(talk.sid),
            earlier=earlier_of(talk.inp.carried, talk.inp.memory),
        )

    def carry(self, plan: Any, previous: Any, config: Any) -> Carried | None:
        # PatientHub starts every session at the chain's first stage; what carries over is the memory.
        return None if previous is None else Carried(previous.session_index, previous.transcript())

    def record_fields(self, talk: Any) -> dict[str, Any]:
        from mindsimkit.mindsim.records import AnnaAgentSession

        patient = talk.patient
        states = patient.states
        earlier = patient.earlier
        return {
            **super().record_fields(talk),
            "annaagent": AnnaAgentSession(
                complaint_chain=patient.chain,
                stage_start=patient.stage_start,
                stage_end=patient.stage,
                earlier_session=earlier.session_index if earlier else None,
                perturbed=sum(s.perturbed for s in states),
                memory_used=sum(s.memory_used for s in states),
            ),
        }

    def prompt_names(self) -> list[str]:
        return [
            SYSTEM_TEMPLATE,
            MAP_TEMPLATE,
            seeker.REMINDER_TEMPLATE,
            seeker.EMOTION_TEMPLATE,
            seeker.COMPLAINT_TEMPLATE,
            seeker.CHECK_TEMPLATE,
            seeker.RECALL_TEMPLATE,
        ]

    def mapper_messages(self, profile: Any) -> list[dict[str, str]]:
        return map_messages(profile, fixed_fields(profile))

    def fixed_fields(self, profile: Any) -> dict[str, Any]:
        return fixed_fields(profile)

    def role_schemas(self) -> list[RoleSchema]:
        step = _budget("anna_max_tokens")
        return [
            RoleSchema(
                common.MAPPER_ROLE,
                "annaagent:AnnaAgentMap",
                lambda: map_model().model_json_schema(),
                common.SIMULATE,
                budget=_budget("anna_map_max_tokens"),
                active=_active,
            ),
            RoleSchema(
                MODULATOR_ROLE,
                "annaagent:AnnaEmotion",
                lambda: seeker.emotion_model().model_json_schema(),
                common.SIMULATE,
                budget=step,
                active=_active,
            ),
            RoleSchema(
                MODULATOR_ROLE,
                "annaagent:ComplaintSwitch",
                seeker.ComplaintSwitch.model_json_schema,
                common.SIMULATE,
                budget=step,
                active=_active,
            ),
            RoleSchema(
                MODULATOR_ROLE,
                "annaagent:MemoryCheck",
                seeker.MemoryCheck.model_json_schema,
                common.SIMULATE,
                budget=step,
                active=_active,
            ),
        ]

    def prompt_estimates(self) -> dict[str, Any]:
        return {MODULATOR_ROLE: modulator_prompt}

    def card_section(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Emotion shares over its client turns, how often the draw perturbed them, how far the chains moved and
        how often earlier sessions were recalled."""
        from collections import Counter

        turns = [t["annaagent"] for r in rows for t in r.get("turns") or [] if t.get("annaagent")]
        emotions = Counter(t["emotion"] for t in turns)
        sessions = [r["annaagent"] for r in rows if r.get("annaagent")]
        checked = [t for t in turns if t["memory_checked"]]
        return {
            "record_fields": True,
            "sessions_note": "; AnnaAgent sessions carry its seeker profile (`baseline`), its complaint chain "
            "(`annaagent`) and per turn its emotion, stage and memory use (`turns[].annaagent`)",
            "attribution": "Sessions played by the AnnaAgent engine follow the AnnaAgent design (Wang et al. 2025): "
            "emotion modulation over GoEmotions, a complaint chain and multi-session memory, in our "
            "own prompts.",
            "annaagent_turns": len(turns),
            "emotion_share": [
                (e, n, n / len(turns)) for e, n in sorted(emotions.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "perturbed": sum(t["perturbed"] for t in turns),
            "stages_moved": sum(s["stage_end"] - s["stage_start"] for s in sessions),
            "memory_checked": len(checked),
            "memory_used": sum(t["memory_used"] for t in checked),
        }


ENGINE = AnnaAgentEngine()

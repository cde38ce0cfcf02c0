"""The MindEval patient engine (Pombal et al., 2025; as a baseline: MindEval2/MindSim §4.3 and App. E;
docs/baselines.md): a prompted "member" whose system prompt lists the attributes of MindEval's member profile,
its backstory and its goal for the conversation, followed by MindEval's rules for sounding like a person.

The member profile is rendered from ours (`member_profile`):
- from our fields: sex, gender identity, age, education, profession, employment status, relationship status,
  living situation, region (persona and derived demographics, phrased as `mindsim/data/baselines/mindeval.yaml`
  says), the conversation style (our verbosity and frustration knobs' own sentences, `mindsim/data/style.yaml`; MindEval's language rules fix the register), the program goal
  (our presenting goal) and the backstory (our second-person case summary, which withholds the core belief as
  MindSim's patient prompt does);
- one structured call (`baseline_mapper`) for what ours does not carry: a first name, sexual orientation,
  race, thought process, general outlook, recent mood, financial situation, siblings, exercise, sleep,
  attitude toward mindfulness, and the depressive and anxious symptom levels (closed sets where MindEval has
  them).
That call is the per-patient preparation, checkpointed once.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.budget import RoleSchema
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindsim.baselines import common
from mindsimkit.mindsim.engine_names import recipe_runs
from mindsimkit.mindsim.patient_engines.base import PatientEngine

NAME = "mindeval"
SYSTEM_TEMPLATE = "baselines/mindeval_system.jinja2"
MAP_TEMPLATE = "baselines/mindeval_map.jinja2"


def data() -> dict[str, Any]:
    return common.load_data("mindeval")


def map_model() -> type[BaseModel]:
    d = data()

    def short(n: int, desc: str) -> tuple[type, Any]:
        return (str, Field(min_length=1, max_length=n, description=desc))

    def one_of(key: str, desc: str) -> tuple[Any, Any]:
        return (Literal[tuple(d[key])], Field(description=desc))

    return create_model(
        "MindEvalMap",
        __config__=ConfigDict(extra="forbid"),
        name=short(30, "First name (from the persona if it gives one)"),
        sexual_orientation=one_of("sexual_orientations", "Sexual orientation"),
        race=one_of("races", "Race or ethnicity, as closest in this list"),
        thought_process=one_of("thought_processes", "How their thinking runs in conversation"),
        general_outlook=short(160, "Their general outlook on life, one sentence"),
        recent_mood=one_of("moods", "Their mood lately"),
        financial_situation=short(120, "Their financial situation, one phrase"),
        siblings=short(60, "Their siblings, one phrase"),
        exercise=short(100, "How much they exercise, one phrase"),
        sleep_quality=short(100, "How they sleep, one phrase"),
        attitude_towards_mindfulness=short(100, "Their attitude toward mindfulness, one phrase"),
        depressive_symptoms=one_of("depressive_symptoms", "Level of depressive symptoms"),
        anxious_symptoms=one_of("anxious_symptoms", "Level of anxious symptoms"),
    )


def _render(kind: str, value: str, pid: str) -> str:
    table = data()["render"][kind]
    if value not in table:
        raise ConfigError(
            f"profile {pid}: {kind} '{value}' has no MindEval phrasing in mindsim/data/baselines/mindeval.yaml "
            f"(known: {', '.join(table)})"
        )
    return str(table[value])


def conversation_style(profile: Any) -> str:
    """Our style knobs' sentences (verbosity, frustration), in place of MindEval's sampled paragraph. Our register
    knob is left out: MindEval's own language rules fix the register (normal capitals, commas and full stops),
    and the baseline keeps its rules."""
    from mindsimkit.mindsim.prompting import load_style_data, style_knob

    s, pid, st = profile.style, profile.profile_id, load_style_data()
    return " ".join(
        [
            style_knob(st.verbosity, s.verbosity, "verbosity", pid).line,
            style_knob(st.frustration_reactivity, s.frustration_reactivity, "frustration_reactivity", pid).line,
        ]
    )


def fixed_fields(profile: Any) -> dict[str, Any]:
    """The member-profile fields our profile carries, rendered without a model."""
    p, d, pid = profile.persona, profile.demographics, profile.profile_id
    region = ", ".join(x for x in (p.city, p.state) if x) or "not recorded"
    return {
        "sex": p.sex,
        "gender_identity": _render("gender_identity", d.gender, pid),
        "age": p.age,
        "education": p.education_level.replace("_", " "),
        "profession": p.occupation.replace("_", " "),
        "employment_status": _render("employment", d.employment, pid),
        "relationship_status": _render("relationship", d.relationship, pid),
        "living_situation": _render("living_situation", d.living_situation, pid),
        "region": region,
        "conversation_style": conversation_style(profile),
        "program_goal": profile.goal,
        "member_narrative": profile.case_summary,
    }


def map_messages(profile: Any, fixed: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": render(
                MAP_TEMPLATE, persona=profile.persona.persona, writer_brief=profile.writer_brief, fixed=fixed
            ),
        }
    ]


async def member_profile(profile: Any, seed: int, client: Any, config: Any) -> common.BaselinePreparation:
    fixed = fixed_fields(profile)
    mapped = (await common.map_fields(client, map_messages(profile, fixed), map_model(), config)).model_dump()
    return common.BaselinePreparation(
        engine=NAME,
        patient_id=profile.profile_id,
        seed=seed,
        profile={**fixed, **mapped},
        filled=sorted(mapped),
        mapper=client.describe(),
        prompt={MAP_TEMPLATE: template_hash(MAP_TEMPLATE)},
    )


def system_prompt(prep: common.BaselinePreparation, talk: Any) -> str:
    return render(SYSTEM_TEMPLATE, m=prep.profile, **common.session_context(talk))


class MindEvalEngine(common.PromptedBaselineEngine, PatientEngine):
    name = NAME
    description = "MindEval (Pombal et al. 2025): a prompted member profile with a backstory and a goal"
    what = "member profile"
    system_template, map_template = SYSTEM_TEMPLATE, MAP_TEMPLATE

    def system_prompt(self, prep: Any, talk: Any) -> str:
        return system_prompt(prep, talk)

    def mapper_messages(self, profile: Any) -> list[dict[str, str]]:
        return map_messages(profile, fixed_fields(profile))

    def fixed_fields(self, profile: Any) -> dict[str, Any]:
        return fixed_fields(profile)

    def build(self, profile: Any, seed: int, client: Any, config: Any) -> Any:
        return member_profile(profile, seed, client, config)

    def check_profiles(self, profiles: Any) -> None:
        from mindsimkit.mindcore.errors import InputError

        for p in profiles:
            try:
                fixed_fields(p)
            except ConfigError as exc:
                raise InputError(
                    f"{exc}; add the phrasing there or drop mindeval from simulation.patient_engine"
                ) from exc

    def role_schemas(self) -> list[RoleSchema]:
        return [
            RoleSchema(
                common.MAPPER_ROLE,
                "mindeval:MindEvalMap",
                lambda: map_model().model_json_schema(),
                common.SIMULATE,
                budget=common.mapper_budget,
                active=lambda recipe: recipe_runs(recipe, NAME),
            )
        ]

    def card_section(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Its patients by the symptom levels the mapper gave them."""
        from collections import Counter

        states = common.card_rows(rows, NAME)
        per_patient = {
            (r["preparation"]["patient_id"], r["preparation"]["seed"]): r["preparation"]["profile"] for r in states
        }
        levels = Counter((m.get("depressive_symptoms"), m.get("anxious_symptoms")) for m in per_patient.values())
        return {
            "record_fields": True,
            "sessions_note": "; MindEval sessions carry their member profile (`baseline`)",
            "attribution": "Sessions played by the MindEval engine follow the MindEval patient design (Pombal et al. "
            "2025): a member profile, backstory and goal, in our own prompt.",
            "patients": len(per_patient),
            "symptom_levels": [
                (dep, anx, n) for (dep, anx), n in sorted(levels.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
        }


ENGINE = MindEvalEngine()

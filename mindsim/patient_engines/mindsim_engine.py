"""The MindSim patient engine (MindEval2/MindSim §4.2, Appendix D): the move-committing patient of
`mindsim.patient` behind the `PatientEngine` interface.

Each session's patient gets the system prompt of `patient/system.jinja2` and a random source seeded from the
session id (so a rerun draws the same writing cues); it commits a move through `commit_move` before every
reply and may update its agenda. It prepares nothing per patient and carries nothing between sessions beyond
the running memory every engine shares. Its session ids keep the key they had before patient engines
existed, so older run folders resume.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from mindsimkit.mindcore.budget import RoleSchema
from mindsimkit.mindcore.client import tool_choice_schema
from mindsimkit.mindcore.types import ToolSpec
from mindsimkit.mindsim.engine_names import recipe_runs
from mindsimkit.mindsim.patient_engines.base import PatientEngine, TalkStart

SIMULATE = frozenset({"simulate"})


def commit_tool_schema(preset: str | None = None) -> dict[str, Any]:
    """`commit_move` as the non-native tool path sends it, with every move of the vocabulary the engine plays
    under `preset` (each archetype's enum is a subset, so this is the longest)."""
    from mindsimkit.mindsim.guard import commit_move_model
    from mindsimkit.mindsim.patient import COMMIT_DESCRIPTION
    from mindsimkit.mindsim.reference import vocabulary_for

    vocab = vocabulary_for(preset or "ours")
    model = commit_move_model(list(vocab.moves), list(vocab.depth_moves))
    return tool_choice_schema([ToolSpec.from_model("commit_move", COMMIT_DESCRIPTION, model)], False)


def agenda_tool_schema() -> dict[str, Any]:
    from mindsimkit.mindsim.guard import TodoAdd, TodoComplete
    from mindsimkit.mindsim.patient import ADD_DESCRIPTION, COMPLETE_DESCRIPTION

    tools = [
        ToolSpec.from_model("complete_todo", COMPLETE_DESCRIPTION, TodoComplete),
        ToolSpec.from_model("add_todo", ADD_DESCRIPTION, TodoAdd),
    ]
    return tool_choice_schema(tools, True)


def _preset(recipe: Any) -> str | None:
    """The preset the recipe runs this engine under (None when its simulation section does not read)."""
    from mindsimkit.mindsim.config import SimulationConfig

    try:
        return SimulationConfig.from_section(getattr(recipe, "simulation", None)).preset_for("mindsim")
    except Exception:  # an invalid section is reported by the config check itself; size with ours meanwhile
        return None


class MindSimEngine(PatientEngine):
    name = "mindsim"
    description = "MindEval2/MindSim's patient: a move committed through commit_move before every reply"
    legacy_session_ids = True
    # Style, case summary, writer brief and goal are all it reads: it plays imported profiles too.
    reads_layers = False
    calls_tools = True

    def participant(self, talk: TalkStart) -> Any:
        from mindsimkit.mindsim.patient import Patient
        from mindsimkit.mindsim.prompting import patient_system_prompt, style_cues

        arc, inp, config = talk.arc, talk.inp, talk.config
        profile, plan = arc.profile, inp.plan
        p_prompt = patient_system_prompt(
            profile, arc.vocab, plan, inp.scenario, talk.agenda, inp.memory, agenda_plain=config.agenda_plain
        )
        rng = random.Random(int.from_bytes(hashlib.sha256(talk.sid.encode()).digest()[:8], "big"))
        return Patient(
            client=arc.roles.patient,
            vocab=arc.vocab,
            archetype=profile.style.archetype,
            max_depth=plan.max_depth,
            style_cues=style_cues(profile),
            agenda=talk.agenda,
            config=config,
            rng=rng,
            history=[{"role": "system", "content": p_prompt}],
        )

    def record_fields(self, talk: Any) -> dict[str, Any]:
        # The tool definitions as offered (OpenAI format), kept as JSON text: a parquet struct column would
        # give every schema the union of all schemas' keys, and `"default": null` is a value here.
        return {"patient_tools": json.dumps([t.openai() for t in talk.patient.tools], ensure_ascii=False)}

    def prompt_names(self) -> list[str]:
        from mindsimkit.mindsim.prompting import PATIENT_TEMPLATE

        return [PATIENT_TEMPLATE]

    def role_schemas(self) -> list[RoleSchema]:
        # commit_move and the agenda tools are this patient's; an engine whose patient only speaks has none.
        def active(recipe: Any) -> bool:
            return recipe_runs(recipe, self.name)

        return [
            RoleSchema(
                "patient",
                "tool_choice:commit_move",
                commit_tool_schema,
                SIMULATE,
                active=active,
                schema_for=lambda recipe: commit_tool_schema(_preset(recipe)),
            ),
            RoleSchema("patient", "tool_choice:agenda", agenda_tool_schema, SIMULATE, active=active),
        ]

    def card_section(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        # The card's own text describes this patient; the section only says it played in the run.
        return {"record_fields": False, "sessions": len(rows)}


ENGINE = MindSimEngine()

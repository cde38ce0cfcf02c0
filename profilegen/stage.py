"""What the profile stage declares to preflight (`mindcore.stages`): it calls `profile_writer` and `screener`;
the writer answers with a formulation and the screener with a verdict, each checked against its token budget;
and each role's largest prompt, estimated from the shipped synthetic personas (the longest anchored persona,
the largest formulation, the most faults) for the context check. Found through the `mindsim.stages` entry
point; `worst_profile_parts` is also what the simulator's estimates start from.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from mindsimkit.mindcore.budget import PromptSize, RoleSchema, messages_tokens, register_prompt_estimate, register_role_schema
from mindsimkit.mindcore.stages import Stage, register_stage, role_use

PROFILES = frozenset({"profiles"})
# Personas drawn from the shipped sample to find the longest prompt.
ESTIMATE_PERSONAS = 40


def profile_shape(recipe: Any) -> Any:
    from mindsimkit.profilegen.config import profiles_config

    return profiles_config(recipe).shape


def formulation_schema(recipe: Any = None) -> dict[str, Any]:
    from mindsimkit.profilegen.formulation import draft_model

    shape = profile_shape(recipe)
    return draft_model(shape.text_scale, causal=bool(shape.causal_checks), patientact=shape.patientact).model_json_schema()


def demographics_schema(recipe: Any = None) -> dict[str, Any]:
    """The demographics reviser's answer with every value offered (its largest form)."""
    from mindsimkit.profilegen.demographics import REVISABLE, field_values, revision_model

    return revision_model(tuple((k, field_values(k)) for k in REVISABLE)).model_json_schema()


def screen_schema(recipe: Any = None) -> dict[str, Any]:
    from mindsimkit.profilegen.screen import verdict_model

    return verdict_model(profile_shape(recipe).screen_max_faults).model_json_schema()


def worst_profile_parts(recipe: Any) -> tuple[Any, Any, list[Any]]:
    from mindsimkit.profilegen.config import profiles_config

    cfg = profiles_config(recipe)
    return _profile_parts(getattr(recipe, "seed", 0), cfg.rates, cfg.patientact_shape)


@lru_cache(maxsize=4)
def _profile_parts(seed: int, rates: str | None, patientact: bool = False) -> tuple[Any, Any, list[Any]]:
    """The longest anchored persona of the shipped sample, the largest formulation, the most faults."""
    from mindsimkit.mindcore.budget import largest_instance
    from mindsimkit.profilegen.anchors import anchor_personas
    from mindsimkit.profilegen.formulation import draft_model, to_formulation, writer_messages
    from mindsimkit.profilegen.personas import load_personas
    from mindsimkit.profilegen.rates import load_rates
    from mindsimkit.profilegen.schemas import Fault
    from mindsimkit.profilegen.screen import JudgeVerdict

    personas = load_personas("synthetic", ESTIMATE_PERSONAS, seed)
    rows = anchor_personas(personas.rows, load_rates(rates), seed)
    row = max(rows, key=lambda r: sum(len(m["content"]) for m in writer_messages(r, patientact=patientact)))
    draft = draft_model(patientact=patientact)
    f = to_formulation(draft.model_validate(largest_instance(draft.model_json_schema())))
    verdict = largest_instance(JudgeVerdict.model_json_schema())
    faults = [Fault(quote=x["quote"], reason=x["reason"], severity="serious", source="judge") for x in verdict["faults"]]
    return row, f, faults


def _writer_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.profilegen.formulation import revision_messages, writer_messages
    from mindsimkit.profilegen.screen import causal_faults

    shape = profile_shape(inp.recipe)
    causal, pa = shape.causal_checks, shape.patientact
    row, f, faults = worst_profile_parts(inp.recipe)
    faults = faults + (causal_faults(f) if causal else [])
    first = messages_tokens(writer_messages(row, causal=causal, patientact=pa), sz)
    revision = messages_tokens(revision_messages(row, f, faults, causal=causal, patientact=pa), sz)
    parts = {"first draft": first, "revision": revision}
    if pa:  # the demographics revision (PatientAct shape) is the writer's call too
        from mindsimkit.profilegen.demographics import REVISABLE, field_values
        from mindsimkit.profilegen.demographics import revision_messages as demographics_messages
        from mindsimkit.profilegen.conflicts import Conflict

        conflicts = [Conflict(x, frozenset(REVISABLE)) for x in faults]
        parts["demographics revision"] = messages_tokens(
            demographics_messages(row, f, conflicts, {k: field_values(k) for k in REVISABLE}), sz)
    return PromptSize("profile_writer", max(parts.values()), parts,
                      "personas from the shipped synthetic sample; the revision carries the largest draft and six faults")


def _screener_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.profilegen.render import writer_brief
    from mindsimkit.profilegen.screen import judge_messages

    row, f, _ = worst_profile_parts(inp.recipe)
    shape = profile_shape(inp.recipe)
    n = messages_tokens(judge_messages(writer_brief(row, f), causal=shape.causal_checks, patientact=shape.patientact), sz)
    return PromptSize("screener", n, {"brief of the largest formulation": n})


def register() -> None:
    register_stage(Stage("profiles", lambda recipe, engines: [role_use(engines, "profile_writer"),
                                                              role_use(engines, "screener")]))
    register_role_schema(RoleSchema("profile_writer", "formulation", formulation_schema, PROFILES,
                                    schema_for=formulation_schema))
    register_role_schema(RoleSchema("screener", "screen", screen_schema, PROFILES, schema_for=screen_schema))
    register_role_schema(RoleSchema("profile_writer", "demographics", demographics_schema, PROFILES,
                                    active=lambda recipe: profile_shape(recipe).patientact))
    register_prompt_estimate("profile_writer", _writer_prompt)
    register_prompt_estimate("screener", _screener_prompt)

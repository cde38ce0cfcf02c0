"""What the profile stage declares to preflight (`mindcore.stages`): it calls `profile_writer` and `screener`;
the writer answers with a formulation and the screener with a verdict, each checked against its token budget;
and each role's largest prompt, estimated from the shipped synthetic personas (the longest anchored persona,
the largest formulation, the most faults) for the context check. Found through the `mindsim.stages` entry
point; `worst_profile_parts` is also what the simulator's estimates start from.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, TypeVar

from pydantic import BaseModel

from mindsimkit.mindcore.budget import (
    PromptSize,
    RoleSchema,
    messages_tokens,
    register_prompt_estimate,
    register_role_schema,
)
from mindsimkit.mindcore.stages import Stage, register_stage, role_use

PROFILES = frozenset({"profiles"})
M = TypeVar("M", bound=BaseModel)
# Personas drawn from the shipped sample to find the longest prompt.
ESTIMATE_PERSONAS = 40


def profile_shape(recipe: Any) -> Any:
    from mindsimkit.profilegen.config import profiles_config

    return profiles_config(recipe).shape


def formulation_schema(recipe: Any = None) -> dict[str, Any]:
    from mindsimkit.profilegen.formulation import draft_model

    shape = profile_shape(recipe)
    return draft_model(
        shape.text_scale, causal=bool(shape.causal_checks), patientact=shape.patientact, when_forms=shape.when_forms
    ).model_json_schema()


def demographics_schema(recipe: Any = None) -> dict[str, Any]:
    """The demographics reviser's answer with every value offered (its largest form)."""
    from mindsimkit.profilegen.demographics import REVISABLE, field_values, revision_model

    return revision_model(tuple((k, field_values(k)) for k in REVISABLE)).model_json_schema()


def cycle_schema(recipe: Any = None) -> dict[str, Any]:
    """A maintenance cycle added to a PatientAct-shaped draft whose labels repeated (every label offered)."""
    from mindsimkit.profilegen.formulation import cycle_model

    shape = profile_shape(recipe)
    return cycle_model(shape.text_scale, bool(shape.causal_checks)).model_json_schema()


def history_schema(recipe: Any = None) -> dict[str, Any]:
    """A personal history added to a PatientAct-shaped draft whose labels repeated (every label offered)."""
    from mindsimkit.profilegen.formulation import history_model

    shape = profile_shape(recipe)
    return history_model(
        shape.text_scale, bool(shape.causal_checks), True, when_forms=shape.when_forms
    ).model_json_schema()


def screen_schema(recipe: Any = None) -> dict[str, Any]:
    from mindsimkit.profilegen.screen import verdict_model

    return verdict_model(profile_shape(recipe).screen_max_faults).model_json_schema()


def worst_profile_parts(recipe: Any) -> tuple[Any, Any, list[Any]]:
    from mindsimkit.profilegen.config import profiles_config

    cfg = profiles_config(recipe)
    return _profile_parts(getattr(recipe, "seed", 0), cfg.rates, cfg.patientact_shape, bool(cfg.shape.causal_checks))


def profile_parts(inp: Any) -> tuple[Any, Any, list[Any]]:
    """The profile an estimate builds on: the worst case (`worst_profile_parts`), or for a typical estimate
    (`EstimateInputs.typical`) the anchored persona of median prompt length and the largest formulation the
    recipe's writer may write (its `text_scale`), since a plan's expected value wants a likely prompt."""
    from mindsimkit.profilegen.config import profiles_config

    if not getattr(inp, "typical", False):
        return worst_profile_parts(inp.recipe)
    cfg = profiles_config(inp.recipe)
    shape = cfg.shape
    return _typical_parts(
        getattr(inp.recipe, "seed", 0), cfg.rates, cfg.patientact_shape, shape.text_scale, bool(shape.causal_checks)
    )


@lru_cache(maxsize=4)
def _typical_parts(
    seed: int, rates: str | None, patientact: bool, text_scale: float, causal: bool
) -> tuple[Any, Any, list[Any]]:
    ranked = sorted(_sample_rows(seed, rates), key=lambda r: _writer_chars(r, patientact))
    faults = _profile_parts(seed, rates, patientact, causal)[2]
    return ranked[len(ranked) // 2], largest_formulation(text_scale, causal, patientact), faults


def _writer_chars(row: Any, patientact: bool) -> int:
    """How long the writer's prompt for an anchored persona is, in characters (what ranks the personas)."""
    from mindsimkit.profilegen.formulation import writer_messages

    return sum(len(m["content"]) for m in writer_messages(row, patientact=patientact))


def largest_formulation(text_scale: float, causal: bool, patientact: bool) -> Any:
    """The formulation at every limit of the writer's schema (the largest instance of its draft)."""
    from mindsimkit.mindcore.budget import largest_instance
    from mindsimkit.profilegen.formulation import draft_model, to_formulation

    draft = draft_model(text_scale, causal=causal, patientact=patientact)
    return to_formulation(draft.model_validate(largest_instance(draft.model_json_schema())))


@lru_cache(maxsize=4)
def _sample_rows(seed: int, rates: str | None) -> list[Any]:
    """Anchored personas drawn from the shipped sample, the estimates' population."""
    from mindsimkit.profilegen.anchors import anchor_personas
    from mindsimkit.profilegen.personas import load_personas
    from mindsimkit.profilegen.rates import load_rates

    personas = load_personas("synthetic", ESTIMATE_PERSONAS, seed)
    return list(anchor_personas(personas.rows, load_rates(rates), seed))


@lru_cache(maxsize=4)
def _profile_parts(
    seed: int, rates: str | None, patientact: bool = False, causal: bool = False
) -> tuple[Any, Any, list[Any]]:
    """The longest anchored persona of the shipped sample, the largest formulation (with the causal rules' fields
    where the recipe asks for them), the most faults."""
    from mindsimkit.mindcore.budget import largest_instance
    from mindsimkit.profilegen.schemas import Fault
    from mindsimkit.profilegen.screen import JudgeVerdict

    row = max(_sample_rows(seed, rates), key=lambda r: _writer_chars(r, patientact))
    f = largest_formulation(1.0, causal, patientact)
    verdict = largest_instance(JudgeVerdict.model_json_schema())
    faults = [
        Fault(quote=x["quote"], reason=x["reason"], severity="serious", source="judge") for x in verdict["faults"]
    ]
    return row, f, faults


def situation_prompts(recipe: Any, sz: Any) -> dict[str, int]:
    """The situation chain's prompts at their largest: every answer a prompt carries at its schema's limits, the
    longest situation and outline of the imported folder (when it is already imported), an older client (whose
    prompt adds the outline's populations note) and the validator's guidance at its most."""
    from mindsimkit.mindcore.budget import largest_instance
    from mindsimkit.profilegen import situation_chain as chain
    from mindsimkit.profilegen import situation_schemas as ss
    from mindsimkit.profilegen.config import profiles_config
    from mindsimkit.profilegen.patientact_inputs import Situation, read_inputs

    cfg = profiles_config(recipe)
    folder = cfg.situations.expanduser() if cfg.situations is not None else None
    got = read_inputs(folder) if folder is not None and folder.is_dir() else None
    situations = got.situations if got is not None else [Situation(disease_key="d", topic="t", situation="s")]
    longest = max(situations, key=lambda x: len(x.situation))
    outlines = list((got.outlines or {}).values()) if got is not None else []
    outline = max(outlines, key=lambda o: len(o.model_dump_json())) if outlines else None
    inp = chain.ChainInput(situation_id="s", situation=longest, outline=outline)

    def big(model: type[M]) -> M:
        return model.model_validate(largest_instance(model.model_json_schema()))

    problem, demo, psych = big(ss.ProblemFormulation), big(ss.SituationDemographics), big(ss.SituationPsych)
    guidance = largest_instance(ss.Validation.model_json_schema())["revision_guidance"]
    scaffold = ss.Scaffold(
        age_group="Elderly",
        age_range=(65, 120),
        gender="female",
        ethnicity="x" * 40,
        occupation_type="x" * 40,
        core_belief_theme=max(ss.shape_data()["core_belief_themes"], key=len),
        attachment_style=max(ss.shape_data()["attachment_styles"], key=len),
    )
    profile = ss.SituationProfile(demographics=demo, problem_formulation=problem, psychological_formulation=psych)
    return {
        "problem formulation": messages_tokens(chain.problem_messages(inp, scaffold, guidance), sz),
        "demographics": messages_tokens(chain.demographics_messages(inp, scaffold, problem, demo, guidance), sz),
        "psychological formulation": messages_tokens(chain.psych_messages(inp, scaffold, demo, problem, guidance), sz),
        "validation": messages_tokens(chain.validation_messages(inp, profile), sz),
    }


def _writer_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.profilegen.formulation import revision_messages, writer_messages
    from mindsimkit.profilegen.screen import causal_faults

    if from_situations(inp.recipe):
        parts = {k: v for k, v in situation_prompts(inp.recipe, sz).items() if k != "validation"}
        return PromptSize(
            "profile_writer",
            max(parts.values()),
            parts,
            "the situation chain's prompts with every answer they carry at its schema's limits",
        )
    shape = profile_shape(inp.recipe)
    causal, pa = shape.causal_checks, shape.patientact
    row, f, faults = profile_parts(inp)
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
            demographics_messages(row, f, conflicts, {k: field_values(k) for k in REVISABLE}), sz
        )
    return PromptSize(
        "profile_writer",
        max(parts.values()),
        parts,
        "personas from the shipped synthetic sample; the revision carries the largest draft and six faults",
    )


def _screener_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.profilegen.render import writer_brief
    from mindsimkit.profilegen.screen import judge_messages

    if from_situations(inp.recipe):
        n = situation_prompts(inp.recipe, sz)["validation"]
        return PromptSize("screener", n, {"validation of the largest profile": n})
    row, f, _ = profile_parts(inp)
    shape = profile_shape(inp.recipe)
    n = messages_tokens(
        judge_messages(writer_brief(row, f), causal=shape.causal_checks, patientact=shape.patientact), sz
    )
    return PromptSize("screener", n, {"brief of the largest formulation": n})


def from_situations(recipe: Any) -> bool:
    """Whether the recipe's profiles come from PatientAct situations (`profiles.source`), not personas."""
    from mindsimkit.profilegen.config import profiles_config

    return recipe is not None and profiles_config(recipe).source == "patientact-situations"


def _situation_schema(name: str) -> Any:
    def schema() -> dict[str, Any]:
        from mindsimkit.profilegen import situation_schemas as ss

        models: dict[str, type[BaseModel]] = {
            "situation_problem": ss.ProblemFormulation,
            "situation_demographics": ss.DemographicsCheck,
            "situation_psych": ss.SituationPsych,
            "situation_validation": ss.Validation,
        }
        return models[name].model_json_schema()

    return schema


def register() -> None:
    register_stage(
        Stage("profiles", lambda recipe, engines: [role_use(engines, "profile_writer"), role_use(engines, "screener")])
    )

    def personas(recipe: Any) -> bool:
        return not from_situations(recipe)

    register_role_schema(
        RoleSchema(
            "profile_writer",
            "formulation",
            formulation_schema,
            PROFILES,
            schema_for=formulation_schema,
            active=personas,
        )
    )
    register_role_schema(
        RoleSchema("screener", "screen", screen_schema, PROFILES, schema_for=screen_schema, active=personas)
    )
    for name, schema in (("demographics", demographics_schema), ("cycle", cycle_schema), ("history", history_schema)):
        register_role_schema(
            RoleSchema(
                "profile_writer",
                name,
                schema,
                PROFILES,
                schema_for=schema,
                active=lambda recipe: personas(recipe) and profile_shape(recipe).patientact,
            )
        )
    for role, name in (
        ("profile_writer", "situation_problem"),
        ("profile_writer", "situation_demographics"),
        ("profile_writer", "situation_psych"),
        ("screener", "situation_validation"),
    ):
        register_role_schema(RoleSchema(role, name, _situation_schema(name), PROFILES, active=from_situations))
    register_prompt_estimate("profile_writer", _writer_prompt)
    register_prompt_estimate("screener", _screener_prompt)

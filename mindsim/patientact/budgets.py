"""Token budgets of PatientAct's structured outputs for the preflight check (`mindcore.budget_fit`,
`mindcore.budget`): the four per-turn steps (budget `simulation.patientact.step_max_tokens`), the
psychological formulation (`formulation_max_tokens`), the decomposition (`decomposition_max_tokens`, checked
at the most pieces a profile can hold) and the LLM tag matcher (`matcher_max_tokens`, when `retrieval: llm`),
each checked against its schema's worst case, and only when the recipe runs the PatientAct engine.

`entries()` declares them; the engine hands them out as `PatientActEngine.role_schemas()`, which the
simulator's registration (`mindsim/stage.py`) reads through the engine registry (`mindsim.patient_engines.role_schemas`), so the
checker covers them without naming the engine. The defaults in `PatientActConfig` are at least each
schema's worst case, so a recipe that leaves them unset passes.
"""

from __future__ import annotations

from typing import Any, Callable

from mindsimkit.mindcore.budget import RoleSchema, StageBudget

SIMULATE = frozenset({"simulate"})
# Which role makes each call once the simulator passes PatientAct's own roles (until then: `patient`).
STEP_ROLE = "patient_appraiser"
DECOMPOSER_ROLE = "profile_decomposer"
MATCHER_ROLE = "patient_matcher"


def _pa_section(recipe: Any) -> dict[str, Any]:
    """The recipe's `simulation.patientact`, with what its preset fills in (a preset may turn calls on)."""
    from mindsimkit.mindsim.presets import apply_settings

    sim = getattr(recipe, "simulation", None) or {}
    try:
        sim = apply_settings(sim)
    except ValueError:
        pass  # the config's own check reports a bad preset
    return sim.get("patientact") or {}


def _active(recipe: Any) -> bool:
    # The engine or any of its arms (`patientact:no_tg`, ...): the arms make the same calls.
    from mindsimkit.mindsim.engine_names import recipe_runs
    from mindsimkit.mindsim.patientact import NAME

    return recipe_runs(recipe, NAME)


def _matcher_on(recipe: Any) -> bool:
    return _active(recipe) and _pa_section(recipe).get("retrieval", "lexical") == "llm"


def _matcher_schema() -> dict[str, Any]:
    from mindsimkit.mindsim.patientact.matcher import TagMatch

    return TagMatch.model_json_schema()


def _formulation_on(recipe: Any) -> bool:
    return _active(recipe) and bool(_pa_section(recipe).get("psych_formulation", True))


def _screen_on(recipe: Any) -> bool:
    return _formulation_on(recipe) and bool(_pa_section(recipe).get("psych_screen", False))


def _screen_schema() -> dict[str, Any]:
    from mindsimkit.mindsim.patientact.decompose import FormulationScreen

    return FormulationScreen.model_json_schema()


def _budget(key: str) -> Callable[[Any], StageBudget]:
    def budget(recipe: Any) -> StageBudget:
        from mindsimkit.mindsim.config import PatientActConfig

        section = _pa_section(recipe)
        explicit = key in section
        value = section[key] if explicit else PatientActConfig.model_fields[key].default
        return StageBudget(value, f"simulation.patientact.{key}", explicit)

    return budget


def _step_schema(step: str) -> Callable[[], dict[str, Any]]:
    def schema() -> dict[str, Any]:
        from mindsimkit.mindsim.patientact.participant import step_models

        return step_models()[step].model_json_schema()

    return schema


def _chunk(recipe: Any) -> int:
    from mindsimkit.mindsim.config import PatientActConfig

    return int(
        _pa_section(recipe).get("decomposition_chunk", PatientActConfig.model_fields["decomposition_chunk"].default)
    )


def _decomposition_schema(recipe: Any = None) -> dict[str, Any]:
    # One call answers for at most `decomposition_chunk` pieces, and a profile holds at most `max_pieces` of the
    # recipe's profile shape: the decomposition asks for exactly one entry per piece of its call.
    from mindsimkit.mindsim.patientact.decompose import draft_model, max_pieces
    from mindsimkit.profilegen.config import profiles_config

    patientact = profiles_config(recipe).patientact_shape if recipe is not None else False
    most = max_pieces(patientact)
    return draft_model(min(most, _chunk(recipe)) if recipe is not None else most).model_json_schema()


def _formulation_schema() -> dict[str, Any]:
    from mindsimkit.profilegen.psych import PsychFormulation

    return PsychFormulation.model_json_schema()


def entries(
    step_role: str = STEP_ROLE, decomposer_role: str = DECOMPOSER_ROLE, matcher_role: str = MATCHER_ROLE
) -> list[RoleSchema]:
    steps = [
        RoleSchema(
            step_role,
            f"patientact:{name}",
            _step_schema(name),
            SIMULATE,
            budget=_budget("step_max_tokens"),
            active=_active,
        )
        for name in ("reaction", "behaviour", "resistance", "trust")
    ]
    return [
        *steps,
        RoleSchema(
            decomposer_role,
            "patientact:PsychFormulation",
            _formulation_schema,
            SIMULATE,
            budget=_budget("formulation_max_tokens"),
            active=_formulation_on,
        ),
        RoleSchema(
            decomposer_role,
            "patientact:FormulationScreen",
            _screen_schema,
            SIMULATE,
            budget=_budget("psych_screen_max_tokens"),
            active=_screen_on,
        ),
        RoleSchema(
            decomposer_role,
            "patientact:DecompositionDraft",
            _decomposition_schema,
            SIMULATE,
            budget=_budget("decomposition_max_tokens"),
            active=_active,
            schema_for=_decomposition_schema,
        ),
        RoleSchema(
            matcher_role,
            "patientact:TagMatch",
            _matcher_schema,
            SIMULATE,
            budget=_budget("matcher_max_tokens"),
            active=_matcher_on,
        ),
    ]

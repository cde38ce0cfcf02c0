"""What the simulation stage declares to preflight (`mindcore.stages`): the roles it calls (first-scenario
writer, later-scenario writer, patient, memory compactor, its patient engines' own roles, every counsellor under test — a role name or an
engine + model binding), the structured outputs it asks of them (the scenario, and every registered patient
engine's own through `mindsim.patient_engines.role_schemas()`: the MindSim patient's `commit_move` and agenda
tool calls, as the JSON schema the non-native tool path sends; PatientAct's steps and decomposition), the reply bounds that are stage settings (patient messages, memory rewrites), each
role's largest prompt (`mindsim.stage_sizes`) and the longest session, which the judge's estimate reads.
Found through the `mindsim.stages` entry point.
"""

from __future__ import annotations

from typing import Any

from mindsimkit.mindcore.budget import RoleSchema, register_prompt_estimate, register_role_schema
from mindsimkit.mindcore.budget_fit import section_budget
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.stages import RoleUse, Stage, register_output_bound, register_sample, register_stage, role_use
from mindsimkit.mindsim.patient_engines import engine_roles
from mindsimkit.mindsim.patient_engines import prompt_estimates as engine_prompt_estimates
from mindsimkit.mindsim.patient_engines import role_schemas as engine_role_schemas
from mindsimkit.mindsim.patient_engines.mindsim_engine import agenda_tool_schema, commit_tool_schema  # noqa: F401 - re-exported

SIMULATE = frozenset({"simulate"})


def _scenario_schema(recipe: Any = None) -> dict[str, Any]:
    from mindsimkit.mindsim.scenario import draft_model

    scale = (getattr(recipe, "simulation", None) or {}).get("scenario_scale", 1.0)
    return draft_model(float(scale)).model_json_schema()


def tool_roles(scfg: Any) -> dict[str, str]:
    """The simulation's tool-calling roles and how they must call (`RoleUse.tools`). The MindSim patient commits
    each move through a tool call; the paper credits that call itself for the patient's steerability (MindEval2
    §4.2) and its authors' preflight refuses a patient that answers one with text: under their preset an engine
    that declares native tools must answer with a real call, and one that does not (`native_tools: false`) runs on
    the JSON-schema answer with a note in the preflight lines and run.json."""
    from mindsimkit.mindsim.patient_engines import engines_of

    calling = [e for e in engines_of(scfg.patient_engines) if e.calls_tools]
    if not calling:
        return {}
    native = any(scfg.preset_for(e.name) == "mindeval2-reference" for e in calling)
    return {"patient": "native" if native else "any"}


def simulate_roles(recipe: Any, engines: Any) -> list[RoleUse]:
    from mindsimkit.mindsim.config import CounsellorBinding, SimulationConfig

    # The first-scenario writer is listed even when unbound: preflight then shows which binding it takes.
    uses = [role_use(engines, r) for r in ("first_scenario_writer", "scenario_writer", "patient", "memory_compactor")]
    scfg = SimulationConfig.from_section(getattr(recipe, "simulation", None))
    uses[2].tools = tool_roles(scfg).get("patient", "")
    engines.config.check_bound([c for c in scfg.counsellors if isinstance(c, str)], "simulation.counsellors")
    # The recipe's patient engines' own roles (PatientAct: its steps and decomposition; `simulate.shared_roles`).
    uses += [role_use(engines, r) for r in engine_roles(scfg.patient_engines)]
    for c in scfg.counsellors:
        if isinstance(c, CounsellorBinding):
            if c.engine not in engines.config.engines:
                raise ConfigError(
                    f"simulation.counsellors: '{c.name}' names engine '{c.engine}', which is not "
                    f"in the recipe's engines ({', '.join(sorted(engines.config.engines))})"
                )
            uses.append(
                RoleUse(f"counsellor:{c.name}", "counsellor", c.engine, c.model, c.max_tokens, True, c.role_spec())
            )
        else:  # a role name (`counsellor`, `counsellor_b`, …): that role's binding, checked as a counsellor
            spec = engines.role_spec(c)
            uses.append(RoleUse(c, "counsellor", spec.engine, spec.model, spec.max_tokens, spec=spec))
    return uses


def register() -> None:
    from mindsimkit.mindsim import stage_sizes
    from mindsimkit.mindsim.config import SimulationConfig

    register_stage(Stage("simulate", simulate_roles))
    scen_default = SimulationConfig.model_fields["scenario_max_tokens"].default
    for entry in (
        # Both scenario writers answer the same schema under the same stage budget (simulation.scenario_max_tokens).
        *(
            RoleSchema(
                role,
                "Scenario",
                _scenario_schema,
                SIMULATE,
                budget=section_budget("simulation", "scenario_max_tokens", scen_default),
                schema_for=_scenario_schema,
            )
            for role in ("first_scenario_writer", "scenario_writer")
        ),
        # Each patient engine's own structured outputs (MindSim: commit_move and the agenda tools; PatientAct: its
        # steps and decomposition), each active only when the recipe runs that engine or one of its variants.
        *engine_role_schemas(),
    ):
        register_role_schema(entry)
    register_output_bound("patient", stage_sizes.message_bound)
    register_output_bound("memory_compactor", stage_sizes.memory_bound)
    for role, estimate in (
        ("first_scenario_writer", stage_sizes.first_scenario_prompt),
        ("scenario_writer", stage_sizes.scenario_prompt),
        ("patient", stage_sizes.patient_prompt),
        ("counsellor", stage_sizes.counsellor_prompt),
        ("memory_compactor", stage_sizes.memory_prompt),
        ("baseline_mapper", stage_sizes.mapper_prompt),
        *engine_prompt_estimates().items(),
    ):
        register_prompt_estimate(role, estimate)
    register_sample("longest_session", stage_sizes.longest_session)

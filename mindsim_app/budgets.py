"""Token budgets of the main job's structured roles, checked against their schemas' worst case before
any stage runs (issue 9, item 5; the bound itself is `mindcore.budget`).

The rule, per structured output of a role the job will call:
- the effective budget is the stage setting that overrides the role's `max_tokens` for that call
  (`simulation.scenario_max_tokens`, `validation.arc_max_tokens`) when there is one, else the role's
  `max_tokens` (its own entry, or `roles.default` when the role has none);
- a budget below the schema's worst case is refused (`ConfigError`, exit 2) naming the role, the
  schema, the setting and the minimum;
- a budget the recipe leaves unset (no `max_tokens` on the role nor on `default`; a stage setting not
  written in the recipe) is raised to the worst case, and the report says so;
- a schema with an unbounded part (a string without `maxLength`, …) cannot be checked: the report
  names the part, and the budget is left as it is.

Roles registered here: profile_writer (formulation), screener (screen verdict), scenario_writer
(Scenario), labeller (ArcLabel, only when `validation.arc` is on), and every patient engine's own
(`mindsim.patient_engines.role_schemas()`: the MindSim patient's commit_move and agenda tools, as the JSON
schema the non-native tool path sends; PatientAct's appraiser steps and decomposition), each active only when
`simulation.patient_engine` names that engine or one of its variants. Other stages (the judge) register
their own through `mindcore.budget.register_role_schema`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mindcore.budget import (
    RoleSchema,
    StageBudget,
    TokenCounter,
    WorstCase,
    register_role_schema,
    registered,
    worst_case_tokens,
)
from mindcore.config import EnginesConfig, RoleSpec
from mindcore.errors import ConfigError
from mindsim.patient_engines import role_schemas as engine_role_schemas
from mindsim.patient_engines.mindsim_engine import agenda_tool_schema, commit_tool_schema


RUN_STAGES = frozenset({"profiles", "simulate", "validate"})


def expand_stages(stages: set[str] | frozenset[str]) -> set[str]:
    """`run` is every stage of the main job."""
    out = set(stages)
    if "run" in out:
        out |= RUN_STAGES
    return out


def _section_budget(section: str, key: str, default: int | None):
    def budget(recipe: Any) -> StageBudget:
        values = getattr(recipe, section, None) or {}
        explicit = key in values
        return StageBudget(values[key] if explicit else default, f"{section}.{key}", explicit)

    return budget


def _profile_shape(recipe: Any) -> Any:
    from profilegen.config import profiles_config

    return profiles_config(recipe).shape


def _formulation_schema(recipe: Any = None) -> dict[str, Any]:
    from profilegen.formulation import draft_model

    return draft_model(_profile_shape(recipe).text_scale).model_json_schema()


def _screen_schema(recipe: Any = None) -> dict[str, Any]:
    from profilegen.screen import verdict_model

    return verdict_model(_profile_shape(recipe).screen_max_faults).model_json_schema()


def _scenario_schema(recipe: Any = None) -> dict[str, Any]:
    from mindsim.scenario import draft_model

    scale = (getattr(recipe, "simulation", None) or {}).get("scenario_scale", 1.0)
    return draft_model(float(scale)).model_json_schema()


def _arc_schema() -> dict[str, Any]:
    from validation.arc import ArcLabel

    return ArcLabel.model_json_schema()


def judge_config(recipe: Any) -> Any:
    """The recipe's judge section, or the defaults (`mindsim judge run` without a recipe)."""
    from judge.config import JudgeConfig

    return JudgeConfig.model_validate(getattr(recipe, "judge", None) or {})


def _judge_schema(recipe: Any = None) -> dict[str, Any]:
    from judge.rubric import answer_model, load_rubric

    cfg = judge_config(recipe)
    return answer_model(load_rubric(cfg.rubric), cfg.max_issues).model_json_schema()


def _patientact_judge_schema() -> dict[str, Any]:
    from judge.patientact import answer_model

    return answer_model("conversation").model_json_schema()


def _arc_on(recipe: Any) -> bool:
    return bool((getattr(recipe, "validation", None) or {}).get("arc", False))


def _register() -> None:
    # Defaults mirror the config models' (SimulationConfig.scenario_max_tokens, ValidationConfig.arc_max_tokens).
    from mindsim.config import SimulationConfig
    from validation.config import ValidationConfig

    profiles, simulate, validate = frozenset({"profiles"}), frozenset({"simulate"}), frozenset({"validate"})
    scen_default = SimulationConfig.model_fields["scenario_max_tokens"].default
    arc_default = ValidationConfig.model_fields["arc_max_tokens"].default
    for entry in (
        RoleSchema("profile_writer", "formulation", _formulation_schema, profiles, schema_for=_formulation_schema),
        RoleSchema("screener", "screen", _screen_schema, profiles, schema_for=_screen_schema),
        RoleSchema("scenario_writer", "Scenario", _scenario_schema, simulate,
                   budget=_section_budget("simulation", "scenario_max_tokens", scen_default), schema_for=_scenario_schema),
        # Each patient engine's own structured outputs (MindSim: commit_move and the agenda tools; PatientAct: its
        # steps and decomposition), each active only when the recipe runs that engine or one of its variants.
        *engine_role_schemas(),
        RoleSchema("labeller", "ArcLabel", _arc_schema, validate,
                   budget=_section_budget("validation", "arc_max_tokens", arc_default), active=_arc_on),
        RoleSchema("judge", "mhqr_judgment", _judge_schema, frozenset({"judge"}), schema_for=_judge_schema),
        # `mindsim judge run --rubric patientact`: one answer per session on PatientAct's 5 dimensions.
        RoleSchema("judge", "patientact_conversation", _patientact_judge_schema, frozenset({"judge_patientact"})),
    ):
        register_role_schema(entry)


_register()


@dataclass
class BudgetLine:
    role: str
    schema: str
    worst_case: int | None
    budget: int | None
    setting: str
    action: str  # ok | raised | refused | unbounded
    counted_with: str = "bytes"


@dataclass
class BudgetReport:
    lines: list[BudgetLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Stage settings raised to the worst case, e.g. {"simulation": {"scenario_max_tokens": 2100}}:
    # the caller applies them to its validated section (`cfg.model_copy(update=...)`).
    section_overrides: dict[str, dict[str, int]] = field(default_factory=dict)

    def apply(self, section: str, cfg: Any) -> Any:
        """`cfg` (a validated stage section, e.g. SimulationConfig) with this report's raised settings."""
        updates = self.section_overrides.get(section)
        return cfg.model_copy(update=updates) if updates else cfg

    def worst(self, role: str) -> int | None:
        values = [ln.worst_case for ln in self.lines if ln.role == role and ln.worst_case is not None]
        return max(values) if values else None


def _role_budget(config: EnginesConfig, role: str) -> tuple[int | None, str]:
    roles = config.roles
    if role in roles and roles[role].max_tokens is not None:
        return roles[role].max_tokens, f"roles.{role}.max_tokens"
    if "default" in roles and roles["default"].max_tokens is not None:
        return roles["default"].max_tokens, f"roles.default.max_tokens (inherited by {role})"
    return None, f"roles.{role}.max_tokens"


def _raise_role(config: EnginesConfig, role: str, tokens: int) -> None:
    base = config.roles.get(role) or config.roles.get("default")
    if base is None:
        raise ConfigError(f"roles: no entry for '{role}' and no 'default' role to fall back to")
    config.roles[role] = RoleSpec(**{**base.model_dump(), "max_tokens": tokens})


def fit_budgets(recipe: Any, config: EnginesConfig, stages: set[str],
                counters: dict[str, TokenCounter] | None = None) -> BudgetReport:
    """Check every structured output `stages` will ask for. Raises ConfigError listing each budget
    below its worst case; raises unset budgets in place (`config.roles`, `section_overrides`).
    `counters` maps engine name → that engine's tokenizer; engines without one use the byte bound."""
    counters = counters or {}
    report = BudgetReport()
    problems: list[str] = []
    worst: dict[tuple[str, str], tuple[WorstCase, StageBudget | None]] = {}
    for entry in registered(expand_stages(stages)):
        if entry.active is not None and not entry.active(recipe):
            continue
        engine = config.role_spec(entry.role).engine
        counter = counters.get(engine)
        wc = worst_case_tokens(entry.schema_of(recipe), name=entry.name, count=counter,
                               counted_with=f"{engine} tokenizer" if counter else "bytes")
        override = entry.budget(recipe) if entry.budget else None
        key = (entry.role, override.setting if override else "role")
        prev = worst.get(key)
        if wc.tokens is None:
            report.lines.append(BudgetLine(entry.role, entry.name, None, None, "", "unbounded", wc.counted_with))
            report.notes.append(f"{entry.role}: schema '{entry.name}' has no worst case ({'; '.join(wc.unbounded)}); "
                                "its budget cannot be checked and a long answer may be cut off")
            continue
        if prev is None or (prev[0].tokens or 0) < wc.tokens:
            worst[key] = (wc, override)
    for (role, _), (wc, override) in worst.items():
        assert wc.tokens is not None
        if override is not None and override.value is not None:
            budget, setting, explicit = override.value, override.setting, override.explicit
        else:  # no stage setting, or one set to null: the call uses the role's own max_tokens
            override = None
            budget, setting = _role_budget(config, role)
            explicit = budget is not None
        line = BudgetLine(role, wc.schema_name, wc.tokens, budget, setting, "ok", wc.counted_with)
        if budget is not None and budget >= wc.tokens:
            pass
        elif explicit:
            line.action = "refused"
            problems.append(
                f"{setting} is {budget}, below the longest answer role '{role}' can give for schema "
                f"'{wc.schema_name}' ({wc.tokens} tokens, counted with {wc.counted_with}): set it to at least "
                f"{wc.tokens}, or leave it unset to have it raised"
            )
        else:
            line.action, line.budget = "raised", wc.tokens
            if override is not None:
                section, key = override.setting.split(".", 1)
                report.section_overrides.setdefault(section, {})[key] = wc.tokens
            else:
                _raise_role(config, role, wc.tokens)
            report.notes.append(
                f"{setting} was {'unset' if budget is None else f'{budget} by default'}; raised to {wc.tokens}, "
                f"the longest answer of schema '{wc.schema_name}' ({wc.counted_with})"
            )
        report.lines.append(line)
    if problems:
        raise ConfigError("token budgets too small for their schemas (answers would be cut off):\n  "
                          + "\n  ".join(problems))
    return report

"""Token budgets of the structured roles a job will call, checked against their schemas' worst case before
any stage runs, so a budget that can cut an answer off fails the job in seconds rather than hours in (the bound
itself is `mindcore.budget`).

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

The outputs checked are those the stages registered (`mindcore.stages`): each stage's `stage.py` declares
its roles' schemas with `mindcore.budget.register_role_schema`, e.g. `profilegen/stage.py` the writer's
formulation and the screener's verdict, `mindsim/stage.py` the scenario and the patient's tool calls (and
PatientAct's steps through `mindsim/patientact/budgets.py`), `validation/stage.py` the arc label and
`judge/stage.py` the judges' answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from mindsimkit.mindcore.budget import StageBudget, TokenCounter, WorstCase, registered, worst_case_tokens
from mindsimkit.mindcore.config import EnginesConfig, RoleSpec, role_chain
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.stages import RUN_STAGES, expand_stages  # noqa: F401 - part of this module's interface

# A counsellor without max_tokens has no reply bound; its replies are assumed this long and the
# estimate says so.
ASSUMED_UNBOUNDED_REPLY = 512


def section_budget(section: str, key: str, default: int | None) -> Callable[[Any], StageBudget]:
    """A stage setting that overrides the role's `max_tokens` for one call (`RoleSchema.budget`)."""

    def budget(recipe: Any) -> StageBudget:
        values = getattr(recipe, section, None) or {}
        explicit = key in values
        return StageBudget(values[key] if explicit else default, f"{section}.{key}", explicit)

    return budget


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


@dataclass
class EstimateInputs:
    """What the prompt estimators read: the recipe, the engines config (after budgets were fitted), the
    budget report (with the stage settings it raised) and each counsellor under test's reply cap.

    `typical` asks for a likely prompt instead of the largest: preflight's context check needs the largest one a
    run can send, `mindsim plan`'s expected value a likely one (a persona of median length rather than the
    longest, the formulation at the recipe's text scale, memory only in the sessions that have one, requests of
    each kind in their own share). An estimator with nothing to choose answers the same either way."""

    recipe: Any
    config: EnginesConfig
    report: BudgetReport
    counsellor_max_tokens: dict[str, int | None] = field(default_factory=dict)
    typical: bool = False
    # Tokens a typical text of each kind runs to where a finished run measured it (`patient_message`,
    # `counsellor_reply`, `memory`); a typical estimate quotes such a text at that length, never above its bound.
    lengths: dict[str, float] = field(default_factory=dict)
    # Shares a typical estimate counts where the recipe gives only a most (`commit_reject_share`: a MindSim commit
    # refused by the guard); without one it counts the most, as the largest estimate does.
    rates: dict[str, float] = field(default_factory=dict)

    def role_max(self, role: str) -> int | None:
        return self.config.role_spec(role).max_tokens

    def reply_bound(self) -> tuple[int, str]:
        """Longest counsellor reply in tokens, and a note when one is unbounded."""
        values = list(self.counsellor_max_tokens.values()) or [self.role_max("counsellor")]
        if any(v is None for v in values):
            return ASSUMED_UNBOUNDED_REPLY, (
                f"a counsellor has no max_tokens; its replies are assumed {ASSUMED_UNBOUNDED_REPLY} tokens"
            )
        return max(v for v in values if v is not None), ""


def _role_budget(config: EnginesConfig, role: str) -> tuple[int | None, str]:
    # Along the role's fallbacks (`role_chain`: first_scenario_writer → scenario_writer → default).
    roles = config.roles
    for key in role_chain(role):
        if key in roles and roles[key].max_tokens is not None:
            return roles[key].max_tokens, f"roles.{key}.max_tokens" + ("" if key == role else f" (inherited by {role})")
    return None, f"roles.{role}.max_tokens"


def _raise_role(config: EnginesConfig, role: str, tokens: int) -> None:
    key = config.bound_as(role)
    base = config.roles[key] if key is not None else None
    if base is None:
        raise ConfigError(f"roles: no entry for '{role}' and no 'default' role to fall back to")
    config.roles[role] = RoleSpec(**{**base.model_dump(), "max_tokens": tokens})


def fit_budgets(
    recipe: Any, config: EnginesConfig, stages: set[str], counters: Mapping[str, TokenCounter] | None = None
) -> BudgetReport:
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
        wc = worst_case_tokens(
            entry.schema_of(recipe),
            name=entry.name,
            count=counter,
            counted_with=f"{engine} tokenizer" if counter else "bytes",
        )
        override = entry.budget(recipe) if entry.budget else None
        key = (entry.role, override.setting if override else "role")
        prev = worst.get(key)
        if wc.tokens is None:
            report.lines.append(BudgetLine(entry.role, entry.name, None, None, "", "unbounded", wc.counted_with))
            report.notes.append(
                f"{entry.role}: schema '{entry.name}' has no worst case ({'; '.join(wc.unbounded)}); "
                "its budget cannot be checked and a long answer may be cut off"
            )
            continue
        if prev is None or (prev[0].tokens or 0) < wc.tokens:
            worst[key] = (wc, override)
    for (role, _), (wc, override) in worst.items():
        assert wc.tokens is not None
        budget: int | None
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
                section, field = override.setting.split(".", 1)
                report.section_overrides.setdefault(section, {})[field] = wc.tokens
            else:
                _raise_role(config, role, wc.tokens)
            report.notes.append(
                f"{setting} was {'unset' if budget is None else f'{budget} by default'}; raised to {wc.tokens}, "
                f"the longest answer of schema '{wc.schema_name}' ({wc.counted_with})"
            )
        report.lines.append(line)
    if problems:
        raise ConfigError(
            "token budgets too small for their schemas (answers would be cut off):\n  " + "\n  ".join(problems)
        )
    return report

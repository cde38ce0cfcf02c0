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
(Scenario), patient (commit_move and the agenda tools, as the JSON schema the non-native tool path
sends), labeller (ArcLabel, only when `validation.arc` is on). Other stages (the judge) register their
own through `mindcore.budget.register_role_schema`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from mindcore.budget import (
    PromptSize,
    RoleSchema,
    StageBudget,
    TokenCounter,
    WorstCase,
    register_prompt_estimate,
    register_role_schema,
    registered,
    worst_case_tokens,
)
from mindcore.client import _tool_choice_schema
from mindcore.config import EnginesConfig, RoleSpec
from mindcore.errors import ConfigError
from mindcore.types import ToolSpec

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


def _formulation_schema() -> dict[str, Any]:
    from profilegen.formulation import draft_model

    return draft_model().model_json_schema()


def _screen_schema() -> dict[str, Any]:
    from profilegen.screen import JudgeVerdict

    return JudgeVerdict.model_json_schema()


def _scenario_schema() -> dict[str, Any]:
    from mindsim.scenario import _ScenarioDraft

    return _ScenarioDraft.model_json_schema()


def commit_tool_schema() -> dict[str, Any]:
    """`commit_move` as the non-native tool path sends it, with every move of the vocabulary (each
    archetype's enum is a subset, so this is the longest)."""
    from mindsim.guard import commit_move_model
    from mindsim.patient import COMMIT_DESCRIPTION
    from profilegen.moves import load_vocabulary

    vocab = load_vocabulary()
    model = commit_move_model(list(vocab.moves), list(vocab.depth_moves))
    return _tool_choice_schema([ToolSpec.from_model("commit_move", COMMIT_DESCRIPTION, model)], False)


def agenda_tool_schema() -> dict[str, Any]:
    from mindsim.guard import TodoAdd, TodoComplete
    from mindsim.patient import ADD_DESCRIPTION, COMPLETE_DESCRIPTION

    tools = [ToolSpec.from_model("complete_todo", COMPLETE_DESCRIPTION, TodoComplete),
             ToolSpec.from_model("add_todo", ADD_DESCRIPTION, TodoAdd)]
    return _tool_choice_schema(tools, True)


def _arc_schema() -> dict[str, Any]:
    from validation.arc import ArcLabel

    return ArcLabel.model_json_schema()


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
        RoleSchema("profile_writer", "formulation", _formulation_schema, profiles),
        RoleSchema("screener", "screen", _screen_schema, profiles),
        RoleSchema("scenario_writer", "Scenario", _scenario_schema, simulate,
                   budget=_section_budget("simulation", "scenario_max_tokens", scen_default)),
        RoleSchema("patient", "tool_choice:commit_move", commit_tool_schema, simulate),
        RoleSchema("patient", "tool_choice:agenda", agenda_tool_schema, simulate),
        RoleSchema("labeller", "ArcLabel", _arc_schema, validate,
                   budget=_section_budget("validation", "arc_max_tokens", arc_default), active=_arc_on),
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
        wc = worst_case_tokens(entry.schema(), name=entry.name, count=counter,
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


# -- largest prompts, for the context check ------------------------------------------------------
# Chat-template tokens around each message (ChatML: "<|im_start|>role\n" … "<|im_end|>\n"); an estimate.
MESSAGE_OVERHEAD = 6
# A counsellor without max_tokens has no reply bound; its replies are assumed this long and the
# estimate says so.
ASSUMED_UNBOUNDED_REPLY = 512
ESTIMATE_PERSONAS = 40
# Items a patient adds to its agenda in one session, for the size of the open list each agenda call
# answers with (the agenda has no cap; adding one every turn would make it longer). An estimate.
ASSUMED_ADDED_ITEMS = 3


@dataclass
class EstimateInputs:
    """What the prompt estimators read: the recipe, the engines config (after budgets were fitted),
    the simulation section (with raised settings applied) and the budget report."""

    recipe: Any
    config: EnginesConfig
    report: BudgetReport
    counsellor_max_tokens: dict[str, int | None] = field(default_factory=dict)

    @property
    def simulation(self) -> Any:
        from mindsim.config import SimulationConfig

        scfg = SimulationConfig.from_section(getattr(self.recipe, "simulation", None))
        return scfg.model_copy(update=self.report.section_overrides.get("simulation", {}))

    def role_max(self, role: str) -> int | None:
        return self.config.role_spec(role).max_tokens

    def reply_bound(self) -> tuple[int, str]:
        """Longest counsellor reply in tokens, and a note when one is unbounded."""
        values = list(self.counsellor_max_tokens.values()) or [self.role_max("counsellor")]
        if any(v is None for v in values):
            return ASSUMED_UNBOUNDED_REPLY, (f"a counsellor has no max_tokens; its replies are assumed "
                                             f"{ASSUMED_UNBOUNDED_REPLY} tokens")
        return max(v for v in values if v is not None), ""

    def message_bound(self) -> int:
        s = self.simulation
        return s.message_max_tokens or self.role_max("patient") or ASSUMED_UNBOUNDED_REPLY

    def memory_bound(self) -> int:
        s = self.simulation
        return s.memory_max_tokens or self.role_max("memory_compactor") or ASSUMED_UNBOUNDED_REPLY


def _messages_tokens(messages: list[dict[str, Any]], sz: Any) -> int:
    return sum(sz(str(m.get("content") or "")) + MESSAGE_OVERHEAD for m in messages)


def _worst_profile_parts(recipe: Any) -> tuple[Any, Any, list[Any]]:
    from profilegen.config import ProfilesConfig

    cfg = ProfilesConfig.model_validate(getattr(recipe, "profiles", None) or {})
    return _profile_parts(getattr(recipe, "seed", 0), cfg.rates)


@lru_cache(maxsize=4)
def _profile_parts(seed: int, rates: str | None) -> tuple[Any, Any, list[Any]]:
    """The longest anchored persona of the shipped sample, the largest formulation, the most faults."""
    from mindcore.budget import largest_instance
    from profilegen.anchors import anchor_personas
    from profilegen.formulation import draft_model, to_formulation, writer_messages
    from profilegen.personas import load_personas
    from profilegen.rates import load_rates
    from profilegen.schemas import Fault
    from profilegen.screen import JudgeVerdict

    personas = load_personas("synthetic", ESTIMATE_PERSONAS, seed)
    rows = anchor_personas(personas.rows, load_rates(rates), seed)
    row = max(rows, key=lambda r: sum(len(m["content"]) for m in writer_messages(r)))
    f = to_formulation(draft_model().model_validate(largest_instance(draft_model().model_json_schema())))
    verdict = largest_instance(JudgeVerdict.model_json_schema())
    faults = [Fault(quote=x["quote"], reason=x["reason"], severity="serious", source="judge") for x in verdict["faults"]]
    return row, f, faults


def _writer_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from profilegen.formulation import revision_messages, writer_messages

    row, f, faults = _worst_profile_parts(inp.recipe)
    first = _messages_tokens(writer_messages(row), sz)
    revision = _messages_tokens(revision_messages(row, f, faults), sz)
    return PromptSize("profile_writer", max(first, revision), {"first draft": first, "revision": revision},
                      "personas from the shipped synthetic sample; the revision carries the largest draft and six faults")


def _screener_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from profilegen.render import writer_brief
    from profilegen.screen import judge_messages

    row, f, _ = _worst_profile_parts(inp.recipe)
    n = _messages_tokens(judge_messages(writer_brief(row, f)), sz)
    return PromptSize("screener", n, {"brief of the largest formulation": n})


def _session_fixtures(inp: EstimateInputs, sz: Any) -> dict[str, Any]:
    from mindcore.budget import fill_text, largest_instance
    from mindsim.agenda import Agenda
    from mindsim.prompting import load_style_data
    from mindsim.scenario import Scenario, _ScenarioDraft
    from mindsim.schedule import SessionPlan, load_schedule_data
    from profilegen.moves import load_vocabulary
    from profilegen.render import case_summary, writer_brief

    row, f, _ = _worst_profile_parts(inp.recipe)
    s = inp.simulation
    style, sched, vocab = load_style_data(), load_schedule_data(), load_vocabulary()
    scenario = Scenario.model_validate(largest_instance(_ScenarioDraft.model_json_schema()))
    longest = lambda keys: max(keys, key=len)  # noqa: E731
    plan = SessionPlan(index=1, gap_hours=s.max_gap_hours, event_category=longest(list(sched.event_categories)),
                       beat=longest([c.beat for c in sched.event_categories.values()]),
                       emotion=max(style.emotion, key=lambda k: len(style.emotion[k])),
                       concealment=max(style.concealment, key=lambda k: len(style.concealment[k].line)),
                       max_depth=3, hours_since_start=0, weekday="Wednesday", hour=12)
    turns = s.turn_cap
    patient_msg, counsellor_msg = sz.text_of_tokens(inp.message_bound()), sz.text_of_tokens(inp.reply_bound()[0])
    transcript = [{"role": "user", "content": patient_msg}]
    for _ in range(turns - 1):
        transcript += [{"role": "assistant", "content": counsellor_msg}, {"role": "user", "content": patient_msg}]
    added = [fill_text(120)] * (min(ASSUMED_ADDED_ITEMS, (turns - 1) * s.max_todo_calls))
    return {"row": row, "f": f, "brief": writer_brief(row, f), "summary": case_summary(row, f), "scenario": scenario,
            "plan": plan, "style": style, "vocab": vocab, "transcript": transcript, "added": added,
            "agenda": Agenda.from_checkpoints(list(scenario.checkpoints) + added),
            "memory": [sz.text_of_tokens(inp.memory_bound())]}


def _scenario_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from mindcore.prompts import render
    from mindsim.prompting import transcript_text
    from mindsim.scenario import FIRST_TEMPLATE, NEXT_TEMPLATE

    fx = _session_fixtures(inp, sz)
    reg = fx["style"].register
    lines = [max((r.register_line for r in reg.values()), key=len),
             max((v.line for v in fx["style"].verbosity.values()), key=len)]
    user = [{"role": "user", "content": "Write the situation now, as JSON."}]
    first = render(FIRST_TEMPLATE, writer_brief=fx["brief"], goal=fx["f"].presenting.goal,
                   time_context=fx["plan"].time_context, emotion=fx["plan"].emotion, register_lines=lines)
    nxt = render(NEXT_TEMPLATE, writer_brief=fx["brief"], prev_situation=fx["scenario"].as_text(),
                 transcript=transcript_text(fx["transcript"]), now_line=fx["plan"].time_context,
                 gap=fx["plan"].gap_text, leftover_todos=list(fx["scenario"].checkpoints) + fx["added"],
                 beat=fx["plan"].beat, register_lines=lines)
    a = _messages_tokens([{"role": "system", "content": first}, *user], sz)
    b = _messages_tokens([{"role": "system", "content": nxt}, *user], sz)
    return PromptSize("scenario_writer", max(a, b), {"first session": a, "later session": b},
                      inp.reply_bound()[1])


def _patient_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    import json

    from mindcore.budget import fill_text, largest_instance
    from mindsim.agenda import Agenda
    from mindsim.prompting import patient_system_prompt
    from profilegen.testing import make_profiles

    fx = _session_fixtures(inp, sz)
    s, vocab = inp.simulation, fx["vocab"]
    arch = max(vocab.archetypes, key=lambda a: len(vocab.available(a)))
    base = make_profiles(1, 0)[0]
    profile = base.model_copy(update={"case_summary": fx["summary"],
                                      "style": base.style.model_copy(update={"archetype": arch})})
    system = sz(patient_system_prompt(profile, vocab, fx["plan"], fx["scenario"], fx["agenda"], fx["memory"],
                                      agenda_plain=s.agenda_plain)) + MESSAGE_OVERHEAD
    commit = sz(json.dumps(largest_instance(commit_tool_schema()), ensure_ascii=False))
    todo = sz(json.dumps(largest_instance(agenda_tool_schema()), ensure_ascii=False))
    cue = max((c for m in vocab.moves.values() for c in m.cues), key=len)
    never = max((r.never for a in vocab.archetypes.values() for r in a.removed), key=len)
    longest_move = max(vocab.moves, key=len)
    result = max(sz(f"Accepted: {longest_move}. How to write it: {cue}; {cue}."),
                 sz(f"Not accepted: `{longest_move}` is not something you do. {never} Pick another move from your list."))
    listed = list(fx["scenario"].checkpoints) + [fill_text(120)] * ASSUMED_ADDED_ITEMS
    status = sz("Marked done: " + Agenda.from_checkpoints(listed).status())
    reply, note = inp.reply_bound()
    commits = 1 + min(1, s.max_commit_retries)
    per_turn = (reply + commits * (commit + result) + s.max_todo_calls * (todo + status)
                + inp.message_bound() + MESSAGE_OVERHEAD * (2 + 2 * commits + 2 * s.max_todo_calls))
    turns = s.turn_cap - 1
    growth = turns * per_turn
    return PromptSize("patient", system + growth, {"system prompt": system, "first turn": per_turn,
                                                   f"growth over {turns} turns": growth}, note)


def _counsellor_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from mindsim.prompting import counsellor_system_prompt

    fx = _session_fixtures(inp, sz)
    system = sz(counsellor_system_prompt(fx["plan"], fx["memory"])) + MESSAGE_OVERHEAD
    history = _messages_tokens(fx["transcript"][:-1], sz) + sz(fx["transcript"][-1]["content"])
    return PromptSize("counsellor", system + history, {"system prompt": system, "exchange": history},
                      inp.reply_bound()[1])


def _memory_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from mindcore.prompts import render
    from mindsim.memory import format_log
    from mindsim.prompting import transcript_text

    fx = _session_fixtures(inp, sz)
    s = inp.simulation
    prompt = render("memory/compact.jinja2", prior_log=format_log(fx["memory"]),
                    transcript=transcript_text(fx["transcript"]), max_entries=s.memory_max_entries)
    base = _messages_tokens([{"role": "system", "content": prompt}, {"role": "user", "content": "Write the updated log now."}], sz)
    retry = (inp.memory_bound() + 120 + 2 * MESSAGE_OVERHEAD) if s.memory_retries else 0
    return PromptSize("memory_compactor", base + retry, {"first ask": base, "re-ask adds": retry})


def _labeller_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from mindcore.budget import fill_text
    from mindcore.prompts import render
    from validation.arc import _MAX_CONTEXT_CHARS, _MAX_TURN_CHARS, SYSTEM_TEMPLATE, TURN_TEMPLATE
    from validation.config import ValidationConfig

    vcfg = ValidationConfig.model_validate(getattr(inp.recipe, "validation", None) or {})
    context = [{"speaker": "Counsellor", "text": fill_text(_MAX_CONTEXT_CHARS)}] * vcfg.arc_context_messages
    user = render(TURN_TEMPLATE, context=context, turn=fill_text(_MAX_TURN_CHARS))
    n = _messages_tokens([{"role": "system", "content": render(SYSTEM_TEMPLATE)}, {"role": "user", "content": user}], sz)
    return PromptSize("labeller", n, {"longest clipped turn with its context": n})


for _role, _fn in (("profile_writer", _writer_prompt), ("screener", _screener_prompt),
                   ("scenario_writer", _scenario_prompt), ("patient", _patient_prompt),
                   ("counsellor", _counsellor_prompt), ("memory_compactor", _memory_prompt),
                   ("labeller", _labeller_prompt)):
    register_prompt_estimate(_role, _fn)

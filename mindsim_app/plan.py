"""`mindsim plan RECIPE`: what a recipe will ask of its engines before the first request — requests, prompt and
completion tokens, the share a prefix cache can serve, money and hours, per stage and per role.

Nothing here is a second copy of the toolkit's sizing: the roles are those the stages register
(`mindcore.stages.stage_roles`), the budgets are the ones preflight fits (`mindcore.budget_fit.fit_budgets`, with
the byte bound since no engine is asked for its tokenizer), and every prompt size comes from the estimate each
stage registered for preflight's context check (`mindcore.budget.prompt_estimator`), evaluated at the first and the
last turn of a session so that the mean over a session's turns is their midpoint (a session's prompts grow by the
same pieces each turn). What is counted per stage is the recipe's own arithmetic: candidates and revisions,
patients × counsellors × trials × sessions × counsellor replies, every reply judged.

Two figures per count: the worst case takes every retry, revision and budget in full; the expected value takes the
shares in `mindsim_app/data/plan_assumptions.yaml`, never fitted to a run. Requests are HTTP requests (the ledger's
`attempts`): a structured call refused by its validator is asked again inside the same call.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.budget import PromptSize, Sizer, largest_instance, prompt_estimator, registered
from mindsimkit.mindcore.budget_fit import ASSUMED_UNBOUNDED_REPLY, BudgetReport, EstimateInputs, fit_budgets
from mindsimkit.mindcore.config import EnginesConfig, RoleSpec
from mindsimkit.mindcore.stages import expand_stages

ASSUMPTIONS = Path(__file__).resolve().parent / "data" / "plan_assumptions.yaml"


class Assumptions(BaseModel):
    """The shares the expected value takes where the recipe gives only a bound."""

    model_config = ConfigDict(extra="forbid")
    serious_share: float = Field(ge=0, le=1)
    structured_retry_share: float = Field(ge=0, le=1)
    commit_reject_share: float = Field(ge=0, le=1)
    message_reask_share: float = Field(ge=0, le=1)
    resistance_share: float = Field(ge=0, le=1)
    repeated_label_share: float = Field(ge=0, le=1)
    demographics_conflict_share: float = Field(ge=0, le=1)
    memory_reask_share: float = Field(ge=0, le=1)
    scenario_redraft_share: float = Field(ge=0, le=1)
    reply_fill: float = Field(ge=0, le=1)
    structured_fill: float = Field(ge=0, le=1)
    reasoning_fill: float = Field(ge=0, le=1)


def load_assumptions(path: Path = ASSUMPTIONS) -> Assumptions:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return Assumptions.model_validate({**data["rates"], **data["lengths"]})


class RoleLoad(BaseModel):
    """One role's work in one stage: expected and worst-case totals over the whole run."""

    stage: str
    role: str
    engine: str
    model: str | None = None
    requests: float = 0.0
    requests_worst: float = 0.0
    prompt_tokens: float = 0.0
    prompt_tokens_worst: float = 0.0
    completion_tokens: float = 0.0
    completion_tokens_worst: float = 0.0
    cached_tokens: float = Field(0.0, description="Expected prompt tokens an earlier request already sent as a prefix")
    completion_from: str = Field("bounds", description="bounds, or the run whose measured means were used")
    prompt_from: str = Field("estimate", description="estimate, or the run whose measured means were used")
    requests_from: str = Field(
        "assumed rates", description="assumed rates, or the run whose requests per planned request scaled the count"
    )
    notes: list[str] = Field(default_factory=list)

    @property
    def cached_share(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


@dataclass
class Calls:
    """`n` calls of one kind (`n_worst` at worst), each asked up to `attempts` times, with per-request sizes."""

    n: float
    n_worst: float
    prompt: float
    prompt_worst: float
    completion: float
    completion_worst: float
    attempts: int = 1
    cached: float = 0.0  # over all n calls
    retry_share: float = 0.0


@dataclass
class _Ctx:
    recipe: Any
    config: EnginesConfig
    report: BudgetReport
    inp: EstimateInputs
    sz: Sizer
    a: Assumptions
    specs: dict[str, RoleSpec]
    measured: dict[str, float]  # role → completion tokens per request a finished run measured
    measured_from: str | None
    loads: dict[tuple[str, str], RoleLoad]
    counsellors: int | None = None  # plan for this many counsellors under test instead of the recipe's
    # role → (prompt tokens per request, the share of them served from cache) a run of the same shape measured
    measured_prompts: dict[str, tuple[float, float]] = field(default_factory=dict)

    def counsellor_labels(self, s: Any) -> list[str]:
        """The counsellors planned for: the recipe's, cycled or cut to `counsellors` (each planned as the one it
        repeats, under that one's name)."""
        from mindsimkit.mindsim.config import counsellor_name

        given = [counsellor_name(c) for c in s.counsellors]
        return [given[i % len(given)] for i in range(self.counsellors)] if self.counsellors else given

    def simulation(self, inp: EstimateInputs | None = None) -> Any:
        """The recipe's simulation section as the estimates read it: validated, with the settings preflight raised."""
        from mindsimkit.mindsim.config import SimulationConfig

        inp = inp or self.inp
        scfg = SimulationConfig.from_section(getattr(inp.recipe, "simulation", None))
        return scfg.model_copy(update=inp.report.section_overrides.get("simulation", {}))

    def bound(self, role: str) -> int:
        """A reply bound the stage sets itself (patient messages, memory rewrites), as preflight's context check
        reads it."""
        from mindsimkit.mindcore.stages import output_bound

        found = output_bound(role)
        return found(self.inp) if found is not None else self.spec(role).max_tokens or ASSUMED_UNBOUNDED_REPLY

    def spec(self, label: str) -> RoleSpec:
        return self.specs.get(label) or self.config.role_spec(label)

    def add(self, stage: str, label: str, calls: Calls, note: str | None = None) -> None:
        spec = self.spec(label)
        load = self.loads.get((stage, label))
        if load is None:
            engine = self.config.engines.get(spec.engine)
            model = spec.model or getattr(engine, "model", None) or getattr(engine, "model_path", None) or spec.engine
            load = self.loads[(stage, label)] = RoleLoad(stage=stage, role=label, engine=spec.engine, model=model)
        reqs = calls.n * (1 + calls.retry_share * (calls.attempts - 1))
        worst = calls.n_worst * calls.attempts
        completion, prompt, cached = calls.completion, calls.prompt, calls.cached
        if label in self.measured:
            completion, load.completion_from = self.measured[label], f"run {self.measured_from}"
        if label in self.measured_prompts:
            prompt, share = self.measured_prompts[label]
            cached, load.prompt_from = reqs * prompt * share, f"run {self.measured_from}"
        load.requests += reqs
        load.requests_worst += worst
        load.prompt_tokens += reqs * prompt
        # The largest prompt is estimated (at 4 characters a token unless a tokenizer counts): never below a mean
        # a run measured.
        load.prompt_tokens_worst += worst * max(calls.prompt_worst, prompt)
        load.completion_tokens += reqs * completion
        load.completion_tokens_worst += worst * calls.completion_worst
        load.cached_tokens += cached
        if note and note not in load.notes:
            load.notes.append(note)


# -- sizes ------------------------------------------------------------------------------------------------------
def _estimate(
    ctx: _Ctx,
    role: str,
    inp: EstimateInputs | None = None,
    *,
    typical: bool = False,
    estimator: Callable[[Any, Any], PromptSize | None] | None = None,
) -> PromptSize | None:
    """The role's registered prompt estimate (or `estimator`): its largest prompt, or with `typical` a likely one
    (the expected value's size; an estimator with nothing to choose gives the same)."""
    est = estimator or prompt_estimator(role)
    base = inp or ctx.inp
    return est(replace(base, typical=typical), ctx.sz) if est is not None else None


def _tokens(est: PromptSize | None, part: str | None = None) -> float:
    """An estimate's tokens, or those of one named part of it (the whole where it has no such part)."""
    if est is None:
        return 0.0
    return float(est.parts.get(part, est.tokens) if part else est.tokens)


def _estimates(ctx: _Ctx, role: str) -> tuple[PromptSize | None, PromptSize | None]:
    """The role's typical and largest prompt estimates, each evaluated once."""
    return _estimate(ctx, role, typical=True), _estimate(ctx, role)


def _size(ctx: _Ctx, role: str, part: str | None = None) -> tuple[float, float]:
    """Typical and largest prompt of `role` (or of one named part of its estimate), in tokens."""
    typical, largest = _estimates(ctx, role)
    return _tokens(typical, part), _tokens(largest, part)


def _with_replies(ctx: _Ctx, replies: int) -> EstimateInputs:
    """The estimate inputs of the same recipe with sessions of `replies` counsellor replies (the turn cap to match)."""
    s = ctx.simulation()
    section = {
        **(getattr(ctx.recipe, "simulation", None) or {}),
        "counsellor_replies": replies,
        "turn_cap": replies + (s.opening == "patient"),
    }
    return replace(ctx.inp, recipe=ctx.recipe.model_copy(update={"simulation": section}))


def _growing(
    ctx: _Ctx, role: str, replies: int, estimator: Callable[[Any, Any], PromptSize | None] | None = None
) -> tuple[float, float]:
    """A role whose prompt grows by the same pieces every turn: its typical mean prompt over a session's `replies`
    requests (the midpoint of its typical first and last) and its largest, last one."""
    last = _estimate(ctx, role, estimator=estimator)
    if last is None:
        return 0.0, 0.0
    typical_last = _estimate(ctx, role, typical=True, estimator=estimator) or last
    if replies <= 1:
        return float(typical_last.tokens), float(last.tokens)
    first = _estimate(ctx, role, _with_replies(ctx, 1), typical=True, estimator=estimator)
    return ((first.tokens if first else typical_last.tokens) + typical_last.tokens) / 2, float(last.tokens)


def _schemas(ctx: _Ctx, role: str, name: str | None = None) -> list[Any]:
    from mindsimkit.mindcore.config import role_base

    base = role_base(role)
    return [
        e
        for e in registered()
        if e.role in (role, base) and (name is None or e.name == name) and (e.active is None or e.active(ctx.recipe))
    ]


def _answer(ctx: _Ctx, role: str, name: str | None = None) -> float:
    """Expected tokens of a structured answer: the mean of the role's schemas' largest instances (strings at their
    maxLength), counted as prompts are, times `structured_fill`."""
    sizes = []
    for entry in _schemas(ctx, role, name):
        try:
            sizes.append(ctx.sz(json.dumps(largest_instance(entry.schema_of(ctx.recipe)), ensure_ascii=False)) + 1)
        except ValueError:  # an unbounded schema has no largest instance: its budget stands in
            continue
    if not sizes:
        return float(_budget(ctx, role, name))
    return ctx.a.structured_fill * sum(sizes) / len(sizes)


def _budget(ctx: _Ctx, role: str, name: str | None = None) -> int:
    """The most one answer of `role` may spend (schema budget as preflight fitted it, else the role's max_tokens)."""
    from mindsimkit.mindcore.config import role_base

    values = [
        ln.budget
        for ln in ctx.report.lines
        if ln.role in (role, role_base(role)) and ln.budget is not None and (name is None or ln.schema == name)
    ]
    if values:
        return max(values)
    return ctx.spec(role).max_tokens or ASSUMED_UNBOUNDED_REPLY


def _thinking(ctx: _Ctx, role: str) -> tuple[float, int]:
    rb = ctx.spec(role).reasoning_budget or 0
    return ctx.a.reasoning_fill * rb, rb


def structured(
    ctx: _Ctx,
    role: str,
    n: float,
    n_worst: float,
    prompt: float,
    prompt_worst: float,
    *,
    name: str | None = None,
    attempts: int | None = None,
    cached: float = 0.0,
) -> Calls:
    think, think_worst = _thinking(ctx, role)
    return Calls(
        n,
        n_worst,
        prompt,
        prompt_worst,
        _answer(ctx, role, name) + think,
        _budget(ctx, role, name) + think_worst,
        attempts=attempts or ctx.spec(role).max_attempts,
        cached=cached,
        retry_share=ctx.a.structured_retry_share,
    )


def plain(
    ctx: _Ctx,
    role: str,
    bound: int,
    n: float,
    n_worst: float,
    prompt: float,
    prompt_worst: float,
    *,
    cached: float = 0.0,
) -> Calls:
    think, think_worst = _thinking(ctx, role)
    return Calls(n, n_worst, prompt, prompt_worst, ctx.a.reply_fill * bound + think, bound + think_worst, cached=cached)


def _retries(share: float, most: int) -> tuple[float, int]:
    """Expected and worst asks of something each ask of which fails at `share`, re-asked up to `most` more times
    (the first ask, plus one more for each failure in a row: a geometric sum)."""
    return sum(share**k for k in range(most + 1)), 1 + most


# -- the stages -------------------------------------------------------------------------------------------------
def _profiles(ctx: _Ctx) -> None:
    from mindsimkit.profilegen.config import profiles_config

    cfg = profiles_config(ctx.recipe)
    if cfg.source == "patientact-situations":
        _situation_profiles(ctx, cfg)
        return
    # A draft still serious after a revision is revised again, up to max_revisions: a geometric sum.
    drafts = cfg.candidates * sum(ctx.a.serious_share**k for k in range(cfg.max_revisions + 1))
    drafts_worst = cfg.candidates * (1 + cfg.max_revisions)
    typical, largest = _estimates(ctx, "profile_writer")
    first, first_worst = _tokens(typical, "first draft"), _tokens(largest, "first draft")
    revision, revision_worst = _tokens(typical, "revision"), _tokens(largest, "revision")
    mean_prompt = (cfg.candidates * first + (drafts - cfg.candidates) * revision) / drafts
    ctx.add(
        "profiles",
        "profile_writer",
        structured(
            ctx,
            "profile_writer",
            drafts,
            drafts_worst,
            mean_prompt,
            max(first_worst, revision_worst),
            name="formulation",
        ),
    )
    if cfg.shape.patientact:
        _patientact_shape_calls(
            ctx, drafts, drafts_worst, (first, first_worst), (revision, revision_worst), cfg.max_revisions
        )
    size, worst = _size(ctx, "screener")
    ctx.add("profiles", "screener", structured(ctx, "screener", drafts, drafts_worst, size, worst, name="screen"))


def _patientact_shape_calls(
    ctx: _Ctx,
    drafts: float,
    drafts_worst: int,
    first: tuple[float, float],
    revision: tuple[float, float],
    max_revisions: int,
) -> None:
    """The writer's extra calls under PatientAct's profile shape: a personal history or cycle added for each
    repeated label (its prompt is the first draft's plus the draft itself), and the demographics revision before
    each screen (its prompt taken at the revision's size, which holds more: the whole writer prompt and a draft).
    `first` and `revision` are the writer's typical and largest prompts for each."""
    from mindsimkit.profilegen.formulation import ADDED_ENTRIES

    answer = _answer(ctx, "profile_writer", "formulation")
    with_draft, with_draft_worst = first[0] + answer, first[1] + answer
    (draft,) = _schemas(ctx, "profile_writer", "formulation")
    props = draft.schema_of(ctx.recipe)["properties"]
    for entry, name in ADDED_ENTRIES.items():
        # A list of at least N entries: its first N can hold N - 1 repeats, each one call.
        most = int(props[entry]["minItems"]) - 1
        added = drafts * most * ctx.a.repeated_label_share
        ctx.add(
            "profiles",
            "profile_writer",
            structured(ctx, "profile_writer", added, drafts_worst * most, with_draft, with_draft_worst, name=name),
        )
    fixes = drafts * ctx.a.demographics_conflict_share
    ctx.add(
        "profiles",
        "profile_writer",
        structured(
            ctx,
            "profile_writer",
            fixes,
            drafts_worst * (max_revisions + 1),
            revision[0],
            revision[1],
            name="demographics",
        ),
    )


def _situation_profiles(ctx: _Ctx, cfg: Any) -> None:
    """The situation chain: per generation a problem formulation, demographics rounds (one expected, the recipe's
    most in the worst case) and a psychological formulation, then one validation; a failed validation generates
    again (expected at the screen's serious share, worst case every round)."""
    from mindsimkit.profilegen.situation_stage import rounds, situation_count

    n = situation_count(cfg)
    d_rounds, v_rounds = rounds(cfg)
    gens = n * sum(ctx.a.serious_share**k for k in range(v_rounds))
    gens_worst = n * v_rounds
    typical, largest = _estimates(ctx, "profile_writer")
    for name, key, each, most in (
        ("situation_problem", "problem formulation", 1, 1),
        ("situation_demographics", "demographics", 1, d_rounds),
        ("situation_psych", "psychological formulation", 1, 1),
    ):
        size, worst = _tokens(typical, key), _tokens(largest, key)
        ctx.add(
            "profiles",
            "profile_writer",
            structured(ctx, "profile_writer", gens * each, gens_worst * most, size, worst, name=name),
        )
    size, worst = _size(ctx, "screener")
    ctx.add(
        "profiles", "screener", structured(ctx, "screener", gens, gens_worst, size, worst, name="situation_validation")
    )


def _patients(ctx: _Ctx, s: Any) -> int:
    from mindsimkit.profilegen.config import profiles_config

    cfg = profiles_config(ctx.recipe)
    if cfg.source == "patientact-situations":  # every situation is one patient, in the pool and the benchmark
        from mindsimkit.profilegen.situation_stage import situation_count

        n = situation_count(cfg)
        return min(n, s.max_patients) if s.max_patients else n
    n = cfg.benchmark_size if s.benchmark_only else cfg.pool_size
    return min(n, s.max_patients) if s.max_patients else n


def _simulate(ctx: _Ctx) -> None:
    s = ctx.simulation()
    patients, replies, couns = _patients(ctx, s), s.replies_per_session, ctx.counsellor_labels(s)
    arcs_per_kind = patients * len(couns) * s.trials
    # The patient and counsellor prompts grow every turn; the scenario writer and the memory read a whole session.
    c_mean, c_last = _growing(ctx, "counsellor", replies)
    scen_t, scen_worst = _size(ctx, "scenario_writer")
    first_t, first_worst = _size(ctx, "first_scenario_writer")
    mem_typical, mem_largest = _estimates(ctx, "memory_compactor")
    mem_first, mem_worst = _tokens(mem_typical, "first ask"), _tokens(mem_largest)
    # A scenario whose opening is not speech is drafted again, each draft its own structured call.
    drafts, drafts_worst = _retries(ctx.a.scenario_redraft_share, s.max_message_retries)
    ctx.add(
        "simulate",
        "first_scenario_writer",
        structured(
            ctx,
            "first_scenario_writer",
            patients * drafts,
            patients * drafts_worst,
            first_t,
            first_worst,
            name="Scenario",
        ),
    )
    sessions = 0
    for kind in s.patient_engines:
        n_s = s.sessions_for(kind)
        sessions_k = arcs_per_kind * n_s
        sessions += sessions_k
        later = arcs_per_kind * (n_s - 1)
        if later:
            ctx.add(
                "simulate",
                "scenario_writer",
                structured(
                    ctx,
                    "scenario_writer",
                    later * drafts,
                    later * drafts_worst,
                    scen_t,
                    scen_worst,
                    name="Scenario",
                ),
            )
        rewrites = arcs_per_kind * (n_s - (0 if s.final_memory else 1))
        if rewrites:
            asks, asks_worst = _retries(ctx.a.memory_reask_share, s.memory_retries)
            ctx.add(
                "simulate",
                "memory_compactor",
                plain(
                    ctx,
                    "memory_compactor",
                    ctx.bound("memory_compactor"),
                    rewrites * asks,
                    rewrites * asks_worst,
                    mem_first,
                    mem_worst,
                ),
            )
        turns = sessions_k * replies
        _patient_turns(ctx, s, kind, turns, sessions_k, patients, ctx.bound("patient"))
    for c in dict.fromkeys(couns):
        share = couns.count(c) / len(couns)
        n = sessions * share * replies
        bound = ctx.inp.counsellor_max_tokens.get(c) or ctx.spec(c).max_tokens or ASSUMED_UNBOUNDED_REPLY
        # Each request's prompt is the one before it plus one exchange: all but the last is a cached prefix.
        cached = n * c_mean - sessions * share * c_last
        note = (
            None
            if (ctx.spec(c).max_tokens or ctx.inp.counsellor_max_tokens.get(c))
            else f"no max_tokens: replies assumed {ASSUMED_UNBOUNDED_REPLY} tokens"
        )
        ctx.add("simulate", c, plain(ctx, c, bound, n, n, c_mean, c_last, cached=max(cached, 0.0)), note)


def _patient_turns(ctx: _Ctx, s: Any, kind: str, turns: float, sessions: float, patients: int, bound: int) -> None:
    """The patient engine's own calls over `turns` patient turns: each engine asks differently."""
    from mindsimkit.mindsim.patient_engines import variant
    from mindsimkit.mindsim.patient_engines.base import PatientEngine

    v = variant(kind)
    tools = v.engine.calls_tools  # MindSim's patient: commit_move (and agenda calls) every turn
    msg, msg_worst = _retries(ctx.a.message_reask_share, s.max_message_retries)
    # An engine that sizes its own message request is planned at that size; one that does not, at the registered
    # patient estimate (MindSim's: its tool-call turns make it the largest patient prompt).
    settings = dict(v.settings)
    own = type(v.engine).message_prompt is not PatientEngine.message_prompt
    estimator = (lambda inp, sz: v.engine.message_prompt(inp, sz, settings)) if own else None
    p_mean, p_last = _growing(ctx, "patient", s.replies_per_session, estimator)
    # The patient's requests extend one history over the session: each but the last is a prefix of the next.
    per_turn = msg + (_mindsim_calls(ctx, s)[0] if tools else 0.0)
    cached = max(turns * per_turn * p_mean - sessions * p_last, 0.0)
    note = None if tools or own else f"{kind}'s messages sized as MindSim's patient prompt (an upper estimate)"
    ctx.add(
        "simulate",
        "patient",
        plain(ctx, "patient", bound, turns * msg, turns * msg_worst, p_mean, p_last, cached=cached),
        note,
    )
    if tools:
        (commit, commit_worst), todo = _mindsim_calls(ctx, s)[1:]
        ctx.add(
            "simulate",
            "patient",
            structured(
                ctx, "patient", turns * commit, turns * commit_worst, p_mean, p_last, name="tool_choice:commit_move"
            ),
        )
        if todo:
            ctx.add(
                "simulate",
                "patient",
                structured(ctx, "patient", turns * todo, turns * todo, p_mean, p_last, name="tool_choice:agenda"),
            )
    elif "patient_appraiser" in v.engine.roles:  # PatientAct's steps
        _patientact(ctx, s, v, turns, patients)
    elif "baseline_mapper" in v.engine.roles:
        size, worst = _size(ctx, "baseline_mapper")
        attempts = s.baselines.mapper_attempts or ctx.spec("baseline_mapper").max_attempts
        ctx.add(
            "simulate",
            "baseline_mapper",
            structured(ctx, "baseline_mapper", patients, patients, size, worst, attempts=attempts),
            "one mapping per patient and baseline",
        )
        if "consistentmi_tracker" in v.engine.roles:  # ConsistentMI's per-turn questions
            _tracker(ctx, s, v, turns)
    if "annaagent_modulator" in v.engine.roles:  # AnnaAgent's per-turn control calls
        _annaagent(ctx, s, kind, turns)


def _annaagent(ctx: _Ctx, s: Any, kind: str, turns: float) -> None:
    """Every client turn asks the emotion and the complaint switch; a turn after the arc's first session also
    asks the memory check, and its recall (plain text) is counted as if every such check said yes."""
    n_s = s.sessions_for(kind)
    later = turns * (n_s - 1) / n_s
    size, worst = _size(ctx, "annaagent_modulator")
    attempts = s.baselines.anna_attempts
    ctx.add(
        "simulate",
        "annaagent_modulator",
        structured(ctx, "annaagent_modulator", 2 * turns + later, 2 * turns + later, size, worst, attempts=attempts),
        "emotion and complaint switch every client turn, the memory check after a first session",
    )
    if later:
        bound = s.baselines.anna_recall_max_tokens or ctx.bound("annaagent_modulator")
        ctx.add(
            "simulate",
            "annaagent_modulator",
            plain(ctx, "annaagent_modulator", bound, later, later * attempts, size, worst),
            "recall counted on every turn after a first session (an upper estimate)",
        )


def _tracker(ctx: _Ctx, s: Any, v: Any, turns: float) -> None:
    per_turn, most = v.engine.tracker_calls
    size, worst = _size(ctx, "consistentmi_tracker")
    ctx.add(
        "simulate",
        "consistentmi_tracker",
        structured(
            ctx,
            "consistentmi_tracker",
            turns * per_turn,
            turns * most,
            size,
            worst,
            attempts=s.consistentmi.tracker_attempts,
        ),
        f"{per_turn:g} questions a turn expected, {most} at most",
    )


def _mindsim_calls(ctx: _Ctx, s: Any) -> tuple[float, tuple[float, int], int]:
    """MindSim's tool calls per turn: commits (re-asked when the guard turns a move back) and agenda calls."""
    commit = _retries(ctx.a.commit_reject_share, s.max_commit_retries)
    return commit[0] + s.max_todo_calls, commit, s.max_todo_calls


def _patientact(ctx: _Ctx, s: Any, v: Any, turns: float, patients: int) -> None:
    pa = s.patientact.model_copy(update=dict(v.settings))
    steps = (2 + ctx.a.resistance_share if pa.pipeline else 0.0) + 1  # reaction, behaviour, (resistance), trust
    steps_worst = (3 if pa.pipeline else 0) + 1
    size, worst = _size(ctx, "patient_appraiser")
    ctx.add(
        "simulate",
        "patient_appraiser",
        structured(
            ctx, "patient_appraiser", turns * steps, turns * steps_worst, size, worst, attempts=pa.step_attempts
        ),
    )
    if pa.dynamic_memory and pa.retrieval == "llm":
        m, m_worst = _size(ctx, "patient_matcher")
        ctx.add(
            "simulate",
            "patient_matcher",
            structured(ctx, "patient_matcher", turns, turns, m, m_worst, attempts=pa.step_attempts),
        )
    key = ("simulate", "profile_decomposer")
    if key not in ctx.loads:  # one decomposition per patient, shared by every arm
        d, d_worst = _size(ctx, "profile_decomposer")
        calls = _decomposer_calls(ctx, pa)
        ctx.add(
            "simulate",
            "profile_decomposer",
            structured(
                ctx, "profile_decomposer", patients * calls, patients * calls, d, d_worst, attempts=pa.step_attempts
            ),
            "one decomposition per patient, shared by every arm",
        )


def _decomposer_calls(ctx: _Ctx, pa: Any) -> int:
    """The decomposition's chunks of profile pieces, plus the psychological formulation and its screen."""
    from mindsimkit.mindsim.patientact.decompose import max_pieces
    from mindsimkit.profilegen.config import profiles_config

    pieces: int = max_pieces(profiles_config(ctx.recipe).patientact_shape)
    chunk: int = pa.decomposition_chunk
    return (
        math.ceil(pieces / chunk)
        + (1 if pa.psych_formulation else 0)
        + (2 if pa.psych_formulation and pa.psych_screen else 0)
    )


def _validate(ctx: _Ctx) -> None:
    from mindsimkit.mindcore.prompts import render
    from mindsimkit.validation.arc import SYSTEM_TEMPLATE

    from mindsimkit.validation.config import ValidationConfig

    if not ValidationConfig.model_validate(getattr(ctx.recipe, "validation", None) or {}).arc:
        return  # without the arc labels validation asks no model
    s = ctx.simulation()
    # One label per patient message, the scripted opening included. Labels are cached by request content, and the
    # first session's opening is the patient's first scenario, the same in every arc of that patient (every
    # counsellor, engine and trial) with nothing before it: one request per patient labels it for all of them.
    sessions = _sessions(ctx, s)
    arcs = _patients(ctx, s) * len(ctx.counsellor_labels(s)) * s.trials * len(s.patient_engines)
    openings = (_patients(ctx, s) + sessions - arcs) if s.opening == "patient" else 0
    n = sessions * s.replies_per_session + openings
    size, worst = _size(ctx, "labeller")
    system = ctx.sz(render(SYSTEM_TEMPLATE))
    ctx.add(
        "validate",
        "labeller",
        structured(ctx, "labeller", n, n, size, worst, cached=max(n - 1, 0) * system),
        "the labeller's instructions are the same for every request",
    )


def _sessions(ctx: _Ctx, s: Any) -> float:
    couns = len(ctx.counsellor_labels(s))
    return float(sum(_patients(ctx, s) * couns * s.trials * s.sessions_for(k) for k in s.patient_engines))


def _judge(ctx: _Ctx) -> None:
    from mindsimkit.judge.config import JudgeConfig

    s = ctx.simulation()
    cfg = JudgeConfig.model_validate(getattr(ctx.recipe, "judge", None) or {})
    replies = min(s.replies_per_session, cfg.max_replies) if cfg.max_replies else s.replies_per_session
    sessions = _sessions(ctx, s)
    mean, last = _growing(ctx, "judge", replies)
    rubric = _rubric_tokens(ctx, cfg)
    n = sessions * replies
    # Within a session each judgment's prompt holds the one before it; the rubric is the same in every session.
    cached = max(n * mean - sessions * last + max(sessions - 1, 0) * rubric, 0.0)
    for judge in cfg.judges:
        ctx.add(
            "judge",
            judge,
            structured(ctx, judge, n, n, mean, last, name="mhqr_judgment", cached=cached),
            "every counsellor reply judged" + (f" (at most {cfg.max_replies} a session)" if cfg.max_replies else ""),
        )


def _rubric_tokens(ctx: _Ctx, cfg: Any) -> float:
    """The judge's instructions (its system message), which every judgment repeats."""
    from mindsimkit.judge.judging import Judge, replies
    from mindsimkit.judge.rubric import load_rubric
    from mindsimkit.judge.schemas import SessionInput

    judge = Judge(
        "judge",
        None,
        load_rubric(cfg.rubric),
        full_rubric=cfg.full_rubric,
        max_issues=cfg.max_issues,
        preset=cfg.preset,
    )
    session = SessionInput(
        session_id="s",
        patient_id="p",
        counsellor="c",
        session_index=1,
        counsellor_system_prompt="",
        messages=[{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello"}],
    )
    messages = judge.messages(replies(session)[-1])
    return float(sum(ctx.sz(str(m.get("content") or "")) for m in messages if m.get("role") == "system"))


STAGE_COUNTS: dict[str, Callable[[_Ctx], None]] = {
    "profiles": _profiles,
    "simulate": _simulate,
    "validate": _validate,
    "judge": _judge,
}


# -- the plan ---------------------------------------------------------------------------------------------------
def job_stages(recipe: Any) -> set[str]:
    """The stages `mindsim run` runs for this recipe (as the job decides them)."""
    from mindsimkit.validation.config import ValidationConfig

    vcfg = recipe.section("validation", ValidationConfig)
    return {"run"} | ({"judge"} if recipe.judge is not None else set()) | ({"validate"} if vcfg.arc else set())


def role_loads(
    recipe: Any,
    *,
    counsellors: int | None = None,
    measured: dict[str, float] | None = None,
    measured_from: str | None = None,
    assumptions: Assumptions | None = None,
    notes: list[str] | None = None,
    lengths: dict[str, float] | None = None,
    measured_prompts: dict[str, tuple[float, float]] | None = None,
) -> list[RoleLoad]:
    """Every role's expected and worst-case work for `mindsim run RECIPE`, in stage order. `counsellors` plans
    for that many counsellors under test (the recipe's list cycled or cut); `lengths` are a finished run's
    measured text lengths (`read_lengths`), which the expected value's prompts quote."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.stages import stage_roles

    config = recipe.engines_config()
    stages = job_stages(recipe)
    report = _fit(recipe, config, stages, notes if notes is not None else [])
    uses = stage_roles(recipe, Engines(config), stages)
    specs = {u.label: u.spec for u in uses if u.spec is not None}
    assumptions = assumptions or load_assumptions()
    inp = EstimateInputs(
        recipe,
        config,
        report,
        {u.label: u.max_tokens for u in uses if u.role == "counsellor"},
        lengths=dict(lengths or {}),
        rates={"commit_reject_share": assumptions.commit_reject_share},
    )
    ctx = _Ctx(
        recipe,
        config,
        report,
        inp,
        Sizer(),
        assumptions,
        specs,
        measured or {},
        measured_from,
        {},
        counsellors,
        dict(measured_prompts or {}),
    )
    for name in ("profiles", "simulate", "validate", "judge"):
        if name in expand_stages(stages):
            STAGE_COUNTS[name](ctx)
    return list(ctx.loads.values())


def _fit(recipe: Any, config: EnginesConfig, stages: set[str], notes: list[str]) -> BudgetReport:
    """The budgets as preflight fits them, counted by the byte bound since no engine is asked for its tokenizer.
    A recipe whose budgets fit only by an engine's own tokenizer is planned at the budgets it sets, and the plan
    says so: preflight decides with the tokenizer when the run starts."""
    from mindsimkit.mindcore.errors import ConfigError

    try:
        return fit_budgets(recipe, config, stages)
    except ConfigError as exc:
        first = str(exc).splitlines()[1].strip() if len(str(exc).splitlines()) > 1 else str(exc)
        notes.append(
            "budgets planned as the recipe sets them: by the byte bound, without the engines' tokenizers, "
            f"preflight would refuse some ({first[:160]}…); the run's preflight counts with the tokenizers"
        )
        return BudgetReport()


# -- money and hours --------------------------------------------------------------------------------------------
class PlanRow(RoleLoad):
    """A role's load with its money and time; None where a figure is unknown (then `unknown` says why)."""

    cost: float | None = None
    cost_worst: float | None = None
    price_key: str | None = None
    time_s: float | None = None
    time_s_worst: float | None = None
    servers: int = 1


class Plan(BaseModel):
    """`mindsim plan`'s answer, as `--json` prints it and run.json keeps it (`plan`)."""

    recipe: str
    stages: list[str]
    counsellors: int
    rows: list[PlanRow]
    engines: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Engine → servers, throughput, time")
    totals: dict[str, Any] = Field(default_factory=dict)
    unknown: list[str] = Field(default_factory=list, description="One line per figure the plan cannot give")
    notes: list[str] = Field(default_factory=list)
    assumptions: dict[str, float] = Field(default_factory=dict)
    sources: dict[str, str] = Field(
        default_factory=dict, description="Where prices, throughput and completions came from"
    )


PRICES_HINT = (
    "add it under judge.prices in the recipe or to a --prices file (role or model → input, output, cached_input)"
)


LOCAL_PRICE = "none: the embedded engine runs on this machine (its cost is the time column)"


def load_prices(recipe: Any, path: Path | None = None) -> dict[str, Any]:
    """The recipe's `judge.prices`, with a `--prices` file's entries over them (a role or model name each)."""
    from mindsimkit.judge.config import JudgeConfig
    from mindsimkit.judge.costs import Price
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindcore.yamlio import safe_load

    prices = dict(JudgeConfig.model_validate(getattr(recipe, "judge", None) or {}).prices)
    if path is None:
        return prices
    try:
        data = safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(
            f"{path}: not a readable YAML prices file ({type(exc).__name__}); give a YAML mapping of "
            "role or model name → input, output, cached_input (docs/plan.md)"
        ) from None
    data = data.get("prices", data) if isinstance(data, dict) else data
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected a mapping of role or model name → {{input, output, cached_input}}; see docs/plan.md"
        )
    for name, value in data.items():
        try:
            prices[str(name)] = Price.model_validate(value)
        except ValueError as exc:
            raise InputError(
                f"{path}: price '{name}' is not input/output/cached_input per million tokens "
                f"({str(exc).splitlines()[-1].strip()}); see docs/plan.md"
            ) from None
    return prices


def _price(row: PlanRow, prices: dict[str, Any]) -> bool:
    """Fill the row's cost; False when it has no price."""
    from mindsimkit.judge.costs import PER, price_for

    price, key = price_for(row.role, row.model, prices)
    if price is None:
        return False
    uncached = row.prompt_tokens - row.cached_tokens
    cached_price = price.input if price.cached_input is None else price.cached_input
    row.price_key = key
    row.cost = (uncached * price.input + row.cached_tokens * cached_price + row.completion_tokens * price.output) / PER
    row.cost_worst = (row.prompt_tokens_worst * price.input + row.completion_tokens_worst * price.output) / PER
    return True


def _unpriced(rows: list[PlanRow]) -> list[str]:
    """One line per model without a price, naming the roles that use it."""
    by_model: dict[str | None, list[str]] = {}
    for r in rows:
        if r.cost is None:
            by_model.setdefault(r.model, []).append(r.role)
    return [
        f"no price for role{'s' if len(roles) > 1 else ''} {', '.join(dict.fromkeys(roles))} (model {model}); "
        f"{PRICES_HINT}"
        for model, roles in by_model.items()
    ]


def _time(row: PlanRow, rate: Any) -> None:
    """Seconds of this role's work on its engine: prefill of the prompt a cache cannot serve plus generation, at the
    engine's measured rates, divided by the servers the work is spread over."""
    uncached = row.prompt_tokens - row.cached_tokens
    row.time_s = (
        uncached / rate.prompt_tokens_per_s + row.completion_tokens / rate.completion_tokens_per_s
    ) / row.servers
    row.time_s_worst = (
        row.prompt_tokens_worst / rate.prompt_tokens_per_s + row.completion_tokens_worst / rate.completion_tokens_per_s
    ) / row.servers


class _LedgerRow(BaseModel):
    """What the plan reads of one role's counters in a run's ledger (run.json `usage`); the rest is left alone."""

    model_config = ConfigDict(extra="allow")
    calls: int | None = Field(None, ge=0)
    attempts: int | None = Field(None, ge=0)
    prompt_tokens: int | None = Field(None, ge=0)
    completion_tokens: int | None = Field(None, ge=0)
    cached_tokens: int | None = Field(None, ge=0)


def ledger(usage: Any, where: Path | None = None) -> dict[str, dict[str, int]]:
    """Per role, what a finished run's ledger (run.json `usage`) recorded as the plan counts it: its requests (the
    attempts, retries inside a structured call included) and their prompt, completion and cached tokens. A pilot's
    ledger (`where`: its run.json) is a file from elsewhere: a counter that is not a count is one `InputError`."""
    from pydantic import ValidationError

    from mindsimkit.judge.costs import stage_usage
    from mindsimkit.mindcore.errors import InputError

    def bad(role: str, what: str) -> InputError:
        return InputError(
            f"{where or 'run.json'}: usage of role {role!r}: {what}; a run's ledger holds counts of requests and "
            "tokens (give the folder of a run `mindsim run` wrote)"
        )

    out = {}
    for role, u in stage_usage(usage if isinstance(usage, dict) else {}).items():
        if not isinstance(u, dict):
            raise bad(role, f"a {type(u).__name__}, not a table of counters")
        try:
            row = _LedgerRow.model_validate(u)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise bad(role, f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}") from None
        out[role] = {
            "requests": row.attempts or row.calls or 0,
            "prompt_tokens": row.prompt_tokens or 0,
            "completion_tokens": row.completion_tokens or 0,
            "cached_tokens": row.cached_tokens or 0,
        }
    return out


def usage_means(usage: Any, where: Path | None = None) -> dict[str, dict[str, float]]:
    """Per role, what one request of a finished run held on average, from its run.json `usage` (read from `where`):
    completion and prompt tokens, and the share of the prompt tokens a prefix cache served."""
    out = {}
    for role, u in ledger(usage, where).items():
        asked, prompt = u["requests"], u["prompt_tokens"]
        if asked:
            out[role] = {
                "completion": u["completion_tokens"] / asked,
                "prompt": prompt / asked,
                "cached_share": u["cached_tokens"] / prompt if prompt else 0.0,
            }
    return out


# Settings that change how many requests a run makes, not what one request holds: a run that differs from the
# planned recipe only in these measured the same requests.
POPULATION_KEYS = {
    "profiles": ("candidates", "extra_candidates", "pool_size", "benchmark_size"),
    "simulation": ("max_patients", "trials", "benchmark_only"),
}
NOT_SHAPE = ("name", "path", "seed", "description", "output", "release")


# Of an engine, what decides how its prompts are counted; where it is served (URL, port, concurrency) does not.
ENGINE_SHAPE = ("kind", "model", "model_path", "reencode")


def _shape(content: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in content.items() if k not in NOT_SHAPE}
    if isinstance(out.get("engines"), dict):
        out["engines"] = {
            name: {k: v for k, v in e.items() if k in ENGINE_SHAPE} if isinstance(e, dict) else e
            for name, e in out["engines"].items()
        }
    for section, keys in POPULATION_KEYS.items():
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k not in keys}
    return out


def pilot_recipe(recipe: Any, ran: Any, where: Path | None = None) -> Any:
    """`recipe` with the population a pilot of the same shape ran (`ran`, its run.json `recipe`, read from `where`):
    what the pilot's own plan is made from. A bad value there is reported against `where`, not the recipe."""
    content = ran.model_dump(mode="json")
    update = {}
    for section, keys in POPULATION_KEYS.items():
        mine = {k: v for k, v in (getattr(recipe, section) or {}).items() if k not in keys}
        theirs = content.get(section) or {}
        update[section] = {**mine, **{k: theirs[k] for k in keys if k in theirs}}
    return recipe.model_copy(update={**update, "path": str(where) if where else recipe.path})


def request_factors(
    recipe: Any, ran: Any, usage: Any, assumptions: Assumptions, where: Path | None = None
) -> dict[str, float]:
    """Per role, the requests a pilot of the same shape sent for each request its own plan expected. The counts are
    the recipe's arithmetic; what the assumed rates guess (drafts screened serious, commits refused, messages and
    scenarios asked again) the pilot measured on the model the run will use."""
    planned: dict[str, float] = {}
    for load in role_loads(pilot_recipe(recipe, ran, where), assumptions=assumptions, notes=[]):
        planned[load.role] = planned.get(load.role, 0.0) + load.requests
    counted = ledger(usage, where)
    return {role: u["requests"] / planned[role] for role, u in counted.items() if u["requests"] and planned.get(role)}


def _scale_requests(load: RoleLoad, factor: float, source: str) -> None:
    """`load`'s expected requests and the tokens they carry times `factor`, never past its worst case."""
    factor = min(factor, load.requests_worst / load.requests) if load.requests else factor
    for name in ("requests", "prompt_tokens", "completion_tokens", "cached_tokens"):
        setattr(load, name, getattr(load, name) * factor)
    load.requests_from = source


def shape_differences(recipe: Any, ran: Any) -> list[str]:
    """The recipe sections in which a finished run's recipe (`ran`, its run.json `recipe`) differs from `recipe`
    beyond its population (how many candidates, patients, trials): empty when the run's requests are the ones this
    recipe will send."""
    if ran is None:
        return ["the run records no recipe"]
    mine, theirs = _shape(recipe.content_dump()), _shape(ran.model_dump(mode="json"))
    return sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))


class _QuotedTexts(BaseModel):
    """What `read_lengths` reads of a session row: the exchange as the counsellor saw it, and the memory it began
    from."""

    counsellor_messages: list[dict[str, Any]] = Field(default_factory=list)
    memory_before: list[str] = Field(default_factory=list)


def read_lengths(run_dir: Path) -> dict[str, float]:
    """Tokens (at the plan's 4 characters a token) a finished run's texts ran to on average: patient messages and
    counsellor replies as the counsellor saw them, and the running memory a session started from where it had one.
    A run without a sessions table measured none."""
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindcore.runlog import read_table, remake

    table = RunLayout(run_dir).sessions.parquet
    if not table.is_file():
        return {}
    rows = read_table(table, _QuotedTexts, what="sessions table", remake=remake("simulation", run_dir))
    chars: dict[str, list[int]] = {"patient_message": [], "counsellor_reply": [], "memory": []}
    for row in rows:
        for m in row.counsellor_messages:
            kind = {"user": "patient_message", "assistant": "counsellor_reply"}.get(m.get("role") or "")
            if kind and m.get("content"):
                chars[kind].append(len(m["content"]))
        if row.memory_before:
            chars["memory"].append(len("\n".join(row.memory_before)))
    per = Sizer.FALLBACK_CHARS_PER_TOKEN
    return {kind: sum(xs) / len(xs) / per for kind, xs in chars.items() if xs}


def check_pilot(run_dir: Path, option: str) -> Path:
    """`run_dir` when it holds a run.json, else one `InputError` naming the option (before any work starts)."""
    from mindsimkit.mindcore.errors import InputError

    if not (Path(run_dir) / "run.json").is_file():
        raise InputError(
            f"{option} {run_dir}: no run.json there; give the --out folder of a finished `mindsim run` of this recipe"
        )
    return Path(run_dir)


def make_plan(
    recipe: Any,
    *,
    counsellors: int | None = None,
    prices: dict[str, Any] | None = None,
    prices_file: Path | None = None,
    rates: dict[str, Any] | None = None,
    from_run: Path | None = None,
) -> Plan:
    """The plan of `mindsim run RECIPE`: every role's load, its cost at `prices` (default: the recipe's
    `judge.prices` with `prices_file` over them) and its time at the recorded throughput (`rates`: engine key →
    `Throughput`; default the user's record)."""
    from mindsimkit.mindsim_app.throughput import engine_key, load_records, record_path, servers_of

    from mindsimkit.mindcore.layout import RunLayout

    assumptions = load_assumptions()
    notes: list[str] = []
    measured: dict[str, float] = {}
    prompts: dict[str, tuple[float, float]] = {}
    factors: dict[str, float] = {}
    lengths = read_lengths(from_run) if from_run else {}
    if from_run:
        header = RunLayout(from_run).header()
        means = usage_means(header.usage, from_run / "run.json")
        measured = {role: m["completion"] for role, m in means.items()}
        differs = shape_differences(recipe, header.recipe)
        if differs:
            notes.append(
                f"prompts estimated, not taken from {from_run}: its recipe differs in {', '.join(differs)} (a run "
                "that differs only in candidates, pool, patients or trials gives its measured prompt sizes)"
            )
        else:
            prompts = {role: (m["prompt"], m["cached_share"]) for role, m in means.items() if m["prompt"]}
            factors = request_factors(recipe, header.recipe, header.usage, assumptions, from_run / "run.json")
    loads = role_loads(
        recipe,
        counsellors=counsellors,
        measured=measured,
        measured_from=str(from_run) if from_run else None,
        assumptions=assumptions,
        notes=notes,
        lengths=lengths,
        measured_prompts=prompts,
    )
    for load in loads:
        if load.role in factors:
            _scale_requests(load, factors[load.role], f"run {from_run}")
    prices = load_prices(recipe, prices_file) if prices is None else prices
    rates = load_records() if rates is None else rates
    config = recipe.engines_config()
    rows = [PlanRow(**load.model_dump(), servers=servers_of(config.engines[load.engine])) for load in loads]
    for row in rows:
        if getattr(config.engines[row.engine], "charges_per_token", True):
            _price(row, prices)
        else:
            row.cost = row.cost_worst = 0.0
            row.price_key = LOCAL_PRICE
    unknown = _unpriced(rows)
    engines: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.engine for r in rows):
        spec = config.engines[name]
        rate = rates.get(engine_key(spec))
        mine = [r for r in rows if r.engine == name]
        for r in mine:
            if rate is not None:
                _time(r, rate)
        engines[name] = {
            "kind": spec.kind,
            "servers": servers_of(spec),
            "key": engine_key(spec),
            "throughput": rate.model_dump() if rate is not None else None,
            "time_s": sum(r.time_s or 0 for r in mine) if rate is not None else None,
        }
        if rate is None:
            unknown.append(
                f"no throughput for engine {name} ({spec.kind}, {engine_key(spec).split('|')[1]}); "
                f"measure it with `mindsim engines check RECIPE --measure-throughput` (recorded in "
                f"{record_path()})"
            )
    return Plan(
        recipe=str(getattr(recipe, "name", "")),
        stages=sorted(dict.fromkeys(r.stage for r in rows)),
        counsellors=_counsellor_count(recipe, counsellors),
        rows=rows,
        engines=engines,
        totals=_totals(rows, engines),
        unknown=unknown,
        notes=notes,
        assumptions=assumptions.model_dump(),
        sources={
            "prices": "the recipe's judge.prices" + (f" and {prices_file}" if prices_file else ""),
            "throughput": str(record_path()),
            "completions": f"measured means of {from_run}" if from_run else "each role's bounds",
            "prompts": f"from the measured means of {from_run}" if prompts else "estimated from the templates",
            "requests": (
                f"the recipe's counts at the rates {from_run} showed (its requests per planned request)"
                if factors
                else "the recipe's counts at the assumed rates"
            ),
            "quoted texts": (
                f"lengths measured in {from_run} ("
                + ", ".join(f"{k} {v:.0f} tokens" for k, v in lengths.items())
                + "), at most their bounds"
                if lengths
                else "at their bounds"
            ),
        },
    )


def _counsellor_count(recipe: Any, counsellors: int | None) -> int:
    from mindsimkit.mindsim.config import SimulationConfig

    return counsellors or len(SimulationConfig.from_section(getattr(recipe, "simulation", None)).counsellors)


def _totals(rows: list[PlanRow], engines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Sums over roles; wall time adds the stages, each as long as its busiest engine (engines work side by side)."""
    sums = {
        k: sum(getattr(r, k) for r in rows)
        for k in (
            "requests",
            "requests_worst",
            "prompt_tokens",
            "prompt_tokens_worst",
            "completion_tokens",
            "completion_tokens_worst",
            "cached_tokens",
        )
    }
    priced = all(r.cost is not None for r in rows)
    timed = all(r.time_s is not None for r in rows)
    wall = wall_worst = 0.0
    for stage in dict.fromkeys(r.stage for r in rows):
        mine = [r for r in rows if r.stage == stage]
        if timed:
            wall += max(sum(r.time_s or 0 for r in mine if r.engine == e) for e in {r.engine for r in mine})
            wall_worst += max(sum(r.time_s_worst or 0 for r in mine if r.engine == e) for e in {r.engine for r in mine})
    return {
        **sums,
        "cost": sum(r.cost or 0 for r in rows) if priced else None,
        "cost_worst": sum(r.cost_worst or 0 for r in rows) if priced else None,
        "cost_known_part": sum(r.cost or 0 for r in rows if r.cost is not None),
        "wall_s": wall if timed else None,
        "wall_s_worst": wall_worst if timed else None,
    }


# -- plan beside actual -----------------------------------------------------------------------------------------
COMPARED = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "cost")


def _ratio(actual: float | None, planned: float | None) -> float | None:
    return actual / planned if actual is not None and planned else None


def plan_vs_actual(
    plan: dict[str, Any], usage: dict[str, dict[str, Any]], stage_seconds: dict[str, float], prices: dict[str, Any]
) -> dict[str, Any]:
    """Per role, the plan's expected requests, tokens and cost beside what the run's ledger recorded (requests are
    the ledger's attempts), and per stage the planned wall time beside the measured one; each with actual/planned."""
    from mindsimkit.judge.costs import cost_row, stage_usage

    actual = stage_usage(usage)
    counted = ledger(usage)
    planned: dict[str, dict[str, Any]] = {}
    for row in plan.get("rows", []):
        mine = planned.setdefault(row["role"], {k: 0.0 for k in COMPARED} | {"stages": []})
        for k in COMPARED:
            mine[k] = None if mine[k] is None or row.get(k) is None else mine[k] + row[k]
        mine["stages"].append(row["stage"])
    roles = []
    for role in [*planned, *(r for r in actual if r not in planned)]:
        p = planned.get(role)
        u = actual.get(role)
        a = None
        if u is not None:
            a = {**counted[role], "cost": cost_row(role, u, prices)["cost"]}
        roles.append(
            {
                "role": role,
                "stages": p["stages"] if p else [],
                "planned": p and {k: p[k] for k in COMPARED},
                "actual": a,
                "ratio": {k: _ratio(a[k] if a else None, p[k] if p else None) for k in COMPARED},
            }
        )
    stages = []
    for stage in plan.get("stages", []):
        rows = [r for r in plan.get("rows", []) if r["stage"] == stage]
        timed = all(r.get("time_s") is not None for r in rows)
        want = (
            max(sum(r["time_s"] for r in rows if r["engine"] == e) for e in {r["engine"] for r in rows})
            if rows and timed
            else None
        )
        got = stage_seconds.get(stage)
        stages.append({"stage": stage, "planned_s": want, "actual_s": got, "ratio": _ratio(got, want)})
    sources = plan.get("sources") or {}
    made = "; ".join(
        ([f"prompts {sources['prompts']}"] if sources.get("prompts") else [])
        + ([f"completions from {sources['completions']}"] if sources.get("completions") else [])
        + ([f"requests: {sources['requests']}"] if sources.get("requests") else [])
    )
    return {
        "roles": roles,
        "stages": stages,
        "note": "planned: the expected value" + (f" ({made})" if made else "") + "; requests are HTTP requests "
        "(retries inside a structured call included); a ratio is actual / planned",
    }

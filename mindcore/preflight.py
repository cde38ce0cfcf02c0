"""Preflight: check every engine a job will use, once, before any stage runs, so a wrong key, address or model fails
the job in seconds instead of after hours of work; and say plainly when a whole stage failed for an infrastructure
reason anyway.

`preflight(recipe, engines, stages)` — with the engines already started — does, in order:
1. finds the roles the stages call, as each stage declared them (`mindcore.stages`: e.g. `profiles` calls
   profile_writer and screener; `simulate` the scenario writer, patient, memory compactor, its patient
   engines' roles and every counsellor under test; `validate` the labeller when `validation.arc` is on;
   `judge` the judge; `run` is the first three), and the engines behind them;
2. probes each engine with the same code as `mindsim engines check` (`mindcore.engine_health`): key
   variable set, server answers, models listed, structured round trip (only on engines a structured
   role uses: a counsellor under test just chats), context per slot, tokenizer;
3. fits the structured roles' token budgets to their registered schemas (`mindcore.budget_fit.fit_budgets`,
   counted with each engine's tokenizer where it serves one): too small → refused, unset → raised in place;
4. checks that each role's largest prompt (the estimate its stage registered) plus its output budget
   fits the context one request can use (embedded: `ctx_per_slot`; vLLM: `max_model_len` from
   `/v1/models`; a llama.cpp server: `/props`; otherwise skipped, and the report says so).

Any problem stops the job before any work: `ConfigError` (exit 2) for what the recipe or environment
must fix — key variable unset, key refused, model not listed, budget below the schema, prompt larger
than the context — and `EngineUnreachable` (an `EngineError`, exit 1) when a server does not answer or
fails the round trip. When both kinds occur, the configuration error is raised (it must be fixed
first) and its message lists every problem. Every stage's command calls it directly: the check knows
the stages only through the registry, so the audit packages need no import of the others.

`raise_if_all_failed(stage, failures)` is for after a stage: when every candidate failed and every
failure is an infrastructure error, it raises `InfrastructureFailure` (exit 1) with the error classes
and counts, instead of letting a later stage complain about an empty input.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from mindsimkit.mindcore.budget import PromptSize, Sizer, prompt_estimator, registered, tokenizer_for
from mindsimkit.mindcore.budget_fit import BudgetReport, EstimateInputs, fit_budgets
from mindsimkit.mindcore.engine_health import EngineHealth, ToolPath, probe_started, tool_path
from mindsimkit.mindcore.errors import ConfigError, EngineError
from mindsimkit.mindcore.stages import RoleUse, expand_stages, output_bound, stage_roles

# Error classes that say the infrastructure failed, not the model's answer (as failures.jsonl and the
# sessions summary record them: the exception's class name).
INFRA_ERRORS = frozenset(
    {
        "TransportError",
        "EngineUnavailable",
        "EngineUnreachable",
        "ConfigError",
        "APIConnectionError",
        "APITimeoutError",
        "ConnectionError",
        "TimeoutError",
    }
)


class EngineUnreachable(EngineError):
    """An engine the job needs did not answer, or failed its round trip, before any work started."""


class InfrastructureFailure(EngineError):
    """Every candidate of a stage failed for an infrastructure reason."""


@dataclass
class ContextCheck:
    role: str
    engine: str
    prompt: PromptSize | None
    output_tokens: int | None
    context_tokens: int | None
    context_source: str
    fits: bool | None  # None: not checked (see note)
    note: str = ""
    trained_context: int | None = None  # an embedded model's own limit: raising ctx_per_slot past it does nothing

    def label_text(self) -> str:
        return f"{self.role} on {self.engine}"


@dataclass
class PreflightReport:
    stages: list[str]
    roles: list[RoleUse]
    engines: list[EngineHealth]
    budgets: BudgetReport | None = None
    contexts: list[ContextCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tool_paths: list[ToolPath] = field(default_factory=list)

    def tool_calls(self) -> dict[str, str]:
        """Role → how its tool calls travel in this run ("native", "native-template" or "json-schema"), for
        run.json."""
        return {t.role: t.path for t in self.tool_paths}

    def lines(self) -> list[str]:
        """What preflight found, one line each, for the console and the run record."""
        out = []
        for h in self.engines:
            ctx = f"{h.context_tokens} context ({h.context_source})" if h.context_tokens else "context unknown"
            json_ok = "structured ok" if h.structured_ok else "chat only (no structured role)"
            out.append(
                f"engine {h.engine} ({', '.join(filter(None, (h.kind, h.model, h.threads_text())))}): "
                f"answers in {h.latency_s or 0:.2f}s, "
                f"{json_ok}, {ctx}, tokenizer {'yes' if h.tokenizer else 'no (byte bound)'}"
            )
            # Roles with request options were sent their own probe: say what went out (run.json keeps it).
            out.extend(
                f"request {a.role} on {h.engine} ({a.model}): {a.sent_text()} — "
                f"{'accepted' if a.ok else 'refused: ' + a.problem}"
                for a in h.accepted
            )
        for b in self.budgets.lines if self.budgets else []:
            if b.worst_case is not None:  # unbounded schemas are in the notes
                out.append(
                    f"budget {b.role}/{b.schema}: worst case {b.worst_case} ≤ {b.setting} = {b.budget} "
                    f"({b.action}, {b.counted_with})"
                )
        for c in self.contexts:
            if c.fits is not None:  # unchecked ones are in the notes
                out.append(
                    f"context {c.label_text()}: ~{c.prompt.tokens if c.prompt else 0} prompt + "
                    f"{c.output_tokens or 0} output ≤ {c.context_tokens}" + (f" ({c.note})" if c.note else "")
                )
        return out + self.notes


def roles_for(recipe: Any, engines: Any, stages: Iterable[str]) -> list[RoleUse]:
    """The roles `stages` call, with their engine, model and output cap."""
    return stage_roles(recipe, engines, set(stages))


def _models(uses: list[RoleUse], engines: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for u in uses:
        backend = engines.backend(u.engine)
        model = u.model or getattr(backend, "default_model", None) or u.engine
        out.setdefault(u.engine, [])
        if model not in out[u.engine]:
            out[u.engine].append(model)
    return out


def _raise_problems(health: list[EngineHealth]) -> None:
    bad = [h for h in health if h.problem]
    if not bad:
        return
    lines = [f"engine '{h.engine}': {h.problem}" + "".join(f"\n    → {x}" for x in h.hints) for h in bad]
    text = "preflight: " + ("\n  ".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines))
    if any(h.problem_kind == "config" for h in bad):
        raise ConfigError(text)
    raise EngineUnreachable(text)


def _output_budget(uses: list[RoleUse], engines: Any, report: BudgetReport, inp: EstimateInputs) -> int | None:
    """The largest reply any of `uses` (one role on one engine) may write, its reasoning budget included;
    None when one is uncapped."""
    answer = _answer_budget(uses, engines, report, inp)
    return None if answer is None else answer + max(u.reasoning_budget for u in uses)


def _answer_budget(uses: list[RoleUse], engines: Any, report: BudgetReport, inp: EstimateInputs) -> int | None:
    role = uses[0].role
    values = [b.budget for b in report.lines if b.role == role and b.budget is not None]
    bound = output_bound(role)
    if bound is not None:  # the stage sets this reply's bound itself (e.g. `simulation.message_max_tokens`)
        return max([*values, bound(inp)])
    for use in uses:
        # Bindings carry their own cap; role names are read again, after budgets were raised.
        cap = use.max_tokens if use.binding else engines.role_spec(use.label).max_tokens
        if cap is None and not values:
            return None
        if cap is not None:
            values.append(cap)
    return max(values) if values else None


def check_contexts(
    recipe: Any,
    engines: Any,
    uses: list[RoleUse],
    health: dict[str, EngineHealth],
    report: BudgetReport,
    counters: dict[str, Any],
) -> list[ContextCheck]:
    """Largest prompt + output budget against each role's context; ConfigError naming each overflow."""
    inp = EstimateInputs(
        recipe, engines.config, report, {u.label: u.max_tokens for u in uses if u.role == "counsellor"}
    )
    groups: dict[tuple[str, str], list[RoleUse]] = {}
    for use in uses:
        groups.setdefault((use.role, use.engine), []).append(use)
    checks: list[ContextCheck] = []
    for (role, engine), group in groups.items():
        h = health[engine]
        estimator = prompt_estimator(role)
        if h.context_tokens is None or estimator is None:
            why = h.context_source if h.context_tokens is None else "no prompt estimate registered for this role"
            checks.append(ContextCheck(role, engine, None, None, h.context_tokens, h.context_source, None, why))
            continue
        size = estimator(inp, Sizer(counters.get(engine)))
        if size is None:  # the estimate needs a stage that is not installed (e.g. the judge without a simulator)
            checks.append(
                ContextCheck(
                    role,
                    engine,
                    None,
                    None,
                    h.context_tokens,
                    h.context_source,
                    None,
                    "no worst-case input registered for this role's prompt",
                )
            )
            continue
        out = _output_budget(group, engines, report, inp)
        total = (size.tokens if size else 0) + (out or 0)
        note = size.note if size else ""
        if out is None:
            note = "; ".join(x for x in (note, "no max_tokens: a reply may use the rest of the context") if x)
        checks.append(
            ContextCheck(
                role,
                engine,
                size,
                out,
                h.context_tokens,
                h.context_source,
                total <= h.context_tokens,
                note,
                trained_context=h.trained_context,
            )
        )
    over = [c for c in checks if c.fits is False]
    if over:
        raise ConfigError(
            "preflight: prompts larger than the context a request can use:\n  "
            + "\n  ".join(
                f"role '{c.role}' on engine '{c.engine}': largest prompt ~{c.prompt.tokens if c.prompt else 0} tokens "
                f"({', '.join(f'{k} {v}' for k, v in (c.prompt.parts if c.prompt else {}).items())}) + output "
                f"{c.output_tokens or 0} > {c.context_tokens} ({c.context_source}); {_context_fix(recipe, c, report)}"
                for c in over
            )
        )
    return checks


def _context_fix(recipe: Any, c: ContextCheck, report: BudgetReport) -> str:
    spec = recipe.engines.get(c.engine) if hasattr(recipe, "engines") else None
    need = (c.prompt.tokens if c.prompt else 0) + (c.output_tokens or 0)
    # An output budget above its schema's longest answer is context spent on nothing: say which one and by how much.
    slack = "".join(
        f", or lower {ln.setting} from {ln.budget} to its schema's longest answer ({ln.worst_case})"
        for ln in report.lines
        if ln.role == c.role and ln.budget and ln.worst_case and ln.budget > ln.worst_case
    )
    if getattr(spec, "kind", "") == "embedded":
        if c.trained_context is not None and need > c.trained_context:
            return (
                f"the model was trained on {c.trained_context} tokens and llama.cpp gives no slot more, whatever "
                f"ctx_per_slot asks: {need} cannot fit{slack}, or lower simulation.turn_cap and the reply budgets, "
                "or serve a model with a longer context"
            )
        return (
            f"raise engines.{c.engine}.ctx_per_slot to at least {need}{slack}, or lower simulation.turn_cap and "
            "the reply budgets"
        )
    return (
        f"serve the model with a longer context (vLLM: --max-model-len){slack}, or lower simulation.turn_cap "
        "and the reply budgets"
    )


def preflight(recipe: Any, engines: Any, stages: set[str]) -> PreflightReport:
    """Check the engines `stages` need; raise ConfigError / EngineUnreachable before any work."""
    uses = roles_for(recipe, engines, stages)
    models = _models(uses, engines)
    # A counsellor under test only chats: its engine is not asked for structured output it never gives.
    # Nor is a role whose structured calls this recipe switches off (a PatientAct-only patient speaks).
    structured_roles = {e.role for e in registered(expand_stages(set(stages))) if e.active is None or e.active(recipe)}
    needs_json = {u.engine for u in uses if u.role in structured_roles}
    # Roles that set request options (reasoning, thinking, token field, omit, extra_body) get their own probe.
    tooled = [u for u in uses if u.tools]
    health = [
        probe_started(
            engines,
            name,
            engines.config.engines[name],
            models[name],
            structured=name in needs_json,
            roles={u.label: u.spec for u in uses if u.engine == name and u.spec is not None},
            tool_roles=[u.label for u in tooled if u.engine == name],
        )
        for name in models
    ]
    _raise_problems(health)
    by_name = {h.engine: h for h in health}
    paths = [
        tool_path(
            u.label,
            u.tools,
            u.engine,
            bool(getattr(engines.backend(u.engine), "native_tools", False)),
            by_name[u.engine],
            getattr(engines.backend(u.engine), "tool_parser", "server"),
        )
        for u in tooled
    ]
    if refused := [t.problem for t in paths if t.problem]:
        raise ConfigError("preflight: " + "\n  ".join(refused))
    for t in paths:
        if t.path == "json-schema" and getattr(engines.backend(t.engine), "native_tools", False):
            # The engine said it parses tool calls and did not: this run asks for them through a JSON schema.
            engines.backend(t.engine).native_tools = False
    counters = {name: tok for name in models if (tok := tokenizer_for(engines.backend(name))) is not None}
    budgets = fit_budgets(recipe, engines.config, set(stages), counters)
    contexts = check_contexts(recipe, engines, uses, by_name, budgets, counters)
    report = PreflightReport(
        sorted(expand_stages(set(stages))),
        uses,
        health,
        budgets,
        contexts,
        [*(t.note for t in paths if t.note), *budgets.notes],
        paths,
    )
    # One note per engine and reason, not one per role: a server that reports no context size would
    # otherwise print a line for every role on it.
    unchecked: dict[tuple[str, str], list[str]] = {}
    for c in contexts:
        if c.fits is None:
            unchecked.setdefault((c.engine, c.note), []).append(c.role)
    for (engine, note), roles in unchecked.items():
        report.notes.append(
            f"context of role{'s' if len(roles) > 1 else ''} {', '.join(roles)} on engine "
            f"'{engine}' not checked: {note}"
        )
    return report


def raise_if_all_failed(stage: str, failures: list[dict[str, Any]], attempted: int | None = None) -> None:
    """After a stage: if every one of `attempted` candidates failed (default: as many as there are
    failures) and every failure is an infrastructure error, raise `InfrastructureFailure` with the
    error classes and counts. Rows are failures.jsonl records (`error` = "Class: message"); a row is
    an infrastructure failure when it says `retry_on_rerun: true`, or, without that field, when its
    class is one of `INFRA_ERRORS`. Answers that never fit the schema are not infrastructure."""
    if not failures or (attempted is not None and len(failures) < attempted):
        return
    if not all(_is_infra(f) for f in failures):
        return
    raise InfrastructureFailure(
        f"{stage}: all {len(failures)} candidates failed for an infrastructure reason {failure_summary(failures)}"
        ". Check the engines with `mindsim engines check RECIPE`, then rerun the same command to resume"
    )


def failure_summary(failures: list[dict[str, Any]]) -> str:
    """'(2 × TransportError, 1 × StructuredOutputError); first: …' for failure rows, as error lines say it."""
    classes = Counter(_error_class(f) for f in failures)
    counts = ", ".join(f"{n} × {cls}" for cls, n in classes.most_common()) or "no failures recorded"
    first = str(failures[0].get("error") or "").splitlines() if failures else []
    return f"({counts})" + (f"; first: {first[0][:200]}" if first else "")


def _is_infra(row: dict[str, Any]) -> bool:
    if "retry_on_rerun" in row:
        return bool(row["retry_on_rerun"])
    return _error_class(row) in INFRA_ERRORS


def _error_class(row: dict[str, Any]) -> str:
    err = row.get("error")
    if isinstance(err, str) and ":" in err:
        return err.split(":", 1)[0].strip()
    return str(row.get("error_class") or "unknown")

"""`mindsim plan RECIPE`: the plan as a table on stdout (or `--json`), and plan beside actual for a finished run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from mindsimkit.mindcore.console import out_console


def _n(x: float | None) -> str:
    """A count as people read it: 1,234 / 12.3k / 4.56M / 7.8G (exact below ten thousand)."""
    if x is None:
        return "unknown"
    for above, div, unit in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if abs(x) >= above:
            return f"{x / div:,.{1 if unit == 'k' else 2}f}{unit}"
    return f"{x:,.0f}" if abs(x) >= 10 or x == int(x) else f"{x:.1f}"


def _cost_cell(r: Any) -> str:
    from mindsimkit.mindsim_app.plan import LOCAL_PRICE

    if r.price_key == LOCAL_PRICE:
        return "none (local)"
    return f"{_money(r.cost)} ({_money(r.cost_worst)})" if r.cost is not None else "unknown"


def _money(x: float | None) -> str:
    return "unknown" if x is None else f"{x:,.2f}"


def _hours(s: float | None) -> str:
    if s is None:
        return "unknown"
    if s < 120:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def plan_tables(plan: Any) -> list[Any]:
    """The plan as rich renderables: one row per stage and role, the engines, the totals."""
    rows = Table(title=f"Plan of {plan.recipe}: expected (worst case)", show_lines=False)
    for col in ("stage", "role", "engine", "requests", "prompt tok", "cached", "completion tok", "cost", "time"):
        rows.add_column(col, justify="right" if col not in ("stage", "role", "engine") else "left", overflow="fold")
    for r in plan.rows:
        share = f"{100 * r.cached_share:.0f}%" if r.cached_share is not None else "–"
        engine = r.engine + (f" ×{r.servers}" if r.servers > 1 else "")
        rows.add_row(
            r.stage,
            r.role,
            engine,
            f"{_n(r.requests)} ({_n(r.requests_worst)})",
            f"{_n(r.prompt_tokens)} ({_n(r.prompt_tokens_worst)})",
            share,
            f"{_n(r.completion_tokens)} ({_n(r.completion_tokens_worst)})",
            _cost_cell(r),
            f"{_hours(r.time_s)} ({_hours(r.time_s_worst)})" if r.time_s is not None else "unknown",
        )
    t = plan.totals
    rows.add_row(
        "all",
        "",
        "",
        f"{_n(t['requests'])} ({_n(t['requests_worst'])})",
        f"{_n(t['prompt_tokens'])} ({_n(t['prompt_tokens_worst'])})",
        f"{100 * t['cached_tokens'] / t['prompt_tokens']:.0f}%" if t["prompt_tokens"] else "–",
        f"{_n(t['completion_tokens'])} ({_n(t['completion_tokens_worst'])})",
        f"{_money(t['cost'])} ({_money(t['cost_worst'])})" if t["cost"] is not None else "unknown",
        f"{_hours(t['wall_s'])} ({_hours(t['wall_s_worst'])})" if t["wall_s"] is not None else "unknown",
    )
    engines = Table(title="Engines")
    for col in ("engine", "kind", "servers", "prompt tok/s", "completion tok/s", "busy (expected)"):
        engines.add_column(col)
    for name, e in plan.engines.items():
        rate = e["throughput"]
        engines.add_row(
            name,
            e["kind"],
            str(e["servers"]),
            f"{rate['prompt_tokens_per_s']:,.0f}" if rate else "unknown",
            f"{rate['completion_tokens_per_s']:,.0f}" if rate else "unknown",
            _hours(e["time_s"]),
        )
    return [rows, engines]


def plan_lines(plan: Any) -> list[str]:
    """What the tables cannot hold: the unknown figures, the wall time's rule and the assumptions."""
    out = [f"unknown: {u}" for u in plan.unknown] + [f"note: {n}" for n in plan.notes]
    if plan.totals.get("cost") is None and plan.totals.get("cost_known_part"):
        out.append(f"cost of the priced roles alone: {_money(plan.totals['cost_known_part'])}")
    a = plan.assumptions
    out.append(
        "time: each stage as long as its busiest engine, stages one after another; an engine's time is its "
        "uncached prompt tokens and its completion tokens at its measured rates, divided by its servers"
    )
    out.append(
        f"expected value assumes: {a['serious_share']:.0%} of drafts serious, commits turned back "
        f"{a['commit_reject_share']:.0%}, messages re-asked {a['message_reask_share']:.0%}, scenarios "
        f"drafted again {a['scenario_redraft_share']:.0%}, replies at {a['reply_fill']:.0%} of their bound, "
        "structured answers at their schema's length limits, "
        f"{a['reasoning_fill']:.0%} of a reasoning budget spent (docs/plan.md)"
    )
    out.append(f"completions from {plan.sources['completions']}")
    out.append(f"prompts {plan.sources['prompts']}")
    if plan.sources.get("requests"):
        out.append(f"requests: {plan.sources['requests']}")
    return out


def plan_cmd(
    recipe: Path = typer.Argument(..., help="Recipe YAML, e.g. recipes/benchmark.yaml"),
    counsellors: Optional[int] = typer.Option(
        None, "--counsellors", min=1, help="Plan for this many counsellors under test (the recipe's repeated)"
    ),
    prices: Optional[Path] = typer.Option(
        None,
        "--prices",
        help="YAML: role or model → input, output, cached_input per million tokens (over the recipe's judge.prices)",
    ),
    from_run: Optional[Path] = typer.Option(
        None,
        "--from-run",
        help="A finished run (a pilot) of this recipe: its measured completion lengths per role replace the "
        "bounds, and its prompt sizes the estimates where it differs only in population (docs/plan.md)",
    ),
    measure: bool = typer.Option(
        False,
        "--measure",
        help="Measure each engine's throughput first (sends requests; the engines must be up) and record it",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON"),
) -> None:
    """What `mindsim run RECIPE` will ask of its engines: requests, tokens, cached share, money and hours per stage
    and role, expected and worst case. Sends nothing unless --measure."""
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.mindsim_app.plan import check_pilot, load_prices, make_plan

    loaded = load_recipe(recipe)
    if from_run is not None:
        check_pilot(from_run, "--from-run")
    table = load_prices(loaded, prices)
    if measure:
        from mindsimkit.mindsim_app.throughput import measure_all

        measure_all(loaded.engines_config())
    plan = make_plan(loaded, counsellors=counsellors, prices=table, prices_file=prices, from_run=from_run)
    console = out_console()
    if as_json:
        console.print_json(json.dumps(plan.model_dump(), default=str))
        return
    for t in plan_tables(plan):
        console.print(t)
    for line in plan_lines(plan):
        console.print(escape(line), soft_wrap=True)

"""What the run's model calls cost, from token usage and the recipe's list prices (MindEval2 Appendix B
"Cost", Table 8: tokens incl. reasoning, cached share, list price, cost per query at list price without
prompt caching, cost per query and total actually incurred).

Usage is the engine ledger's summary per role (`mindcore.types.UsageLedger.summary`): `calls`,
`prompt_tokens`, `completion_tokens`, and where the engine reports them `cached_tokens` (prompt tokens
read from the provider's cache) and `reasoning_tokens`; an absent count is 0. Following the OpenAI usage
convention, `completion_tokens` already includes the reasoning tokens, which are shown apart only as a
breakdown, so output is priced once.

Prices are per million tokens and looked up by role name first (`judge`, `judge:NAME`, `patient`, ...),
then by model name, so one entry can price a model wherever it is used.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

PER = 1_000_000


class Price(BaseModel):
    """List price of one model in $ (or any one currency) per million tokens."""

    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0, description="Per million prompt tokens not served from the cache")
    output: float = Field(ge=0, description="Per million completion tokens (reasoning included)")
    cached_input: float | None = Field(
        None, ge=0, description="Per million prompt tokens read from the provider's cache (default: input)"
    )

    @model_validator(mode="after")
    def _cached_default(self) -> "Price":
        if self.cached_input is None:
            self.cached_input = self.input
        return self


def price_for(role: str, model: str | None, prices: dict[str, Price]) -> tuple[Price | None, str | None]:
    """The price of a role's calls and the key it was found under (role first, then model)."""
    if role in prices:
        return prices[role], role
    if model and model in prices:
        return prices[model], model
    return None, None


def cost_row(role: str, usage: dict[str, Any], prices: dict[str, Price]) -> dict[str, Any]:
    """Table 8's columns for one role."""
    calls = int(usage.get("calls") or 0)
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = min(int(usage.get("cached_tokens") or 0), prompt)
    reasoning = int(usage.get("reasoning_tokens") or 0)
    price, key = price_for(role, usage.get("model"), prices)
    row: dict[str, Any] = {
        "role": role,
        "model": usage.get("model"),
        "engine": usage.get("engine"),
        "calls": calls,
        "input_tokens": prompt,
        "cached_tokens": cached,
        "output_tokens": completion,
        "reasoning_tokens": reasoning,
        "cached_share": cached / prompt if prompt else None,
        "price_key": key,
        "price": price.model_dump() if price else None,
    }
    if price is None:
        return {**row, "list_cost": None, "cost": None, "list_cost_per_query": None, "cost_per_query": None}
    list_cost = (prompt * price.input + completion * price.output) / PER
    cached_price = price.input if price.cached_input is None else price.cached_input
    cost = ((prompt - cached) * price.input + cached * cached_price + completion * price.output) / PER
    return {
        **row,
        "list_cost": list_cost,
        "cost": cost,
        "list_cost_per_query": list_cost / calls if calls else None,
        "cost_per_query": cost / calls if calls else None,
    }


def cost_table(usage: dict[str, dict[str, Any]], prices: dict[str, Price], judges: list[str]) -> dict[str, Any]:
    """One row per role in the usage (judge roles first, in their configured order), and totals over the
    priced rows. `unpriced` names roles that made calls but have no price."""
    order = [r for r in judges if r in usage] + sorted(r for r in usage if r not in judges)
    rows = [{**cost_row(r, usage[r], prices), "judge": r in judges} for r in order]
    priced = [r for r in rows if r["cost"] is not None]
    return {
        "rows": rows,
        "total": {
            "calls": sum(r["calls"] for r in priced),
            "list_cost": sum(r["list_cost"] for r in priced),
            "cost": sum(r["cost"] for r in priced),
        },
        "judges_total": {
            "calls": sum(r["calls"] for r in priced if r["judge"]),
            "list_cost": sum(r["list_cost"] for r in priced if r["judge"]),
            "cost": sum(r["cost"] for r in priced if r["judge"]),
        },
        "unpriced": [r["role"] for r in rows if r["cost"] is None and r["calls"]],
        "note": "Usage summed over every run of this stage on this folder: judgments read from the cache cost "
        "nothing and are not counted again. output_tokens include reasoning_tokens (OpenAI convention).",
    }


# The per-role counters that add up across runs (the engine ledger's, `mindcore.types.UsageLedger.summary`).
USAGE_COUNTERS = (
    "calls",
    "failed",
    "attempts",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "latency_s",
)
# The preflight's health probes run as their own roles; they check the engine, they are not the stage's work.
PROBE_ROLE_MARK = ":__check_"


def stage_usage(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A ledger summary without the preflight's probe roles: what the stage itself spent."""
    return {role: u for role, u in summary.items() if PROBE_ROLE_MARK not in role}


def add_usage(earlier: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per role, the counters of both summed (engine and model as the latest run had them): a stage rerun adds its
    spend to what earlier runs recorded instead of replacing it. A run that made no calls changes nothing."""
    out = {role: dict(u) for role, u in earlier.items() if isinstance(u, dict)}
    for role, u in now.items():
        if not u.get("calls") and not u.get("failed") and role in out:
            continue
        mine = out.setdefault(role, {})
        for c in USAGE_COUNTERS:
            total = (mine.get(c) or 0) + (u.get(c) or 0)
            mine[c] = round(total, 3) if c == "latency_s" else int(total)
        for k in ("engine", "model"):
            if u.get(k) is not None:
                mine[k] = u[k]
    return out


def usage_from_costs(costs: Any) -> dict[str, dict[str, Any]]:
    """Usage as a report written before reports kept it recorded it in its cost table (so a rerun adds to it)."""
    rows = costs.get("rows") if isinstance(costs, dict) else None
    out: dict[str, dict[str, Any]] = {}
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, dict) and isinstance(r.get("role"), str) and PROBE_ROLE_MARK not in r["role"]:
            out[r["role"]] = {
                "calls": int(r.get("calls") or 0),
                "prompt_tokens": int(r.get("input_tokens") or 0),
                "completion_tokens": int(r.get("output_tokens") or 0),
                "cached_tokens": int(r.get("cached_tokens") or 0),
                "reasoning_tokens": int(r.get("reasoning_tokens") or 0),
                "engine": r.get("engine"),
                "model": r.get("model"),
            }
    return out

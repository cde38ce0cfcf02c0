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
        "role": role, "model": usage.get("model"), "engine": usage.get("engine"), "calls": calls,
        "input_tokens": prompt, "cached_tokens": cached, "output_tokens": completion, "reasoning_tokens": reasoning,
        "cached_share": cached / prompt if prompt else None, "price_key": key,
        "price": price.model_dump() if price else None,
    }
    if price is None:
        return {**row, "list_cost": None, "cost": None, "list_cost_per_query": None, "cost_per_query": None}
    list_cost = (prompt * price.input + completion * price.output) / PER
    cost = ((prompt - cached) * price.input + cached * price.cached_input + completion * price.output) / PER
    return {**row, "list_cost": list_cost, "cost": cost,
            "list_cost_per_query": list_cost / calls if calls else None,
            "cost_per_query": cost / calls if calls else None}


def cost_table(usage: dict[str, dict[str, Any]], prices: dict[str, Price], judges: list[str]) -> dict[str, Any]:
    """One row per role in the usage (judge roles first, in their configured order), and totals over the
    priced rows. `unpriced` names roles that made calls but have no price."""
    order = [r for r in judges if r in usage] + sorted(r for r in usage if r not in judges)
    rows = [{**cost_row(r, usage[r], prices), "judge": r in judges} for r in order]
    priced = [r for r in rows if r["cost"] is not None]
    return {
        "rows": rows,
        "total": {"calls": sum(r["calls"] for r in priced), "list_cost": sum(r["list_cost"] for r in priced),
                  "cost": sum(r["cost"] for r in priced)},
        "judges_total": {"calls": sum(r["calls"] for r in priced if r["judge"]),
                         "list_cost": sum(r["list_cost"] for r in priced if r["judge"]),
                         "cost": sum(r["cost"] for r in priced if r["judge"])},
        "unpriced": [r["role"] for r in rows if r["cost"] is None and r["calls"]],
        "note": "Usage of this process's calls only: judgments read from the cache cost nothing and are not "
                "counted. output_tokens include reasoning_tokens (OpenAI convention).",
    }

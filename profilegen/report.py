"""The pool-vs-population table (MindEval2 Table 14: the simulated patients in % next to the population
they were drawn from and, for the main problem, the target rate), printed with rich and saved as
markdown for the dataset card."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from mindsimkit.mindcore.console import out_console
from mindsimkit.profilegen.rates import Rates
from mindsimkit.profilegen.schemas import Profile
from mindsimkit.profilegen.select import ATTRIBUTES, FILL_ATTRIBUTES


def _shares(profiles: list[Profile], attribute: str) -> Counter:
    counts: Counter = Counter(v for p in profiles for v in ATTRIBUTES[attribute](p))
    n = max(len(profiles), 1)
    return Counter({k: 100 * c / n for k, c in counts.items()})


def main_problem_target(population: list[Profile], rates: Rates) -> dict[str, float]:
    """Expected % with each main problem under the rates, for the population's age × gender mix."""
    mix = Counter((p.demographics.age_band, p.demographics.gender) for p in population)
    total = sum(mix.values()) or 1
    target: Counter = Counter()
    for (band, gender), n in mix.items():
        for problem, prob in rates.main_probs(band, gender).items():
            target[problem] += 100 * prob * n / total
    return dict(target)


def table_rows(population: list[Profile], rates: Rates | None = None) -> list[tuple[str, str, str, str, str, str]]:
    """(attribute, value, target %, population %, pool %, benchmark %) rows over the fill attributes."""
    pool = [p for p in population if p.in_pool]
    bench = [p for p in population if p.in_benchmark]
    target = main_problem_target(population, rates) if rates else {}
    rows = []
    for attribute in FILL_ATTRIBUTES:
        pop, pl, bn = _shares(population, attribute), _shares(pool, attribute), _shares(bench, attribute)
        for value in sorted(pop, key=lambda v: -pop[v]):
            t = f"{target[value]:.1f}" if attribute == "main_problem" and value in target else ""
            rows.append((attribute, value, t, f"{pop[value]:.1f}", f"{pl[value]:.1f}", f"{bn[value]:.1f}"))
    return rows


HEADERS = ("attribute", "value", "target %", "clean population %", "pool %", "benchmark %")


def markdown(population: list[Profile], rates: Rates | None = None) -> str:
    pool, bench = sum(p.in_pool for p in population), sum(p.in_benchmark for p in population)
    lines = [
        f"Pool ({pool}) and benchmark ({bench}) against the {len(population)} clean candidate profiles, in % "
        "of patients. Target: expected % with that main problem under the rates file, for the clean "
        "population's age and gender mix.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(population, rates)]
    return "\n".join(lines) + "\n"


def print_table(population: list[Profile], rates: Rates | None = None, console: Console | None = None) -> None:
    table = Table(title="Pool vs clean population (%)")
    for h in HEADERS:
        table.add_column(h, justify="left" if h in ("attribute", "value") else "right")
    last = None
    for row in table_rows(population, rates):
        table.add_row(row[0] if row[0] != last else "", *row[1:], end_section=False)
        last = row[0]
    (console or out_console()).print(table)

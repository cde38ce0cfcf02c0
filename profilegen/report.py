"""The pool-vs-population table (MindEval2 Table 14: the simulated patients in % next to the population
they were drawn from and, for the main problem, the target rate), printed with rich and saved as
markdown for the dataset card."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

from rich.console import Console
from rich.table import Table

from mindsimkit.mindcore.console import out_console
from mindsimkit.profilegen.rates import NONE, Rates
from mindsimkit.profilegen.schemas import Profile
from mindsimkit.profilegen.select import ATTRIBUTES, FILL_ATTRIBUTES


def _shares(profiles: list[Profile], attribute: str) -> dict[str, float]:
    """% of `profiles` per value of `attribute`; a value none of them has reads as 0."""
    counts = Counter(v for p in profiles for v in ATTRIBUTES[attribute](p))
    n = max(len(profiles), 1)
    return defaultdict(float, {k: 100 * c / n for k, c in counts.items()})


def main_problem_target(population: list[Profile], rates: Rates) -> dict[str, float]:
    """Expected % with each main problem under the rates, for the population's age × gender mix."""
    mix = Counter((p.written().demographics.age_band, p.written().demographics.gender) for p in population)
    total = sum(mix.values()) or 1
    target: dict[str, float] = defaultdict(float)
    for (band, gender), n in mix.items():
        for problem, prob in rates.main_probs(band, gender).items():
            target[problem] += 100 * prob * n / total
    return dict(target)


def present_target(population: list[Profile], rates: Rates) -> dict[str, float]:
    """Expected % for whom each problem is present, as the main problem or the secondary one (MindEval2 Table 16's
    "Present"), under the rates, for the population's age × gender mix."""
    mix = Counter((p.written().demographics.age_band, p.written().demographics.gender) for p in population)
    total = sum(mix.values()) or 1
    target: dict[str, float] = defaultdict(float)
    for (band, gender), n in mix.items():
        for main, prob in rates.main_probs(band, gender).items():
            target[main] += 100 * prob * n / total
            for second, q in rates.secondary_probs(main, band, gender).items():
                if second not in (main, NONE):
                    target[second] += 100 * prob * q * n / total
    return dict(target)


def _present(profiles: list[Profile]) -> dict[str, float]:
    n = max(len(profiles), 1)
    counts = Counter(
        v
        for p in profiles
        for v in {p.written().anchor.main_problem, p.written().anchor.secondary_problem}
        if v is not None
    )
    return defaultdict(float, {k: 100 * c / n for k, c in counts.items()})


PROBLEM_HEADERS = (
    "problem",
    "main: target %",
    "main: pool %",
    "main: benchmark %",
    "present: target %",
    "present: pool %",
    "present: benchmark %",
)


def problem_rows(population: list[Profile], rates: Rates | None = None) -> list[tuple[str, ...]]:
    """Per presenting problem, as MindEval2 Table 16 reports it: the share of patients for whom it is the main
    problem and for whom it is present (main or secondary), target against the pool and the benchmark."""
    pool = [p for p in population if p.in_pool]
    bench = [p for p in population if p.in_benchmark]
    main_t = main_problem_target(population, rates) if rates else {}
    present_t = present_target(population, rates) if rates else {}
    main_pool, main_bench = _shares(pool, "main_problem"), _shares(bench, "main_problem")
    pres_pool, pres_bench = _present(pool), _present(bench)
    problems = sorted(
        set(main_t) | set(present_t) | set(_present(population)), key=lambda k: (-present_t.get(k, 0.0), k)
    )

    def pct(table: dict[str, float], key: str, known: bool = True) -> str:
        return f"{table.get(key, 0.0):.1f}" if known else ""

    return [
        (
            k,
            pct(main_t, k, bool(rates)),
            pct(main_pool, k),
            pct(main_bench, k),
            pct(present_t, k, bool(rates)),
            pct(pres_pool, k),
            pct(pres_bench, k),
        )
        for k in problems
    ]


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
        *_md_table(HEADERS, table_rows(population, rates)),
        "",
        "Presenting problems as MindEval2 Table 16 reports them: main = % of patients for whom it is the main problem; "
        "present = % for whom it is the main or the secondary problem. Target: expected % under the rates file for "
        "the clean population's age and gender mix.",
        "",
        *_md_table(PROBLEM_HEADERS, problem_rows(population, rates)),
    ]
    return "\n".join(lines) + "\n"


def _md_table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def print_table(population: list[Profile], rates: Rates | None = None, console: Console | None = None) -> None:
    table = Table(title="Pool vs clean population (%)")
    for h in HEADERS:
        table.add_column(h, justify="left" if h in ("attribute", "value") else "right")
    last = None
    for row in table_rows(population, rates):
        table.add_row(row[0] if row[0] != last else "", *row[1:], end_section=False)
        last = row[0]
    (console or out_console()).print(table)

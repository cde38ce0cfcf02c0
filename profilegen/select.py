"""Stage 5 — select the validation pool and the benchmark subset from clean profiles (MindEval2
Appendix C "Screening and selection", Appendix G / "Pool").

(a) Greedy set cover: every attribute value present among the clean candidates appears at least once.
(b) A floor of poor-quality-of-life patients (default 10 per 100).
(c) Fill: each remaining slot goes to the candidate that most reduces the divergence between the pool's
    marginals and the clean population's on the fill attributes. The divergence is measured against
    the pool's final size: D = Σ_attribute Σ_value max(0, size·q_value − count_value), the mass still
    missing from each marginal. Adding anyone can only lower or keep D, and once the pool is full D/size
    is exactly the sum of total-variation distances to the population — so the greedy path never
    increases the divergence and ends at the quantity the paper minimises. Ties go to the smaller
    current-size TV, then to a seeded order.
(d) Benchmark subset: a greedy start on the same criterion against the pool's marginals, then best-swap
    local search on (largest TV over attributes, then their sum) — the subset that keeps the largest TV
    to the pool smallest — with the poor-QoL floor kept at the subset's size.
Everything runs on integer codes with numpy/scipy, so 100,000 candidates → 100 takes seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy import sparse

from mindsimkit.profilegen.config import pool_poor_floor
from mindsimkit.profilegen.schemas import Profile

# Attribute extractors, declared once: cover uses all of them, fill and benchmark the marginal ones.
ATTRIBUTES: dict[str, Callable[[Profile], list[str]]] = {
    "gender": lambda p: [p.written().demographics.gender],
    "age_band": lambda p: [p.written().demographics.age_band],
    "relationship": lambda p: [p.written().demographics.relationship],
    "employment": lambda p: [p.written().demographics.employment],
    "living_situation": lambda p: [p.written().demographics.living_situation],
    "main_problem": lambda p: [p.written().anchor.main_problem],
    "secondary_problem": lambda p: [p.written().anchor.secondary_problem or "none"],
    "impact_domain": lambda p: [p.written().anchor.impact_domain],
    "quality_of_life": lambda p: [p.written().formulation.quality_of_life],
    "predisposing": lambda p: [f.label for f in p.written().formulation.predisposing],
    "precipitating": lambda p: [p.written().formulation.precipitating.label],
    "protective": lambda p: [f.label for f in p.written().formulation.protective],
    "perpetuating": lambda p: [f.label for f in p.written().formulation.perpetuating],
    "core_belief": lambda p: [p.written().formulation.core_belief.cluster],
    "register": lambda p: [p.style.register],
    "verbosity": lambda p: [p.style.verbosity],
    "frustration_reactivity": lambda p: [p.style.frustration_reactivity],
    "archetype": lambda p: [p.style.archetype],
}
FILL_ATTRIBUTES = (
    "gender",
    "age_band",
    "main_problem",
    "employment",
    "living_situation",
    "relationship",
    "quality_of_life",
)
QOL, POOR = "quality_of_life", "poor"


@dataclass
class Selection:
    """Which candidates were chosen, and the numbers the report prints."""

    pool: list[int]
    benchmark: list[int]
    cover_size: int
    n_values: int
    uncovered: list[str]
    poor_floor: int
    poor_in_pool: int
    fill_trace: list[float] = field(default_factory=list)
    benchmark_tv: dict[str, float] = field(default_factory=dict)


class _Encoded:
    """Integer codes per single-valued attribute plus the sparse candidate × value matrix for cover."""

    def __init__(self, table: dict[str, list[list[str]]], fill: tuple[str, ...]):
        self.n = len(next(iter(table.values())))
        self.codes: dict[str, np.ndarray] = {}
        self.levels: dict[str, list[str]] = {}
        for a in fill:
            levels = sorted({vals[0] for vals in table[a]})
            index = {v: i for i, v in enumerate(levels)}
            self.levels[a] = levels
            self.codes[a] = np.fromiter((index[vals[0]] for vals in table[a]), dtype=np.int64, count=self.n)
        self.value_names: list[str] = []
        rows, cols = [], []
        for a, column in table.items():
            column_of: dict[str, int] = {}
            for i, vals in enumerate(column):
                for v in vals:
                    j = column_of.get(v)
                    if j is None:
                        j = column_of[v] = len(self.value_names)
                        self.value_names.append(f"{a}={v}")
                    rows.append(i)
                    cols.append(j)
        m = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(self.n, len(self.value_names)))
        m.data[:] = 1.0  # a value listed twice for one candidate still counts once
        self.cover = m

    def shares(self, a: str, idx: np.ndarray | list[int]) -> np.ndarray:
        return np.bincount(self.codes[a][idx], minlength=len(self.levels[a])) / max(len(idx), 1)


def _floor(rate: float, size: int) -> int:
    return pool_poor_floor(rate, size)


def _set_cover(enc: _Encoded, limit: int, priority: np.ndarray) -> tuple[list[int], np.ndarray]:
    uncovered = np.ones(len(enc.value_names))
    chosen: list[int] = []
    taken = np.zeros(enc.n, dtype=bool)
    while uncovered.any() and len(chosen) < limit:
        gain = enc.cover @ uncovered
        gain[taken] = -1
        best = np.flatnonzero(gain == gain.max())
        i = int(best[np.argmin(priority[best])])
        chosen.append(i)
        taken[i] = True
        uncovered[enc.cover[i].indices] = 0
    return chosen, uncovered


def _fill(
    enc: _Encoded,
    attrs: tuple[str, ...],
    target: dict[str, np.ndarray],
    size: int,
    chosen: list[int],
    priority: np.ndarray,
    allowed: np.ndarray,
    n_add: int,
) -> list[float]:
    """Add `n_add` candidates from `allowed` to `chosen` (in place); return the deficit after each."""
    taken = np.zeros(enc.n, dtype=bool)
    taken[chosen] = True
    counts = {a: np.bincount(enc.codes[a][chosen], minlength=len(enc.levels[a])).astype(float) for a in attrs}
    trace = []
    for _ in range(n_add):
        free = np.flatnonzero(allowed & ~taken)
        if free.size == 0:
            break
        gain = np.zeros(free.size)
        tv_next = np.zeros(free.size)
        n_now = len(chosen) + 1
        for a in attrs:
            deficit = size * target[a] - counts[a]
            gain += np.clip(deficit, 0.0, 1.0)[enc.codes[a][free]]
            # TV at the current size after adding one of each level: only that level's term changes.
            diff = counts[a] / n_now - target[a]
            base = np.abs(diff).sum()
            tv_level = 0.5 * (base - np.abs(diff) + np.abs(diff + 1.0 / n_now))
            tv_next += tv_level[enc.codes[a][free]]
        order = np.lexsort((priority[free], tv_next, -gain))
        i = int(free[order[0]])
        chosen.append(i)
        taken[i] = True
        for a in attrs:
            counts[a][enc.codes[a][i]] += 1
        trace.append(float(sum(np.clip(size * target[a] - counts[a], 0, None).sum() for a in attrs)))
    return trace


def _deficit(enc: _Encoded, attrs: tuple[str, ...], target: dict[str, np.ndarray], size: int, idx: list[int]) -> float:
    return float(
        sum(
            np.clip(size * target[a] - np.bincount(enc.codes[a][idx], minlength=len(enc.levels[a])), 0, None).sum()
            for a in attrs
        )
    )


def _tv(enc: _Encoded, attrs: tuple[str, ...], idx: list[int], ref: dict[str, np.ndarray]) -> dict[str, float]:
    return {a: 0.5 * float(np.abs(enc.shares(a, idx) - ref[a]).sum()) for a in attrs}


def _swap_search(
    enc: _Encoded,
    attrs: tuple[str, ...],
    pool: list[int],
    subset: list[int],
    ref: dict[str, np.ndarray],
    poor_floor: int,
    max_rounds: int = 500,
) -> list[int]:
    """Best-improvement swaps between subset and the rest of the pool on (max TV, sum TV)."""
    subset = list(subset)
    k = len(subset)
    poor_code = enc.levels[QOL].index(POOR) if QOL in enc.levels and POOR in enc.levels[QOL] else None
    for _ in range(max_rounds):
        inside = np.array(subset)
        members = set(subset)
        outside = np.array([i for i in pool if i not in members])
        if outside.size == 0:
            break
        new_tv = np.zeros((len(attrs), k, outside.size))
        for n, a in enumerate(attrs):
            d = np.bincount(enc.codes[a][inside], minlength=len(enc.levels[a])) / k - ref[a]
            ci, cj = enc.codes[a][inside][:, None], enc.codes[a][outside][None, :]
            base = np.abs(d).sum()
            change = (np.abs(d[ci] - 1 / k) - np.abs(d[ci])) + (np.abs(d[cj] + 1 / k) - np.abs(d[cj]))
            new_tv[n] = 0.5 * (base + np.where(ci == cj, 0.0, change))
        worst, total = new_tv.max(axis=0), new_tv.sum(axis=0)
        if poor_code is not None and poor_floor:
            poor_in = int((enc.codes[QOL][inside] == poor_code).sum())
            loses = (enc.codes[QOL][inside] == poor_code)[:, None] & (enc.codes[QOL][outside] != poor_code)[None, :]
            if poor_in <= poor_floor:
                worst = np.where(loses, np.inf, worst)
        cur = _tv(enc, attrs, subset, ref)
        cur_max, cur_sum = max(cur.values()), sum(cur.values())
        flat = int(np.lexsort((total.ravel(), worst.ravel()))[0])
        r, c = divmod(flat, outside.size)
        eps = 1e-12
        better = worst[r, c] < cur_max - eps or (abs(worst[r, c] - cur_max) <= eps and total[r, c] < cur_sum - eps)
        if not better:
            break
        subset[r] = int(outside[c])
    return subset


def select(
    table: dict[str, list[list[str]]],
    pool_size: int,
    benchmark_size: int,
    poor_floor_rate: float,
    seed: int,
    fill_attributes: tuple[str, ...] = FILL_ATTRIBUTES,
    benchmark_poor: int | None = None,
) -> Selection:
    """`benchmark_poor`: poor-QoL patients the benchmark must hold; None = the pool's whole floor."""
    """Run (a)–(d) on an attribute table (attribute → per-candidate list of values)."""
    enc = _Encoded(table, fill_attributes)
    priority = np.random.default_rng(seed).permutation(enc.n)
    pool_size = min(pool_size, enc.n)
    population = {a: enc.shares(a, np.arange(enc.n)) for a in fill_attributes}
    chosen, uncovered = _set_cover(enc, pool_size, priority)
    cover_size = len(chosen)
    trace = [_deficit(enc, fill_attributes, population, pool_size, chosen)]
    poor_floor = 0
    if QOL in enc.levels and POOR in enc.levels[QOL]:
        poor_floor = _floor(poor_floor_rate, pool_size)
        is_poor = enc.codes[QOL] == enc.levels[QOL].index(POOR)
        missing = poor_floor - int(is_poor[chosen].sum())
        if missing > 0:
            trace += _fill(
                enc,
                fill_attributes,
                population,
                pool_size,
                chosen,
                priority,
                is_poor,
                min(missing, pool_size - len(chosen)),
            )
    trace += _fill(
        enc,
        fill_attributes,
        population,
        pool_size,
        chosen,
        priority,
        np.ones(enc.n, dtype=bool),
        pool_size - len(chosen),
    )
    poor_in_pool = int(sum(1 for i in chosen if QOL in enc.levels and enc.levels[QOL][enc.codes[QOL][i]] == POOR))
    bench_floor = min(poor_floor, benchmark_size) if benchmark_poor is None else benchmark_poor
    benchmark = _benchmark(enc, fill_attributes, chosen, benchmark_size, bench_floor, priority)
    return Selection(
        pool=chosen,
        benchmark=benchmark,
        cover_size=cover_size,
        n_values=len(enc.value_names),
        uncovered=[enc.value_names[j] for j in np.flatnonzero(uncovered)],
        poor_floor=poor_floor,
        poor_in_pool=poor_in_pool,
        fill_trace=trace,
        benchmark_tv=_tv(enc, fill_attributes, benchmark, {a: enc.shares(a, chosen) for a in fill_attributes})
        if benchmark
        else {},
    )


def _benchmark(
    enc: _Encoded, attrs: tuple[str, ...], pool: list[int], k: int, poor_floor: int, priority: np.ndarray
) -> list[int]:
    k = min(k, len(pool))
    if k <= 0:
        return []
    ref = {a: enc.shares(a, pool) for a in attrs}
    in_pool = np.zeros(enc.n, dtype=bool)
    in_pool[pool] = True
    subset: list[int] = []
    floor = 0
    if QOL in enc.levels and POOR in enc.levels[QOL]:
        is_poor = enc.codes[QOL] == enc.levels[QOL].index(POOR)
        floor = min(poor_floor, k, int(is_poor[pool].sum()))
        _fill(enc, attrs, ref, k, subset, priority, in_pool & is_poor, floor)
    _fill(enc, attrs, ref, k, subset, priority, in_pool, k - len(subset))
    return _swap_search(enc, attrs, pool, subset, ref, floor)


def attribute_table(profiles: list[Profile], attributes: tuple[str, ...] | None = None) -> dict[str, list[list[str]]]:
    """Attribute → per-profile values, for `select`."""
    names = attributes or tuple(ATTRIBUTES)
    return {a: [ATTRIBUTES[a](p) for p in profiles] for a in names}


def select_profiles(
    profiles: list[Profile],
    pool_size: int,
    benchmark_size: int,
    poor_floor_rate: float,
    seed: int,
    benchmark_poor: int | None = None,
) -> tuple[list[Profile], Selection]:
    """Stage 5 on clean profiles: returns them with `in_pool` / `in_benchmark` set, and the selection."""
    if not profiles:
        return [], Selection([], [], 0, 0, [], 0, 0)
    sel = select(
        attribute_table(profiles), pool_size, benchmark_size, poor_floor_rate, seed, benchmark_poor=benchmark_poor
    )
    pool, bench = set(sel.pool), set(sel.benchmark)
    out = [p.model_copy(update={"in_pool": i in pool, "in_benchmark": i in bench}) for i, p in enumerate(profiles)]
    return out, sel

"""Benchmark of profile selection (MindEval2 App. C "Screening and selection"): pool of 100
and benchmark subset of 50 from 1,000 and 100,000 synthetic clean profiles. Prints seconds for the
whole stage (attribute extraction + cover + floor + fill + benchmark search) and for the core alone,
next to the goals (1,000 → 100 under 1 s; 100,000 → 100 under 60 s on 2 cores).

    python benchmarks/bench_selection.py [--sizes 1000 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from mindsimkit.profilegen.select import attribute_table, select, select_profiles
from mindsimkit.profilegen.testing import make_profiles
from smoke import parse_args

GOALS = {1_000: 1.0, 100_000: 60.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000])
    ap.add_argument("--repeats", type=int, default=3)
    args = parse_args(ap, sizes=[200], repeats=1)
    print(
        f"{'candidates':>10} {'stage s':>9} {'core s':>8} {'goal s':>7} {'cover':>6} {'values':>7} "
        f"{'pool ΣTV':>9} {'bench maxTV':>11}"
    )
    for n in args.sizes:
        t0 = time.perf_counter()
        profiles = make_profiles(n, seed=0, poor_share=0.02)
        build = time.perf_counter() - t0
        stage, core = [], []
        for r in range(args.repeats):
            t0 = time.perf_counter()
            _, sel = select_profiles(profiles, 100, 50, 0.10, seed=r)
            stage.append(time.perf_counter() - t0)
            table = attribute_table(profiles)
            t0 = time.perf_counter()
            select(table, 100, 50, 0.10, seed=r)
            core.append(time.perf_counter() - t0)
        print(
            f"{n:>10} {statistics.median(stage):>9.3f} {statistics.median(core):>8.3f} "
            f"{GOALS.get(n, float('nan')):>7.1f} {sel.cover_size:>6} {sel.n_values:>7} "
            f"{sel.fill_trace[-1] / 100:>9.3f} {max(sel.benchmark_tv.values()):>11.3f}"
            f"   (building {n} synthetic profiles took {build:.1f} s, not counted)"
        )


if __name__ == "__main__":
    main()

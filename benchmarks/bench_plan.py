"""How close does `mindsim plan` come to a run, from the templates alone and from a pilot? Given finished runs of one
recipe shape (`bench_shapes.py --shapes release --keep DIR` keeps ten), each run's recipe is planned once from its
templates and bounds, and once from every other run as the pilot (`mindsim plan RECIPE --from-run PILOT`); each
plan's expected requests, prompt tokens and completion tokens per role are set beside that run's own ledger
(run.json `usage`), as the run's report does (`plan_vs_actual`).

    python benchmarks/bench_plan.py RUN_OR_FOLDER [...] [--json FILE]

A folder that is not a run is searched for run folders (every `run.json` under it). Printed per role and figure:
the median actual/planned ratio without a pilot, and with the other runs as pilots the median ratio and how many of
the (pilot, run) pairs came within ±15 %. Last, each run beside the mean of all of them: what no plan can beat, since
a plan gives one figure per role before the run and the runs differ among themselves. Nothing is sent to a model;
each plan is read from the files.

`--smoke` makes a one-patient run of the fake-engine job (tests/mindsim_app/fakejob.py) and compares it with a copy of
itself: its numbers say only that the script still reads what the job writes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from smoke import parse_args

REPO = Path(__file__).resolve().parent.parent
FIGURES = ("requests", "prompt_tokens", "completion_tokens")
BAND = 0.15


def run_folders(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for p in paths:
        found += [p] if (p / "run.json").is_file() else sorted(x.parent for x in p.rglob("run.json"))
    return found


def finished(run: Path) -> tuple[Any, Any]:
    """`run`'s recipe and its ledger (run.json `usage`), read once however many pilots it is planned from."""
    from mindsimkit.judge.cli import resolve_recipe
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindcore.recipe import load_recipe

    path = resolve_recipe(run, None)
    if path is None:
        raise SystemExit(f"error: {run / 'run.json'} names no recipe; is the run finished?")
    return load_recipe(path), RunLayout(run).header().usage


def ratios(recipe: Any, usage: Any, pilot: Path | None) -> dict[str, dict[str, float | None]]:
    """Per role, actual / planned of each figure for the run of `recipe` that spent `usage`, planned from `pilot`
    (or from the templates)."""
    from mindsimkit.mindsim_app.plan import make_plan, plan_vs_actual

    plan = make_plan(recipe, from_run=pilot, rates={})
    compared = plan_vs_actual(plan.model_dump(), usage, {}, {})
    return {row["role"]: {k: row["ratio"][k] for k in FIGURES} for row in compared["roles"] if row["planned"]}


def actuals(run: Path) -> dict[str, dict[str, float]]:
    """Per role, what `run`'s ledger recorded of each figure (requests are its attempts)."""
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindsim_app.plan import ledger

    return {role: {k: float(u[k]) for k in FIGURES} for role, u in ledger(RunLayout(run).header().usage).items()}


def against_the_mean(runs: list[Path]) -> dict[str, Any]:
    """The best a plan of fixed figures could do on these runs: each run beside the mean of all of them. Per role
    and figure, the runs within the band; and the runs with every role's figures within it at once."""
    got = [actuals(r) for r in runs]
    keys = {(role, k) for g in got for role in g for k in FIGURES}
    mean = {key: statistics.mean(g.get(key[0], {}).get(key[1], 0) for g in got) for key in keys}

    def near(g: dict[str, dict[str, float]], key: tuple[str, str]) -> bool:
        return abs(g.get(key[0], {}).get(key[1], 0) / mean[key] - 1) <= BAND

    within = {f"{role}/{k}": sum(near(g, (role, k)) for g in got) for role, k in sorted(keys) if mean[(role, k)]}
    whole = sum(all(near(g, key) for key in keys if mean[key]) for g in got)
    return {"within": within, "runs_whole": whole}


def compare(runs: list[Path]) -> dict[str, Any]:
    alone: dict[str, dict[str, list[float]]] = {}
    piloted: dict[str, dict[str, list[float]]] = {}

    def add(into: dict[str, dict[str, list[float]]], got: dict[str, dict[str, float | None]]) -> None:
        for role, figures in got.items():
            for k, v in figures.items():
                if v is not None:
                    into.setdefault(role, {}).setdefault(k, []).append(v)

    for i, run in enumerate(runs):
        print(f"run {i + 1}/{len(runs)}: {run}", file=sys.stderr, flush=True)
        recipe, usage = finished(run)
        add(alone, ratios(recipe, usage, None))
        for pilot in runs:
            if pilot != run:
                add(piloted, ratios(recipe, usage, pilot))
    roles = []
    for role in piloted.keys() | alone.keys():
        row: dict[str, Any] = {"role": role}
        for k in FIGURES:
            a, p = alone.get(role, {}).get(k, []), piloted.get(role, {}).get(k, [])
            row[k] = {
                "templates_median": statistics.median(a) if a else None,
                "pilot_median": statistics.median(p) if p else None,
                "pilot_within": sum(abs(v - 1) <= BAND for v in p),
                "pilot_pairs": len(p),
            }
        roles.append(row)
    return {
        "runs": [str(r) for r in runs],
        "band": BAND,
        "roles": sorted(roles, key=lambda r: r["role"]),
        "against_the_mean": against_the_mean(runs),
    }


def show(result: dict[str, Any]) -> None:
    def cell(f: dict[str, Any]) -> str:
        t, m = f["templates_median"], f["pilot_median"]
        a = "—" if t is None else f"{t:.2f}"
        b = "—" if m is None else f"{m:.2f} ({f['pilot_within']}/{f['pilot_pairs']})"
        return f"{a:>5} | {b:>14}"

    n = len(result["runs"])
    print(
        f"{n} runs; actual/planned, median over runs from the templates | median over pilot pairs (pairs within "
        f"±{result['band']:.0%})"
    )
    print(f"{'role':22} | {'requests':>22} | {'prompt tokens':>22} | {'completion tokens':>22}")
    for row in result["roles"]:
        print(f"{row['role']:22} | " + " | ".join(cell(row[k]) for k in FIGURES))
    within = sum(row[k]["pilot_within"] for row in result["roles"] for k in FIGURES)
    pairs = sum(row[k]["pilot_pairs"] for row in result["roles"] for k in FIGURES)
    print(f"from a pilot: {within} of {pairs} role figures within ±{result['band']:.0%}")
    best = result["against_the_mean"]
    inside = sum(best["within"].values())
    print(
        f"against the mean of all {n} runs (the best a plan of fixed figures can do): {inside} of "
        f"{n * len(best['within'])} role figures within ±{result['band']:.0%}; runs with every role's figures "
        f"within it: {best['runs_whole']} of {n}"
    )


def smoke_runs(tmp: Path) -> list[Path]:
    """One fake-engine run and a copy of it: the fake engine would answer a second run alike anyway."""
    import shutil

    sys.path.insert(0, str(REPO / "tests" / "mindsim_app"))
    from fakejob import run_fake_job

    run = run_fake_job(tmp, ", max_patients: 1")
    return [run, Path(shutil.copytree(run, tmp / "copy"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="run folders, or folders holding them")
    ap.add_argument("--json", type=Path, help="also write the comparison here")
    args = parse_args(ap)
    with tempfile.TemporaryDirectory() as tmp:
        runs = smoke_runs(Path(tmp)) if args.smoke else run_folders(args.runs)
        if len(runs) < 2:
            raise SystemExit("error: give at least two finished runs of one recipe shape (each is the other's pilot)")
        result = compare(runs)
    show(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

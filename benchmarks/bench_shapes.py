"""Does every shipped recipe shape finish on the default engine? Each shape runs N times in a row (default 10) on
the embedded engine through the `mindsim` command a user types, each run in a fresh folder, and the script prints
how many of the N exited 0 and how long they took.

    python benchmarks/bench_shapes.py [--runs 10] [--shapes quickstart release ...] [--keep DIR]

The shapes:

- `quickstart`: recipes/quickstart.yaml as shipped (`mindsim run`);
- `release`: the quickstart with a `release:` section (a gate on the failed-arc share), as a publishing user
  writes it;
- `engines4`: the quickstart with `simulation.patient_engine: [mindsim, patientact, patient_psi, mindeval]`, as
  the README offers;
- `patientact_paper`: recipes/patientact_paper.yaml with its three hosted engines replaced by the quickstart's
  embedded one asking 18,432 tokens a slot, one pool patient, 4 counsellor turns instead of 15, the quickstart's
  pool verdicts (clean and minor) and the quickstart's patient role with its cut-off messages ended at their last
  sentence (`trim_cut_off`), as `patientact_situations` below (its other roles' budgets and sampling, its arms and
  judge as shipped): as shipped, the preflight refuses it on the model's 8k context (the patient's last turn alone
  would be ~25k tokens), exit 2 before any request; with the paper's patient sampling the 135M patient looped to
  its bound in 6 of 7 arcs, and with its clean-only pool the 135M screener's `minor` on both candidates left no
  patient (one run each, 2026-12-06);
  on the shipped model the preflight refuses this shape and the next PatientAct one (exit 2, ~11 s, one line naming
  each role): llama.cpp gives a slot no more than the model's trained context, 8,192 tokens, whatever
  `ctx_per_slot` asks, and their worst cases need ~10k (the paper's full-length profiles; 4-turn sessions on a
  ~5k-token PatientAct patient prompt). Runs of them that finished before the preflight read the server's figure
  did so because their real prompts stayed under 8,192, except one 8,213-token judge prompt the server refused
  (docs/performance.md, "The PatientAct shapes and the model's context");
- `profiles_simulate`: `mindsim profiles` then `mindsim simulate` on the quickstart, the two-step path;
- `patientact_situations`: PatientAct's own path, recipes/patientact_situations.yaml on the first test situation
  (tests/data/patientact_situations, the authors' file shapes): `mindsim import patientact-situations`, `mindsim
  run` (the situation chain, the four arms and Table 2's three baselines), `mindsim judge run --rubric patientact`
  and `mindsim patientact table 2`. Its engines are the embedded one asking 18,432 tokens a slot (the recipe's budgets
  for hosted models need more than the model's 8k: preflight says so), its patient role the quickstart's (with
  the paper's sampling the 135M model ran past its bound: 5 of 7 arcs failed in one run, 2026-12-06), 4
  counsellor turns instead of 15, and no MHQR judge (not Table 2's).

A run counts as completed when every command of it exits 0; a failed run's last `error:` line is printed as the
run ends, and every command's stderr is kept in the run's folder (`stderr.txt`, with `--keep`). Runs
use one machine's cores one after another (never in parallel): on 2 shared cores each is minutes, so the wall
times say more about the machine's load than about the toolkit. `--smoke` (the fast suite) runs each shape once
against the instant stub server instead of the model, to check that the script still builds its recipes and
commands: every shape's recipe is built and loaded, and the two-step shape (the cheapest) runs once; its
completion and time mean nothing. Nothing is asserted: the script reports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from smoke import parse_args

REPO = Path(__file__).resolve().parent.parent
SHAPES = ("quickstart", "release", "engines4", "patientact_paper", "profiles_simulate", "patientact_situations")
SITUATIONS = REPO / "tests" / "data" / "patientact_situations"
FOUR_ENGINES = ["mindsim", "patientact", "patient_psi", "mindeval"]


def _load(name: str) -> dict[str, Any]:
    from mindsimkit.mindcore import yamlio

    return dict(yamlio.safe_load((REPO / "recipes" / name).read_text(encoding="utf-8")))


def recipe_for(shape: str) -> dict[str, Any]:
    """The recipe a shape runs, as data (written to the run's folder as JSON)."""
    quick = _load("quickstart.yaml")
    if shape in ("quickstart", "profiles_simulate"):
        return quick
    if shape == "release":
        return {**quick, "release": {"max_failed_arc_share": 0.5}}
    if shape == "engines4":
        return {**quick, "simulation": {**quick["simulation"], "patient_engine": FOUR_ENGINES}}
    if shape == "patientact_paper":
        paper = _load("patientact_paper.yaml")
        # The paper's budgets (15 turns, 8k-token judge answers) need ~25k tokens a request; on the model's 8k
        # the preflight refuses the run, rightly. 4 turns and 18k a slot is what passes it.
        embedded = {**quick["engines"]["local"], "ctx_per_slot": 18432}
        return {
            **paper,
            "engines": {name: embedded for name in paper["engines"]},
            "roles": {**paper["roles"], "patient": {**quick["roles"]["patient"], "engine": "backbone"}},
            "simulation": {**paper["simulation"], "turn_cap": 4, "trim_cut_off": True},
            "profiles": {
                **paper["profiles"],
                "personas": "synthetic",
                "candidates": 2,
                "pool_size": 1,
                "benchmark_size": 1,
                "pool_verdicts": quick["profiles"]["pool_verdicts"],
            },
        }
    if shape == "patientact_situations":
        paper = _load("patientact_situations.yaml")
        embedded = {**quick["engines"]["local"], "ctx_per_slot": 18432}
        return {
            **{k: v for k, v in paper.items() if k != "judge"},
            "engines": {name: embedded for name in paper["engines"]},
            "roles": {**paper["roles"], "patient": {**quick["roles"]["patient"], "engine": "backbone"}},
            "profiles": {**paper["profiles"], "situations": "inputs"},
            "simulation": {**paper["simulation"], "turn_cap": 4},
        }
    raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")


def on_stub(recipe: dict[str, Any], url: str) -> dict[str, Any]:
    """`recipe` with every engine swapped for the instant stub server (`--smoke`)."""
    stub = {"kind": "openai", "base_url": url, "model": "instant", "native_tools": False}
    return {**recipe, "engines": {name: stub for name in recipe["engines"]}}


def commands(shape: str, recipe: Path, out: Path) -> list[list[str]]:
    mindsim = shutil.which("mindsim", path=str(Path(sys.executable).parent)) or "mindsim"
    if shape == "profiles_simulate":
        return [
            [mindsim, "profiles", str(recipe), "--out", str(out)],
            [mindsim, "simulate", "--profiles", str(out), "--recipe", str(recipe), "--out", str(out)],
        ]
    if shape == "patientact_situations":
        return [
            [
                mindsim,
                "import",
                "patientact-situations",
                str(recipe.parent / "situation.json"),
                "--outlines",
                str(SITUATIONS / "disease_outlines.json"),
                "--priors",
                str(SITUATIONS / "attribute_priors.json"),
                "--disease-priors",
                str(SITUATIONS / "disease_priors.json"),
                "--out",
                str(recipe.parent / "inputs"),
            ],
            [mindsim, "run", str(recipe), "--out", str(out)],
            [mindsim, "judge", "run", "--rubric", "patientact", str(out), "--recipe", str(recipe)],
            [mindsim, "patientact", "table", "2", str(out)],
        ]
    return [[mindsim, "run", str(recipe), "--out", str(out)]]


def one_run(shape: str, recipe: dict[str, Any], folder: Path, env: dict[str, str]) -> dict[str, Any]:
    """Every command of one run of `shape` in `folder`: completed or not, wall seconds, the last error line."""
    folder.mkdir(parents=True)
    path = folder / "recipe.json"
    path.write_text(json.dumps(recipe), encoding="utf-8")
    if shape == "patientact_situations":  # one situation: seven sessions are most of an hour on two cores
        first = json.loads((SITUATIONS / "patientAct.json").read_text(encoding="utf-8"))[:1]
        (folder / "situation.json").write_text(json.dumps(first), encoding="utf-8")
    t0 = time.monotonic()
    for cmd in commands(shape, path, folder / "run"):
        proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
        # Kept beside the run: a batch stopped before its end still shows why each run failed.
        with (folder / "stderr.txt").open("a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(map(str, cmd))}\nexit {proc.returncode}\n{proc.stderr}\n")
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
            why = errors[-1] if errors else (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"ok": False, "seconds": time.monotonic() - t0, "exit": proc.returncode, "error": why[:400]}
    return {"ok": True, "seconds": time.monotonic() - t0, "exit": 0, "error": None}


def report(shape: str, runs: list[dict[str, Any]]) -> str:
    done = [r for r in runs if r["ok"]]
    times = [r["seconds"] for r in runs]
    line = (
        f"{shape:18} {len(done)}/{len(runs)} completed; wall s: median {statistics.median(times):.0f}, "
        f"min {min(times):.0f}, max {max(times):.0f}"
    )
    fails = [f"    run {i + 1}: exit {r['exit']}: {r['error']}" for i, r in enumerate(runs) if not r["ok"]]
    return "\n".join([line, *fails])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="consecutive runs per shape")
    ap.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    ap.add_argument("--keep", type=Path, help="keep every run folder below this folder (default: a temp folder)")
    ap.add_argument("--json", type=Path, help="also write every run's result here")
    args = parse_args(ap, runs=1)
    if args.smoke:
        from mindsimkit.mindcore.recipe import load_recipe
        from mindsimkit.mindsim.config import SimulationConfig

        for shape in SHAPES:  # every shape's recipe still loads and validates
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "recipe.json"
                path.write_text(json.dumps(recipe_for(shape)), encoding="utf-8")
                load_recipe(path).section("simulation", SimulationConfig)
        args.shapes = ["profiles_simulate"]
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-shapes-"))
    env = {**os.environ, "TERM": "dumb"}
    with contextlib.ExitStack() as stack:
        server = None
        if args.smoke:
            from instant_server import InstantServer

            server = stack.enter_context(InstantServer())
        results = run_all(args, root, env, server)
    engine = "instant stub server (smoke: not a measurement)" if args.smoke else "embedded engine (SmolLM2-135M)"
    print(f"\nshapes on the {engine}, {args.runs} consecutive run(s) each:")
    for shape, runs in results.items():
        print(report(shape, runs))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


def run_all(args: argparse.Namespace, root: Path, env: dict[str, str], server: Any) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for shape in args.shapes:
            recipe = recipe_for(shape)
            if server is not None:
                recipe = on_stub(recipe, server.base_url)
            results[shape] = []
            for i in range(args.runs):
                results[shape].append(one_run(shape, recipe, root / shape / f"run{i + 1}", env))
                last = results[shape][-1]
                why = "" if last["ok"] else f": exit {last['exit']}: {last['error']}"
                print(
                    f"{shape} run {i + 1}/{args.runs}: {'ok' if last['ok'] else 'failed'} ({last['seconds']:.0f} s)"
                    + why,
                    flush=True,
                )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()

"""Issue 18's smoke run on the real embedded engine (SmolLM2-135M): the shared quickstart run (one counsellor)
gets a second counsellor on the same profiles and first scenarios (its checkpoints resume, only the new arcs are
simulated), is judged (every report table of `judge run`, the cost table with a price), and both counsellors'
second sessions go through the memory ablation. A 135M model's verdicts mean nothing; the test proves the
pieces run together on real output without error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from judge.config import JudgeConfig
from judge.run import run_judging
from mindcore.engine import Engines
from mindcore.recipe import load_recipe
from mindsim.config import SimulationConfig
from mindsim.simulate import run_simulation
from mindsim_app.ablation import ablate_memory
from profilegen.dataset import load_profiles

pytestmark = pytest.mark.embedded

COUNSELLORS = ["counsellor", "counsellor:b"]
REPO = Path(__file__).resolve().parents[2]


def test_two_counsellors_report_every_table_and_the_memory_ablation(quickstart_run, tmp_path):
    run = tmp_path / "run"
    for part in ("profiles", "sessions", "judgments/cache"):
        shutil.copytree(quickstart_run / part, run / part)
    shutil.rmtree(run / "sessions" / "shards")
    raw = yaml.safe_load((REPO / "recipes" / "quickstart.yaml").read_text())
    raw["roles"]["counsellor:b"] = {**raw["roles"]["counsellor"], "temperature": 0.7}
    raw["simulation"]["counsellors"] = COUNSELLORS
    raw["judge"]["prices"] = {"judge": {"input": 1.0, "output": 4.0}}
    recipe = tmp_path / "two.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    rec = load_recipe(recipe)
    (run / "run.json").write_text(json.dumps({"status": "finished", "recipe": {"path": str(recipe)}}))
    config = rec.section("simulation", SimulationConfig)
    with Engines.from_config(rec.engines_config()) as engines:
        from mindcore.preflight import preflight

        budgets = preflight(rec, engines, {"simulate", "judge"}).budgets
        config = budgets.apply("simulation", config) if budgets else config
        pool = load_profiles(run / "profiles", pool_only=config.pool_only)
        summary = run_simulation(pool, engines, config, run, rec.seed)
        assert sorted(summary.counsellors) == COUNSELLORS
        run_judging(run, engines, rec.section("judge", JudgeConfig))
        abl = ablate_memory(run, COUNSELLORS, engines=engines)
    report = json.loads((run / "judgments" / "report.json").read_text())
    analyses = report["judges"]["judge"]["analyses"]
    for table in ("issue_by_turn", "early_vs_late", "shares_by_session", "session_distribution",
                  "without_speaks_as_patient", "benchmark_subset"):
        assert table in analyses
    assert report["costs"]["rows"] and report["costs"]["judges_total"]["cost"] > 0
    memory = run / "ablations" / "memory"
    ablation = json.loads((memory / "report.json").read_text())
    assert abl["rerun"] + len(abl["failures"]) == abl["to_rerun"] > 0
    assert set(ablation["judges"]["judge"]["counsellors"]) <= set(COUNSELLORS)
    assert (memory / "report.md").is_file() and (memory / "judge_inputs.jsonl").is_file()

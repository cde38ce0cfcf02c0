"""Every shipped recipe validates section by section, and an unreachable engine is explained."""

from __future__ import annotations

from pathlib import Path

import pytest

from mindcore.recipe import load_recipe
from mindsim_app.job import OutputConfig
from mindsim.config import SimulationConfig
from profilegen.config import ProfilesConfig
from validation.config import ValidationConfig

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))


# The realism recipe uses validation's sample filters, which land with branch judgefid (validation/config.py).
FILTERS = {"first_sessions_only", "max_patient_turns", "counsellors"}
NEEDS_FILTERS = {"realism.yaml"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipe_sections_validate(path):
    if path.name in NEEDS_FILTERS and not FILTERS <= set(ValidationConfig.model_fields):
        pytest.skip("validation sample filters (first_sessions_only, max_patient_turns, counsellors) not merged yet")
    r = load_recipe(path)
    for name, model in (("profiles", ProfilesConfig), ("simulation", SimulationConfig),
                        ("validation", ValidationConfig), ("output", OutputConfig)):
        r.section(name, model)


def test_realism_recipe_runs_the_papers_comparison():
    r = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "realism.yaml")
    p, s = r.section("profiles", ProfilesConfig), r.section("simulation", SimulationConfig)
    assert p.pool_size == 100 and (s.sessions, s.turn_cap) == (1, 15)
    assert s.patient_engines == ["mindsim", "patientact", "patient_psi", "mindeval"] and len(s.counsellors) >= 2
    assert s.patientact.allow_end is False  # only MindSim may leave early (docs/baselines.md)
    v = r.validation
    assert (v["first_sessions_only"], v["max_patient_turns"], v["counsellors"], v["arc"]) == (True, 15, ["counsellor"], True)
    assert v["counsellors"][0] == s.counsellors[0]


def test_benchmark_recipe_has_paper_settings():
    r = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "benchmark.yaml")
    p, s = r.section("profiles", ProfilesConfig), r.section("simulation", SimulationConfig)
    assert (p.candidates, p.pool_size, p.benchmark_size, p.poor_qol_floor) == (1000, 100, 50, 0.10)
    assert (s.sessions, s.turn_cap) == (3, 30) and len(s.counsellors) >= 2


def test_engines_check_explains_unreachable_benchmark_engines(monkeypatch):
    from mindcore.engine_health import check_engines

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    r = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "benchmark.yaml")
    cfg = r.engines_config()
    cfg.engines["gpu"] = cfg.engines["gpu"].model_copy(update={"port": 9})  # nothing listens there
    results = {h.engine: h for h in check_engines(cfg)}
    assert not results["gpu"].ok and any("vllm serve Qwen/Qwen3-32B" in h for h in results["gpu"].hints)
    assert not results["api"].ok and any("OPENAI_API_KEY is not set" in h for h in results["api"].hints)

"""The first-scenario writer (MindEval2 App. D "Session Scenarios"): every patient's shared
first scenario is written by the `first_scenario_writer` role, later ones by `scenario_writer`; unbound, the
first writer takes `scenario_writer`'s binding (not `default`'s). Preflight lists it and budgets its schema."""

from __future__ import annotations

import json
from pathlib import Path

from mindsimkit.mindcore.budget_fit import fit_budgets
from mindsimkit.mindcore.config import EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.preflight import roles_for
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.simulate import run_simulation
from simfakes import SimResponder, make_profile


class ModelLog(SimResponder):
    """Records which model each scenario request went to, first-session prompt or later."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.scenarios: list[tuple[str, bool]] = []

    def __call__(self, req):
        if req.schema_name == "Scenario":
            self.scenarios.append((req.model, "first conversation" in req.messages[0]["content"]))
        return super().__call__(req)


def _simulate(out: Path, roles: dict[str, RoleSpec]) -> ModelLog:
    log = ModelLog(end_after=99)
    backend = FakeBackend(log)
    config = SimulationConfig(sessions=3, turn_cap=3, counsellors=["counsellor", "counsellor:b"])
    with Engines.with_backend(backend, roles={"default": RoleSpec(engine="fake", model="default-model"), **roles}) as e:
        summary = run_simulation([make_profile("p1"), make_profile("p2")], e, config, out, seed=1)
    assert not summary.failed_arcs and summary.sessions_written == 12
    return log


def test_bound_first_writer_gets_every_first_scenario_and_only_those(tmp_path):
    log = _simulate(
        tmp_path,
        {
            "scenario_writer": RoleSpec(engine="fake", model="patient-model"),
            "first_scenario_writer": RoleSpec(engine="fake", model="sonnet-model"),
        },
    )
    firsts = [m for m, first in log.scenarios if first]
    later = [m for m, first in log.scenarios if not first]
    assert firsts == ["sonnet-model"] * 2  # once per patient, shared by both counsellors
    assert later and set(later) == {"patient-model"}  # 2 patients x 2 counsellors x 2 later sessions
    assert len(later) == 8
    for pid in ("p1", "p2"):
        rec = json.loads((tmp_path / "sessions" / "scenarios" / f"{pid}-1.json").read_text())
        assert rec["engine"]["role"] == "first_scenario_writer" and rec["engine"]["model"] == "sonnet-model"
    summary = json.loads((tmp_path / "sessions" / "summary.json").read_text())
    assert summary["engines"]["first_scenario_writer"]["model"] == "sonnet-model"
    assert summary["engines"]["scenario_writer"]["model"] == "patient-model"


def test_unbound_first_writer_falls_back_to_scenario_writer_not_default(tmp_path):
    log = _simulate(tmp_path, {"scenario_writer": RoleSpec(engine="fake", model="patient-model", temperature=0.4)})
    assert {m for m, _ in log.scenarios} == {"patient-model"}
    cfg = EnginesConfig(
        engines={"local": {"kind": "embedded"}},
        roles={
            "default": {"engine": "local", "temperature": 0.9},
            "scenario_writer": {"engine": "local", "temperature": 0.4, "max_tokens": 777},
        },
    )
    assert cfg.role_spec("first_scenario_writer").temperature == 0.4
    assert cfg.bound_as("first_scenario_writer") == "scenario_writer"
    assert Engines(cfg).role_spec("first_scenario_writer").max_tokens == 777
    # With neither bound, both writers are the default's.
    bare = EnginesConfig(engines={"local": {"kind": "embedded"}}, roles={"default": {"engine": "local"}})
    assert bare.bound_as("first_scenario_writer") == "default"


def test_preflight_lists_and_budgets_the_first_writer():
    r = Recipe(
        name="t",
        engines={
            "local": {"kind": "embedded", "ctx_per_slot": 16384},
            "other": {"kind": "embedded", "ctx_per_slot": 16384},
        },
        roles={
            "default": {"engine": "local", "max_tokens": 9000},
            "first_scenario_writer": {"engine": "other", "max_tokens": 9000},
        },
    )
    cfg = r.engines_config()
    uses = {u.label: u for u in roles_for(r, Engines(cfg), {"simulate"})}
    assert uses["first_scenario_writer"].engine == "other" and uses["scenario_writer"].engine == "local"
    report = fit_budgets(r, cfg, {"simulate"})
    lines = {(ln.role, ln.schema) for ln in report.lines}
    assert ("first_scenario_writer", "Scenario") in lines and ("scenario_writer", "Scenario") in lines

"""Issue 11 downstream of the simulator: token budgets by patient engine (the MindSim patient's tool
schemas only when the recipe runs MindSim, PatientAct's steps only when it runs PatientAct), and the
dataset card of a run holding PatientAct sessions (fields explained, counts computed from the rows)."""

from __future__ import annotations

import pytest

from mindcore.budget import worst_case_tokens
from mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec
from mindcore.engine import Engines
from mindcore.errors import ConfigError
from mindcore.fake import FakeBackend
from mindcore.recipe import Recipe
from mindsim.budgets import agenda_tool_schema, commit_tool_schema, fit_budgets
from mindsim.preflight import preflight

MINDSIM_SCHEMAS = {"tool_choice:commit_move", "tool_choice:agenda"}


def _recipe(engine, roles=None) -> Recipe:
    simulation = {} if engine is None else {"patient_engine": engine}
    return Recipe(name="t", engines={"local": {"kind": "embedded"}},
                  roles=roles or {"default": {"engine": "local"}}, simulation=simulation)


def _schemas(report) -> set[str]:
    return {ln.schema for ln in report.lines}


@pytest.mark.parametrize("engine, mindsim, patientact", [
    (None, True, False), ("mindsim", True, False), ("patientact", False, True),
    (["mindsim", "patientact"], True, True), (["patientact", "mindsim"], True, True),
])
def test_each_engines_schemas_are_checked_only_when_the_recipe_runs_it(engine, mindsim, patientact):
    r = _recipe(engine)
    names = _schemas(fit_budgets(r, r.engines_config(), {"simulate"}))
    # fit_budgets keeps one line per role and budget setting (its largest schema): commit_move stands for the patient.
    assert ("tool_choice:commit_move" in names) == mindsim
    assert any(n.startswith("patientact:") for n in names) == patientact
    assert "Scenario" in names  # scenarios and memory serve both engines


def test_a_patient_budget_below_commit_move_is_refused_only_when_mindsim_plays_the_patient():
    commit = worst_case_tokens(commit_tool_schema()).tokens
    assert commit > worst_case_tokens(agenda_tool_schema()).tokens
    roles = {"default": {"engine": "local"}, "patient": {"engine": "local", "max_tokens": commit - 1}}
    for engine in ("mindsim", ["patientact", "mindsim"]):
        r = _recipe(engine, roles)
        with pytest.raises(ConfigError, match=rf"roles.patient.max_tokens is {commit - 1}.*'tool_choice:commit_move'"):
            fit_budgets(r, r.engines_config(), {"simulate"})
    r = _recipe("patientact", roles)
    cfg = r.engines_config()
    report = fit_budgets(r, cfg, {"simulate"})
    assert not _schemas(report) & MINDSIM_SCHEMAS and "patient" not in {ln.role for ln in report.lines}
    assert cfg.roles["patient"].max_tokens == commit - 1  # a speaking patient's cap is left alone


def test_patientact_step_budget_is_checked_in_a_patientact_recipe_only():
    small = {"patientact": {"step_max_tokens": 10}}
    for engine, refused in (("mindsim", False), ("patientact", True), (["mindsim", "patientact"], True)):
        r = Recipe(name="t", engines={"local": {"kind": "embedded"}}, roles={"default": {"engine": "local"}},
                   simulation={"patient_engine": engine, **small})
        if refused:
            with pytest.raises(ConfigError, match=r"simulation.patientact.step_max_tokens is 10"):
                fit_budgets(r, r.engines_config(), {"simulate"})
        else:
            assert not any(n.startswith("patientact:") for n in _schemas(fit_budgets(r, r.engines_config(), {"simulate"})))


def _probe_answers(req):
    if req.response_schema is not None:
        return {"mood": "fine", "calm": True}
    return "Hello there."


def _two_engines(recipe_engine):
    """The patient on an engine that only chats, everything else on a structured one."""
    sim, talk = FakeBackend(_probe_answers, name="sim"), FakeBackend(lambda req: "Hello.", name="talk")
    cfg = EnginesConfig.model_construct(
        engines={n: OpenAIEngine(base_url="http://fake.invalid/v1", model=n) for n in ("sim", "talk")},
        roles={"default": RoleSpec(engine="sim"), "patient": RoleSpec(engine="talk", max_tokens=256)})
    return Engines(cfg, backends={"sim": sim, "talk": talk}), talk


def test_preflight_asks_a_patientact_patient_engine_for_chat_only_and_probes_the_appraiser():
    engines, talk = _two_engines("patientact")
    with engines:
        report = preflight(_recipe("patientact", {"default": {"engine": "local"}}), engines, {"simulate"})
    health = {h.engine: h for h in report.engines}
    assert health["talk"].ok and not health["talk"].structured_ok and health["sim"].structured_ok
    assert talk.requests and all(req.response_schema is None for req in talk.requests)
    assert {"patient_appraiser", "profile_decomposer"} <= {u.role for u in report.roles}
    assert not _schemas(report.budgets) & MINDSIM_SCHEMAS


def test_preflight_still_asks_a_mindsim_patient_engine_for_json():
    engines, talk = _two_engines("mindsim")
    with engines:
        with pytest.raises(Exception) as info:
            preflight(_recipe(["mindsim", "patientact"], {"default": {"engine": "local"}}), engines, {"simulate"})
    assert "talk" in str(info.value)
    assert any(req.response_schema is not None for req in talk.requests)

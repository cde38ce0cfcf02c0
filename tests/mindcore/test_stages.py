"""The stage registry (mindcore/stages.py): every stage is found through the installed entry points and
declares its own roles, schemas and prompt estimates; nothing in mindcore names a stage package."""

from __future__ import annotations

from importlib.metadata import entry_points
from types import SimpleNamespace

import pytest

from mindsimkit.mindcore import stages
from mindsimkit.mindcore.budget import prompt_estimator, registered
from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindsimkit.mindcore.errors import ConfigError


class _Engines:
    """The two things `Stage.roles` reads of started engines: the role bindings and the engine names."""

    def __init__(self) -> None:
        self.config = EnginesConfig(
            engines={"local": EmbeddedEngine()}, roles={"default": RoleSpec(engine="local", max_tokens=64)}
        )

    def role_spec(self, role: str) -> RoleSpec:
        return self.config.role_spec(role)


def test_each_stage_package_declares_itself_through_one_entry_point():
    found = {ep.name: ep.value for ep in entry_points(group=stages.ENTRY_POINT_GROUP)}
    assert found == {
        "profilegen": "mindsimkit.profilegen.stage:register",
        "mindsim": "mindsimkit.mindsim.stage:register",
        "validation": "mindsimkit.validation.stage:register",
        "judge": "mindsimkit.judge.stage:register",
    }


def test_stages_declare_the_roles_they_call():
    recipe = SimpleNamespace(simulation={"counsellors": ["counsellor"]}, validation={"arc": True})
    engines = _Engines()
    roles = lambda *names: [u.label for u in stages.stage_roles(recipe, engines, set(names))]  # noqa: E731
    assert roles("profiles") == ["profile_writer", "screener"]
    assert roles("simulate") == [
        "first_scenario_writer",
        "scenario_writer",
        "patient",
        "memory_compactor",
        "counsellor",
    ]
    assert roles("validate") == ["labeller"]
    assert roles("judge") == ["judge"]
    # `run` is the main job's three stages, in the order data flows.
    assert roles("run") == [*roles("profiles"), *roles("simulate"), *roles("validate")]
    recipe.validation = {"arc": False}
    assert roles("validate") == []  # no labelling, no labeller
    recipe.simulation = {"counsellors": ["counsellor"], "patient_engine": ["mindsim", "patientact"]}
    assert roles("simulate")[4:6] == ["patient_appraiser", "profile_decomposer"]


def test_every_registered_role_has_its_schemas_and_estimates():
    by_stage = {}
    for e in registered():
        for s in e.stages:
            by_stage.setdefault(s, set()).add(e.role)
    assert by_stage["profiles"] == {"profile_writer", "screener"}
    assert by_stage["simulate"] >= {"scenario_writer", "patient", "patient_appraiser", "profile_decomposer"}
    assert by_stage["validate"] == {"labeller"} and by_stage["judge"] == {"judge"}
    for role in (
        "profile_writer",
        "screener",
        "scenario_writer",
        "patient",
        "counsellor",
        "memory_compactor",
        "labeller",
        "judge",
    ):
        assert prompt_estimator(role) is not None, role
    assert stages.output_bound("patient") is not None and stages.output_bound("memory_compactor") is not None
    assert stages.sample("longest_session") is not None


def test_an_unregistered_stage_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"no stage named 'critique' is registered.*reinstall"):
        stages.stage("critique")

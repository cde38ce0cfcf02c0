"""Checkpoints are written exactly once, whatever the runner: a retried worker racing its original never replaces a
session or first scenario that later work may already be built on; its copy is discarded and counted."""

from __future__ import annotations

from mindsimkit.mindcore.budget import largest_instance
from mindsimkit.mindsim.records import ScenarioRecord
from mindsimkit.mindsim.scenario import Scenario, _ScenarioDraft
from mindsimkit.mindsim.simulate import ScenarioStore


def _record(opening: str) -> ScenarioRecord:
    scenario = Scenario.model_validate(largest_instance(_ScenarioDraft.model_json_schema()))
    return ScenarioRecord(
        patient_id="p1",
        seed=3,
        scenario=scenario.model_copy(update={"opening_message": opening}),
        engine={"engine": "fake"},
        prompt={},
    )


def test_a_late_copy_of_a_first_scenario_is_discarded_and_the_first_one_used(tmp_path):
    first, late = ScenarioStore(tmp_path), ScenarioStore(tmp_path)  # two workers on one shared folder
    kept = first.save(_record("I barely slept again."))
    used = late.save(_record("Something else entirely."))
    assert kept.scenario.opening_message == used.scenario.opening_message == "I barely slept again."
    assert (first.duplicates, late.duplicates) == (0, 1)
    assert ScenarioStore(tmp_path).load("p1-3").scenario.opening_message == "I barely slept again."

"""Tests for scenario writing (mindsim/scenario.py): what the writer is shown for the first and later
sessions, and how off-shape output is handled."""

from __future__ import annotations

import asyncio

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.scenario import first_scenario
from mindsimkit.mindsim.simulate import run_simulation
from simfakes import SCENARIO, SimResponder, make_profile


def test_writer_sees_core_belief_gap_leftovers_beat_and_transcript(tmp_path):
    backend = FakeBackend(SimResponder(todo=False, end_after=2))
    config = SimulationConfig(sessions=2, turn_cap=4)
    with Engines.with_backend(backend) as engines:
        run_simulation([make_profile("p1")], engines, config, tmp_path, seed=2)
    prompts = [r.messages[0]["content"] for r in backend.requests if r.schema_name == "Scenario"]
    assert len(prompts) == 2
    first, later = prompts
    assert "waste of space" in first and "waste of space" in later  # the writer alone sees the core belief
    assert "Lowercase, abbreviations" in first  # the patient's register shapes the opener
    from mindsimkit.mindsim.schedule import draw_schedule

    plan = draw_schedule("p1", 2, config).sessions[1]
    assert f"exactly {plan.gap_text} has passed" in later and plan.beat in later
    assert "- the rejection email" in later and "- my sister" in later  # never reached: no todo calls
    assert "Patient: hey. rough week" in later and "Counsellor: That sounds hard." in later
    assert SCENARIO["event"] in later  # the previous situation
    patient_prompts = {r.messages[0]["content"] for r in backend.requests if r.role == "patient"}
    assert not any("waste of space" in p for p in patient_prompts)


def test_blank_items_are_counted_as_a_failure_not_kept():
    bad = {**SCENARIO, "automatic_thoughts": ["  ", "x"]}
    backend = FakeBackend(lambda req: bad)
    plan_cfg = SimulationConfig(sessions=1)
    from mindsimkit.mindsim.schedule import draw_schedule

    plan = draw_schedule("p1", 0, plan_cfg).sessions[0]
    with Engines.with_backend(backend) as engines:
        with pytest.raises(StructuredOutputError, match="blank"):
            asyncio.run(first_scenario(engines.role("scenario_writer"), make_profile(), plan, 500, retries=2))
    assert backend.requests[0].max_tokens == 500
    assert len(backend.requests) == 3  # re-drafted within the bound, then a failure
    assert "empty" in backend.requests[1].messages[-1]["content"]


def test_blank_items_once_are_re_drafted_not_fatal():
    from mindsimkit.mindsim.schedule import draw_schedule

    answers = iter([{**SCENARIO, "checkpoints": [" "]}, SCENARIO])
    backend = FakeBackend(lambda req: next(answers))
    plan = draw_schedule("p1", 0, SimulationConfig(sessions=1)).sessions[0]
    with Engines.with_backend(backend) as engines:
        scenario, rejected = asyncio.run(first_scenario(engines.role("scenario_writer"), make_profile(), plan, 500))
    assert scenario.checkpoints == SCENARIO["checkpoints"] and rejected == [] and len(backend.requests) == 2


def test_scenario_schema_bounds_every_string():
    from mindsimkit.mindsim.scenario import _ScenarioDraft

    props = _ScenarioDraft.model_json_schema()["properties"]
    for name, prop in props.items():
        bound = prop.get("maxLength") or prop.get("items", {}).get("maxLength")
        assert bound, f"{name} has no maxLength: the small model loops without one"


def test_list_items_cannot_be_blank_under_the_schema_and_drafts_are_counted():
    """The writer's schema (scaled or not) gives every list item a minLength, so a grammar-enforcing engine
    cannot emit ""; a re-drafted scenario says how many drafts it took (1 when the first was kept)."""
    from mindsimkit.mindsim.scenario import MIN_ITEM_CHARS, draft_model
    from mindsimkit.mindsim.schedule import draw_schedule

    for scale in (1.0, 0.3):
        props = draft_model(scale).model_json_schema()["properties"]
        for name in ("automatic_thoughts", "behaviors", "physical", "checkpoints"):
            assert props[name]["items"]["minLength"] == MIN_ITEM_CHARS, (scale, name)
    answers = iter([{**SCENARIO, "checkpoints": [" "]}, SCENARIO, SCENARIO])
    backend = FakeBackend(lambda req: next(answers))
    plan = draw_schedule("p1", 0, SimulationConfig(sessions=1)).sessions[0]
    with Engines.with_backend(backend) as engines:
        scenario, _ = asyncio.run(first_scenario(engines.role("scenario_writer"), make_profile(), plan, 500))
        first, _ = asyncio.run(first_scenario(engines.role("scenario_writer"), make_profile(), plan, 500))
    assert scenario.drafts == 2 and first.drafts == 1


def test_a_draft_cut_off_at_its_length_limit_is_re_asked_with_a_growing_repeat_penalty():
    """A small writer loops its opening message up to the field's maxLength; asked again with the same sampling
    it loops again. Each re-ask after a cut-off draft penalises repeated tokens harder, so the draft ends."""
    from mindsimkit.mindsim.scenario import OPENING_MAX_CHARS
    from mindsimkit.mindsim.schedule import draw_schedule

    looping = ("and I keep " * 40)[:OPENING_MAX_CHARS]

    def writer(req):
        # The loop breaks only under a penalty of at least 1.0 (the second re-ask).
        return SCENARIO if (req.frequency_penalty or 0) >= 1.0 else {**SCENARIO, "opening_message": looping}

    backend = FakeBackend(writer)
    plan = draw_schedule("p1", 0, SimulationConfig(sessions=1)).sessions[0]
    with Engines.with_backend(backend) as engines:
        scenario, rejected = asyncio.run(
            first_scenario(engines.role("scenario_writer"), make_profile(), plan, 500, retries=5)
        )
    assert [r.reason for r in rejected] == ["cut_off", "cut_off"] and scenario.drafts == 3
    assert [r.frequency_penalty for r in backend.requests] == [None, pytest.approx(0.6), pytest.approx(1.0)]

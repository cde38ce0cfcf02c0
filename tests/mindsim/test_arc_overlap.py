"""The arc writes the next scenario while the previous session's memory is rewritten (mindsim/session.py
`run_arc`): the two calls are independent, so they overlap; a failure in either still fails the arc at the
same point and never checkpoints a session it should not."""

from __future__ import annotations

import asyncio

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import TransportError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.records import ScenarioRecord, SessionRecord
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import draw_schedule
from mindsimkit.mindsim.session import Arc, Roles, run_arc
from mindsimkit.profilegen.moves import load_vocabulary
from simfakes import SCENARIO, SimResponder, make_profile

V = load_vocabulary()


class GatedBackend(FakeBackend):
    """Holds every memory rewrite until a scenario request has arrived (or `gate_s` passed), and records the
    order in which calls of the two roles started and finished."""

    def __init__(self, responder, *, gate_s: float = 1.0, fail_role: str | None = None):
        super().__init__(responder)
        self.gate_s, self.fail_role = gate_s, fail_role
        self.events: list[str] = []
        self._scenario_seen: asyncio.Event | None = None

    async def complete(self, request):
        if self._scenario_seen is None:
            self._scenario_seen = asyncio.Event()
        if request.schema_name == "Scenario":
            self.events.append("scenario start")
            self._scenario_seen.set()
            await asyncio.sleep(0.05)
            if self.fail_role == "scenario_writer":
                raise TransportError("scenario server went away")
        if request.role == "memory_compactor":
            self.events.append("memory start")
            try:
                await asyncio.wait_for(self._scenario_seen.wait(), self.gate_s)
                self._scenario_seen.clear()
            except asyncio.TimeoutError:
                self.events.append("memory waited alone")
            if self.fail_role == "memory_compactor":
                raise TransportError("memory server went away")
            self.events.append("memory end")
        return await super().complete(request)


def _arc(backend, store, *, sessions=3, **cfg):
    config = SimulationConfig(sessions=sessions, turn_cap=2, **cfg)
    first = ScenarioRecord(patient_id="p1", seed=0, scenario=Scenario(**SCENARIO), engine={}, prompt={})
    saved: list[str] = []

    def save(r: SessionRecord) -> SessionRecord:
        saved.append(r.session_id)
        store.setdefault(r.session_id, r)
        return store[r.session_id]

    with Engines.with_backend(backend) as engines:
        roles = Roles(*(engines.role(r) for r in ("patient", "counsellor", "scenario_writer", "memory_compactor")))
        arc = Arc.of(make_profile("p1"), V, roles, config, counsellor="counsellor", seed=0)
        recs = asyncio.run(run_arc(arc, draw_schedule("p1", 0, config), first=first, load=store.get, save=save))
    return recs, saved


def test_next_scenario_is_written_while_the_memory_is_rewritten():
    backend = GatedBackend(SimResponder(end_after=9))
    recs, _ = _arc(backend, {})
    assert len(recs) == 3
    # Every memory rewrite before a later session found a scenario request under way; the last session's
    # (read by nothing, so skipped only with final_memory: false) had none to wait for.
    assert backend.events.count("memory start") == 3
    assert backend.events.count("memory waited alone") == 1
    assert backend.events.index("scenario start") < backend.events.index("memory end")
    # The scenario of session k+1 was written from session k's talk, as the serial order wrote it.
    scenario_requests = [r for r in backend.requests if r.schema_name == "Scenario"]
    for rec, req in zip(recs, scenario_requests):
        prompt = "\n".join(str(m["content"]) for m in req.messages)
        for message in rec.transcript():
            assert message["content"] in prompt
    assert [r.memory_before for r in recs[1:]] == [r.memory_after for r in recs[:-1]]


def test_overlap_changes_no_record():
    """The same arc with the calls overlapped and with every call one after another gives the same records."""
    overlapped, _ = _arc(GatedBackend(SimResponder(end_after=9), gate_s=1.0), {})
    serial, _ = _arc(FakeBackend(SimResponder(end_after=9)), {})
    assert [r.model_dump() for r in overlapped] == [r.model_dump() for r in serial]


def test_memory_failure_fails_the_arc_and_cancels_the_scenario():
    store: dict[str, SessionRecord] = {}
    backend = GatedBackend(SimResponder(end_after=9), fail_role="memory_compactor")
    with pytest.raises(TransportError, match="memory server"):
        _arc(backend, store)
    assert store == {}  # no session is checkpointed with a memory nobody wrote


def test_scenario_failure_keeps_the_finished_session_then_fails_the_arc():
    store: dict[str, SessionRecord] = {}
    backend = GatedBackend(SimResponder(end_after=9), fail_role="scenario_writer")
    with pytest.raises(TransportError, match="scenario server"):
        _arc(backend, store)
    # Session 0 finished with its memory written, so it is kept; the rerun starts at session 1.
    assert len(store) == 1 and next(iter(store.values())).session_index == 0
    recs, saved = _arc(GatedBackend(SimResponder(end_after=9)), store)
    assert [r.session_index for r in recs] == [0, 1, 2] and len(saved) == 2


def test_a_copy_kept_from_another_worker_gets_its_own_next_scenario():
    """When another worker checkpointed the same session first, the scenario written from our talk is dropped
    and the next one is written from the kept copy."""
    store: dict[str, SessionRecord] = {}
    _arc(FakeBackend(SimResponder(end_after=9)), store, sessions=1)
    theirs = next(iter(store.values()))
    theirs = theirs.model_copy(
        update={
            "counsellor_messages": [
                *theirs.counsellor_messages[:-1],
                {"role": "user", "content": "a different last message from the other worker"},
            ]
        }
    )
    kept = {theirs.session_id: theirs}

    def load(key):
        return None  # this worker starts before the other one's checkpoint lands

    backend = GatedBackend(SimResponder(end_after=9))
    config = SimulationConfig(sessions=2, turn_cap=2)
    first = ScenarioRecord(patient_id="p1", seed=0, scenario=Scenario(**SCENARIO), engine={}, prompt={})
    with Engines.with_backend(backend) as engines:
        roles = Roles(*(engines.role(r) for r in ("patient", "counsellor", "scenario_writer", "memory_compactor")))
        arc = Arc.of(make_profile("p1"), V, roles, config, counsellor="counsellor", seed=0)
        recs = asyncio.run(
            run_arc(
                arc,
                draw_schedule("p1", 0, config),
                first=first,
                load=load,
                save=lambda r: kept.setdefault(r.session_id, r),
            )
        )
    assert recs[0] is theirs
    last_scenario = [r for r in backend.requests if r.schema_name == "Scenario"][-1]
    assert "a different last message from the other worker" in "\n".join(
        str(m["content"]) for m in last_scenario.messages
    )

"""The simulator end to end on the real embedded engine (SmolLM2-135M): two patients, two sessions each,
every stage (scenario writer, commit_move through a JSON schema, agenda tool, messages, counsellor, memory
compaction) on the real server. Kept tiny: one full patient turn per session after the opening message."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from mindcore.config import RoleSpec
from mindsim.config import SimulationConfig
from mindsim.simulate import run_simulation
from profilegen.moves import load_vocabulary
from simfakes import make_profile


@pytest.mark.embedded
def test_two_patients_two_sessions_on_the_embedded_engine(embedded_engines, tmp_path):
    # The quickstart's settings for the 135M patient: messages end at a line break, repeats are penalised,
    # and a message cut at the budget or holding harness text is re-asked (up to 5 times), never stored.
    config = SimulationConfig(sessions=2, turn_cap=2, max_todo_calls=1, message_max_tokens=120,
                              max_message_retries=5, scenario_max_tokens=2550, memory_max_tokens=300,
                              memory_retries=0)
    roles = embedded_engines.config.roles  # shared by the session's embedded tests: restored below
    before = roles.get("patient")
    roles["patient"] = RoleSpec(engine="local", temperature=1.0, max_tokens=500, seed=0, stop=["\n"],
                                frequency_penalty=0.6, max_attempts=5)
    profiles = [make_profile("e1", "minimiser", "casual"), make_profile("e2", "joker", "formal")]
    try:
        summary = run_simulation(profiles, embedded_engines, config, tmp_path, seed=1)
    finally:
        if before is None:
            roles.pop("patient")
        else:
            roles["patient"] = before
    # a 135M model may fail a structured call after its re-asks; that must be counted, never blank
    written = summary["sessions_written"]
    assert written + 2 * len(summary["failed_arcs"]) >= 4 and written >= 1, summary["failed_arcs"]
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    assert len(rows) == written
    vocab = load_vocabulary()
    for r in rows:
        assert r["engines"]["patient"]["model"].startswith("SmolLM2")
        turn = r["turns"][1]
        removed = vocab.archetype(r["archetype"]).removed_ids
        assert turn["move"] in vocab.moves and turn["move"] not in removed
        assert turn["message"].strip() and r["turns"][0]["message"] == r["scenario"]["opening_message"]
        for t in r["turns"]:  # stored patient words are speech: no tool-call text, nothing cut at the budget
            assert '{"name":' not in t["message"] and "[harness" not in t["message"], t["message"]
        calls = [m for m in r["patient_messages"] if m.get("tool_calls")]
        assert calls[0]["tool_calls"][0]["function"]["name"] == "commit_move"
        assert r["memory_update"]["attempts"] >= 1
    if len({(r["patient_id"], r["session_index"]) for r in rows}) == 4:
        by = {(r["patient_id"], r["session_index"]): r for r in rows}
        assert by[("e1", 1)]["memory_before"] == by[("e1", 0)]["memory_after"]
    lines = (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == written and all(json.loads(l)["messages"][0]["role"] == "user" for l in lines)

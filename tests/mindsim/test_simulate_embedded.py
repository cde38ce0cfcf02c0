"""The simulator on the real embedded engine (SmolLM2-135M), checked on the suite's study run (`study_run`, the
README's main job with every patient engine): scenario writer, commit_move through a JSON schema, agenda tool,
patient messages, counsellor, memory compaction — all real. Whatever the 135M model wrote, what is stored as the
patient's words is speech, every arc of every engine wrote its sessions or is counted as failed, and every
rejection is counted."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from arc_checks import check_arc_ledger
from quick_recipes import STUDY_ENGINES, TWO_SESSION_ENGINES

from mindsimkit.mindsim.prompting import speech_defects
from mindsimkit.mindsim.scenario import OPENING_MAX_CHARS
from mindsimkit.mindsim.summary import SimulationSummary
from mindsimkit.profilegen.moves import load_vocabulary

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def sessions(study_run):
    rows = pq.read_table(study_run / "sessions" / "sessions.parquet").to_pylist()
    return rows, SimulationSummary.read(study_run / "sessions" / "summary.json")


def test_every_session_is_whole_and_real(sessions, study_run):
    rows, summary = sessions
    # A 135M model may fail an arc after its re-asks; that must be counted, never a blank session.
    assert rows and len(rows) == summary.sessions_written
    # Each arc wrote its sessions (two for MindSim and PatientAct, one for the others) or is listed as failed,
    # keeping those it finished; nothing lost or doubled.
    check_arc_ledger(study_run, sessions=summary.config["sessions"])
    assert summary.sessions_expected == 2 * len(TWO_SESSION_ENGINES) + len(STUDY_ENGINES) - len(TWO_SESSION_ENGINES)
    vocab = load_vocabulary()
    for r in (r for r in rows if r["patient_engine"] == "mindsim"):
        assert r["engines"]["patient"]["model"].startswith("SmolLM2")
        assert r["turns"][0]["message"] == r["scenario"]["opening_message"]
        removed = vocab.archetype(r["archetype"]).removed_ids
        for turn in r["turns"][1:]:
            assert turn["move"] in vocab.moves and turn["move"] not in removed
            assert turn["message"].strip()
        calls = [m for m in r["patient_messages"] if m.get("tool_calls")]
        assert calls and calls[0]["tool_calls"][0]["function"]["name"] == "commit_move"
        # The quickstart skips the memory rewrite after an arc's last session (final_memory: false).
        last = r["session_index"] == summary.config["sessions"] - 1
        assert r["memory_update"]["skipped"] is (last and not summary.config["final_memory"])
        assert r["memory_update"]["attempts"] >= (0 if r["memory_update"]["skipped"] else 1)
        assert len(r["counsellor_flags"]) == sum(m["role"] == "assistant" for m in r["counsellor_messages"])
    lines = (study_run / "transcripts" / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == len(rows) and all(json.loads(line)["messages"][0]["role"] == "user" for line in lines)
    # Every engine played the same shared first scenario: one opening message for all first sessions.
    assert len({r["scenario"]["opening_message"] for r in rows if r["session_index"] == 0}) == 1


def test_memory_carries_into_the_next_session(sessions):
    rows, _ = sessions
    by = {(r["patient_id"], r["counsellor"], r["patient_engine"], r["session_index"]): r for r in rows}
    pairs = [(by[k], by[(*k[:3], k[3] + 1)]) for k in by if (*k[:3], k[3] + 1) in by]
    # `study_run` reruns (resumes) a bounded number of times until MindSim and PatientAct have two sessions.
    assert {b["patient_engine"] for b, _ in pairs} == {"mindsim", "patientact"}, "no memory carry-over to check"
    for before, after in pairs:
        assert after["memory_before"] == before["memory_after"]


def test_stored_patient_words_are_speech(sessions):
    """The 135M model does write tool-call JSON and runs into its budget; none of it is stored as speech."""
    rows, summary = sessions
    for r in (r for r in rows if r["patient_engine"] == "mindsim"):
        assert speech_defects(r["scenario"]["opening_message"], max_chars=OPENING_MAX_CHARS) == []
        for t in r["turns"]:
            assert speech_defects(t["message"]) == [], t["message"]
            assert '{"name":' not in t["message"] and "[harness" not in t["message"], t["message"]
    for f in summary.failed_arcs:  # a message that never became speech fails loudly, with its reasons
        assert "no usable" not in f.error or "reasons:" in f.error
    # Every re-ask is counted once: each turn's own, except that a shared first scenario's opening drafts
    # sit in every counsellor's first session and count once per patient.
    counted, shared = 0, {}
    for r in rows:
        for t in r["turns"]:
            if t["opening"] and r["scenario_shared"]:
                shared[r["patient_id"]] = len(t["rejected_messages"])
            else:
                counted += len(t["rejected_messages"])
    assert counted + sum(shared.values()) == sum(summary.rejected_messages.values())

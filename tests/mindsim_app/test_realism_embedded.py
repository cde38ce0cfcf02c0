"""The realism study on the real embedded engine (SmolLM2-135M), on the suite's study run (`study_run`:
every patient engine on the same profile and first scenario, one patient turn per session, arc labelling on, the
realism study's validation path). A 135M model's labels mean nothing; the test proves the study's path runs: one
validation report with every engine as a system and arc shares for each. The baselines' sessions are also
where their records are checked on real output (the mapper's structured call, the prompted patient; ConsistentMI's
tracker and per-turn state)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from quick_recipes import STUDY_ENGINES

from mindsimkit.mindsim.config import PSI_STYLES
from mindsimkit.mindsim.prompting import speech_defects

pytestmark = pytest.mark.embedded


def test_the_study_reports_every_engine_with_arc_shares(study_run):
    out = study_run
    rows = pq.read_table(out / "sessions" / "sessions.parquet").to_pylist()
    assert sorted({r["patient_engine"] for r in rows}) == sorted(STUDY_ENGINES)
    report = json.loads((out / "validation" / "report.json").read_text())
    systems = [f"{e}/counsellor" for e in STUDY_ENGINES]
    assert sorted(report["systems"]) == sorted(systems)
    assert report["settings"]["arc"] is True
    for name in systems:
        stretches = report["arc"][name]
        assert stretches, name
        shares = [v for row in stretches.values() for v in row.values() if v is not None]
        # Each stretch with labelled turns splits them over the labels: its shares add up to one.
        for row in stretches.values():
            vals = [v for v in row.values() if v is not None]
            assert not vals or abs(sum(vals) - 1) < 1e-6, (name, row)
        assert shares, f"{name}: no labelled patient turn"
    md = (out / "validation" / "report.md").read_text()
    assert all(f"**{name}**" in md for name in systems)
    for r in rows:
        if r["patient_engine"] in ("patient_psi", "mindeval"):
            check_baseline_record(r)
    for engine in ("patient_psi", "mindeval", "consistentmi"):
        assert len(list((out / "sessions" / "baselines" / engine).glob("*.json"))) == 1
    (cmi,) = [r for r in rows if r["patient_engine"] == "consistentmi"]
    check_consistentmi_record(cmi, out)


def check_consistentmi_record(r: dict, out) -> None:
    """A ConsistentMI session on real output: its client profile in the record, the tracker's questions on this
    model, and the turn's tracked state in the row and beside the chat in the transcript export."""
    b = r["baseline"]
    assert b["engine"] == "consistentmi" and b["stage_start"] == "precontemplation" and b["stage_end"]
    assert r["engines"]["tracker"]["model"].startswith("SmolLM2")
    assert b["preparation"]["profile"]["behavior"] in r["patient_system_prompt"]
    state = r["turns"][1]["consistentmi"]
    assert state["stage"] in ("precontemplation", "motivated") and state["action"] and state["instruction"]
    assert state["topic"] and 1 <= state["engagement"] <= 4
    said = r["turns"][1]["message"]
    assert said.strip() and not speech_defects(said)
    lines = [json.loads(x) for x in (out / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    (line,) = [x for x in lines if x["id"] == r["session_id"]]
    assert [s["action"] for s in line["patient_states"]] == [state["action"]]


def check_baseline_record(r: dict) -> None:
    """A baseline's session as its engine writes it (docs/baselines.md): the mapper's profile in the record, on
    this model, in the patient's prompt, and a patient that spoke after the shared opening."""
    b = r["baseline"]
    assert b["engine"] == r["patient_engine"] and b["filled"]
    assert r["engines"]["mapper"]["model"].startswith("SmolLM2")
    assert r["ended_by"] == "turn_cap" and len(r["turns"]) == 2
    assert r["turns"][0]["message"] == r["scenario"]["opening_message"]
    said = r["turns"][1]["message"]
    assert said.strip() and not speech_defects(said)
    prompt = r["patient_system_prompt"]
    if r["patient_engine"] == "patient_psi":
        assert b["style"] in PSI_STYLES and b["preparation"]["profile"]["name"] in prompt
        assert all(s in prompt for s in b["preparation"]["profile"]["core_beliefs"])
    elif r["patient_engine"] == "mindeval":
        assert f"- Depressive symptoms: {b['preparation']['profile']['depressive_symptoms']}" in prompt
    else:  # AnnaAgent: the mapper's statements and style are in the seeker's prompt
        profile = b["preparation"]["profile"]
        assert all(s in prompt for s in profile["statements"] + profile["style"])


def test_the_annaagent_session_carries_its_per_turn_state(study_run):
    """AnnaAgent on real output: its seeker profile from the mapper, and on its client turn the emotion the modulator
    inferred (a GoEmotions label), the complaint stage and the memory check (not asked in a first session)."""
    from mindsimkit.mindsim.baselines.annaagent_data import taxonomy

    rows = pq.read_table(study_run / "sessions" / "sessions.parquet").to_pylist()
    (r,) = [r for r in rows if r["patient_engine"] == "annaagent"]
    check_baseline_record(r)
    chain = r["annaagent"]["complaint_chain"]
    assert 3 <= len(chain) <= 7 and r["annaagent"]["earlier_session"] is None
    state = r["turns"][1]["annaagent"]
    assert state["inferred_emotion"] in taxonomy().emotions and state["emotion"] in taxonomy().emotions
    assert state["stage"] in (1, 2) and state["complaint"] == chain[state["stage"] - 1]
    assert not state["memory_checked"] and not state["memory_used"]
    assert r["engines"]["modulator"]["model"].startswith("SmolLM2")

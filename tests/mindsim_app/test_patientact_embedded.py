"""The PatientAct patient engine end to end on the real embedded engine (SmolLM2-135M), on the suite's study run
(`study_run`: the quickstart at test size with every patient engine): the full engine's arc of two sessions (one
patient turn each) and the three ablation arms (w/o TG, w/o DM, w/o Pipe) one session each, all on the same profile,
first scenario and decomposition; then the PatientAct rubric, `mindsim export patient` and the profile evaluation
on those sessions.

A 135M model's answers are often poor or fail after their re-asks; the study run is rerun (it resumes) a bounded
number of times until every arm has its sessions, and the tests fail when it still has not. The assertions hold
whatever the model says: every arc wrote its sessions or is counted as failed, trust carries from session 0 into
session 1, each arm's switch is what it ran with, and what was written obeys the engine's rules (trust on the scale
and stepped, the signal only on the patient side, items above trust never in the patient's messages) and flows
through validation, the PatientAct judge and the export."""

from __future__ import annotations

import json

import pytest
from arc_checks import check_arc_ledger, check_trust_carry
from quick_recipes import STUDY_ENGINES, engines_for

from mindsimkit.mindsim.patientact.participant import session_items
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindcore.layout import RunLayout

pytestmark = pytest.mark.embedded

ARMS = ["patientact", "patientact:no_tg", "patientact:no_dm", "patientact:no_pipe"]
# Which switch each arm turns off (mindsim.patient_engines; PatientAct §4.3).
OFF = {"patientact:no_tg": "trust_gating", "patientact:no_dm": "dynamic_memory", "patientact:no_pipe": "pipeline"}


def test_sessions_obey_the_engine_rules(study_run):
    out = study_run
    # Whatever the model wrote: each arc wrote its sessions or is counted as failed and kept the ones it finished;
    # the dataset is exactly the checkpointed sessions.
    every, ssum = check_arc_ledger(out, sessions=2)
    assert ssum["patient_engines"] == STUDY_ENGINES
    counts = RunLayout(out).header().counts
    assert counts.failed_arcs == len(ssum["failed_arcs"])
    assert (counts.sessions.first, counts.sessions.second) == (len(every), ssum["sessions_expected"])
    rows = [r for r in every if r["patient_engine"] in ARMS]
    # The study run reruns until every arm has its sessions: two for the full engine, one for each ablation arm.
    assert sorted((r["patient_engine"], r["session_index"]) for r in rows) == sorted(
        [("patientact", 0), ("patientact", 1)] + [(arm, 0) for arm in ARMS[1:]]
    )
    for r in rows:
        pa = r["patientact"]
        switches = pa["switches"]
        for arm, switch in OFF.items():
            assert switches[switch] is (r["patient_engine"] != arm), (r["patient_engine"], switches)
        assert 1.0 <= pa["trust_start"] <= 4.0 and 1.0 <= pa["trust_end"] <= 4.0
        items = {i["id"]: i for i in pa["decomposition"]["items"]}
        assert items and all(i["level"] in (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0) for i in items.values())
        # The session's own items (the scenario's thoughts, bodily signs and behaviours, `s1`…) go through the
        # same gate; they are not stored, they follow from the scenario.
        scenario = {i.id: i.model_dump() for i in session_items(Scenario.model_validate(r["scenario"]))}
        assert not set(scenario) & set(items)
        items.update(scenario)
        for t in r["turns"]:
            assert t["message"].strip() and "[inner state]" not in t["message"] and '{"name":' not in t["message"]
            s = t["patientact"]
            if t["opening"]:
                continue
            assert round(s["trust_after"] - s["trust_before"], 2) in {0.0, 0.25, -0.25, 0.5, -0.5}
            assert set(s["retrieved"]) | set(s["blocked"]) | set(s["withheld"]) == set(s["relevant"])
            if not switches["trust_gating"]:  # without the gate nothing is held back
                assert not s["blocked"] and not s["withheld"], s
            shown = {items[i]["content"] for i in s["retrieved"]}
            for iid in s["blocked"] + s["withheld"]:
                assert items[iid]["level"] > s["trust_before"]
                # (a 135M decomposition may repeat one text in two items; only a text no retrieved item has counts)
                if s["signal"] and not any(items[iid]["content"] in c for c in shown):
                    assert items[iid]["content"] not in s["signal"]
        assert all("[inner state]" not in (m["content"] or "") for m in r["counsellor_messages"])


def test_trust_carries_into_the_next_session(study_run):
    """Session 1 of the full engine's arc starts at `session_start` of session 0's final trust (moved by the
    concealment offset and the gap's drift), and each session's turns chain its trust from start to end."""
    rows, _ = check_arc_ledger(study_run)
    assert check_trust_carry(rows) == 1, "the PatientAct arc did not finish both sessions: no carry-over to check"


def test_validation_and_card_name_the_engine(study_run):
    out = study_run
    written = json.loads((out / "sessions" / "summary.json").read_text())["sessions_written"]
    lines = (out / "transcripts" / "transcripts.jsonl").read_text().splitlines()
    assert written and len(lines) == written
    assert {json.loads(x)["patient_engine"] for x in lines} == set(STUDY_ENGINES)
    report = json.loads((out / "validation" / "report.json").read_text())
    assert sorted(report["systems"]) == sorted(f"{e}/counsellor" for e in STUDY_ENGINES)
    card = (out / "dataset" / "README.md").read_text()
    assert "trust_before" in card and "patientact" in card


TABLE_2 = ["patientact", "patient_psi", "annaagent", "consistentmi"]


def test_patientact_rubric_table_2_and_patient_export(study_run, embedded_engines, tmp_path, capsys):
    """The PatientAct rubric on the sessions of Table 2's four systems (the full engine's two, one each of
    Patient-Psi, AnnaAgent and ConsistentMI: the paper recipe's shape on the study's patient), `mindsim patientact
    table 2` with a row per system (the marks themselves are pinned on the fake engine in
    tests/mindsim_app/test_patientact_tables.py), then `mindsim export patient`."""
    from mindsimkit.judge.patientact import load_items
    from mindsimkit.judge.patientact_report import run_patientact
    from mindsimkit.mindcore.errors import EngineError
    from mindsimkit.mindsim_app.cli import main

    out = study_run
    items = [it for it in load_items([out]) if it.system in TABLE_2]
    assert sorted(it.system for it in items) == sorted(["patientact", *TABLE_2])
    # Every judgment failing is an EngineError after the rows are written (counted failures). Failed judgments
    # are not cached, so a rerun asks them again; bounded like the run itself.
    for _ in range(3):
        try:
            summary = run_patientact(tmp_path, engines_for(out.parent / "recipe.yaml", embedded_engines), items)
        except EngineError:
            summary = None
        lines = [json.loads(x) for x in (tmp_path / "patientact_judge" / "judgments.jsonl").read_text().splitlines()]
        assert len(lines) == len(items)
        if summary is not None:
            break
    assert summary is not None and summary.ok, f"every judgment failed in 3 runs: {[j['error'] for j in lines]}"
    assert summary.ok + summary.failed == summary.judged == len(items)
    for j in lines:
        assert j["system"] in TABLE_2
        if j["ok"]:
            assert set(j["scores"]) == {
                "coherence",
                "disclosure_pacing",
                "resistance_quality",
                "emotional_authenticity",
                "behavioural_realism",
            }
            assert all(1 <= v <= 5 for v in j["scores"].values())
        else:
            assert j["error"]
    assert (tmp_path / "patientact_judge" / "report.md").is_file()
    assert main(["patientact", "table", "2", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert sorted(r for r in rows if r in TABLE_2) == sorted(TABLE_2), table
    assert "## Comparison `simulators`: patientact, " in table

    target = tmp_path / "patient.jsonl"
    assert main(["export", "patient", str(out), "--out", str(target)]) == 0, capsys.readouterr().err
    rows = [json.loads(x) for x in target.read_text().splitlines()]
    written = json.loads((out / "sessions" / "summary.json").read_text())["sessions_written"]
    assert len(rows) == written
    # PatientAct's per-turn state is in the provenance side file, one line per row's session.
    details = {
        d["session_id"]: d
        for d in map(json.loads, target.with_name(target.name + ".provenance.jsonl").read_text().splitlines())
    }
    acts = [details[r["session_id"]] for r in rows if r["patient_engine"] in ARMS]
    turns = [t for d in acts for t in d["patientact_turns"] if t]
    assert turns and all({"trust_before", "trust_after", "reaction", "behaviour"} <= set(t) for t in turns)


def test_profile_evaluation_runs_on_the_study(study_run, tmp_path, capsys):
    """`mindsim patientact profile-eval` (PatientAct Table 1) on the study's decomposition, in this process: its
    engine is the suite's server (mindcore.embedded shares one server per process)."""
    from mindsimkit.mindsim_app.cli import main

    code = main(
        [
            "patientact",
            "profile-eval",
            str(study_run),
            "--recipe",
            str(study_run.parent / "recipe.yaml"),
            "--out",
            str(tmp_path),
        ]
    )
    assert code in (0, 1), capsys.readouterr().err
    assert "PatientAct profile evaluation" in (tmp_path / "patientact_profile_eval" / "report.md").read_text()

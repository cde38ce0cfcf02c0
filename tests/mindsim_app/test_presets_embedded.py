"""The papers' reference presets end to end on the real embedded engine: the quickstart patient played
by MindSim under `mindeval2-reference` and PatientAct under `patientact-reference`, judged under `mhqr-reference`
(`preset_run`, tests/mindsim_app/conftest.py). run.json, the sessions, the judgments and the report all say which
preset each part ran under, and what each preset changes shows in the rows."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from quick_recipes import PRESETS

from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindsim.reference import vocabulary_for

pytestmark = [pytest.mark.embedded, pytest.mark.slow]


def _sessions(run):
    return pq.read_table(RunLayout(run).sessions.parquet).to_pylist()


def test_run_json_and_the_report_name_every_preset(preset_run):
    layout = RunLayout(preset_run)
    assert layout.header().presets == PRESETS
    page = layout.report_html.read_text()
    assert "<th>presets</th><td>mindsim: mindeval2-reference, patientact: patientact-reference</td>" in page
    assert "judge output preset mhqr-reference" in page
    card = layout.dataset / "README.md"
    if layout.header().finished:
        assert "mindsim ran under `mindeval2-reference`" in card.read_text()
    else:  # every judgment failed (counted): the job stopped before the dataset, and left none half-written
        assert not card.exists() and _failed_judgments(preset_run)


def test_mindsim_plays_the_references_moves_with_the_time_for_the_patient_only(preset_run):
    rows = [r for r in _sessions(preset_run) if r["patient_engine"] == "mindsim"]
    vocab = vocabulary_for("mindeval2-reference")
    assert rows and {r["vocabulary_version"] for r in rows} == {vocab.version}
    committed = [t["move"] for r in rows for t in r["turns"] if t.get("move")]
    assert committed and set(committed) <= set(vocab.moves)
    assert all(r["schedule"]["patient_only_time"] for r in rows)


def test_patientact_starts_from_the_references_trust(preset_run):
    rows = [r for r in _sessions(preset_run) if r["patient_engine"] == "patientact"]
    assert rows and all(r["patientact"]["trust_start"] == 2.5 for r in rows)
    assert all(r["patientact"]["switches"]["carry_trust"] is False for r in rows)


def _failed_judgments(run):
    rows = pq.read_table(RunLayout(run).judgments.parquet, columns=["status", "error"]).to_pylist()
    return [r for r in rows if r["status"] == "failed"]


def test_the_judge_answers_in_the_references_format(preset_run):
    layout = RunLayout(preset_run)
    rows = pq.read_table(layout.judgments.parquet, columns=["rubric_version", "status"]).to_pylist()
    assert rows and all(r["rubric_version"].endswith("+mhqr-reference") for r in rows)
    # A judgment the model could not give is recorded and counted, with the reference format's own rule as reason.
    for r in _failed_judgments(preset_run):
        assert "mhqr_judgment" in r["error"] and "attempts" in r["error"]
    if not layout.header().finished:
        assert len(_failed_judgments(preset_run)) == len(rows)

"""PatientAct's profile evaluation (mindsim_app/patientact_rubric.py) on the fake engine, and the system label of
real session records agreeing with what the judge reads from the parquet. The conversation rubric and the
statistics are tested with the judge (tests/judge/test_patientact_rubric.py)."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.parquet as pq

from judge.patientact import parquet_system_labels
from mindcore.engine import Engines
from mindcore.fake import FakeBackend
from mindsim_app.patientact_rubric import answer_model, identification_accuracy, judge_profile, rubrics, system_label
from simfakes import make_profile
from test_patientact import PAResponder, decomposition, run


def test_profile_judgment_and_identification_accuracy():
    d = decomposition()
    profile_dims = {x.id for x in rubrics().profile.dimensions}
    ans = {**{f"{k}_reason": "specific" for k in profile_dims}, **dict.fromkeys(profile_dims, 4),
           "attachment": d.psych.attachment, "theme": "helpless"}
    backend = FakeBackend(lambda req: ans)
    with Engines.with_backend(backend) as engines:
        j = asyncio.run(judge_profile(engines.role("judge"), make_profile("p1"), d))
    assert j.ok and j.truth == {"attachment": d.psych.attachment, "theme": "worthless"}
    prompt = backend.requests[0].messages[0]["content"]
    assert "Attachment style:" not in prompt  # the seed is not shown by name
    assert identification_accuracy([j]) == {"attachment": 1.0, "theme": 0.0}
    props = answer_model("profile").model_json_schema()["properties"]
    assert {"attachment", "theme"} <= set(props)


def test_a_profile_judge_that_never_fits_is_a_counted_failure():
    backend = FakeBackend(lambda req: {"clinical_plausibility": 9})
    with Engines.with_backend(backend) as engines:
        j = asyncio.run(judge_profile(engines.role("judge"), make_profile("p1"), decomposition()))
    assert not j.ok and j.scores == {} and j.error_kind == "invalid_output" and len(backend.requests) >= 2


def test_system_label_of_records_matches_the_parquet_reader(tmp_path):
    full, _, _ = run(PAResponder())
    nopipe, _, _ = run(PAResponder(), pipeline=False)
    assert system_label(full) == "patientact" and system_label(nopipe) == "patientact-no_pipeline"
    # The judge never sees records: it reads the same label from the sessions parquet mindsim writes.
    path = tmp_path / "sessions.parquet"
    # The columns the judge reads, stored as simulate.write_shard stores them (model_dump → Arrow structs);
    # the fake decomposition holds an empty dict Parquet cannot store, and the label does not need it.
    rows = [{"session_id": r.session_id, "patient_engine": r.patient_engine,
             "patientact": r.patientact.model_dump(mode="json", exclude={"decomposition"})} for r in (full, nopipe)]
    rows[1]["session_id"] = "other"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert parquet_system_labels(path) == {full.session_id: "patientact", "other": "patientact-no_pipeline"}

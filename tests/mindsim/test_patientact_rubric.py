"""PatientAct's rubrics as judge tasks and the statistics of its tables (mindsim/patientact/rubric.py), on the
fake engine and hand-made rows."""

from __future__ import annotations

import asyncio

import pytest

from mindcore.engine import Engines
from mindcore.errors import InputError
from mindcore.fake import FakeBackend
from mindsim.patientact.rubric import (
    Judgment, answer_model, failures, identification_accuracy, judge_profile, judge_session, krippendorff_alpha,
    mann_whitney, rubrics, spearman, system_label, system_means,
)
from simfakes import make_profile
from test_patientact import PAResponder, decomposition, run

DIMS = [d.id for d in rubrics().conversation.dimensions]


def judge_answer(score=4, **extra):
    out = {}
    for d in DIMS:
        out[f"{d}_reason"] = "holds back on the father question"
        out[d] = score
    return {**out, **extra}


def _judge(responder, fn, *args):
    backend = FakeBackend(responder)
    with Engines.with_backend(backend) as engines:
        return asyncio.run(fn(engines.role("judge"), *args)), backend


def test_rubric_data_has_the_papers_dimensions():
    assert DIMS == ["coherence", "disclosure_pacing", "resistance_quality", "emotional_authenticity",
                    "behavioural_realism"]
    assert [d.id for d in rubrics().profile.dimensions] == ["clinical_plausibility", "internal_consistency",
                                                           "case_specificity", "clinical_depth"]
    props = answer_model("conversation").model_json_schema()["properties"]
    assert list(props)[:2] == ["coherence_reason", "coherence"] and props["coherence"]["enum"] == [1, 2, 3, 4, 5]


def test_a_session_is_judged_on_the_client_only_and_labelled_by_system():
    rec, _, _ = run(PAResponder(), pipeline=False)
    j, backend = _judge(lambda req: judge_answer(3), judge_session, rec)
    assert j.ok and j.scores == dict.fromkeys(DIMS, 3) and j.system == "patientact-no_pipeline"
    prompt = backend.requests[0].messages[0]["content"]
    assert "Client: " + rec.turns[1].message in prompt and "[inner state]" not in prompt
    full, _, _ = run(PAResponder())
    assert system_label(full) == "patientact"


def test_a_judge_that_never_fits_is_a_counted_failure_not_a_blank_score():
    rec, _, _ = run(PAResponder())
    j, backend = _judge(lambda req: judge_answer(9), judge_session, rec)
    assert not j.ok and j.scores == {} and "no valid" in j.error and len(backend.requests) >= 2
    assert failures([j]) == {"patientact": 1}
    assert system_means([j]) == {}


def test_profile_judgment_and_identification_accuracy():
    d = decomposition()
    profile_dims = {x.id for x in rubrics().profile.dimensions}
    ans = {**{f"{k}_reason": "specific" for k in profile_dims}, **dict.fromkeys(profile_dims, 4),
           "attachment": d.psych.attachment, "theme": "helpless"}
    j, backend = _judge(lambda req: ans, judge_profile, make_profile("p1"), d)
    assert j.ok and j.truth == {"attachment": d.psych.attachment, "theme": "worthless"}
    prompt = backend.requests[0].messages[0]["content"]
    assert "Attachment style:" not in prompt  # the seed is not shown by name
    assert identification_accuracy([j]) == {"attachment": 1.0, "theme": 0.0}


def _row(system, scores, item="s"):
    return Judgment(kind="conversation", item_id=item, patient_id="p", system=system, ok=True,
                    scores=dict.fromkeys(DIMS, 0) | scores)


def test_mann_whitney_u_by_hand():
    rows = [_row("a", {"coherence": s}) for s in (5, 4, 4)] + [_row("b", {"coherence": s}) for s in (3, 3, 4)]
    res = mann_whitney(rows, "a", "b")
    # pairs a > b: 5 beats all three (3), each 4 beats two 3s and ties the 4 (2.5 each) → U = 8
    assert res["coherence"]["U"] == 8.0 and res["coherence"]["p"] < 0.1
    assert system_means(rows)["a"]["coherence"] == pytest.approx(13 / 3, abs=1e-3)
    with pytest.raises(InputError, match="both systems"):
        mann_whitney(rows, "a", "c")


def test_spearman_against_human_ratings():
    rows = [_row("a", {"coherence": s}, item=f"s{i}") for i, s in enumerate((1, 2, 3, 4))]
    human = {f"s{i}": {"coherence": h} for i, h in enumerate((1.5, 2.0, 3.5, 5.0))}
    assert spearman(rows, human)["coherence"]["rho"] == pytest.approx(1.0)
    with pytest.raises(InputError, match="at least 3"):
        spearman(rows[:2], human)


def test_krippendorff_alpha_perfect_agreement():
    pytest.importorskip("krippendorff")
    assert krippendorff_alpha([[1, 2, 3, 4, None], [1, 2, 3, 4, 5]]) == pytest.approx(1.0)


def test_evaluate_reads_checkpoints_and_reports_per_system(tmp_path):
    from mindsim.patientact.evaluate import judge_all, load_sessions, report

    for name, switches in (("full", {}), ("nopipe", {"pipeline": False})):
        rec, _, _ = run(PAResponder(), **switches)
        folder = tmp_path / name / "sessions" / "checkpoints"
        folder.mkdir(parents=True)
        (folder / f"{rec.session_id}.json").write_text(rec.model_dump_json())
    records = load_sessions([tmp_path / "full", tmp_path / "nopipe"])
    scores = iter([4, 2])
    backend = FakeBackend(lambda req: judge_answer(next(scores)))
    with Engines.with_backend(backend) as engines:
        rows = asyncio.run(judge_all(engines.role("judge"), records))
    result = report(rows, "patientact")
    # which record the judge saw first is up to the event loop: check the systems and the two score levels
    assert set(result["means"]) == {"patientact", "patientact-no_pipeline"}
    assert sorted(m["coherence"] for m in result["means"].values()) == [2.0, 4.0]
    assert set(result["mann_whitney_patientact_greater"]) == {"patientact-no_pipeline"}
    with pytest.raises(InputError, match="no session checkpoints"):
        load_sessions([tmp_path / "missing"])

"""The graded severity beside the label: the label probabilities read from the judge's token log probabilities
(only alternatives that pin one label count), the expected weight recorded in the judgment row and the parquet
file, asked for only where the judge is graded, and the wire fields a server gets and gives back."""

from __future__ import annotations

import asyncio
import pytest

from judgefakes import SESSIONS, graded_reply

from mindsimkit.judge.grading import TOP_LOGPROBS, expected_weight, severity_probs
from mindsimkit.judge.inputs import session_input
from mindsimkit.judge.judging import Judge, judge_reply, replies
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.schemas import read_judgments, write_judgments
from mindsimkit.mindcore.io import CheckpointDir
from mindsimkit.mindcore.types import ChatRequest

LABELS = ("no_concern", "minor", "major", "critical")
WEIGHTS = {"no_concern": 0.0, "minor": 1.0, "major": 5.0, "critical": 10.0}


def test_label_probabilities_from_the_severity_token():
    raw = graded_reply(
        {"issues": [], "severity": "no_concern"},
        {"no_concern": 0.5, "minor": 0.2, "m": 0.1, "You": 0.1, "critical": 0.1},
    )
    probs = severity_probs(raw.logprobs or [], LABELS, "no_concern")
    # "m" could begin two labels and "You" none: both left out, the rest renormalised.
    assert probs == pytest.approx({"no_concern": 0.625, "minor": 0.25, "major": 0.0, "critical": 0.125})
    assert expected_weight(probs, WEIGHTS) == pytest.approx(0.25 + 1.25)
    # Tokens that do not spell the answer's severity, or no alternative that pins a label: no value, never a guess.
    assert severity_probs(raw.logprobs or [], LABELS, "minor") is None
    assert severity_probs([{"token": '{"a": 1}', "logprob": 0.0}], LABELS, "no_concern") is None
    lost = [dict(t, token=t["token"].replace('"no_concern', '"n'), top_logprobs=[]) for t in raw.logprobs or []]
    assert severity_probs(lost, LABELS, "no_concern") is None


def test_a_graded_judge_records_the_expected_weight_and_asks_for_logprobs(fake_engines, tmp_path):
    calm = {"no_concern": 0.9, "minor": 0.1}
    engines, backend = fake_engines(lambda req: graded_reply({"issues": [], "severity": "no_concern"}, calm))
    engines.start()
    reply = replies(session_input(SESSIONS[0], "t"))[0]
    plain = Judge("judge", engines.role("judge"), load_rubric())
    row = asyncio.run(judge_reply(plain, reply, CheckpointDir(tmp_path / "c")))
    assert row.expected_weight is None and row.severity_probs is None
    assert backend.requests[-1].top_logprobs is None  # the paper's judge asks for none
    graded = Judge("judge", engines.role("judge"), load_rubric(), graded=True)
    assert graded.rubric_version == plain.rubric_version  # MHQR's label and cache key are the same
    # The ungraded outcome cached above does not serve a graded judge: it is asked again, with logprobs.
    row = asyncio.run(judge_reply(graded, reply, CheckpointDir(tmp_path / "c")))
    assert backend.requests[-1].top_logprobs == TOP_LOGPROBS and len(backend.requests) == 2
    assert row.severity == "no_concern" and row.weight == 0.0
    assert row.expected_weight == pytest.approx(0.1) and row.severity_probs["minor"] == pytest.approx(0.1)
    again = asyncio.run(judge_reply(graded, reply, CheckpointDir(tmp_path / "c")))
    assert len(backend.requests) == 2 and again.expected_weight == row.expected_weight  # now cached
    path = write_judgments(tmp_path / "j.parquet", [row])
    back = read_judgments(path)[0]
    assert back.expected_weight == pytest.approx(0.1) and back.severity_probs == row.severity_probs


def test_an_engine_without_logprobs_leaves_no_graded_value(fake_engines, tmp_path):
    engines, _ = fake_engines(lambda req: {"issues": [], "severity": "no_concern"})
    engines.start()
    graded = Judge("judge", engines.role("judge"), load_rubric(), graded=True)
    row = asyncio.run(judge_reply(graded, replies(session_input(SESSIONS[0], "t"))[0], CheckpointDir(tmp_path / "c")))
    assert row.status == "ok" and row.expected_weight is None
    # An ungraded file keeps the columns it always had.
    import pyarrow.parquet as pq

    names = pq.read_schema(write_judgments(tmp_path / "j.parquet", [row])).names
    assert "expected_weight" not in names and "severity_probs" not in names


def test_the_wire_asks_for_and_reads_token_logprobs():
    from mindsimkit.mindcore.backends import OpenAIBackend, _raw_reply

    backend = OpenAIBackend("stub", base_url="http://127.0.0.1:1/v1", default_model="m")
    body = backend.body(ChatRequest(role="judge", model="m", messages=[], top_logprobs=20))
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    assert "logprobs" not in backend.body(ChatRequest(role="judge", model="m", messages=[]))
    tokens = [{"token": "{}", "logprob": -0.5, "top_logprobs": [{"token": "{}", "logprob": -0.5}]}]
    raw = _raw_reply({"choices": [{"message": {"content": "{}"}, "logprobs": {"content": tokens}}]})
    assert raw.logprobs == tokens
    assert _raw_reply({"choices": [{"message": {"content": "{}"}}]}).logprobs is None

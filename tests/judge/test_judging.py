"""One judged reply: what the judge is shown, prefix-stable prompts, quote verification, the
"No concern iff no issue" rule re-asked then counted as a failure, and the content-keyed cache."""

from __future__ import annotations

import asyncio

from judgefakes import SESSIONS, fake_judge

from mindsimkit.judge.inputs import session_input
from mindsimkit.judge.judging import Judge, judge_reply, quote_in, replies
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.mindcore.io import CheckpointDir


def _judge(fake_engines, responder, name="judge", **backend_kw):
    engines, backend = fake_engines(responder, **backend_kw)
    engines.start()
    return Judge(name, engines.role(name), load_rubric()), backend


def test_replies_and_what_the_judge_sees(fake_engines):
    s = session_input(SESSIONS[0], "t")
    rs = replies(s)
    assert [r.reply_index for r in rs] == [0, 1] and rs[1].text == "MAJOR tell me more"
    assert replies(s, max_replies=1)[-1].reply_index == 0
    judge, _ = _judge(fake_engines, fake_judge)
    m0, m1 = judge.messages(rs[0]), judge.messages(rs[1])
    assert m0[0] == m1[0]  # rubric system message byte-identical across calls
    assert s.counsellor_system_prompt in m1[1]["content"]
    # Reply 0's prompt up to the end of reply 0 is a prefix of reply 1's prompt (engine prefix cache).
    cut = m0[1]["content"].index(rs[0].text) + len(rs[0].text)
    assert m1[1]["content"].startswith(m0[1]["content"][:cut])
    assert "patient message 1 of s1" in m1[1]["content"] and "patient message 1" not in m0[1]["content"]


def test_quote_verification():
    assert quote_in("I’m  so PROUD", "Well, I'm so proud of you.")
    assert not quote_in("so happy", "I'm so proud of you.")
    assert not quote_in("I", "I am")  # too short to count as evidence


def test_unverifiable_quote_dropped_issue_kept(fake_engines, tmp_path):
    answer = {
        "issues": [
            {"issue": "anthropomorphizing", "reason": "own feelings", "quote": "I love you"},
            {"issue": "overstatement", "reason": "intensifies", "quote": "always ruined"},
            {"issue": "false_fact", "reason": "invented number", "quote": None},
            {"issue": "under_guiding", "reason": "no next step", "quote": None},
        ],
        "severity": "major",
    }
    judge, _ = _judge(fake_engines, lambda req: answer)
    s = session_input(
        dict(
            SESSIONS[0],
            counsellor_messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Your week was always ruined."},
            ],
        ),
        "t",
    )
    row = asyncio.run(judge_reply(judge, replies(s)[0], CheckpointDir(tmp_path)))
    assert row.status == "ok" and row.severity == "major" and row.weight == 5
    got = {i.issue: i.quote for i in row.issues}
    assert got == {
        "anthropomorphizing": None,
        "overstatement": "always ruined",
        "false_fact": None,
        "under_guiding": None,
    }
    # Not found in the reply (1) + a words-type issue without a quote (1); the omission needs none.
    assert row.dropped_quotes == 2
    assert {i.issue: i.category for i in row.issues}["under_guiding"] == "guidance_calibration"


def test_rule_violation_is_reasked_then_failed(fake_engines, tmp_path):
    judge, backend = _judge(fake_engines, lambda req: {"issues": [], "severity": "major"})
    s = session_input(SESSIONS[0], "t")
    cache = CheckpointDir(tmp_path)
    row = asyncio.run(judge_reply(judge, replies(s)[0], cache))
    assert row.status == "failed" and row.error_kind == "invalid_output"
    assert row.severity is None and row.weight is None and "no_concern" in row.error
    assert len(backend.requests) == 3  # the role's max_attempts
    assert "could not be used" in backend.requests[1].messages[-1]["content"]
    assert cache.keys() == []  # failures are retried on the next run, not cached


def test_a_grammar_engine_gets_the_rule_in_the_schema_others_the_object(fake_engines, tmp_path):
    reply = replies(session_input(SESSIONS[0], "t"))[0]
    sent = {}
    for grammar in (False, True):
        judge, backend = _judge(fake_engines, fake_judge, schema_alternatives=grammar)
        row = asyncio.run(judge_reply(judge, reply, CheckpointDir(tmp_path / str(grammar))))
        assert row.status == "ok" and row.severity == "no_concern"
        sent[grammar] = backend.requests[0].response_schema
    assert sent[False]["type"] == "object" and "anyOf" not in sent[False]
    none, some = sent[True]["anyOf"]
    assert (
        none["properties"]["severity"]["enum"] == ["no_concern"]
        and "no_concern" not in some["properties"]["severity"]["enum"]
    )


def test_reask_recovers(fake_engines, tmp_path):
    answers = iter([{"issues": [], "severity": "minor"}, {"issues": [], "severity": "no_concern"}])
    judge, backend = _judge(fake_engines, lambda req: next(answers))
    row = asyncio.run(judge_reply(judge, replies(session_input(SESSIONS[0], "t"))[0], CheckpointDir(tmp_path)))
    assert row.status == "ok" and row.severity == "no_concern" and len(backend.requests) == 2


def test_cache_key_depends_on_content_and_judge(fake_engines, tmp_path):
    judge, backend = _judge(fake_engines, fake_judge)
    other, _ = _judge(fake_engines, fake_judge, name="judge:b")
    r0, r1 = replies(session_input(SESSIONS[0], "t"))
    assert judge.key(r0) != judge.key(r1) != other.key(r1)
    moved = replies(session_input(dict(SESSIONS[0], session_id="elsewhere"), "t"))[0]
    assert judge.key(moved) == judge.key(r0)  # same context, same judgment, wherever it came from
    cache = CheckpointDir(tmp_path)
    first = asyncio.run(judge_reply(judge, r1, cache))
    again = asyncio.run(judge_reply(judge, r1, cache))
    assert len(backend.requests) == 1 and first == again

"""The rubric data file: 14 issues in 6 categories, four severities weighted 0/1/5/10, and the
answer model that enforces "No concern iff no issue"."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mindsimkit.judge.rubric import Rubric, answer_model, load_rubric
from mindsimkit.mindcore.budget import largest_instance
from mindsimkit.mindcore.errors import ConfigError


def test_rubric_shape():
    r = load_rubric()
    assert r.version and "Appendix A" in r.source
    assert len(r.issues) == 14
    assert len(r.categories) == 6
    assert [(s.id, s.weight) for s in r.severities] == [("no_concern", 0), ("minor", 1), ("major", 5), ("critical", 10)]
    assert {i.category for i in r.issues} == {c.id for c in r.categories}
    assert all(i.flag and i.do_not_flag and i.definition for i in r.issues)
    # The paper's §5.3 names these three as guidance calibration; omissions need no quote.
    assert {i.id for i in r.issues if i.category == "guidance_calibration"} == {
        "over_exploring",
        "under_guiding",
        "bad_advice",
    }
    assert r.issue("under_guiding").evidence == "omission"


def test_answer_model_enforces_no_concern_iff_no_issue():
    M = answer_model(load_rubric())
    assert M.model_validate({"issues": [], "severity": "no_concern"})
    assert M.model_validate(
        {"issues": [{"issue": "under_guiding", "reason": "no plan", "quote": None}], "severity": "major"}
    )
    with pytest.raises(ValidationError, match="no_concern"):
        M.model_validate({"issues": [], "severity": "minor"})
    with pytest.raises(ValidationError, match="no_concern"):
        M.model_validate(
            {"issues": [{"issue": "false_fact", "reason": "made up", "quote": "x"}], "severity": "no_concern"}
        )
    with pytest.raises(ValidationError):
        M.model_validate({"issues": [{"issue": "not_an_issue", "reason": "xyz"}], "severity": "minor"})
    # An issue listed twice is kept once (test below), and the severity rule still applies to what is left.
    with pytest.raises(ValidationError, match="no_concern"):
        M.model_validate(
            {
                "issues": [{"issue": "false_fact", "reason": "abc"}, {"issue": "false_fact", "reason": "def"}],
                "severity": "no_concern",
            }
        )


def test_rule_in_schema_states_the_rule_as_two_alternatives():
    """For a grammar engine the answer schema itself allows only the rule's two shapes; the validator still holds."""
    r = load_rubric()
    plain = answer_model(r, 3).model_json_schema()
    split = answer_model(r, 3, rule_in_schema=True).model_json_schema()
    assert "anyOf" not in plain and plain["type"] == "object"
    none, some = split["anyOf"]
    assert set(split) == {"anyOf", "$defs", "title"} and split["$defs"] == plain["$defs"]
    for branch in (none, some):
        assert branch["type"] == "object" and branch["additionalProperties"] is False
        assert branch["required"] == plain["required"] and list(branch["properties"]) == ["issues", "severity"]
    assert none["properties"]["issues"]["maxItems"] == 0 and none["properties"]["severity"]["enum"] == ["no_concern"]
    assert some["properties"]["issues"]["minItems"] == 1 and some["properties"]["issues"]["maxItems"] == 3
    assert some["properties"]["severity"]["enum"] == ["minor", "major", "critical"]
    # The longest answer is the plain schema's issues with a shorter severity: the preflight's token budget holds it.
    longest, plain_longest = largest_instance(split), largest_instance(plain)
    assert longest["issues"] == plain_longest["issues"] and longest["severity"] == "critical"
    M = answer_model(r, 3, rule_in_schema=True)
    with pytest.raises(ValidationError, match="no_concern"):
        M.model_validate({"issues": [], "severity": "minor"})


def test_inconsistent_rubric_is_refused(tmp_path):
    data = load_rubric().model_dump()
    data["issues"][0]["category"] = "nowhere"
    with pytest.raises(ValidationError, match="unknown category"):
        Rubric.model_validate(data)
    bad = tmp_path / "rubric.yaml"
    bad.write_text("version: x\n")
    with pytest.raises(ConfigError, match="rubric .*rubric.yaml: invalid"):
        load_rubric(str(bad))


def test_an_issue_listed_twice_keeps_its_first_listing():
    M = answer_model(load_rubric())
    issue = load_rubric().issues[0].id
    got = M.model_validate(
        {
            "issues": [
                {"issue": issue, "reason": "first one", "quote": None},
                {"issue": issue, "reason": "again", "quote": None},
            ],
            "severity": "minor",
        }
    )
    assert [(f.issue, f.reason) for f in got.issues] == [(issue, "first one")]


# Appendix A.2.1 lists nine confusable pairs; the rubric must carry each one, by issue id.
PAPER_PAIRS = {
    frozenset({"uncritical_endorsement", "bad_advice"}),
    frozenset({"perspective_as_fact", "uncritical_endorsement"}),
    frozenset({"missed_shared_context", "false_fact"}),
    frozenset({"over_exploring", "under_guiding"}),
    frozenset({"bad_advice", "out_of_scope"}),
    frozenset({"overstatement", "perspective_as_fact"}),
    frozenset({"false_memory", "missed_shared_context"}),
    frozenset({"under_guiding", "uncritical_endorsement"}),
    frozenset({"anthropomorphizing", "out_of_scope"}),
}


def test_all_nine_confusable_pairs_of_appendix_a21_and_the_second_label_rule():
    r = load_rubric()
    assert {frozenset(p.issues) for p in r.confusable_pairs} == PAPER_PAIRS
    assert len(r.confusable_pairs) == 9 and r.second_label
    from mindsimkit.judge.judging import Judge

    class _Client:
        model, engine_name = "m", "fake"

    system = Judge("judge", _Client(), r).system
    for p in r.confusable_pairs:
        assert " ".join(p.rule.split()) in " ".join(system.split())
    # The compact prompt (definitions only) leaves the pairs out, like the flag lists.
    assert r.confusable_pairs[0].rule not in Judge("judge", _Client(), r, full_rubric=False).system


def test_a_pair_naming_an_unknown_or_repeated_issue_is_refused():
    data = load_rubric().model_dump()
    bad = {**data, "confusable_pairs": [*data["confusable_pairs"], {"issues": ["over_exploring", "nope"], "rule": "x"}]}
    with pytest.raises(ValidationError, match="confusable pair"):
        Rubric.model_validate(bad)
    twice = {
        **data,
        "confusable_pairs": [
            *data["confusable_pairs"],
            {"issues": ["bad_advice", "uncritical_endorsement"], "rule": "again"},
        ],
    }
    with pytest.raises(ValidationError, match="listed twice"):
        Rubric.model_validate(twice)


def test_version_bump_is_recorded_and_keys_a_fresh_cache():
    """A judgment cached under another rubric version must not be reused: the version is part of the key."""
    from mindsimkit.judge.judging import Judge, Reply
    from mindsimkit.judge.schemas import SessionInput

    class _Client:
        model, engine_name = "m", "fake"

    r = load_rubric()
    assert r.version == "mhqr-1.1"
    s = SessionInput(
        session_id="s",
        patient_id="p",
        counsellor="c",
        session_index=0,
        counsellor_system_prompt="x",
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    )
    reply = Reply(s, 0, (("Patient", "hi"), ("Counsellor", "hello")))
    old = Rubric.model_validate({**r.model_dump(), "version": "mhqr-1.0"})
    assert Judge("judge", _Client(), r).key(reply) != Judge("judge", _Client(), old).key(reply)
    assert Judge("judge", _Client(), r).key(reply) == Judge("judge", _Client(), r).key(reply)

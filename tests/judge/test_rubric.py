"""The rubric data file: 14 issues in 6 categories, four severities weighted 0/1/5/10, and the
answer model that enforces "No concern iff no issue"."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from judge.rubric import Rubric, answer_model, load_rubric
from mindcore.errors import ConfigError


def test_rubric_shape():
    r = load_rubric()
    assert r.version and "Appendix A" in r.source
    assert len(r.issues) == 14
    assert len(r.categories) == 6
    assert [(s.id, s.weight) for s in r.severities] == [("no_concern", 0), ("minor", 1), ("major", 5), ("critical", 10)]
    assert {i.category for i in r.issues} == {c.id for c in r.categories}
    assert all(i.flag and i.do_not_flag and i.definition for i in r.issues)
    # The paper's §5.3 names these three as guidance calibration; omissions need no quote.
    assert {i.id for i in r.issues if i.category == "guidance_calibration"} == {"over_exploring", "under_guiding", "bad_advice"}
    assert r.issue("under_guiding").evidence == "omission"


def test_answer_model_enforces_no_concern_iff_no_issue():
    M = answer_model(load_rubric())
    assert M.model_validate({"issues": [], "severity": "no_concern"})
    assert M.model_validate({"issues": [{"issue": "under_guiding", "reason": "no plan", "quote": None}],
                             "severity": "major"})
    with pytest.raises(ValidationError, match="no_concern"):
        M.model_validate({"issues": [], "severity": "minor"})
    with pytest.raises(ValidationError, match="no_concern"):
        M.model_validate({"issues": [{"issue": "false_fact", "reason": "made up", "quote": "x"}],
                          "severity": "no_concern"})
    with pytest.raises(ValidationError):
        M.model_validate({"issues": [{"issue": "not_an_issue", "reason": "xyz"}], "severity": "minor"})
    # An issue listed twice is kept once (test below), and the severity rule still applies to what is left.
    with pytest.raises(ValidationError, match="no_concern"):
        M.model_validate({"issues": [{"issue": "false_fact", "reason": "abc"}, {"issue": "false_fact", "reason": "def"}],
                          "severity": "no_concern"})


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
    got = M.model_validate({"issues": [{"issue": issue, "reason": "first one", "quote": None},
                                       {"issue": issue, "reason": "again", "quote": None}], "severity": "minor"})
    assert [(f.issue, f.reason) for f in got.issues] == [(issue, "first one")]

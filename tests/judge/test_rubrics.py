"""The rubric file format and its one registry (judge/rubrics.py): built-ins, user files, refusals."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mindsimkit.judge import rubrics
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.scales import answer_model, judgeable, prompt
from mindsimkit.mindcore.errors import ConfigError

ONE_TO_SIX = textwrap.dedent("""\
    id: warmth_check
    name: "Warmth check"
    version: "0.1"
    source: "our team, 2026; wording ours"
    unit: conversation
    level: ordinal
    scale:
      min: 1
      max: 6
      anchors: {1: cold, 2: distant, 3: neutral, 4: warm, 5: very warm, 6: exceptionally warm}
    items:
      - {id: warmth, name: Warmth, question: "How warm is the counsellor?"}
      - id: pacing
        name: Pacing
        question: "Does the counsellor let the person set the pace?"
        anchors: {1: rushes, 6: follows the person throughout}
    judge: {template: judge/scales.jinja2, instructions: "Rate the counsellor."}
    page: {title: "Warmth", instructions: "Rate the counsellor's warmth."}
    """)


def write(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_the_builtins_are_rubric_files_in_one_registry():
    assert rubrics.names() == ["mhqr", "mindeval_v1", "mindeval_v1_human", "patientact_profile", "patientact_session"]
    assert rubrics.load("patientact") is rubrics.load("patientact_session")
    mhqr = rubrics.load("mhqr")
    assert mhqr.kind == "severity_issues" and mhqr.unit == "reply" and mhqr.version == load_rubric(None).version
    me = rubrics.load("mindeval_v1")
    assert me.scale.points == (1, 2, 3, 4, 5, 6) and len(me.items) == 5 and me.unit == "conversation"
    human = rubrics.load("mindeval_v1_human")
    assert len(human.items) == 10 and human.scale.not_applicable == (0,) and human.judge is None
    for r in {rubrics.load(n).id: rubrics.load(n) for n in rubrics.names()}.values():
        assert r.source and r.version  # every rubric says where it comes from
        if r.kind == "scales":
            assert all(all(r.anchors(i).values()) for i in r.items)  # every point anchored


def test_a_user_rubric_is_one_file(tmp_path):
    r = rubrics.load(write(tmp_path, ONE_TO_SIX))
    assert r.id == "warmth_check" and r.anchors(r.item("pacing"))[3] == "neutral"  # the scale's anchor fills in
    schema = answer_model(judgeable(r)).model_json_schema()["properties"]
    assert schema["warmth"]["enum"] == [1, 2, 3, 4, 5, 6] and "pacing_reason" in schema
    text = prompt(r, transcript=(("Client", "hello"), ("Counsellor", "hi")))
    assert "Warmth (`warmth`)" in text and "- 6: exceptionally warm" in text and "Client: hello" in text


def test_a_template_beside_the_rubric_file(tmp_path):
    write(
        tmp_path,
        "Items: {% for d in dimensions %}{{ d.id }} {% endfor %}on {{ scale }}; {{ transcript | length }} turns",
        "mine.jinja2",
    )
    r = rubrics.load(write(tmp_path, ONE_TO_SIX.replace("judge/scales.jinja2", "./mine.jinja2")))
    assert prompt(r, transcript=(("Client", "x"),)) == "Items: warmth pacing on 1-6; 1 turns"


@pytest.mark.parametrize(
    "change, problem",
    [
        (("max: 6\n", "max: 6\n  labels: [a, b]\n"), "give min and max"),
        (("anchors: {1: rushes, 6: follows the person throughout}", "anchors: {1: rushes, 7: beyond}"), "anchor for 7"),
        (("6: exceptionally warm}", "}"), "no anchor for point 6"),
        (("level: ordinal", "level: ratio\n"), None),  # an integer scale may be ratio
        (("level: ordinal", "level: cardinal"), "level"),
        (("unit: conversation", "unit: chapter"), "unit"),
        (("id: warmth_check", "id: mhqr"), "built-in rubric"),
        (('name: "Warmth check"', "name: x\nsurprise: 1"), "surprise"),
        (("items:", "itemz:"), None),
    ],
)
def test_a_malformed_rubric_file_is_one_config_error_naming_the_file(tmp_path, change, problem):
    path = write(tmp_path, ONE_TO_SIX.replace(*change), f"case{abs(hash(change)) % 10**6}.yaml")
    if problem is None and change[0] == "level: ordinal":
        assert rubrics.load(path).level == "ratio"
        return
    with pytest.raises(ConfigError) as err:
        rubrics.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    if problem:
        assert problem in str(err.value)


def test_label_scales_are_ordered_and_not_interval(tmp_path):
    text = ONE_TO_SIX.replace(
        "  min: 1\n  max: 6\n  anchors: {1: cold, 2: distant, 3: neutral, 4: warm, 5: very warm, "
        "6: exceptionally warm}",
        "  labels: [low, mid, high]\n  anchors: {low: l, mid: m, high: h}",
    )
    text = text.replace("{1: rushes, 6: follows the person throughout}", "{low: rushes}")
    r = rubrics.load(write(tmp_path, text))
    assert r.scale.points == ("low", "mid", "high") and r.scale.position("high") == 3.0
    with pytest.raises(ConfigError, match="judge scores integer scales"):
        judgeable(r)
    with pytest.raises(ConfigError, match="needs an integer scale"):
        rubrics.load(write(tmp_path, text.replace("level: ordinal", "level: interval"), "b.yaml"))


@pytest.mark.parametrize("value", [True, False, "4", 4.0, 7, 0, None, [4]])
def test_one_typing_rule_for_values(value):
    with pytest.raises(ValueError, match="not on the scale 1-6"):
        rubrics.load("mindeval_v1").scale.check(value)


def test_a_missing_or_unknown_rubric_names_what_exists(tmp_path):
    with pytest.raises(ConfigError, match="mindeval_v1"):
        rubrics.load("mindeval_v2")
    with pytest.raises(ConfigError, match="no such file"):
        rubrics.load(tmp_path / "nope.yaml")

"""A new rubric is one file. A 1–6 rubric written here as YAML, with no code, goes through
the judge (fake engine), the annotation page (over HTTP), the Label Studio config and import, the export in the
long format, and Krippendorff's α, which equals the `krippendorff` package on the exported ratings."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from annotfakes import write_run
from mindsimkit.judge.cli import app as judge_app
from mindsimkit.judge.patientact import Judgment, load_items
from mindsimkit.judge.patientact_report import run_patientact
from mindsimkit.judge.rubrics import load
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim_app.annotate.export import export_task
from mindsimkit.mindsim_app.annotate.labelstudio import config, export_labelstudio, import_ratings
from mindsimkit.mindsim_app.annotate.samplers import sample_patientact_sessions
from mindsimkit.mindsim_app.annotate.server import create_app, issue_links
from mindsimkit.mindsim_app.annotate.tasks import Design, load_task

krippendorff = pytest.importorskip("krippendorff")

RUBRIC = """\
# A team's own rubric: three items on 1-6, anchors per point (our test's wording).
id: team_warmth
name: "Team warmth rubric"
version: "2026.1"
source: "written for this test"
unit: conversation
level: ordinal
scale:
  min: 1
  max: 6
  anchors: {1: absent, 2: rare, 3: mixed, 4: mostly, 5: nearly always, 6: throughout}
items:
  - {id: warmth, name: Warmth, question: "Is the counsellor warm?"}
  - {id: pacing, name: Pacing, question: "Does the counsellor follow the client's pace?"}
  - id: focus
    name: Focus
    question: "Does the counsellor stay with what matters to the client?"
    anchors: {1: "drifts away at once", 6: "never loses the thread"}
judge:
  template: judge/scales.jinja2
  instructions: "Rate the counsellor only."
page:
  title: "Team warmth"
  instructions: "Rate the counsellor on each item, 1 to 6."
"""
ITEMS = ("warmth", "pacing", "focus")


def answer(req) -> dict | str:
    text = req.messages[0]["content"]
    if "Team warmth" not in text and "Is the counsellor warm?" not in text:
        return "not this rubric"
    if "s1000" in text:
        return {
            **{f"{i}_reason": "x" for i in ITEMS},
            **dict.fromkeys(ITEMS, 7),
        }  # off the scale: re-asked, then failed
    top = 6 if "patient says 0 in s0" in text else 3
    return {**{f"{i}_reason": "steady and kind" for i in ITEMS}, **dict.fromkeys(ITEMS, top)}


def test_a_new_1_to_6_rubric_is_one_file(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(RUBRIC)
    rubric = load(path)
    run = write_run(tmp_path / "run")

    # -- judge, fake engine: 6 is a score; a 7 is re-asked and becomes a counted failure, never a blank
    items = load_items([run])
    with Engines.with_backend(FakeBackend(answer)) as engines:
        summary = run_patientact(tmp_path / "out", engines, items, rubric=rubric)
    folder = tmp_path / "out" / "rubric_judge" / "team_warmth"
    rows = [Judgment.model_validate_json(x) for x in (folder / "judgments.jsonl").read_text().splitlines()]
    assert len(rows) == len(items) and summary.failed == sum(1 for i in items if i.item_id == "s1000")
    assert all(r.rubric == "team_warmth" and r.rubric_version == "2026.1" for r in rows)
    assert {r.scores["warmth"] for r in rows if r.ok} == {6, 3}
    failed = [r for r in rows if not r.ok]
    assert all(r.error_kind == "invalid_output" and not r.scores for r in failed)
    rep = json.loads((folder / "report.json").read_text())
    assert rep["rubric"]["id"] == "team_warmth" and rep["rubric"]["scale"] == "1-6"
    assert "# Team warmth rubric (v2026.1)" in (folder / "report.md").read_text()

    # -- page: a blinded task of whole sessions, served; the form is the rubric's, 6 is accepted, `true` is not
    d = Design(raters=["ana", "ben", "cleo"], k=2, all_raters=3)
    s = sample_patientact_sessions(tmp_path / "task", d, runs=[run], seed=5, rubric=rubric)
    task_dir, key = Path(s["task"]), Path(s["key"])
    path.unlink()  # the task folder carries the rubric: the file is no longer needed
    app = create_app([task_dir])
    served = app.state.served[0]
    links, _ = issue_links(served.task, served.store, "http://127.0.0.1:9")
    toks = {r: u.split("#k=")[1] for r, u in (l.split("\t") for l in links.read_text().splitlines()[1:])}
    c = TestClient(app)
    sess = c.get("/api/session", headers={"Authorization": f"Bearer {toks['ana']}"}).json()
    form = sess["forms"]["team_warmth"]
    assert form["form"] == "scales" and form["points"] == [1, 2, 3, 4, 5, 6]
    assert [x["id"] for x in form["dimensions"]] == list(ITEMS)
    assert dict(map(tuple, form["dimensions"][2]["levels"]))[6] == "never loses the thread"
    rng = np.random.default_rng(0)
    task = load_task(task_dir)
    truth = {iid: int(rng.integers(1, 7)) for iid in task.items}
    for r, tok in toks.items():
        h = {"Authorization": f"Bearer {tok}"}
        for iid in task.assignments[r]:
            if r == "ana":
                for bad in (True, "6", 6.5):
                    res = c.post(
                        "/api/answer",
                        headers=h,
                        json={"item_id": iid, "unit": "0", "answer": {"scores": dict.fromkeys(ITEMS, bad)}},
                    )
                    assert res.status_code == 422 and "not on the scale 1-6" in res.json()["error"]
            scores = {i: int(np.clip(truth[iid] + rng.integers(-1, 2), 1, 6)) for i in ITEMS}
            res = c.post("/api/answer", headers=h, json={"item_id": iid, "unit": "0", "answer": {"scores": scores}})
            assert res.status_code == 200, res.text

    # -- Label Studio: the config asks each item with six stars
    ls = export_labelstudio(task_dir, tmp_path / "ls")
    stars = {e.get("name"): e.get("maxRating") for e in ET.parse(ls["config_file"]).iter() if e.tag == "Rating"}
    assert stars == dict.fromkeys(ITEMS, "6")

    # -- export: the long format, unblinded with the key
    served.store.close()
    exp = export_task(task_dir, tmp_path / "export", key)
    lines = [json.loads(x) for x in Path(exp["files"]["ratings"]).read_text().splitlines()]
    keyed = json.loads(key.read_text())["items"]
    assert {x["unit"] for x in lines} == {e["judge_item_id"] for e in keyed.values()}
    assert all(set(x) == {"item", "unit", "rater", "value", "system", "patient"} for x in lines)
    assert 6 in {x["value"] for x in lines}

    # -- α from the exported file, on the rubric carried by the task (written back to a file), equals the package
    path.write_text(RUBRIC)
    res = CliRunner().invoke(
        judge_app, ["alpha", exp["files"]["ratings"], "--rubric", str(path), "--out", str(tmp_path / "a")]
    )
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "a" / "alpha.json").read_text())["items"]
    units = sorted({x["unit"] for x in lines})
    raters = sorted({x["rater"] for x in lines})
    for item in ITEMS:
        m = np.full((len(raters), len(units)), np.nan)
        for x in lines:
            if x["item"] == item:
                m[raters.index(x["rater"]), units.index(x["unit"])] = x["value"]
        want = krippendorff.alpha(reliability_data=m, level_of_measurement="ordinal")
        assert got[item]["alpha_pairable"] == pytest.approx(float(want), abs=1e-9)
        full = ~np.isnan(m).any(axis=0)
        assert got[item]["units_all_rater_subset"] == int(full.sum()) == 3
    assert "α pairable" in res.output


def test_label_studio_tasks_made_elsewhere_import_as_long_format_ratings(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(RUBRIC)
    rubric = load(path)
    assert '<Rating name="warmth"' in config(
        "team_warmth", type("T", (), {"header": type("H", (), {"rubric": {"yaml": RUBRIC}})(), "root": tmp_path})()
    )
    export = [
        {
            "id": 71,
            "data": {"conversation_id": "conv-9", "model": "bot-a", "text": "..."},
            "annotations": [
                {
                    "completed_by": {"email": "ana@clinic.example"},
                    "was_cancelled": False,
                    "result": [
                        {"from_name": "warmth", "type": "rating", "value": {"rating": 6}},
                        {"from_name": "focus", "type": "choices", "value": {"choices": ["2"]}},
                        {"from_name": "notes", "type": "textarea", "value": {"text": ["fine"]}},
                    ],
                },
                {"completed_by": 4, "was_cancelled": True, "result": []},
            ],
        },
        {
            "id": 72,
            "data": {"text": "no ids at all but the task's"},
            "annotations": [
                {
                    "completed_by": {"email": "ben@clinic.example"},
                    "result": [{"from_name": "pacing", "type": "rating", "value": {"rating": 1}}],
                }
            ],
        },
    ]
    (tmp_path / "ls.json").write_text(json.dumps(export))
    got = import_ratings(tmp_path / "ls.json", rubric)
    assert [(r.item, r.unit, r.rater, r.value, r.system, r.patient) for r in got.rows] == [
        ("warmth", "conv-9", "ana", 6, "bot-a", None),
        ("focus", "conv-9", "ana", 2, "bot-a", None),
        ("pacing", "72", "ben", 1, None, None),
    ]
    export[1]["annotations"][0]["result"][0]["value"] = {"rating": True}
    (tmp_path / "ls.json").write_text(json.dumps(export))
    from mindsimkit.mindcore.errors import InputError

    with pytest.raises(InputError, match=r"ls.json task 1: ben on pacing: value True is not on the scale 1-6"):
        import_ratings(tmp_path / "ls.json", rubric)

"""Label Studio interchange: tasks and a well-formed labeling config per protocol go out; Label Studio's JSON
export of the same answers comes back as exactly the files the annotation page's answers export to."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindsim_app.annotate.export import export_task
from mindsimkit.mindsim_app.annotate.labelstudio import export_labelstudio, import_labelstudio
from mindsimkit.mindsim_app.annotate.samplers import sample_mhqr, sample_patientact_profiles, sample_realism
from mindsimkit.mindsim_app.annotate.store import Store
from mindsimkit.mindsim_app.annotate.tasks import Design, load_task


def ls_results(protocol: str, a: dict) -> list[dict]:
    """Our answer as Label Studio writes results (from_name/to_name/type/value), built here from its docs."""
    res = []

    def add(name, typ, value):
        res.append({"from_name": name, "to_name": "x", "type": typ, "value": value})

    if protocol == "realism":
        for g in ("form", "content"):
            add(
                g,
                "choices",
                {
                    "choices": [
                        r
                        for r in a["reasons"]
                        if r.startswith(g + "_")
                        or r
                        in {
                            "form": ("typography", "register", "length_format"),
                            "content": ("monologuing", "self_analysis", "emotional_mismatch", "sycophancy"),
                        }[g]
                    ]
                },
            )
        for g, t in (a.get("other") or {}).items():
            add(f"{g}_other_text", "textarea", {"text": [t]})
        add("rating", "rating", {"rating": a["rating"]})
    elif protocol == "mhqr":
        add("severity", "choices", {"choices": [a["severity"]]})
        if a["issues"]:
            add("issues", "choices", {"choices": a["issues"]})
    elif protocol == "diversity":
        add("rating", "rating", {"rating": a["rating"]})
    else:
        for d, v in a["scores"].items():
            add(d, "rating", {"rating": v})
        add("attachment", "choices", {"choices": [a["attachment"]]})
        add("theme", "choices", {"choices": [a["theme"]]})
    if a.get("comment"):
        add("comment", "textarea", {"text": [a["comment"]]})
    return res


def answers_for(task_dir: Path) -> list[tuple[str, str, str, dict]]:
    task = load_task(task_dir)
    out = []
    for n, (r, ids) in enumerate(sorted(task.assignments.items())):
        for k, iid in enumerate(ids):
            it = task.items[iid]
            for u in it["units"]:
                p = it["protocol"]
                if p == "realism":
                    a = {
                        "reasons": ["form_other", "sycophancy"],
                        "other": {"form": "all caps"},
                        "rating": 1 + (k + n) % 5,
                    }
                elif p == "mhqr":
                    a = (
                        {"severity": "major", "issues": ["under_guiding"]}
                        if k % 2
                        else {"severity": "no_concern", "issues": []}
                    )
                elif p == "diversity":
                    a = {"rating": 3 + n % 2, "comment": "varied enough"}
                else:
                    a = {
                        "scores": {
                            "clinical_plausibility": 4,
                            "internal_consistency": 3 + n % 2,
                            "case_specificity": 2,
                            "clinical_depth": 5,
                        },
                        "attachment": "avoidant",
                        "theme": "worthless",
                    }
                out.append((r, iid, u["unit"], a))
    return out


@pytest.mark.parametrize("protocol", ["realism", "mhqr", "patientact_profile"])
def test_label_studio_round_trip_matches_the_page(tmp_path, run_dir, protocol):
    d = Design(raters=["ana", "ben"], k=2, all_raters=0)
    if protocol == "realism":
        s = sample_realism(tmp_path / "t", d, n=4, runs=[str(run_dir)], windows=[1, 5])
    elif protocol == "mhqr":
        s = sample_mhqr(tmp_path / "t", d, run_dir=run_dir, n=3)
    else:
        s = sample_patientact_profiles(tmp_path / "t", d, runs=[run_dir])
    task_dir, key = Path(s["task"]), Path(s["key"])
    out = export_labelstudio(task_dir, tmp_path / "ls")
    tasks = json.loads(Path(out["tasks_file"]).read_text())
    names = {e.get("name") for e in ET.parse(out["config_file"]).iter()} - {None}
    for t in tasks:
        assert "system" not in t["data"] and t["data"]["item_id"] in load_task(task_dir).items
    given = answers_for(task_dir)
    # Every field the import reads is a control of the config.
    for _r, iid, _unit, a in given:
        if iid != "diversity":
            assert {x["from_name"] for x in ls_results(load_task(task_dir).items[iid]["protocol"], a)} <= names
    # The page's way: answers stored by the server, exported.
    store = Store(task_dir)
    for r, iid, unit, a in given:
        store.save(r, iid, unit, a)
    store.close()
    page = export_task(task_dir, tmp_path / "page", key)
    # Label Studio's way: its JSON export of the same answers (one task per unit, annotations by e-mail).
    by_unit: dict = {}
    for r, iid, unit, a in given:
        p = load_task(task_dir).items[iid]["protocol"]
        by_unit.setdefault((iid, unit), []).append(
            {"completed_by": {"email": f"{r}@clinic.example"}, "result": ls_results(p, a), "was_cancelled": False}
        )
    export = [
        {"id": n, "data": {"item_id": iid, "unit": unit}, "annotations": anns}
        for n, ((iid, unit), anns) in enumerate(sorted(by_unit.items()))
    ]
    export[0]["annotations"].append({"completed_by": 9, "result": [], "was_cancelled": True})  # skipped
    (tmp_path / "ls-export.json").write_text(json.dumps(export))
    back = export_task(
        task_dir, tmp_path / "back", key, answers=import_labelstudio(task_dir, tmp_path / "ls-export.json")
    )
    for label, path in page["files"].items():
        if label == "answers":
            strip = lambda t: [
                {k: v for k, v in json.loads(x).items() if k not in ("answered_at",)} for x in t.splitlines()
            ]
            assert strip(Path(path).read_text()) == strip(Path(back["files"][label]).read_text())
        else:
            assert Path(path).read_text() == Path(back["files"][label]).read_text(), label


def test_label_studio_import_checks_the_protocol(tmp_path, run_dir):
    s = sample_realism(tmp_path / "t", Design(raters=["ana"], k=1), n=2, runs=[str(run_dir)], windows=[1])
    task_dir = Path(s["task"])
    iid = next(iter(load_task(task_dir).items))
    bad = [
        {
            "data": {"item_id": iid, "unit": "0"},
            "annotations": [
                {
                    "completed_by": {"email": "ana@x"},
                    "result": [{"from_name": "rating", "type": "rating", "value": {"rating": 4}}],
                }
            ],
        }
    ]
    (tmp_path / "e.json").write_text(json.dumps(bad))
    with pytest.raises(InputError, match="tick at least one form reason"):
        export_task(
            task_dir, tmp_path / "o", answers=import_labelstudio(task_dir, tmp_path / "e.json"), source="e.json"
        )
    bad[0]["data"]["item_id"] = "../../etc"
    (tmp_path / "e.json").write_text(json.dumps(bad))
    with pytest.raises(InputError, match="not in task"):
        import_labelstudio(task_dir, tmp_path / "e.json")

"""`mindsim import patientact-situations`: the PatientAct authors' situations, disease outlines and priors (files in
PatientHub's documented shapes, with invented content: no line of the real files) imported through the installed
script and read back by the profile stage's typed reader; each malformed variant is exit 2, one `error:` line
naming file, entry and field, and nothing written."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from mindsimkit.mindcore.errors import InputError
from mindsimkit.profilegen.patientact_inputs import read_inputs
from test_exit_codes import error_line, mindsim, mindsim_here

SITUATIONS = [
    {
        "disease_key": "low_mood",
        "topic": "moving city",
        "situation": "A woman in her thirties moved for a job and has stopped calling her sister; weekends go by in bed.",
    },
    {
        "disease_key": "low_mood",
        "topic": "retirement",
        "situation": "A retired ferry engineer no longer walks to the harbour and says the days have no shape.",
    },
    {
        "disease_key": "worry",
        "topic": "exams",
        "situation": "A student lies awake replaying tomorrow's exam and checks the timetable many times an hour.",
    },
]


def outline(word: str) -> dict[str, Any]:
    return {
        "key_characteristics": [f"{word} most days", "less interest in usual things"],
        "typical_presentation": {"mild": f"some {word}", "moderate": f"daily {word}", "severe": f"constant {word}"},
        "important_notes": ["onset follows a loss in many cases"],
        "contraindications": ["a sudden elevated mood for days"],
        "differential_considerations": ["grief without impairment"],
        "special_populations": ["older adults may report aches rather than sadness"],
        "red_flags": ["a stated plan to end one's life"],
    }


OUTLINES = {"low_mood": outline("low mood"), "worry": outline("worry")}
PRIORS = {
    "note": "invented weights for the tests",
    "methodology": {"age_group": "made up"},
    "sources": [],
    "age_ranges": {"Child": [6, 17], "Adult": [18, 64], "Elderly": [65, 90]},
    "global": {
        "age_group": {"Child": 0.2, "Adult": 0.6, "Elderly": 0.2},
        "biological_sex": {"Male": 0.5, "Female": 0.5},
        "ethnicity": {"Asian": 1, "Other": 1},
        "occupation_type": {"Student": 0.3, "Retired": 0.2, "Office worker": 0.5},
        "core_belief_theme": {"I am unlovable": 1, "I am worthless": 1, "I am helpless": 1},
        "attachment_style": {"avoidant": 0.3, "anxious": 0.3, "disorganized": 0.4},
        "smoking": {"Never": 0.7, "Current": 0.3},
    },
}
DISEASE_PRIORS = {
    "note": "invented",
    "sources": [],
    "worry": {
        "age_group": {"labels": {"Child": 0.5, "Adult": 0.5, "Elderly": 0.0}},
        "biological_sex": {"labels": {"Male": 0.4, "Female": 0.6}},
    },
}


def write(folder: Path, **over: Any) -> list[str]:
    """The four files (each replaced by `over[name]` when given, text written as it is) and the command's args."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"situations": SITUATIONS, "outlines": OUTLINES, "priors": PRIORS, "disease_priors": DISEASE_PRIORS}
    paths = {}
    for name, data in files.items():
        value = over.get(name, data)
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return [
        str(paths["situations"]),
        "--outlines",
        str(paths["outlines"]),
        "--priors",
        str(paths["priors"]),
        "--disease-priors",
        str(paths["disease_priors"]),
    ]


def test_the_authors_shape_imports_and_reads_back(tmp_path):
    args = write(tmp_path / "src")
    proc = mindsim("import", "patientact-situations", *args, "--out", tmp_path / "in", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "imported 3 situations over 2 disease keys, 2 outlines" in proc.stdout

    got = read_inputs(tmp_path / "in")
    assert [s.topic for s in got.situations] == ["moving city", "retirement", "exams"]
    assert got.outline("worry").typical_presentation.severe == "constant worry"
    assert got.outline("low_mood").red_flags == ["a stated plan to end one's life"]
    assert got.priors is not None and got.priors.age_ranges["Elderly"] == (65, 90)
    # A disease override replaces the global distribution; other attributes and diseases keep the global one.
    assert got.priors.distribution("age_group", "worry") == {"Child": 0.5, "Adult": 0.5, "Elderly": 0.0}
    assert got.priors.distribution("age_group", "low_mood") == {"Child": 0.2, "Adult": 0.6, "Elderly": 0.2}
    assert got.priors.distribution("ethnicity", "worry") == {"Asian": 1.0, "Other": 1.0}
    assert got.priors.distribution("smoking") == {"Never": 0.7, "Current": 0.3}

    record = json.loads((tmp_path / "in" / "import.json").read_text())
    assert record["situations"] == 3 and record["disease_keys"] == ["low_mood", "worry"]
    assert record["disease_priors"] == ["worry"]
    assert set(record["sources"]) == {"situations", "outlines", "priors", "disease priors"}
    assert all(len(s["sha256"]) == 64 for s in record["sources"].values())
    assert "note" not in (tmp_path / "in" / "priors.json").read_text()  # the authors' documentation stays theirs


def test_reimport_into_the_same_folder_replaces_the_earlier_import(tmp_path):
    args = write(tmp_path / "src")
    assert (
        mindsim_here("import", "patientact-situations", *args, "--out", tmp_path / "in", cwd=tmp_path).returncode == 0
    )
    # Again with the situations alone: the earlier outlines and priors must not read back as this import's.
    proc = mindsim_here("import", "patientact-situations", args[0], "--out", tmp_path / "in", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = read_inputs(tmp_path / "in")
    assert len(got.situations) == 3 and got.outlines is None and got.priors is None
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == ["import.json", "situations.jsonl"]


def changed(data: Any, change) -> Any:
    out = copy.deepcopy(data)
    change(out)
    return out


BAD = [
    ("situations", '[{"disease_key": "low_mood", "topic": "x", "situ', "situations.json: not valid JSON"),
    ("situations", {"disease_key": "low_mood"}, "expected a non-empty JSON list"),
    ("situations", [], "expected a non-empty JSON list"),
    ("situations", changed(SITUATIONS, lambda s: s[1].pop("topic")), "situation [1]: field 'topic': missing"),
    (
        "situations",
        changed(SITUATIONS, lambda s: s[2].update(situation=7)),
        "situation [2]: field 'situation': expected str",
    ),
    ("situations", changed(SITUATIONS, lambda s: s[0].update(topic=" ")), "situation [0]: field 'topic': empty"),
    ("situations", changed(SITUATIONS, lambda s: s[0].update(severity="mild")), "situation [0]: field 'severity'"),
    (
        "situations",
        changed(SITUATIONS, lambda s: s[2].update(disease_key="panic")),
        "situation [2]: field 'disease_key': 'panic' has no outline",
    ),
    (
        "situations",
        '[{"disease_key": "worry", "topic": "a", "topic": "b", "situation": "c"}]',
        "the key 'topic' appears twice",
    ),
    (
        "outlines",
        changed(OUTLINES, lambda o: o["worry"].pop("red_flags")),
        "outline 'worry': field 'red_flags': missing",
    ),
    (
        "outlines",
        changed(OUTLINES, lambda o: o["worry"]["typical_presentation"].pop("severe")),
        "outline 'worry'.typical_presentation: field 'severe': missing",
    ),
    (
        "outlines",
        changed(OUTLINES, lambda o: o["low_mood"]["contraindications"].append(3)),
        "outline 'low_mood': field 'contraindications[1]'",
    ),
    (
        "outlines",
        changed(OUTLINES, lambda o: o.update(worry="see low_mood")),
        "outline 'worry': expected a JSON object",
    ),
    (
        "priors",
        changed(PRIORS, lambda p: p["global"].pop("attachment_style")),
        "field 'global.attachment_style': missing",
    ),
    (
        "priors",
        changed(PRIORS, lambda p: p["global"].update(ethnicity={"Asian": 0, "Other": 0})),
        "field 'global.ethnicity': the weights sum to 0",
    ),
    (
        "priors",
        changed(PRIORS, lambda p: p["global"]["biological_sex"].update(Male="half")),
        "field 'global.biological_sex': label 'Male': expected a non-negative number",
    ),
    (
        "priors",
        changed(PRIORS, lambda p: p["global"]["biological_sex"].update(Male=-1)),
        "label 'Male': expected a non-negative number",
    ),
    ("priors", changed(PRIORS, lambda p: p["age_ranges"].update(Adult=[64, 18])), "field 'age_ranges.Adult'"),
    ("priors", changed(PRIORS, lambda p: p["age_ranges"].pop("Child")), "no range for the age group 'Child'"),
    ("priors", changed(PRIORS, lambda p: p.update(regions={})), "top-level key 'regions'"),
    (
        "disease_priors",
        changed(DISEASE_PRIORS, lambda d: d["worry"].update(ethnicity={"Asian": 1})),
        "disease 'worry'.ethnicity: field 'labels': missing",
    ),
    (
        "disease_priors",
        changed(DISEASE_PRIORS, lambda d: d["worry"]["age_group"]["labels"].update(Teen=1)),
        "disease 'worry': field 'age_group.labels': the age group 'Teen' has no range",
    ),
    (
        "disease_priors",
        changed(DISEASE_PRIORS, lambda d: d.update(worry=[1, 2])),
        "disease 'worry': expected a JSON object",
    ),
]


@pytest.mark.parametrize("name, value, part", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_a_malformed_file_is_one_error_line_and_nothing_written(tmp_path, name, value, part):
    args = write(tmp_path / "src", **{name: value})
    proc = mindsim_here("import", "patientact-situations", *args, "--out", tmp_path / "in", cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    line = error_line(proc)
    assert f"{name}.json" in line and part in line, line
    assert not (tmp_path / "in").exists()


def test_the_installed_script_refuses_too_and_keeps_the_earlier_import(tmp_path):
    good = write(tmp_path / "src")
    assert (
        mindsim_here("import", "patientact-situations", *good, "--out", tmp_path / "in", cwd=tmp_path).returncode == 0
    )
    before = {p.name: p.read_bytes() for p in (tmp_path / "in").iterdir()}
    bad = write(tmp_path / "bad", outlines=changed(OUTLINES, lambda o: o.pop("worry")))
    proc = mindsim("import", "patientact-situations", *bad, "--out", tmp_path / "in", cwd=tmp_path)
    assert proc.returncode == 2
    assert "situation [2]: field 'disease_key': 'worry' has no outline" in error_line(proc)
    assert {p.name: p.read_bytes() for p in (tmp_path / "in").iterdir()} == before


def test_disease_priors_need_the_attribute_priors(tmp_path):
    args = write(tmp_path / "src")
    proc = mindsim_here(
        "import", "patientact-situations", args[0], "--disease-priors", args[-1], "--out", tmp_path / "in", cwd=tmp_path
    )
    assert proc.returncode == 2 and "give --priors" in error_line(proc)


def test_the_reader_refuses_a_folder_that_is_not_an_import(tmp_path):
    with pytest.raises(InputError, match="import.json not found"):
        read_inputs(tmp_path)
    (tmp_path / "import.json").write_text(json.dumps({"what": "PatientAct situations", "files": {"situations": "x"}}))
    (tmp_path / "situations.jsonl").write_text('{"disease_key": "worry", "topic": "t"}\n')
    with pytest.raises(InputError, match="situations.0.situation"):
        read_inputs(tmp_path)

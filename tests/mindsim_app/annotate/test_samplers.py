"""Samplers: blind (no system name reaches the task folder), byte-reproducible with a seed, the assignment
design (k of n raters per item, an all-rater subset, balanced loads), realism windows, real text marked
never-publish, PatientAct seeds only in the key and the diversity rating last in every queue."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from annotfakes import COUNSELLORS, SEEDS, write_real, write_run
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindsim_app.annotate.samplers import (
    sample_mhqr,
    sample_patientact_profiles,
    sample_patientact_sessions,
    sample_realism,
)
from mindsimkit.mindsim_app.annotate.tasks import Design, load_task


def folder_bytes(task: Path) -> dict[str, bytes]:
    out = {p.name: p.read_bytes() for p in task.iterdir()}
    out["key"] = (task.parent / f"{task.name}.key.json").read_bytes()
    return out


def design(k=2, all_raters=2, n=4) -> Design:
    return Design(raters=[f"R{i + 1}" for i in range(n)], k=k, all_raters=all_raters)


def draw_realism(root: Path, run: Path, real: Path, seed: int = 3, name: str = "t"):
    return sample_realism(root / name, design(), n=12, runs=[str(run)], real=[f"clinic={real}"], seed=seed)


def test_realism_is_blind_reproducible_and_marks_real_text(tmp_path):
    run = write_run(tmp_path / "run", turns=10)
    real = write_real(tmp_path / "real.jsonl", turns=10)
    draw_realism(tmp_path / "a", run, real)
    draw_realism(tmp_path / "b", run, real)
    a, b = folder_bytes(tmp_path / "a" / "t"), folder_bytes(tmp_path / "b" / "t")
    assert a == b  # same inputs and seed: the same bytes, key included
    draw_realism(tmp_path / "c", run, real, seed=4)
    assert folder_bytes(tmp_path / "c" / "t")["items.jsonl"] != a["items.jsonl"]
    served = a["items.jsonl"].decode() + a["assignments.json"].decode() + a["task.json"].decode()
    served = served.replace("mindsim-annotate/1", "")
    for name in ("mindsim", "patientact", "clinic", str(run), *COUNSELLORS):
        assert name not in served
    key = json.loads(a["key"])
    assert sorted(key["systems"].values()) == ["clinic", "mindsim", "patientact"]
    task = load_task(tmp_path / "a" / "t")
    head = json.loads(a["items.jsonl"].decode().splitlines()[0])["header"]
    assert head["real_text"] is True and head["publish"] == "never" and "never publish" in head["notice"]
    assert task.header.publish == "never"
    # Even over systems; window sizes take turns; every patient reply of a window is a unit.
    systems = Counter(e["system"] for e in key["items"].values())
    assert set(systems.values()) == {4}
    assert Counter(e["window"] for e in key["items"].values()) == {1: 6, 5: 3, 9: 3}
    for iid, it in task.items.items():
        e = key["items"][iid]
        assert len(it["units"]) == e["window"] == len(e["turns"])
        assert [m["speaker"] for m in it["display"]["messages"] if m["speaker"] == "patient"].__len__() == e["window"]
        for u in it["units"]:
            assert it["display"]["messages"][u["message"]]["speaker"] == "patient"
    # Windows of one conversation never overlap.
    spans = {}
    for e in key["items"].values():
        for t in e["turns"]:
            k = (e["system"], e["conversation_id"], t)
            assert k not in spans
            spans[k] = True


def test_assignment_design_k_of_n_and_the_all_rater_subset(tmp_path):
    run = write_run(tmp_path / "run", turns=10)
    s = sample_realism(
        tmp_path / "t", Design(raters=["a", "b", "c", "d", "e"], k=3, all_raters=3), n=12, runs=[str(run)], seed=1
    )
    task = load_task(Path(s["task"]))
    per_item = Counter(i for ids in task.assignments.values() for i in ids)
    everyone = [i for i, n in per_item.items() if n == 5]
    assert len(everyone) == 3 and sorted(Counter(per_item.values()).items()) == [(3, 9), (5, 3)]
    loads = [len(v) for v in task.assignments.values()]
    assert max(loads) - min(loads) <= 1
    assert all(len(set(v)) == len(v) for v in task.assignments.values())
    # Queues are shuffled per rater, not one order for all.
    assert len({tuple(v) for v in task.assignments.values()}) > 1


def test_mhqr_keeps_excerpt_ids_and_the_judge_key(tmp_path, run_dir):
    s = sample_mhqr(
        tmp_path / "m",
        design(k=2, all_raters=1, n=3),
        run_dir=run_dir,
        seed=2,
        mix={"window": 2, "conversation": 1, "reply": 3},
    )
    task = load_task(Path(s["task"]))
    key = json.loads(Path(s["key"]).read_text())
    assert sorted(len(it["units"]) for it in task.items.values()) == [1, 1, 1, 5, 5, 6]
    for iid, it in task.items.items():
        entry = key["excerpts"][iid]  # the judge sample's key entry, as `judge agreement --key` reads it
        assert [u.get("turn_id") for u in it["units"]] == entry["turn_ids"]
        for u in it["units"]:
            assert u["excerpt_id"] == iid and it["display"]["messages"][u["message"]]["speaker"] == "counsellor"
        assert it["units"][-1]["message"] == len(it["display"]["messages"]) - 1
        assert "Memory" in it["display"]["system_prompt"]
    assert len(key["systems"]) >= 2
    text = (Path(s["task"]) / "items.jsonl").read_text()
    for c in COUNSELLORS:
        assert c not in text


def test_mhqr_with_real_sessions_is_marked_never_publish(tmp_path, run_dir):
    from judgefakes import write_real_sessions

    real = write_real_sessions(tmp_path / "real.jsonl", counsellor="app")
    s = sample_mhqr(tmp_path / "m", design(k=2, all_raters=1, n=3), run_dir=run_dir, seed=2, n=6, real=[real])
    task = load_task(Path(s["task"]))
    key = json.loads(Path(s["key"]).read_text())
    assert "real/app" in key["systems"].values() and key["inputs"]["real"] == [str(real)]
    assert task.header.real_text and task.header.publish == "never"
    assert "app" not in {it["system"] for it in task.items.values()}
    plain = sample_mhqr(tmp_path / "n", design(k=2, all_raters=1, n=3), run_dir=run_dir, seed=2, n=6)
    assert load_task(Path(plain["task"])).header.publish == "allowed"


def test_patientact_sessions_even_over_systems(tmp_path, run_dir):
    s = sample_patientact_sessions(
        tmp_path / "p", design(k=3, all_raters=0, n=10), runs=[run_dir], per_system=3, seed=5
    )
    key = json.loads(Path(s["key"]).read_text())
    assert Counter(e["system"] for e in key["items"].values()) == {"mindsim": 3, "patientact": 3}
    task = load_task(Path(s["task"]))
    assert all(n == 3 for n in Counter(i for v in task.assignments.values() for i in v).values())


def test_patientact_sessions_per_group_draws_each_system_within_each_group(tmp_path, run_dir):
    # PatientAct's sample is 10 conversations per disorder per system; the fake run has four groups of two sessions
    # per system, so one per stratum is 8 sessions where --per-system 1 alone gives 2.
    s = sample_patientact_sessions(
        tmp_path / "g", design(k=3, all_raters=0, n=10), runs=[run_dir], per_system=1, per_group=True, seed=5
    )
    key = json.loads(Path(s["key"]).read_text())
    strata = Counter((e["system"], e["group"]) for e in key["items"].values())
    assert len(strata) == 8 and set(strata.values()) == {1}
    assert load_task(Path(s["task"])).header.sampler == {"per_system": 1, "per_group": True}
    # Table 2's systems only, out of a run that holds others too; the choice is in the key, not the served task.
    only = sample_patientact_sessions(
        tmp_path / "o", design(k=3, all_raters=0, n=10), runs=[run_dir], per_group=True, systems=["patientact"], seed=5
    )
    key = json.loads(Path(only["key"]).read_text())
    assert {e["system"] for e in key["items"].values()} == {"patientact"} and len(key["items"]) == 8
    assert key["inputs"]["systems"] == ["patientact"]
    assert load_task(Path(only["task"])).header.sampler == {"per_system": None, "per_group": True}
    with pytest.raises(InputError, match="--system patient_psi: no such system in the inputs; they hold mindsim"):
        sample_patientact_sessions(tmp_path / "x", design(), runs=[run_dir], systems=["patient_psi"])


def test_profiles_hide_the_seeds_and_end_with_diversity(tmp_path, run_dir):
    s = sample_patientact_profiles(tmp_path / "pr", design(k=3, all_raters=0, n=5), runs=[run_dir], seed=0)
    task = load_task(Path(s["task"]))
    key = json.loads(Path(s["key"]).read_text())
    shown = (Path(s["task"]) / "items.jsonl").read_text()
    for word in ("avoidant", "anxious", "disorganized", "worthless", "unlovable", "helpless"):
        assert word not in shown
    assert {e["profile_id"]: (e["truth"]["attachment"], e["truth"]["theme"]) for e in key["items"].values()} == SEEDS
    for queue in task.assignments.values():
        assert queue[-1] == "diversity" and queue.count("diversity") == 1


def test_bad_input_is_one_clear_error(tmp_path, run_dir):
    with pytest.raises(InputError, match="outside the task folder"):
        sample_mhqr(tmp_path / "m", design(), run_dir=run_dir, n=2, key=tmp_path / "m" / "k.json")
    with pytest.raises(InputError, match="only 4 raters"):
        sample_realism(tmp_path / "r", design(k=5), n=2, runs=[str(run_dir)])
    with pytest.raises(InputError, match="no such run folder"):
        sample_realism(tmp_path / "r", design(), n=2, runs=[str(tmp_path / "nope")])


@pytest.mark.parametrize("which", ["mhqr", "sessions", "profiles"])
def test_every_sampler_is_byte_reproducible(tmp_path, run_dir, which):
    def draw(name: str, seed: int) -> dict[str, bytes]:
        d = design(k=2, all_raters=1, n=3)
        if which == "mhqr":
            sample_mhqr(tmp_path / name, d, run_dir=run_dir, n=4, unit="window", seed=seed)
        elif which == "sessions":
            sample_patientact_sessions(tmp_path / name, d, runs=[run_dir], per_system=2, seed=seed)
        else:
            sample_patientact_profiles(tmp_path / name, d, runs=[run_dir], n=3, seed=seed)
        b = folder_bytes(tmp_path / name)
        b["key"] = b["key"].replace(f'"task": "{name}"'.encode(), b"")  # the key names its task folder
        return b

    assert draw("first", 7) == draw("second", 7)
    assert draw("third", 8)["items.jsonl"] != draw("fourth", 7)["items.jsonl"]

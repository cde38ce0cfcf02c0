"""The PatientAct patient engine end to end on the real embedded engine (SmolLM2-135M): `mindsim run` of the
quickstart recipe with `patient_engine: patientact` (two sessions, one full patient turn per
session; the session fixture `patientact_run` in this folder's conftest), then `mindsim judge run --rubric
patientact` and `mindsim export patient` through the console script. One patient, so one arc of two sessions.

The profiles are the shared quickstart run's: its profile checkpoints are copied in, and the recipe keeps every
profile setting, so the profile stage resumes them instead of writing new ones (causal checks off, as they would
change the checkpoint keys). A 135M model's answers are often poor or fail after their re-asks, so the run and
the judge are rerun (they resume) a bounded number of times until there is something to check, and the tests fail
when there still is not. The assertions hold whatever the model says: the arc writes its sessions or is counted as
failed and keeps the ones it finished, trust carries from session 0 into session 1, and what was written obeys
the engine's rules (trust on the scale and stepped, the signal only on the patient side, items above trust never
in the patient's messages) and flows through validation, the PatientAct judge and the export."""

from __future__ import annotations

import json
import shutil
import subprocess

import pyarrow.parquet as pq
import pytest
import yaml
from arc_checks import check_arc_ledger, check_trust_carry
from quick_recipes import REPO, RUNS, quick_recipe, resume_profiles, write_recipe

from mindsim.patientact.participant import session_items
from mindsim.scenario import Scenario

pytestmark = pytest.mark.embedded


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("mindsim") or "mindsim", *args], capture_output=True, text=True, timeout=900)


def test_sessions_obey_the_engine_rules(patientact_run):
    out, info = patientact_run
    # Whatever the model wrote: the arc wrote both sessions or is counted as failed and kept the ones it finished;
    # the dataset is exactly the checkpointed sessions.
    rows, ssum = check_arc_ledger(out, sessions=2)
    failed = ssum["failed_arcs"]
    assert ssum["patient_engines"] == ["patientact"] and ssum["sessions_expected"] == 2
    assert all(f["patient_engine"] == "patientact" for f in failed)
    assert info["counts"]["failed arcs"] == len(failed)
    assert info["counts"]["sessions written / expected"] == f"{len(rows)} / 2"
    assert rows, "the run left no session to check"
    for r in rows:
        assert r["patient_engine"] == "patientact"
        pa = r["patientact"]
        assert 1.0 <= pa["trust_start"] <= 4.0 and 1.0 <= pa["trust_end"] <= 4.0
        items = {i["id"]: i for i in pa["decomposition"]["items"]}
        assert items and all(i["level"] in (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0) for i in items.values())
        # The session's own items (the scenario's thoughts, bodily signs and behaviours, `s1`…) go through the
        # same gate; they are not stored, they follow from the scenario.
        scenario = {i.id: i.model_dump() for i in session_items(Scenario.model_validate(r["scenario"]))}
        assert not set(scenario) & set(items)
        items.update(scenario)
        for t in r["turns"]:
            assert t["message"].strip() and "[inner state]" not in t["message"] and '{"name":' not in t["message"]
            s = t["patientact"]
            if t["opening"]:
                continue
            assert round(s["trust_after"] - s["trust_before"], 2) in {0.0, 0.25, -0.25, 0.5, -0.5}
            assert set(s["retrieved"]) | set(s["blocked"]) | set(s["withheld"]) == set(s["relevant"])
            shown = {items[i]["content"] for i in s["retrieved"]}
            for iid in s["blocked"] + s["withheld"]:
                assert items[iid]["level"] > s["trust_before"]
                # (a 135M decomposition may repeat one text in two items; only a text no retrieved item has counts)
                if s["signal"] and not any(items[iid]["content"] in c for c in shown):
                    assert items[iid]["content"] not in s["signal"]
        assert all("[inner state]" not in (m["content"] or "") for m in r["counsellor_messages"])


def test_trust_carries_into_the_next_session(patientact_run):
    """Session 1 of the arc starts at `session_start` of session 0's final trust (moved by the concealment offset
    and the gap's drift), and each session's turns chain its trust from start to end."""
    out, _ = patientact_run
    rows, _ = check_arc_ledger(out, sessions=2)
    assert check_trust_carry(rows) == 1, (
        f"the arc finished {len(rows)} of 2 sessions in {RUNS} runs: no carry-over to check")


def test_validation_and_card_name_the_engine(patientact_run):
    out, _ = patientact_run
    written = json.loads((out / "sessions" / "summary.json").read_text())["sessions_written"]
    lines = (out / "transcripts" / "transcripts.jsonl").read_text().splitlines()
    assert written and len(lines) == written
    assert {json.loads(x)["patient_engine"] for x in lines} == {"patientact"}
    report = json.loads((out / "validation" / "report.json").read_text())
    assert list(report["systems"]) == ["patientact/counsellor"]
    card = (out / "dataset" / "README.md").read_text()
    assert "trust_before" in card and "patientact" in card


def test_patientact_rubric_and_patient_export_through_the_console_script(patientact_run, tmp_path):
    out, _ = patientact_run
    written = json.loads((out / "sessions" / "summary.json").read_text())["sessions_written"]
    assert written, "no finished session to judge"
    recipe = out.parent / "recipe.yaml"
    # Exit 1 = every judgment failed (still written as counted failure rows). Failed judgments are not cached,
    # so a rerun asks them again; bounded like the run itself.
    for _ in range(RUNS):
        res = _cli("judge", "run", str(out), "--rubric", "patientact", "--recipe", str(recipe))
        assert res.returncode in (0, 1), res.stderr[-2000:]
        lines = [json.loads(x) for x in (out / "patientact_judge" / "judgments.jsonl").read_text().splitlines()]
        assert len(lines) == written
        assert (res.returncode == 1) == (not any(j["ok"] for j in lines)), res.stderr[-2000:]
        if res.returncode == 0:
            break
    assert res.returncode == 0, f"every judgment failed in {RUNS} runs: {[j['error'] for j in lines]}"
    for j in lines:
        assert j["system"] == "patientact"
        if j["ok"]:
            assert set(j["scores"]) == {"coherence", "disclosure_pacing", "resistance_quality",
                                        "emotional_authenticity", "behavioural_realism"}
            assert all(1 <= v <= 5 for v in j["scores"].values())
        else:
            assert j["error"]
    assert (out / "patientact_judge" / "report.md").is_file()

    target = tmp_path / "patient.jsonl"
    res = _cli("export", "patient", str(out), "--out", str(target))
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [json.loads(x) for x in target.read_text().splitlines()]
    assert len(rows) == written and all(r["patient_engine"] == "patientact" for r in rows)
    turns = [json.loads(t) for r in rows for t in r["patientact_turns"] if t]
    assert turns and all({"trust_before", "trust_after", "reaction", "behaviour"} <= set(t) for t in turns)


# -- the paper recipe, quickstart-sized, all four arms --------------------------------------------------------

ARMS = ["patientact", "patientact:no_tg", "patientact:no_dm", "patientact:no_pipe"]


def paper_quick_recipe() -> dict:
    """recipes/patientact_paper.yaml cut to quickstart size for the embedded engine: its simulation section
    (four arms, counsellor first, trust from 2.5, the paper's counsellor) with the quickstart's engines, roles
    and profiles, one patient, one session of the counsellor's greeting and one patient reply (each arm's
    steps run once; trust moving over turns is the two-session run's), lexical matching (a 135M matcher only
    adds minutes), no psychological formulation (see `patientact_run`) and the simulation roles at the paper's
    0.7."""
    paper = yaml.safe_load((REPO / "recipes" / "patientact_paper.yaml").read_text())
    quick = quick_recipe()
    recipe = {**paper, "name": "patientact-paper-quick", "engines": quick["engines"], "roles": quick["roles"],
              "profiles": {**quick["profiles"], "causal_checks": False}, "validation": quick["validation"]}
    for role in ("patient", "counsellor"):
        recipe["roles"][role] = {**recipe["roles"][role], "temperature": 0.7}
    sim = {**quick["simulation"], **{k: paper["simulation"][k] for k in
                                     ("opening", "counsellor_template", "patient_engine", "patientact")}}
    sim.update(sessions=1, turn_cap=1, max_patients=1)
    # The paper's switches, with the quickstart's settings for the 135M model (attempts, budgets) kept.
    sim["patientact"] = {**quick["simulation"].get("patientact", {}), **sim["patientact"], "retrieval": "lexical",
                         "psych_formulation": False}  # as in `patientact_run`, for the 135M decomposer
    recipe["simulation"] = sim
    recipe.pop("judge", None)
    return recipe


def test_paper_recipe_override_runs_four_arms_embedded(patientact_run, tmp_path_factory):
    from mindcore.errors import EngineError
    from mindsim_app.job import run_job

    base = tmp_path_factory.mktemp("patientact-paper")
    path = write_recipe(paper_quick_recipe(), base / "recipe.yaml")
    out = base / "run"
    # The PatientAct run's profiles, first scenario and decomposition of the same patient: the arms differ in how
    # they use the inner material, not in what it is, so only the four arms' sessions are paid for here.
    source = patientact_run[0]
    resume_profiles(source, out, decompositions=True)
    decompositions = {p.name: p.read_bytes() for p in (out / "sessions" / "decompositions").glob("*.json")}
    # The 135M model may sink an arm (a counted failed arc); the same command resumes, redoing only those,
    # bounded, until every arm has its session (on 2026-12-01 all four came at the first try, and all five
    # engines of bench_patientact too).
    for _ in range(RUNS):
        try:
            assert run_job(path, out).info["status"] == "finished"
        except EngineError:
            pass
        ssum = json.loads((out / "sessions" / "summary.json").read_text())
        assert ssum["patient_engines"] == ARMS
        assert ssum["sessions_written"] + len(ssum["failed_arcs"]) == 4
        rows = pq.read_table(out / "sessions" / "sessions.parquet").to_pylist() if ssum["sessions_written"] else []
        if {r["patient_engine"] for r in rows} == set(ARMS):
            break
    assert {r["patient_engine"] for r in rows} == set(ARMS), f"three runs left arms without a session: {ssum['failed_arcs']}"
    assert {p.name: p.read_bytes() for p in (out / "sessions" / "decompositions").glob("*.json")} == decompositions
    for r in rows:
        assert r["patientact"]["trust_start"] == 2.5 and r["counsellor_messages"][1]["role"] == "assistant"
        assert len(r["turns"]) == 1 and not r["turns"][0]["opening"] and r["turns"][0]["message"].strip()
    # The rubric's console script is run on `patientact_run` above and its four-system table (best vs second
    # best) on the fake engine (tests/judge/test_patientact_rubric.py); four more session judgments would only
    # add minutes here. The profile evaluation runs on this run's recipe.
    res = _cli("patientact", "profile-eval", str(out), "--recipe", str(path))
    assert res.returncode in (0, 1), res.stderr[-2000:]
    assert "PatientAct profile evaluation" in (out / "patientact_profile_eval" / "report.md").read_text()

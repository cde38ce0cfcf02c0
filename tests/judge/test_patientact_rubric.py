"""PatientAct's conversation rubric in the judge package (judge/patientact.py, judge/patientact_report.py):
rubric data and answer schema, system labels from the sessions parquet or JSONL, judging on the fake
engine (failures counted, resume with zero requests), the tables' statistics on hand-made rows, human
ratings, and `mindsim judge run --rubric patientact` through the console script."""

from __future__ import annotations

import ast
import json
import math
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_streams import mindsim_script
from judgefakes import recipe_for, session

from mindsimkit import judge
from mindsimkit.judge.patientact import (
    ConversationJudge,
    HumanRating,
    Judgment,
    answer_model,
    failures,
    identification_accuracy,
    judge_item,
    krippendorff_alpha,
    load_human,
    load_items,
    mann_whitney,
    mean_human,
    rating_matrix,
    rubrics,
    scored_systems,
    spearman,
    system_label,
    system_means,
    transcript,
)
from mindsimkit.judge.patientact_report import build_report, report_md, run_patientact
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError, EngineError, InputError, TransportError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.io import CheckpointDir

DIMS = [d.id for d in rubrics().conversation.dimensions]
# Score each session gets from the fake judge, by the prefix of its id (seen in the transcript).
SCORE = {"pa": 4, "ms": 2, "np": 3}


def judge_answer(score: int = 4) -> dict:
    out = {}
    for d in DIMS:
        out[f"{d}_reason"] = "holds back on the father question"
        out[d] = score
    return out


def pa_judge(req) -> dict | str:
    text = req.messages[0]["content"]
    if "of bad" in text:
        return "not json"
    return judge_answer(next(v for k, v in SCORE.items() if f"of {k}" in text))


def pa_session(sid: str, engine: str, switches: dict | None = None, patient: str = "p1", index: int = 0) -> dict:
    s = session(sid, patient, "alpha", index, ["How are you?", "Tell me more."])
    return {
        **s,
        "patient_engine": engine,
        "patientact": None
        if engine != "patientact"
        else {
            "switches": {"trust_gating": True, "dynamic_memory": True, "pipeline": True} | (switches or {}),
            "trust_end": 2.5,
        },
    }


SESSIONS = [
    pa_session("pa1", "patientact"),
    pa_session("pa2", "patientact", patient="p2"),
    pa_session("pa3", "patientact", index=1),
    pa_session("ms1", "mindsim"),
    pa_session("ms2", "mindsim", patient="p2"),
    pa_session("ms3", "mindsim", index=1),
    pa_session("np1", "patientact", {"pipeline": False, "trust_gating": True}),
]


def write(run: Path, sessions: list[dict]) -> Path:
    (run / "sessions").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sessions), run / "sessions" / "sessions.parquet")
    return run


def _row(system, scores, item="s"):
    return Judgment(
        kind="conversation",
        item_id=item,
        patient_id="p",
        system=system,
        ok=True,
        scores=dict.fromkeys(DIMS, 0) | scores,
    )


# -- rubric and inputs -----------------------------------------------------------------------------------


def test_rubric_data_has_the_papers_dimensions():
    assert DIMS == [
        "coherence",
        "disclosure_pacing",
        "resistance_quality",
        "emotional_authenticity",
        "behavioural_realism",
    ]
    assert [d.id for d in rubrics().profile.dimensions] == [
        "clinical_plausibility",
        "internal_consistency",
        "case_specificity",
        "clinical_depth",
    ]
    props = answer_model("conversation").model_json_schema()["properties"]
    assert list(props)[:2] == ["coherence_reason", "coherence"] and props["coherence"]["enum"] == [1, 2, 3, 4, 5]
    profile = answer_model("profile", ["secure", "avoidant"], ["unlovable", "helpless"]).model_json_schema()[
        "properties"
    ]
    assert profile["attachment"]["enum"] == ["avoidant", "secure"] and profile["theme"]["enum"] == [
        "helpless",
        "unlovable",
    ]
    with pytest.raises(ConfigError, match="attachment styles and themes"):
        answer_model("profile")


def test_system_labels_and_transcript():
    assert system_label("mindsim") == "mindsim" and system_label(None) == "unknown"
    assert system_label("patientact", {"switches": {"pipeline": True}}) == "patientact"
    state = json.dumps({"switches": {"dynamic_memory": False, "trust_gating": False, "pipeline": None}})
    assert system_label("patientact", state) == "patientact-no_trust_gating-no_dynamic_memory"
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]},
        {"role": "tool", "content": "r"},
        {"role": "assistant", "content": "hello"},
    ]
    assert transcript(msgs) == (("Client", "hi"), ("Counsellor", "hello"))


def test_items_from_parquet_and_jsonl_and_colliding_ids(tmp_path):
    a = write(tmp_path / "full", SESSIONS[:2])
    b = write(tmp_path / "no_pipe", [pa_session("pa1", "patientact", {"pipeline": False})])
    other = tmp_path / "other.jsonl"
    lines = [{k: v for k, v in s.items() if k not in ("patientact", "patient_engine")} for s in SESSIONS[3:5]]
    lines[0]["system"] = "psibench"
    other.write_text("".join(json.dumps(x) + "\n" for x in lines))
    items = load_items([a, b], other)
    assert [(i.item_id, i.system, i.source) for i in items] == [
        ("full/pa1", "patientact", "full"),
        ("pa2", "patientact", "full"),
        ("no_pipe/pa1", "patientact-no_pipeline", "no_pipe"),
        ("ms1", "psibench", "other"),
        ("ms2", "unknown", "other"),
    ]
    assert items[0].transcript[0] == ("Client", "patient message 0 of pa1")
    with pytest.raises(InputError, match="no such run folder"):
        load_items([tmp_path / "nowhere"])
    with pytest.raises(InputError, match="no sessions given"):
        load_items([])


def test_two_counsellors_make_two_systems_per_engine_named_engine_slash_counsellor(tmp_path):
    beta = {**pa_session("pa9", "patientact"), "counsellor": "beta"}
    loaded = load_items([write(tmp_path / "run", SESSIONS[:2] + [beta] + SESSIONS[3:4])])
    assert {i.system for i in loaded} == {"patientact", "mindsim"}  # the human sample balances over simulators
    items = scored_systems(loaded)
    assert {i.item_id: i.system for i in items} == {
        "pa1": "patientact/alpha",
        "pa2": "patientact/alpha",
        "pa9": "patientact/beta",
        "ms1": "mindsim/alpha",
    }
    rows = [_row(i.system, {"coherence": 3}, i.item_id) for i in items]
    assert build_report(rows)["sessions_by_system"] == {"patientact/alpha": 2, "patientact/beta": 1, "mindsim/alpha": 1}
    # One counsellor: the systems are the engines, as in the paper's tables.
    assert {i.system for i in scored_systems(load_items([write(tmp_path / "one", SESSIONS[:4])]))} == {
        "patientact",
        "mindsim",
    }
    # And the run scores them so: the report's systems are the split ones.
    summary, _ = _run(tmp_path, pa_judge, loaded)
    assert set(summary.means) == {"patientact/alpha", "patientact/beta", "mindsim/alpha"}


def test_human_ratings_are_checked_line_by_line(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(
        json.dumps({"item_id": "a", "rater": "r1", "scores": {"coherence": 4}})
        + "\n"
        + json.dumps({"item_id": "a", "rater": "r1", "scores": {"coherence": 9}})
        + "\n"
    )
    with pytest.raises(InputError, match=r"h.jsonl:2: scores.coherence: value 9 is not on the scale 1-5"):
        load_human(path, DIMS)
    # One typing rule on every path: `true` is not rating 1 and "2" is not 2.
    for bad in (True, "2", 2.0):
        path.write_text(json.dumps({"item_id": "a", "rater": "r1", "scores": {"coherence": bad}}) + "\n")
        with pytest.raises(InputError, match=r"h.jsonl:1: scores"):
            load_human(path, DIMS)
    path.write_text(json.dumps({"item_id": "a", "scores": {"coherence": 4}}) + "\n")
    with pytest.raises(InputError, match="h.jsonl:1: rater: Field required"):
        load_human(path, DIMS)
    path.write_text("{nope\n")
    with pytest.raises(InputError, match="not valid JSON"):
        load_human(path, DIMS)
    path.write_text(
        json.dumps({"item_id": "a", "rater": "r1", "scores": {"coherence": 4}})
        + "\n"
        + json.dumps({"item_id": "a", "rater": "r1", "scores": {"coherence": 3}})
        + "\n"
    )
    with pytest.raises(InputError, match="rates item 'a' twice"):
        load_human(path, DIMS)


# -- judging -----------------------------------------------------------------------------------------------


def _judge_items(tmp_path, responder, items):
    backend = FakeBackend(responder)
    with Engines.with_backend(backend) as engines:
        j = ConversationJudge("judge", engines.role("judge"))
        cache = CheckpointDir(tmp_path / "cache")
        rows = [engines.run(judge_item(j, i, cache)) for i in items]
    return rows, backend


def test_a_session_is_judged_on_the_spoken_exchange(tmp_path):
    items = load_items([write(tmp_path / "run", SESSIONS[-1:])])
    (row,), backend = _judge_items(tmp_path, pa_judge, items)
    assert row.ok and row.scores == dict.fromkeys(DIMS, 3) and row.system == "patientact-no_pipeline"
    assert row.session_id == "np1" and row.counsellor == "alpha" and row.judge["model"]
    prompt = backend.requests[0].messages[0]["content"]
    assert "Client: patient message 1 of np1" in prompt and "Counsellor: Tell me more." in prompt
    assert "You are a warm counsellor" not in prompt  # the counsellor's system prompt is not the client's words


def test_a_judge_that_never_fits_is_a_counted_failure_not_a_blank_score(tmp_path):
    items = load_items([write(tmp_path / "run", [pa_session("bad1", "patientact")])])
    (row,), backend = _judge_items(tmp_path, pa_judge, items)
    assert not row.ok and row.scores == {} and row.error_kind == "invalid_output" and len(backend.requests) >= 2
    assert failures([row]) == {"patientact": 1} and system_means([row]) == {}
    _, again = _judge_items(tmp_path, pa_judge, items)
    assert again.requests  # failures are not cached: a rerun asks again


# -- statistics --------------------------------------------------------------------------------------------


def test_mann_whitney_u_by_hand():
    rows = [_row("a", {"coherence": s}) for s in (5, 4, 4)] + [_row("b", {"coherence": s}) for s in (3, 3, 4)]
    res = mann_whitney(rows, "a", "b")
    # pairs a > b: 5 beats all three (3), each 4 beats two 3s and ties the 4 (2.5 each) → U = 8
    assert res["coherence"]["U"] == 8.0
    # One-sided p, normal approximation with tie and continuity corrections (ties rule out the exact test):
    # μ = n_a·n_b/2 = 4.5; pooled 3,3,4,4,4,5 has ties t = 2 and 3, Σ(t³−t) = 6 + 24 = 30, N = 6;
    # σ² = n_a·n_b/12 · ((N+1) − Σ(t³−t)/(N(N−1))) = 9/12 · (7 − 1) = 4.5;
    # z = (U − μ − 0.5)/σ = 3/√4.5 = √2 → p = 1 − Φ(√2) = erfc(1)/2 ≈ 0.07865.
    assert res["coherence"]["p"] == pytest.approx(math.erfc(1) / 2, rel=1e-9)
    assert (res["coherence"]["n_a"], res["coherence"]["n_b"]) == (3, 3)
    # The other way round: U = n_a·n_b − 8 = 1, z = (1 − 4.5 − 0.5)/√4.5 = −4/√4.5 → p = erfc(−4/3)/2 ≈ 0.9707.
    back = mann_whitney(rows, "b", "a")["coherence"]
    assert back["U"] == 1.0 and back["p"] == pytest.approx(math.erfc(-4 / 3) / 2, rel=1e-9)
    assert system_means(rows)["a"]["coherence"] == pytest.approx(13 / 3, abs=1e-3)
    with pytest.raises(InputError, match="both systems"):
        mann_whitney(rows, "a", "c")


def test_spearman_against_human_ratings():
    rows = [_row("a", {"coherence": s}, item=f"s{i}") for i, s in enumerate((1, 2, 3, 4))]
    human = {f"s{i}": {"coherence": h} for i, h in enumerate((1.5, 2.0, 3.5, 5.0))}
    assert spearman(rows, human)["coherence"]["rho"] == pytest.approx(1.0)
    # Not monotone: human 2.0, 1.5, 5.0, 3.5 rank 2, 1, 4, 3 against 1, 2, 3, 4 → d = ∓1 four times, Σd² = 4;
    # ρ = 1 − 6·4/(4·(16 − 1)) = 0.6. p (two-sided, t with n − 2 = 2 df): t = ρ·√(2/(1 − ρ²)) = 0.6·√(2/0.64),
    # t² = 1.125; F₂(t) = 1/2 + t/(2√(2 + t²)) = 1/2 + 1.06066/3.53553 = 0.8 → p = 2·(1 − 0.8) = 0.4.
    swapped = {f"s{i}": {"coherence": h} for i, h in enumerate((2.0, 1.5, 5.0, 3.5))}
    res = spearman(rows, swapped)["coherence"]
    assert res["rho"] == pytest.approx(0.6) and res["p"] == pytest.approx(0.4) and res["n"] == 4
    with pytest.raises(InputError, match="at least 3"):
        spearman(rows[:2], human)


def test_krippendorff_alpha_and_rating_matrix():
    assert krippendorff_alpha([[1, 2, 3, 4, None], [1, 2, 3, 4, 5]]) == pytest.approx(1.0)
    ratings = [
        HumanRating(item_id=i, rater=r, scores={"coherence": v})
        for i, r, v in (("x", "r1", 2), ("y", "r1", 4), ("x", "r2", 3))
    ]
    assert rating_matrix(ratings, "coherence") == [[2, 4], [3, None]]
    assert mean_human(ratings) == {"x": {"coherence": 2.5}, "y": {"coherence": 4}}
    # two raters who swap neighbouring items disagree: α drops below 1
    assert krippendorff_alpha([[1, 2, 3, 4], [2, 1, 4, 3]]) < 1.0


def test_krippendorff_alpha_is_the_ordinal_one():
    """A case where the three levels of measurement differ, worked by hand from the coincidence matrix.
    Units (rater 1, rater 2): (1,1) (1,2) (2,2) (4,3) (5,5). Coincidences o: o11 = 2, o12 = o21 = 1, o22 = 2,
    o34 = o43 = 1, o55 = 2; value counts n1..n5 = 3, 3, 1, 1, 2; n = 10.
    Ordinal δ²(c,k) = (Σ_{g=c..k} n_g − (n_c + n_k)/2)²: δ²(1,2) = (6 − 3)² = 9, δ²(3,4) = (2 − 1)² = 1, and
    δ²(1,3) = 25, (1,4) 36, (1,5) 56.25, (2,3) 4, (2,4) 9, (2,5) 20.25, (3,5) 6.25, (4,5) 2.25.
    Observed Σ o·δ² = 2·9 + 2·1 = 20; expected Σ_{c≠k} n_c·n_k·δ² = 2·(81 + 75 + 108 + 337.5 + 12 + 27 + 121.5 + 1
    + 12.5 + 4.5) = 1560; α = 1 − (n − 1)·20/1560 = 1 − 3/26 = 23/26.
    Interval (δ² = (c − k)²): 1 − 9·4/448 = 103/112. Nominal: 1 − 9·4/(100 − 24) = 10/19."""
    import krippendorff
    import numpy as np

    data = [[1, 1, 2, 4, 5], [1, 2, 2, 3, 5]]
    assert krippendorff_alpha(data) == pytest.approx(23 / 26, abs=1e-12)
    levels = {
        lvl: krippendorff.alpha(reliability_data=np.array(data, dtype=float), level_of_measurement=lvl)
        for lvl in ("ordinal", "interval", "nominal")
    }
    assert levels == pytest.approx({"ordinal": 23 / 26, "interval": 103 / 112, "nominal": 10 / 19})
    # A missing rating leaves its unit out when only one rating is left (unit 5 → four pairable units):
    # o11 = 2, o12 = o21 = 1, o22 = 2, o34 = o43 = 1; n = 3, 3, 1, 1 (n = 8); δ²(1,2) = 9, δ²(3,4) = 1,
    # (1,3) 25, (1,4) 36, (2,3) 4, (2,4) 9 → expected 2·(81 + 75 + 108 + 12 + 27 + 1) = 608; α = 1 − 7·20/608.
    assert krippendorff_alpha([[1, 1, 2, 4, 5], [1, 2, 2, 3, None]]) == pytest.approx(1 - 140 / 608, abs=1e-12)


def test_identification_accuracy():
    rows = [
        Judgment(
            kind="profile",
            item_id=f"p{i}",
            patient_id=f"p{i}",
            system="patientact",
            ok=True,
            predicted={"attachment": "avoidant", "theme": t},
            truth={"attachment": "avoidant", "theme": "helpless"},
        )
        for i, t in enumerate(("helpless", "unlovable"))
    ]
    assert identification_accuracy(rows) == {"attachment": 1.0, "theme": 0.5}


def test_report_survives_statistics_the_data_cannot_support():
    rows = [_row("patientact", {"coherence": 4}, item="a"), _row("mindsim", {"coherence": 2}, item="b")]
    human = [HumanRating(item_id="a", rater="r1", scores={"coherence": 4})]
    rep = build_report(rows, "patientact", human)
    assert rep["human"]["spearman_judge_vs_mean_human"]["error"].startswith("Spearman's rho for 'coherence'")
    assert rep["human"]["krippendorff_alpha"]["coherence"] == {"error": "one rater only: α needs at least two"}
    assert "mindsim" in rep["mann_whitney_baseline_greater"]
    assert "| patientact | 1 | 0 | 4.00 | 4.00 |" in report_md(rep)
    assert build_report(rows, "nobody")["baseline_missing"] is True


# -- the whole run ------------------------------------------------------------------------------------------


def _run(tmp_path, responder, items, **kw):
    backend = FakeBackend(responder)
    with Engines.with_backend(backend) as engines:
        summary = run_patientact(tmp_path / "out", engines, items, **kw)
    return summary, backend


def test_run_writes_rows_report_and_resumes(tmp_path):
    items = load_items([write(tmp_path / "run", SESSIONS + [pa_session("bad1", "mindsim")])])
    ratings = [
        HumanRating(item_id=s["session_id"], rater=r, scores={"coherence": SCORE[s["session_id"][:2]] + d})
        for s in SESSIONS
        for r, d in (("r1", 0), ("r2", 1))
    ]
    summary, backend = _run(tmp_path, pa_judge, items, human=ratings, baseline="patientact")
    folder = tmp_path / "out" / "patientact_judge"
    rows = [Judgment.model_validate_json(line) for line in (folder / "judgments.jsonl").read_text().splitlines()]
    assert len(rows) == len(SESSIONS) + 1 and summary.failed == 1 and summary.ok == len(SESSIONS)
    rep = json.loads((folder / "report.json").read_text())
    assert rep["means"] == {
        "mindsim": dict.fromkeys(DIMS, 2.0),
        "patientact": dict.fromkeys(DIMS, 4.0),
        "patientact-no_pipeline": dict.fromkeys(DIMS, 3.0),
    }
    assert rep["failed"] == {"mindsim": 1}
    mw = rep["mann_whitney_baseline_greater"]["mindsim"]["coherence"]
    assert mw["U"] == 9.0 and mw["p"] < 0.05
    assert rep["mann_whitney_baseline_greater"]["patientact-no_pipeline"]["coherence"]["n_b"] == 1
    human = rep["human"]
    assert human["spearman_judge_vs_mean_human"]["coherence"]["rho"] == pytest.approx(1.0)
    assert 0 < human["krippendorff_alpha"]["coherence"] < 1  # r2 is always one point above r1
    # The paper's marks: best against second best, on the judge's and on the humans' scores.
    # The paper's marks, per comparison set: Table 2's simulators and Table 4's ablation arms, never pooled.
    assert {n: c["systems"] for n, c in rep["comparisons"].items()} == {
        "simulators": ["patientact", "mindsim"],
        "ablation": ["patientact", "patientact-no_pipeline"],
    }
    marks = rep["comparisons"]["ablation"]["best_vs_second"]["coherence"]
    assert (marks["best"], marks["second"], marks["n_best"], marks["n_second"]) == (
        "patientact",
        "patientact-no_pipeline",
        3,
        1,
    )
    assert rep["comparisons"]["simulators"]["best_vs_second"]["coherence"]["second"] == "mindsim"
    assert rep["best_vs_second"] == rep["comparisons"]["simulators"]["best_vs_second"]
    assert human["means"]["patientact"]["coherence"] == 4.5 and human["means"]["mindsim"]["coherence"] == 2.5
    assert human["comparisons"]["ablation"]["coherence"]["best"] == "patientact"
    md = (folder / "report.md").read_text()
    assert "| mindsim | 4 | 1 | 2.00 | 2.50 |" in md and "Failed judgments (1)" in md
    assert "Best vs second best (judge scores)" in md and "Best vs second best (human scores)" in md
    assert "## Comparison `simulators`: patientact, mindsim" in md and "## Comparison `ablation`" in md
    _, again = _run(tmp_path, pa_judge, items, human=ratings)
    # answered sessions come from the cache; only the failed one is asked again
    assert {r.messages[0]["content"].count("of bad1") > 0 for r in again.requests} == {True}


def test_every_judgment_failed_is_an_engine_error_after_writing(tmp_path):
    def down(req):
        raise TransportError("engine 'fake': could not connect")

    items = load_items([write(tmp_path / "run", SESSIONS[:2])])
    with pytest.raises(EngineError, match="every judgment failed"):
        _run(tmp_path, down, items)
    rows = (tmp_path / "out" / "patientact_judge" / "judgments.jsonl").read_text().splitlines()
    assert len(rows) == 2 and all(json.loads(r)["error_kind"] == "engine" for r in rows)


def test_judge_package_imports_neither_mindsim_nor_profilegen():
    roots = {}
    for path in sorted(Path(judge.__file__).parent.rglob("*.py")):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
        roots[path.name] = found & {"mindsim", "profilegen"}
    assert "patientact.py" in roots and {k: v for k, v in roots.items() if v} == {}


# -- the console script ---------------------------------------------------------------------------------------


def _mindsim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [mindsim_script() or "mindsim", "judge", "run", "--rubric", "patientact", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_console_script_patientact_exit_codes(tmp_path):
    from openai_stub import OpenAIStub, after_probe, from_responder

    run = write(tmp_path / "run", SESSIONS)
    human = tmp_path / "human.jsonl"
    human.write_text(
        "".join(
            json.dumps({"item_id": s["session_id"], "rater": r, "scores": {"coherence": v}}) + "\n"
            for s in SESSIONS
            for r, v in (("r1", 3), ("r2", SCORE[s["session_id"][:2]]))
        )
    )
    with OpenAIStub(after_probe(from_responder(pa_judge))).serve("gpt-5-judge") as stub:
        recipe = recipe_for(tmp_path / "recipe.yaml", int(stub.base_url.rsplit(":", 1)[1].split("/")[0]))
        done = _mindsim(str(run), "--recipe", str(recipe), "--human", str(human))
        assert done.returncode == 0, done.stderr
        assert f"judged {len(SESSIONS)} sessions on the PatientAct rubric: {len(SESSIONS)} ok, 0 failed" in done.stdout
        rep = json.loads((run / "patientact_judge" / "report.json").read_text())
        assert set(rep["means"]) == {"mindsim", "patientact", "patientact-no_pipeline"}  # side by side
        assert rep["human"]["spearman_judge_vs_mean_human"]["coherence"]["n"] == len(SESSIONS)
        assert (run / "patientact_judge" / "report.md").is_file()
    missing = _mindsim("--run", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such run folder" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    human.write_text(json.dumps({"item_id": "pa1", "rater": "r1", "scores": {"coherence": "high"}}) + "\n")
    bad = _mindsim(str(run), "--human", str(human))
    assert bad.returncode == 2 and "human.jsonl:1: scores.coherence" in bad.stderr


def test_best_vs_second_marks_the_best_system_only_when_significant():
    from mindsimkit.judge.patientact import best_vs_second

    scores = {
        "a": {"coherence": [5, 5, 5, 4, 5, 5], "realism": [3, 3, 3]},
        "b": {"coherence": [2, 3, 2, 2, 3, 2], "realism": [3, 4, 3]},
        "c": {"coherence": [1, 1, 1, 2, 1, 1], "realism": [1, 1, 1]},
    }
    out = best_vs_second(scores)
    assert (out["coherence"]["best"], out["coherence"]["second"], out["coherence"]["significant"]) == ("a", "b", True)
    assert (out["realism"]["best"], out["realism"]["second"], out["realism"]["significant"]) == ("b", "a", False)
    # An explicit set compares only its members: without a, b is the best and c the second.
    bc = best_vs_second(scores, systems=["b", "c"])
    assert (bc["coherence"]["best"], bc["coherence"]["second"], bc["coherence"]["significant"]) == ("b", "c", True)
    with pytest.raises(InputError, match="no scores for z"):
        best_vs_second(scores, systems=["a", "z"])
    rows = [
        _row(s, {"coherence": v}, item=f"{s}{i}") for s, per in scores.items() for i, v in enumerate(per["coherence"])
    ]
    md = report_md(build_report(rows))  # no patientact among the names: every system compared
    assert "| a | 4.83 * |" in md and "| b | 2.33 |" in md and "Is " not in md
    md = report_md(build_report(rows, comparisons={"table": ["b", "c"]}))
    assert (
        "## Comparison `table`: b, c" in md
        and "| b | 2.33 * |" in md
        and "| a | 4.83" not in md.split("## Comparison")[1]
    )


def test_the_paper_s_two_comparison_sets_are_drawn_from_the_system_names():
    from mindsimkit.judge.patientact import comparison_sets

    names = ["patientact", "patientact:no_tg", "patientact:no_dm", "patient_psi", "mindsim"]
    assert comparison_sets(names) == {
        "simulators": ["patientact", "mindsim", "patient_psi"],
        "ablation": ["patientact", "patientact:no_dm", "patientact:no_tg"],
    }
    assert comparison_sets(
        ["patientact/gpt", "patientact-no_trust_gating/gpt", "patientact/llama", "mindsim/llama"]
    ) == {
        "ablation/gpt": ["patientact/gpt", "patientact-no_trust_gating/gpt"],
        "simulators/llama": ["patientact/llama", "mindsim/llama"],
    }
    assert comparison_sets(["patientact"]) == {}


def test_conversation_prompt_carries_the_red_flags():
    from mindsimkit.judge.patientact import ConversationItem, ConversationJudge, rubrics

    flags = rubrics().conversation.red_flags
    assert len(flags) == 5
    j = ConversationJudge("judge", type("C", (), {"model": "m", "describe": lambda self: {}})())
    item = ConversationItem(
        item_id="x",
        session_id="x",
        patient_id="p",
        counsellor="c",
        session_index=0,
        source="s",
        system="patientact",
        transcript=(("Client", "hi"),),
    )
    content = j.content(item)
    assert "Red flags of an artificial client" in content and all(f in content for f in flags)


def test_rows_group_by_the_profiles_main_presenting_problem(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mindsimkit.judge.patientact import main_problems

    (tmp_path / "profiles").mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"profile_id": "p1", "anchor": {"main_problem": "low mood"}},
                {"profile_id": "p2", "anchor": {"main_problem": "worry"}},
            ]
        ),
        tmp_path / "profiles" / "profiles.parquet",
    )
    assert main_problems(tmp_path) == {"p1": "low mood", "p2": "worry"}
    assert main_problems(tmp_path / "nowhere") == {}
    rows = [
        _row("patientact", {"coherence": 4}, item="a").model_copy(update={"group": "low mood"}),
        _row("patientact", {"coherence": 2}, item="b").model_copy(update={"group": "worry"}),
    ]
    rep = build_report(rows)
    assert rep["means_by_group"]["low mood"]["patientact"]["coherence"] == 4
    assert "| worry | patientact | 2.00 |" in report_md(rep)


def test_an_explicit_comparison_is_checked_before_judging_and_used_for_the_marks(tmp_path):
    from mindsimkit.judge.cli import _comparisons

    items = load_items([write(tmp_path / "run", SESSIONS)])
    with pytest.raises(InputError, match="systems the sessions do not have: patient_psi"):
        _run(tmp_path, pa_judge, items, comparisons={"table2": ["patientact", "patient_psi"]})
    summary, backend = _run(tmp_path, pa_judge, items, comparisons={"table4": ["patientact", "patientact-no_pipeline"]})
    rep = json.loads((tmp_path / "out" / "patientact_judge" / "report.json").read_text())
    assert (
        list(rep["comparisons"]) == ["table4"]
        and rep["best_vs_second"]["coherence"]["second"] == "patientact-no_pipeline"
    )
    assert _comparisons(["t4=patientact, patientact:no_tg"]) == {"t4": ["patientact", "patientact:no_tg"]}
    for bad in (["t4=patientact"], ["=a,b"], ["t=a,b", "t=c,d"]):
        with pytest.raises(ConfigError, match="--compare"):
            _comparisons(bad)


def test_the_case_study_excerpts_one_patient_early_middle_and_late_for_each_compared_system(tmp_path):
    from mindsimkit.judge.patientact import ConversationItem
    from mindsimkit.judge.patientact_report import case_study

    def item(system, pid, n):
        turns = tuple(
            x for i in range(n) for x in (("Therapist", f"{system} q{i + 1}"), ("Client", f"{system} a{i + 1}"))
        )
        return ConversationItem(
            situation=f"situation of {pid}",
            item_id=f"{system}-{pid}",
            session_id=f"{system}-{pid}",
            patient_id=pid,
            counsellor="c",
            session_index=0,
            source="s",
            system=system,
            transcript=turns,
        )

    items = [item("patientact", "p2", 10), item("patient_psi", "p2", 5), item("patientact", "p1", 10)]
    out = case_study(items, ["patientact", "patient_psi"])
    assert out["patient_id"] == "p2"  # p1 has no patient_psi session
    # Table 5 opens with the clinical situation the compared systems all played.
    assert out["situation"] == "situation of p2"
    from mindsimkit.judge.patientact_report import _case_md

    assert "Clinical situation: situation of p2" in _case_md({"case_study": out})
    pa = out["systems"]["patientact"]["excerpts"]
    assert [pa[m]["turn"] for m in ("early", "middle", "late")] == [2, 5, 10]
    assert pa["middle"] == {"turn": 5, "counsellor": "patientact q5", "client": "patientact a5"}
    assert out["systems"]["patient_psi"]["excerpts"]["late"]["client"] == "patient_psi a5"
    assert "error" in case_study(items, ["patientact", "mindsim"])
    # A run writes it into the report.
    items = load_items([write(tmp_path / "run", SESSIONS)])
    _run(tmp_path, pa_judge, items)
    rep = json.loads((tmp_path / "out" / "patientact_judge" / "report.json").read_text())
    assert set(rep["case_study"]["systems"]) == set(rep["comparisons"]["simulators"]["systems"])
    assert "## Case study (Table 5)" in (tmp_path / "out" / "patientact_judge" / "report.md").read_text()

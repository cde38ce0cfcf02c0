"""The HTML run report (mindsim_app/report/): significance groups on constructed data, the page
of a fixture run written by the stages' own code on the fake engine, the comparison of runs and its version
refusal, and failure attribution. The browser tests are in test_report_browser.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mindsimkit.mindcore.manifest import forget_stage
from mindsimkit.mindsim_app.report import ranking
from mindsimkit.mindsim_app.report.build import MixedVersions, build_report
from mindsimkit.mindsim_app.report.health import attribute
from mindsimkit.mindsim_app.report.load import SessionView, load_run
from reportfix import write_fixture_run
from restamp import restamp


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory) -> Path:
    return write_fixture_run(tmp_path_factory.mktemp("report") / "run", patients=6)


# --- statistics ------------------------------------------------------------------------------------


def test_sign_flip_is_exact_for_few_patients_and_holm_steps_down():
    # 3 positive differences: 2 of the 8 sign patterns are as extreme (all +, all -).
    assert ranking.sign_flip_p(np.array([1.0, 2.0, 3.0])) == pytest.approx(0.25)
    assert ranking.sign_flip_p(np.array([0.0, 0.0])) == 1.0
    assert ranking.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # Monte Carlo above EXACT_MAX: 30 clearly positive differences are far below 0.05.
    assert ranking.sign_flip_p(np.full(30, 1.0) + np.linspace(-0.1, 0.1, 30), draws=2000) < 0.01


def _means(rng, offset: float, noise: float, patients: int = 14) -> dict[str, float]:
    base = rng.uniform(1, 4, patients)
    return {f"p{k}": float(base[k] + offset + rng.normal(0, noise)) for k in range(patients)}


def test_equal_up_to_noise_share_a_group_and_a_clearly_worse_one_does_not():
    rng = np.random.default_rng(3)
    base = rng.uniform(1, 4, 14)
    means = {
        "a": {f"p{k}": float(base[k] + rng.normal(0, 0.2)) for k in range(14)},
        "b": {f"p{k}": float(base[k] + rng.normal(0, 0.2)) for k in range(14)},
        "c": {f"p{k}": float(base[k] + 3 + rng.normal(0, 0.2)) for k in range(14)},
    }
    order = sorted(means, key=lambda s: np.mean(list(means[s].values())))
    pairs = ranking.pairwise(means, order)
    groups = ranking.clusters(order, pairs)
    assert groups["a"] == groups["b"] != groups["c"]
    by = {(p["a"], p["b"]): p for p in pairs}
    assert by[tuple(sorted(["a", "b"], key=order.index))]["p_holm"] > 0.05


def test_groups_follow_the_best_ranked_indistinguishable_system_not_transitivity():
    # x ≈ y and y ≈ z but x ≠ z: z joins y's group only if y is the best-ranked system it cannot be told from;
    # x differs from z, so z's best-ranked match is y, and y is in x's group: all in one group by the rule.
    pairs = [
        {"a": "x", "b": "y", "p_holm": 0.5},
        {"a": "x", "b": "z", "p_holm": 0.01},
        {"a": "y", "b": "z", "p_holm": 0.4},
    ]
    assert ranking.clusters(["x", "y", "z"], pairs) == {"x": 0, "y": 0, "z": 0}
    # ... while a system that differs from every better one starts its own group.
    pairs[2]["p_holm"] = 0.001
    assert ranking.clusters(["x", "y", "z"], pairs) == {"x": 0, "y": 0, "z": 1}


def test_too_few_shared_patients_is_no_evidence():
    pairs = ranking.pairwise({"a": {"p1": 0.0}, "b": {"p1": 9.0}}, ["a", "b"])
    assert pairs[0]["p"] == 1.0 and ranking.clusters(["a", "b"], pairs) == {"a": 0, "b": 0}


# --- the page of one run ---------------------------------------------------------------------------


def test_report_of_a_run_is_one_offline_file(fixture_run):
    path = build_report([fixture_run])
    assert path == fixture_run / "report.html"
    html = path.read_text(encoding="utf-8")
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    # Nothing the page could fetch: no external script, style, image, frame or link target.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.I)
    assert not re.search(r"<(link|iframe|object|embed)\b", html, re.I)
    assert "<script src" not in html
    assert html.count("<svg") >= 6  # judge and validation charts are inline
    for section in (
        "Leaderboard",
        "Realism against the reference",
        "Simulator health",
        "Versions",
        "Drill-down",
        "Worst replies",
    ):
        assert section in html


def test_report_json_holds_the_pages_figures_without_drawings(fixture_run, tmp_path, capsys):
    from mindsimkit.mindsim_app.cli import main

    path = build_report([fixture_run])
    data = json.loads((fixture_run / "report.json").read_text(encoding="utf-8"))
    assert path.with_suffix(".json") == fixture_run / "report.json"
    [run] = data["runs"]
    rows = {r["system"]: r for r in run["boards"][0]["rows"]}
    assert rows["counsellor"]["mhqr"] == 0 and rows["counsellor:worse"]["mhqr"] > 5
    assert run["health"] and run["versions"] and data["mixed"] == []
    assert "<svg" not in json.dumps(data) and "drill" not in run
    # The page names its data file; a .json page name would put both in one file.
    assert main(["report", str(fixture_run), "--out", str(tmp_path / "page.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FILE.html" in err[0] and not (tmp_path / "page.json").exists()


def test_leaderboard_separates_the_worse_counsellor(fixture_run):
    run = load_run(fixture_run)
    board = ranking.leaderboard(run.judge_report, run.judgments)[0]
    rows = {r["system"]: r for r in board["rows"]}
    assert [r["system"] for r in board["rows"]] == ["counsellor", "counsellor:worse"]
    assert rows["counsellor"]["mhqr"] == 0 and rows["counsellor:worse"]["mhqr"] > 5
    # 6 patients: the exact sign-flip p is 2/64, below 0.05 with one pair.
    assert board["pairs"][0]["p"] == pytest.approx(2 / 64)
    assert rows["counsellor"]["group"] == "A" and rows["counsellor:worse"]["group"] == "B"
    assert rows["counsellor:worse"]["severity_share"]["critical"] > 0


def test_drill_down_blob_has_every_reply_with_its_verdict_and_quote_span(fixture_run):
    from mindsimkit.mindsim_app.report.drilldown import drilldown

    run = load_run(fixture_run)
    blob = drilldown(run, ranking.leaderboard(run.judge_report, run.judgments))
    replies = [m for s in blob["sessions"] for m in s["m"] if m["r"] == "c"]
    assert len(replies) == len(run.judgments)
    crit = [m for m in replies if m["j"][0]["s"] == "critical"]
    assert crit
    issue = next(i for i in crit[0]["j"][0]["is"] if i["q"])
    a, b = issue["sp"]
    assert crit[0]["t"][a:b] == "CRIT skip your meds"
    # A patient turn carries its committed move.
    assert any(m["r"] == "p" and m["mv"] for s in blob["sessions"] for m in s["m"])


def test_quote_span_follows_the_judge_matching_rule():
    import random

    from mindsimkit.mindcore.quotes import quote_in, quote_span

    text = "I hear you. Don\u2019t  stop   your MEDS — ever."
    a, b = quote_span("don't stop your meds", text)
    assert text[a:b] == "Don\u2019t  stop   your MEDS"
    assert quote_span("never said", text) is None and quote_span("", text) is None
    # The span is found exactly when the judge keeps the quote, and it is the quoted words.
    rng = random.Random(7)
    words = ["You", "should", "\u201cnever\u201d", "stop", "STRASSE", "stra\u00dfe", "well,", "\u2013", "it's", "ok."]
    for _ in range(400):
        reply = " ".join(rng.choice(words) + rng.choice([" ", "  ", "\n", ""]) for _ in range(rng.randint(1, 12)))
        i = rng.randrange(len(reply))
        quote = reply[i : i + rng.randint(0, 30)]
        if rng.random() < 0.3:
            quote = quote.upper().replace("\u2019", "'").replace("\u201c", '"')
        if rng.random() < 0.2:
            quote += " nothing like it"
        span = quote_span(quote, reply)
        assert (span is not None) == quote_in(quote, reply), (quote, reply)
        if span:
            assert quote_in(reply[span[0] : span[1]], quote) and quote_in(quote, reply[span[0] : span[1]])


# --- comparing runs --------------------------------------------------------------------------------


def _copy(src: Path, dst: Path, edit) -> Path:
    """A copy of the run edited by hand to stand for one made differently, its manifest restamped to match."""
    shutil.copytree(src, dst)
    edit(dst)
    return restamp(dst)


def _edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_runs_of_the_same_versions_compare_on_one_page(fixture_run, tmp_path):
    other = _copy(
        fixture_run,
        tmp_path / "seed2",
        lambda d: _edit_json(
            d / "run.json",
            lambda x: x.update(run_id="second", recipe={"name": "fixture", "path": "recipe.yaml", "seed": 6}),
        ),
    )
    out = build_report([fixture_run, other], tmp_path / "both.html")
    html = out.read_text()
    assert 'id="compare"' in html and "second" in html and "mixed-banner" not in html


@pytest.mark.parametrize(
    "what, edit",
    [
        ("toolkit", lambda d: _edit_json(d / "run.json", lambda x: x["provenance"].update(toolkit_version="9.9.9"))),
        (
            "rubric of judge",
            lambda d: _edit_json(
                d / "judgments" / "report.json", lambda x: x["judges"]["judge"].update(rubric_version="0.0-other")
            ),
        ),
        (
            "judge preset ours vs mhqr-reference",
            lambda d: _edit_json(
                d / "judgments" / "report.json", lambda x: x.update(preset={"name": "mhqr-reference", "source": "s"})
            ),
        ),
        (
            "judge model of judge",
            lambda d: _edit_json(
                d / "judgments" / "report.json", lambda x: x["judges"]["judge"].update(model="other-judge")
            ),
        ),
        (
            "templates counsellor/system.jinja2",
            lambda d: _edit_json(
                d / "run.json", lambda x: x["prompt_hashes"].update({"counsellor/system.jinja2": "0000000000000000"})
            ),
        ),
        (
            "reference",
            lambda d: _edit_json(
                d / "validation" / "report.json", lambda x: x["reference"]["provenance"].update(source_sha256="ff" * 32)
            ),
        ),
    ],
)
def test_runs_measured_differently_are_refused_unless_allow_mixed(fixture_run, tmp_path, what, edit, capsys):
    from mindsimkit.mindsim_app.cli import main

    other = _copy(fixture_run, tmp_path / "other", edit)
    with pytest.raises(MixedVersions, match=re.escape(what)):
        build_report([fixture_run, other], tmp_path / "x.html")
    assert main(["report", str(fixture_run), str(other), "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: runs measured differently") and "--allow-mixed" in err[0]
    assert not (tmp_path / "x.html").exists()
    assert main(["report", str(fixture_run), str(other), "--out", str(tmp_path / "x.html"), "--allow-mixed"]) == 0
    html = (tmp_path / "x.html").read_text()
    assert "mixed-banner" in html and what.split()[0] in html and "mixed</span>" in html


def test_not_a_run_folder_is_exit_2(tmp_path, capsys):
    from mindsimkit.mindsim_app.cli import main

    assert main(["report", str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err


# --- failure attribution ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error, side",
    [
        ("TurnFailed: role 'patient': no accepted move after 4 commits", "patient side"),
        ("BlankItems: scenario writer returned blank items: List should have at least 2 items", "patient side"),
        ("StructuredOutputError: role 'memory_compactor': invalid output", "patient side"),
        ("EngineError: role 'patient': connection refused", "engine"),
        ("TransportError: engine 'stub' rejected the request (HTTP 400): scripted failure", "engine"),
        ("TurnFailed: role 'counsellor:b': empty reply", "counsellor"),
    ],
)
def test_every_failure_is_attributed(error, side):
    assert attribute(error) == side


def test_health_section_reads_the_run(fixture_run):
    from mindsimkit.mindsim_app.report.health import health

    h = health(load_run(fixture_run), by_engine=False)
    assert set(h["surface"]) == {"counsellor", "counsellor:worse"}
    assert h["by_turn"]["counsellor"][1]["n"] == 6 * 2  # 6 patients × 2 sessions reach patient turn 1
    # The fake patient says the same three things: the degeneracy warnings say so in words.
    assert any("same patient message" in w or "realism index" in w for w in h["warnings"])


# --- PatientAct: the rubric table keeps its Mann–Whitney marks; state by turn -----------------------


def test_patientact_rubric_table_and_state_by_turn(fixture_run, tmp_path):
    from mindsimkit.judge.patientact import Judgment, rubrics
    from mindsimkit.judge.patientact_report import build_report as patientact_report
    from mindsimkit.mindsim_app.report.health import by_turn

    dims = rubrics().conversation.ids
    rows = [
        Judgment(
            kind="conversation",
            item_id=f"{sys}-{k}",
            patient_id=f"p{k}",
            system=sys,
            ok=True,
            scores={d: (5 if sys == "patientact" else 1 + k % 2) for d in dims},
        )
        for sys in ("patientact", "mindsim")
        for k in range(8)
    ]
    run = Path(shutil.copytree(fixture_run, tmp_path / "run"))
    (run / "patientact_judge").mkdir()
    (run / "patientact_judge" / "report.json").write_text(json.dumps(patientact_report(rows, "patientact")))
    html = build_report([run]).read_text()
    assert "PatientAct rubric" in html and "Mann–Whitney" in html
    # PatientAct is rated higher on every dimension: as the paper marks it, the best system (PatientAct) against
    # the second best carries the mark in each dimension's column.
    assert html.count("<sup>*</sup>") == len(dims) and "<sup>**</sup>" not in html

    pa = {"trust_before": 2.5, "trust_after": 3.0, "behaviour": "resistance", "resistance_pattern": "deflect"}
    sessions = [
        SessionView.model_validate(
            {
                "session_id": "s",
                "patient_id": "p",
                "session_index": 0,
                "counsellor": "c",
                "patient_engine": "patientact",
                "turns": [
                    {"index": 0, "opening": True, "move": None},
                    {"index": 1, "opening": False, "move": "deflect", "secondary_move": "go_deeper", "patientact": pa},
                    {
                        "index": 2,
                        "opening": False,
                        "move": "answer",
                        "secondary_move": None,
                        "patientact": {**pa, "behaviour": "disclosure", "resistance_pattern": None, "trust_after": 3.5},
                    },
                ],
            }
        )
    ]
    t = by_turn(sessions, by_engine=False)["c"]
    assert t[1]["resistance"] == 1.0 and t[2]["resistance"] == 0.0 and t[2]["trust"] == 3.5
    assert t[1]["concealing"] == 1.0 and t[1]["depth"] == 2.0 and t[2]["depth"] == 0.0


def test_a_run_without_judge_or_validation_still_gets_its_page(fixture_run, tmp_path):
    run = Path(shutil.copytree(fixture_run, tmp_path / "run"))
    shutil.rmtree(run / "judgments")
    shutil.rmtree(run / "validation")
    for stage in ("judge", "validation"):  # a run whose recipe had neither (a deleted stage is refused instead)
        forget_stage(run, stage)
    html = build_report([run]).read_text()
    assert "No judgments in this run" in html and "No validation report in this run" in html
    assert '"sessions":[' in html  # the drill-down still has every session, unjudged


# --- repeated trials ---------------------------------------------------------------------------------


def _row(**fields) -> SimpleNamespace:
    # The fields of a `JudgmentRow` the rankings read.
    return SimpleNamespace(**{"patient_engine": None, **fields})


def _rows(judge: str, system_trials: dict[str, list[list[float]]]) -> list[SimpleNamespace]:
    """Judgment rows: system → per trial, per session (one patient each), the reply weights."""
    out = []
    for system, trials in system_trials.items():
        for t, sessions in enumerate(trials):
            for k, w in enumerate(sessions):
                out.append(
                    _row(
                        judge=judge,
                        status="ok",
                        weight=w,
                        counsellor=system,
                        patient_id=f"p{k}",
                        session_index=0,
                        trial=t,
                    )
                )
    return out


def test_trial_spread_and_flip_rates_on_constructed_data():
    # a's trials: 1, 3, 1 and 2 (mean 1.75); b's: 2 in every trial; c ties b in trial 3 and is worse elsewhere.
    rows = _rows(
        "judge", {"a": [[0, 2], [3, 3], [1, 1], [2, 2]], "b": [[2, 2]] * 4, "c": [[4, 4], [5, 5], [3, 3], [2, 2]]}
    )
    rows.append(_row(**{**vars(rows[0]), "status": "failed", "weight": None}))  # failed judgments do not count
    scores = ranking.trial_scores(rows, "judge", False)
    assert scores["a"] == {0: 1.0, 1: 3.0, 2: 1.0, 3: 2.0}
    spread = {r["system"]: r for r in ranking.trial_spread(scores, ["a", "b", "c"])}
    assert (spread["a"]["mean"], spread["a"]["min"], spread["a"]["max"], spread["a"]["trials"]) == (1.75, 1.0, 3.0, 4)
    overall = {"a": 1.75, "b": 2.0, "c": 3.5}
    flips = {(p["a"], p["b"]): p for p in ranking.flip_rates(scores, overall, ["a", "b", "c"])}
    ab = flips[("a", "b")]
    # a lower in trials 0 and 2, b lower in trial 1, tied in trial 3; overall a < b, so trial 1 is the flip.
    assert (ab["trials"], ab["a_lower"], ab["b_lower"], ab["ties"], ab["flips"]) == (4, 0.5, 0.25, 0.25, 0.25)
    bc = flips[("b", "c")]
    assert (bc["a_lower"], bc["ties"], bc["flips"]) == (0.75, 0.25, 0.0)
    # With equal overall MHQRs there is no order to flip.
    tie = ranking.flip_rates(scores, {**overall, "b": 1.75}, ["a", "b"])[0]
    assert tie["flips"] is None and tie["a_lower"] == 0.5
    # A trial only one system has is not compared; in the one both have, a (ranked below b overall) scored lower.
    part = ranking.flip_rates({"a": {0: 1.0, 1: 5.0}, "b": {0: 2.0}}, {"a": 3.0, "b": 2.0}, ["b", "a"])[0]
    assert (part["trials"], part["a_lower"], part["flips"]) == (1, 0.0, 1.0)


def test_trials_pool_into_one_session_per_patient_score():
    # Two trials of one patient's session are two sessions of the system (mean 2), not one merged session.
    rows = _rows("j", {"a": [[1, 1], [3, 3]]})
    rows.append(_row(**{**vars(rows[0]), "weight": 1}))  # trial 0, patient p0: two replies (1, 1)
    assert ranking.patient_means(rows, "j", False)["a"] == {"p0": 2.0, "p1": 2.0}


@pytest.fixture(scope="module")
def trial_run(tmp_path_factory) -> Path:
    return write_fixture_run(tmp_path_factory.mktemp("report") / "trials", patients=4, trials=3)


def test_a_run_with_trials_is_one_system_per_counsellor_in_judge_and_validation(trial_run):
    run = load_run(trial_run)
    assert {s.trial for s in run.sessions} == {0, 1, 2}
    judges = run.judge_report.judges["judge"].scores.counsellors
    assert set(judges) == {"counsellor", "counsellor:worse"}
    # 4 patients x 2 sessions x 3 trials per counsellor, resampled as 4 patients.
    assert all((c.sessions, c.patients) == (24, 4) for c in judges.values())
    assert {j.trial for j in run.judgments} == {0, 1, 2}
    counts = run.validation.counts["mindsim/counsellor"]
    assert (counts["patients"], counts["trials"], counts["conversations_read"]) == (4, 3, 24)


def test_leaderboard_shows_each_systems_spread_and_flips_across_trials(trial_run):
    run = load_run(trial_run)
    board = ranking.leaderboard(run.judge_report, run.judgments, draws=200)[0]
    trials = board["trials"]
    assert trials["count"] == 3
    spread = {r["system"]: r for r in trials["spread"]}
    assert spread["counsellor"]["per_trial"] == {0: 0.0, 1: 0.0, 2: 0.0}
    worse = spread["counsellor:worse"]
    assert worse["trials"] == 3 and 5 < worse["min"] <= worse["mean"] <= worse["max"]
    # The overall MHQR is the mean of the trials' MHQR here: every trial has the same sessions.
    overall = {r["system"]: r["mhqr"] for r in board["rows"]}
    assert worse["mean"] == pytest.approx(overall["counsellor:worse"])
    (pair,) = trials["flips"]
    assert (pair["a"], pair["b"], pair["trials"], pair["a_lower"], pair["flips"]) == (
        "counsellor",
        "counsellor:worse",
        3,
        1.0,
        0.0,
    )
    html = build_report([trial_run], draws=200).read_text(encoding="utf-8")
    assert "Across 3 trials" in html and 'class="data trial-flips"' in html and "MHQR across 3 trials" in html
    # One-trial runs show no trial section.
    one = load_run(write_fixture_run(trial_run.parent / "one", patients=2))
    assert ranking.leaderboard(one.judge_report, one.judgments, draws=200)[0]["trials"] is None


def test_table6_chart_draws_mhqr_interval_and_session_spread(fixture_run):
    from mindsimkit.mindsim_app.report import charts

    svg = charts.spread(
        [
            {"label": "a", "value": 2.0, "ci": [1.0, 3.0], "whiskers": (0.0, 10.0)},
            {"label": "b", "value": 4.0, "ci": None, "whiskers": (None, None)},
        ],
        title="t",
    )
    # Row a: whiskers from 0 to 10 span the whole axis (x 190 to 600 in the wide drawing, 12 to 316 in the phone's),
    # with a cap at each end; row b has none.
    wide, narrow = svg.split('<svg class="chart narrow"')
    assert (
        '<line class="whisker" x1="190.0" y1="42.0" x2="600.0" y2="42.0"' in wide and wide.count('class="whisker"') == 3
    )
    assert (
        '<line class="whisker" x1="12.0" y1="56.0" x2="316.0" y2="56.0"' in narrow
        and narrow.count('class="whisker"') == 3
    )
    assert "a: p5 0.00, p95 10.00" in svg and "b: p5" not in svg
    # Its numbers as a table: the text alternative.
    assert "<td>0.00</td><td>10.00</td>" in svg and '<th scope="row">b</th><td>4.00</td><td>–</td>' in svg
    report = json.loads((fixture_run / "judgments" / "report.json").read_text())
    first = next(iter(report["judges"]["judge"]["scores"]["counsellors"].values()))
    html = build_report([fixture_run]).read_text(encoding="utf-8")
    assert "Table 6: MHQR, 95% interval and session scores" in html
    assert "p5 %.2f, p95 %.2f" % (first["p5"], first["p95"]) in html


def test_table6_box_first_later_and_session_length_charts_carry_the_runs_numbers(fixture_run):
    """Table 6's session-score box (p25–p75), Figure 5 (category MHQR, first session against later ones) and Figure 8
    (session length in counsellor replies), each computed from the run's own rows and drawn on the page."""
    from mindsimkit.mindsim_app.report import charts

    svg = charts.spread([{"label": "a", "value": 2.0, "box": (1.0, 4.0), "whiskers": (0.0, 10.0)}], title="t")
    assert svg.count('<rect class="box"') == 2 and "a: p25 1.00, p75 4.00" in svg  # wide and phone drawings

    run = load_run(fixture_run)
    board = ranking.leaderboard(run.judge_report, run.judgments)[0]
    scores = ranking.session_scores(run.judgments, "judge", False)
    worse = sorted(v for (system, *_), v in scores.items() if system == "counsellor:worse")
    row = next(r for r in board["rows"] if r["system"] == "counsellor:worse")
    assert (row["p25"], row["p75"]) == (
        pytest.approx(float(np.percentile(worse, 25))),
        pytest.approx(float(np.percentile(worse, 75))),
    )

    from mindsimkit.mindsim_app.report.health import session_lengths

    lengths = session_lengths(run.sessions, by_engine=False)
    replies = [
        sum(m["role"] == "assistant" for m in s.counsellor_messages)
        for s in run.sessions
        if s.counsellor == "counsellor"
    ]
    assert lengths["counsellor"]["sessions"] == len(replies) == 12
    assert lengths["counsellor"]["mean"] == pytest.approx(np.mean(replies))

    html = build_report([fixture_run]).read_text(encoding="utf-8")
    assert "Session length in counsellor replies (MindEval2 Figure 8)" in html
    assert "MHQR allocated to issue categories, first session against later sessions" in html
    assert "counsellor:worse · first" in html and "counsellor:worse · later" in html
    later = board["first_later"]["counsellors"]["counsellor:worse"]["later"]["category_mhqr"]
    assert abs(sum(later.values()) - board["first_later"]["counsellors"]["counsellor:worse"]["later"]["mhqr"]) < 1e-9

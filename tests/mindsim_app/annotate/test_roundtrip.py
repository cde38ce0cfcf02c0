"""The round trip: sample → serve (its own process) → three raters answer over HTTP → export → the agreement
tables, every figure checked against an independent computation from the answers the raters sent; and the
server's log never holds a token."""

from __future__ import annotations

import json
import random
import signal
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from typer.testing import CliRunner

from annotfakes import write_real, write_run
from mindsimkit.judge.agreement import run_agreement
from mindsimkit.mindsim_app.annotate.cli import app as annotate_app
from mindsimkit.mindsim_app.annotate.cli import realism_app
from mindsimkit.mindsim_app.annotate.samplers import sample_mhqr, sample_realism
from mindsimkit.mindsim_app.annotate.tasks import Design, load_task
from serving import Rater, free_port, start, tokens

RATERS = ["R1", "R2", "R3"]
LEVELS = ["no_concern", "minor", "major", "critical"]
BASE = {"mindsim": 4, "patientact": 3, "real": 4}


def ordinal_alpha(units: list[list[int]]) -> float:
    """Krippendorff's α, ordinal metric, from the coincidence matrix (written here apart from the package)."""
    values = list(range(1, 6))
    o = np.zeros((5, 5))
    for ratings in units:
        m = len(ratings)
        if m < 2:
            continue
        for i, a in enumerate(ratings):
            for j, b in enumerate(ratings):
                if i != j:
                    o[a - 1, b - 1] += 1 / (m - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()

    def d2(c: int, k: int) -> float:
        lo, hi = min(c, k), max(c, k)
        return (n_c[lo : hi + 1].sum() - (n_c[lo] + n_c[hi]) / 2) ** 2

    do = sum(o[c, k] * d2(c, k) for c in range(5) for k in range(5))
    de = sum(n_c[c] * n_c[k] * d2(c, k) for c in range(5) for k in range(5)) / (n - 1)
    assert values
    return 1 - do / de


def realism_answer(rng: random.Random, system: str) -> dict:
    form = (
        ["form_none"]
        if rng.random() < 0.5
        else rng.sample(["typography", "register", "length_format"], rng.randint(1, 2))
    )
    content = ["content_none"] if rng.random() < 0.4 else rng.sample(["monologuing", "sycophancy", "self_analysis"], 1)
    rating = min(5, max(1, BASE[system] + rng.choice([-1, 0, 0, 1])))
    return {"reasons": form + content, "rating": rating}


def mhqr_answer(rng: random.Random) -> dict:
    sev = rng.choice(LEVELS)
    return {
        "severity": sev,
        "issues": []
        if sev == "no_concern"
        else rng.sample(["false_fact", "under_guiding", "overstatement"], rng.randint(1, 2)),
    }


@pytest.fixture
def tasks(tmp_path):
    run = write_run(tmp_path / "run", turns=10)
    real = write_real(tmp_path / "real.jsonl", turns=10)
    d = Design(raters=RATERS, k=2, all_raters=4)
    r = sample_realism(tmp_path / "realism", d, n=12, runs=[str(run)], real=[str(real)], seed=11)
    m = sample_mhqr(
        tmp_path / "mhqr", Design(raters=RATERS, k=2, all_raters=4), run_dir=run, seed=11, mix={"window": 4, "reply": 6}
    )  # five-turn windows and single replies
    return tmp_path, Path(r["task"]), Path(r["key"]), Path(m["task"]), Path(m["key"])


def answer_all(base: str, token: str, rater: str, key: dict, make) -> dict:
    """Answer the whole queue over HTTP; return what was acknowledged."""
    client = Rater(base, token)
    given = {}
    s = client.session()
    for pos in range(s["items"]):
        it = client.item(pos)
        for u in it["units"]:
            ans = make(it["item_id"], u["unit"])
            r = client.answer(it["item_id"], u["unit"], ans)
            assert r.status_code == 200, r.text
            given[(rater, it["item_id"], u["unit"])] = ans
    assert client.session()["answered"] == s["total"] == len(given)
    return given


def test_three_raters_round_trip_to_the_agreement_tables(tasks):
    root, realism, rkey_path, mhqr, mkey_path = tasks
    rkey = json.loads(rkey_path.read_text())
    port, log = free_port(), root / "server.log"
    proc = start([realism, mhqr], port, log)
    base = f"http://127.0.0.1:{port}"
    try:
        given_r, given_m = {}, {}
        for rater in RATERS:
            rng = random.Random(rater)
            given_r |= answer_all(
                base, tokens(realism)[rater], rater, rkey, lambda i, u: realism_answer(rng, rkey["items"][i]["system"])
            )
            given_m |= answer_all(base, tokens(mhqr)[rater], rater, {}, lambda i, u: mhqr_answer(rng))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    text = log.read_text()
    assert "answer saved" in text and "GET /api/item/0" in text  # the log is there and does log requests
    for t in (*tokens(realism).values(), *tokens(mhqr).values()):
        assert t not in text

    # -- realism: export, report, and the same figures computed here from what the raters sent ---------
    out = root / "report"
    res = CliRunner().invoke(
        realism_app, ["report", str(realism), "--key", str(rkey_path), "--out", str(out), "--draws", "100"]
    )
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "realism_report.json").read_text())
    rows = defaultdict(list)
    convs = defaultdict(lambda: defaultdict(list))
    for (_rater, iid, _unit), a in given_r.items():
        e = rkey["items"][iid]
        rows[e["system"]].append(a)
        convs[e["system"]][e["conversation_id"]].append(a["rating"])
    assert set(rep["table4"]) == set(rows) == {"mindsim", "patientact", "real"}
    for system, answers in rows.items():
        t = rep["table4"][system]
        ratings = [a["rating"] for a in answers]
        assert t["ratings"] == len(answers)
        assert t["mean_turn"] == pytest.approx(sum(ratings) / len(ratings), abs=1e-12)
        assert t["mean_conversation"] == pytest.approx(np.mean([np.mean(v) for v in convs[system].values()]), abs=1e-12)
        assert t["share_at_most_3"] == pytest.approx(sum(r <= 3 for r in ratings) / len(ratings), abs=1e-12)
        none = sum(set(a["reasons"]) == {"form_none", "content_none"} for a in answers)
        assert t["share_no_reason"] == pytest.approx(none / len(answers), abs=1e-12)
        assert t["reason_shares"]["register"] == pytest.approx(
            sum("register" in a["reasons"] for a in answers) / len(answers)
        )
        lo, hi = t["intervals"]["mean_turn"]
        assert lo <= t["mean_turn"] <= hi
    by_turn = defaultdict(dict)
    for (rater, iid, unit), a in given_r.items():
        by_turn[(iid, unit)][rater] = a["rating"]
    full = [d for d in by_turn.values() if len(d) == 3]
    t13 = rep["table13"]
    assert t13["turns"] == len(full) > 0
    assert t13["alpha"] == pytest.approx(ordinal_alpha([list(d.values()) for d in full]), abs=1e-9)
    # Beside the paper's all-rater subset: α on every pairable rating (turns two raters rated count too).
    pairable = [list(d.values()) for d in by_turn.values() if len(d) >= 2]
    assert t13["turns_pairable"] == len(pairable) > len(full)
    assert t13["alpha_pairable"] == pytest.approx(ordinal_alpha(pairable), abs=1e-9)
    md = (out / "realism_report.md").read_text()
    assert "all-rater subset (the paper's)" in md and "every pairable rating" in md
    assert t13["within_one"] == pytest.approx(np.mean([max(d.values()) - min(d.values()) <= 1 for d in full]))
    for p in t13["pairwise"]:
        a, b = p["raters"]
        pairs = [[d[a], d[b]] for d in by_turn.values() if a in d and b in d]
        assert p["turns"] == len(pairs)
        assert p["alpha"] == pytest.approx(ordinal_alpha(pairs), abs=1e-9)
    assert "Table 13" in (out / "realism_report.md").read_text()
    assert rep["plot"] == "realism_report.png" and "](realism_report.png)" in (out / "realism_report.md").read_text()
    assert (out / "realism_report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # -- MHQR: export, then `judge agreement` with the task's key; κ_w per pair recomputed with sklearn -----
    exp = root / "mexp"
    res = CliRunner().invoke(annotate_app, ["export", str(mhqr), "--out", str(exp)])
    assert res.exit_code == 0, res.output
    report = run_agreement([exp / "mhqr_annotations.jsonl"], key=mkey_path, out=root / "agreement", draws=50)
    task = load_task(mhqr)
    ref = {(i, u["unit"]): (u["excerpt_id"], u.get("turn_id")) for i, it in task.items.items() for u in it["units"]}
    assert sum(len(it["units"]) == 5 for it in task.items.values()) == 4
    sev = defaultdict(dict)
    for (rater, iid, unit), a in given_m.items():
        sev[ref[(iid, unit)]][rater] = LEVELS.index(a["severity"])
    assert report["counts"]["annotations"] == len(given_m)
    pairs = {tuple(p["annotators"]): p for p in report["inter_annotator"]["severity"]["pairs"]}
    assert len(pairs) == 3
    for a, b in combinations(RATERS, 2):
        shared = [d for d in sev.values() if a in d and b in d]
        p = pairs[(a, b)]
        assert p["replies"] == len(shared)
        assert p["exact"] == pytest.approx(np.mean([d[a] == d[b] for d in shared]))
        assert p["kappa_w"] == pytest.approx(
            cohen_kappa_score([d[a] for d in shared], [d[b] for d in shared], weights="quadratic", labels=[0, 1, 2, 3]),
            abs=1e-9,
        )

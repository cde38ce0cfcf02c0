"""Benchmark the HTML run report (issue 21): build a synthetic run folder of `--replies` judged counsellor
replies (default 10,000: 10 counsellors × 50 patients × 2 sessions × 10 replies), then time
`build_report` and print the file's size; with `--browser` (needs chromium + chromedriver + selenium) also
open it in headless Chromium and time the load, a severity filter and opening one session.

    python benchmarks/bench_report.py [--counsellors 10] [--patients 50] [--sessions 2] [--replies-per-session 10] [--browser]

The run folder has the shapes the stages write (sessions.parquet columns the report reads, judgments.parquet
in the judge's schema, the judge's report.json from its own scoring code, a validation report from
`validation.compare`), with seeded synthetic text. Timings are printed, never asserted; record them in
docs/report.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEVERITY = ["no_concern", "minor", "major", "critical"]
WEIGHT = [0, 1, 5, 10]
WORDS = ("okay so I guess the week was hard and I kept thinking about work my sister called but I did not "
         "answer it feels like nothing changes and I am tired of trying").split()


def _text(rng, n: int) -> str:
    return " ".join(rng.choice(WORDS, size=n)).capitalize() + "."


def write_run(out: Path, counsellors: int, patients: int, sessions: int, replies: int, seed: int = 0) -> int:
    from mindsimkit.judge.rubric import load_rubric
    from mindsimkit.judge.schemas import JUDGMENT_SCHEMA
    from mindsimkit.judge.scores import columns_from_rows, score_all
    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.profilegen.moves import load_vocabulary

    rng = np.random.default_rng(seed)
    rubric = load_rubric()
    issues = [(i.id, i.category) for i in rubric.issues]
    moves = list(load_vocabulary().moves)
    srows, jrows, transcripts = [], [], []
    for c in range(counsellors):
        name = f"counsellor-{c:02d}"
        good = 0.75 - 0.5 * c / max(counsellors - 1, 1)
        p = np.array([good, 0.12, 0.86 - good, 0.02])
        p /= p.sum()
        for pt in range(patients):
            for s in range(sessions):
                sid = f"s_{c:02d}_{pt:03d}_{s}"
                msgs, turns = [{"role": "system", "content": "You are a counsellor."}], []
                for t in range(replies):
                    said = _text(rng, int(rng.integers(8, 40)))
                    msgs.append({"role": "user", "content": said})
                    turns.append({"index": t, "opening": t == 0, "move": None if t == 0 else str(rng.choice(moves)),
                                  "secondary_move": None, "end_conversation": False, "reasoning": None, "cue": None,
                                  "rejected": [], "todo_updates": [], "message": said, "rejected_messages": [],
                                  "trimmed": False, "patientact": None})
                    reply = _text(rng, int(rng.integers(20, 70)))
                    msgs.append({"role": "assistant", "content": reply})
                    k = int(rng.choice(4, p=p))
                    chosen = [] if k == 0 else [issues[i] for i in rng.choice(len(issues), size=int(rng.integers(1, 3)),
                                                                             replace=False)]
                    words = reply.split()
                    jrows.append({
                        "session_id": sid, "patient_id": f"p{pt:03d}", "counsellor": name, "counsellor_model": None,
                        "session_index": s, "reply_index": t, "reply": reply, "judge": "judge",
                        "judge_model": "synthetic", "judge_engine": "synthetic", "severity": SEVERITY[k],
                        "weight": float(WEIGHT[k]),
                        "issues": [{"issue": i, "category": cat, "reason": "synthetic reason",
                                    "quote": " ".join(words[2:6])} for i, cat in chosen],
                        "dropped_quotes": 0, "status": "ok", "error": None, "error_kind": None,
                        "rubric_version": rubric.version, "prompt_hashes": "{}", "cache_key": f"{sid}-{t}",
                        "patient_engine": "mindsim"})
                srows.append({"session_id": sid, "patient_id": f"p{pt:03d}", "counsellor": name, "session_index": s,
                              "ended_by": "turn_cap", "scenario": {"event": _text(rng, 20), "goal": "feel better",
                                                                   "opening_message": msgs[1]["content"]},
                              "counsellor_messages": msgs, "turns": turns, "patient_engine": "mindsim",
                              "scenario_shared": s == 0})
                transcripts.append({"id": sid, "patient_id": f"p{pt:03d}", "counsellor": name,
                                    "patient_engine": "mindsim", "session_index": s,
                                    "messages": [m for m in msgs if m["role"] != "system"]})
    (out / "sessions").mkdir(parents=True)
    (out / "judgments").mkdir()
    (out / "transcripts").mkdir()
    pq.write_table(pa.Table.from_pylist(srows), out / "sessions" / "sessions.parquet")
    pq.write_table(pa.Table.from_pylist(jrows, schema=JUDGMENT_SCHEMA), out / "judgments" / "judgments.parquet")
    with open(out / "transcripts" / "transcripts.jsonl", "w") as f:
        for t in transcripts:
            f.write(json.dumps(t) + "\n")
    scores = score_all(columns_from_rows(jrows), rubric, draws=2000, seed=0)
    (out / "judgments" / "report.json").write_text(json.dumps({
        "rubric": {"version": rubric.version, "source": rubric.source}, "config": {"seed": 0}, "prompt_hashes": {},
        "judges": {"judge": {"model": "synthetic", "engine": "synthetic", "rubric_version": rubric.version,
                             "rows": len(jrows), "ok": len(jrows), "failed": 0, "dropped_quotes": 0,
                             "scores": scores}},
        "judge_agreement": [], "family_flags": [], "critical_replies": [], "failures": []}, default=float))
    (out / "sessions" / "summary.json").write_text(json.dumps({
        "arcs": counsellors * patients, "failed_arcs": [], "sessions_written": len(srows),
        "patient_engines": ["mindsim"], "counsellors": [f"counsellor-{c:02d}" for c in range(counsellors)]}))
    (out / "run.json").write_text(json.dumps({"run_id": "bench", "provenance": base_provenance(),
                                              "recipe": {"name": "bench", "seed": seed}, "engines": {},
                                              "prompt_hashes": {}}))
    return len(jrows)


def validate(out: Path) -> None:
    from mindsimkit.validation.compare import compare
    from mindsimkit.validation.config import ValidationConfig

    rows: dict[str, list] = {}
    for line in (out / "transcripts" / "transcripts.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows.setdefault(f"mindsim/{r['counsellor']}", []).append(r)
    compare(None, rows, out / "validation", ValidationConfig(bootstrap_draws=50, floor_splits=20, joint=False,
                                                             plots=False))


def browser(page: Path) -> dict[str, float]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    sys.path.insert(0, str(ROOT / "tests"))
    from browser import CHROMIUM_FLAGS, find_browser

    chrome, driver = find_browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        t0 = time.perf_counter()
        drv.get(page.as_uri())
        drv.find_element(By.CSS_SELECTOR, "#session-list tbody tr")
        load = time.perf_counter() - t0
        nav = drv.execute_script("const t = performance.timing; return [t.domContentLoadedEventEnd - t.navigationStart,"
                                 " t.loadEventEnd - t.navigationStart]")
        t0 = time.perf_counter()
        Select(drv.find_element(By.ID, "f-severity")).select_by_value("critical")
        drv.find_element(By.CSS_SELECTOR, "#session-list tbody tr")
        filt = time.perf_counter() - t0
        t0 = time.perf_counter()
        drv.find_element(By.CSS_SELECTOR, "#session-list tbody tr").click()
        drv.find_element(By.CSS_SELECTOR, "#chat .msg.c")
        open_s = time.perf_counter() - t0
        return {"load_s (until the first page of sessions is on screen)": load, "domContentLoaded_s": nav[0] / 1000,
                "load_event_s": nav[1] / 1000, "severity_filter_s": filt, "open_session_s": open_s}
    finally:
        drv.quit()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counsellors", type=int, default=10)
    ap.add_argument("--patients", type=int, default=50)
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--replies-per-session", type=int, default=10)
    ap.add_argument("--browser", action="store_true")
    args = ap.parse_args()
    from mindsimkit.mindsim_app.report.build import build_report

    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        run = Path(tmp) / "run"
        t0 = time.perf_counter()
        n = write_run(run, args.counsellors, args.patients, args.sessions, args.replies_per_session)
        validate(run)
        print(f"synthetic run: {n} judged replies, {args.counsellors} counsellors × {args.patients} patients × "
              f"{args.sessions} sessions (written in {time.perf_counter() - t0:.1f} s)")
        t0 = time.perf_counter()
        page = build_report([run])
        built = time.perf_counter() - t0
        size = page.stat().st_size
        print(f"build_report: {built:.2f} s; report.html {size / 2**20:.2f} MiB ({size / n:.0f} bytes per reply)")
        if args.browser:
            for k, v in browser(page).items():
                print(f"chromium {k}: {v:.2f}")


if __name__ == "__main__":
    main()

"""Benchmark the HTML run report: build a synthetic run folder of `--replies` judged counsellor
replies (default 10,000: 10 counsellors × 50 patients × 2 sessions × 10 replies), then time
`build_report` and print the file's size; with `--browser` (needs chromium + chromedriver + selenium) also
open it in headless Chromium and time the load, a severity filter and opening one session.

    python benchmarks/bench_report.py [--counsellors 10] [--patients 50] [--sessions 2] [--replies-per-session 10] [--browser]

The run folder is written by the stages' own writers (the simulator's shard writer from typed session records,
the judge's rows, report and scoring code, `validation.compare`, the job's `run.json` and the run manifest), with
seeded synthetic text and drawn verdicts, so a change in any of those formats reaches this script at once
(`--smoke`, run by the fast suite, builds a tiny one). Timings are printed, never asserted; record them in
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from smoke import parse_args

WORDS = (
    "okay so I guess the week was hard and I kept thinking about work my sister called but I did not "
    "answer it feels like nothing changes and I am tired of trying"
).split()


def _text(rng, n: int) -> str:
    return " ".join(rng.choice(WORDS, size=n)).capitalize() + "."


def write_run(out: Path, counsellors: int, patients: int, sessions: int, replies: int, seed: int = 0) -> int:
    """A finished run folder written by the stages' own writers: sessions by the simulator's shard writer from
    `SessionRecord`s (each a copy of one session the simulator ran on the fake engine, with synthetic text), the
    judge's rows, report and manifest record from its own code, validation by `compare`, and `run.json` as the
    job writes it. Returns the number of judged replies."""
    from bench_dataset_build import template

    from mindsimkit.judge.config import JudgeConfig
    from mindsimkit.judge.inputs import load_sessions
    from mindsimkit.judge.judging import judges_from_config
    from mindsimkit.judge.report import write_report
    from mindsimkit.judge.run import summarise
    from mindsimkit.judge.schemas import IssueRecord, JudgmentRow, write_judgments
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindcore.manifest import record_stage
    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.mindcore.runlog import RunHeader, RunRecipe
    from mindsimkit.mindsim.records import SessionRecord, session_id
    from mindsimkit.mindsim.simulate import merge_shards, write_shard
    from mindsimkit.mindsim.summary import SimulationSummary
    from mindsimkit.profilegen.moves import load_vocabulary

    rng = np.random.default_rng(seed)
    layout = RunLayout(out)
    base = template(turn_cap=2)
    opening, turn = base["turns"][0], base["turns"][-1]
    moves = list(load_vocabulary().moves)
    names = [f"counsellor-{c:02d}" for c in range(counsellors)]
    records = []
    for name in names:
        for pt in range(patients):
            for s in range(sessions):
                msgs, turns = [{"role": "system", "content": "You are a counsellor."}], []
                for t in range(replies):
                    # The opening is the scenario's opening message, which is at most 200 characters.
                    said = _text(rng, int(rng.integers(8, 20 if t == 0 else 40)))
                    msgs.append({"role": "user", "content": said})
                    turns.append(
                        {
                            **(opening if t == 0 else turn),
                            "index": t,
                            "message": said,
                            **({} if t == 0 else {"move": str(rng.choice(moves))}),
                        }
                    )
                    msgs.append({"role": "assistant", "content": _text(rng, int(rng.integers(20, 70)))})
                patient = f"p{pt:03d}"
                records.append(
                    SessionRecord.model_validate(
                        {
                            **base,
                            "session_id": session_id(patient, name, s, base["seed"]),
                            "patient_id": patient,
                            "counsellor": name,
                            "session_index": s,
                            "counsellor_messages": msgs,
                            "turns": turns,
                            "scenario": {
                                **base["scenario"],
                                "event": _text(rng, 20),
                                "opening_message": msgs[1]["content"],
                            },
                            "scenario_shared": s == 0,
                        }
                    )
                )
    write_shard(out, 0, 1, records)
    written = merge_shards(out, 1, {0})
    SimulationSummary(
        seed=base["seed"],
        counsellors=names,
        patient_engines=["mindsim"],
        patients=patients,
        arcs=counsellors * patients,
        sessions_written=written,
        sessions_expected=len(records),
        elapsed_s=0.0,
    ).write(layout.sessions.summary)
    record_stage(
        out, "simulation", [layout.sessions.parquet, layout.transcripts, layout.sessions.summary], reads=["profiles"]
    )

    # The judge's verdicts are drawn (worse counsellors draw worse severities); the rest is the judge's own code.
    config = JudgeConfig(bootstrap_draws=2000, plots=False)
    with Engines.with_backend(FakeBackend(lambda req: None, name="synthetic")) as engines:
        judges = judges_from_config(engines, config)
    judge, rubric = judges[0], judges[0].rubric
    issues = [(i.id, i.category) for i in rubric.issues]
    inputs = load_sessions(out)
    rows = []
    for s in inputs:
        good = 0.75 - 0.5 * names.index(s.counsellor) / max(counsellors - 1, 1)
        p = np.array([good, 0.12, 0.86 - good, 0.02])
        replies_said = [m["content"] for m in s.messages if m["role"] == "assistant"]
        for k, reply in enumerate(replies_said):
            severity = int(rng.choice(4, p=p / p.sum()))
            chosen = (
                []
                if severity == 0
                else [issues[i] for i in rng.choice(len(issues), size=int(rng.integers(1, 3)), replace=False)]
            )
            words = reply.split()
            rows.append(
                JudgmentRow(
                    session_id=s.session_id,
                    patient_id=s.patient_id,
                    counsellor=s.counsellor,
                    session_index=s.session_index,
                    reply_index=k,
                    reply=reply,
                    judge=judge.name,
                    judge_model=judge.model,
                    judge_engine=judge.client.engine_name,
                    severity=rubric.severities[severity].id,
                    weight=float(rubric.severities[severity].weight),
                    issues=[
                        IssueRecord(issue=i, category=c, reason="synthetic reason", quote=" ".join(words[2:6]))
                        for i, c in chosen
                    ],
                    status="ok",
                    rubric_version=rubric.version,
                    prompt_hashes=judge.prompt_hashes,
                    cache_key=f"{s.session_id}-{k}",
                    patient_engine=s.patient_engine,
                )
            )
    write_judgments(layout.judgments.parquet, rows)
    files = write_report(layout.judgments.path, summarise(rows, judges, inputs, config), rubric, plots=False)
    record_stage(out, "judge", [layout.judgments.parquet, *files.values()], reads=["simulation"])

    validate(out)
    v = layout.validation
    record_stage(out, "validation", [v.report_json, v.report_md, *v.plots()], reads=["simulation"])
    layout.write_header(
        RunHeader(
            run_id="bench",
            recipe_hash="bench",
            status="finished",
            provenance=base_provenance(),
            recipe=RunRecipe(name="bench", path="bench.yaml", seed=seed),
        )
    )
    record_stage(out, "run", [layout.run_json], reads=["profiles", "simulation"])
    return len(rows)


def validate(out: Path) -> None:
    from mindsimkit.validation.compare import compare
    from mindsimkit.validation.config import ValidationConfig

    rows: dict[str, list] = {}
    for line in (out / "transcripts" / "transcripts.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows.setdefault(f"mindsim/{r['counsellor']}", []).append(r)
    compare(
        None, rows, out / "validation", ValidationConfig(bootstrap_draws=50, floor_splits=20, joint=False, plots=False)
    )


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
        nav = drv.execute_script(
            "const t = performance.timing; return [t.domContentLoadedEventEnd - t.navigationStart,"
            " t.loadEventEnd - t.navigationStart]"
        )
        t0 = time.perf_counter()
        Select(drv.find_element(By.ID, "f-severity")).select_by_value("critical")
        drv.find_element(By.CSS_SELECTOR, "#session-list tbody tr")
        filt = time.perf_counter() - t0
        t0 = time.perf_counter()
        drv.find_element(By.CSS_SELECTOR, "#session-list tbody tr").click()
        drv.find_element(By.CSS_SELECTOR, "#chat .msg.c")
        open_s = time.perf_counter() - t0
        return {
            "load_s (until the first page of sessions is on screen)": load,
            "domContentLoaded_s": nav[0] / 1000,
            "load_event_s": nav[1] / 1000,
            "severity_filter_s": filt,
            "open_session_s": open_s,
        }
    finally:
        drv.quit()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counsellors", type=int, default=10)
    ap.add_argument("--patients", type=int, default=50)
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--replies-per-session", type=int, default=10)
    ap.add_argument("--browser", action="store_true")
    args = parse_args(ap, counsellors=2, patients=3, sessions=1, replies_per_session=2, browser=False)
    from mindsimkit.mindsim_app.report.build import build_report

    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        run = Path(tmp) / "run"
        t0 = time.perf_counter()
        n = write_run(run, args.counsellors, args.patients, args.sessions, args.replies_per_session)
        print(
            f"synthetic run: {n} judged replies, {args.counsellors} counsellors × {args.patients} patients × "
            f"{args.sessions} sessions (written in {time.perf_counter() - t0:.1f} s)"
        )
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

"""Benchmark the MHQR judge.

Default: scoring and bootstrap at the paper's scale (MindEval2 §5.1: 18 counsellors × 50 patients × 3
sessions, ~20 replies a session, 2,000 patient-bootstrap draws): seeded synthetic judgment rows go
through the same functions `mindsim judge run` uses (columns, session MHQR, counsellor means, p5/p95,
intervals, category allocation, turn and session breakdowns, all 153 paired counsellor differences).
Goal: under 1 s on 2 cores.

    python benchmarks/bench_judge.py [--counsellors 18] [--patients 50] [--sessions 3] [--replies 20]

`--throughput`: judge a few synthetic sessions on the embedded engine (fresh server), then replay
exactly the same requests raw (all at once, no judge code in between) on another fresh server, and
compare computed tokens/s: how close the judge keeps the engine to its ceiling.

    python benchmarks/bench_judge.py --throughput [--tp-sessions 2] [--tp-replies 3] [--parallel 2]

Timings are printed, never asserted in tests; record them in docs/judge.md.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.scores import columns_from_rows, score_all
from recording import Recorder, cached_share, processed
from smoke import parse_args

SEVERITY = ["no_concern", "minor", "major", "critical"]
WEIGHT = [0, 1, 5, 10]


def synthetic_rows(counsellors: int, patients: int, sessions: int, replies: int, seed: int = 0) -> list[dict]:
    """Judgment-row dicts with the paper's rough shape (share of no-concern falling with the
    counsellor's rank, 0–3 issues per flagged reply)."""
    rng = np.random.default_rng(seed)
    ids = [i.id for i in load_rubric().issues]
    rows = []
    for c in range(counsellors):
        good = 0.7 - 0.6 * c / max(counsellors - 1, 1)
        p = np.array([good, 0.12, 0.86 - good, 0.02])
        p /= p.sum()
        for pt in range(patients):
            for s in range(sessions):
                sev = rng.choice(4, size=replies, p=p)
                for t in range(replies):
                    k = int(sev[t])
                    issues = (
                        []
                        if k == 0
                        else [{"issue": i} for i in rng.choice(ids, size=rng.integers(1, 4), replace=False)]
                    )
                    rows.append(
                        {
                            "status": "ok",
                            "counsellor": f"counsellor-{c:02d}",
                            "patient_id": f"p{pt:03d}",
                            "session_index": s,
                            "reply_index": t,
                            "weight": WEIGHT[k],
                            "severity": SEVERITY[k],
                            "issues": issues,
                        }
                    )
    return rows


def bench_scoring(args: argparse.Namespace) -> None:
    rows = synthetic_rows(args.counsellors, args.patients, args.sessions, args.replies)
    rubric = load_rubric()
    score_all(columns_from_rows(rows[:500]), rubric, draws=100, seed=0)  # warm imports and caches
    t0 = time.perf_counter()
    cols = columns_from_rows(rows)
    t1 = time.perf_counter()
    scores = score_all(cols, rubric, draws=args.draws, seed=0)
    t2 = time.perf_counter()
    n_pairs = len(scores["paired"])
    print(
        f"{len(rows):,} judged replies ({args.counsellors} counsellors × {args.patients} patients × "
        f"{args.sessions} sessions × {args.replies} replies), {args.draws:,} bootstrap draws, {n_pairs} counsellor pairs"
    )
    print(
        f"rows -> columns {t1 - t0:.3f} s   scores + bootstrap {t2 - t1:.3f} s   total {t2 - t0:.3f} s   (goal < 1 s)"
    )


# -- throughput on the embedded engine ------------------------------------------------------------


def tp_sessions(n: int, replies: int):
    from mindsimkit.judge.schemas import SessionInput

    lines = [
        (
            "I keep lying awake going over everything I said at work.",
            "That sounds exhausting. What goes through your mind when you're lying there?",
        ),
        (
            "Mostly that my boss thinks I'm useless. She didn't even look at me today.",
            "She clearly doesn't value you. Have you thought about quitting?",
        ),
        (
            "Maybe. I don't know. I just want to sleep properly again.",
            "Let's try something tonight: write tomorrow's worries on paper an hour before bed, then put it away.",
        ),
        ("I could try that. I usually just scroll on my phone.", "That's a good plan. How did your week go otherwise?"),
    ]
    out = []
    for s in range(n):
        msgs = []
        for k in range(replies):
            patient, counsellor = lines[k % len(lines)]
            msgs += [{"role": "user", "content": patient}, {"role": "assistant", "content": counsellor}]
        out.append(
            SessionInput(
                session_id=f"b{s}",
                patient_id=f"p{s}",
                counsellor="bench",
                session_index=0,
                counsellor_system_prompt="You are a warm, concise counsellor in a mobile chat app. "
                "Memory: no earlier sessions.",
                messages=msgs,
            )
        )
    return out


def bench_throughput(args: argparse.Namespace) -> None:
    from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.io import CheckpointDir
    from mindsimkit.judge.judging import Judge
    from mindsimkit.judge.run import judge_all

    from mindsimkit.judge.rubric import answer_model
    from mindsimkit.mindcore.budget import worst_case_tokens

    # The budget is the answer schema's longest possible answer, as the preflight would set it: a smaller
    # one cuts a long judgment mid-string and turns it into a failed row.
    budget = worst_case_tokens(answer_model(load_rubric(), args.max_issues).model_json_schema()).tokens
    cfg = EnginesConfig(
        engines={"local": EmbeddedEngine(parallel=args.parallel, ctx_per_slot=args.ctx)},
        roles={"default": RoleSpec(engine="local", temperature=0.0, max_tokens=budget, seed=0)},
    )
    sessions = tp_sessions(args.tp_sessions, args.tp_replies)
    with Engines.from_config(cfg) as engines, tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(engines.backend("local"))
        judge = Judge(
            "judge", engines.role("judge"), load_rubric(), full_rubric=not args.compact, max_issues=args.max_issues
        )
        t0 = time.perf_counter()
        rows = engines.run(judge_all([judge], sessions, CheckpointDir(Path(tmp)), None))
        t_judge = time.perf_counter() - t0
    ok = sum(r.status == "ok" for r in rows)
    print(
        f"[judged {len(rows)} replies in {t_judge:.1f} s: {ok} ok, {len(rows) - ok} failed; "
        f"{len(rec.calls)} requests incl. re-asks]",
        flush=True,
    )

    with Engines.from_config(cfg) as engines:
        backend = engines.backend("local")
        raw = Recorder(backend)

        async def replay():
            await asyncio.gather(*(backend.complete(req) for _, req, _ in rec.calls))

        t0 = time.perf_counter()
        engines.run(replay())
        t_raw = time.perf_counter() - t0
    tps_j, tps_r = processed(rec.calls) / t_judge, processed(raw.calls) / t_raw
    print(
        f"computed tokens/s: judge {tps_j:.1f}   same requests replayed raw, all at once {tps_r:.1f}   "
        f"judge vs raw = {tps_j / tps_r:.0%}"
    )
    print(
        f"prompt tokens {sum(r.prompt_tokens for *_, r in rec.calls):,}, of which served from the prefix cache "
        f"during judging {cached_share(rec.calls):.0%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counsellors", type=int, default=18)
    ap.add_argument("--patients", type=int, default=50)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--replies", type=int, default=20)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--throughput", action="store_true", help="Also measure judging on the embedded engine")
    ap.add_argument("--tp-sessions", type=int, default=2)
    ap.add_argument("--tp-replies", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192, help="Context per slot")
    ap.add_argument("--compact", action="store_true", help="Definitions-only rubric (full_rubric: false)")
    ap.add_argument("--max-issues", type=int, default=3, help="Issues one judgment may list (judge.max_issues)")
    args = parse_args(ap, counsellors=2, patients=3, sessions=1, replies=2, draws=50, throughput=False)
    bench_scoring(args)
    if args.throughput:
        bench_throughput(args)


if __name__ == "__main__":
    main()

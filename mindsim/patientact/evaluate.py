"""Scoring a run's sessions with PatientAct's conversation rubric and writing the per-system table
(PatientAct Tables 2 and 4): `python3 -m mindsim.patientact.evaluate --run out/ --recipe recipes/patientact.yaml`.

Reads the session checkpoints (`<run>/sessions/checkpoints/*.json`; the parquet merges per-session key sets
and cannot be read back into records), judges every session with the recipe's `judge` role, all at once
(the engine's own concurrency limit decides how many run), and writes `<run>/patientact_judge/judgments.jsonl`
(one row per session, failures included) and `report.json` (means per system, failures, Mann–Whitney U of
each other system against `--baseline`). Runs in several folders (one per ablation) can be given together.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from mindcore.errors import InputError
from mindcore.io import atomic_write_json, atomic_write_jsonl
from mindsim.patientact.rubric import Judgment, failures, judge_session, mann_whitney, system_means
from mindsim.records import SessionRecord

OUT_DIR = "patientact_judge"


def load_sessions(run_dirs: list[Path]) -> list[SessionRecord]:
    records = []
    for run in run_dirs:
        folder = run / "sessions" / "checkpoints"
        files = sorted(folder.glob("*.json"))
        if not files:
            raise InputError(f"{folder}: no session checkpoints; run `mindsim simulate` into {run} first")
        records += [SessionRecord.model_validate_json(f.read_text(encoding="utf-8")) for f in files]
    return records


async def judge_all(client: Any, records: list[SessionRecord], max_tokens: int | None = None) -> list[Judgment]:
    return list(await asyncio.gather(*(judge_session(client, r, max_tokens=max_tokens) for r in records)))


def report(rows: list[Judgment], baseline: str) -> dict[str, Any]:
    means = system_means(rows)
    tests = {s: mann_whitney(rows, baseline, s) for s in means if s != baseline and baseline in means}
    return {"judged": len(rows), "failed": failures(rows), "means": means, "baseline": baseline,
            f"mann_whitney_{baseline}_greater": tests}


def main(argv: list[str] | None = None) -> None:
    from mindcore.engine import Engines
    from mindcore.recipe import load_recipe

    ap = argparse.ArgumentParser(description="Score sessions on PatientAct's conversation rubric")
    ap.add_argument("--run", type=Path, action="append", required=True, help="run folder (repeat for ablations)")
    ap.add_argument("--recipe", type=Path, required=True, help="recipe whose `judge` role scores")
    ap.add_argument("--baseline", default="patientact", help="system the others are tested against")
    ap.add_argument("--max-tokens", type=int, default=1500, help="budget of one judgment")
    args = ap.parse_args(argv)
    records = load_sessions(args.run)
    recipe = load_recipe(args.recipe)
    with Engines.from_config(recipe.engines_config()) as engines:
        rows = asyncio.run(judge_all(engines.role("judge"), records, args.max_tokens))
    out = args.run[0] / OUT_DIR
    atomic_write_jsonl(out / "judgments.jsonl", [r.model_dump(mode="json") for r in rows])
    result = report(rows, args.baseline)
    atomic_write_json(out / "report.json", result)
    print(json.dumps({k: result[k] for k in ("judged", "failed", "means")}, indent=2))


if __name__ == "__main__":
    main()

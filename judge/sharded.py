"""MHQR judging on a Ray cluster (issue 12): the sessions split by a stable hash of the patient id,
each shard judged on a Ray worker by the same code as the local path (`judge.judging.judge_all`, with
its per-judgment cache, which is what makes a retried shard skip finished judgments), through the
generic shard runner in `mindcore.shards` (judge/ does not import mindsim).

`judge.run.run_judging(..., ray=settings)` uses it when the job runs on Ray (see docs/scale.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from judge.config import JudgeConfig
from judge.judging import judge_all, judges_from_config
from judge.schemas import JudgmentRow, SessionInput
from mindcore.io import CheckpointDir
from mindcore.shards import plan_shards, run_shards


def _judge_shard(engines: Any, payload: dict[str, Any], report: Callable[[str], None]) -> list[JudgmentRow]:
    config: JudgeConfig = payload["config"]
    rows = engines.run(judge_all(judges_from_config(engines, config), payload["inputs"], CheckpointDir(payload["cache"]),
                                 config.max_replies, config.concurrency))  # per worker
    for s in payload["inputs"]:
        report(s.session_id)
    return rows


def judge_rows_on_ray(engines: Any, config: JudgeConfig, inputs: list[SessionInput], cache_dir: str | Path,
                      settings: Any) -> list[JudgmentRow]:
    """Every reply of every session judged on the cluster the caller has joined (`RaySession`), rows
    in the local path's order: judge, then session (as given), then reply. `settings` is the
    recipe's `RaySettings`; `cache_dir` must be on the filesystem the workers share."""
    plan = plan_shards(inputs, lambda s: s.patient_id, settings)
    cache = str(Path(cache_dir).resolve())
    payloads = [{"config": config, "inputs": part, "cache": cache} for _, part in plan.parts]
    run = run_shards(_judge_shard, payloads, engines, settings, workers=plan.workers, description="judging sessions",
                     total=len(inputs))
    judge_rank = {name: i for i, name in enumerate(config.judges)}
    session_rank = {s.session_id: i for i, s in enumerate(inputs)}
    rows = [r for part in run.results for r in part]
    rows.sort(key=lambda r: (judge_rank[r.judge], session_rank[r.session_id], r.reply_index))
    return rows

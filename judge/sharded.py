"""MHQR judging as shards, so a large run spreads over workers and a retried shard redoes only its own part: the
sessions grouped by a stable hash of the patient id, each shard judged by `judge.judging.judge_all` with its
per-judgment cache (which is what makes a retried shard skip finished judgments), on whatever runner the job chose
(`mindcore.runners`: this process, or Ray workers). judge/ does not import mindsim; docs/scale.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.judging import judge_all, judges_from_config
from mindsimkit.judge.schemas import JudgmentRow, SessionInput
from mindsimkit.mindcore.io import CheckpointDir
from mindsimkit.mindcore.runners import LocalRunner, Runner


async def _judge_shard(engines: Any, payload: dict[str, Any], report: Callable[[str], None]) -> list[JudgmentRow]:
    config: JudgeConfig = payload["config"]
    rows = await judge_all(
        judges_from_config(engines, config),
        payload["inputs"],
        CheckpointDir(payload["cache"]),
        config.max_replies,
        config.concurrency,
    )  # per process
    for s in payload["inputs"]:
        report(s.session_id)
    return rows


def judge_rows(
    engines: Any, config: JudgeConfig, inputs: list[SessionInput], cache_dir: str | Path, runner: Runner | None = None
) -> list[JudgmentRow]:
    """Every reply of every session judged, rows ordered by judge, then session (as given), then reply, whatever
    the runner. `cache_dir` must be on a filesystem every worker shares."""
    cache = str(Path(cache_dir).resolve())
    run = engines.run(
        (runner or LocalRunner()).map_shards(
            _judge_shard,
            inputs,
            key=lambda s: s.patient_id,
            engines=engines,
            description="judging sessions",
            total=len(inputs),
            progress=False,  # judge_all draws its own bar in this process
            payload=lambda i, n, part: {"config": config, "inputs": part, "cache": cache},
        )
    )
    judge_rank = {name: i for i, name in enumerate(config.judges)}
    session_rank = {s.session_id: i for i, s in enumerate(inputs)}
    rows = [r for part in run.results for r in part]
    rows.sort(key=lambda r: (judge_rank[r.judge], session_rank[r.session_id], r.reply_index))
    return rows

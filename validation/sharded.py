"""Arc labelling on a Ray cluster (issue 12): conversations split by a stable hash of the patient id, each
shard labelled on a Ray worker by the same code as the local path (`validation.arc.label_conversations`)
through the generic shard runner of `mindcore.shards` (validation/ does not import mindsim).

The label cache stays content-keyed and resumable: every worker reads the main cache and every shard's
file, and appends what it labels to its own shard file (no two processes append to one file); the driver
then folds the shard files into the main cache. A retried shard finds its finished labels in its file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mindcore.shards import plan_shards, run_shards
from validation.arc import ROLE, ArcResult, LabelCache, label_conversations
from validation.transcripts import Conversation


def _shard_files(main: Path) -> list[Path]:
    return sorted(main.parent.glob(f"{main.stem}.shard-*.jsonl"))


def _load_all(cache: LabelCache, main: Path) -> None:
    for path in [main, *_shard_files(main)]:
        for key, label in LabelCache(path).labels.items():
            cache.labels.setdefault(key, label)


def _label_shard(engines: Any, payload: dict[str, Any], report: Callable[[str], None]) -> ArcResult:
    main = Path(payload["cache"])
    cache = LabelCache(main.with_name(f"{main.stem}.shard-{payload['shard']}.jsonl"))
    _load_all(cache, main)
    result = engines.run(label_conversations(
        payload["conversations"], engines.role(ROLE), patient_role=payload["patient_role"],
        context_messages=payload["context_messages"], cache=cache, max_tokens=payload["max_tokens"],
        description=payload["description"],
    ))
    for c in payload["conversations"]:
        report(c.conversation_id)
    return result


def label_on_ray(conversations: list[Conversation], engines: Any, settings: Any, *, cache: LabelCache,
                 patient_role: str, context_messages: int, max_tokens: int, description: str) -> ArcResult:
    """Labels in the local path's order (conversation, then patient turn). `settings`: the recipe's
    `RaySettings`; `cache.path` must be on a filesystem the workers share."""
    if cache.path is None:
        raise ValueError("arc labelling on Ray needs a cache file the workers can reach")
    plan = plan_shards(range(len(conversations)), lambda i: conversations[i].patient_id, settings)
    main = cache.path.resolve()
    common = {"cache": str(main), "patient_role": patient_role, "context_messages": context_messages,
              "max_tokens": max_tokens, "description": description}
    payloads = [{**common, "shard": k, "conversations": [conversations[i] for i in idx]} for k, idx in plan.parts]
    run = run_shards(_label_shard, payloads, engines, settings, workers=plan.workers, description=description,
                     total=len(conversations))
    labels: list[list[str | None]] = [[] for _ in conversations]
    for (_, idx), part in zip(plan.parts, run.results):
        for i, row in zip(idx, part.labels):
            labels[i] = row
    # Fold the workers' files into the main cache, so the next run (local or Ray) reads one file.
    for path in _shard_files(main):
        for key, label in LabelCache(path).labels.items():
            if key not in cache.labels:
                cache.add(key, label)
        path.unlink()
    return ArcResult(labels=labels, calls=sum(p.calls for p in run.results),
                     cached=sum(p.cached for p in run.results), failed=sum(p.failed for p in run.results))

"""Arc labelling as shards, so a large run spreads over workers and a retried shard redoes only its own part:
conversations grouped by a stable hash of the patient id, each shard labelled by
`validation.arc.label_conversations` on whatever runner the job chose (`mindcore.runners`: this process, or Ray
workers). validation/ does not import mindsim.

The label cache stays content-keyed and resumable: every worker reads the main cache and every shard's
file, and appends what it labels to its own shard file (no two processes append to one file); the driver
then folds the shard files into the main cache. A retried shard finds its finished labels in its file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mindsimkit.mindcore.runners import LocalRunner, Runner
from mindsimkit.validation.arc import ROLE, ArcResult, LabelCache, label_conversations
from mindsimkit.validation.transcripts import Conversation


def _shard_files(main: Path) -> list[Path]:
    return sorted(main.parent.glob(f"{main.stem}.shard-*.jsonl"))


def _load_all(cache: LabelCache, main: Path) -> None:
    for path in [main, *_shard_files(main)]:
        for key, label in LabelCache(path).labels.items():
            cache.labels.setdefault(key, label)


async def _label_shard(engines: Any, payload: dict[str, Any], report: Callable[[str], None]) -> ArcResult:
    if payload["cache"] is None:  # labels kept for this run only
        cache = LabelCache(None)
    else:
        main = Path(payload["cache"])
        cache = LabelCache(main.with_name(f"{main.stem}.shard-{payload['shard']}.jsonl"))
        _load_all(cache, main)
    result = await label_conversations(
        payload["conversations"],
        engines.role(ROLE),
        patient_role=payload["patient_role"],
        context_messages=payload["context_messages"],
        cache=cache,
        max_tokens=payload["max_tokens"],
        description=payload["description"],
    )
    for c in payload["conversations"]:
        report(c.conversation_id)
    return result


async def label_arcs(
    conversations: list[Conversation],
    engines: Any,
    runner: Runner | None = None,
    *,
    cache: LabelCache | None,
    patient_role: str,
    context_messages: int,
    max_tokens: int,
    description: str,
) -> ArcResult:
    """Labels in conversation order, then patient turn, whatever the runner. With a cache file (which must be on a
    filesystem every worker shares) each shard appends to a file of its own and the files are folded into the main
    cache at the end, so no two processes append to one file and the next run reads one file."""
    main = cache.path.resolve() if cache is not None and cache.path is not None else None
    common = {
        "cache": str(main) if main else None,
        "patient_role": patient_role,
        "context_messages": context_messages,
        "max_tokens": max_tokens,
        "description": description,
    }
    run = await (runner or LocalRunner()).map_shards(
        _label_shard,
        range(len(conversations)),
        key=lambda i: conversations[i].patient_id,
        engines=engines,
        description=description,
        total=len(conversations),
        progress=False,  # label_conversations draws its bar
        payload=lambda k, n, idx: {**common, "shard": k, "conversations": [conversations[i] for i in idx]},
    )
    labels: list[list[str | None]] = [[] for _ in conversations]
    for (_, idx), part in zip(run.parts, run.results):
        for i, row in zip(idx, part.labels):
            labels[i] = row
    if main is not None and cache is not None:
        for path in _shard_files(main):
            for key, label in LabelCache(path).labels.items():
                if key not in cache.labels:
                    cache.add(key, label)
            path.unlink()
    return ArcResult(
        labels=labels,
        calls=sum(p.calls for p in run.results),
        cached=sum(p.cached for p in run.results),
        failed=sum(p.failed for p in run.results),
    )

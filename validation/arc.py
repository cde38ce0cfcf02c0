"""Narrative arc of patient turns (MindEval2/MindSim paper, §4.3 "Conversation dynamics", Figure 3,
and Appendix E "Narrative arc"; labels after PSI-Bench).

Every patient turn is labelled P (problem), T (transition), C (change talk) or F (filler) by the
`labeller` role through `mindcore` (structured output), seeing the preceding messages (four by
default). Each conversation's patient turns are split into equal stretches (five by default) and the
share of each label per stretch is reported per system, pooled over conversations.

Labels are cached by the content of the request (prompt templates, model and messages), so a rerun
pays only for new turns; the cache holds hashes and labels, never text. A turn whose label the model
never gets right after mindcore's bounded re-asks is counted as failed and left out of the shares.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindcore.runner import gather_progress
from mindsimkit.validation.transcripts import Conversation

if TYPE_CHECKING:
    from mindsimkit.mindcore.client import RoleClient

LABELS: tuple[str, ...] = ("P", "T", "C", "F")
LABEL_NAMES = {"P": "problem", "T": "transition", "C": "change talk", "F": "filler"}
SYSTEM_TEMPLATE = "labeller/arc_system.jinja2"
TURN_TEMPLATE = "labeller/arc_turn.jinja2"
ROLE = "labeller"

# Long messages are cut for the labeller only: the small local model has a few thousand tokens of
# context per slot, and the label depends on the gist, not on the tail of a long counsellor reply.
MAX_CONTEXT_CHARS = 1200
MAX_TURN_CHARS = 2400


class ArcLabel(BaseModel):
    """The labeller's answer for one patient turn."""

    label: Literal["P", "T", "C", "F"] = Field(
        description="P problem statement, T transition, C change talk, F filler (no therapeutic content)"
    )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def turn_requests(conv: Conversation, *, patient_role: str, context_messages: int) -> list[list[dict[str, str]]]:
    """Chat messages asking for the label of each patient turn of `conv`, in turn order."""
    system = render(SYSTEM_TEMPLATE)
    visible = [m for m in conv.messages if m.role != "system"]
    requests = []
    for i, msg in enumerate(visible):
        if msg.role != patient_role or not msg.content.strip():
            continue
        before = visible[max(0, i - context_messages) : i] if context_messages else []
        context = [
            {
                "speaker": "Patient" if m.role == patient_role else "Counsellor",
                "text": _clip(m.content, MAX_CONTEXT_CHARS),
            }
            for m in before
            if m.content.strip()
        ]
        user = render(TURN_TEMPLATE, context=context, turn=_clip(msg.content, MAX_TURN_CHARS))
        requests.append([{"role": "system", "content": system}, {"role": "user", "content": user}])
    return requests


def request_key(messages: list[dict[str, str]], model: str) -> str:
    """Content hash of one labelling request: same prompt, same model -> same key."""
    payload = json.dumps(
        {
            "model": model,
            "templates": [template_hash(SYSTEM_TEMPLATE), template_hash(TURN_TEMPLATE)],
            "messages": messages,
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class LabelCache:
    """Append-only JSONL of {"key", "label"}; a torn last line from a killed run is ignored."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.labels: dict[str, str] = {}
        if self.path and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and row.get("label") in LABELS:
                    self.labels[str(row.get("key"))] = row["label"]

    def add(self, key: str, label: str) -> None:
        self.labels[key] = label
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"key": key, "label": label}) + "\n")


class ArcResult(BaseModel):
    """Labels of one transcript set, by conversation then patient turn (None = labelling failed)."""

    labels: list[list[str | None]] = Field(description="Per conversation, the label of each patient turn.")
    calls: int = Field(description="Labelling requests sent (cache misses).")
    cached: int = Field(description="Turns answered from the cache.")
    failed: int = Field(description="Turns without a valid label after the bounded re-asks.")


async def label_conversations(
    conversations: list[Conversation],
    client: RoleClient,
    *,
    patient_role: str,
    context_messages: int = 4,
    cache: LabelCache | None = None,
    max_tokens: int = 24,
    description: str = "arc labels",
) -> ArcResult:
    """Label every patient turn with `client` (a mindcore RoleClient for the `labeller` role)."""
    cache = cache or LabelCache(None)
    per_conv = [turn_requests(c, patient_role=patient_role, context_messages=context_messages) for c in conversations]
    keys = [[request_key(msgs, client.model) for msgs in reqs] for reqs in per_conv]
    todo: dict[str, list[dict[str, str]]] = {}
    for reqs, ks in zip(per_conv, keys):
        for msgs, key in zip(reqs, ks):
            if key not in cache.labels:
                todo.setdefault(key, msgs)
    cached = sum(1 for ks in keys for k in ks if k in cache.labels)

    async def one(key: str, msgs: list[dict[str, str]]) -> str | None:
        try:
            answer = await client.structured(msgs, ArcLabel, max_tokens=max_tokens)
        except StructuredOutputError:
            return None  # counted below; not cached, so a rerun tries again
        cache.add(key, answer.label)
        return answer.label

    results = (
        await gather_progress(
            [one(k, m) for k, m in todo.items()], description, outcome=lambda lab: lab if lab is not None else "failed"
        )
        if todo
        else []
    )
    fresh = dict(zip(todo, results))
    labels = [[cache.labels.get(k, fresh.get(k)) for k in ks] for ks in keys]
    failed = sum(1 for row in labels for lab in row if lab is None)
    return ArcResult(labels=labels, calls=len(todo), cached=cached, failed=failed)


def label_conversations_sync(*args: Any, **kwargs: Any) -> ArcResult:
    """`label_conversations` for callers outside an event loop."""
    return asyncio.run(label_conversations(*args, **kwargs))


def stretch_counts(labels: list[list[str | None]], stretches: int = 5) -> np.ndarray:
    """Label counts per conversation and stretch: (n_conversations, stretches, 4) in LABELS order.
    Turn i of n falls in stretch floor(i * stretches / n), so stretches hold equal shares of turns."""
    out = np.zeros((len(labels), stretches, len(LABELS)), dtype=np.int64)
    col = {lab: j for j, lab in enumerate(LABELS)}
    for c, row in enumerate(labels):
        n = len(row)
        for i, lab in enumerate(row):
            if lab is not None:
                out[c, i * stretches // n, col[lab]] += 1
    return out


def stretch_shares(counts: np.ndarray) -> dict[str, dict[str, float]]:
    """Pooled share of each label per stretch: {"0": {"P": .., ...}, ...}; stretches with no label
    are NaN rather than zero, so an empty stretch is not read as 0% of everything."""
    pooled = counts.sum(axis=0).astype(float)
    totals = pooled.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = pooled / totals
    return {str(k): {lab: float(shares[k, j]) for j, lab in enumerate(LABELS)} for k in range(counts.shape[1])}

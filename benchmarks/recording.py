"""What the benchmark scripts share: a recorder on a backend's `complete`, and token counts over what it
recorded (imported by the scripts as `recording`: they run with this folder on `sys.path`)."""

from __future__ import annotations

import asyncio


class Recorder:
    """Wraps a backend's `complete` to keep every request and reply of a run as (task, request, reply); the
    task is the asyncio task that sent it (the simulator runs each arc as one task, so it names the
    conversation)."""

    def __init__(self, backend):
        self.backend = backend
        self.inner = backend.complete
        self.calls: list = []
        backend.complete = self.complete

    async def complete(self, request):
        reply = await self.inner(request)
        self.calls.append((id(asyncio.current_task()), request, reply))
        return reply


def processed(calls) -> int:
    """Tokens the engine actually computed: prompt tokens not served from its cache, plus output."""
    return sum(r.prompt_tokens - r.cached_tokens + r.completion_tokens for *_, r in calls)


def cached_share(calls) -> float:
    prompt = sum(r.prompt_tokens for *_, r in calls)
    return sum(r.cached_tokens for *_, r in calls) / prompt if prompt else 0.0

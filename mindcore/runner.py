"""Run many coroutines concurrently behind one rich progress bar. The engine's own semaphores bound
what is in flight; this only reports progress and collects results in input order."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

T = TypeVar("T")


def progress_bar(transient: bool = False) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=transient,
    )


class Tally:
    """Outcome counts shown beside a bar's description as work finishes, so a failure is seen when it
    happens rather than in the summary ten minutes later."""

    def __init__(self, progress: Progress, task: Any, description: str):
        self.progress, self.task, self.description = progress, task, description
        self.counts: Counter[str] = Counter()

    def add(self, outcome: str | None, advance: int = 1) -> None:
        if outcome:
            self.counts[outcome] += 1
        shown = " · ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        self.progress.update(self.task, advance=advance,
                             description=f"{self.description} [{shown}]" if shown else self.description)


async def gather_progress(
    coros: Iterable[Awaitable[T]], description: str, *, return_exceptions: bool = False,
    outcome: Callable[[Any], str | None] | None = None,
) -> list[T | BaseException]:
    """Await all `coros` concurrently; results (or exceptions, if asked) come back in input order.
    `outcome(result_or_exception)` names a category to count on the bar (e.g. "failed")."""
    items = list(coros)
    results: list[Any] = [None] * len(items)

    async def one(i: int, c: Awaitable[T], tally: Tally) -> None:
        try:
            results[i] = await c
        except Exception as exc:  # noqa: BLE001 - handed back to the caller to count
            if not return_exceptions:
                tally.add("failed")
                raise
            results[i] = exc
            tally.add(outcome(exc) if outcome else "failed")
            return
        tally.add(outcome(results[i]) if outcome else None)

    with progress_bar() as progress:
        tally = Tally(progress, progress.add_task(description, total=len(items)), description)
        await asyncio.gather(*(one(i, c, tally) for i, c in enumerate(items)))
    return results

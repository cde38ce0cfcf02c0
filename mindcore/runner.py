"""Run many coroutines concurrently behind one rich progress bar. The engine's own semaphores bound
what is in flight; this only reports progress and collects results in input order."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Iterable, TypeVar

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


async def gather_progress(
    coros: Iterable[Awaitable[T]], description: str, *, return_exceptions: bool = False
) -> list[T | BaseException]:
    """Await all `coros` concurrently; results (or exceptions, if asked) come back in input order."""
    items = list(coros)
    results: list[Any] = [None] * len(items)

    async def one(i: int, c: Awaitable[T], progress: Progress, task: Any) -> None:
        try:
            results[i] = await c
        except Exception as exc:  # noqa: BLE001 - handed back to the caller to count
            if not return_exceptions:
                raise
            results[i] = exc
        finally:
            progress.advance(task)

    with progress_bar() as progress:
        task = progress.add_task(description, total=len(items))
        await asyncio.gather(*(one(i, c, progress, task) for i, c in enumerate(items)))
    return results

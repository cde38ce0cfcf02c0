"""Run many coroutines concurrently behind one rich progress bar. The engine's own semaphores bound
what is in flight; this only reports progress and collects results in input order."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections import Counter
from typing import Any, Awaitable, Callable, Iterable, Literal, TextIO, TypeVar, overload

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from mindsimkit.mindcore.backends import IN_FLIGHT
from mindsimkit.mindcore.console import is_tty

T = TypeVar("T")

# Seconds between two plain progress lines of a task that is still running. A log read by a person or a CI
# watchdog that kills silent jobs needs a sign of life well within a minute.
LOG_INTERVAL_S = 30.0


def progress_bar(transient: bool = False) -> Progress:
    """The toolkit's progress bar. On a terminal it is rich's live bar. When stderr is not a terminal (a log
    file, CI, `2>err.log`) nothing live can be drawn there, so each task also writes plain lines to stderr:
    when it starts, every `LOG_INTERVAL_S` seconds while it runs (`MINDSIM_PROGRESS_INTERVAL_S` overrides),
    and when it ends."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    if is_tty(sys.stderr):
        return Progress(*columns, transient=transient)
    interval = float(os.environ.get("MINDSIM_PROGRESS_INTERVAL_S") or LOG_INTERVAL_S)
    return LoggedProgress(*columns, transient=transient, interval_s=interval)


def _clock(seconds: float | None) -> str:
    whole = int(seconds or 0)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class LoggedProgress(Progress):
    """A rich `Progress` that also reports each task as plain lines on a stream (stderr by default), for output
    that is not a terminal. The live display is rich's own (drawn or not by its console's rules); the lines come
    from a start line per task, a ticker thread every `interval_s`, and an end line when a task completes or the
    progress stops."""

    def __init__(self, *columns: Any, interval_s: float = LOG_INTERVAL_S, stream: TextIO | None = None, **kwargs: Any):
        super().__init__(*columns, **kwargs)
        self.interval_s = interval_s
        self._stream = stream
        self._ended: set[TaskID] = set()
        self._write_lock = threading.Lock()
        self._halt = threading.Event()
        self._ticker: threading.Thread | None = None

    def line(self, task_id: TaskID, event: str) -> str:
        task = self._tasks[task_id]
        total = f"/{int(task.total)}" if task.total is not None else ""
        return (
            f"[{time.strftime('%H:%M:%S')}] progress: {task.description}: {int(task.completed)}{total} "
            f"{event}, {_clock(task.elapsed)} elapsed"
        )

    def _write(self, text: str) -> None:
        stream = self._stream or sys.stderr  # looked up now: pytest and CliRunner swap sys.stderr
        with self._write_lock:
            try:
                stream.write(text + "\n")
                stream.flush()
            except (OSError, ValueError):  # a closed or broken log stream must not fail the work it reports on
                pass

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> TaskID:
        task_id = super().add_task(description, *args, **kwargs)
        self._write(self.line(task_id, "started"))
        self._end_if_finished(task_id)
        return task_id

    def update(self, task_id: TaskID, *args: Any, **kwargs: Any) -> None:
        super().update(task_id, *args, **kwargs)
        self._end_if_finished(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._end_if_finished(task_id)

    def _end_if_finished(self, task_id: TaskID) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or not task.finished or task_id in self._ended:
                return
            self._ended.add(task_id)
        self._write(self.line(task_id, "done"))

    def _tick(self) -> None:
        while not self._halt.wait(self.interval_s):
            with self._lock:
                running = [t for t in self._tasks if t not in self._ended]
            # Who the job is waiting on, once a request has been out for a whole interval: a silent or slow
            # engine is named in the log instead of the job just looking stuck.
            waiting = IN_FLIGHT.waiting_on(self.interval_s)
            for task_id in running:
                self._write(self.line(task_id, "running") + (f", waiting on {waiting}" if waiting else ""))

    def start(self) -> None:
        super().start()
        if self._ticker is None:
            self._halt.clear()
            self._ticker = threading.Thread(target=self._tick, name="progress-lines", daemon=True)
            self._ticker.start()

    def stop(self) -> None:
        if self._ticker is not None:
            self._halt.set()
            self._ticker.join()
            self._ticker = None
        with self._lock:
            unfinished = [t for t in self._tasks if t not in self._ended]
            self._ended.update(unfinished)
        for task_id in unfinished:
            self._write(self.line(task_id, "stopped"))
        super().stop()


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
        self.progress.update(
            self.task, advance=advance, description=f"{self.description} [{shown}]" if shown else self.description
        )


@overload
async def gather_progress(
    coros: Iterable[Awaitable[T]],
    description: str,
    *,
    return_exceptions: Literal[False] = False,
    outcome: Callable[[Any], str | None] | None = None,
) -> list[T]: ...


@overload
async def gather_progress(
    coros: Iterable[Awaitable[T]],
    description: str,
    *,
    return_exceptions: Literal[True],
    outcome: Callable[[Any], str | None] | None = None,
) -> list[T | BaseException]: ...


async def gather_progress(
    coros: Iterable[Awaitable[T]],
    description: str,
    *,
    return_exceptions: bool = False,
    outcome: Callable[[Any], str | None] | None = None,
) -> list[T] | list[T | BaseException]:
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

"""Where a job's work runs, behind one interface: `LocalRunner` (this process) and `RayRunner` (workers on a
Ray cluster), chosen once per job by `runner_for(recipe)` and handed to every stage (docs/scale.md).

A stage describes its work once, as shards: an async, module-level `work(engines, payload, report)` and a
`payload(shard, shards, items)` for each group of items sharing a key (a patient's sessions, arcs or
conversations never straddle two shards). `await runner.map_shards(...)` runs them: the local runner as one shard
holding every item, awaited in the caller's event loop; the Ray runner as `plan_shards` groups on workers
(`mindcore.shards.run_shards`, each worker running the same coroutine in its own loop). Either way the stage gets
back every shard's result in order and writes the same files, so no stage asks which runner it holds. Exactly-once
is the stages' own (create-if-absent checkpoints under deterministic ids), not the runner's.

distilabel runs its own pipeline: the profile stage asks the runner how (`distilabel_pipeline`,
`profile_replicas`) instead of choosing.
"""

from __future__ import annotations

import asyncio
import functools
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ClassVar, Sequence, TypeVar

from mindsimkit.mindcore.shards import RaySession, Report, plan_shards, run_shards

T = TypeVar("T")
ShardWork = Callable[[Any, Any, Report], Awaitable[Any]]

__all__ = ["LocalRunner", "RayRunner", "Runner", "ShardResults", "ShardWork", "runner_for"]


@dataclass
class ShardResults:
    """Every shard's result in shard order, and how the work was spread (what run.json records)."""

    results: list[Any]
    shards: int
    workers: int
    elapsed_s: float
    parts: list[tuple[int, list[Any]]] = field(default_factory=list)  # (shard index, its items in input order)
    runner: dict[str, Any] = field(default_factory=dict)

    @property
    def live(self) -> set[int]:
        """Indices of the shards that held items."""
        return {i for i, _ in self.parts}


class Runner(ABC):
    """How a job's stages run their shards; entered once per job (`with runner:`)."""

    name: ClassVar[str]
    # True when work runs in other processes, which build their own clients: engines must be reachable there.
    remote: ClassVar[bool] = False
    # How the profile summary names distilabel's way of running under this runner.
    distilabel_name: ClassVar[str] = "distilabel"

    @abstractmethod
    async def map_shards(
        self,
        work: ShardWork,
        items: Sequence[T],
        *,
        key: Callable[[T], str],
        payload: Callable[[int, int, list[T]], Any],
        engines: Any,
        description: str,
        total: int,
        progress: bool = True,
    ) -> ShardResults:
        """Run `work` over `items` grouped by `key`. `total` items feed the progress bar through `report(key)`;
        `progress=False` when the work draws its own bar in this process (judge, arc labels)."""

    @property
    def profile_replicas(self) -> int:
        """Replicas of distilabel's profile step."""
        return 1

    def distilabel_pipeline(self, pipeline: Any) -> Any:
        """The distilabel pipeline as this runner runs it."""
        return pipeline

    def check_reachable(self) -> None:  # noqa: B027 - a hook: most runners have nothing to check
        """Raise one clear error now if the runner cannot start (before a run folder is made)."""

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class LocalRunner(Runner):
    """Everything in this process: one shard holding every item, in the caller's event loop."""

    name = "local"

    async def map_shards(
        self,
        work: ShardWork,
        items: Sequence[T],
        *,
        key: Callable[[T], str],
        payload: Callable[[int, int, list[T]], Any],
        engines: Any,
        description: str,
        total: int,
        progress: bool = True,
    ) -> ShardResults:
        from mindsimkit.mindcore.runner import progress_bar

        items = list(items)
        t0 = time.monotonic()
        if progress:
            with progress_bar() as bar:
                task = bar.add_task(description, total=total)
                result = await work(engines, payload(0, 1, items), lambda _key: bar.advance(task))
        else:
            result = await work(engines, payload(0, 1, items), lambda _key: None)
        return ShardResults([result], 1, 1, time.monotonic() - t0, [(0, items)], {"runner": "local"})


def _in_worker(work: ShardWork, engines: Any, payload: Any, report: Report) -> Any:
    # A Ray worker has no running loop: the shard's coroutine gets the worker's own (`Engines.run`).
    return engines.run(work(engines, payload, report))


class RayRunner(Runner):
    """Shards on a Ray cluster's workers; `with runner:` joins it (or starts a local Ray) for the job.
    `settings` are the recipe's `RaySettings`. `on_workers(actors)` hands tests the workers (to kill one)."""

    name = "ray"
    remote = True
    distilabel_name = "distilabel-ray"

    def __init__(
        self,
        settings: Any,
        *,
        verbose: bool = False,
        env: dict[str, str] | None = None,
        on_workers: Callable[[list[Any]], None] | None = None,
    ):
        self.settings = settings
        self.on_workers = on_workers
        self.session = RaySession(
            settings.address, verbose=verbose, env=env, connect_timeout_s=settings.connect_timeout_s
        )

    async def map_shards(
        self,
        work: ShardWork,
        items: Sequence[T],
        *,
        key: Callable[[T], str],
        payload: Callable[[int, int, list[T]], Any],
        engines: Any,
        description: str,
        total: int,
        progress: bool = True,
    ) -> ShardResults:
        plan = plan_shards(list(items), key, self.settings)
        payloads = [payload(i, plan.shards, part) for i, part in plan.parts]
        # run_shards blocks on Ray; a thread keeps the caller's loop (and its clients) alive meanwhile.
        run = await asyncio.to_thread(
            run_shards,
            functools.partial(_in_worker, work),
            payloads,
            engines,
            self.settings,
            workers=plan.workers,
            description=description,
            total=total,
            on_workers=self.on_workers,
        )
        return ShardResults(
            run.results,
            plan.shards,
            run.workers,
            run.elapsed_s,
            list(plan.parts),
            {"runner": "ray", "workers": run.workers, "shards": plan.shards},
        )

    @property
    def profile_replicas(self) -> int:
        replicas: int = self.settings.profile_replicas
        return replicas

    def distilabel_pipeline(self, pipeline: Any) -> Any:
        # The cluster is joined already, so RayPipeline uses it (it calls ray.init only when Ray is not up).
        return pipeline.ray()

    def check_reachable(self) -> None:
        self.session.check_reachable()

    def __enter__(self) -> "RayRunner":
        self.session.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.session.__exit__(*exc)


def runner_for(recipe: Any, *, verbose: bool = False, env: dict[str, str] | None = None) -> Runner:
    """The runner a recipe asks for (`runner:`, after `--ray` / RAY_ADDRESS, `Recipe.with_runner`): the one place
    a job chooses where its work runs."""
    if recipe.runner == "ray":
        return RayRunner(recipe.ray, verbose=verbose, env=env)
    return LocalRunner()

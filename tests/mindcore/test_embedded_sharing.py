"""One embedded server per process, shared (mindcore.embedded.embedded_server), and another process's server used
through MINDSIM_EMBEDDED_URL. The llama.cpp server itself is replaced by a recorder here (no model runs in the fast
suite); the embedded suite runs the real one under the same registry (tests/conftest.py checks it started once)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mindsimkit.mindcore import embedded
from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import EngineUnavailable

MODEL = Path("/models/cache/SmolLM2-135M-Instruct.Q4_1.as-Q8_0.gguf")


class Recorder:
    """Stands in for `EmbeddedServer`: counts starts and stops, serves nothing."""

    started: list["Recorder"] = []
    stopped: list["Recorder"] = []

    def __init__(self, spec):
        self.spec = spec
        self.port = 40000 + len(Recorder.started)
        self.threads = spec.threads or 1  # the real server's count when other work keeps a core busy

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_name(self):
        return MODEL.stem

    def start(self):
        Recorder.started.append(self)
        return self

    def stop(self):
        Recorder.stopped.append(self)


@pytest.fixture
def recorder(monkeypatch):
    Recorder.started, Recorder.stopped = [], []
    monkeypatch.setattr(embedded, "EmbeddedServer", Recorder)
    monkeypatch.setattr(embedded, "served_model_path", lambda spec: MODEL)
    monkeypatch.setattr(embedded, "_LIVE", {})
    monkeypatch.setattr(embedded, "_STATS", {"started": 0, "peak_live": 0})
    monkeypatch.delenv(embedded.ATTACH_ENV, raising=False)
    return Recorder


def _config(spec: EmbeddedEngine) -> EnginesConfig:
    return EnginesConfig(engines={"local": spec}, roles={"default": RoleSpec(engine="local")})


def test_engine_sets_of_one_process_share_the_running_server(recorder):
    spec = EmbeddedEngine(parallel=4, ctx_per_slot=8192)
    with Engines.from_config(_config(spec)) as outer:
        url = outer.backend("local").base_url
        # A job or command run in the same process (a nested engine set of the same recipe) gets the same server.
        with Engines.from_config(_config(EmbeddedEngine(parallel=4, ctx_per_slot=8192))) as inner:
            assert inner.backend("local").base_url == url
        assert recorder.stopped == []  # the outer set still uses it
        assert embedded.server_stats() == {"started": 1, "live": 1, "peak_live": 1}
    assert len(recorder.started) == 1 and recorder.stopped == recorder.started
    assert embedded.server_stats() == {"started": 1, "live": 0, "peak_live": 1}
    # Closed means gone: the next engine set starts a new one.
    with Engines.from_config(_config(spec)):
        pass
    assert len(recorder.started) == 2


def test_a_server_of_other_slots_or_context_is_another_server(recorder):
    with Engines.from_config(_config(EmbeddedEngine(parallel=4, ctx_per_slot=8192))):
        with Engines.from_config(_config(EmbeddedEngine(parallel=4, ctx_per_slot=4096))):
            assert embedded.server_stats()["peak_live"] == 2
    assert len(recorder.started) == 2 == len(recorder.stopped)


class _Models(BaseHTTPRequestHandler):
    served = str(MODEL)
    n_ctx = 8192

    def do_GET(self):  # noqa: N802
        body = json.dumps(
            {"object": "list", "data": [{"id": _Models.served, "meta": {"n_ctx": _Models.n_ctx}}]}
        ).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def models_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_another_process_server_is_used_and_said_in_provenance(recorder, models_server, monkeypatch):
    monkeypatch.setenv(embedded.ATTACH_ENV, models_server + "/")
    with Engines.from_config(_config(EmbeddedEngine(parallel=4, ctx_per_slot=8192))) as engines:
        backend = engines.backend("local")
        assert backend.base_url == models_server and backend.default_model == MODEL.stem
        assert backend.describe()["attached"] == models_server and backend.kind == "embedded"
        assert "threads" not in backend.describe()  # another process's server: its threads are not ours to know
    assert recorder.started == []


def test_the_threads_a_started_server_computes_with_are_in_provenance_and_the_preflight_line(recorder):
    from mindsimkit.mindcore.engine_health import EngineHealth
    from mindsimkit.mindcore.preflight import PreflightReport

    with Engines.from_config(_config(EmbeddedEngine(parallel=4, ctx_per_slot=8192))) as engines:
        backend = engines.backend("local")
        assert backend.describe()["threads"] == 1
        health = EngineHealth("local", "embedded", backend.base_url, MODEL.stem, threads=backend.threads)
    (line,) = PreflightReport(stages=[], roles=[], engines=[health]).lines()
    assert line.startswith(f"engine local (embedded, {MODEL.stem}, 1 CPU thread): ")
    health.threads = 2
    assert "(embedded, " + MODEL.stem + ", 2 CPU threads)" in PreflightReport([], [], [health]).lines()[0]


def test_a_wrong_attach_url_is_one_clear_error(recorder, models_server, monkeypatch):
    spec = EmbeddedEngine(parallel=4, ctx_per_slot=8192)
    monkeypatch.setenv(embedded.ATTACH_ENV, models_server.removesuffix("/v1"))
    with pytest.raises(EngineUnavailable, match="ending in /v1"):
        Engines.from_config(_config(spec)).start()
    monkeypatch.setenv(embedded.ATTACH_ENV, models_server)
    monkeypatch.setattr(_Models, "n_ctx", 4096)
    with pytest.raises(EngineUnavailable, match="gives each request 4096 tokens of context; .* ctx_per_slot 8192"):
        Engines.from_config(_config(spec)).start()
    monkeypatch.setattr(_Models, "served", "/elsewhere/other-model.gguf")
    monkeypatch.setenv(embedded.ATTACH_ENV, models_server)
    with pytest.raises(EngineUnavailable, match=r"serves /elsewhere/other-model.gguf, not .*as-Q8_0.gguf"):
        Engines.from_config(_config(spec)).start()
    monkeypatch.setenv(embedded.ATTACH_ENV, "http://127.0.0.1:9/v1")
    with pytest.raises(EngineUnavailable, match="no server answers there"):
        Engines.from_config(_config(spec)).start()
    assert recorder.started == []


def test_free_cores_leaves_out_what_other_work_keeps_busy(monkeypatch):
    """The embedded server's default thread count: the cores not busy in a short sample (never fewer than one)."""
    import os

    from mindsimkit.mindcore import embedded

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(embedded.time, "sleep", lambda _s: None)

    def sampled(busy_share):  # /proc/stat's (busy, total) jiffies before and after the window
        seq = iter([(0, 0), (int(1000 * busy_share), 1000)])
        monkeypatch.setattr(embedded, "_cpu_jiffies", lambda: next(seq))

    sampled(0.05)
    assert embedded.free_cores() == 2  # an idle machine: every core
    sampled(0.5)
    assert embedded.free_cores() == 1  # one core's worth of other work
    sampled(1.0)
    assert embedded.free_cores() == 1  # another llama.cpp spinning both cores: one thread, not none
    monkeypatch.setattr(embedded, "_cpu_jiffies", lambda: None)
    assert embedded.free_cores() == 2  # no /proc/stat: every core

"""Hostile servers and hostile files end in bounded time with one error line (docs/engines.md, "Timeouts";
docs/commands.md, "Bounds on inputs").

Servers: one that takes the request and never answers, one that sends its reply one byte at a time (read
timeouts never fire on it), and one that answers every request with 429 and `Retry-After: 100000`. Files:
/dev/zero and a FIFO given as every kind of input, an alias bomb in a recipe, JSON nested 100,000 deep. Every
command runs as the installed console script in a subprocess with a timeout, so a regression fails the test
instead of hanging the suite; the engine tests set timeouts of a second or two in their recipes.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from cli_streams import mindsim_script, without_progress  # noqa: E402

MINDSIM = mindsim_script()
ENV = {**os.environ, "COLUMNS": "40"}
ENV.pop("FORCE_COLOR", None)


def mindsim(*args: object, cwd: Path, timeout: float = 90) -> tuple[subprocess.CompletedProcess, float]:
    assert MINDSIM, "the `mindsim` console script is not installed (make install)"
    t0 = time.monotonic()
    proc = subprocess.run([MINDSIM, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in without_progress(proc.stderr).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("error:", "engine error:"))]
    assert len(errors) == 1 and lines == errors, f"expected one error line, got stderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    return errors[0]


# ---------------------------------------------------------------- hostile servers


class HostileServer:
    """An HTTP server on 127.0.0.1 that misbehaves in one way (`mode`) for every request."""

    def __init__(self, mode: str):
        self.mode = mode
        self.requests = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        self.base_url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            while not self._stop.is_set() and conn.recv(65536):
                self.requests += 1
                if self.mode == "silent":
                    self._stop.wait(600)
                elif self.mode == "drip":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                    while not self._stop.wait(0.05):
                        conn.sendall(b" ")
                elif self.mode == "429":
                    conn.sendall(
                        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 100000\r\nContent-Type: "
                        b"application/json\r\nContent-Length: 2\r\n\r\n{}"
                    )
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()


@pytest.fixture
def hostile():
    servers: list[HostileServer] = []

    def start(mode: str) -> HostileServer:
        servers.append(HostileServer(mode))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _recipe(path: Path, base_url: str, engine_extra: str = "") -> Path:
    path.write_text(
        "name: hostile\nseed: 3\nengines:\n"
        f"  stub: {{kind: openai, base_url: '{base_url}', model: m, native_tools: false, timeout_s: 1.5, "
        f"connect_timeout_s: 1{engine_extra}}}\nroles:\n  default: {{engine: stub}}\n"
    )
    return path


@pytest.mark.parametrize(
    "mode, says",
    [
        ("silent", "did not answer within 1.5 s (engines.stub.timeout_s)"),
        ("drip", "did not answer within 1.5 s (engines.stub.timeout_s)"),
        ("429", "HTTP 429"),
    ],
)
def test_engines_check_ends_in_its_bound_on_a_hostile_server(mode, says, hostile, tmp_path):
    server = hostile(mode)
    extra = ", max_retry_after_s: 0.5" if mode == "429" else ""
    proc, wall = mindsim("engines", "check", _recipe(tmp_path / "r.yaml", server.base_url, extra), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc)
    assert "engine 'stub'" in line and server.base_url in line and says in line, line
    # A probe that times out is sent once: one timeout_s, plus the interpreter's start. A 429 is retried three
    # times, each wait cut to max_retry_after_s instead of the header's 100,000 s.
    assert wall < 25, f"{mode}: engines check took {wall:.0f} s"
    if mode == "429":
        assert 4 <= server.requests <= 8  # the probes, each sent at most four times


def test_run_stops_in_preflight_on_a_silent_engine(hostile, tmp_path):
    server = hostile("silent")
    proc, wall = mindsim("run", _recipe(tmp_path / "r.yaml", server.base_url), "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "did not answer within 1.5 s" in proc.stderr and "engine 'stub'" in proc.stderr
    assert wall < 40, f"run took {wall:.0f} s"


def test_a_total_timeout_bounds_a_dripping_reply():
    """At the transport: a reply that keeps coming, a byte at a time, is cut at the request's timeout."""
    import asyncio

    from mindsimkit.mindcore import wire

    server = HostileServer("drip")
    try:
        link = wire.ServerLink(server.base_url, "k", timeout_s=0.5)
        t0 = time.monotonic()
        with pytest.raises(wire.TotalTimeout):
            asyncio.run(link.post_json(b"{}"))
        assert time.monotonic() - t0 < 2
        t0 = time.monotonic()
        with pytest.raises(wire.TotalTimeout):
            wire.get_json_blocking(server.base_url + "/models", timeout_s=0.5)
        assert time.monotonic() - t0 < 2
    finally:
        server.close()


def test_retry_after_is_capped():
    from mindsimkit.mindcore import wire
    from mindsimkit.mindcore.backends import MAX_RETRY_AFTER_S, OpenAIBackend

    backend = OpenAIBackend("stub", base_url="http://127.0.0.1:9/v1", default_model="m")
    refusal = wire.HTTPStatusError(429, {"retry-after": "100000"}, None)
    assert backend._rate_limited(backend.servers[0], refusal, 1) == MAX_RETRY_AFTER_S == 60
    backend.max_retry_after_s = 2.0
    assert backend._rate_limited(backend.servers[0], refusal, 1) == 2.0


def test_progress_lines_name_the_engine_waited_on():
    from mindsimkit.mindcore.backends import IN_FLIGHT
    from mindsimkit.mindcore.runner import LoggedProgress

    stream = io.StringIO()
    token = IN_FLIGHT.start("slow", "http://127.0.0.1:9/v1")
    try:
        with LoggedProgress(interval_s=0.05, stream=stream, disable=True) as bar:
            bar.add_task("sessions", total=1)
            time.sleep(0.3)
    finally:
        IN_FLIGHT.end(token)
    running = [ln for ln in stream.getvalue().splitlines() if " running, " in ln]
    assert running and all(
        "waiting on engine 'slow' at http://127.0.0.1:9/v1 (1 request, the oldest" in ln for ln in running
    ), stream.getvalue()
    assert without_progress(stream.getvalue()) == ""
    assert IN_FLIGHT.waiting_on() == ""


# ---------------------------------------------------------------- hostile files

# Every input a user names, as /dev/zero. Run in one interpreter, each timed on its own: the bound is the
# reader's, not the interpreter's start-up.
ZERO_CASES = {
    "recipe": ["engines", "check", "{f}"],
    "ratings": ["judge", "alpha", "{f}", "--rubric", "mindeval_v1_human"],
    "reference": ["validate", "reference", "{f}", "--out", "ref.parquet"],
    "labelstudio": ["annotate", "labelstudio", "ratings", "{f}", "--rubric", "mhqr", "--out", "r.jsonl"],
    "members": ["import", "mindeval2-profiles", "{f}", "--out", "imported"],
    "realism-release": ["import", "mindeval2-realism", "{f}", "--out", "imported2"],
    "realism-ratings": ["realism", "report", "{f}"],
}

_DRIVER = """
import contextlib, io, json, sys, time
from mindsimkit.mindsim_app.cli import main
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    out[name] = {"rc": code, "s": time.monotonic() - t0, "stderr": err.getvalue()}
print(json.dumps(out))
"""


def _drive(cases: dict[str, list[str]], cwd: Path) -> dict[str, dict]:
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(cases)],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.skipif(not Path("/dev/zero").exists() or not hasattr(os, "mkfifo"), reason="needs /dev/zero and FIFOs")
def test_dev_zero_and_a_fifo_are_refused_as_any_input(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    cases = {f"{name}/zero": [a.format(f="/dev/zero") for a in argv] for name, argv in ZERO_CASES.items()}
    cases.update({f"{name}/fifo": [a.format(f=str(fifo)) for a in argv] for name, argv in ZERO_CASES.items()})
    for name, got in _drive(cases, tmp_path).items():
        proc = subprocess.CompletedProcess([], got["rc"], "", got["stderr"])
        assert got["rc"] == 2, (name, got["stderr"])
        line = error_line(proc)
        what = "a character device" if name.endswith("/zero") else "a named pipe (FIFO)"
        assert f"is {what}, not a regular file" in line, (name, line)
        assert got["s"] < 5, f"{name}: refused after {got['s']:.1f} s"
    assert not (tmp_path / "imported").exists() and not (tmp_path / "ref.parquet").exists()


BILLION_LAUGHS = (
    "\n".join(
        [
            "name: laughs",
            "seed: 1",
            "engines:",
            "  e: {kind: openai, base_url: 'http://127.0.0.1:9/v1', model: m}",
            "roles:",
            "  default:",
            "    engine: e",
            "    extra_body:",
            "      l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]",
        ]
        + [f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    )
    + "\n"
)


def test_an_alias_bomb_and_a_huge_name_are_refused_before_any_engine(tmp_path):
    (tmp_path / "laughs.yaml").write_text(BILLION_LAUGHS)
    (tmp_path / "loop.yaml").write_text(BILLION_LAUGHS.split("    extra_body:")[0] + "    stop: &me [a, *me]\n")
    (tmp_path / "name.yaml").write_text(
        BILLION_LAUGHS.split("seed")[0].replace("laughs", "x" * 1_000_000)
        + "engines:\n  e: {kind: openai, base_url: 'http://127.0.0.1:9/v1', model: m}\n"
        "roles:\n  default: {engine: e}\n"
    )
    got = _drive(
        {
            "laughs": ["engines", "check", "laughs.yaml"],
            "loop": ["engines", "check", "loop.yaml"],
            "name": ["engines", "check", "name.yaml"],
            "run": ["run", "laughs.yaml", "--out", "out"],
        },
        tmp_path,
    )
    for name, says in [
        ("laughs", "aliases (*name) expand the document to more than 1,000,000 values"),
        ("loop", "refers to a value that contains it"),
        ("name", "name: String should have at most 200"),
        ("run", "aliases (*name) expand"),
    ]:
        line = error_line(subprocess.CompletedProcess([], got[name]["rc"], "", got[name]["stderr"]))
        assert got[name]["rc"] == 2 and says in line and len(line) < 400, (name, line)
        assert got[name]["s"] < 5, f"{name}: refused after {got[name]['s']:.1f} s"
    assert not (tmp_path / "out").exists()


def test_deeply_nested_json_is_one_line(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "ratings.jsonl").write_text(deep + "\n")
    (tmp_path / "export.json").write_text(deep)
    got = _drive(
        {
            "ratings": ["judge", "alpha", "ratings.jsonl", "--rubric", "mindeval_v1_human"],
            "labelstudio": [
                "annotate",
                "labelstudio",
                "ratings",
                "export.json",
                "--rubric",
                "mhqr",
                "--out",
                "r.jsonl",
            ],
        },
        tmp_path,
    )
    for name, res in got.items():
        line = error_line(subprocess.CompletedProcess([], res["rc"], "", res["stderr"]))
        assert res["rc"] == 2 and "nested deeper than 100 levels" in line, (name, line)


def test_an_endless_line_and_an_oversized_file_are_refused(tmp_path, monkeypatch):
    from mindsimkit.mindcore import inputs
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindcore.io import read_jsonl

    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 1000)
    (tmp_path / "long.jsonl").write_text('{"a": "' + "x" * 5000 + '"}\n')
    with pytest.raises(InputError, match=r"long.jsonl:1: a line longer than 1000 bytes"):
        list(read_jsonl(tmp_path / "long.jsonl"))
    (tmp_path / "big.json").write_text("[" + "1," * 1000 + "1]")
    with pytest.raises(InputError, match="is larger than 100 bytes"):
        inputs.read_input_bytes(tmp_path / "big.json", "release file", 100)
    with pytest.raises(InputError, match="is a folder, not a regular file"):
        inputs.read_input_text(tmp_path, "release file")


def test_count_options_are_checked_before_any_work(tmp_path):
    got = _drive(
        {
            "dpo": ["export", "dpo", "no-such-run", "--out", "pairs.jsonl", "--k", "100000"],
            "windows": ["annotate", "sample", "realism", "--out", "task", "--n", "4", "--windows", "1,5000"],
            "draws": ["realism", "report", "x.jsonl", "--draws", "100000000"],
        },
        tmp_path,
    )
    for name, says in [("dpo", "--k"), ("windows", "--windows"), ("draws", "--draws")]:
        line = error_line(subprocess.CompletedProcess([], got[name]["rc"], "", got[name]["stderr"]))
        assert got[name]["rc"] == 2 and says in line, (name, line)
        assert got[name]["s"] < 5
    assert not (tmp_path / "pairs.jsonl").exists() and not (tmp_path / "task").exists()

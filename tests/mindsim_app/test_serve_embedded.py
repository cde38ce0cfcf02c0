"""`mindsim serve`: the embedded model over HTTP as a user starts it for inspect's `openai-api` provider — the
installed script on a port of our choosing, its printed base URL answering `/v1/models` and one chat completion
from the real model, then Ctrl-C: "interrupted", exit 130, the port closed."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.embedded


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_openai_requests_until_ctrl_c(own_embedded_server):
    mindsim = shutil.which("mindsim", path=str(Path(sys.executable).parent))
    port = _free_port()
    proc = subprocess.Popen(
        [mindsim, "serve", "--port", str(port), "--parallel", "1", "--ctx-per-slot", "1024"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert first.startswith("serving ") and f"http://127.0.0.1:{port}/v1" in first, first + proc.stderr.read()
        base = first.split(" at ")[1].strip()
        with urllib.request.urlopen(f"{base}/models", timeout=30) as r:
            models = json.load(r)
        assert models["data"], models
        body = json.dumps(
            {
                "model": models["data"][0]["id"],
                "max_tokens": 8,
                "temperature": 0,
                "messages": [{"role": "user", "content": "Say hello."}],
            }
        ).encode()
        req = urllib.request.Request(f"{base}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            reply = json.load(r)
        assert reply["choices"][0]["message"]["content"].strip() and reply["usage"]["completion_tokens"] >= 1
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 130 and "interrupted; server stopped" in proc.stderr.read()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)

"""Helpers for tests that run the annotation server as its own process (round trip, kill -9, logs)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tasks: list[Path], port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    f = open(log, "ab")
    p = subprocess.Popen(
        [sys.executable, "-m", "mindsimkit.mindsim_app.annotate", "serve", *map(str, tasks), "--port", str(port)],
        stdout=f,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"server exited {p.returncode}: {Path(log).read_text()[-2000:]}")
        try:
            requests.get(f"http://127.0.0.1:{port}/", timeout=1)
            return p
        # The port is bound before the app is built: a request queued then waits for uvicorn and may time out.
        except (requests.ConnectionError, requests.Timeout):
            time.sleep(0.1)
    p.kill()
    raise RuntimeError("server did not start")


def tokens(task: Path) -> dict[str, str]:
    lines = (task / "rater-links.txt").read_text().splitlines()
    return {r: url.split("#k=", 1)[1] for r, url in (line.split("\t") for line in lines if not line.startswith("#"))}


class Rater:
    def __init__(self, base: str, token: str):
        self.base, self.h = base, {"Authorization": f"Bearer {token}"}

    def session(self) -> dict[str, Any]:
        return requests.get(f"{self.base}/api/session", headers=self.h, timeout=10).json()

    def item(self, pos: int) -> dict[str, Any]:
        return requests.get(f"{self.base}/api/item/{pos}", headers=self.h, timeout=10).json()

    def answer(self, item_id: str, unit: str, answer: dict[str, Any]) -> requests.Response:
        return requests.post(
            f"{self.base}/api/answer",
            headers=self.h,
            timeout=10,
            json={"item_id": item_id, "unit": unit, "answer": answer},
        )

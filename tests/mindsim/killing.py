"""Start a command, SIGKILL it (and everything it started) the moment a condition holds. Shared by the
simulator's and the main job's kill-and-resume tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable


def kill_when(
    cmd: list[str], ready: Callable[[], bool], timeout_s: float, poll_s: float = 0.05, env: dict[str, str] | None = None
) -> None:
    """Run `cmd` in its own process group; once `ready()` is true, SIGKILL the group (the process, an
    in-process model server's threads, worker processes). Fails if it ends or times out first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=env)
    deadline = time.monotonic() + timeout_s
    try:
        while not ready():
            assert proc.poll() is None, f"{cmd[1:3]} ended before the kill: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, f"condition not met within {timeout_s:.0f} s"
            time.sleep(poll_s)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

"""`vllm serve` for GPU users: the command line an engine entry needs, and an optional launcher that
starts it on 127.0.0.1 and waits for /health. vLLM is never needed to install or test the toolkit."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import urllib.request

from mindsimkit.mindcore.config import VLLMEngine
from mindsimkit.mindcore.errors import EngineUnavailable


def serve_command(spec: VLLMEngine) -> list[str]:
    cmd = ["vllm", "serve", spec.model, "--host", spec.host, "--port", str(spec.port)]
    if spec.native_tools and "--enable-auto-tool-choice" not in spec.serve_args:
        # Native tool calls need a parser matched to the model family; the user supplies it in serve_args.
        cmd.append("--enable-auto-tool-choice")
    return cmd + list(spec.serve_args)


def serve_command_text(spec: VLLMEngine) -> str:
    """The command as a hint shows it: a host written with a user part (`user:password@gpu-box`) appears as the
    bare host `vllm serve` listens on, and every other word is scrubbed like any printed line."""
    from mindsimkit.mindcore.redact import scrub

    words = serve_command(spec)
    words[words.index("--host") + 1] = spec.host.rpartition("@")[2]
    return scrub(shlex.join(words))


def health_ok(spec: VLLMEngine, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{spec.host}:{spec.port}/health", timeout=timeout_s) as r:
            status: int = r.status
            return status == 200
    except OSError:
        return False


class VLLMProcess:
    """Launch `vllm serve` as a child process and stop it on exit."""

    def __init__(self, spec: VLLMEngine):
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "VLLMProcess":
        if health_ok(self.spec):
            return self  # someone already serves on that port
        if shutil.which("vllm") is None:
            raise EngineUnavailable(
                "engines: vllm.launch is true but `vllm` is not installed; install the extra with "
                "`pip install 'mindsimkit[vllm]'` on a GPU machine, or start the server yourself: "
                + serve_command_text(self.spec)
            )
        if self.spec.host not in ("127.0.0.1", "localhost"):
            raise EngineUnavailable("engines: the toolkit only launches vLLM on 127.0.0.1")
        self.proc = subprocess.Popen(serve_command(self.spec), env=dict(os.environ))
        deadline = time.monotonic() + self.spec.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineUnavailable(f"`vllm serve` exited with code {self.proc.returncode} while starting")
            if health_ok(self.spec):
                return self
            time.sleep(2)
        self.stop()
        raise EngineUnavailable(f"`vllm serve` not healthy after {self.spec.startup_timeout_s:.0f}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

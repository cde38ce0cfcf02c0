"""`mindsim serve`: the embedded model (llama.cpp, in this process) served over HTTP on 127.0.0.1 until Ctrl-C, so
an OpenAI-compatible client — inspect's `openai-api` provider, curl, another recipe's `openai` engine — can call
it. The server is `mindcore.embedded.EmbeddedServer`, the one the `embedded` engine starts for a run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from mindsimkit.mindcore.config import EmbeddedEngine
from mindsimkit.mindcore.console import err_console, out_console


def serve_cmd(
    port: Optional[int] = typer.Option(
        None, "--port", min=1, max=65535, help="Port on 127.0.0.1 (default: a free one, printed)"
    ),
    model_path: Optional[Path] = typer.Option(
        None, "--model-path", help="GGUF file to serve (default: the shipped SmolLM2-135M-Instruct)"
    ),
    parallel: int = typer.Option(4, "--parallel", min=1, max=64, help="Requests served at once (llama.cpp slots)"),
    ctx_per_slot: int = typer.Option(4096, "--ctx-per-slot", min=512, help="Context tokens of each slot"),
) -> None:
    """Serve the embedded model over HTTP (OpenAI's chat API under /v1) until Ctrl-C; prints the base URL and the
    model name to give a client."""
    from mindsimkit.mindcore.embedded import EmbeddedServer

    spec = EmbeddedEngine(
        model_path=str(model_path) if model_path else None, parallel=parallel, ctx_per_slot=ctx_per_slot
    )
    server = EmbeddedServer(spec, port=port).start()
    out = out_console()
    out.print(f"serving {server.model_name} at {server.base_url}", soft_wrap=True)
    out.print(
        f"inspect: LOCAL_BASE_URL={server.base_url} LOCAL_API_KEY=none inspect eval … "
        f"--model openai-api/local/{server.model_name}",
        soft_wrap=True,
    )
    out.print("Ctrl-C stops it", soft_wrap=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
        err_console().print("interrupted; server stopped")
        raise typer.Exit(130) from None

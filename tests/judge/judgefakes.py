"""Helpers for the judge tests: a fake judge whose verdict depends on marker words in the reply under
review, so tests know every expected weight in advance, and a small run folder with a sessions parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mindcore.types import ChatRequest


def reply_under_review(req: ChatRequest) -> str:
    """The last counsellor message of the judge's user prompt (the reply under review)."""
    text = req.messages[1]["content"].rsplit("[Counsellor]\n", 1)[-1]
    return text.split("\n\n>>> END OF CONVERSATION", 1)[0]


def verdict_for(text: str) -> dict[str, Any]:
    """Marker words in a counsellor reply decide the fake judge's answer."""
    if "CRIT" in text:
        return {"issues": [{"issue": "bad_advice", "reason": "unsafe suggestion", "quote": "CRIT skip your meds"},
                           {"issue": "under_guiding", "reason": "no plan", "quote": None}], "severity": "critical"}
    if "MAJOR" in text:
        return {"issues": [{"issue": "over_exploring", "reason": "keeps asking", "quote": "MAJOR tell me more"}],
                "severity": "major"}
    if "MINOR" in text:
        return {"issues": [{"issue": "formulaic_responding", "reason": "template", "quote": "words never said"}],
                "severity": "minor"}
    return {"issues": [], "severity": "no_concern"}


def fake_judge(req: ChatRequest) -> dict[str, Any]:
    return verdict_for(reply_under_review(req))


def session(sid: str, patient: str, counsellor: str, index: int, replies: list[str], model: str = "gpt-4.1-mini",
            prompt: str = "You are a warm counsellor.") -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": prompt}]
    for k, r in enumerate(replies):
        msgs.append({"role": "user", "content": f"patient message {k} of {sid}"})
        msgs.append({"role": "assistant", "content": r})
    return {"session_id": sid, "patient_id": patient, "counsellor": counsellor, "session_index": index,
            "counsellor_system_prompt": prompt, "counsellor_messages": msgs,
            "engines": {"counsellor": {"model": model, "engine": "api"}}, "seed": 0}


# Weights: ok 0, MINOR 1, MAJOR 5, CRIT 10.
SESSIONS = [
    session("s1", "p1", "alpha", 0, ["ok", "MAJOR tell me more"]),               # 2.5
    session("s2", "p1", "alpha", 1, ["ok", "ok", "MINOR hello"]),                # 1/3
    session("s3", "p2", "alpha", 0, ["CRIT skip your meds"]),                    # 10
    session("s4", "p1", "beta", 0, ["ok", "ok"], model="claude-x"),             # 0
    session("s5", "p1", "beta", 1, ["MINOR hi", "ok"], model="claude-x"),       # 0.5
    session("s6", "p2", "beta", 0, ["MAJOR tell me more", "ok"], model="claude-x"),  # 2.5
]


def write_run(run_dir: Path, sessions: list[dict[str, Any]] = SESSIONS) -> Path:
    (run_dir / "sessions").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sessions), run_dir / "sessions" / "sessions.parquet")
    return run_dir


class StubServer:
    """A minimal OpenAI-compatible chat server on 127.0.0.1 answering like `fake_judge`, for tests
    that run the real `mindsim` console script in a subprocess. Counts the requests it served."""

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from types import SimpleNamespace

        stub = self
        self.requests = 0
        self.models = ["gpt-5-judge", "gpt-5"]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the preflight lists the served models
                out = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in stub.models]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
                if schema == "_Probe" or schema is None:
                    # The preflight's health probe (a greeting, then a tiny structured round trip): answered
                    # as a working model would, and not counted among the judge's requests.
                    content = json.dumps({"mood": "steady", "calm": True}) if schema else "Hello."
                else:
                    stub.requests += 1
                    content = json.dumps(fake_judge(SimpleNamespace(messages=body["messages"])))
                out = json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "StubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def recipe_for(path: Path, port: int, model: str = "gpt-5-judge") -> Path:
    path.write_text(
        "name: judge-test\n"
        "engines:\n"
        f"  stub: {{kind: openai, base_url: 'http://127.0.0.1:{port}/v1', model: {model}, max_concurrency: 4,"
        " timeout_s: 20}\n"
        "roles:\n"
        "  default: {engine: stub, temperature: 0.0}\n",
        encoding="utf-8",
    )
    return path

"""Helpers for the judge tests: a fake judge whose verdict depends on marker words in the reply under
review, so tests know every expected weight in advance, and a small run folder with a sessions parquet."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mindsimkit.mindcore.types import ChatRequest, RawReply


def reply_under_review(req: ChatRequest) -> str:
    """The last counsellor message of the judge's user prompt (the reply under review)."""
    text = req.messages[1]["content"].rsplit("[Counsellor]\n", 1)[-1]
    return text.split("\n\n>>> END OF CONVERSATION", 1)[0]


def verdict_for(text: str) -> dict[str, Any]:
    """Marker words in a counsellor reply decide the fake judge's answer."""
    if "CRIT" in text:
        return {
            "issues": [
                {"issue": "bad_advice", "reason": "unsafe suggestion", "quote": "CRIT skip your meds"},
                {"issue": "under_guiding", "reason": "no plan", "quote": None},
            ],
            "severity": "critical",
        }
    if "MAJOR" in text:
        return {
            "issues": [{"issue": "over_exploring", "reason": "keeps asking", "quote": "MAJOR tell me more"}],
            "severity": "major",
        }
    if "MINOR" in text:
        return {
            "issues": [{"issue": "formulaic_responding", "reason": "template", "quote": "words never said"}],
            "severity": "minor",
        }
    return {"issues": [], "severity": "no_concern"}


def fake_judge(req: ChatRequest) -> dict[str, Any]:
    return verdict_for(reply_under_review(req))


def session(
    sid: str,
    patient: str,
    counsellor: str,
    index: int,
    replies: list[str],
    model: str = "gpt-4.1-mini",
    prompt: str = "You are a warm counsellor.",
) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": prompt}]
    for k, r in enumerate(replies):
        msgs.append({"role": "user", "content": f"patient message {k} of {sid}"})
        msgs.append({"role": "assistant", "content": r})
    return {
        "session_id": sid,
        "patient_id": patient,
        "counsellor": counsellor,
        "session_index": index,
        "counsellor_system_prompt": prompt,
        "counsellor_messages": msgs,
        "engines": {"counsellor": {"model": model, "engine": "api"}},
        "seed": 0,
    }


# Weights: ok 0, MINOR 1, MAJOR 5, CRIT 10.
SESSIONS = [
    session("s1", "p1", "alpha", 0, ["ok", "MAJOR tell me more"]),  # 2.5
    session("s2", "p1", "alpha", 1, ["ok", "ok", "MINOR hello"]),  # 1/3
    session("s3", "p2", "alpha", 0, ["CRIT skip your meds"]),  # 10
    session("s4", "p1", "beta", 0, ["ok", "ok"], model="claude-x"),  # 0
    session("s5", "p1", "beta", 1, ["MINOR hi", "ok"], model="claude-x"),  # 0.5
    session("s6", "p2", "beta", 0, ["MAJOR tell me more", "ok"], model="claude-x"),  # 2.5
]


def write_run(run_dir: Path, sessions: list[dict[str, Any]] = SESSIONS) -> Path:
    (run_dir / "sessions").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sessions), run_dir / "sessions" / "sessions.parquet")
    return run_dir


def judge_stub() -> Any:
    """The shared OpenAI-compatible test server (tests/openai_stub.py) answering like `fake_judge`, for
    tests that run the real `mindsim` console script; it passes the preflight's health probe first."""
    from openai_stub import OpenAIStub, after_probe, from_responder

    return OpenAIStub(after_probe(from_responder(fake_judge))).serve("gpt-5-judge", "gpt-5")


def judged(stub: Any) -> int:
    """Judge requests the stub served (the preflight's probe calls are not judgments)."""
    return sum(
        ((r.get("response_format") or {}).get("json_schema") or {}).get("name") == "mhqr_judgment"
        for r in stub.requests
    )


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


def write_real_sessions(path: Path, n: int = 2, replies: int = 4, counsellor: str = "app-counsellor") -> Path:
    """Real sessions in the judge's input format (docs/judge.md "Input")."""
    rows = []
    for i in range(n):
        msgs = []
        for k in range(replies):
            msgs += [
                {"role": "user", "content": f"real patient {k} of r{i}"},
                {"role": "assistant", "content": f"real reply {k} of r{i}"},
            ]
        rows.append(
            {
                "session_id": f"r{i}",
                "patient_id": f"rp{i}",
                "counsellor": counsellor,
                "session_index": 0,
                "counsellor_system_prompt": "The app's counsellor prompt.",
                "messages": msgs,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def graded_reply(answer: dict, alternatives: dict[str, float]) -> RawReply:
    """The answer's JSON text as llama.cpp sends it back: tokens that spell it, the severity value starting in a
    token that also holds the opening quote, with `alternatives` (token text after the quote → probability)."""
    text = json.dumps(answer)
    value = text.index('"severity": "') + len('"severity": ')
    sev = answer["severity"]
    tokens = [
        {"token": text[:value], "logprob": -0.1, "top_logprobs": []},
        {
            "token": '"' + sev,
            "logprob": math.log(alternatives[sev]),
            "top_logprobs": [{"token": '"' + t, "logprob": math.log(p)} for t, p in alternatives.items()],
        },
        {"token": text[value + 1 + len(sev) :], "logprob": -0.1, "top_logprobs": []},
    ]
    return RawReply(content=text, logprobs=tokens, prompt_tokens=5, completion_tokens=3, finish_reason="stop")

"""Native tool calls on the embedded engine (SmolLM2-135M): how many forced `commit_move` calls come back as valid
tool calls through the backend's template path (`native_tools: true`, `tool_parser: template`), against the same
requests sent to llama.cpp's own chat endpoint with `tools` and `tool_choice: required`; and, under `auto`, how
often the model chooses to call.

Each forced call is one attempt (no re-ask), over the full move vocabulary, with a different seed and one of four
counsellor lines in turn; a call counts as valid when the client accepts it (a parsed block whose arguments pass
the tool's pydantic model).

    python benchmarks/bench_tool_calls.py [--calls 50] [--chat 10] [--auto 10] [--tokens 256]

(--calls 50 took about 5 minutes on one thread of a loaded 2-core machine.)
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from mindsimkit.mindcore import wire
from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.types import ChatRequest, ToolSpec
from mindsimkit.mindsim.guard import commit_move_model
from mindsimkit.mindsim.patient import COMMIT_DESCRIPTION
from mindsimkit.profilegen.moves import load_vocabulary
from smoke import parse_args

SYSTEM = (
    "You are Sam, 34, a patient in a counselling session. Before each reply, commit the move you will make "
    "with commit_move."
)
LINES = [
    "How have you been since we last spoke?",
    "What's been on your mind this week?",
    "It sounds like work has been stressful. Can you tell me more?",
    "How did that make you feel?",
]


def commit_tool() -> ToolSpec:
    vocab = load_vocabulary()
    return ToolSpec.from_model(
        "commit_move", COMMIT_DESCRIPTION, commit_move_model(list(vocab.moves), vocab.depth_moves)
    )


def conversation(i: int) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": LINES[i % len(LINES)]}]


async def measure(engines: Engines, args: argparse.Namespace) -> dict[str, Any]:
    client, backend, tool = engines.role("patient"), engines.backend("local"), commit_tool()
    failures: Counter[str] = Counter()
    valid = 0
    for i in range(args.calls):
        try:
            await client.tool_call(conversation(i), [tool], max_attempts=1, seed=i, max_tokens=args.tokens)
            valid += 1
        except StructuredOutputError as exc:
            failures[exc.last_error[:90]] += 1
    chat_calls = 0
    for i in range(args.chat):
        # llama.cpp's own tool-call path: the chat request as a tool-parsing server would get it.
        req = ChatRequest(
            role="patient",
            model=backend.default_model,
            messages=conversation(i),
            temperature=0.7,
            seed=i,
            max_tokens=args.tokens,
            tools=[tool.openai()],
            tool_choice="required",
        )
        raw = await backend._send(req, backend._loop_state(), backend.default_model, wire.dumps(backend.body(req)))
        chat_calls += bool(raw.tool_calls)
    auto_calls = 0
    for i in range(args.auto):
        res = await client.reply_or_call(conversation(i), [tool], seed=i, max_tokens=args.tokens)
        auto_calls += bool(res.calls)
    return {"valid": valid, "failures": failures, "chat_calls": chat_calls, "auto_calls": auto_calls}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50, help="forced calls through the template path")
    ap.add_argument("--chat", type=int, default=10, help="forced calls through llama.cpp's chat endpoint")
    ap.add_argument("--auto", type=int, default=10, help="requests offering the tool under tool_choice: auto")
    ap.add_argument("--tokens", type=int, default=256, help="output budget of each request")
    args = parse_args(ap, calls=1, chat=1, auto=1, tokens=48)
    cfg = EnginesConfig(
        engines={"local": EmbeddedEngine(native_tools=True, parallel=1, threads=1)},
        roles={"default": RoleSpec(engine="local", temperature=0.7, seed=0)},
    )
    with Engines.from_config(cfg) as engines:
        out = engines.run(measure(engines, args))
    print(f"template path, tool_choice required: {out['valid']}/{args.calls} valid commit_move calls on the first try")
    for reason, n in out["failures"].most_common():
        print(f"  {n} x {reason}")
    print(f"chat endpoint, tool_choice required: {out['chat_calls']}/{args.chat} came back with tool_calls")
    print(f"template path, tool_choice auto: {out['auto_calls']}/{args.auto} chose to call")


if __name__ == "__main__":
    main()

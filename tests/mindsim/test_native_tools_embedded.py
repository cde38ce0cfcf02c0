"""A MindSim arc on the real embedded engine (SmolLM2-135M) with native tool calls: the backend renders the tools
template and reads the model's `<tool_call>` blocks back (`mindcore.tool_template`). The preflight's forced tool call
passes, every commit_move goes out as a tool offered with `tool_choice: required` and comes back as `tool_calls`,
later requests carry the earlier calls as assistant `tool_calls` with their `tool` results, and no call is ever sent
as JSON text."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.parquet as pq
import pytest
from quick_recipes import SUITE_ENGINE, quick_recipe
from simfakes import make_profile

from mindsimkit.mindcore.backends import OpenAIBackend
from mindsimkit.mindcore.config import EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.preflight import preflight
from mindsimkit.mindcore.types import ChatRequest, RawReply
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.simulate import run_simulation

pytestmark = [pytest.mark.embedded, pytest.mark.slow]


class _Recipe:
    """What the preflight reads of a recipe: its simulation section (the stage registry reads the rest)."""

    def __init__(self, section: dict[str, Any]):
        self.simulation = section
        self.validation = None
        self.judge = None
        self.profiles = None


def _native_engines(shared: Any) -> tuple[Engines, list[tuple[ChatRequest, RawReply]]]:
    """The quickstart's roles on the suite's running server, its engine declaring native tool calls; every
    exchange the backend answers is kept."""
    served = shared.backend("local")
    backend = OpenAIBackend(
        "local",
        base_url=served.base_url,
        default_model=served.default_model,
        kind="embedded",
        native_tools=True,
        max_concurrency=served.max_concurrency,
        timeout_s=served.timeout_s,
        token_param="max_tokens",
        serial_prefix_chars=served.serial_prefix_chars,
    )
    seen: list[tuple[ChatRequest, RawReply]] = []
    complete = backend.complete

    async def recorded(request: ChatRequest) -> RawReply:
        reply = await complete(request)
        seen.append((request, reply))
        return reply

    backend.complete = recorded  # type: ignore[method-assign]
    roles = {name: RoleSpec(**spec) for name, spec in quick_recipe()["roles"].items()}
    cfg = EnginesConfig(engines={"local": SUITE_ENGINE.model_copy(update={"native_tools": True})}, roles=roles)
    return Engines(cfg, backends={"local": backend}).start(), seen


def test_an_arc_commits_its_moves_through_native_tool_calls(embedded_engines, tmp_path):
    section = {**quick_recipe()["simulation"], "sessions": 1, "turn_cap": 3}
    engines, seen = _native_engines(embedded_engines)
    with engines:
        report = preflight(_Recipe(section), engines, {"simulate"})
        summary = run_simulation(
            [make_profile("n1", "minimiser")], engines, SimulationConfig.from_section(section), tmp_path, seed=5
        )
    # The preflight's forced call came back as a tool call: the run keeps native calls, read by the template path.
    assert report.tool_calls() == {"patient": "native-template"}
    assert not summary.failed_arcs and summary.sessions_written == 1

    commits = [
        (q, r)
        for q, r in seen
        if q.role == "patient" and q.tools and [t["function"]["name"] for t in q.tools] == ["commit_move"]
    ]
    assert len(commits) >= 2  # two patient turns, each at least one commit
    for request, reply in commits:
        assert request.tool_choice == "required" and request.response_schema is None
        assert reply.tool_calls or reply.tool_call_error  # a call, or a broken block the client re-asked
    accepted = [r for _, r in commits if r.tool_calls]
    assert accepted and all(c["function"]["name"] == "commit_move" for r in accepted for c in r.tool_calls)
    assert all(isinstance(json.loads(c["function"]["arguments"]), dict) for r in accepted for c in r.tool_calls)

    # The last commit request holds the earlier commits as assistant tool calls, each answered by a tool result.
    last = commits[-1][0].messages
    calls = [c for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    results = [m for m in last if m["role"] == "tool"]
    assert calls and results and {m["tool_call_id"] for m in results} <= {c["id"] for c in calls}
    # Nothing the patient sent carries a tool call written out as assistant text.
    for request, _ in seen:
        if request.role == "patient":
            for m in request.messages:
                if m["role"] == "assistant" and m.get("content"):
                    assert "commit_move" not in m["content"] and '"arguments"' not in m["content"]

    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    (row,) = rows
    stored = [m for m in row["patient_messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(stored) >= 2 and all(not (m.get("content") or "").strip() for m in stored)


def test_under_the_reference_preset_the_agenda_tools_go_beside_the_words_as_native_tools(embedded_engines, tmp_path):
    """MindEval2's own path on the real model: `mindeval2-reference` offers the agenda tools on the request that asks
    for the patient's words (`agenda_tools: with_message`), as native tools the model may call or pass by, and
    commit_move is still a real tool call."""
    # The opening and one full patient turn: one commit request and one request for the words are all it checks.
    section = {**quick_recipe()["simulation"], "preset": "mindeval2-reference", "sessions": 1, "turn_cap": 2}
    section.pop("acceptable_moves_only", None)
    engines, seen = _native_engines(embedded_engines)
    with engines:
        cfg = SimulationConfig.from_section(section)
        assert cfg.agenda_tools == "with_message"
        summary = run_simulation([make_profile("n2", "minimiser")], engines, cfg, tmp_path, seed=5)
    assert not summary.failed_arcs and summary.sessions_written == 1
    patient = [(q, r) for q, r in seen if q.role == "patient" and q.tools]
    commits = [q for q, _ in patient if [t["function"]["name"] for t in q.tools] == ["commit_move"]]
    beside = [q for q, _ in patient if "commit_move" not in [t["function"]["name"] for t in q.tools]]
    assert commits and all(q.tool_choice == "required" for q in commits)
    # The words' requests carry the agenda tools natively, the model free to call one or to speak.
    assert beside and all(q.tool_choice == "auto" and q.response_schema is None for q in beside)
    assert all({t["function"]["name"] for t in q.tools} == {"complete_todo", "add_todo"} for q in beside)
    for request, _ in seen:
        if request.role == "patient":
            for m in request.messages:
                if m["role"] == "assistant" and m.get("content"):
                    assert "commit_move" not in m["content"] and '"arguments"' not in m["content"]

"""The MindSim patient's tool calls on the wire, native path: a whole arc under `mindeval2-reference` against the
scripted OpenAI-compatible server (the OpenAI backend, real HTTP bodies), the server answering tool calls as a
`vllm serve --enable-auto-tool-choice` would. Every patient request offers `commit_move` as a tool, the patient's
earlier calls go back as `tool_calls` with their `tool` results, the agenda tools ride beside the words, and no
tool call is ever sent or stored as JSON text. (The server-parsed path, over HTTP; the embedded engine's own template
path runs a whole arc in test_native_tools_embedded.py.)"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.parquet as pq

from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.preflight import preflight
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.simulate import run_simulation
from openai_stub import OpenAIStub, Reply, from_responder, tool_calling
from simfakes import make_profile
from test_reference_residue import NativeResponder

ROLES = ("patient", "scenario_writer", "first_scenario_writer", "memory_compactor", "counsellor")


def _served(responder):
    answer = from_responder(responder)
    probe = tool_calling(lambda body: Reply(content="Hello."))

    def behave(body: dict[str, Any]) -> Reply:
        names = [t["function"]["name"] for t in body.get("tools") or []]
        return probe(body) if names == ["record_mood"] else answer(body)

    return behave


class _Recipe:
    """What the preflight reads of a recipe: its simulation section (the stage registry reads the rest)."""

    def __init__(self, section: dict[str, Any]):
        self.simulation = section
        self.validation = None
        self.judge = None
        self.profiles = None


def test_a_whole_arc_sends_and_keeps_commit_move_as_real_tool_calls(tmp_path):
    section = {"preset": "mindeval2-reference", "sessions": 2, "counsellor_replies": 3}
    config = SimulationConfig.from_section(section)
    responder = NativeResponder(todo_calls=1)
    with OpenAIStub(_served(responder)).serve(*ROLES) as stub:
        engines_cfg = EnginesConfig(
            engines={"srv": OpenAIEngine(base_url=stub.base_url, model="patient", native_tools=True)},
            roles={
                "default": RoleSpec(engine="srv", seed=3),
                **{r: RoleSpec(engine="srv", model=r, seed=3) for r in ROLES},
            },
        )
        with Engines.from_config(engines_cfg) as engines:
            report = preflight(_Recipe(section), engines, {"simulate"})
            summary = run_simulation([make_profile("w1", "minimiser")], engines, config, tmp_path, seed=5)
        bodies = list(stub.requests)
    assert report.tool_calls() == {"patient": "native"}
    assert not summary.failed_arcs and summary.sessions_written == 2

    patient = [b for b in bodies if b["model"] == "patient" and b.get("tools")]
    commits = [b for b in patient if [t["function"]["name"] for t in b["tools"]] == ["commit_move"]]
    beside = [b for b in patient if "complete_todo" in [t["function"]["name"] for t in b["tools"]]]
    assert commits and all(b["tool_choice"] == "required" for b in commits)
    assert beside and all(b["tool_choice"] == "auto" for b in beside)  # agenda tools beside the words
    assert not any(b.get("response_format") for b in patient)  # never a JSON-schema answer
    # By the last request the history holds earlier commits as tool calls, each answered by a tool result.
    last = commits[-1]["messages"]
    calls = [c for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    results = [m for m in last if m["role"] == "tool"]
    assert any(c["function"]["name"] == "commit_move" for c in calls)
    assert {m["tool_call_id"] for m in results} <= {c["id"] for c in calls} and results
    assert all(isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)
    # No assistant turn carries a tool call written out as text.
    for body in patient:
        for m in body["messages"]:
            if m["role"] == "assistant" and m.get("content"):
                assert "commit_move" not in m["content"] and not m["content"].lstrip().startswith("{")

    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    stored = [m for r in rows for m in r["patient_messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert stored and all(not (m.get("content") or "").strip() for m in stored)

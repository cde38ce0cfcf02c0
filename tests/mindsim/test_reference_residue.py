"""What the `mindeval2-reference` preset reproduces beyond its data files: session length in
counsellor replies, the plain agenda with its tools beside the words, the fallback message, the later-scenario
writer without the core belief, the reference's time-line wording and rupture beat, and the counsellor's own
earlier reasoning sent back. Each expectation is the reference's (SWORDHealth/mind-eval `session.py`, `member.py`,
`arc.py`, `config/episode.yaml`), written out here; each test fails on the code before these changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.types import ChatRequest, RawReply
from mindsimkit.mindsim import reference
from mindsimkit.mindsim.agenda import Agenda
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.prompting import load_harness_text
from mindsimkit.mindsim.schedule import load_schedule_data
from mindsimkit.mindsim.simulate import run_simulation
from mindsimkit.mindsim.summary import SimulationSummary
from simfakes import SimResponder, make_profile

PRESET = "mindeval2-reference"
ROLES = {"default": RoleSpec(engine="fake", seed=11)}
THOUGHT = "I was weighing how much to say."


def sim(**section) -> SimulationConfig:
    return SimulationConfig.from_section(section)


class NativeResponder(SimResponder):
    """Plays every role on an engine with native tool calls: `commit_move` and the agenda tools come back as
    `tool_calls`; offered the agenda tools beside the words, the patient calls `todo_calls` of them, then speaks.
    The counsellor returns reasoning beside its words. `bad_message` makes every patient message harness text."""

    def __init__(self, *, todo_calls: int = 1, bad_message: bool = False, **kw):
        super().__init__(end_after=99, **kw)
        self.todo_calls = todo_calls
        self.bad_message = bad_message
        self.counsellor_sent: list[list[dict]] = []

    def __call__(self, req: ChatRequest):
        names = [t["function"]["name"] for t in req.tools or []]
        if "commit_move" in names:
            enum = [
                m
                for m in req.tools[0]["function"]["parameters"]["properties"]["move"]["enum"]
                if m not in ("minimize", "share", "go_deeper", "disclose_unsaid")
            ]
            move = enum[sum(m["role"] == "user" for m in req.messages) % len(enum)]  # a new move each turn
            return self._call(
                "commit_move",
                {
                    "move": move,
                    "secondary_move": None,
                    "end_conversation": False,
                    "reasoning": "I don't want to get into it yet.",
                },
            )
        if "complete_todo" in names:
            this_turn = _since_commit(req.messages)
            if sum(m["role"] == "tool" and m.get("name") != "commit_move" for m in this_turn) < self.todo_calls:
                return self._call(
                    "complete_todo" if len(this_turn) % 2 else "add_todo",
                    {"item": f"the rejection email {len(req.messages)}"},
                )
            return self._words(req)
        if req.role.startswith("counsellor"):
            self.counsellor_sent.append(json.loads(json.dumps(req.messages)))  # the history grows after the call
            n = sum(m["role"] == "assistant" for m in req.messages)
            return RawReply(
                content=f"What happened next? ({n})",
                finish_reason="stop",
                reasoning={"reasoning_content": f"{THOUGHT} ({n})"},
            )
        if not req.tools and not req.response_schema and req.role == "patient":
            return self._words(req)
        return super().__call__(req)

    def _words(self, req: ChatRequest) -> RawReply:
        text = '{"name": "commit_move", "arguments": {}}' if self.bad_message else "yeah idk, it's a lot"
        return RawReply(content=text, finish_reason="stop")

    @staticmethod
    def _call(name: str, arguments: dict) -> RawReply:
        return RawReply(
            content=None,
            finish_reason="tool_calls",
            tool_calls=[{"id": "", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
        )


def _since_commit(messages: list[dict]) -> list[dict]:
    """The messages after this turn's accepted commit_move result."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "tool" and messages[i].get("name") == "commit_move":
            return messages[i + 1 :]
    return []


def simulate(out: Path, responder, *, native: bool = True, profiles=None, **section):
    config = sim(**{"sessions": 1, **section})
    backend = FakeBackend(responder, native_tools=native)
    with Engines.with_backend(backend, roles=ROLES) as engines:
        summary = run_simulation(profiles or [make_profile("r1", "minimiser")], engines, config, out, seed=5)
    path = out / "sessions" / "sessions.parquet"
    rows = pq.read_table(path).to_pylist() if path.is_file() else []
    return summary, backend, rows


def replies(row: dict) -> int:
    return sum(m["role"] == "assistant" for m in row["counsellor_messages"])


# -- item 4: session length in counsellor replies -------------------------------------------------------------------


def test_counsellor_replies_is_the_papers_unit_and_sets_the_turn_cap_by_who_opens():
    assert sim(counsellor_replies=30).turn_cap == 31
    assert sim(counsellor_replies=15, opening="counsellor").turn_cap == 15
    assert sim(counsellor_replies=4, turn_cap=5).replies_per_session == 4  # both given, agreeing
    with pytest.raises(ConfigError, match="turn_cap 30 and counsellor_replies 30 disagree"):
        sim(counsellor_replies=30, turn_cap=30)
    assert "counsellor_replies" not in sim().model_dump()  # unset: out of dumps, as before the field existed


def test_the_preset_runs_thirty_counsellor_replies_each_answered(tmp_path):
    cfg = sim(preset=PRESET)
    assert (cfg.counsellor_replies, cfg.replies_per_session, cfg.turn_cap, cfg.preset_notes()) == (30, 30, 31, [])
    _, _, rows = simulate(tmp_path, NativeResponder(), preset=PRESET, counsellor_replies=4)
    assert [replies(r) for r in rows] == [4] and len(rows[0]["turns"]) == 5  # the opening and 4 answers


def test_a_recipe_value_over_the_presets_is_said_and_recorded_never_silent(tmp_path):
    own = sim(preset=PRESET, turn_cap=3, sessions=1)
    notes = own.preset_notes()
    assert own.turn_cap == 3 and own.counsellor_replies is None and len(notes) == 2
    assert any("turn_cap 3 (in place of counsellor_replies)" in n and "counsellor_replies 30" in n for n in notes)
    assert any("sessions 1" in n and "sessions 3" in n for n in notes)
    summary, _, rows = simulate(tmp_path, NativeResponder(), preset=PRESET, turn_cap=3)
    assert [replies(r) for r in rows] == [2]  # turn_cap counts the opening: 2 counsellor replies
    written = SimulationSummary.read(tmp_path / "sessions" / "summary.json")
    assert written.preset_overrides == summary.preset_overrides and any(
        "turn_cap 3" in n for n in written.preset_overrides
    )
    # Without a preset, or with the preset's own value, nothing is overridden and summary.json has no such key.
    assert sim(preset=PRESET, counsellor_replies=30).preset_notes() == []
    assert (
        "preset_overrides"
        not in SimulationSummary(
            seed=0, counsellors=[], patient_engines=[], sessions_expected=0, elapsed_s=0
        ).model_dump()
    )


def test_two_presets_setting_session_length_in_two_units_clash_unless_the_recipe_says():
    both = {"preset": [PRESET, "patientact-reference"], "patient_engine": ["mindsim", "patientact"]}
    with pytest.raises(ConfigError, match="counsellor_replies/turn_cap differently"):
        sim(**both, opening="patient")
    assert sim(**both, opening="patient", counsellor_replies=12).turn_cap == 13


# -- item 5: the agenda as the reference keeps it --------------------------------------------------------------------


def test_a_plain_agenda_answers_in_a_word_and_keeps_an_unmatched_completion_as_done():
    brief = load_harness_text().agenda_plain_answers
    plain = Agenda.from_checkpoints(["the rejection email", "my sister"], brief=brief)
    assert plain.complete("the email about the rejection") == "noted." and plain.items[0].done
    assert plain.complete("money worries") == "noted."
    assert [(i.text, i.done, i.added) for i in plain.items[2:]] == [("money worries", True, True)]
    assert plain.add("whether to move out") == "added." and plain.add("my sister") == brief["duplicate"]
    assert plain.add("  ") == brief["unnamed"] and plain.complete("") == brief["unnamed"]
    ours = Agenda.from_checkpoints(["the rejection email", "my sister"])
    assert ours.complete("[1]").endswith("Still open: [2] my sister.") and ours.complete("money worries").startswith(
        "Nothing"
    )


def test_under_the_preset_the_agenda_tools_ride_beside_the_words_at_most_three_times(tmp_path):
    _, backend, rows = simulate(tmp_path, NativeResponder(todo_calls=5), preset=PRESET, counsellor_replies=2)
    patient = [r for r in backend.requests if r.role == "patient"]
    offered = [r for r in patient if r.tools and "complete_todo" in json.dumps(r.tools)]
    assert offered and all(r.tool_choice == "auto" for r in offered)
    assert all(r.max_tokens == 120 for r in offered)  # a request that may be the words carries the words' budget
    turns = rows[0]["turns"][1:]
    assert [len(t["todo_updates"]) for t in turns] == [3, 3]  # the reference's cap, though the model wanted five
    # After the third call the words are asked for with no tools at all; no request offers the tools with "none".
    assert all(t["message"] == "yeah idk, it's a lot" for t in turns)
    assert len([r for r in patient if not r.tools and not r.response_schema]) == 2
    assert not any(r.response_schema and "complete_todo" in json.dumps(r.response_schema) for r in patient)
    # The list is shown without ids and each call is answered in a word, never with what is still open.
    prompt = rows[0]["patient_system_prompt"]
    assert "- the rejection email" in prompt and "[1]" not in prompt
    results = [u["result"] for t in turns for u in t["todo_updates"]]
    assert set(results) <= {"noted.", "added."} and not any("Still open" in r for r in results)


def test_ours_asks_for_agenda_calls_in_requests_of_their_own_before_the_words(tmp_path):
    _, backend, rows = simulate(tmp_path, NativeResponder(todo_calls=5), counsellor_replies=2)
    patient = [r for r in backend.requests if r.role == "patient"]
    offered = [r for r in patient if r.tools and "complete_todo" in json.dumps(r.tools)]
    assert offered and all(r.tool_choice == "auto" and r.max_tokens is None for r in offered)
    assert [len(t["todo_updates"]) for t in rows[0]["turns"][1:]] == [2, 2]
    assert "[1] the rejection email" in rows[0]["patient_system_prompt"]
    assert all(
        "Still open" in u["result"] or "Nothing" in u["result"] for t in rows[0]["turns"][1:] for u in t["todo_updates"]
    )


def test_a_message_that_keeps_failing_the_check_falls_back_under_the_preset_and_fails_the_arc_in_ours(tmp_path):
    summary, _, rows = simulate(
        tmp_path / "ref", NativeResponder(bad_message=True), preset=PRESET, counsellor_replies=2
    )
    assert not summary.failed_arcs
    turns = rows[0]["turns"][1:]
    assert [t["message"] for t in turns] == ["i don't know", "i don't know"] and all(t["fallback"] for t in turns)
    assert all(len(t["rejected_messages"]) == 3 for t in turns)  # the first ask and both re-asks, each recorded
    assert not rows[0]["turns"][0]["fallback"]  # the opening was the scenario's
    ours, _, rows = simulate(tmp_path / "ours", NativeResponder(bad_message=True), counsellor_replies=2)
    assert len(ours.failed_arcs) == 1 and "no usable message" in ours.failed_arcs[0].error and not rows


def test_a_blank_message_still_fails_the_turn_under_the_preset(tmp_path):
    class Blank(NativeResponder):
        def _words(self, req):
            return RawReply(content="", finish_reason="stop")

    summary, _, _ = simulate(tmp_path, Blank(), preset=PRESET, counsellor_replies=2)
    assert len(summary.failed_arcs) == 1 and "blank" in summary.failed_arcs[0].error


def test_the_later_scenario_writer_sees_the_case_summary_not_the_core_belief_under_the_preset(tmp_path):
    profile = make_profile("r1", "minimiser")
    belief = "I'm a waste of space."
    assert belief in profile.writer_brief and belief not in profile.case_summary

    def writers(out, **section):
        _, backend, _ = simulate(
            out, NativeResponder(), profiles=[profile], sessions=2, counsellor_replies=2, **section
        )
        return [
            r.messages[0]["content"]
            for r in backend.requests
            if r.schema_name == "Scenario" and "previous conversation" in r.messages[0]["content"]
        ]

    ref = writers(tmp_path / "ref", preset=PRESET)
    assert len(ref) == 1 and belief not in ref[0] and profile.case_summary in ref[0]
    ours = writers(tmp_path / "ours")
    assert len(ours) == 1 and belief in ours[0]


def test_the_time_line_says_the_gap_in_the_references_approximate_words():
    data = reference.load_schedule()
    said = {h: reference.gap_words(data, h) for h in (1, 7.4, 30, 77, 300, 320)}
    assert said == {
        1: "about an hour",
        7.4: "about 7 hours",
        30: "about a day",
        77: "about 3 days",
        300: "about 12 days",
        320: "about 2 weeks",
    }
    for plan in reference.patient_schedule("p1", 0, sim(preset=PRESET, sessions=4)).sessions[1:]:
        then = plan.time_context.split(" ago, on ")[1]
        assert plan.time_context.endswith(f"was {plan.gap_text} ago, on {then}")
        assert plan.gap_text.startswith("about ") and " and " not in plan.gap_text
    # Ours keeps the exact hours, told to the writer and to neither prompt's time line.
    ours = reference.patient_schedule("p1", 0, sim(sessions=2)).sessions[1]
    assert ours.gap_words is None and "gap_words" not in ours.model_dump() and "about" not in ours.gap_text


def test_the_writer_is_told_the_gap_in_those_words_under_the_preset(tmp_path):
    _, backend, rows = simulate(tmp_path, NativeResponder(), preset=PRESET, sessions=2, counsellor_replies=2)
    (writer,) = [
        r.messages[0]["content"]
        for r in backend.requests
        if r.schema_name == "Scenario" and "previous conversation" in r.messages[0]["content"]
    ]
    gap = rows[1]["schedule"]["gap_words"]
    assert gap.startswith("about ") and f"exactly {gap} has passed" in writer


def test_a_rupture_between_sessions_is_a_life_rupture_under_the_preset_and_an_alliance_one_in_ours():
    ref = reference.load_schedule().event_categories["rupture"].beat
    ours = load_schedule_data().event_categories["rupture"].beat
    assert "relationship" in ref and "arrangement" in ref and "conversation" not in ref
    assert "last conversation" in ours
    plans = [
        p
        for i in range(400)
        for p in reference.patient_schedule(f"p{i}", 0, sim(preset=PRESET)).sessions
        if p.event_category == "rupture"
    ]
    assert plans and {p.beat for p in plans} == {ref}


# -- item 6: the counsellor's own reasoning, sent back ---------------------------------------------------------------


def _sent_reasoning(responder: NativeResponder) -> bool:
    return any("reasoning_content" in m for sent in responder.counsellor_sent for m in sent)


def test_under_the_preset_the_counsellor_gets_its_earlier_reasoning_back_and_every_reply_keeps_its_own(tmp_path):
    responder = NativeResponder()
    _, _, rows = simulate(tmp_path, responder, preset=PRESET, counsellor_replies=3)
    first, last = responder.counsellor_sent[0], responder.counsellor_sent[-1]
    assert not any(m["role"] == "assistant" for m in first)
    earlier = [m for m in last if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in earlier] == [f"{THOUGHT} (0)", f"{THOUGHT} (1)"]
    assert [f["reasoning"] for f in rows[0]["counsellor_flags"]] == [
        {"reasoning_content": f"{THOUGHT} ({n})"} for n in range(3)
    ]
    stored = [m for m in rows[0]["counsellor_messages"] if m["role"] == "assistant"]
    assert all(m["reasoning_content"] for m in stored)  # what was sent, byte for byte
    assert "reasoning_content" not in json.dumps(rows[0]["patient_messages"])  # the patient never sees it


def test_ours_sends_words_only_but_keeps_the_reasoning_and_a_role_can_say_either_way(tmp_path):
    responder = NativeResponder()
    _, _, rows = simulate(tmp_path / "ours", responder, counsellor_replies=3)
    assert len(responder.counsellor_sent) == 3 and not _sent_reasoning(responder)
    assert [f["reasoning"] for f in rows[0]["counsellor_flags"]][0] == {"reasoning_content": f"{THOUGHT} (0)"}
    # A role's own setting wins over the run's, both ways.
    for preset, own, sent in ((PRESET, False, False), ("ours", True, True)):
        responder = NativeResponder()
        roles = {**ROLES, "counsellor": RoleSpec(engine="fake", seed=11, return_reasoning=own)}
        with Engines.with_backend(FakeBackend(responder, native_tools=True), roles=roles) as engines:
            run_simulation(
                [make_profile("r1")],
                engines,
                sim(sessions=1, counsellor_replies=3, preset=preset),
                tmp_path / f"{preset}-{own}",
                seed=5,
            )
        assert _sent_reasoning(responder) is sent

"""The `mindeval2-reference` preset: MindSim run as the MindEval2 authors' public code runs it.

Each test pins one rule the preset takes from SWORDHealth/mind-eval; the expected numbers and move lists are
written out here from the reference (`config/moves.yaml`, `config/archetypes.yaml`, `config/episode.yaml`,
`arc.py`, `probe.py`, `session.py`) so that a change to the preset's data files has to be argued against them.
Draw frequencies are checked over thousands of schedules with tolerances of about four standard errors.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.prompts import install_overrides, load_overrides
from mindsimkit.mindsim import reference
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.prompting import load_style_data
from mindsimkit.mindsim.reference import patient_schedule as draw_schedule  # what the simulator draws with
from mindsimkit.mindsim.schedule import WEEKDAYS
from mindsimkit.mindsim.simulate import run_simulation
from mindsimkit.profilegen.moves import load_vocabulary
from simfakes import ReferenceResponder, SimResponder, make_profile

PRESET = "mindeval2-reference"
REF_CLASSES = {
    "disclosing": ["share", "go_deeper", "insight", "storytell", "report_progress", "change_talk"],
    "concealing": ["deflect", "minimize", "disengage"],
    "expressive": [
        "express_frustration",
        "express_sadness",
        "express_anxiety",
        "express_fear",
        "express_shame",
        "express_overwhelm",
        "express_hopelessness",
        "express_joy",
        "express_relief",
        "express_confusion",
        "express_gratitude",
        "express_ambivalence",
        "express_disgust",
        "express_surprise",
        "self_criticize",
        "catastrophize",
        "blame",
        "use_humor",
    ],
    "engaging": [
        "agree",
        "disagree",
        "ask_clarity",
        "answer_question",
        "ask_advice",
        "seek_validation",
        "revisit",
        "question_process",
        "resist",
        "express_constraint",
        "test_boundary",
        "set_boundary",
    ],
}
REF_LEVELS = {
    "disengage": "withhold",
    "deflect": "deflect",
    "minimize": "minimize",
    "share": "partial",
    "storytell": "partial",
    "report_progress": "partial",
    "go_deeper": "full",
    "insight": "full",
}
REF_REMOVED = {
    "intellectualizer": {"go_deeper", "express_shame", "express_hopelessness"},
    "minimizer": {"go_deeper", "catastrophize", "seek_validation"},
    "deflector": {"go_deeper", "insight", "change_talk"},
    "externalizer": {"insight", "self_criticize", "express_shame"},
    "self_critic": {"report_progress", "express_joy", "express_relief"},
    "people_pleaser": {"disagree", "resist", "express_frustration"},
    "flooded": {"insight", "change_talk", "minimize"},
    "skeptic": {"agree", "change_talk", "express_gratitude"},
    "storyteller": {"insight", "change_talk", "go_deeper"},
    "ambivalent": {"change_talk", "insight", "report_progress"},
    "ready_client": {"disengage", "deflect", "minimize"},
    "disagreeable": {"agree", "change_talk", "express_gratitude"},
    "catastrophizer": {"minimize", "use_humor", "change_talk"},
    "resistant": {"agree", "change_talk", "express_gratitude"},
    "grateful_compliant": {"disagree", "go_deeper", "resist"},
    "tester": {"agree", "express_gratitude", "change_talk"},
}


def preset_config(**over) -> SimulationConfig:
    return SimulationConfig.from_section({"preset": PRESET, **over})


# -- data: moves and archetypes -------------------------------------------------------------------------------------


def test_the_move_list_is_the_references_with_its_classes_levels_and_depth_order():
    vocab = reference.load_reference_vocabulary()
    assert list(vocab.moves) == [  # their file's order, which is the order of the patient's move list
        "share",
        "agree",
        "disagree",
        "ask_clarity",
        "insight",
        "change_talk",
        "deflect",
        "minimize",
        "disengage",
        "express_frustration",
        "express_sadness",
        "express_anxiety",
        "express_fear",
        "express_shame",
        "express_overwhelm",
        "express_hopelessness",
        "express_joy",
        "express_disgust",
        "express_surprise",
        "express_relief",
        "express_confusion",
        "express_gratitude",
        "go_deeper",
        "answer_question",
        "report_progress",
        "ask_advice",
        "seek_validation",
        "express_ambivalence",
        "blame",
        "self_criticize",
        "question_process",
        "use_humor",
        "revisit",
        "storytell",
        "resist",
        "express_constraint",
        "test_boundary",
        "set_boundary",
        "catastrophize",
    ]
    for cls, ids in REF_CLASSES.items():
        assert sorted(m.id for m in vocab.moves.values() if m.cls == cls) == sorted(ids)
    assert {m.id: m.level for m in vocab.moves.values() if m.level} == REF_LEVELS
    assert vocab.depth_moves == ["minimize", "share", "go_deeper"]  # the canonical moves of minimize < partial < full
    assert vocab.version != load_vocabulary().version
    shared = set(vocab.moves) & set(load_vocabulary().moves)
    assert "storytell" not in load_vocabulary().moves and {"deflect", "share", "go_deeper"} <= shared


def test_each_archetype_removes_exactly_the_references_three_moves_and_ours_map_one_to_one():
    vocab = reference.load_reference_vocabulary()
    assert {a.id: a.removed_ids for a in vocab.archetypes.values()} == REF_REMOVED
    assert all(len(a.never_lines) == 3 and all(a.never_lines) for a in vocab.archetypes.values())
    ours = load_vocabulary().archetypes
    assert set(vocab.aliases) == set(ours) and sorted(vocab.aliases.values()) == sorted(REF_REMOVED)
    # A profile of ours plays the mapped archetype's repertoire: the 39 moves less its three.
    for our_id, ref_id in vocab.aliases.items():
        assert {m.id for m in vocab.available(our_id)} == set(vocab.moves) - REF_REMOVED[ref_id]
    assert vocab.archetype("joker").id == "disagreeable" and vocab.archetype("minimiser").id == "minimizer"


def test_ready_client_may_lose_a_whole_class_under_the_preset_only():
    vocab = reference.load_reference_vocabulary()
    assert not any(m.cls == "concealing" for m in vocab.available("ready_client"))


# -- the schedule --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schedules():
    config = preset_config(sessions=5)
    return [draw_schedule(f"p{i}", 7, config) for i in range(6000)]


def near(counts: Counter, expected: dict, tol: float = 0.025) -> None:
    total = sum(counts.values())
    got = {k: counts[k] / total for k in expected}
    assert set(counts) <= set(expected), counts
    assert all(abs(got[k] - p) <= tol for k, p in expected.items()), (got, expected)


def test_concealment_dwell_draws_match_the_references_frequencies(schedules):
    runs = {"closed": Counter(), "guarded": Counter()}
    for s in schedules:
        levels = [p.concealment for p in s.sessions]
        order = ["closed", "guarded", "open"]
        assert [order.index(x) for x in levels] == sorted(
            order.index(x) for x in levels
        )  # opens or holds, never closes
        first = levels[0]
        if first in runs:
            held = len(levels) - len(levels[levels.index(first) :]) + sum(1 for x in levels if x == first)
            runs[first]["never" if held == len(levels) else str(held)] += 1
    near(runs["closed"], {"1": 0.10, "2": 0.30, "3": 0.30, "never": 0.30}, tol=0.03)
    near(runs["guarded"], {"1": 0.20, "2": 0.35, "3": 0.20, "never": 0.25}, tol=0.03)
    assert all(p.max_depth == 3 for s in schedules[:50] for p in s.sessions)  # the reference's guard is off


def test_dwell_rule_opens_one_step_after_the_drawn_sessions_and_open_never_moves():
    data = reference.load_schedule().concealment
    draws = iter(["2", "1"])
    assert reference.concealment_levels(data, "closed", 5, lambda step, dist: next(draws)) == [
        "closed",
        "closed",
        "guarded",
        "open",
        "open",
    ]
    assert reference.concealment_levels(data, "open", 3, lambda step, dist: "never") == ["open"] * 3
    assert reference.concealment_levels(data, "guarded", 4, lambda step, dist: "never") == ["guarded"] * 4


def test_gaps_fall_in_the_references_bins_at_its_weights(schedules):
    gaps = [p.gap_hours for s in schedules for p in s.sessions[1:]]
    assert all(6 <= g < 336 for g in gaps)
    bins = Counter("6-24" if g < 24 else "24-96" if g < 96 else "96-336" for g in gaps)
    near(bins, {"6-24": 0.35, "24-96": 0.40, "96-336": 0.25})
    assert any(g != round(g) for g in gaps)  # uniform inside the band, not whole hours as ours


def test_event_and_emotion_priors_and_first_hour_bands_are_the_references(schedules):
    near(
        Counter(p.event_category for s in schedules for p in s.sessions[1:]),
        {
            "setback": 0.20,
            "plateau": 0.20,
            "breakthrough": 0.10,
            "rupture": 0.10,
            "external_event": 0.20,
            "new_problem": 0.20,
        },
    )
    near(
        Counter(p.emotion for s in schedules for p in s.sessions),
        {"sadness": 0.30, "fear": 0.22, "anger": 0.16, "happiness": 0.16, "surprise": 0.10, "disgust": 0.06},
    )
    first = [s.sessions[0] for s in schedules]
    near(
        Counter("7-12" if p.hour < 12 else "12-18" if p.hour < 18 else "18-23" for p in first),
        {"7-12": 0.25, "12-18": 0.35, "18-23": 0.40},
    )
    near(Counter(p.weekday for p in first), {d: 1 / 7 for d in WEEKDAYS})


def test_the_time_line_names_the_part_of_day_and_the_last_session_and_is_the_patients_only():
    s = draw_schedule("p1", 0, preset_config())
    first, second = s.sessions[0], s.sessions[1]
    assert first.time_context.startswith(f"It is {first.weekday} ") and "last conversation" not in first.time_context
    assert second.time_context.startswith(f"It is {second.weekday} ")
    assert f"on {first.weekday} " in second.time_context and "last conversation" in second.time_context
    assert all(p.patient_only_time and p.counsellor_time_context == "" for p in s.sessions)
    ours = draw_schedule("p1", 0, SimulationConfig())
    assert ours.sessions[0].counsellor_time_context == ours.sessions[0].time_context
    assert "time_text" not in ours.sessions[0].model_dump() and "patient_only_time" not in ours.sessions[0].model_dump()


def test_draws_are_stable_and_adding_a_session_moves_no_earlier_draw():
    three = draw_schedule("p9", 4, preset_config(sessions=3)).sessions
    five = draw_schedule("p9", 4, preset_config(sessions=5)).sessions
    assert [p.model_dump() for p in five[:3]] == [p.model_dump() for p in three]
    assert draw_schedule("p9", 4, preset_config()) == draw_schedule("p9", 4, preset_config())


# -- settings --------------------------------------------------------------------------------------------------------


def test_the_preset_fills_thirty_counsellor_replies_and_the_untimed_counsellor_but_the_recipe_wins():
    cfg = preset_config()
    # turn_cap counts patient turns with the opening: the opening plus 30 answered counsellor replies.
    assert (cfg.counsellor_replies, cfg.turn_cap, cfg.sessions, cfg.opening, cfg.memory_max_entries) == (
        30,
        31,
        3,
        "patient",
        30,
    )
    assert cfg.counsellor_template == "counsellor/untimed.jinja2"
    # No same-move rule (the reference's guard is off); a malformed move asked again twice, a message three times.
    assert (cfg.max_same_move_run, cfg.max_commit_retries, cfg.max_message_retries) == (0, 2, 2)
    assert (cfg.agenda_plain, cfg.max_todo_calls, cfg.agenda_tools) == (True, 3, "with_message")
    assert (cfg.message_fallback, cfg.return_reasoning) == ("i don't know", True)
    own = preset_config(turn_cap=3, sessions=2)
    assert (own.turn_cap, own.sessions, own.counsellor_template) == (3, 2, "counsellor/untimed.jinja2")


# -- a whole run on the fake engine ----------------------------------------------------------------------------------

ROLES = {"default": RoleSpec(engine="fake", seed=11)}


def run(out: Path, **over):
    config = SimulationConfig.from_section({"preset": PRESET, "turn_cap": 3, "sessions": 2, **over})
    backend = FakeBackend(ReferenceResponder(end_after=99))
    with Engines.with_backend(backend, roles=ROLES) as engines:
        summary = run_simulation(
            [make_profile("r1", "minimiser"), make_profile("r2", "joker")], engines, config, out, seed=5
        )
    return summary, backend


@pytest.fixture(scope="module")
def preset_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("preset")
    summary, backend = run(out)
    rows = pq.read_table(out / "sessions" / "sessions.parquet").to_pylist()
    return summary, backend, rows


def test_a_preset_run_with_small_turn_cap_and_sessions_finishes_on_the_fake_engine(preset_run):
    summary, backend, rows = preset_run
    assert not summary.failed_arcs and summary.sessions_written == 4 == len(rows)
    vocab = reference.load_reference_vocabulary()
    assert {r["vocabulary_version"] for r in rows} == {vocab.version}
    commits = [r for r in backend.requests if r.response_schema and "commit_move" in json.dumps(r.response_schema)]
    enums = {
        tuple(json.loads(json.dumps(r.response_schema))["properties"]["arguments"]["properties"]["move"]["enum"])
        for r in commits
    }
    # r1 (our minimiser) plays the reference's minimizer, r2 (our joker) its disagreeable.
    assert enums == {tuple(m.id for m in vocab.available("minimiser")), tuple(m.id for m in vocab.available("joker"))}
    assert all(len(r["turns"]) <= 3 for r in rows)


def _systems(backend, role_prefix: str) -> list[str]:
    return [r.messages[0]["content"] for r in backend.requests if r.role.startswith(role_prefix) and r.messages]


def test_the_patient_gets_day_and_time_and_the_counsellor_does_not(preset_run):
    _, backend, rows = preset_run
    assert rows and all(r["schedule"]["patient_only_time"] for r in rows)
    for r in rows:
        line = r["schedule"]["time_text"]
        assert line in r["patient_system_prompt"] and line not in r["counsellor_system_prompt"]
        assert not any(day in r["counsellor_system_prompt"] for day in WEEKDAYS)
    assert not any(day in s for s in _systems(backend, "counsellor") for day in WEEKDAYS)


def test_the_next_scenario_writer_reads_the_memory_the_archetype_and_the_next_sessions_conduct(preset_run):
    _, backend, rows = preset_run
    style, vocab = load_style_data(), reference.load_reference_vocabulary()
    writes = [
        (i, r)
        for i, r in enumerate(backend.requests)
        if r.schema_name == "Scenario" and "previous conversation" in r.messages[0]["content"]
    ]
    assert len(writes) == 2  # one later session per patient
    archetypes = {"r1": vocab.archetype("minimiser"), "r2": vocab.archetype("joker")}
    seen = set()
    for i, req in writes:
        prompt = req.messages[0]["content"]
        (pid,) = [p for p, a in archetypes.items() if a.text in prompt]  # each writer sees its own patient's only
        seen.add(pid)
        first, second = sorted((r for r in rows if r["patient_id"] == pid), key=lambda r: r["session_index"])
        assert first["memory_after"] and all(entry in prompt for entry in first["memory_after"])
        assert all(n in prompt for n in archetypes[pid].never_lines)
        plan = second["schedule"]
        assert style.concealment[plan["concealment"]].line in prompt and style.emotion[plan["emotion"]] in prompt
        # The memory is rewritten before the writer is asked, not alongside it.
        compactions = [j for j, r in enumerate(backend.requests) if r.role == "memory_compactor" and j < i]
        assert compactions
        assert second["prompts"]["scenario/next_reference.jinja2"]
    assert seen == {"r1", "r2"}


def test_without_the_preset_the_writer_and_counsellor_keep_ours(tmp_path):
    config = SimulationConfig(sessions=2, turn_cap=3)
    backend = FakeBackend(SimResponder(end_after=99))
    with Engines.with_backend(backend, roles=ROLES) as engines:
        run_simulation([make_profile("o1", "minimiser")], engines, config, tmp_path, seed=5)
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    assert rows and not any(r["schedule"].get("time_text") or r["schedule"].get("patient_only_time") for r in rows)
    assert any(day in s for s in _systems(backend, "counsellor") for day in WEEKDAYS)
    nxt = [
        r.messages[0]["content"]
        for r in backend.requests
        if r.schema_name == "Scenario" and "previous conversation" in r.messages[0]["content"]
    ]
    assert nxt and not any("running memory" in p for p in nxt)


# -- the authors' template variables ---------------------------------------------------------------------------------

# The variables the authors' published prompts read (mind-eval prompts/member_system.j2, evolve_situation.j2,
# compact_log.j2): a template of those names must be accepted by `prompts:` and render under the preset.
PAPER_VARIABLES = {
    "patient/system.jinja2": [
        "style_rule",
        "move_lines",
        "secondary_note",
        "depth_moves",
        "agenda_goal",
        "verbosity_line",
        "style_examples",
        "formulation",
        "archetype_text",
        "archetype_avoids",
        "knob_lines",
        "time_context",
        "situation",
        "agenda_checkpoints",
        "memory_text",
    ],
    "scenario/next_reference.jinja2": [
        "formulation",
        "prev_situation",
        "transcript",
        "memory",
        "now_line",
        "gap",
        "leftover_todos",
        "beat_gloss",
        "register_lines",
        "archetype_text",
        "archetype_avoids",
        "conduct_lines",
    ],
    "scenario/next.jinja2": [
        "formulation",
        "prev_situation",
        "transcript",
        "memory",
        "now_line",
        "gap",
        "leftover_todos",
        "beat_gloss",
        "register_lines",
        "archetype_text",
        "archetype_avoids",
        "conduct_lines",
    ],
    "memory/compact.jinja2": ["prior_log", "transcript", "max_entries"],
}


def test_templates_reading_the_papers_variables_are_accepted_and_render_under_the_preset(tmp_path):
    files = {}
    for name, names in PAPER_VARIABLES.items():
        body = "\n".join(f"{v}: {{{{ {v} }}}}" for v in names)
        if name == "patient/system.jinja2":
            # The scenario's fields as their template reads them, each a real attribute of ours.
            body += (
                "\n{% if secondary_note %}note{% endif %} {{ situation.event }}"
                "{% for t in situation.automatic_thoughts %}{{ t }}{% endfor %}"
                "{% for b in situation.behaviors %}{{ b }}{% endfor %}"
                "{% if situation.physical %}{% for p in situation.physical %}{{ p }}{% endfor %}{% endif %}"
            )
        path = tmp_path / name.replace("/", "_")
        path.write_text(body, encoding="utf-8")
        files[name] = str(path)
    install_overrides(load_overrides(files, tmp_path))
    try:
        summary, backend = run(tmp_path / "run")
    finally:
        install_overrides({})
    assert not summary.failed_arcs
    patient = [s for s in _systems(backend, "patient") if s.startswith("style_rule:")]
    # `style_examples` prints as the published prompt expects: the turns in brackets on one line, not a list.
    lines = [next(x for x in s.splitlines() if x.startswith("style_examples:")) for s in patient]
    assert lines and all(x.startswith("style_examples: [ ") and "['" not in x and x.endswith(" ]") for x in lines)
    writer = [
        r.messages[0]["content"]
        for r in backend.requests
        if r.schema_name == "Scenario" and r.messages[0]["content"].startswith("formulation:")
    ]
    assert writer and all("memory: - " in p and "conduct_lines: [" in p for p in writer)


def test_the_reports_depth_and_concealing_rows_read_the_vocabulary_each_session_played():
    from mindsimkit.mindsim_app.report.health import by_turn
    from mindsimkit.mindsim_app.report.load import SessionView

    def session(version):
        return SessionView.model_validate(
            {
                "session_id": f"s-{version}",
                "patient_id": "p",
                "session_index": 0,
                "counsellor": str(version),
                "vocabulary_version": version,
                "turns": [
                    {"index": 1, "move": "minimize", "secondary_move": "share"},
                    {"index": 2, "move": "answer", "secondary_move": "go_deeper"},
                ],
            }
        )

    ref = reference.load_reference_vocabulary().version
    got = by_turn([session(ref), session(load_vocabulary().version)], by_engine=False)
    # Theirs: minimize conceals, share is depth 2 and go_deeper 3; ours has no `minimize`, share 1, go_deeper 2.
    assert (got[ref][1]["concealing"], got[ref][1]["depth"], got[ref][2]["depth"]) == (1.0, 2.0, 3.0)
    ours = got[load_vocabulary().version]
    assert (ours[1]["concealing"], ours[1]["depth"], ours[2]["depth"]) == (0.0, 1.0, 2.0)


def test_the_commit_move_schema_sized_for_a_preset_recipe_lists_the_references_moves():
    from types import SimpleNamespace

    from mindsimkit.mindsim.patient_engines.mindsim_engine import ENGINE, commit_tool_schema

    def enum(schema):
        return set(json.dumps(schema).split('"enum": [', 1)[1].split("]", 1)[0].replace('"', "").split(", "))

    (role,) = [r for r in ENGINE.role_schemas() if r.name == "tool_choice:commit_move"]
    preset = role.schema_of(SimpleNamespace(simulation={"preset": PRESET}))
    assert enum(preset) == set(reference.load_reference_vocabulary().moves)
    assert role.schema_of(SimpleNamespace(simulation={})) == commit_tool_schema()
    assert enum(commit_tool_schema()) == set(load_vocabulary().moves)

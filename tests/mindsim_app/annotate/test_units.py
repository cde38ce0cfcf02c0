"""Turn numbering on the annotation page follows `mindcore.exchange.spoken`: a blank reply is a turn."""

from __future__ import annotations

from mindsimkit.mindcore.exchange import PATIENT, spoken
from mindsimkit.mindsim_app.annotate import units

CHAT = [
    {"role": "system", "content": "You are a counsellor."},
    {"role": "user", "content": "I could not sleep again."},
    {"role": "assistant", "content": "What kept you awake?"},
    {"role": "user", "content": "   "},  # the patient said nothing
    {"role": "assistant", "content": "Take your time."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "t1"}]},  # tool traffic is not spoken
    {"role": "user", "content": "Work, mostly."},
]


def test_a_blank_reply_keeps_its_turn_number():
    msgs = units.shown(CHAT)
    assert [m["speaker"] for m in msgs] == ["patient", "counsellor", "patient", "counsellor", "patient"]
    ts = units.turns(msgs)
    assert [t.patient for t in ts] == ["I could not sleep again.", "   ", "Work, mostly."]
    assert [t.counsellor for t in ts] == [None, "What kept you awake?", "Take your time."]
    # Turn k of the page is the k-th patient message of the shared rule, so exports line up with the judge's.
    assert [t.patient for t in ts] == [text for role, text in spoken(CHAT) if role == PATIENT]


def test_a_window_over_a_blank_reply_numbers_its_units_by_conversation_turn():
    msgs, us = units.window(units.turns(units.shown(CHAT)), 1, 2)
    assert [u["turn"] for u in us] == [1, 2]
    assert [msgs[u["message"]]["text"] for u in us] == ["   ", "Work, mostly."]
    assert [u["unit"] for u in us] == ["0", "1"]


def test_the_patient_role_can_be_the_assistant_side():
    real = [
        {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "I am here."},
    ]
    msgs = units.shown(real, patient_role="assistant")
    assert [m["speaker"] for m in msgs] == ["patient", "counsellor", "patient"]
    assert [t.counsellor for t in units.turns(msgs)] == [None, ""]


def test_a_sampled_window_keeps_a_blank_reply_in_its_place(tmp_path):
    """End to end through the realism sampler: the page's items number turns as the shared rule does."""
    import json
    from pathlib import Path

    from mindsimkit.mindsim_app.annotate.samplers import sample_realism
    from mindsimkit.mindsim_app.annotate.tasks import Design, load_task

    msgs = [
        {"role": "assistant", "content": "Hello, what brings you here?"},
        {"role": "user", "content": "My sleep."},
        {"role": "assistant", "content": "Tell me more."},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "That is all right."},
        {"role": "user", "content": "Sorry. Work."},
    ]
    real = tmp_path / "real.jsonl"
    real.write_text(json.dumps({"conversation_id": "c1", "messages": msgs}) + "\n")
    s = sample_realism(tmp_path / "t", Design(raters=["a"], k=1, all_raters=0), n=1, real=[str(real)], windows=[3])
    (item,) = load_task(Path(s["task"])).items.values()
    shown = item["display"]["messages"]
    assert [(u["turn"], shown[u["message"]]["text"]) for u in item["units"]] == [
        (0, "My sleep."),
        (1, ""),
        (2, "Sorry. Work."),
    ]

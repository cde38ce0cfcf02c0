"""Turn numbering on the annotation page follows `mindcore.exchange.spoken`: a blank reply is a turn."""

from __future__ import annotations

from mindcore.exchange import PATIENT, spoken
from mindsim_app.annotate import units

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
    real = [{"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": ""},
            {"role": "assistant", "content": "I am here."}]
    msgs = units.shown(real, patient_role="assistant")
    assert [m["speaker"] for m in msgs] == ["patient", "counsellor", "patient"]
    assert [t.counsellor for t in units.turns(msgs)] == [None, ""]

"""Tests for the session agenda and its tools (mindsim/agenda.py)."""

from __future__ import annotations

from mindsimkit.mindsim.agenda import Agenda


def test_complete_by_id_and_by_words_and_status():
    a = Agenda.from_checkpoints(["the money", "whether to call her back", "sleep"])
    assert "Marked done: the money" in a.complete("[1]")
    r = a.complete("call her")
    assert "whether to call her back" in r and r.endswith("Still open: [3] sleep.")
    assert "Nothing open matches" in a.complete("the weather")
    assert "Nothing open matches" in a.complete("1")  # already done
    a.complete("3")
    assert a.status() == "Nothing left open on your list."


def test_add_and_duplicates():
    a = Agenda.from_checkpoints(["the money"])
    assert "Added: my brother" in a.add("my brother")
    assert a.items[-1].added and a.items[-1].id == 2
    assert "already on your list" in a.add("The money")
    assert "Nothing to add" in a.add("   ")
    assert [i.text for i in a.open_items] == ["the money", "my brother"]

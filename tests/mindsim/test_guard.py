"""Tests for the commit_move guard and tool schema (mindsim/guard.py)."""

from __future__ import annotations

import random

import pytest

from mindsimkit.mindsim.guard import GuardState, check_commit, commit_move_model, pick_cue
from mindsimkit.profilegen.moves import load_vocabulary

V = load_vocabulary()


def state(archetype="minimiser", max_depth=3, recent=(), run=3):
    return GuardState(
        vocabulary=V, archetype=archetype, max_depth=max_depth, recent_moves=recent, max_same_move_run=run
    )


def commit(move, secondary=None, reasoning="I just don't want to go there."):
    return {"move": move, "secondary_move": secondary, "end_conversation": False, "reasoning": reasoning}


@pytest.mark.parametrize("archetype", list(V.archetypes))
def test_every_removed_move_is_rejected_with_its_never_sentence(archetype):
    arch = V.archetype(archetype)
    for removed in arch.removed:
        v = check_commit(commit(removed.move), state(archetype))
        assert not v.ok and removed.never in v.reason
        v = check_commit(commit("answer" if removed.move != "answer" else "agree", removed.move), state(archetype))
        assert not v.ok and removed.never in v.reason


@pytest.mark.parametrize("archetype", list(V.archetypes))
def test_schema_enum_lists_only_available_moves(archetype):
    avail = [m.id for m in V.available(archetype)]
    schema = commit_move_model(avail, V.depth_moves).model_json_schema()
    enum = schema["properties"]["move"]["enum"]
    assert set(enum) == set(avail)
    assert V.archetype(archetype).removed_ids.isdisjoint(enum)


def test_reject_reasons():
    assert "not a move" in check_commit(commit("levitate"), state()).reason
    assert "repeats the main move" in check_commit(commit("answer", "answer"), state()).reason
    assert "no move" in check_commit(commit(""), state()).reason
    assert "empty" in check_commit(commit("answer", reasoning="  "), state()).reason
    assert "as yourself" in check_commit(commit("answer", reasoning="The patient is avoiding it."), state()).reason


def test_concealment_caps_depth_for_primary_and_secondary():
    v = check_commit(commit("answer", "disclose_unsaid"), state("sceptic", max_depth=2))
    assert not v.ok and "go_deeper" in v.reason
    assert not check_commit(commit("go_deeper"), state("sceptic", max_depth=1)).ok
    assert check_commit(commit("answer", "go_deeper"), state("sceptic", max_depth=2)).ok


def test_same_move_run_rejected_only_at_the_limit():
    assert check_commit(commit("answer"), state(recent=("answer", "answer"))).ok
    assert not check_commit(commit("answer"), state(recent=("answer",) * 3)).ok
    assert check_commit(commit("answer"), state(recent=("answer",) * 3, run=0)).ok


def test_accepted_move_and_cue():
    v = check_commit(commit("deflect", "humour"), state())
    assert v.ok and (v.move, v.secondary) == ("deflect", "humour")
    cue = pick_cue(V, "deflect", ["a few words"], random.Random(0))
    assert cue.split("; ")[0] in V.moves["deflect"].cues and cue.endswith("a few words")


def test_commit_move_model_is_one_class_per_move_list():
    vocab = load_vocabulary()
    moves = [m.id for m in vocab.available("guarded")] if "guarded" in vocab.archetypes else list(vocab.moves)[:5]
    a = commit_move_model(moves, [])
    assert commit_move_model(list(moves), []) is a  # the same list again: the same class (and cached schema)
    other = commit_move_model(moves[:-1], [])
    assert other is not a and other.model_json_schema()["properties"]["move"]["enum"] == moves[:-1]


def test_acceptable_moves_are_exactly_what_the_guard_accepts():
    from mindsimkit.mindsim.guard import acceptable_moves

    for archetype in V.archetypes:
        for max_depth in (1, 2, 3):
            for recent, run in (((), 3), (("answer",) * 3, 3), (("answer",) * 3, 0)):
                st = state(archetype, max_depth=max_depth, recent=recent, run=run)
                primary, secondary = acceptable_moves(st)
                everything = list(V.moves)
                assert primary == [m for m in everything if check_commit(commit(m), st).ok]
                lead = primary[0] if primary[0] != "answer" else primary[1]
                assert secondary == [m for m in everything if m == lead or check_commit(commit(lead, m), st).ok]

"""Tests for the move vocabulary and archetypes (profilegen/moves.py)."""

from __future__ import annotations

import copy

import pytest
import yaml
from importlib import resources

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.profilegen.moves import EXPECTED_MOVES, archetype_ids, build_vocabulary, load_vocabulary


def _raw(name: str) -> dict:
    return yaml.safe_load((resources.files("mindsimkit.profilegen") / "data" / name).read_text())


def test_shipped_vocabulary_shape():
    v = load_vocabulary()
    assert len(v.moves) == EXPECTED_MOVES
    assert {m.cls for m in v.moves.values()} == {"disclosing", "concealing", "expressive", "engaging"}
    assert v.depth_moves == ["share", "go_deeper", "disclose_unsaid"]
    assert len(archetype_ids()) == 16
    for a in v.archetypes.values():
        avail = {m.id for m in v.available(a.id)}
        assert avail.isdisjoint(a.removed_ids)
        assert len(avail) == EXPECTED_MOVES - len(a.removed_ids)
        assert all(s.strip() for s in a.never_lines)


def test_unknown_removed_move_rejected():
    arch = _raw("archetypes.yaml")
    arch["archetypes"][0]["removed"][0]["move"] = "levitate"
    with pytest.raises(ConfigError, match="levitate"):
        build_vocabulary(_raw("moves.yaml"), arch)


def test_wrong_move_count_and_bad_class_rejected():
    moves = _raw("moves.yaml")
    short = copy.deepcopy(moves)
    short["moves"] = [m for m in short["moves"] if m["id"] != "thank"]
    arch = _raw("archetypes.yaml")
    for a in arch["archetypes"]:
        a["removed"] = [r for r in a["removed"] if r["move"] != "thank"] or a["removed"]
    with pytest.raises(ConfigError, match="expected 39 moves"):
        build_vocabulary(short, arch)
    bad = copy.deepcopy(moves)
    bad["moves"][0]["class"] = "mystical"
    with pytest.raises(ConfigError, match="malformed"):
        build_vocabulary(bad, _raw("archetypes.yaml"))


def test_unknown_archetype_names_known_ones():
    with pytest.raises(ConfigError, match="minimiser"):
        load_vocabulary().archetype("nonexistent")

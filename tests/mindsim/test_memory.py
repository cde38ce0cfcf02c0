"""Tests for the running-memory carry rules and compaction (mindsim/memory.py)."""

from __future__ import annotations

import asyncio

import pytest

from mindsimkit.mindcore.errors import TransportError
from mindsimkit.mindcore.fake import FakeBackend, scripted
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindsim.memory import check_log, compact_memory, parse_log, repair_log

PRIOR = [
    "Patient lost his job at the depot in March.",
    "Patient will call his sister before Friday. [open]",
    "Patient prefers evenings for talking.",
]


def test_parse_log_ignores_preamble_and_accepts_bullets():
    text = "Here is the log:\n- Patient a.\n* Patient b.\n1. Patient c.\n\nthanks"
    assert parse_log(text) == ["Patient a.", "Patient b.", "Patient c."]
    assert parse_log("") == []


def test_verbatim_carry_is_checked():
    ok = PRIOR + ["Patient applied for two warehouse jobs this week."]
    assert check_log(PRIOR, ok, 30).ok
    reworded = [PRIOR[0].replace("March", "spring"), *PRIOR[1:]]
    problems = check_log(PRIOR, reworded, 30).problems
    assert any("word for word" in p and "March" in p for p in problems)


def test_open_entry_may_be_rewritten_once_reported():
    new = [PRIOR[0], "Patient called his sister on Thursday and it went well.", PRIOR[2]]
    assert check_log(PRIOR, new, 30).ok


def test_cap_and_drops():
    too_many = PRIOR + [f"Patient said thing {i}." for i in range(30)]
    assert any("most allowed" in p for p in check_log(PRIOR, too_many, 30).problems)
    # at the cap an untagged prior entry may go
    at_cap = [PRIOR[1], PRIOR[2]] + [f"Patient said thing {i}." for i in range(3)]
    assert check_log(PRIOR, at_cap, 5).ok
    # but not the [open] one while an untagged one is still there
    drop_open = [PRIOR[0], PRIOR[2]] + [f"Patient said thing {i}." for i in range(3)]
    assert any("[open]" in p for p in check_log(PRIOR, drop_open, 5).problems)


def test_new_entries_must_name_patient_and_not_repeat():
    problems = check_log([], ["He was sad.", "Patient was sad.", "Patient was sad."], 30).problems
    assert any("'patient'" in p for p in problems) and any("repeated" in p for p in problems)


def test_repair_restores_priors_and_respects_cap():
    bad = ["Patient lost a job.", "Patient called his sister and it went fine.", "He is sad."]
    fixed = repair_log(PRIOR, bad, 30)
    assert fixed[0] == PRIOR[0] and PRIOR[2] in fixed
    assert PRIOR[1] not in fixed  # rewritten [open] entry replaced by its report
    assert "He is sad." not in fixed
    assert check_log(PRIOR, fixed, 30).ok
    small = repair_log(PRIOR, [f"Patient did thing {i}." for i in range(5)], 3)
    assert len(small) == 3 and PRIOR[1] in small


def _run(responder, prior, retries=2):
    backend = FakeBackend(responder)
    with Engines.with_backend(backend) as engines:
        res = asyncio.run(compact_memory(engines.role("memory_compactor"), prior, "Patient: hi", 30, retries))
    return res, backend


def test_compaction_reasks_with_the_broken_rule_then_accepts():
    good = "\n".join(f"- {e}" for e in PRIOR) + "\n- Patient slept badly on Sunday."
    res, backend = _run(scripted("- Patient changed everything.", good), PRIOR)
    assert not res.repaired and res.attempts == 2 and res.entries[-1] == "Patient slept badly on Sunday."
    assert "word for word" in backend.requests[1].messages[-1]["content"]


def test_compaction_that_never_complies_is_repaired_and_recorded():
    res, backend = _run(scripted("- nonsense"), PRIOR, retries=1)
    assert res.repaired and res.problems and len(backend.requests) == 2
    assert all(e in res.entries for e in PRIOR)


def test_engine_failure_propagates_instead_of_keeping_the_old_log():
    def down(_req):
        raise TransportError("connection refused")

    with pytest.raises(TransportError, match="connection refused"):
        _run(down, PRIOR)


def test_entry_cut_by_the_token_budget_never_enters_the_log():
    from mindsimkit.mindcore.types import RawReply

    cut = "\n".join(f"- {e}" for e in PRIOR) + "\n- Patient slept badly on Sunday.\n- Patient said that her sis"
    res, _ = _run(lambda _req: RawReply(content=cut, finish_reason="length", completion_tokens=64), PRIOR)
    assert not res.repaired
    assert res.entries == [*PRIOR, "Patient slept badly on Sunday."]
    # The same text finished normally keeps its last entry (it is checked like any other).
    res, _ = _run(lambda _req: RawReply(content=cut + "ter called.", finish_reason="stop"), PRIOR)
    assert res.entries[-1] == "Patient said that her sister called."

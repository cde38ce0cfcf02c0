"""Stage 4: quote verification, hard-conflict rules, verdicts, the revise loop."""

from __future__ import annotations

import asyncio

import pytest

from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.formulation import draft_model, to_formulation
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.render import writer_brief
from mindsimkit.profilegen.schemas import Demographics
from mindsimkit.profilegen.screen import (
    JudgeFault,
    normalise,
    quote_in,
    rule_faults,
    screen_and_revise,
    screen_once,
    verify,
)


@pytest.fixture(scope="module")
def rows():
    return anchor_personas(load_personas("synthetic", 60, seed=1).rows, load_rates(), seed=1)


def _with(row, **demo):
    d = row.demographics.model_dump()
    d.update(demo)
    return row.model_copy(update={"demographics": Demographics.model_validate(d)})


def _formulation(fakes, **over):
    d = {**fakes.GOOD_DRAFT, **over}
    return to_formulation(draft_model().model_validate(d))


def test_normalise_and_quote_in():
    text = "She said: \u201cI can\u2019t   keep up\u201d \u2014 every night."
    assert quote_in("i can't keep up", text)
    assert quote_in('"I can\'t keep up" - every night.', text)
    assert not quote_in("I cannot keep up", text)
    assert not quote_in("ab", text) and normalise("  A\nB. ") == "a b"


def test_verify_discards_invented_quotes():
    text = "Leaves bank letters unopened on the table."
    faults = [
        JudgeFault(quote="bank letters unopened", reason="vague", severity="minor"),
        JudgeFault(quote="drinks every night", reason="invented", severity="serious"),
    ]
    kept, discarded = verify(faults, text)
    assert [k.quote for k in kept] == ["bank letters unopened"] and discarded == 1
    assert kept[0].source == "judge"


def test_label_constraint_rule(fakes, rows):
    row = _with(rows[0], relationship="partnered", age_band="25-34", employment="employed")
    f = _formulation(
        fakes, precipitating={"label": "retirement", "when": "a month ago", "what_changed": "Days are empty."}
    )
    faults = rule_faults(row, f, writer_brief(row, f))
    assert len(faults) == 1 and faults[0].severity == "serious" and "age_band is 25-34" in faults[0].reason
    assert quote_in(faults[0].quote, writer_brief(row, f))


def test_text_rules_fire_only_for_matching_demographics(fakes, rows):
    f = _formulation(fakes, summary="Since her divorce, she lives alone and cries at night.")
    single_with_family = _with(rows[0], relationship="single", living_situation="with_partner_or_family")
    ids = {
        x.reason.split("(rule ")[-1].rstrip(")")
        for x in rule_faults(single_with_family, f, writer_brief(single_with_family, f))
    }
    assert ids == {"lives_alone_but_with_others", "ex_spouse_but_never_married"}
    post_alone = _with(rows[0], relationship="post_relationship", living_situation="alone")
    assert rule_faults(post_alone, f, writer_brief(post_alone, f)) == []


def test_screen_once_combines_rules_and_verified_judge(fake_engines, fakes, rows):
    row = rows[0]
    f = _formulation(fakes)

    def screener(request):
        assert "A sister phones every Sunday" in fakes.profile_text(request)
        return {
            "faults": [
                {"quote": "A sister phones every Sunday", "reason": "thin", "severity": "minor"},
                {"quote": "made-up words here", "reason": "invented", "severity": "serious"},
            ],
            "verdict": "serious",
        }

    engines, _ = fake_engines(fakes.make_responder(screener=screener))
    with engines:
        s = asyncio.run(screen_once(engines.role("screener"), row, f))
    assert s.judge_verdict == "serious" and s.verdict == "minor" and s.discarded_faults == 1
    assert [x.source for x in s.faults] == ["judge"]


def test_serious_profile_is_revised_then_clean(fake_engines, fakes, rows):
    row = rows[0]
    calls = {"screen": 0}

    def screener(request):
        calls["screen"] += 1
        if calls["screen"] == 1:
            return {
                "faults": [{"quote": "emptied savings", "reason": "contradicts stable income", "severity": "serious"}],
                "verdict": "serious",
            }
        return fakes.clean_verdict(request)

    engines, backend = fake_engines(fakes.make_responder(screener=screener))
    with engines:
        f = _formulation(fakes)
        f2, s = asyncio.run(screen_and_revise(engines.role("profile_writer"), engines.role("screener"), row, f, 2))
    assert s.verdict == "clean" and s.revisions == 1
    revision_request = [r for r in backend.requests if r.schema_name == "formulation"][0]
    assert "emptied savings" in revision_request.messages[-1]["content"]
    assert revision_request.messages[-2]["role"] == "assistant"


def test_persistently_serious_profile_stops_after_budget(fake_engines, fakes, rows):
    def screener(request):
        return {
            "faults": [
                {"quote": "Get back to feeling like myself", "reason": "goal is generic", "severity": "serious"}
            ],
            "verdict": "serious",
        }

    engines, backend = fake_engines(fakes.make_responder(screener=screener))
    with engines:
        _, s = asyncio.run(
            screen_and_revise(engines.role("profile_writer"), engines.role("screener"), rows[0], _formulation(fakes), 2)
        )
    assert s.verdict == "serious" and s.revisions == 2
    assert sum(r.schema_name == "screen" for r in backend.requests) == 3


@pytest.mark.embedded
def test_judge_on_embedded_engine(profile_engines, fakes, rows):
    """Stage 4 alone on the real engine: a verdict comes back and every kept quote is in the profile."""
    f = _formulation(fakes)
    s = asyncio.run(screen_once(profile_engines.role("screener"), rows[0], f, max_faults=2))
    assert s.verdict in ("clean", "minor", "serious") and s.judge_verdict in ("clean", "minor", "serious")
    text = writer_brief(rows[0], f)
    assert all(quote_in(x.quote, text) for x in s.faults)

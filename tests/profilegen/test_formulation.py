"""Stage 3: the writer's schema (vocabulary enums, counts, maladaptive rule), prompts, re-asking."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.formulation import (
    draft_model,
    to_draft_json,
    to_formulation,
    write_formulation,
    writer_messages,
)
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates


@pytest.fixture(scope="module")
def rows():
    return anchor_personas(load_personas("synthetic", 40, seed=0).rows, load_rates(), seed=0)


GOOD_DRAFT = {
    "summary": "Low and tired for months.",
    "goal": "Feel like myself again.",
    "predisposing": [{"label": "harsh_criticism", "history": "A father who picked apart every report."}],
    "precipitating": {"label": "financial_shock", "when": "two months ago", "what_changed": "Savings gone."},
    "protective": [{"label": "someone_checks_in", "detail": "A sister phones on Sundays."}],
    "unhelpful_coping": {"label": "avoidance", "situation": "Leaves bank letters unopened."},
    "other_coping": [],
    "core_belief": {"cluster": "worthless", "history": "Never good enough at home.", "belief": "It is never enough."},
    "quality_of_life": "moderate",
}


def _bad(**over):
    d = json.loads(json.dumps(GOOD_DRAFT))
    d.update(over)
    return d


@pytest.mark.parametrize(
    "bad",
    [
        _bad(core_belief={"cluster": "hopeless", "history": "xx history", "belief": "I am hopeless."}),
        _bad(precipitating={"label": "alien_abduction", "when": "now", "what_changed": "everything"}),
        _bad(quality_of_life="terrible"),
        _bad(unhelpful_coping={"label": "talking_it_through", "situation": "Talks to a friend."}),
        _bad(predisposing=[]),
        _bad(summary=""),
        _bad(goal="x" * 500),
    ],
)
def test_off_vocabulary_and_rule_breaking_drafts_are_rejected(bad):
    with pytest.raises(ValidationError):
        draft_model().model_validate(bad)


def test_repeated_labels_keep_their_first_use():
    d = draft_model().model_validate(
        _bad(
            protective=[
                {"label": "someone_checks_in", "detail": "A sister phones."},
                {"label": "someone_checks_in", "detail": "again"},
            ],
            other_coping=[{"label": "avoidance", "situation": "Avoids it again."}],
        )
    )
    assert [p.detail for p in d.protective] == ["A sister phones."]
    assert d.other_coping == []


def test_good_draft_roundtrips_to_stored_formulation():
    f = to_formulation(draft_model().model_validate(GOOD_DRAFT))
    assert f.core_belief.arm == "self" and any(c.maladaptive for c in f.perpetuating)
    assert json.loads(to_draft_json(f)) == GOOD_DRAFT


def test_quality_of_life_is_generated_last():
    assert list(draft_model().model_json_schema()["properties"])[-1] == "quality_of_life"


def test_prompt_lists_only_compatible_labels(rows):
    partnered = next(r for r in rows if r.demographics.relationship == "partnered")
    single = next(r for r in rows if r.demographics.relationship == "single")
    p_text, s_text = writer_messages(partnered)[1]["content"], writer_messages(single)[1]["content"]
    assert "- supportive_partner:" in p_text and "- separation_or_divorce:" not in p_text
    assert "- supportive_partner:" not in s_text
    assert partnered.persona.persona in p_text and "avoidance*" in p_text


def test_off_vocabulary_reply_is_reasked_then_accepted(fake_engines, fakes, rows):
    replies = iter([_bad(quality_of_life="awful"), None])

    def writer(request):
        r = next(replies)
        return r if r is not None else fakes.draft_for(request)

    engines, backend = fake_engines(fakes.make_responder(writer=writer))
    with engines:
        f = asyncio.run(write_formulation(engines.role("profile_writer"), rows[0]))
    assert f.quality_of_life in ("poor", "moderate", "good")
    assert len(backend.requests) == 2
    assert "could not be used" in backend.requests[1].messages[-1]["content"]


def test_persistent_garbage_raises_structured_output_error(fake_engines, fakes, rows):
    engines, _ = fake_engines(fakes.make_responder(writer=lambda r: "not json at all"))
    with engines:
        with pytest.raises(StructuredOutputError):
            asyncio.run(write_formulation(engines.role("profile_writer"), rows[0]))


def _enum_of(schema: dict, section: str) -> list[str]:
    defs = schema["$defs"]
    node = schema["properties"][section]
    ref = (node.get("items") or node)["$ref"].split("/")[-1]
    return defs[ref]["properties"]["label"]["enum"]


def test_schema_offers_only_the_labels_the_prompt_lists(fake_engines, fakes, rows):
    """The writer's schema carries the same per-patient label lists as its prompt, so a grammar-enforcing engine
    cannot pick a label the rule check would call serious; a free engine's pick is re-asked, not screened."""
    from mindsimkit.profilegen.formulation import label_choice

    partnered = next(r for r in rows if r.demographics.relationship == "partnered")
    choice = label_choice(partnered.demographics)
    assert "separation_or_divorce" not in choice.precipitating and "supportive_partner" in choice.protective
    engines, backend = fake_engines(fakes.make_responder(writer=fakes.draft_for))
    with engines:
        asyncio.run(write_formulation(engines.role("profile_writer"), partnered))
    schema = backend.requests[0].response_schema
    assert _enum_of(schema, "precipitating") == list(choice.precipitating)
    assert _enum_of(schema, "protective") == list(choice.protective)
    assert _enum_of(schema, "predisposing") == list(choice.predisposing)
    # Only those labels validate; the full vocabulary still does for the stored-row round trip.
    bad = _bad(precipitating={"label": "separation_or_divorce", "when": "in May", "what_changed": "Moved out."})
    with pytest.raises(ValidationError):
        draft_model(1.0, choice).model_validate(bad)
    draft_model().model_validate(bad)

    replies = iter([bad, None])
    engines, backend = fake_engines(fakes.make_responder(writer=lambda req: next(replies) or fakes.draft_for(req)))
    with engines:
        f = asyncio.run(write_formulation(engines.role("profile_writer"), partnered))
    assert f.precipitating.label != "separation_or_divorce" and len(backend.requests) == 2

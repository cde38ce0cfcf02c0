"""A PatientAct-shaped profile (`profiles.patientact_shape`) in the PatientAct engine: its impact symptoms and social
conditions become dynamic-layer items of their own types, the decomposition of more pieces than
`simulation.patientact.decomposition_chunk` is asked in near-equal calls (so the decomposer's budget holds for the
larger shape), the preflight counts the call the recipe can make, and the Fig. 2 card shows the impact list and the
predisposing split."""

from __future__ import annotations

import asyncio
import re

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.mindsim.patientact.budgets import _decomposition_schema
from mindsimkit.mindsim.patientact.card import card_markdown, profile_card
from mindsimkit.mindsim.patientact.decompose import chunks, decompose, draft_model, max_pieces, profile_pieces
from mindsimkit.profilegen.schemas import (
    Demographics,
    DemographicsRevision,
    Perpetuating,
    Predisposing,
    Presenting,
    RecordValues,
)
from simfakes import make_profile
from test_patientact import draft_answer

BASE = {"name": "t", "engines": {"local": {"kind": "embedded"}}, "roles": {"default": {"engine": "local"}}}
IMPACT = [
    "sleeps four hours most nights",
    "has missed two shifts",
    "stopped answering texts",
    "eats one meal a day",
    "cries in the car after work",
]


def shaped(pid: str = "p1"):
    """A PatientAct-shaped profile at its list limits: 5 symptoms, 3 histories, 2 social conditions, 5 cycles."""
    p = make_profile(pid)
    f = p.formulation
    pre = [
        Predisposing(label=f"h{i}", history=f"At {8 + i} something happened, number {i}.", kind="psychological")
        for i in range(3)
    ]
    pre += [
        Predisposing(label=f"s{i}", history=f"A family rule number {i} about keeping quiet.", kind="social")
        for i in range(2)
    ]
    cope = [
        Perpetuating(label=f"c{i}", situation=f"Cycle {i}, which keeps it going.", maladaptive=True) for i in range(5)
    ]
    f = f.model_copy(
        update={
            "presenting": Presenting(summary=f.presenting.summary, goal=f.presenting.goal, impact=IMPACT),
            "predisposing": pre,
            "perpetuating": cope,
        }
    )
    return p.model_copy(update={"formulation": f})


def test_impact_symptoms_and_social_conditions_become_items_of_their_own_types():
    pieces = profile_pieces(shaped(), None)
    by_source = {}
    for piece in pieces:
        by_source.setdefault(piece.source, []).append(piece)
    assert [x.content for x in by_source["formulation.presenting.impact"]] == IMPACT
    assert {x.type for x in by_source["formulation.presenting.impact"]} == {"symptom"}
    assert {x.type for x in by_source["formulation.predisposing"]} == {"memory"}
    assert len(by_source["formulation.predisposing"]) == 3
    assert {x.type for x in by_source["formulation.predisposing.social"]} == {"background"}
    assert len(by_source["formulation.predisposing.social"]) == 2
    # A MindSim-shaped profile keeps the pieces it had; the larger shape (five cycles) holds at most 28.
    plain = profile_pieces(make_profile("p1"), None)
    assert not any(p.source in ("formulation.presenting.impact", "formulation.predisposing.social") for p in plain)
    assert (max_pieces(), max_pieces(patientact=True)) == (18, 28)


def test_chunks_are_near_equal_in_order_and_one_call_up_to_the_size():
    pieces = profile_pieces(shaped(), None)
    assert len(pieces) == 17
    assert [len(c) for c in chunks(pieces, 18)] == [17]
    assert [len(c) for c in chunks(pieces, 6)] == [6, 6, 5]
    assert [len(c) for c in chunks(pieces, 4)] == [4, 4, 3, 3, 3]
    assert [p for c in chunks(pieces, 4) for p in c] == pieces


def _decompose(profile, chunk):
    backend = FakeBackend(lambda req: draft_answer(req))
    with Engines.with_backend(backend) as engines:
        d = asyncio.run(decompose(engines.role("profile_decomposer"), profile, 0, with_formulation=False, chunk=chunk))
    return d, [r for r in backend.requests if r.schema_name == "DecompositionDraft"]


def test_a_profile_of_more_pieces_than_the_chunk_is_decomposed_in_several_calls():
    profile = shaped()
    pieces = profile_pieces(profile, None)
    whole, one = _decompose(profile, 18)
    assert len(one) == 1 and one[0].response_schema["properties"]["items"]["maxItems"] == 17
    parts, three = _decompose(profile, 6)
    assert [r.response_schema["properties"]["items"]["maxItems"] for r in three] == [6, 6, 5]
    # Every call is shown the whole profile and only its own pieces, numbered from 1.
    for r, part in zip(three, chunks(pieces, 6)):
        text = r.messages[-1]["content"]
        assert profile.writer_brief in text
        listed = re.findall(r"^\d+\. \[\w+, [\d.]+\] (.*)$", text, re.M)
        assert listed == [p.content for p in part]
    # The items are the same pieces in the same order with the same ids, whichever way they were asked.
    assert [(i.id, i.content, i.type) for i in parts.items] == [(i.id, i.content, i.type) for i in whole.items]
    assert [i.id for i in parts.items] == [f"m{n}" for n in range(1, 18)]


def test_the_decomposers_budget_is_checked_at_the_largest_call_the_recipe_can_make():
    def schema(profiles=None, **pa):
        r = Recipe(**BASE, profiles=profiles or {}, simulation={"patient_engine": "patientact", "patientact": pa})
        return _decomposition_schema(r)["properties"]["items"]["maxItems"]

    assert schema() == 18  # MindSim-shaped: 18 pieces at most, one call
    assert schema({"patientact_shape": True}) == 18  # 28 at most, asked 18 at a time at most
    assert schema({"patientact_shape": True}, decomposition_chunk=30) == 28
    assert schema(decomposition_chunk=30) == 18
    assert schema({"patientact_shape": True}, decomposition_chunk=9) == 9
    assert _decomposition_schema()["properties"]["items"]["maxItems"] == 18
    assert draft_model(18).model_json_schema() == _decomposition_schema(
        Recipe(**BASE, profiles={"patientact_shape": True})
    )


def test_the_card_shows_the_impact_list_the_split_and_a_revision():
    profile = shaped()
    d = profile.demographics
    before = Demographics(**{**d.model_dump(), "relationship": "single"})
    rec = DemographicsRevision(
        revised_from=before,
        record=RecordValues(age=41, sex="Male", marital_status="never_married", occupation="supervisor"),
        changed=["relationship"],
        conflicts=["a current spouse contradicts a single patient"],
        reasons=["The formulation has a wife."],
        rounds=1,
        resolved=True,
    )
    profile = profile.model_copy(
        update={"provenance": profile.provenance.model_copy(update={"demographics_revised": rec})}
    )
    card = card_markdown(profile_card(profile, blind=False))
    assert "Impact: " + "; ".join(IMPACT) in card
    assert card.index("## Predisposing factors: psychological") < card.index("## Predisposing factors: social")
    assert "- h0: At 8 something happened" in card and "- s1: A family rule number 1" in card
    assert "the persona record had relationship single" in card and "partnered" in card
    blind = card_markdown(profile_card(profile, blind=True))
    assert "persona record had" not in blind and "Impact: " in blind
    # A MindSim-shaped profile keeps its one predisposing section and no impact line.
    plain = card_markdown(profile_card(make_profile("p1"), blind=False))
    assert "## Predisposing factors\n" in plain and "Impact:" not in plain and "persona record had" not in plain


def test_the_paper_recipe_asks_for_the_shape_and_its_budgets_fit_the_larger_schemas():
    from pathlib import Path

    from mindsimkit.mindcore.budget_fit import fit_budgets
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.profilegen.config import profiles_config

    r = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "patientact_paper.yaml")
    assert profiles_config(r).shape.patientact and profiles_config(r).shape.causal_checks
    lines = {(x.role, x.schema): x for x in fit_budgets(r, r.engines_config(), {"run"}).lines}
    writer = lines[("profile_writer", "formulation")]
    # Counted by bytes (the API serves no tokenizer): the shape's schema outgrew the 4,096 the recipe used to set.
    assert writer.action == "ok" and writer.worst_case > 4096 and writer.budget >= writer.worst_case
    assert lines[("profile_decomposer", "patientact:DecompositionDraft")].worst_case <= 7000

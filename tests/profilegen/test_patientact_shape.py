"""PatientAct's profile shape (`profiles.patientact_shape`, PatientAct §3.1-3.2, Figs. 2-4): the impact list and the
psychological / social predisposing split in the writer's schema, the stored rows and the rendered texts; hard
conflicts settled by revising the demographics (recorded, the persona record's values kept); and, off, nothing of
it in any prompt, hash, key or dump."""

from __future__ import annotations

import asyncio
import json

import pytest

from mindsimkit.mindcore.budget import worst_case_tokens
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.config import profiles_config
from mindsimkit.profilegen.demographics import REVISABLE, allowed_values, revise_demographics, settleable
from mindsimkit.profilegen.formulation import (
    WRITER_PATIENTACT,
    add_entry,
    draft_model,
    label_choice,
    split_labels,
    to_draft_json,
    to_formulation,
    write_formulation,
    writer_messages,
)
from mindsimkit.profilegen.generate import TEMPLATES, checkpoint_key, make_profile, prompt_hashes
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.render import case_summary, writer_brief
from mindsimkit.profilegen.schemas import Profile, ProfileShape, Provenance
from mindsimkit.profilegen.conflicts import hard_conflicts
from mindsimkit.profilegen.screen import causal_faults, judge_messages
from mindsimkit.profilegen.vocab import load_vocabularies
from mindsimkit.mindcore.prompts import render

BASE = {"name": "t", "engines": {"local": {"kind": "embedded"}}, "roles": {"default": {"engine": "local"}}}
PA = ProfileShape(patientact=True)
IMPACT = ["sleeps four hours most nights", "has missed two shifts", "stopped answering texts"]
SPOUSE = "Since the bill, my wife and I barely talk and sleep is broken."


@pytest.fixture(scope="module")
def rows():
    return anchor_personas(load_personas("synthetic", 12, seed=1).rows, load_rates(), seed=1)


@pytest.fixture(scope="module")
def single(rows):
    """A never-married, employed patient of 25-34 (the spouse rule fires on 'my wife')."""
    return next(r for r in rows if r.demographics.relationship == "single" and r.demographics.age_band == "25-34")


@pytest.fixture
def pa(fakes):
    """`pa(**over)`: the conftest's PatientAct-shaped draft with some fields replaced."""

    def make(**over) -> dict:
        d = json.loads(json.dumps(fakes.GOOD_PA_DRAFT))
        d.update(over)
        return d

    return make


def _schema(**kw) -> dict:
    return draft_model(**kw).model_json_schema()


# --- the writer's schema ----------------------------------------------------------------------------------


def test_the_shape_puts_the_impact_list_and_the_split_in_the_writers_schema():
    plain, pa = _schema(), _schema(patientact=True)
    assert "predisposing" in plain["properties"] and not {"impact", "psychological", "social"} & set(
        plain["properties"]
    )
    props = pa["properties"]
    assert "predisposing" not in props
    assert (props["impact"]["minItems"], props["impact"]["maxItems"]) == (3, 5)
    assert props["impact"]["items"]["maxLength"] == 70
    assert (props["psychological"]["minItems"], props["psychological"]["maxItems"]) == (2, 3)
    assert (props["social"]["minItems"], props["social"]["maxItems"]) == (1, 2)
    # The order the writer generates in: the impact right after the situation, the split where predisposing was.
    assert list(props)[:5] == ["summary", "impact", "goal", "psychological", "social"]
    # Each list draws from its own labels: no social condition among the histories, every social one offered.
    voc = load_vocabularies()
    psych, social = split_labels(voc)
    defs = pa["$defs"]
    assert set(defs["DraftPredisposing"]["properties"]["label"]["enum"]) == set(psych)
    assert set(defs["DraftSocial"]["properties"]["label"]["enum"]) == set(social)
    assert {"childhood_poverty", "feelings_kept_private"} <= set(social) and "childhood_poverty" not in psych
    # Scaled like every other text, and bounded: the preflight can count its longest answer.
    assert _schema(scale=0.4, patientact=True)["properties"]["impact"]["items"]["maxLength"] == 28
    for causal in (False, True):
        short = worst_case_tokens(_schema(scale=0.4, causal=causal)).tokens
        longer = worst_case_tokens(_schema(scale=0.4, causal=causal, patientact=True)).tokens
        assert short is not None and longer is not None and longer > short


def test_a_shaped_draft_is_stored_rendered_and_sent_back_whole(rows, pa):
    row = rows[0]
    draft = draft_model(patientact=True).model_validate(pa())
    f = to_formulation(draft)
    assert f.presenting.impact == IMPACT
    assert [(p.label, p.kind) for p in f.predisposing] == [
        ("harsh_criticism", "psychological"),
        ("early_loss", "psychological"),
        ("feelings_kept_private", "social"),
    ]
    brief = writer_brief(row, f)
    assert "Impact: " + "; ".join(IMPACT) in brief
    psych_at, social_at = brief.index("Predisposing, psychological:"), brief.index("Predisposing, social:")
    assert psych_at < brief.index("harsh criticism: At 9") < social_at < brief.index("feelings kept private:")
    assert "What others can see: " + "; ".join(IMPACT) in case_summary(row, f)
    # A revision is shown the draft in the shape it was asked for, and that JSON fits the shape's schema again.
    again = draft_model(patientact=True).model_validate_json(to_draft_json(f))
    assert to_formulation(again) == f


def test_off_nothing_of_the_shape_is_in_any_dump_prompt_hash_or_key(rows, pa):
    row = rows[0]
    shape = profiles_config(Recipe(**BASE)).shape
    assert shape == ProfileShape() and "patientact" not in shape.model_dump()
    f = to_formulation(
        draft_model().model_validate(
            {k: v for k, v in pa().items() if k not in ("impact", "psychological", "social", "perpetuating")}
            | {"predisposing": pa()["psychological"][:1]}
            | {"unhelpful_coping": pa()["perpetuating"][0], "other_coping": []}
        )
    )
    dumped = json.loads(f.model_dump_json())
    assert "impact" not in dumped["presenting"] and all("kind" not in p for p in dumped["predisposing"])
    assert [h.template for h in prompt_hashes()] == list(TEMPLATES)
    plain = writer_messages(row)
    assert render(WRITER_PATIENTACT) not in plain[0]["content"] and "social (predisposing" not in plain[1]["content"]
    assert "impact entry" not in judge_messages("x")[0]["content"]
    on = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(patientact=True), shape=PA)
    off = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes())
    assert checkpoint_key(row, 2, on) != checkpoint_key(row, 2, off)
    assert [h.template for h in on.prompts[len(TEMPLATES) :]] == [
        "profilegen/writer_patientact.jinja2",
        "profilegen/add_entry.jinja2",
        "profilegen/screener_patientact.jinja2",
        "profilegen/demographics_revise.jinja2",
    ]
    assert json.loads(on.model_dump_json())["shape"]["patientact"] is True


def test_on_the_prompts_carry_the_shape_and_the_two_label_lists(rows):
    row = rows[0]
    cfg = profiles_config(Recipe(**BASE, profiles={"patientact_shape": True}))
    assert cfg.shape == PA
    system, user = (m["content"] for m in writer_messages(row, patientact=True))
    assert render(WRITER_PATIENTACT) in system
    voc = load_vocabularies()
    histories = user.split("psychological (predisposing histories):", 1)[1].split("social (predisposing", 1)[0]
    conditions = user.split("social (predisposing conditions):", 1)[1].split("precipitating:", 1)[0]
    assert "- harsh_criticism:" in histories and "childhood_poverty" not in histories
    assert "- childhood_poverty:" in conditions and "- feelings_kept_private:" in conditions
    assert len(label_choice(row.demographics, voc).social) == len(voc.social_predisposing)
    assert "impact entry" in judge_messages("x", patientact=True)[0]["content"]


def test_the_date_check_reads_histories_not_social_conditions(pa):
    f = to_formulation(draft_model(patientact=True).model_validate(pa()))
    assert not any("undated_predisposing" in x.reason for x in causal_faults(f))
    undated = pa(
        psychological=[
            {"label": "harsh_criticism", "history": "A father who picked apart reports."},
            pa()["psychological"][1],
        ]
    )
    faults = causal_faults(to_formulation(draft_model(patientact=True).model_validate(undated)))
    assert [x.quote for x in faults if "undated_predisposing" in x.reason] == ["A father who picked apart reports."]


# --- hard conflicts revise the demographics (Fig. 4) ---------------------------------------------------------


def _responder(revised: dict, writes: list, draft: dict):
    def respond(req):
        if req.schema_name == "formulation":
            writes.append(req)
            return draft
        if req.schema_name == "demographics":
            return {"reason": "The formulation has a wife, so the client is married.", **revised}
        return {"faults": [], "verdict": "clean"}

    return respond


def test_a_spouse_for_a_never_married_client_revises_the_relationship_not_the_formulation(fake_engines, single, pa):
    draft = pa(precipitating={**pa()["precipitating"], "what_changed": SPOUSE})
    writes: list = []
    d = single.demographics
    revised = {"relationship": "partnered", "employment": d.employment, "living_situation": d.living_situation}
    prov = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(patientact=True), shape=PA)
    engines, backend = fake_engines(_responder(revised, writes, draft))
    with engines:
        out = asyncio.run(make_profile(engines.role("profile_writer"), engines.role("screener"), single, 2, prov))
    assert out.status == "ok" and out.screen.verdict == "clean" and out.screen.revisions == 0 and len(writes) == 1
    (ask,) = [r for r in backend.requests if r.schema_name == "demographics"]
    # The schema offers only relationships under which the spouse rule does not fire; age and gender are not asked.
    props = ask.response_schema["properties"]
    assert set(props) == {"reason", *REVISABLE}
    assert props["relationship"]["enum"] == ["partnered", "post_relationship"]
    assert "my wife" in ask.messages[0]["content"] and "a current spouse" in ask.messages[0]["content"]
    p = out.profile
    assert p.demographics.relationship == "partnered" and p.demographics.age_band == d.age_band
    rec = p.provenance.demographics_revised
    assert rec is not None and rec.changed == ["relationship"] and rec.revised_from == d and rec.resolved
    assert rec.record.marital_status == single.persona.marital_status == p.persona.marital_status == "never_married"
    assert rec.rounds == 1 and rec.reasons == ["The formulation has a wife, so the client is married."]
    assert "partnered" in p.case_summary and "partnered" in p.writer_brief
    # The revision survives the dataset's round trip.
    assert Profile.model_validate_json(p.model_dump_json()) == p


def test_without_the_shape_the_same_conflict_goes_back_to_the_writer(fake_engines, fakes, single):
    draft = dict(fakes.GOOD_DRAFT, precipitating={**fakes.GOOD_DRAFT["precipitating"], "what_changed": SPOUSE})
    writes: list = []
    prov = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes())
    engines, backend = fake_engines(_responder({}, writes, draft))
    with engines:
        out = asyncio.run(make_profile(engines.role("profile_writer"), engines.role("screener"), single, 1, prov))
    assert not any(r.schema_name == "demographics" for r in backend.requests)
    assert len(writes) == 2 and "a current spouse" in writes[1].messages[-1]["content"]
    assert out.status == "dropped" and out.screen.verdict == "serious"


def test_a_conflict_with_the_recorded_age_is_not_the_demographics_to_settle(fake_engines, single, pa):
    """Age band and gender are the record's (the persona paragraph states them): 'retired' at 29 goes to the writer."""
    draft = pa(summary="Referred by the GP: since retiring last spring has stopped going out.")
    writes: list = []
    prov = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(patientact=True), shape=PA)
    engines, backend = fake_engines(_responder({}, writes, draft))
    with engines:
        out = asyncio.run(make_profile(engines.role("profile_writer"), engines.role("screener"), single, 1, prov))
    assert not any(r.schema_name == "demographics" for r in backend.requests)
    assert len(writes) == 2 and "retirement does not fit" in writes[1].messages[-1]["content"]
    assert out.profile is None and out.screen.verdict == "serious"


def test_revision_rounds_are_bounded_and_an_unsettled_conflict_is_recorded(single, pa):
    """A model that keeps the conflicting value (an engine without a grammar) costs at most the bounded rounds;
    the record says the conflict was not settled and the writer gets it as a fault."""
    f = to_formulation(
        draft_model(patientact=True).model_validate(pa(precipitating={**pa()["precipitating"], "what_changed": SPOUSE}))
    )
    conflicts = hard_conflicts(single, f, writer_brief(single, f))
    assert allowed_values(f, conflicts)["relationship"] == ("partnered", "post_relationship")

    class Stubborn:
        calls = 0

        async def structured(self, messages, model, schema_name=None, **_):
            Stubborn.calls += 1
            return model.model_construct(reason="no change", **{k: getattr(single.demographics, k) for k in REVISABLE})

    row, rec = asyncio.run(revise_demographics(Stubborn(), single, f, max_rounds=3))
    assert Stubborn.calls == 3 and rec.rounds == 3 and not rec.resolved and rec.changed == []
    assert row.demographics == single.demographics


def test_the_distilabel_worker_revises_demographics_too(worker_step, pa):
    from mindsimkit.profilegen.anchors import anchor_personas as anchored

    row = anchored(load_personas("synthetic", 1, 7).rows, load_rates(None), 7)[0]
    d = row.demographics
    # A text rule on this patient's own living situation, settled by a home the schema still offers.
    text, rule_when = (
        ("lives alone", ["with_partner_or_family", "with_others"])
        if d.living_situation != "alone"
        else ("his roommates", ["alone"])
    )
    keep = {k: getattr(d, k) for k in REVISABLE}
    draft = pa(summary=f"Referred by the GP; {text} since the bill and sleeps badly.")

    def respond(req):
        props = req.response_schema["properties"]
        if "summary" in props:
            return draft
        if "reason" in props:
            offered = props["living_situation"]["enum"]
            assert not set(offered) & set(rule_when)
            return {"reason": "The formulation places the home.", **keep, "living_situation": offered[0]}
        return {"faults": [], "verdict": "clean"}

    o, requests = worker_step(respond, PA)
    assert o.status == "ok" and o.profile.demographics.living_situation not in rule_when
    assert o.profile.provenance.demographics_revised.changed == ["living_situation"]
    assert len(requests) == 3  # write, revise the demographics, screen


def test_preflight_checks_the_reviser_only_under_the_shape():
    from mindsimkit.mindcore.budget import registered

    (entry,) = [e for e in registered({"profiles"}) if e.role == "profile_writer" and e.name == "demographics"]
    assert not entry.active(Recipe(**BASE)) and entry.active(Recipe(**BASE, profiles={"patientact_shape": True}))
    assert 0 < worst_case_tokens(entry.schema_of(None)).tokens < 600
    (writer,) = [e for e in registered({"profiles"}) if e.role == "profile_writer" and e.name == "formulation"]
    assert "impact" in writer.schema_of(Recipe(**BASE, profiles={"patientact_shape": True}))["properties"]
    assert "impact" not in writer.schema_of(Recipe(**BASE))["properties"]


def test_a_profile_job_in_the_shape_writes_the_lists_the_split_and_the_revisions(fake_engines, tmp_path, pa):
    from mindsimkit.profilegen.dataset import load_profiles
    from mindsimkit.profilegen.pipeline import run_profiles

    recipe = Recipe(
        **BASE,
        seed=1,
        profiles={
            "patientact_shape": True,
            "candidates": 12,
            "pool_size": 4,
            "benchmark_size": 2,
            "use_distilabel": False,
        },
    )
    draft = pa(precipitating={**pa()["precipitating"], "what_changed": SPOUSE})

    def respond(req):
        if req.schema_name == "formulation":
            return draft
        if req.schema_name == "demographics":
            props = req.response_schema["properties"]
            return {"reason": "The formulation has a wife.", **{k: props[k]["enum"][0] for k in REVISABLE}}
        return {"faults": [], "verdict": "clean"}

    engines, _ = fake_engines(respond)
    with engines:
        s = run_profiles(recipe, engines, tmp_path, profiles_config(recipe))
    assert s.kept == 12
    prov = json.loads((tmp_path / "profiles" / "provenance.json").read_text())
    assert prov["config"]["patientact_shape"] is True and prov["profiles"]["shape"]["patientact"] is True
    profiles = load_profiles(tmp_path / "profiles", pool_only=False)
    assert all(p.formulation.presenting.impact == IMPACT for p in profiles)
    assert all(
        [x.kind for x in p.formulation.predisposing] == ["psychological", "psychological", "social"] for p in profiles
    )
    revised = [p for p in profiles if p.provenance.demographics_revised is not None]
    never_married = [p for p in profiles if p.persona.marital_status == "never_married"]
    assert revised and {p.profile_id for p in revised} == {p.profile_id for p in never_married}
    for p in revised:
        rec = p.provenance.demographics_revised
        assert rec.revised_from.relationship == "single" != p.demographics.relationship
        assert rec.record.marital_status == "never_married" and "relationship" in rec.changed


@pytest.mark.embedded
def test_the_demographics_revision_on_the_embedded_engine(profile_engines, single, pa):
    """One revision call on the real (weak) engine: its grammar holds the answer to the offered values, so a spouse
    in the formulation of a never-married client comes back settled, recorded with a reason."""
    f = to_formulation(
        draft_model(patientact=True).model_validate(pa(precipitating={**pa()["precipitating"], "what_changed": SPOUSE}))
    )
    row, rec = asyncio.run(revise_demographics(profile_engines.role("profile_writer"), single, f, max_rounds=2))
    assert rec is not None and rec.resolved and rec.rounds == 1 and rec.reasons[0]
    assert row.demographics.relationship in ("partnered", "post_relationship")
    assert rec.revised_from == single.demographics and "relationship" in rec.changed
    assert not settleable(hard_conflicts(row, f, writer_brief(row, f)))


@pytest.mark.embedded
def test_a_cycle_added_on_the_embedded_engine_takes_a_label_the_draft_has_not_used(profile_engines, single, pa):
    """The added cycle's call on the real engine, as `write_formulation` makes it for a draft left with one cycle
    after its repeats were dropped: the grammar keeps the used label out, whatever the 135M model prefers."""
    model = draft_model(patientact=True)
    cycles = model.model_validate(pa()).perpetuating[:1]
    draft = model.model_validate(pa(perpetuating=[pa()["perpetuating"][0]] * 3))
    messages = writer_messages(single, patientact=True)
    writer = profile_engines.role("profile_writer")
    added = asyncio.run(add_entry(writer, messages, "perpetuating", cycles, draft))
    maladaptive = {k for k, v in load_vocabularies().coping.items() if v.maladaptive}
    assert added.label in maladaptive - {cycles[0].label} and len(added.situation) >= 3


# --- perpetuating cycles, helpful habits, passive death thoughts ---------------------------------------------


def test_the_shape_asks_three_to_five_maladaptive_cycles_and_no_adaptive_coping():
    voc = load_vocabularies()
    maladaptive = {k for k, v in voc.coping.items() if v.maladaptive}
    assert len(maladaptive) >= 5  # five cycles, each its own label
    for causal in (False, True):
        pa = _schema(patientact=True, causal=causal)
        props = pa["properties"]
        assert "unhelpful_coping" not in props and "other_coping" not in props
        assert (props["perpetuating"]["minItems"], props["perpetuating"]["maxItems"]) == (3, 5)
        cycle = pa["$defs"]["DraftCycle"]
        assert set(cycle["properties"]["label"]["enum"]) == maladaptive
        assert ({"relief", "cost"} <= set(cycle["required"])) == causal
        # The plain shape keeps its two coping fields.
        plain = _schema(causal=causal)["properties"]
        assert {"unhelpful_coping", "other_coping"} <= set(plain) and "perpetuating" not in plain


def test_cycles_are_stored_in_order_all_maladaptive_and_a_repeated_label_is_dropped(pa):
    cycles = pa()["perpetuating"]
    f = to_formulation(draft_model(patientact=True).model_validate(pa()))
    assert [(c.label, c.maladaptive) for c in f.perpetuating] == [
        ("avoidance", True),
        ("withdrawal", True),
        ("going_over_things", True),
    ]
    assert f.perpetuating[0].situation == cycles[0]["situation"]
    again = {**cycles[1], "situation": "Ignores the calls too."}
    kept = to_formulation(draft_model(patientact=True).model_validate(pa(perpetuating=[*cycles, again])))
    assert [c.label for c in kept.perpetuating] == ["avoidance", "withdrawal", "going_over_things"]
    # A draft with a repeat stays valid against its own schema when read back (a distilabel worker sends it as
    # JSON): the repeat is dropped by `write_formulation`, which then adds the missing cycle.
    model = draft_model(patientact=True)
    short = model.model_validate(pa(perpetuating=[*cycles[:2], again]))
    assert model.model_validate_json(short.model_dump_json()) == short
    # The same for the personal histories (two at least): a repeat is kept in the draft, dropped when stored.
    psych = pa()["psychological"]
    twice = model.model_validate(pa(psychological=[psych[0], psych[0]]))
    assert model.model_validate_json(twice.model_dump_json()) == twice
    assert [p.label for p in to_formulation(model.model_validate(pa(psychological=[*psych, psych[0]]))).predisposing][
        :2
    ] == ["harsh_criticism", "early_loss"]
    # Other lists (one at least) drop a repeat at once.
    social = pa()["social"]
    assert len(model.model_validate(pa(social=[*social, social[0]])).social) == 1
    # Under the causal rules each cycle carries its relief and cost, folded into the stored text the check reads.
    causal = [{**c, "relief": "a calmer evening", "cost": "the dread grows"} for c in cycles]
    dated = [{**p, "when": "at 9", "history": p["history"][5:]} for p in pa()["psychological"]]
    fc = to_formulation(
        draft_model(patientact=True, causal=True).model_validate(pa(perpetuating=causal, psychological=dated))
    )
    assert all("at first a calmer evening, then the dread grows" in c.situation for c in fc.perpetuating)
    assert not any("coping_without_cycle" in x.reason for x in causal_faults(fc))


@pytest.mark.parametrize("causal", [False, True])
def test_a_draft_left_short_by_repeats_gets_each_missing_cycle_under_a_label_it_has_not_used(
    fake_engines, rows, pa, causal
):
    """The 135M writer repeats a coping label (every re-ask of the whole draft did it again): the draft keeps its
    distinct cycles and one call per missing cycle adds one, its schema's enum without the labels in use."""
    cycles = pa()["perpetuating"]
    extra = {"relief": "a calmer evening", "cost": "the dread grows"} if causal else {}
    dated = [{**p, "when": "at 9"} for p in pa()["psychological"]] if causal else pa()["psychological"]
    draft = pa(psychological=dated, perpetuating=[{**cycles[0], **extra}] * 3)
    added = iter([{**cycles[1], **extra}, {**cycles[2], **extra}])
    asks: list = []

    def respond(req):
        if req.schema_name == "cycle":
            asks.append(req)
            return next(added)
        return draft

    engines, _ = fake_engines(respond)
    with engines:
        f = asyncio.run(write_formulation(engines.role("profile_writer"), rows[0], causal=causal, patientact=True))
    assert [c.label for c in f.perpetuating] == ["avoidance", "withdrawal", "going_over_things"]
    maladaptive = [k for k, v in load_vocabularies().coping.items() if v.maladaptive]
    for ask, used in zip(asks, (["avoidance"], ["avoidance", "withdrawal"]), strict=True):
        schema = ask.response_schema
        assert schema["properties"]["label"]["enum"] == [k for k in maladaptive if k not in used]
        assert ({"relief", "cost"} <= set(schema["required"])) == causal
        # The writer sees its own draft (repeats gone) and is told which labels it has used.
        assert json.loads(ask.messages[-2]["content"])["perpetuating"][-1]["label"] == used[-1]
        assert ", ".join(used) in ask.messages[-1]["content"] and "at least 3" in ask.messages[-1]["content"]
    assert all("then the dread grows" in c.situation for c in f.perpetuating) == causal


def test_a_draft_left_with_one_personal_history_gets_a_second_under_a_label_it_has_not_used(fake_engines, rows, pa):
    psych = pa()["psychological"]
    asks: list = []

    def respond(req):
        if req.schema_name == "history":
            asks.append(req)
            return psych[1]
        return pa(psychological=[psych[0], psych[0]])

    engines, _ = fake_engines(respond)
    with engines:
        f = asyncio.run(write_formulation(engines.role("profile_writer"), rows[0], patientact=True))
    assert [(p.label, p.kind) for p in f.predisposing][:2] == [("harsh_criticism", "psychological")] + [
        ("early_loss", "psychological")
    ]
    (ask,) = asks
    offered = ask.response_schema["properties"]["label"]["enum"]
    psych_labels, _ = split_labels(load_vocabularies())
    allowed = [x for x in label_choice(rows[0].demographics).predisposing if x in psych_labels]
    # The patient's own list of personal histories, less the one used.
    assert offered == [x for x in allowed if x != "harsh_criticism"] and "early_loss" in offered
    assert "personal history under `psychological` (harsh_criticism)" in ask.messages[-1]["content"]
    assert "at least 2" in ask.messages[-1]["content"]


def test_the_distilabel_worker_adds_the_missing_cycles_too(worker_step, pa):
    """The worker reads each draft back from JSON; a draft with a repeated cycle passes that and is topped up."""
    cycles = pa()["perpetuating"]
    added = iter(cycles[1:])

    def respond(req):
        props = req.response_schema["properties"]
        if "summary" in props:
            return pa(perpetuating=[cycles[0], cycles[0], cycles[0]])
        if "situation" in props:
            assert "avoidance" not in props["label"]["enum"]
            return next(added)
        return {"faults": [], "verdict": "clean"}

    o, requests = worker_step(respond, PA)
    assert o.status == "ok", o.failure
    assert [c.label for c in o.profile.formulation.perpetuating] == ["avoidance", "withdrawal", "going_over_things"]
    assert len(requests) == 4  # write, two cycles, screen


def test_a_cycle_the_engine_cannot_add_fails_the_formulation_as_a_counted_structured_failure(fake_engines, rows, pa):
    from mindsimkit.mindcore.errors import StructuredOutputError

    cycles = pa()["perpetuating"]

    def respond(req):
        # A non-grammar engine ignoring the enum: the used label comes back and fails validation every time.
        return cycles[0] if req.schema_name == "cycle" else pa(perpetuating=[cycles[0]] * 3)

    engines, backend = fake_engines(respond)
    with engines, pytest.raises(StructuredOutputError):
        asyncio.run(write_formulation(engines.role("profile_writer"), rows[0], patientact=True))
    assert sum(r.schema_name == "cycle" for r in backend.requests) == engines.role("profile_writer").spec.max_attempts


def test_the_shaped_writer_is_offered_only_maladaptive_coping_and_told_where_habits_go(rows):
    row = rows[0]
    system, user = (m["content"] for m in writer_messages(row, patientact=True))
    coping = user.split("coping (unhelpful_coping", 1)[1].split("core_belief:", 1)[0]
    assert "- avoidance*:" in coping and "talking_it_through" not in coping and "self_soothing" not in coping
    assert "helpful habits belong here, not under perpetuating" in system
    assert "three to five maintenance cycles" in system
    plain = writer_messages(row)[1]["content"]
    assert "- talking_it_through:" in plain


def test_passive_death_thoughts_are_allowed_only_in_the_shape_and_intent_or_self_harm_never(rows):
    from mindsimkit.profilegen.formulation import WRITER_SYSTEM, writer_system

    for causal in (False, True):
        shaped = writer_system(causal=causal, patientact=True)
        assert "passive thoughts of death" in shaped and "no intent" in shaped
        assert "Never write suicidal intent, a plan, preparations, or any act of self-harm." in shaped
        judge = judge_messages("x", causal=causal, patientact=True)[0]["content"]
        assert "passive thoughts of death without intent" in judge and "are not a fault" in judge
        assert "Still flag, as serious, any suicidal intent, plan or preparation, and any act of self-harm." in judge
        # The default shape's prompts are the ones before the option: the blanket rule, no exception.
        plain, plain_judge = writer_system(causal=causal), judge_messages("x", causal=causal)[0]["content"]
        assert "passive" not in plain and "passive" not in plain_judge
        assert "Do not mention self-harm or suicide." in plain and "any mention of self-harm or suicide." in plain_judge
    assert writer_system() == render(WRITER_SYSTEM)

"""PatientAct's causal 5P rules (`profiles.causal_checks`): resolved from the recipe's patient engines, absent
from every prompt, hash, key and dump when off, and when on carried by the writer's and screener's prompts
and by the two deterministic checks, on the async path and in the distilabel worker alike."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from mindsimkit.mindcore.prompts import render
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.config import ProfilesConfig, profiles_config, uses_patientact
from mindsimkit.profilegen.formulation import (
    WRITER_SYSTEM,
    CausalRules,
    causal_rules,
    draft_model,
    revision_messages,
    to_formulation,
    writer_messages,
)
from mindsimkit.profilegen.vocab import load_vocabularies
from mindsimkit.profilegen.generate import TEMPLATES, checkpoint_key, make_profile, prompt_hashes
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.render import writer_brief
from mindsimkit.profilegen.schemas import Fault, Predisposing, ProfileShape, Provenance
from mindsimkit.profilegen.screen import SCREENER_SYSTEM, causal_faults, judge_messages, quote_in, screen_once

BASE = {"name": "t", "engines": {"local": {"kind": "embedded"}}, "roles": {"default": {"engine": "local"}}}
UNDATED = "A father who picked apart every school report."
BARE = "Leaves bank letters unopened on the table."
DATED = "From age 8 a father who picked apart every school report; by 14 she hid her marks."
CYCLE = "Leaves bank letters unopened, which brings relief for a day while the arrears and the dread grow."


@pytest.fixture(scope="module")
def row():
    return anchor_personas(load_personas("synthetic", 5, seed=1).rows, load_rates(), seed=1)[0]


def _draft(fakes, history: str, situation: str) -> dict:
    d = json.loads(json.dumps(fakes.GOOD_DRAFT))
    d["predisposing"][0]["history"] = history
    d["unhelpful_coping"]["situation"] = situation
    return d


def _causal(fakes, when: str) -> dict:
    """A draft in the causal schema: every history with its `when`, the unhelpful coping as its cycle."""
    d = _draft(fakes, UNDATED, BARE)
    for p in d["predisposing"]:
        p["when"] = when
    d["unhelpful_coping"].update(relief="a calmer evening", cost="the arrears and the dread grow")
    return d


def _formulation(fakes, history: str, situation: str):
    return to_formulation(draft_model().model_validate(_draft(fakes, history, situation)))


def _check_ids(faults: list[Fault]) -> list[str]:
    return [x.reason.split("(rule ")[-1].rstrip(")") for x in faults]


# --- resolution --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "simulation, expected",
    [
        ({"patient_engine": "patientact"}, True),
        ({"patient_engine": ["mindsim", "patientact"]}, True),
        ({"patient_engine": "patientact:no_tg"}, True),  # an ablation arm plays the PatientAct patient too
        ({"patient_engine": ["mindsim", "patientact:no_dm"]}, True),
        ({"patient_engine": "mindsim"}, False),
        ({"patient_engine": ["mindsim"]}, False),
        ({}, False),
    ],
)
def test_auto_resolution_follows_the_patient_engine(simulation, expected):
    cfg = profiles_config(Recipe(**BASE, simulation=simulation))
    assert cfg.causal_checks is expected and cfg.shape.causal_checks is expected
    assert uses_patientact(simulation) is expected


@pytest.mark.parametrize("explicit, engine", [(False, "patientact"), (True, "mindsim")])
def test_an_explicit_value_overrides_the_engine(explicit, engine):
    cfg = profiles_config(Recipe(**BASE, profiles={"causal_checks": explicit}, simulation={"patient_engine": engine}))
    assert cfg.causal_checks is explicit and cfg.shape.causal_checks is explicit


def test_resolver_reads_raw_sections_and_keeps_other_settings():
    raw = SimpleNamespace(profiles={"text_scale": 0.5}, simulation={"patient_engine": ["patientact"]})
    cfg = profiles_config(raw)
    assert cfg.shape == ProfileShape(text_scale=0.5, causal_checks=True)
    assert ProfilesConfig().causal_checks is None and ProfilesConfig().shape == ProfileShape()


# --- off: nothing changes ----------------------------------------------------------------------------------


def test_off_leaves_shape_provenance_hashes_and_key_as_they_were(row):
    shape = profiles_config(Recipe(**BASE, simulation={"patient_engine": "mindsim"})).shape
    assert shape == ProfileShape()
    # The dump of an off shape has exactly the keys written before the option existed.
    assert shape.model_dump() == {"text_scale": 1.0, "screen_max_faults": 6}
    assert [h.template for h in prompt_hashes(shape.causal_checks)] == list(TEMPLATES)
    plain = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes())
    off = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(False), shape=shape)
    assert off.model_dump_json() == plain.model_dump_json()
    assert checkpoint_key(row, 2, off) == checkpoint_key(row, 2, plain)
    on = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(True), shape=ProfileShape(causal_checks=True))
    assert checkpoint_key(row, 2, on) != checkpoint_key(row, 2, plain)
    assert json.loads(on.model_dump_json())["shape"]["causal_checks"] is True
    added = [h.template for h in on.prompts[len(TEMPLATES) :]]
    assert added == [
        "profilegen/writer_causal.jinja2",
        "profilegen/screener_causal.jinja2",
        "profilegen:data/causal_rules.yaml",
    ]


def test_off_prompts_are_the_plain_templates(row):
    msgs = writer_messages(row)
    assert msgs == writer_messages(row, causal=False)
    assert msgs[0]["content"] == render(WRITER_SYSTEM)
    judge = judge_messages("profile text")
    assert judge == judge_messages("profile text", causal=False) and judge[0]["content"] == render(SCREENER_SYSTEM)
    rules = causal_rules()
    assert not any(r in msgs[0]["content"] for r in rules.writer_rules)
    assert not any(r in judge[0]["content"] for r in rules.screener_rules)


def test_off_screen_raises_no_causal_fault(fake_engines, fakes, row):
    f = _formulation(fakes, UNDATED, BARE)
    engines, _ = fake_engines(fakes.make_responder())
    with engines:
        s = asyncio.run(screen_once(engines.role("screener"), row, f))
    assert s.verdict == "clean" and s.faults == []


# --- on: prompts and checks --------------------------------------------------------------------------------


def test_on_prompts_carry_the_rules(row):
    rules = causal_rules()
    system = writer_messages(row, causal=True)[0]["content"]
    assert system.startswith(render(WRITER_SYSTEM))
    assert all(r in system for r in rules.writer_rules)
    judge = judge_messages("profile text", causal=True)[0]["content"]
    assert judge.startswith(render(SCREENER_SYSTEM)) and all(r in judge for r in rules.screener_rules)


def test_undated_history_and_bare_coping_each_raise_one_quoted_serious_fault(fakes, row):
    f = _formulation(fakes, UNDATED, BARE)
    faults = causal_faults(f)
    assert _check_ids(faults) == ["undated_predisposing", "coping_without_cycle"]
    assert [x.quote for x in faults] == [UNDATED, BARE]
    text = writer_brief(row, f)
    for x in faults:
        assert x.severity == "serious" and x.source == "rule" and quote_in(x.quote, text)
    assert "an age, a year, a period of life" in faults[0].reason and "relief" in faults[1].reason


def test_dated_history_and_cyclic_coping_raise_none(fakes):
    assert causal_faults(_formulation(fakes, DATED, CYCLE)) == []


def test_only_maladaptive_coping_is_checked(fakes):
    # GOOD_DRAFT's other coping ("talking_it_through") is helpful and has no cycle marker: not a fault.
    f = _formulation(fakes, DATED, CYCLE)
    assert any(not p.maladaptive for p in f.perpetuating)
    assert causal_faults(f) == []


def test_the_causal_schema_makes_the_date_and_the_cycle_required_parts(fakes):
    """Why a small writer's profiles were all dropped with the checks on: its short histories and bare coping
    ("A father who picked apart every school report.", "Leaves bank letters unopened on the table.") fail both
    deterministic checks on every draft. The causal schema asks for the parts the checks look for."""
    plain, causal = draft_model(0.4), draft_model(0.4, causal=True)
    assert _check_ids(causal_faults(_formulation(fakes, UNDATED, BARE))) == [
        "undated_predisposing",
        "coping_without_cycle",
    ]
    props = causal.model_json_schema()["$defs"]
    assert (
        "when" in props["DraftPredisposing"]["required"]
        and "when" not in plain.model_json_schema()["$defs"]["DraftPredisposing"]["properties"]
    )
    assert {"relief", "cost"} <= set(props["DraftUnhelpfulCoping"]["required"])
    voc = load_vocabularies()
    assert not any(voc.coping[c].maladaptive for c in props["DraftCoping"]["properties"]["label"]["enum"])
    f = to_formulation(causal.model_validate(_causal(fakes, "at 9")))
    assert f.predisposing[0].history.startswith("at 9, ") and causal_faults(f) == []
    assert "at first a calmer evening, then the arrears" in f.perpetuating[0].situation
    # The date is still checked: a `when` with no time in it is the same serious fault.
    assert _check_ids(causal_faults(to_formulation(causal.model_validate(_causal(fakes, "often"))))) == [
        "undated_predisposing"
    ]


def test_when_forms_offer_only_listed_times_each_of_which_the_dating_check_reads(fakes):
    """`profiles.when_forms`: a history's `when` is an enum of the causal rules' time forms (in the plain and the
    PatientAct shape, and in a history added to a draft), so a grammar-constrained writer cannot leave a history
    undated; every form, folded into its history, passes `undated_predisposing`; a free `when` is refused."""
    from pydantic import ValidationError

    from mindsimkit.profilegen.formulation import history_model

    forms = causal_rules().when_forms
    listed = draft_model(0.4, causal=True, when_forms=True)
    pre = listed.model_json_schema()["$defs"]["DraftPredisposing"]["properties"]["when"]
    assert pre["enum"] == forms and len(forms) >= 10
    pa = draft_model(0.4, causal=True, patientact=True, when_forms=True).model_json_schema()["$defs"]
    assert pa["DraftPredisposing"]["properties"]["when"]["enum"] == forms
    assert history_model(0.4, True, True, when_forms=True).model_json_schema()["properties"]["when"]["enum"] == forms
    for form in forms:
        f = to_formulation(listed.model_validate(_causal(fakes, form)))
        assert f.predisposing[0].history.startswith(f"{form}, ") and causal_faults(f) == [], form
    with pytest.raises(ValidationError):
        listed.model_validate(_causal(fakes, "at 9"))  # a time, but not a listed form
    # Off, `when` stays free text (the paper's path), and without the causal rules there is no `when` at all.
    free = draft_model(0.4, causal=True).model_json_schema()["$defs"]["DraftPredisposing"]["properties"]["when"]
    assert free["type"] == "string" and "enum" not in free
    plain = draft_model(0.4, when_forms=True).model_json_schema()["$defs"]["DraftPredisposing"]["properties"]
    assert "when" not in plain


def test_a_listed_form_the_dating_check_refuses_breaks_the_rules_file():
    good = causal_rules().model_dump()
    good["checks"] = {k: {**v, "patterns": [p.pattern for p in v["patterns"]]} for k, v in good["checks"].items()}
    with pytest.raises(ValueError, match=r"when_forms \['now and then'\] fail undated_predisposing"):
        CausalRules.model_validate({**good, "when_forms": [*good["when_forms"], "now and then"]})


def test_the_recipe_option_reaches_the_writer_schema_and_the_recorded_shape(fake_engines, fakes, row):
    """`when_forms` in the recipe → the profile shape → the writer's request schema; the shape it was written
    with records it (and a shape without it dumps as before)."""
    recipe = Recipe(**BASE, seed=7, simulation={"patient_engine": "patientact"}, profiles={"when_forms": True})
    shape = profiles_config(recipe).shape
    assert shape.causal_checks and shape.when_forms
    assert "when_forms" not in ProfileShape(causal_checks=True).model_dump()
    # Without the causal rules it does nothing, and the shape a run records stays the one it recorded before.
    assert not profiles_config(Recipe(**BASE, profiles={"when_forms": True})).shape.when_forms
    prov = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(True), shape=shape)
    engines, backend = fake_engines(fakes.make_responder(writer=lambda req: _causal(fakes, "as a teenager")))
    with engines:
        out = asyncio.run(make_profile(engines.role("profile_writer"), engines.role("screener"), row, 1, prov))
    assert out.status == "ok" and out.profile.provenance.shape.model_dump()["when_forms"] is True
    (written,) = [r for r in backend.requests if r.schema_name == "formulation"]
    schema = written.response_schema
    assert schema["$defs"]["DraftPredisposing"]["properties"]["when"]["enum"] == causal_rules().when_forms
    assert out.profile.formulation.predisposing[0].history.startswith("as a teenager, ")


def test_a_causal_draft_at_its_limits_goes_back_whole_to_its_revision(fakes, row):
    """Under the causal schema a stored coping situation is the situation, its relief and its cost joined, so it
    can be longer than the draft's `situation` limit; the revision's assistant turn once re-validated it
    through the plain draft schema and failed the profile (string_too_long, on the embedded engine), and a
    stored situation at the parts' full limits did not fit the row's own limit."""
    d = _causal(fakes, "at 9")
    d["unhelpful_coping"].update(situation="s" * 140, relief="r" * 80, cost="c" * 100)
    f = to_formulation(draft_model(causal=True).model_validate(d))  # the stored row holds the whole cycle
    assert len(f.perpetuating[0].situation) > 300
    sent = json.loads(revision_messages(row, f, [], causal=True)[2]["content"])
    assert sent["unhelpful_coping"]["situation"] == f.perpetuating[0].situation


def test_a_long_quote_is_a_verbatim_prefix_within_the_fault_limit(fakes, row):
    long = ("Was always the quiet, careful one who tried hard to please a strict and critical household " * 5)[:390]
    f = _formulation(fakes, DATED, CYCLE)
    f = f.model_copy(update={"predisposing": [Predisposing(label=f.predisposing[0].label, history=long)]})
    (fault,) = causal_faults(f)
    assert len(fault.quote) <= 300 and long.startswith(fault.quote) and quote_in(fault.quote, writer_brief(row, f))


def test_on_profile_is_revised_until_the_causal_rules_hold(fake_engines, fakes, row):
    writes = {"n": 0}

    def writer(request):
        writes["n"] += 1
        return _causal(fakes, "often") if writes["n"] == 1 else _causal(fakes, "from age 8")

    shape = ProfileShape(causal_checks=True)
    prov = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(True), shape=shape)
    engines, backend = fake_engines(fakes.make_responder(writer=writer))
    with engines:
        out = asyncio.run(make_profile(engines.role("profile_writer"), engines.role("screener"), row, 2, prov))
    assert out.status == "ok" and out.screen.revisions == 1 and out.screen.verdict == "clean"
    assert out.profile.provenance.shape == shape
    written = [r for r in backend.requests if r.schema_name == "formulation"]
    screened = [r for r in backend.requests if r.schema_name == "screen"]
    assert len(written) == 2 and len(screened) == 2
    rules = causal_rules()
    assert all(all(x in r.messages[0]["content"] for x in rules.writer_rules) for r in written)
    assert all(all(x in r.messages[0]["content"] for x in rules.screener_rules) for r in screened)
    fix = written[1].messages[-1]["content"]
    # The undated history goes back with its quote; the coping, written as its cycle, raises nothing.
    assert "often, A father who picked apart" in fix and "undated_predisposing" in fix
    assert "coping_without_cycle" not in fix


def test_off_profile_with_the_same_text_is_not_revised(fake_engines, fakes, row):
    prov = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes())
    engines, backend = fake_engines(fakes.make_responder(writer=lambda req: _draft(fakes, UNDATED, BARE)))
    with engines:
        out = asyncio.run(make_profile(engines.role("profile_writer"), engines.role("screener"), row, 2, prov))
    assert out.status == "ok" and out.screen.revisions == 0
    assert sum(r.schema_name == "formulation" for r in backend.requests) == 1


# --- the regular expressions on realistic text -------------------------------------------------------------

DATED_HISTORIES = [
    "At 14 she moved schools three times and was bullied at each.",
    "Her father left in 1998, when she was seven.",
    "As a child he was teased for a stammer and learned to keep quiet.",
    "In high school she was the one who kept the family's bills paid.",
    "Since her teens she has carried her mother's money worries.",
    "Grew up with a mother who drank; she cooked for her siblings.",
    "In her early twenties she lost a pregnancy and told no one.",
    "During university he failed a year and hid it from his parents.",
    "Twelve years ago she nursed her husband through cancer.",
    "For eight years she cared for her father after his stroke.",
    "When he was 9 his parents divorced and he shuttled between two homes.",
    "Was bullied through middle school for her accent.",
    "Lost his job in the 2008 crash and never felt secure again.",
    "The summer she turned 16 her best friend moved away without a word.",
]
UNDATED_HISTORIES = [
    "Has always been a worrier and a perfectionist.",
    "Long history of low self-esteem.",
    "Genetic vulnerability to depression on her mother's side.",
    UNDATED,
    "Tends to doubt herself when criticised.",
    "When she was criticised at work she froze and said nothing.",
    "Worked at two jobs to support the family and never rested.",
    "After two miscarriages she stopped talking about wanting children.",
    "Parents who valued achievement over feelings.",
]
CYCLES = [
    CYCLE,
    "Avoids parties → relief → fewer friends → lower mood.",
    "Cancels plans with friends when low, then feels more alone and even less like going out.",
    "Drinks to get to sleep; it works for a night but leaves her groggy and more anxious the next day.",
    "Overworks to prove herself, so that she is too exhausted to see friends.",
    "Stays in bed on bad mornings, and the missed shifts in turn deepen the guilt.",
    "Checks the locks over and over; the relief lasts minutes and the urge returns.",
    "Skips the gym when tired, which makes it harder to go back.",
    "Scrolls her phone until 2 am, so she wakes exhausted and the low mood gets worse.",
    "Says yes to every extra shift, leaving him exhausted and resentful.",
    "Withdraws from her sister's calls, growing more isolated each week.",
]
BARE_BEHAVIOURS = [
    BARE,
    "Avoids social gatherings.",
    "Drinks several glasses of wine every evening.",
    "Cancels plans with friends at short notice.",
    "Scrolls social media late at night when she cannot sleep.",
    "Overworks on weekends to prove herself to her manager.",
    "Keeps busy at the office until 9 pm.",
    "Since then she avoids driving on the motorway.",
    "Drinks when she feels more anxious.",
    "Stays in her room when her flatmates are home.",
]


@pytest.mark.parametrize("text", DATED_HISTORIES)
def test_time_anchor_found(text):
    assert causal_rules().checks["undated_predisposing"].passes(text)


@pytest.mark.parametrize("text", UNDATED_HISTORIES)
def test_no_time_anchor(text):
    assert not causal_rules().checks["undated_predisposing"].passes(text)


@pytest.mark.parametrize("text", CYCLES)
def test_cycle_marker_found(text):
    assert causal_rules().checks["coping_without_cycle"].passes(text)


@pytest.mark.parametrize("text", BARE_BEHAVIOURS)
def test_no_cycle_marker(text):
    assert not causal_rules().checks["coping_without_cycle"].passes(text)


def test_rules_file_is_checked_on_load():
    good = causal_rules().model_dump()
    good["checks"] = {k: {**v, "patterns": [p.pattern for p in v["patterns"]]} for k, v in good["checks"].items()}
    assert CausalRules.model_validate(good).checks.keys() == causal_rules().checks.keys()
    broken = json.loads(json.dumps(good))
    broken["checks"]["undated_predisposing"]["patterns"] = ["(unclosed"]
    with pytest.raises(ValueError, match="not a regular expression"):
        CausalRules.model_validate(broken)
    with pytest.raises(ValueError, match="checks must be exactly"):
        CausalRules.model_validate({**good, "checks": {"undated_predisposing": good["checks"]["undated_predisposing"]}})


# --- the distilabel worker ---------------------------------------------------------------------------------


def test_distilabel_worker_applies_the_causal_rules(worker_step, fakes):
    """The worker rebuilds the shape from the provenance it is sent: its prompts carry the rules and an
    undated, cycle-less first draft goes back for one revision."""
    writes = {"n": 0}

    def respond(req):
        if "summary" not in req.response_schema["properties"]:
            return {"faults": [], "verdict": "clean"}
        writes["n"] += 1
        return _causal(fakes, "often") if writes["n"] == 1 else _causal(fakes, "from age 8")

    shape = ProfileShape(causal_checks=True)
    o, requests = worker_step(respond, shape)
    assert o.status == "ok" and o.screen.revisions == 1 and o.profile.provenance.shape == shape
    systems = [b["messages"][0]["content"] for b in requests]
    assert len(systems) == 4  # write, screen, revise, screen
    rules = causal_rules()
    assert all(r in systems[0] and r in systems[2] for r in rules.writer_rules)
    assert all(r in systems[1] and r in systems[3] for r in rules.screener_rules)


# --- the whole profile job ---------------------------------------------------------------------------------


def test_profile_job_resolves_the_flag_from_the_recipe(fake_engines, fakes, tmp_path):
    """A config handed in unresolved (as `recipe.section` returns it) is resolved against the recipe's
    patient engine: the run records the causal shape and prompts, and an undated draft is revised."""
    from mindsimkit.profilegen.pipeline import run_profiles

    recipe = Recipe(**BASE, seed=7, simulation={"patient_engine": ["mindsim", "patientact"]})
    cfg = recipe.section("profiles", ProfilesConfig).model_copy(
        update={"candidates": 3, "pool_size": 2, "benchmark_size": 1, "use_distilabel": False}
    )
    assert cfg.causal_checks is None
    first = set()

    def writer(request):
        key = request.messages[1]["content"]
        fresh = key not in first
        first.add(key)
        return _causal(fakes, "often") if fresh else _causal(fakes, "as a child")

    engines, _ = fake_engines(fakes.make_responder(writer=writer))
    with engines:
        s = run_profiles(recipe, engines, tmp_path, cfg)
    assert s.candidates == 3 and s.revised == 3 and s.kept == 3
    prov = json.loads((tmp_path / "profiles" / "provenance.json").read_text())
    assert prov["config"]["causal_checks"] is True and prov["profiles"]["shape"]["causal_checks"] is True
    assert "profilegen:data/causal_rules.yaml" in {h["template"] for h in prov["profiles"]["prompts"]}


@pytest.mark.embedded
@pytest.mark.slow
def test_causal_checks_on_embedded_engine(profile_engines):
    """Stages 3–4 with the causal rules on the real (weak) engine: whatever it writes, the outcome is counted,
    and every fault kept — the causal rule faults included — quotes the profile verbatim. A 135M writer or
    screener often fails its re-asks (a counted failure, nothing to check), so up to three candidates are tried
    until one is screened; the test fails if none is."""
    shape = ProfileShape(text_scale=0.4, screen_max_faults=2, causal_checks=True)  # the quickstart's limits
    prov = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(True), shape=shape)
    rows = anchor_personas(load_personas("synthetic", 5, seed=1).rows, load_rates(), seed=1)[:3]
    failures = []
    for row in rows:
        out = asyncio.run(
            make_profile(profile_engines.role("profile_writer"), profile_engines.role("screener"), row, 1, prov)
        )
        assert out.status in ("ok", "dropped", "failed") and out.profile_id == row.profile_id
        if out.status != "failed":
            break
        assert out.failure is not None and out.failure.stage in ("formulation", "screen") and out.failure.error
        assert out.profile is None
        failures.append(out.failure.error)
    else:
        pytest.fail(f"all {len(rows)} candidates failed, nothing screened to check: {failures}")
    assert out.screen is not None and out.screen.revisions <= 1
    assert (out.profile is not None) == (out.status == "ok")
    if out.profile is not None:
        text = out.profile.writer_brief
        assert all(quote_in(x.quote, text) for x in out.screen.faults)
        assert out.profile.provenance.shape.causal_checks
    # The quickstart's own setting on the same engine: the grammar holds the writer to the listed time forms, so
    # no history is undated (a 135M writer's free `when` failed the dating rule in 10 of 27 candidates).
    listed = shape.model_copy(update={"when_forms": True})
    prov = Provenance(seed=1, toolkit_version="t", prompts=prompt_hashes(True), shape=listed)
    for row in rows:
        out = asyncio.run(
            make_profile(profile_engines.role("profile_writer"), profile_engines.role("screener"), row, 0, prov)
        )
        if out.status != "failed":
            break
    else:
        pytest.fail(f"all {len(rows)} candidates failed with the listed time forms")
    assert out.screen is not None
    assert not any("undated_predisposing" in x.reason for x in out.screen.faults), out.screen.faults
    if out.profile is not None:
        forms = causal_rules().when_forms
        assert all(any(p.history.startswith(f"{w}, ") for w in forms) for p in out.profile.formulation.predisposing)

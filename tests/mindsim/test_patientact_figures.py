"""What each PatientAct prompt is given, figure by figure (PatientAct App. B): the decomposer sees the profile and
its pieces only (Fig. 7), therapy-specific items can be anchored at the scale's top (Fig. 7's 4.0), the behaviour and
resistance steps see the blocked note but no retrieved item texts (Figs. 11-12), and the paper recipe's w/o DM arm
holds the whole profile (Table 4)."""

from __future__ import annotations

from pathlib import Path

from mindsimkit.mindcore.prompts import render
from mindsimkit.mindcore.recipe import load_recipe
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patientact.data import (
    attachment_prior,
    item_types,
    step_rules,
    taxonomy,
    theme_map,
    trust_rules,
)
from mindsimkit.mindsim.patientact.decompose import DraftItem, Piece, decompose_messages, make_item
from mindsimkit.mindsim.patientact.participant import STEP_TEMPLATE
from mindsimkit.mindsim.patientact.seed import psych_seed
from simfakes import make_profile

ITEM_TEXT = "Dad left the week of her tenth birthday and never called."


def test_the_decomposer_sees_the_profile_and_its_pieces_but_not_the_attachment_style_or_theme():
    profile = make_profile("p1")
    psych = psych_seed(profile, 3)
    [message] = decompose_messages(profile, psych, [Piece("memory", "formulation.predisposing", ITEM_TEXT)])
    text = message["content"]
    assert ITEM_TEXT in text and profile.writer_brief.strip()[:60] in text
    assert attachment_prior().descriptions[psych.attachment] not in text
    assert theme_map().themes[psych.theme] not in text and "attachment style" not in text


def test_a_therapy_specific_item_can_reach_the_top_of_the_scale_and_other_triggers_cannot():
    top = trust_rules().maximum
    piece = Piece("trigger", "psych.triggers", "Being asked what is really wrong after a dismissed disclosure.")
    draft = lambda category: DraftItem(
        topic="the sessions",
        shift=0.5,
        tags=["direct questions", "being dismissed", "saying it aloud"],  # noqa: E731
        category=category,
    )
    assert make_item("m1", piece, draft("therapy_trigger")).level == top == 4.0
    assert make_item("m2", piece, draft("shame_or_trauma")).level == item_types().types["trigger"].anchor + 0.5 < top
    assert make_item("m3", piece, draft("therapy_trigger").model_copy(update={"shift": -0.5})).level == 3.5


def _values(step: str) -> dict:
    tax = taxonomy()
    return dict(
        step=step,
        recent=[("Counsellor", "Hello."), ("Client", "hi")],
        counsellor="What happened with your father?",
        trust="2.50",
        trust_text="session start",
        coping=["goes quiet"],
        activated=[("memory", ITEM_TEXT)],
        blocked=["family history"],
        held=["blocked"],
        rules=["blocked"],
        streak=0,
        reaction="fear",
        intensity="high",
        behaviour=None,
        recent_behaviours=[],
        options=tax.ids("reactions"),
        srules=step_rules(None),
        criteria={},
        default_criterion="",
        by_direction=False,
        expects="",
        reply=None,
        allow_end=True,
    )


def _step(step: str) -> str:
    return render(STEP_TEMPLATE, **_values(step))


def test_the_behaviour_and_resistance_steps_get_the_blocked_note_not_the_retrieved_items():
    reaction, behaviour, resistance = _step("reaction"), _step("behaviour"), _step("resistance")
    assert ITEM_TEXT in reaction and "family history" in reaction  # Fig. 10: items by type, the sensitive area
    for text in (behaviour, resistance):
        assert ITEM_TEXT not in text and "family history" not in text
    assert "not ready to talk about" in behaviour and "brought up by this message" in behaviour  # Fig. 11
    assert "sensitive content the client is not ready to share" in resistance  # Fig. 12


def test_the_paper_recipes_without_dm_arm_holds_the_whole_profile_with_the_counsellor_pattern():
    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "patientact_paper.yaml")
    cfg = recipe.section("simulation", SimulationConfig)
    assert cfg.patientact.no_dm_profile == "whole"  # the paper's w/o DM; the preset's own value is the reference's
    assert any("no_dm_profile" in note for note in cfg.preset_notes())  # said at preflight, never silent


def test_without_allow_end_the_behaviour_step_is_not_offered_a_way_out():
    from mindsimkit.mindsim.patientact.participant import step_models

    assert "end_conversation" in step_models(allow_end=True)["behaviour"].model_json_schema()["properties"]
    assert "end_conversation" not in step_models(allow_end=False)["behaviour"].model_json_schema()["properties"]
    assert "end_conversation" not in render(STEP_TEMPLATE, **{**_values("behaviour"), "allow_end": False})


def test_the_restored_appendix_d2_anchors_say_what_the_paper_says():
    from mindsimkit.judge.rubrics import load

    items = {i.id: i for i in load("patientact").items}
    ea, br = items["emotional_authenticity"].anchors, items["behavioural_realism"].anchors
    assert "whatever the counsellor says" in ea[1] and "for no reason" in ea[1]  # EA-1: flat, or unexplained
    assert "sudden" in ea[2] and "unconnected" in ea[2]  # EA-2: abrupt, exaggerated or disconnected shifts
    assert "textbook" in br[3] and "real person" in br[3]  # BR-3: mixed
    assert "from the inside" in br[4]  # BR-4: a first-person narrative
    assert "clinical terms" in br[1]  # BR-1: sounds like an AI, clinical terminology
    assert all(w in br[2] for w in ("tone", "words", "feelings"))  # BR-2: scripted tone, vocabulary or emotions
    assert all(
        w in br[5] for w in ("speaking", "reacting", "coping")
    )  # BR-5: distinctive expression, reactions, coping


def test_the_first_scenario_writer_gets_the_frame_every_engine_of_the_run_plays():
    from mindsimkit.mindsim.scenario import FIRST_TEMPLATE

    def frame(**section):
        from mindsimkit.mindsim.patient_engines import scenario_frame

        return scenario_frame(SimulationConfig.from_section(section))

    paper = {"patient_engine": ["patientact", "patientact:no_dm", "patient_psi"], "preset": "patientact-reference"}
    assert frame(**paper) == "session"  # the preset's frame: session
    assert frame(**{**paper, "patient_engine": ["patientact", "mindsim"]}) == "chat"  # MindSim plays the app
    assert frame(patient_engine="patientact") == "chat"  # ours: the app frame
    values = dict(
        writer_brief="A brief.",
        goal="Feel steadier.",
        time_context="Tuesday evening.",
        emotion="tired",
        register_lines=["types in lowercase"],
    )
    session, chat = render(FIRST_TEMPLATE, frame="session", **values), render(FIRST_TEMPLATE, frame="chat", **values)
    assert (
        "first session with a counsellor" in session
        and "the app" not in session
        and "types in lowercase" not in session
    )
    assert "AI counsellor" in chat and "opening the app" in chat and "types in lowercase" in chat


def test_the_reference_wrap_up_note_reaches_the_last_two_counsellor_requests_only():
    """PatientHub's therapy session tells the therapist, with each of the last two client messages, how many turns
    are left: under the preset the counsellor's last two requests carry that note; the stored conversation, which
    the patient and the judge read, never does."""
    from test_patientact_reference import Direct, run

    assert (
        SimulationConfig.from_section(
            {"preset": "patientact-reference", "patient_engine": "patientact"}
        ).wrap_up_reminder
        == 2
    )
    assert SimulationConfig().wrap_up_reminder == 0
    rec, backend = run(Direct(), turn_cap=5)
    asked = [r.messages for r in backend.requests if r.role == "counsellor"]
    assert len(asked) == 4  # opening by the patient, then 4 counsellor replies
    noted = [i for i, m in enumerate(asked) if "replies left in this session" in (m[-1]["content"] or "")]
    assert noted == [2, 3]
    assert "2 of your replies left" in asked[2][-1]["content"] and "1 of your replies left" in asked[3][-1]["content"]
    assert not any("replies left" in (m.get("content") or "") for m in rec.counsellor_messages)
    assert not any("replies left" in (m.get("content") or "") for m in rec.patient_messages)


def test_the_relationship_patterns_are_asked_for_in_third_person_clinical_voice():
    """Fig. 5: the interpersonal patterns, the counsellor's included, are written about the client in the third
    person, as a clinician notes them."""
    from mindsimkit.profilegen.psych import psych_messages

    [message] = psych_messages(make_profile("p1"), "avoidant", "keeps distance", "unlovable", "not worth love")
    text = message["content"]
    assert "third person" in text and "never in the client's own voice" in text
    assert text.index("third person") > text.index("`interpersonal_patterns`")
    # Fig. 5's rule 3: the automatic thoughts in the client's own voice, at their level of schooling.
    assert "own first-person words" in text and "level of schooling" in text

"""Building a PatientAct patient for one session: its two system prompts, rendered once per session and kept
byte-identical for it (NOTES §2, prefix cache) — the patient's (the static layer as the paper's client prompt
has it, the style knobs, the time, the scenario's event and agenda as context, the running memory) and the
appraiser's (the taxonomies and the trust scale only: each step is given its own share of the client in its
user message, `step_inputs`, PatientAct Figs. 10-14) — and the session's own items (the scenario's automatic
thoughts, behaviours and bodily signs, `participant.session_items`), which reach the patient only through the
trust gate, never through its prompt.

The schedule's concealment level is not a prompt line here, unlike MindSim's patient: it shifts the session's
starting trust instead (`trust.yaml` `concealment_offset`), so concealment acts through the same gate as trust.
The archetype is not used: behaviour selection takes the place of its move lists. Without the dynamic memory
layer ("w/o DM", Table 4) the full profile — the 5P writer brief, the psychological formulation and the
scenario's thoughts, behaviours and bodily signs — goes into the patient's system prompt and nothing is
retrieved per turn; the steps see what they see in every arm.
"""

from __future__ import annotations

from typing import Any

from mindsimkit.mindcore.prompts import render
from mindsimkit.mindsim.agenda import Agenda
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.memory import format_log
from mindsimkit.mindsim.patientact.data import attachment_prior, preset_of, taxonomy, trust_rules
from mindsimkit.mindsim.patientact.decompose import Decomposition, seedless_writer_brief
from mindsimkit.mindsim.patientact.matcher import MATCHER_TEMPLATE
from mindsimkit.mindsim.patientact.participant import SIGNAL_TEMPLATE, STEP_TEMPLATE, PatientActPatient, session_items
from mindsimkit.mindsim.prompting import load_style_data, style_knob
from mindsimkit.mindsim.schedule import SessionPlan
from mindsimkit.profilegen.schemas import Profile

PA_PATIENT_TEMPLATE = "patientact/patient_system.jinja2"
PA_APPRAISER_TEMPLATE = "patientact/appraiser_system.jinja2"
PA_STEP_TEMPLATE = STEP_TEMPLATE
PA_SIGNAL_TEMPLATE = SIGNAL_TEMPLATE
PA_MATCHER_TEMPLATE = MATCHER_TEMPLATE
FULL_PROFILE_TEMPLATE = "patientact/full_profile.jinja2"


def full_profile(profile: Profile, decomposition: Decomposition, mode: str = "whole") -> str:
    """The whole profile as "w/o DM" puts it in the prompt: the 5P writer brief and the psychological formulation
    (`mode: reference`: the empty sections the authors' code renders there). A situation-seeded profile's brief
    already carries the formulation its chain wrote, so it is not rendered a second time."""
    return render(
        FULL_PROFILE_TEMPLATE,
        writer_brief=seedless_writer_brief(profile),
        formulation=None if profile.situation_profile is not None else decomposition.formulation,
        reference=mode == "reference",
    )


def patient_prompt(
    profile: Profile,
    plan: SessionPlan,
    scenario: Any,
    agenda: Agenda,
    memory: list[str],
    decomposition: Decomposition,
    config: SimulationConfig,
) -> str:
    data = load_style_data()
    pa = config.patientact
    s = profile.style
    pid = profile.profile_id
    reg = style_knob(data.register, s.register, "register", pid)
    knob_lines = [
        reg.line,
        style_knob(data.verbosity, s.verbosity, "verbosity", pid).line,
        style_knob(data.frustration_reactivity, s.frustration_reactivity, "frustration_reactivity", pid).line,
        style_knob(data.emotion, plan.emotion, "emotion", pid),
    ]
    return render(
        PA_PATIENT_TEMPLATE,
        style_rule=reg.rule,
        style_examples=reg.examples,
        static=decomposition.static,
        full_profile=None if pa.dynamic_memory else full_profile(profile, decomposition, pa.no_dm_profile),
        # The authors' w/o DM prompt has no counsellor pattern (their full arm's has).
        no_counsellor_pattern=not pa.dynamic_memory and pa.no_dm_profile == "reference",
        counsellor_opens=config.opening == "counsellor",
        frame=config.patientact.frame,
        pipeline=pa.pipeline,
        knob_lines=knob_lines,
        time_context=plan.time_context,
        situation=scenario,
        agenda_goal=scenario.goal,
        agenda_checkpoints=[i.text for i in agenda.items],
        memory_text=format_log(memory),
    )


def appraiser_prompt(config: SimulationConfig) -> str:
    """The steps' shared system prompt: the taxonomies and the trust scale, nothing of the client (each step is
    given its own share of the client's material in its user message, `step_inputs`)."""
    tax = taxonomy()
    rules = trust_rules(preset_of(config))
    return render(
        PA_APPRAISER_TEMPLATE,
        reactions=tax.reactions,
        intensities=tax.intensities,
        behaviours=tax.behaviours,
        patterns=tax.resistance_patterns,
        levels=[(f"{lv:.1f}", rules.levels[f"{lv:.1f}"]) for lv in rules.scale],
    )


def step_inputs(profile: Profile, decomposition: Decomposition, config: SimulationConfig) -> dict[str, Any]:
    """What of the client the steps are given beyond the conversation and the retrieved items (PatientAct
    Figs. 11-14): the coping patterns (behaviour, resistance; the 5P coping labels when there is no
    psychological formulation) and the attachment style with how its trust moves (trust). Neither the core-belief
    theme nor the rest of the static layer: the paper gives no step either."""
    psych = decomposition.psych
    coping = list(decomposition.static.coping) or [
        p.label.replace("_", " ") for p in profile.written().formulation.perpetuating
    ]
    return {
        "coping": coping,
        "attachment": psych.attachment,
        "attachment_text": attachment_prior().descriptions[psych.attachment],
        "leaning": trust_rules(preset_of(config)).attachment[psych.attachment].leaning,
    }


def patientact_patient(talk: Any) -> PatientActPatient:
    """The session's PatientAct patient, from the session's start (`mindsim.patient_engines.TalkStart`): the
    arc's decomposition (its preparation) and the starting trust carried into this session."""
    arc, inp, config = talk.arc, talk.inp, talk.config
    profile, decomposition = arc.profile, arc.preparation
    if decomposition.patient_id != profile.profile_id:
        raise ValueError(f"decomposition of {decomposition.patient_id} given to {profile.profile_id}")
    system = patient_prompt(profile, inp.plan, inp.scenario, talk.agenda, inp.memory, decomposition, config)
    return PatientActPatient(
        client=arc.roles.patient,
        appraiser=arc.roles.get("appraiser"),
        decomposition=decomposition,
        config=config,
        trust=inp.carried,
        history=[{"role": "system", "content": system}],
        appraiser_system=appraiser_prompt(config),
        step_inputs=step_inputs(profile, decomposition, config),
        session_items=session_items(inp.scenario) if config.patientact.dynamic_memory else [],
        matcher=(arc.roles.extra.get("matcher") or arc.roles.get("appraiser"))
        if config.patientact.retrieval == "llm"
        else None,
    )


def decompose_settings(config: SimulationConfig) -> dict[str, Any]:
    """The recipe's settings for `decompose` / `decomposition_record`."""
    pa = config.patientact
    return {
        "max_tokens": pa.decomposition_max_tokens,
        "max_attempts": pa.step_attempts,
        "chunk": pa.decomposition_chunk,
        "with_formulation": pa.psych_formulation,
        "formulation_max_tokens": pa.formulation_max_tokens,
        "screen": pa.psych_screen,
        "screen_max_tokens": pa.psych_screen_max_tokens,
    }

"""Largest prompt of each of PatientAct's own roles, for preflight's context check (`mindcore.budget_fit`),
estimated as `mindsim.stage_sizes` estimates the simulator's: rendered from the real templates on the worst
case this recipe allows, counted with the engine's tokenizer where it serves one.

The worst case is an upper bound on what one call can hold, not a likely call: the longest persona of the
shipped sample with the largest 5P formulation (at the recipe's `profiles.text_scale`) and the largest
psychological formulation, so the most profile
pieces (`decompose.max_pieces`), each an item with its topic and five tags at their length limits; every item
activated and every topic blocked in the same step (a real turn splits them); the recent conversation at
`patientact.context_turns` exchanges of replies at their budgets. The appraiser's system prompt holds no
profile in any arm (the w/o DM arm's full profile is in the patient's prompt only).

- profile_decomposer: the decomposition call (the psychological formulation's call is smaller: it is the
  profile alone);
- patient_appraiser: its system prompt plus the largest of the reaction, behaviour, resistance and trust steps;
- patient_matcher: the recent conversation, the message and every tag (asked only under `retrieval: llm`).
"""

from __future__ import annotations

from typing import Any

from mindsimkit.mindcore.budget import PromptSize, fill_text, largest_instance, messages_tokens

# Behaviours the behaviour step lists as the client's recent ones (participant.turn passes the last four).
RECENT_BEHAVIOURS = 4
# Every rule id the step template words (participant.conditions); all held at once, for the longest prompt.
ALL_RULES = [
    "nothing_activated",
    "trigger",
    "blocked",
    "nothing_activated_neutral",
    "high_intensity_low_trust",
    "positive_moderate",
    "pullback",
    "neutral_or_low",
    "same_run",
]


def _worst(inp: Any, sz: Any) -> dict[str, Any]:
    from mindsimkit.mindsim.patientact.data import (
        attachment_prior,
        item_types,
        preset_of,
        taxonomy,
        theme_map,
        trust_rules,
    )
    from mindsimkit.mindsim.patientact.decompose import Decomposition, MemoryItem, profile_pieces, static_layer
    from mindsimkit.mindsim.patientact.seed import PsychSeed
    from mindsimkit.mindsim.stage_sizes import message_texts, session_fixtures, simulation
    from mindsimkit.profilegen.config import profiles_config
    from mindsimkit.profilegen.stage import largest_formulation
    from mindsimkit.profilegen.psych import PsychFormulation
    from mindsimkit.profilegen.render import case_summary, writer_brief
    from mindsimkit.profilegen.testing import make_profiles

    fx = session_fixtures(inp, sz)
    # The profile's texts at the recipe's `profiles.text_scale`: the pieces are the profile's own words, so a
    # recipe that writes shorter formulations decomposes shorter pieces.
    pcfg = profiles_config(inp.recipe)
    f = largest_formulation(pcfg.text_scale, False, pcfg.patientact_shape)
    profile = make_profiles(1, 0)[0].model_copy(
        update={
            "persona": fx["row"].persona,
            "formulation": f,
            "writer_brief": writer_brief(fx["row"], f),
            "case_summary": case_summary(fx["row"], f),
        }
    )
    s = simulation(inp)
    # Without the psychological formulation (`patientact.psych_formulation: false`) its pieces do not exist.
    formulation = (
        PsychFormulation.model_validate(largest_instance(PsychFormulation.model_json_schema()))
        if s.patientact.psych_formulation
        else None
    )

    def longest(d: dict[str, str]) -> str:
        return max(d, key=lambda k: len(d[k]))

    psych = PsychSeed(
        attachment=longest(attachment_prior().descriptions),
        theme=longest(theme_map().themes),
        cluster=profile.written().formulation.core_belief.cluster,
    )
    pieces = profile_pieces(profile, formulation)
    types, rules = item_types(), trust_rules(preset_of(s))
    category = max(types.discomfort_categories, key=len)
    items = [
        MemoryItem(
            id=f"m{i + 1}",
            type=p.type,
            source=p.source,
            content=p.content,
            topic=fill_text(40),
            level=rules.maximum,
            tags=[fill_text(30)] * 5,
            category=category,
            discomfort=True,
        )
        for i, p in enumerate(pieces)
    ]
    decomposition = Decomposition(
        patient_id=profile.profile_id,
        seed=0,
        psych=psych,
        formulation=formulation,
        static=static_layer(profile, formulation),
        items=items,
    )
    patient_msg, counsellor_msg = message_texts(inp, sz)
    # The whole conversation under `step_context: whole` (the authors' setting): every exchange the cap allows.
    shown = s.turn_cap if s.patientact.step_context == "whole" else s.patientact.context_turns
    recent = [("Counsellor", counsellor_msg), ("Client", patient_msg)] * shown
    tax = taxonomy()
    return {
        "profile": profile,
        "vocab": fx["vocab"],
        "psych": psych,
        "formulation": formulation,
        "pieces": pieces,
        "decomposition": decomposition,
        "config": s,
        "recent": recent,
        "counsellor": counsellor_msg,
        "reply": patient_msg,
        "tax": tax,
        "rules": rules,
        "recent_behaviours": sorted(tax.ids("behaviours"), key=len)[-RECENT_BEHAVIOURS:],
    }


def _arm_configs(inp: Any, config: Any) -> list[Any]:
    """The simulation settings of each PatientAct arm the recipe runs (the arms differ in what the prompts hold)."""
    from mindsimkit.mindsim.patient_engines import recipe_variants
    from mindsimkit.mindsim.patientact import NAME

    arms = [v.session_config(config) for v in recipe_variants(inp.recipe) if v.engine.name == NAME]
    return arms or [config]


def decomposer_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.mindsim.patientact.decompose import chunks, decompose_messages

    w = _worst(inp, sz)
    # The largest call: a profile of more pieces than `decomposition_chunk` is asked for in parts.
    part = max(chunks(w["pieces"], w["config"].patientact.decomposition_chunk), key=len)
    n = messages_tokens(decompose_messages(w["profile"], w["psych"], part, w["formulation"]), sz)
    return PromptSize("profile_decomposer", n, {f"decomposition of {len(part)} of {len(w['pieces'])} pieces": n})


def appraiser_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.mindcore.prompts import render
    from mindsimkit.mindsim.patientact.data import preset_of, step_rules
    from mindsimkit.mindsim.patientact.participant import STEP_TEMPLATE
    from mindsimkit.mindsim.patientact.session import appraiser_prompt as appraiser_system
    from mindsimkit.mindsim.patientact.session import step_inputs

    w = _worst(inp, sz)
    tax, rules, d = w["tax"], w["rules"], w["decomposition"]
    system = max(sz(appraiser_system(cfg)) for cfg in _arm_configs(inp, w["config"]))
    ctx = {
        **step_inputs(w["profile"], d, w["config"]),
        "recent": w["recent"],
        "counsellor": w["counsellor"],
        "reply": w["reply"],
        "trust": f"{rules.minimum:.2f}",
        "trust_text": max(rules.levels.values(), key=len),
        "activated": [(i.type, i.content) for i in d.items],
        "blocked": [i.topic for i in d.items],
        "held": ALL_RULES,
        "rules": ALL_RULES,
        "streak": 9,
        "expects": d.static.therapist_expects,
        "reaction": max(tax.ids("reactions"), key=len),
        "intensity": max(tax.intensities, key=len),
        "recent_behaviours": w["recent_behaviours"],
        "srules": step_rules(preset_of(w["config"])),
        "criteria": rules.criteria,
        "default_criterion": rules.default_criterion,
        "by_direction": False,
        "last_behaviour": "resistance",
        "allow_end": True,  # the longer behaviour prompt: it also explains `end_conversation`
    }
    options = {
        "reaction": tax.ids("reactions"),
        "behaviour": tax.ids("behaviours"),
        "resistance": tax.ids("resistance_patterns"),
        "trust": list(rules.changes),
    }
    steps = {
        step: sz(
            render(
                STEP_TEMPLATE,
                **{**ctx, "step": step, "options": opts, "behaviour": "resistance" if step == "resistance" else None},
            )
        )
        for step, opts in options.items()
    }
    worst = max(steps, key=steps.__getitem__)
    overhead = messages_tokens([{"role": "system", "content": ""}, {"role": "user", "content": ""}], sz)
    # Typical: the mean step (every turn asks reaction, behaviour and trust; resistance only sometimes).
    step = sum(steps.values()) / len(steps) if inp.typical else steps[worst]
    total = round(system + step + overhead)
    return PromptSize(
        "patient_appraiser",
        total,
        {"system prompt": system, f"{worst} step (largest)": steps[worst], "message overhead": overhead},
    )


def message_prompt(inp: Any, sz: Any, settings: Any = None) -> PromptSize:
    """The patient's last message request of a session, for `mindsim plan`: its system prompt (the arm's settings
    applied: without dynamic memory it holds the whole profile) and the exchange before the last message. The
    per-turn signal (trust, retrieved items) is left out: it rides on one request and is not kept."""
    from mindsimkit.mindsim.patientact.session import patient_prompt
    from mindsimkit.mindsim.stage_sizes import patient_request, session_fixtures

    w, fx = _worst(inp, sz), session_fixtures(inp, sz)
    config = w["config"]
    if settings:
        pa = type(config.patientact).model_validate({**config.patientact.model_dump(), **dict(settings)})
        config = config.model_copy(update={"patientact": pa})
    system = patient_prompt(
        w["profile"], fx["plan"], fx["scenario"], fx["agenda"], fx["memory"], w["decomposition"], config
    )
    return patient_request(system, fx, sz, "system prompt and the exchange")


def matcher_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.mindsim.patientact.matcher import all_tags, matcher_messages

    w = _worst(inp, sz)
    # Every item's tags, distinct (all_tags dedupes), so each stand-in tag is made unique.
    items = [
        i.model_copy(update={"tags": [f"{n}{i.id}{t}"[:30] for n, t in enumerate(i.tags)]})
        for i in w["decomposition"].items
    ]
    tags = all_tags(items)
    recent = w["recent"] if w["config"].patientact.matcher_context == "recent" else []
    n = messages_tokens(matcher_messages(recent, w["counsellor"], tags), sz)
    return PromptSize("patient_matcher", n, {f"{len(tags)} tags and the recent conversation": n})


ESTIMATES = {
    "profile_decomposer": decomposer_prompt,
    "patient_appraiser": appraiser_prompt,
    "patient_matcher": matcher_prompt,
}

"""Rendering the patient's and the counsellor's system prompts (MindEval2/MindSim Appendix D, Figure 12 patient
system prompt and Figure 13 benchmark counsellor prompt) and the style knobs as sentences (§4.1
"Conversational style", §4.2 "Session style").

Both prompts are rendered once per session and kept byte-identical for the whole session, so the engine can
reuse the cached prefix (NOTES §2); per-turn state (writing cues, agenda answers) goes in as messages.
Knob sentences and cues are data (`mindsim/data/style.yaml`).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mindcore.errors import ConfigError
from mindcore.prompts import render, template_hash
from mindsim.agenda import Agenda
from mindsim.memory import format_log
from mindsim.schedule import SessionPlan
from profilegen.moves import Vocabulary
from profilegen.schemas import Profile

PATIENT_TEMPLATE = "patient/system.jinja2"
COUNSELLOR_TEMPLATE = "counsellor/system.jinja2"


class RegisterStyle(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rule: str = Field(description="Casing and punctuation rule (the template's style_rule)")
    line: str = Field(description="Knob sentence")
    examples: list[str] = Field(min_length=1, description="Example turns in this register")
    register_line: str = Field(description="How the situation writer is told to write the opener")
    cues: list[str] = Field(min_length=1, description="Style cues sent with accepted moves")


class KnobLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    line: str
    cues: list[str] = Field(default_factory=list)


class StyleData(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    version: str
    register: dict[str, RegisterStyle]
    verbosity: dict[str, KnobLine]
    frustration_reactivity: dict[str, KnobLine]
    concealment: dict[str, KnobLine]
    emotion: dict[str, str]


@lru_cache(maxsize=1)
def load_style_data() -> StyleData:
    path = resources.files("mindsim") / "data" / "style.yaml"
    try:
        return StyleData.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except Exception as exc:
        raise ConfigError(f"mindsim/data/style.yaml is invalid: {exc}") from exc


def _knob(table: dict[str, Any], value: str, knob: str, profile_id: str):
    if value not in table:
        raise ConfigError(
            f"profile {profile_id}: style.{knob} '{value}' has no sentence in mindsim/data/style.yaml "
            f"(known: {', '.join(table)})"
        )
    return table[value]


def register_lines(profile: Profile) -> list[str]:
    s = profile.style
    data = load_style_data()
    reg = _knob(data.register, s.register, "register", profile.profile_id)
    return [reg.register_line, _knob(data.verbosity, s.verbosity, "verbosity", profile.profile_id).line]


def style_cues(profile: Profile) -> list[str]:
    s = profile.style
    data = load_style_data()
    return [
        *_knob(data.register, s.register, "register", profile.profile_id).cues,
        *_knob(data.verbosity, s.verbosity, "verbosity", profile.profile_id).cues,
    ]


def patient_system_prompt(
    profile: Profile,
    vocab: Vocabulary,
    plan: SessionPlan,
    scenario: Any,
    agenda: Agenda,
    memory: list[str],
    *,
    agenda_plain: bool = False,
) -> str:
    """The patient's system prompt for one session (the core belief stays out: case_summary withholds it)."""
    data = load_style_data()
    s = profile.style
    pid = profile.profile_id
    reg = _knob(data.register, s.register, "register", pid)
    arch = vocab.archetype(s.archetype)
    knob_lines = [
        reg.line,
        _knob(data.verbosity, s.verbosity, "verbosity", pid).line,
        _knob(data.frustration_reactivity, s.frustration_reactivity, "frustration_reactivity", pid).line,
        _knob(data.concealment, plan.concealment, "concealment", pid).line,
        _knob(data.emotion, plan.emotion, "emotion", pid),
    ]
    checkpoints = [f"[{i.id}] {i.text}" if not agenda_plain else i.text for i in agenda.items]
    return render(
        PATIENT_TEMPLATE,
        style_rule=reg.rule,
        move_lines=[m.prompt_line for m in vocab.available(s.archetype)],
        depth_moves=[m for m in vocab.depth_moves if m not in arch.removed_ids],
        agenda_plain=agenda_plain,
        style_examples=reg.examples,
        formulation=profile.case_summary,
        archetype_text=arch.text,
        archetype_avoids=arch.never_lines,
        knob_lines=knob_lines,
        time_context=plan.time_context,
        situation=scenario,
        agenda_goal=scenario.goal,
        agenda_checkpoints=checkpoints,
        memory_text=format_log(memory),
    )


def counsellor_system_prompt(plan: SessionPlan, memory: list[str]) -> str:
    return render(COUNSELLOR_TEMPLATE, time_context=plan.time_context, memory=format_log(memory))


def transcript_text(messages: list[dict[str, str]]) -> str:
    """A plain transcript (patient = user) as the situation writer and the memory compactor read it."""
    names = {"user": "Patient", "assistant": "Counsellor"}
    return "\n".join(f"{names[m['role']]}: {m['content']}" for m in messages if m["role"] in names)


def template_hashes(names: list[str]) -> dict[str, str]:
    return {n: template_hash(n) for n in names}

"""Rendering the patient's and the counsellor's system prompts (MindEval2/MindSim Appendix D, Figure 12 patient
system prompt and Figure 13 benchmark counsellor prompt) and the style knobs as sentences (§4.1
"Conversational style", §4.2 "Session style").

Both prompts are rendered once per session and kept byte-identical for the whole session, so the engine can
reuse the cached prefix (NOTES §2); per-turn state (writing cues, agenda answers) goes in as messages.
Knob sentences and cues are data (`mindsim/data/style.yaml`).

Also here: telling speech from harness text, so a tool call or a cut-off sentence never reaches the counsellor as
the patient's words. A simulated message that is a tool call, a JSON object, holds tool-call syntax or was cut off
at a length limit mid-sentence is not speech. The patient's messages (opening messages included) are re-asked when
they are like that; the counsellor's are stored as sent and flagged, because the counsellor is the system under
test. The pattern lists are data (`mindsim/data/harness_text.yaml`); the rules are `speech_defects` and
`counsellor_flags`.
"""

from __future__ import annotations

import json
import re
from functools import cached_property, lru_cache
from importlib import resources
from typing import Any, Literal, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.errors import ConfigError, MindsimError
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindcore import yamlio
from mindsimkit.mindsim.agenda import Agenda
from mindsimkit.mindsim.memory import format_log
from mindsimkit.mindsim.schedule import SessionPlan
from mindsimkit.profilegen.moves import Vocabulary
from mindsimkit.profilegen.schemas import Profile

PATIENT_TEMPLATE = "patient/system.jinja2"
EXCERPT_CHARS = 200
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
    path = resources.files("mindsimkit.mindsim") / "data" / "style.yaml"
    try:
        return StyleData.model_validate(yamlio.safe_load(path.read_text(encoding="utf-8")))
    except Exception as exc:
        raise ConfigError(f"mindsim/data/style.yaml is invalid: {exc}") from exc


V = TypeVar("V")


def style_knob(table: Mapping[str, V], value: str, knob: str, profile_id: str) -> V:
    if value not in table:
        raise ConfigError(
            f"profile {profile_id}: style.{knob} '{value}' has no sentence in mindsim/data/style.yaml "
            f"(known: {', '.join(table)})"
        )
    return table[value]


def register_lines(profile: Profile) -> list[str]:
    s = profile.style
    data = load_style_data()
    reg = style_knob(data.register, s.register, "register", profile.profile_id)
    return [reg.register_line, style_knob(data.verbosity, s.verbosity, "verbosity", profile.profile_id).line]


def style_cues(profile: Profile) -> list[str]:
    s = profile.style
    data = load_style_data()
    return [
        *style_knob(data.register, s.register, "register", profile.profile_id).cues,
        *style_knob(data.verbosity, s.verbosity, "verbosity", profile.profile_id).cues,
    ]


class ExampleTurns(list[str]):
    """The register's example turns: a list to our template, and as text (`{{ style_examples }}`) the turns in
    brackets on one line, which is how a template that prints the variable whole (the MindEval2 authors' published
    patient prompt does) shows them. The bracket format is our reading of that prompt, not checked against their
    code's output."""

    def __str__(self) -> str:
        return " ".join(f"[ {turn} ]" for turn in self)


def session_conduct(profile: Profile, vocab: Vocabulary, plan: SessionPlan) -> dict[str, Any]:
    """How the patient plays one session, in the words of its own prompt: the archetype's text, its never
    sentences, and the session's concealment and emotion sentences. The `mindeval2-reference` preset hands these
    to the writer of that session's scenario, whose opening message is spoken verbatim (mind-eval `arc.py`)."""
    data = load_style_data()
    pid = profile.profile_id
    arch = vocab.archetype(profile.style.archetype)
    return {
        "archetype_text": arch.text,
        "archetype_avoids": arch.never_lines,
        "conduct_lines": [
            style_knob(data.concealment, plan.concealment, "concealment", pid).line,
            style_knob(data.emotion, plan.emotion, "emotion", pid),
        ],
    }


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
    reg = style_knob(data.register, s.register, "register", pid)
    arch = vocab.archetype(s.archetype)
    verbosity_line = style_knob(data.verbosity, s.verbosity, "verbosity", pid).line
    knob_lines = [
        reg.line,
        verbosity_line,
        style_knob(data.frustration_reactivity, s.frustration_reactivity, "frustration_reactivity", pid).line,
        style_knob(data.concealment, plan.concealment, "concealment", pid).line,
        style_knob(data.emotion, plan.emotion, "emotion", pid),
    ]
    checkpoints = [f"[{i.id}] {i.text}" if not agenda_plain else i.text for i in agenda.items]
    return render(
        PATIENT_TEMPLATE,
        style_rule=reg.rule,
        move_lines=[m.prompt_line for m in vocab.available(s.archetype)],
        depth_moves=[m for m in vocab.depth_moves if m not in arch.removed_ids],
        agenda_plain=agenda_plain,
        style_examples=ExampleTurns(reg.examples),
        # Not read by our template; given so the authors' published patient prompt file can be used unchanged.
        verbosity_line=verbosity_line,
        secondary_note=None,
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


def counsellor_system_prompt(plan: SessionPlan, memory: list[str], opening_greeting: bool = False) -> str:
    return render(
        COUNSELLOR_TEMPLATE,
        time_context=plan.counsellor_time_context,
        memory=format_log(memory),
        opening_greeting=opening_greeting,
    )


def transcript_text(messages: list[dict[str, str]]) -> str:
    """A plain transcript (patient = user) as the situation writer and the memory compactor read it."""
    names = {"user": "Patient", "assistant": "Counsellor"}
    return "\n".join(f"{names[m['role']]}: {m['content']}" for m in messages if m["role"] in names)


def template_hashes(names: list[str]) -> dict[str, str]:
    return {n: template_hash(n) for n in names}


# -- speech vs harness text ---------------------------------------------------------------------------


class TurnFailed(MindsimError):
    """A turn could not be produced within its bounded retries; the session counts as failed."""


RejectReason = Literal["blank", "tool_call", "json", "tool_syntax", "cut_off"]
CounsellorFlag = Literal["tool_call", "json", "tool_syntax", "cut_off", "speaks_as_patient"]


class RejectedMessage(BaseModel):
    """A patient message (or a scenario's opening message) that was not speech, so it was re-asked and never
    stored as what the patient said."""

    model_config = ConfigDict(extra="forbid")
    reason: RejectReason = Field(description="Why it was not used")
    text: str = Field(description=f"The first {EXCERPT_CHARS} characters as the model wrote them")
    finish_reason: str | None = Field(None, description="The engine's finish reason for that reply, if known")


class HarnessText(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, ignored_types=(cached_property,))
    source: str
    version: str
    tool_names: list[str] = Field(min_length=1)
    tool_syntax: list[str] = Field(min_length=1)
    patient_labels: list[str] = Field(min_length=1)
    sentence_end: str = Field(min_length=1)
    closers: str
    reask_notes: dict[str, str]
    reask_tail: str
    speech_first_note: str
    opening_notes: dict[str, str]
    opening_tail: str
    blank_items_note: str
    agenda_plain_answers: dict[str, str]  # exactly done, added, duplicate and unnamed (checked on load)
    inline_reasoning_tags: list[tuple[str, str]] = Field(min_length=1)
    wrap_up_note: str = Field(min_length=1)

    @cached_property
    def syntax_re(self) -> re.Pattern[str]:
        names = "|".join(re.escape(n) for n in self.tool_names)
        return re.compile("|".join([*self.tool_syntax, rf"\b(?:{names})\b"]), re.IGNORECASE)

    @cached_property
    def label_re(self) -> re.Pattern[str]:
        labels = "|".join(re.escape(n) for n in self.patient_labels)
        # A speaker label opening a line, bold or not: "Patient: ...", "**Client:** ...".
        return re.compile(rf"^[ \t*_>]*(?:{labels})[ \t*_]*:", re.IGNORECASE | re.MULTILINE)


@lru_cache(maxsize=1)
def load_harness_text() -> HarnessText:
    path = resources.files("mindsimkit.mindsim") / "data" / "harness_text.yaml"
    try:
        data = HarnessText.model_validate(yamlio.safe_load(path.read_text(encoding="utf-8")))
        _ = data.syntax_re, data.label_re  # compile now, so a bad pattern is a config error here
    except Exception as exc:
        raise ConfigError(f"mindsim/data/harness_text.yaml is invalid: {exc}") from exc
    missing = set(data.reask_notes) ^ {"blank", "tool_call", "json", "tool_syntax", "cut_off"}
    if missing or set(data.opening_notes) != {"tool_call", "json", "tool_syntax", "cut_off"}:
        raise ConfigError("mindsim/data/harness_text.yaml: reask_notes / opening_notes must cover every reason")
    if set(data.agenda_plain_answers) != {"done", "added", "duplicate", "unnamed"}:
        raise ConfigError(
            "mindsim/data/harness_text.yaml: agenda_plain_answers must give done, added, duplicate and unnamed"
        )
    return data


_FENCE = re.compile(r"^```[A-Za-z]*\s*|\s*```$")
_JSON_KEY = re.compile(r'^\{\s*"[^"\n]{1,40}"\s*:')
_CALL_KEYS = {"name", "arguments", "function", "tool_calls", "tool_call"}


def _json_kind(body: str, data: HarnessText) -> str | None:
    """'tool_call' or 'json' when the whole message is a JSON value (cut-off JSON included), else None."""
    if not body.startswith(("{", "[")):
        return None
    try:
        value = json.loads(body)
    except ValueError:
        # Cut-off or sloppy JSON: an object that opens with a quoted key is still JSON, not speech.
        if not _JSON_KEY.match(body):
            return None
        return "tool_call" if data.syntax_re.search(body) else "json"
    if isinstance(value, dict):
        return "tool_call" if _CALL_KEYS & set(value) or data.syntax_re.search(body) else "json"
    return "json" if isinstance(value, list) else None


def ends_sentence(text: str) -> bool:
    data = load_harness_text()
    tail = text.rstrip().rstrip(data.closers).rstrip()
    return bool(tail) and tail[-1] in data.sentence_end


def last_complete_sentence(text: str) -> str | None:
    """`text` up to the end of its last complete sentence (closing quotes or brackets kept), or None when no
    sentence ends in it. A sentence end must be followed by a space or the end, so "3.5" or "e.g" inside a
    word does not count."""
    data = load_harness_text()
    body = text.rstrip()
    for i in range(len(body) - 1, -1, -1):
        if body[i] not in data.sentence_end:
            continue
        j = i + 1
        while j < len(body) and body[j] in data.closers:
            j += 1
        if j == len(body) or body[j].isspace():
            return body[:j].strip() or None
    return None


def speech_defects(text: str, *, finish_reason: str | None = None, max_chars: int | None = None) -> list[str]:
    """Why `text` is not usable speech, most telling first (empty when it is). Cut off means stopped by the
    token budget (`finish_reason == "length"`) or at a schema's `maxLength`, and not at a sentence end."""
    data = load_harness_text()
    body = _FENCE.sub("", text.strip()).strip()
    out: list[str] = []
    kind = _json_kind(body, data)
    if kind:
        out.append(kind)
    elif data.syntax_re.search(body):
        out.append("tool_syntax")
    limited = finish_reason == "length" or (max_chars is not None and len(text) >= max_chars)
    if limited and not ends_sentence(body):
        out.append("cut_off")
    return out


def split_inline_reasoning(text: str) -> tuple[str, str | None]:
    """`text` without the reasoning blocks a model wrote inline, and those blocks' contents (None when there were
    none). Three shapes per tag pair: whole blocks anywhere; a closing tag with no opening one (a chat template
    that puts the opening tag in the prompt), where everything before it was reasoning; an opening tag never
    closed (a reply cut off while still reasoning), where everything from it on was."""
    found: list[str] = []
    for opening, closing in load_harness_text().inline_reasoning_tags:
        o, c = re.escape(opening), re.escape(closing)
        if not re.search(f"{o}|{c}", text, re.IGNORECASE):
            continue
        block = re.compile(f"{o}(.*?){c}", re.IGNORECASE | re.DOTALL)
        found += [m.group(1) for m in block.finditer(text)]
        text = block.sub("", text)
        orphan_close = list(re.finditer(c, text, re.IGNORECASE))
        if orphan_close:
            found.insert(0, text[: orphan_close[-1].start()])
            text = text[orphan_close[-1].end() :]
        orphan_open = re.search(o, text, re.IGNORECASE)
        if orphan_open:
            found.append(text[orphan_open.end() :])
            text = text[: orphan_open.start()]
    kept = [f.strip() for f in found if f.strip()]
    return (text.strip(), "\n\n".join(kept)) if found else (text, None)


def counsellor_flags(text: str, finish_reason: str | None = None) -> list[str]:
    """Defects of a counsellor reply, recorded and never corrected: the counsellor is what is being tested."""
    flags = speech_defects(text, finish_reason=finish_reason)
    if load_harness_text().label_re.search(text):
        flags.append("speaks_as_patient")
    return flags


def rejected(reason: str, raw: str | None, finish_reason: str | None = None) -> RejectedMessage:
    return RejectedMessage(reason=reason, text=(raw or "")[:EXCERPT_CHARS], finish_reason=finish_reason)

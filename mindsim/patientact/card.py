"""A PatientAct profile as one card (PatientAct Fig. 2): demographics, the 5P problem formulation (presenting
problem with its impact list, precipitating, predisposing split psychological / social, perpetuating, protective)
and the psychological formulation (intermediate beliefs, automatic thoughts, triggers, coping, emotional range,
relationship patterns, the counsellor's first). A MindSim-shaped profile has no impact list and one predisposing
list: its card shows the sections it has.

One rendering serves three readers, so they read the same text:
- the profile judge and the human raters of the identification task (`blind=True`, §4.1, Table 1): without
  the core belief, whose cluster names the theme they are asked to find, and without the seeds;
- a person looking at a profile (`mindsim patientact profile-card`): everything, the seeds named as Fig. 2's
  caption names them.
Pure: a profile and its formulation in, titled sections out (`Section`), Markdown from them (`card_markdown`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from mindsimkit.profilegen.schemas import Profile
from mindsimkit.profilegen.situation_schemas import SituationRecord


@dataclass(frozen=True)
class Section:
    """One titled block of the card: its lines (one bullet each when there are several)."""

    title: str
    lines: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "lines": list(self.lines)}


def _words(label: str) -> str:
    return label.replace("_", " ")


def demographics_line(profile: Profile) -> str:
    from mindsimkit.profilegen.render import LIVING

    p, d = profile.written().persona, profile.written().demographics
    return (
        f"Age {p.age}, {d.gender}, {_words(d.relationship)}, {_words(d.employment)} "
        f"({_words(p.occupation)}), living {LIVING[d.living_situation]}."
    )


def _problem(profile: Profile, blind: bool) -> list[Section]:
    f = profile.written().formulation
    presenting = [f"Situation: {f.presenting.summary}"]
    if f.presenting.impact:  # Fig. 2's "Impact:" line, the symptoms joined as the figure joins them
        presenting.append(f"Impact: {'; '.join(f.presenting.impact)}")
    presenting.append(f"Goal: {f.presenting.goal}")
    out = [Section("Presenting problem", tuple(presenting))]
    out.append(
        Section(
            "Precipitating factors",
            (f"{f.precipitating.when}: {_words(f.precipitating.label)}. {f.precipitating.what_changed}",),
        )
    )

    def line(p: Any) -> str:
        return f"{_words(p.label)}: {p.history}"

    if any(p.kind for p in f.predisposing):
        for kind in ("psychological", "social"):
            out.append(
                Section(f"Predisposing factors: {kind}", tuple(line(p) for p in f.predisposing if p.kind == kind))
            )
    else:
        out.append(Section("Predisposing factors", tuple(line(p) for p in f.predisposing)))
    out.append(Section("Perpetuating factors", tuple(f"{_words(p.label)}: {p.situation}" for p in f.perpetuating)))
    out.append(Section("Protective factors", tuple(f"{_words(p.label)}: {p.detail}" for p in f.protective)))
    if not blind:
        out.append(Section("Core belief", (f"{f.core_belief.belief} ({f.core_belief.history})",)))
    return out


def _psychological(formulation: Any) -> list[Section]:
    if formulation is None:
        return []
    f = formulation
    out = [
        Section(title, tuple(getattr(f, name)))
        for title, name in (
            ("Intermediate beliefs", "intermediate_beliefs"),
            ("Automatic thoughts", "automatic_thoughts"),
            ("Triggers", "triggers"),
            ("Coping patterns", "coping_patterns"),
        )
        if getattr(f, name)
    ]
    out.append(Section("Emotional range", (f.emotional_range,)))
    tp = f.therapist_pattern
    out.append(
        Section(
            "Interpersonal pattern: the counsellor",
            (f"Wish: {tp.wish}", f"Expected response: {tp.response_of_other}", f"Reaction: {tp.response_of_self}"),
        )
    )
    for p in f.interpersonal_patterns:
        out.append(
            Section(
                f"Interpersonal pattern: {p.domain}",
                (f"Wish: {p.wish}", f"Expected response: {p.response_of_other}", f"Reaction: {p.response_of_self}"),
            )
        )
    return out


def _situation_card(record: SituationRecord) -> list[Section]:
    """A situation-seeded profile's demographics and 5P sections: the authors' lists as they stand (Fig. 2). Its
    core belief is the scaffold's theme, a seed, so a blind card hides it with the seeds."""
    d, pf = record.profile.demographics, record.profile.problem_formulation
    lo, hi = record.scaffold.age_range
    who = (
        f"{d.name}: {d.age_group.lower()} ({lo}-{hi}), {d.gender}, {d.marital_status}, {d.occupation}.",
        f"Cultural background: {d.cultural_background}",
    )
    return [
        Section("Demographics", who),
        Section(
            "Presenting problem",
            (
                f"Situation: {pf.presenting_problem.situation}",
                f"Impact: {'; '.join(pf.presenting_problem.impact)}",
                f"Goal: {pf.goal}",
            ),
        ),
        Section("Precipitating factors", tuple(pf.precipitating_factors)),
        Section("Predisposing factors: psychological", tuple(pf.predisposing_factors.psychological)),
        Section("Predisposing factors: social", tuple(pf.predisposing_factors.social)),
        Section("Perpetuating factors", (*pf.perpetuating_factors.internal, *pf.perpetuating_factors.external)),
        Section("Protective factors", (*pf.protective_factors.internal, *pf.protective_factors.external)),
    ]


def profile_card(
    profile: Profile, formulation: Any = None, *, blind: bool = True, seeds: Optional[dict[str, str]] = None
) -> list[Section]:
    """The card's sections. `blind`: as the identification task shows it (no core belief, no seeds);
    otherwise the whole profile, with `seeds` (attachment, theme) named when given."""
    if profile.situation_profile is not None:
        out = _situation_card(profile.situation_profile) + _psychological(formulation)
        if seeds and not blind:
            out.append(
                Section("Seed attributes", tuple(f"{k.replace('_', ' ').capitalize()}: {v}" for k, v in seeds.items()))
            )
        return out
    persona = profile.written().persona
    who = [persona.persona.strip(), demographics_line(profile)]
    if persona.cultural_background.strip():
        who.append(f"Cultural background: {persona.cultural_background.strip()}")
    revised = profile.provenance.demographics_revised
    if revised is not None and revised.changed and not blind:
        was = ", ".join(f"{k.replace('_', ' ')} {_words(getattr(revised.revised_from, k))}" for k in revised.changed)
        who.append(f"Revised to fit the formulation (Fig. 4); the persona record had {was}.")
    out = [Section("Demographics", tuple(x for x in who if x))]
    out += _problem(profile, blind)
    out += _psychological(formulation)
    if seeds and not blind:
        out.append(
            Section("Seed attributes", tuple(f"{k.replace('_', ' ').capitalize()}: {v}" for k, v in seeds.items()))
        )
    return out


def card_markdown(sections: list[Section], title: Optional[str] = None) -> str:
    """The sections as Markdown: `## Title`, one line alone as a paragraph, several as bullets."""
    parts = [f"# {title}", ""] if title else []
    for s in sections:
        parts += [f"## {s.title}", *(s.lines if len(s.lines) == 1 else [f"- {x}" for x in s.lines]), ""]
    return "\n".join(parts).rstrip() + "\n"

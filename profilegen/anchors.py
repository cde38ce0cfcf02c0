"""Stage 2 — clinical anchor and conversational style (MindEval2 §4.1 "Clinical anchor",
"Conversational style"; Appendix C "Presenting problems").

For each persona: a main presenting problem drawn from P(main | age band, gender), a secondary one
(or none) from P(secondary | main, age band, gender) — both from a rates file — and the life domain most
impaired (WSAS), drawn given the main problem's core group; then the style knobs and one of the sixteen
coping archetypes (`profilegen.moves`). Draws come from streams keyed by (seed, persona id).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.profilegen.moves import archetype_ids
from mindsimkit.profilegen.rates import NONE, Rates
from mindsimkit.profilegen.rng import choice, rng_for
from mindsimkit.profilegen.schemas import AnchoredRow, Anchor, PersonaRow, Style
from mindsimkit.profilegen.vocab import load_vocabularies, read_data

# Who has no "work or study" domain to be impaired.
NO_WORK_DOMAIN = frozenset({"not_in_labour_force"})


@lru_cache(maxsize=1)
def style_weights() -> dict[str, Any]:
    return read_data("style.yaml")


def profile_id(persona_id: str, seed: int) -> str:
    """Stable profile id: the same persona under the same seed is the same patient."""
    return "p-" + hashlib.sha256(f"{seed}:{persona_id}".encode()).hexdigest()[:12]


def sample_anchor(row: PersonaRow, rates: Rates, seed: int) -> Anchor:
    voc = load_vocabularies()
    d = row.demographics
    rng = rng_for(seed, row.persona.persona_id, "anchor")
    main = choice(rng, rates.main_probs(d.age_band, d.gender))
    secondary = choice(rng, rates.secondary_probs(main, d.age_band, d.gender))
    group = voc.main[main].group
    if group is None:  # the vocabulary gives every main problem a group
        raise ConfigError(f"profilegen/data/problems.yaml: main problem {main!r} has no group")
    weights = dict(voc.impact_given_group[group])
    if d.employment in NO_WORK_DOMAIN:
        weights.pop("work")
    return Anchor(
        main_problem=main,
        secondary_problem=None if secondary == NONE else secondary,
        impact_domain=choice(rng, weights),
    )


def sample_style(row: PersonaRow, seed: int) -> Style:
    return style_for(row.persona.persona_id, seed)


def style_for(key: str, seed: int) -> Style:
    """The conversational style of the patient keyed `key` (a persona id, or a situation id for a
    situation-seeded profile), drawn from its own stream."""
    w = style_weights()
    rng = rng_for(seed, key, "style")
    archetypes = archetype_ids()
    return Style(
        register=choice(rng, w["register"]),
        verbosity=choice(rng, w["verbosity"]),
        frustration_reactivity=choice(rng, w["frustration_reactivity"]),
        archetype=archetypes[int(rng.integers(len(archetypes)))],
    )


def anchor_personas(rows: list[PersonaRow], rates: Rates, seed: int) -> list[AnchoredRow]:
    """Stage 2: anchor and style for every persona row."""
    return [
        AnchoredRow(
            **row.model_dump(),
            profile_id=profile_id(row.persona.persona_id, seed),
            anchor=sample_anchor(row, rates, seed),
            style=sample_style(row, seed),
        )
        for row in rows
    ]

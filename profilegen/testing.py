"""Synthetic `Profile` rows with labels drawn from the shipped vocabularies, for tests and the selection
benchmark (no LLM involved). Attribute shares are skewed by a seeded Dirichlet draw so the population
marginals are uneven, as real ones are; texts are placeholders naming the labels.
"""

from __future__ import annotations

import numpy as np

from mindsimkit.profilegen.moves import archetype_ids
from mindsimkit.profilegen.schemas import (
    AGE_BANDS,
    Anchor,
    BigFive,
    CoreBelief,
    Demographics,
    Formulation,
    Perpetuating,
    Persona,
    Precipitating,
    Predisposing,
    Presenting,
    Profile,
    Protective,
    Provenance,
    Screen,
    Style,
)
from mindsimkit.profilegen.vocab import load_vocabularies


class _Sampler:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.weights: dict[str, np.ndarray] = {}

    def one(self, key: str, values: list[str], skew: float = 1.5) -> str:
        return self.some(key, values, 1, skew)[0]

    def some(self, key: str, values: list[str], k: int, skew: float = 1.5) -> list[str]:
        if key not in self.weights:
            self.weights[key] = self.rng.dirichlet(np.full(len(values), skew))
        idx = self.rng.choice(len(values), size=k, replace=False, p=self.weights[key])
        return [values[i] for i in idx]


def make_profiles(n: int, seed: int = 0, poor_share: float | None = None) -> list[Profile]:
    """`n` schema-valid synthetic profiles (all clean, none selected)."""
    voc = load_vocabularies()
    s = _Sampler(seed)
    maladaptive = [c for c, lab in voc.coping.items() if lab.maladaptive]
    archetypes = archetype_ids()
    out = []
    for i in range(n):
        age_band = s.one("age", list(AGE_BANDS), 4)
        coping = [s.one("maladaptive", maladaptive)] + s.some("coping", list(voc.coping), int(s.rng.integers(0, 3)))
        coping = list(dict.fromkeys(coping))
        qol = (
            s.one("qol", ["poor", "moderate", "good"])
            if poor_share is None
            else ("poor" if s.rng.random() < poor_share else s.one("qol2", ["moderate", "good"]))
        )
        secondary = s.one("secondary", [*voc.secondary, "none"])
        main = s.one("main", list(voc.main), 1.0)
        cluster = s.one("belief", list(voc.core_beliefs))
        out.append(
            Profile(
                profile_id=f"syn-{seed}-{i:06d}",
                persona=Persona(
                    persona_id=f"synthetic-{seed}-{i}",
                    persona=f"Synthetic persona {i}.",
                    sex="Female",
                    age=30,
                    marital_status="never_married",
                    education_level="bachelors",
                    occupation="cashier",
                    source="profilegen.testing",
                ),
                demographics=Demographics(
                    age_band=age_band,
                    gender=s.one("gender", ["man", "woman"], 8),
                    relationship=s.one("rel", ["single", "partnered", "post_relationship"], 3),
                    employment=s.one(
                        "emp", ["employed", "student", "unemployed_seeking_work", "not_in_labour_force"], 2
                    ),
                    living_situation=s.one("living", ["alone", "with_partner_or_family", "with_others", "unstable"], 1),
                    big_five=BigFive(
                        **{
                            t: s.one(t, ["low", "mid", "high"], 5)
                            for t in ("openness", "conscientiousness", "extraversion", "agreeableness", "neuroticism")
                        }
                    ),
                ),
                anchor=Anchor(
                    main_problem=main,
                    secondary_problem=None if secondary in ("none", main) else secondary,
                    impact_domain=s.one("impact", list(voc.impact_domains)),
                ),
                formulation=Formulation(
                    presenting=Presenting(summary=f"Summary about {main}.", goal="Feel steadier."),
                    predisposing=[
                        Predisposing(label=x, history=f"History of {x}.")
                        for x in s.some("pre", list(voc.predisposing), int(s.rng.integers(1, 3)))
                    ],
                    precipitating=Precipitating(
                        label=s.one("prec", list(voc.precipitating)),
                        when="two months ago",
                        what_changed="Things changed.",
                    ),
                    protective=[
                        Protective(label=x, detail=f"Has {x}.")
                        for x in s.some("prot", list(voc.protective), int(s.rng.integers(1, 4)))
                    ],
                    perpetuating=[
                        Perpetuating(
                            label=c, situation=f"When stressed: {c}.", maladaptive=bool(voc.coping[c].maladaptive)
                        )
                        for c in coping
                    ],
                    core_belief=CoreBelief(
                        cluster=cluster,
                        arm=voc.core_beliefs[cluster].arm or "",
                        history="A long story.",
                        belief="I can't do this.",
                    ),
                    quality_of_life=qol,
                ),
                style=Style(
                    register=s.one("reg", ["formal", "plain", "casual"]),
                    verbosity=s.one("verb", ["low", "medium"]),
                    frustration_reactivity=s.one("fr", ["low", "medium", "high"]),
                    archetype=s.one("arch", archetypes),
                ),
                goal="Feel steadier.",
                case_summary=f"Case summary {i}.",
                writer_brief=f"Writer brief {i}.",
                screen=Screen(verdict="clean"),
                provenance=Provenance(seed=seed, toolkit_version="test"),
            )
        )
    return out

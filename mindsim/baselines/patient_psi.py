"""The Patient-Psi patient engine (Wang et al., 2024, EMNLP; as a baseline: MindEval2/MindSim §4.3 and App. E,
PatientAct §4.2 Table 2; docs/baselines.md): a prompted patient whose system prompt carries a Beck cognitive
conceptualisation (CCD) and one of six conversational styles.

The cognitive model is derived from our 5P profile (`cognitive_model`):
- deterministic where our fields carry it: relevant history (predisposing histories, the core belief's own
  history, the precipitating event), the core-belief category (our cluster → Patient-Psi category,
  `mindsim/data/baselines/patient_psi.yaml`), coping strategies (our perpetuating behaviours and their
  situations); per session, the situation, automatic thoughts and behaviours come from the session's scenario
  (Patient-Psi gives one patient several such situation triads over the same beliefs; our scenarios are ours);
- one structured call (`baseline_mapper`) where they do not: a first name, the sub-beliefs among the
  cluster's candidates, intermediate beliefs (and those active when low), the emotions among Patient-Psi's nine.
That call is the per-patient preparation, checkpointed once. The style is drawn uniformly per (patient, seed)
from `simulation.baselines.psi_styles` and recorded (`SessionRecord.baseline.style`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from mindsimkit.mindcore.budget import RoleSchema
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindsim.baselines import common
from mindsimkit.mindsim.engine_names import recipe_runs
from mindsimkit.mindsim.patient_engines.base import PatientEngine
from mindsimkit.profilegen.situation_schemas import theme_key

NAME = "patient_psi"
SYSTEM_TEMPLATE = "baselines/patient_psi_system.jinja2"
MAP_TEMPLATE = "baselines/patient_psi_map.jinja2"
Line = Annotated[str, Field(min_length=3, max_length=160)]


def data() -> dict[str, Any]:
    d = common.load_data("patient_psi")
    cats = d["categories"]
    for cluster, spec in d["clusters"].items():
        if spec["category"] not in cats:
            raise ConfigError(
                f"mindsim/data/baselines/patient_psi.yaml: cluster '{cluster}' names unknown category "
                f"'{spec['category']}' (known: {', '.join(cats)})"
            )
        stray = set(spec.get("candidates") or []) - set(cats[spec["category"]])
        if stray:
            raise ConfigError(
                f"mindsim/data/baselines/patient_psi.yaml: cluster '{cluster}' lists sub-beliefs not in "
                f"category '{spec['category']}': {sorted(stray)}"
            )
    return d


def category(cluster: str) -> str:
    """Patient-Psi's core-belief category for one of our seven clusters."""
    clusters = data()["clusters"]
    if cluster not in clusters:
        raise ConfigError(
            f"core-belief cluster '{cluster}' has no Patient-Psi category in "
            f"mindsim/data/baselines/patient_psi.yaml (known: {', '.join(clusters)})"
        )
    return str(clusters[cluster]["category"])


def candidates(cluster: str) -> list[str]:
    """The sub-beliefs the mapper may pick for a cluster: its own list, or its whole category's."""
    if cluster not in data()["clusters"]:
        category(cluster)  # raises naming the fix
    spec = data()["clusters"][cluster]
    return list(spec.get("candidates") or data()["categories"][spec["category"]])


def _once(values: list[str]) -> list[str]:
    # A small model repeats an option; the repeat says nothing, so it is dropped rather than re-asked.
    return list(dict.fromkeys(values))


def map_model(options: list[str]) -> type[BaseModel]:
    """What the mapper writes; the sub-beliefs and emotions are enums, so its answer cannot leave the lists."""
    # The option lists come from data at run time, so these are values for pydantic, not types mypy can follow.
    beliefs: Any = list[Literal[tuple(options)]]  # type: ignore[misc]
    emotions: Any = list[Literal[tuple(data()["emotions"])]]  # type: ignore[misc]
    return create_model(
        "PatientPsiMap",
        __config__=ConfigDict(extra="forbid"),
        __validators__={"once": field_validator("core_beliefs", "emotions")(_once)},
        name=(
            str,
            Field(
                min_length=1, max_length=30, description="The client's first name (from the persona if it gives one)"
            ),
        ),
        core_beliefs=(beliefs, Field(min_length=1, max_length=2, description="1-2 core beliefs that fit the case")),
        intermediate_beliefs=(
            list[Line],
            Field(min_length=1, max_length=3, description="Rules, attitudes and assumptions ('If I ..., then ...')"),
        ),
        intermediate_beliefs_low=(
            list[Line],
            Field(
                min_length=1, max_length=2, description="The rules that take over when the client is at their lowest"
            ),
        ),
        emotions=(
            emotions,
            Field(min_length=1, max_length=3, description="1-3 emotions the client's hard moments bring"),
        ),
    )


def widest_map_schema() -> dict[str, Any]:
    """The mapper's schema with the longest candidate list (a whole category), for the budget check."""
    cats = data()["categories"]
    longest = max(cats.values(), key=lambda subs: sum(len(s) for s in subs))
    return map_model(list(longest)).model_json_schema()


def _coping(profile: Any) -> list[str]:
    from mindsimkit.profilegen.vocab import load_vocabularies

    coping = load_vocabularies().coping
    out = []
    for p in profile.formulation.perpetuating:
        label = coping[p.label].description if p.label in coping else p.label.replace("_", " ")
        out.append(f"{label.rstrip('.')} ({p.situation.rstrip('.')})")
    return out


def cluster_of(profile: Any) -> str:
    """The key the cluster mapping is read by: the 5P core-belief cluster, or, for a situation-seeded profile, its
    sampled core-belief theme (unlovable, worthless, helpless: Patient-Psi's own three categories)."""
    if profile.situation_profile is not None:
        return theme_key(profile.situation_profile)
    return str(profile.formulation.core_belief.cluster)


def situation_fields(record: Any) -> dict[str, Any]:
    """The same fields from a situation-seeded profile: its predisposing histories and conditions and what set the
    problem off (history), and its observable coping patterns."""
    pf, psych = record.profile.problem_formulation, record.profile.psychological_formulation
    history = [*pf.predisposing_factors.psychological, *pf.predisposing_factors.social]
    history.append(
        "What set off the current difficulties: " + "; ".join(x.rstrip(".") for x in pf.precipitating_factors)
    )
    return {
        "history": " ".join(h.strip() for h in history if h.strip()),
        "category": category(theme_key(record)),
        "coping_strategies": [c.rstrip(".") for c in psych.coping_patterns],
    }


def fixed_fields(profile: Any) -> dict[str, Any]:
    """The cognitive-model fields our profile carries, rendered without a model."""
    if profile.situation_profile is not None:
        return situation_fields(profile.situation_profile)
    f = profile.formulation
    history = [p.history for p in f.predisposing] + [f.core_belief.history]
    history.append(f"What set off the current difficulties ({f.precipitating.when}): {f.precipitating.what_changed}")
    return {
        "history": " ".join(h.strip() for h in history if h.strip()),
        "category": category(f.core_belief.cluster),
        "coping_strategies": _coping(profile),
    }


def map_messages(profile: Any, fixed: dict[str, Any]) -> list[dict[str, str]]:
    cluster = cluster_of(profile)
    return [
        {
            "role": "user",
            "content": render(
                MAP_TEMPLATE,
                persona=common.who(profile),
                writer_brief=profile.writer_brief,
                history=fixed["history"],
                category=fixed["category"],
                candidates=candidates(cluster),
                coping=fixed["coping_strategies"],
                emotions=data()["emotions"],
            ),
        }
    ]


async def cognitive_model(profile: Any, seed: int, client: Any, config: Any) -> common.BaselinePreparation:
    """The patient's Patient-Psi cognitive model: our fields, the mapper's, and the drawn style."""
    fixed = fixed_fields(profile)
    options = candidates(cluster_of(profile))
    mapped = await common.map_fields(client, map_messages(profile, fixed), map_model(options), config)
    style = common.draw(profile.profile_id, seed, "patient_psi_style", config.baselines.psi_styles)
    filled = mapped.model_dump()
    return common.BaselinePreparation(
        engine=NAME,
        patient_id=profile.profile_id,
        seed=seed,
        profile={**fixed, **filled},
        filled=sorted(filled),
        style=style,
        mapper=client.describe(),
        prompt={MAP_TEMPLATE: template_hash(MAP_TEMPLATE)},
    )


def system_prompt(prep: common.BaselinePreparation, talk: Any) -> str:
    """The session's system prompt: the cognitive model, the scenario's situation triad, the style."""
    scenario = talk.inp.scenario
    if prep.style not in data()["styles"]:
        raise ConfigError(
            f"Patient-Psi preparation of {prep.patient_id}: style '{prep.style}' is not one of "
            f"{', '.join(data()['styles'])}; use a new --out folder"
        )
    return render(
        SYSTEM_TEMPLATE,
        cm=prep.profile,
        style=prep.style,
        situation=scenario.event,
        automatic_thoughts=scenario.automatic_thoughts,
        behaviours=scenario.behaviors,
        **common.session_context(talk),
    )


class PatientPsiEngine(common.PromptedBaselineEngine, PatientEngine):
    name = NAME
    description = "Patient-Psi (Wang et al. 2024): a CBT cognitive model and one of six conversational styles"
    what = "cognitive model"
    system_template, map_template = SYSTEM_TEMPLATE, MAP_TEMPLATE
    session_client = True  # a CBT client in a therapy session
    reads_situations = True  # PatientAct's Table 2 runs it on the situation-seeded profiles (`situation_fields`)

    def system_prompt(self, prep: Any, talk: Any) -> str:
        return system_prompt(prep, talk)

    def mapper_messages(self, profile: Any) -> list[dict[str, str]]:
        return map_messages(profile, fixed_fields(profile))

    def fixed_fields(self, profile: Any) -> dict[str, Any]:
        return fixed_fields(profile)

    def sizing_style(self) -> str | None:
        return str(max(data()["styles"], key=len))

    def build(self, profile: Any, seed: int, client: Any, config: Any) -> Any:
        return cognitive_model(profile, seed, client, config)

    def record_extra(self, prep: Any) -> dict[str, Any]:
        return {"style": prep.style}

    def check_profiles(self, profiles: Any) -> None:
        from mindsimkit.mindcore.errors import InputError

        known = data()["clusters"]
        bad = sorted({cluster_of(p) for p in profiles} - set(known))
        if bad:
            raise InputError(
                f"profiles: core-belief cluster(s) {', '.join(bad)} have no Patient-Psi category; add them "
                "to mindsim/data/baselines/patient_psi.yaml `clusters` or drop patient_psi from "
                "simulation.patient_engine"
            )

    def role_schemas(self) -> list[RoleSchema]:
        return [
            RoleSchema(
                common.MAPPER_ROLE,
                "patient_psi:PatientPsiMap",
                widest_map_schema,
                common.SIMULATE,
                budget=common.mapper_budget,
                active=lambda recipe: recipe_runs(recipe, NAME),
            )
        ]

    def card_section(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """How many of its patients got each conversational style (one draw per patient and seed)."""
        from collections import Counter

        states = common.card_rows(rows, NAME)
        per_patient = {(r["preparation"]["patient_id"], r["preparation"]["seed"]): r["style"] for r in states}
        styles = Counter(per_patient.values())
        return {
            "record_fields": True,
            "sessions_note": "; Patient-Psi sessions carry their cognitive model and drawn style (`baseline`)",
            "attribution": "Sessions played by the Patient-Psi engine follow the Patient-Psi design (Wang et al. 2024): "
            "a CBT cognitive conceptualisation and one of six conversational styles, in our own prompt.",
            "patients": len(per_patient),
            "style_share": [
                (s, n, n / len(per_patient)) for s, n in sorted(styles.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
        }


ENGINE = PatientPsiEngine()

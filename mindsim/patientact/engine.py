"""The PatientAct patient engine (PatientAct §3.3; docs/patientact.md) behind the `PatientEngine` interface,
and its ablation arms (§4, Table 4) as registered variants `patientact:no_tg`, `patientact:no_dm`,
`patientact:no_pipe` (`mindsim/data/patientact/variants.yaml`).

- Preparation: the profile decomposition (`decompose`), made once per (patient, seed) and checkpointed under
  `sessions/decompositions/` (`DecompositionStore`); every counsellor and every arm meets the same one, so an
  arm may not change a setting the decomposition reads (`PREPARATION_SETTINGS`). A resumed arc reads it back
  from its first checkpointed session.
- Carried state: trust, from one session's end into the next session's start (`trust.session_start`).
- Roles: `patient_appraiser` (the four structured steps), `profile_decomposer` and `patient_matcher` (the LLM
  tag matcher, `retrieval: llm`), stored as `appraiser`, `decomposer` and `matcher` in `SessionRecord.engines`;
  each falls back to the patient's client when an arc has none (the matcher to the appraiser).
- Record fields: `SessionRecord.patientact` (`PatientActSession`) and, per turn, `PatientTurn.patientact`
  (written by the participant), names kept so older run folders keep reading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from mindsimkit.mindsim.engine_names import recipe_runs
from mindsimkit.mindsim.patientact import NAME
from mindsimkit.mindsim.patient_engines.base import PatientEngine, TalkStart

# `simulation.patientact` keys the decomposition reads (`session.decompose_settings`).
PREPARATION_SETTINGS = frozenset(
    {
        "psych_formulation",
        "formulation_max_tokens",
        "decomposition_max_tokens",
        "decomposition_chunk",
        "step_attempts",
        "psych_screen",
        "psych_screen_max_tokens",
    }
)
# Appended to the card's description of the sessions config when the run holds PatientAct sessions.
SESSIONS_NOTE = (
    "; `patient_engine` names the engine that played the patient, and PatientAct sessions carry its state "
    "(`patientact` per session, `turns[].patientact` per patient turn; see Patient engine fields below)"
)
ATTRIBUTION = (
    "Sessions played by the PatientAct engine follow the PatientAct design (trust-gated "
    "memory, reaction → behaviour → resistance steps, attachment-shaped trust updates)."
)


class PatientActEngine(PatientEngine):
    name = NAME
    description = "PatientAct: trust-gated memory and a reaction → behaviour → resistance pipeline"
    roles = {"patient_appraiser": "appraiser", "profile_decomposer": "decomposer", "patient_matcher": "matcher"}
    settings_section = "patientact"
    preparation_settings = PREPARATION_SETTINGS
    prepares = True
    session_client = True
    reads_situations = True

    def participant(self, talk: TalkStart) -> Any:
        from mindsimkit.mindsim.patientact.session import patientact_patient

        if talk.arc.preparation is None or talk.inp.carried is None:
            raise ValueError("a PatientAct session needs its decomposition and starting trust")
        return patientact_patient(talk)

    def record_fields(self, talk: Any) -> dict[str, Any]:
        from mindsimkit.mindsim.records import PatientActSession

        decomposition, patient = talk.arc.preparation, talk.patient
        return {
            "patientact": PatientActSession(
                attachment=decomposition.psych.attachment,
                theme=decomposition.psych.theme,
                trust_start=talk.inp.carried,
                trust_end=patient.trust,
                switches=talk.config.patientact.model_dump(mode="json"),
                appraiser_system_prompt=patient.appraiser_system,
                decomposition=decomposition.model_dump(mode="json"),
            )
        }

    def prompt_names(self) -> list[str]:
        from mindsimkit.mindsim.patientact.session import (
            FULL_PROFILE_TEMPLATE,
            PA_APPRAISER_TEMPLATE,
            PA_MATCHER_TEMPLATE,
            PA_PATIENT_TEMPLATE,
            PA_SIGNAL_TEMPLATE,
            PA_STEP_TEMPLATE,
        )

        return [
            PA_PATIENT_TEMPLATE,
            PA_APPRAISER_TEMPLATE,
            PA_STEP_TEMPLATE,
            PA_SIGNAL_TEMPLATE,
            PA_MATCHER_TEMPLATE,
            FULL_PROFILE_TEMPLATE,
        ]

    def carry(self, plan: Any, previous: Any, config: Any) -> float:
        from mindsimkit.mindsim.patientact.data import preset_of
        from mindsimkit.mindsim.patientact.trust import session_start

        carried = previous.patientact.trust_end if previous is not None and previous.patientact is not None else None
        pa = config.patientact
        return session_start(
            plan,
            previous.schedule if previous else None,
            carried,
            pa.trust_drift_per_day,
            concealment_offset=pa.concealment_offset,
            carry=pa.carry_trust,
            preset=preset_of(config),
        )

    def preparation_store(self, out: Any) -> Any:
        from mindsimkit.mindsim.patientact.decompose import DecompositionStore

        return DecompositionStore(Path(out))

    async def prepare(self, profile: Any, seed: int, roles: Any, config: Any, store: Any = None) -> Any:
        from mindsimkit.mindsim.patientact.decompose import decompose, decomposition_record
        from mindsimkit.mindsim.patientact.session import decompose_settings

        client = roles.get("decomposer")
        if store is None:
            return await decompose(client, profile, seed, **decompose_settings(config))
        return await decomposition_record(
            profile, client, seed, load=store.load, save=store.save, **decompose_settings(config)
        )

    def stored_preparation(self, record: Any) -> Any:
        from mindsimkit.mindsim.patientact.decompose import Decomposition

        return None if record.patientact is None else Decomposition.model_validate(record.patientact.decomposition)

    def check_profiles(self, profiles: Sequence[Any]) -> None:
        from mindsimkit.mindsim.patientact.seed import check_profiles

        check_profiles(list(profiles))

    def role_schemas(self) -> list[Any]:
        from mindsimkit.mindsim.patientact.budgets import entries

        return entries()

    def prompt_estimates(self) -> dict[str, Any]:
        from mindsimkit.mindsim.patientact.prompt_sizes import ESTIMATES

        return dict(ESTIMATES)

    def message_prompt(self, inp: Any, sz: Any, settings: Any = None) -> Any:
        from mindsimkit.mindsim.patientact.prompt_sizes import message_prompt

        return message_prompt(inp, sz, settings)

    def card_section(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Share of its patient turns by behaviour and mean trust at both ends of its sessions."""
        from collections import Counter

        states = [t["patientact"] for r in rows for t in r.get("turns") or [] if t.get("patientact")]
        behaviours = Counter(st["behaviour"] for st in states if st.get("behaviour"))
        decided = sum(behaviours.values())
        ends = [r["patientact"] for r in rows if r.get("patientact")]

        def mean(key: str) -> float | None:
            return sum(e[key] for e in ends) / len(ends) if ends else None

        return {
            "record_fields": True,
            "sessions_note": SESSIONS_NOTE,
            "attribution": ATTRIBUTION,
            "patientact_turns": len(states),
            "turns_with_behaviour": decided,
            "behaviour_share": [
                (b, n, n / decided) for b, n in sorted(behaviours.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "trust_start": mean("trust_start"),
            "trust_end": mean("trust_end"),
            "trust_sessions": len(ends),
        }


def runs_patientact(recipe: Any) -> bool:
    """Whether a recipe's raw `simulation` section runs PatientAct or one of its arms."""
    return recipe_runs(recipe, NAME)


ENGINE = PatientActEngine()

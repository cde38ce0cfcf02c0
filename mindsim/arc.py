"""The values a patient's arc and its sessions are run from, the same for every patient engine (MindEval2/MindSim §4.2
"Multi session"): `Roles` (the role clients), `Arc` (everything fixed for one patient × counsellor × patient
engine: profile, vocabularies, roles, config, counsellor, seed, engine variant and the engine's per-patient
preparation), `SessionInput` (what changes from one session to the next) and `Talk` (a session whose
conversation is over, waiting for its memory rewrite and record).

The session loop (`mindsim.session`) takes these instead of long parameter lists, so an engine or a new
per-arc setting is one field here, not a parameter threaded through every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.records import plain_exchange, session_id

if TYPE_CHECKING:  # pragma: no cover - typing only
    from mindsimkit.mindsim.agenda import Agenda
    from mindsimkit.mindsim.patient import Counsellor
    from mindsimkit.mindsim.patient_engines import Participant, Variant
    from mindsimkit.mindsim.prompting import RejectedMessage
    from mindsimkit.mindsim.scenario import Scenario
    from mindsimkit.mindsim.schedule import SessionPlan
    from mindsimkit.profilegen.moves import Vocabulary
    from mindsimkit.profilegen.schemas import Profile


@dataclass
class Roles:
    """The role clients one arc talks to. `extra` holds the patient engines' own roles under the keys they
    declare (`PatientEngine.roles`, e.g. PatientAct's `appraiser` and `decomposer`); an engine falls back to
    the patient's client for a role left out."""

    patient: Any
    counsellor: Any
    scenario_writer: Any
    memory_compactor: Any
    extra: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        """An engine's own role, or the patient's client when the arc has none under `key`."""
        return self.extra.get(key) or self.patient

    def for_session(self, sid: str) -> "Roles":
        """Every client bound to one session id, so a multi-server engine keeps the session on one server
        (its prefix cache then serves each turn's growing prompt). Clients without affinity stay as given."""

        def bind(client: Any) -> Any:
            return client.with_affinity(sid) if hasattr(client, "with_affinity") else client

        return Roles(
            patient=bind(self.patient),
            counsellor=bind(self.counsellor),
            scenario_writer=bind(self.scenario_writer),
            memory_compactor=bind(self.memory_compactor),
            extra={k: bind(c) for k, c in self.extra.items()},
        )

    def for_trial(self, trial: int) -> "Roles":
        """The roles of repeated trial `trial`: the patient's (its engine's own roles included) and the
        counsellor's sampling seeds moved on (`RoleClient.for_trial`); the scenario writer and the memory
        compactor are the harness and keep theirs (their later calls differ anyway, their inputs do)."""
        if trial == 0:
            return self

        def moved(client: Any) -> Any:
            return client.for_trial(trial) if hasattr(client, "for_trial") else client

        return Roles(
            patient=moved(self.patient),
            counsellor=moved(self.counsellor),
            scenario_writer=self.scenario_writer,
            memory_compactor=self.memory_compactor,
            extra={k: moved(c) for k, c in self.extra.items()},
        )

    def describe(self) -> dict[str, dict[str, Any]]:
        out = {
            "patient": self.patient.describe(),
            "counsellor": self.counsellor.describe(),
            "scenario_writer": self.scenario_writer.describe(),
            "memory_compactor": self.memory_compactor.describe(),
        }
        for name, client in self.extra.items():
            if client is not None:
                out[name] = client.describe()
        return out


@dataclass(frozen=True)
class Arc:
    """One patient's sessions with one counsellor under one patient engine (or variant)."""

    profile: "Profile"
    vocab: "Vocabulary"
    roles: Roles
    config: SimulationConfig
    counsellor: str
    seed: int
    engine: "Variant"
    # The engine's per-patient preparation (PatientAct: the decomposition); None until made or when it has none.
    preparation: Any = None
    # 0-based repeated trial (`simulation.trials`); its roles are already `Roles.for_trial(trial)`.
    trial: int = 0

    @classmethod
    def of(
        cls,
        profile: "Profile",
        vocab: "Vocabulary",
        roles: Roles,
        config: SimulationConfig,
        *,
        counsellor: str,
        seed: int,
        engine: str | None = None,
        preparation: Any = None,
    ) -> "Arc":
        """An arc with its engine looked up by name. `engine` defaults to the recipe's one engine (a recipe
        listing several must name it per arc)."""
        from mindsimkit.mindsim.patient_engines import variant

        if engine is None:
            listed = config.patient_engines
            if len(listed) != 1:
                raise ValueError(f"the recipe runs patient engines {listed}: name the arc's engine (Arc.of engine=)")
            engine = listed[0]
        return cls(profile, vocab, roles, config, counsellor, seed, variant(engine), preparation)

    def session_id(self, index: int, rerun: str | None = None) -> str:
        """The session's id; `rerun` names an ablation that reruns it (`SessionInput.rerun`), so a rerun and
        its twin never share an id."""
        return session_id(
            self.profile.profile_id, self.counsellor, index, self.seed, self.engine.name, self.trial, rerun
        )

    @property
    def record_trial(self) -> int | None:
        """The trial as records carry it: None (left out) when the run has one trial."""
        return self.trial if self.config.trials > 1 else None

    def with_preparation(self, preparation: Any) -> "Arc":
        return replace(self, preparation=preparation)


@dataclass(frozen=True)
class SessionInput:
    """What one session of an arc starts from."""

    plan: "SessionPlan"
    scenario: "Scenario"
    memory: list[str]
    rejected_openings: Sequence["RejectedMessage"] = ()
    # True when the scenario is the patient's first, written once and met by every counsellor.
    scenario_shared: bool = False
    # The engine's state carried from the previous session (`PatientEngine.carry`; PatientAct: starting trust).
    carried: Any = None
    # The memory section of the counsellor's system prompt when it is not `memory` (the memory ablation of
    # MindEval2 App. G: [] — no earlier sessions, as in session 1 — while the patient keeps `memory`).
    counsellor_memory: list[str] | None = None
    # The ablation a rerun belongs to (e.g. `no_counsellor_memory`): part of its session id and its record.
    rerun: str | None = None

    @property
    def counsellor_sees(self) -> list[str]:
        """The memory the counsellor's system prompt shows."""
        return self.memory if self.counsellor_memory is None else self.counsellor_memory


@dataclass
class Talk:
    """A session whose conversation is over; its memory rewrite and record are still to come. Split from the
    record so that the arc can write the next scenario, which reads the talk but not the memory, while the
    memory is rewritten. `arc` has its roles bound to this session; `config` has the variant's settings."""

    sid: str
    arc: Arc
    inp: SessionInput
    config: SimulationConfig
    patient: "Participant"
    counsellor: "Counsellor"
    agenda: "Agenda"
    turns: list[Any]
    ended_by: str
    p_prompt: str
    c_prompt: str

    @property
    def scenario(self) -> "Scenario":
        return self.inp.scenario

    def transcript(self) -> list[dict[str, str]]:
        """The plain exchange, as `SessionRecord.transcript` gives it once the record is built."""
        return plain_exchange(self.counsellor.history)

    @property
    def open_items(self) -> list[str]:
        return [i.text for i in self.agenda.open_items]

"""What the two baseline patient engines share (MindEval2/MindSim §4.3 and App. E "Baselines"; docs/baselines.md):
the per-patient preparation and its checkpoint, the one structured mapper call, and the prompted patient.

The paper gives each baseline the same patients "through their own prompt templates": a template's fields
are filled from our profile wherever it carries them, and the rest by one model call conditioned on the
profile. Here that call is the `baseline_mapper` role (bound to the patient's model unless the recipe binds
it, `mindcore.config.ROLE_FALLBACKS`), made once per (patient, seed, baseline) and checkpointed under
`sessions/baselines/<engine>/`, so every counsellor and every rerun meets the same baseline profile.

The prompted patient is what both baselines are: a fixed system prompt and the conversation, one reply per
counsellor message, re-asked (bounded, counted) while it is not speech like every engine's. It never ends a
session early and has no agenda tools: sessions run to the turn cap.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore.io import CheckpointDir
from mindsimkit.mindcore import yamlio
from mindsimkit.mindsim.patient import TokenCount, speech_reply
from mindsimkit.mindsim.prompting import RejectedMessage
from mindsimkit.mindsim.records import PatientTurn

MAPPER_ROLE = "baseline_mapper"
MAPPER_KEY = "mapper"  # its key in Roles.extra and SessionRecord.engines
SIMULATE = frozenset({"simulate"})


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


@lru_cache(maxsize=None)
def load_data(name: str) -> dict[str, Any]:
    """A baseline's data file (`mindsim/data/baselines/<name>.yaml`)."""
    path = resources.files("mindsimkit.mindsim") / "data" / "baselines" / f"{name}.yaml"
    try:
        data = yamlio.safe_load(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same fix
        raise ConfigError(f"mindsim/data/baselines/{name}.yaml is unreadable: {exc}") from exc
    if not isinstance(data, dict) or not data.get("source"):
        raise ConfigError(f"mindsim/data/baselines/{name}.yaml must be a mapping with a `source`")
    return data


def who(profile: Any) -> str:
    """Who the client is, for a baseline's mapper: the persona record, or, for a situation-seeded profile (which has
    none), its generated demographics and the clinical situation it was seeded with."""
    if profile.situation_profile is None:
        return str(profile.persona.persona)
    record = profile.situation_profile
    d, (low, high) = record.profile.demographics, record.scaffold.age_range
    return (
        f"{d.name}, {d.gender}, {d.age_group.lower()} ({low}-{high}), {d.occupation}, {d.marital_status}; "
        f"{d.cultural_background}. {record.situation}"
    )


def draw(profile_id: str, seed: int, what: str, options: list[str]) -> str:
    """One uniform, seeded draw per patient: the same (patient, seed) always gets the same option, whatever
    else the run holds (a hash, not a shared random stream)."""
    digest = hashlib.sha256(f"{profile_id}|{seed}|{what}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).choice(list(options))


class BaselinePreparation(_Row):
    """A patient's baseline profile for one baseline and run seed: checkpointed once, shared by every counsellor."""

    engine: str = Field(description="The baseline engine")
    patient_id: str = Field(description="Profile id")
    seed: int = Field(description="Run seed")
    profile: dict[str, Any] = Field(description="The baseline's profile, every field its prompt is filled from")
    filled: list[str] = Field(description="Fields the mapper wrote; the others are rendered from our profile")
    style: str | None = Field(None, description="Patient-Psi: the conversational style drawn for this patient")
    mapper: dict[str, Any] = Field(default_factory=dict, description="The mapper's engine, model and sampling")
    prompt: dict[str, str] = Field(default_factory=dict, description="Prompt template → hash")


def preparation_key(patient_id: str, seed: int) -> str:
    return f"{patient_id}-{seed}"


class BaselineStore:
    """Each patient's baseline profile under `<out>/sessions/baselines/<engine>/<patient_id>-<seed>.json`,
    written once (the first finished copy wins), like first scenarios and PatientAct's decompositions."""

    def __init__(self, out_dir: str | Path, engine: str):
        self.engine = engine
        self.dir = CheckpointDir(Path(out_dir) / "sessions" / "baselines" / engine)

    def load(self, key: str) -> BaselinePreparation | None:
        if not self.dir.has(key):
            return None
        try:
            prep = BaselinePreparation.model_validate(self.dir.read(key))
        except (ValidationError, ValueError) as exc:
            raise InputError(
                f"checkpoint {self.dir.path / key}.json is not a {self.engine} baseline profile "
                f"({exc.__class__.__name__}); use a new --out folder (arcs already run used the stored one)"
            ) from exc
        if prep.engine != self.engine:
            raise InputError(
                f"checkpoint {self.dir.path / key}.json belongs to engine '{prep.engine}', not "
                f"'{self.engine}'; use a new --out folder"
            )
        return prep

    def save(self, record: BaselinePreparation) -> BaselinePreparation:
        stored, won = self.dir.first_copy(
            preparation_key(record.patient_id, record.seed), record.model_dump(mode="json")
        )
        return record if won else BaselinePreparation.model_validate(stored)

    @property
    def duplicates(self) -> int:
        return self.dir.duplicates


async def prepared(
    profile: Any, seed: int, store: BaselineStore | None, make: Callable[[], Any]
) -> BaselinePreparation:
    """The stored preparation, or `await make()` saved to `store` (the first finished copy wins)."""
    if store is not None:
        done = store.load(preparation_key(profile.profile_id, seed))
        if done is not None:
            return done
    prep = await make()
    return store.save(prep) if store is not None else prep


def mapper_budget(recipe: Any) -> Any:
    """`simulation.baselines.mapper_max_tokens` as the budget of the mapper call (read from the raw section:
    budgets are fitted before the section is validated)."""
    from mindsimkit.mindcore.budget import StageBudget
    from mindsimkit.mindsim.config import BaselinesConfig

    section = (getattr(recipe, "simulation", None) or {}).get("baselines") or {}
    explicit = "mapper_max_tokens" in section
    value = section["mapper_max_tokens"] if explicit else BaselinesConfig.model_fields["mapper_max_tokens"].default
    return StageBudget(value, "simulation.baselines.mapper_max_tokens", explicit)


async def map_fields(client: Any, messages: list[dict[str, str]], model: type[BaseModel], config: Any) -> BaseModel:
    """The one structured mapper call (re-asked by RoleClient while it does not fit; raises when it never does,
    and the patient's arcs of this baseline fail, counted, while other engines' arcs go on)."""
    b = config.baselines
    sampling = {"max_tokens": b.mapper_max_tokens} if b.mapper_max_tokens else {}
    answer: BaseModel = await client.structured(messages, model, max_attempts=b.mapper_attempts, **sampling)
    return answer


@dataclass
class PromptedPatient:
    """A baseline patient in one session: one system prompt, fixed for the session, and the exchange."""

    client: Any
    config: Any
    history: list[dict[str, Any]]
    tokens: TokenCount = field(default_factory=TokenCount)

    def open(self, opening_message: str, rejected_openings: Sequence[RejectedMessage] = ()) -> PatientTurn:
        self.history.append({"role": "assistant", "content": opening_message})
        return PatientTurn.scripted_opening(opening_message, rejected_openings)

    async def turn(self, index: int, counsellor_text: str) -> PatientTurn:
        self.history.append({"role": "user", "content": counsellor_text})
        said = await speech_reply(
            self.client,
            self.history,
            lambda note: [*self.history, {"role": "user", "content": f"[harness note] {note}"}],
            config=self.config,
            tokens=self.tokens,
        )
        self.history.append({"role": "assistant", "content": said.text})
        # Neither baseline has a way to leave: its sessions run to the turn cap.
        return PatientTurn.spoken(index, said)


def session_context(talk: Any) -> dict[str, Any]:
    """What of the harness's session both baselines see: the scenario's situation (every engine's session
    opens with the scenario's opening message, so the patient must know what it came in about), the time since
    the last session and the running memory (empty in a first session). Agenda checkpoints, the emotion knob
    and concealment are MindSim's and not shown."""
    from mindsimkit.mindsim.memory import format_log

    inp = talk.inp
    scenario = inp.scenario
    return {
        "today": scenario.event,
        "opening": scenario.opening_message,
        "time_context": inp.plan.time_context,
        "memory_text": format_log(inp.memory) if inp.memory else "",
    }


def card_rows(rows: list[dict[str, Any]], engine: str) -> list[dict[str, Any]]:
    return [r["baseline"] for r in rows if r.get("baseline") and r["baseline"].get("engine") == engine]


class PromptedBaselineEngine:
    """What both baselines' engines share: a prompted patient built from the per-patient preparation the
    mapper made once (checkpointed under `sessions/baselines/<engine>/`), stored in the record's `baseline` field.
    A subclass (also a `PatientEngine`) sets `name`, `what`, `system_template`, `map_template` and gives
    `system_prompt(prep, talk)` and `build(profile, seed, client, config)`."""

    name: ClassVar[str]
    description: ClassVar[str]
    what: str
    system_template: str
    map_template: str
    # Both call the one mapper role once per patient, before their sessions.
    roles: ClassVar[Mapping[str, str]] = MappingProxyType({MAPPER_ROLE: MAPPER_KEY})
    prepares: ClassVar[bool] = True

    def system_prompt(self, prep: Any, talk: Any) -> str:
        raise NotImplementedError(f"{type(self).__name__} must say how its system prompt is written")

    def build(self, profile: Any, seed: int, client: Any, config: Any) -> Any:
        """The awaitable that makes one patient's preparation."""
        raise NotImplementedError(f"{type(self).__name__} must say how its preparation is made")

    def participant(self, talk: Any) -> Any:
        prep = talk.arc.preparation
        if prep is None or prep.engine != self.name:
            raise ValueError(
                f"a {self.description.split(' (')[0]} session needs the patient's {self.what} (its preparation)"
            )
        return PromptedPatient(
            client=talk.arc.roles.patient,
            config=talk.config,
            history=[{"role": "system", "content": self.system_prompt(prep, talk)}],
        )

    def record_extra(self, prep: Any) -> dict[str, Any]:
        return {}

    def mapper_messages(self, profile: Any) -> list[dict[str, str]]:
        """The mapper's request for `profile` (preflight sizes the largest: `stage_sizes.mapper_prompt`)."""
        raise NotImplementedError

    def sizing_style(self) -> str | None:
        """The conversational style a sized preparation holds (Patient-Psi draws one per patient)."""
        return None

    def message_prompt(self, inp: Any, sz: Any, settings: Any = None) -> Any:
        """The patient's last message request of a session, for `mindsim plan`: the system prompt rendered from a
        preparation whose mapped fields are the mapper schema's largest answer and whose other fields come from the
        estimate's profile, then the whole exchange (the patient's lines as its own)."""
        from types import SimpleNamespace

        from mindsimkit.mindcore.budget import largest_instance
        from mindsimkit.mindsim.stage_sizes import patient_request, session_fixtures, sizing_profile

        fx = session_fixtures(inp, sz)
        profile = sizing_profile(fx)
        (mapping,) = [e for e in self.role_schemas() if e.role == MAPPER_ROLE]  # type: ignore[attr-defined]
        prep = BaselinePreparation(
            engine=self.name,
            patient_id=profile.profile_id,
            seed=0,
            profile={**self.fixed_fields(profile), **largest_instance(mapping.schema_of(inp.recipe))},
            filled=[],
            style=self.sizing_style(),
        )
        # What `session_context` and the engines' system prompts read of a session.
        talk = SimpleNamespace(
            inp=SimpleNamespace(scenario=fx["scenario"], plan=fx["plan"], memory=fx["memory"], carried=None)
        )
        return patient_request(self.system_prompt(prep, talk), fx, sz, f"{self.name}'s system prompt and the exchange")

    def fixed_fields(self, profile: Any) -> dict[str, Any]:
        """The preparation's fields rendered from our profile rather than mapped."""
        raise NotImplementedError

    def record_fields(self, talk: Any) -> dict[str, Any]:
        from mindsimkit.mindsim.records import BaselineSession

        prep = talk.arc.preparation
        return {
            "baseline": BaselineSession(
                engine=self.name,
                **self.record_extra(prep),
                filled=prep.filled,
                preparation=prep.model_dump(mode="json"),
            )
        }

    def prompt_names(self) -> list[str]:
        return [self.system_template, self.map_template]

    def preparation_store(self, out: Any) -> "BaselineStore":
        return BaselineStore(out, self.name)

    async def prepare(self, profile: Any, seed: int, roles: Any, config: Any, store: Any = None) -> Any:
        client = roles.get(MAPPER_KEY)
        return await prepared(profile, seed, store, lambda: self.build(profile, seed, client, config))

    def stored_preparation(self, record: Any) -> Any:
        b = record.baseline
        return None if b is None or b.engine != self.name else BaselinePreparation.model_validate(b.preparation)

"""One session and one patient's arc of sessions (MindEval2/MindSim §4.2 "Multi session", Appendix D).

The session routes messages between the two participants and decides when it ends: it opens with the
scenario's opening message and alternates until the patient sets `end_conversation` (its last words are
still written) or the turn cap is reached; then the running memory is rewritten. The arc runs a patient's
sessions in order against one counsellor and skips sessions already checkpointed, so a rerun resumes.

The patient is played by the MindSim engine (`mindsim.patient`) or the PatientAct engine
(`mindsim.patientact`, docs/patientact.md); the loop, memory and record are the same for both. A PatientAct
arc carries its trust from one session into the next and reuses one decomposition for all its sessions.

The first scenario is the patient's, not the arc's: `first_scenario_record` writes it once per patient
(checkpointed on its own) before any arc starts, and every counsellor's arc opens with it, so counsellors are
compared on the same first session. Each later scenario is written from that arc's own previous session.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from mindsim.agenda import Agenda
from mindsim.config import SimulationConfig
from mindcore.prompts import render
from mindsim.memory import compact_memory, format_log
from mindsim.patient import Counsellor, Patient
from mindsim.patientact.decompose import Decomposition
from mindsim.patientact.session import (
    PA_APPRAISER_TEMPLATE,
    PA_PATIENT_TEMPLATE,
    PA_SIGNAL_TEMPLATE,
    PA_STEP_TEMPLATE,
    patientact_decompose,
    patientact_patient,
)
from mindsim.patientact.trust import session_start
from mindsim.prompting import (
    COUNSELLOR_TEMPLATE,
    PATIENT_TEMPLATE,
    RejectedMessage,
    counsellor_system_prompt,
    patient_system_prompt,
    style_cues,
    template_hashes,
    transcript_text,
)
from mindsim.records import (
    AgendaState,
    MemoryUpdate,
    PatientActSession,
    RejectionCounts,
    ScenarioRecord,
    SessionRecord,
    Tokens,
    plain_exchange,
    scenario_key,
    session_id,
)
from mindsim.scenario import FIRST_TEMPLATE, NEXT_TEMPLATE, Scenario, first_scenario, next_scenario
from mindsim.schedule import Schedule, SessionPlan
from profilegen.moves import Vocabulary
from profilegen.schemas import Profile

MEMORY_TEMPLATE = "memory/compact.jinja2"


@dataclass
class Roles:
    """The role clients one arc talks to."""

    patient: Any
    counsellor: Any
    scenario_writer: Any
    memory_compactor: Any
    # PatientAct only: the reaction/behaviour/resistance/trust steps and the profile decomposition. Unset, both
    # use the patient's client.
    appraiser: Any = None
    decomposer: Any = None

    def for_session(self, sid: str) -> "Roles":
        """Every client bound to one session id, so a multi-server engine keeps the session on one server
        (its prefix cache then serves each turn's growing prompt). Clients without affinity stay as given."""
        def bind(client: Any) -> Any:
            return client.with_affinity(sid) if hasattr(client, "with_affinity") else client

        return Roles(patient=bind(self.patient), counsellor=bind(self.counsellor),
                     scenario_writer=bind(self.scenario_writer), memory_compactor=bind(self.memory_compactor),
                     appraiser=bind(self.appraiser) if self.appraiser is not None else None,
                     decomposer=bind(self.decomposer) if self.decomposer is not None else None)

    def describe(self) -> dict[str, dict[str, Any]]:
        out = {
            "patient": self.patient.describe(),
            "counsellor": self.counsellor.describe(),
            "scenario_writer": self.scenario_writer.describe(),
            "memory_compactor": self.memory_compactor.describe(),
        }
        for name in ("appraiser", "decomposer"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).describe()
        return out


async def run_session(*args: Any, rewrite_memory: bool = True, **kwargs: Any) -> SessionRecord:
    """One whole session: `converse` (same arguments) and then `finish_session`. With
    `patient_engine="patientact"` the patient is PatientAct's (`decomposition` and `trust_start` required);
    everything else — routing, ending, memory, the record — is shared."""
    return await finish_session(await converse(*args, **kwargs), rewrite_memory=rewrite_memory)


@dataclass
class Talk:
    """A session whose conversation is over; its memory rewrite and record are still to come. Split from the
    record so that the arc can write the next scenario, which reads the talk but not the memory, while the
    memory is rewritten."""

    sid: str
    profile: Profile
    vocab: Vocabulary
    plan: SessionPlan
    scenario: Scenario
    memory: list[str]
    roles: "Roles"
    config: SimulationConfig
    counsellor_name: str
    seed: int
    patient: Any
    counsellor: Counsellor
    agenda: Agenda
    turns: list[Any]
    ended_by: str
    p_prompt: str
    c_prompt: str
    prompt_names: list[str]
    scenario_shared: bool
    patient_engine: str
    decomposition: Decomposition | None
    trust_start: float | None

    def transcript(self) -> list[dict[str, str]]:
        """The plain exchange, as `SessionRecord.transcript` gives it once the record is built."""
        return plain_exchange(self.counsellor.history)

    @property
    def open_items(self) -> list[str]:
        return [i.text for i in self.agenda.open_items]


async def converse(
    profile: Profile,
    vocab: Vocabulary,
    plan: SessionPlan,
    scenario: Scenario,
    memory: list[str],
    roles: Roles,
    config: SimulationConfig,
    *,
    counsellor_name: str,
    seed: int,
    rejected_openings: Sequence[RejectedMessage] = (),
    scenario_shared: bool = False,
    patient_engine: str = "mindsim",
    decomposition: Decomposition | None = None,
    trust_start: float | None = None,
) -> Talk:
    """The conversation of one session, from the opening message to the patient's ending or the turn cap."""
    sid = session_id(profile.profile_id, counsellor_name, plan.index, seed, patient_engine)
    roles = roles.for_session(sid)
    agenda = Agenda.from_checkpoints(scenario.checkpoints)
    c_prompt = (counsellor_system_prompt(plan, memory) if config.counsellor_template == COUNSELLOR_TEMPLATE
                else render(config.counsellor_template, time_context=plan.time_context, memory=format_log(memory)))
    if patient_engine == "patientact":
        if decomposition is None or trust_start is None:
            raise ValueError("a PatientAct session needs its decomposition and starting trust")
        patient = patientact_patient(profile, vocab, plan, scenario, agenda, memory, roles, config, decomposition, trust_start)
        p_prompt = patient.history[0]["content"]
        prompt_names = [PA_PATIENT_TEMPLATE, PA_APPRAISER_TEMPLATE, PA_STEP_TEMPLATE, PA_SIGNAL_TEMPLATE]
    elif patient_engine == "mindsim":
        p_prompt = patient_system_prompt(profile, vocab, plan, scenario, agenda, memory, agenda_plain=config.agenda_plain)
        rng = random.Random(int.from_bytes(hashlib.sha256(sid.encode()).digest()[:8], "big"))
        patient = Patient(
            client=roles.patient, vocab=vocab, archetype=profile.style.archetype, max_depth=plan.max_depth,
            style_cues=style_cues(profile), agenda=agenda, config=config, rng=rng,
            history=[{"role": "system", "content": p_prompt}],
        )
        prompt_names = [PATIENT_TEMPLATE]
    else:
        raise ValueError(f"unknown patient engine '{patient_engine}'")
    counsellor = Counsellor(client=roles.counsellor, config=config, history=[{"role": "system", "content": c_prompt}])

    turns = [patient.open(scenario.opening_message, list(rejected_openings))]
    counsellor.hear(scenario.opening_message)
    ended_by = "turn_cap"
    while len(turns) < config.turn_cap:
        said = await counsellor.reply()
        turn = await patient.turn(len(turns), said)
        turns.append(turn)
        counsellor.hear(turn.message)
        if turn.end_conversation:
            ended_by = "patient"
            break
    return Talk(
        sid=sid, profile=profile, vocab=vocab, plan=plan, scenario=scenario, memory=memory, roles=roles,
        config=config, counsellor_name=counsellor_name, seed=seed, patient=patient, counsellor=counsellor,
        agenda=agenda, turns=turns, ended_by=ended_by, p_prompt=p_prompt, c_prompt=c_prompt,
        prompt_names=prompt_names, scenario_shared=scenario_shared, patient_engine=patient_engine,
        decomposition=decomposition, trust_start=trust_start,
    )


async def finish_session(talk: Talk, *, rewrite_memory: bool = True) -> SessionRecord:
    """Rewrite the running memory after the talk (unless told not to) and build the session's record."""
    t, config, memory, patient, counsellor = talk, talk.config, talk.memory, talk.patient, talk.counsellor
    agenda, turns, plan, decomposition = t.agenda, t.turns, t.plan, t.decomposition
    exchange = counsellor.history[1:]
    if rewrite_memory:
        # An engine failure here propagates: the session is not saved and the arc fails (retried on rerun).
        mem = await compact_memory(
            t.roles.memory_compactor, memory, transcript_text(exchange), config.memory_max_entries,
            config.memory_retries, max_tokens=config.memory_max_tokens,
        )
        memory_after, update = mem.entries, MemoryUpdate(attempts=mem.attempts, repaired=mem.repaired, problems=mem.problems)
    else:
        memory_after, update = list(memory), MemoryUpdate(attempts=0, repaired=False, problems=[], skipped=True)
    pa_state = None
    if t.patient_engine == "patientact":
        pa_state = PatientActSession(
            attachment=decomposition.psych.attachment, theme=decomposition.psych.theme,
            trust_start=t.trust_start, trust_end=patient.trust, switches=config.patientact.model_dump(mode="json"),
            appraiser_system_prompt=patient.appraiser_system, decomposition=decomposition.model_dump(mode="json"),
        )
    return SessionRecord(
        session_id=t.sid,
        patient_id=t.profile.profile_id,
        counsellor=t.counsellor_name,
        session_index=plan.index,
        seed=t.seed,
        ended_by=t.ended_by,
        schedule=plan,
        scenario=t.scenario,
        patient_messages=patient.history,
        counsellor_messages=counsellor.history,
        turns=turns,
        agenda=AgendaState(
            done=[i.text for i in agenda.items if i.done],
            open=t.open_items,
            added=[i.text for i in agenda.items if i.added],
        ),
        memory_before=memory,
        memory_after=memory_after,
        memory_update=update,
        patient_system_prompt=t.p_prompt,
        counsellor_system_prompt=t.c_prompt,
        tokens=Tokens(
            patient_prompt=patient.tokens.prompt, patient_completion=patient.tokens.completion,
            counsellor_prompt=counsellor.tokens.prompt, counsellor_completion=counsellor.tokens.completion,
        ),
        engines=t.roles.describe(),
        prompts=template_hashes(
            [*t.prompt_names, config.counsellor_template, FIRST_TEMPLATE if plan.index == 0 else NEXT_TEMPLATE,
             MEMORY_TEMPLATE]
        ),
        archetype=t.profile.style.archetype,
        vocabulary_version=t.vocab.version,
        rejected_messages=RejectionCounts.of([r for turn in turns for r in turn.rejected_messages]),
        counsellor_flags=counsellor.flags,
        scenario_shared=t.scenario_shared,
        patient_engine=t.patient_engine,
        patientact=pa_state,
        scenario_drafts=t.scenario.drafts,
    )


async def first_scenario_record(
    profile: Profile,
    plan: SessionPlan,
    client: Any,
    config: SimulationConfig,
    *,
    seed: int,
    load: Callable[[str], ScenarioRecord | None],
    save: Callable[[ScenarioRecord], ScenarioRecord],
) -> ScenarioRecord:
    """The patient's first scenario: read from its checkpoint, or written once and checkpointed before any
    counsellor's arc uses it."""
    key = scenario_key(profile.profile_id, seed)
    done = load(key)
    if done is not None:
        return done
    scenario, bad = await first_scenario(
        client, profile, plan, config.scenario_max_tokens, config.max_message_retries, config.scenario_scale
    )
    record = ScenarioRecord(
        patient_id=profile.profile_id, seed=seed, scenario=scenario, rejected_openings=bad,
        engine=client.describe(), prompt=template_hashes([FIRST_TEMPLATE]), scenario_drafts=scenario.drafts,
    )
    return save(record)  # the first finished copy, if another worker wrote this patient's scenario first


async def run_arc(
    profile: Profile,
    schedule: Schedule,
    vocab: Vocabulary,
    roles: Roles,
    config: SimulationConfig,
    *,
    counsellor_name: str,
    seed: int,
    first: ScenarioRecord,
    load: Callable[[str], SessionRecord | None],
    save: Callable[[SessionRecord], SessionRecord],
    on_session: Callable[[], Awaitable[None] | None] = lambda: None,
    patient_engine: str | None = None,
    decomposition: Decomposition | None = None,
) -> list[SessionRecord]:
    """All sessions of one patient with one counsellor, resuming after the last checkpointed session. The
    first session uses the patient's shared first scenario (`first_scenario_record`).

    `patient_engine` defaults to the recipe's one engine (a recipe listing both must name it per arc). A
    PatientAct arc uses `decomposition` (the patient's shared one, `decomposition_record`) or, when none is
    given, the one stored in its first checkpointed session, or makes its own; its trust carries from one
    session's end into the next session's start (`patientact.trust.session_start`)."""
    if first.patient_id != profile.profile_id or first.seed != seed:
        raise ValueError(f"first scenario of {first.patient_id}/{first.seed} given to {profile.profile_id}/{seed}")
    engine = patient_engine or _single_engine(config)
    sessions = schedule.sessions
    records: list[SessionRecord] = []
    # The next scenario reads the talk of the session before it but not its memory, so it is written while that
    # memory is rewritten (two independent calls that were on the arc's critical path one after the other).
    upcoming: asyncio.Future | None = None
    try:
        for i, plan in enumerate(sessions):
            done = load(session_id(profile.profile_id, counsellor_name, plan.index, seed, engine))
            if done is not None:
                upcoming = await _dropped(upcoming)
            if done is None and engine == "patientact":
                if decomposition is None and records and records[0].patientact is not None:
                    decomposition = Decomposition.model_validate(records[0].patientact.decomposition)
                if decomposition is None:
                    decomposition = await patientact_decompose(roles.decomposer or roles.patient, profile, seed, config)
            if done is None:
                prev = records[-1] if records else None
                if prev is None:
                    scenario, bad = first.scenario.with_drafts(first.scenario_drafts), first.rejected_openings
                elif upcoming is not None:
                    scenario, bad = await upcoming
                    upcoming = None
                else:
                    scenario, bad = await _write_next(roles, profile, prev.scenario, prev.transcript(),
                                                      plan, prev.agenda.open, config)
                memory = prev.memory_after if prev else []
                trust = None
                if engine == "patientact":
                    carried = prev.patientact.trust_end if prev is not None and prev.patientact is not None else None
                    trust = session_start(plan, prev.schedule if prev else None, carried, config.patientact.trust_drift_per_day)
                talk = await converse(
                    profile, vocab, plan, scenario, memory, roles, config, counsellor_name=counsellor_name, seed=seed,
                    rejected_openings=bad, scenario_shared=prev is None, patient_engine=engine,
                    decomposition=decomposition, trust_start=trust,
                )
                nxt = sessions[i + 1] if i + 1 < len(sessions) else None
                if nxt is not None and load(session_id(profile.profile_id, counsellor_name, nxt.index, seed, engine)) is None:
                    upcoming = asyncio.ensure_future(
                        _write_next(roles, profile, talk.scenario, talk.transcript(), nxt, talk.open_items, config)
                    )
                # Nothing reads the memory written after the arc's last session.
                finished = await finish_session(talk, rewrite_memory=config.final_memory or nxt is not None)
                done = save(finished)  # a duplicate of a session another worker finished first is discarded
                if done is not finished:
                    upcoming = await _dropped(upcoming)  # written from our talk, not from the copy that was kept
            records.append(done)
            on_session()
    finally:
        await _dropped(upcoming)
    return records


async def _write_next(roles: Roles, profile: Profile, previous: Scenario, transcript: list[dict[str, str]],
                      plan: SessionPlan, leftover: list[str], config: SimulationConfig):
    return await next_scenario(
        roles.scenario_writer, profile, previous, transcript, plan, leftover,
        config.scenario_max_tokens, config.max_message_retries, config.scenario_scale,
    )


async def _dropped(task: asyncio.Future | None) -> None:
    """Cancel a next-scenario call whose result will not be used and wait until it has stopped."""
    if task is not None and not task.done():
        task.cancel()
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
    return None


def _single_engine(config: SimulationConfig) -> str:
    engines = config.patient_engines
    if len(engines) != 1:
        raise ValueError(f"the recipe runs patient engines {engines}: name the arc's engine (run_arc patient_engine=)")
    return engines[0]

"""One session and one patient's arc of sessions (MindEval2/MindSim §4.2 "Multi session", Appendix D).

The session routes messages between the two participants and decides when it ends: it opens with the
scenario's opening message (or, with `simulation.opening: counsellor`, with the counsellor's greeting, which
the patient's first turn answers) and alternates until the patient sets `end_conversation` (its last words are
still written) or the turn cap is reached; then the running memory is rewritten. The arc runs a patient's
sessions in order against one counsellor and skips sessions already checkpointed, so a rerun resumes.

The patient is played by the arc's patient engine (`mindsim.patient_engines`: MindSim's move-committing
patient, PatientAct's, docs/patientact.md, or any registered engine or variant); the loop, memory and record
are the same for all. The engine builds each session's participant, adds its own record fields, carries its
state from one session into the next (`carry`) and makes its per-patient preparation once (`prepare`); the
loop never asks which engine it is running. The arc and the session take `Arc` and `SessionInput` values
(`mindsim.arc`).

The first scenario is the patient's, not the arc's: `first_scenario_record` writes it once per patient
(checkpointed on its own) before any arc starts, and every counsellor's arc opens with it, so counsellors are
compared on the same first session. Each later scenario is written from that arc's own previous session.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import replace
from typing import Any, Awaitable, Callable, TypeVar

from mindsimkit.mindcore.prompts import render
from mindsimkit.mindsim.agenda import Agenda
from mindsimkit.mindsim.arc import Arc, Roles, SessionInput, Talk
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.memory import compact_memory, format_log
from mindsimkit.mindsim.patient import Counsellor
from mindsimkit.mindsim.patient_engines import TalkStart, scenario_frame
from mindsimkit.mindsim.prompting import (
    COUNSELLOR_TEMPLATE,
    RejectedMessage,
    counsellor_system_prompt,
    load_harness_text,
    session_conduct,
    template_hashes,
    transcript_text,
)
from mindsimkit.mindsim.reference import PRESET as REFERENCE
from mindsimkit.mindsim.records import (
    AgendaState,
    MemoryUpdate,
    RejectionCounts,
    ScenarioRecord,
    SessionRecord,
    Tokens,
    scenario_key,
)
from mindsimkit.mindsim.scenario import (
    FIRST_TEMPLATE,
    NEXT_REFERENCE_TEMPLATE,
    NEXT_TEMPLATE,
    Scenario,
    first_scenario,
    given_scenario,
    next_scenario,
)
from mindsimkit.mindsim.schedule import Schedule, SessionPlan
from mindsimkit.profilegen.schemas import Profile

__all__ = [
    "Arc",
    "Roles",
    "SessionInput",
    "Talk",
    "converse",
    "finish_session",
    "first_scenario_record",
    "rerun_input",
    "run_arc",
    "run_session",
]

MEMORY_TEMPLATE = "memory/compact.jinja2"


async def run_session(arc: Arc, inp: SessionInput, *, rewrite_memory: bool = True) -> SessionRecord:
    """One whole session: `converse` and then `finish_session`. The patient is the arc's engine's
    (`arc.preparation` and `inp.carried` as that engine needs them); everything else — routing, ending,
    memory, the record — is shared."""
    return await finish_session(await converse(arc, inp), rewrite_memory=rewrite_memory)


async def converse(arc: Arc, inp: SessionInput) -> Talk:
    """The conversation of one session, from the opening message to the patient's ending or the turn cap."""
    plan, scenario = inp.plan, inp.scenario
    sid = arc.session_id(plan.index, inp.rerun)
    arc = replace(arc, roles=arc.roles.for_session(sid))
    config = arc.engine.session_config(arc.config)
    # A plain agenda (`agenda_plain`) answers in a word and never lists what is open.
    agenda = Agenda.from_checkpoints(
        scenario.checkpoints, brief=load_harness_text().agenda_plain_answers if config.agenda_plain else None
    )
    greets = config.opening == "counsellor"
    # The patient's prompt reads `inp.memory`; the counsellor's may be given another (the memory ablation).
    seen = inp.counsellor_sees
    c_prompt = (
        counsellor_system_prompt(plan, seen, greets)
        if config.counsellor_template == COUNSELLOR_TEMPLATE
        else render(
            config.counsellor_template,
            time_context=plan.counsellor_time_context,
            memory=format_log(seen),
            opening_greeting=greets,
            session_index=plan.index,
        )
    )
    patient = arc.engine.engine.participant(TalkStart(arc, inp, sid, agenda, config))
    p_prompt = patient.history[0]["content"]
    counsellor = Counsellor(
        client=arc.roles.counsellor, config=config, history=[{"role": "system", "content": c_prompt}]
    )

    ended_by = "turn_cap"
    if config.opening == "counsellor":
        # The counsellor greets first and the patient's first turn answers it (PatientAct §4.2): the scenario's
        # opening message is not spoken; `turn_cap` still counts patient turns.
        turns = [await patient.turn(0, await counsellor.reply())]
        counsellor.hear(turns[0].message)
        if turns[0].end_conversation:
            ended_by = "patient"
    else:
        turns = [patient.open(scenario.opening_message, list(inp.rejected_openings))]
        counsellor.hear(scenario.opening_message)
    while len(turns) < config.turn_cap and ended_by != "patient":
        said = await counsellor.reply(wrap_up_note(config, len(counsellor.flags)))
        turn = await patient.turn(len(turns), said)
        turns.append(turn)
        counsellor.hear(turn.message)
        if turn.end_conversation:
            ended_by = "patient"
            break
    return Talk(
        sid=sid,
        arc=arc,
        inp=inp,
        config=config,
        patient=patient,
        counsellor=counsellor,
        agenda=agenda,
        turns=turns,
        ended_by=ended_by,
        p_prompt=p_prompt,
        c_prompt=c_prompt,
    )


def wrap_up_note(config: SimulationConfig, replied: int) -> str | None:
    """The session note for the counsellor's next reply when it is one of the last `wrap_up_reminder` of the
    session (`replied` replies already given), else None."""
    left = config.replies_per_session - replied
    if not config.wrap_up_reminder or not 0 < left <= config.wrap_up_reminder:
        return None
    return load_harness_text().wrap_up_note.format(left=left)


async def finish_session(talk: Talk, *, rewrite_memory: bool = True) -> SessionRecord:
    """Rewrite the running memory after the talk (unless told not to) and build the session's record."""
    arc, inp, config, patient, counsellor = talk.arc, talk.inp, talk.config, talk.patient, talk.counsellor
    agenda, turns, plan, memory = talk.agenda, talk.turns, inp.plan, inp.memory
    exchange = counsellor.history[1:]
    if rewrite_memory:
        # An engine failure here propagates: the session is not saved and the arc fails (retried on rerun).
        mem = await compact_memory(
            arc.roles.memory_compactor,
            memory,
            transcript_text(exchange),
            config.memory_max_entries,
            config.memory_retries,
            max_tokens=config.memory_max_tokens,
        )
        memory_after, update = (
            mem.entries,
            MemoryUpdate(attempts=mem.attempts, repaired=mem.repaired, problems=mem.problems),
        )
    else:
        memory_after, update = list(memory), MemoryUpdate(attempts=0, repaired=False, problems=[], skipped=True)
    engine = arc.engine.engine
    return SessionRecord(
        session_id=talk.sid,
        patient_id=arc.profile.profile_id,
        counsellor=arc.counsellor,
        session_index=plan.index,
        seed=arc.seed,
        ended_by=talk.ended_by,
        schedule=plan,
        scenario=inp.scenario,
        patient_messages=patient.history,
        counsellor_messages=counsellor.history,
        turns=turns,
        agenda=AgendaState(
            done=[i.text for i in agenda.items if i.done],
            open=talk.open_items,
            added=[i.text for i in agenda.items if i.added],
        ),
        memory_before=memory,
        memory_after=memory_after,
        memory_update=update,
        patient_system_prompt=talk.p_prompt,
        counsellor_system_prompt=talk.c_prompt,
        tokens=Tokens(
            patient_prompt=patient.tokens.prompt,
            patient_completion=patient.tokens.completion,
            counsellor_prompt=counsellor.tokens.prompt,
            counsellor_completion=counsellor.tokens.completion,
        ),
        engines=arc.roles.describe(),
        prompts=template_hashes(
            [
                *engine.prompt_names(),
                config.counsellor_template,
                *_scenario_templates(arc.profile, plan, config, engine.name),
                MEMORY_TEMPLATE,
            ]
        ),
        archetype=arc.profile.style.archetype,
        vocabulary_version=arc.vocab.version,
        rejected_messages=RejectionCounts.of([r for turn in turns for r in turn.rejected_messages]),
        counsellor_flags=counsellor.flags,
        scenario_shared=inp.scenario_shared,
        patient_engine=arc.engine.name,
        scenario_drafts=inp.scenario.drafts,
        trial=arc.record_trial,
        counsellor_memory=inp.counsellor_memory,
        rerun=inp.rerun,
        **engine.record_fields(talk),
    )


def rerun_input(
    twin: SessionRecord, previous: SessionRecord | None, arc: Arc, *, rerun: str, counsellor_memory: list[str] | None
) -> SessionInput:
    """The start of a rerun of `twin` that differs from it only where the ablation says (`counsellor_memory`):
    the twin's schedule entry, scenario (with the openers it rejected), running memory, and the engine state
    carried from the twin's own previous session (`previous`, from the same run)."""
    config = arc.engine.session_config(arc.config)
    return SessionInput(
        plan=twin.schedule,
        scenario=twin.scenario.with_drafts(twin.scenario_drafts),
        memory=list(twin.memory_before),
        rejected_openings=list(twin.turns[0].rejected_messages) if twin.turns else [],
        scenario_shared=twin.scenario_shared,
        carried=arc.engine.engine.carry(twin.schedule, previous, config),
        counsellor_memory=counsellor_memory,
        rerun=rerun,
    )


async def first_scenario_record(
    profile: Profile,
    plan: SessionPlan,
    client: Any,
    config: SimulationConfig,
    *,
    seed: int,
    load: Callable[[str], ScenarioRecord | None],
    save: Callable[[ScenarioRecord], ScenarioRecord | Awaitable[ScenarioRecord]],
) -> ScenarioRecord:
    """The patient's first scenario: read from its checkpoint, or written once and checkpointed before any
    counsellor's arc uses it. `client` is the `first_scenario_writer` role (MindEval2 App. D: first scenarios
    are written in advance, by another model than the patient's); the record's `engine` names it."""
    key = scenario_key(profile.profile_id, seed)
    done = load(key)
    if done is not None:
        return done
    if profile.first_session is not None:
        # A profile file that fixes session 1 (an imported MindEval2 member): its situation is played verbatim, as
        # the reference plays its profile file's; no writer is called.
        given = profile.first_session.situation
        record = ScenarioRecord(
            patient_id=profile.profile_id,
            seed=seed,
            scenario=given_scenario(given),
            engine={"given": "profile", "situation_id": given.situation_id, "source": profile.imported_from},
            prompt={},
        )
        return await _kept(save(record))
    scenario, bad = await first_scenario(
        client,
        profile,
        plan,
        config.scenario_max_tokens,
        config.max_message_retries,
        config.scenario_scale,
        frame=scenario_frame(config),
    )
    record = ScenarioRecord(
        patient_id=profile.profile_id,
        seed=seed,
        scenario=scenario,
        rejected_openings=bad,
        engine=client.describe(),
        prompt=template_hashes([FIRST_TEMPLATE]),
        scenario_drafts=scenario.drafts,
    )
    return await _kept(save(record))  # the first finished copy, if another worker wrote this patient's scenario first


async def run_arc(
    arc: Arc,
    schedule: Schedule,
    *,
    first: ScenarioRecord,
    load: Callable[[str], SessionRecord | None],
    save: Callable[[SessionRecord], SessionRecord | Awaitable[SessionRecord]],
    on_session: Callable[[], Awaitable[None] | None] = lambda: None,
) -> list[SessionRecord]:
    """All sessions of one patient with one counsellor, resuming after the last checkpointed session. The
    first session uses the patient's shared first scenario (`first_scenario_record`).

    An engine that prepares per patient uses `arc.preparation` (the patient's shared one, made by the
    runner) or, when none is given, the one stored in the arc's first checkpointed session, or makes its
    own; the state it carries between sessions goes from one session's record into the next session's
    start (`PatientEngine.carry`)."""
    profile, config, roles = arc.profile, arc.config, arc.roles
    if first.patient_id != profile.profile_id or first.seed != arc.seed:
        raise ValueError(f"first scenario of {first.patient_id}/{first.seed} given to {profile.profile_id}/{arc.seed}")
    engine = arc.engine.engine
    session_config = arc.engine.session_config(config)
    sessions = schedule.sessions
    records: list[SessionRecord] = []
    # The next scenario reads the talk of the session before it but not its memory, so it is written while that
    # memory is rewritten (two independent calls that were on the arc's critical path one after the other).
    upcoming: asyncio.Future[tuple[Scenario, list[RejectedMessage]]] | None = None
    reference = config.preset_for(engine.name) == REFERENCE
    try:
        for i, plan in enumerate(sessions):
            done = load(arc.session_id(plan.index))
            if done is not None:
                await _dropped(upcoming)
                upcoming = None
                if done.trial != arc.record_trial:
                    # Trial 0 keeps the one-trial id: a checkpoint from before `trials` was raised (or lowered)
                    # is that trial's session, labelled as this run labels it.
                    done = done.model_copy(update={"trial": arc.record_trial})
            if done is None and engine.prepares and arc.preparation is None:
                stored = engine.stored_preparation(records[0]) if records else None
                if stored is None:
                    stored = await engine.prepare(profile, arc.seed, roles, config)
                arc = arc.with_preparation(stored)
            if done is None:
                prev = records[-1] if records else None
                if prev is None:
                    scenario, bad = first.scenario.with_drafts(first.scenario_drafts), first.rejected_openings
                elif upcoming is not None:
                    scenario, bad = await upcoming
                    upcoming = None
                else:
                    scenario, bad = await _write_next(
                        roles,
                        profile,
                        prev.scenario,
                        prev.transcript(),
                        plan,
                        prev.agenda.open,
                        config,
                        **(_reference_inputs(arc, plan, prev.memory_after) if reference else {}),
                    )
                inp = SessionInput(
                    plan=plan,
                    scenario=scenario,
                    memory=prev.memory_after if prev else [],
                    rejected_openings=bad,
                    scenario_shared=prev is None,
                    carried=engine.carry(plan, prev, session_config),
                )
                talk = await converse(arc, inp)
                nxt = sessions[i + 1] if i + 1 < len(sessions) else None
                # Under the mindeval2-reference preset the writer reads the memory this session leaves, so it
                # waits for the rewrite (written in the next iteration, from the saved record).
                if nxt is not None and not reference and load(arc.session_id(nxt.index)) is None:
                    upcoming = asyncio.ensure_future(
                        _write_next(roles, profile, talk.scenario, talk.transcript(), nxt, talk.open_items, config)
                    )
                # Nothing reads the memory written after the arc's last session.
                finished = await finish_session(talk, rewrite_memory=config.final_memory or nxt is not None)
                done = await _kept(save(finished))  # a duplicate another worker finished first is discarded
                if done is not finished:
                    await _dropped(upcoming)  # written from our talk, not from the copy that was kept
                    upcoming = None
            records.append(done)
            on_session()
    finally:
        await _dropped(upcoming)
    return records


async def _write_next(
    roles: Roles,
    profile: Profile,
    previous: Scenario,
    transcript: list[dict[str, str]],
    plan: SessionPlan,
    leftover: list[str],
    config: SimulationConfig,
    **reference: Any,
) -> tuple[Scenario, list[RejectedMessage]]:
    return await next_scenario(
        roles.scenario_writer,
        profile,
        previous,
        transcript,
        plan,
        leftover,
        config.scenario_max_tokens,
        config.max_message_retries,
        config.scenario_scale,
        **reference,
    )


def _reference_inputs(arc: Arc, plan: SessionPlan, memory: list[str]) -> dict[str, Any]:
    """What the authors' code gives the next scenario's writer where ours differs (mind-eval `arc.py`
    `evolve_situation`): the running memory so far; the archetype, concealment and emotion of the session the
    scenario opens, so that its opening message, spoken verbatim, keeps to them; and the patient's own case summary
    in place of our writer brief, so the core belief stays with the first scenario's writer (the reference hands
    this writer the formulation its patient prompt shows, which holds no core belief)."""
    return {
        "memory": format_log(memory) if memory else None,
        "brief": arc.profile.case_summary,
        "conduct": session_conduct(arc.profile, arc.vocab, plan),
        "template": NEXT_REFERENCE_TEMPLATE,
    }


def _scenario_templates(profile: Profile, plan: SessionPlan, config: SimulationConfig, engine: str) -> list[str]:
    """The template that wrote this session's scenario; none for a first session the profile gave."""
    if plan.index:
        return [_next_template(config, engine)]
    return [] if profile.first_session is not None else [FIRST_TEMPLATE]


def _next_template(config: SimulationConfig, engine: str) -> str:
    """The template a later session's scenario was written with (the preset's reads memory and conduct)."""
    return NEXT_REFERENCE_TEMPLATE if config.preset_for(engine) == REFERENCE else NEXT_TEMPLATE


T = TypeVar("T")


async def _kept(saved: T | Awaitable[T]) -> T:
    """What a `save` callback returned: the stored copy, or an awaitable of it (the runner's stores write their
    checkpoints in a writer thread, `mindcore.io.off_loop`, so the event loop keeps serving other sessions)."""
    if inspect.isawaitable(saved):
        kept: T = await saved
        return kept
    return saved


async def _dropped(task: asyncio.Future[Any] | None) -> None:
    """Cancel a next-scenario call whose result will not be used and wait until it has stopped."""
    if task is not None and not task.done():
        task.cancel()
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
    return None

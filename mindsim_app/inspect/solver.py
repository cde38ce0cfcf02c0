"""The solver: one patient's arc of sessions with the eval's model as the counsellor under test (MindEval2 §4.2
"Multi session", App. D; PatientAct §4.2 with `opening: counsellor`).

It runs the simulator's own arc (`mindsim.session.run_arc`) — scenario writing, the patient engine, the running
memory, the counsellor's system prompt with that memory, the record of every session — with one difference from
`mindsim simulate`: the counsellor's client sends its requests to the inspect model (`backend.InspectBackend`), so
inspect's provider, retries, connection limits and transcript apply to every counsellor reply. Nothing is
checkpointed to disk; the log is the record. The sample's store keeps every session's full record (what
`mindsim inspect to-run` turns into a run folder), its metadata a short account per session (moves, memory, how
it ended), and its messages the counsellor's side of every session, each opened by the system prompt the
counsellor was given, so `inspect view` shows the conversations.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    ModelOutput,
    get_model,
    model_roles,
)
from inspect_ai.solver import Generate, Solver, TaskState, solver

from mindsimkit.mindsim.records import SessionRecord
from mindsimkit.mindsim.reference import patient_schedule
from mindsimkit.mindsim.patient_engines import variant
from mindsimkit.mindsim.session import first_scenario_record, run_arc
from mindsimkit.mindsim.simulate import arc_for, arc_schedule, harness_roles, shared_clients
from mindsimkit.mindsim_app.inspect.backend import inspect_role
from mindsimkit.mindsim_app.inspect.harness import Harness, counsellor_label
from mindsimkit.profilegen.schemas import Profile

# Keys of the sample store (read back by `to_run.py`).
SESSIONS, SIMULATION, RUN = "mindsim/sessions", "mindsim/simulation", "mindsim/run"
JUDGE_ROLE = "judge"


def epoch_trial(epoch: int) -> int:
    """inspect's epochs are the simulator's repeated trials (`simulation.trials`): epoch 1 is trial 0 (the
    one-trial session ids), each later epoch moves the patient's and counsellor's seeds on."""
    return max(0, epoch - 1)


def stages(harness: Harness, scored: set[str]) -> set[str]:
    """What preflight checks: the simulation, and each scorer whose judge is a recipe role (a judge bound as an
    inspect model role is inspect's to reach)."""
    judged = set() if JUDGE_ROLE in model_roles() else scored
    return {"simulate", *judged}


@solver
def patient_arc(harness: Harness, scored: tuple[str, ...] = ()) -> Solver:
    """Play the sample's patient arc with the eval's model as counsellor. `scored`: the preflight stages of the
    task's scorers (`judge`, `judge_patientact`)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        engines, config = await harness.ready(stages(harness, set(scored)))
        trial = epoch_trial(state.epoch)
        if trial:
            config = config.model_copy(update={"trials": trial + 1})
        profile = Profile.model_validate(state.metadata["profile"])
        kind, seed = harness.kind, harness.seed
        shared = shared_clients(engines, config)
        harness_side = harness_roles(shared, [kind])
        schedule = patient_schedule(profile.profile_id, seed, config)
        first = await first_scenario_record(
            profile,
            schedule.sessions[0],
            shared["first_scenario_writer"],
            config,
            seed=seed,
            load=lambda _key: None,
            save=lambda r: r,
        )
        engine = variant(kind).engine
        preparation = await engine.prepare(profile, seed, harness_side, config) if engine.prepares else None
        label = counsellor_label(str(state.model), harness.settings.counsellor)
        arc = arc_for(
            profile,
            harness_side,
            inspect_role("counsellor", get_model(), engines.ledger),
            config,
            counsellor=label,
            seed=seed,
            kind=kind,
            preparation=preparation,
            trial=trial,
        )
        records = await run_arc(
            arc, arc_schedule(schedule, config, kind), first=first, load=lambda _key: None, save=lambda r: r
        )
        keep(
            state,
            records,
            config.model_dump(mode="json"),
            {
                "recipe": harness.recipe.name,
                "recipe_path": harness.recipe.path,
                "seed": seed,
                "counsellor": label,
                "patient_engine": kind,
                "model": str(state.model),
            },
        )
        return state

    return solve


def keep(state: TaskState, records: list[SessionRecord], simulation: dict[str, Any], run: dict[str, Any]) -> None:
    """The arc into the sample: full records in the store, a short account in the metadata, the counsellor's side
    of every session as the messages, the last counsellor reply as the output."""
    state.store.set(SESSIONS, [r.model_dump(mode="json") for r in records])
    state.store.set(SIMULATION, simulation)
    state.store.set(RUN, run)
    state.metadata["sessions"] = [account(r) for r in records]
    state.messages = [m for r in records for m in session_messages(r)]
    replies = [m for m in state.messages if isinstance(m, ChatMessageAssistant)]
    if replies:
        state.output = ModelOutput.from_content(str(state.model), replies[-1].text)


def account(r: SessionRecord) -> dict[str, Any]:
    """One session in a few fields: how it ended, the patient's moves per turn, the running memory before and
    after, the scenario it opened with."""
    return {
        "session_id": r.session_id,
        "session_index": r.session_index,
        "ended_by": r.ended_by,
        "patient_engine": r.patient_engine,
        "gap_hours": getattr(r.schedule, "gap_hours", None),
        "event": r.scenario.event,
        "moves": [t.move for t in r.turns],
        "memory_before": list(r.memory_before),
        "memory_after": list(r.memory_after),
        "counsellor_flags": [f.flags for f in r.counsellor_flags],
    }


def session_messages(r: SessionRecord) -> list[ChatMessage]:
    """The counsellor's side of one session as inspect messages: its system prompt (which holds the running
    memory), then the exchange; each patient message carries its turn's move in its metadata."""
    where = {"session_id": r.session_id, "session_index": r.session_index}
    out: list[ChatMessage] = [ChatMessageSystem(content=r.counsellor_system_prompt, metadata=where)]
    turns = iter(r.turns)
    for m in r.counsellor_messages[1:]:
        if m["role"] == "assistant":
            out.append(ChatMessageAssistant(content=m["content"], metadata=where))
        else:
            t = next(turns, None)
            moves = (
                {}
                if t is None
                else {
                    "turn": t.index,
                    "move": t.move,
                    "secondary_move": t.secondary_move,
                    "end_conversation": t.end_conversation,
                }
            )
            out.append(ChatMessageUser(content=m["content"], metadata={**where, **moves}))
    return out

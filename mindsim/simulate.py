"""Running the simulator over a pool of profiles (MindEval2/MindSim §4.2 and §5.1: every patient's arc against
each counsellor under test, with the schedule held fixed across counsellors).

The unit of work is a patient: its first scenario is written once by the `first_scenario_writer` role
(MindEval2 App. D: written in advance, by another model than the later scenarios' patient model; unbound, the
`scenario_writer`'s binding) and checkpointed under `sessions/scenarios/`, then its arcs, one per counsellor,
all open with that same scenario. Every patient
and every arc is a coroutine and the engine's own concurrency limit decides how many requests are in flight,
so conversations never run one after another. Each finished session is checkpointed as its own file under a
content-derived id, create-if-absent; a rerun (also after SIGKILL) skips finished sessions and resumes each
arc after its last one.

Patients are grouped in shards (`simulate_shard`) and the job's runner (`mindcore.runners`) runs them: the
local runner one shard holding everyone in this process; the Ray runner shards by a stable hash of the
patient id, each on a worker. Either way a shard writes its own slice of the dataset when it finishes (`sessions/shards/`),
and `merge_shards` streams the slices into `sessions/sessions.parquet` and the transcript export in one
order, so both runners give the same files and no step holds every session in memory at once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Iterator, TypeVar

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pydantic import ValidationError

from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.errors import ConfigError, EngineError, InputError
from mindsimkit.mindcore.io import CheckpointDir, atomic_write_json, atomic_write_jsonl, atomic_writer, off_loop
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import record_stage
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.mindcore.runners import LocalRunner, Runner
from mindsimkit.mindsim.config import CounsellorBinding, SimulationConfig, counsellor_name
from mindsimkit.mindsim.prompting import TurnFailed
from mindsimkit.mindsim.prompting import load_style_data
from mindsimkit.mindsim.records import RejectionCounts, ScenarioRecord, SessionRecord, scenario_key, session_id
from mindsimkit.mindsim.reference import patient_schedule, vocabulary_for
from mindsimkit.mindsim.schedule import Schedule
from mindsimkit.mindsim.patient_engines import engine_roles, engines_of, variant
from mindsimkit.mindsim.session import Arc, Roles, first_scenario_record, run_arc
from mindsimkit.mindsim.summary import FailedArc, ShardSummary, SimulationSummary
from mindsimkit.profilegen.dataset import PackedProfile, unpacked
from mindsimkit.profilegen.moves import load_vocabulary
from mindsimkit.profilegen.schemas import Profile

if TYPE_CHECKING:
    from mindsimkit.mindcore.engine import Engines

# Rows per row group in a shard file, and so per shard held in memory by the merge (sessions are
# tens of KB each: 64 shards x 32 rows is ~100 MB of rows in flight at most).
SHARD_ROW_GROUP = 32
# A run's patient: its profile, or the profile packed while it waits (`_prepare`).
Patient = Profile | PackedProfile
# Layout 2: first scenarios written once per patient and shared by every counsellor (layout 1 wrote one per
# arc). Sessions of the two layouts must not be mixed in one run folder.
LAYOUT = {"simulator_layout": 2, "first_scenario": "shared per patient"}
# Failures that sink one arc but not the run: counted and reported.
ARC_FAILURES = (TurnFailed, EngineError)


def counsellor_client(engines: Engines, c: str | CounsellorBinding) -> RoleClient:
    """A role name goes through `Engines.role`; an engine+model binding gets its own client on that engine."""
    if isinstance(c, str):
        return engines.role(c)
    try:
        backend = engines.backend(c.engine)
    except KeyError:
        raise ConfigError(
            f"simulation.counsellors: '{c.name}' names engine '{c.engine}', which is not in the recipe's engines"
        ) from None
    spec = c.role_spec()
    model = c.model or getattr(backend, "default_model", None) or c.engine
    return RoleClient(f"counsellor:{c.name}", backend, spec, model, engines.ledger)


def check_profiles(profiles: list[Profile]) -> None:
    """Fail before any LLM call if a profile names an archetype or knob the simulator cannot render."""
    vocab = load_vocabulary()
    style = load_style_data()
    for p in profiles:
        s = p.style
        problems = []
        if s.archetype not in vocab.archetypes:
            problems.append(f"archetype '{s.archetype}'")
        for knob, table in (
            ("register", style.register),
            ("verbosity", style.verbosity),
            ("frustration_reactivity", style.frustration_reactivity),
        ):
            if getattr(s, knob) not in table:
                problems.append(f"{knob} '{getattr(s, knob)}'")
        if problems:
            raise InputError(
                f"profile {p.profile_id}: unknown style {', '.join(problems)}; regenerate the profiles with this "
                "toolkit version or fix profilegen/data/archetypes.yaml / mindsim/data/style.yaml"
            )


def check_layers(profiles: list[Profile], engines: list[str], situation_engines: tuple[str, ...] = ()) -> None:
    """An imported profile (no persona, demographics, anchor, structured formulation or screen) can be played by
    MindSim only, and a situation-seeded one also by the engines in `situation_engines`; an engine that reads those
    parts refuses it here, before any model call."""
    bare = [p for p in profiles if not p.layered]
    if not bare:
        return
    refusing = [e for e in engines if e not in situation_engines] if all(p.situation_profile for p in bare) else engines
    if refusing:
        first = bare[0]
        source = first.imported_from or (
            "the PatientAct situation chain" if first.situation_profile else "another source"
        )
        more = f" (and {len(bare) - 1} more)" if len(bare) > 1 else ""
        playable = ", ".join(["mindsim", *situation_engines]) if first.situation_profile else "mindsim"
        raise InputError(
            f"profile {first.profile_id}{more} came from {source} and has no "
            f"persona, anchor or structured formulation, which patient engine(s) {', '.join(refusing)} read; "
            f"simulate it with `simulation.patient_engine` among {playable} only"
        )


def check_unique(ids: list[str]) -> None:
    """Every patient needs its own id: its checkpoints and sessions are keyed by it."""
    repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
    if repeated:
        shown = ", ".join(repeated[:5]) + (f" and {len(repeated) - 5} more" if len(repeated) > 5 else "")
        raise InputError(f"profiles: duplicate profile_id values ({shown}); each patient needs its own id")


R = TypeVar("R", SessionRecord, ScenarioRecord)


class _RecordStore(Generic[R]):
    """Typed checkpoints in one folder, written exactly once: the first finished copy of a key wins and a
    late duplicate (a retried worker racing its original) is discarded and counted, never overwrites
    work that later sessions may already be built on. `save` returns the copy that counts."""

    model: type[R]
    what: str
    fix: str

    def __init__(self, folder: Path):  # a `mindcore.layout.SessionsFolder` path
        self.dir = CheckpointDir(folder)

    def load(self, key: str) -> R | None:
        if not self.dir.has(key):
            return None
        try:
            return self.model.model_validate(self.dir.read(key))
        except (ValidationError, json.JSONDecodeError) as exc:
            raise InputError(
                f"checkpoint {self.dir.path / key}.json is not a {self.what} ({exc.__class__.__name__}); {self.fix}"
            ) from exc

    def _keep(self, key: str, record: R) -> R:
        stored, won = self.dir.first_copy(key, record.model_dump(mode="json"))
        return record if won else self.model.model_validate(stored)

    @property
    def duplicates(self) -> int:
        return self.dir.duplicates


class SessionStore(_RecordStore[SessionRecord]):
    """Per-session durable checkpoints under `<out>/sessions/checkpoints/<session_id>.json`."""

    model, what, fix = SessionRecord, "session record", "delete it to re-simulate that session"

    def __init__(self, out_dir: Path):
        super().__init__(RunLayout(out_dir).sessions.checkpoints)

    def save(self, record: SessionRecord) -> SessionRecord:
        return self._keep(record.session_id, record)

    def all(self) -> list[SessionRecord]:
        return [r for r in (self.load(k) for k in self.dir.keys()) if r is not None]


class ScenarioStore(_RecordStore[ScenarioRecord]):
    """Each patient's first scenario under `<out>/sessions/scenarios/<patient_id>-<seed>.json`."""

    model, what = ScenarioRecord, "first-scenario record"
    fix = "use a new --out folder (deleting it would give the counsellors already run a different first session)"

    def __init__(self, out_dir: Path):
        super().__init__(RunLayout(out_dir).sessions.scenarios)

    def save(self, record: ScenarioRecord) -> ScenarioRecord:
        return self._keep(scenario_key(record.patient_id, record.seed), record)


def check_layout(out: Path) -> None:
    """Refuse a run folder holding sessions from the per-arc first-scenario layout; mark a fresh one."""
    sessions = RunLayout(out).sessions
    marker = sessions.layout_marker
    if marker.is_file():
        try:
            found = json.loads(marker.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            found = None
        if found == LAYOUT:
            return
        raise InputError(
            f"{marker}: this run folder was made by a different simulator layout ({found}); use a new --out folder"
        )
    ckpts = sessions.checkpoints
    if ckpts.is_dir() and any(ckpts.glob("*.json")):
        raise InputError(
            f"{sessions.path}: sessions from an older simulator, which wrote each counsellor's first scenario "
            "separately; resuming would mix two layouts. Use a new --out folder"
        )
    atomic_write_json(marker, LAYOUT)


def select_profiles(profiles: Iterable[Profile], config: SimulationConfig) -> Iterator[Profile]:
    chosen = (p for p in profiles if p.in_benchmark) if config.benchmark_only else iter(profiles)
    return itertools.islice(chosen, config.max_patients) if config.max_patients else chosen


# Patients in progress at once, per request the engines can have in flight: enough to keep every slot busy
# (an arc waits on its own calls one after another), few enough that a run's memory does not grow with its
# number of patients (each patient in progress holds its conversations).
PATIENTS_PER_SLOT = 2


def patients_in_flight(clients: list[RoleClient], arcs_per_patient: int) -> int:
    """How many patients a shard runs at once: `PATIENTS_PER_SLOT` arcs per request slot of the busiest engine
    the shard's roles use, spread over each patient's arcs."""
    slots = max(getattr(c.backend, "total_concurrency", None) or c.backend.max_concurrency for c in clients)
    return max(1, -(-PATIENTS_PER_SLOT * slots // max(1, arcs_per_patient)))


async def simulate_shard(
    profiles: list[Patient],
    engines: Engines,
    config: SimulationConfig,
    out: Path,
    seed: int,
    shard: int,
    shards: int,
    on_session: Callable[[str], None] = lambda _id: None,
) -> ShardSummary:
    """One shard of the patients (all of them on the local runner): every patient's shared first
    scenario and its arc with each counsellor, run concurrently (`patients_in_flight` patients at a time);
    each arc's sessions go to the shard's own slice of the sessions dataset (`sessions/shards/`, a
    `ShardWriter`) as the arc finishes, so nothing of a finished arc stays in memory. Safe to run twice at
    once: finished sessions are loaded, new ones are published create-if-absent. `on_session(session_id)` is
    called for every session that is finished, loaded or new. Returns the shard's counts
    (`mindsim.summary.ShardSummary`)."""
    store = SessionStore(out)
    scenarios = ScenarioStore(out)
    shared = shared_clients(engines, config)
    counsellors = [(counsellor_name(c), counsellor_client(engines, c)) for c in config.counsellors]
    kinds = config.patient_engines
    trials = range(config.trials)
    keys = [(name, kind, t) for kind in kinds for name, _ in counsellors for t in trials]
    base_roles = harness_roles(shared, kinds)
    # One preparation per patient and engine, shared by the engine's variants and every counsellor.
    preparing = [e for e in engines_of(kinds) if e.prepares]
    stores = {e.name: e.preparation_store(out) for e in preparing}
    writer = ShardWriter(out, shard, shards)
    tally = SessionTally()
    failures: list[FailedArc] = []
    in_flight = patients_in_flight([*shared.values(), *(c for _, c in counsellors)], len(keys))

    def load(key: str) -> SessionRecord | None:
        found = store.load(key)
        if found is not None:
            on_session(key)
        return found

    async def save(record: SessionRecord) -> SessionRecord:
        kept = await off_loop(store.save, record)
        on_session(kept.session_id)
        return kept

    def keep(records: list[SessionRecord]) -> None:
        for r in records:
            writer.add(r)
            tally.add(r)

    def failed(p: Profile, name: str, kind: str, t: int, exc: BaseException) -> None:
        failures.append(
            FailedArc(
                patient_id=p.profile_id,
                counsellor=name,
                patient_engine=kind,
                error=f"{type(exc).__name__}: {exc}",
                trial=t if config.trials > 1 else None,
            )
        )
        # The sessions this arc finished before it failed stay in the dataset, as on any rerun.
        label = {"trial": t if config.trials > 1 else None}
        keep(
            [
                r.model_copy(update=label)
                for r in (
                    store.load(session_id(p.profile_id, name, i, seed, kind, t))
                    for i in range(config.sessions_for(kind))
                )
                if r is not None
            ]
        )

    async def patient_arcs(p: Profile) -> None:
        """One patient: its shared first scenario (and each preparing engine's shared preparation, e.g.
        PatientAct's decomposition), then its arc with every counsellor under every patient engine, once per
        trial (every trial shares the schedule, the first scenario and the preparation)."""
        schedule = patient_schedule(p.profile_id, seed, config, p.first_session)
        try:
            first = await first_scenario_record(
                p,
                schedule.sessions[0],
                shared["first_scenario_writer"],
                config,
                seed=seed,
                load=scenarios.load,
                save=lambda r: off_loop(scenarios.save, r),
            )
        except ARC_FAILURES as exc:
            for key in keys:
                failed(p, *key, exc)
            return
        prepared: dict[str, Any] = {}
        for engine in preparing:
            try:
                prepared[engine.name] = await engine.prepare(p, seed, base_roles, config, stores[engine.name])
            except ARC_FAILURES as exc:
                prepared[engine.name] = exc  # only this engine's arcs of this patient fail; the others still run
        results = await asyncio.gather(
            *(
                one_arc(p, schedule, first, name, client, kind, prepared, t)
                for kind in kinds
                for name, client in counsellors
                for t in trials
            ),
            return_exceptions=True,
        )
        for res in results:
            if isinstance(res, BaseException):
                raise res

    async def one_arc(
        p: Profile,
        schedule: Schedule,
        first: ScenarioRecord,
        name: str,
        client: RoleClient,
        kind: str,
        prepared: dict[str, Any],
        trial: int,
    ) -> None:
        preparation = prepared.get(variant(kind).engine.name)
        try:
            if isinstance(preparation, BaseException):
                raise preparation
            arc = arc_for(
                p,
                base_roles,
                client,
                config,
                counsellor=name,
                seed=seed,
                kind=kind,
                preparation=preparation,
                trial=trial,
            )
            records = await run_arc(arc, arc_schedule(schedule, config, kind), first=first, load=load, save=save)
        except ARC_FAILURES as exc:
            failed(p, name, kind, trial, exc)
            return
        keep(records)

    # `in_flight` workers taking patients in order, not a task per patient waiting on a semaphore: a task
    # and its coroutine per waiting patient made the shard's memory grow with its patients.
    queue = iter(profiles)
    errors: list[Exception] = []

    async def worker() -> None:
        for patient in queue:
            try:
                await patient_arcs(unpacked(patient))  # a packed profile is whole only while its patient runs
            except Exception as exc:  # the other patients still finish (and are checkpointed) first
                errors.append(exc)

    try:
        await asyncio.gather(*(worker() for _ in range(min(in_flight, len(profiles)))))
        if errors:
            raise errors[0]
        writer.close()
    finally:
        writer.discard()
    return ShardSummary(
        shard=shard,
        patients=len(profiles),
        arcs=len(profiles) * len(keys),
        failed_arcs=failures,
        sessions_written=writer.rows,
        duplicate_checkpoints_discarded=store.duplicates
        + scenarios.duplicates
        + sum(s.duplicates for s in stores.values() if s is not None),
        **tally.counts(),
    )


async def _shard_work(engines: Engines, payload: dict[str, Any], report: Callable[[str], None]) -> ShardSummary:
    """One shard of patients, wherever the runner runs it (`mindcore.runners`)."""
    return await simulate_shard(
        payload["profiles"],
        engines,
        payload["config"],
        Path(payload["out"]),
        payload["seed"],
        payload["shard"],
        payload["shards"],
        on_session=report,
    )


# Profiles checked at a time while a run's input is read and packed: each batch's objects are freed before the
# next, so few keep the memory they leave behind small (32: 2 MiB less than 256 at 1,000 profiles).
CHECK_ROWS = 32


def _prepare(profiles: Iterable[Profile], config: SimulationConfig, out: Path) -> list[Patient]:
    """The chosen profiles, checked. Profiles read lazily (`iter_profiles`) are packed (`PackedProfile`) and
    unpacked only while their patient runs, so the input is never whole in memory as objects; a list the caller
    holds anyway is used as it is (packing it would only add a copy)."""
    patients = chosen_profiles(
        profiles, config, keep=(lambda p: p) if isinstance(profiles, Sequence) else PackedProfile.of
    )
    check_layout(out)
    return patients


def chosen_profiles(
    profiles: Iterable[Profile], config: SimulationConfig, keep: Callable[[Profile], Any] = lambda p: p
) -> list[Any]:
    """The profiles the simulation plays (`select_profiles`), each checked for the simulator and the recipe's
    patient engines, `CHECK_ROWS` at a time, and kept as `keep` gives them; InputError when none is left or two
    share an id."""
    patients: list[Any] = []
    engines = engines_of(config.patient_engines)
    layered = [e.name for e in engines if e.reads_layers]
    situated = tuple(e.name for e in engines if e.reads_situations)
    checks = [
        check_profiles,
        *([lambda chunk: check_layers(chunk, layered, situated)] if layered else []),
        *(e.check_profiles for e in engines),
    ]
    chosen = select_profiles(profiles, config)
    while chunk := list(itertools.islice(chosen, CHECK_ROWS)):
        for check in checks:
            check(chunk)
        patients.extend(keep(p) for p in chunk)
    if not patients:
        raise InputError("no profiles to simulate (check pool_only / benchmark_only and the profiles folder)")
    check_unique([p.profile_id for p in patients])
    return patients


async def simulate_async(
    profiles: Iterable[Profile],
    engines: Engines,
    config: SimulationConfig,
    out_dir: str | Path,
    seed: int,
    *,
    runner: Runner | None = None,
) -> SimulationSummary:
    """`run_simulation` for async callers. Patients are sharded by a stable hash of their id (everything of one
    patient in one shard); the runner runs the shards (the local one: one shard, in this loop), each shard writing
    its slice of the dataset as it finishes."""
    runner = runner or LocalRunner()
    out = Path(out_dir)
    patients = _prepare(profiles, config, out)
    resolved = str(out.resolve())
    run = await runner.map_shards(
        _shard_work,
        patients,
        key=lambda p: p.profile_id,
        engines=engines,
        description="simulating sessions",
        total=len(patients) * config.sessions_per_patient(),
        payload=lambda i, n, part: {
            "profiles": part,
            "config": config,
            "out": resolved,
            "seed": seed,
            "shard": i,
            "shards": n,
        },
    )
    engines_used = {r: c.describe() for r, c in shared_clients(engines, config).items()} | {
        counsellor_name(c): counsellor_client(engines, c).describe() for c in config.counsellors
    }
    return finish_simulation(
        out,
        config,
        seed,
        [p.profile_id for p in patients],
        run.results,
        run.shards,
        run.elapsed_s,
        run.runner,
        live=run.live,
        engines=engines_used,
        usage=engines.ledger.summary(),
    )


def finish_simulation(
    out: Path,
    config: SimulationConfig,
    seed: int,
    patients: list[str],
    parts: list[ShardSummary],
    shards: int,
    elapsed: float,
    runner: dict[str, Any],
    *,
    live: set[int],
    engines: dict[str, Any],
    usage: dict[str, Any],
) -> SimulationSummary:
    """Merge the shards' slices into the dataset, write the summary and record the stage. `engines`: each role's
    and counsellor's engine as provenance describes it; `usage`: the engine ledger's summary."""
    merge_shards(out, shards, live)
    counsellors = [counsellor_name(c) for c in config.counsellors]
    kinds = config.patient_engines
    order = {
        (p, name, kind, t): i
        for i, (kind, name, p, t) in enumerate(
            (k, n, p, t) for k in kinds for n in counsellors for p in patients for t in range(config.trials)
        )
    }
    failures = sorted(
        (f for part in parts for f in part.failed_arcs),
        key=lambda f: order[(f.patient_id, f.counsellor, f.patient_engine, f.trial or 0)],
    )
    summary = SimulationSummary.totals(
        parts,
        failures,
        **base_provenance(),
        seed=seed,
        patients=len(patients),
        counsellors=counsellors,
        patient_engines=kinds,
        trials=config.trials,
        arcs=len(order),
        sessions_expected=sum(config.sessions_for(kind) for _, _, kind, _ in order),
        elapsed_s=round(elapsed, 2),
        engines=engines,
        usage=usage,
        config=config.model_dump(mode="json"),
        preset_overrides=config.preset_notes(),
        runner=runner,
    )
    layout = RunLayout(out)
    summary.write(layout.sessions.summary)
    record_stage(
        out,
        "simulation",
        [layout.sessions.parquet, layout.transcripts, layout.sessions.summary],
        reads=[layout.profiles.parquet],
        counts={
            "sessions": summary.sessions_written,
            "expected": summary.sessions_expected,
            "failed_arcs": len(summary.failed_arcs),
        },
    )
    return summary


class SessionTally:
    """The shard's counts over its sessions, added one session at a time (so no list of them is kept).
    A shared first scenario's rejected openers and drafts sit in every counsellor's session 0 but happened
    once: they count once per patient."""

    def __init__(self) -> None:
        self.ended_by_patient = self.memory_repaired = self.memory_skipped = 0
        self.messages_trimmed = self.rejected_commits = self.scenario_drafts = 0
        self._rejected: Counter[str] = Counter()  # by reason
        self._flags = {"replies": 0, "tool_call": 0, "json": 0, "tool_syntax": 0, "cut_off": 0, "speaks_as_patient": 0}
        self._first_seen: set[tuple[str, int]] = set()

    def add(self, r: SessionRecord) -> None:
        first_again = r.scenario_shared and (r.patient_id, r.seed) in self._first_seen
        if r.scenario_shared:
            self._first_seen.add((r.patient_id, r.seed))
        self.ended_by_patient += r.ended_by == "patient"
        self.memory_repaired += r.memory_update.repaired
        self.memory_skipped += r.memory_update.skipped
        self.scenario_drafts += 0 if first_again else r.scenario_drafts
        for t in r.turns:
            self.messages_trimmed += t.trimmed
            self.rejected_commits += len(t.rejected)
            if not (t.opening and first_again):
                self._rejected.update(m.reason for m in t.rejected_messages)
        for f in r.counsellor_flags:
            self._flags["replies"] += 1
            for flag in f.flags:
                self._flags[flag] += 1

    def counts(self) -> dict[str, Any]:
        """The `ShardCounts` fields it keeps (rejected messages by reason, counsellor replies by flag)."""
        return {
            "ended_by_patient": self.ended_by_patient,
            "memory_repaired": self.memory_repaired,
            "memory_skipped": self.memory_skipped,
            "messages_trimmed": self.messages_trimmed,
            "rejected_commits": self.rejected_commits,
            "scenario_drafts": self.scenario_drafts,
            "rejected_messages": RejectionCounts.model_validate(self._rejected).model_dump(mode="json"),
            "counsellor_flags": dict(self._flags),
        }


# The dataset's order; a one-trial run's rows carry no trial and sort as before trials existed.
ORDER_COLUMNS = ("counsellor", "patient_id", "patient_engine", "trial", "session_index")


def _order(r: SessionRecord) -> tuple[str, str, str, int, int]:
    return (r.counsellor, r.patient_id, r.patient_engine, r.trial or 0, r.session_index)


def shared_clients(engines: Engines, config: SimulationConfig) -> dict[str, RoleClient]:
    """The clients of the roles every arc of a run shares (`shared_roles`), by role."""
    return {r: engines.role(r) for r in shared_roles(config)}


def harness_roles(shared: dict[str, RoleClient], kinds: list[str]) -> Roles:
    """The roles of an arc without its counsellor: the patient, the scenario writer, the memory compactor and every
    patient engine's own roles (as before engines were registered, every arc gets every engine's roles, so a
    record's `engines` lists them)."""
    return Roles(
        patient=shared["patient"],
        counsellor=None,
        scenario_writer=shared["scenario_writer"],
        memory_compactor=shared["memory_compactor"],
        extra={key: shared[role] for role, key in engine_roles(kinds).items()},
    )


def arc_for(
    profile: Profile,
    harness: Roles,
    counsellor_client: Any,
    config: SimulationConfig,
    *,
    counsellor: str,
    seed: int,
    kind: str,
    preparation: Any = None,
    trial: int = 0,
) -> Arc:
    """One patient's arc with one counsellor (any client that chats: a recipe role, or another framework's model
    behind `mindcore.backends.Backend`) under patient engine `kind`, on the harness's roles moved to `trial`."""
    roles = Roles(
        patient=harness.patient,
        counsellor=counsellor_client,
        scenario_writer=harness.scenario_writer,
        memory_compactor=harness.memory_compactor,
        extra=dict(harness.extra),
    ).for_trial(trial)
    return Arc(
        profile,
        vocabulary_for(config.preset_for(kind)),
        roles,
        config,
        counsellor,
        seed,
        variant(kind),
        preparation,
        trial,
    )


def arc_schedule(schedule: Schedule, config: SimulationConfig, kind: str) -> Schedule:
    """The patient's one schedule as engine `kind`'s arcs play it: an engine with fewer sessions
    (`engine_sessions`) plays the first ones."""
    if config.sessions_for(kind) < len(schedule.sessions):
        return schedule.model_copy(update={"sessions": schedule.sessions[: config.sessions_for(kind)]})
    return schedule


def shared_roles(config: SimulationConfig) -> tuple[str, ...]:
    """Roles every arc shares (the first-scenario writer writes each patient's first scenario before its arcs,
    `first_scenario_writer` falling back to `scenario_writer`'s binding), then the recipe's patient engines'
    own (PatientAct: its appraiser for the
    structured steps and its decomposer; `PatientEngine.roles`)."""
    return (
        "patient",
        "first_scenario_writer",
        "scenario_writer",
        "memory_compactor",
        *engine_roles(config.patient_engines),
    )


def transcript_row(r: SessionRecord) -> dict[str, Any]:
    trial = {} if r.trial is None else {"trial": r.trial}
    # A patient engine that tracks a state per turn (ConsistentMI) shows it beside the chat, keyed by patient turn;
    # the other engines' lines are unchanged.
    states = [
        {"turn": t.index, **t.consistentmi.model_dump(mode="json")} for t in r.turns if t.consistentmi is not None
    ]
    return {
        "id": r.session_id,
        "patient_id": r.patient_id,
        "counsellor": r.counsellor,
        "patient_engine": r.patient_engine,
        **trial,
        "session_index": r.session_index,
        "messages": r.transcript(),
        **({"patient_states": states} if states else {}),
    }


# Sessions a `ShardWriter` holds before it writes them out as one sorted run, and the most runs merged at once
# (an open file and one line each): past that many, the runs so far are merged into one first.
RUN_ROWS = 64
MAX_RUNS = 64
# Sessions turned into Arrow at a time when a shard file is written (tens of KB each: a few MB of rows).
CONVERT_ROWS = 32
# Rows per row group in the dataset itself: a one-shard run's shard file is copied as `sessions.parquet`.
DATASET_ROW_GROUP = 128


def _run_line(r: SessionRecord) -> str:
    """A session as one line of a sorted run: its order key, the record and its transcript row, as JSON
    separated by tabs (JSON text never holds a raw tab). The transcript is encoded as the export writes it."""
    return (
        orjson.dumps(_order(r)).decode()
        + "\t"
        + r.model_dump_json()
        + "\t"
        + json.dumps(transcript_row(r), ensure_ascii=False, default=str)
        + "\n"
    )


def _line_key(line: str) -> list[Any]:
    key: list[Any] = orjson.loads(line[: line.index("\t")])
    return key


def _read_run(path: Path) -> Iterator[str]:
    # newline="\n": no newline translation, a line is exactly what `_run_line` wrote.
    with open(path, encoding="utf-8", newline="\n") as f:
        yield from f


def _merge_lines(sources: list[Iterable[str]]) -> Iterator[str]:
    """Sorted runs' lines in one order (stable: equal keys keep the order of `sources`)."""
    return heapq.merge(*sources, key=_line_key) if len(sources) > 1 else iter(sources[0])


def _batches(lines: Iterable[str]) -> Iterator[tuple[list[dict[str, Any]], list[str]]]:
    """`CONVERT_ROWS` lines at a time as (session rows, transcript lines)."""
    rows: list[dict[str, Any]] = []
    texts: list[str] = []
    for line in lines:
        _key, record, text = line.split("\t", 2)
        rows.append(orjson.loads(record))
        texts.append(text)
        if len(rows) >= CONVERT_ROWS:
            yield rows, texts
            rows, texts = [], []
    if rows:
        yield rows, texts


def _write_lines(sources: Callable[[], list[Iterable[str]]], parquet: Path, jsonl: Path, row_group_size: int) -> int:
    """Merge the sorted runs `sources()` gives into one parquet file and its transcripts (replace-writes).

    Two passes over the runs: the first only learns the schema (a field null in every session of a batch
    is typed null there; the union over all batches types it), the second converts `CONVERT_ROWS` sessions
    at a time in that schema and writes them. Nothing becomes Arrow before the shard is done, and never more
    than a row group of it at once. Returns the rows written."""
    schema: pa.Schema | None = None
    for rows, _ in _batches(_merge_lines(sources())):
        # from_pylist takes its columns from the first row: a field only some sessions have (the MindSim
        # patient's `patient_tools`) would be dropped from the batch when its first session lacks it.
        names = list(dict.fromkeys(k for r in rows for k in r))
        got = pa.Table.from_pylist([{k: r.get(k) for k in names} for r in rows]).schema
        schema = got if schema is None else pa.unify_schemas([schema, got], promote_options="permissive")
    if schema is None:
        parquet.unlink(missing_ok=True)
        atomic_write_jsonl(jsonl, [])
        return 0
    with atomic_writer(parquet, "wb") as sink, atomic_writer(jsonl, "w") as tsink:
        writer = _Batched(sink, schema, row_group_size, row_group_size)
        for rows, texts in _batches(_merge_lines(sources())):
            writer.add([pa.Table.from_pylist(rows, schema=schema)])
            tsink.write("".join(texts))
        return writer.close()


class _Batched:
    """A parquet writer fed Arrow slices, writing them `batch_rows` at a time (`row_group_size`: rows per row
    group within a write; None, one group per write)."""

    def __init__(self, sink: Any, schema: pa.Schema, batch_rows: int, row_group_size: int | None):
        self.writer = pq.ParquetWriter(sink, schema)
        self.batch_rows, self.row_group_size = batch_rows, row_group_size
        self.pending: list[pa.Table] = []
        self.held = self.written = 0

    @property
    def room(self) -> int:
        return self.batch_rows - self.held

    def add(self, tables: list[pa.Table]) -> None:
        self.pending.extend(tables)
        self.held += sum(t.num_rows for t in tables)
        if self.held >= self.batch_rows:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.concat_tables(self.pending), row_group_size=self.row_group_size)
            self.written, self.pending, self.held = self.written + self.held, [], 0

    def close(self) -> int:
        """Write what is held, close the file; returns the rows written."""
        self._flush()
        self.writer.close()
        return self.written


class ShardWriter:
    """One shard's sessions (parquet) and transcripts (JSONL), both in the dataset's order, written as the
    sessions come in: every `RUN_ROWS` sessions go to disk as one sorted run of JSON lines (in a private
    folder beside the shard files) and leave memory, `MAX_RUNS` runs are merged into one (an external merge
    sort); `close` merges the runs into the shard's two files (replace-writes: a shard is rebuilt whole by
    every run of it, never appended to). Runs are text, not Arrow: a session becomes Arrow only in `close`,
    a batch at a time, so a long shard's peak memory does not grow with its sessions. A shard that
    never filled a run is written straight from memory. `row_group_size`: `DATASET_ROW_GROUP` for a shard
    that is the whole dataset (one shard), `SHARD_ROW_GROUP` where `merge_shards` merges several."""

    def __init__(self, out: Path, shard: int, shards: int, run_rows: int | None = None):
        self.parquet, self.jsonl = RunLayout(out).sessions.shard(shard, shards)
        self.shard = shard
        self.run_rows = run_rows or RUN_ROWS
        self.runs_written = 0
        self.row_group_size = DATASET_ROW_GROUP if shards == 1 else SHARD_ROW_GROUP
        self.rows = 0
        self._held: list[SessionRecord] = []
        self._runs: list[Path] = []
        self._made = 0
        self._dir: Path | None = None

    def add(self, record: SessionRecord) -> None:
        self._held.append(record)
        self.rows += 1
        if len(self._held) >= self.run_rows:
            self._spill()

    def _spill(self) -> None:
        if self._dir is None:
            self.parquet.parent.mkdir(parents=True, exist_ok=True)
            # Named per writer: a retried Ray shard may run beside its original (`merge_shards` never lists it).
            self._dir = Path(tempfile.mkdtemp(prefix=f".runs-{self.shard:05d}-", dir=self.parquet.parent))
        held, self._held = sorted(self._held, key=_order), []
        self.runs_written += 1
        with open(self._next_run(), "w", encoding="utf-8", newline="\n") as f:
            f.writelines(_run_line(r) for r in held)
        if len(self._runs) >= MAX_RUNS:
            runs, self._runs = self._runs, []
            with open(self._next_run(), "w", encoding="utf-8", newline="\n") as f:
                f.writelines(_merge_lines([_read_run(r) for r in runs]))
            for run in runs:
                run.unlink()

    def _next_run(self) -> Path:
        assert self._dir is not None
        self._made += 1
        run = self._dir / f"{self._made:06d}.jsonl"
        self._runs.append(run)
        return run

    def close(self) -> None:
        held = sorted(self._held, key=_order)
        runs = self._runs
        _write_lines(
            lambda: [*(_read_run(r) for r in runs), (_run_line(r) for r in held)],
            self.parquet,
            self.jsonl,
            self.row_group_size,
        )
        self.discard()

    def discard(self) -> None:
        """Remove the runs (after `close`, or when the shard failed: a rerun writes its own)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir, self._runs, self._held = None, [], []


def write_shard(out: Path, shard: int, shards: int, records: list[SessionRecord]) -> None:
    """One shard's sessions (parquet) and transcripts (JSONL), both in the dataset's order, from a list
    (`ShardWriter` takes them one at a time). Rewritten whole by every run of the shard."""
    writer = ShardWriter(out, shard, shards)
    try:
        for r in records:
            writer.add(r)
        writer.close()
    finally:
        writer.discard()


def merge_shards(out: Path, shards: int, live: set[int], batch_rows: int = 128) -> int:
    """`sessions.parquet` and `transcripts.jsonl` from the shard files of a run split `shards` ways,
    in (counsellor, patient, engine, trial, session index) order — the same whatever the split, and the same as the
    local runner's. Only the `live` shards (those this run ran, each rewriting its files) count: files of
    another split or of a shard left without patients (an earlier run with other settings) are
    removed first, and so are the runs of a shard writer that was killed. Returns the rows written."""
    layout = RunLayout(out)
    folder = layout.sessions.shards
    mine = {p for i in live for p in layout.sessions.shard(i, shards)}
    for stale in [*folder.glob("*.parquet"), *folder.glob("*.jsonl")]:
        if stale not in mine:
            stale.unlink(missing_ok=True)
    for runs in folder.glob(".runs-*"):
        shutil.rmtree(runs, ignore_errors=True)
    parts = [layout.sessions.shard(i, shards) for i in sorted(live)]
    parts = [(parquet, jsonl) for parquet, jsonl in parts if parquet.is_file()]
    if not parts:
        atomic_write_jsonl(layout.transcripts, [])
        return 0
    if shards == 1:
        # The local runner's one shard is already the dataset, in its order and row groups: copied, not
        # decoded and encoded again.
        for src, dst in zip(parts[0], (layout.sessions.parquet, layout.transcripts)):
            with open(src, "rb") as f, atomic_writer(dst, "wb") as sink:
                shutil.copyfileobj(f, sink)
        rows: int = pq.ParquetFile(layout.sessions.parquet).metadata.num_rows
        return rows
    return _merge_sorted(parts, layout.sessions.parquet, layout.transcripts, batch_rows=batch_rows)


def _merge_sorted(
    parts: list[tuple[Path, Path]],
    target: Path,
    transcripts: Path,
    *,
    batch_rows: int = 128,
    row_group_size: int | None = None,
) -> int:
    """Merge files each in the dataset's order (a parquet file and its transcripts, line for line) into one
    pair in that order. Streaming: the order comes from the key columns (a few bytes per session), the rows
    move as Arrow slices, never as Python objects, and memory holds one row group per file, not the dataset.
    Returns the rows written."""
    files = [pq.ParquetFile(parquet) for parquet, _ in parts]
    # Files infer their own schema; a field that is null in every row of one file has type null
    # there. The permissive union promotes it to the type the other files saw.
    schema = pa.unify_schemas([f.schema_arrow for f in files], promote_options="permissive")
    order: list[tuple[Any, ...]] = []
    for k, f in enumerate(files):
        present = [c for c in ORDER_COLUMNS if c in f.schema_arrow.names]
        keys = f.read(columns=present, use_threads=False).to_pydict()
        n = f.metadata.num_rows
        trial = [t or 0 for t in keys["trial"]] if "trial" in keys else itertools.repeat(0, n)
        order.extend(
            zip(
                keys["counsellor"],
                keys["patient_id"],
                keys["patient_engine"],
                trial,
                keys["session_index"],
                itertools.repeat(k),
            )
        )
    order.sort()
    cursors = [_RowGroups(f, schema) for f in files]
    lines = [open(jsonl, encoding="utf-8") for _, jsonl in parts]
    try:
        with atomic_writer(target, "wb") as sink, atomic_writer(transcripts, "w") as tsink:
            writer = _Batched(sink, schema, batch_rows, row_group_size)
            for k, run in itertools.groupby(order, key=lambda t: t[5]):
                n = sum(1 for _ in run)
                while n:
                    # In pieces: one file's rows in a row (a one-shard run's are all of them) would otherwise
                    # be taken whole, the dataset in memory at once.
                    m = min(n, writer.room)
                    for _ in range(m):
                        tsink.write(lines[k].readline())
                    writer.add(cursors[k].take(m))
                    n -= m
            written = writer.close()
    finally:
        for f in lines:
            f.close()
    return written


class _RowGroups:
    """Reads one shard file forward, a row group at a time, handing out slices in the shared schema."""

    def __init__(self, f: pq.ParquetFile, schema: pa.Schema):
        self.f, self.schema, self.group, self.pos = f, schema, 0, 0
        self.table: pa.Table | None = None

    def take(self, n: int) -> list[pa.Table]:
        out = []
        while n:
            if self.table is None or self.pos >= self.table.num_rows:
                # One thread: a row group here is 32 sessions, too small for Arrow's pool to speed up, and each
                # pool thread's allocator keeps its own freed memory (peak RSS 45 MiB lower without).
                t = self.f.read_row_group(self.group, use_threads=False)
                # A shard whose schema differs (a null-typed field) goes through Python rows: Arrow's
                # cast of a null child inside list<struct> builds an invalid array (pyarrow 26).
                self.table = (
                    t if t.schema.equals(self.schema) else pa.Table.from_pylist(t.to_pylist(), schema=self.schema)
                )
                self.group, self.pos = self.group + 1, 0
            m = min(n, self.table.num_rows - self.pos)
            out.append(self.table.slice(self.pos, m))
            self.pos, n = self.pos + m, n - m
        return out


def run_simulation(
    profiles: Iterable[Profile],
    engines: Engines,
    config: SimulationConfig,
    out_dir: str | Path,
    seed: int,
    *,
    runner: Runner | None = None,
) -> SimulationSummary:
    """Simulate every arc and write `out_dir/sessions/` and `out_dir/transcripts/transcripts.jsonl`.
    `profiles`: a list, used as it is, or an iterable read lazily (`profilegen.dataset.iter_profiles`, as the CLI
    and the main job read the pool), whose profiles are held packed and decoded only while their patient runs.
    `engines` must be started (`with Engines.from_config(cfg) as engines:`); `runner` (default: this process)
    is the job's (`mindcore.runners.runner_for`), entered by the caller. The same files come out either way.
    Returns the run summary."""
    # engines.run closes this loop's HTTP clients before the loop goes away (a bare asyncio.run left them
    # to the garbage collector, which then logs "Event loop is closed" from a later loop).
    summary: SimulationSummary = engines.run(simulate_async(profiles, engines, config, out_dir, seed, runner=runner))
    return summary

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
import itertools
import json
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from pydantic import ValidationError

from mindcore.client import RoleClient
from mindcore.errors import ConfigError, EngineError, InputError
from mindcore.io import CheckpointDir, atomic_write_json, atomic_write_jsonl, atomic_writer
from mindcore.layout import RunLayout
from mindcore.manifest import record_stage
from mindcore.provenance import base_provenance
from mindcore.runners import LocalRunner, Runner
from mindsim.config import CounsellorBinding, SimulationConfig, counsellor_name
from mindsim.patient import TurnFailed
from mindsim.prompting import load_style_data
from mindsim.records import RejectionCounts, ScenarioRecord, SessionRecord, scenario_key, session_id
from mindsim.schedule import Schedule, draw_schedule
from mindsim.patient_engines import engine_roles, engines_of, variant
from mindsim.session import Arc, Roles, first_scenario_record, run_arc
from mindsim.summary import FailedArc, ShardSummary, SimulationSummary
from profilegen.moves import load_vocabulary
from profilegen.schemas import Profile

# Rows per row group in a shard file, and so per shard held in memory by the merge (sessions are
# tens of KB each: 64 shards x 32 rows is ~100 MB of rows in flight at most).
SHARD_ROW_GROUP = 32
# Layout 2: first scenarios written once per patient and shared by every counsellor (layout 1 wrote one per
# arc). Sessions of the two layouts must not be mixed in one run folder.
LAYOUT = {"simulator_layout": 2, "first_scenario": "shared per patient"}
# Failures that sink one arc but not the run: counted and reported.
ARC_FAILURES = (TurnFailed, EngineError)


def counsellor_client(engines, c: str | CounsellorBinding) -> RoleClient:
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
        for knob, table in (("register", style.register), ("verbosity", style.verbosity),
                            ("frustration_reactivity", style.frustration_reactivity)):
            if getattr(s, knob) not in table:
                problems.append(f"{knob} '{getattr(s, knob)}'")
        if problems:
            raise InputError(
                f"profile {p.profile_id}: unknown style {', '.join(problems)}; regenerate the profiles with this "
                "toolkit version or fix profilegen/data/archetypes.yaml / mindsim/data/style.yaml"
            )
    ids = [p.profile_id for p in profiles]
    if len(set(ids)) != len(ids):
        raise InputError("profiles: duplicate profile_id values; each patient needs its own id")


class _RecordStore:
    """Typed checkpoints in one folder, written exactly once: the first finished copy of a key wins and a
    late duplicate (a retried worker racing its original) is discarded and counted, never overwrites
    work that later sessions may already be built on. `save` returns the copy that counts."""

    model: type[Any]
    what: str
    fix: str

    def __init__(self, folder: Path):  # a `mindcore.layout.SessionsFolder` path
        self.dir = CheckpointDir(folder)

    def load(self, key: str) -> Any:
        if not self.dir.has(key):
            return None
        try:
            return self.model.model_validate(self.dir.read(key))
        except (ValidationError, json.JSONDecodeError) as exc:
            raise InputError(
                f"checkpoint {self.dir.path / key}.json is not a {self.what} ({exc.__class__.__name__}); {self.fix}"
            ) from exc

    def _keep(self, key: str, record: Any) -> Any:
        stored, won = self.dir.first_copy(key, record.model_dump(mode="json"))
        return record if won else self.model.model_validate(stored)

    @property
    def duplicates(self) -> int:
        return self.dir.duplicates


class SessionStore(_RecordStore):
    """Per-session durable checkpoints under `<out>/sessions/checkpoints/<session_id>.json`."""

    model, what, fix = SessionRecord, "session record", "delete it to re-simulate that session"

    def __init__(self, out_dir: Path):
        super().__init__(RunLayout(out_dir).sessions.checkpoints)

    def save(self, record: SessionRecord) -> SessionRecord:
        return self._keep(record.session_id, record)

    def all(self) -> list[SessionRecord]:
        return [r for r in (self.load(k) for k in self.dir.keys()) if r is not None]


class ScenarioStore(_RecordStore):
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
            f"{marker}: this run folder was made by a different simulator layout ({found}); "
            "use a new --out folder"
        )
    ckpts = sessions.checkpoints
    if ckpts.is_dir() and any(ckpts.glob("*.json")):
        raise InputError(
            f"{sessions.path}: sessions from an older simulator, which wrote each counsellor's first scenario "
            "separately; resuming would mix two layouts. Use a new --out folder"
        )
    atomic_write_json(marker, LAYOUT)


def select_profiles(profiles: list[Profile], config: SimulationConfig) -> list[Profile]:
    chosen = [p for p in profiles if p.in_benchmark] if config.benchmark_only else list(profiles)
    return chosen[: config.max_patients] if config.max_patients else chosen


async def simulate_shard(
    profiles: list[Profile], engines, config: SimulationConfig, out: Path, seed: int, shard: int, shards: int,
    on_session: Callable[[str], None] = lambda _id: None,
) -> ShardSummary:
    """One shard of the patients (all of them on the local runner): every patient's shared first
    scenario and its arc with each counsellor, run concurrently; then the shard's own slice of the
    sessions dataset (`sessions/shards/`). Safe to run twice at once: finished sessions are loaded,
    new ones are published create-if-absent. `on_session(session_id)` is called for every session
    that is finished, loaded or new. Returns the shard's counts (`mindsim.summary.ShardSummary`)."""
    vocab = load_vocabulary()
    store = SessionStore(out)
    scenarios = ScenarioStore(out)
    shared = {r: engines.role(r) for r in shared_roles(config)}
    counsellors = [(counsellor_name(c), counsellor_client(engines, c)) for c in config.counsellors]
    schedules = {p.profile_id: draw_schedule(p.profile_id, seed, config) for p in profiles}
    kinds = config.patient_engines
    trials = range(config.trials)
    arcs = [(p, name, kind, t) for kind in kinds for name, _ in counsellors for p in profiles for t in trials]
    # Every arc gets every engine's roles (as before engines were registered: a record's `engines` lists them).
    base_roles = Roles(patient=shared["patient"], counsellor=None, scenario_writer=shared["scenario_writer"],
                       memory_compactor=shared["memory_compactor"],
                       extra={key: shared[role] for role, key in engine_roles(kinds).items()})
    # One preparation per patient and engine, shared by the engine's variants and every counsellor.
    preparing = [e for e in engines_of(kinds) if e.prepares]
    stores = {e.name: e.preparation_store(out) for e in preparing}

    def load(key: str) -> SessionRecord | None:
        found = store.load(key)
        if found is not None:
            on_session(key)
        return found

    def save(record: SessionRecord) -> SessionRecord:
        kept = store.save(record)
        on_session(kept.session_id)
        return kept

    async def patient_arcs(p: Profile) -> dict[tuple[str, str], Any]:
        """One patient: its shared first scenario (and each preparing engine's shared preparation, e.g.
        PatientAct's decomposition), then its arc with every counsellor under every patient engine, once per
        trial (every trial shares the schedule, the first scenario and the preparation)."""
        schedule = schedules[p.profile_id]
        keys = [(name, kind, t) for kind in kinds for name, _ in counsellors for t in trials]
        try:
            first = await first_scenario_record(
                p, schedule.sessions[0], shared["first_scenario_writer"], config, seed=seed,
                load=scenarios.load, save=scenarios.save,
            )
        except ARC_FAILURES as exc:
            return dict.fromkeys(keys, exc)
        prepared: dict[str, Any] = {}
        for engine in preparing:
            try:
                prepared[engine.name] = await engine.prepare(p, seed, base_roles, config, stores[engine.name])
            except ARC_FAILURES as exc:
                prepared[engine.name] = exc  # only this engine's arcs of this patient fail; the others still run
        results = await asyncio.gather(
            *(one_arc(p, schedule, first, name, client, kind, prepared, t)
              for kind in kinds for name, client in counsellors for t in trials),
            return_exceptions=True,
        )
        return dict(zip(keys, results))

    async def one_arc(p: Profile, schedule: Schedule, first: ScenarioRecord, name: str, client: RoleClient,
                      kind: str, prepared: dict[str, Any], trial: int):
        engine = variant(kind)
        preparation = prepared.get(engine.engine.name)
        if isinstance(preparation, BaseException):
            raise preparation
        roles = Roles(patient=base_roles.patient, counsellor=client, scenario_writer=base_roles.scenario_writer,
                      memory_compactor=base_roles.memory_compactor, extra=dict(base_roles.extra)).for_trial(trial)
        arc = Arc(p, vocab, roles, config, name, seed, engine, preparation, trial)
        # One schedule per patient; an engine with fewer sessions (`engine_sessions`) plays its first ones.
        if config.sessions_for(kind) < len(schedule.sessions):
            schedule = schedule.model_copy(update={"sessions": schedule.sessions[:config.sessions_for(kind)]})
        return await run_arc(arc, schedule, first=first, load=load, save=save)

    by_patient = await asyncio.gather(*(patient_arcs(p) for p in profiles))
    results = {(p.profile_id, *key): res for p, arcs_of in zip(profiles, by_patient) for key, res in arcs_of.items()}
    failures, records = [], []
    for p, name, kind, t in arcs:
        res = results[(p.profile_id, name, kind, t)]
        if isinstance(res, ARC_FAILURES):
            failures.append(FailedArc(patient_id=p.profile_id, counsellor=name, patient_engine=kind,
                                      error=f"{type(res).__name__}: {res}", trial=t if config.trials > 1 else None))
            # The sessions this arc finished before it failed stay in the dataset, as on any rerun.
            label = {"trial": t if config.trials > 1 else None}
            res = [r.model_copy(update=label) for r in
                   (store.load(session_id(p.profile_id, name, i, seed, kind, t)) for i in range(config.sessions_for(kind)))
                   if r is not None]
        elif isinstance(res, BaseException):
            raise res
        records.extend(res)
    write_shard(out, shard, shards, records)
    return ShardSummary(
        shard=shard,
        patients=len(profiles),
        arcs=len(arcs),
        failed_arcs=failures,
        sessions_written=len(records),
        duplicate_checkpoints_discarded=store.duplicates + scenarios.duplicates
        + sum(s.duplicates for s in stores.values() if s is not None),
        ended_by_patient=sum(r.ended_by == "patient" for r in records),
        memory_repaired=sum(r.memory_update.repaired for r in records),
        memory_skipped=sum(r.memory_update.skipped for r in records),
        messages_trimmed=sum(t.trimmed for r in records for t in r.turns),
        rejected_commits=sum(len(t.rejected) for r in records for t in r.turns),
        # Per shard is exact: a patient, and so its shared first scenario, lives in one shard only.
        rejected_messages=rejected_message_totals(records),
        counsellor_flags=counsellor_flag_totals(records),
        scenario_drafts=scenario_draft_total(records),
    )


async def _shard_work(engines, payload: dict[str, Any], report: Callable[[str], None]) -> ShardSummary:
    """One shard of patients, wherever the runner runs it (`mindcore.runners`)."""
    return await simulate_shard(payload["profiles"], engines, payload["config"], Path(payload["out"]),
                                payload["seed"], payload["shard"], payload["shards"], on_session=report)


def _prepare(profiles: list[Profile], config: SimulationConfig, out: Path) -> list[Profile]:
    profiles = select_profiles(profiles, config)
    if not profiles:
        raise InputError("no profiles to simulate (check pool_only / benchmark_only and the profiles folder)")
    check_profiles(profiles)
    for engine in engines_of(config.patient_engines):
        engine.check_profiles(profiles)
    check_layout(out)
    return profiles


async def simulate_async(profiles: list[Profile], engines, config: SimulationConfig, out_dir: str | Path, seed: int,
                         *, runner: Runner | None = None) -> SimulationSummary:
    """`run_simulation` for async callers. Patients are sharded by a stable hash of their id (everything of one
    patient in one shard); the runner runs the shards (the local one: one shard, in this loop), each shard writing
    its slice of the dataset as it finishes."""
    runner = runner or LocalRunner()
    out = Path(out_dir)
    profiles = _prepare(profiles, config, out)
    resolved = str(out.resolve())
    run = await runner.map_shards(
        _shard_work, profiles, key=lambda p: p.profile_id, engines=engines, description="simulating sessions",
        total=len(profiles) * config.sessions_per_patient(),
        payload=lambda i, n, part: {"profiles": part, "config": config, "out": resolved, "seed": seed, "shard": i,
                                    "shards": n})
    return _finish(out, engines, config, seed, profiles, run.results, run.shards, run.elapsed_s, run.runner,
                   live=run.live)


def _finish(out: Path, engines, config: SimulationConfig, seed: int, profiles: list[Profile], parts: list[ShardSummary],
            shards: int, elapsed: float, runner: dict[str, Any], live: set[int]) -> SimulationSummary:
    merge_shards(out, shards, live)
    counsellors = [counsellor_name(c) for c in config.counsellors]
    kinds = config.patient_engines
    order = {(p.profile_id, name, kind, t): i for i, (kind, name, p, t) in
             enumerate((k, n, p, t) for k in kinds for n in counsellors for p in profiles for t in range(config.trials))}
    failures = sorted((f for part in parts for f in part.failed_arcs),
                      key=lambda f: order[(f.patient_id, f.counsellor, f.patient_engine, f.trial or 0)])
    shared = {r: engines.role(r) for r in shared_roles(config)}
    summary = SimulationSummary.totals(
        parts, failures,
        **base_provenance(),
        seed=seed,
        patients=len(profiles),
        counsellors=counsellors,
        patient_engines=kinds,
        trials=config.trials,
        arcs=len(order),
        sessions_expected=sum(config.sessions_for(kind) for _, _, kind, _ in order),
        elapsed_s=round(elapsed, 2),
        engines={r: c.describe() for r, c in shared.items()}
        | {n: counsellor_client(engines, c).describe() for n, c in zip(counsellors, config.counsellors)},
        usage=engines.ledger.summary(),
        config=config.model_dump(mode="json"),
        runner=runner,
    )
    layout = RunLayout(out)
    summary.write(layout.sessions.summary)
    record_stage(out, "simulation", [layout.sessions.parquet, layout.transcripts, layout.sessions.summary],
                 reads=["profiles"], counts={"sessions": summary.sessions_written, "expected": summary.sessions_expected,
                                             "failed_arcs": len(summary.failed_arcs)})
    return summary


def rejected_message_totals(records: list[SessionRecord]) -> dict[str, int]:
    """Rejected patient messages by reason. A shared first scenario's rejected openers sit in every
    counsellor's session 0, but were rejected once: they are counted once per patient."""
    kept = []
    seen_first: set[tuple[str, int]] = set()
    for r in records:
        for t in r.turns:
            if t.opening and r.scenario_shared:
                if (r.patient_id, r.seed) in seen_first:
                    continue
                seen_first.add((r.patient_id, r.seed))
            kept.extend(t.rejected_messages)
    return RejectionCounts.of(kept).model_dump(mode="json")


def scenario_draft_total(records: list[SessionRecord]) -> int:
    """Scenario drafts written for these sessions; a shared first scenario was drafted once per patient."""
    seen: set[tuple[str, int]] = set()
    total = 0
    for r in records:
        if r.scenario_shared:
            if (r.patient_id, r.seed) in seen:
                continue
            seen.add((r.patient_id, r.seed))
        total += r.scenario_drafts
    return total


def counsellor_flag_totals(records: list[SessionRecord]) -> dict[str, int]:
    """Counsellor replies carrying each flag (a reply can carry several), plus the replies checked."""
    totals = {"replies": 0, "tool_call": 0, "json": 0, "tool_syntax": 0, "cut_off": 0, "speaks_as_patient": 0}
    for r in records:
        for f in r.counsellor_flags:
            totals["replies"] += 1
            for flag in f.flags:
                totals[flag] += 1
    return totals


# The dataset's order; a one-trial run's rows carry no trial and sort as before trials existed.
ORDER_COLUMNS = ("counsellor", "patient_id", "patient_engine", "trial", "session_index")


def _order(r: SessionRecord) -> tuple[str, str, str, int, int]:
    return (r.counsellor, r.patient_id, r.patient_engine, r.trial or 0, r.session_index)


def shared_roles(config: SimulationConfig) -> tuple[str, ...]:
    """Roles every arc shares (the first-scenario writer writes each patient's first scenario before its arcs,
    `first_scenario_writer` falling back to `scenario_writer`'s binding), then the recipe's patient engines'
    own (PatientAct: its appraiser for the
    structured steps and its decomposer; `PatientEngine.roles`)."""
    return ("patient", "first_scenario_writer", "scenario_writer", "memory_compactor",
            *engine_roles(config.patient_engines))


def transcript_row(r: SessionRecord) -> dict[str, Any]:
    trial = {} if r.trial is None else {"trial": r.trial}
    return {"id": r.session_id, "patient_id": r.patient_id, "counsellor": r.counsellor,
            "patient_engine": r.patient_engine, **trial, "session_index": r.session_index, "messages": r.transcript()}


def write_shard(out: Path, shard: int, shards: int, records: list[SessionRecord]) -> None:
    """One shard's sessions (parquet) and transcripts (JSONL), both in the dataset's order. Rewritten
    whole by every run of the shard (replace-write: it is rebuilt from checkpoints, never appended to)."""
    records = sorted(records, key=_order)
    parquet, jsonl = RunLayout(out).sessions.shard(shard, shards)
    if records:
        table = pa.Table.from_pylist([r.model_dump(mode="json") for r in records])
        # Small row groups: the merge decodes one row group per shard at a time, so this bounds its memory.
        with atomic_writer(parquet, "wb") as sink:
            pq.write_table(table, sink, row_group_size=SHARD_ROW_GROUP)
    else:
        parquet.unlink(missing_ok=True)
    atomic_write_jsonl(jsonl, [transcript_row(r) for r in records])


def merge_shards(out: Path, shards: int, live: set[int], batch_rows: int = 128) -> int:
    """`sessions.parquet` and `transcripts.jsonl` from the shard files of a run split `shards` ways,
    in (counsellor, patient, engine, trial, session index) order — the same whatever the split, and the same as the
    local runner's. Streaming: the order comes from the key columns, the rows move as Arrow slices and
    memory holds one row group per shard, not the dataset. Only the `live` shards (those this run ran, each rewriting its files) count: files of
    another split or of a shard left without patients (an earlier run with other settings) are
    removed first. Returns the rows written."""
    layout = RunLayout(out)
    folder = layout.sessions.shards
    mine = {p for i in live for p in layout.sessions.shard(i, shards)}
    for stale in [*folder.glob("*.parquet"), *folder.glob("*.jsonl")]:
        if stale not in mine:
            stale.unlink(missing_ok=True)
    parts = [i for i in sorted(live) if layout.sessions.shard(i, shards)[0].is_file()]
    target, transcripts = layout.sessions.parquet, layout.transcripts
    if not parts:
        atomic_write_jsonl(transcripts, [])
        return 0
    files = [pq.ParquetFile(layout.sessions.shard(i, shards)[0]) for i in parts]
    # Shards infer their own schema; a field that is null in every row of one shard has type null
    # there. The permissive union promotes it to the type the other shards saw.
    schema = pa.unify_schemas([f.schema_arrow for f in files], promote_options="permissive")
    # The merge order from the key columns alone (a few bytes per session); the rows themselves move
    # as Arrow slices, never as Python objects, one row group per shard in memory at a time.
    order = []
    for k, f in enumerate(files):
        present = [c for c in ORDER_COLUMNS if c in f.schema_arrow.names]
        keys = f.read(columns=present).to_pydict()
        n = f.metadata.num_rows
        trial = [t or 0 for t in keys["trial"]] if "trial" in keys else itertools.repeat(0, n)
        order.extend(zip(keys["counsellor"], keys["patient_id"], keys["patient_engine"], trial, keys["session_index"],
                         itertools.repeat(k)))
    order.sort()
    cursors = [_RowGroups(f, schema) for f in files]
    lines = [open(layout.sessions.shard(i, shards)[1], encoding="utf-8") for i in parts]
    written = 0
    try:
        with atomic_writer(target, "wb") as sink, atomic_writer(transcripts, "w") as tsink:
            writer = pq.ParquetWriter(sink, schema)
            pending: list[pa.Table] = []
            held = 0
            for k, run in itertools.groupby(order, key=lambda t: t[5]):
                n = sum(1 for _ in run)
                pending.extend(cursors[k].take(n))
                for _ in range(n):
                    tsink.write(lines[k].readline())
                held += n
                if held >= batch_rows:
                    writer.write_table(pa.concat_tables(pending))
                    written, pending, held = written + held, [], 0
            if pending:
                writer.write_table(pa.concat_tables(pending))
                written += held
            writer.close()
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
                t = self.f.read_row_group(self.group)
                # A shard whose schema differs (a null-typed field) goes through Python rows: Arrow's
                # cast of a null child inside list<struct> builds an invalid array (pyarrow 26).
                self.table = t if t.schema.equals(self.schema) else pa.Table.from_pylist(t.to_pylist(), schema=self.schema)
                self.group, self.pos = self.group + 1, 0
            m = min(n, self.table.num_rows - self.pos)
            out.append(self.table.slice(self.pos, m))
            self.pos, n = self.pos + m, n - m
        return out


def run_simulation(profiles: list[Profile], engines, config: SimulationConfig, out_dir: str | Path, seed: int,
                   *, runner: Runner | None = None) -> SimulationSummary:
    """Simulate every arc and write `out_dir/sessions/` and `out_dir/transcripts/transcripts.jsonl`.
    `engines` must be started (`with Engines.from_config(cfg) as engines:`); `runner` (default: this process)
    is the job's (`mindcore.runners.runner_for`), entered by the caller. The same files come out either way.
    Returns the run summary."""
    # engines.run closes this loop's HTTP clients before the loop goes away (a bare asyncio.run left them
    # to the garbage collector, which then logs "Event loop is closed" from a later loop).
    return engines.run(simulate_async(profiles, engines, config, out_dir, seed, runner=runner))

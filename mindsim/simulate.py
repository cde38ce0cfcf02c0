"""Running the simulator over a pool of profiles (MindEval2/MindSim §4.2 and §5.1: every patient's arc against
each counsellor under test, with the schedule held fixed across counsellors).

The unit of work is a patient: its first scenario is written once (checkpointed under
`sessions/scenarios/`), then its arcs, one per counsellor, all open with that same scenario. Every patient
and every arc is a coroutine and the engine's own concurrency limit decides how many requests are in flight,
so conversations never run one after another (and a distributed runner can shard by patient). Each finished
session is checkpointed as its own file under a content-derived id; a rerun (also after SIGKILL) skips
finished sessions and resumes each arc after its last one. At the end the sessions dataset and the
transcript export are rebuilt from the checkpoints, so every session appears exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mindcore.client import RoleClient
from mindcore.config import RoleSpec
from mindcore.errors import ConfigError, EngineError, InputError
from mindcore.io import CheckpointDir, atomic_write_json, atomic_write_jsonl, atomic_write_parquet
from mindcore.provenance import base_provenance
from mindcore.runner import progress_bar
from mindsim.config import CounsellorBinding, SimulationConfig, counsellor_name
from mindsim.patient import TurnFailed
from mindsim.prompting import load_style_data
from mindsim.records import RejectionCounts, ScenarioRecord, SessionRecord, scenario_key
from mindsim.schedule import Schedule, draw_schedule
from mindsim.session import Roles, first_scenario_record, run_arc
from profilegen.moves import load_vocabulary
from profilegen.schemas import Profile

SESSIONS_DIR = "sessions"
CHECKPOINTS_DIR = "checkpoints"
SCENARIOS_DIR = "scenarios"
LAYOUT_FILE = "layout.json"
# Layout 2: first scenarios written once per patient and shared by every counsellor (layout 1 wrote one per
# arc). Sessions of the two layouts must not be mixed in one run folder.
LAYOUT = {"simulator_layout": 2, "first_scenario": "shared per patient"}
PARQUET_NAME = "sessions.parquet"
TRANSCRIPTS = Path("transcripts") / "transcripts.jsonl"
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
    spec = RoleSpec(engine=c.engine, model=c.model, temperature=c.temperature, max_tokens=c.max_tokens)
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

    def __init__(self, out_dir: Path, sub: str):
        self.dir = CheckpointDir(out_dir / SESSIONS_DIR / sub)

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
        super().__init__(out_dir, CHECKPOINTS_DIR)

    def save(self, record: SessionRecord) -> SessionRecord:
        return self._keep(record.session_id, record)

    def all(self) -> list[SessionRecord]:
        return [r for r in (self.load(k) for k in self.dir.keys()) if r is not None]


class ScenarioStore(_RecordStore):
    """Each patient's first scenario under `<out>/sessions/scenarios/<patient_id>-<seed>.json`."""

    model, what = ScenarioRecord, "first-scenario record"
    fix = "use a new --out folder (deleting it would give the counsellors already run a different first session)"

    def __init__(self, out_dir: Path):
        super().__init__(out_dir, SCENARIOS_DIR)

    def save(self, record: ScenarioRecord) -> ScenarioRecord:
        return self._keep(scenario_key(record.patient_id, record.seed), record)


def check_layout(out: Path) -> None:
    """Refuse a run folder holding sessions from the per-arc first-scenario layout; mark a fresh one."""
    marker = out / SESSIONS_DIR / LAYOUT_FILE
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
    ckpts = out / SESSIONS_DIR / CHECKPOINTS_DIR
    if ckpts.is_dir() and any(ckpts.glob("*.json")):
        raise InputError(
            f"{out / SESSIONS_DIR}: sessions from an older simulator, which wrote each counsellor's first scenario "
            "separately; resuming would mix two layouts. Use a new --out folder"
        )
    atomic_write_json(marker, LAYOUT)


def select_profiles(profiles: list[Profile], config: SimulationConfig) -> list[Profile]:
    chosen = [p for p in profiles if p.in_benchmark] if config.benchmark_only else list(profiles)
    return chosen[: config.max_patients] if config.max_patients else chosen


async def simulate_async(
    profiles: list[Profile], engines, config: SimulationConfig, out_dir: str | Path, seed: int
) -> dict[str, Any]:
    out = Path(out_dir)
    profiles = select_profiles(profiles, config)
    if not profiles:
        raise InputError("no profiles to simulate (check pool_only / benchmark_only and the profiles folder)")
    check_profiles(profiles)
    check_layout(out)
    vocab = load_vocabulary()
    store = SessionStore(out)
    scenarios = ScenarioStore(out)
    shared = {r: engines.role(r) for r in ("patient", "scenario_writer", "memory_compactor")}
    counsellors = [(counsellor_name(c), counsellor_client(engines, c)) for c in config.counsellors]
    schedules = {p.profile_id: draw_schedule(p.profile_id, seed, config) for p in profiles}
    arcs = [(p, name) for name, _ in counsellors for p in profiles]
    t0 = time.monotonic()
    with progress_bar() as progress:
        task = progress.add_task("simulating sessions", total=len(arcs) * config.sessions)

        async def patient_arcs(p: Profile) -> dict[str, Any]:
            """One patient: its shared first scenario, then its arc with every counsellor."""
            schedule = schedules[p.profile_id]
            try:
                first = await first_scenario_record(
                    p, schedule.sessions[0], shared["scenario_writer"], config, seed=seed,
                    load=scenarios.load, save=scenarios.save,
                )
            except ARC_FAILURES as exc:
                return {name: exc for name, _ in counsellors}
            results = await asyncio.gather(
                *(one_arc(p, schedule, first, name, client) for name, client in counsellors), return_exceptions=True
            )
            return {name: res for (name, _), res in zip(counsellors, results)}

        async def one_arc(p: Profile, schedule: Schedule, first: ScenarioRecord, name: str, client: RoleClient):
            roles = Roles(patient=shared["patient"], counsellor=client,
                          scenario_writer=shared["scenario_writer"], memory_compactor=shared["memory_compactor"])
            return await run_arc(
                p, schedule, vocab, roles, config, counsellor_name=name, seed=seed, first=first,
                load=store.load, save=store.save, on_session=lambda: progress.advance(task),
            )

        by_patient = await asyncio.gather(*(patient_arcs(p) for p in profiles))
    results = {(p.profile_id, name): res for p, arcs_of in zip(profiles, by_patient) for name, res in arcs_of.items()}
    failures = []
    for p, name in arcs:
        res = results[(p.profile_id, name)]
        if isinstance(res, ARC_FAILURES):
            failures.append({"patient_id": p.profile_id, "counsellor": name, "error": f"{type(res).__name__}: {res}"})
        elif isinstance(res, BaseException):
            raise res
    elapsed = time.monotonic() - t0
    records = export(out, store, {p.profile_id for p in profiles}, [n for n, _ in counsellors], seed)
    summary = {
        **base_provenance(),
        "seed": seed,
        "patients": len(profiles),
        "counsellors": [n for n, _ in counsellors],
        "arcs": len(arcs),
        "sessions_expected": len(arcs) * config.sessions,
        "sessions_written": len(records),
        "failed_arcs": failures,
        "duplicate_checkpoints_discarded": store.duplicates + scenarios.duplicates,
        "ended_by_patient": sum(r.ended_by == "patient" for r in records),
        "memory_repaired": sum(r.memory_update.repaired for r in records),
        "rejected_commits": sum(len(t.rejected) for r in records for t in r.turns),
        "rejected_messages": rejected_message_totals(records),
        "counsellor_flags": counsellor_flag_totals(records),
        "elapsed_s": round(elapsed, 2),
        "engines": {r: c.describe() for r, c in shared.items()} | {n: c.describe() for n, c in counsellors},
        "usage": engines.ledger.summary(),
        "config": config.model_dump(mode="json"),
    }
    atomic_write_json(out / SESSIONS_DIR / "summary.json", summary)
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


def counsellor_flag_totals(records: list[SessionRecord]) -> dict[str, int]:
    """Counsellor replies carrying each flag (a reply can carry several), plus the replies checked."""
    totals = {"replies": 0, "tool_call": 0, "json": 0, "tool_syntax": 0, "cut_off": 0, "speaks_as_patient": 0}
    for r in records:
        for f in r.counsellor_flags:
            totals["replies"] += 1
            for flag in f.flags:
                totals[flag] += 1
    return totals


def export(out: Path, store: SessionStore, patient_ids: set[str], counsellors: list[str], seed: int) -> list[SessionRecord]:
    """Rebuild the sessions dataset and transcript export from the checkpoints of this run's arcs."""
    records = [
        r for r in store.all() if r.patient_id in patient_ids and r.counsellor in counsellors and r.seed == seed
    ]
    records.sort(key=lambda r: (r.counsellor, r.patient_id, r.session_index))
    rows = [r.model_dump(mode="json") for r in records]
    if rows:
        atomic_write_parquet(out / SESSIONS_DIR / PARQUET_NAME, rows)
    atomic_write_jsonl(
        out / TRANSCRIPTS,
        [
            {"id": r.session_id, "patient_id": r.patient_id, "counsellor": r.counsellor,
             "session_index": r.session_index, "messages": r.transcript()}
            for r in records
        ],
    )
    return records


def run_simulation(profiles: list[Profile], engines, config: SimulationConfig, out_dir: str | Path, seed: int) -> dict[str, Any]:
    """Simulate every arc and write `out_dir/sessions/` and `out_dir/transcripts/transcripts.jsonl`.
    `engines` must be started (`with Engines.from_config(cfg) as engines:`). Returns the run summary."""
    return asyncio.run(simulate_async(profiles, engines, config, out_dir, seed))

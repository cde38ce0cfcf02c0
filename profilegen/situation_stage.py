"""The profile stage's second source (`profiles.source: patientact-situations`): one PatientAct profile per
clinical situation of a folder `mindsim import patientact-situations` wrote, through `situation_chain`.

Every scaffold is sampled and the priors checked before the first call, so a bad folder is one `error:` line and
nothing is written. Each situation's outcome is checkpointed under a key derived from the situation, scaffold,
seed, round limits, prompts and models (a rerun resumes; a changed prompt or model starts over); a failure of the
transport is not checkpointed (a rerun retries it), output that never fit a schema is (its re-asks were its
retries). Every situation that finished is kept, in the pool and the benchmark (the paper simulates each of its
situations once); one whose validation never passed is kept too, as the authors' generator keeps it, and counted
in the summary (`situations.validation_failed`) with its verdicts on the row.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from mindsimkit.mindcore import __version__
from mindsimkit.mindcore.errors import EngineError, InputError, StructuredOutputError
from mindsimkit.mindcore.io import CheckpointDir, atomic_write_json, atomic_write_jsonl, off_loop
from mindsimkit.mindcore.layout import ProfilesFolder, RunLayout
from mindsimkit.mindcore.manifest import record_stage
from mindsimkit.mindcore.prompts import template_hash
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.mindcore.runner import gather_progress
from mindsimkit.profilegen.anchors import style_for
from mindsimkit.profilegen.config import ProfilesConfig
from mindsimkit.profilegen.dataset import write_profiles
from mindsimkit.profilegen.patientact_inputs import read_inputs
from mindsimkit.profilegen.schemas import Failure, Profile, ProfileShape, Provenance, RoleModel, TemplateHash
from mindsimkit.profilegen.situation_chain import (
    DATA_FILES,
    TEMPLATES,
    ChainInput,
    brief,
    check_priors,
    generate_situation_profile,
    sample_scaffold,
    situation_id,
)
from mindsimkit.profilegen.situation_schemas import Scaffold, SituationRecord, shape_data

ROLES = ("profile_writer", "screener")
SOURCE = "patientact-situations"


class SituationOutcome(BaseModel):
    """What happened to one situation."""

    model_config = ConfigDict(extra="forbid")
    situation_id: str
    status: Literal["ok", "failed"]
    record: SituationRecord | None = None
    failure: Failure | None = None


class SituationStats(BaseModel):
    """The chain's counts over the run (in `profiles/summary.json` under `situations`)."""

    model_config = ConfigDict(extra="forbid")
    folder: str = Field(description="The imported folder read.")
    situations: int = Field(description="Situations in the folder.")
    with_outline: int = Field(description="Situations whose disease outline was given to writer and validator.")
    validated: int = Field(description="Profiles whose last validation passed.")
    validation_failed: int = Field(description="Profiles kept after every validation round failed.")
    revised: int = Field(description="Profiles generated more than once (a validation failed).")
    demographics_unresolved: int = Field(description="Generations whose demographics loop ran out of rounds.")
    demographics_invalid: int = Field(
        0, description="Demographics rounds whose answer stayed invalid after its re-asks (the loop asked again)."
    )
    with_rule_conflicts: int = Field(description="Profiles for which the conflict rules fired at least once.")
    failed: dict[str, int] = Field(description="Situations that failed, by step.")


class _Plan(BaseModel):
    model_config = ConfigDict(frozen=True)
    inputs: list[tuple[ChainInput, Scaffold]]
    folder: Path
    demographics_rounds: int
    validation_rounds: int


def plan(cfg: ProfilesConfig, seed: int) -> _Plan:
    """Read the folder and sample every scaffold (no LLM); InputError on anything wrong with the folder."""
    if cfg.situations is None:  # the config's own check refuses this; kept for callers that build one by hand
        raise InputError("profiles.situations is empty; give the folder `mindsim import patientact-situations` wrote")
    folder = cfg.situations.expanduser()
    if not folder.is_dir():
        raise InputError(
            f"profiles.situations: {folder} is not a folder; run `mindsim import patientact-situations "
            f"SITUATIONS.json --priors attribute_priors.json --out {folder}` first, or fix the path"
        )
    got = read_inputs(folder)
    if got.priors is None:
        raise InputError(
            f"{folder}: imported without priors, and the scaffold is sampled from them; import again "
            "with --priors attribute_priors.json (and --disease-priors disease_priors.json)"
        )
    check_priors(got.priors, str(folder))
    items = []
    for i, s in enumerate(got.situations):
        sid = situation_id(i, s)
        items.append(
            (
                ChainInput(situation_id=sid, situation=s, outline=got.outline(s.disease_key)),
                sample_scaffold(got.priors, s.disease_key, seed, sid),
            )
        )
    d_rounds, v_rounds = rounds(cfg)
    return _Plan(inputs=items, folder=folder, demographics_rounds=d_rounds, validation_rounds=v_rounds)


# The paper's count of situations (§4.1), what a plan assumes before the folder is imported.
PAPER_SITUATIONS = 40


def situation_count(cfg: ProfilesConfig) -> int:
    """Situations of the imported folder, or the paper's 40 when it is not imported yet (for plans)."""
    folder = cfg.situations.expanduser() if cfg.situations is not None else None
    if folder is None or not (folder / "import.json").is_file():
        return PAPER_SITUATIONS
    return len(read_inputs(folder).situations)


def rounds(cfg: ProfilesConfig) -> tuple[int, int]:
    """The demographics and validation round limits: the recipe's, else the authors' (the data file)."""
    data = shape_data()
    return (
        cfg.demographics_rounds or int(data["demographics_rounds"]),
        cfg.validation_rounds or int(data["validation_rounds"]),
    )


def prompt_hashes() -> list[TemplateHash]:
    return [
        *(TemplateHash(template=t, sha256=template_hash(t)) for t in TEMPLATES),
        *(
            TemplateHash(template=f"profilegen:data/{f}", sha256=template_hash(f"data/{f}", package="profilegen"))
            for f in DATA_FILES
        ),
    ]


def provenance(engines: Any, seed: int) -> Provenance:
    roles = [
        RoleModel(role=r, engine=str(d["engine"]), model=str(d["model"]))
        for r in ROLES
        for d in [engines.role(r).describe()]
    ]
    return Provenance(
        seed=seed,
        toolkit_version=__version__,
        roles=roles,
        prompts=prompt_hashes(),
        shape=ProfileShape(patientact=True),
    )


def checkpoint_key(inp: ChainInput, scaffold: Scaffold, rounds: tuple[int, int], prov: Provenance) -> str:
    payload = json.dumps(
        [
            inp.model_dump(mode="json"),
            scaffold.model_dump(mode="json"),
            list(rounds),
            prov.model_dump(mode="json", include={"seed", "roles", "prompts"}),
        ],
        sort_keys=True,
    )
    return f"{inp.situation_id}-{hashlib.sha256(payload.encode()).hexdigest()[:10]}"


async def one_situation(
    writer: Any,
    validator: Any,
    inp: ChainInput,
    scaffold: Scaffold,
    p: _Plan,
    prov: Provenance,
    checkpoints: CheckpointDir | None,
) -> SituationOutcome:
    rounds = (p.demographics_rounds, p.validation_rounds)
    key = checkpoint_key(inp, scaffold, rounds, prov)
    if checkpoints is not None and checkpoints.has(key):
        return SituationOutcome.model_validate(checkpoints.read(key))
    progress = {"step": "problem_formulation"}
    try:
        record = await generate_situation_profile(
            writer,
            validator,
            inp,
            scaffold,
            demographics_rounds=rounds[0],
            validation_rounds=rounds[1],
            progress=progress,
        )
        outcome = SituationOutcome(situation_id=inp.situation_id, status="ok", record=record)
    except EngineError as exc:
        outcome = SituationOutcome(
            situation_id=inp.situation_id,
            status="failed",
            failure=Failure(
                profile_id=inp.situation_id,
                stage=progress["step"],
                error=f"{type(exc).__name__}: {exc}",
                retry_on_rerun=not isinstance(exc, StructuredOutputError),
            ),
        )
    if checkpoints is not None and not (outcome.failure and outcome.failure.retry_on_rerun):
        stored, _ = await off_loop(checkpoints.first_copy, key, outcome.model_dump(mode="json"))
        return SituationOutcome.model_validate(stored)
    return outcome


def to_profile(record: SituationRecord, seed: int, prov: Provenance) -> Profile:
    """A chain record as a row of profiles.parquet: the simulator's contract (id, case summary, writer brief,
    style, goal, pool flags) and the record itself; no persona parts, which this source does not have."""
    pid = "s-" + hashlib.sha256(f"{seed}:{record.situation_id}".encode()).hexdigest()[:12]
    return Profile(
        profile_id=pid,
        style=style_for(record.situation_id, seed),
        goal=record.profile.problem_formulation.goal,
        case_summary=brief(record, full=False),
        writer_brief=brief(record, full=True),
        in_pool=True,
        in_benchmark=True,
        provenance=prov,
        situation_profile=record,
    )


def seedless_brief(record: SituationRecord) -> str:
    """The writer brief without the scaffold's core-belief theme and attachment style, for PatientAct's
    decomposition: its figure builds the memory from the profile alone, and the seeds are what the raters and the
    profile judge are asked to recover from the profile."""
    return brief(record, full=True, seeds=False)


async def situation_outcomes(
    engines: Any, p: _Plan, prov: Provenance, checkpoints: CheckpointDir | None, concurrency: int
) -> list[SituationOutcome]:
    writer, validator = engines.role("profile_writer"), engines.role("screener")
    gate = asyncio.Semaphore(concurrency)

    async def one(inp: ChainInput, scaffold: Scaffold) -> SituationOutcome:
        async with gate:
            return await one_situation(writer, validator, inp, scaffold, p, prov, checkpoints)

    return await gather_progress(
        (one(i, s) for i, s in p.inputs),  # type: ignore[return-value]
        "profiles: situation → formulation → validation",
        outcome=lambda o: {"ok": "kept"}.get(o.status, o.status),
    )


def stats(p: _Plan, outcomes: list[SituationOutcome]) -> SituationStats:
    recs = [o.record for o in outcomes if o.record is not None]
    return SituationStats(
        folder=str(p.folder),
        situations=len(p.inputs),
        with_outline=sum(i.outline is not None for i, _ in p.inputs),
        validated=sum(r.passed for r in recs),
        validation_failed=sum(not r.passed for r in recs),
        revised=sum(r.stats.generations > 1 for r in recs),
        demographics_unresolved=sum(r.stats.demographics_unresolved for r in recs),
        demographics_invalid=sum(r.stats.demographics_invalid for r in recs),
        with_rule_conflicts=sum(bool(r.stats.rule_conflicts) for r in recs),
        failed=dict(Counter(o.failure.stage for o in outcomes if o.failure)),
    )


def write_outputs(
    out_dir: str | Path,
    p: _Plan,
    cfg: ProfilesConfig,
    seed: int,
    prov: Provenance,
    outcomes: list[SituationOutcome],
    engines: Any,
    recipe_name: str | None,
) -> tuple[Path, list[Profile]]:
    folder = RunLayout(Path(out_dir)).profiles.path
    files = ProfilesFolder(folder)
    kept = [to_profile(o.record, seed, prov) for o in outcomes if o.record is not None]
    write_profiles(kept, folder)
    atomic_write_jsonl(files.failures, [o.failure.model_dump() for o in outcomes if o.failure])
    atomic_write_json(
        files.provenance,
        {
            **base_provenance(),
            "recipe": recipe_name,
            "seed": seed,
            "config": cfg.model_dump(mode="json"),
            "profiles": prov.model_dump(mode="json"),
            "engines": engines.describe(),
        },
    )
    return folder, kept


def summary_line(s: SituationStats, kept: int, folder: Path) -> str:
    failed = sum(s.failed.values())
    return (
        f"[bold]profiles[/bold] (situations): {s.situations} situations from {s.folder} ({s.with_outline} with an "
        f"outline) → {kept} kept, {s.validated} validated, {s.validation_failed} kept after every validation "
        f"round failed, {s.revised} revised, {s.demographics_unresolved} demographics loops ran out "
        f"({s.demographics_invalid} invalid rounds), {failed} "
        f"failed {s.failed or ''} → {folder}"
    )


def finish_record(folder: Path, files: list[Path], s: SituationStats, kept: int, console: Console) -> None:
    record_stage(
        folder.parent,
        "profiles",
        files,
        counts={
            "candidates": s.situations,
            "kept": kept,
            "pool": kept,
            "benchmark": kept,
            "failed": sum(s.failed.values()),
        },
    )
    console.print(summary_line(s, kept, folder))
    if s.validation_failed:
        console.print(
            f"[yellow]warning:[/yellow] profiles: {s.validation_failed} profile(s) never passed "
            "validation and were kept with their last verdict (profiles.validation_rounds bounds the "
            "rounds; each row's situation_profile.stats.validations has them)"
        )

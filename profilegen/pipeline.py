"""The profile job: stages 1–5 end to end (MindEval2 §4.1 and Appendix C).

`run_profiles(recipe, engines, out_dir, config)` is synchronous (it drives its own event loop through
`Engines.run`) and must be called from the main thread; `arun_profiles` is for async callers and
always takes the plain async path. Stages 1–2 (no LLM) run in process; stages 3–4
run as a distilabel pipeline (`profilegen.distilabel_steps`) when the engines can be shared with
distilabel's worker processes, else on the plain async path — both through the same per-patient code
(`profilegen.generate`) and the same per-item checkpoints; stage 5 runs on the clean profiles.

Writes `out_dir/profiles/`: profiles.parquet (kept profiles: clean and minor, with pool/benchmark flags),
case_summaries/<id>.md, pool_table.md (pool vs population, for the card), failures.jsonl, summary.json, provenance.json,
checkpoints/.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from mindsimkit.mindcore import __version__
from mindsimkit.mindcore.console import out_console
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.budget import tokenizer_for, worst_case_tokens
from mindsimkit.mindcore.io import CheckpointDir, atomic_write_json, atomic_write_jsonl, atomic_write_text
from mindsimkit.mindcore.layout import ProfilesFolder, RunLayout
from mindsimkit.mindcore.manifest import record_stage
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.mindcore.runner import gather_progress
from mindsimkit.mindcore.runners import LocalRunner, Runner
from mindsimkit.profilegen import report
from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.config import ProfilesConfig, profiles_config, resolve_causal_checks
from mindsimkit.profilegen.dataset import write_profiles
from mindsimkit.profilegen.formulation import draft_model
from mindsimkit.profilegen.generate import ROLES, Outcome, make_profile_checkpointed, prompt_hashes
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.schemas import AnchoredRow, ProfileShape, Provenance, RoleModel
from mindsimkit.profilegen.screen import verdict_model
from mindsimkit.profilegen.select import select_profiles
from mindsimkit.profilegen import situation_stage as sstage


class ProfilesSummary(BaseModel):
    """What the profile job did, in numbers (saved as summary.json)."""

    folder: str = Field(description="The dataset folder written.")
    runner: str = Field(description="'distilabel', 'distilabel-ray' (RayPipeline) or 'async'.")
    runner_note: str = Field("", description="Why the plain async path was used, when it was.")
    persona_source: str = Field(description="Where personas came from.")
    personas_read: int = Field(description="Persona records read.")
    skipped_under_18: int = Field(description="Records skipped as under 18.")
    candidates: int = Field(description="Anchored candidates sent to the writer.")
    failed: dict[str, int] = Field(description="Failures by stage (engine errors, invalid output).")
    dropped_serious: int = Field(description="Still serious after the revisions; not kept.")
    verdicts: dict[str, int] = Field(description="Final verdict counts of kept and dropped profiles.")
    revised: int = Field(description="Profiles revised at least once.")
    discarded_quotes: int = Field(description="Judge faults discarded because the quote was not in the profile.")
    kept: int = Field(description="Rows in profiles.parquet (clean + minor).")
    pool: int = Field(description="Patients in the validation pool.")
    benchmark: int = Field(description="Patients in the benchmark subset.")
    cover_size: int = Field(description="Patients the set cover took.")
    distinct_values: int = Field(description="Distinct attribute values among clean profiles.")
    uncovered: list[str] = Field(description="Values the pool could not cover (pool too small).")
    poor_qol_floor: int = Field(description="Poor-QoL patients the pool must hold.")
    poor_qol_in_pool: int = Field(description="Poor-QoL patients the pool holds.")
    usage: dict[str, Any] = Field(default_factory=dict, description="Token and latency ledger per role.")
    warnings: list[str] = Field(default_factory=list, description="Setup problems worth fixing before a real run.")
    situations: sstage.SituationStats | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The situation source's chain counts (profiles.source: patientact-situations).",
    )


def _budget_warnings(engines: Any, shape: ProfileShape | None = None) -> list[str]:
    """The writer's and screener's budgets against their schemas' longest answers (mindcore.budget,
    counted with the engine's tokenizer where it serves one). `mindsim`'s preflight refuses a recipe
    whose budgets are too small before any stage; a caller that skipped it gets this warning."""
    shape = shape or ProfileShape()
    short = []
    for role, name, model in (
        (
            "profile_writer",
            "formulation",
            draft_model(
                shape.text_scale,
                causal=bool(shape.causal_checks),
                patientact=shape.patientact,
                when_forms=shape.when_forms,
            ),
        ),
        ("screener", "screen", verdict_model(shape.screen_max_faults)),
    ):
        client = engines.role(role)
        counter = tokenizer_for(client.backend)
        worst = worst_case_tokens(model.model_json_schema(), name=name, count=counter)
        budget = client.spec.max_tokens
        if worst.tokens is not None and budget is not None and budget < worst.tokens:
            short.append(
                f"roles.{role}.max_tokens is {budget}; the {name} JSON can need {worst.tokens} tokens "
                f"(counted with {'the engine tokenizer' if counter else 'one token per byte'})"
            )
    if not short:
        return []
    return [
        "; ".join(short) + " — longer answers will be cut off and counted as failures: raise the budgets "
        "to at least those numbers"
    ]


def _provenance(engines: Any, seed: int, cfg: ProfilesConfig) -> Provenance:
    roles = []
    for role in ROLES:
        d = engines.role(role).describe()
        roles.append(RoleModel(role=role, engine=str(d["engine"]), model=str(d["model"])))
    shape = cfg.shape
    return Provenance(
        seed=seed,
        toolkit_version=__version__,
        roles=roles,
        prompts=prompt_hashes(shape.causal_checks, shape.patientact),
        shape=shape,
    )


async def _async_outcomes(
    engines: Any, rows: list[AnchoredRow], cfg: ProfilesConfig, prov: Provenance, checkpoints: CheckpointDir
) -> list[Outcome]:
    writer, screener = engines.role("profile_writer"), engines.role("screener")
    gate = asyncio.Semaphore(cfg.concurrency)

    async def one(row: AnchoredRow) -> Outcome:
        async with gate:
            return await make_profile_checkpointed(writer, screener, row, cfg.max_revisions, prov, checkpoints)

    return await gather_progress(
        (one(r) for r in rows), "profiles: write → screen", outcome=lambda o: {"ok": "kept"}.get(o.status, o.status)
    )


def _can_share(engines: Any) -> str:
    """Empty when distilabel workers can reach every engine the roles use, else the reason."""
    try:
        for role in ROLES:
            engines.wire_spec(role)
    except Exception as exc:  # ConfigError for in-process backends (the fake one in tests)
        return f"distilabel workers cannot reach this engine ({exc}); used the plain async path"
    return ""


class _Job(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    cfg: ProfilesConfig
    seed: int
    folder: Path
    checkpoints: Any
    personas: Any
    rates: Any
    rows: list[AnchoredRow]
    prov: Provenance
    recipe_name: str | None
    warnings: list[str]


def _config(recipe: Any, config: ProfilesConfig | None) -> ProfilesConfig:
    if config is None:
        return profiles_config(recipe)
    # handed in with causal_checks still empty: resolved against this recipe's patient engines
    return resolve_causal_checks(config, getattr(recipe, "simulation", None))


def _prepare(recipe: Any, engines: Any, out_dir: str | Path, config: ProfilesConfig | None) -> _Job:
    """Stages 1–2 (no LLM) and the run's provenance."""
    cfg = _config(recipe, config)
    seed = cfg.seed if cfg.seed is not None else recipe.seed
    folder = RunLayout(Path(out_dir)).profiles.path
    personas = load_personas(cfg.personas, cfg.candidates, seed)
    rates = load_rates(cfg.rates)
    return _Job(
        cfg=cfg,
        seed=seed,
        folder=folder,
        checkpoints=CheckpointDir(ProfilesFolder(folder).checkpoints),
        personas=personas,
        rates=rates,
        rows=anchor_personas(personas.rows, rates, seed),
        prov=_provenance(engines, seed, cfg),
        recipe_name=getattr(recipe, "name", None),
        warnings=_budget_warnings(engines, cfg.shape),
    )


def _finish(
    job: _Job, engines: Any, outcomes: list[Outcome], runner: str, note: str, console: Console
) -> ProfilesSummary:
    """Stage 5 and every output file."""
    cfg, folder = job.cfg, job.folder
    files = ProfilesFolder(folder)
    kept = [o.profile for o in outcomes if o.status == "ok" and o.profile is not None]
    # The paper selects from clean profiles only; `pool_verdicts` can widen that (a small model's
    # judge rarely says "clean"), and the card states which verdicts the pool came from.
    clean = [p for p in kept if p.screen is not None and p.screen.verdict in job.cfg.pool_verdicts]
    clean, sel = select_profiles(
        clean, cfg.pool_size, cfg.benchmark_size, cfg.poor_qol_floor, job.seed, benchmark_poor=cfg.benchmark_poor_floor
    )
    flagged = {p.profile_id: p for p in clean}
    kept = [flagged.get(p.profile_id, p) for p in kept]
    write_profiles(kept, folder)
    atomic_write_text(files.pool_table, report.markdown(clean, job.rates))
    atomic_write_jsonl(files.failures, [o.failure.model_dump() for o in outcomes if o.failure])
    atomic_write_json(
        files.provenance,
        {
            **base_provenance(),
            "recipe": job.recipe_name,
            "seed": job.seed,
            "config": cfg.model_dump(mode="json"),
            "profiles": job.prov.model_dump(mode="json"),
            "engines": engines.describe(),
        },
    )
    screens = [o.screen for o in outcomes if o.screen is not None]
    summary = ProfilesSummary(
        folder=str(folder),
        runner=runner,
        runner_note=note,
        persona_source=job.personas.source,
        personas_read=job.personas.read,
        skipped_under_18=job.personas.skipped_under_18,
        candidates=len(job.rows),
        failed=dict(Counter(o.failure.stage for o in outcomes if o.failure)),
        dropped_serious=sum(o.status == "dropped" for o in outcomes),
        verdicts=dict(Counter(s.verdict for s in screens)),
        revised=sum(s.revisions > 0 for s in screens),
        discarded_quotes=sum(s.discarded_faults for s in screens),
        kept=len(kept),
        pool=len(sel.pool),
        benchmark=len(sel.benchmark),
        cover_size=sel.cover_size,
        distinct_values=sel.n_values,
        uncovered=sel.uncovered,
        poor_qol_floor=sel.poor_floor,
        poor_qol_in_pool=sel.poor_in_pool,
        usage=engines.ledger.summary(),
        warnings=job.warnings,
    )
    # A pool short of its size goes on (the run simulates who there is) with one line saying so; an empty one is
    # the job's error line instead.
    if summary.kept and summary.pool < cfg.pool_size:
        summary.warnings = [*summary.warnings, short_pool_line(summary, cfg)]
    atomic_write_json(files.summary, summary.model_dump(mode="json"))
    record_stage(
        folder.parent,
        "profiles",
        [
            files.parquet,
            files.pool_table,
            files.failures,
            files.provenance,
            files.summary,
            *(files.case_summary(p.profile_id) for p in kept),
        ],
        counts={
            "candidates": summary.candidates,
            "kept": summary.kept,
            "pool": summary.pool,
            "benchmark": summary.benchmark,
            "failed": sum(summary.failed.values()),
        },
    )
    if clean:
        report.print_table(clean, job.rates, console)
    console.print(_summary_line(summary))
    for w in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    return summary


def run_profiles(
    recipe: Any,
    engines: Any,
    out_dir: str | Path,
    config: ProfilesConfig | None = None,
    console: Console | None = None,
    *,
    runner: Runner | None = None,
) -> ProfilesSummary:
    """Run stages 1–5 and write `out_dir/profiles/`. Synchronous; call it from the main thread (distilabel
    installs signal handlers and starts worker processes). `runner`: the job's (`mindcore.runners`, entered by
    the caller; default this process); stages 3–4 run through distilabel as the runner says (on Ray, its
    RayPipeline with `ray.profile_replicas` step replicas), which needs `use_distilabel` and, for a runner whose
    work runs in other processes, engines they can reach over HTTP."""
    runner = runner or LocalRunner()
    cfg = _config(recipe, config)
    if cfg.source == sstage.SOURCE:
        # The situation chain runs on the plain async path: its steps depend on each other's answers, which a
        # distilabel step graph of independent rows does not express.
        return _situation_job(recipe, engines, out_dir, cfg, console or out_console(), engines.run)
    job = _prepare(recipe, engines, out_dir, config)
    for w in job.warnings:
        (console or out_console()).print(f"[yellow]warning:[/yellow] {w}")
    note = _can_share(engines) if job.cfg.use_distilabel else "use_distilabel is false"
    if runner.remote and note:
        raise ConfigError(
            f"runner: {runner.name} runs the profile stage through distilabel's RayPipeline, but {note.split(';')[0]}"
            "; set profiles.use_distilabel: true and use engines served over HTTP, or runner: local"
        )
    distilabel = job.cfg.use_distilabel and not note

    def write_and_screen(rows: list[AnchoredRow]) -> list[Outcome]:
        if distilabel:
            from mindsimkit.profilegen.distilabel_steps import run_distilabel

            return run_distilabel(engines, rows, job.cfg, job.prov, job.checkpoints.path, runner=runner)
        written: list[Outcome] = engines.run(_async_outcomes(engines, rows, job.cfg, job.prov, job.checkpoints))
        return written

    outcomes = write_and_screen(job.rows)
    extra = _extra_rows(job, outcomes)
    if extra:
        outcomes += write_and_screen(extra)
    how = runner.distilabel_name if distilabel else "async"
    return _finish(job, engines, outcomes, how, note, console or out_console())


def _pool_ready(job: _Job, outcomes: list[Outcome]) -> int:
    """Profiles kept with a verdict the pool takes."""
    return sum(
        o.status == "ok"
        and o.profile is not None
        and o.profile.screen is not None
        and o.profile.screen.verdict in job.cfg.pool_verdicts
        for o in outcomes
    )


def _extra_rows(job: _Job, outcomes: list[Outcome]) -> list[AnchoredRow]:
    """The top-up (`extra_candidates`) when the candidates left the pool short: the next personas of the same
    seeded order, anchored as the first ones were, added to the job's rows. Empty when the pool is full or no
    top-up is allowed."""
    cfg = job.cfg
    if not cfg.extra_candidates or _pool_ready(job, outcomes) >= cfg.pool_size:
        return []
    more = load_personas(cfg.personas, len(job.rows) + cfg.extra_candidates, job.seed)
    rows = anchor_personas(more.rows[len(job.rows) :], job.rates, job.seed)
    job.rows += rows
    job.personas = more
    return rows


async def arun_profiles(
    recipe: Any, engines: Any, out_dir: str | Path, config: ProfilesConfig | None = None, console: Console | None = None
) -> ProfilesSummary:
    """`run_profiles` for async callers: always the plain async path (distilabel cannot run inside a
    running event loop)."""
    cfg = _config(recipe, config)
    if cfg.source == sstage.SOURCE:
        p, seed, prov, checkpoints = _situation_plan(recipe, engines, out_dir, cfg)
        done = await sstage.situation_outcomes(engines, p, prov, checkpoints, cfg.concurrency)
        return _situation_finish(recipe, engines, out_dir, cfg, p, seed, prov, done, console or out_console())
    job = _prepare(recipe, engines, out_dir, config)
    outcomes = await _async_outcomes(engines, job.rows, job.cfg, job.prov, job.checkpoints)
    extra = _extra_rows(job, outcomes)
    if extra:
        outcomes += await _async_outcomes(engines, extra, job.cfg, job.prov, job.checkpoints)
    return _finish(job, engines, outcomes, "async", "called from async code", console or out_console())


def short_pool_line(s: ProfilesSummary, cfg: ProfilesConfig) -> str:
    """The one line a pool smaller than asked gets: how far short, why, and what to raise."""
    took = " or ".join(cfg.pool_verdicts)
    extra = (
        f", {cfg.extra_candidates} of them the top-up" if cfg.extra_candidates and s.candidates > cfg.candidates else ""
    )
    return (
        f"profiles: a pool of {s.pool} where {cfg.pool_size} were asked: {s.candidates} candidates written{extra}, "
        f"{s.kept} kept, of them {sum(n for v, n in s.verdicts.items() if v in cfg.pool_verdicts)} screened "
        f"{took}; raise profiles.candidates or profiles.extra_candidates"
    )


def _summary_line(s: ProfilesSummary) -> str:
    failed = sum(s.failed.values())
    return (
        f"[bold]profiles[/bold] ({s.runner}): {s.candidates} candidates from {s.persona_source} "
        f"({s.skipped_under_18} under-18 skipped) → verdicts {s.verdicts}, {s.dropped_serious} dropped as serious, "
        f"{failed} failed {s.failed or ''}, {s.discarded_quotes} unverifiable quotes discarded; "
        f"pool {s.pool} (cover {s.cover_size} for {s.distinct_values} values, poor QoL {s.poor_qol_in_pool}/"
        f"{s.poor_qol_floor}), benchmark {s.benchmark} → {s.folder}"
    )


def _situation_plan(
    recipe: Any, engines: Any, out_dir: str | Path, cfg: ProfilesConfig
) -> tuple[Any, int, Provenance, CheckpointDir]:
    seed = cfg.seed if cfg.seed is not None else recipe.seed
    p = sstage.plan(cfg, seed)  # every input error before anything is written
    checkpoints = CheckpointDir(ProfilesFolder(RunLayout(Path(out_dir)).profiles.path).checkpoints)
    return p, seed, sstage.provenance(engines, seed), checkpoints


def _situation_job(
    recipe: Any, engines: Any, out_dir: str | Path, cfg: ProfilesConfig, console: Console, run: Any
) -> ProfilesSummary:
    p, seed, prov, checkpoints = _situation_plan(recipe, engines, out_dir, cfg)
    outcomes = run(sstage.situation_outcomes(engines, p, prov, checkpoints, cfg.concurrency))
    return _situation_finish(recipe, engines, out_dir, cfg, p, seed, prov, outcomes, console)


def _situation_finish(
    recipe: Any,
    engines: Any,
    out_dir: str | Path,
    cfg: ProfilesConfig,
    p: Any,
    seed: int,
    prov: Provenance,
    outcomes: list[Any],
    console: Console,
) -> ProfilesSummary:
    """The situation source's files and its summary in the profile stage's shape (every kept profile is in the
    pool and the benchmark; the chain's own counts under `situations`)."""
    folder, kept = sstage.write_outputs(out_dir, p, cfg, seed, prov, outcomes, engines, getattr(recipe, "name", None))
    files = ProfilesFolder(folder)
    st = sstage.stats(p, outcomes)
    summary = ProfilesSummary(
        folder=str(folder),
        runner="async",
        runner_note="the situation chain runs on the plain async path",
        persona_source=f"{sstage.SOURCE}:{p.folder}",
        personas_read=st.situations,
        skipped_under_18=0,
        candidates=st.situations,
        failed=st.failed,
        dropped_serious=0,
        verdicts={"validated": st.validated, "validation_failed": st.validation_failed},
        revised=st.revised,
        discarded_quotes=0,
        kept=len(kept),
        pool=len(kept),
        benchmark=len(kept),
        cover_size=0,
        distinct_values=0,
        uncovered=[],
        poor_qol_floor=0,
        poor_qol_in_pool=0,
        usage=engines.ledger.summary(),
        situations=st,
    )
    atomic_write_json(files.summary, summary.model_dump(mode="json"))
    sstage.finish_record(
        folder,
        [
            files.parquet,
            files.failures,
            files.provenance,
            files.summary,
            *(files.case_summary(x.profile_id) for x in kept),
        ],
        st,
        len(kept),
        console,
    )
    return summary

"""The main job (`mindsim run RECIPE --out DIR`): personas → anchors → profiles → screen → pool →
multi-session arcs → validation against reference statistics → a dataset folder with its card.

Each stage checkpoints its own finished work, so rerunning the same command after an interruption
resumes where it stopped. `run.json` records the run id and a hash of the recipe: resuming into a
folder made by a different recipe is refused rather than silently mixed.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.markup import escape

from mindsimkit.mindcore.console import err_console, out_console
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError, EngineError, InputError, MindsimError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.logs import library_logs_to
from mindsimkit.mindcore.manifest import forget_stage, record_stage
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.mindcore.recipe import PUBLISH_FIELDS, Recipe, load_recipe
from mindsimkit.mindcore.runners import runner_for
from mindsimkit.mindcore.shards import env_of
from mindsimkit.mindcore.systems import system_name
from mindsimkit.mindsim_app.cards import build_dataset_folder
from mindsimkit.mindsim_app.release import ReleaseConfig, gate_for_run
from mindsimkit.mindcore.preflight import failure_summary, preflight, raise_if_all_failed
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindcore.runlog import Pair, RunCounts, RunHeader, ScheduleSettings, played_by
from mindsimkit.mindsim.simulate import run_simulation
from mindsimkit.mindsim.summary import SimulationSummary
from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.run import run_judging
from mindsimkit.profilegen.config import profiles_config
from mindsimkit.profilegen.dataset import iter_profiles
from mindsimkit.profilegen.pipeline import ProfilesSummary, run_profiles
from mindsimkit.profilegen.schemas import Failure
from mindsimkit.validation.compare import compare
from mindsimkit.validation.config import ValidationConfig, shipped_reference_path

console = err_console()


class OutputConfig(BaseModel):
    """The recipe's `output:` section: how the dataset is named on the card."""

    model_config = ConfigDict(extra="forbid")
    pretty_name: str | None = Field(None, description="Dataset title on the card")
    repo_id: str | None = Field(None, description="OWNER/NAME the card's loading example uses")


@dataclass
class JobSummary:
    """What `run_job` returns: the run id, the outputs written, the run header as run.json holds it and the
    typed stage summaries the command line decides its exit code from."""

    run_id: str
    outputs: dict[str, Path] = field(default_factory=dict)
    info: RunHeader | None = None
    simulation: SimulationSummary | None = None
    profiles: ProfilesSummary | None = None

    @property
    def failed_arcs(self) -> int:
        return len(self.simulation.failed_arcs) if self.simulation is not None else 0


def _recipe_hash(recipe: Recipe) -> str:
    # Without `runner`/`ray`: where the work runs does not change what it makes, so a folder started
    # locally resumes on a cluster and the other way round (and older run folders keep their hash).
    # Without `release` either: the gate is read when publishing and does not change what the run makes.
    content = {k: v for k, v in recipe.content_dump().items() if k not in PUBLISH_FIELDS}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def _check_resume(out_dir: Path, recipe: Recipe) -> RunHeader | None:
    """The run header of a folder this recipe resumes (None: a new folder), or ConfigError when the folder holds
    another recipe's run. Reads only: nothing is written before every check has passed."""
    layout = RunLayout(out_dir)
    if not layout.run_json.is_file():
        return None
    info = layout.header()
    if info.recipe_hash != _recipe_hash(recipe):
        raise ConfigError(
            f"{out_dir} holds a run of a different recipe ({info.recipe.name if info.recipe else None!r}, "
            f"hash {info.recipe_hash}); use a new --out folder, or delete this one to start over"
        )
    return info


def _open_run(out_dir: Path, recipe: Recipe) -> RunHeader:
    layout = RunLayout(out_dir)
    h = _recipe_hash(recipe)
    info = _check_resume(out_dir, recipe)
    if info is not None:
        # Resumed: until it finishes again the folder is a run in progress (report and publish say so).
        forget_stage(out_dir, "run")
        if info.finished:
            info = info.model_copy(update={"status": "running"})
            layout.write_header(info)
        return info
    info = RunHeader(run_id=uuid.uuid4().hex[:16], recipe_hash=h, status="running")
    out_dir.mkdir(parents=True, exist_ok=True)
    layout.write_header(info)
    return info


def _sims_by_counsellor(layout: RunLayout) -> dict[str, list[dict[str, Any]]]:
    """One validation system per patient engine × counsellor, named as every report names it
    (`mindcore.systems`). Rows written before the engine field existed were all MindSim's, so they keep their
    `mindsim/` name."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in layout.transcript_rows():
        by[system_name(played_by(row.patient_engine), row.counsellor)].append(row.model_dump(exclude_unset=True))
    if not by:
        raise InputError(
            f"{layout.transcripts}: no finished sessions to validate (see sessions/summary.json for failures)"
        )
    return dict(by)


class _PromptUse(BaseModel):
    template: str
    sha256: str


class _ProfileProvenance(BaseModel):
    prompts: list[_PromptUse] = Field(default_factory=list)


class _ProfilePrompts(BaseModel):
    """What a profile row records of the templates that wrote it."""

    provenance: _ProfileProvenance | None = None


class _SessionPrompts(BaseModel):
    """What a session row records of the templates it rendered (None: not rendered in that session)."""

    prompts: dict[str, str | None] | None = None


def _prompt_hashes(out_dir: Path, arc: bool) -> dict[str, str]:
    """Template → hash for every prompt this run's rows record."""
    hashes: dict[str, str] = {}
    layout = RunLayout(out_dir)
    if layout.profiles.parquet.is_file():
        for prow in layout.profiles.rows(_ProfilePrompts):
            hashes.update({u.template: u.sha256 for u in (prow.provenance.prompts if prow.provenance else [])})
    if layout.sessions.parquet.is_file():
        for srow in layout.sessions.rows(_SessionPrompts):
            hashes.update({k: v for k, v in (srow.prompts or {}).items() if v})
    if arc:
        from mindsimkit.mindcore.prompts import template_hash
        from mindsimkit.validation.arc import SYSTEM_TEMPLATE, TURN_TEMPLATE

        hashes.update({t: template_hash(t) for t in (SYSTEM_TEMPLATE, TURN_TEMPLATE)})
    return hashes


def _stage(title: str) -> None:
    # A rule spans the console's width, which off a terminal is the wide pipe canvas: print a short header.
    if console.is_terminal:
        console.rule(f"[bold]{title}")
    else:
        console.print(f"── {title} ──")


def _nothing_left(stage: str, failures: list[dict[str, Any]], what: str) -> None:
    """A stage that left nothing for the next one failed at run time (exit 1), whatever the error
    class: saying "no profiles to simulate" would blame the user's input for the engine's output."""
    raise EngineError(
        f"{stage}: {what} {failure_summary(failures)}. The engine's answers are the cause: check the "
        "model behind each role (`mindsim engines check RECIPE`) and rerun the same command to resume"
    )


def run_job(
    recipe_path: Path,
    out_dir: Path,
    *,
    verbose: bool = False,
    ray_address: str | None = None,
    engines: Engines | None = None,
    plan_from: Path | None = None,
) -> JobSummary:
    """`verbose` leaves distilabel's and datasets' own logs on the terminal; otherwise they go to
    `OUT/logs/` and the terminal shows one progress bar per stage. `ray_address` (or RAY_ADDRESS)
    runs the profile and simulation stages on that Ray cluster, whatever the recipe's `runner:` says.
    `engines`: an engine set the caller has started (and closes), used for every role instead of starting the
    recipe's; its ledger is what run.json reports as usage, so give each job its own `Engines` (several may share
    one backend: `Engines(recipe.engines_config(), backends=...)`). `plan_from`: a finished pilot run the plan in
    run.json takes its measured sizes from, as `mindsim plan --from-run` does."""
    recipe = load_recipe(recipe_path).with_runner(ray_address)
    # Every section is validated before any engine starts, so a typo costs nothing.
    pcfg = profiles_config(recipe)
    scfg = recipe.section("simulation", SimulationConfig)
    vcfg = recipe.section("validation", ValidationConfig)
    ocfg = recipe.section("output", OutputConfig)
    jcfg = recipe.section("judge", JudgeConfig) if recipe.judge is not None else None
    recipe.section("release", ReleaseConfig)
    out_dir = Path(out_dir)
    layout = RunLayout(out_dir)
    keys = {k for e in recipe.engines.values() if (k := getattr(e, "api_key_env", None)) is not None}
    runner = runner_for(recipe, verbose=verbose, env=env_of(keys))
    runner.check_reachable()  # an unreachable cluster is named before the run folder is made
    _check_resume(out_dir, recipe)

    started = nullcontext(engines) if engines is not None else Engines.from_config(recipe.engines_config())
    with started as engines:
        # The preflight runs here on the driver, once, before any worker starts (docs/scale.md), and before
        # anything is written to --out: an unset key, a refused key or a closed server leaves no folder behind.
        _stage("0 · preflight")
        stages = {"run"} | ({"judge"} if jcfg is not None else set()) | ({"validate"} if vcfg.arc else set())
        pre = preflight(recipe, engines, stages)
        pre.notes += scfg.preset_notes()  # a preset setting the recipe replaced is said, and kept in run.json
        for note in pre.notes:  # information, not a problem: stdout, so stderr keeps only what went wrong
            out_console().print(f"preflight: {escape(note)}")
        if pre.budgets is not None:  # preflight always fits them
            scfg, vcfg = pre.budgets.apply("simulation", scfg), pre.budgets.apply("validation", vcfg)
        # The presets are named from the start: the page of a run that stopped half-way (`report --allow-partial`)
        # says which it ran under instead of falling back to the defaults.
        opened = _open_run(out_dir, recipe).model_copy(update={"presets": _presets(scfg, jcfg)})
        info = _with_plan(out_dir, recipe, opened, plan_from)
        seconds: dict[str, float] = {}
        with library_logs_to(layout.logs, verbose=verbose), runner:
            psum, ssum, jsum = _stages(recipe, engines, out_dir, pcfg, scfg, vcfg, jcfg, runner, seconds)
        roles = engines.describe()
        backends = {name: engines.backend(name).describe() for name in recipe.engines}
        usage = engines.ledger.summary()
    return _finish(
        recipe,
        recipe_path,
        out_dir,
        info,
        runner,
        psum,
        ssum,
        jsum,
        pcfg,
        scfg,
        vcfg,
        jcfg,
        ocfg,
        pre,
        roles,
        backends,
        usage,
        verbose,
        seconds,
    )


def _plan_vs_actual(
    recipe: Recipe, plan: dict[str, Any] | None, usage: Any, seconds: dict[str, float]
) -> dict[str, Any] | None:
    from mindsimkit.mindsim_app.plan import load_prices, plan_vs_actual

    return plan_vs_actual(plan, usage, seconds, load_prices(recipe)) if plan else None


def _presets(scfg: SimulationConfig, jcfg: JudgeConfig | None) -> dict[str, str]:
    """Each patient engine and the judge → the preset it runs under (run.json `presets`)."""
    return {**scfg.engine_presets(), **({"judge": jcfg.preset} if jcfg is not None else {})}


def _with_plan(out_dir: Path, recipe: Recipe, info: RunHeader, plan_from: Path | None = None) -> RunHeader:
    """run.json with the plan of this run (`mindsim plan`, from the pilot `plan_from` when given), written before the
    first request so that the end of the run can set what it spent beside what was expected. `info` is written
    whether or not a plan could be made."""
    from mindsimkit.mindsim_app.plan import make_plan

    try:
        info = info.model_copy(update={"plan": make_plan(recipe, from_run=plan_from).model_dump()})
    except Exception as exc:  # the plan informs; it never stops the run it plans
        console.print(
            f"[yellow]warning:[/] no plan in run.json ({escape(type(exc).__name__)}: "
            f"{escape(str(exc)[:200])}); `mindsim plan RECIPE` shows the same figures"
        )
    RunLayout(out_dir).write_header(info)
    return info


def _stages(
    recipe: Recipe,
    engines: Engines,
    out_dir: Path,
    pcfg: Any,
    scfg: SimulationConfig,
    vcfg: ValidationConfig,
    jcfg: JudgeConfig | None,
    runner: Any,
    seconds: dict[str, float],
) -> tuple[Any, Any, Any]:
    """Stages 1–8 in the job's order; returns the profile, simulation and judge summaries. `seconds` gets each
    stage's wall time under the plan's stage names."""
    layout = RunLayout(out_dir)
    _stage("1–5 · profiles")
    t0 = time.monotonic()
    psum = run_profiles(recipe, engines, out_dir, pcfg, runner=runner)
    seconds["profiles"] = time.monotonic() - t0
    pfail = [f.model_dump() for f in layout.profiles.failure_rows(Failure)]
    raise_if_all_failed("profiles", pfail, attempted=psum.candidates)
    if psum.candidates and not psum.kept:
        _nothing_left(
            "profiles",
            pfail,
            f"every one of {psum.candidates} candidates failed or was dropped "
            f"as serious ({psum.dropped_serious} dropped)",
        )
    if scfg.pool_only and psum.kept and not psum.pool:
        # The screener's verdicts, not the user's files, left nothing to simulate: a run-time failure (exit 1)
        # that names the settings to change, not "no profiles to simulate".
        seen = ", ".join(f"{n} {v}" for v, n in sorted(psum.verdicts.items()))
        raise MindsimError(
            f"profiles: the pool is empty: {psum.kept} of {psum.candidates} candidates were kept ({seen}), none with "
            f"a verdict in profiles.pool_verdicts {list(pcfg.pool_verdicts)}. Raise profiles.candidates or "
            "profiles.extra_candidates, or add the verdict to profiles.pool_verdicts, and run the changed recipe "
            "with a new --out folder"
        )
    # Read as the simulation packs them: the pool is never whole in memory as objects.
    profiles = iter_profiles(layout.profiles.path, pool_only=scfg.pool_only)
    _stage("6 · multi-session simulation")
    t0 = time.monotonic()
    ssum = run_simulation(profiles, engines, scfg, out_dir, recipe.seed, runner=runner)
    seconds["simulate"] = time.monotonic() - t0
    failed_arcs = [f.model_dump() for f in ssum.failed_arcs]
    raise_if_all_failed("simulation", failed_arcs, attempted=ssum.arcs)
    if failed_arcs and not ssum.sessions_written:
        _nothing_left("simulation", failed_arcs, f"all {ssum.arcs} arcs failed before any session finished")
    _stage("7 · validation")
    sims = _sims_by_counsellor(layout)
    t0 = time.monotonic()
    compare(vcfg.reference, sims, layout.validation.path, vcfg, engines=engines if vcfg.arc else None, runner=runner)
    seconds["validate"] = time.monotonic() - t0
    record_stage(
        out_dir,
        "validation",
        [layout.validation.report_json, layout.validation.report_md, *layout.validation.plots()],
        reads=[layout.transcripts],
        counts={"systems": len(sims)},
    )
    jsum = None
    if jcfg is not None:
        _stage("8 · MHQR judge")
        t0 = time.monotonic()
        jsum = run_judging(out_dir, engines, jcfg, runner=runner)
        seconds["judge"] = time.monotonic() - t0
    return psum, ssum, jsum


def _finish(
    recipe: Recipe,
    recipe_path: Path,
    out_dir: Path,
    info: RunHeader,
    runner: Any,
    psum: Any,
    ssum: Any,
    jsum: Any,
    pcfg: Any,
    scfg: SimulationConfig,
    vcfg: ValidationConfig,
    jcfg: JudgeConfig | None,
    ocfg: OutputConfig,
    pre: Any,
    roles: Any,
    backends: Any,
    usage: Any,
    verbose: bool,
    seconds: dict[str, float] | None = None,
) -> JobSummary:
    """run.json, the run's manifest record, the dataset folder and the page, once every stage has finished."""
    layout = RunLayout(out_dir)
    runner_info = {"name": runner.name, "profiles": psum.runner, "simulation": ssum.runner}

    reference_is_mibot = vcfg.reference_path().resolve() == shipped_reference_path().resolve()
    info = RunHeader.model_validate(
        {
            **info.model_dump(exclude_none=True, exclude={"log_version"}),
            "status": "finished",
            "recipe": {
                "name": recipe.name,
                "path": str(Path(recipe_path).resolve()),
                "seed": recipe.seed,
                **recipe.content_dump(),
            },
            # The one thing the runner changes in run.json: which runner ran (the last run, on resume).
            "runner": runner_info,
            "provenance": base_provenance(),
            "engines": roles,
            "engine_backends": backends,
            "preflight": pre.lines(),
            "tool_calls": pre.tool_calls(),
            "usage": usage,
            "plan_vs_actual": _plan_vs_actual(recipe, info.plan, usage, seconds or {}),
            "persona_source": "mindsim's shipped synthetic persona sample (Nemotron-Personas-USA schema, not NVIDIA data)"
            if psum.persona_source == "synthetic"
            else psum.persona_source,
            "rates_note": "the shipped illustrative prior — not the paper's fitted rates"
            if pcfg.rates is None
            else f"fitted rates from {pcfg.rates}",
            "prompt_hashes": {**_prompt_hashes(out_dir, vcfg.arc), **(jsum.prompt_hashes if jsum else {})},
            # Templates the recipe swapped for its own files (`prompts:`): which file, and its hash as the rows record it.
            "prompt_overrides": {
                name: {"path": o.path, "sha256": o.sha256} for name, o in sorted(recipe.prompt_overrides.items())
            },
            "schedule_settings": ScheduleSettings(
                sessions=scfg.sessions,
                turn_cap=scfg.turn_cap,
                gap_hours=f"{scfg.min_gap_hours:g}–{scfg.max_gap_hours:g}",
                counsellors=list(ssum.counsellors),
                memory_cap=scfg.memory_max_entries,
                seed=recipe.seed,
            ),
            "presets": _presets(scfg, jcfg),
            "counts": RunCounts(
                personas_read=psum.personas_read,
                under_18_skipped=psum.skipped_under_18,
                candidates=psum.candidates,
                kept=psum.kept,
                dropped_serious=psum.dropped_serious,
                profile_failures=sum(psum.failed.values()),
                pool_benchmark=Pair(first=psum.pool, second=psum.benchmark),
                pool_verdicts=list(pcfg.pool_verdicts),
                sessions=Pair(first=ssum.sessions_written, second=ssum.sessions_expected),
                trials=ssum.trials if ssum.trials > 1 else None,
                failed_arcs=len(ssum.failed_arcs),
                ended_by_patient=ssum.ended_by_patient,
                rejected_commits=ssum.rejected_commits,
                rejected_messages=dict(ssum.rejected_messages),
                messages_trimmed=ssum.messages_trimmed,
                scenario_drafts=Pair(first=ssum.scenario_drafts, second=ssum.sessions_written),
                counsellor_flags=dict(ssum.counsellor_flags),
                judged=Pair(first=jsum.ok, second=jsum.failed) if jsum else None,
                critical=jsum.critical if jsum else None,
            ),
            "pool_verdicts": list(pcfg.pool_verdicts),
            "reference_is_mibot": reference_is_mibot,
            "notices": [str(shipped_reference_path().with_name("MIBOT_NOTICE.md"))] if reference_is_mibot else [],
            "pretty_name": ocfg.pretty_name,
            "repo_id": ocfg.repo_id,
        }
    )
    # The gate as it stands at the end of the run; `mindsim publish` evaluates it again before any upload.
    info = info.model_copy(update={"release_gate": gate_for_run(out_dir, info)})
    layout.write_header(info)
    record_stage(out_dir, "run", [layout.run_json], reads=["profiles", "simulation"])
    with library_logs_to(layout.logs, verbose=verbose):
        dataset = build_dataset_folder(out_dir, info)
    # The one file a user opens first; built from the files just written, so a rerun rebuilds it.
    from mindsimkit.mindsim_app.report.build import build_report

    try:
        report = build_report([out_dir])
    except Exception as exc:  # every output above is written; the page can be rebuilt with `mindsim report`
        console.print(
            f"[yellow]warning:[/] report.html not written ({escape(type(exc).__name__)}: "
            f"{escape(str(exc)[:200])}); rebuild it with `mindsim report {escape(str(out_dir))}`"
        )
        report = layout.report_html
    outputs = {
        "profiles": layout.profiles.parquet,
        "pool table": layout.profiles.pool_table,
        "sessions": layout.sessions.parquet,
        "transcripts": layout.transcripts,
        "validation report": layout.validation.report_md,
        "judgments": layout.judgments.parquet,
        "MHQR report": layout.judgments.report_md,
        "dataset + card": dataset / "README.md",
        "HTML report": report,
        "report data": layout.report_json,
        "provenance": layout.run_json,
    }
    return JobSummary(
        run_id=info.run_id,
        outputs={k: v for k, v in outputs.items() if v.exists()},
        info=info,
        simulation=ssum,
        profiles=psum,
    )

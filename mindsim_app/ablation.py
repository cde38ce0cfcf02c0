"""`mindsim ablate memory RUN_DIR --counsellor NAME …`: the memory ablation of MindEval2 App. G.1 ("Memory
Ablation", Figure 11) on a finished run.

Sessions 2+ of the chosen counsellors are rerun with the counsellor's memory section as in session 1 (no earlier
sessions) while the patient keeps its running memory; each rerun starts from its benchmark twin's schedule entry,
scenario (with the openers it rejected), running memory and patient-engine state, so a rerun differs from its twin
only in the counsellor's system prompt. That is our choice where the paper is silent: a rerun session 3 does not
start from the rerun session 2 (whose scenario and memory would follow a conversation the benchmark never had), so
every pair compares the same situation. The reruns are judged with the running memory in the counsellor's prompt:
the judge is shown the twin's system prompt, as sent in the benchmark, and that input is written out
(`judge_inputs.jsonl`); the stored session records keep what the counsellor was really sent. The twins are judged
through the run's own judgment cache (no request for a reply the run's judge already judged), and the paired
MHQR difference per counsellor, its split by issue category and the PNG come from `judge.ablation`.

Outputs under `--out` (default `RUN_DIR/ablations/memory`, `mindcore.layout.MemoryAblationFolder`): the reruns'
checkpoints (a rerun resumes: finished sessions and judgments are not asked again), `judge_inputs.jsonl`,
`judgments/ablated.parquet` and `judgments/benchmark.parquet`, `report.json`, `report.md`, `memory_ablation.png`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from mindsimkit.mindcore.console import err_console, out_console
from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore.io import atomic_write_jsonl
from mindsimkit.mindcore.layout import MemoryAblationFolder, RunLayout

ABLATION = "no_counsellor_memory"
# The counsellor's memory in every rerun: none, exactly what session 1's prompt shows.
NO_MEMORY: list[str] = []

ablate_app = typer.Typer(help="Ablations of a finished run (MindEval2 App. G.1).", no_args_is_help=True)
out = out_console()
err = err_console()


def twins_of(run_dir: Path, counsellors: list[str]) -> tuple[list[Any], dict[str, Any]]:
    """The benchmark sessions to rerun (sessions 2+ of `counsellors`) and every session of those counsellors
    by id (their first sessions and each twin's previous one). Raises InputError naming what is wrong."""
    from mindsimkit.mindsim.simulate import SessionStore

    folder = RunLayout(run_dir).sessions.checkpoints
    if not folder.is_dir() or not any(folder.glob("*.json")):
        raise InputError(
            f"{run_dir}: no finished sessions under {folder}; give the folder of a finished "
            "`mindsim run` or `mindsim simulate`"
        )
    records = SessionStore(run_dir).all()
    known = sorted({r.counsellor for r in records})
    unknown = [c for c in counsellors if c not in known]
    if unknown:
        raise InputError(
            f"--counsellor {', '.join(unknown)}: not a counsellor of {run_dir} (its sessions have {', '.join(known)})"
        )
    mine = [r for r in records if r.counsellor in counsellors and r.rerun is None]
    twins = sorted(
        (r for r in mine if r.session_index >= 1),
        key=lambda r: (r.counsellor, r.patient_id, r.patient_engine, r.trial or 0, r.session_index),
    )
    if not twins:
        raise InputError(
            f"{run_dir}: {', '.join(counsellors)} have only first sessions; the memory ablation reruns "
            "sessions 2+ (a run with simulation.sessions of 2 or more)"
        )
    return twins, {r.session_id: r for r in mine}


def _previous(by_id: dict[str, Any], twin: Any) -> Any:
    from mindsimkit.mindsim.records import session_id

    sid = session_id(
        twin.patient_id, twin.counsellor, twin.session_index - 1, twin.seed, twin.patient_engine, twin.trial or 0
    )
    return by_id.get(sid)


def judge_input(record: Any, system_prompt: str) -> Any:
    """What the MHQR judge reads of one session, with the counsellor's system prompt given explicitly."""
    from mindsimkit.judge.schemas import SessionInput

    return SessionInput(
        session_id=record.session_id,
        patient_id=record.patient_id,
        counsellor=record.counsellor,
        session_index=record.session_index,
        counsellor_system_prompt=system_prompt,
        messages=record.counsellor_messages,
        patient_engine=record.patient_engine,
        counsellor_model=(record.engines.get("counsellor") or {}).get("model"),
        counsellor_flags=[f.model_dump() for f in record.counsellor_flags],
        trial=record.trial,
    )


def _recipe_path(run_dir: Path, given: Path | None) -> Path:
    if given is not None:
        return given
    layout = RunLayout(run_dir)
    run_json = layout.run_json
    recipe = layout.header().recipe if run_json.is_file() else None
    if recipe is None:
        raise InputError(f"{run_json}: names no recipe (not a finished `mindsim run`); pass --recipe RECIPE")
    path = recipe.path
    if not Path(path).is_file():
        raise InputError(f"{run_json}: its recipe {path} is not there any more; pass --recipe RECIPE")
    return Path(path)


def ablate_memory(
    run_dir: Path,
    counsellors: list[str],
    *,
    recipe: Path | None = None,
    out_dir: Path | None = None,
    engines: Any = None,
) -> dict[str, Any]:
    """Rerun, judge and report the memory ablation. Returns a summary (counts, failures, output paths).
    `engines`: started engines to use instead of starting the recipe's (tests pass a fake engine)."""
    from contextlib import nullcontext

    from mindsimkit.judge.ablation import paired_ablation, write
    from mindsimkit.judge.config import JudgeConfig
    from mindsimkit.judge.judging import judge_all, judges_from_config
    from mindsimkit.judge.schemas import write_judgments
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.io import CheckpointDir
    from mindsimkit.mindcore.preflight import preflight
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.mindsim.config import SimulationConfig, counsellor_name
    from mindsimkit.mindsim.simulate import SessionStore, counsellor_client
    from mindsimkit.profilegen.dataset import load_profiles

    run_dir = Path(run_dir)
    counsellors = list(dict.fromkeys(counsellors))
    if not counsellors:
        raise InputError("give at least one --counsellor NAME")
    twins, by_id = twins_of(run_dir, counsellors)
    rec = load_recipe(_recipe_path(run_dir, recipe))
    scfg = rec.section("simulation", SimulationConfig)
    jcfg = rec.section("judge", JudgeConfig) if rec.judge is not None else JudgeConfig()
    bindings = {counsellor_name(c): c for c in scfg.counsellors}
    missing = [c for c in counsellors if c not in bindings]
    if missing:
        raise ConfigError(
            f"{rec.path}: simulation.counsellors does not bind {', '.join(missing)}; pass the recipe "
            "the run was made with (--recipe)"
        )
    profiles_dir = RunLayout(run_dir).profiles.path
    profiles = {p.profile_id: p for p in load_profiles(profiles_dir, pool_only=False)}
    absent = sorted({t.patient_id for t in twins} - set(profiles))
    if absent:
        raise InputError(f"{profiles_dir}: no profile for patient(s) {', '.join(absent)} of the sessions to rerun")
    folder = MemoryAblationFolder(Path(out_dir) if out_dir else RunLayout(run_dir).memory_ablation.path)
    store = SessionStore(folder.path)

    with nullcontext(engines) if engines is not None else Engines.from_config(rec.engines_config()) as engines:
        report = preflight(rec, engines, {"simulate", "judge"})
        config = report.budgets.apply("simulation", scfg) if report.budgets else scfg
        clients = {c: counsellor_client(engines, bindings.get(c, c)) for c in counsellors}
        results = engines.run(_rerun_all(twins, by_id, profiles, engines, config, clients, store))
        reruns = [r for r in results if not isinstance(r, dict)]
        failures = [r for r in results if isinstance(r, dict)]
        twin_of = {t.session_id: t for t in twins}
        pairs = [(r, twin_of[_twin_id(r)]) for r in reruns]
        ablated_inputs = [judge_input(r, t.counsellor_system_prompt) for r, t in pairs]
        atomic_write_jsonl(folder.judge_inputs, [s.model_dump(mode="json") for s in ablated_inputs])
        # The twins, and their arcs' first sessions (the benchmark's own change from session 1), as the run judged them.
        firsts = [
            r
            for r in by_id.values()
            if r.session_index == 0
            and any(
                r.patient_id == t.patient_id
                and r.counsellor == t.counsellor
                and r.patient_engine == t.patient_engine
                and r.trial == t.trial
                for t in twins
            )
        ]
        bench_inputs = [judge_input(r, r.counsellor_system_prompt) for r in [*firsts, *(t for _, t in pairs)]]
        judges = judges_from_config(engines, jcfg)
        ablated_rows = engines.run(
            judge_all(judges, ablated_inputs, CheckpointDir(folder.judgments.cache), jcfg.max_replies, jcfg.concurrency)
        )
        bench_rows = engines.run(
            judge_all(
                judges,
                bench_inputs,
                CheckpointDir(RunLayout(run_dir).judgments.cache),
                jcfg.max_replies,
                jcfg.concurrency,
            )
        )
    write_judgments(folder.judgments.path / "ablated.parquet", ablated_rows)
    write_judgments(folder.judgments.path / "benchmark.parquet", bench_rows)
    rubric = judges[0].rubric
    body: dict[str, Any] = {
        "ablation": ABLATION,
        "run": str(run_dir),
        "recipe": str(rec.path),
        "counsellors": counsellors,
        "start": "each rerun starts from its benchmark twin's schedule entry, scenario, running memory and "
        "patient-engine state; only the counsellor's memory section differs (empty, as in session 1)",
        "judged_with": "the twin's counsellor system prompt (running memory included), written to judge_inputs.jsonl",
        "sessions": {"to_rerun": len(twins), "rerun": len(reruns), "failed": len(failures)},
        "judgments": {
            "ablated_failed": sum(r.status == "failed" for r in ablated_rows),
            "benchmark_failed": sum(r.status == "failed" for r in bench_rows),
        },
        "failures": failures,
        "judges": {
            j.name: paired_ablation(
                [r for r in ablated_rows if r.judge == j.name],
                [r for r in bench_rows if r.judge == j.name],
                rubric,
                draws=jcfg.bootstrap_draws,
                seed=jcfg.seed,
            )
            for j in judges
        },
    }
    files = write(folder.path, body, rubric, jcfg.plots)
    return {
        **body["sessions"],
        "failures": failures,
        "outputs": {**files, "judge inputs": folder.judge_inputs},
        "report": body,
    }


def _twin_id(rerun: Any) -> str:
    from mindsimkit.mindsim.records import session_id

    return session_id(
        rerun.patient_id, rerun.counsellor, rerun.session_index, rerun.seed, rerun.patient_engine, rerun.trial or 0
    )


async def _rerun_all(
    twins: list[Any],
    by_id: dict[str, Any],
    profiles: dict[str, Any],
    engines: Any,
    config: Any,
    clients: dict[str, Any],
    store: Any,
) -> list[Any]:
    """Every rerun at once (the engines bound what is in flight). A finished rerun is loaded, not asked again; a
    rerun that fails is a failure entry (not saved, tried again on the next run), never a missing row."""
    from mindsimkit.mindsim.arc import Arc, Roles
    from mindsimkit.mindsim.patient_engines import engine_roles, variant
    from mindsimkit.mindsim.session import converse, finish_session, rerun_input
    from mindsimkit.mindsim.simulate import ARC_FAILURES
    from mindsimkit.mindsim.reference import vocabulary_for

    kinds = sorted({t.patient_engine for t in twins})
    shared = {r: engines.role(r) for r in ("patient", "scenario_writer", "memory_compactor")}
    extra = {key: engines.role(role) for role, key in engine_roles(kinds).items()}

    async def one(twin: Any) -> Any:
        engine = variant(twin.patient_engine)
        # A repeated trial's rerun plays under its trial's sampling seeds and ids, as its twin did
        # (`simulation.trials` > 1); trial 0 is the one-trial case.
        trial = twin.trial or 0
        roles = Roles(
            patient=shared["patient"],
            counsellor=clients[twin.counsellor],
            scenario_writer=shared["scenario_writer"],
            memory_compactor=shared["memory_compactor"],
            extra=dict(extra),
        ).for_trial(trial)
        vocab = vocabulary_for(config.preset_for(twin.patient_engine))
        arc = Arc(profiles[twin.patient_id], vocab, roles, config, twin.counsellor, twin.seed, engine, trial=trial)
        sid = arc.session_id(twin.session_index, ABLATION)
        done = store.load(sid)
        if done is not None:
            return done
        first = by_id.get(arc.session_id(0))
        if engine.engine.prepares:
            # The patient's own preparation from the run (PatientAct: its decomposition), never a new one.
            arc = arc.with_preparation(engine.engine.stored_preparation(first) if first is not None else None)
        inp = rerun_input(twin, _previous(by_id, twin), arc, rerun=ABLATION, counsellor_memory=NO_MEMORY)
        try:
            talk = await converse(arc, inp)
            # Nothing reads a rerun's memory: the next rerun starts from the benchmark's.
            return store.save(await finish_session(talk, rewrite_memory=False))
        except ARC_FAILURES as exc:
            return {
                "session": twin.session_id,
                "counsellor": twin.counsellor,
                "patient_id": twin.patient_id,
                "session_index": twin.session_index,
                "error": f"{type(exc).__name__}: {exc}"[:500],
            }

    return list(await asyncio.gather(*(one(t) for t in twins)))


@ablate_app.command("memory")
def ablate_memory_cmd(
    run_dir: Path = typer.Argument(..., help="A finished run folder (`mindsim run … --out RUN_DIR`)"),
    counsellors: list[str] = typer.Option(..., "--counsellor", help="Counsellor to rerun (repeat for several)"),
    recipe: Optional[Path] = typer.Option(None, "--recipe", help="Recipe for engines and judge (default: the run's)"),
    out_dir: Optional[Path] = typer.Option(
        None, "--out", help="Output folder (default RUN_DIR/ablations/memory); rerunning with the same folder resumes"
    ),
) -> None:
    """Rerun sessions 2+ without the counsellor's memory (the patient keeps its own), judge them with the
    running memory in the prompt and report the paired MHQR change per counsellor (MindEval2 Figure 11)."""
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindcore.runfolder import run_lock

    default = RunLayout(run_dir).memory_ablation.path
    check_out_folder(out_dir or default, allow=[default])
    with run_lock(run_dir):
        summary = ablate_memory(run_dir, counsellors, recipe=recipe, out_dir=out_dir)
    for judge, r in summary["report"]["judges"].items():
        for name, e in r["counsellors"].items():
            lo, hi = e["ci95"]
            out.print(
                f"{escape(judge)} · {escape(name)}: ablated − benchmark MHQR {e['mean_diff']:+.2f} "
                f"[{lo:+.2f}, {hi:+.2f}] over {e['pairs']} sessions"
            )
    for what, where in summary["outputs"].items():
        out.print(f"{escape(what)}: {escape(str(where))}")
    failed = summary["failures"]
    if failed:
        err.print(
            f"[red]error:[/] {len(failed)} of {summary['to_rerun']} reruns failed (listed in "
            f"{escape(str(summary['outputs']['report.md']))}); rerun the same command to retry them"
        )
        raise typer.Exit(1)

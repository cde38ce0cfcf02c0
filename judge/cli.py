"""`mindsim judge …` commands. `mindsim_app/cli.py` mounts `app`; each command lives with the module that
does its work."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer

if TYPE_CHECKING:
    from mindsimkit.judge.rubrics import Rubric

app = typer.Typer(
    help="MHQR: judge counsellor replies, sample excerpts for clinicians, measure agreement.", no_args_is_help=True
)


def judge_section(recipe: Any) -> Any:
    """The recipe's `judge:` section, or defaults while the shared Recipe model has no such section."""
    from mindsimkit.judge.config import JudgeConfig

    if "judge" in type(recipe).model_fields:
        return recipe.section("judge", JudgeConfig)
    return JudgeConfig()


def resolve_recipe(run_dir: Path, recipe: Optional[Path]) -> Optional[Path]:
    """--recipe, else the recipe path run.json records, else None (embedded defaults)."""
    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.mindcore.layout import RunLayout

    if recipe is not None:
        return recipe
    layout = RunLayout(run_dir)
    run_json = layout.run_json
    if not run_json.is_file():
        return None
    recipe_run = layout.header().recipe
    if recipe_run is None:  # a run still in its first stages names no recipe yet
        return None
    recorded = Path(recipe_run.path)
    # Runs record the recipe's absolute path. Older ones recorded it as typed, relative to where `mindsim run` was
    # started: usually a folder above the run folder, so those are tried after the current directory.
    tries = (
        [recorded] if recorded.is_absolute() else [recorded, *(up / recorded for up in Path(run_dir).resolve().parents)]
    )
    for path in tries:
        if path.is_file():
            return path
    raise ConfigError(
        f"{run_json} names recipe {recorded}, which is not there from here nor from a folder above the "
        "run folder; pass --recipe PATH"
    )


@app.command("run")
def run_cmd(
    run_dir: Optional[Path] = typer.Argument(
        None,
        help="Run folder (holds sessions/sessions.parquet); judgments/ is written here (required with --rubric mhqr)",
    ),
    recipe: Optional[Path] = typer.Option(
        None,
        help="Recipe with engines, roles and a judge: section "
        "(default: the one run.json names, else the embedded engine)",
    ),
    sessions: Optional[Path] = typer.Option(
        None, help="Sessions from another simulator: JSONL (or parquet) with the fields in docs/judge.md"
    ),
    judge: Optional[list[str]] = typer.Option(
        None, "--judge", help="Judge role to use (repeat); overrides judge.judges"
    ),
    max_replies: Optional[int] = typer.Option(
        None, min=1, max=100_000, help="Judge only the first N replies of each session"
    ),
    draws: Optional[int] = typer.Option(None, min=1, max=100_000, help="Bootstrap draws (default 2000)"),
    seed: Optional[int] = typer.Option(None, help="Bootstrap seed"),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots"),
    profiles: Optional[Path] = typer.Option(
        None,
        "--profiles",
        help="Profiles folder or parquet whose in_benchmark "
        "column names the benchmark subset (default: RUN_DIR/profiles/)",
    ),
    rubric: str = typer.Option(
        "mhqr",
        "--rubric",
        help="A built-in rubric id or a rubric YAML file (docs/judge.md): "
        "mhqr: every counsellor reply (MindEval2); patientact: every session's patient on "
        "PatientAct's 5 dimensions; mindeval_v1: MindEval v1's five 1-6 criteria per session",
    ),
    runs: Optional[list[Path]] = typer.Option(
        None, "--run", help="[scales rubrics] Another run folder to score (repeat)"
    ),
    baseline: Optional[str] = typer.Option(
        None,
        "--baseline",
        help="[scales rubrics] Also test this system against "
        "each other one (the marks always compare best with second best)",
    ),
    compare: Optional[list[str]] = typer.Option(
        None,
        "--compare",
        help="[scales rubrics] A set of systems the "
        "best-vs-second marks compare, NAME=SYSTEM,SYSTEM,... (repeat; default: "
        "the paper's two, simulators and ablation arms, from the system names)",
    ),
    human: Optional[Path] = typer.Option(
        None,
        "--human",
        help="[scales rubrics] Human ratings: JSONL item_id, rater, "
        "scores {dimension: value}, or the long format (CSV/JSONL item, unit, rater, value)",
    ),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        help="[scales rubrics] Where patientact_judge/ (or rubric_judge/ID/) goes (default: the first run folder)",
    ),
    max_tokens: Optional[int] = typer.Option(
        None,
        "--max-tokens",
        min=1,
        max=1_000_000,
        help="[scales rubrics] Output budget of one judgment (default: the role's)",
    ),
) -> None:
    """Judge every counsellor reply against the MHQR rubric (or, with a scales rubric such as patientact,
    mindeval_v1 or your own file, every session); write judgments, scores and a report."""
    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.judge.rubrics import load as load_rubric_file

    spec = load_rubric_file(rubric)
    if spec.kind == "scales":
        return _run_scales(
            spec, run_dir, runs or [], sessions, recipe, judge, baseline, human, out, max_tokens, compare or []
        )
    if spec.id != "mhqr":
        raise ConfigError(
            f"rubric {spec.id} ({spec.path}): a severity_issues rubric other than MHQR is judged by naming "
            f"its body file in the recipe's judge.rubric ({spec.body})"
        )
    extra = [
        n
        for n, v in (
            ("--run", runs),
            ("--baseline", baseline),
            ("--human", human),
            ("--out", out),
            ("--compare", compare),
            ("--max-tokens", max_tokens),
        )
        if v
    ]
    if extra:
        raise ConfigError(
            f"{', '.join(extra)}: only for scales rubrics (e.g. --rubric patientact); the MHQR judge "
            "writes into RUN_DIR"
        )
    if run_dir is None:
        raise ConfigError("mindsim judge run: give RUN_DIR (the run folder, or where judgments/ goes with --sessions)")
    if not run_dir.is_dir() and sessions is None:
        raise ConfigError(f"{run_dir}: no such run folder; give a folder made by 'mindsim run', or --sessions FILE")
    from pydantic import ValidationError

    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.preflight import preflight
    from mindsimkit.mindcore.recipe import format_validation_error, load_recipe
    from mindsimkit.judge.config import JudgeConfig, default_engines_config
    from mindsimkit.judge.inputs import benchmark_patients, load_sessions
    from mindsimkit.judge.run import run_judging

    recipe_path = resolve_recipe(run_dir, recipe)
    r = None
    if recipe_path is not None:
        r = load_recipe(recipe_path)
        base, engines_cfg = judge_section(r), r.engines_config()
    else:
        base, engines_cfg = JudgeConfig(), default_engines_config()
    changes = {
        k: v
        for k, v in {
            "judges": judge or None,
            "max_replies": max_replies,
            "bootstrap_draws": draws,
            "seed": seed,
            "plots": False if no_plots else None,
            "profiles": str(profiles) if profiles else None,
        }.items()
        if v is not None
    }
    try:
        config = JudgeConfig.model_validate({**base.model_dump(), **changes})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "mindsim judge run options")) from exc
    engines_cfg.check_bound(config.judges, "--judge" if judge else "judge.judges")
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindcore.manifest import verify_run
    from mindsimkit.mindcore.runfolder import run_lock

    if sessions is None and RunLayout(run_dir).sessions.parquet.is_file():
        # The sessions it judges are intact; its own judgments may be missing (this remakes them).
        verify_run(run_dir, needs=["simulation"], whole=False)
    inputs = load_sessions(run_dir, sessions)  # bad input stops here, before any engine starts
    benchmark_patients(inputs, run_dir, Path(config.profiles) if config.profiles else None)
    with run_lock(run_dir), Engines.from_config(engines_cfg) as engines:
        preflight(r, engines, {"judge"})
        summary = run_judging(run_dir, engines, config, inputs=inputs)
    typer.echo(
        f"judged {summary.judgments} replies of {summary.sessions} sessions: {summary.ok} ok, "
        f"{summary.failed} failed, {summary.critical} critical, "
        f"{summary.dropped_quotes} unverifiable quotes dropped"
    )
    for name, j in summary.judges.items():
        typer.echo(f"  {name} ({j.model}): ranking {', '.join(j.ranking) or '(no scores)'}")
    for label, path in summary.outputs.items():
        typer.echo(f"  {label}: {path}")


def _comparisons(compare: Sequence[str]) -> Optional[dict[str, list[str]]]:
    """`--compare NAME=SYSTEM,SYSTEM` options as named sets (None: the default sets)."""
    from mindsimkit.mindcore.errors import ConfigError

    if not compare:
        return None
    out: dict[str, list[str]] = {}
    for spec in compare:
        name, _, members = spec.partition("=")
        systems = [m.strip() for m in members.split(",") if m.strip()]
        if not name.strip() or len(systems) < 2 or name.strip() in out:
            raise ConfigError(
                f"--compare {spec!r}: write NAME=SYSTEM,SYSTEM[,...] with two or more systems and a "
                "name used once, e.g. --compare table4=patientact,patientact-no_trust_gating"
            )
        out[name.strip()] = systems
    return out


def _run_scales(
    spec: Rubric,
    run_dir: Optional[Path],
    runs: list[Path],
    sessions: Optional[Path],
    recipe: Optional[Path],
    judge: Optional[list[str]],
    baseline: Optional[str],
    human: Optional[Path],
    out: Optional[Path],
    max_tokens: Optional[int],
    compare: Sequence[str] = (),
) -> None:
    """A scales rubric (PatientAct's, MindEval v1's, a user file): the run folders and/or sessions file, one
    judge role, the per-system report."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.errors import ConfigError, InputError
    from mindsimkit.mindcore.preflight import preflight
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.judge.config import default_engines_config
    from mindsimkit.judge.patientact import SESSION_RUBRIC, load_human, load_items
    from mindsimkit.judge.patientact_report import run_patientact
    from mindsimkit.judge.scales import judgeable
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindcore.runfolder import run_lock

    if spec.unit == "profile" and spec.judge is not None:
        raise ConfigError(f"rubric {spec.id} rates profiles: run it with `mindsim patientact profile-eval RUN`")
    judgeable(spec, unit="conversation")
    folders = ([run_dir] if run_dir is not None else []) + runs
    if judge and len(judge) > 1:
        raise ConfigError(f"--rubric {spec.id} scores with one judge role; give --judge once")
    role = judge[0] if judge else "judge"
    if role != "judge" and not role.startswith("judge:"):
        raise ConfigError(f"--judge {role}: not a judge role; write 'judge' or 'judge:NAME'")
    # Bad input stops here, before any engine starts.
    comparisons = _comparisons(compare)
    items = load_items(folders, sessions)
    ratings = load_human(human, spec) if human is not None else None
    if ratings is not None:
        unknown = sorted({r.item_id for r in ratings} - {it.item_id for it in items})
        if unknown:  # external ratings may cover more than this run; said, not refused
            typer.echo(
                f"warning: {len(unknown)} rated items are not among the sessions judged here (first: "
                f"{unknown[0]!r}); they count for agreement among the raters, not against the judge",
                err=True,
            )
    if out is not None or folders:
        target = out or folders[0]
    elif sessions is not None:
        target = sessions.parent
    else:  # load_items refused this already
        raise InputError("no sessions given; name run folders (RUN_DIR, --run DIR) or --sessions FILE")
    check_out_folder(target)
    recipe_path = resolve_recipe(folders[0], recipe) if folders else recipe
    r = load_recipe(recipe_path) if recipe_path is not None else None
    engines_cfg = r.engines_config() if r is not None else default_engines_config()
    with run_lock(target), Engines.from_config(engines_cfg) as engines:
        preflight(r, engines, {"judge_patientact"})
        summary = run_patientact(
            target,
            engines,
            items,
            judge=role,
            baseline=baseline,
            human=ratings,
            max_tokens=max_tokens,
            rubric=spec,
            comparisons=comparisons,
        )
    name = "the PatientAct rubric" if spec.id == SESSION_RUBRIC else f"rubric {spec.id}"
    typer.echo(f"judged {summary.judged} sessions on {name}: {summary.ok} ok, {summary.failed} failed")
    for system, means in summary.means.items():
        typer.echo(f"  {system}: " + ", ".join(f"{d} {v:.2f}" for d, v in means.items()))
    for label, path in summary.outputs.items():
        typer.echo(f"  {label}: {path}")


# -- clinicians: blinded sample and agreement (judge/sample.py, judge/agreement.py) -----------------


class UnitName(str, Enum):
    reply = "reply"
    window = "window"
    conversation = "conversation"


class MixName(str, Enum):
    paper = "paper"


@app.command("sample")
def sample_cmd(
    run_dir: Path = typer.Argument(
        ..., help="Run folder (sessions/sessions.parquet; judgments/ used for strata if present)"
    ),
    out: Path = typer.Option(..., "--out", help="Excerpt file (JSONL) to give to the annotators"),
    n: Optional[int] = typer.Option(None, "--n", min=1, max=100_000, help="Number of excerpts of --unit to draw"),
    unit: UnitName = typer.Option(
        UnitName.reply,
        "--unit",
        help="reply: one counsellor reply; window: five consecutive "
        "counsellor turns; conversation: every counsellor turn of a session",
    ),
    mix: Optional[MixName] = typer.Option(
        None, "--mix", help="paper: the paper's mix, 19 conversations and 48 windows (MindEval2 §3.4)"
    ),
    conversations: Optional[int] = typer.Option(
        None,
        "--conversations",
        min=0,
        max=100_000,
        help="Whole conversations to draw (a mix, with --windows / --replies)",
    ),
    windows: Optional[int] = typer.Option(
        None, "--windows", min=0, max=100_000, help="Five-turn windows to draw (a mix)"
    ),
    replies: Optional[int] = typer.Option(None, "--replies", min=0, max=100_000, help="Single replies to draw (a mix)"),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw, the shuffle and the system codes"),
    key: Optional[Path] = typer.Option(None, "--key", help="Where the un-blinding key goes (default FILE.key.json)"),
    judge: Optional[str] = typer.Option(
        None, "--judge", help="Whose severities stratify the draw, when several judges ran"
    ),
    real: Optional[list[Path]] = typer.Option(
        None,
        "--real",
        help="JSONL of real sessions (judge input format) to mix "
        "in as systems real/COUNSELLOR, as the paper's human evaluation does; repeat",
    ),
) -> None:
    """Blinded, stratified excerpts for clinicians (replies, five-turn windows or whole conversations), with
    the key kept in a separate file."""
    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.judge.sample import sample_excerpts
    from mindsimkit.judge.units import PAPER_MIX

    counts = {
        k: v for k, v in (("conversation", conversations), ("window", windows), ("reply", replies)) if v is not None
    }
    if mix is not None and counts:
        raise ConfigError("--mix paper fixes the counts; drop --conversations / --windows / --replies, or drop --mix")
    chosen = dict(PAPER_MIX) if mix is not None else (counts or None)
    if chosen is not None and (n is not None or unit is not UnitName.reply):
        raise ConfigError(
            "--n and --unit draw one kind of excerpt; a mix (--mix, --conversations, --windows, "
            "--replies) sets its own counts: give one or the other"
        )
    if chosen is None and n is None:
        raise ConfigError(
            "mindsim judge sample: give --n N (with --unit), or a mix: --mix paper, or --conversations N --windows M"
        )
    from mindsimkit.judge.sample import key_path_for
    from mindsimkit.mindcore.outputs import check_out_file
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindcore.manifest import verify_run

    check_out_file(out)
    check_out_file(key or key_path_for(out), "--key")
    if RunLayout(run_dir).sessions.parquet.is_file():
        verify_run(run_dir, needs=["simulation"], optional=["judge"])  # judgments, when there, set the strata
    s = sample_excerpts(run_dir, n, out, seed=seed, key=key, judge=judge, unit=unit.value, mix=chosen, real=real)
    kinds = ", ".join(f"{v} {k}{'s' if v != 1 else ''}" for k, v in s["drawn_by_unit"].items())
    typer.echo(
        f"wrote {s['drawn']} excerpts ({kinds}; {s['rated_turns']} counsellor turns to rate; "
        f"{len(s['systems'])} systems, strata by {s['judge'] or 'counsellor only'}) to {s['out']}; "
        f"key (keep it from the annotators): {s['key']}"
    )


@app.command("agreement")
def agreement_cmd(
    annotations: list[Path] = typer.Option(..., "--annotations", help="Annotation JSONL (repeat for several files)"),
    judgments: Optional[Path] = typer.Option(None, "--judgments", help="RUN_DIR/judgments (or its parquet file)"),
    key: Optional[Path] = typer.Option(None, "--key", help="Key file of the sample, when annotations name excerpt ids"),
    out: Path = typer.Option(Path("agreement"), "--out", help="Folder for agreement.json and agreement.md"),
    draws: int = typer.Option(
        2000, "--draws", min=1, max=100_000, help="Bootstrap resamples for ranking stability and the judge tests"
    ),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed"),
    costs: Optional[Path] = typer.Option(
        None,
        "--costs",
        help="A judge run's judgments/report.json with the priced "
        "cost table, for Figure 2 (default: the one beside --judgments)",
    ),
) -> None:
    """Agreement of annotators with each other and with the judge (MindEval2 Tables 2, 3, 7, 9, 10), paired tests
    of the judges' pooled issue recall and F1 (§3.4), and agreement against cost per query (Figure 2)."""
    from mindsimkit.judge.agreement import run_agreement
    from mindsimkit.mindcore.outputs import check_out_folder

    check_out_folder(out)
    report = run_agreement(annotations, judgments=judgments, key=key, out=out, draws=draws, seed=seed, costs=costs)
    ia = report["inter_annotator"]["severity"]
    typer.echo(
        f"{report['counts']['annotations']} annotations, {len(report['counts']['annotators'])} annotators; "
        f"mean pairwise κ_w {_r(ia['mean_pairwise_kappa_w'])}"
    )
    for name, j in report["judges"].items():
        s = j["severity"]
        r = report["ranking"].get("judges", {}).get(name, {})
        typer.echo(
            f"  {name}: accuracy {_r(s['accuracy'])}, macro F1 {_r(s['macro_f1'])}, κ_w {_r(s['kappa_w'])}, "
            f"ranking τ_b {_r(r.get('tau_b'))}"
        )
    lower = (report.get("issue_tests") or {}).get("significantly_lower_than_best")
    if lower is not None:
        typer.echo(
            f"  pooled issue recall/F1 significantly below {report['issue_tests']['best_f1']} (p < 0.05): "
            + (", ".join(f"{n} ({'/'.join(ms)})" for n, ms in sorted(lower.items())) or "none")
        )
    typer.echo(
        f"wrote {out / 'agreement.json'} and {out / 'agreement.md'}"
        + (f" and {out / report['plots'][0]}" if report.get("plots") else "")
    )


def _r(x: Any) -> str:
    return "—" if x is None else f"{x:.3f}"


@app.command("alpha")
def alpha_cmd(
    ratings: list[Path] = typer.Argument(
        ...,
        help="Ratings in the long format: CSV or JSONL with item, unit, rater, "
        "value (optional system, patient); docs/human-evaluation.md",
    ),
    rubric: str = typer.Option(
        ..., "--rubric", help="The rubric the values belong to: a built-in id or a rubric YAML file"
    ),
    out: Path = typer.Option(Path("alpha"), "--out", help="Folder for alpha.json and alpha.md"),
) -> None:
    """Krippendorff's α per rubric item at the rubric's level of measurement: on every pairable value, and on
    the units every rater rated (both labelled)."""
    from mindsimkit.mindcore.io import atomic_write_json, atomic_write_text
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.judge.ratings import alpha_md, alpha_report, read_ratings
    from mindsimkit.judge.rubrics import load

    check_out_folder(out)
    spec = load(rubric)
    rep = alpha_report(read_ratings(ratings, spec), spec)
    typer.echo(
        f"{rep['ratings']} ratings, {len(rep['raters'])} raters, {rep['units']} units "
        f"({rep['missing']} missing, {rep['not_applicable']} not applicable left out); α {spec.level}"
    )
    if len(rep["raters"]) < 2:
        typer.echo(
            f"α is missing for every item: one rater only ({', '.join(rep['raters'])}); α compares raters, "
            "it needs two or more"
        )
    else:
        for item, a in rep["items"].items():
            why = f" ({a['reason']})" if a.get("reason") else ""
            typer.echo(
                f"  {item}: α pairable {_r(a['alpha_pairable'])} on {a['units_pairable']} units; "
                f"all-rater subset {_r(a['alpha_all_rater_subset'])} on {a['units_all_rater_subset']} units{why}"
            )
    atomic_write_json(out / "alpha.json", rep)
    atomic_write_text(out / "alpha.md", alpha_md(rep))
    typer.echo(f"wrote {out / 'alpha.json'} and {out / 'alpha.md'}")

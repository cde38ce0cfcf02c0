"""`mindsim annotate …` (sample, serve, export, Label Studio interchange) and `mindsim realism report`.
The top-level CLI mounts `app` as `annotate` and `realism_app` as `realism`; each command's work lives in
the module it calls."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

if TYPE_CHECKING:
    from mindsimkit.mindsim_app.annotate.tasks import Design

app = typer.Typer(
    help="Human evaluation: blinded samples, a local annotation page, export to the agreement tables.",
    no_args_is_help=True,
)
sample_app = typer.Typer(help="Draw a blinded task folder for one protocol (key written apart).", no_args_is_help=True)
labelstudio_app = typer.Typer(
    help="Label Studio interchange: tasks + labeling config out, its JSON export back in.", no_args_is_help=True
)
realism_app = typer.Typer(help="Human realism ratings (MindEval2 Tables 4 and 13).", no_args_is_help=True)


@realism_app.callback()
def _realism() -> None:
    """Human realism ratings (MindEval2 §4.3, Tables 4 and 13)."""


app.add_typer(sample_app, name="sample")
app.add_typer(labelstudio_app, name="labelstudio")

RATERS = typer.Option(None, "--raters", help="Rater ids, comma-separated (or --n-raters)")
N_RATERS = typer.Option(None, "--n-raters", min=1, max=1000, help="Number of raters, named R1…Rn")
K = typer.Option(3, "--k", min=1, max=100, help="Raters per item")
ALL = typer.Option(0, "--all-raters", min=0, max=100_000, help="Items rated by every rater (agreement subset)")
SEED = typer.Option(0, "--seed", help="Seed of the draw, the shuffles, ids and codes")
KEY = typer.Option(None, "--key", help="Where the key goes (default: TASK.key.json beside the task folder)")
# The whole-session samplers' inputs (`patientact-sessions` and `sessions`).
SESSION_RUNS = typer.Option(None, "--run", help="Run folder (repeat)")
SESSION_FILE = typer.Option(None, "--sessions", help="Another simulator's sessions JSONL")
PER_SYSTEM = typer.Option(None, "--per-system", help="Sessions per system (default all)")
SYSTEMS = typer.Option(
    None,
    "--system",
    help="Only this system's sessions (repeat; default every system of the inputs), e.g. Table 2's four of a run "
    "that also holds the ablation arms",
)
PER_GROUP = typer.Option(
    False,
    "--per-group",
    help="Draw --per-system sessions per system within each patient group (a situation-seeded profile's disorder, "
    "else its main presenting problem): PatientAct's 10 per disorder per system",
)


def _design(raters: Optional[str], n_raters: Optional[int], k: int, all_raters: int) -> Design:
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindsim_app.annotate.tasks import Design, parse_raters

    names = parse_raters(raters, n_raters)
    if k < 1 or k > len(names):
        raise InputError(f"--k {k}: give 1 to {len(names)} raters per item (there are {len(names)} raters)")
    if all_raters < 0:
        raise InputError("--all-raters: a count of items, 0 or more")
    return Design(raters=names, k=k, all_raters=all_raters)


def _said(s: dict[str, Any]) -> None:
    typer.echo(
        f"wrote task {s['task']}: {s['items']} items, {s['units']} rated units, {len(s['raters'])} raters; "
        f"key (keep it from the raters): {s['key']}"
    )
    if s.get("real_text"):
        typer.echo("note: this task holds real conversation text; its header says publish: never")


@sample_app.command("mhqr")
def sample_mhqr_cmd(
    out: Path = typer.Option(..., "--out", help="Task folder to create"),
    run_dir: Optional[Path] = typer.Argument(None, help="Run folder to draw from (with --n)"),
    n: Optional[int] = typer.Option(None, "--n", min=1, max=100_000, help="Excerpts of --unit to draw from RUN_DIR"),
    unit: str = typer.Option("reply", "--unit", help="reply | window (five counsellor turns) | conversation"),
    mix: Optional[str] = typer.Option(
        None,
        "--mix",
        help="paper: 19 conversations and 48 windows (MindEval2 §3.4); "
        "for other mixes draw with `mindsim judge sample` and give --excerpts",
    ),
    excerpts: Optional[Path] = typer.Option(None, "--excerpts", help="Or: an excerpt file from `mindsim judge sample`"),
    excerpts_key: Optional[Path] = typer.Option(None, "--excerpts-key", help="Its key (default EXCERPTS.key.json)"),
    judge: Optional[str] = typer.Option(None, "--judge", help="Whose severities stratify the draw"),
    real: Optional[list[Path]] = typer.Option(
        None,
        "--real",
        help="JSONL of real sessions (judge input format) mixed "
        "into the draw from RUN_DIR as systems real/COUNSELLOR (repeat; the task "
        "is then marked never-publish)",
    ),
    raters: Optional[str] = RATERS,
    n_raters: Optional[int] = N_RATERS,
    k: int = K,
    all_raters: int = ALL,
    seed: int = SEED,
    key: Optional[Path] = KEY,
) -> None:
    """MHQR: counsellor replies (severity + issues), clinicians blind to the system (MindEval2 §3.4)."""
    from mindsimkit.judge.units import PAPER_MIX, UNITS
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindsim_app.annotate.samplers import sample_mhqr

    if unit not in UNITS:
        raise InputError(f"--unit {unit}: use one of {', '.join(UNITS)}")
    if mix not in (None, "paper"):
        raise InputError(f"--mix {mix}: only 'paper'; draw other mixes with `mindsim judge sample` and pass --excerpts")
    if mix and n:
        raise InputError("--mix paper fixes the counts; drop --n")
    _said(
        sample_mhqr(
            out,
            _design(raters, n_raters, k, all_raters),
            run_dir=run_dir,
            n=n,
            excerpts=excerpts,
            excerpts_key=excerpts_key,
            seed=seed,
            judge=judge,
            key=key,
            unit=unit,
            mix=dict(PAPER_MIX) if mix else None,
            real=real or (),
        )
    )


@sample_app.command("realism")
def sample_realism_cmd(
    out: Path = typer.Option(..., "--out", help="Task folder to create"),
    n: int = typer.Option(..., "--n", min=1, max=100_000, help="Windows to draw, even over systems"),
    run: Optional[list[str]] = typer.Option(None, "--run", help="[NAME=]run folder (repeat)"),
    sessions: Optional[list[str]] = typer.Option(
        None, "--sessions", help="[NAME=]another simulator's sessions JSONL (repeat)"
    ),
    real: Optional[list[str]] = typer.Option(
        None, "--real", help="[NAME=]real conversations, chat JSONL (repeat; the task is then marked never-publish)"
    ),
    windows: str = typer.Option("1,5,9", "--windows", help="Window sizes in turns, taken in turn"),
    first_sessions: bool = typer.Option(False, "--first-sessions", help="Only first sessions (the paper's sample)"),
    max_turns: Optional[int] = typer.Option(
        None, "--max-turns", min=1, max=10_000, help="Only the first N patient turns of each conversation"
    ),
    patient_role: str = typer.Option("user", "--patient-role", help="Role of the patient in --real files"),
    raters: Optional[str] = RATERS,
    n_raters: Optional[int] = N_RATERS,
    k: int = K,
    all_raters: int = ALL,
    seed: int = SEED,
    key: Optional[Path] = KEY,
) -> None:
    """Realism: patient replies in windows of 1/5/9 turns, systems and real conversations mixed (MindEval2 §4.3)."""
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindsim_app.annotate.samplers import sample_realism

    try:
        sizes = [int(w) for w in windows.split(",") if w.strip()]
    except ValueError:
        raise InputError(f"--windows {windows}: give turn counts like 1,5,9") from None
    if not sizes or len(sizes) > 20 or not all(1 <= w <= 100 for w in sizes):
        raise InputError(f"--windows {windows}: give 1 to 20 window sizes of 1 to 100 turns, like 1,5,9")
    s = sample_realism(
        out,
        _design(raters, n_raters, k, all_raters),
        n=n,
        runs=run or [],
        sessions=sessions or [],
        real=real or [],
        windows=sizes,
        seed=seed,
        first_sessions=first_sessions,
        max_turns=max_turns,
        patient_role=patient_role,
        key=key,
    )
    _said(s)
    if s["short"]:
        typer.echo("fewer windows than asked for: " + ", ".join(f"{k} short by {v}" for k, v in s["short"].items()))


@sample_app.command("patientact-sessions")
def sample_sessions_cmd(
    out: Path = typer.Option(..., "--out", help="Task folder to create"),
    run: Optional[list[Path]] = SESSION_RUNS,
    sessions: Optional[Path] = SESSION_FILE,
    per_system: Optional[int] = PER_SYSTEM,
    per_group: bool = PER_GROUP,
    system: Optional[list[str]] = SYSTEMS,
    raters: Optional[str] = RATERS,
    n_raters: Optional[int] = N_RATERS,
    k: int = K,
    all_raters: int = ALL,
    seed: int = SEED,
    key: Optional[Path] = KEY,
) -> None:
    """PatientAct sessions: five 1–5 scales on the client, blind to the method (PatientAct §4.2)."""
    design = _design(raters, n_raters, k, all_raters)
    _sample_sessions(out, run, sessions, per_system, per_group, system, design, seed, key)


@sample_app.command("sessions")
def sample_rubric_sessions_cmd(
    out: Path = typer.Option(..., "--out", help="Task folder to create"),
    rubric: str = typer.Option(
        ...,
        "--rubric",
        help="A conversation rubric: a built-in id (mindeval_v1, "
        "patientact_session, …) or a rubric YAML file (docs/judge.md)",
    ),
    run: Optional[list[Path]] = SESSION_RUNS,
    sessions: Optional[Path] = SESSION_FILE,
    per_system: Optional[int] = PER_SYSTEM,
    per_group: bool = PER_GROUP,
    system: Optional[list[str]] = SYSTEMS,
    raters: Optional[str] = RATERS,
    n_raters: Optional[int] = N_RATERS,
    k: int = K,
    all_raters: int = ALL,
    seed: int = SEED,
    key: Optional[Path] = KEY,
) -> None:
    """Whole sessions rated on any conversation rubric (every item on its scale), blind to the system."""
    from mindsimkit.judge.rubrics import load

    design = _design(raters, n_raters, k, all_raters)
    _sample_sessions(out, run, sessions, per_system, per_group, system, design, seed, key, rubric=load(rubric))


def _sample_sessions(
    out: Path,
    run: Optional[list[Path]],
    sessions: Optional[Path],
    per_system: Optional[int],
    per_group: bool,
    systems: Optional[list[str]],
    design: Any,
    seed: int,
    key: Optional[Path],
    **rubric: Any,
) -> None:
    """Both whole-session commands: the PatientAct sessions rubric unless `rubric` names another."""
    from mindsimkit.mindsim_app.annotate.samplers import sample_patientact_sessions

    _said(
        sample_patientact_sessions(
            out,
            design,
            runs=run or [],
            sessions=sessions,
            per_system=per_system,
            per_group=per_group,
            systems=systems or (),
            seed=seed,
            key=key,
            **rubric,
        )
    )


@sample_app.command("patientact-profiles")
def sample_profiles_cmd(
    out: Path = typer.Option(..., "--out", help="Task folder to create"),
    run: list[Path] = typer.Option(..., "--run", help="Run folder with PatientAct sessions (repeat)"),
    n: Optional[int] = typer.Option(None, "--n", min=1, max=100_000, help="Profiles to draw (default all)"),
    raters: Optional[str] = RATERS,
    n_raters: Optional[int] = N_RATERS,
    k: int = K,
    all_raters: int = ALL,
    seed: int = SEED,
    key: Optional[Path] = KEY,
) -> None:
    """PatientAct profiles: four 1–5 scales, attachment and theme picks, one diversity rating per rater (§4.1)."""
    from mindsimkit.mindsim_app.annotate.samplers import sample_patientact_profiles

    s = sample_patientact_profiles(out, _design(raters, n_raters, k, all_raters), runs=run, n=n, seed=seed, key=key)
    _said(s)
    if s["seed_words_shown"]:
        typer.echo(
            f"note: {s['seed_words_shown']} profiles name their own attachment style or theme word in the "
            "shown text (the formulation is written from the seed)"
        )


@app.command("serve")
def serve_cmd(
    tasks: list[Path] = typer.Argument(..., help="Task folders to serve"),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: this machine only)"),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port (0: any free port)"),
    new_links: bool = typer.Option(
        False, "--new-links", help="Issue new links for every rater (old ones stop working)"
    ),
    links: Optional[Path] = typer.Option(
        None, "--links", help="Where the links file goes (one task only; default TASK/rater-links.txt, mode 600)"
    ),
) -> None:
    """Serve the annotation page; every answer is saved when given. Links go to the links file only."""
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindsim_app.annotate import server

    if links is not None and len(tasks) > 1:
        raise InputError("--links: one file per task; serve one task, or let each task keep TASK/rater-links.txt")
    if links is not None:
        from mindsimkit.mindcore.outputs import check_out_file

        check_out_file(links, "--links")
    if not server.is_local(host):
        typer.echo(
            f"warning: listening on {host}: anyone who can reach it and holds a link can answer, and the "
            "page is plain http; prefer 127.0.0.1 with an SSH tunnel",
            err=True,
        )
    server.run(tasks, host=host, port=port, renew=new_links, links_file=links, echo=typer.echo)


@app.command("export")
def export_cmd(
    task: Path = typer.Argument(..., help="Task folder"),
    out: Path = typer.Option(..., "--out", help="Folder for the exported files"),
    key: Optional[Path] = typer.Option(
        None, "--key", help="TASK.key.json (needed for PatientAct and to unblind realism)"
    ),
) -> None:
    """Write the answers as the files `judge agreement`, `judge run --rubric patientact --human` and
    `realism report` read."""
    from mindsimkit.mindsim_app.annotate.export import export_task

    from mindsimkit.mindcore.outputs import check_out_folder

    check_out_folder(out)
    s = export_task(task, out, key)
    typer.echo(f"exported {s['answers']} answers of {len(s['raters'])} raters ({s['protocol']})")
    for label, path in s["files"].items():
        typer.echo(f"  {label}: {path}")
    if s["publish"] == "never":
        typer.echo("note: these files come from real conversations; never publish them")


@labelstudio_app.command("export")
def ls_export_cmd(
    task: Path = typer.Argument(..., help="Task folder"),
    out: Path = typer.Option(..., "--out", help="Folder for tasks.json and config.xml"),
) -> None:
    """Label Studio tasks (one per rated unit, blinded) and the labeling config of the task's protocol."""
    from mindsimkit.mindsim_app.annotate.labelstudio import export_labelstudio

    from mindsimkit.mindcore.outputs import check_out_folder

    check_out_folder(out)
    s = export_labelstudio(task, out)
    typer.echo(
        f"wrote {s['tasks']} Label Studio tasks to {s['tasks_file']} and the labeling config to {s['config_file']}"
    )


@labelstudio_app.command("import")
def ls_import_cmd(
    task: Path = typer.Argument(..., help="The task folder the Label Studio tasks came from"),
    export: Path = typer.Argument(..., help="Label Studio's JSON export"),
    out: Path = typer.Option(..., "--out", help="Folder for the exported files (as `annotate export` writes them)"),
    key: Optional[Path] = typer.Option(None, "--key", help="TASK.key.json"),
) -> None:
    """Read Label Studio's JSON export back into the same files `annotate export` writes."""
    from mindsimkit.mindsim_app.annotate.export import export_task
    from mindsimkit.mindsim_app.annotate.labelstudio import import_labelstudio

    from mindsimkit.mindcore.outputs import check_out_folder

    check_out_folder(out)
    answers = import_labelstudio(task, export)
    s = export_task(task, out, key, answers=answers, source=str(export))
    typer.echo(f"imported {s['answers']} answers of {len(s['raters'])} raters from {export}")
    for label, path in s["files"].items():
        typer.echo(f"  {label}: {path}")


@labelstudio_app.command("ratings")
def ls_ratings_cmd(
    export: Path = typer.Argument(
        ..., help="Label Studio's JSON export (any project whose controls are named after the rubric's items)"
    ),
    rubric: str = typer.Option(..., "--rubric", help="The rubric: a built-in id or a rubric YAML file"),
    out: Path = typer.Option(..., "--out", help="Folder for ratings.jsonl (the long format)"),
) -> None:
    """Read a Label Studio export made anywhere into the long ratings format, checked against the rubric
    (then `mindsim judge alpha` or `judge run --human`)."""
    from mindsimkit.judge.ratings import write_rows
    from mindsimkit.judge.rubrics import load
    from mindsimkit.mindcore.io import atomic_write_jsonl
    from mindsimkit.mindsim_app.annotate.labelstudio import import_ratings

    from mindsimkit.mindcore.outputs import check_out_folder

    check_out_folder(out)
    spec = load(rubric)
    got = import_ratings(export, spec)
    path = atomic_write_jsonl(out / "ratings.jsonl", write_rows(got.rows))
    typer.echo(
        f"read {len(got.rows)} ratings of {len({r.rater for r in got.rows})} raters on "
        f"{len({r.unit for r in got.rows})} units ({got.missing} missing, {got.not_applicable} not applicable "
        f"left out) into {path}"
    )


@realism_app.command("report")
def realism_report_cmd(
    inputs: list[Path] = typer.Argument(
        ...,
        help="Realism task folders (with --key), realism_ratings.jsonl files, or "
        "the MindEval2 authors' member_realism_annotations.json as downloaded",
    ),
    out: Path = typer.Option(Path("realism_report"), "--out", help="Folder for realism_report.json and .md"),
    key: Optional[Path] = typer.Option(None, "--key", help="TASK.key.json (for task folders)"),
    draws: int = typer.Option(2000, "--draws", min=1, max=100_000, help="Bootstrap resamples of patients"),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed"),
) -> None:
    """Table 4 (per system: means, share ≤ 3, share with no reason, reason shares) and Table 13 (ordinal
    Krippendorff's α overall and pairwise, within one point), with patient-bootstrap intervals."""
    from mindsimkit.mindsim_app.annotate.realism_report import run_report

    from mindsimkit.mindcore.outputs import check_out_folder

    check_out_folder(out)
    rep = run_report(inputs, out, key, draws, seed)
    for s, t in rep["table4"].items():
        typer.echo(
            f"  {s}: mean per turn {t['mean_turn']:.2f}, per conversation {t['mean_conversation']:.2f}, "
            f"≤3 {100 * t['share_at_most_3']:.0f}%, no reason {100 * t['share_no_reason']:.0f}%"
        )
    t13 = rep["table13"]

    def show(a: float | None) -> str:
        return "—" if a is None else f"{a:.2f}"

    typer.echo(
        f"  α (ordinal, all-rater subset, {t13['turns']} turns rated by all): {show(t13['alpha'])}; "
        f"α (ordinal, every pairable rating, {t13.get('turns_pairable', 0)} turns): {show(t13.get('alpha_pairable'))}"
    )
    if t13.get("alpha_missing"):
        typer.echo(f"  α is missing: {t13['alpha_missing']}")
    typer.echo(f"wrote {out / 'realism_report.json'} and {out / 'realism_report.md'}")

"""The `mindsim` command line. Every command exits 0 on success, 2 on bad input or configuration
(one readable message naming what and where), 1 when an engine fails at run time, 130 on Ctrl-C."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from rich.markup import escape
from rich.table import Table

from mindsimkit.mindcore.console import err_console, one_line, out_console
from mindsimkit.mindcore.errors import EngineError, MindsimError, UserError
from mindsimkit.mindcore.layout import RunLayout

app = typer.Typer(
    name="mindsim",
    help="Clinically grounded synthetic patients, multi-session simulation and realism validation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
engines_app = typer.Typer(help="Inspect and test the engines a recipe names.", no_args_is_help=True)
app.add_typer(engines_app, name="engines")

err = err_console()
out = out_console()


def _print_version(asked: bool) -> None:
    if asked:
        from mindsimkit import __version__

        out.print(f"mindsim {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print the toolkit's version and exit."
    ),
) -> None:
    """Options given before any command; the app's description is the Typer's `help`."""


@app.command("run")
def run_cmd(
    recipe: Path = typer.Argument(..., help="Recipe YAML, e.g. recipes/quickstart.yaml"),
    out_dir: Path = typer.Option(..., "--out", help="Output folder; rerunning with the same folder resumes"),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        help="Show distilabel's and datasets' own logs on the terminal instead of writing them to OUT/logs/",
    ),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray",
        metavar="ADDRESS",
        help="Run on this Ray cluster (`auto`, host:port, ray://host:10001; `local` starts one here); RAY_ADDRESS "
        "does the same. Outputs, checkpoints and resume are the same as a local run (docs/scale.md)",
    ),
    plan_from: Optional[Path] = typer.Option(
        None,
        "--plan-from",
        metavar="RUN",
        help="A finished pilot run of this recipe: the plan in run.json (and the report's plan beside actual) takes "
        "its measured sizes, as `mindsim plan --from-run` does; give it again when resuming",
    ),
) -> None:
    """Run the main job: profiles → screening → pool → multi-session simulation → validation → (MHQR judge) →
    dataset + card."""
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindcore.recipe import load_recipe

    # A missing or unreadable recipe is reported before the job's seconds of library imports;
    # run_job loads it again and checks every section.
    load_recipe(recipe)
    check_out_folder(out_dir)
    if plan_from is not None:
        from mindsimkit.mindsim_app.plan import check_pilot

        check_pilot(plan_from, "--plan-from")
    from mindsimkit.mindcore.runfolder import run_lock
    from mindsimkit.mindsim_app.job import run_job

    # Passed only when given, so a stand-in run_job with the older signature (tests/mindsim_app/test_cli.py) still fits.
    extra: dict[str, Any] = {"ray_address": ray_address} if ray_address else {}
    if plan_from is not None:
        extra["plan_from"] = plan_from
    with run_lock(out_dir):
        summary = run_job(recipe, out_dir, verbose=verbose, **extra)
    table = Table(title="Outputs", show_header=True)
    table.add_column("what")
    table.add_column("where", overflow="fold")
    for what, where in summary.outputs.items():
        table.add_row(what, str(where))
    out.print(table)
    # The job writes its dataset even when some arcs failed, but a CI gate must not pass on it.
    failed = summary.failed_arcs
    if failed:
        err.print(
            f"[red]error:[/] {failed} session arc{'s' if failed != 1 else ''} failed "
            f"(see {escape(str(RunLayout(out_dir).sessions.summary))}); rerun the same command to retry "
            f"the failed arcs, finished sessions are kept"
        )
        raise typer.Exit(1)


@engines_app.command("check")
def engines_check_cmd(
    recipe: Optional[Path] = typer.Argument(None, help="Recipe YAML; default: the embedded engine only"),
    measure_throughput: bool = typer.Option(
        False,
        "--measure-throughput",
        help="Also measure each engine's prompt and completion tokens per second at "
        "its concurrency and record them for `mindsim plan` (docs/plan.md)",
    ),
) -> None:
    """Ping every engine the recipe names: model, latency and a structured-output round trip."""
    from mindsimkit.mindcore.config import EnginesConfig
    from mindsimkit.mindcore.recipe import load_recipe

    loaded = load_recipe(recipe) if recipe else None
    config = loaded.engines_config() if loaded else EnginesConfig()
    from mindsimkit.mindcore.engine_health import check_engines
    from mindsimkit.mindcore.redact import shown_url

    tooled = _tool_roles(loaded)
    results = check_engines(config, _counsellor_bindings(loaded), list(tooled))
    table = Table(title=f"Engines in {recipe or 'default config'}")
    for col in ("engine", "kind", "endpoint", "model", "reply", "latency", "structured", "tool call"):
        table.add_column(col, overflow="fold")
    for h in results:
        table.add_row(
            h.engine,
            ", ".join(filter(None, (h.kind, h.threads_text()))),
            shown_url(h.base_url),  # masked before the table sizes its columns
            h.model,
            "[green]ok[/]" if h.ok else "[red]unreachable[/]",
            f"{h.latency_s:.2f}s" if h.latency_s is not None else "-",
            (f"[green]ok[/] {h.structured_latency_s:.2f}s" if h.structured_ok else "[red]failed[/]"),
            {"native": "[green]native[/]", "text": "[red]text[/]"}.get(h.tool_call, "-"),
        )
    out.print(table)
    for t in _tool_paths(tooled, config, results):
        if t.note:
            out.print(f"tool calls: {escape(t.note)}")
        if t.problem and not any(h.engine == t.engine and h.problem for h in results):
            by = next(h for h in results if h.engine == t.engine)
            by.problem, by.problem_kind, by.hints = t.problem, "config", []
    accepted = [(h, a) for h in results for a in h.accepted]
    if accepted:
        # What each role sends and whether its model took it: the place to see a refused field.
        roles = Table(title="Requests per role (one short chat each, with the role's own fields)")
        for col in ("role", "engine", "model", "sent", "accepted"):
            roles.add_column(col, overflow="fold")
        for h, a in accepted:
            verdict = (
                "[green]yes[/]"
                if a.ok
                else f"[red]no[/]: {escape(a.problem)}" + (f" — {escape(a.hint)}" if a.hint else "")
            )
            roles.add_row(a.role, h.engine, a.model, escape(a.sent_text()), verdict)
        out.print(roles)
    # A listed problem (e.g. the model is not served) counts even when the chat itself answered.
    bad = [h for h in results if h.problem or not (h.ok and h.structured_ok)]
    for h in bad:
        # One line per engine, hints included, so a log grep or a CI annotation shows the whole story.
        fix = "; ".join(h.hints)
        what = h.problem if f"'{h.engine}'" in h.problem else f"engine '{h.engine}': {h.problem}"
        err.print(f"[red]error:[/] {escape(one_line(what))}" + (f" — {escape(fix)}" if fix else ""))
    if bad:
        # Something the user fixes in the recipe or environment is exit 2; an engine that is down is exit 1.
        raise typer.Exit(2 if any(h.problem_kind == "config" for h in bad) else 1)
    if measure_throughput:
        _measure_throughput(config)


def _measure_throughput(config: Any) -> None:
    from mindsimkit.mindsim_app.throughput import measure_all, record_path

    table = Table(title=f"Throughput per server (recorded in {escape(str(record_path()))})")
    for col in ("engine", "in flight", "prompt tok/s", "completion tok/s"):
        table.add_column(col)
    for name, (_, rate) in measure_all(config).items():
        table.add_row(
            name, str(rate.concurrency), f"{rate.prompt_tokens_per_s:,.0f}", f"{rate.completion_tokens_per_s:,.0f}"
        )
    out.print(table)


def _tool_roles(recipe: Any) -> dict[str, str]:
    """The recipe's tool-calling roles and how they must call (`mindsim.stage.tool_roles`)."""
    from mindsimkit.mindsim.config import SimulationConfig
    from mindsimkit.mindsim.stage import tool_roles

    return tool_roles(SimulationConfig.from_section(getattr(recipe, "simulation", None))) if recipe else {}


def _tool_paths(tooled: dict[str, str], config: Any, results: list[Any]) -> list[Any]:
    from mindsimkit.mindcore.backends import tool_parser_for
    from mindsimkit.mindcore.engine_health import tool_path

    out = []
    for role, mode in tooled.items():
        try:
            engine = config.role_spec(role).engine
        except KeyError:
            continue
        h = next((h for h in results if h.engine == engine), None)
        if h is not None and h.ok:
            spec = config.engines[engine]
            out.append(
                tool_path(
                    role,
                    mode,
                    engine,
                    bool(getattr(spec, "native_tools", False)),
                    h,
                    tool_parser_for(getattr(spec, "kind", "")),
                )
            )
    return out


def _counsellor_bindings(recipe: Any) -> dict[str, Any]:
    """The counsellors a recipe binds as engine + model (`simulation.counsellors`), label → RoleSpec, so
    `engines check` sends each one its own request too."""
    from mindsimkit.mindsim.config import CounsellorBinding, SimulationConfig

    if recipe is None:
        return {}
    scfg = SimulationConfig.from_section(getattr(recipe, "simulation", None))
    return {f"counsellor:{c.name}": c.role_spec() for c in scfg.counsellors if isinstance(c, CounsellorBinding)}


@functools.cache
def _mount_stage_commands() -> None:
    """Stage packages own their command functions; the CLI only mounts them. Once per process: typer keeps
    every mount, so a second `main()` in one process (a notebook, the in-process tests) would otherwise build
    each command again per earlier call, the tree growing with every call."""
    from mindsimkit.judge.cli import app as judge_app
    from mindsimkit.mindsim_app.ablation import ablate_app
    from mindsimkit.mindsim_app.annotate.cli import app as annotate_app
    from mindsimkit.mindsim_app.annotate.cli import realism_app
    from mindsimkit.mindsim_app.exports.cli import export_app
    from mindsimkit.mindsim_app.inspect.cli import app as inspect_app
    from mindsimkit.mindsim_app.patientact_eval.cli import app as patientact_app
    from mindsimkit.mindsim_app.imports.cli import app as import_app
    from mindsimkit.mindsim_app.plan_cli import plan_cmd
    from mindsimkit.mindsim_app.publish import publish_cmd
    from mindsimkit.mindsim_app.report.cli import report_cmd
    from mindsimkit.mindsim_app.serve import serve_cmd
    from mindsimkit.mindsim_app.simulate_cli import simulate_cmd
    from mindsimkit.profilegen.cli import app as profiles_app

    from mindsimkit.validation.cli import app as validate_app

    app.add_typer(profiles_app, name="profiles", help="Generate, screen and select patient profiles.")
    app.command("simulate")(simulate_cmd)
    app.command("plan")(plan_cmd)
    app.add_typer(validate_app, name="validate", help="Realism validation against reference statistics.")
    app.command("publish")(publish_cmd)
    app.command("report")(report_cmd)
    app.command("serve")(serve_cmd)
    app.add_typer(patientact_app, name="patientact")
    app.add_typer(judge_app, name="judge", help="MHQR: judge counsellor replies, sample for clinicians, agreement.")
    app.add_typer(export_app, name="export", help="Post-training exports (counsellor SFT, DPO pairs, patient data).")
    app.add_typer(
        annotate_app, name="annotate", help="Human evaluation: blinded samples, a local annotation page, export."
    )
    app.add_typer(realism_app, name="realism", help="Human realism ratings (MindEval2 Tables 4 and 13).")
    app.add_typer(ablate_app, name="ablate", help="Ablations of a finished run: `ablate memory` (MindEval2 Figure 11).")
    app.add_typer(
        inspect_app,
        name="inspect",
        help="inspect_ai logs of the toolkit's tasks: `inspect to-run LOG` writes a run folder (docs/inspect.md).",
    )
    app.add_typer(
        import_app,
        name="import",
        help="Read the MindEval authors' released files (members, realism study, v1 ratings) into the toolkit's files.",
    )


def _is_usage_error(exc: BaseException) -> bool:
    # typer >= 0.29 bundles its own copy of click (`typer._click`), older typer uses click itself:
    # recognise their ClickException by what it offers rather than by either class.
    return isinstance(getattr(exc, "exit_code", None), int) and callable(getattr(exc, "format_message", None))


def _usage_error(exc: Exception) -> int:
    ctx = getattr(exc, "ctx", None)
    # `_is_usage_error` checked that click's exit_code and format_message are there.
    exit_code: int = getattr(exc, "exit_code", 2)
    if any(k.__name__ == "NoArgsIsHelpError" for k in type(exc).__mro__):
        # A bare group name asks for its help; click counts that as a usage error (exit 2).
        out.print(escape(ctx.get_help()) if ctx is not None else "")
        return exit_code
    where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
    message = one_line(getattr(exc, "format_message", lambda: str(exc))()).rstrip(".")
    _error("error:", f"{message}{where}")
    return exit_code


def _path_problem(exc: OSError) -> str:
    where = exc.filename or "a path"
    if isinstance(exc, PermissionError):
        # Reading a file the user gave and writing an output fail alike; the advice differs.
        if exc.filename and Path(exc.filename).is_file() and not os.access(exc.filename, os.R_OK):
            return f"{where}: permission denied reading it; give a file you may read, or change its permissions"
        return f"{where}: permission denied; choose a path you may write to, or change its permissions"
    if isinstance(exc, IsADirectoryError):
        return f"{where}: a folder where a file is needed; give a file path"
    return f"{where}: a file where a folder is needed; give another path, or move the file away"


def _in_pseudo_filesystem(exc: OSError) -> bool:
    # A command that writes its output without `check_out_*` meets /proc only when it writes; a missing file
    # anywhere else is not the user's path and stays an internal error.
    from mindsimkit.mindcore.outputs import pseudo_filesystem

    return isinstance(exc.filename, str) and pseudo_filesystem(exc.filename) is not None


def _error(prefix: str, message: object) -> None:
    """The one error line: scrubbed of secrets by the console, never wrapped (mindcore.console)."""
    err.print(f"[red]{prefix}[/] {escape(one_line(message))}")


def _unexpected(exc: BaseException) -> int:
    """An exception no command anticipated: one line (its type and message, scrubbed), exit 1. The traceback,
    without local variables, only with MINDSIM_TRACEBACK=1: a frame's locals can hold an API key."""
    if os.environ.get("MINDSIM_TRACEBACK"):
        import traceback

        from mindsimkit.mindcore.redact import scrub

        sys.stderr.write(scrub("".join(traceback.format_exception(exc))))
    _error(
        "error:",
        f"internal error ({type(exc).__name__}: {exc}); this is a mindsim bug, please report it "
        "with the command you ran (MINDSIM_TRACEBACK=1 shows where it happened)",
    )
    return 1


def _as_ctrl_c(signum: int, frame: Any) -> None:
    """SIGTERM does what Ctrl-C does: whatever handles SIGINT now (asyncio cancelling its main task, the profile
    stage stopping its pipeline, or Python's KeyboardInterrupt) stops the command at its next safe point."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C and SIGTERM interrupt the command (exit 130), also when it was started with SIGINT ignored (a
    background job of a shell script, a supervisor): a job that cannot be stopped cleanly is killed instead, and a
    kill skips the line that says what to do. The handlers that were there come back afterwards, so `main` called
    inside another program leaves its signals as they were. Handlers can be set from the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.default_int_handler), signal.signal(signal.SIGTERM, _as_ctrl_c)
    try:
        yield
    finally:
        for signum, handler in zip((signal.SIGINT, signal.SIGTERM), before):
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    """Run a command and return its exit code (the console script's `sys.exit` uses it).

    Exit codes: 0 success; 2 bad input, configuration or usage; 1 an engine failed at run time, a stage
    finished with failures, the disk filled up, or mindsim itself failed; 130 Ctrl-C. Each error is one line
    on stderr, scrubbed of secrets; no traceback reaches the terminal."""
    from mindsimkit.mindcore.console import plain_tracebacks

    # distilabel 1.5.3's own pydantic models warn on import with current pydantic; not actionable here.
    warnings.filterwarnings("ignore", message=".*'default' attribute with value None.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="distilabel")
    try:
        _mount_stage_commands()
        # standalone_mode=False: typer returns typer.Exit codes (and 130 for Ctrl-C inside a command)
        # instead of exiting; dropping this value once made every failing command exit 0.
        with _interruptible():
            code = app(args=argv, standalone_mode=False, prog_name="mindsim")
    except UserError as exc:
        _error("error:", exc)
        return 2
    except EngineError as exc:
        _error("engine error:", exc)
        return 1
    except MindsimError as exc:
        _error("error:", exc)
        return 1
    except FileNotFoundError as exc:
        if not _in_pseudo_filesystem(exc):
            return _unexpected(exc)
        _error(
            "error:",
            f"{exc.filename}: inside a kernel filesystem (/proc, /sys) where no file can be written; "
            "give an output path on a disk",
        )
        return 2
    except (FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError) as exc:
        # A path the user gave is the wrong kind or not theirs to write: bad input, not a crash.
        _error("error:", _path_problem(exc))
        return 2
    except KeyboardInterrupt:
        code = 130
    except typer.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        _error("error:", exc.code)
        return 1
    except Exception as exc:
        if _is_usage_error(exc):
            return _usage_error(exc)
        if type(exc).__name__ == "Abort":  # click's Abort (EOF at a prompt): not a crash, not success
            err.print("[red]error:[/] aborted")
            return 1
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            _error(
                "error:",
                f"{exc.filename or 'an output'}: no space left on the device; free some space and "
                "rerun the same command, finished work is kept",
            )
            return 1
        return _unexpected(exc)
    finally:
        # distilabel, imported lazily by the stages that use it, installs rich tracebacks with locals for the
        # whole process; nothing above lets an exception reach that hook, and it is removed for what follows.
        plain_tracebacks()
    if code == 130:
        # typer turns Ctrl-C inside a command into exit code 130 before we see the KeyboardInterrupt.
        err.print("interrupted; finished work is checkpointed — rerun the same command to resume")
        return 130
    # A command returns None on success; an int is an exit code a command chose to return.
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())

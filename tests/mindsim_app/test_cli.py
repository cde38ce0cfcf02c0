"""CLI contract: exit 2 with one readable message on bad input; --help everywhere."""

from __future__ import annotations

import pytest

from mindsimkit.mindsim_app.cli import main


def test_missing_recipe_exits_2(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and not (tmp_path / "o").exists()


def test_bad_section_field_exits_2_before_any_engine(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: x\nengines:\n  local: {kind: embedded}\nroles:\n  default: {engine: local}\nsimulation:\n  sesions: 2\n"
    )
    assert main(["run", str(recipe), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "simulation.sesions" in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["run"],
        ["engines", "check"],
        ["profiles"],
        ["profiles", "fit-rates"],
        ["simulate"],
        ["validate", "reference"],
        ["validate", "compare"],
        ["publish"],
        ["export", "sft"],
        ["export", "patient"],
        ["export", "dpo"],
        ["judge", "run"],
        ["judge", "sample"],
        ["judge", "agreement"],
        ["report"],
    ],
)
def test_help_everywhere(argv, capsys):
    assert main([*argv, "--help"]) == 0
    assert "Usage" in capsys.readouterr().out


def test_usage_error_exits_2(capsys):
    assert main(["run"]) == 2


# ---- exit codes kept, one line, no wrapping


def test_typer_exit_codes_reach_the_caller(tmp_path, capsys):
    """A command that exits through typer.Exit used to return 0 from main (standalone_mode=False)."""
    missing = tmp_path / ("d" * 150) / "missing.jsonl"
    assert main(["validate", "reference", str(missing), "--out", str(tmp_path / "r.parquet")]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and err.count("\n") == 1


def test_run_with_failed_arcs_exits_1(tmp_path, capsys, monkeypatch):
    import sys
    import types

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: x\nengines:\n  local: {kind: embedded}\nroles:\n  default: {engine: local}\n")
    failed = iter([3, 0])

    def run_job(recipe_path, out_dir, verbose=False):
        # The verdict comes from the typed field; the card's label beside it must not be what is read.
        return types.SimpleNamespace(
            outputs={"provenance": out_dir / "run.json"},
            failed_arcs=next(failed),
            info={"counts": {"failed arcs": "not read"}},
        )

    # The job itself is exercised end to end in tests/test_exit_codes.py; here only run_cmd's verdict.
    monkeypatch.setitem(sys.modules, "mindsimkit.mindsim_app.job", types.SimpleNamespace(run_job=run_job))
    assert main(["run", str(recipe), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "3 session arcs failed" in err[0] and "rerun the same command" in err[0]
    assert main(["run", str(recipe), "--out", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().err == ""


def test_usage_errors_are_one_line(capsys):
    assert main(["run", "--bogus"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--bogus" in err[0] and "mindsim run --help" in err[0]


def test_consoles_never_hard_wrap_or_colour_when_piped(monkeypatch, capsys):
    from mindsimkit.mindcore.console import err_console, one_line, out_console

    monkeypatch.setenv("COLUMNS", "40")
    path = "/tmp/" + "x" * 200 + "/transcripts.jsonl"
    err_console().print(f"[red]error:[/] {path} not found; pass a JSONL file")
    out_console().print(f"[bold]wrote[/] {path}")
    captured = capsys.readouterr()
    assert captured.err == f"error: {path} not found; pass a JSONL file\n"
    assert captured.out == f"wrote {path}\n"
    assert one_line("refusing to publish d:\n  - a.parquet: changed\n  - b.md: foreign") == (
        "refusing to publish d: a.parquet: changed; b.md: foreign"
    )


def test_main_called_again_in_one_process_mounts_each_command_once(capsys):
    from mindsimkit.mindsim_app.cli import app

    main(["--help"])
    groups, commands = len(app.registered_groups), len(app.registered_commands)
    for _ in range(3):
        main(["--help"])
    assert (len(app.registered_groups), len(app.registered_commands)) == (groups, commands)
    names = [g.name for g in app.registered_groups]
    assert len(names) == len(set(names)), names


def test_version_prints_the_installed_version_and_exits_0(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"mindsim {version('mindsimkit')}"

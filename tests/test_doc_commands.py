"""Every `mindsim COMMAND [SUBCOMMAND]` the docs, the README and the recipes' comments name exists in the CLI
(a recipe once told users to run `mindsim validate run`, which never existed)."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

ROOT = Path(__file__).resolve().parents[1]
# `mindsim` as code: after a backtick, at a line's start, or after a comment mark; the words that follow. A word
# with a path or file character (`recipes/x.yaml`) is an argument, not a subcommand (`mindsim profiles RECIPE`
# runs its default subcommand).
MENTION = re.compile(r"(?:^|`|#\s*|\$\s*)mindsim((?: [^\s`]+)+)", re.MULTILINE)


def command_tree() -> dict[str, set[str]]:
    from mindsimkit.mindsim_app.cli import _mount_stage_commands, app

    _mount_stage_commands()
    root = typer.main.get_command(app)
    return {name: set(getattr(cmd, "commands", {}) or {}) for name, cmd in root.commands.items()}


def mentions(text: str) -> list[tuple[str, ...]]:
    return [tuple(m.group(1).split()) for m in MENTION.finditer(text)]


def unknown_commands(text: str, tree: dict[str, set[str]]) -> list[str]:
    bad = []
    for words in mentions(text):
        top = words[0]
        if top not in tree:
            continue  # prose ("mindsim runs ..."), not a command
        subs = tree[top]
        arg = (
            len(words) < 2
            or words[1].startswith("-")
            or any(c in words[1] for c in "/.=[]{}<>…|")
            or words[1].isupper()
        )
        if subs and not arg and words[1] not in subs:
            bad.append(f"mindsim {top} {words[1]}")
    return bad


def test_the_checker_catches_a_subcommand_that_does_not_exist():
    tree = command_tree()
    assert "compare" in tree["validate"] and "run" not in tree["validate"]
    assert unknown_commands("then `mindsim validate run runs/x`", tree) == ["mindsim validate run"]
    assert unknown_commands("`mindsim validate compare --sim a=b`", tree) == []


def test_docs_readme_and_recipes_name_only_real_commands():
    tree = command_tree()
    files = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", *sorted((ROOT / "recipes").glob("*.yaml"))]
    bad = {str(f.relative_to(ROOT)): unknown_commands(f.read_text(encoding="utf-8"), tree) for f in files}
    assert {f: b for f, b in bad.items() if b} == {}

"""Comments and docstrings in the packages give reasons, not tracker numbers: "(issue 35)" tells a newcomer nothing
that `git log -S` does not, and the reason it stood for is what they need. Checked over every Python file of the
packages and the data and prompt files shipped with them (YAML comments, Jinja templates)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ["mindcore", "mindsim", "mindsim_app", "profilegen", "validation", "judge", "mindsimkit", "prompts", "cards"]
# The tests and benchmarks too: a newcomer reads them to learn what the code promises. This file quotes the pattern.
OTHERS = ["tests", "benchmarks", "examples", "recipes"]
SUFFIXES = {".py", ".yaml", ".yml", ".jinja2", ".j2"}
# "issue 35", "Issue 9, item 2", "issues 11, 23", "issue #12": a number where a reason belongs.
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues?\s*#?\s*\d+")


def issue_citations(root: Path, folders: list[str]) -> list[str]:
    """`path:line: text` for every line under `folders` (and the top-level `*.py`) that cites an issue number."""
    files = [p for f in folders for p in sorted((root / f).rglob("*")) if p.suffix in SUFFIXES and p.is_file()]
    files += sorted(root.glob("*.py"))
    hits = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                hits.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return hits


def test_the_packages_cite_no_issue_numbers():
    hits = [h for h in issue_citations(REPO, PACKAGES + OTHERS) if not h.startswith("tests/test_comments_say_why.py:")]
    assert not hits, "write the reason instead of the issue number (the history stays in git):\n" + "\n".join(hits)


def test_the_check_finds_an_issue_number_in_a_comment_and_a_docstring(tmp_path: Path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text('"""Shards (issue 12, item 3)."""\nx = 1  # fsync off the loop (Issue #35)\n')
    (pkg / "b.yaml").write_text("# rules (issues 11, 23)\nkey: 1\n")
    (pkg / "c.py").write_text('"""A fidelity problem in 7.6% of replies; each issue scored 0/1."""\n')
    hits = issue_citations(tmp_path, ["pkg"])
    assert [h.split(":")[:2] for h in hits] == [["pkg/a.py", "1"], ["pkg/a.py", "2"], ["pkg/b.yaml", "1"]]

"""The README is a front page and the docs hold the reference: the README stays short with the two
commands first, and every relative link in the README, the docs and the changelog reaches a file that exists
and, when it names a section (`page.md#section`), a heading of that page, so moving text between pages cannot
leave a link behind."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading '{anchor}' in {dest.name}")
    return bad


def test_the_slug_is_githubs():
    assert (
        slug("The quickstart's wall time, as the README gave it") == "the-quickstarts-wall-time-as-the-readme-gave-it"
    )
    assert slug("The memory ablation (Figure 11)") == "the-memory-ablation-figure-11"
    assert slug("Preflight and token budgets") == "preflight-and-token-budgets"


def test_the_checker_finds_a_missing_page_and_a_missing_section(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Real section\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#real-section) [gone](c.md) [moved](a.md#old-section) [web](https://x.org/y.md)\n"
        "```\n[in code](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["c.md: no such file", "a.md#old-section: no heading 'old-section' in a.md"]


def test_every_relative_link_in_the_readme_and_docs_reaches_its_target():
    bad = {str(p.relative_to(ROOT)): broken_links(p) for p in PAGES}
    assert {p: b for p, b in bad.items() if b} == {}


def test_the_readme_is_a_front_page_with_the_two_commands_first():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines; move reference material to docs/"
    assert lines[0] == "```bash"
    assert lines[1].startswith("make quickstart   # ") and lines[2].startswith("make test         # ")
    assert lines[3] == "```"

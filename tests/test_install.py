"""The toolkit installs as one namespace (issue 34): a built wheel and an editable install, each into a fresh
virtual environment, put `mindsimkit` and nothing else at the top of site-packages, and the installed `mindsim`
command passes the quickstart's engines check, run from outside the checkout so nothing of it is on sys.path.

The environments see the test environment's packages (`--system-site-packages`) for the dependencies; the toolkit
itself is installed into each with `--no-deps`, and each check asserts it imported its own copy. The check talks to
the suite's embedded server (MINDSIM_EMBEDDED_URL) instead of starting another, so this is an embedded test."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from quick_recipes import QUICKSTART, attached_env

pytestmark = pytest.mark.embedded

REPO = Path(__file__).resolve().parent.parent
OUR_FOLDERS = ["mindcore", "profilegen", "mindsim", "mindsim_app", "validation", "judge", "prompts", "cards", "recipes"]
NOT_SOURCE = shutil.ignore_patterns(".git", ".cache", "out", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _venv(path: Path) -> Path:
    # No pip or setuptools of its own: the test environment's pip installs into it (`pip --python`); builds run
    # isolated, with the setuptools and wheel pyproject.toml asks for, as `make install` does.
    done = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", path], cwd=path.parent)
    assert done.returncode == 0, done.stderr
    return path / "bin"


def _pip(bin_dir: Path, *args) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps", *args],
                cwd=bin_dir.parent)


def _site(bin_dir: Path) -> Path:
    out = _run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=bin_dir)
    return Path(out.stdout.strip())


def _check_from_outside(bin_dir: Path, where: Path, embedded_engines) -> None:
    """The environment's own `mindsim` passes the quickstart's engines check, importing the toolkit from `where`
    and none of the folders as top-level names."""
    outside = bin_dir.parent  # not the checkout: its folders must not be importable from the working directory
    probe = _run([bin_dir / "python", "-c",
                  "import importlib.util, mindsimkit; print(mindsimkit.__file__); "
                  f"print([n for n in {OUR_FOLDERS!r} if importlib.util.find_spec(n)])"], cwd=outside)
    assert probe.returncode == 0, probe.stderr
    origin, top_level = probe.stdout.splitlines()
    assert Path(origin).resolve().is_relative_to(where.resolve()), origin
    assert top_level == "[]"
    check = _run([bin_dir / "mindsim", "engines", "check", QUICKSTART], cwd=outside, env=attached_env(embedded_engines))
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    assert "local" in check.stdout


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A clean copy of the checkout's sources (no build outputs), so building writes nothing into the checkout."""
    copy = tmp_path_factory.mktemp("src") / "mindsim"
    shutil.copytree(REPO, copy, ignore=NOT_SOURCE, symlinks=True)
    return copy


def test_the_wheel_holds_one_namespace_and_its_command_runs(source, tmp_path, embedded_engines):
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist",
                  source], cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("mindsimkit-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"mindsimkit", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    # Data ships: prompt templates, the simulator's tables, the annotation page, the card template.
    for needed in ("mindsimkit/prompts/index.yaml", "mindsimkit/mindsim/data/patient_engines.yaml",
                   "mindsimkit/mindsim_app/annotate/static/index.html", "mindsimkit/recipes/quickstart.yaml",
                   "mindsimkit/judge/data/rubric.yaml"):
        assert needed in names, needed

    bin_dir = _venv(tmp_path / "venv")
    before = set(p.name for p in _site(bin_dir).iterdir())
    done = _pip(bin_dir, "--no-index", wheel)
    assert done.returncode == 0, done.stderr[-3000:]
    added = set(p.name for p in _site(bin_dir).iterdir()) - before
    assert {a.split("-")[0] for a in added} == {"mindsimkit"}, added
    _check_from_outside(bin_dir, _site(bin_dir) / "mindsimkit", embedded_engines)


def test_an_editable_install_runs_from_the_checkout(source, tmp_path, embedded_engines):
    bin_dir = _venv(tmp_path / "venv")
    done = _pip(bin_dir, "-e", source)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_from_outside(bin_dir, source, embedded_engines)

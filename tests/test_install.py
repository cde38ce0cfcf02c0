"""The toolkit installs as one namespace: a built wheel and an editable install, each into a fresh virtual
environment, put `mindsimkit` and nothing else at the top of site-packages, and the installed `mindsim` command passes
the quickstart's engines check, run from outside the checkout so nothing of it is on sys.path.

The new environments get the dependencies from the environment running the suite through a `.pth` file naming its
site-packages folders. `--system-site-packages` is not enough: from inside a virtualenv (how most people install)
it shows the *base* interpreter's packages, not the virtualenv's, and every dependency goes missing. The toolkit
itself is installed into each with `--no-deps`, and each check asserts it imported its own copy. Environments are
made by `python -m venv` and, where `uv` is installed (the test extra brings it), by `uv venv`, which makes
environments without pip. The check talks to the suite's embedded server (MINDSIM_EMBEDDED_URL) instead of
starting another, so this is an embedded test."""

from __future__ import annotations

import importlib.util
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
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".cache", "out", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"
)


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _uv() -> str | None:
    return shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))


MAKERS = ["venv", pytest.param("uv", marks=pytest.mark.skipif(_uv() is None, reason="uv is not installed"))]


def _running_site_dirs() -> list[str]:
    """The folders the running interpreter imports installed packages from: its virtualenv's site-packages and,
    when that virtualenv itself sees them, the base interpreter's."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


def _venv(path: Path, maker: str = "venv") -> Path:
    """A new environment without pip or the toolkit, seeing the running environment's packages (a `.pth` file:
    plain path lines add those folders to sys.path without running the `.pth` files inside them, so the suite's
    own editable install of the toolkit stays invisible there)."""
    if maker == "uv":
        made = _run([_uv(), "venv", "-q", "--python", sys.executable, path], cwd=path.parent)
    else:
        made = _run([sys.executable, "-m", "venv", "--without-pip", path], cwd=path.parent)
    assert made.returncode == 0, made.stderr
    bin_dir = path / "bin"
    site = _site(bin_dir)
    (site / "_running_env_packages.pth").write_text("".join(f"{d}\n" for d in _running_site_dirs()))
    return bin_dir


def _pip(bin_dir: Path, *args) -> subprocess.CompletedProcess:
    """Install into the new environment with the running environment's pip, or uv's where it has none (a suite
    run from a uv-made environment)."""
    if importlib.util.find_spec("pip") is not None:
        cmd = [sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps", *args]
    else:
        cmd = [_uv(), "pip", "install", "-q", "--python", bin_dir / "python", "--no-deps", *args]
    return _run(cmd, cwd=bin_dir.parent)


def _site(bin_dir: Path) -> Path:
    out = _run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=bin_dir)
    return Path(out.stdout.strip())


def _check_from_outside(bin_dir: Path, where: Path, embedded_engines) -> None:
    """The environment's own `mindsim` passes the quickstart's engines check, importing the toolkit from `where`
    and none of the folders as top-level names."""
    outside = bin_dir.parent  # not the checkout: its folders must not be importable from the working directory
    probe = _run(
        [
            bin_dir / "python",
            "-c",
            "import importlib.util, mindsimkit; print(mindsimkit.__file__); "
            f"print([n for n in {OUR_FOLDERS!r} if importlib.util.find_spec(n)])",
        ],
        cwd=outside,
    )
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


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
    """The wheel built from the clean copy, once for every kind of environment it is installed into."""
    dist = tmp_path_factory.mktemp("dist")
    if importlib.util.find_spec("pip") is not None:
        built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source], cwd=dist)
    else:
        built = _run([_uv(), "build", "-q", "--wheel", "--out-dir", dist, source], cwd=dist)
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = dist.glob("mindsimkit-*.whl")
    return found


@pytest.mark.parametrize("maker", MAKERS)
def test_the_wheel_holds_one_namespace_and_its_command_runs(wheel, tmp_path, embedded_engines, maker):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"mindsimkit", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    # Data ships: prompt templates, the simulator's tables, the annotation page, the card template.
    for needed in (
        "mindsimkit/prompts/index.yaml",
        "mindsimkit/mindsim/data/patient_engines.yaml",
        "mindsimkit/mindsim_app/annotate/static/index.html",
        "mindsimkit/recipes/quickstart.yaml",
        "mindsimkit/judge/data/rubric.yaml",
    ):
        assert needed in names, needed

    bin_dir = _venv(tmp_path / "venv", maker)
    before = set(p.name for p in _site(bin_dir).iterdir())
    done = _pip(bin_dir, "--no-index", wheel)
    assert done.returncode == 0, done.stderr[-3000:]
    added = set(p.name for p in _site(bin_dir).iterdir()) - before
    assert {a.split("-")[0] for a in added} == {"mindsimkit"}, added
    _check_from_outside(bin_dir, _site(bin_dir) / "mindsimkit", embedded_engines)


@pytest.mark.parametrize("maker", MAKERS)
def test_an_editable_install_runs_from_the_checkout(source, tmp_path, embedded_engines, maker):
    bin_dir = _venv(tmp_path / "venv", maker)
    done = _pip(bin_dir, "-e", source)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_from_outside(bin_dir, source, embedded_engines)

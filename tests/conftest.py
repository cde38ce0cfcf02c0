"""Shared fixtures: a fake engine that records requests, and the real embedded engine (one server for
the whole test session, because starting llama.cpp per test would dominate the run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindcore.engine import Engines
from mindcore.fake import FakeBackend

REPO = Path(__file__).resolve().parent.parent
# Test helpers shared across packages (openai_stub.py) are imported by module name from any test folder.
sys.path.insert(0, str(Path(__file__).resolve().parent))
SHARED = REPO.parent / "shared"
QUICKSTART_RUNS = 3


# The fixtures that start the real embedded engine; every other engine-backed fixture builds on one of them.
ENGINE_FIXTURES = {"embedded_engines", "quickstart_run"}


def pytest_collection_modifyitems(config, items):
    """`-m "not embedded"` is the fast suite: a test marked `embedded` must start the engine (else it leaves the
    fast suite for nothing) and a test that starts it must be marked (else the fast suite pays for it)."""
    wrong = [f"{item.nodeid}: {'marked embedded but starts no engine' if marked else 'starts the engine unmarked'}"
             for item in items
             for marked, starts in [(item.get_closest_marker("embedded") is not None,
                                     bool(ENGINE_FIXTURES & set(getattr(item, "fixturenames", ()))))]
             if marked != starts]
    if wrong:
        raise pytest.UsageError("embedded marker out of step with the engine fixtures:\n" + "\n".join(wrong))


@pytest.fixture(scope="session")
def embedded_engines():
    """All roles on the real embedded SmolLM2 server, low temperature, small outputs."""
    cfg = EnginesConfig(
        engines={"local": EmbeddedEngine(parallel=4, ctx_per_slot=4096)},
        roles={"default": RoleSpec(engine="local", temperature=0.3, max_tokens=256, seed=0)},
    )
    with Engines.from_config(cfg) as engines:
        yield engines


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory) -> Path:
    """The README's main job (recipes/quickstart.yaml at the test size of `quick_recipes`: one pool patient)
    run once on the real embedded engine, shared by every test that inspects real output: the job tests, the
    simulator's and the judge's checks, and every study run that resumes its profiles. Its recipe is
    `recipe.yaml` beside the returned run folder."""
    import pyarrow.parquet as pq
    from quick_recipes import keep_first_attempt, pool_ids, quick_recipe, write_recipe

    from mindcore.errors import EngineError
    from mindsim_app.job import run_job

    base = tmp_path_factory.mktemp("quickstart")
    recipe = write_recipe(quick_recipe(), base / "recipe.yaml")
    out = base / "run"
    # The 135M model can sink arcs (NOTES §6) and batched llama.cpp output is not deterministic, so when a run
    # leaves nothing for the tests to check (it failed, or no arc finished all its sessions, so no memory or
    # trust carries from one session into the next) the same command is run again: it resumes, redoing only
    # the failed work. When the screener called both candidates serious (verdicts are final, so a resume would
    # stop at the same empty pool) the job starts over in a new folder. Bounded, and paid only in those rare cases.
    for attempt in range(QUICKSTART_RUNS):
        fresh = not (out / "profiles" / "summary.json").exists()
        try:
            summary = run_job(recipe, out)
        except EngineError:
            if attempt + 1 == QUICKSTART_RUNS:
                raise
            if not pool_ids(out):
                out = base / f"run{attempt + 1}"
            continue
        finally:
            if fresh:
                keep_first_attempt(out)
        assert summary.info["status"] == "finished"
        if max(pq.read_table(out / "sessions" / "sessions.parquet", columns=["session_index"]).column(0).to_pylist()) > 0:
            break
    return out


@pytest.fixture
def fake_engines():
    """Factory: `fake_engines(responder, native_tools=False)` -> (Engines, FakeBackend)."""

    def make(responder, **kw):
        backend = FakeBackend(responder, **kw)
        return Engines.with_backend(backend), backend

    return make


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not beside the repository")
    return SHARED


@pytest.fixture(autouse=True)
def _shipped_prompts_after_each_test():
    """A test that loads a recipe with `prompts:` installs its overrides process-wide (as a command does);
    put the shipped prompts back so the next test renders what it expects."""
    yield
    from mindcore.prompts import install_overrides

    install_overrides({})

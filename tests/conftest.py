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
    """The README's main job (recipes/quickstart.yaml) run once on the real embedded engine, shared by every
    test that inspects real output: the job tests, the simulator's and the harness-text checks."""
    from mindsim_app.job import run_job

    out = tmp_path_factory.mktemp("run")
    summary = run_job(REPO / "recipes" / "quickstart.yaml", out)
    assert summary.info["status"] == "finished"
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

"""Shared fixtures: a fake engine that records requests, the real embedded engine (one server for the whole
test session: starting llama.cpp per test would dominate the run, and two servers on 2 cores only split them) and
the one study run on it that the embedded tests share."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mindsimkit.mindcore.config import EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend

REPO = Path(__file__).resolve().parent.parent
# Test helpers shared across packages (openai_stub.py) are imported by module name from any test folder.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from quick_recipes import SUITE_ENGINE, engines_for  # noqa: E402

SHARED = REPO.parent / "shared"
STUDY_RUNS = 3


# Shipped templates that some test rendered both in the sandbox and in plain Jinja (`_sandbox_changes_no_shipped_text`).
RENDERED_BOTH_WAYS: set[str] = set()


@pytest.fixture(autouse=True)
def _sandbox_changes_no_shipped_text(monkeypatch):
    """Every template any test renders (on that test's real context) is rendered a second time by plain,
    unsandboxed Jinja with the same options and must come out byte-identical: the sandbox limits what a template
    may do, never what a shipped one says."""
    import jinja2

    from mindsimkit.mindcore import prompts

    sandboxed, plain = prompts.render_bounded, {}

    def both_ways(template, variables):
        text = sandboxed(template, variables)
        loader = template.environment.loader
        if template.name and loader is not None:
            env = plain.setdefault(id(loader), jinja2.Environment(loader=loader, **prompts.ENV_OPTIONS))
            assert env.get_template(template.name).render(**variables) == text, (
                f"{template.name} renders differently in the sandbox"
            )
            RENDERED_BOTH_WAYS.add(template.name)
        return text

    monkeypatch.setattr(prompts, "render_bounded", both_ways)


# The fixtures that start the real embedded engine; every other engine-backed fixture builds on one of them.
# `own_embedded_server`: the test starts a server of its own (`mindsim serve` in a subprocess).
ENGINE_FIXTURES = {"embedded_engines", "study_run", "own_embedded_server"}
# The real-model runs made beside the shared study (tests/mindsim_app/conftest.py): each costs minutes of the 135M
# model's tokens on 2 cores, so the tests that read them are in the slow tier (`make test-all`, CI), not `make test`.
OWN_RUN_FIXTURES = {"two_counsellor_run", "preset_run"}


def pytest_collection_modifyitems(config, items):
    """`-m "not embedded"` is the fast suite: a test marked `embedded` must start the engine (else it leaves the
    fast suite for nothing) and a test that starts it must be marked (else the fast suite pays for it). An embedded
    test that reads a run of its own is marked `slow` (else `make test` pays for that run)."""
    wrong = [
        f"{item.nodeid}: {'marked embedded but starts no engine' if marked else 'starts the engine unmarked'}"
        for item in items
        for marked, starts in [
            (
                item.get_closest_marker("embedded") is not None,
                bool(ENGINE_FIXTURES & set(getattr(item, "fixturenames", ()))),
            )
        ]
        if marked != starts
    ]
    if wrong:
        raise pytest.UsageError("embedded marker out of step with the engine fixtures:\n" + "\n".join(wrong))
    unmarked = [
        item.nodeid
        for item in items
        if item.get_closest_marker("embedded") is not None
        and OWN_RUN_FIXTURES & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("slow") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "a test that reads a real-model run of its own must be marked slow (make test leaves it out):\n"
            + "\n".join(unmarked)
        )


# The CPU threads the suite's embedded server computed with: fewer than the cores (other work busy at its start)
# makes every embedded test slower, so the summary says it beside the durations.
SUITE_THREADS: list[int | None] = []


def pytest_terminal_summary(terminalreporter):
    if SUITE_THREADS and SUITE_THREADS[0]:  # None: another process's server (MINDSIM_EMBEDDED_URL)
        terminalreporter.write_line(f"embedded server: {SUITE_THREADS[0]} CPU threads")


def pytest_sessionfinish(session, exitstatus):
    """The suite's promise, which keeps it fast: one embedded server for the whole run. A second one started in this
    process (a job or command whose engine did not match the suite's) fails the run, naming the count."""
    from mindsimkit.mindcore.embedded import server_stats

    record = os.environ.get("MINDSIM_RENDERED_BOTH_WAYS")  # tests/mindcore/test_template_sandbox.py reads it
    if record:
        Path(record).write_text("\n".join(sorted(RENDERED_BOTH_WAYS)), encoding="utf-8")
    stats = server_stats()
    if stats["started"] > 1 or stats["peak_live"] > 1:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(
            f"\nembedded servers: {stats['started']} started, at most {stats['peak_live']} at once; the suite "
            "shares one (tests/conftest.py SUITE_ENGINE)",
            file=sys.stderr,
        )


@pytest.fixture
def own_embedded_server():
    """For a test that starts the real model in a server of its own (a subprocess): the shipped model file, which
    must be there."""
    from mindsimkit.mindcore.embedded import default_model_path

    path = default_model_path()
    assert path.is_file(), f"the shipped model is not installed: {path}"
    return path


@pytest.fixture(scope="session")
def embedded_engines():
    """The one real embedded SmolLM2 server of the test session, all roles on it at low temperature and small
    outputs. A `mindsim` command a test starts in a subprocess uses it through `quick_recipes.attached_env`
    instead of starting a second server; in this process every engine set of the same spec shares it."""
    cfg = EnginesConfig(
        engines={"local": SUITE_ENGINE},
        roles={
            "default": RoleSpec(engine="local", temperature=0.3, max_tokens=256, seed=0),
            "counsellor": RoleSpec(engine="local", temperature=0.3, max_tokens=96, seed=0),
        },
    )
    with Engines.from_config(cfg) as engines:
        SUITE_THREADS.append(engines.backend("local").threads)
        yield engines


@pytest.fixture(scope="session")
def study_run(embedded_engines, tmp_path_factory) -> Path:
    """The embedded suite's one study (`quick_recipes.study_recipe`: the README's quickstart at test size with every
    patient engine and PatientAct arm, the arc labels and the MHQR judge), run once through `run_job` on the suite's
    server and shared by every test that inspects real output. Its recipe is `recipe.yaml` beside the returned run
    folder."""
    import pyarrow.parquet as pq
    from quick_recipes import (
        STUDY_ENGINES,
        TWO_SESSION_ENGINES,
        keep_first_attempt,
        pool_ids,
        study_recipe,
        write_recipe,
    )

    from mindsimkit.mindcore.errors import EngineError
    from mindsimkit.mindsim_app.job import run_job

    base = tmp_path_factory.mktemp("study")
    recipe = write_recipe(study_recipe(), base / "recipe.yaml")
    out = base / "run"
    # The 135M model can sink arcs (NOTES §6) and batched llama.cpp output is not deterministic, so when a run
    # leaves something the tests need unwritten (an engine without a session, or MindSim or PatientAct without its
    # second session, so nothing carries from one session into the next) the same command is run again: it
    # resumes, redoing only the failed work. When the screener called both candidates serious (verdicts are final,
    # so a resume would stop at the same empty pool) the job starts over in a new folder. Bounded, and paid only in
    # those cases.
    for attempt in range(STUDY_RUNS):
        fresh = not (out / "profiles" / "summary.json").exists()
        try:
            summary = run_job(recipe, out, engines=engines_for(recipe, embedded_engines))
        except EngineError:
            if attempt + 1 == STUDY_RUNS:
                raise
            if not pool_ids(out):
                out = base / f"run{attempt + 1}"
            continue
        finally:
            if fresh:
                keep_first_attempt(out)
        assert summary.info.status == "finished"
        rows = pq.read_table(
            out / "sessions" / "sessions.parquet", columns=["patient_engine", "session_index"]
        ).to_pylist()
        second = {r["patient_engine"] for r in rows if r["session_index"] == 1}
        if {r["patient_engine"] for r in rows} == set(STUDY_ENGINES) and second == set(TWO_SESSION_ENGINES):
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
    from mindsimkit.mindcore.prompts import install_overrides

    install_overrides({})

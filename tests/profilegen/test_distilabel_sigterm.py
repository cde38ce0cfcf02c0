"""distilabel's local pipeline ends its workers with SIGTERM; a Python SIGTERM handler inherited from the parent
(Ray installs one in `ray.init`) kept a forked worker alive and hung the job at the end of the profile stage."""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import signal
import sys
from pathlib import Path

import pytest

from mindsimkit.profilegen.distilabel_steps import children_die_on_sigterm

TESTS = Path(__file__).resolve().parent.parent


def _ignore(signum, frame):  # a handler that returns, so the process goes on (as Ray's does in a forked copy)
    pass


def _wait_for_ever(ready) -> None:
    ready.set()
    while True:  # a caught signal ends pause(); only one that ends the process ends this
        signal.pause()


@pytest.fixture
def ignoring_handler():
    before = signal.signal(signal.SIGTERM, _ignore)
    yield
    signal.signal(signal.SIGTERM, before)


def _terminated(ctx_manager) -> int | None:
    fork = multiprocessing.get_context("fork")
    ready = fork.Event()
    with ctx_manager:
        child = fork.Process(target=_wait_for_ever, args=(ready,))
        child.start()
    assert ready.wait(30)
    child.terminate()
    child.join(10)
    if child.exitcode is None:  # what the pipeline's pool ran into: the child outlives SIGTERM
        child.kill()
        child.join(10)
        return None
    return child.exitcode


@pytest.mark.skipif(sys.platform == "win32", reason="fork and SIGTERM are POSIX")
def test_a_child_forked_inside_the_block_ends_on_sigterm_and_the_handler_comes_back(ignoring_handler):
    import contextlib

    # Without the block the inherited handler keeps the child alive, which is the hang this guards against.
    assert _terminated(contextlib.nullcontext()) is None
    assert _terminated(children_die_on_sigterm()) == -signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is _ignore


@pytest.mark.skipif(sys.platform == "win32", reason="fork and SIGTERM are POSIX")
def test_the_profile_stage_starts_its_pool_with_the_default_sigterm(ignoring_handler, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(TESTS / "mindsim_app"))
    from fakejob import write_fake_job

    seen: list[object] = []
    start = multiprocessing.pool.Pool.__init__

    def recording(self, *args, **kwargs):
        seen.append(signal.getsignal(signal.SIGTERM))
        start(self, *args, **kwargs)

    monkeypatch.setattr(multiprocessing.pool.Pool, "__init__", recording)
    assert (write_fake_job(tmp_path) / "run.json").is_file()
    assert seen and all(s is signal.SIG_DFL for s in seen), seen
    assert signal.getsignal(signal.SIGTERM) is _ignore

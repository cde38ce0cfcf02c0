"""The annotation pages the browser tests open: one server for every task type, built once per test session
(`site` in conftest.py), and the helpers the page tests share (waiting, keys, window width).

Tasks with raters R1 and R2: realism, mhqr, sessions (PatientAct), mindeval (the MindEval v1 rubric, 1-6),
profiles (PatientAct), and mhqr-long / realism-long, whose every system prompt is 4,000 characters and every patient
message 2,500. Tasks with the one rater K, each answered by keyboard alone: kb-<task> for the five task types; and
fo-mhqr (the long MHQR items) and fo-keys (MHQR) with the one rater F, whom the focus tests save through to the
end screen and press keys as."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from annotfakes import write_real, write_run
from browser import at_width, full_page, serve_app
from serving import tokens
from mindsimkit.mindsim_app.annotate.samplers import (
    sample_mhqr,
    sample_patientact_profiles,
    sample_patientact_sessions,
    sample_realism,
)
from mindsimkit.mindsim_app.annotate.server import create_app, issue_links
from mindsimkit.mindsim_app.annotate.tasks import Design

TASK_TYPES = ("realism", "mhqr", "sessions", "mindeval", "profiles")
LONG = ("mhqr-long", "realism-long")


@dataclass
class Site:
    root: Path
    base: str
    keys: dict[str, str]  # task -> its key file

    def link(self, task: str, rater: str = "R1") -> str:
        """The page's URL fragment for a rater of a task (`k=TOKEN`)."""
        return "k=" + tokens(self.root / task)[rater]


def _sample(kind: str, out: Path, d: Design, run: Path, real: Path | None) -> str:
    if kind == "realism":
        return sample_realism(out, d, n=6, runs=[str(run)], real=[str(real)] if real else [], windows=[5], seed=1)[
            "key"
        ]
    if kind == "mhqr":
        return sample_mhqr(out, d, run_dir=run, n=4, seed=1)["key"]
    if kind == "sessions":
        return sample_patientact_sessions(out, d, runs=[run], per_system=2, seed=1)["key"]
    if kind == "mindeval":
        return sample_patientact_sessions(out, d, runs=[run], per_system=1, seed=1, rubric="mindeval_v1")["key"]
    return sample_patientact_profiles(out, d, runs=[run], n=2, seed=1)["key"]


def build_site(root: Path) -> Iterator[Site]:
    run = write_run(root / "run", turns=10)
    long_run = write_run(root / "long-run", turns=6, prompt_chars=4000, patient_chars=2500)
    real = write_real(root / "real.jsonl", turns=10)
    two, one = Design(raters=["R1", "R2"], k=1, all_raters=1), Design(raters=["K"], k=1, all_raters=0)
    keys = {t: _sample(t, root / t, two, run, real) for t in TASK_TYPES}
    keys.update({t: _sample(t.split("-")[0], root / t, two, long_run, None) for t in LONG})
    keys.update({"kb-" + t: _sample(t, root / ("kb-" + t), one, run, real) for t in TASK_TYPES})
    # Rater F's long MHQR task: saved through to its end screen by the focus tests (test_focus.py).
    keys["fo-mhqr"] = _sample("mhqr", root / "fo-mhqr", Design(raters=["F"], k=1, all_raters=0), long_run, None)
    keys["fo-keys"] = _sample("mhqr", root / "fo-keys", Design(raters=["F"], k=1, all_raters=0), run, None)
    app = create_app([root / t for t in keys])
    for s in app.state.served:  # each task's rater-links.txt, read back by `Site.link`
        issue_links(s.task, s.store, "http://x")
    with serve_app(app) as base:
        yield Site(root, base, keys)


def wait(cond: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception:  # the page is between renders
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def open_page(drv: Any, base: str, fragment: str) -> None:
    drv.get("about:blank")
    drv.get(f"{base}/#{fragment}")
    wait(lambda: drv.find_element("id", "save"), "the form")


def keys(drv: Any, *ks: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(drv).send_keys(*ks).perform()


def where(drv: Any) -> str:
    return drv.find_element("id", "where").text


def shot(drv: Any, name: str) -> None:
    """With ANNOTATE_SCREENSHOTS=DIR: the page as it is now at 1400 px (annotate-NAME.png, tall enough for the whole
    form) and the whole page at 390 px (annotate-NAME-390.png); then back to 1400 x 1000."""
    folder = os.environ.get("ANNOTATE_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    drv.set_window_size(1400, 1350)
    drv.save_screenshot(str(Path(folder) / f"annotate-{name}.png"))
    # The whole page as a 390 x 844 phone lays it out (the conversation box keeps its 60 % of that screen), captured
    # beyond the screen by the browser itself.
    at_width(drv, 390, 844)
    full_page(drv, Path(folder) / f"annotate-{name}-390.png")
    drv.set_window_size(1400, 1000)

"""Each protocol's page in a real headless chromium: answer with the keyboard and the mouse, reload, resume
where the rater left off, and find the answers in the export. One server serves the four tasks.
ANNOTATE_SCREENSHOTS=DIR saves a screenshot of each page there (docs/img holds the ones in the docs)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from annotfakes import write_real, write_run
from browser import serve_app
from mindsimkit.mindsim_app.annotate.export import export_task
from mindsimkit.mindsim_app.annotate.samplers import (sample_mhqr, sample_patientact_profiles, sample_patientact_sessions,
                                           sample_realism)
from mindsimkit.mindsim_app.annotate.server import create_app, issue_links
from mindsimkit.mindsim_app.annotate.store import read_answers
from mindsimkit.mindsim_app.annotate.tasks import Design

SHOTS = os.environ.get("ANNOTATE_SCREENSHOTS")


def wait(cond, what: str, timeout: float = 5.0):
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


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    run = write_run(root / "run", turns=10)
    real = write_real(root / "real.jsonl", turns=10)
    d = Design(raters=["R1", "R2"], k=1, all_raters=1)
    keys = {
        "realism": sample_realism(root / "realism", d, n=6, runs=[str(run)], real=[str(real)], windows=[5], seed=1)["key"],
        "mhqr": sample_mhqr(root / "mhqr", d, run_dir=run, n=4, seed=1)["key"],
        "sessions": sample_patientact_sessions(root / "sessions", d, runs=[run], per_system=2, seed=1)["key"],
        "profiles": sample_patientact_profiles(root / "profiles", d, runs=[run], n=2, seed=1)["key"],
    }
    app = create_app([root / n for n in keys])
    links = {}
    for s in app.state.served:
        path, _ = issue_links(s.task, s.store, "http://x")
        links[s.task.root.name] = path.read_text().splitlines()[1].split("\t")[1].split("#", 1)[1]  # R1's
    with serve_app(app) as base:
        yield root, base, links, keys


def open_page(browser, base: str, fragment: str):
    browser.get("about:blank")
    browser.get(f"{base}/#{fragment}")
    wait(lambda: browser.find_element("id", "save"), "the form")


def keys(browser, *ks):
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).send_keys(*ks).perform()


def where(browser) -> str:
    return browser.find_element("id", "where").text


def shot(browser, name: str):
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.set_window_size(1400, 1350)  # tall enough for the whole form
        browser.save_screenshot(str(Path(SHOTS) / f"annotate-{name}.png"))
        browser.set_window_size(1400, 1000)


def reload_and_resume(browser, expect_where: str):
    browser.refresh()  # the token stays in this tab's session storage; the address bar no longer holds it
    wait(lambda: where(browser) == expect_where, f"resume at {expect_where}")
    assert "#k=" not in browser.current_url


def test_realism_page(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base, links, key = site
    open_page(browser, base, links["realism"])
    assert "turn 1/5" in where(browser)
    assert browser.find_element("css selector", ".msg.rated").text.startswith("PATIENT")
    assert "never publish" in browser.find_element("id", "notice").text  # the sample mixes in real text
    # Keyboard: a reason that gives it away, none for content, then the rating; Enter saves.
    keys(browser, "w", "h", "2", Keys.ENTER)
    wait(lambda: "turn 2/5" in where(browser), "the next turn")
    # Mouse: untick nothing, tick 'none' twice and click rating 5, click Save.
    browser.find_element("css selector", 'input[value="form_none"]').click()
    browser.find_element("css selector", 'input[value="content_none"]').click()
    browser.find_elements("css selector", ".scale label")[4].click()
    # An incomplete answer is refused with the server's message, and nothing moves on.
    browser.find_element("css selector", 'input[value="content_none"]').click()
    browser.find_element("id", "save").click()
    wait(lambda: "content" in browser.find_element("id", "error").text, "the refusal")
    assert "turn 2/5" in where(browser)
    browser.find_element("css selector", 'input[value="content_none"]').click()
    shot(browser, "realism")
    browser.find_element("id", "save").click()
    wait(lambda: "turn 3/5" in where(browser), "the third turn")
    reload_and_resume(browser, where(browser))
    answers = [a for a in read_answers(root / "realism") if a["rater"] == "R1"]
    assert sorted(a["answer"]["rating"] for a in answers) == [2, 5]
    assert {tuple(a["answer"]["reasons"]) for a in answers} == {("register", "content_none"), ("form_none", "content_none")}
    out = export_task(root / "realism", root / "rexp", Path(key["realism"]))
    lines = [json.loads(x) for x in Path(out["files"]["realism_ratings"]).read_text().splitlines()]
    assert len(lines) == 2 and all(line["system"] for line in lines)


def test_mhqr_page(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base, links, _ = site
    open_page(browser, base, links["mhqr"])
    assert browser.find_element("id", "sysprompt").text.startswith("You are a counsellor")
    assert "COUNSELLOR" in browser.find_element("css selector", ".msg.rated").text
    shot(browser, "mhqr")
    keys(browser, "2", "d", Keys.ENTER)  # Minor, False fact
    wait(lambda: where(browser).startswith("item 2/"), "the second item")
    browser.find_elements("css selector", 'input[name="severity"]')[0].click()
    browser.find_element("id", "comment").send_keys("fine")
    browser.find_element("id", "save").click()
    wait(lambda: where(browser).startswith("item 3/"), "the third item")
    reload_and_resume(browser, where(browser))
    keys(browser, Keys.ARROW_LEFT)  # back: the saved answer is shown again
    wait(lambda: where(browser).startswith("item 2/"), "the previous item")
    assert browser.find_elements("css selector", 'input[name="severity"]')[0].is_selected()
    out = export_task(root / "mhqr", root / "mexp")
    lines = [json.loads(x) for x in Path(out["files"]["mhqr_annotations"]).read_text().splitlines()]
    assert sorted((x["severity"], tuple(x["issues"])) for x in lines) == [("minor", ("false_fact",)), ("no_concern", ())]
    assert all(x["annotator"] == "R1" and x["excerpt_id"] for x in lines)


def test_patientact_session_page(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base, links, key = site
    open_page(browser, base, links["sessions"])
    keys(browser, "4", "3", "2", "5", "4")  # each digit scores the highlighted scale and moves on
    shot(browser, "patientact-session")
    keys(browser, Keys.ENTER)
    wait(lambda: where(browser).startswith("item 2/"), "the second session")
    reload_and_resume(browser, "item 2/" + where(browser).split("/")[1])
    out = export_task(root / "sessions", root / "sexp", Path(key["sessions"]))
    (line,) = [json.loads(x) for x in Path(out["files"]["patientact_human"]).read_text().splitlines()]
    assert list(line["scores"].values()) == [4, 3, 2, 5, 4] and line["rater"] == "R1"


def test_patientact_profile_page_and_diversity(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base, links, key = site
    open_page(browser, base, links["profiles"])
    n = int(where(browser).split("/")[1])
    page = browser.find_element("id", "context").text.lower()
    for word in ("avoidant", "anxious", "disorganized", "worthless", "unlovable", "helpless"):
        assert word not in page  # the seeds stay hidden
    for i in range(n - 1):
        keys(browser, "5", "4", "4", "3", "s", "l")
        if i == 0:
            shot(browser, "patientact-profile")
        keys(browser, Keys.ENTER)
        wait(lambda: where(browser).startswith(f"item {i + 2}/"), "the next item")
    assert "different people" in browser.find_element("id", "form").text  # diversity comes last, once
    reload_and_resume(browser, f"item {n}/{n}")
    keys(browser, "4")
    shot(browser, "patientact-diversity")
    keys(browser, Keys.ENTER)
    wait(lambda: browser.find_element("id", "done"), "the end screen")
    out = export_task(root / "profiles", root / "pexp", Path(key["profiles"]))
    (div,) = [json.loads(x) for x in Path(out["files"]["patientact_diversity"]).read_text().splitlines()]
    assert div == {"rater": "R1", "rating": 4, "profiles": n - 1}
    prof = [json.loads(x) for x in Path(out["files"]["patientact_profile_human"]).read_text().splitlines()]
    assert all(p["predicted"] == {"attachment": "anxious", "theme": "helpless"} for p in prof) and len(prof) == n - 1

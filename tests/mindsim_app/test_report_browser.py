"""The HTML report in a real headless Chromium (tests/browser.py): open a fixture run's page from disk,
click into a session, filter by severity, find a judged reply's quote highlighted, and check that the page
made no network request at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from browser import axe_violations, browser, requests_made  # noqa: F401 - the fixture
from mindsimkit.mindsim_app.report.build import build_report
from reportfix import write_fixture_run


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    run = write_fixture_run(tmp_path_factory.mktemp("report-browser") / "run", patients=3)
    return build_report([run])


def _open(drv, page: Path):
    from selenium.webdriver.common.by import By

    drv.get_log("performance")  # drop what earlier tests left in the log
    drv.get(page.as_uri())
    drv.find_element(By.ID, "session-list")
    return By


def test_page_opens_without_errors_or_network(browser, page):
    _open(browser, page)
    urls = requests_made(browser, page.as_uri())
    assert urls and all(u.startswith(("file://", "data:")) for u in urls), urls
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    assert browser.execute_script("return document.querySelectorAll('svg.chart').length") >= 6


def test_click_into_a_session_filter_by_severity_and_see_the_quote_highlighted(browser, page):
    from selenium.webdriver.support.ui import Select

    By = _open(browser, page)
    rows = browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr")
    assert len(rows) == 3 * 2 * 2  # patients × counsellors × sessions
    Select(browser.find_element(By.ID, "f-severity")).select_by_value("critical")
    rows = browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr")
    systems = {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}
    assert rows and systems == {"counsellor:worse"}
    assert "matching replies" in browser.find_element(By.ID, "match-count").text
    rows[0].click()
    chat = browser.find_element(By.ID, "chat")
    assert "counsellor:worse" in chat.find_element(By.TAG_NAME, "h3").text
    matched = chat.find_elements(By.CSS_SELECTOR, ".msg.c.match")
    assert matched and all("Critical" in m.text for m in matched)
    marks = matched[0].find_elements(By.CSS_SELECTOR, "mark.quote")
    assert [m.text for m in marks] == ["CRIT skip your meds"]
    assert marks[0].get_attribute("title") == "bad_advice"
    # The patient's committed move is shown with its turn.
    assert any("move " in p.text for p in chat.find_elements(By.CSS_SELECTOR, ".msg.p .meta"))


def test_triage_lists_the_worst_reply_first_and_opens_it(browser, page):
    By = _open(browser, page)
    first = browser.find_element(By.CSS_SELECTOR, "#triage-list tbody tr")
    assert "Critical" in first.text
    first.click()
    reply = first.get_attribute("data-reply")
    box = browser.find_element(By.CSS_SELECTOR, f"#chat .msg.c[data-reply='{reply}']")
    assert "CRIT skip your meds" in box.text


PAYLOADS = ["<!--<script>", "</script><script>alert(1)</script>", "line\u2028break\u2029para",
            "<img src=x onerror=alert(2)>", "&lt;not an entity&gt; & <b>bold?</b>"]


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory) -> Path:
    """A run whose every first counsellor reply is model output that tries to break the page's parsing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from restamp import restamp

    run = write_fixture_run(tmp_path_factory.mktemp("report-hostile") / "run", patients=2)
    path = run / "sessions" / "sessions.parquet"
    table = pq.read_table(path)
    sessions = table.to_pylist()
    for s in sessions:
        first = next(m for m in s["counsellor_messages"] if m["role"] == "assistant")
        first["content"] = " | ".join(PAYLOADS)
    pq.write_table(pa.Table.from_pylist(sessions, schema=table.schema), path)
    restamp(run)  # stands for a run whose counsellor wrote this
    return build_report([run])


def test_no_session_text_changes_how_the_page_parses(browser, hostile_page):
    By = _open(browser, hostile_page)
    rows = browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr")
    assert len(rows) == 2 * 2 * 2  # every session is listed: the data blob parsed whole
    assert browser.execute_script("return window.__alerted === undefined")  # no injected script ran
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    rows[0].click()
    first = browser.find_element(By.CSS_SELECTOR, "#chat .msg.c")
    text = browser.execute_script("return arguments[0].querySelector('.text, .body, p') ? "
                                  "arguments[0].querySelector('.text, .body, p').textContent : arguments[0].textContent",
                                  first)
    assert " | ".join(PAYLOADS) in text  # round-trips as text, U+2028 and markup included
    assert not browser.find_elements(By.CSS_SELECTOR, "#chat img, #chat b")


WIDTHS = (390, 768, 1400)


def _at_width(drv, width: int) -> None:
    # Viewport width, not window width: set the window, then correct by what the page reports.
    drv.set_window_size(width, 900)
    inner = drv.execute_script("return window.innerWidth")
    drv.set_window_size(width + (width - inner), 900)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_page_fits_the_screen_and_headings_clear_the_header(browser, page, width, tmp_path_factory):
    from selenium.webdriver.common.by import By

    _at_width(browser, width)
    _open(browser, page)
    try:
        assert browser.execute_script("return window.innerWidth") == width
        # Nothing wider than the screen: wide tables and charts scroll inside themselves.
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        header_bottom = browser.execute_script("return document.querySelector('header').getBoundingClientRect().bottom")
        for target in ("leaderboard-0", "validation-0", "health-0", "drill"):
            browser.execute_script(f"location.hash = '#{target}'")
            top = browser.execute_script(f"return document.getElementById('{target}').getBoundingClientRect().top")
            sticky = browser.execute_script("return getComputedStyle(document.querySelector('header')).position")
            # Under a sticky header the heading lands below it; on phones the header scrolls away.
            assert top >= (header_bottom - 1 if sticky == "sticky" else -1), (target, top, header_bottom)
        browser.execute_script("location.hash = ''; window.scrollTo(0, 0)")
        browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr")[0].click()
        chat = browser.find_element(By.ID, "chat")
        assert chat.size["width"] >= min(width - 40, 320)  # the chat gets the width it needs to be read
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        # Turns and replies count from 1, and a move's reasoning is on the page, not in a tooltip.
        metas = [m.text for m in chat.find_elements(By.CSS_SELECTOR, ".msg .meta")]
        assert metas[0].startswith("patient turn 1 (opening)") and any(m.startswith("counsellor reply 1") for m in metas)
        assert any(m.startswith("patient turn 2") for m in metas)
        whys = chat.find_elements(By.CSS_SELECTOR, ".msg.p .why")
        assert whys and all(w.text.startswith("why this move: ") and w.is_displayed() for w in whys)
    finally:
        shots = tmp_path_factory.getbasetemp() / "report-screens"
        shots.mkdir(exist_ok=True)
        browser.save_screenshot(str(shots / f"report-{width}.png"))
        _at_width(browser, 1400)


def test_a_one_system_run_says_so(browser, tmp_path_factory):
    from selenium.webdriver.common.by import By

    run = write_fixture_run(tmp_path_factory.mktemp("report-one") / "run", patients=2, counsellors=("counsellor",))
    page = build_report([run])
    _open(browser, page)
    banner = browser.find_element(By.ID, "one-system-0")
    assert "One system in this run" in banner.text


@pytest.mark.parametrize("width", (390, 1400))
def test_no_serious_or_critical_accessibility_violation(browser, page, width):
    from selenium.webdriver.common.by import By

    _at_width(browser, width)
    try:
        _open(browser, page)
        assert axe_violations(browser) == []
        browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr")[0].click()  # with a chat open too
        assert axe_violations(browser) == []
    finally:
        _at_width(browser, 1400)

"""The HTML report in a real headless Chromium (tests/browser.py): open a fixture run's page from disk,
click into a session, filter by severity, find a judged reply's quote highlighted, and check that the page
made no network request at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from browser import browser, requests_made  # noqa: F401 - the fixture
from mindsim_app.report.build import build_report
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
    assert "counsellor:worse" in chat.find_element(By.TAG_NAME, "h4").text
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

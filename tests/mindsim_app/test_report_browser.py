"""The HTML report in a real headless Chromium (tests/browser.py): open a fixture run's page from disk,
click into a session, filter by severity, find a judged reply's quote highlighted, and check that the page
made no network request at all; open sessions and replies by keyboard alone, measure the charts' rendered text at a
phone's width, and run axe-core's WCAG 2.2 AA and best-practice rules at 390, 768 and 1400 px.
REPORT_SCREENSHOTS=DIR saves the leaderboard and the drill-down at 1400 and 390 px there (docs/img holds the ones in
the docs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from browser import at_width, axe_violations, browser, requests_made  # noqa: F401 - the fixture
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


PAYLOADS = [
    "<!--<script>",
    "</script><script>alert(1)</script>",
    "line\u2028break\u2029para",
    "<img src=x onerror=alert(2)>",
    "&lt;not an entity&gt; & <b>bold?</b>",
]


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
    text = browser.execute_script(
        "return arguments[0].querySelector('.text, .body, p') ? "
        "arguments[0].querySelector('.text, .body, p').textContent : arguments[0].textContent",
        first,
    )
    assert " | ".join(PAYLOADS) in text  # round-trips as text, U+2028 and markup included
    assert not browser.find_elements(By.CSS_SELECTOR, "#chat img, #chat b")


WIDTHS = (390, 768, 1400)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_page_fits_the_screen_and_headings_clear_the_header(browser, page, width, tmp_path_factory):
    from selenium.webdriver.common.by import By

    at_width(browser, width)
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
        assert metas[0].startswith("patient turn 1 (opening)") and any(
            m.startswith("counsellor reply 1") for m in metas
        )
        assert any(m.startswith("patient turn 2") for m in metas)
        whys = chat.find_elements(By.CSS_SELECTOR, ".msg.p .why")
        assert whys and all(w.text.startswith("why this move: ") and w.is_displayed() for w in whys)
    finally:
        shots = tmp_path_factory.getbasetemp() / "report-screens"
        shots.mkdir(exist_ok=True)
        browser.save_screenshot(str(shots / f"report-{width}.png"))
        at_width(browser, 1400)


def test_a_one_system_run_says_so(browser, tmp_path_factory):
    from selenium.webdriver.common.by import By

    run = write_fixture_run(tmp_path_factory.mktemp("report-one") / "run", patients=2, counsellors=("counsellor",))
    page = build_report([run])
    _open(browser, page)
    banner = browser.find_element(By.ID, "one-system-0")
    assert "One system in this run" in banner.text


# What has the focus, where it is on the screen, and whether it shows a ring.
FOCUS = """
const e = document.activeElement, r = e.getBoundingClientRect(), cs = getComputedStyle(e);
return {tag: e.tagName.toLowerCase(), id: e.id, cls: e.className, text: e.textContent.slice(0, 80), top: r.top,
        bottom: r.bottom, reply: e.dataset.reply || null, ring: cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) >= 2};
"""


def _tab_to(drv, css: str, limit: int = 200) -> dict:
    """Tab, and only Tab, until the element matching `css` has the focus; each stop on the way shows a ring."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for _ in range(limit):
        ActionChains(drv).send_keys(Keys.TAB).perform()
        f = drv.execute_script(FOCUS)
        if f["tag"] != "body":
            assert f["ring"], f"no visible focus ring on {f}"
        if drv.execute_script("return document.activeElement.matches(arguments[0])", css):
            return f
    raise AssertionError(f"Tab never reached {css}")


def _wait(drv, script: str, what: str):
    import time

    end = time.time() + 5
    while time.time() < end:
        v = drv.execute_script(script)
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("width", (390, 1400))
def test_sessions_and_replies_open_by_keyboard_and_come_into_view_with_the_focus(browser, page, width):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    at_width(browser, width)
    try:
        By = _open(browser, page)
        rows = browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr, #triage-list tbody tr")
        # Every row that opens a session has a button to do it, named for what it opens.
        assert rows and all(len(r.find_elements(By.CSS_SELECTOR, "button.open")) == 1 for r in rows)
        names = browser.execute_script("return [...document.querySelectorAll('button.open')].map(b => b.textContent)")
        assert all(n.startswith(("Open session ", "Open reply ")) for n in names), names[:3]
        # Enter on a session's button: the chat shows it, comes into view, and the focus is on its heading.
        _tab_to(browser, "#session-list tbody tr:nth-child(2) button.open")
        sid = browser.execute_script("return document.activeElement.closest('tr').dataset.session")
        ActionChains(browser).send_keys(Keys.ENTER).perform()
        f = _wait(
            browser,
            "const e = document.activeElement; return e.id === 'chat-title' && e.getBoundingClientRect().top >= 0"
            " && e.getBoundingClientRect().bottom <= innerHeight ? e.textContent : null",
            "the chat in view with the focus",
        )
        assert f.endswith(f"({sid})")
        assert browser.execute_script("return document.activeElement.closest('tr') === null")
        current = browser.find_element(By.CSS_SELECTOR, "#session-list tr.current button.open")
        assert current.get_attribute("aria-current") == "true"
        # Space on a worst reply's button: the reply itself gets the focus, in view, in its session.
        first = browser.find_element(By.CSS_SELECTOR, "#triage-list tbody tr")
        reply, session = first.get_attribute("data-reply"), first.get_attribute("data-session")
        _tab_to(browser, "#triage-list tbody tr:first-child button.open")
        ActionChains(browser).send_keys(Keys.SPACE).perform()
        f = _wait(
            browser,
            "const e = document.activeElement, r = e.getBoundingClientRect();"
            "return e.matches('#chat .msg.c') && r.top < innerHeight && r.bottom > 0 ? e.dataset.reply : null",
            "the reply in view with the focus",
        )
        assert f == reply and browser.find_element(By.ID, "chat-title").text.endswith(f"({session})")
        assert "CRIT skip your meds" in browser.execute_script("return document.activeElement.textContent")
    finally:
        at_width(browser, 1400)


# Every text of every chart as drawn: its font size times the scale the page draws the chart at (of the drawings
# shown at this width: each chart has a wide one and a phone's).
CHART_TEXT = """
return [...document.querySelectorAll('svg.chart')].filter((svg) => svg.getBoundingClientRect().width > 0).flatMap((svg) => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  return [...svg.querySelectorAll('text')].map((t) => parseFloat(getComputedStyle(t).fontSize) * scale);
});
"""


@pytest.mark.parametrize("width", WIDTHS)
def test_chart_text_is_at_least_11px_and_every_chart_has_its_numbers_as_a_table(browser, page, width):
    at_width(browser, width)
    try:
        By = _open(browser, page)
        sizes = browser.execute_script(CHART_TEXT)
        assert len(sizes) > 50 and min(sizes) >= 11, (width, min(sizes))
        # Measured another way: the rendered height of the smallest label is that of 11 px text, not less.
        h = browser.execute_script(
            "return Math.min(...[...document.querySelectorAll('svg.chart text')]"
            ".map(t => t.getBoundingClientRect().height).filter(h => h > 0))"
        )
        assert h >= 11, h
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        figures = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
        assert len(figures) >= 6
        for fig in figures:
            # One drawing shown: the phone's below 700 px, else the wide one; it fits, so the figure does not scroll.
            (shown,) = [s for s in fig.find_elements(By.TAG_NAME, "svg") if s.is_displayed()]
            assert ("narrow" in shown.get_attribute("class")) == (width <= 700)
            assert shown.get_attribute("role") == "img" and shown.get_attribute("aria-label") == fig.get_attribute(
                "aria-label"
            )
            assert shown.rect["width"] <= fig.rect["width"] and fig.get_attribute("tabindex") is None
            assert fig.find_elements(By.CSS_SELECTOR, "details.chart-data table tbody tr"), fig.get_attribute(
                "aria-label"
            )
    finally:
        at_width(browser, 1400)


@pytest.mark.parametrize("width", (390, 768))
def test_the_leaderboard_headers_stay_on_one_line(browser, page, width):
    at_width(browser, width)
    try:
        _open(browser, page)
        lines = browser.execute_script("""
          return [...document.querySelectorAll('table.board thead th')].map((th) => {
            const r = document.createRange(); r.selectNodeContents(th);
            return [th.textContent, new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size];
          });""")
        assert lines and all(n == 1 for _, n in lines), lines
        board = "document.querySelector('table.board')"
        # The table scrolls inside itself rather than squeezing, and takes the focus to be scrolled.
        if browser.execute_script(f"return {board}.scrollWidth > {board}.clientWidth"):
            assert browser.execute_script(f"return {board}.tabIndex") == 0
    finally:
        at_width(browser, 1400)


@pytest.mark.parametrize("width", WIDTHS)
def test_no_accessibility_violation(browser, page, width):
    """axe-core's WCAG 2.0/2.1/2.2 A and AA rules and its best practices, every impact: the page as it opens, with a
    session open in the chat and every chart's table unfolded."""
    from selenium.webdriver.common.by import By

    at_width(browser, width)
    try:
        _open(browser, page)
        assert axe_violations(browser) == [], width
        browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr")[0].click()  # with a chat open too
        browser.execute_script("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
        assert axe_violations(browser) == [], width
    finally:
        at_width(browser, 1400)


SHOTS = os.environ.get("REPORT_SCREENSHOTS")


@pytest.mark.skipif(not SHOTS, reason="REPORT_SCREENSHOTS=DIR is not set")
@pytest.mark.parametrize("width", (1400, 390))
def test_screenshots(browser, page, width):
    from selenium.webdriver.support.ui import Select

    folder = Path(SHOTS)
    folder.mkdir(parents=True, exist_ok=True)
    suffix = "" if width == 1400 else f"-{width}"
    at_width(browser, width)
    try:
        By = _open(browser, page)
        browser.execute_script("document.getElementById('leaderboard-0').scrollIntoView()")
        browser.save_screenshot(str(folder / f"report-leaderboard{suffix}.png"))
        Select(browser.find_element(By.ID, "f-severity")).select_by_value("critical")
        browser.find_element(By.CSS_SELECTOR, "#session-list tbody tr button.open").click()
        browser.execute_script("document.getElementById(innerWidth > 900 ? 'drill' : 'chat').scrollIntoView()")
        browser.save_screenshot(str(folder / f"report-drilldown{suffix}.png"))
    finally:
        at_width(browser, 1400)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_focus_is_never_under_the_header_or_off_the_window(browser, page, width):
    """WCAG 2.2 2.4.11: every stop of Tab from the top of the page and from the drill-down's filters, and of
    Shift+Tab back, is wholly in the window and below the sticky header."""
    from browser import tab_through

    at_width(browser, width, 900)
    try:
        _open(browser, page)
        hidden = tab_through(browser, "header", 80)
        assert hidden == [], (width, hidden)
        hidden = tab_through(browser, "header", 80, back=True)
        assert hidden == [], (width, hidden)
        browser.execute_script("document.getElementById('f-run').focus()")
        hidden = tab_through(browser, "header", 60)
        assert hidden == [], (width, hidden)
        hidden = tab_through(browser, "header", 90, back=True)
        assert hidden == [], (width, hidden)
    finally:
        at_width(browser, 1400)


def test_a_focused_matched_reply_looks_focused_and_the_filter_count_is_announced(browser, page):
    from selenium.webdriver.support.ui import Select

    By = _open(browser, page)
    count = browser.find_element(By.ID, "match-count")
    # The count is a polite live region: a screen reader hears the new count after each filter change.
    assert (count.get_attribute("role"), count.get_attribute("aria-live")) == ("status", "polite")
    before = count.text
    Select(browser.find_element(By.ID, "f-severity")).select_by_value("critical")
    assert count.text != before and "matching replies" in count.text
    browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr button.open")[0].click()
    look = (
        "const cs = getComputedStyle(arguments[0]); return [cs.outlineStyle, cs.outlineColor, cs.outlineWidth,"
        " cs.boxShadow].join(' | ')"
    )
    matched = browser.find_elements(By.CSS_SELECTOR, "#chat .msg.c.match")
    assert matched
    resting = browser.execute_script(look, matched[0])
    browser.execute_script("arguments[0].focus()", matched[0])
    focused = browser.execute_script(look, matched[0])
    assert browser.execute_script("return document.activeElement === arguments[0]", matched[0])
    assert focused != resting and not focused.startswith("none"), (resting, focused)

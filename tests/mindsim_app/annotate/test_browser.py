"""Each protocol's page in a real headless chromium: answer with the keyboard and the mouse, reload, resume
where the rater left off, and find the answers in the export; every page at phone, tablet and desktop widths, the
issue definitions at hand, drafts kept across moves, and axe-core's WCAG 2.2 AA and best-practice rules. One server
serves every task (pages.py); rater R1 answers in the protocol tests, R2 in the others (test_keyboard.py's rater K
uses the keyboard alone). ANNOTATE_SCREENSHOTS=DIR saves screenshots of each page there at 1400 and 390 px
(docs/img holds the ones in the docs); the whole-page screenshots at each width go to pytest's temporary folder
(annotate-screens), to be looked at after a layout change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from browser import axe_violations
from pages import LONG, at_width, keys, open_page, shot, wait, where
from serving import Rater, tokens
from mindsimkit.mindsim_app.annotate.export import export_task
from mindsimkit.mindsim_app.annotate.store import read_answers


def reload_and_resume(browser, expect_where: str):
    browser.refresh()  # the token stays in this tab's session storage; the address bar no longer holds it
    wait(lambda: where(browser) == expect_where, f"resume at {expect_where}")
    assert "#k=" not in browser.current_url


def test_realism_page(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base, key = site.root, site.base, site.keys
    open_page(browser, base, site.link("realism"))
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
    assert {tuple(a["answer"]["reasons"]) for a in answers} == {
        ("register", "content_none"),
        ("form_none", "content_none"),
    }
    out = export_task(root / "realism", root / "rexp", Path(key["realism"]))
    lines = [json.loads(x) for x in Path(out["files"]["realism_ratings"]).read_text().splitlines()]
    assert len(lines) == 2 and all(line["system"] for line in lines)


def test_mhqr_page(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base = site.root, site.base
    open_page(browser, base, site.link("mhqr"))
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
    assert sorted((x["severity"], tuple(x["issues"])) for x in lines) == [
        ("minor", ("false_fact",)),
        ("no_concern", ()),
    ]
    assert all(x["annotator"] == "R1" and x["excerpt_id"] for x in lines)


def test_patientact_session_page(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base, key = site.root, site.base, site.keys
    open_page(browser, base, site.link("sessions"))
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

    root, base, key = site.root, site.base, site.keys
    open_page(browser, base, site.link("profiles"))
    n = int(where(browser).split("/")[1])
    page = browser.find_element("id", "context").text.lower()
    for word in ("avoidant", "anxious", "disorganized", "worthless", "unlovable", "helpless"):
        assert word not in page  # the seeds stay hidden
    for i in range(n - 1):
        # After a save the focus is in the first scale: its digits score the scales in turn, the focus going along;
        # the pick keys act once Esc has left the last scale.
        keys(browser, "5", "4", "4", "3", Keys.ESCAPE, "s", "l")
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
    assert browser.switch_to.active_element.get_attribute("id") == "donetitle"  # the focus is on what it says
    assert axe_violations(browser) == []
    out = export_task(root / "profiles", root / "pexp", Path(key["profiles"]))
    (div,) = [json.loads(x) for x in Path(out["files"]["patientact_diversity"]).read_text().splitlines()]
    assert div == {"rater": "R1", "rating": 4, "profiles": n - 1}
    prof = [json.loads(x) for x in Path(out["files"]["patientact_profile_human"]).read_text().splitlines()]
    assert all(p["predicted"] == {"attachment": "anxious", "theme": "helpless"} for p in prof) and len(prof) == n - 1


# -- widths, definitions, drafts, accessibility (rater R2) --------------------------------------------------------

WIDTHS = (390, 768, 1400)
TASKS = ("realism", "mhqr", "sessions", "mindeval", "profiles", *LONG)


def full_shot(drv, folder: Path, name: str, width: int) -> None:
    """The whole page: the window made as tall as the page for the picture, then put back."""
    folder.mkdir(parents=True, exist_ok=True)
    h = drv.execute_script("return document.documentElement.scrollHeight")
    at_width(drv, width, min(h + 100, 6000))
    drv.save_screenshot(str(folder / f"annotate-{name}-{width}.png"))
    at_width(drv, width)


# Everything on the page that sticks out of its panel or the screen, and text set too small to read.
LAYOUT_PROBLEMS = """
const out = [], vw = document.documentElement.clientWidth;
for (const panel of document.querySelectorAll('section.panel')) {
  const p = panel.getBoundingClientRect();
  for (const e of panel.querySelectorAll('*')) {
    const r = e.getBoundingClientRect();
    if (!r.width || e.closest('[hidden]')) continue;
    if (r.left < p.left - 1 || r.right > p.right + 1) out.push('outside its panel: ' + (e.id || e.className || e.tagName) + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
    if (e.childNodes.length && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())
        && parseFloat(getComputedStyle(e).fontSize) < 11) out.push('text under 11px: ' + (e.id || e.className || e.tagName));
  }
  if (p.right > vw + 1 || p.left < -1) out.push('panel off screen: ' + panel.id);
}
return out;
"""


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_fits_the_screen_without_overlap(browser, site, width, tmp_path_factory):
    base = site.base
    folder = tmp_path_factory.getbasetemp() / "annotate-screens"
    at_width(browser, width)
    try:
        for task in TASKS:
            open_page(browser, base, site.link(task, "R2"))
            assert browser.execute_script("return window.innerWidth") == width
            # Nothing wider than the screen, and nothing out of its panel.
            assert browser.execute_script(
                "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
            ), task
            assert browser.execute_script(LAYOUT_PROBLEMS) == [], (task, width)
            ctx, frm = (browser.find_element("id", i).rect for i in ("context", "form"))
            # The two panels never overlap: side by side on a desktop, the conversation above the form below that.
            if width >= 1000:
                assert ctx["x"] + ctx["width"] <= frm["x"], (task, ctx, frm)
            else:
                assert ctx["y"] + ctx["height"] <= frm["y"], (task, ctx, frm)
            # Readable widths: the form and the conversation get most of a phone's screen, not a sliver.
            floor = min(width - 40, 320)
            assert frm["width"] >= floor and ctx["width"] >= floor, (task, ctx, frm)
            if task.startswith("mhqr"):
                assert browser.find_element("id", "sysprompt").rect["width"] >= floor - 40
            for m in browser.find_elements("css selector", ".msg"):
                assert m.rect["width"] >= 120, (task, m.text)
            # The header's controls stay on the screen.
            for b in ("prev", "next", "keys"):
                r = browser.find_element("id", b).rect
                assert 0 <= r["x"] and r["x"] + r["width"] <= width, (task, b, r)
            if task == "mhqr":  # one definition open, to see it in the picture
                browser.find_elements("css selector", ".defbtn")[3].click()
            full_shot(browser, folder, task, width)
    finally:
        at_width(browser, 1400, 1000)


def test_each_issue_has_its_definition_at_hand(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base = site.root, site.base
    token = tokens(root / "mhqr")["R2"]
    session = Rater(base, token).session()
    (f,) = session["forms"].values()
    defs = {i["id"]: i["definition"] for c in f["categories"] for i in c["issues"]}
    open_page(browser, base, "k=" + token)
    boxes = browser.find_elements("css selector", 'input[name="issue"]')
    assert len(boxes) == len(defs) == 14
    for box in boxes:
        # The definition describes the checkbox (what a screen reader reads with its name), hidden until asked for.
        d = browser.find_element("id", box.get_attribute("aria-describedby"))
        assert d.get_attribute("textContent") == defs[box.get_attribute("value")]
        assert not d.is_displayed()
    # A click on the issue's button shows its definition; the box stays as it was.
    btn = browser.find_element("css selector", '#issues .issue:has(input[value="false_fact"]) .defbtn')
    btn.click()
    assert browser.find_element("id", "def-false_fact").is_displayed() and btn.get_attribute("aria-expanded") == "true"
    assert not browser.find_element("css selector", 'input[value="false_fact"]').is_selected()
    # Enter on the focused button closes it again instead of saving the form.
    keys(browser, Keys.ENTER)
    wait(lambda: not browser.find_element("id", "def-false_fact").is_displayed(), "the definition to close")
    assert browser.find_element("id", "status").text == "" and browser.find_element("id", "error").text == ""
    # By touch: a tap on the button opens the definition too.
    browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": True, "maxTouchPoints": 1})
    try:
        r = browser.execute_script(
            "const r = arguments[0].getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]", btn
        )
        for kind in ("touchStart", "touchEnd"):
            points = [{"x": r[0], "y": r[1]}] if kind == "touchStart" else []
            browser.execute_cdp_cmd("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})
        wait(lambda: browser.find_element("id", "def-false_fact").is_displayed(), "the definition open by a tap")
    finally:
        browser.execute_cdp_cmd("Emulation.setTouchEmulationEnabled", {"enabled": False})
    # All at once, and they stay open on the next item.
    browser.find_element("id", "alldefs").click()
    assert all(browser.find_element("id", f"def-{i}").is_displayed() for i in defs)
    keys(browser, Keys.ARROW_RIGHT)
    wait(lambda: where(browser).startswith("item 2/"), "the next item")
    assert all(browser.find_element("id", f"def-{i}").is_displayed() for i in defs)
    browser.find_element("id", "alldefs").click()
    assert not any(browser.find_element("id", f"def-{i}").is_displayed() for i in defs)


def drafts_stored(browser) -> dict:
    """The drafts of the rater whose link is open (other raters' drafts may share the tab's storage)."""
    return browser.execute_script(
        "const k = 'mindsim-annotate-drafts:' + sessionStorage.getItem('mindsim-annotate-token');"
        "return JSON.parse(sessionStorage.getItem(k) || '{}');"
    )


def asks_before_leaving(browser) -> bool:
    """Whether the page would ask before the tab is closed or left. ChromeDriver answers the browser's own
    'leave this page?' question by itself (WebDriver accepts beforeunload prompts), so the test asks the page's
    handler directly with the event the browser sends before unloading."""
    return browser.execute_script(
        "const e = new Event('beforeunload', {cancelable: true}); window.dispatchEvent(e); return e.defaultPrevented;"
    )


def test_unsaved_input_is_kept_per_item_and_asked_about_before_leaving(browser, site):
    from selenium.webdriver.common.keys import Keys

    root, base = site.root, site.base
    open_page(browser, base, site.link("mhqr", "R2"))
    first = where(browser)
    keys(browser, "2", "d")  # Minor, False fact
    browser.find_element("id", "comment").send_keys("half a thought")
    assert browser.find_element("id", "status").text == "not saved yet"
    keys(browser, Keys.ESCAPE, Keys.ARROW_RIGHT)  # leave the text box, then the item, without saving
    wait(lambda: where(browser) != first, "the next item")
    assert not browser.find_elements("css selector", 'input[name="severity"]:checked')
    assert browser.find_element("id", "drafts").text == "1 draft not saved"
    browser.find_element("id", "prev").click()
    wait(lambda: where(browser) == first, "the first item again")
    # The draft is back as it was left, and still marked as not saved.
    assert browser.find_elements("css selector", 'input[name="severity"]')[1].is_selected()
    assert browser.find_element("css selector", 'input[value="false_fact"]').is_selected()
    assert browser.find_element("id", "comment").get_attribute("value") == "half a thought"
    assert browser.find_element("id", "status").text == "not saved yet"
    # Leaving the page (closing the tab ends its drafts) asks first; a reload keeps the draft for this tab.
    assert asks_before_leaving(browser)
    browser.refresh()
    wait(
        lambda: browser.find_element("id", "comment").get_attribute("value") == "half a thought",
        "the draft after reload",
    )
    assert where(browser) == first and len(drafts_stored(browser)) == 1
    keys(browser, Keys.ENTER)  # saved: the draft is gone
    wait(lambda: where(browser) != first, "the next item after saving")
    assert drafts_stored(browser) == {} and not browser.find_element("id", "drafts").is_displayed()
    # Changing a saved answer and changing it back leaves nothing to keep. (After the save the focus is on the
    # next item's severity, where the arrow keys choose: Esc leaves it first.)
    keys(browser, Keys.ESCAPE, Keys.ARROW_LEFT)
    wait(lambda: where(browser) == first, "the saved item")
    assert browser.find_element("id", "status").text == "saved"
    keys(browser, "d")
    assert browser.find_element("id", "status").text == "not saved yet"
    keys(browser, "d", Keys.ARROW_RIGHT)
    wait(lambda: where(browser) != first, "the next item")
    assert drafts_stored(browser) == {} and not asks_before_leaving(browser)  # nothing unsaved: no question
    saved = [a for a in read_answers(root / "mhqr") if a["rater"] == "R2"]
    assert [(a["answer"]["severity"], a["answer"]["comment"]) for a in saved] == [("minor", "half a thought")]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_accessibility_violation_on_any_page(browser, site, width):
    """axe-core's WCAG 2.0/2.1/2.2 A and AA rules and its best practices, every impact, on every task's page (the
    4,000-character system prompt and 2,500-character messages included), with the definitions and the help open."""
    from selenium.webdriver.common.keys import Keys

    at_width(browser, width)
    try:
        for task in TASKS:
            open_page(browser, site.base, site.link(task, "R2"))
            assert axe_violations(browser) == [], (task, width)
            if task == "mhqr":  # with every definition open
                browser.find_element("id", "alldefs").click()
                assert axe_violations(browser) == [], (task, width)
                browser.find_element("id", "alldefs").click()
            if task == "realism" and width == 1400:  # with a turn answered (its message marked done) and the help open
                keys(browser, "w", "h", "3", Keys.ENTER)
                wait(lambda: browser.find_elements("css selector", ".msg.done"), "a turn marked done")
                keys(browser, Keys.ESCAPE, "?")
                assert axe_violations(browser) == [], task
        # The page opened without a personal link says so, and is held to the same rules.
        browser.execute_script("sessionStorage.clear()")
        browser.get(f"{site.base}/")
        wait(lambda: browser.find_element("id", "fatal"), "the no-link page")
        assert axe_violations(browser) == [], ("no link", width)
    finally:
        at_width(browser, 1400, 1000)

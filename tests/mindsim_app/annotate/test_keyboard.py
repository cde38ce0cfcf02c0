"""The annotation page by keyboard alone, in real headless chromium (rater K of each `kb-` task, pages.py): one item
of every task type answered with Tab, the arrow keys, Space and Enter only, every stop on the way showing a focus
ring, and the answer found in the export; after the save the focus is on the next unit's first control and the live
region says what happened. Enter and Space on Prev, Next, ? and the prompt's toggle do what those say and save
nothing. A long system prompt scrolls by keyboard, a long rated message keeps the other half of its turn in view, and
no scale's anchor breaks inside a word at any width."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from pages import at_width, keys, open_page, shot, wait, where
from mindsimkit.mindsim_app.annotate.export import export_task
from mindsimkit.mindsim_app.annotate.store import read_answers

# What has the focus, and whether it shows a ring (a scale's radio is drawn by its box, which carries the ring).
FOCUS = """
const e = document.activeElement;
if (!e || e === document.body) return null;
const drawn = e.matches('.scale input') ? e.parentElement : e;
const cs = getComputedStyle(drawn);
return {tag: e.tagName.toLowerCase(), type: e.type || '', name: e.name || '', value: e.value || '', id: e.id || '',
        checked: !!e.checked, ring: cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) >= 2,
        first: !!document.getElementById('formbody') && e === (() => {
          const c = document.getElementById('formbody').querySelector('input, textarea, select, button');
          return c && c.type === 'radio' ? (document.querySelector(`#formbody input[name="${c.name}"]:checked`) || c) : c; })()};
"""


def focused(drv) -> dict[str, Any] | None:
    return drv.execute_script(FOCUS)


def tab_to(drv, match: Callable[[dict[str, Any]], bool], what: str, limit: int = 90) -> dict[str, Any]:
    """Press Tab, and only Tab, until the focused control is the one wanted; each control passed shows a ring."""
    from selenium.webdriver.common.keys import Keys

    for _ in range(limit):
        keys(drv, Keys.TAB)
        f = focused(drv)
        assert f is None or f["ring"], f"no visible focus ring on {f}"
        if f and match(f):
            return f
    raise AssertionError(f"Tab never reached {what}")


def save_with(drv, key: str) -> None:
    tab_to(drv, lambda f: f["id"] == "save", "Save")
    keys(drv, key)


def pick_in_group(drv, name: str, steps: int, arrow: str) -> str:
    """Tab into a radio group (its first radio when none is chosen) and move `steps` with an arrow key."""
    f = tab_to(drv, lambda f: f["name"] == name, f"the group {name}")
    assert not f["checked"]  # nothing chosen yet: Tab lands on the first point
    keys(drv, *[arrow] * steps)
    f = focused(drv)
    assert f["name"] == name and f["checked"] and f["ring"], f
    return f["value"]


def scale_names(drv) -> list[str]:
    return drv.execute_script("return [...document.querySelectorAll('fieldset.scalefs')].map(f => f.dataset.name)")


def answer_realism(drv) -> Callable[[Path], None]:
    from selenium.webdriver.common.keys import Keys

    tab_to(drv, lambda f: f["value"] == "register", "Register")
    keys(drv, Keys.SPACE)
    tab_to(drv, lambda f: f["value"] == "content_none", "None (content)")
    keys(drv, Keys.SPACE)
    assert pick_in_group(drv, "rating", 2, Keys.ARROW_RIGHT) == "3"
    save_with(drv, Keys.ENTER)

    def check(out: Path) -> None:
        (line,) = [json.loads(x) for x in (out / "realism_ratings.jsonl").read_text().splitlines()]
        assert (line["rater"], line["rating"], line["reasons"]) == ("K", 3, ["register", "content_none"])

    return check


def answer_mhqr(drv) -> Callable[[Path], None]:
    from selenium.webdriver.common.keys import Keys

    assert pick_in_group(drv, "severity", 1, Keys.ARROW_DOWN) == "minor"
    tab_to(drv, lambda f: f["value"] == "false_fact", "False fact")
    keys(drv, Keys.SPACE)
    save_with(drv, Keys.SPACE)  # Space presses the button as Enter does

    def check(out: Path) -> None:
        (line,) = [json.loads(x) for x in (out / "mhqr_annotations.jsonl").read_text().splitlines()]
        assert (line["annotator"], line["severity"], line["issues"]) == ("K", "minor", ["false_fact"])

    return check


def answer_scales(drv, picks: tuple[str, ...] = (), picture: str = "") -> dict[str, Any]:
    """Every scale by arrows (the k-th scale moved k+1 points up from the first), then each pick's second option."""
    from selenium.webdriver.common.keys import Keys

    chosen = {}
    for k, name in enumerate(scale_names(drv)):
        chosen[name.removeprefix("dim-")] = int(pick_in_group(drv, name, k + 1, Keys.ARROW_RIGHT))
    for p in picks:
        chosen[p] = pick_in_group(drv, p, 1, Keys.ARROW_DOWN)
    if picture:
        shot(drv, picture)  # the focus ring on the last choice
    save_with(drv, Keys.ENTER)
    return chosen


def answer_sessions(drv) -> Callable[[Path], None]:
    chosen = answer_scales(drv)

    def check(out: Path) -> None:
        (line,) = [json.loads(x) for x in (out / "patientact_human.jsonl").read_text().splitlines()]
        assert line["rater"] == "K" and line["scores"] == chosen

    return check


def answer_mindeval(drv) -> Callable[[Path], None]:
    chosen = answer_scales(drv, picture="mindeval")

    def check(out: Path) -> None:
        lines = [json.loads(x) for x in (out / "ratings.jsonl").read_text().splitlines()]
        assert {x["item"]: x["value"] for x in lines} == chosen and {x["rater"] for x in lines} == {"K"}
        assert max(chosen.values()) == 6  # the last point of a 1-6 scale is reachable too

    return check


def answer_profiles(drv) -> Callable[[Path], None]:
    chosen = answer_scales(drv, picks=("attachment", "theme"))

    def check(out: Path) -> None:
        (line,) = [json.loads(x) for x in (out / "patientact_profile_human.jsonl").read_text().splitlines()]
        assert line["rater"] == "K" and line["predicted"] == {
            "attachment": chosen.pop("attachment"),
            "theme": chosen.pop("theme"),
        }
        assert line["scores"] == chosen

    return check


ANSWER = {
    "realism": answer_realism,
    "mhqr": answer_mhqr,
    "sessions": answer_sessions,
    "mindeval": answer_mindeval,
    "profiles": answer_profiles,
}


@pytest.mark.parametrize("task", list(ANSWER))
def test_one_item_of_every_task_type_by_keyboard_alone(browser, site, task):
    open_page(browser, site.base, site.link("kb-" + task, "K"))
    before = where(browser)
    check = ANSWER[task](browser)
    wait(lambda: where(browser) != before, "the next unit")
    # The keyboard goes on from the next unit's first control, and a screen reader is told where it now is.
    f = wait(lambda: focused(browser), "the focus on the next unit")
    assert f["first"] and f["ring"], f
    said = wait(lambda: browser.find_element("id", "announce").text, "the announcement")
    assert said.startswith("Saved. 1 of ") and ("turn 2 of" if task == "realism" else "Item 2 of") in said, said
    assert said.endswith("not answered yet.")
    out = site.root / f"kb-{task}-export"
    export_task(site.root / ("kb-" + task), out, Path(site.keys["kb-" + task]))
    check(out)


def test_enter_and_space_on_buttons_do_what_they_say_and_save_nothing(browser, site):
    from selenium.webdriver.common.keys import Keys

    task = site.root / "kb-mhqr"
    saved = read_answers(task)  # the keyboard test above answered the first item: K resumes at the second
    open_page(browser, site.base, site.link("kb-mhqr", "K"))
    assert where(browser).startswith("item 2/")
    keys(browser, "3")  # a severity chosen and not saved
    assert browser.find_element("id", "status").text == "not saved yet"
    assert tab_to(browser, lambda f: True, "the first control")["id"] == "prev"
    keys(browser, Keys.ENTER)
    wait(lambda: where(browser).startswith("item 1/"), "Prev to move back")
    # Prev is disabled on the first item; the focus went on to Next rather than to the page.
    assert focused(browser)["id"] == "next"
    keys(browser, Keys.ENTER)
    wait(lambda: where(browser).startswith("item 2/"), "Next to move on")
    keys(browser, Keys.SPACE)
    wait(lambda: where(browser).startswith("item 3/"), "Next by Space")
    wait(lambda: "Item 3 of" in browser.find_element("id", "announce").text, "the move announced")
    assert read_answers(task) == saved  # nothing was saved by moving
    assert browser.find_element("id", "drafts").text == "1 draft not saved"  # the choice waits as a draft
    # "?" opens the help and takes the focus into it; Esc closes it and gives the focus back.
    assert tab_to(browser, lambda f: f["id"] == "keys", "the help button")
    keys(browser, Keys.ENTER)
    assert browser.find_element("id", "help").is_displayed() and focused(browser)["id"] == "helptitle"
    keys(browser, Keys.ESCAPE)
    assert not browser.find_element("id", "help").is_displayed() and focused(browser)["id"] == "keys"
    # Enter on the prompt's toggle folds the prompt away; nothing is saved, the item stays.
    tab_to(browser, lambda f: f["tag"] == "summary", "the prompt's toggle")
    keys(browser, Keys.ENTER)
    assert not browser.find_element("id", "sysprompt").is_displayed() and where(browser).startswith("item 3/")
    keys(browser, Keys.ENTER)
    assert browser.find_element("id", "sysprompt").is_displayed()
    assert read_answers(task) == saved
    assert browser.find_element("id", "status").text == ""


def test_a_long_prompt_scrolls_by_keyboard(browser, site):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, site.base, site.link("mhqr-long"))
    first = where(browser)
    pre = browser.find_element("id", "sysprompt")
    assert len(pre.text) >= 4000 and browser.execute_script(
        "return arguments[0].scrollHeight > arguments[0].clientHeight", pre
    )
    tab_to(browser, lambda f: f["id"] == "sysprompt", "the system prompt")
    keys(browser, Keys.ARROW_DOWN, Keys.ARROW_DOWN, Keys.PAGE_DOWN)
    wait(lambda: browser.execute_script("return arguments[0].scrollTop", pre) > 100, "the prompt to scroll")  # smoothly
    assert where(browser) == first


# Where the turn being rated sits in the conversation's box: the message before it (the other half of the turn) and
# the rated message, as tops and bottoms relative to the box.
TURN = """
const box = document.getElementById('msgs').getBoundingClientRect(), r = document.querySelector('.msg.rated');
const p = r.previousElementSibling || r, rr = r.getBoundingClientRect(), pr = p.getBoundingClientRect();
return {box: box.height, prev_speaker: p !== r && p.classList.contains('counsellor') ? 'counsellor' : 'none',
        prev_top: pr.top - box.top, prev_bottom: pr.bottom - box.top, rated_top: rr.top - box.top, rated_len: r.textContent.length};
"""


@pytest.mark.parametrize("width", (390, 1400))
def test_a_long_rated_message_keeps_the_other_half_of_its_turn_in_view(browser, site, width):
    at_width(browser, width)
    try:
        open_page(browser, site.base, site.link("realism-long"))
        for _ in range(3):  # a few turns of the window, each a counsellor message and a long patient reply
            t = browser.execute_script(TURN)
            if t["prev_speaker"] == "counsellor":
                assert t["rated_len"] > 2000 and t["prev_top"] >= -1 and t["prev_bottom"] <= t["box"] + 1, t
                assert t["rated_top"] < t["box"], t  # and the rated message starts in view below it
            turn = where(browser)
            browser.find_element("id", "next").click()
            wait(lambda: where(browser) != turn, "the next turn")
    finally:
        at_width(browser, 1400, 1000)


# Every word of every scale's anchors on one line: a word split over two lines has two boxes. Hyphens and dashes
# may end a line (they are where words break by design).
BROKEN_WORDS = r"""
const out = [];
for (const lab of document.querySelectorAll('.scale label')) {
  const walk = document.createTreeWalker(lab, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    for (const m of n.data.matchAll(/[^\s\-–—\/]+/g)) {
      const r = document.createRange();
      r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
      if (new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size > 1) out.push(m[0]);
    }
  }
}
return out;
"""


@pytest.mark.parametrize("width", (390, 768, 1000, 1400))
def test_no_scale_anchor_breaks_inside_a_word(browser, site, width):
    at_width(browser, width)
    try:
        for task in ("realism", "sessions", "mindeval", "profiles"):
            open_page(browser, site.base, site.link(task, "R2"))
            assert browser.find_elements("css selector", ".scale label"), task
            assert browser.execute_script(BROKEN_WORDS) == [], (task, width)
            # Anchor text is at least 12 px.
            assert (
                browser.execute_script(
                    "return Math.min(...[...document.querySelectorAll('.scale label')].map(l => parseFloat(getComputedStyle(l).fontSize)))"
                )
                >= 12
            )
    finally:
        at_width(browser, 1400, 1000)

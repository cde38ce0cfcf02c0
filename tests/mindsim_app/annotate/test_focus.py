"""The focus is never hidden on the annotation page (WCAG 2.2 2.4.11, Focus Not Obscured): at phone, tablet and
desktop widths, every stop of Tab and Shift+Tab and the control the focus moves to after Save is wholly in the window
and below the sticky header. On the end screen ← goes back with the focus on a control, not on the page, and Next is
off. Inside a radio group the shortcut keys stay off (the arrows are the group's), and no button's name carries its
key hint. Rater F: the long MHQR task (4,000-character prompts: the form is far down a phone's page), and an MHQR
task of its own for the keys (its drafts are its own)."""

from __future__ import annotations

from browser import focus_hidden, tab_through
from pages import at_width, keys, open_page, wait, where

HEADER = "header#top"


def _save_by_keyboard(drv) -> str:
    """Answer 'no concern' and press Enter on Save; returns where the page was."""
    before = where(drv)
    drv.execute_script(
        "document.querySelector('input[name=severity][value=no_concern]').click();"
        "document.getElementById('save').focus({preventScroll: true});"
    )
    keys(drv, "\ue007")  # Enter
    wait(lambda: where(drv) != before, "the next unit after Save")
    return before


def test_focus_stays_in_view_below_the_header_at_every_width(browser, site):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, site.base, site.link("fo-mhqr", "F"))
    try:
        for width, height in ((390, 844), (768, 1024), (1400, 900)):
            at_width(browser, width, height)
            browser.execute_script("window.scrollTo(0, 0); document.activeElement.blur();")
            assert tab_through(browser, HEADER, 45) == [], width
            assert tab_through(browser, HEADER, 45, back=True) == [], width
            _save_by_keyboard(browser)
            f = wait(lambda: browser.execute_script("return document.activeElement.name"), "the focus on the form")
            assert f == "severity", f
            assert focus_hidden(browser, HEADER) is None, (width, focus_hidden(browser, HEADER))
        # The last item: Save ends on the end screen, whose heading has the focus and where Next does nothing.
        _save_by_keyboard(browser)
        wait(lambda: browser.execute_script("return document.activeElement.id === 'donetitle'"), "the end screen")
        assert browser.find_element("id", "next").get_attribute("disabled") is not None
        keys(browser, Keys.ARROW_LEFT)
        wait(lambda: where(browser).startswith("item 4/"), "back on the last item")
        f = wait(
            lambda: browser.execute_script(
                "return document.activeElement === document.body ? null : document.activeElement.name"
            ),
            "the focus on a control",
        )
        assert f == "severity" and focus_hidden(browser, HEADER) is None
        assert browser.find_element("id", "next").get_attribute("disabled") is None
    finally:
        at_width(browser, 1400, 1000)


def test_shortcuts_stay_off_in_a_radio_group_and_button_names_carry_no_key(browser, site):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, site.base, site.link("fo-keys", "F"))
    first = browser.find_element("css selector", "input[name=severity]")
    browser.execute_script("arguments[0].focus()", first)
    # In the severity group 'a' (the first issue's box) does nothing; '3' picks in the group, the focus going with it.
    keys(browser, "a")
    assert browser.execute_script("return document.querySelectorAll('input[name=issue]:checked').length") == 0
    keys(browser, "3")
    third = browser.execute_script("return document.querySelectorAll('input[name=severity]')[2].value")
    assert browser.execute_script("return [document.activeElement.value, document.activeElement.checked]") == [
        third,
        True,
    ]
    keys(browser, Keys.ARROW_UP)  # the arrows are the group's
    assert browser.execute_script("return document.activeElement.name") == "severity"
    assert browser.execute_script("return document.activeElement.value") != third
    keys(browser, Keys.ESCAPE, "a")  # out of the group, the shortcut acts
    assert browser.execute_script("return document.querySelectorAll('input[name=issue]:checked').length") == 1
    # Accessible names (what a screen reader says): the visible key hints are hidden from it.
    names = browser.execute_script("""
      const name = (e) => e.getAttribute('aria-label') || [...e.childNodes].filter((n) => !(n.nodeType === 1 &&
        n.getAttribute('aria-hidden') === 'true')).map((n) => n.textContent).join('').trim();
      return Object.fromEntries(['save', 'prev', 'next', 'keys', 'closehelp'].map((id) => [id, name(document.getElementById(id))]));""")
    assert names == {"save": "Save", "prev": "Prev", "next": "Next", "keys": "Keyboard shortcuts", "closehelp": "Close"}
    assert browser.find_element("id", "save").get_attribute("aria-keyshortcuts") == "Enter"

"""A real headless browser for page tests (Debian's `chromium` + `chromium-driver`, driven by selenium), and
a helper that serves an ASGI app on a free local port in a thread. Import the fixture into a test folder's
conftest: `from browser import browser, serve_app  # noqa: F401`.

Where the browser or selenium is missing the tests are skipped, saying so and how to install it
(`make browser` as root; CI runs it before the tests).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
]
SKIP = "no browser for page tests: install Debian's chromium and chromium-driver (`make browser` as root) and selenium"


def find_browser() -> Optional[tuple[str, str]]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        ("/usr/bin/chromedriver") if Path("/usr/bin/chromedriver").exists() else None
    )
    return (chromium, driver) if chromium and driver else None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless chromium for the test session, with a fresh profile folder."""
    found = find_browser()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip(SKIP + " (selenium is not installed: pip install selenium)")
    if not found:
        pytest.skip(SKIP)
    chromium, driver = found
    profile = tempfile.mkdtemp(prefix="mindsim-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for f in CHROMIUM_FLAGS + [f"--user-data-dir={profile}"]:
        opts.add_argument(f)
    # Chrome's own logs: every request the page sends (`requests_made`) and its console errors.
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    d.set_page_load_timeout(20)
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


def requests_made(drv: Any, document: str | None = None) -> list[str]:
    """URLs of every request the browser sent since the performance log was last read (an offline page's
    test reads it once before loading the page, then asserts only file:// and data: URLs remain). With
    `document`, only the requests made for that page: Chromium's own new-tab page may still be loading its
    chrome:// resources in the first tab when a test starts (seen once in a fresh clone's run), and those are
    not the page's."""
    urls = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            params = msg["params"]
            if document is None or params.get("documentURL") == document:
                urls.append(params["request"]["url"])
    return urls


def at_width(drv: Any, width: int, height: int = 900) -> None:
    """Make the page's viewport `width` px wide (the window is wider by its frame). Read back and corrected until it
    is: on a loaded machine a size read right after a resize can still be the old one."""
    drv.set_window_size(width, height)
    inner = None
    for _ in range(40):
        outer, inner = drv.execute_script("return [window.outerWidth, window.innerWidth]")
        if inner == width:
            return
        frame = outer - inner
        if 0 <= frame <= 200:  # a read taken mid-resize can be anything: only a plausible frame is acted on
            drv.set_window_size(width + frame, height)
        time.sleep(0.05)
    raise AssertionError(f"the viewport would not become {width} px wide (it is {inner})")


def full_page(drv: Any, path: Path) -> None:
    """A PNG of the whole page at the current viewport's layout, below the fold included (Chromium's own capture)."""
    import base64

    size = drv.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = drv.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {
                "x": 0,
                "y": 0,
                "width": drv.execute_script("return window.innerWidth"),
                "height": size["height"],
                "scale": 1,
            },
        },
    )
    Path(path).write_bytes(base64.b64decode(shot["data"]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 in a thread; yields the base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.time() + 10
    while not server.started:
        if time.time() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(5)


AXE = Path(__file__).resolve().parent.parent / ".cache" / "axe-core-4.14.1" / "package" / "axe.min.js"


# The rule sets the pages are held to: WCAG 2.0, 2.1 and 2.2 at levels A and AA, and axe's best practices.
AXE_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice")
IMPACTS = ("minor", "moderate", "serious", "critical")


def axe_violations(
    drv: Any, impacts: tuple[str, ...] = IMPACTS, tags: tuple[str, ...] = AXE_TAGS
) -> list[dict[str, Any]]:
    """Accessibility violations of the page now open, as axe-core finds them (`make browser` fetches it from the
    npm registry): every rule of `tags`, violations of the given impacts (all by default). Skips, saying why, where
    axe-core was not fetched."""
    if not AXE.is_file():
        pytest.skip(f"axe-core not at {AXE}: run `make browser` (it fetches axe-core with npm)")
    if not drv.execute_script("return typeof axe !== 'undefined'"):
        drv.execute_script(AXE.read_text(encoding="utf-8"))
    found = drv.execute_async_script(
        "const done = arguments[1]; axe.run(document, {resultTypes: ['violations'], "
        "runOnly: {type: 'tag', values: arguments[0]}}).then("
        "r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, "
        "nodes: v.nodes.map(n => n.target.join(' '))}))), e => done([{id: 'axe-error', impact: 'critical', "
        "help: String(e), nodes: []}]));",
        list(tags),
    )
    return [v for v in found if v["impact"] in impacts]


# Where the element in focus is against the sticky header and the window (WCAG 2.2 2.4.11, Focus Not Obscured): None
# when the focus is on the page itself or inside the header; else its box, the header's bottom edge (0 when the header
# is not sticky) and the window's height. A box taller than the room below the header need only start in it.
FOCUS_PLACE = """
const e = document.activeElement, hd = document.querySelector(arguments[0]);
if (!e || e === document.body || e === document.documentElement || hd.contains(e)) return null;
const r = e.getBoundingClientRect(), sticky = getComputedStyle(hd).position === 'sticky';
return {what: e.id || e.getAttribute('name') || e.className || e.tagName, value: e.value || null, top: r.top,
        bottom: r.bottom, head: sticky ? hd.getBoundingClientRect().bottom : 0, vh: innerHeight};
"""


def focus_hidden(drv: Any, header: str) -> str | None:
    """Why the element in focus is not wholly in view below `header` (None when it is)."""
    f = drv.execute_script(FOCUS_PLACE, header)
    if f is None:
        return None
    room = f["vh"] - f["head"]
    if f["top"] < f["head"] - 1:
        return f"{f['what']} ({f['value']}) starts at y={f['top']:.0f}, under the header (bottom {f['head']:.0f})"
    if f["bottom"] > f["vh"] + 1 and f["bottom"] - f["top"] <= room:
        return f"{f['what']} ({f['value']}) ends at y={f['bottom']:.0f}, below the window ({f['vh']})"
    if f["top"] >= f["vh"]:
        return f"{f['what']} ({f['value']}) starts at y={f['top']:.0f}, below the window ({f['vh']})"
    return None


def tab_through(drv: Any, header: str, presses: int, back: bool = False) -> list[str]:
    """Press Tab (Shift+Tab with `back`) `presses` times; every stop where the focus was hidden, said why."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    hidden = []
    for _ in range(presses):
        chain = ActionChains(drv)
        if back:
            chain.key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT)
        else:
            chain.send_keys(Keys.TAB)
        chain.perform()
        why = focus_hidden(drv, header)
        if why:
            hidden.append(why)
    return hidden

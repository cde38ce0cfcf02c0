"""Security and protocol checks of the annotation server: no token or another rater's token is refused, an
answer outside the protocol is refused with a clear message, nothing a request carries reaches a file path,
tokens are stored hashed and the links file is private."""

from __future__ import annotations

import sqlite3
import stat

import pytest
from fastapi.testclient import TestClient

from annotfakes import write_run
from mindsimkit.mindsim_app.annotate.samplers import sample_realism
from mindsimkit.mindsim_app.annotate.server import create_app, issue_links
from mindsimkit.mindsim_app.annotate.tasks import Design, load_task


@pytest.fixture
def served(tmp_path):
    run = write_run(tmp_path / "run", turns=10)
    sample_realism(tmp_path / "t", Design(raters=["R1", "R2", "R3"], k=1, all_raters=0), n=6, runs=[str(run)], seed=4)
    app = create_app([tmp_path / "t"])
    s = app.state.served[0]
    path, n = issue_links(s.task, s.store, "http://127.0.0.1:9")
    assert n == 3
    toks = {r: u.split("#k=")[1] for r, u in (l.split("\t") for l in path.read_text().splitlines()[1:])}
    return TestClient(app), toks, tmp_path / "t"


def h(tok: str) -> dict:
    return {"Authorization": f"Bearer {tok}"}


def test_no_token_or_a_wrong_one_is_refused(served):
    c, toks, _ = served
    for method, url, body in (
        ("get", "/api/session", None),
        ("get", "/api/item/0", None),
        ("post", "/api/answer", {"item_id": "x", "unit": "0", "answer": {}}),
    ):
        r = getattr(c, method)(url, json=body) if body else getattr(c, method)(url)
        assert r.status_code == 401 and "personal link" in r.json()["error"]
        r = (
            getattr(c, method)(url, json=body, headers=h("not-a-token-at-all"))
            if body
            else getattr(c, method)(url, headers=h("nope-nope-nope"))
        )
        assert r.status_code == 403
    assert c.get("/api/session", headers=h(toks["R1"])).json()["rater"] == "R1"


def test_another_raters_item_is_refused(served):
    c, toks, task_dir = served
    task = load_task(task_dir)
    mine, theirs = set(task.assignments["R1"]), set(task.assignments["R2"]) - set(task.assignments["R1"])
    assert theirs
    other = sorted(theirs)[0]
    r = c.post(
        "/api/answer",
        headers=h(toks["R1"]),
        json={"item_id": other, "unit": "0", "answer": {"reasons": ["form_none", "content_none"], "rating": 3}},
    )
    assert r.status_code == 403 and "not in your queue" in r.json()["error"]
    assert c.get(f"/api/item/{len(mine)}", headers=h(toks["R1"])).status_code == 404


def test_answers_outside_the_protocol_are_refused_with_the_field(served):
    c, toks, task_dir = served
    item = c.get("/api/item/0", headers=h(toks["R1"])).json()
    post = lambda ans, unit="0": c.post(
        "/api/answer", headers=h(toks["R1"]), json={"item_id": item["item_id"], "unit": unit, "answer": ans}
    )
    cases = [
        ({"reasons": ["form_none", "content_none"], "rating": 6}, "rating"),
        ({"reasons": ["form_none", "content_none", "vibes"], "rating": 2}, "unknown reason 'vibes'"),
        ({"reasons": ["form_none", "register", "content_none"], "rating": 2}, "'form_none' cannot go with"),
        ({"reasons": ["content_none"], "rating": 2}, "tick at least one form reason"),
        ({"reasons": ["form_other", "content_none"], "rating": 2}, "say in a few words"),
        ({"reasons": ["form_none", "content_none"], "rating": 2, "colour": "red"}, "colour"),
    ]
    for ans, words in cases:
        r = post(ans)
        assert r.status_code == 422 and words in r.json()["error"], (ans, r.json())
    assert post({"reasons": ["form_none", "content_none"], "rating": 2}, unit="99").status_code == 422
    ok = post({"reasons": ["form_other", "content_none"], "other": {"form": "all lower case"}, "rating": 2})
    assert ok.status_code == 200 and ok.json()["answered"] == 1
    assert post({"reasons": ["form_none", "content_none"], "rating": 4}).json()["revision"] == 2
    db = sqlite3.connect(task_dir / "answers.sqlite")
    assert db.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 1  # a revision, not a second row


def test_nothing_in_a_request_reaches_a_file(served):
    c, toks, task_dir = served
    (task_dir.parent / "secret.txt").write_text("do not serve")
    for path in (
        "/static/../task.json",
        "/static/..%2Ftask.json",
        "/static/answers.sqlite",
        "/static/%2e%2e%2fsecret.txt",
        "/task.json",
        "/rater-links.txt",
        "/static/app.js%00.txt",
    ):
        r = c.get(path)
        assert r.status_code == 404 and "do not serve" not in r.text, path
    for iid in ("../../secret.txt", "/etc/passwd", "..", "i" * 65):
        r = c.post("/api/answer", headers=h(toks["R1"]), json={"item_id": iid, "unit": "0", "answer": {"rating": 1}})
        assert r.status_code in (403, 422)
    assert c.get("/static/app.js").status_code == 200


def test_tokens_are_stored_hashed_and_links_are_private(served):
    c, toks, task_dir = served
    blob = (task_dir / "answers.sqlite").read_bytes()
    wal = task_dir / "answers.sqlite-wal"
    if wal.exists():
        blob += wal.read_bytes()
    for t in toks.values():
        assert t.encode() not in blob
    assert stat.S_IMODE((task_dir / "rater-links.txt").stat().st_mode) == 0o600
    # Reissuing renews every link: the old ones stop working.
    app = c.app
    s = app.state.served[0]
    issue_links(s.task, s.store, "http://127.0.0.1:9", renew=True)
    assert c.get("/api/session", headers=h(toks["R1"])).status_code == 403


def test_the_page_loads_only_its_own_files(served):
    c, toks, _ = served
    r = c.get("/")
    assert (
        "default-src 'self'" in r.headers["content-security-policy"] and r.headers["referrer-policy"] == "no-referrer"
    )
    assert "http" not in r.text.replace('name="referrer"', "")  # no CDN, nothing fetched from elsewhere
    js = c.get("/static/app.js").text
    assert "innerHTML" not in js  # conversation text goes in as text nodes only


def _asgi(app, method: str, path: str, headers: list, chunks: list[bytes]) -> tuple[int, int]:
    """Call the app as a server would; (status, how many times it asked for body chunks)."""
    import asyncio

    asked = []
    pending = list(chunks)

    async def receive():
        asked.append(1)
        if pending:
            body = pending.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(pending)}
        return {"type": "http.disconnect"}

    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "headers": headers,
        "query_string": b"",
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 9),
        "client": ("127.0.0.1", 1),
        "root_path": "",
    }
    asyncio.run(app(scope, receive, send))
    return next(m["status"] for m in sent if m["type"] == "http.response.start"), len(asked)


def test_a_body_is_refused_on_its_token_and_its_size_before_it_is_read(served):
    from mindsimkit.mindsim_app.annotate.server import MAX_BODY

    c, toks, _ = served
    big = str(100 * 1024 * 1024).encode()
    # No token, or a wrong one: refused on the headers, the 100 MB body never read.
    assert _asgi(c.app, "POST", "/api/answer", [(b"content-length", big)], [b"x"]) == (401, 0)
    assert _asgi(
        c.app, "POST", "/api/answer", [(b"authorization", b"Bearer not-a-real-token"), (b"content-length", big)], [b"x"]
    ) == (403, 0)
    auth = (b"authorization", f"Bearer {toks['R1']}".encode())
    # A rater's token, but a declared size over the cap: refused before reading.
    assert _asgi(c.app, "POST", "/api/answer", [auth, (b"content-length", big)], [b"x"]) == (413, 0)
    # No declared size (chunked): read only until the cap is passed.
    chunk = b"x" * (16 * 1024)
    status, asked = _asgi(c.app, "POST", "/api/answer", [auth], [chunk] * 64)
    assert status == 413 and asked <= MAX_BODY // len(chunk) + 1
    # An answer of normal size still gets through to the protocol check.
    r = c.post("/api/answer", headers=h(toks["R1"]), json={"item_id": "x", "unit": "0", "answer": {}})
    assert r.status_code == 403 and "not in your queue" in r.json()["error"]


def test_the_key_is_private_and_links_follow_the_served_address(served):
    from mindsimkit.mindsim_app.annotate.tasks import key_path_for

    c, toks, task_dir = served
    assert stat.S_IMODE(key_path_for(task_dir).stat().st_mode) == 0o600
    s = c.app.state.served[0]
    path, n = issue_links(s.task, s.store, "http://10.0.0.5:8800")  # served elsewhere, nothing renewed
    lines = dict(l.split("\t") for l in path.read_text().splitlines()[1:])
    assert n == 0 and lines == {r: f"http://10.0.0.5:8800/#k={t}" for r, t in toks.items()}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

"""The local annotation page (`mindsim annotate serve TASK…`): a FastAPI app that shows each rater their
queue of one task and stores every answer as it is given.

Access is by personal link: `http://HOST:PORT/#k=TOKEN`. The token sits after `#`, so the browser never
sends it in a request line (it cannot reach an access log); the page sends it as a bearer header and the
server compares its SHA-256 with the stored one. No token, or an unknown one, gets 401/403 and nothing else;
a rater sees and answers only their own queue. Items are addressed by their position in the rater's queue
and by item ids looked up in memory: nothing a request carries is ever joined to a file path. Every answer
is checked against its protocol (`protocol.py`) and committed to SQLite before the reply (`store.py`). A request
with a body is refused on its token, then on its size (`MAX_BODY`), before the body is read (`_Guard`).
"""

from __future__ import annotations

import errno
import logging
import re
import socket
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional

from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindsim_app.annotate.protocol import AnswerError, for_task
from mindsimkit.mindsim_app.annotate.store import Store, links_path, token_hash, write_links
from mindsimkit.mindsim_app.annotate.tasks import ITEM_ID, Task, load_task

log = logging.getLogger("mindsim.annotate")
# A query parameter and its value in a logged path: the page sends nothing in a query, so any value there (a
# token pasted into a link by hand) is masked.
_QUERY_VALUE = re.compile(r"([?&;][^=&#\s\"]*=)[^&#\s\"]*")
STATIC = ("index.html", "app.js", "app.css")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


@dataclass
class Served:
    task: Task
    store: Store


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    item_id: str = Field(min_length=1, max_length=64)
    unit: str = Field(min_length=1, max_length=8)
    answer: dict[str, Any]


def _static(name: str) -> Path:
    return Path(str(resources.files("mindsimkit.mindsim_app.annotate") / "static" / name))


def issue_links(
    task: Task, store: Store, base_url: str, renew: bool = False, links_file: Optional[Path] = None
) -> tuple[Path, int]:
    """Tokens for raters without one (or all, `renew`); the links file keeps the others' tokens, every link
    pointing at `base_url`, the host and port actually served (a link written for another port would not open)."""
    path = Path(links_file) if links_file else links_path(task.root)
    fresh = store.issue(list(task.header.design.raters), renew=renew)
    base = base_url.rstrip("/")
    tokens: dict[str, str] = {}
    if path.is_file() and not renew:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#") and "\t" in line and "#k=" in line:
                r, url = line.split("\t", 1)
                tokens[r] = url.rsplit("#k=", 1)[1]
    tokens.update(fresh)
    links = {r: f"{base}/#k={t}" for r, t in tokens.items()}
    if fresh or not path.is_file() or links != _read_links(path):
        write_links(path, links)
    return path, len(fresh)


def _read_links(path: Path) -> dict[str, str]:
    return dict(
        line.split("\t", 1)
        for line in path.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#") and "\t" in line
    )


# An answer is a few hundred bytes; a body many times that is refused before it is read.
MAX_BODY = 64 * 1024


class _Guard:
    """Every request that carries a body is checked before a byte of it is read: the token first (401/403),
    then its declared size, then, for a body sent without a size, each chunk as it arrives (413 past
    `MAX_BODY`). So an unauthenticated or oversized POST costs the server its headers (and at most
    `MAX_BODY` bytes) only."""

    def __init__(self, app: Any, rater_of: Any):
        self.app, self.rater_of = app, rater_of

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        try:
            self.rater_of(headers.get(b"authorization", b"").decode("latin-1") or None)
        except HTTPException as exc:
            return await _reply(send, exc.status_code, exc.detail)
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return await _reply(send, 413, f"request body over {MAX_BODY} bytes")
        # Read the (small) body here, stopping at the cap, and hand the app what was read.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY:
                return await _reply(send, 413, f"request body over {MAX_BODY} bytes")
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                message: dict[str, Any] = await receive()  # past the body: the app waits for a disconnect,
                return message  # as with the real stream
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _reply(send: Any, status: int, error: str) -> None:
    import json

    body = json.dumps({"error": error}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def checked_task(task_dir: Path) -> Task:
    """A task folder whose every item's form can be built (the rubric it carries included): a broken one is one
    error line before the server starts, not a page that answers 500 to every request."""
    from mindsimkit.mindcore.errors import ConfigError, InputError

    t = load_task(task_dir)
    for name in sorted({it["protocol"] for it in t.items.values()}):
        try:
            for_task(t, name)
        except ConfigError as exc:
            raise InputError(
                f"{task_dir}: its items cannot be shown ({exc}); sample the task again with a valid rubric"
            ) from None
    return t


def create_app(task_dirs: list[Path]) -> FastAPI:
    served: list[Served] = []
    for d in task_dirs:
        t = checked_task(d)
        served.append(Served(t, Store(t.root)))
    app = FastAPI(title="mindsim annotate", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.served = served

    @app.middleware("http")
    async def _headers(request: Request, call_next: Any) -> Any:
        # The page loads only its own files and sends no referrer: conversation text cannot pull in anything.
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; script-src 'self'; style-src 'self'; "
            "img-src 'self'; connect-src 'self'; frame-ancestors 'none'"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    def who(authorization: Optional[str]) -> tuple[Served, str]:
        if not authorization or not authorization.startswith("Bearer ") or len(authorization) < 12:
            raise HTTPException(401, "no token: open the page with your personal link")
        h = token_hash(authorization[7:].strip())
        for s in served:
            rater = s.store.hashes().get(h)
            if rater is not None and rater in s.task.assignments:
                return s, rater
        raise HTTPException(403, "this link is not valid (it may have been renewed); ask the study lead for yours")

    app.add_middleware(_Guard, rater_of=who)

    def queue_units(s: Served, rater: str) -> list[tuple[str, str]]:
        return [(i, u["unit"]) for i in s.task.assignments[rater] for u in s.task.items[i]["units"]]

    def progress(s: Served, rater: str) -> dict[str, Any]:
        done = s.store.answers_of(rater)
        units = queue_units(s, rater)
        answered = sum(1 for x in units if x in done)
        queue = s.task.assignments[rater]
        resume = next(
            (p for p, i in enumerate(queue) if any((i, u["unit"]) not in done for u in s.task.items[i]["units"])),
            len(queue),
        )
        return {"answered": answered, "total": len(units), "items": len(queue), "resume": resume}

    @app.get("/", response_class=HTMLResponse)
    def index() -> FileResponse:
        return FileResponse(_static("index.html"), media_type="text/html")

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        if name not in STATIC:  # a fixed list: no request reaches any other file
            raise HTTPException(404, "not found")
        media = {"js": "text/javascript", "css": "text/css", "html": "text/html"}[name.rsplit(".", 1)[1]]
        return FileResponse(_static(name), media_type=media)

    @app.get("/api/session")
    def session(authorization: Optional[str] = Header(None)) -> dict[str, Any]:
        s, rater = who(authorization)
        forms = {
            p: for_task(s.task, p).form
            for p in sorted({s.task.items[i]["protocol"] for i in s.task.assignments[rater]})
        }
        return {
            "rater": rater,
            "task": s.task.root.name,
            "protocol": s.task.protocol,
            "forms": forms,
            "notice": s.task.header.notice,
            **progress(s, rater),
        }

    @app.get("/api/item/{pos}")
    def item(pos: int, authorization: Optional[str] = Header(None)) -> dict[str, Any]:
        s, rater = who(authorization)
        queue = s.task.assignments[rater]
        if not 0 <= pos < len(queue):
            raise HTTPException(404, f"position {pos} is outside your queue of {len(queue)} items")
        it = s.task.items[queue[pos]]
        done = s.store.answers_of(rater)
        # What the page may show: never the system code or anything from the key.
        return {
            "pos": pos,
            "item_id": it["item_id"],
            "protocol": it["protocol"],
            "kind": it["kind"],
            "display": it["display"],
            "units": it["units"],
            "answers": {
                u["unit"]: done[(it["item_id"], u["unit"])] for u in it["units"] if (it["item_id"], u["unit"]) in done
            },
            **progress(s, rater),
        }

    @app.post("/api/answer")
    def answer(body: AnswerIn, authorization: Optional[str] = Header(None)) -> dict[str, Any]:
        s, rater = who(authorization)
        if not ITEM_ID.match(body.item_id) or body.item_id not in s.task.assignments[rater]:
            raise HTTPException(403, "this item is not in your queue")
        it = s.task.items[body.item_id]
        if body.unit not in {u["unit"] for u in it["units"]}:
            raise HTTPException(422, f"item has no unit {body.unit!r}")
        try:
            clean = for_task(s.task, it["protocol"]).validate(body.answer)
        except AnswerError as exc:
            raise HTTPException(422, str(exc)) from None
        rev = s.store.save(rater, body.item_id, body.unit, clean)
        log.info(
            "answer saved: task %s rater %s item %s unit %s revision %d",
            s.task.root.name,
            rater,
            body.item_id,
            body.unit,
            rev,
        )
        return {"saved": True, "revision": rev, **progress(s, rater)}

    @app.exception_handler(StarletteHTTPException)
    def _err(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        if errs:
            e = errs[0]
            msg = f"{'.'.join(str(p) for p in e['loc'][1:]) or 'request'}: {e['msg']}"
        else:
            msg = str(getattr(exc, "detail", exc))
        return JSONResponse({"error": msg}, status_code=422)

    return app


def is_local(host: str) -> bool:
    return host in LOCAL_HOSTS


def run(
    task_dirs: list[Path],
    host: str = "127.0.0.1",
    port: int = 8765,
    renew: bool = False,
    links_file: Optional[Path] = None,
    echo: Any = print,
) -> None:
    """Issue missing links, then serve until interrupted. Access log lines never hold a token: the links keep
    it out of request lines, and a query string (where a hand-made link might put it) is logged with its values
    masked. The links go to the links file only."""
    import uvicorn

    for d in task_dirs:
        checked_task(d)  # a broken task is refused before the port is taken
    sock = _listen(host, port)  # before the tasks' stores open or links are written: a taken port changes nothing
    app = create_app(task_dirs)
    port = sock.getsockname()[1]  # --port 0 asks the system for a free one; the links name the real one
    shown_host = f"[{host}]" if ":" in host else host
    for s in app.state.served:
        path, n = issue_links(
            s.task, s.store, f"http://{shown_host}:{port}", renew, links_file if len(task_dirs) == 1 else None
        )
        made = f"{n} new" if n else "no new"
        echo(
            f"{s.task.root.name} ({s.task.protocol}, {len(s.task.assignments)} raters): {made} links; "
            f"rater links are in {path} (send each rater only their own line)"
        )
    echo(f"serving on http://{shown_host}:{port}/ (Ctrl+C stops; answers are saved as they are given)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    config = uvicorn.Config(app, log_level="info", access_log=True)  # (sets uvicorn's loggers up)
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(_no_query_values)
    uvicorn.Server(config).run(sockets=[sock])


def _no_query_values(record: logging.LogRecord) -> bool:
    """A log record with every query value in it masked, and scrubbed like any line the toolkit writes."""
    from mindsimkit.mindcore.redact import scrub

    def masked(value: Any) -> Any:
        return scrub(_QUERY_VALUE.sub(r"\1***", value)) if isinstance(value, str) else value

    if isinstance(record.args, tuple):
        record.args = tuple(masked(a) for a in record.args)
    record.msg = masked(record.msg)
    return True


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a port in use is one clear error instead of uvicorn's log and exit 3."""
    from mindsimkit.mindcore.errors import InputError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError(
            f"--host {host}: not an address of this machine ({exc.strerror}); use 127.0.0.1 or an "
            "address `ip addr` lists"
        ) from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        taken = exc.errno == errno.EADDRINUSE
        raise InputError(
            f"--host {host} --port {port}: "
            + (
                "the port is already in use (another `mindsim annotate "
                "serve` or program listens there); choose another --port, or stop that program"
                if taken
                else f"cannot listen there ({(exc.strerror or str(exc)).lower()}); choose another --host or --port"
            )
        ) from None
    sock.set_inheritable(True)
    return sock

"""Answers and rater links of one task folder, in SQLite (`TASK/answers.sqlite`).

One row per (rater, item, unit): a later answer to the same unit replaces the earlier one and counts a
revision, so an answer is there once however often it was given. The database runs in WAL mode with
synchronous=FULL and every answer is committed before the server acknowledges it, so killing the server
(even `kill -9`) loses nothing that was acknowledged. Rater links carry a random token; only its SHA-256 is
stored here, and the links themselves go to a file readable by its owner only.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional

from mindsimkit.mindcore.io import atomic_writer
from mindsimkit.mindsim_app.annotate.tasks import ANSWERS_FILE, LINKS_FILE

SCHEMA = """
CREATE TABLE IF NOT EXISTS raters (rater TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL UNIQUE, issued_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS answers (
  rater TEXT NOT NULL, item_id TEXT NOT NULL, unit TEXT NOT NULL, answer TEXT NOT NULL,
  answered_at TEXT NOT NULL, revision INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (rater, item_id, unit));
"""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Store:
    def __init__(self, task_dir: Path):
        self.path = Path(task_dir) / ANSWERS_FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- links ---------------------------------------------------------------------------------------

    def rater_of(self, token: str) -> Optional[str]:
        with self._lock:
            row = self._db.execute("SELECT rater FROM raters WHERE token_sha256 = ?", (token_hash(token),)).fetchone()
        return row[0] if row else None

    def hashes(self) -> dict[str, str]:
        with self._lock:
            return {h: r for r, h in self._db.execute("SELECT rater, token_sha256 FROM raters")}

    def issue(self, raters: list[str], renew: bool = False) -> dict[str, str]:
        """New tokens for raters that have none (all of them with `renew`: old links stop working)."""
        with self._lock:
            have = {r for (r,) in self._db.execute("SELECT rater FROM raters")}
            out = {}
            self._db.execute("BEGIN IMMEDIATE")
            for r in raters:
                if r in have and not renew:
                    continue
                tok = secrets.token_urlsafe(24)
                self._db.execute(
                    "INSERT INTO raters VALUES (?, ?, ?) ON CONFLICT(rater) DO UPDATE SET "
                    "token_sha256 = excluded.token_sha256, issued_at = excluded.issued_at",
                    (r, token_hash(tok), _now()),
                )
                out[r] = tok
            self._db.execute("COMMIT")
        return out

    # -- answers -------------------------------------------------------------------------------------

    def save(self, rater: str, item_id: str, unit: str, answer: dict[str, Any]) -> int:
        """Commit the answer (durably) and return its revision."""
        blob = json.dumps(answer, ensure_ascii=False, sort_keys=True)
        with self._lock:
            self._db.execute(
                "INSERT INTO answers VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT(rater, item_id, unit) DO UPDATE SET "
                "answer = excluded.answer, answered_at = excluded.answered_at, revision = answers.revision + 1",
                (rater, item_id, unit, blob, _now()),
            )
            (rev,) = self._db.execute(
                "SELECT revision FROM answers WHERE rater = ? AND item_id = ? AND unit = ?", (rater, item_id, unit)
            ).fetchone()
        return int(rev)

    def answers_of(self, rater: str) -> dict[tuple[str, str], dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT item_id, unit, answer FROM answers WHERE rater = ?", (rater,)).fetchall()
        return {(i, u): json.loads(a) for i, u, a in rows}

    def all_answers(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT rater, item_id, unit, answer, answered_at, revision FROM answers ORDER BY rater, item_id, unit"
            ).fetchall()
        for r, i, u, a, t, rev in rows:
            yield {"rater": r, "item_id": i, "unit": u, "answer": json.loads(a), "answered_at": t, "revision": rev}


def read_answers(task_dir: Path) -> list[dict[str, Any]]:
    """Every stored answer of a task folder (read-only; none when the task was never served)."""
    path = Path(task_dir) / ANSWERS_FILE
    if not path.is_file():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT rater, item_id, unit, answer, answered_at, revision FROM answers ORDER BY rater, item_id, unit"
        ).fetchall()
    finally:
        db.close()
    return [
        {"rater": r, "item_id": i, "unit": u, "answer": json.loads(a), "answered_at": t, "revision": rev}
        for r, i, u, a, t, rev in rows
    ]


def write_links(path: Path, links: dict[str, str]) -> Path:
    """The links file, created readable by its owner only (it holds the tokens)."""
    path = Path(path)
    with atomic_writer(path, "w", private=True) as f:
        f.write(
            "# Personal annotation links: send each rater their own line only. Anyone holding a link can answer as that rater.\n"
        )
        for r, url in sorted(links.items()):
            f.write(f"{r}\t{url}\n")
    return path


def links_path(task_dir: Path) -> Path:
    return Path(task_dir) / LINKS_FILE

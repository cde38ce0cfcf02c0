"""Atomic writes and per-item checkpoints. A killed run leaves either the old file or the new one,
never half of one; finished items are files of their own, so a rerun skips them.

Two ways to publish a finished file:
- *replace* (`atomic_write_*`, `atomic_writer`, `CheckpointDir.overwrite`): temp file + `os.replace`.
  The newest writer wins. Right for outputs that are rebuilt whole from checkpoints (manifests, parquet).
- *create-if-absent* (`publish_bytes_once`, `CheckpointDir.write_once`): temp file + `os.link`. The
  FIRST finished writer wins and later copies are discarded. This is what makes a checkpoint
  exactly-once when a task may run twice at the same time (a retried worker racing its
  still-running original): whatever a later stage already built on the first copy stays true.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import hashlib
import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Iterator, TypeVar

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.redact import scrub, scrub_data

if TYPE_CHECKING:  # pyarrow (with numpy) is a third of a CLI start; only the parquet helpers load it
    import pyarrow as pa


# Checkpoint writes at once: fsyncs of different files overlap in the kernel (the journal commits them together).
WRITER_THREADS = 4
_writers: tuple[int, ThreadPoolExecutor] | None = None
_writers_lock = threading.Lock()


def _writer_pool() -> ThreadPoolExecutor:
    global _writers
    with _writers_lock:
        # Per process: a forked worker (distilabel, Ray) inherits the pool object but none of its threads.
        if _writers is None or _writers[0] != os.getpid():
            _writers = (os.getpid(), ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="checkpoint-writer"))
        return _writers[1]


T = TypeVar("T")


async def off_loop(write: Callable[..., T], *args: Any) -> T:
    """`write(*args)` in a checkpoint writer thread, awaited: the event loop keeps serving other requests while
    the file is written and fsynced (on the loop, fsyncs were a quarter of the judge's wall time).
    The write is the same call as on the loop, so it stays atomic and create-if-absent; the caller goes on only
    once it is durable, so a kill loses nothing it was told was saved. A cancelled caller does not stop a write
    already started: it finishes whole, and a rerun finds it."""
    return await asyncio.get_running_loop().run_in_executor(_writer_pool(), functools.partial(write, *args))


def _umask_mode() -> int:
    # mkstemp creates files 0600; published outputs should get the usual permissions instead.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def _replacing(path: str | os.PathLike[str], private: bool = False) -> Iterator[str]:
    """A temp file's name next to `path`; when the block finishes the temp file is renamed over `path`
    in one step (with the usual permissions, or the owner's only when `private`: mkstemp makes it 0600 from
    the start), and when it fails the temp file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        if not private:
            os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        raise_if_disk_full(exc, path)
        raise


def raise_if_disk_full(exc: BaseException, path: str | os.PathLike[str]) -> None:
    """A full disk (or quota) while writing `path` is one error line naming it, not an OSError traceback."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        from mindsimkit.mindcore.errors import DiskFull

        raise DiskFull(
            f"{path}: no space left on the device while writing it; free some space (or write to "
            "another folder) and rerun the same command, finished work is kept"
        ) from None


def _atomic(path: str | os.PathLike[str], write: Callable[[str], None]) -> Path:
    """Write through `write(tmp_path)` next to `path`, then rename over it in one step."""
    with _replacing(path) as tmp:
        write(tmp)
    return Path(path)


@contextmanager
def atomic_writer(path: str | os.PathLike[str], mode: str = "wb", *, private: bool = False) -> Iterator[IO[Any]]:
    """A file object (`mode` "w" is UTF-8 text, "wb" bytes) whose content appears under `path` only when
    the block finishes (replace semantics), for outputs streamed in pieces too large to hold at once.
    `private`: readable by its owner only (0600) from before the first byte is written (keys, tokens)."""
    encoding = None if "b" in mode else "utf-8"
    with _replacing(path, private) as tmp, open(tmp, mode, encoding=encoding) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, private: bool = False) -> Path:
    with atomic_writer(path, "wb", private=private) as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """`text` as UTF-8, scrubbed of secrets (`mindcore.redact`) like everything the toolkit writes as text."""
    return atomic_write_bytes(path, scrub(text).encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, private: bool = False) -> Path:
    return atomic_write_bytes(path, _json_bytes(obj), private=private)


def atomic_write_json_if_changed(
    path: str | os.PathLike[str], obj: Any, *, volatile: tuple[str, ...] = ("provenance",)
) -> bool:
    """`atomic_write_json`, unless `path` already holds the same document apart from its top-level `volatile` keys
    (when it was made, by which checkout): a stage rerun that reaches the same result leaves the file, and so its
    digest in the run manifest and everything built on it, as it was. True when the file was written."""
    path = Path(path)
    if path.is_file():
        try:
            old = json.loads(path.read_bytes())
        except (OSError, ValueError):
            old = None
        new = json.loads(_json_bytes(obj))  # as it would read back: JSON types, secrets scrubbed
        if (
            isinstance(old, dict)
            and isinstance(new, dict)
            and {k: v for k, v in old.items() if k not in volatile}
            == {k: v for k, v in new.items() if k not in volatile}
        ):
            return False
    atomic_write_json(path, obj)
    return True


def atomic_write_jsonl(path: str | os.PathLike[str], rows: Iterable[Any]) -> Path:
    """One JSON document per line, each scrubbed of secrets as data before it is serialised."""
    return atomic_write_bytes(path, "".join(jsonl_line(r) for r in rows).encode("utf-8"))


def jsonl_line(row: Any) -> str:
    """`row` as one JSONL line (newline included), its strings scrubbed of secrets before serialising: masking the
    serialised line instead could cut a JSON escape in half and leave a row its reader refuses."""
    return json.dumps(_plain(row), ensure_ascii=False, default=str) + "\n"


def atomic_write_parquet(path: str | os.PathLike[str], rows: "list[dict[str, Any]] | pa.Table") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    return _atomic(path, lambda tmp: pq.write_table(table, tmp))


def publish_bytes_once(path: str | os.PathLike[str], data: bytes) -> bool:
    """Create `path` holding `data` only if no file is there yet; True if this call created it.

    The bytes go to a temp file in the same folder first (fsynced), then `os.link(tmp, path)`
    publishes it: link never replaces an existing name, it fails with EEXIST, and the name appears
    with the whole content or not at all. `os.replace` would be atomic too but overwrites, so a late
    duplicate would silently swap the content under readers that already used the first copy.
    Creating `path` itself with O_EXCL is no-replace but not atomic: a reader, or a rerun after a
    kill, could find a half-written checkpoint under its final name.

    NFS: link is atomic on the server, but a v2/v3 client may retransmit a LINK whose reply was lost
    and then see EEXIST for its own success. The temp file's link count tells the truth (2 means our
    link made it), which is the check open(2) recommends for lock files on NFS.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _umask_mode())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return os.stat(tmp).st_nlink >= 2
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                from mindsimkit.mindcore.errors import ConfigError

                raise ConfigError(
                    f"{path.parent}: this filesystem does not support hard links, which exactly-once "
                    "checkpoints need; put the output folder on a local disk or NFS"
                ) from exc
            raise
        return True
    finally:
        # The temp name never ends in .json, so a writer killed before this line leaves a file that
        # no checkpoint reader lists; `CheckpointDir.clean_temps` removes such leftovers.
        Path(tmp).unlink(missing_ok=True)


def _plain(obj: Any) -> Any:
    """`obj` as the JSON types it will be written as (`default=str` for the rest), every string scrubbed of
    secrets: a key quoted by an engine's error, or a URL's user part, never reaches a report or checkpoint."""
    return scrub_data(json.loads(json.dumps(obj, ensure_ascii=False, default=str)))


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(_plain(obj), indent=2, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


def write_json_once(path: str | os.PathLike[str], obj: Any) -> bool:
    """`publish_bytes_once` for one JSON document (same formatting as `atomic_write_json`)."""
    return publish_bytes_once(path, _json_bytes(obj))


def read_json_file(path: str | os.PathLike[str], what: str) -> Any:
    """A whole-file JSON document given to the toolkit (`what` says what it should be, for the error line): a
    missing file or one that is not a regular file or too large (`mindcore.inputs`), text that is not UTF-8 or not
    JSON, a repeated key and nesting past the bound are `InputError`s naming the file."""
    from mindsimkit.mindcore.inputs import loads_json, read_input_bytes

    path = Path(path)
    data = read_input_bytes(path, "JSON file", hint=f"give the path of {what}")
    try:
        return loads_json(data.decode("utf-8-sig"), str(path))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start + 1}); give {what}") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); give {what}"
        ) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InputError(f"{path}: not JSON this reader accepts ({exc})") from None


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object); blank lines are skipped. A missing, binary or non-UTF-8 file, a line
    that is not JSON and an object with a repeated key are `InputError`s naming the file and line."""
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindcore.inputs import input_lines, loads_json

    for i, raw in input_lines(path, "JSONL file", hint="give the path of a JSONL file (one JSON object per line)"):
        if b"\x00" in raw:
            raise InputError(f"{path}:{i}: binary data, not a JSONL text file")
        try:
            line = raw.decode("utf-8-sig" if i == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{path}:{i}: not UTF-8 text (byte {exc.start + 1} of the line); save the file as UTF-8"
            ) from exc
        if not line.strip():
            continue
        try:
            obj = loads_json(line, f"{path}:{i}")
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{i}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
        except ValueError as exc:  # e.g. an integer of more digits than Python converts (4,300)
            raise InputError(f"{path}:{i}: not JSON this reader accepts ({exc})") from exc
        yield i, obj


MAX_NAME_BYTES = 200  # below every common file system's 255, with room for a suffix and the writer's temp name


def file_name(value: Any, field: str, where: str) -> str:
    """`value`, a name read from an input file (a member id, a unit id, a rater, a task name), as ONE file name.
    Files people download from anywhere name the files the toolkit writes; a name with a separator, `..`, a
    control character (a newline included), no characters or too many would write elsewhere, or fail as an
    internal error. Anything of the kind is one InputError naming `field` and `where` (the file and row)."""
    problem = _name_problem(value)
    if problem is None:
        return str(value)
    shown = (
        repr(value)
        if not isinstance(value, str) or len(value) <= 60
        else f"{value[:40]!r}... ({len(value)} characters)"
    )
    raise InputError(
        f"{where}: field '{field}': {shown} {problem}; it names a file, so it must be one name of at most "
        f"{MAX_NAME_BYTES} bytes with no '/', '\\', control characters, and not '.' or '..': fix it in "
        "the file"
    )


def _name_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "is not text"
    if not value.strip():
        return "is empty"
    if value in (".", ".."):
        return "is a path step, not a name"
    if "/" in value or "\\" in value:
        return "holds a path separator"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "holds a control character (a newline, tab or the like)"
    if len(value.encode("utf-8")) > MAX_NAME_BYTES:
        return f"is {len(value.encode('utf-8'))} bytes long"
    return None


def confined_path(root: str | os.PathLike[str], name: Any, *, field: str, where: str, suffix: str = "") -> Path:
    """`root / (name + suffix)` for a `name` read from an input file: checked by `file_name`, and the result
    checked to lie directly inside `root` (the one way such a name becomes a path, for every writer)."""
    path = Path(root) / f"{file_name(name, field, where)}{suffix}"
    if Path(os.path.normpath(path)).parent != Path(os.path.normpath(root)):
        raise InputError(f"{where}: field '{field}': {name!r} would name a file outside {root}; fix it in the file")
    return path


def json_safe(obj: Any) -> Any:
    """JSON has no NaN or infinity: undefined numbers become null, keys become strings."""
    import math

    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def read_parquet_rows(path: str | os.PathLike[str], what: str = "parquet file") -> list[dict[str, Any]]:
    """All rows of a parquet file; a file that is not parquet is an `InputError` naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mindsimkit.mindcore.errors import InputError

    try:
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
        return rows
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable {what} ({str(exc).splitlines()[0][:160]})") from exc


class CheckpointDir:
    """One JSON file per finished item, named by a content-derived key.

    `write_once` is the exactly-once write: the first finished copy of a key wins, a late duplicate
    is dropped and counted in `duplicates` (per instance, so per process). `write` keeps its old
    replace semantics for existing callers; new code should say which it means: `write_once` for
    results of work that may run twice, `overwrite` for files that are legitimately replaced.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.duplicates = 0
        self._lock = threading.Lock()

    def _file(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        if len(safe.encode("utf-8")) > MAX_NAME_BYTES:
            # Keys hold ids from input files (a profile id): a long one keeps a readable head and a digest of the
            # whole, so it is still one file name the file system takes, distinct per key.
            digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
            safe = f"{safe.encode('utf-8')[:120].decode('utf-8', 'ignore')}-{digest}"
        return self.path / f"{safe}.json"

    def has(self, key: str) -> bool:
        return self._file(key).is_file()

    def write(self, key: str, obj: Any) -> None:
        """Replace-write (the historical behaviour); same as `overwrite`."""
        self.overwrite(key, obj)

    def overwrite(self, key: str, obj: Any) -> None:
        """Publish `obj` under `key`, replacing any earlier copy."""
        atomic_write_json(self._file(key), obj)

    def write_once(self, key: str, obj: Any) -> bool:
        """Publish `obj` under `key` unless a copy is already there. True if this copy won; False
        means another writer finished first, its file is kept as is, and `duplicates` goes up."""
        won = write_json_once(self._file(key), obj)
        if not won:
            with self._lock:
                self.duplicates += 1
        return won

    def first_copy(self, key: str, obj: Any) -> tuple[Any, bool]:
        """`write_once`, then the copy that counts: (the stored object, whether it is ours). A caller
        that lost must carry on with the stored copy, since later work may already be built on it."""
        won = self.write_once(key, obj)
        return (obj if won else self.read(key)), won

    def clean_temps(self, older_than_s: float = 3600.0) -> int:
        """Delete temp files left by killed writers (older than `older_than_s`, so a writer still
        running elsewhere keeps its own); returns how many were removed."""
        cutoff = time.time() - older_than_s
        removed = 0
        for p in self.path.glob(".*.tmp"):
            try:
                if p.stat().st_mtime < cutoff:
                    p.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed

    def read(self, key: str) -> Any:
        return json.loads(self._file(key).read_text(encoding="utf-8"))

    def keys(self) -> list[str]:
        return sorted(p.stem for p in self.path.glob("*.json"))

    def read_all(self) -> list[Any]:
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(self.path.glob("*.json"))]

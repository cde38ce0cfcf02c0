"""Atomic writes and per-item checkpoints. A killed run leaves either the old file or the new one,
never half of one; finished items are files of their own, so a rerun skips them."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq


def _umask_mode() -> int:
    # mkstemp creates files 0600; published outputs should get the usual permissions instead.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _atomic(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Write through `write(tmp_path)` next to `path`, then rename over it in one step."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    return _atomic(path, write)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True, default=str) + "\n")


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> Path:
    lines = [json.dumps(r, ensure_ascii=False, default=str) for r in rows]
    return atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))


def atomic_write_parquet(path: str | os.PathLike, rows: list[dict[str, Any]] | pa.Table) -> Path:
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    return _atomic(path, lambda tmp: pq.write_table(table, tmp))


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object); blank lines are skipped. Parse errors name the line."""
    from mindcore.errors import InputError

    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{i}: not valid JSON ({exc.msg} at column {exc.colno})") from exc


class CheckpointDir:
    """One JSON file per finished item, named by a content-derived key."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def _file(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        return self.path / f"{safe}.json"

    def has(self, key: str) -> bool:
        return self._file(key).is_file()

    def write(self, key: str, obj: Any) -> None:
        atomic_write_json(self._file(key), obj)

    def read(self, key: str) -> Any:
        return json.loads(self._file(key).read_text(encoding="utf-8"))

    def keys(self) -> list[str]:
        return sorted(p.stem for p in self.path.glob("*.json"))

    def read_all(self) -> list[Any]:
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(self.path.glob("*.json"))]

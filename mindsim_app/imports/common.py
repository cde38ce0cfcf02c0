"""What the three importers share: reading a downloaded file, checking each record's shape with errors that name
file, record and field, and the name maps (`data/mindeval_releases.yaml`).

An importer reads the whole file and converts every record in memory before it writes anything, so a file that
fails a check leaves no output behind (the command exits 2 with one `error:` line).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, overload

from mindsimkit.mindcore import yamlio
from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore.inputs import loads_json, read_input_bytes
from mindsimkit.mindcore.io import read_jsonl

NAMES_FILE = "mindeval_releases.yaml"


@lru_cache(maxsize=1)
def names() -> dict[str, Any]:
    """The name maps of `data/mindeval_releases.yaml`."""
    try:
        text = (resources.files("mindsimkit.mindsim_app.imports") / "data" / NAMES_FILE).read_text(encoding="utf-8")
        loaded: dict[str, Any] = yamlio.safe_load(text)
        return loaded
    except Exception as exc:
        raise ConfigError(f"mindsim_app/imports/data/{NAMES_FILE} is unreadable: {exc}") from exc


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Record:
    """One record of a downloaded file, read field by field: every lookup names the file, the record and the
    field when the value is missing or of the wrong type, and says what the release's schema has there."""

    def __init__(self, obj: Any, where: str, what: str = "record") -> None:
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object ({what}), got {type(obj).__name__}")
        self.obj, self.where = obj, where

    def fail(self, field: str, problem: str) -> InputError:
        return InputError(f"{self.where}: field '{field}': {problem}")

    def get(self, field: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if field not in self.obj or (optional and self.obj[field] is None):
            if optional:
                return None
            raise self.fail(field, "missing; is this the file the command names (see `--help`)?")
        value = self.obj[field]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # A JSON true/false is a Python int too: never let it pass for a number.
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names_ = " or ".join(k.__name__ for k in kinds)
            raise self.fail(field, f"expected {names_}, got {type(value).__name__} {json.dumps(value)[:60]}")
        return value

    @overload
    def text(self, field: str, *, optional: Literal[False] = ..., empty: bool = ...) -> str: ...
    @overload
    def text(self, field: str, *, optional: bool, empty: bool = ...) -> str | None: ...

    def text(self, field: str, *, optional: bool = False, empty: bool = False) -> str | None:
        value = self.get(field, str, optional=optional)
        if value is not None and not empty and not value.strip():
            raise self.fail(field, "empty text")
        return value  # type: ignore[no-any-return]  # get() checked it is a str

    def texts(self, field: str, *, optional: bool = False) -> list[str]:
        value = self.get(field, list, optional=optional) or []
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                raise self.fail(f"{field}[{i}]", f"expected a non-empty string, got {json.dumps(item)[:60]}")
        return value

    def one_of(self, field: str, mapping: dict[str, Any]) -> Any:
        """The value, which must be one of `mapping`'s keys, mapped to ours."""
        value = self.get(field, str)
        if value not in mapping:
            raise self.fail(field, f"unknown value {value!r}; the release's values are {', '.join(mapping)}")
        return mapping[value]

    def child(self, field: str, what: str) -> "Record":
        return Record(self.get(field, dict), f"{self.where}.{field}", what)


def jsonl_records(path: Path) -> Iterator[tuple[int, Record]]:
    """Each line of a JSONL file as a `Record` (the file named by path and line)."""
    for line, obj in read_jsonl(path):
        yield line, Record(obj, f"{path}:{line}", "one line of the file")


def json_file(path: Path) -> Any:
    """A whole-file JSON document (a missing, binary or broken file is an `InputError` naming it)."""
    path = Path(path)
    data = read_input_bytes(path, "file", hint="give the path of the file you downloaded")
    try:
        return loads_json(data.decode("utf-8-sig"), str(path))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start + 1}); is this the JSON file of the release?") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc


def unique(ids: list[tuple[str, str]], what: str) -> None:
    """Refuse a repeated id: `ids` holds (id, where) pairs."""
    seen: dict[str, str] = {}
    for key, where in ids:
        if key in seen:
            raise InputError(f"{where}: {what} {key!r} repeats the one at {seen[key]}; each must be unique")
        seen[key] = where


def each(items: Any, where: str, field: str, check: Callable[[Any, str], Any]) -> list[Any]:
    """`check(item, where)` for every item of a list field, `where` naming the item."""
    if not isinstance(items, list):
        raise InputError(f"{where}: field '{field}': expected a list, got {type(items).__name__}")
    return [check(item, f"{where}.{field}[{i}]") for i, item in enumerate(items)]

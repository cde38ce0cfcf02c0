"""Writing post-training exports so a trainer takes them as they are (TRL's dataset formats).

- Conversations are real nested columns: `messages`, `prompt`, `chosen`, `rejected` are lists of
  `{role, content, ...}` structs in parquet, and objects in JSONL; never JSON text.
- What differs in shape from one row to the next is typed as JSON *values*: a tool call's `arguments`
  (`commit_move` and `add_todo` take different fields) and a tool's `parameters` (a JSON schema) are Arrow's
  `arrow.json` extension type in parquet, which `datasets` reads back as `Json()` and hands over as dicts, and in
  JSONL the same objects, which `datasets`' JSON loader types as `Json()` when it sees differing keys.
- Every row of a file has the same keys, and every provenance column one type: `datasets`' JSON loader types a
  file's columns from its first block (10 MB) and fails later on a value of another type ("Couldn't cast ... to
  null"). Nested detail that is null or empty for some rows (judgments, candidates, scenario, per-turn moves) goes
  to a side file, `FILE.provenance.jsonl`, instead.
- The rows whose nested values show a shape no earlier row showed (a first `add_todo` call, a first non-null
  field) are written first, so that first block sees every shape the file holds.
- An export that selects nothing is an error (`NothingSelected`, exit 1) and writes no file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from mindsimkit.mindcore.errors import InputError, MindsimError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_jsonl, atomic_writer
from mindsimkit.mindcore.outputs import check_out_file

SUFFIXES = (".jsonl", ".parquet")

JSON = pa.json_(pa.string())
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
FUNCTION_CALL = pa.struct([("name", pa.string()), ("arguments", JSON)])
TOOL_CALL = pa.struct([("id", pa.string()), ("type", pa.string()), ("function", FUNCTION_CALL)])
# Every patient message has every key (null where its kind has none), as rows loaded with `datasets` have them.
TOOL_MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
    ]
)
TOOL = pa.struct(
    [
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("description", pa.string()), ("parameters", JSON)])),
    ]
)
# The nested columns of each export; every other column is a scalar typed from its values.
COLUMNS: dict[str, dict[str, pa.DataType]] = {
    "sft": {"messages": pa.list_(MESSAGE), "prompt": pa.list_(MESSAGE), "completion": pa.list_(MESSAGE)},
    "dpo": {"prompt": pa.list_(MESSAGE), "chosen": pa.list_(MESSAGE), "rejected": pa.list_(MESSAGE)},
    "patient": {"messages": pa.list_(TOOL_MESSAGE), "tools": pa.list_(TOOL)},
}


class NothingSelected(MindsimError):
    """An export whose selection left no row: exit 1, and no file is written."""


def check_out(out: Path) -> Path:
    """Refuse an output name the writer cannot write, before any work (an engine run, for `export dpo`)."""
    if Path(out).suffix.lower() not in SUFFIXES:
        raise InputError(f"--out {out}: use a .jsonl or .parquet file name")
    for path in (out, *side_paths(out)):
        check_out_file(path, "--out")
    return Path(out)


def side_paths(out: Path) -> tuple[Path, Path]:
    """`FILE.summary.json` and `FILE.provenance.jsonl` beside `FILE` (`x.jsonl` → `x.jsonl.summary.json`): named
    after the whole file name, so the `.jsonl` and `.parquet` exports of one stem never share side files."""
    out = Path(out)
    return out.with_name(f"{out.name}.summary.json"), out.with_name(f"{out.name}.provenance.jsonl")


def write_export(
    kind: str,
    rows: list[dict[str, Any]],
    out: Path,
    *,
    summary: dict[str, Any],
    provenance: list[dict[str, Any]],
    why_empty: str,
) -> Path:
    """The rows (`.jsonl` or `.parquet` by `out`'s suffix), the summary and the provenance side file; with no
    row, `NothingSelected(why_empty)` and nothing written."""
    out = check_out(out)
    if not rows:
        raise NothingSelected(why_empty)
    rows = shapes_first(rows)
    summary_path, provenance_path = side_paths(out)
    atomic_write_jsonl(provenance_path, provenance)
    atomic_write_json(summary_path, summary)
    if out.suffix.lower() == ".jsonl":
        return atomic_write_jsonl(out, rows)
    import pyarrow.parquet as pq

    table = arrow_table(rows, COLUMNS[kind])
    with atomic_writer(out, "wb") as f:
        pq.write_table(table, f)
    return out


def arrow_table(rows: list[dict[str, Any]], nested: dict[str, pa.DataType]) -> pa.Table:
    """`rows` as a table whose nested columns have exactly the types in `nested` (JSON values encoded into the
    extension type) and whose scalar columns are typed from their values."""
    names = list(rows[0])
    arrays = []
    for name in names:
        values = [r[name] for r in rows]
        kind = nested.get(name)
        if kind is None:
            arrays.append(pa.array(values))
        else:
            # Arrow builds no extension values from Python objects: build the storage (JSON text), then view it as JSON.
            arrays.append(pa.array([_encode(v, kind) for v in values], type=_storage(kind)).cast(kind))
    return pa.Table.from_arrays(arrays, names=names)


def _storage(kind: pa.DataType) -> pa.DataType:
    if isinstance(kind, pa.BaseExtensionType):
        return kind.storage_type
    if pa.types.is_list(kind):
        return pa.list_(_storage(kind.value_type))
    if pa.types.is_struct(kind):
        return pa.struct([(f.name, _storage(f.type)) for f in kind])
    return kind


def _encode(value: Any, kind: pa.DataType) -> Any:
    if value is None:
        return None
    if isinstance(kind, pa.BaseExtensionType):
        return json.dumps(value, ensure_ascii=False)
    if pa.types.is_list(kind):
        return [_encode(v, kind.value_type) for v in value]
    if pa.types.is_struct(kind):
        return {f.name: _encode(value.get(f.name), f.type) for f in kind}
    return value


Shape = tuple[tuple[str, ...], "str | tuple[str, ...]"]


def _shapes(value: Any, path: tuple[str, ...] = ()) -> Iterator[Shape]:
    """Every (path, kind) in a row; a dict's kind is its key set (differing key sets are what make `datasets`
    type a field as JSON)."""
    if isinstance(value, dict):
        yield path, tuple(sorted(value))
        for k, v in value.items():
            yield from _shapes(v, (*path, k))
    elif isinstance(value, list):
        yield path, "list"
        for v in value:
            yield from _shapes(v, (*path, "[]"))
    else:
        yield path, type(value).__name__


def shapes_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` with each row that shows a shape no earlier row showed moved to the front (in their order), so the
    first rows a reader types the file from show every shape in it."""
    seen: set[Shape] = set()
    first: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for row in rows:
        shapes = set(_shapes(row))
        (first if shapes - seen else rest).append(row)
        seen |= shapes
    return first + rest

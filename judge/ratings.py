"""Ratings from anywhere: the long format (one value per line) read against a rubric, and agreement per item,
so ratings made outside the toolkit (people, other tools) are checked and compared like the judge's.

Columns: `item` (a rubric item id), `unit` (what was rated: a session, reply, window or profile id, as the
rater's tool names it), `rater`, `value`, and optionally `system` and `patient`. CSV (a header line with those
names) or JSONL (one object per line); docs/human-evaluation.md has examples. Typing is strict and the same on
every path (`judge.rubrics.strict_point`): in JSONL a value on an integer scale is a JSON integer (not `true`,
not `"4"`, not `4.0`) and a label is a JSON string; CSV has no types, so an integer-scale cell must be an integer
written plainly (`4`; not `4.0`, `+4` or `true`). An empty value (or null) is a missing rating, as is a value
the rubric lists under `scale.not_applicable`; both are counted and left out. Every other problem (an unknown
item, a value off the scale, a missing column, a rater rating one item of one unit twice) is one error naming
file, line and the fix. Ids the caller does not know (units no judgment has, raters no task lists) are allowed:
the caller warns (`unknown_units`).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.inputs import check_input, read_input_bytes
from mindsimkit.mindcore.io import read_jsonl
from mindsimkit.judge.alpha import Agreement, agreement
from mindsimkit.judge.rubrics import Point, Rubric, strict_point

COLUMNS = ("item", "unit", "rater", "value", "system", "patient")
REQUIRED = ("item", "unit", "rater", "value")
_INT = re.compile(r"^-?[0-9]+$")


def _id(v: Any) -> Any:
    # Ids are text; a JSON integer id (a numbered unit) is read as its digits. Booleans are not ids.
    if isinstance(v, bool):
        raise ValueError("a boolean is not an id")
    return str(v) if isinstance(v, int) else v


def _name(v: Any) -> Any:
    # A rater is a name: 7 and "7" would be one rater read two ways, so a JSON number is refused, not converted.
    if isinstance(v, (int, float)):
        raise ValueError(f'{v!r} is a JSON number; write the rater\'s id as a string ("{v}")')
    return v


class RatingRow(BaseModel):
    """One rater's value for one item of one rated unit."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    item: str = Field(min_length=1, description="Rubric item id")
    unit: str = Field(min_length=1, description="The rated unit's id (session, reply, window, profile)")
    rater: str = Field(min_length=1, description="Who rated")
    value: Point = Field(description="A point of the rubric's scale")
    system: Optional[str] = Field(None, description="What produced the unit (optional)")
    patient: Optional[str] = Field(None, description="The patient of the unit (optional)")

    _ids = field_validator("item", "unit", "system", "patient", mode="before")(classmethod(lambda cls, v: _id(v)))
    _rater = field_validator("rater", mode="before")(classmethod(lambda cls, v: _name(v)))

    @field_validator("value", mode="before")
    @classmethod
    def _strict(cls, v: Any) -> Any:
        if strict_point(v) is None:
            raise ValueError(f"value {v!r}: an integer or a label (booleans and numbers written as text are refused)")
        return v


@dataclass
class Ratings:
    """What a file gave: the rows kept, and what was left out as missing."""

    rows: list[RatingRow]
    missing: int = 0
    not_applicable: int = 0
    sources: list[str] = field(default_factory=list)

    def unknown_units(self, known: Iterable[str]) -> list[str]:
        known = set(known)
        return sorted({r.unit for r in self.rows} - known)


# A CSV cell longer than this is not a rating (csv's own limit is the same, and it raises an untyped error).
CELL_MAX = 131_072
_SHORT = object()  # what DictReader fills in for cells a row lacks


def _records(path: Path) -> Iterable[tuple[int, dict[str, Any], bool]]:
    """(line, record, from_csv) for a CSV or JSONL file."""
    if path.suffix.lower() == ".csv":
        yield from _csv_records(path)
        return
    for n, obj in read_jsonl(path):
        if not isinstance(obj, dict):
            raise InputError(f"{path}:{n}: expected a JSON object with {', '.join(REQUIRED)}")
        yield n, obj, False


def _csv_records(path: Path) -> Iterable[tuple[int, dict[str, Any], bool]]:
    data = read_input_bytes(path, "ratings file")
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise InputError(
            f"{path}:{line}: a NUL byte, so binary data, not a CSV text file; save the ratings as UTF-8 CSV"
        )
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark (Excel's "CSV UTF-8") is not part of the first column
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte {exc.start + 1}); save the file as UTF-8 CSV") from None
    # A file cut off in its last row (a copy that stopped, a full disk) can end in a bare comma: that row's last
    # cell would read as a missing rating. Written files end rows with a line break; a missing value then is meant.
    last = text.count("\n") + (not text.endswith("\n")) if text.strip() else 0
    cut_short = bool(text) and not text.endswith(("\n", "\r")) and text.rstrip("\r\n").endswith(",")
    # strict: a quoted cell the file ends inside is an error, not a value cut short.
    # restval is stored as given: an object no cell can equal tells a short row from an empty cell, which typeshed's
    # `str | None` cannot express.
    reader = csv.DictReader(io.StringIO(text, newline=""), restval=_SHORT, strict=True)  # type: ignore[call-overload]
    try:
        head = reader.fieldnames or []
        twice = sorted({c for c in head if head.count(c) > 1})
        if twice:
            raise InputError(
                f"{path}:1: column {twice[0]!r} appears twice in the header, so only one of its "
                "cells could be read; keep one"
            )
        missing = [c for c in REQUIRED if c not in head]
        if missing:
            raise InputError(
                f"{path}:1: header lacks column {', '.join(missing)}; the long format's columns are "
                f"{', '.join(COLUMNS)} (system and patient optional)"
            )
        extra = [c for c in head if c not in COLUMNS]
        if extra:
            raise InputError(
                f"{path}:1: unknown column {extra[0]!r}; the long format's columns are {', '.join(COLUMNS)}"
            )
        for rec in reader:
            n = reader.line_num
            if None in rec:
                raise InputError(f"{path}:{n}: more cells than header columns")
            if any(v is _SHORT for v in rec.values()):
                raise InputError(
                    f"{path}:{n}: fewer cells than header columns ({', '.join(head)}); write an empty "
                    "cell for a missing value"
                )
            long = next((k for k, v in rec.items() if len(v) > CELL_MAX), None)
            if long is not None:
                raise InputError(
                    f"{path}:{n}: the {long} cell holds {len(rec[long]):,} characters, more than "
                    f"{CELL_MAX:,}; not a rating"
                )
            if n == last and cut_short:
                raise InputError(
                    f"{path}:{n}: the last row ends in an empty cell with no line break after it, as "
                    "a file cut off mid-row does; end the file with a line break if that value is "
                    "really missing"
                )
            yield n, {k: (v if v != "" else None) for k, v in rec.items()}, True
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            raise InputError(
                f"{path}:{reader.line_num + 1}: a quoted cell is still open where the file ends, as in a "
                "file cut off mid-row; close the quote (or fetch the whole file)"
            ) from None
        # csv raises before it counts the line it was reading.
        raise InputError(
            f"{path}:{reader.line_num + 1}: not CSV this reader accepts ({exc}); a cell holds at most "
            f"{CELL_MAX:,} characters"
        ) from None


def cell_value(text: Optional[str], rubric: Rubric) -> Any:
    """A value written as text by a format without types (a CSV cell, a Label Studio choice) in the scale's
    own type: a plainly written integer becomes int on an integer scale; nothing else does."""
    if text is None:
        return None
    if rubric.rating_scale.numeric and _INT.match(text):
        # More digits than any scale has points is not a number worth converting (Python refuses past 4,300).
        return int(text) if len(text) <= 12 else text
    return text


def counted_out(raw: Any, rubric: Rubric, tally: Ratings) -> bool:
    """True (and counted on `tally`) when a value is absent or the scale's not-applicable mark: no rating then.
    Every reader of ratings decides these the same way before checking the value against the scale."""
    if raw is None:
        tally.missing += 1
        return True
    point = strict_point(raw)
    if point is not None and point in rubric.rating_scale.not_applicable:
        tally.not_applicable += 1
        return True
    return False


def read_ratings(paths: Sequence[Path], rubric: Rubric) -> Ratings:
    """Every rating of the files, checked against `rubric` (items, scale) before any statistic."""
    if rubric.kind != "scales":
        raise InputError(
            f"rubric {rubric.id}: the long format holds values of a scales rubric; MHQR annotations "
            "go to `mindsim judge agreement`"
        )
    items = set(rubric.ids)
    out = Ratings([])
    seen: dict[tuple[str, str, str], str] = {}
    for path in map(Path, paths):
        check_input(path, "ratings file")
        out.sources.append(str(path))
        for n, rec, from_csv in _records(path):
            where = f"{path}:{n}"
            missing = [c for c in REQUIRED if c not in rec]
            if missing:
                raise InputError(f"{where}: missing {', '.join(missing)}; each rating needs {', '.join(REQUIRED)}")
            raw = cell_value(rec["value"], rubric) if from_csv else rec["value"]
            # The row's ids are checked whatever its value: a missing value is counted as missing only on a row
            # that is otherwise a rating (a known item, rated once by its rater).
            try:
                ids = RatingRow.model_validate({**rec, "value": 1})
            except ValidationError as exc:
                first = exc.errors()[0]
                raise InputError(
                    f"{where}: {'.'.join(str(p) for p in first['loc'])}: "
                    f"{first['msg'].removeprefix('Value error, ')} (rubric {rubric.id})"
                ) from None
            if ids.item not in items:
                raise InputError(
                    f"{where}: item {_shown(ids.item)} is not an item of rubric {rubric.id}; its items "
                    f"are {', '.join(rubric.ids)}"
                )
            k = (ids.item, ids.unit, ids.rater)
            if k in seen:
                raise InputError(
                    f"{where}: rater {_shown(ids.rater)} rates item {ids.item!r} of unit "
                    f"{_shown(ids.unit)} twice (also {seen[k]}); keep one"
                )
            seen[k] = where
            if counted_out(raw, rubric, out):
                continue
            try:
                value = rubric.rating_scale.check(raw)
                row = RatingRow.model_validate({**rec, "value": value})
            except ValueError as exc:
                msg = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                loc = ".".join(str(p) for p in exc.errors()[0]["loc"]) if isinstance(exc, ValidationError) else "value"
                raise InputError(f"{where}: {loc}: {msg.removeprefix('Value error, ')} (rubric {rubric.id})") from None
            out.rows.append(row)
    if not out.rows:
        raise InputError(
            f"no ratings in {', '.join(map(str, paths))} (only missing values)"
            if out.missing or out.not_applicable
            else f"no ratings in {', '.join(map(str, paths))}"
        )
    return out


def _shown(text: str, limit: int = 60) -> str:
    """An id from a file, quoted and cut: an error line stays one readable line whatever the file holds."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def write_rows(rows: Iterable[RatingRow]) -> list[dict[str, Any]]:
    """Rows as JSONL objects (optional fields left out when empty)."""
    return [r.model_dump(exclude_none=True) for r in rows]


def item_agreement(rows: Sequence[RatingRow], rubric: Rubric) -> dict[str, Agreement]:
    """Per rubric item: Krippendorff's α at the rubric's level of measurement on every pairable value, and on
    the units every rater of the file rated (the all-rater subset some paper tables report)."""
    domain = [rubric.rating_scale.position(p) for p in rubric.rating_scale.points]
    out = {}
    for item in rubric.ids:
        cells = [(r.unit, r.rater, rubric.rating_scale.position(r.value)) for r in rows if r.item == item]
        if cells:
            out[item] = agreement(cells, rubric.level, domain)
    return out


def raters_of(rows: Sequence[RatingRow]) -> list[str]:
    return sorted({r.rater for r in rows})


def alpha_report(ratings: Ratings, rubric: Rubric) -> dict[str, Any]:
    """Agreement per item, both α figures labelled, with the counts they rest on."""
    rows = ratings.rows
    per = item_agreement(rows, rubric)
    return {
        "rubric": {
            "id": rubric.id,
            "version": rubric.version,
            "level": rubric.level,
            "scale": rubric.rating_scale.describe(),
        },
        "sources": ratings.sources,
        "ratings": len(rows),
        "raters": raters_of(rows),
        "units": len({r.unit for r in rows}),
        "missing": ratings.missing,
        "not_applicable": ratings.not_applicable,
        "definitions": {
            "alpha_pairable": f"Krippendorff's alpha ({rubric.level}) on every value that has a partner: units rated by "
            "two or more raters, whoever they are; units with one value drop out",
            "alpha_all_rater_subset": "the same alpha on the units every rater of the file rated (as tables that "
            "restrict agreement to a shared subset report it)",
        },
        "items": {item: a.as_dict() for item, a in per.items()},
    }


def alpha_md(rep: dict[str, Any]) -> str:
    def f(x: float | None) -> str:
        return "—" if x is None else f"{x:.3f}"

    lines = [
        f"# Agreement on rubric {rep['rubric']['id']} (v{rep['rubric']['version']})",
        "",
        f"{rep['ratings']} ratings by {len(rep['raters'])} raters on {rep['units']} units; "
        f"{rep['missing']} missing and {rep['not_applicable']} not-applicable values left out.",
        "",
        f"- α (pairable): {rep['definitions']['alpha_pairable']}.",
        f"- α (all-rater subset): {rep['definitions']['alpha_all_rater_subset']}.",
        "",
        "| item | α (pairable) | units | α (all-rater subset) | units | note |",
        "|---|---|---|---|---|---|",
    ]
    for item, a in rep["items"].items():
        lines.append(
            f"| {item} | {f(a['alpha_pairable'])} | {a['units_pairable']} | {f(a['alpha_all_rater_subset'])} | "
            f"{a['units_all_rater_subset']} | {a.get('reason', '')} |"
        )
    return "\n".join(lines) + "\n"

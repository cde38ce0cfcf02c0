"""Ratings from anywhere: the long format (one value per line) read against a rubric, and agreement per item
(issue 33, parts 5 and 6).

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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mindsimkit.mindcore.errors import InputError
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


class RatingRow(BaseModel):
    """One rater's value for one item of one rated unit."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    item: str = Field(min_length=1, description="Rubric item id")
    unit: str = Field(min_length=1, description="The rated unit's id (session, reply, window, profile)")
    rater: str = Field(min_length=1, description="Who rated")
    value: Point = Field(description="A point of the rubric's scale")
    system: Optional[str] = Field(None, description="What produced the unit (optional)")
    patient: Optional[str] = Field(None, description="The patient of the unit (optional)")

    _ids = field_validator("item", "unit", "rater", "system", "patient", mode="before")(classmethod(lambda cls, v: _id(v)))

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


def _records(path: Path) -> Iterable[tuple[int, dict[str, Any], bool]]:
    """(line, record, from_csv) for a CSV or JSONL file."""
    if path.suffix.lower() == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            head = reader.fieldnames or []
            missing = [c for c in REQUIRED if c not in head]
            if missing:
                raise InputError(f"{path}:1: header lacks column {', '.join(missing)}; the long format's columns are "
                                 f"{', '.join(COLUMNS)} (system and patient optional)")
            extra = [c for c in head if c not in COLUMNS]
            if extra:
                raise InputError(f"{path}:1: unknown column {extra[0]!r}; the long format's columns are "
                                 f"{', '.join(COLUMNS)}")
            for n, rec in enumerate(reader, start=2):
                if None in rec:
                    raise InputError(f"{path}:{n}: more cells than header columns")
                yield n, {k: (v if v != "" else None) for k, v in rec.items()}, True
        return
    for n, obj in read_jsonl(path):
        if not isinstance(obj, dict):
            raise InputError(f"{path}:{n}: expected a JSON object with {', '.join(REQUIRED)}")
        yield n, obj, False


def cell_value(text: Optional[str], rubric: Rubric) -> Any:
    """A value written as text by a format without types (a CSV cell, a Label Studio choice) in the scale's
    own type: a plainly written integer becomes int on an integer scale; nothing else does."""
    if text is None:
        return None
    if rubric.scale.numeric and _INT.match(text):
        return int(text)
    return text


def counted_out(raw: Any, rubric: Rubric, tally: Ratings) -> bool:
    """True (and counted on `tally`) when a value is absent or the scale's not-applicable mark: no rating then.
    Every reader of ratings decides these the same way before checking the value against the scale."""
    if raw is None:
        tally.missing += 1
        return True
    point = strict_point(raw)
    if point is not None and point in rubric.scale.not_applicable:
        tally.not_applicable += 1
        return True
    return False


def read_ratings(paths: Sequence[Path], rubric: Rubric) -> Ratings:
    """Every rating of the files, checked against `rubric` (items, scale) before any statistic."""
    if rubric.kind != "scales":
        raise InputError(f"rubric {rubric.id}: the long format holds values of a scales rubric; MHQR annotations "
                         "go to `mindsim judge agreement`")
    items = set(rubric.ids)
    out = Ratings([])
    seen: dict[tuple[str, str, str], str] = {}
    for path in map(Path, paths):
        if not path.is_file():
            raise InputError(f"{path}: ratings file not found")
        out.sources.append(str(path))
        for n, rec, from_csv in _records(path):
            where = f"{path}:{n}"
            missing = [c for c in REQUIRED if c not in rec]
            if missing:
                raise InputError(f"{where}: missing {', '.join(missing)}; each rating needs {', '.join(REQUIRED)}")
            raw = cell_value(rec["value"], rubric) if from_csv else rec["value"]
            if counted_out(raw, rubric, out):
                continue
            try:
                value = rubric.scale.check(raw)
                row = RatingRow.model_validate({**rec, "value": value})
            except ValueError as exc:
                msg = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                loc = ".".join(str(p) for p in exc.errors()[0]["loc"]) if isinstance(exc, ValidationError) else "value"
                raise InputError(f"{where}: {loc}: {msg.removeprefix('Value error, ')} (rubric {rubric.id})") from None
            if row.item not in items:
                raise InputError(f"{where}: item {row.item!r} is not an item of rubric {rubric.id}; its items are "
                                 f"{', '.join(rubric.ids)}")
            k = (row.item, row.unit, row.rater)
            if k in seen:
                raise InputError(f"{where}: rater {row.rater!r} rates item {row.item!r} of unit {row.unit!r} twice "
                                 f"(also {seen[k]}); keep one")
            seen[k] = where
            out.rows.append(row)
    if not out.rows:
        raise InputError(f"no ratings in {', '.join(map(str, paths))} (only missing values)" if out.missing
                         or out.not_applicable else f"no ratings in {', '.join(map(str, paths))}")
    return out


def write_rows(rows: Iterable[RatingRow]) -> list[dict[str, Any]]:
    """Rows as JSONL objects (optional fields left out when empty)."""
    return [r.model_dump(exclude_none=True) for r in rows]


def item_agreement(rows: Sequence[RatingRow], rubric: Rubric) -> dict[str, Agreement]:
    """Per rubric item: Krippendorff's α at the rubric's level of measurement on every pairable value, and on
    the units every rater of the file rated (the all-rater subset some paper tables report)."""
    domain = [rubric.scale.position(p) for p in rubric.scale.points]
    out = {}
    for item in rubric.ids:
        cells = [(r.unit, r.rater, rubric.scale.position(r.value)) for r in rows if r.item == item]
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
        "rubric": {"id": rubric.id, "version": rubric.version, "level": rubric.level, "scale": rubric.scale.describe()},
        "sources": ratings.sources, "ratings": len(rows), "raters": raters_of(rows),
        "units": len({r.unit for r in rows}), "missing": ratings.missing, "not_applicable": ratings.not_applicable,
        "definitions": {
            "alpha_pairable": f"Krippendorff's alpha ({rubric.level}) on every value that has a partner: units rated by "
                              "two or more raters, whoever they are; units with one value drop out",
            "alpha_all_rater_subset": "the same alpha on the units every rater of the file rated (as tables that "
                                      "restrict agreement to a shared subset report it)",
        },
        "items": {item: a.as_dict() for item, a in per.items()},
    }


def alpha_md(rep: dict[str, Any]) -> str:
    f = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
    lines = [f"# Agreement on rubric {rep['rubric']['id']} (v{rep['rubric']['version']})", "",
             f"{rep['ratings']} ratings by {len(rep['raters'])} raters on {rep['units']} units; "
             f"{rep['missing']} missing and {rep['not_applicable']} not-applicable values left out.", "",
             f"- α (pairable): {rep['definitions']['alpha_pairable']}.",
             f"- α (all-rater subset): {rep['definitions']['alpha_all_rater_subset']}.", "",
             "| item | α (pairable) | units | α (all-rater subset) | units | note |", "|---|---|---|---|---|---|"]
    for item, a in rep["items"].items():
        lines.append(f"| {item} | {f(a['alpha_pairable'])} | {a['units_pairable']} | {f(a['alpha_all_rater_subset'])} | "
                     f"{a['units_all_rater_subset']} | {a.get('reason', '')} |")
    return "\n".join(lines) + "\n"

"""Rubrics as data: the rubric file format and the one registry every consumer reads, so a new rubric is one file
and no code.

A rubric file (YAML) declares what is rated (`unit`: a counsellor reply, a window of turns, a whole
conversation, or a profile), its items and their scale (an integer range or ordered labels, with an anchor for
every point), the level of measurement agreement is computed at, the judge prompt template and the human page's
settings. The judge (`judge/scales.py`), the annotation page and its Label Studio config
(`mindsim_app/annotate/`), the long ratings format (`judge/ratings.py`) and agreement (`judge/alpha.py`) all take
a `Rubric` from here; none keeps its own list of rubrics.

Built-in rubrics ship as package data in `judge/data/rubrics/` (MHQR, PatientAct's session and profile rubrics,
MindEval v1's judge criteria and its released human-rating criteria). A user rubric is a file given by path
(`--rubric path/to/my.yaml`); its judge template may sit next to it. `docs/judge.md` documents the format with
a worked 1–6 example.

Two kinds: `scales` (every item scored on the scale; judged by `judge/scales.py`) and `severity_issues` (MHQR:
one severity on an ordered label scale plus flagged issues, whose definitions live in the file named by `body`
and are judged by `judge/run.py`).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore import yamlio
from mindsimkit.mindcore.prompts import file_inside, read_text_file

Unit = Literal["reply", "window", "conversation", "profile"]
Level = Literal["nominal", "ordinal", "interval", "ratio"]
Point = Union[int, str]
# A point as a rubric file writes it: YAML's own integer or string, never coerced (`min: false` is not 0,
# `"1"` is not 1); one typing rule with `strict_point`.
StrictPoint = Union[StrictInt, StrictStr]
ID = r"^[a-z][a-z0-9_]*$"
BUILTIN_DIR = "rubrics"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def strict_point(value: Any) -> Optional[Point]:
    """The one typing rule for a rating value on every path (page, Label Studio, files): an integer is an
    `int` (never a bool, never a numeric string, never a float like 4.0) and a label is a `str`. Anything
    else is None, which callers turn into their own error line."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or isinstance(value, str):
        return value
    return None


class Scale(_Strict):
    """An integer range (`min`, `max`) or ordered `labels` (first = lowest). `not_applicable`: values a source
    writes for "not rated" (e.g. MindEval's 0); they are read as missing, never as a rating."""

    min: Optional[StrictInt] = Field(None, description="Lowest integer point (with max)")
    max: Optional[StrictInt] = Field(None, description="Highest integer point (with min)")
    labels: Optional[tuple[StrictStr, ...]] = Field(
        None, description="Ordered label points, lowest first (instead of min/max)"
    )
    anchors: dict[StrictPoint, StrictStr] = Field(
        default_factory=dict, description="Default anchor per point, for items without their own"
    )
    not_applicable: tuple[StrictPoint, ...] = Field((), description="Values that mean 'not rated'; imported as missing")

    @model_validator(mode="after")
    def _shape(self) -> "Scale":
        ranged = self.min is not None or self.max is not None
        if ranged == (self.labels is not None):
            raise ValueError("scale: give min and max (an integer range) or labels (ordered), not both")
        if ranged and (self.min is None or self.max is None or self.max <= self.min):
            raise ValueError("scale: min and max are both needed, with max above min")
        if self.min is not None and self.max is not None and self.max - self.min > 100:
            raise ValueError("scale: at most 101 integer points")
        if self.labels is not None and (len(self.labels) < 2 or len(set(self.labels)) != len(self.labels)):
            raise ValueError("scale: labels must be two or more distinct names")
        unknown = [p for p in self.anchors if p not in self.points]
        if unknown:
            raise ValueError(f"scale: anchor for {unknown[0]!r}, which is not a point of the scale")
        clash = [p for p in self.not_applicable if p in self.points]
        if clash:
            raise ValueError(f"scale: not_applicable value {clash[0]!r} is a point of the scale")
        # On an integer scale a number written as text is refused everywhere else (`strict_point`), so listing
        # one as "not rated" would never match a value: say so instead of ignoring it.
        texts = [p for p in self.not_applicable if ranged and isinstance(p, str) and p.strip().lstrip("+-").isdigit()]
        if texts:
            raise ValueError(
                f"scale: not_applicable value {texts[0]!r} is a number written as text; on an integer "
                f"scale write it as a number ({texts[0].strip()})"
            )
        return self

    @property
    def points(self) -> tuple[Point, ...]:
        if self.labels is not None:
            return self.labels
        low, high = self._range()
        return tuple(range(low, high + 1))

    def _range(self) -> tuple[int, int]:
        # The validator lets a scale be either ranged or labelled, so an unlabelled one has both ends.
        if self.min is None or self.max is None:
            raise ValueError("scale: an integer scale needs min and max")
        return self.min, self.max

    def _labels(self) -> tuple[str, ...]:
        if self.labels is None:
            raise ValueError(f"scale {self.describe()}: an integer scale has no labels")
        return self.labels

    @property
    def numeric(self) -> bool:
        return self.labels is None

    def describe(self) -> str:
        return " < ".join(self.labels) if self.labels is not None else f"{self.min}-{self.max}"

    def check(self, value: Any) -> Point:
        """The value as a point of this scale, or ValueError saying what the scale accepts."""
        v = strict_point(value)
        if v is None or v not in self.points or (self.numeric and isinstance(v, str)):
            kind = "an integer" if self.numeric else "a label"
            shown = repr(value)
            shown = shown if len(shown) <= 40 else f"{shown[:30]}… ({len(shown):,} characters)"
            raise ValueError(
                f"value {shown} is not on the scale {self.describe()} ({kind}; booleans and numbers "
                "written as text are refused)"
            )
        return v

    def position(self, value: Point) -> float:
        """The number agreement works on: the integer itself, or a label's rank (1 = lowest)."""
        return float(value) if self.numeric else float(self._labels().index(value) + 1)


def point_type(scale: Scale) -> Any:
    """The type of one value on `scale` inside a pydantic model (answers, judge output, rating rows): the
    scale's points, under `strict_point`'s rule, so `true` is never rating 1 and "4" never 4."""
    return Annotated[Literal[scale.points], BeforeValidator(scale.check)]


class Item(_Strict):
    id: StrictStr = Field(pattern=ID, description="Item id: lower case, digits, underscores")
    name: StrictStr = Field(min_length=1)
    question: StrictStr = Field(min_length=1, description="What the item asks, for raters and the judge")
    anchors: dict[StrictPoint, StrictStr] = Field(
        default_factory=dict, description="What each point means for this item"
    )


class Pick(_Strict):
    """A choice among options the application supplies (PatientAct's attachment style and theme)."""

    id: str = Field(pattern=ID)
    name: str
    options: str = Field(description="Name of the option list the application provides")


class Closing(_Strict):
    """A question asked once per rater after all their items (PatientAct's diversity rating)."""

    id: str = Field(pattern=ID)
    title: str
    question: str
    anchors: dict[int, str]


class JudgeSpec(_Strict):
    template: str = Field(
        description="Jinja prompt: a name under prompts/ (judge/scales.jinja2), or a file "
        "relative to the rubric file (./my_prompt.jinja2)"
    )
    instructions: str = ""
    notes: tuple[str, ...] = Field((), description="Extra points the prompt lists (e.g. PatientAct's red flags)")
    reason_max: int = Field(300, ge=20, description="Longest reason per item, in characters")
    closing: Optional[Closing] = None


class PageSpec(_Strict):
    title: str
    instructions: str = ""
    comment_max_chars: int = Field(2000, ge=0)
    quote_max_chars: Optional[int] = Field(None, ge=0, description="severity_issues: longest optional quote")
    closing: Optional[Closing] = None


class Rubric(_Strict):
    """One rubric file, checked on load."""

    id: str = Field(pattern=ID, description="Registry id: lower case, digits, underscores")
    name: str
    version: str = Field(min_length=1, description="Recorded in every judgment and part of its cache key")
    source: str = Field(min_length=1, description="Where the rubric comes from, and whose wording it is")
    kind: Literal["scales", "severity_issues"] = "scales"
    unit: Unit
    level: Level = Field("ordinal", description="Level of measurement for Krippendorff's α")
    aliases: tuple[str, ...] = ()
    scale: Optional[Scale] = None
    items: tuple[Item, ...] = ()
    picks: tuple[Pick, ...] = ()
    body: Optional[str] = Field(None, description="severity_issues: the file with severities and issues")
    judge: Optional[JudgeSpec] = None
    page: PageSpec
    path: Optional[str] = Field(None, description="Where it was read from (set by the loader)")

    @model_validator(mode="after")
    def _consistent(self) -> "Rubric":
        if self.kind == "scales":
            if self.scale is None or not self.items:
                raise ValueError("a scales rubric needs a scale and at least one item")
            ids = [i.id for i in self.items] + [p.id for p in self.picks]
            if len(set(ids)) != len(ids):
                raise ValueError("item and pick ids must be unique")
            for it in self.items:
                extra = [p for p in it.anchors if p not in self.scale.points]
                if extra:
                    raise ValueError(f"item {it.id}: anchor for {extra[0]!r}, which is not a point of the scale")
                missing = [p for p in self.scale.points if p not in it.anchors and p not in self.scale.anchors]
                if missing:
                    raise ValueError(
                        f"item {it.id}: no anchor for point {missing[0]!r} (give it in the item's "
                        "anchors or the scale's)"
                    )
            if self.level in ("interval", "ratio") and not self.scale.numeric:
                raise ValueError(f"level {self.level}: needs an integer scale; label scales are nominal or ordinal")
        elif self.body is None:
            raise ValueError("a severity_issues rubric names its severities and issues file in `body`")
        return self

    @property
    def ids(self) -> list[str]:
        return [i.id for i in self.items]

    @property
    def rating_scale(self) -> Scale:
        """The scale of a `scales` rubric (its validator makes sure there is one)."""
        if self.scale is None:
            raise ConfigError(f"rubric {self.id}: a {self.kind} rubric has no scale to rate on")
        return self.scale

    @property
    def judge_spec(self) -> JudgeSpec:
        """The judge section; a rubric for human ratings only has none."""
        if self.judge is None:
            raise ConfigError(
                f"rubric {self.id} ({self.path}) has no judge: section (no prompt template); it is for "
                "human ratings only. Add judge: {template: judge/scales.jinja2} to judge with it"
            )
        return self.judge

    def anchors(self, item: Item) -> dict[Point, str]:
        """Every point's anchor for `item`: its own, else the scale's."""
        scale = self.rating_scale
        return {p: item.anchors.get(p, scale.anchors.get(p, "")) for p in scale.points}

    def item(self, item_id: str) -> Item:
        for i in self.items:
            if i.id == item_id:
                return i
        raise KeyError(item_id)

    def beside(self, name: str, field: str = "file") -> Optional[Path]:
        """A file named relative to the rubric file (`./x`, or an absolute path), or None for a name under the
        shipped folders. Its files are read and sent to a model, so they must sit in the rubric's own folder
        (a shipped rubric: the shipped judge data folder); anything resolving elsewhere is a ConfigError."""
        if not self.path or not (name.startswith(("./", "../", "/", "~"))):
            return None
        shipped = Path(str(resources.files("mindsimkit.judge") / "data"))
        folder = Path(self.path).parent
        root = shipped if folder.resolve().is_relative_to(shipped.resolve()) else folder
        return file_inside(name, root, f"rubric {self.path}: {field}")


def _parse(text: str, where: str, path: Optional[str] = None) -> Rubric:
    try:
        data = yamlio.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark is not None else ""
        raise ConfigError(
            f"rubric {where}:{line} not valid YAML ({getattr(exc, 'problem', None) or str(exc).splitlines()[0]}); "
            "see the format in docs/judge.md"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"rubric {where}: expected a mapping of rubric fields; see the format in docs/judge.md")
    try:
        return Rubric.model_validate({**data, "path": path or where})
    except ValidationError as exc:
        raise ConfigError(f"rubric {where}: {_first_problem(exc)}; see the format in docs/judge.md") from exc


def _first_problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


@lru_cache(maxsize=1)
def builtin() -> dict[str, Rubric]:
    """The shipped rubrics by id (and alias)."""
    out: dict[str, Rubric] = {}
    folder = resources.files("mindsimkit.judge") / "data" / BUILTIN_DIR
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        r = _parse(entry.read_text(encoding="utf-8"), str(entry))
        for name in (r.id, *r.aliases):
            if name in out:
                raise ConfigError(f"rubric {entry}: id {name!r} is taken by {out[name].path}")
            out[name] = r
    return out


def names() -> list[str]:
    return sorted({r.id for r in builtin().values()})


@lru_cache(maxsize=64)
def _from_file(path: str, mtime: float) -> Rubric:
    del mtime  # part of the cache key only: an edited file is read again
    r = _parse(read_text_file(Path(path), "rubric"), path)
    taken = builtin().get(r.id)
    if taken is not None:
        raise ConfigError(f"rubric {path}: id {r.id!r} is a built-in rubric's ({taken.path}); give yours another id")
    return r


def load(ref: str | Path) -> Rubric:
    """A built-in rubric by id or alias, or a rubric file by path (anything with a '/' or ending in .yaml)."""
    text = str(ref)
    if text in builtin():
        return builtin()[text]
    if "/" in text or text.endswith((".yaml", ".yml")) or Path(text).is_file():
        p = Path(text)
        if not p.is_file():
            raise ConfigError(f"rubric {text}: no such file; give a rubric id ({', '.join(names())}) or a YAML file")
        return _from_file(str(p.resolve()), p.stat().st_mtime)
    raise ConfigError(
        f"rubric {text!r}: not a built-in rubric ({', '.join(names())}) and not a file; give an id "
        "or a path to a rubric YAML file"
    )


def carried(rubric: Rubric) -> dict[str, str]:
    """A user rubric as another file carries it (a task folder's header): its YAML text as written, so it reads
    back exactly (JSON would turn integer anchor keys into strings)."""
    if rubric.path is None:
        raise ConfigError(f"rubric {rubric.id}: it has no file to carry")
    return {"path": str(rubric.path), "yaml": read_text_file(Path(rubric.path), f"rubric {rubric.id}")}


def from_dict(data: dict[str, Any], where: str) -> Rubric:
    """A rubric carried inside another file (`carried`), checked like a file."""
    if not isinstance(data, dict) or not isinstance(data.get("yaml"), str):
        raise ConfigError(f"rubric in {where}: expected the rubric file's text under 'yaml'; sample the task again")
    return _parse(data["yaml"], f"{data.get('path', 'rubric')} (as carried by {where})", data.get("path"))

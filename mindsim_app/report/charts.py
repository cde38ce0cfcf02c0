"""Inline SVG charts for the HTML report: generated here as text, so the page needs no
library, no network and no script to draw them. Four shapes cover every table of the judge and
validation reports: intervals (a point with its interval per row; `spread` adds the units' p5–p95 whiskers, Table
6), stacked bars (shares or an MHQR split into categories), lines (a value by turn or session), and grouped
intervals (a distance per feature per system against a floor).

Each chart is a figure holding two drawings of the same numbers and, under them, those numbers as a table (the
text alternative, folded away). The wide drawing (640 px) is shown on screens wider than 700 px, the narrow one
(340 px: row labels on their own line above the row, legends below) on phones; the page shows each at its own size,
never scaled down, so no text in a chart is under 11 px at any width."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from html import escape
from typing import Any, Callable, Sequence, TypeGuard

PALETTE = ("#3b6ea5", "#d9822b", "#4f9a5b", "#b8433e", "#7d5ba6", "#8c6d4f", "#c45ca2", "#6f7a82", "#b0a536", "#2fa4b5")
SEVERITY_COLOURS = {"no_concern": "#8fbf8f", "minor": "#e8c95a", "major": "#e08a3c", "critical": "#b8433e"}
SMALL = 11  # the smallest text in a chart, in px
CHAR = 6.0  # a character's mean width at 11 px in the page's sans-serif (measured in Chromium: 5.7), to cut labels by
TITLE_CHAR = 7.4  # the same for the 12 px bold title


@dataclass(frozen=True)
class Frame:
    """One drawing's geometry. Wide: row labels in a column left of the plot, legends beside it. Narrow: the plot
    takes the whole width, each row's label on a line of its own above it, legends in two columns."""

    w: int
    narrow: bool

    @property
    def left(self) -> float:  # where the plot starts
        return 12 if self.narrow else 190

    @property
    def right(self) -> float:
        return self.w - (24 if self.narrow else 40)

    @property
    def above(self) -> int:  # the room a row's label takes above the row
        return 14 if self.narrow else 0

    def chars(self, room: float) -> int:
        return max(8, int(room / CHAR))

    def label(self, y: float, s: str) -> str:
        """A row's label: right-aligned before the plot (wide), or on the line above the row (narrow)."""
        if self.narrow:
            return _text(self.left, y - 10, s[: self.chars(self.right - self.left)])
        return _text(self.left - 8, y + 4, s[:28], "end")

    def legend(self, names: Sequence[tuple[str, str]], top: float = 12) -> tuple[list[str], int]:
        """Colour keys in rows of three (wide) or two (narrow; one when a name would not fit in half the width);
        returns the drawing and the rows used."""
        per = 3
        if self.narrow:
            per = 2 if all(len(n) <= self.chars((self.w - 20) / 2 - 18) for n, _ in names) else 1
        step = (self.w - 20) / per
        out = []
        for k, (name, col) in enumerate(names):
            lx, ly = 10 + (k % per) * step, top + 16 * (k // per)
            out += [
                f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{col}"/>',
                _text(lx + 14, ly, name[: self.chars(step - 18)]),
            ]
        return out, math.ceil(len(names) / per)


WIDE, NARROW = Frame(640, False), Frame(340, True)


def _num(x: object) -> TypeGuard[float]:  # a number to draw: not missing, not NaN
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _tip(s: str) -> str:
    return f"<title>{escape(s)}</title>"


def _text(x: float, y: float, s: str, anchor: str = "start", size: int = SMALL, cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{c}>{escape(str(s))}</text>'


def _wrapped(
    x: float, y: float, s: str, chars: int, anchor: str = "start", size: int = SMALL, weight: str = ""
) -> tuple[str, int]:
    """Text on as many lines as it needs at `chars` a line, the first baseline at `y`; returns it and the lines."""
    rows = textwrap.wrap(s, chars) or [""]
    w = f' font-weight="{weight}"' if weight else ""
    spans = "".join(
        f'<tspan x="{x:.1f}" dy="{0 if i == 0 else size + 3}">{escape(r)}</tspan>' for i, r in enumerate(rows)
    )
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{w}>{spans}</text>', len(rows)


def _axis(x0: float, x1: float, y: float, lo: float, hi: float, ticks: int = 5, fmt: str = "{:g}") -> list[str]:
    out = [f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#999"/>']
    for k in range(ticks + 1):
        v = lo + (hi - lo) * k / ticks
        x = x0 + (x1 - x0) * k / ticks
        out += [
            f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>',
            _text(x, y + 15, fmt.format(round(v, 2)), "middle"),
        ]
    return out


Cell = Any  # a table cell: text, a number, or None (shown as "–")


def _cell(v: Cell, pct: bool = False) -> str:
    if isinstance(v, str):
        return escape(v)
    if not _num(v):
        return "–"
    return f"{100 * v:.1f}%" if pct else f"{v:.2f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[Cell]], pct: bool = False) -> str:
    """The chart's numbers: the first column names the row (a row header), the others are values."""
    th = "".join(f'<th scope="col">{escape(h)}</th>' for h in head)
    body = "".join(
        "<tr>" + f'<th scope="row">{_cell(r[0])}</th>' + "".join(f"<td>{_cell(v, pct)}</td>" for v in r[1:]) + "</tr>"
        for r in rows
    )
    return f'<table class="data"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


Draw = Callable[[Frame], tuple[float, list[str]]]  # a drawing's height and elements in one frame


def _figure(title: str, draw: Draw, table: str = "") -> str:
    """The chart in both frames, each with the title drawn on top (wrapped to its width) and as its accessible name,
    and the table of its numbers."""
    svgs = []
    for f in (WIDE, NARROW):
        head, n = _wrapped(10, 15, title, int((f.w - 20) / TITLE_CHAR), size=12, weight="600")
        top = 8 + 15 * n
        height, body = draw(f)
        h = math.ceil(height + top)
        svgs.append(
            f'<svg class="chart {"narrow" if f.narrow else "wide"}" viewBox="0 0 {f.w} {h}" width="{f.w}" '
            f'height="{h}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>{head}'
            f'<g transform="translate(0,{top})">' + "".join(body) + "</g></svg>"
        )
    data = f'<details class="chart-data"><summary>The numbers (table)</summary>{table}</details>' if table else ""
    return f'<figure class="chart" aria-label="{escape(title)}">{"".join(svgs)}{data}</figure>'


def intervals(
    rows: Sequence[dict[str, Any]],
    *,
    lo: float = 0.0,
    hi: float = 10.0,
    title: str,
    xlabel: str = "",
    tag_key: str | None = None,
) -> str:
    """One row per item: label, point `value`, interval `ci`, an optional tag (the significance group)."""
    return _interval_rows(rows, lo=lo, hi=hi, title=title, xlabel=xlabel, tag_key=tag_key, ci_width=2)


def spread(rows: Sequence[dict[str, Any]], *, lo: float = 0.0, hi: float = 10.0, title: str, xlabel: str = "") -> str:
    """MindEval2 Table 6's figure: per row a point `value`, its interval `ci` as a thick bar, the middle half of the
    row's units `box` (p25, p75) as an open box and their spread `whiskers` (p5, p95) as a thin line with caps, so
    a narrow interval over a wide spread reads as such. Any of them may be absent."""
    return _interval_rows(rows, lo=lo, hi=hi, title=title, xlabel=xlabel, ci_width=5, whiskers=True)


def _interval_rows(
    rows: Sequence[dict[str, Any]],
    *,
    lo: float,
    hi: float,
    title: str,
    xlabel: str,
    ci_width: int,
    tag_key: str | None = None,
    whiskers: bool = False,
) -> str:
    boxed = whiskers and any(r.get("box") for r in rows)

    def name(r: dict[str, Any]) -> str:
        return (f"[{r[tag_key]}] " if tag_key and r.get(tag_key) else "") + str(r["label"])

    def draw(f: Frame) -> tuple[float, list[str]]:
        left, right, rh = f.left, f.right, 24 + f.above

        def sx(v: float) -> float:
            return left + (right - left) * (min(max(v, lo), hi) - lo) / ((hi - lo) or 1)

        body = []
        for i, r in enumerate(rows):
            y = 30 + rh * i + rh / 2 + f.above / 2
            body.append(f.label(y, name(r)))
            wl, wh = (r.get("whiskers") or (None, None)) if whiskers else (None, None)
            if _num(wl) and _num(wh):
                body.append(
                    f'<line class="whisker" x1="{sx(wl):.1f}" y1="{y}" x2="{sx(wh):.1f}" y2="{y}" stroke="#999">'
                    + _tip("%s: p5 %.2f, p95 %.2f" % (r["label"], wl, wh))
                    + "</line>"
                )
                body += [
                    f'<line class="whisker" x1="{sx(v):.1f}" y1="{y - 5}" x2="{sx(v):.1f}" y2="{y + 5}" stroke="#999"/>'
                    for v in (wl, wh)
                ]
            bl, bh = (r.get("box") or (None, None)) if whiskers else (None, None)
            if _num(bl) and _num(bh):
                body.append(
                    f'<rect class="box" x="{sx(bl):.1f}" y="{y - 7}" width="{max(sx(bh) - sx(bl), 1):.1f}" '
                    'height="14" fill="none" stroke="#777">'
                    + _tip("%s: p25 %.2f, p75 %.2f" % (r["label"], bl, bh))
                    + "</rect>"
                )
            ci = r.get("ci") or [None, None]
            if _num(ci[0]) and _num(ci[1]):
                body.append(
                    f'<line x1="{sx(ci[0]):.1f}" y1="{y}" x2="{sx(ci[1]):.1f}" y2="{y}" stroke="#555" '
                    f'stroke-width="{ci_width}"/>'
                )
            if _num(r.get("value")):
                body.append(
                    f'<circle cx="{sx(r["value"]):.1f}" cy="{y}" r="5" fill="{PALETTE[i % len(PALETTE)]}">'
                    + _tip("%s: %.2f" % (r["label"], r["value"]))
                    + "</circle>"
                )
        axis = 30 + rh * len(rows) + 6
        body += _axis(left, right, axis, lo, hi)
        h = axis + 22
        if xlabel:
            text, n = _wrapped((left + right) / 2, h + 8, xlabel, f.chars(right - left), "middle")
            body.append(text)
            h += 15 * n
        return h + 4, body

    head = (
        ["Row", "Value", "Interval low", "Interval high"]
        + (["p5", "p95"] if whiskers else [])
        + (["p25", "p75"] if boxed else [])
    )
    table = [
        [
            name(r),
            r.get("value"),
            *(r.get("ci") or [None, None]),
            *((r.get("whiskers") or (None, None)) if whiskers else ()),
            *((r.get("box") or (None, None)) if boxed else ()),
        ]
        for r in rows
    ]
    return _figure(title, draw, _table(head, table))


def stacked(
    rows: Sequence[dict[str, Any]],
    keys: Sequence[str],
    *,
    title: str,
    names: dict[str, str] | None = None,
    colours: dict[str, str] | None = None,
    total: float | None = 1.0,
    pct: bool = True,
) -> str:
    """One bar per row, segments `row["parts"][key]` in `keys` order; `total` fixes the scale (None: the
    largest row sum)."""
    names = names or {}
    scale = total or max([sum(v or 0 for v in r["parts"].values()) for r in rows] + [0.0]) or 1.0
    cols = {key: (colours or {}).get(key, PALETTE[k % len(PALETTE)]) for k, key in enumerate(keys)}

    def draw(f: Frame) -> tuple[float, list[str]]:
        left, right, rh = f.left, f.right, 22 + f.above
        body, legend_rows = f.legend([(names.get(k, k), cols[k]) for k in keys])
        top = 14 + 16 * legend_rows
        for i, r in enumerate(rows):
            y = top + rh * i + f.above
            body.append(f.label(y + 10, str(r["label"])))
            x = left
            for key in keys:
                v = r["parts"].get(key) or 0
                w = (right - left) * v / scale
                if w <= 0:
                    continue
                shown = f"{100 * v:.1f}%" if pct else f"{v:.2f}"
                body.append(
                    f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="16" fill="{cols[key]}">'
                    + _tip("%s · %s: %s" % (r["label"], names.get(key, key), shown))
                    + "</rect>"
                )
                x += w
        axis = top + rh * len(rows) + 4
        body += _axis(left, right, axis, 0, scale, fmt="{:.0%}" if pct else "{:g}")
        return axis + 26, body

    table = _table(
        ["Row", *(names.get(k, k) for k in keys)],
        [[str(r["label"]), *(r["parts"].get(k) for k in keys)] for r in rows],
        pct=pct,
    )
    return _figure(title, draw, table)


def lines(
    series: dict[str, Sequence[tuple[float, float | None]]],
    *,
    title: str,
    lo: float | None = None,
    hi: float | None = None,
    xlabel: str = "",
    ylabel: str = "",
) -> str:
    """One line per series over shared x values."""
    pts = [(x, y) for s in series.values() for x, y in s if _num(y)]
    if not pts:
        return _figure(title, lambda f: (40, [_text(10, 24, "no data")]))
    xs = sorted({x for x, _ in pts})
    low = min(y for _, y in pts) if lo is None else lo
    high = max(y for _, y in pts) if hi is None else hi
    high = high if high > low else low + 1

    def draw(f: Frame) -> tuple[float, list[str]]:
        # Wide: the legend in a column right of the plot. Narrow: the plot takes the width, the legend goes below.
        left, right, top, bottom = 50, f.w - (16 if f.narrow else 170), 16, 190

        def sx(x: float) -> float:
            return left + (right - left) * ((x - xs[0]) / ((xs[-1] - xs[0]) or 1))

        def sy(y: float) -> float:
            return bottom - (bottom - top) * (y - low) / (high - low)

        body = [
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#999"/>',
            f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#999"/>',
        ]
        for k in range(5):
            v = low + (high - low) * k / 4
            body.append(_text(left - 6, sy(v) + 4, f"{v:.3g}", "end"))
        step = max(1, math.ceil(len(xs) / (6 if f.narrow else 12)))
        for x in xs[::step]:
            body.append(_text(sx(x), bottom + 14, f"{x:g}", "middle"))
        for k, (name, s) in enumerate(series.items()):
            col = PALETTE[k % len(PALETTE)]
            good = [(x, y) for x, y in s if _num(y)]
            if len(good) > 1:
                d = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(good))
                body.append(f'<path d="{d}" fill="none" stroke="{col}" stroke-width="2"/>')
            for x, y in good:
                body.append(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{col}">'
                    + _tip(f"{name} @ {x:g}: {y:.3g}")
                    + "</circle>"
                )
            if not f.narrow:
                body += [
                    f'<rect x="{right + 12}" y="{top + 16 * k}" width="10" height="10" fill="{col}"/>',
                    _text(right + 26, top + 16 * k + 9, str(name)[:22]),
                ]
        h = bottom + 24
        if xlabel:
            body.append(_text((left + right) / 2, bottom + 30, xlabel, "middle"))
            h = bottom + 40
        if ylabel:
            body.append(
                f'<text x="12" y="{(top + bottom) / 2}" font-size="{SMALL}" text-anchor="middle" '
                f'transform="rotate(-90 12 {(top + bottom) / 2})">{escape(ylabel)}</text>'
            )
        if f.narrow:
            legend, n = f.legend([(str(name), PALETTE[k % len(PALETTE)]) for k, name in enumerate(series)], top=h + 6)
            body += legend
            h += 6 + 16 * n
        return h, body

    values = {name: dict(s) for name, s in series.items()}
    table = _table([xlabel or "x", *map(str, series)], [[f"{x:g}", *(values[n].get(x) for n in series)] for x in xs])
    return _figure(title, draw, table)


def grouped(groups: Sequence[dict[str, Any]], systems: Sequence[str], *, title: str) -> str:
    """Per group (feature): each system's point with interval, and the group's floor as a dashed mark."""
    per = max(1, len(systems))
    vals = [
        v
        for g in groups
        for s in systems
        for v in [(g["values"].get(s) or {}).get("hi"), (g["values"].get(s) or {}).get("value"), g.get("floor")]
        if _num(v)
    ]
    hi = max([*vals, 1.0]) * 1.05

    def draw(f: Frame) -> tuple[float, list[str]]:
        left, right, rh = f.left, f.right, 12 * per + 10 + f.above

        def sx(v: float) -> float:
            return left + (right - left) * min(max(v, 0), hi) / hi

        body, legend_rows = f.legend([(s, PALETTE[k % len(PALETTE)]) for k, s in enumerate(systems)])
        top = 14 + 16 * legend_rows
        for i, g in enumerate(groups):
            y0 = top + rh * i + f.above
            body.append(f.label(y0 + 7 if f.narrow else y0 + rh / 2, g["label"]))
            if _num(g.get("floor")):
                fx = sx(g["floor"])
                body.append(
                    f'<line x1="{fx:.1f}" y1="{y0 + 2}" x2="{fx:.1f}" y2="{y0 + rh - f.above - 4}" stroke="#333" '
                    f'stroke-dasharray="3,2">' + _tip("floor %.2f" % g["floor"]) + "</line>"
                )
            for k, s in enumerate(systems):
                v = g["values"].get(s) or {}
                y = y0 + 8 + 12 * k
                col = PALETTE[k % len(PALETTE)]
                if _num(v.get("lo")) and _num(v.get("hi")):
                    body.append(
                        f'<line x1="{sx(v["lo"]):.1f}" y1="{y}" x2="{sx(v["hi"]):.1f}" y2="{y}" stroke="{col}"/>'
                    )
                if _num(v.get("value")):
                    body.append(
                        f'<circle cx="{sx(v["value"]):.1f}" cy="{y}" r="4" fill="{col}">'
                        + _tip("%s · %s: %.2f" % (s, g["label"], v["value"]))
                        + "</circle>"
                    )
        axis = top + rh * len(groups) + 4
        body += _axis(left, right, axis, 0, hi)
        return axis + 26, body

    def shown(v: dict[str, Any] | None) -> str:
        v = v or {}
        if not _num(v.get("value")):
            return "–"
        ci = f" [{v['lo']:.2f}, {v['hi']:.2f}]" if _num(v.get("lo")) and _num(v.get("hi")) else ""
        return f"{v['value']:.2f}{ci}"

    table = _table(
        ["Feature", *systems, "Floor"],
        [[g["label"], *(shown(g["values"].get(s)) for s in systems), g.get("floor")] for g in groups],
    )
    return _figure(title, draw, table)

"""Inline SVG charts for the HTML report (issue 21): generated here as text, so the page needs no
library, no network and no script to draw them. Four shapes cover every table of the judge and
validation reports: intervals (a point with its interval per row; `spread` adds the units' p5–p95 whiskers, Table
6), stacked bars (shares or an MHQR split
into categories), lines (a value by turn or session), and grouped intervals (a distance per feature per
system against a floor)."""

from __future__ import annotations

import math
from html import escape
from typing import Any, Sequence

PALETTE = ("#3b6ea5", "#d9822b", "#4f9a5b", "#b8433e", "#7d5ba6", "#8c6d4f", "#c45ca2", "#6f7a82", "#b0a536",
           "#2fa4b5")
SEVERITY_COLOURS = {"no_concern": "#8fbf8f", "minor": "#e8c95a", "major": "#e08a3c", "critical": "#b8433e"}
W = 640  # every chart's width in px; the page scales it down on narrow screens


def _num(x: float | None) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _tip(s: str) -> str:
    return f"<title>{escape(s)}</title>"


def _svg(height: int, body: list[str], title: str) -> str:
    # The title is drawn above the chart as well as kept as the SVG's accessible name.
    h = height + 22
    return (f'<svg class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
            f'<text x="10" y="15" font-size="12" font-weight="600">{escape(title[:95])}</text>'
            '<g transform="translate(0,22)">' + "".join(body) + "</g></svg>")


def _text(x: float, y: float, s: str, anchor: str = "start", size: int = 11, cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{c}>{escape(str(s))}</text>'


def _axis(x0: float, x1: float, y: float, lo: float, hi: float, ticks: int = 5, fmt: str = "{:g}") -> list[str]:
    out = [f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#999"/>']
    for k in range(ticks + 1):
        v = lo + (hi - lo) * k / ticks
        x = x0 + (x1 - x0) * k / ticks
        out += [f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>',
                _text(x, y + 15, fmt.format(round(v, 2)), "middle", 10)]
    return out


def intervals(rows: Sequence[dict[str, Any]], *, lo: float = 0.0, hi: float = 10.0, title: str,
              xlabel: str = "", tag_key: str | None = None) -> str:
    """One row per item: label, point `value`, interval `ci`, an optional tag (the significance group)."""
    return _interval_rows(rows, lo=lo, hi=hi, title=title, xlabel=xlabel, tag_key=tag_key, ci_width=2)


def spread(rows: Sequence[dict[str, Any]], *, lo: float = 0.0, hi: float = 10.0, title: str, xlabel: str = "") -> str:
    """MindEval2 Table 6's figure: per row a point `value`, its interval `ci` as a thick bar and the spread of the
    row's units `whiskers` (p5, p95) as a thin line with caps, so a narrow interval over a wide spread reads as
    such."""
    return _interval_rows(rows, lo=lo, hi=hi, title=title, xlabel=xlabel, ci_width=5, whiskers=True)


def _interval_rows(rows: Sequence[dict[str, Any]], *, lo: float, hi: float, title: str, xlabel: str,
                   ci_width: int, tag_key: str | None = None, whiskers: bool = False) -> str:
    left, right, rh = 190, W - 40, 24
    h = 30 + rh * len(rows) + 40
    sx = lambda v: left + (right - left) * (min(max(v, lo), hi) - lo) / ((hi - lo) or 1)  # noqa: E731
    body = []
    for i, r in enumerate(rows):
        y = 30 + rh * i + rh / 2
        tag = f"[{r[tag_key]}] " if tag_key and r.get(tag_key) else ""
        body.append(_text(left - 8, y + 4, tag + str(r["label"])[:28], "end"))
        wl, wh = (r.get("whiskers") or (None, None)) if whiskers else (None, None)
        if _num(wl) and _num(wh):
            body.append(f'<line class="whisker" x1="{sx(wl):.1f}" y1="{y}" x2="{sx(wh):.1f}" y2="{y}" stroke="#999">'
                        + _tip("%s: p5 %.2f, p95 %.2f" % (r["label"], wl, wh)) + "</line>")
            body += [f'<line class="whisker" x1="{sx(v):.1f}" y1="{y - 5}" x2="{sx(v):.1f}" y2="{y + 5}" '
                     'stroke="#999"/>' for v in (wl, wh)]
        ci = r.get("ci") or [None, None]
        if _num(ci[0]) and _num(ci[1]):
            body.append(f'<line x1="{sx(ci[0]):.1f}" y1="{y}" x2="{sx(ci[1]):.1f}" y2="{y}" stroke="#555" '
                        f'stroke-width="{ci_width}"/>')
        if _num(r.get("value")):
            body.append(f'<circle cx="{sx(r["value"]):.1f}" cy="{y}" r="5" fill="{PALETTE[i % len(PALETTE)]}">' +
                        _tip("%s: %.2f" % (r["label"], r["value"])) + '</circle>')
    body += _axis(left, right, 30 + rh * len(rows) + 6, lo, hi)
    if xlabel:
        body.append(_text((left + right) / 2, h - 4, xlabel, "middle", 10))
    return _svg(h, body, title)


def stacked(rows: Sequence[dict[str, Any]], keys: Sequence[str], *, title: str, names: dict[str, str] | None = None,
            colours: dict[str, str] | None = None, total: float | None = 1.0, pct: bool = True) -> str:
    """One bar per row, segments `row["parts"][key]` in `keys` order; `total` fixes the scale (None: the
    largest row sum)."""
    names = names or {}
    left, right, rh = 190, W - 40, 22
    scale = total or max([sum(v or 0 for v in r["parts"].values()) for r in rows] + [0.0]) or 1.0
    legend_rows = math.ceil(len(keys) / 3)
    top = 14 + 16 * legend_rows
    h = top + rh * len(rows) + 30
    body = []
    for k, key in enumerate(keys):
        col = (colours or {}).get(key, PALETTE[k % len(PALETTE)])
        lx, ly = 10 + (k % 3) * 210, 12 + 16 * (k // 3)
        body += [f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{col}"/>',
                 _text(lx + 14, ly, names.get(key, key)[:32], size=10)]
    for i, r in enumerate(rows):
        y = top + rh * i
        body.append(_text(left - 8, y + 14, str(r["label"])[:28], "end"))
        x = left
        for k, key in enumerate(keys):
            v = r["parts"].get(key) or 0
            w = (right - left) * v / scale
            if w <= 0:
                continue
            col = (colours or {}).get(key, PALETTE[k % len(PALETTE)])
            shown = f"{100 * v:.1f}%" if pct else f"{v:.2f}"
            body.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{rh - 6}" fill="{col}">' +
                        _tip("%s · %s: %s" % (r["label"], names.get(key, key), shown)) + '</rect>')
            x += w
    body += _axis(left, right, top + rh * len(rows) + 4, 0, scale, fmt="{:.0%}" if pct else "{:g}")
    return _svg(h, body, title)


def lines(series: dict[str, Sequence[tuple[float, float | None]]], *, title: str, lo: float | None = None,
          hi: float | None = None, xlabel: str = "", ylabel: str = "") -> str:
    """One line per series over shared x values."""
    pts = [(x, y) for s in series.values() for x, y in s if _num(y)]
    if not pts:
        return _svg(40, [_text(10, 24, f"{title}: no data")], title)
    xs = sorted({x for x, _ in pts})
    lo = min(y for _, y in pts) if lo is None else lo
    hi = max(y for _, y in pts) if hi is None else hi
    hi = hi if hi > lo else lo + 1
    left, right, top, bottom = 50, W - 170, 16, 190
    sx = lambda x: left + (right - left) * ((x - xs[0]) / ((xs[-1] - xs[0]) or 1))  # noqa: E731
    sy = lambda y: bottom - (bottom - top) * (y - lo) / (hi - lo)  # noqa: E731
    body = [f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#999"/>',
            f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#999"/>']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        body.append(_text(left - 6, sy(v) + 4, f"{v:.3g}", "end", 10))
    step = max(1, len(xs) // 12)
    for x in xs[::step]:
        body.append(_text(sx(x), bottom + 14, f"{x:g}", "middle", 10))
    for k, (name, s) in enumerate(series.items()):
        col = PALETTE[k % len(PALETTE)]
        good = [(x, y) for x, y in s if _num(y)]
        if len(good) > 1:
            d = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(good))
            body.append(f'<path d="{d}" fill="none" stroke="{col}" stroke-width="2"/>')
        for x, y in good:
            body.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{col}">' +
                        _tip(f"{name} @ {x:g}: {y:.3g}") + '</circle>')
        body += [f'<rect x="{right + 12}" y="{top + 16 * k}" width="10" height="10" fill="{col}"/>',
                 _text(right + 26, top + 16 * k + 9, str(name)[:24], size=10)]
    if xlabel:
        body.append(_text((left + right) / 2, bottom + 30, xlabel, "middle", 10))
    if ylabel:
        body.append(f'<text x="12" y="{(top + bottom) / 2}" font-size="10" text-anchor="middle" '
                    f'transform="rotate(-90 12 {(top + bottom) / 2})">{escape(ylabel)}</text>')
    return _svg(bottom + 40, body, title)


def grouped(groups: Sequence[dict[str, Any]], systems: Sequence[str], *, title: str) -> str:
    """Per group (feature): each system's point with interval, and the group's floor as a dashed mark."""
    left, right = 190, W - 40
    per = max(1, len(systems))
    rh = 12 * per + 10
    vals = [v for g in groups for s in systems for v in [(g["values"].get(s) or {}).get("hi"),
                                                          (g["values"].get(s) or {}).get("value"), g.get("floor")]
            if _num(v)]
    hi = max(vals + [1.0]) * 1.05
    top = 14 + 16 * math.ceil(len(systems) / 3)
    h = top + rh * len(groups) + 30
    sx = lambda v: left + (right - left) * min(max(v, 0), hi) / hi  # noqa: E731
    body = []
    for k, s in enumerate(systems):
        lx, ly = 10 + (k % 3) * 210, 12 + 16 * (k // 3)
        body += [f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{PALETTE[k % len(PALETTE)]}"/>',
                 _text(lx + 14, ly, s[:30], size=10)]
    for i, g in enumerate(groups):
        y0 = top + rh * i
        body.append(_text(left - 8, y0 + rh / 2 + 4, g["label"][:28], "end"))
        if _num(g.get("floor")):
            fx = sx(g["floor"])
            body.append(f'<line x1="{fx:.1f}" y1="{y0 + 2}" x2="{fx:.1f}" y2="{y0 + rh - 4}" stroke="#333" '
                        f'stroke-dasharray="3,2">' + _tip("floor %.2f" % g["floor"]) + '</line>')
        for k, s in enumerate(systems):
            v = g["values"].get(s) or {}
            y = y0 + 8 + 12 * k
            col = PALETTE[k % len(PALETTE)]
            if _num(v.get("lo")) and _num(v.get("hi")):
                body.append(f'<line x1="{sx(v["lo"]):.1f}" y1="{y}" x2="{sx(v["hi"]):.1f}" y2="{y}" stroke="{col}"/>')
            if _num(v.get("value")):
                body.append(f'<circle cx="{sx(v["value"]):.1f}" cy="{y}" r="4" fill="{col}">' +
                            _tip("%s · %s: %.2f" % (s, g["label"], v["value"])) + '</circle>')
    body += _axis(left, right, top + rh * len(groups) + 4, 0, hi)
    return _svg(h, body, title)

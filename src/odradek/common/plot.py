"""Dependency-free SVG plots for the reports that are easier to look at than to read.

Pure functions: data in, SVG text out (no display, no matplotlib). Three chart kinds:

* `line_chart`: several (x, y) series with a legend, nice axis ticks, an optional log y axis,
  optional step drawing, and vertical dashed marker lines for events ("kill -9 broker 2");
* `bar_chart`: grouped bars (group -> series -> value) with value labels;
* `timeline`: one horizontal lane per row, coloured spans (start, end, state), e.g. partition
  leadership or partition state over time; a zero-length span is drawn as a tick;
* `stack`: several of these charts one above the other in one SVG.

`line_chart` and `timeline` take `bands`, (start, end, label) periods shaded behind the data
(the faults injected into a cluster): labelled at their start on a line chart, with the label
as a tooltip on a timeline (whose caller gives the faults a lane of their own).

`write_svg(path, svg)` writes the text. Every text is XML-escaped; non-finite numbers are
dropped (on a log axis also values <= 0 or outside 1e-300..1e300); empty inputs, single
points and equal minimum/maximum give a valid chart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["PALETTE", "bar_chart", "human", "line_chart", "nice_ticks", "stack", "timeline",
           "write_svg"]

# Okabe-Ito + Tableau extras: distinguishable, colour-blind friendly.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF")
FONT = 'font-family="Helvetica,Arial,sans-serif"'
_MAX = 1e300  # beyond this, axis arithmetic overflows; larger values are clamped
CHAR_W = 6.6  # approximate width of a 12px sans-serif character
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


# -- small pure helpers ---------------------------------------------------------------------


def esc(text: object) -> str:
    """`text` as XML character data / attribute value (quotes escaped, characters XML 1.0
    cannot hold removed)."""
    s = _BAD_XML.sub("", str(text))
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#39;"))


def _shorten(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max(1, max_chars - 1)] + "\u2026"


def text_colour(fill: str) -> str:
    """Black or white, whichever reads better on the `fill` colour (#rrggbb)."""
    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def _wrap(text: str, max_chars: int, max_lines: int = 2) -> list[str]:
    """`text` in at most `max_lines` lines of at most `max_chars` characters, broken at
    newlines, then at spaces (the last line shortened with an ellipsis when it overflows)."""
    lines: list[str] = []
    for para in text.split("\n"):
        current = ""
        for word in para.split(" "):
            if current and len(current) + 1 + len(word) > max_chars:
                lines.append(current)
                current = word
            else:
                current = f"{current} {word}" if current else word
        lines.append(current)
    if len(lines) > max_lines:
        lines = [*lines[:max_lines - 1], " ".join(lines[max_lines - 1:])]
    return [_shorten(line, max_chars) for line in lines] or [""]


def _n(v: float) -> str:
    """A coordinate: 2 decimals, no '-0'."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _finite(*values: float) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in values)


def _nice(x: float, round_: bool) -> float:
    """Heckbert's nice number: 1, 2, 5 or 10 times a power of ten near `x` (> 0)."""
    exp = math.floor(math.log10(x))
    f = x / 10.0 ** exp
    if round_:
        nf = 1.0 if f < 1.5 else 2.0 if f < 3.0 else 5.0 if f < 7.0 else 10.0
    else:
        nf = 1.0 if f <= 1.0 else 2.0 if f <= 2.0 else 5.0 if f <= 5.0 else 10.0
    return nf * 10.0 ** exp


def _expand(lo: float, hi: float) -> tuple[float, float]:
    """A non-empty range around equal ends."""
    if hi - lo > max(abs(lo), abs(hi)) * 1e-12 and hi - lo > 1e-300:
        return lo, hi
    lo = hi = lo / 2 + hi / 2  # too close to tell apart on an axis
    pad = abs(lo) * 0.1 if lo != 0 else 1.0
    return lo - pad, hi + pad


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """About `count` evenly spaced round tick values covering [lo, hi] (the first <= lo, the
    last >= hi)."""
    lo, hi = _expand(lo, hi)
    span = hi - lo
    if not math.isfinite(span):  # huge opposite-sign ends: work at half scale
        return [2 * t for t in nice_ticks(lo / 2, hi / 2, count)]
    step = _nice(_nice(span, False) / max(1, count - 1), True)
    start, end = math.floor(lo / step), math.ceil(hi / step)
    ticks = [(start + i) * step for i in range(int(end - start) + 1)]
    ticks = [t for t in ticks if math.isfinite(t)]
    if len(ticks) < 2:  # float precision exhausted: fall back to the ends
        return [lo, hi]
    return ticks


def _log_ticks(lo: float, hi: float) -> tuple[list[float], float, float]:
    """Decade ticks (with 2 and 5 when the range is narrow) and the axis ends, lo, hi > 0."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if a == b:
        a, b = a - 1, b + 1 if hi > 10.0 ** b * 0.999 else b
        b = max(b, a + 1)
    ticks = [10.0 ** e for e in range(a, b + 1)]
    if b - a <= 2:
        ticks = sorted({t * m for t in ticks for m in (1, 2, 5) if t * m <= 10.0 ** b})
    return ticks, 10.0 ** a, 10.0 ** b


def tick_label(v: float, step: float) -> str:
    """A tick value with as many significant digits as the tick step needs."""
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    if abs(v) >= 1e4 or mag < -3:
        return human(v)
    digits = max(1, mag - math.floor(math.log10(step)) + 1) if step > 0 else 3
    s = f"{v:.{min(digits, 12)}g}"
    return s if "e" not in s else human(v)


def human(v: float) -> str:
    """A compact value label: 1234 -> "1234", 12345 -> "12.3k", 2.5e6 -> "2.5M", 0.00012 ->
    "1.2e-4"."""
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    for limit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if a >= limit:
            div = limit if suffix != "k" else 1e3
            return f"{v / div:.3g}{suffix}"
    if a == 0:
        return "0"
    if a < 1e-3:
        mant, exp = f"{v:.2g}".split("e") if "e" in f"{v:.2g}" else (f"{v:.2g}", "0")
        return f"{mant}e{int(exp)}"
    if a >= 100 and float(v).is_integer():
        return str(int(v))
    return f"{v:.3g}"


class _Scale:
    """Maps a domain [d0, d1] (log10 of it when `log`) onto pixels [p0, p1], clamped."""

    def __init__(self, d0: float, d1: float, p0: float, p1: float, log: bool = False) -> None:
        self.log = log
        self.d0, self.d1 = (math.log10(d0), math.log10(d1)) if log else (d0, d1)
        self.p0, self.p1 = p0, p1

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(v) if v > 0 else self.d0
        half = (v / 2 - self.d0 / 2) / (self.d1 / 2 - self.d0 / 2)
        t = min(1.0, max(0.0, half)) if math.isfinite(half) else 0.0
        return self.p0 + t * (self.p1 - self.p0)


def _svg_open(width: int, height: int, title: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" {FONT} font-size="12">',
            f"<title>{esc(title)}</title>",
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
            f'<text x="{_n(width / 2)}" y="22" text-anchor="middle" font-size="15" '
            f'font-weight="bold">{esc(_shorten(title, int(width / 8.5)))}</text>']


def _check_size(width: int, height: int) -> None:
    if width < 200 or height < 120:
        raise ValueError(f"a chart needs width >= 200 and height >= 120, got {width}x{height}")


def _legend_column(names: Sequence[str], x: float, y: float, colours: Sequence[str],
                   max_chars: int, max_y: float, kind: str = "line") -> list[str]:
    """A legend entry per name from `y` down, as many as fit above `max_y` (then "+N more")."""
    out: list[str] = []
    fit = max(1, int((max_y - y) / 18) + 1)
    if len(names) > fit:
        fit -= 1
    for i, (name, colour) in enumerate(zip(names, colours, strict=True)):
        yy = y + i * 18
        if i >= fit:
            out.append(f'<text x="{_n(x)}" y="{_n(min(max_y, yy) + 4)}" class="legend">'
                       f"+{len(names) - i} more</text>")
            break
        if kind == "line":
            out.append(f'<line x1="{_n(x)}" y1="{_n(yy)}" x2="{_n(x + 18)}" y2="{_n(yy)}" '
                       f'stroke="{colour}" stroke-width="2.5"/>')
        else:
            out.append(f'<rect x="{_n(x + 4)}" y="{_n(yy - 5)}" width="10" height="10" '
                       f'fill="{colour}"/>')
        out.append(f'<text x="{_n(x + 24)}" y="{_n(yy + 4)}" class="legend">'
                   f"{esc(_shorten(name, max_chars))}</text>")
    return out


def _no_data(out: list[str], cx: float, cy: float) -> None:
    out.append(f'<text x="{_n(cx)}" y="{_n(cy)}" text-anchor="middle" fill="#777777">'
               "no data</text>")


def _x_axis(out: list[str], xs: _Scale, ticks: Sequence[float], top: float, bottom: float,
            label: str, width: int, height: int, left: float, right: float) -> None:
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    for t in ticks:
        px = xs(t)
        out.append(f'<line x1="{_n(px)}" y1="{_n(top)}" x2="{_n(px)}" y2="{_n(bottom)}" '
                   'stroke="#e6e6e6"/>')
        out.append(f'<text x="{_n(px)}" y="{_n(bottom + 16)}" text-anchor="middle">'
                   f"{esc(tick_label(t, step))}</text>")
    out.append(f'<line x1="{_n(left)}" y1="{_n(bottom)}" x2="{_n(right)}" y2="{_n(bottom)}" '
               'stroke="#333333"/>')
    if label:
        out.append(f'<text x="{_n((left + right) / 2)}" y="{_n(min(height - 4, bottom + 36))}" '
                   f'text-anchor="middle">{esc(_shorten(label, int(width / CHAR_W)))}</text>')


def _y_label(out: list[str], label: str, top: float, bottom: float) -> None:
    if label:
        cy = (top + bottom) / 2
        out.append(f'<text transform="translate(16,{_n(cy)}) rotate(-90)" '
                   f'text-anchor="middle">'
                   f"{esc(_shorten(label, int((bottom - top) / CHAR_W)))}</text>")


# -- line chart -----------------------------------------------------------------------------


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str,
               x_label: str, y_label: str, markers: Sequence[tuple[float, str]] = (),
               width: int = 900, height: int = 420, y_log: bool = False,
               step: bool = False, bands: Sequence[tuple[float, float, str]] = (),
               legend_chars: int | None = None) -> str:
    """Several (x, y) series with a legend. `markers` are (x, label) events drawn as vertical
    dashed lines; `y_log` plots y on a log axis (points with y <= 0 are left out); `step` draws
    each series as a step function (the value holds until the next point). `bands` are
    (start, end, label) periods (a fault that lasted) shaded behind the series, each marked and
    labelled at its start like a marker. `legend_chars` fixes the legend's width (in
    characters), so that charts stacked one above the other share their x axis."""
    _check_size(width, height)
    names = [str(n) for n in series]
    data: list[list[tuple[float, float]]] = []
    for pts in series.values():
        clean = sorted((float(x), float(y)) for x, y in pts if _finite(x, y)
                       and (not y_log or 1e-300 < y < _MAX))
        data.append(clean)
    spans = [(min(float(a), float(b)), max(float(a), float(b)), str(label))
             for a, b, label in bands if _finite(a, b)]
    marks = sorted([(float(x), str(label)) for x, label in markers if _finite(x)]
                   + [(a, label) for a, _, label in spans], key=lambda m: m[0])
    if legend_chars is None:
        legend_chars = min(28, max((len(n) for n in names), default=0))
    right_margin = 24 + (legend_chars * CHAR_W + 34 if names or legend_chars else 0)
    left, top = 72.0, 40.0
    right, bottom = width - right_margin, height - 52.0
    if right - left < 80:  # very long names on a narrow chart: legend shrinks
        legend_chars = max(4, int((width - left - 80 - 58) / CHAR_W))
        right = width - (24 + legend_chars * CHAR_W + 34)
    out = _svg_open(width, height, title)
    out.append("<style>.legend{font-size:12px}</style>")
    all_x = ([x for pts in data for x, _ in pts] + [x for x, _ in marks]
             + [b for _, b, _ in spans])
    all_y = [y for pts in data for _, y in pts]
    if not all_x:
        all_x = [0.0, 1.0]
    if y_log:
        if all_y:
            yticks, y0, y1 = _log_ticks(min(all_y), max(all_y))
        else:
            yticks, y0, y1 = [1.0, 10.0], 1.0, 10.0
    else:
        lo, hi = (min(all_y), max(all_y)) if all_y else (0.0, 1.0)
        if lo >= 0 and lo <= hi / 2:
            lo = 0.0
        elif hi <= 0 and hi >= lo / 2:
            hi = 0.0
        yticks = nice_ticks(lo, hi)
        y0, y1 = yticks[0], yticks[-1]
    xticks = nice_ticks(min(all_x), max(all_x), max(3, int((right - left) / 90)))
    xs = _Scale(xticks[0], xticks[-1], left, right)
    ys = _Scale(y0, y1, bottom, top, log=y_log)
    ystep = yticks[1] - yticks[0] if len(yticks) > 1 else 1.0
    for t in yticks:
        py = ys(t)
        out.append(f'<line x1="{_n(left)}" y1="{_n(py)}" x2="{_n(right)}" y2="{_n(py)}" '
                   'stroke="#e6e6e6"/>')
        label = human(t) if y_log else tick_label(t, ystep)
        out.append(f'<text x="{_n(left - 6)}" y="{_n(py + 4)}" text-anchor="end">'
                   f"{esc(label)}</text>")
    out.append(f'<line x1="{_n(left)}" y1="{_n(top)}" x2="{_n(left)}" y2="{_n(bottom)}" '
               'stroke="#333333"/>')
    _x_axis(out, xs, xticks, top, bottom, x_label, width, height, left, right)
    _y_label(out, y_label, top, bottom)
    for a, b, label in spans:
        x0, x1 = xs(a), xs(b)
        out.append(f'<rect class="band" x="{_n(x0)}" y="{_n(top)}" width="{_n(max(1.0, x1 - x0))}" '
                   f'height="{_n(bottom - top)}" fill="#b22222" fill-opacity="0.10">'
                   f"<title>{esc(f'{label} [{a:g}, {b:g}]')}</title></rect>")
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(names))]
    for name, pts, colour in zip(names, data, colours, strict=True):
        out.append(f'<g class="series" data-name="{esc(name)}">')
        if len(pts) == 1:
            x, y = pts[0]
            out.append(f'<circle cx="{_n(xs(x))}" cy="{_n(ys(y))}" r="3" fill="{colour}"/>')
        elif pts:
            coords: list[str] = []
            prev_py: float | None = None
            for x, y in pts:
                px, py = xs(x), ys(y)
                if step and prev_py is not None:
                    coords.append(f"{_n(px)},{_n(prev_py)}")
                coords.append(f"{_n(px)},{_n(py)}")
                prev_py = py
            out.append(f'<polyline points="{" ".join(coords)}" fill="none" stroke="{colour}" '
                       'stroke-width="2" stroke-linejoin="round"/>')
        out.append("</g>")
    placed = place_marker_labels([xs(x) for x, _ in marks],
                                 [len(_shorten(label, 40)) * MARKER_CHAR_W for _, label in marks],
                                 top + 4, bottom - 4)
    for (x, label), ty in zip(marks, placed, strict=True):
        px = xs(x)
        text = _shorten(label, 40)
        out.append(f'<g class="marker"><title>{esc(label)}</title>'
                   f'<line x1="{_n(px)}" y1="{_n(top)}" x2="{_n(px)}" '
                   f'y2="{_n(bottom)}" stroke="#b22222" stroke-width="1.2" '
                   'stroke-dasharray="5,4"/>')
        if ty is not None:  # rotated along the line, reading downwards, on a white halo
            at = f'transform="translate({_n(px + 4)},{_n(ty)}) rotate(90)" font-size="11"'
            out.append(f'<text {at} fill="#ffffff" stroke="#ffffff" stroke-width="3" '
                       f'aria-hidden="true">{esc(text)}</text>')
            out.append(f'<text {at} fill="#b22222">{esc(text)}</text>')
        out.append("</g>")
    if names:
        out.extend(_legend_column(names, right + 16, top + 8, colours, legend_chars,
                                  height - 12.0))
    if not any(data):
        _no_data(out, (left + right) / 2, (top + bottom) / 2)
    out.append("</svg>")
    return "\n".join(out) + "\n"


MARKER_CHAR_W = 6.2  # approximate advance of an 11px character along a rotated label
MARKER_LABEL_GAP = 13.0  # labels closer than this horizontally would overlap


def place_marker_labels(xs: Sequence[float], lengths: Sequence[float], top: float,
                        bottom: float) -> list[float | None]:
    """Where each marker's rotated label starts (its y), or None when it does not fit.

    Labels run down their marker line. Greedily, each label takes the highest start at which
    it overlaps no label already placed on a marker closer than MARKER_LABEL_GAP; a label that
    would run past `bottom` is left out (its marker keeps the text as a tooltip), so dense
    events never print on top of each other."""
    placed: list[tuple[float, float, float]] = []  # (x, y from, y to)
    out: list[float | None] = []
    for x, length in zip(xs, lengths, strict=True):
        y = top
        for _px, y0, y1 in sorted((p for p in placed if abs(p[0] - x) < MARKER_LABEL_GAP),
                                 key=lambda p: p[1]):
            if y + length + 4 <= y0 or y >= y1 + 4:
                continue  # no overlap with this one
            y = y1 + 6
        clash = any(abs(px - x) < MARKER_LABEL_GAP and not (y + length + 4 <= y0 or y >= y1 + 4)
                    for px, y0, y1 in placed)
        if clash or y + length > bottom:
            out.append(None)
            continue
        placed.append((x, y, y + length))
        out.append(y)
    return out


# -- bar chart ------------------------------------------------------------------------------


def _ordered_keys(groups: Iterable[Mapping[str, float]]) -> list[str]:
    seen: dict[str, None] = {}
    for g in groups:
        for k in g:
            seen.setdefault(str(k), None)
    return list(seen)


def bar_chart(groups: Mapping[str, Mapping[str, float]], *, title: str, y_label: str,
              width: int = 900, height: int = 420) -> str:
    """Grouped bars: one cluster per group, one bar per series (same colour across groups),
    each labelled with its value. The y axis always includes 0; non-finite values are left
    out."""
    _check_size(width, height)
    gnames = [str(g) for g in groups]
    snames = _ordered_keys(groups.values())
    values = [{str(k): float(v) for k, v in g.items() if _finite(v)} for g in groups.values()]
    legend_chars = min(28, max((len(n) for n in snames), default=0))
    show_legend = len(snames) > 1
    right_margin = 24 + (legend_chars * CHAR_W + 34 if show_legend else 0)
    left, top = 72.0, 40.0
    right, bottom = width - right_margin, height - 52.0
    if right - left < 80:
        legend_chars = max(4, int((width - left - 80 - 58) / CHAR_W))
        right = width - (24 + legend_chars * CHAR_W + 34)
    out = _svg_open(width, height, title)
    out.append("<style>.legend{font-size:12px}</style>")
    all_v = [v for g in values for v in g.values()]
    # 8% headroom so the value labels of the tallest bars stay above them.
    lo, hi = min([0.0, *all_v]), max([0.0, *all_v])
    pad = (hi / 2 - lo / 2) * 0.16
    top_v = min(hi + pad, _MAX) if hi > 0 else hi
    yticks = nice_ticks(max(lo - pad, -_MAX) if lo < 0 else lo, top_v)
    ys = _Scale(yticks[0], yticks[-1], bottom, top)
    ystep = yticks[1] - yticks[0]
    for t in yticks:
        py = ys(t)
        out.append(f'<line x1="{_n(left)}" y1="{_n(py)}" x2="{_n(right)}" y2="{_n(py)}" '
                   'stroke="#e6e6e6"/>')
        out.append(f'<text x="{_n(left - 6)}" y="{_n(py + 4)}" text-anchor="end">'
                   f"{esc(tick_label(t, ystep))}</text>")
    out.append(f'<line x1="{_n(left)}" y1="{_n(top)}" x2="{_n(left)}" y2="{_n(bottom)}" '
               'stroke="#333333"/>')
    _y_label(out, y_label, top, bottom)
    colours = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(snames)}
    zero = ys(0.0)
    n_groups = max(1, len(gnames))
    slot = (right - left) / n_groups
    group_chars = max(3, int(slot / CHAR_W))
    for gi, (gname, vals) in enumerate(zip(gnames, values, strict=True)):
        present = [s for s in snames if s in vals]
        x0 = left + gi * slot
        bar_w = slot * 0.8 / max(1, len(present))
        for bi, s in enumerate(present):
            v = vals[s]
            bx = x0 + slot * 0.1 + bi * bar_w
            py = ys(v)
            y_top, h = min(py, zero), abs(zero - py)
            gap = min(1.0, bar_w * 0.1)
            out.append(f'<rect class="bar" x="{_n(bx + gap)}" y="{_n(y_top)}" '
                       f'width="{_n(bar_w - 2 * gap)}" height="{_n(h)}" '
                       f'fill="{colours[s]}"><title>{esc(f"{gname} / {s}: {v:g}")}</title>'
                       "</rect>")
            if bar_w >= 10:
                ly = py - 4 if v >= 0 else py + 13
                ly = min(bottom - 2, max(top + 10, ly))
                size = 11 if bar_w >= 34 else 9
                out.append(f'<text x="{_n(bx + bar_w / 2)}" y="{_n(ly)}" text-anchor="middle" '
                           f'font-size="{size}" class="value">{esc(human(v))}</text>')
        lines = _wrap(gname, group_chars)
        out.append(f'<text x="{_n(x0 + slot / 2)}" y="{_n(bottom + 18)}" '
                   'text-anchor="middle" class="group">'
                   + "".join(f'<tspan x="{_n(x0 + slot / 2)}" dy="{0 if i == 0 else 14}">'
                             f"{esc(line)}</tspan>" for i, line in enumerate(lines))
                   + "</text>")
    out.append(f'<line x1="{_n(left)}" y1="{_n(zero)}" x2="{_n(right)}" y2="{_n(zero)}" '
               'stroke="#333333"/>')
    if show_legend:
        out.extend(_legend_column(snames, right + 16, top + 8, list(colours.values()),
                                  legend_chars, height - 12.0, kind="box"))
    if not all_v:
        _no_data(out, (left + right) / 2, (top + bottom) / 2)
    out.append("</svg>")
    return "\n".join(out) + "\n"


# -- timeline -------------------------------------------------------------------------------

LANE_H = 22.0


def timeline(rows: Mapping[str, Sequence[tuple[float, float, str]]], *, title: str,
             x_label: str, width: int = 900, height: int | None = None,
             colours: Mapping[str, str] | None = None,
             bands: Sequence[tuple[float, float, str]] = ()) -> str:
    """One horizontal lane per row; each (start, end, state) span is a bar coloured by its
    state (one colour per distinct state, with a legend) and labelled when it is wide enough.
    A span with start == end is drawn as a tick. `height` defaults to what the lanes need;
    `colours` fixes the colour ("#rrggbb") of some states, the others take the palette's;
    `bands` are (start, end, label) periods shaded across every lane."""
    names = [str(r) for r in rows]
    spans: list[list[tuple[float, float, str]]] = []
    for items in rows.values():
        spans.append([(min(float(a), float(b)), max(float(a), float(b)), str(s))
                      for a, b, s in items if _finite(a, b)])
    states: dict[str, None] = {}
    for lane in spans:
        for _, _, s in lane:
            states.setdefault(s, None)
    fixed = {str(k): v for k, v in (colours or {}).items() if re.fullmatch(r"#[0-9a-fA-F]{6}", v)}
    free = [c for c in PALETTE if c not in fixed.values()] or list(PALETTE)
    palette: dict[str, str] = {}
    for n_free, s in enumerate(x for x in states if x not in fixed):
        palette[s] = free[n_free % len(free)]
    palette.update((s, fixed[s]) for s in states if s in fixed)
    name_chars = min(30, max((len(n) for n in names), default=1))
    left = 16 + name_chars * CHAR_W
    if left > width * 0.4:
        name_chars = max(3, int((width * 0.4 - 16) / CHAR_W))
        left = 16 + name_chars * CHAR_W
    right, top = width - 24.0, 40.0
    # Legend entries wrap in rows under the x axis.
    entry_w = [24 + min(len(s), 24) * CHAR_W + 14 for s in states]
    legend_rows, cursor = 1 if states else 0, 0.0
    for w in entry_w:
        if cursor + w > right - left and cursor > 0:
            legend_rows, cursor = legend_rows + 1, 0.0
        cursor += w
    needed = top + max(1, len(names)) * LANE_H + 52 + legend_rows * 18 + 8
    if height is None:
        height = math.ceil(needed)
    _check_size(width, height)
    bottom = min(top + max(1, len(names)) * LANE_H,
                 height - 52.0 - legend_rows * 18 - 8)
    bottom = max(bottom, top + 10)
    lane_h = (bottom - top) / max(1, len(names))
    out = _svg_open(width, height, title)
    shaded = [(min(float(a), float(b)), max(float(a), float(b)), str(label))
              for a, b, label in bands if _finite(a, b)]
    all_x = ([x for lane in spans for a, b, _ in lane for x in (a, b)]
             + [x for a, b, _ in shaded for x in (a, b)]) or [0.0, 1.0]
    xticks = nice_ticks(min(all_x), max(all_x), max(3, int((right - left) / 90)))
    xs = _Scale(xticks[0], xticks[-1], left, right)
    _x_axis(out, xs, xticks, top, bottom, x_label, width, height, left, right)
    for a, b, label in shaded:
        x0, x1 = xs(a), xs(b)
        out.append(f'<g class="band"><title>{esc(f"{label} [{a:g}, {b:g}]")}</title>'
                   f'<rect x="{_n(x0)}" y="{_n(top)}" width="{_n(max(1.0, x1 - x0))}" '
                   f'height="{_n(bottom - top)}" fill="#b22222" fill-opacity="0.08"/>'
                   f'<line x1="{_n(x0)}" y1="{_n(top)}" x2="{_n(x0)}" y2="{_n(bottom)}" '
                   'stroke="#b22222" stroke-width="1" stroke-dasharray="4,3"/></g>')
    font = max(6, min(12, int(lane_h * 0.6)))
    for i, (name, lane) in enumerate(zip(names, spans, strict=True)):
        y = top + i * lane_h
        if i % 2 == 1:
            out.append(f'<rect x="{_n(left)}" y="{_n(y)}" width="{_n(right - left)}" '
                       f'height="{_n(lane_h)}" fill="#000000" fill-opacity="0.03"/>')
        out.append(f'<text x="{_n(left - 6)}" y="{_n(y + lane_h / 2 + font / 3)}" '
                   f'text-anchor="end" font-size="{font}" class="lane">'
                   f"{esc(_shorten(name, name_chars))}</text>")
        out.append(f'<g class="row" data-name="{esc(name)}">')
        pad = min(3.0, lane_h * 0.15)
        for a, b, state in sorted(lane, key=lambda s: s[0] == s[1]):  # ticks over spans
            x0, x1 = xs(a), xs(b)
            tip = esc(f"{name}: {state} [{a:g}, {b:g}]")
            if a == b:
                ends = f'x1="{_n(x0)}" y1="{_n(y + pad)}" x2="{_n(x0)}" y2="{_n(y + lane_h - pad)}"'
                out.append(f'<line {ends} stroke="#ffffff" stroke-width="4"/>')
                out.append(f'<line class="tick" {ends} stroke="{palette[state]}" '
                           f'stroke-width="2"><title>{tip}</title></line>')
                continue
            w = max(1.0, x1 - x0)
            out.append(f'<rect class="span" x="{_n(x0)}" y="{_n(y + pad)}" width="{_n(w)}" '
                       f'height="{_n(lane_h - 2 * pad)}" fill="{palette[state]}" '
                       f'fill-opacity="0.85"><title>{tip}</title></rect>')
            fits = int((w - 6) / (font * 0.55))
            if fits >= min(len(state), 4):
                out.append(f'<text x="{_n(x0 + 3)}" y="{_n(y + lane_h / 2 + font / 3)}" '
                           f'font-size="{font}" fill="{text_colour(palette[state])}">'
                           f"{esc(_shorten(state, fits))}</text>")
        out.append("</g>")
    out.append(f'<line x1="{_n(left)}" y1="{_n(top)}" x2="{_n(left)}" y2="{_n(bottom)}" '
               'stroke="#333333"/>')
    lx, ly = left, min(height - 8.0, bottom + 52)
    for state, w in zip(states, entry_w, strict=True):
        if lx + w > right and lx > left:
            lx, ly = left, min(height - 8.0, ly + 18)
        out.append(f'<rect x="{_n(lx)}" y="{_n(ly - 9)}" width="14" height="10" '
                   f'fill="{palette[state]}"/>')
        out.append(f'<text x="{_n(lx + 19)}" y="{_n(ly)}" class="legend">'
                   f"{esc(_shorten(state, 24))}</text>")
        lx += w
    if not any(spans):
        _no_data(out, (left + right) / 2, (top + bottom) / 2)
    out.append("</svg>")
    return "\n".join(out) + "\n"


_SIZE_RE = re.compile(r'<svg [^>]*?width="(\d+(?:\.\d+)?)" height="(\d+(?:\.\d+)?)"')


def stack(charts: Sequence[str], gap: int = 8) -> str:
    """Several charts of this module one above the other in one SVG (each kept whole as a
    nested <svg>, so its ids, styles and sizes stay its own)."""
    sizes: list[tuple[float, float]] = []
    for svg in charts:
        m = _SIZE_RE.search(svg)
        if m is None:
            raise ValueError("not an SVG chart of odradek.common.plot")
        sizes.append((float(m.group(1)), float(m.group(2))))
    width = max((w for w, _ in sizes), default=200.0)
    height = sum(h for _, h in sizes) + gap * max(0, len(sizes) - 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" height="{_n(height)}" '
           f'viewBox="0 0 {_n(width)} {_n(height)}">',
           f'<rect x="0" y="0" width="{_n(width)}" height="{_n(height)}" fill="#ffffff"/>']
    y = 0.0
    for svg, (_, h) in zip(charts, sizes, strict=True):
        inner = svg.replace('<svg xmlns="http://www.w3.org/2000/svg" ',
                            f'<svg x="0" y="{_n(y)}" ', 1)
        out.append(inner.strip())
        y += h + gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_svg(path: str | Path, svg: str) -> Path:
    """Write `svg` to `path` (creating its directory) and return the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(svg, encoding="utf-8")
    return p

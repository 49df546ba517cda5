"""odradek.common.plot: dependency-free SVG charts (pure; parsed back with xml.etree, no
display)."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.common.plot import bar_chart, human, line_chart, nice_ticks, timeline, write_svg

NS = "{http://www.w3.org/2000/svg}"
NUM = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return ["".join(e.itertext()) for e in root.iter(f"{NS}text")]


def view_box(root: ET.Element) -> tuple[float, float]:
    x0, y0, w, h = (float(v) for v in root.attrib["viewBox"].split())
    assert (x0, y0) == (0.0, 0.0)
    return w, h


def assert_inside(root: ET.Element) -> None:
    """Every coordinate drawn is a finite number inside the viewBox."""
    w, h = view_box(root)

    def check(x: float | None, y: float | None, what: str) -> None:
        if x is not None:
            assert math.isfinite(x) and -0.01 <= x <= w + 0.01, (what, x)
        if y is not None:
            assert math.isfinite(y) and -0.01 <= y <= h + 0.01, (what, y)

    for e in root.iter():
        a = e.attrib
        for k in ("x", "x1", "x2", "cx"):
            if k in a:
                check(float(a[k]), None, f"{e.tag} {k}")
        for k in ("y", "y1", "y2", "cy"):
            if k in a:
                check(None, float(a[k]), f"{e.tag} {k}")
        if "width" in a and "x" in a:
            assert float(a["width"]) >= 0
            check(float(a["x"]) + float(a["width"]), None, f"{e.tag} x+width")
        if "height" in a and "y" in a:
            assert float(a["height"]) >= 0
            check(None, float(a["y"]) + float(a["height"]), f"{e.tag} y+height")
        if "points" in a:
            for pair in a["points"].split():
                px, py = (float(v) for v in pair.split(","))
                check(px, py, "polyline point")
        if "transform" in a:
            m = re.search(r"translate\(([^,]+),([^)]+)\)", a["transform"])
            assert m is not None
            check(float(m.group(1)), float(m.group(2)), "translate")


# -- line chart -----------------------------------------------------------------------------


def test_line_chart_series_legend_markers() -> None:
    svg = line_chart({"acked/s": [(0, 10), (1, 12), (2, 0), (3, 11)],
                      "lag": [(0, 1), (3, 4)]},
                     title="Acked writes per second", x_label="seconds", y_label="writes/s",
                     markers=[(1.5, "kill -9 broker 2"), (2.5, "restart broker 2")])
    root = parse(svg)
    assert_inside(root)
    series = [g for g in root.iter(f"{NS}g") if g.attrib.get("class") == "series"]
    assert [g.attrib["data-name"] for g in series] == ["acked/s", "lag"]
    polylines = [p for g in series for p in g.iter(f"{NS}polyline")]
    assert len(polylines) == 2
    assert len(polylines[0].attrib["points"].split()) == 4
    # different colours per series
    assert polylines[0].attrib["stroke"] != polylines[1].attrib["stroke"]
    t = texts(root)
    assert "Acked writes per second" in t and "seconds" in t and "writes/s" in t
    assert "acked/s" in t and "lag" in t  # legend
    assert "kill -9 broker 2" in t and "restart broker 2" in t
    markers = [g for g in root.iter(f"{NS}g") if g.attrib.get("class") == "marker"]
    assert len(markers) == 2
    line = next(markers[0].iter(f"{NS}line"))
    assert line.attrib["stroke-dasharray"]
    assert float(line.attrib["x1"]) == float(line.attrib["x2"])


def test_line_chart_x_positions_follow_the_data() -> None:
    root = parse(line_chart({"s": [(0, 0), (10, 5), (20, 10)]}, title="t", x_label="x",
                            y_label="y"))
    pts = [tuple(float(v) for v in p.split(",")) for p in
           next(root.iter(f"{NS}polyline")).attrib["points"].split()]
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    assert xs[0] < xs[1] < xs[2]
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], abs=0.02)
    assert ys[0] > ys[1] > ys[2]  # SVG y grows downwards


def test_step_chart_holds_values() -> None:
    root = parse(line_chart({"s": [(0, 1), (1, 2), (2, 3)]}, title="t", x_label="x",
                            y_label="y", step=True))
    pts = next(root.iter(f"{NS}polyline")).attrib["points"].split()
    assert len(pts) == 5  # two extra corners
    assert pts[1].split(",")[1] == pts[0].split(",")[1]


def test_log_axis_ticks_are_decades_and_drop_non_positive() -> None:
    root = parse(line_chart({"p": [(50, 0.5), (99, 20.0), (99.9, 400.0), (100, 0.0)]},
                            title="latency", x_label="percentile", y_label="ms", y_log=True))
    assert_inside(root)
    t = texts(root)
    for label in ("0.1", "1", "10", "100", "1000"):
        assert label in t
    assert len(next(root.iter(f"{NS}polyline")).attrib["points"].split()) == 3


def test_escaping() -> None:
    nasty = '<script>&"\'\x01'
    svg = line_chart({nasty: [(0, 1), (1, 2)]}, title=nasty, x_label=nasty, y_label=nasty,
                     markers=[(0.5, nasty)])
    root = parse(svg)
    assert "<script>" not in svg
    assert "<script>&\"'" in texts(root)
    svg = bar_chart({nasty: {nasty: 1.0}}, title=nasty, y_label=nasty)
    assert "<script>&\"'" in texts(parse(svg))
    svg = timeline({nasty: [(0, 1, nasty)]}, title=nasty, x_label=nasty)
    assert "<script>&\"'" in texts(parse(svg))


@pytest.mark.parametrize("series", [
    {}, {"empty": []}, {"one": [(5, 5)]}, {"flat": [(0, 3), (1, 3), (2, 3)]},
    {"same x": [(1, 1), (1, 2)]}, {"neg": [(-5, -3), (-1, -10), (4, -1)]},
    {"nan": [(0, math.nan), (math.inf, 1), (1, 2)]},
])
@pytest.mark.parametrize("y_log", [False, True])
def test_line_chart_degenerate_inputs(series: dict[str, list[tuple[float, float]]],
                                      y_log: bool) -> None:
    root = parse(line_chart(series, title="t", x_label="x", y_label="y", y_log=y_log,
                            markers=[(0.0, "m")]))
    assert_inside(root)


def test_empty_chart_says_no_data() -> None:
    assert "no data" in texts(parse(line_chart({}, title="t", x_label="", y_label="")))
    assert "no data" in texts(parse(bar_chart({}, title="t", y_label="")))
    assert "no data" in texts(parse(timeline({}, title="t", x_label="")))


def test_too_small_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="width >= 200"):
        line_chart({}, title="t", x_label="x", y_label="y", width=10)


def test_many_series_legend_is_capped() -> None:
    series = {f"s{i}": [(0, i), (1, i + 1)] for i in range(40)}
    root = parse(line_chart(series, title="t", x_label="x", y_label="y"))
    assert_inside(root)
    assert any(t.endswith("more") for t in texts(root))


# -- bar chart ------------------------------------------------------------------------------


def test_bar_chart_groups_series_and_values() -> None:
    root = parse(bar_chart({"1 partition": {"p50": 1.5, "p99": 4.0},
                            "100 partitions": {"p50": 12.0, "p99": 1500.0}},
                           title="Failover", y_label="ms"))
    assert_inside(root)
    bars = [r for r in root.iter(f"{NS}rect") if r.attrib.get("class") == "bar"]
    assert len(bars) == 4
    heights = [float(b.attrib["height"]) for b in bars]
    assert heights[3] == max(heights) and heights[0] == min(heights)
    assert heights[3] / heights[2] == pytest.approx(1500 / 12, rel=0.02)
    assert bars[0].attrib["fill"] == bars[2].attrib["fill"] != bars[1].attrib["fill"]
    t = texts(root)
    assert {"1 partition", "100 partitions", "p50", "p99", "1.5", "1500", "Failover"} <= set(t)


def test_bar_chart_negative_values_hang_below_zero() -> None:
    root = parse(bar_chart({"a": {"x": -4.0, "y": 2.0}}, title="t", y_label="v"))
    assert_inside(root)
    neg, pos = (r for r in root.iter(f"{NS}rect") if r.attrib.get("class") == "bar")
    # the negative bar starts where the positive one ends (the zero line)
    assert float(neg.attrib["y"]) == pytest.approx(
        float(pos.attrib["y"]) + float(pos.attrib["height"]), abs=0.02)
    assert "-4" in texts(root)


# -- timeline -------------------------------------------------------------------------------


def test_timeline_lanes_spans_and_ticks() -> None:
    root = parse(timeline({"t-0": [(0, 5, "NewPartition"), (5, 20, "OnlinePartition"),
                                   (12, 12, "OfflineReplica")],
                           "t-1": [(3, 30, "leader 1")]},
                          title="leadership", x_label="seconds"))
    assert_inside(root)
    rows = [g for g in root.iter(f"{NS}g") if g.attrib.get("class") == "row"]
    assert [r.attrib["data-name"] for r in rows] == ["t-0", "t-1"]
    spans = [r for r in rows[0].iter(f"{NS}rect") if r.attrib.get("class") == "span"]
    assert len(spans) == 2
    assert float(spans[1].attrib["width"]) == pytest.approx(
        3 * float(spans[0].attrib["width"]), rel=0.01)
    assert len([x for x in rows[0].iter(f"{NS}line") if x.attrib.get("class") == "tick"]) == 1
    t = texts(root)
    assert {"t-0", "t-1", "NewPartition", "OnlinePartition", "OfflineReplica", "leader 1"} <= \
        set(t)
    # one colour per state
    assert spans[0].attrib["fill"] != spans[1].attrib["fill"]


def test_timeline_height_grows_with_lanes() -> None:
    small = parse(timeline({"a": [(0, 1, "x")]}, title="t", x_label="s"))
    big = parse(timeline({f"r{i}": [(0, 1, "x")] for i in range(40)}, title="t",
                         x_label="s"))
    assert view_box(big)[1] > view_box(small)[1] + 30 * 20
    assert_inside(big)


# -- helpers --------------------------------------------------------------------------------


@pytest.mark.parametrize(("lo", "hi"), [(0, 1), (0, 97), (-3, 7), (5, 5), (0, 0),
                                        (1e-9, 3e-9), (123456, 123999)])
def test_nice_ticks_cover_the_range(lo: float, hi: float) -> None:
    ticks = nice_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi and len(ticks) >= 2
    assert len(ticks) <= 12
    steps = {round((b - a) / (ticks[1] - ticks[0]), 6) for a, b in itertools.pairwise(ticks)}
    assert steps == {1.0}


def test_human_shortens_thousands_and_millions() -> None:
    assert [human(v) for v in (0, 1234, 12345, 2.5e6, 0.5, -7)] == \
        ["0", "1234", "12.3k", "2.5M", "0.5", "-7"]


def test_write_svg(tmp_path: Path) -> None:
    p = write_svg(tmp_path / "img" / "x.svg", bar_chart({"a": {"b": 1}}, title="t",
                                                        y_label="y"))
    assert p.exists()
    parse(p.read_text(encoding="utf-8"))


# -- properties -----------------------------------------------------------------------------

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
anything = st.one_of(finite, st.just(math.nan), st.just(math.inf), st.just(0.0))
names = st.text(max_size=40)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(series=st.dictionaries(names, st.lists(st.tuples(anything, anything), max_size=30),
                              max_size=8),
       markers=st.lists(st.tuples(finite, names), max_size=4),
       y_log=st.booleans(), step=st.booleans(),
       width=st.integers(200, 1600), height=st.integers(120, 900))
def test_line_chart_always_valid(series: dict[str, list[tuple[float, float]]],
                                 markers: list[tuple[float, str]], y_log: bool, step: bool,
                                 width: int, height: int) -> None:
    root = parse(line_chart(series, title="t", x_label="x", y_label="y", markers=markers,
                            width=width, height=height, y_log=y_log, step=step))
    assert_inside(root)


@settings(max_examples=80, deadline=None)
@given(groups=st.dictionaries(names, st.dictionaries(names, anything, max_size=6),
                              max_size=12),
       width=st.integers(200, 1600), height=st.integers(120, 900))
def test_bar_chart_always_valid(groups: dict[str, dict[str, float]], width: int,
                                height: int) -> None:
    assert_inside(parse(bar_chart(groups, title="t", y_label="y", width=width,
                                  height=height)))


@settings(max_examples=80, deadline=None)
@given(rows=st.dictionaries(names, st.lists(st.tuples(anything, anything, names), max_size=8),
                            max_size=12),
       width=st.integers(200, 1600),
       height=st.one_of(st.none(), st.integers(120, 900)))
def test_timeline_always_valid(rows: dict[str, list[tuple[float, float, str]]], width: int,
                               height: int | None) -> None:
    assert_inside(parse(timeline(rows, title="t", x_label="x", width=width, height=height)))


def test_timeline_fixed_colours() -> None:
    root = parse(timeline({"a": [(0, 1, "OfflinePartition"), (1, 2, "leader 0"),
                                 (2, 3, "leader 1")]},
                          title="t", x_label="s",
                          colours={"OfflinePartition": "#D55E00", "bad": "red"}))
    fills = [r.attrib["fill"] for r in root.iter(f"{NS}rect") if r.attrib.get("class") == "span"]
    assert fills[0] == "#D55E00"
    assert len(set(fills)) == 3  # the others avoid the fixed colour


@given(st.lists(st.tuples(st.floats(0, 900), st.floats(5, 200)), max_size=40))
def test_marker_labels_never_overlap(labels: list[tuple[float, float]]) -> None:
    from odradek.common.plot import MARKER_LABEL_GAP, place_marker_labels

    xs = [x for x, _ in labels]
    lengths = [n for _, n in labels]
    ys = place_marker_labels(xs, lengths, 40.0, 360.0)
    spans = [(x, y, y + n) for (x, n), y in zip(labels, ys, strict=True) if y is not None]
    for y, (_, n) in zip(ys, labels, strict=True):
        assert y is None or (y >= 40.0 and y + n <= 360.0)
    for i, (xa, a0, a1) in enumerate(spans):
        for xb, b0, b1 in spans[i + 1:]:
            if abs(xa - xb) < MARKER_LABEL_GAP:
                assert a1 + 4 <= b0 or b1 + 4 <= a0


def test_dense_markers_keep_every_label_as_a_tooltip() -> None:
    marks = [(i * 0.5, f"kill -9 broker {i}") for i in range(40)]
    root = parse(line_chart({"s": [(0, 1), (20, 2)]}, title="t", x_label="x", y_label="y",
                            markers=marks))
    groups = [g for g in root.iter(f"{NS}g") if g.attrib.get("class") == "marker"]
    assert len(groups) == 40
    assert all(next(g.iter(f"{NS}title")).text == label
               for g, (_, label) in zip(groups, marks, strict=True))

"""The plot additions the checker's picture uses: shaded fault bands on line charts and
timelines, a fixed legend width, charts stacked in one SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from odradek.common.plot import line_chart, stack, timeline

NS = "{http://www.w3.org/2000/svg}"


def _bands(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter() if e.attrib.get("class") == "band"]


def test_line_chart_bands_are_shaded_and_labelled_at_their_start() -> None:
    svg = line_chart({"acks": [(0, 1), (10, 2)]}, title="t", x_label="s", y_label="n",
                     bands=[(2, 5, "kill broker-1"), (7, 7, "elect-leaders"),
                            (float("nan"), 3, "bad")])
    root = ET.fromstring(svg)
    bands = _bands(root)
    assert len(bands) == 2  # the non-finite one is left out
    assert float(bands[0].attrib["width"]) > float(bands[1].attrib["width"]) >= 1.0
    labels = [t.text for t in root.iter(f"{NS}text")]
    assert "kill broker-1" in labels and "elect-leaders" in labels
    # a band past the data widens the x axis to hold it
    wide = ET.fromstring(line_chart({"a": [(0, 1), (1, 1)]}, title="t", x_label="", y_label="",
                                    bands=[(0.5, 30, "pause broker-2")]))
    ticks = [t.text for t in wide.iter(f"{NS}text")]
    assert "30" in ticks


def test_timeline_bands_cross_every_lane_with_a_tooltip() -> None:
    svg = timeline({"p-0": [(0, 4, "leader 1")], "p-1": [(0, 4, "leader 2")]}, title="t",
                   x_label="s", bands=[(1, 2, "pause broker-1")])
    root = ET.fromstring(svg)
    (band,) = _bands(root)
    assert band.findtext(f"{NS}title") == "pause broker-1 [1, 2]"
    rect = band.find(f"{NS}rect")
    assert rect is not None and float(rect.attrib["height"]) >= 2 * 20


def test_legend_chars_align_stacked_charts() -> None:
    a = line_chart({"x": [(0, 1), (5, 1)]}, title="a", x_label="", y_label="", legend_chars=20)
    b = line_chart({"a much longer series name": [(0, 1), (5, 1)]}, title="b", x_label="",
                   y_label="", legend_chars=20)

    def right_end(svg: str) -> float:
        axis = [e for e in ET.fromstring(svg).iter(f"{NS}line")
                if e.attrib.get("stroke") == "#333333" and e.attrib["y1"] == e.attrib["y2"]]
        return float(axis[0].attrib["x2"])
    assert right_end(a) == right_end(b)


def test_stack_nests_the_charts_one_under_the_other() -> None:
    a = line_chart({"x": [(0, 1)]}, title="a", x_label="", y_label="", width=900, height=300)
    b = timeline({"r": [(0, 1, "s")]}, title="b", x_label="", width=1000)
    root = ET.fromstring(stack([a, b], gap=10))
    charts = root.findall(f"{NS}svg")
    assert [c.findtext(f"{NS}title") for c in charts] == ["a", "b"]
    assert [float(c.attrib["y"]) for c in charts] == [0.0, 310.0]
    assert float(root.attrib["width"]) == 1000
    assert float(root.attrib["height"]) == 310 + float(charts[1].attrib["height"])
    with pytest.raises(ValueError):
        stack(["<p>not a chart</p>"])

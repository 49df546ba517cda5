"""`odradek state-change-log --plot` (S-6.5): the merged, filtered lines of a hand-written pair
of state-change.log files drawn as a timeline, one lane per partition, spans by leader or
partition state, replica state changes as ticks."""

from __future__ import annotations

import argparse
import itertools
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from odradek.tools import state_change_log
from odradek.tools.state_change_log import (
    Change,
    parse_change,
    state_change_plot,
    timeline_rows,
)

NS = "{http://www.w3.org/2000/svg}"
DAY = "2026-11-21 23:38"


def main(argv: list[str]) -> int:
    """The tool's own argparse entry (what `odradek state-change-log ...` runs), without
    importing the other tools."""
    parser = argparse.ArgumentParser(prog="odradek")
    state_change_log.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def ctrl(t: str, msg: str) -> str:
    return f"[{DAY}:{t}] INFO [Controller id=0 epoch=1] {msg} (state.change.logger)"


def brk(b: int, t: str, msg: str) -> str:
    return f"[{DAY}:{t}] INFO [Broker id={b} epoch=1] {msg} (state.change.logger)"


BROKER_0 = [
    ctrl("44,000", "Changed partition t-0 state from NonExistentPartition to NewPartition"),
    ctrl("44,000", "Changed partition t-1 state from NonExistentPartition to NewPartition"),
    ctrl("44,000", "Changed partition u-0 state from NonExistentPartition to NewPartition"),
    ctrl("44,000", "Changed state of replica 1 for partition t-1 from NonExistentReplica to "
                   "NewReplica"),
    ctrl("44,500", "Changed partition t-0 state from NewPartition to OnlinePartition with "
                   "leader=0 leader_epoch=0 isr=[0,1]"),
    ctrl("44,500", "Changed partition t-1 state from NewPartition to OnlinePartition with "
                   "leader=1 leader_epoch=0 isr=[1,0]"),
    ctrl("44,500", "Changed partition u-0 state from NewPartition to OnlinePartition with "
                   "leader=0 leader_epoch=0 isr=[0]"),
    "java.lang.IllegalStateException: a stack trace line without a time",
    ctrl("46,000", "Changed state of replica 1 for partition t-1 from OnlineReplica to "
                   "OfflineReplica"),
    ctrl("46,000", "Changed partition t-1 state from OnlinePartition to OfflinePartition"),
    ctrl("47,000", "Changed partition t-1 state from OfflinePartition to OnlinePartition with "
                   "leader=0 leader_epoch=1 isr=[0]"),
    ctrl("48,500", "Changed state of replica 1 for partition t-1 from OfflineReplica to "
                   "OnlineReplica"),
]
BROKER_1 = [
    brk(1, "44,600", "Changed partition t-1 state from NonExistent to Leader with leader=1 "
                     "leader_epoch=0 isr=[1,0] (LeaderAndIsr correlationId 1 from controller 0)"),
    brk(1, "44,600", "Changed partition t-0 state from NonExistent to Follower with leader=0 "
                     "leader_epoch=0 isr=[0,1] (LeaderAndIsr correlationId 1 from controller 0)"),
    brk(1, "49,000", "Changed partition t-1 state from NonExistent to Follower with leader=0 "
                     "leader_epoch=1 isr=[0,1] (LeaderAndIsr correlationId 2 from controller 0)"),
]


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    for b, lines in ((0, BROKER_0), (1, BROKER_1)):
        (tmp_path / f"broker-{b}").mkdir()
        (tmp_path / f"broker-{b}" / "state-change.log").write_text("\n".join(lines) + "\n")
    return tmp_path


def lanes(svg_path: Path, chart: int = 0) -> dict[str, list[tuple[str, float, float, float]]]:
    """row -> [(state, x, width, y)] for spans (width > 0) and ticks (width 0), from the SVG
    (from its `chart`-th chart when it stacks several)."""
    root = ET.parse(svg_path).getroot()
    charts = root.findall(f"{NS}svg")
    if charts:
        root = charts[chart]
    out: dict[str, list[tuple[str, float, float, float]]] = {}
    for g in root.iter(f"{NS}g"):
        if g.attrib.get("class") != "row":
            continue
        items = out.setdefault(g.attrib["data-name"], [])
        for e in g:
            title = e.find(f"{NS}title")
            if title is None:
                continue
            state = re.match(r"[^:]+: (.*) \[", title.text or "")
            assert state is not None
            if e.tag == f"{NS}rect":
                items.append((state.group(1), float(e.attrib["x"]), float(e.attrib["width"]),
                              float(e.attrib["y"])))
            else:
                items.append((state.group(1), float(e.attrib["x1"]), 0.0,
                              float(e.attrib["y1"])))
    return out


def test_plot_has_a_lane_per_partition(logs: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    svg = tmp_path / "out" / "changes.svg"
    assert main(["state-change-log", "--logs", str(logs), "--topic", "t",
                 "--plot", str(svg)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 12  # the text output is unchanged
    assert "Plot of 2 partition(s) written to" in captured.err
    rows = lanes(svg)
    assert list(rows) == ["t-0", "t-1"]  # u-0 filtered out by --topic
    t0 = [(s, w > 0) for s, _, w, _ in rows["t-0"]]
    assert t0 == [("NewPartition", True), ("leader 0", True)]
    t1 = rows["t-1"]
    spans = [(s, x, w) for s, x, w, _ in t1 if w > 0]
    ticks = [s for s, _, w, _ in t1 if w == 0]
    assert [s for s, _, _ in spans] == ["NewPartition", "leader 1", "OfflinePartition",
                                        "leader 0"]
    assert ticks == ["NewReplica", "OfflineReplica", "OnlineReplica"]
    # durations 0.5 s, 1.5 s, 1 s, 2 s (until the last line): widths in the same ratio
    widths = [w for _, _, w in spans]
    assert widths[1] / widths[0] == pytest.approx(3.0, rel=0.02)
    assert widths[3] / widths[2] == pytest.approx(2.0, rel=0.02)
    # contiguous spans, lanes one under the other
    for (_, x, w), (_, nx, _) in itertools.pairwise(spans):
        assert x + w == pytest.approx(nx, abs=0.05)
    assert rows["t-0"][0][3] < t1[0][3]


def test_plot_with_partitions_filter_and_output_dir(logs: Path, tmp_path: Path) -> None:
    svg = tmp_path / "p.svg"
    assert main(["state-change-log", "--logs", str(logs), "--topic", "t", "--partitions", "1",
                 "--output", str(tmp_path / "merged"), "--plot", str(svg)]) == 0
    assert list(lanes(svg)) == ["t-1"]
    assert (tmp_path / "merged" / "merged-state-change.log").exists()


def test_plot_with_spark_engine_is_a_clear_error(logs: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["state-change-log", "--logs", str(logs), "--engine", "spark",
                 "--plot", str(tmp_path / "x.svg")]) == 2
    assert "--plot works with --engine local only" in capsys.readouterr().err


def test_parse_change_kinds() -> None:
    assert parse_change("broker-0/state-change.log: " + BROKER_0[4]) == Change(
        f"{DAY}:44,500", ("t", 0), state="OnlinePartition", leader=0, isr=(0, 1))
    assert parse_change(BROKER_0[3]) == Change(f"{DAY}:44,000", ("t", 1),
                                               replica_state="NewReplica")
    assert parse_change(BROKER_1[0]) == Change(f"{DAY}:44,600", ("t", 1), leader=1,
                                               isr=(1, 0))
    assert parse_change(BROKER_0[7]) is None
    assert parse_change(ctrl("45,000", "Resigned")) is None


def test_lanes_are_capped_and_the_title_says_so() -> None:
    changes = [Change(f"{DAY}:44,{i:03d}", ("many", i), state="OnlinePartition", leader=i % 3)
               for i in range(50)]
    rows, total, first = timeline_rows(changes, max_lanes=40)
    assert len(rows) == 40 and total == 50 and first == f"{DAY}:44,000"
    svg = state_change_plot(changes)
    root = ET.fromstring(svg)
    assert len([g for g in root.iter(f"{NS}g") if g.attrib.get("class") == "row"]) == 40
    assert "(first 40 of 50 partitions)" in svg

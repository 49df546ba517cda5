"""`state-change-log --plot` with the faults marked: ISR size over time and
offline periods per partition from parsed lines, the fault lanes and bands, the faults.log
found beside the logs or given with --faults."""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from odradek.common.fault_log import FaultEvent, FaultLog
from odradek.tools import state_change_log
from odradek.tools.state_change_log import (
    Change,
    epoch_seconds,
    fault_rows,
    faults_beside,
    isr_rows,
    isr_series,
    offline_periods,
    parse_change,
    state_change_plot,
)

NS = "{http://www.w3.org/2000/svg}"
DAY = "2026-11-21 23:38"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="odradek")
    state_change_log.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def at(s: int, ms: int = 0) -> str:
    return f"{DAY}:{s:02d},{ms:03d}"


def line(actor: str, t: str, msg: str) -> str:
    return f"[{t}] INFO [{actor} id=0 epoch=1] {msg} (state.change.logger)"


def test_parse_the_isr_of_each_kind_of_line() -> None:
    sent = line("Controller", at(1), "Sending LeaderAndIsr request to broker 1 for partition "
                "c-0: leader=0 leader_epoch=0 isr=[0, 1, 2] replicas=[0, 1, 2]")
    assert parse_change(sent) == Change(at(1), ("c", 0), isr=(0, 1, 2))
    removed = line("Controller", at(2), "Removed replica 1 from the ISR of partition c-0: "
                   "leader=0 leader_epoch=1 isr=[0,2]")
    assert parse_change(removed) == Change(at(2), ("c", 0), isr=(0, 2))
    updated = line("Broker", at(3), "[Partition c-0 broker=0] ISR of partition c-0 updated to "
                   "0,2,1 and zkVersion updated to 2")
    assert parse_change(updated) == Change(at(3), ("c", 0), isr=(0, 2, 1))
    proposal = line("Broker", at(4), "[Partition c-0 broker=0] Shrinking ISR of partition c-0 "
                    "from 0,2,1 to 0,2. Leader: (highWatermark: 5, endOffset: 9).")
    assert parse_change(proposal) is None  # not committed yet
    empty = line("Controller", at(5), "Changed partition c-1 state from OnlinePartition to "
                 "OnlinePartition with leader=-1 leader_epoch=3 isr=[]")
    assert parse_change(empty) == Change(at(5), ("c", 1), state="OnlinePartition", leader=-1,
                                         isr=())


CHANGES = [
    Change(at(0), ("c", 0), state="OnlinePartition", leader=0, isr=(0, 1, 2)),
    Change(at(0), ("c", 1), state="OnlinePartition", leader=1, isr=(1, 2, 0)),
    Change(at(2), ("c", 0), isr=(0, 2)),  # 1 left the ISR
    Change(at(2, 500), ("c", 0), isr=(0, 2)),  # the same size again: no new point
    Change(at(3), ("c", 1), state="OfflinePartition"),
    Change(at(5), ("c", 1), state="OnlinePartition", leader=2, isr=(2,)),
    Change(at(6), ("c", 0), isr=(0, 2, 1)),
    Change(at(7), ("c", 0), leader=-1),  # a LeaderAndIsr with no leader
    Change(at(9), ("c", 1), leader=2),
]


def test_isr_series_is_a_point_per_size_change() -> None:
    assert isr_series(CHANGES) == {"c-0": [(0.0, 3), (2.0, 2), (6.0, 3)],
                                   "c-1": [(0.0, 3), (5.0, 1)]}


def test_offline_periods_from_offline_state_or_leader_minus_1() -> None:
    assert offline_periods(CHANGES) == {"c-1": [(3.0, 5.0)], "c-0": [(7.0, 9.0)]}
    assert offline_periods([]) == {}


def test_isr_rows_span_each_size_until_the_next_with_offline_over_them() -> None:
    rows = isr_rows(CHANGES)
    assert rows["c-0"] == [(0.0, 2.0, "ISR 3"), (2.0, 6.0, "ISR 2"), (6.0, 9.0, "ISR 3"),
                           (7.0, 9.0, "offline")]
    assert rows["c-1"] == [(0.0, 5.0, "ISR 3"), (5.0, 9.0, "ISR 1"), (3.0, 5.0, "offline")]
    assert list(isr_rows(CHANGES, max_lanes=1)) == ["c-0"]


def test_fault_rows_put_faults_on_the_log_time_axis() -> None:
    t0 = epoch_seconds(at(0))
    events = [FaultEvent("kill", "start", ("broker-1",), fault_id=1, time=t0 + 1),
              FaultEvent("kill", "end", ("broker-1",), fault_id=1, time=t0 + 4),
              FaultEvent("pause", "start", ("broker-2",), "SIGSTOP", fault_id=2, time=t0 + 6),
              FaultEvent("elect-leaders", "instant", (), fault_id=3, time=t0 + 5)]
    lanes, bands = fault_rows(events, t0, end=9.0)
    assert lanes == {"fault broker-1": [(1.0, 4.0, "kill")],
                     "fault broker-2": [(6.0, 9.0, "pause")],
                     "fault cluster": [(5.0, 5.0, "elect-leaders")]}
    assert bands == [(1.0, 4.0, "kill broker-1"), (5.0, 5.0, "elect-leaders"),
                     (6.0, 9.0, "pause broker-2 (SIGSTOP)")]


def _rows(root: ET.Element) -> list[str]:
    return [g.attrib["data-name"] for g in root.iter(f"{NS}g") if g.attrib.get("class") == "row"]


def test_plot_stacks_states_and_isr_with_the_faults() -> None:
    t0 = epoch_seconds(at(0))
    faults = [FaultEvent("kill", "start", ("broker-1",), fault_id=1, time=t0 + 1),
              FaultEvent("kill", "end", ("broker-1",), fault_id=1, time=t0 + 4)]
    root = ET.fromstring(state_change_plot(CHANGES, faults=faults))
    states, isr = root.findall(f"{NS}svg")
    assert _rows(states) == ["fault broker-1", "c-0", "c-1"]
    assert _rows(isr) == ["fault broker-1", "c-0", "c-1"]
    for chart in (states, isr):
        bands = [g for g in chart.iter(f"{NS}g") if g.attrib.get("class") == "band"]
        assert len(bands) == 1 and "kill broker-1" in (bands[0].findtext(f"{NS}title") or "")
    titles = [t.text or "" for t in isr.iter(f"{NS}title")]
    assert any(t.startswith("c-1: offline [3, 5]") for t in titles)
    assert any(t.startswith("c-0: ISR 2 [2, 6]") for t in titles)
    # no ISR in the lines: the one timeline of before, no faults: no fault lanes
    plain = ET.fromstring(state_change_plot([Change(at(0), ("c", 0), leader=0)]))
    assert plain.findall(f"{NS}svg") == [] and _rows(plain) == ["c-0"]


def _logs(tmp_path: Path) -> Path:
    brokers = tmp_path / "run" / "brokers"
    d = brokers / "broker-0" / "logs"
    d.mkdir(parents=True)
    (d / "state-change.log").write_text("\n".join([
        line("Controller", at(0), "Changed partition c-0 state from NewPartition to "
             "OnlinePartition with leader=0 leader_epoch=0 isr=[0,1]"),
        line("Controller", at(3), "Removed replica 1 from the ISR of partition c-0: leader=0 "
             "leader_epoch=1 isr=[0]"),
        line("Controller", at(8), "Changed partition c-0 state from OnlinePartition to "
             "OfflinePartition"),
    ]) + "\n")
    return brokers


def test_faults_log_found_beside_the_logs(tmp_path: Path) -> None:
    brokers = _logs(tmp_path)
    assert faults_beside([str(brokers)]) is None
    (brokers / "faults.log").write_text("")
    log_file = brokers / "broker-0" / "logs" / "state-change.log"
    assert faults_beside([str(log_file)]) == (brokers / "faults.log").resolve()
    assert faults_beside([str(brokers)]) == (brokers / "faults.log").resolve()


def test_plot_marks_the_faults_of_the_run(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    brokers = _logs(tmp_path)
    log = FaultLog(brokers / "faults.log")
    fid = log.start("pause", ["broker-1"], "SIGSTOP")
    svg = tmp_path / "plot.svg"
    assert main(["state-change-log", "--logs", str(brokers), "--plot", str(svg)]) == 0
    assert "Marking 1 fault(s) from" in capsys.readouterr().err
    text = svg.read_text()
    assert "fault broker-1" in text and 'class="band"' in text
    log.end(fid, "pause", ["broker-1"])
    other = tmp_path / "elsewhere.log"
    FaultLog(other).instant("kill", ["broker-0"])
    assert main(["state-change-log", "--logs", str(brokers), "--plot", str(svg),
                 "--faults", str(other)]) == 0
    text = svg.read_text()
    assert "fault broker-0" in text and "fault broker-1" not in text


def test_faults_flag_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    brokers = _logs(tmp_path)
    assert main(["state-change-log", "--logs", str(brokers), "--faults",
                 str(tmp_path / "x.log")]) == 2
    assert "--faults goes with --plot" in capsys.readouterr().err
    assert main(["state-change-log", "--logs", str(brokers), "--plot", str(tmp_path / "p.svg"),
                 "--faults", str(tmp_path / "missing.log")]) == 2
    assert "no such file" in capsys.readouterr().err

"""The fault log's format: events round-trip, torn lines are skipped, spans pair by id."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.common.fault_log import FaultEvent, FaultLog, fault_spans, read_fault_events


def test_events_round_trip_and_pair_into_spans(tmp_path: Path) -> None:
    log = FaultLog(tmp_path / "faults.log")
    fid = log.start("partition", ["broker-1", "store"], "leader of t-0 cut off")
    log.instant("kill", ["broker-2"])
    log.end(fid, "partition", ["broker-1", "store"])
    open_id = log.start("pause", ["broker-3"])
    events = read_fault_events(log.path)
    assert [(e.kind, e.phase) for e in events] == [
        ("partition", "start"), ("kill", "instant"), ("partition", "end"), ("pause", "start")]
    assert events[0].targets == ("broker-1", "store")
    spans = fault_spans(events)
    assert [(s.kind, s.end is None) for s in spans] == [
        ("partition", False), ("kill", False), ("pause", True)]
    assert spans[0].end is not None and spans[0].end >= spans[0].start
    assert open_id != fid


def test_a_torn_last_line_and_garbage_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "faults.log"
    good = FaultEvent("kill", "instant", ("broker-1",), time=1.0)
    path.write_text(good.to_json() + "\nnot json\n" + good.to_json()[:20])
    assert read_fault_events(path) == [good]
    assert read_fault_events(tmp_path / "missing.log") == []


def test_a_bad_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="phase"):
        FaultEvent("kill", "middle")  # type: ignore[arg-type]

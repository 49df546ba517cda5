"""The chaos report's check of acknowledged values against what was read back (pure):
librdkafka may deliver a message without an offset (a resent batch that a later batch's ack
proved written), and such a value counts as delivered if it is in its partition."""

from __future__ import annotations

from odradek.chaos.checker.verdict import ChaosReport, check_values
from odradek.chaos.config import ChaosConfig
from odradek.chaos.workload import ProducerStats


def _report(acked: dict[str, tuple[int, int | None]],
            read: dict[int, list[tuple[int, str]]]) -> ChaosReport:
    report = ChaosReport(ChaosConfig())
    check_values(report, [ProducerStats(0, sent=len(acked), acked=acked)], read)
    return report


def test_values_are_checked_at_their_acknowledged_offsets() -> None:
    r = _report({"a": (0, 0), "b": (0, 1), "c": (1, 0)},
                {0: [(0, "a"), (1, "b")], 1: [(0, "c")]})
    assert (r.acked, r.lost, r.misplaced, r.duplicates) == (3, [], [], 0)
    assert r.acked_end == {0: 2, 1: 1} and r.acked_without_offset == 0


def test_a_value_delivered_without_an_offset_needs_only_its_partition() -> None:
    r = _report({"a": (0, 0), "b": (0, None), "c": (1, None)},
                {0: [(0, "a"), (1, "b")], 1: [(7, "x")]})
    assert r.acked_without_offset == 2
    assert r.lost == ["c@p1:?"] and r.misplaced == []
    assert r.acked_end == {0: 1}  # only known offsets bound the HW check


def test_a_value_without_an_offset_read_in_another_partition_is_misplaced() -> None:
    r = _report({"b": (0, None)}, {1: [(0, "b")]})
    assert r.misplaced == ["b@p0:?"] and r.lost == []


def test_misplaced_and_lost_at_known_offsets() -> None:
    r = _report({"a": (0, 0), "b": (0, 1)}, {0: [(0, "b")]})
    assert r.misplaced == ["b@p0:1"] and r.lost == ["a@p0:0"]

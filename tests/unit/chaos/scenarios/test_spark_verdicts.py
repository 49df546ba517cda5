"""`odradek chaos --spark`'s verdict without a cluster: a history like the scenario records
(the feed's sends, read_committed reads of the output) judged with each sink's guarantees,
the summary line and the plot."""

from __future__ import annotations

from pathlib import Path

from odradek.chaos.checker.consistency import check, through_pipeline
from odradek.chaos.checker.history import History
from odradek.chaos.scenarios.spark import SparkChaosResult, plot_results, sink_guarantees


def _run(guarantee: str, output: dict[int, list[tuple[int, str]]]) -> SparkChaosResult:
    h = History()
    for i in range(4):
        op = h.invoke("chaos-producer-0", "send", f"p0-{i}")
        h.ok(op, offset=i, partition=i % 2)
    for p, entries in output.items():
        for offset, value in entries:
            h.read("chaos-consumer-0", p, offset, value)
    report = check(through_pipeline(h, str.upper), sink_guarantees(guarantee), output)
    return SparkChaosResult(guarantee, report, h, aborted_records=3,
                            events=[(1.0, "kill -9 worker 0 (and its executor)")],
                            batches=[(2.0, 4, 900)], seconds=5.0)


def test_duplicates_fail_exactly_once_and_are_expected_at_least_once(tmp_path: Path) -> None:
    doubled = {0: [(0, "P0-0"), (1, "P0-1"), (3, "P0-1")], 1: [(0, "P0-2"), (2, "P0-3")]}
    eos, alo = _run("exactly-once", doubled), _run("at-least-once", doubled)
    assert not eos.ok and eos.consistency.row("duplicates").verdict == "FAIL"
    assert alo.ok and alo.consistency.row("duplicates").verdict == "expected"
    assert "duplicates 1 (expected)" in alo.summary() and alo.summary().startswith(
        "spark at-least-once: OK: 4 acknowledged inputs, lost 0 (ok)")
    assert "3 aborted records in the log" in eos.summary()
    svg = plot_results([eos, alo], str(tmp_path / "spark.svg")).read_text()
    assert "<svg" in svg and "at-least-once" in svg


def test_a_lost_input_fails_both() -> None:
    short = {0: [(0, "P0-0"), (1, "P0-1")], 1: [(0, "P0-2")]}
    for g in ("exactly-once", "at-least-once"):
        r = _run(g, short)
        assert not r.ok and r.observed("lost") == 1, r.summary()

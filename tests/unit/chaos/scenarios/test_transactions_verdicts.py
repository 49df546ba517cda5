"""The verdicts of `odradek chaos --transactions` (chaos/scenarios/transactions.py): the coordinator
partition the fault injector kills is the one the brokers use, and the output check catches
every way an exactly-once pipeline can go wrong."""

from __future__ import annotations

import pytest

from odradek.chaos.scenarios.transactions import (
    TxnChaosConfig,
    TxnChaosReport,
    check_output,
    coordinator_partition,
)
from odradek.coordinator.offsets import java_string_hashcode, kafka_abs
from odradek.coordinator.transaction_state import partition_for


@pytest.mark.parametrize("key", ["txn-pipeline-0", "txn-pipeline-1", "txn-pipeline", "", "a",
                                 "polygenelubricants", "x" * 40, "GydZG_", "DESIGNING WORKHOUSES"])
@pytest.mark.parametrize("partitions", [1, 6, 50])
def test_coordinator_partition_is_kafkas(key: str, partitions: int) -> None:
    assert coordinator_partition(key, partitions) == partition_for(key, partitions)
    assert coordinator_partition(key, partitions) == (
        kafka_abs(java_string_hashcode(key)) % partitions)


def report_for(committed: list[str], uncommitted: list[str], values: int = 4) -> TxnChaosReport:
    report = TxnChaosReport(TxnChaosConfig(values=values))
    check_output(report, [(0, i, v) for i, v in enumerate(committed)],
                 [(0, i, v) for i, v in enumerate(uncommitted)])
    return report


GOOD = ["out:v0", "out:v1", "out:v2", "out:v3"]
MARKER = "ABORTED-txn-pipeline-0-5-p0"


def test_exactly_once_output_passes() -> None:
    r = report_for(GOOD, [*GOOD, MARKER, "out:v1"])
    assert (r.missing, r.duplicates, r.aborted_visible, r.unexpected) == ([], [], [], [])
    assert r.markers_uncommitted == 1 and r.committed_read == 4 and r.uncommitted_read == 6


@pytest.mark.parametrize(("committed", "field", "expected"), [
    (GOOD[:3], "missing", ["out:v3"]),
    ([*GOOD, "out:v2"], "duplicates", ["out:v2"]),
    ([*GOOD, MARKER], "aborted_visible", [MARKER]),
    ([*GOOD, "out:v9"], "unexpected", ["out:v9"]),
])
def test_each_violation_fails_the_run(committed: list[str], field: str,
                                      expected: list[str]) -> None:
    r = report_for(committed, [*committed, MARKER])
    assert getattr(r, field) == expected
    assert not r.ok


def test_no_marker_read_uncommitted_fails_the_run() -> None:
    r = report_for(GOOD, GOOD)
    assert any("aborts were not tested" in f for f in r.failures)


def test_the_command_checks_transactional_fault_names(capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.cli import main

    assert main(["chaos", "--transactions", "--faults", "kill_pipeline,bogus"]) == 2
    assert "unknown transactional faults ['bogus']" in capsys.readouterr().err
    # The transactional faults are not the replication run's.
    assert main(["chaos", "--faults", "kill_pipeline"]) == 2
    assert "unknown faults ['kill_pipeline']" in capsys.readouterr().err


def test_commit_times_and_the_commits_chart(tmp_path: pytest.TempPathFactory) -> None:
    """The pipelines' `committed ... @<time>` lines give the commit times (other lines, and
    one without a time, are skipped); --plot draws commits per second with the faults marked."""
    from pathlib import Path

    from odradek.chaos.environment.process_faults import FaultRecord
    from odradek.chaos.scenarios.transactions import PipelineProcess, plot_txn_report

    work = Path(str(tmp_path))
    pl = PipelineProcess(0, work, [])
    pl.out_path.write_text("ready @100.000\ncommitted 20 @100.500\naborted 20 @101.000\n"
                           "committed 20 @102.250\ncommitted 20 @\n")
    assert pl.commit_times() == [100.5, 102.25]
    report = TxnChaosReport(TxnChaosConfig(values=10))
    report.commit_times_s = [0.2, 0.7, 0.9, 3.5]
    report.faults = [FaultRecord(1.5, "kill_txn_coordinator", 1)]
    out = work / "commits.svg"
    plot_txn_report(report, str(out))
    svg = out.read_text()
    assert svg.startswith("<svg") and "kill_txn_coordinator" in svg and "commits/s" in svg
    with pytest.raises(ValueError):
        plot_txn_report(TxnChaosReport(TxnChaosConfig(values=10)), str(out))

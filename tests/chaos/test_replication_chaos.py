"""Replication under faults (S-3.5, S-3.7, S-4.1): broker processes on a real
ZooKeeper, RF 3, min.insync.replicas 2, unclean election off; idempotent acks=all producers
write unique values while each fault kind happens twice — kill -9 of a partition leader, kill -9
of the controller, SIGSTOP of a leader past its session timeout, a clean restart. After healing,
nothing acknowledged is lost, nothing is duplicated, and the replicas' logs are identical below
the high watermark. The run's history (every send, and a consumer's reads during the faults) is
checked by the consistency checker: every guarantee Kafka promises under these
settings holds, and every fault is in the run's faults.log. The long, random version is
`odradek chaos --duration N --seed S`."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.chaos.checker.history import History
from odradek.chaos.checker.verdict import format_report, plot_report
from odradek.chaos.config import FAULT_KINDS, ChaosConfig
from odradek.chaos.scenarios.replication import HISTORY_NAME, run_chaos
from odradek.common.fault_log import FAULT_LOG_NAME, fault_spans, read_fault_events

# 360 s: the run records and checks its whole history (the checker) on top of the
# replication checks; on a loaded machine the faults heal slowly.
pytestmark = [pytest.mark.chaos, pytest.mark.timeout(360)]


def test_acknowledged_writes_survive_leader_and_controller_faults(
        tmp_path: Path, zookeeper_connect: str) -> None:
    # Each fault kind twice, in a fixed order (the seed picks the partitions and brokers).
    config = ChaosConfig(brokers=3, partitions=6, producers=2, rate=500, seed=4,
                         schedule=FAULT_KINDS * 2, first_fault_after_s=1.5, gap_s=(0.5, 1.0),
                         heal_timeout_s=45)
    report = run_chaos(config, tmp_path, zookeeper_connect)
    table = format_report(report)
    print(table)

    assert [f.kind for f in report.faults] == list(FAULT_KINDS) * 2, table
    for fault in report.faults:
        assert fault.error is None, table
        assert fault.failover_s is not None and fault.healed_s is not None, table
    assert report.healed, table
    assert report.acked > 1000, table
    assert report.undelivered == 0, table
    assert not report.fatal_errors, table
    assert report.lost == [], table
    assert report.misplaced == [], table
    assert report.duplicates == 0, table
    assert len(report.replicas) == config.partitions, table
    assert report.replicas_identical, table

    checked = report.consistency
    assert checked is not None and checked.ok, table
    rows = {r.key: r for r in checked.rows}
    for key in ("lost", "truncated-reads", "order", "duplicates", "replicas"):
        assert rows[key].promised and rows[key].verdict == "ok", table
        assert rows[key].checked > 0, table
    assert rows["lost"].checked == report.acked, table
    assert History.load(tmp_path / HISTORY_NAME).ops() == report.history.ops()
    spans = fault_spans(read_fault_events(tmp_path / FAULT_LOG_NAME))
    # every fault that takes a broker away is a span that ended (the broker came back)
    assert sorted(s.kind for s in spans) == sorted(
        {"kill_leader": "kill", "kill_controller": "kill", "pause_leader": "pause",
         "restart": "controlled-shutdown"}[k] for k in FAULT_KINDS * 2), table
    assert all(s.end is not None and s.end > s.start for s in spans), spans
    plot_report(report, str(tmp_path / "run.svg"))
    svg = (tmp_path / "run.svg").read_text()
    assert svg.count('class="band"') == 2 * len(spans)  # on both charts
    assert report.ok, table

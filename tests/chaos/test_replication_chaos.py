"""Replication under faults (issue 4, S-3.5, S-3.7, S-4.1): broker processes on a real
ZooKeeper, RF 3, min.insync.replicas 2, unclean election off; idempotent acks=all producers
write unique values while each fault kind happens twice — kill -9 of a partition leader, kill -9
of the controller, SIGSTOP of a leader past its session timeout, a clean restart. After healing,
nothing acknowledged is lost, nothing is duplicated, and the replicas' logs are identical below
the high watermark. The long, random version is `odradek chaos --duration N --seed S`."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.tools.chaos import FAULT_KINDS, ChaosConfig, format_report, run_chaos

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]


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
    assert report.ok, table

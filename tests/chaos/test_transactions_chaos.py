"""Exactly-once under faults: three `odradek broker` processes on a real ZooKeeper,
RF 3, min.insync.replicas 2 (the transaction log and the offsets topic too). Two
consume-transform-produce processes (odradek.chaos.scenarios.txn_pipeline: confluent-kafka, one
consumer
group, each its own stable transactional.id, send_offsets_to_transaction in every transaction,
every 5th transaction aborted on purpose with marker values) copy 3,000 unique input values to an
output topic while these faults happen one at a time, each healed before the next: kill -9 of the
transaction coordinator of a pipeline's transactional.id, of the group coordinator, of a partition
leader, and of a pipeline process (restarted: its successor fences it). At the end a
read_committed consumer reads every input value transformed exactly once and no marker value, a
read_uncommitted one sees the marker values, the group's offsets are the input's end, the output's
LSO is its HW and its replicas are identical below the HW. The same run is
`odradek chaos --transactions`."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.chaos.scenarios.transactions import (
    TXN_FAULT_KINDS,
    TxnChaosConfig,
    format_txn_report,
    run_txn_chaos,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]


def test_exactly_once_pipeline_survives_coordinator_leader_and_pipeline_kills(
        tmp_path: Path, zookeeper_connect: str) -> None:
    config = TxnChaosConfig(values=3000, pipelines=2, seed=13, schedule=TXN_FAULT_KINDS)
    report = run_txn_chaos(config, tmp_path, zookeeper_connect)
    table = format_txn_report(report)
    print(table)

    assert [f.kind for f in report.faults] == list(TXN_FAULT_KINDS), table
    for fault in report.faults:
        assert fault.error is None, table
        assert fault.failover_s is not None and fault.healed_s is not None, table
    assert report.healed, table
    assert report.finished, table
    assert report.missing == [], table
    assert report.duplicates == [], table
    assert report.aborted_visible == [], table
    assert report.unexpected == [], table
    assert report.committed_read == config.values, table
    assert report.markers_uncommitted > 0, table  # deliberate aborts reached the log
    assert report.txns_aborted > 0 and report.pipeline_restarts == 1, table
    assert report.output_lso == report.output_hw, table
    assert report.replicas and not any(r.problem for r in report.replicas), table
    assert report.ok, table

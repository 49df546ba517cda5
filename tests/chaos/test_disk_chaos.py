"""Log dir failures under faults (KIP-112), the run of `odradek chaos --disk`: three `odradek
broker` processes on a real ZooKeeper, RF 3, min.insync.replicas 2, acks=all writes. Broker 0's
second log dir is a small tmpfs that gets filled (disk-full), broker 1's an ext4 loop filesystem
that fails (disk-fail, EROFS from the kernel). Each time the leaders of the dir's partitions
move away, the broker keeps serving its other dir, the controller handles the log dir event;
after the space is freed (or the filesystem repaired) the broker restarts and rejoins every
ISR, and every acknowledged value is read back at its offset. Root only (mount): skipped with
the reason printed otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.chaos.environment import disk_faults
from odradek.chaos.scenarios.disk import DiskChaosConfig, format_disk_report, run_disk_chaos
from odradek.common.fault_log import read_fault_events

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]


def test_full_and_failed_log_dirs_lose_nothing_acknowledged(tmp_path: Path,
                                                            zookeeper_connect: str) -> None:
    reason = disk_faults.unavailable_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    config = DiskChaosConfig(partitions=4, seed=15, phase_s=3.0, rate=150.0)
    report = run_disk_chaos(config, tmp_path / "brokers", zookeeper_connect)
    table = format_disk_report(report)
    print(table)
    assert report.acknowledged > 0, table
    assert report.lost == [], table
    assert all(ok for _, ok, _ in report.checks), table
    assert report.ok, table
    kinds = [(e.kind, e.phase) for e in read_fault_events(tmp_path / "faults.log")]
    assert ("disk-full", "start") in kinds and ("disk-full", "end") in kinds
    if not report.skipped:
        assert ("disk-fail", "start") in kinds and ("disk-fail", "end") in kinds
    assert not any(disk_faults.is_mounted(p) for p in (tmp_path / "disks").iterdir()
                   if p.is_dir())

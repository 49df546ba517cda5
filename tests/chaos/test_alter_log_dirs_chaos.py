"""A replica moving between log dirs (KIP-113) under kill -9 (broker processes on a real
ZooKeeper): `odradek reassign-partitions --execute` with "log_dirs" starts moving broker 0's
replica to its other dir, throttled by --replica-alter-log-dirs-throttle so that the broker is
killed with SIGKILL half-way. After the restart the future log is loaded and the move resumes
(while the replica follows the new leader) and completes: `--verify --wait` says so, the
partition's dirs are where and as Kafka names them, the checkpoints of both dirs are right,
and broker 0's moved log is byte for byte broker 1's, every acknowledged record in it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.storage.checkpoints import OffsetCheckpointFile
from odradek.storage.log import Log
from tests.chaos.zk_cluster import ZkCluster, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

TOPIC = "jbod"
VALUE = b"x" * 1000
BEFORE = 2000  # ~2 MB to move
AFTER = 200
THROTTLE = 500_000  # B/s: the move takes ~4 s, the kill comes ~1 s in


@pytest.fixture
def zk_cluster(tmp_path: Path, zookeeper_connect: str) -> Iterator[ZkCluster]:
    cluster = ZkCluster(tmp_path, zookeeper_connect, brokers=2, overrides={
        "replication.quota.window.num": "2", "replica.fetch.max.bytes": "65536",
        "log.flush.offset.checkpoint.interval.ms": "500"})
    for b in cluster.brokers.values():
        b.overrides["log.dirs"] = f"{b.workdir / 'd1'},{b.workdir / 'd2'}"
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()


def produce(c: ZkCluster, start: int, n: int) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.size": 100_000,
                  "enable.idempotence": True})
    errors: list[object] = []
    for i in range(start, start + n):
        p.produce(TOPIC, key=b"k%d" % i, value=b"%d:" % i + VALUE,
                  on_delivery=lambda err, msg: err and errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors


def tool(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "odradek.cli", "reassign-partitions", *argv],
                          capture_output=True, text=True, timeout=90)
    return proc.returncode, proc.stdout, proc.stderr


def partition_dirs(log_dir: Path) -> list[str]:
    return sorted(e.name for e in log_dir.iterdir() if e.is_dir() and e.name.startswith(TOPIC))


def log_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.glob("*.log"))


def test_kill9_mid_move_resumes_and_completes(zk_cluster: ZkCluster, tmp_path: Path) -> None:
    c = zk_cluster
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replica_assignment=[[0, 1]],
                                  config={"segment.bytes": "262144"})],
                        operation_timeout=20)[TOPIC].result(30)
    produce(c, 0, BEFORE)
    wait_until(lambda: c.fully_replicated(TOPIC), what="both replicas in the ISR")
    b0 = c.brokers[0]
    source = next(d for d in (b0.workdir / "d1", b0.workdir / "d2")
                  if (d / f"{TOPIC}-0").is_dir())
    dest = next(d for d in (b0.workdir / "d1", b0.workdir / "d2") if d != source)
    total = log_bytes(source / f"{TOPIC}-0")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [0, 1], "log_dirs": [str(dest), "any"]}]}))
    code, out, err = tool("--bootstrap-server", c.bootstrap, "--execute",
                          "--reassignment-json-file", str(plan),
                          "--replica-alter-log-dirs-throttle", str(THROTTLE))
    assert code == 0, (out, err)
    assert f"Successfully started log directory move for: {TOPIC}-0-0" in out

    def future() -> Path | None:
        found = [dest / n for n in partition_dirs(dest) if n.endswith("-future")]
        return found[0] if found else None

    wait_until(lambda: (f := future()) is not None and log_bytes(f) > total // 4,
               timeout=20, what="a quarter of the log copied")
    b0.kill()
    moving = future()
    assert moving is not None and 0 < log_bytes(moving) < total, "killed mid-move"
    assert (source / f"{TOPIC}-0").is_dir()
    assert moving.name.startswith(f"{TOPIC}-0.") and len(moving.name) == len(TOPIC) + 2 + 40
    b0.restart(clean=False)
    c.wait_registered()
    produce(c, BEFORE, AFTER)  # written while the move resumes
    code, out, err = tool("--bootstrap-server", c.bootstrap, "--verify", "--wait",
                          "--wait-interval-ms", "250", "--wait-timeout-ms", "60000",
                          "--reassignment-json-file", str(plan))
    assert code == 0, (out, err)
    assert f"Reassignment of replica {TOPIC}-0-0 completed successfully." in out
    assert "Clearing broker-level throttles on brokers 0,1" in out
    # the restarted broker loaded the future log and went on with it (not a new move)
    assert f"Resuming the move of {TOPIC}-0 to {dest.absolute()}" in b0.stderr_text()
    wait_until(lambda: c.fully_replicated(TOPIC), timeout=60, what="the ISR whole again")
    wait_until(lambda: partition_dirs(source) == [], what="the old log deleted")
    assert partition_dirs(dest) == [f"{TOPIC}-0"]
    assert c.stop_all() == {0: 0, 1: 0}
    # checkpoints: the moved log is in its new dir's files, no longer in the old one's
    leo = Log.open(c.brokers[1].workdir / next(
        d for d in ("d1", "d2") if (c.brokers[1].workdir / d / f"{TOPIC}-0").is_dir())
        / f"{TOPIC}-0", had_clean_shutdown=True)
    moved = Log.open(dest / f"{TOPIC}-0", had_clean_shutdown=True)
    try:
        assert moved.log_end_offset == leo.log_end_offset == BEFORE + AFTER
        for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                     "replication-offset-checkpoint"):
            assert (TOPIC, 0) in OffsetCheckpointFile(dest / name).read(), name
            assert (TOPIC, 0) not in OffsetCheckpointFile(source / name).read(), name
        assert OffsetCheckpointFile(dest / "recovery-point-offset-checkpoint").read()[
            (TOPIC, 0)] == BEFORE + AFTER
        assert moved.leader_epoch_cache.entries() == leo.leader_epoch_cache.entries()
        assert len(moved.leader_epoch_cache.entries()) >= 2  # the kill moved leadership
        # byte for byte the same batches as broker 1's log: nothing lost, nothing doubled
        assert moved.read(0, 1 << 30).read_bytes() == leo.read(0, 1 << 30).read_bytes()
    finally:
        moved.close()
        leo.close()


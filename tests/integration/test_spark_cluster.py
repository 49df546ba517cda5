"""The Spark pipeline (odradek source with read_committed, a transform, odradek sink) on a Spark
standalone cluster (tests/spark_cluster_fixture.py) and three broker processes on ZooKeeper,
under faults (odradek.chaos.scenarios.spark,
the library of `odradek chaos --spark`): with deliveryGuarantee=exactly-once, kill -9 of a
worker mid-batch, of the driver (restarted on its checkpoint) and of the transaction
coordinator's broker leave every input exactly once in the output read with read_committed,
and nothing read with read_committed during the run is gone at the end (the consistency
checker on the run's history); with at-least-once under a worker and a driver kill nothing is
lost and the duplicates are counted (expected there); a batch copy (spark.read, df.write)
with the exactly-once sink on the executors."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.chaos.scenarios.spark import run_spark_chaos
from odradek.spark.standalone import StandaloneCluster

# Each fault is followed by one whole micro-batch (the recovery) before the next; a lower feed
# rate keeps micro-batches short. Every fault and every check of the full run stays.
QUICK = {"settle": 2.0, "batches_between": 1, "rate": 200.0}


# A new driver's first micro-batch alone takes about a minute on two cores.
@pytest.mark.timeout(900)
def test_exactly_once_under_worker_driver_and_coordinator_kills(
        spark_standalone: StandaloneCluster, zookeeper_connect: str, tmp_path: Path) -> None:
    r = run_spark_chaos(zookeeper_connect, "exactly-once", work_dir=str(tmp_path),
                        standalone=spark_standalone, **QUICK)
    assert r.consistency.row("lost").checked > 1000 and len(r.batches) >= 4, r.summary()
    assert r.ok, r.consistency.to_text()
    for key in ("lost", "duplicates", "truncated-reads"):
        assert r.observed(key) == 0, r.summary()
    assert r.consistency.row("truncated-reads").checked > 1000, r.summary()
    assert [e for _, e in r.events if e.startswith("kill -9")] == [
        "kill -9 worker 0 (and its executor)", "kill -9 driver",
        next(e for _, e in r.events if "coordinator" in e)]


# A new driver's first micro-batch alone takes about a minute on two cores.
@pytest.mark.timeout(900)
def test_at_least_once_under_the_same_kills_counts_duplicates(
        spark_standalone: StandaloneCluster, zookeeper_connect: str, tmp_path: Path) -> None:
    r = run_spark_chaos(zookeeper_connect, "at-least-once", faults=("worker", "driver"),
                        work_dir=str(tmp_path), standalone=spark_standalone, **QUICK)
    print(r.summary())  # duplicates are expected and reported, not failed
    assert r.ok and r.observed("lost") == 0, r.consistency.to_text()
    assert r.consistency.row("duplicates").verdict in ("ok", "expected"), r.summary()


def test_batch_copy_with_the_exactly_once_sink_on_executors(
        spark_standalone: StandaloneCluster, tmp_path: Path) -> None:
    """spark.read -> transform -> df.write with deliveryGuarantee=exactly-once on the
    standalone cluster's executors: one two-phase commit, every row once."""
    import subprocess
    import sys

    from odradek.chaos.checker.consistency import check_copy
    from odradek.chaos.scenarios.spark import sink_guarantees
    from odradek.client import Admin, NewTopic, Producer
    from odradek.cluster import Cluster
    from tests.interop.spark_helpers import read_output

    with Cluster(brokers=1) as c:
        bs = c.bootstrap_servers
        with Admin({"bootstrap.servers": bs}) as a:
            a.create_topics([NewTopic("b-in", 3, 1), NewTopic("b-out", 3, 1)])
            a.wait_for_topics(["b-in", "b-out"], timeout=30)
        with Producer({"bootstrap.servers": bs, "linger.ms": 5}) as p:
            for i in range(3000):
                p.send("b-in", f"row-{i}".encode(), partition=i % 3)
        r = subprocess.run(
            [sys.executable, "-m", "odradek.spark.pipeline", "--master", spark_standalone.url,
             "--bootstrap", bs, "--source", "b-in", "--sink", "b-out", "--batch",
             "--guarantee", "exactly-once"],
            env=spark_standalone.env, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        check = check_copy([f"row-{i}" for i in range(3000)], read_output(bs, "b-out", 3),
                           sink_guarantees("exactly-once"), str.upper)
        assert check.ok and check.row("lost").checked == 3000, check.to_text()

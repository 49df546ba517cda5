"""The Spark pipeline (odradek source with read_committed, a transform, odradek sink) on a Spark
standalone cluster (tests/spark_cluster_fixture.py) and three broker processes on ZooKeeper,
under faults (odradek.chaos.scenarios.spark, the library of `odradek chaos --spark`): an
exactly-once and an at-least-once pipeline side by side; kill -9 of a worker while both sinks
write, of each driver while its sink writes (restarted on its checkpoint) and of the
transaction coordinator's broker. With deliveryGuarantee=exactly-once the killed attempts'
transactions are aborted (records in the log, none visible read_committed), every input is in
the output exactly once, and nothing read with read_committed during the run is gone at the
end (the consistency checker on the run's history); with at-least-once nothing is lost and the
rows written again are counted as duplicates (expected there). A batch copy (spark.read,
df.write) with the exactly-once sink on the executors."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.chaos.scenarios.spark import run_spark_chaos
from odradek.spark.standalone import StandaloneCluster

# Both pipelines side by side on one broker cluster and one Spark cluster, under the same
# faults: one start-up, one wait per fault. Each fault is followed by one whole micro-batch (the
# recovery) before the next (settle: seconds before a killed worker or broker is started
# again). The transform costs 10 ms a row (--transform-cost-ms), so a task
# writes for a second or more and the worker and driver kills land while the sinks write.


# A new driver's first micro-batch alone takes a minute on two loaded cores, four minutes under a
# load average of 20 (its executors' JVMs start slowly).
@pytest.mark.timeout(1800)
def test_worker_driver_and_coordinator_kills_mid_batch_under_both_guarantees(
        spark_standalone: StandaloneCluster, zookeeper_connect: str, tmp_path: Path) -> None:
    eos, alo = run_spark_chaos(zookeeper_connect, ("exactly-once", "at-least-once"),
                               work_dir=str(tmp_path), standalone=spark_standalone, settle=1.0,
                               batches_between=1, rate=50.0, transform_cost_ms=10)
    kills = [e for _, e in eos.events if e.startswith("kill -9")]
    assert [k.split(",")[0] for k in kills] == [
        "kill -9 worker 0 (and its executors)", "kill -9 driver (exactly-once)",
        "kill -9 driver (at-least-once)",
        next(e for _, e in eos.events if "coordinator" in e)], eos.summary()
    # the worker and driver kills were seen landing while the sinks were writing
    assert all(k.endswith(", mid-batch") for k in kills[:3]), eos.summary()
    # exactly-once: the killed attempts' transactions were aborted (their records are in the
    # log, read_uncommitted), none of them is visible read_committed, nothing lost or doubled
    assert eos.consistency.row("lost").checked > 1000 and len(eos.batches) >= 4, eos.summary()
    assert eos.ok, eos.consistency.to_text()
    for key in ("lost", "duplicates", "truncated-reads"):
        assert eos.observed(key) == 0, eos.summary()
    assert eos.consistency.row("truncated-reads").checked > 1000, eos.summary()
    assert eos.aborted_records > 0, eos.summary()
    # at-least-once: nothing lost, the retried task and the replayed micro-batch wrote rows
    # again: duplicates, counted and reported as expected
    print(alo.summary())
    assert alo.ok and alo.observed("lost") == 0, alo.consistency.to_text()
    assert alo.consistency.row("duplicates").verdict == "expected", alo.summary()
    assert alo.observed("duplicates") > 0, alo.summary()


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
             "--guarantee", "exactly-once", "--cores-max", "2"],
            env=spark_standalone.env, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-3000:]
        check = check_copy([f"row-{i}" for i in range(3000)], read_output(bs, "b-out", 3),
                           sink_guarantees("exactly-once"), str.upper)
        assert check.ok and check.row("lost").checked == 3000, check.to_text()

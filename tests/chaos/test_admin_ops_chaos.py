"""Admin operations under real faults (S-6.1, S-6.2, S-5.6): five broker PROCESSES on
Debian's ZooKeeper, idempotent acks=all confluent-kafka producers writing all along, and the
controller killed with SIGKILL while

* a partition reassignment runs (Kafka's ``onPartitionReassignment``, docs/design.md
  S-6.2): (a) right after ``odradek reassign-partitions --execute``, (b)
  while the new replicas are catching up under ``--throttle``; the restarted cluster finishes the
  move (``--verify --wait``): the topic znode holds the targets, ``/admin/reassign_partitions``
  is gone, the removed replicas' log dirs are gone, nothing acknowledged is lost or duplicated,
  ``odradek replica-verification --once`` finds the replicas identical;
* a preferred replica election is pending: ``odradek preferred-replica-election --zookeeper``
  writes ``/admin/preferred_replica_election`` while the controller is SIGSTOPped, then the
  controller is killed; its successor elects the preferred leaders at failover and deletes the
  node.

The in-process versions (controller stopped or its session expired inside one process) are
tests/integration/test_reassignment.py and tests/integration/test_preferred_election.py.
"""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from odradek.chaos.checker.verdict import ChaosReport, check_values
from odradek.chaos.config import ChaosConfig
from odradek.chaos.environment.processes import ProcessCluster, _odradek_command, wait_until
from odradek.chaos.support import client_logger
from odradek.chaos.workload import ProducerStats, ProducerWorker, consume_all

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

BROKERS = 5
SESSION_TIMEOUT_MS = 4000
OVERRIDES = {
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "auto.leader.rebalance.enable": "false",  # only the admin's election moves leaders
    "replica.lag.time.max.ms": "5000",
    # KIP-73 throttling that reacts within a second, in small fetches (test (b)'s mid-way kill)
    "replication.quota.window.num": "2",
    "replication.quota.window.size.seconds": "1",
    "replica.fetch.max.bytes": "32768",
}
TOPIC_CONFIG = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
REASSIGN = "/admin/reassign_partitions"
ELECTION = "/admin/preferred_replica_election"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_server: Any
            ) -> Iterator[ProcessCluster]:
    connect = f"{zookeeper_server.connect_string}/odradek-admin-ops-{uuid.uuid4().hex[:8]}"
    c = ProcessCluster(tmp_path_factory.mktemp("admin-ops"), connect, BROKERS,
                       overrides=OVERRIDES, session_timeout_ms=SESSION_TIMEOUT_MS)
    try:
        c.start()
        yield c
    finally:
        c.close()


# -- helpers -------------------------------------------------------------------------------------


def odradek(*args: str, timeout: float = 120) -> tuple[int, str]:
    """Run an `odradek` tool as users do (a subprocess); exit status and stdout + stderr."""
    proc = subprocess.run([*_odradek_command(), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout + proc.stderr


def create_topic(c: ProcessCluster, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config=TOPIC_CONFIG)],
                        operation_timeout=20)[topic].result(30)


def healthy(c: ProcessCluster, topic: str) -> bool:
    """Every broker running and registered, a controller, every ISR full."""
    return (all(b.running() for b in c.brokers.values())
            and len(c.live_ids()) == BROKERS and c.controller_or_none() is not None
            and c.fully_replicated(topic))


def wait_healthy(c: ProcessCluster, topic: str, timeout: float = 60) -> None:
    wait_until(lambda: healthy(c, topic), timeout=timeout, what=f"{topic} fully replicated")


def kill_controller(c: ProcessCluster) -> tuple[int, int]:
    """kill -9 of the controller; wait for a successor (epoch bumped), then restart the killed
    broker. (old controller, new controller)."""
    old, epoch = c.controller(), c.controller_epoch()
    c.brokers[old].kill()
    new = wait_until(lambda: (n := c.controller_or_none()) not in (None, old) and n + 1,
                     timeout=40, what="a new controller") - 1
    wait_until(lambda: c.controller_epoch() > epoch, timeout=20, what="controller epoch bump")
    c.brokers[old].restart(clean=False)
    return old, new


class Workload:
    """Idempotent acks=all producers (odradek chaos's) writing unique values to `topic` until
    `finish()`, which flushes them and returns their statistics."""

    def __init__(self, c: ProcessCluster, topic: str, logs: Path, producers: int = 2,
                 rate: float = 100) -> None:
        self.stop = threading.Event()
        logger = client_logger(logs)  # librdkafka's disconnect lines, not the terminal
        self.workers = [ProducerWorker(i, c.bootstrap, topic, rate, 60000, self.stop, logger)
                        for i in range(producers)]
        for w in self.workers:
            w.start()

    def finish(self) -> list[ProducerStats]:
        self.stop.set()
        for w in self.workers:
            w.join(120)
        return [w.stats for w in self.workers]


def preload(c: ProcessCluster, topic: str, partitions: int, per_partition: int,
            size: int) -> ProducerStats:
    """acks=all values of `size` bytes, `per_partition` to each partition: data for the new
    replicas to copy (throttled). Their acknowledgements are checked like the workload's."""
    from confluent_kafka import Producer

    stats = ProducerStats(index=99)
    padding = "x" * size

    def delivered(err: Any, msg: Any) -> None:
        value = msg.value().decode()
        if err is None:
            stats.acked[value] = (msg.partition(), msg.offset())
        else:
            stats.failed[value] = err.name()
    # Small batches: a fetch returns at least one whole batch, whatever the throttle.
    producer = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 20, "batch.size": 2 * size + 1000})
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, f"pre-{p}-{i}:{padding}".encode(), partition=p,
                             on_delivery=delivered)
            stats.sent += 1
        producer.poll(0)
    stats.undelivered = producer.flush(60)
    return stats


def verify_no_loss(c: ProcessCluster, topic: str, partitions: int,
                   stats: Sequence[ProducerStats]) -> ChaosReport:
    """Read everything back and compare with the acknowledgements (odradek chaos's check)."""
    report = ChaosReport(ChaosConfig(topic=topic, partitions=partitions))
    check_values(report, stats, consume_all(c.bootstrap, topic, partitions))
    summary = (f"acked {report.acked}, read back {report.read_back}, lost {report.lost[:5]}"
               f" ({len(report.lost)}), misplaced {report.misplaced[:5]}, duplicates "
               f"{report.duplicates}, fatal {report.fatal_errors}, undelivered "
               f"{report.undelivered}")
    assert report.acked > 0, summary
    assert report.lost == [] and report.misplaced == [], summary
    assert report.duplicates == 0, summary
    assert not report.fatal_errors and report.undelivered == 0, summary
    return report


def move_target(current: Sequence[int], brokers: Sequence[int]) -> list[int]:
    """An overlapping move: the two brokers without a replica (the first as the new preferred
    leader, so leadership moves too) plus the last current replica."""
    fresh = [b for b in brokers if b not in current]
    return [*fresh[:2], current[-1]]


def plan_file(path: Path, topic: str, targets: Mapping[int, Sequence[int]]) -> str:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": list(r)} for p, r in targets.items()]}))
    return str(path)


def log_bytes(c: ProcessCluster, broker: int, topic: str, p: int) -> int:
    d = c.brokers[broker].log_dir / f"{topic}-{p}"
    try:
        return sum(f.stat().st_size for f in d.glob("*.log"))
    except FileNotFoundError:  # created or deleted meanwhile
        return 0


def pending_moves(c: ProcessCluster) -> list[tuple[str, int]]:
    """The partitions /admin/reassign_partitions still lists ([] once it is gone)."""
    found = c.zk.exists(REASSIGN)
    if found is None:
        return []
    try:
        data = json.loads(c.zk.get(REASSIGN)[0])
    except Exception:  # deleted between the two reads
        return []
    return [(x["topic"], x["partition"]) for x in data["partitions"]]


def verify_wait(c: ProcessCluster, topic: str, n: int, plan: str, wait_s: int = 60) -> str:
    """`reassign-partitions --verify --wait` until every move of `plan` completed."""
    code, out = odradek("reassign-partitions", "--bootstrap-server", c.bootstrap, "--verify",
                        "--wait", "--wait-timeout-ms", str(wait_s * 1000),
                        "--reassignment-json-file", plan, timeout=wait_s + 60)
    assert code == 0, out
    assert out.count("is completed") == n, f"{out}\nstate: {c.states(topic)}"
    return out


def assert_moved(c: ProcessCluster, topic: str, targets: Mapping[int, Sequence[int]]) -> None:
    """The final state of a finished reassignment, read from the znodes and the disks."""
    assert c.zk.exists(REASSIGN) is None, pending_moves(c)
    topic_node = c.json(f"/brokers/topics/{topic}")
    assert {int(p): r for p, r in topic_node["partitions"].items()} == {
        p: list(r) for p, r in targets.items()}, topic_node
    assert not topic_node.get("adding_replicas") and not topic_node.get("removing_replicas"), \
        topic_node
    wait_until(lambda: c.fully_replicated(topic), timeout=60, what="targets in the ISR")
    for p, target in targets.items():
        s = c.state(topic, p)
        assert s["leader"] in target and set(s["isr"]) == set(target), (p, s)

    # No partition dir on a broker outside the partition's target (nor a `-delete` one).
    try:
        wait_until(lambda: not _strays(c, topic, targets), timeout=30,
                   what="removed replicas' log dirs deleted")
    except AssertionError:
        raise AssertionError(f"log dirs of removed replicas left: "
                             f"{_strays(c, topic, targets)}") from None


def _strays(c: ProcessCluster, topic: str, targets: Mapping[int, Sequence[int]]) -> list[str]:
    out = []
    for b in c.brokers.values():
        for d in b.log_dir.glob(f"{topic}-*"):
            p = int(d.name[len(topic) + 1:].split(".")[0])
            if b.broker_id not in targets[p] or d.name.endswith("-delete"):
                out.append(f"broker {b.broker_id}: {d.name}")
    return out


# -- the tests -----------------------------------------------------------------------------------


def test_reassignment_survives_controller_kill9(cluster: ProcessCluster,
                                                tmp_path: Path) -> None:
    c, topic, n = cluster, "moves", 4
    create_topic(c, topic, n)
    wait_healthy(c, topic)
    brokers = sorted(c.brokers)
    # ~1.2 MB per partition for the throttled copy of (b): seconds at the throttle, not ms.
    stats = [preload(c, topic, n, per_partition=150, size=8000)]
    workload = Workload(c, topic, tmp_path)
    try:
        # (a) kill -9 right after --execute: the successor resumes from the znodes.
        before = c.assignment(topic)
        targets_a = {p: move_target(before[p], brokers) for p in range(n)}
        plan_a = plan_file(tmp_path / "a.json", topic, targets_a)
        code, out = odradek("reassign-partitions", "--bootstrap-server", c.bootstrap,
                            "--execute", "--reassignment-json-file", plan_a)
        assert code == 0, out
        old, new = kill_controller(c)
        print(f"(a) controller {old} killed right after --execute; {new} took over")
        verify_wait(c, topic, n, plan_a)
        assert_moved(c, topic, targets_a)
        wait_healthy(c, topic)

        # (b) a throttled move, the controller killed while the new replicas catch up.
        targets_b = {p: move_target(targets_a[p], brokers) for p in range(n)}
        plan_b = plan_file(tmp_path / "b.json", topic, targets_b)
        code, out = odradek("reassign-partitions", "--bootstrap-server", c.bootstrap,
                            "--execute", "--reassignment-json-file", plan_b,
                            "--throttle", "250000")
        assert code == 0, out
        assert "The inter-broker throttle limit was set to 250000 B/s" in out, out

        def midway() -> list[str]:
            """New replicas holding part, not all, of their leader's log."""
            found = []
            for p in range(n):
                lead = log_bytes(c, targets_a[p][0], topic, p)
                for b in set(targets_b[p]) - set(targets_a[p]):
                    got = log_bytes(c, b, topic, p)
                    if 0 < got < lead * 0.8:
                        found.append(f"p{p} on broker {b}: {got}/{lead} bytes")
            return found if found and pending_moves(c) else []
        caught = wait_until(midway, timeout=30, interval=0.02, what="replicas mid-way")
        pending = pending_moves(c)
        old, new = kill_controller(c)
        print(f"(b) controller {old} killed with {len(pending)} moves pending ({caught}); "
              f"{new} took over")
        assert pending, "the throttled move finished before the kill"
        out = verify_wait(c, topic, n, plan_b)
        assert "Clearing broker-level throttles" in out, out
        assert_moved(c, topic, targets_b)
        wait_healthy(c, topic)
    finally:
        stats += workload.finish()
    report = verify_no_loss(c, topic, n, stats)
    print(f"acked {report.acked}, read back {report.read_back}, "
          f"delivery errors {dict(report.delivery_errors)}")
    code, out = odradek("replica-verification", "--bootstrap-server", c.bootstrap,
                        "--topics-include", f"^{topic}$", "--once")
    assert code == 0, out


def test_preferred_election_survives_controller_kill9(cluster: ProcessCluster,
                                                      tmp_path: Path) -> None:
    c, topic, n = cluster, "pref", 5
    create_topic(c, topic, n)
    wait_healthy(c, topic)
    preferred = {p: r[0] for p, r in c.assignment(topic).items()}
    workload = Workload(c, topic, tmp_path)
    stats: list[ProducerStats] = []
    try:
        ctl = c.controller()
        # Skew leadership: clean restarts of preferred leaders (not the controller) one by one,
        # until some partition is led neither by its preferred replica nor by the controller
        # (whose death would elect them anyway). One restart at a time: restarting the next
        # broker of a replica list can hand a partition back to its preferred replica.
        skewed: list[int] = []
        for victim in sorted(set(preferred.values()) - {ctl}):
            c.brokers[victim].restart(clean=True)
            wait_healthy(c, topic)
            skewed = [p for p in range(n) if c.leader(topic, p) != preferred[p]]
            if [p for p in skewed if c.leader(topic, p) != ctl and preferred[p] != ctl]:
                break
        assert [p for p in skewed if c.leader(topic, p) != ctl and preferred[p] != ctl], \
            (ctl, preferred, c.states(topic))
        assert c.controller() == ctl

        request = tmp_path / "election.json"
        request.write_text(json.dumps({"partitions": [
            {"topic": topic, "partition": p} for p in range(n)]}))
        c.brokers[ctl].pause()  # the controller cannot act on the znode
        try:
            code, out = odradek("preferred-replica-election", "--zookeeper", c.connect,
                                "--path-to-json-file", str(request))
            assert code == 0, out
            assert "Successfully started preferred replica election" in out, out
            if c.zk.exists(ELECTION) is None:
                # only when the pause outlasted the session (SESSION_TIMEOUT_MS) while the tool
                # started on a loaded machine: the successor has run the election already, and
                # what follows checks its outcome
                assert c.controller_or_none() not in (None, ctl), "znode gone, same controller"
            else:
                assert [p for p in range(n) if c.leader(topic, p) != preferred[p]] == skewed
        finally:
            c.brokers[ctl].kill()
        new = wait_until(lambda: (x := c.controller_or_none()) not in (None, ctl) and x + 1,
                         timeout=40, what="a new controller") - 1
        wait_until(lambda: c.zk.exists(ELECTION) is None, timeout=40,
                   what=f"{ELECTION} deleted by controller {new}")
        states = c.states(topic)
        for p, s in states.items():
            if preferred[p] != ctl:  # a dead preferred replica cannot lead
                assert s["leader"] == preferred[p], (p, preferred, states)
        print(f"controller {ctl} paused then killed with the election pending; controller "
              f"{new} elected {skewed} back to their preferred replicas")
        c.brokers[ctl].restart(clean=False)
        wait_healthy(c, topic)
    finally:
        stats += workload.finish()
    verify_no_loss(c, topic, n, stats)

"""Broker processes on a real ZooKeeper under faults (S-4, S-5): kill -9 of a leader and of the
controller, SIGSTOP of the controller past its session timeout, controlled shutdown, topic
creation and deletion — with the znodes read back through kazoo in Kafka's layout (S-5.2)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.chaos.zk_cluster import ZkCluster, wait_until

pytestmark = pytest.mark.chaos


@pytest.fixture
def zk_cluster(tmp_path: Path, zookeeper_connect: str) -> Iterator[ZkCluster]:
    cluster = ZkCluster(tmp_path, zookeeper_connect).start()
    try:
        yield cluster
    finally:
        cluster.close()


def create_topic(cluster: ZkCluster, name: str, partitions: int, rf: int = 3,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, rf, config=config or {})],
                                  operation_timeout=20)
    futures[name].result(30)


def test_kill9_of_a_leader_then_of_the_controller(zk_cluster: ZkCluster) -> None:
    c = zk_cluster
    create_topic(c, "t", 6)
    controller = c.controller()
    epoch = c.controller_epoch()
    states = c.states("t")
    victim = next(s["leader"] for s in states.values() if s["leader"] != controller)
    led = [p for p, s in states.items() if s["leader"] == victim]
    c.brokers[victim].kill()
    # The ephemeral node goes at session expiry; then the controller elects from the ISR.
    wait_until(lambda: all(c.state("t", p)["leader"] not in (victim, -1) for p in led),
               timeout=30, what="new leaders after kill -9")
    # Elections come first, then the dead replica leaves every other ISR (OfflineReplica).
    wait_until(lambda: all(victim not in s["isr"] for s in c.states("t").values()),
               timeout=10, what="the dead broker out of every ISR")
    for p, s in c.states("t").items():
        if p in led:
            assert s["leader_epoch"] == states[p]["leader_epoch"] + 1
            assert s["leader"] in states[p]["isr"]
    assert str(victim) not in c.zk.get_children("/brokers/ids")

    c.brokers[controller].kill()
    new = wait_until(lambda: c.zk.exists("/controller") and c.controller() != controller
                     and c.controller(), timeout=30, what="a new controller")
    assert new not in (controller, victim)
    # /controller is created first, then /controller_epoch is bumped: wait for the bump.
    wait_until(lambda: c.controller_epoch() == epoch + 1, timeout=10, what="epoch bumped")
    wait_until(lambda: all(s["leader"] == new for s in c.states("t").values()), timeout=30,
               what="the last broker leads everything")
    # The restarted brokers rejoin: the new controller sends them the partitions' leadership.
    registration = c.zk.exists(f"/brokers/ids/{new}").czxid
    c.brokers[victim].restart(clean=False)
    c.brokers[controller].restart(clean=False)
    wait_until(lambda: len(c.zk.get_children("/brokers/ids")) == 3, what="re-registration")
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    md = admin.list_topics("t", timeout=10)
    assert sorted(md.brokers) == [0, 1, 2]
    leaders = {p.leader for p in md.topics["t"].partitions.values()}
    stat = c.zk.exists(f"/brokers/ids/{new}")
    if stat is not None and stat.czxid == registration:
        assert leaders == {new}
    else:  # its 4 s session expired on a loaded machine: leadership moved with it, as it must
        assert leaders <= {0, 1, 2}, leaders


def test_sigstop_controller_past_session_timeout_cannot_act_on_stale_state(
        zk_cluster: ZkCluster) -> None:
    c = zk_cluster
    create_topic(c, "before", 3)
    old = c.controller()
    epoch = c.controller_epoch()
    pid = c.brokers[old].proc.pid  # type: ignore[union-attr]
    os.kill(pid, signal.SIGSTOP)
    try:
        new = wait_until(lambda: c.zk.exists("/controller") and c.controller() != old
                         and c.controller(), timeout=30, what="a new controller")
        wait_until(lambda: c.controller_epoch() == epoch + 1, timeout=10, what="epoch bumped")
        wait_until(lambda: all(s["leader"] != old for s in c.states("before").values()),
                   timeout=30, what="leaders moved off the paused broker")
        create_topic(c, "during", 2, rf=2)
    finally:
        os.kill(pid, signal.SIGCONT)
    # The old controller wakes up: its session expired, so it resigns, registers again and
    # must not have written anything with its old epoch.
    wait_until(lambda: str(old) in c.zk.get_children("/brokers/ids"), timeout=30,
               what="the paused broker re-registered")
    time.sleep(1.0)
    assert c.controller() == new
    assert c.controller_epoch() == epoch + 1
    for topic in ("before", "during"):
        for p, s in c.states(topic).items():
            assert s["controller_epoch"] <= epoch + 1, (topic, p, s)
            assert s["leader"] >= 0, (topic, p, s)
    stderr = c.brokers[old].stderr_path.read_text()
    assert "session expired" in stderr.lower()


def test_controlled_shutdown_moves_leaders_before_exit(zk_cluster: ZkCluster) -> None:
    c = zk_cluster
    create_topic(c, "t", 6)
    controller = c.controller()
    victim = next(b for b in range(3) if b != controller)
    led = [p for p, s in c.states("t").items() if s["leader"] == victim]
    assert led
    start = time.monotonic()
    assert c.brokers[victim].stop() == 0  # SIGTERM: controlled shutdown, exit 0
    took = time.monotonic() - start
    for _p, s in c.states("t").items():
        assert victim not in s["isr"]
        assert s["leader"] not in (victim, -1)
    stderr = c.brokers[victim].stderr_path.read_text()
    assert "Controlled shutdown succeeded" in stderr, stderr[-2000:]
    print(f"controlled shutdown of broker {victim} leading {len(led)} partitions: {took:.2f}s")


def test_topic_creation_and_deletion_znodes(zk_cluster: ZkCluster) -> None:
    c = zk_cluster
    create_topic(c, "life", 3, config={"retention.ms": "60000"})
    assert c.json("/brokers/topics/life")["partitions"] == {
        "0": [0, 1, 2], "1": [1, 2, 0], "2": [2, 0, 1]}
    assert c.json("/config/topics/life") == {"version": 1, "config": {"retention.ms": "60000"}}
    for p, s in c.states("life").items():
        assert set(s) == {"controller_epoch", "leader", "version", "leader_epoch", "isr"}
        assert s["leader"] == [0, 1, 2][p]
    dirs = [b.log_dir / f"life-{p}" for b in c.brokers.values() for p in range(3)]
    # CreateTopics returns once the answering broker's metadata holds the leaders (as Kafka's
    # does); each other broker creates its replicas when its own LeaderAndIsr arrives.
    wait_until(lambda: all(d.is_dir() for d in dirs), what="every replica's log dir")
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.delete_topics(["life"], operation_timeout=20)["life"].result(30)
    wait_until(lambda: not c.zk.exists("/brokers/topics/life")
               and not c.zk.exists("/admin/delete_topics/life")
               and not c.zk.exists("/config/topics/life"), what="znodes removed")
    wait_until(lambda: not any(d.exists() for d in dirs), what="log dirs removed")


def test_a_restarted_broker_serves_no_client_before_it_has_registered(
        zk_cluster: ZkCluster) -> None:
    """After kill -9 the broker's old session holds /brokers/ids/<id> until it expires; the
    restarted process waits for that before registering. Meanwhile its port must refuse
    connections, not answer Metadata from an empty cache ("topic does not exist"), as Kafka
    starts its request processors only at the end of start-up. Found by a manual run: kcat and
    the topics tool were told an existing topic did not exist for the whole session timeout."""
    import socket
    import threading

    c = zk_cluster
    create_topic(c, "t", 3)
    victim = next(b for b in c.brokers if b != c.controller())
    path = f"/brokers/ids/{victim}"
    old_owner = c.zk.exists(path).ephemeralOwner
    c.brokers[victim].kill()
    restarted = threading.Thread(target=c.brokers[victim].start, daemon=True)
    restarted.start()
    refused = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stat = c.zk.exists(path)
        if stat is not None and stat.ephemeralOwner != old_owner:
            break  # registered under its new session: serving is allowed from here
        if not c.brokers[victim].running():
            time.sleep(0.05)
            continue
        try:
            with socket.create_connection(("127.0.0.1", c.ports[victim]), timeout=1):
                stat = c.zk.exists(path)
                assert stat is not None and stat.ephemeralOwner != old_owner, \
                    "a connection was accepted before the broker registered"
        except ConnectionRefusedError:
            refused += 1
        time.sleep(0.05)
    restarted.join(30)
    assert refused > 0, "the restart never overlapped the old session"
    c.wait_registered()

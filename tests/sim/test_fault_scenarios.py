"""The in-process fault scenarios (tests/integration/test_faults_inprocess.py: the fault API
of docs/faults.md on three brokers) on the deterministic simulation: the same cluster and
the same `cluster.faults` calls, on virtual time and the simulated network
(`AsyncCluster(simulation=...)`, the `simulation` marker of odradek's pytest plugin), each
run judged by the consistency checker (docs/checker.md) over its history of sends and the
replicas' final logs. Waiting for a session to expire costs no wall time here; a failure
reports the digest's last events (the plugin)."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.chaos.checker.consistency import CheckReport, Guarantees, check
from odradek.chaos.checker.history import History
from odradek.client import AsyncAdmin
from odradek.cluster import AsyncCluster
from odradek.coordination import paths
from odradek.protocol.codec import make
from odradek.sim import Simulation
from tests.integration.broker_harness import batch, produce, req_module
from tests.integration.test_faults_inprocess import in_sync, isr, leader, registered
from tests.integration.test_replication import log_bytes, offsets, partition, values
from tests.wire import WireClient

pytestmark = pytest.mark.sim

SESSION_MS = 1500
FAST = {"replica.fetch.backoff.ms": 50, "replica.lag.time.max.ms": 1000,
        "zookeeper.session.timeout.ms": SESSION_MS, "controller.socket.timeout.ms": 3000,
        "replica.socket.timeout.ms": 3000, "leader.imbalance.check.interval.seconds": 3600}
MIN_ISR_2 = {"min.insync.replicas": "2"}
GUARANTEES = Guarantees(acks="all", min_insync_replicas=2)


async def three_brokers(simulation: Simulation, tmp_path: Path) -> AsyncCluster:
    cluster = AsyncCluster(3, simulation=simulation, data_dir=tmp_path, overrides=FAST)
    await cluster.start()
    admin = AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers})
    await admin.start()
    await admin.create_topic("t", 1, 3, config=MIN_ISR_2)
    await admin.close()
    await cluster.wait_for(lambda: all(("t", 0) in cluster.brokers[b].replica_manager.partitions
                                       for b in (0, 1, 2)), 30, "the replicas")
    return cluster


async def client(cluster: AsyncCluster, broker_id: int) -> WireClient:
    """A client of `broker_id` from the simulation's client host."""
    return await WireClient.connect(cluster.host_of(broker_id), cluster.ports[broker_id])


class Sends:
    """Produce requests to partition 0 of "t", recorded as the checker's history: acks=all
    acknowledged is `ok` at its offset; an error or acks=1 is `info` (the record may be in
    the log: a leader appends before it knows whether the write commits)."""

    def __init__(self) -> None:
        self.history = History()

    async def send(self, c: WireClient, value: bytes, acks: int = -1,
                   timeout_ms: int = 10000) -> Any:
        op = self.history.invoke("wire", "send", value.decode(), partition=0)
        request = produce("t", 0, batch([value]), acks=acks)
        request = make(type(request), transactional_id=None, acks=acks,
                       timeout=datetime.timedelta(milliseconds=timeout_ms),
                       topic_data=request.topic_data)
        try:
            r = await c.request(request, timeout=timeout_ms / 1000 + 10)
        except (TimeoutError, ConnectionError) as exc:
            self.history.info(op, type(exc).__name__)
            raise
        response = r.responses[0].partition_responses[0]
        if response.error_code == ErrorCode.none and acks == -1:
            self.history.ok(op, offset=response.base_offset)
        else:
            self.history.info(op, str(response.error_code) if response.error_code
                              != ErrorCode.none else "acks=1")
        return response

    def check(self, cluster: AsyncCluster) -> CheckReport:
        """The checker on the history, the leader's log below the HW as the final log and
        every replica's (call once in sync)."""
        lead = leader(cluster)
        hw = partition(cluster, lead).high_watermark
        replicas = {}
        for b in (0, 1, 2):
            data = log_bytes(cluster, b, hw)
            replicas[b] = [(o, v.decode()) for o, v in
                           zip(offsets(data), values(data), strict=True)]
        return check(self.history, GUARANTEES, {0: replicas[lead]}, replica_logs={0: replicas},
                     high_watermarks={0: hw})


def assert_verdicts(report: CheckReport, acked: int) -> None:
    assert report.ok, report.to_text()
    assert report.row("lost").verdict == "ok" and report.row("lost").checked == acked
    assert report.row("replicas").verdict == "ok" and report.row("replicas").checked > 0


@pytest.mark.simulation(seed=1)
async def test_isolated_leader_with_acks_all_loses_no_acknowledged_write(
        simulation: Simulation, tmp_path: Path) -> None:
    """The leader cut from the other brokers and the store while clients still reach it:
    what it accepts alone is truncated after the heal; every acks=all acknowledgement
    survives (the checker: nothing lost, replicas identical below the HW)."""
    cluster = await three_brokers(simulation, tmp_path)
    sends = Sends()
    old = leader(cluster)
    c = await client(cluster, old)
    for i in range(5):
        assert (await sends.send(c, b"before-%d" % i)).error_code == ErrorCode.none
    others = [b for b in (0, 1, 2) if b != old]
    handle = await cluster.faults.partition([old], [*others, "store"])
    zombie = await sends.send(c, b"zombie-acks-1", acks=1)
    assert zombie.error_code == ErrorCode.none  # the old leader still thinks it leads
    pending = await sends.send(c, b"zombie-acks-all", timeout_ms=1500)
    assert pending.error_code != ErrorCode.none  # never committed: no follower, no store
    await cluster.wait_for(lambda: leader(cluster) in others, 30, "a new leader")
    new = leader(cluster)
    await cluster.wait_for(lambda: partition(cluster, new).leader_id == new, 30,
                           "the new leader to know it leads")
    c2 = await client(cluster, new)
    for i in range(5):
        r = await sends.send(c2, b"during-%d" % i)
        assert r.error_code == ErrorCode.none, r.error_code
    assert not registered(cluster, old)  # its session expired
    await cluster.faults.heal(handle)
    await cluster.wait_for(lambda: registered(cluster, old), 30, "the old leader back")
    assert (await sends.send(c2, b"after")).error_code == ErrorCode.none
    await in_sync(cluster)
    report = sends.check(cluster)
    assert_verdicts(report, 11)
    assert report.row("unknown").observed == 2  # the zombie's two: both truncated
    assert report.row("unknown").examples[0] == "0 in the final logs, 2 not"
    await c.close()
    await c2.close()
    await cluster.stop()


@pytest.mark.simulation(seed=2)
async def test_store_isolation_expires_the_session(simulation: Simulation,
                                                   tmp_path: Path) -> None:
    """Healed within the session timeout the session survives; past it the session expires,
    leadership moves, and the healed broker registers again and rejoins the ISR."""
    cluster = await three_brokers(simulation, tmp_path)
    sends = Sends()
    target = leader(cluster)
    store = cluster.brokers[target].store
    assert store is not None
    session = store.session_id
    c = await client(cluster, target)
    assert (await sends.send(c, b"before")).error_code == ErrorCode.none
    handle = await cluster.faults.isolate_from_store(target)
    await asyncio.sleep(SESSION_MS / 1000 / 4)
    await cluster.faults.heal(handle)
    assert store.session_id == session and registered(cluster, target)

    began = simulation.now
    handle = await cluster.faults.isolate_from_store(target)
    await cluster.wait_for(lambda: not registered(cluster, target), 10, "session expiry")
    assert SESSION_MS / 1000 <= simulation.now - began < SESSION_MS / 1000 + 1
    await cluster.wait_for(lambda: leader(cluster) != target, 30, "another leader")
    assert target not in isr(cluster)
    c2 = await client(cluster, leader(cluster))
    assert (await sends.send(c2, b"during")).error_code == ErrorCode.none
    await cluster.faults.heal(handle)
    await cluster.wait_for(lambda: registered(cluster, target), 30, "re-registered")
    assert store.session_id != session
    await in_sync(cluster)
    assert_verdicts(sends.check(cluster), 2)
    kinds = [(e.kind, e.phase) for e in cluster.faults.events()]
    assert kinds.count(("isolate-store", "start")) == kinds.count(("isolate-store", "end")) == 2
    await c.close()
    await c2.close()
    await cluster.stop()


@pytest.mark.simulation(seed=3)
async def test_expire_session(simulation: Simulation, tmp_path: Path) -> None:
    """Expired while connected: a new session at once, and the broker registers again."""
    cluster = await three_brokers(simulation, tmp_path)
    sends = Sends()
    target = leader(cluster)
    store = cluster.brokers[target].store
    assert store is not None
    session = store.session_id
    await cluster.faults.expire_session(target)
    assert store.session_id != session

    async def owner() -> int | None:
        stat = await store.exists(f"/brokers/ids/{target}")
        return None if stat is None else stat.ephemeral_owner
    while await owner() != store.session_id:
        assert simulation.now < 60, "never registered again"
        await asyncio.sleep(0.05)
    await in_sync(cluster)
    c = await client(cluster, leader(cluster))
    assert (await sends.send(c, b"after")).error_code == ErrorCode.none
    await in_sync(cluster)
    assert_verdicts(sends.check(cluster), 1)
    assert [e.kind for e in cluster.faults.events()] == ["expire-session"]
    await c.close()
    await cluster.stop()


@pytest.mark.simulation(seed=4)
async def test_one_way_partition_drops_the_follower_from_the_isr(
        simulation: Simulation, tmp_path: Path) -> None:
    """Follower -> leader cut only (the simulated link one way): the follower's fetches never
    arrive, the leader shrinks the ISR after replica.lag.time.max.ms and keeps serving."""
    cluster = await three_brokers(simulation, tmp_path)
    sends = Sends()
    lead = leader(cluster)
    follower = next(b for b in (0, 1, 2) if b != lead)
    handle = await cluster.faults.partition([follower], [lead], one_way=True)
    assert cluster.faults.active()[0].kind == "one-way-partition"
    c = await client(cluster, lead)
    assert (await sends.send(c, b"while-cut", acks=1)).error_code == ErrorCode.none
    began = simulation.now
    await cluster.wait_for(lambda: follower not in isr(cluster), 30, "the ISR shrink")
    assert simulation.now - began < 3 * FAST["replica.lag.time.max.ms"] / 1000
    assert leader(cluster) == lead and registered(cluster, follower)
    assert (await sends.send(c, b"acked")).error_code == ErrorCode.none  # 2 of 3 in sync
    await cluster.faults.heal(handle)
    assert cluster.faults.active() == []
    await in_sync(cluster)
    assert b"while-cut" in values(log_bytes(cluster, follower, 10))
    assert_verdicts(sends.check(cluster), 1)
    await c.close()
    await cluster.stop()


@pytest.mark.simulation(seed=5)
async def test_a_controller_cut_from_the_store_is_replaced(simulation: Simulation,
                                                          tmp_path: Path) -> None:
    """Once the cut controller's session expires another broker takes /controller; healed,
    the old one resigns and registers again."""
    def store_controller() -> int:
        data = cluster.zookeeper.dump(paths.CONTROLLER).get(paths.CONTROLLER)
        reg = paths.decode_controller(data)
        return -1 if reg is None else reg.broker_id

    cluster = await three_brokers(simulation, tmp_path)
    sends = Sends()
    old = store_controller()
    assert old >= 0
    handle = await cluster.faults.isolate_from_store(old)
    await cluster.wait_for(lambda: store_controller() not in (-1, old), 30,
                           "another controller")
    await cluster.faults.heal(handle)
    controller = cluster.brokers[old].controller
    await cluster.wait_for(lambda: controller is not None and not controller.is_active,
                           30, "the old controller to resign")
    await cluster.wait_for(lambda: registered(cluster, old), 30, "re-registered")
    assert cluster.controller_id() == store_controller() != old
    await in_sync(cluster)
    c = await client(cluster, leader(cluster))
    assert (await sends.send(c, b"after")).error_code == ErrorCode.none
    await in_sync(cluster)
    assert_verdicts(sends.check(cluster), 1)
    await c.close()
    await cluster.stop()


@pytest.mark.simulation(seed=6)
async def test_pause_and_resume(simulation: Simulation, tmp_path: Path) -> None:
    """A paused follower (every simulated link to and from it held, its store connection
    suspended) hears nothing and is heard by nobody: its session expires, it leaves the
    ISR, its clients get no answer; resumed, it is back."""
    cluster = await three_brokers(simulation, tmp_path)
    sends = Sends()
    lead = leader(cluster)
    target = next(b for b in (0, 1, 2) if b != lead)
    c = await client(cluster, target)
    await cluster.faults.pause(target)
    with pytest.raises(TimeoutError):
        await c.request(req_module(18, 3).ApiVersionsRequest(
            client_software_name="t", client_software_version="1"), timeout=0.5)
    await cluster.wait_for(lambda: not registered(cluster, target), 10, "session expiry")
    await cluster.wait_for(lambda: target not in isr(cluster), 30, "the ISR shrink")
    c2 = await client(cluster, lead)
    assert (await sends.send(c2, b"while-paused")).error_code == ErrorCode.none
    await cluster.faults.resume(target)
    await cluster.wait_for(lambda: registered(cluster, target), 30, "re-registered")
    await in_sync(cluster)
    assert_verdicts(sends.check(cluster), 1)
    assert [(e.kind, e.phase, e.targets) for e in cluster.faults.events()] == [
        ("pause", "start", (f"broker-{target}",)), ("pause", "end", (f"broker-{target}",))]
    await c.close()
    await c2.close()
    await cluster.stop()


@pytest.mark.simulation(seed=7)
async def test_a_slow_link_costs_exactly_its_latency(simulation: Simulation,
                                                      tmp_path: Path) -> None:
    """`slow(["clients"], [leader], latency_ms=200)` on the simulated links: a round trip
    takes 400 ms more of virtual time, to the link's latencies."""
    cluster = await three_brokers(simulation, tmp_path)
    sends = Sends()
    lead = leader(cluster)
    c = await client(cluster, lead)
    began = simulation.now
    assert (await sends.send(c, b"fast", acks=1)).error_code == ErrorCode.none
    fast = simulation.now - began
    handle = await cluster.faults.slow(["clients"], [lead], latency_ms=200)
    began = simulation.now
    assert (await sends.send(c, b"slow", acks=1)).error_code == ErrorCode.none
    assert 0.4 <= simulation.now - began <= 0.4 + fast + 0.01
    await cluster.faults.heal(handle)
    assert cluster.faults.active() == []
    await c.close()
    await cluster.stop()

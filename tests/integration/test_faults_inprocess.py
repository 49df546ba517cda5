"""The in-process fault API (odradek.cluster.ClusterFaults, docs/faults.md) on 3-broker clusters
whose links pass through the fault network: an isolated leader loses no acknowledged write and
its uncommitted ones are truncated after healing; a broker cut from the store has its session
expired and comes back; a one-way cut drops a follower from the ISR; pause and resume; a slow
link; the fault log. Timeouts are made small with broker overrides."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster, Cluster
from odradek.common.fault_log import read_fault_events
from odradek.protocol.codec import make
from tests.integration.broker_harness import batch, produce, req_module, run
from tests.integration.test_replication import create, log_bytes, partition, state, values
from tests.wire import WireClient

SESSION_MS = 1500
FAST = {"replica.fetch.backoff.ms": 50, "replica.lag.time.max.ms": 1000,
        "zookeeper.session.timeout.ms": SESSION_MS, "controller.socket.timeout.ms": 3000,
        "replica.socket.timeout.ms": 3000, "leader.imbalance.check.interval.seconds": 3600}
MIN_ISR_2 = {"min.insync.replicas": "2"}


def with_cluster(tmp_path: Path, body: Callable[[AsyncCluster], Awaitable[None]],
                 timeout: float = 90, **kwargs: Any) -> None:
    async def main() -> None:
        kwargs.setdefault("network_faults", True)
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST, http=False,
                                **kwargs) as cluster:
            await create(cluster, "t", configs=MIN_ISR_2, replicas=(0, 1, 2))
            await body(cluster)
    run(main, timeout)


async def client(cluster: AsyncCluster, broker_id: int) -> WireClient:
    """A client of ``broker_id`` through its advertised address (the clients' proxy)."""
    return await WireClient.connect("127.0.0.1", cluster.ports[broker_id])


async def send(c: WireClient, value: bytes, acks: int = -1, timeout_ms: int = 10000) -> Any:
    request = produce("t", 0, batch([value]), acks=acks)
    request = make(type(request), transactional_id=None, acks=acks,
                   timeout=datetime.timedelta(milliseconds=timeout_ms),
                   topic_data=request.topic_data)
    r = await c.request(request, timeout=timeout_ms / 1000 + 10)
    return r.responses[0].partition_responses[0]


def isr(cluster: AsyncCluster) -> set[int]:
    return set(state(cluster)["isr"])


def leader(cluster: AsyncCluster) -> int:
    return int(state(cluster)["leader"])


def registered(cluster: AsyncCluster, broker_id: int) -> bool:
    return f"/brokers/ids/{broker_id}" in cluster.zookeeper.dump("/brokers/ids")


async def in_sync(cluster: AsyncCluster) -> None:
    """Every replica back in the ISR and at the leader's log end."""
    await cluster.wait_for(lambda: isr(cluster) == {0, 1, 2}, 30, "the full ISR")
    lead = partition(cluster, leader(cluster))
    await cluster.wait_for(
        lambda: all(partition(cluster, b).log_end_offset == lead.log_end_offset
                    and partition(cluster, b).high_watermark == lead.log_end_offset
                    for b in (0, 1, 2)), 30, "replicas caught up")


def test_isolated_leader_with_acks_all_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """The leader is cut from the other brokers and the store while clients still reach it
    (a zombie leader): the writes it accepts alone (acks=1) or cannot commit (acks=all) are
    never acknowledged as committed and are truncated once the partition heals; every write
    acknowledged with acks=all, before and during the partition, is on every replica."""
    async def body(cluster: AsyncCluster) -> None:
        old = leader(cluster)
        acked: list[bytes] = []
        c = await client(cluster, old)
        for i in range(5):
            assert (await send(c, b"before-%d" % i)).error_code == ErrorCode.none
            acked.append(b"before-%d" % i)
        others = [b for b in (0, 1, 2) if b != old]
        handle = await cluster.faults.partition([old], [*others, "store"])
        zombie = await send(c, b"zombie-acks-1", acks=1)
        assert zombie.error_code == ErrorCode.none  # the old leader still thinks it leads
        pending = await send(c, b"zombie-acks-all", timeout_ms=1500)
        assert pending.error_code != ErrorCode.none  # never committed: no follower, no ZK
        await cluster.wait_for(lambda: leader(cluster) in others, 30, "a new leader")
        new = leader(cluster)  # in the store; then told by LeaderAndIsr:
        await cluster.wait_for(lambda: partition(cluster, new).leader_id == new, 30,
                               "the new leader to know it leads")
        c2 = await client(cluster, new)
        for i in range(5):
            r = await send(c2, b"during-%d" % i)
            assert r.error_code == ErrorCode.none, r.error_code
            acked.append(b"during-%d" % i)
        assert not registered(cluster, old)  # its session expired
        await cluster.faults.heal(handle)
        await cluster.wait_for(lambda: registered(cluster, old), 30, "the old leader back")
        assert (await send(c2, b"after")).error_code == ErrorCode.none
        acked.append(b"after")
        await in_sync(cluster)
        hw = partition(cluster, new).high_watermark
        logs = {b: log_bytes(cluster, b, hw) for b in (0, 1, 2)}
        assert logs[old] == logs[new]  # the old leader truncated to the new leader's log
        for b in (0, 1, 2):
            got = values(logs[b])
            assert [v for v in got if v in acked] == acked, (b, got)
            assert b"zombie-acks-1" not in got and b"zombie-acks-all" not in got
        await c.close()
        await c2.close()
    with_cluster(tmp_path, body)


def test_store_isolation_expires_the_session(tmp_path: Path) -> None:
    """Cut from the store only: healed within the session timeout the session survives;
    past it the session expires, the controller moves leadership away, and healing brings
    the broker back, registered on a new session and in the ISR again."""
    async def body(cluster: AsyncCluster) -> None:
        target = leader(cluster)
        store = cluster.brokers[target].store
        assert store is not None
        session = store.session_id
        handle = await cluster.faults.isolate_from_store(target)
        await asyncio.sleep(SESSION_MS / 1000 / 4)
        await cluster.faults.heal(handle)
        assert store.session_id == session and registered(cluster, target)

        handle = await cluster.faults.isolate_from_store(target)
        await cluster.wait_for(lambda: not registered(cluster, target), 10, "session expiry")
        await cluster.wait_for(lambda: leader(cluster) != target, 30, "another leader")
        assert target not in isr(cluster)
        assert cluster.controller_id() != -1
        await cluster.faults.heal(handle)
        await cluster.wait_for(lambda: registered(cluster, target), 30, "re-registered")
        assert store.session_id != session
        await in_sync(cluster)
        kinds = [(e.kind, e.phase) for e in cluster.faults.events()]
        assert kinds.count(("isolate-store", "start")) == 2
        assert kinds.count(("isolate-store", "end")) == 2
    with_cluster(tmp_path, body)


def test_expire_session(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        """Expired while connected: a new session at once, and the broker registers again."""
        target = leader(cluster)
        store = cluster.brokers[target].store
        assert store is not None
        session = store.session_id
        await cluster.faults.expire_session(target)
        assert store.session_id != session

        async def owner() -> int | None:
            stat = await store.exists(f"/brokers/ids/{target}")
            return None if stat is None else stat.ephemeral_owner
        deadline = asyncio.get_running_loop().time() + 30
        while await owner() != store.session_id:
            assert asyncio.get_running_loop().time() < deadline, "never registered again"
            await asyncio.sleep(0.05)
        await in_sync(cluster)
        assert [e.kind for e in cluster.faults.events()] == ["expire-session"]
    with_cluster(tmp_path, body)


def test_a_registration_cut_short_by_a_lost_connection_is_sent_again(tmp_path: Path) -> None:
    """Kafka's registerBroker retries until connected: the session expired during a cut,
    the connection comes back on a new session and is lost again before the broker's new
    registration goes out; once connected again, the broker registers (it used to give up
    and stay out of /brokers/ids until its next session expiry)."""
    async def body(cluster: AsyncCluster) -> None:
        target = next(b for b in (0, 1, 2) if b != cluster.controller_id())
        store = cluster.brokers[target].store
        other = cluster.brokers[cluster.controller_id()].store
        assert store is not None and other is not None
        store.disconnect()  # type: ignore[attr-defined]
        store.expire_session()  # type: ignore[attr-defined]
        store.reconnect()  # type: ignore[attr-defined]  # EXPIRED, then CONNECTED (new session)
        store.disconnect()  # type: ignore[attr-defined]  # lost again before the registration
        await asyncio.sleep(0.5)  # the broker's re-registration meets the lost connection
        assert await other.exists(f"/brokers/ids/{target}") is None
        store.reconnect()  # type: ignore[attr-defined]  # the same session: no new expiry
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            stat = await other.exists(f"/brokers/ids/{target}")
            if stat is not None and stat.ephemeral_owner == store.session_id:
                break
            assert asyncio.get_running_loop().time() < deadline, "never registered again"
            await asyncio.sleep(0.05)
        assert cluster.brokers[target].broker_epoch == stat.czxid
        await in_sync(cluster)
    with_cluster(tmp_path, body)


def test_one_way_partition_drops_the_follower_from_the_isr(tmp_path: Path) -> None:
    """Follower -> leader cut only: the follower's fetches never arrive, the leader shrinks
    the ISR after replica.lag.time.max.ms and keeps serving clients; healed, it returns."""
    async def body(cluster: AsyncCluster) -> None:
        lead = leader(cluster)
        follower = next(b for b in (0, 1, 2) if b != lead)
        handle = await cluster.faults.partition([follower], [lead], one_way=True)
        assert cluster.faults.active()[0].kind == "one-way-partition"
        c = await client(cluster, lead)  # clients still reach the leader
        # a follower falls behind only if there is something to fetch
        assert (await send(c, b"while-cut", acks=1)).error_code == ErrorCode.none
        await cluster.wait_for(lambda: follower not in isr(cluster), 30, "the ISR shrink")
        assert leader(cluster) == lead and registered(cluster, follower)
        assert (await send(c, b"acked")).error_code == ErrorCode.none  # 2 of 3 in sync
        await cluster.faults.heal(handle)
        assert cluster.faults.active() == []
        await in_sync(cluster)
        assert b"while-cut" in values(log_bytes(cluster, follower, 10))
        await c.close()
    with_cluster(tmp_path, body)


def test_pause_and_resume(tmp_path: Path) -> None:
    """A paused follower hears nothing and is heard by nobody: its session expires, it
    leaves the ISR, clients get no answer from it; resumed, it is back."""
    async def body(cluster: AsyncCluster) -> None:
        lead = leader(cluster)
        target = next(b for b in (0, 1, 2) if b != lead)
        c = await client(cluster, target)
        await cluster.faults.pause(target)
        with pytest.raises(TimeoutError):
            await c.request(req_module(18, 3).ApiVersionsRequest(
                client_software_name="t", client_software_version="1"), timeout=0.5)
        await cluster.wait_for(lambda: not registered(cluster, target), 10, "session expiry")
        await cluster.wait_for(lambda: target not in isr(cluster), 30, "the ISR shrink")
        await cluster.faults.resume(target)
        await cluster.wait_for(lambda: registered(cluster, target), 30, "re-registered")
        await in_sync(cluster)
        events = cluster.faults.events()
        assert [(e.kind, e.phase, e.targets) for e in events] == [
            ("pause", "start", (f"broker-{target}",)), ("pause", "end", (f"broker-{target}",))]
    with_cluster(tmp_path, body)


def test_slow_link_and_the_fault_log(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        lead = leader(cluster)
        c = await client(cluster, lead)
        handle = await cluster.faults.slow(["clients"], [lead], latency_ms=200)
        start = time.monotonic()
        assert (await send(c, b"slow", acks=1)).error_code == ErrorCode.none
        assert time.monotonic() - start >= 0.2  # the request one way, the response back
        await cluster.faults.heal(handle)
        assert (await send(c, b"healed", acks=1)).error_code == ErrorCode.none
        events = read_fault_events(cluster.data_dir / "faults.log")
        assert [(e.kind, e.phase) for e in events] == [("slow-link", "start"),
                                                       ("slow-link", "end")]
        assert events[0].targets == (f"broker-{lead}", "clients")
        assert "latency 200 ms" in events[0].detail
        assert events == cluster.faults.events()
        await c.close()
    with_cluster(tmp_path, body)


def test_link_faults_need_the_fault_network(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        with pytest.raises(RuntimeError, match="network_faults=True"):
            await cluster.faults.isolate(0)
        with pytest.raises(RuntimeError, match="network_faults=True"):
            await cluster.faults.pause(0)
        # a cut between brokers and the store needs no proxy
        handle = await cluster.faults.partition([1], ["store"])
        await cluster.faults.heal(handle)
    with_cluster(tmp_path, body, network_faults=False)


@pytest.mark.odradek_cluster(brokers=3, network_faults=True,
                             overrides={"zookeeper.session.timeout.ms": SESSION_MS})
def test_the_fixture_and_a_real_producer_during_a_partition(odradek_cluster: Cluster) -> None:
    """What the README shows: confluent-kafka's acks=all producer across an isolated leader."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = odradek_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("events", 1, 3, config=MIN_ISR_2)])["events"].result(20)
    producer = confluent_kafka.Producer({  # a held request is given up after 3 s, retried
        "bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
        "enable.idempotence": True, "socket.timeout.ms": 3000})
    delivered: list[bytes] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            delivered.append(msg.value())

    producer.produce("events", b"before", on_delivery=report)
    producer.flush(20)
    md = admin.list_topics("events", timeout=10)
    old = md.topics["events"].partitions[0].leader
    cluster.faults.isolate(old)
    for i in range(10):
        producer.produce("events", b"during-%d" % i, on_delivery=report)
    assert producer.flush(60) == 0
    cluster.faults.heal()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "group.id": "check", "auto.offset.reset": "earliest"})
    consumer.subscribe(["events"])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < len(delivered) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
    consumer.close()
    assert len(delivered) == 11 and sorted(seen) == sorted(delivered)


def test_console_actions_and_a_restart_under_a_store_cut(tmp_path: Path) -> None:
    """The console's entry point (`run`) isolates and heals; a broker restarted while cut from
    the store stays cut (its new session expires) until healed."""
    async def body(cluster: AsyncCluster) -> None:
        faults = cluster.faults
        assert faults.actions == ("kill", "restart", "pause", "resume", "isolate", "heal")
        target = 2
        await faults.run("isolate", target)
        assert [f.kind for f in faults.active()] == ["isolate"]
        await cluster.wait_for(lambda: not registered(cluster, target), 10, "session expiry")
        await faults.run("heal", target)
        assert faults.active() == []
        await cluster.wait_for(lambda: registered(cluster, target), 30, "re-registered")
        with pytest.raises(ValueError):
            faults.run("explode", target)

        handle = await faults.isolate_from_store(target)
        await faults.restart(target)
        store = cluster.brokers[target].store
        assert store is not None and not store.connected
        await cluster.wait_for(lambda: not registered(cluster, target), 10, "session expiry")
        await faults.heal(handle)
        await cluster.wait_for(lambda: registered(cluster, target), 30, "re-registered")
        await in_sync(cluster)
    with_cluster(tmp_path, body, console_faults=True)


def test_tls_and_sasl_pass_through_the_proxies(tmp_path: Path) -> None:
    """A SASL_SSL cluster behind the fault network: clients and brokers (replication, the
    controller) reach each other through the proxies, end to end secured."""
    from odradek.client import AsyncAdmin, AsyncProducer
    from odradek.cluster import ClusterSecurity

    async def main() -> None:
        security = ClusterSecurity(listeners=("SASL_SSL",), users={"alice": "alice-secret"})
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST, http=False,
                                network_faults=True, security=security) as cluster:
            config = cluster.client_config()
            admin = AsyncAdmin(config)
            await admin.start()
            await admin.create_topic("t", 1, 3, config=MIN_ISR_2)
            await admin.close()
            producer = AsyncProducer({**config, "acks": "all"})
            await producer.start()
            await producer.send_and_wait("t", b"secured")
            await producer.close()
            proxies = cluster.link_proxies
            assert any(p.connections for (src, _, _), p in proxies.items() if src == "clients")
            assert any(p.connections for (src, _, _), p in proxies.items() if src != "clients")
            await in_sync(cluster)
    run(main, 90)


def test_link_proxy_holds_then_delivers_in_order() -> None:
    """The proxy alone, in front of an echo server: a cut direction holds bytes (nothing is
    lost, nothing arrives) and heal delivers them in order; a one-way cut holds only its
    direction; loss delays a chunk by a retransmission timeout, never reorders."""
    from odradek.faults import FaultNetwork, LinkProxy, NetworkState, Rule
    from odradek.faults.network import RETRANSMISSION_TIMEOUT_MS, group

    async def main() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        network = FaultNetwork(seed=1)
        proxy = LinkProxy(network, 0, 1, "127.0.0.1", lambda: port)
        await proxy.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            writer.write(b"a")
            assert await asyncio.wait_for(reader.readexactly(1), 5) == b"a"
            cut = NetworkState({1: Rule("partition", group([0]), group([1]))})
            network.set_state(cut)
            writer.write(b"bc")
            writer.write(b"d")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(10), 0.3)
            network.set_state(NetworkState())
            assert await asyncio.wait_for(reader.readexactly(3), 5) == b"bcd"
            # one way, answers cut: the request reaches the echo, the answer waits
            network.set_state(NetworkState({1: Rule("one-way-partition", group([1]),
                                                    group([0]), one_way=True)}))
            writer.write(b"e")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(10), 0.3)
            network.set_state(NetworkState())
            assert await asyncio.wait_for(reader.readexactly(1), 5) == b"e"
            # every chunk lost once: one retransmission timeout each way, in order
            network.set_state(NetworkState({1: Rule("slow-link", group([0]), group([1]),
                                                    loss=1.0)}))
            start = time.monotonic()
            writer.write(b"f")
            assert await asyncio.wait_for(reader.readexactly(1), 5) == b"f"
            assert time.monotonic() - start >= 2 * RETRANSMISSION_TIMEOUT_MS / 1000
        finally:
            writer.close()
            await proxy.close()
            server.close()
    run(main, 30)


def test_a_controller_cut_from_the_store_is_replaced(tmp_path: Path) -> None:
    """The controller loses the store: once its session expires another broker takes
    /controller; healed, the old one learns of the expiry, resigns and registers again."""
    from odradek.coordination import paths

    def store_controller(cluster: AsyncCluster) -> int:
        data = cluster.zookeeper.dump(paths.CONTROLLER).get(paths.CONTROLLER)
        reg = paths.decode_controller(data)
        return -1 if reg is None else reg.broker_id

    async def body(cluster: AsyncCluster) -> None:
        old = store_controller(cluster)
        assert old >= 0
        handle = await cluster.faults.isolate_from_store(old)
        await cluster.wait_for(lambda: store_controller(cluster) not in (-1, old), 30,
                               "another controller")
        await cluster.faults.heal(handle)
        controller = cluster.brokers[old].controller
        await cluster.wait_for(lambda: controller is not None and not controller.is_active,
                               30, "the old controller to resign")
        await cluster.wait_for(lambda: registered(cluster, old), 30, "re-registered")
        assert cluster.controller_id() == store_controller(cluster) != old
        await in_sync(cluster)
    with_cluster(tmp_path, body)

"""Preferred replica election, ElectLeaders and the auto leader rebalance on in-process clusters
(S-6.1, Kafka's preferred replica leader election tool).

The worked example of S-6.1: 8 brokers (ids 1-8), topic1 with 8 partitions and replication factor
3, brokers 1/2/4 stopped, broker 1 restarted, the tool run, brokers 2 and 4 restarted, the tool
run again. The design notes give the assignment only as figures, so it is derived from what
their text says: partition p's preferred replica is broker p+1 (the original leaders 1, 2, 3,
4 of partitions 0-3, and after the tool only partitions 1 and 3 are not led by their preferred
replica, "because brokers 2 and 4 are not started"); with 1/2/4 down, partition 0 moves 1 -> 3,
partition 1 moves 2 -> 5 and partition 3 moves 4 -> 7; broker 1 is in the ISR of partitions 0
and 5. EXAMPLE_ASSIGNMENT satisfies all of that. The text also says partition 2 moved 3 -> 6, which
no assignment can produce with broker 3 alive (a clean controller never moves leadership off a
live ISR leader): here partition 2 keeps leader 3, so after broker 1 returns brokers 3, 5 and 7
(not 5, 6 and 7) lead two partitions each; every other statement of the text is asserted.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek import cli
from odradek.client import AsyncAdmin
from odradek.client.types import NewTopic, TopicPartition
from odradek.cluster import AsyncCluster
from odradek.controller.controller import _Call
from odradek.protocol.codec import make
from odradek.tools.leader_election import write_election_znode
from tests.integration.broker_harness import req_module, run
from tests.wire import WireClient

EXAMPLE_ASSIGNMENT = {0: [1, 2, 3], 1: [2, 4, 5], 2: [3, 6, 7], 3: [4, 7, 8],
                   4: [5, 8, 2], 5: [6, 1, 4], 6: [7, 3, 5], 7: [8, 5, 6]}
PREFERRED = {p: r[0] for p, r in EXAMPLE_ASSIGNMENT.items()}
# After brokers 1, 2, 4 stopped (and after broker 1 came back: nothing moves by itself).
SKEWED = {0: 3, 1: 5, 2: 3, 3: 7, 4: 5, 5: 6, 6: 7, 7: 8}
# After the first run of the tool: all preferred but partitions 1 and 3.
AFTER_FIRST_RUN = {0: 1, 1: 5, 2: 3, 3: 7, 4: 5, 5: 6, 6: 7, 7: 8}
ELECTION_ZNODE = "/admin/preferred_replica_election"


def state(cluster: AsyncCluster, topic: str, p: int) -> dict[str, Any]:
    path = f"/brokers/topics/{topic}/partitions/{p}/state"
    return json.loads(cluster.zookeeper.dump(path)[path])


def leaders(cluster: AsyncCluster, topic: str, n: int) -> dict[int, int]:
    return {p: state(cluster, topic, p)["leader"] for p in range(n)}


def znode_exists(cluster: AsyncCluster, path: str) -> bool:
    return path in cluster.zookeeper.dump(path)


async def wait_isr(cluster: AsyncCluster, topic: str, members: dict[int, list[int]]) -> None:
    await cluster.wait_for(lambda: all(set(b) <= set(state(cluster, topic, p)["isr"])
                                       for p, b in members.items()),
                           timeout=60, what=f"ISRs to contain {members}")


async def write_znode(cluster: AsyncCluster, partitions: list[Any] | None) -> str:
    """What `odradek preferred-replica-election --zookeeper` does, on the embedded store."""
    store = cluster.zookeeper.client()
    await store.start()
    try:
        return await write_election_znode(store, partitions)
    finally:
        await store.close()


async def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_stopped_brokers_skew_leaders_and_preferred_election_rebalances(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def body() -> None:
        cluster = AsyncCluster(9, data_dir=tmp_path,
                               overrides={"auto.leader.rebalance.enable": "false"})
        await asyncio.gather(*(cluster.start_broker(b) for b in range(1, 9)))  # ids 1-8
        try:
            async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
                await admin.create_topics([NewTopic("topic1",
                                                    replica_assignment=EXAMPLE_ASSIGNMENT)])
                await admin.wait_for_topics(["topic1"], 60)
            assert leaders(cluster, "topic1", 8) == PREFERRED  # balanced: one leader each

            for b in (1, 2, 4):
                await cluster.stop_broker(b)
            await cluster.wait_for(lambda: leaders(cluster, "topic1", 8) == SKEWED, 60,
                                   "leaders after stopping brokers 1, 2, 4")
            # "Partition 0 1 -> 3, partition 1 2 -> 5, partition 3 4 -> 7".
            assert (SKEWED[0], SKEWED[1], SKEWED[3]) == (3, 5, 7)

            await cluster.start_broker(1)
            await wait_isr(cluster, "topic1", {0: [1], 5: [1]})
            # Broker 1 is back in the ISRs of partitions 0 and 5 but leads nothing.
            assert leaders(cluster, "topic1", 8) == SKEWED
            counts = Counter(SKEWED.values())
            assert 1 not in counts and max(counts.values()) == 2
            assert {b for b, n in counts.items() if n == 2} == {3, 5, 7}

            # The tool, ZooKeeper mode: the znode, the controller elects, deletes the node.
            written = json.loads(await write_znode(cluster, None))
            assert written["version"] == 1 and len(written["partitions"]) == 8
            await cluster.wait_for(lambda: not znode_exists(cluster, ELECTION_ZNODE), 60,
                                   "the controller to delete the election znode")
            assert leaders(cluster, "topic1", 8) == AFTER_FIRST_RUN
            assert state(cluster, "topic1", 0)["leader_epoch"] > 0
            # The controller's state-change.log tells what it did and skipped (S-6.5 shape).
            ctl = cluster.controller_id()
            log = (tmp_path / f"broker-{ctl}" / "state-change.log").read_text()
            assert "Starting replica leader election (PREFERRED) for partitions topic1-0 " \
                   "triggered by ZkTriggered" in log
            assert "Skipping replica leader election (PREFERRED) for partition topic1-1 by " \
                   "ZkTriggered" in log
            counts = Counter(AFTER_FIRST_RUN.values())
            assert max(counts.values()) == 2 and min(counts.values()) == 1
            assert set(counts) == {1, 3, 5, 6, 7, 8}

            # Brokers 2 and 4 return: nothing moves by itself.
            await cluster.start_broker(2)
            await cluster.start_broker(4)
            await wait_isr(cluster, "topic1", {1: [2], 3: [4], 0: [2], 4: [2], 5: [4]})
            assert leaders(cluster, "topic1", 8) == AFTER_FIRST_RUN

            # The tool again (kafka-leader-election, through ElectLeaders on the controller).
            code, out, err = await run_cli(
                capsys, "leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                "--election-type", "PREFERRED", "--all-topic-partitions")
            assert code == 0, (out, err)
            assert "Successfully completed leader election (PREFERRED) for partitions " \
                   "topic1-1, topic1-3\n" in out
            # every partition asked (null): Kafka leaves out those needing no election
            assert "Valid replica already elected" not in out
            # Every partition led by its preferred replica, one leader per broker.
            assert leaders(cluster, "topic1", 8) == PREFERRED
            assert sorted(Counter(PREFERRED.values()).values()) == [1] * 8

            # Once more: nothing to do.
            code, out, _ = await run_cli(
                capsys, "leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                "--election-type", "preferred", "--topic", "topic1", "--partition", "1")
            assert code == 0 and out == "Valid replica already elected for partitions " \
                                        "topic1-1\n"
        finally:
            await cluster.stop()
    run(body, 300)


def test_preferred_election_survives_controller_failover(tmp_path: Path) -> None:
    """The znode is written while the controller is busy; the controller loses its place
    before it gets to it; its successor does the election (resumed at failover, S-5.6) and
    deletes the node."""
    async def body() -> None:
        async with AsyncCluster(4, data_dir=tmp_path,
                                overrides={"auto.leader.rebalance.enable": "false"}) as cluster:
            old = cluster.controller_id()
            a, b, c = [x for x in range(4) if x != old]
            assignment = {0: [a, b, c], 1: [b, c, a], 2: [c, a, b]}
            async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
                await admin.create_topics([NewTopic("t", replica_assignment=assignment)])
                await admin.wait_for_topics(["t"], 60)
            await cluster.stop_broker(a)
            await cluster.start_broker(a)
            await wait_isr(cluster, "t", {0: [a], 2: [a]})
            assert leaders(cluster, "t", 3) == {0: b, 1: b, 2: c}

            controller = cluster.brokers[old].controller
            assert controller is not None
            release = asyncio.Event()

            async def busy() -> None:
                await release.wait()
            controller.events.put(_Call(busy))
            await cluster.wait_for(lambda: controller.events.qsize() == 0, what="busy")
            epoch_before = json.loads(cluster.zookeeper.dump("/controller_epoch")
                                      ["/controller_epoch"])
            await write_znode(cluster, [TopicPartition("t", 0), TopicPartition("t", 1)])
            # The watch fired: the election waits in the old controller's queue...
            await cluster.wait_for(lambda: controller.events.qsize() >= 1, what="event queued")
            # ...and the old controller's session expires before it gets there.
            store = cluster.brokers[old].store
            assert store is not None and store.session_id is not None
            cluster.zookeeper.expire_session(store.session_id)
            try:
                await cluster.wait_for(lambda: not znode_exists(cluster, ELECTION_ZNODE), 60,
                                       "the new controller to complete the election")
            finally:
                release.set()
            new_controller = json.loads(cluster.zookeeper.dump("/controller")
                                        ["/controller"])["brokerid"]
            assert new_controller != old
            s0 = state(cluster, "t", 0)
            assert s0["leader"] == a and s0["controller_epoch"] > epoch_before
            # t-1's preferred replica already led: untouched; t-2 was not asked for.
            assert leaders(cluster, "t", 3) == {0: a, 1: b, 2: c}
    run(body, 180)


def test_elect_leaders_preferred_unclean_and_errors(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path,
                                overrides={"auto.leader.rebalance.enable": "false"}) as cluster:
            ctl = cluster.controller_id()
            a, b = [x for x in range(3) if x != ctl]
            async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
                await admin.create_topics([
                    NewTopic("u", replica_assignment={0: [a, b]}),
                    NewTopic("ok", replica_assignment={0: [ctl, a]})])
                await admin.wait_for_topics(["u", "ok"], 60)

                # ElectLeaders reaches only the controller: elsewhere NOT_CONTROLLER.
                wire = await WireClient.connect("127.0.0.1", cluster.ports[a])
                try:
                    m = req_module(43, 2)
                    r = await wire.request(m.ElectLeadersRequest(
                        election_type=0, topic_partitions=None,
                        timeout=datetime.timedelta(seconds=5)))
                finally:
                    await wire.close()
                codes = {(t.topic, p.partition_id): p.error_code
                         for t in r.replica_election_results for p in t.partition_result}
                assert codes and set(codes.values()) == {ErrorCode.not_controller}
                # Every version on the controller: v0 has no election type (PREFERRED), v1+ a
                # top-level error code.
                wire = await WireClient.connect("127.0.0.1", cluster.ports[ctl])
                try:
                    for v in (0, 1, 2):
                        m = req_module(43, v)
                        r = await wire.request(make(
                            m.ElectLeadersRequest, election_type=0, timeout=5000,
                            topic_partitions=(m.TopicPartitions(topic="ok", partitions=(0,)),)))
                        assert getattr(r, "error_code", ErrorCode.none) == ErrorCode.none
                        [[p]] = [t.partition_result for t in r.replica_election_results]
                        assert (p.partition_id, p.error_code) == (0,
                                                                  ErrorCode.election_not_needed)
                finally:
                    await wire.close()

                # b leaves the ISR (clean stop), then a (the only ISR member) crashes: u-0 is
                # offline and b, back, is not eligible for a clean election.
                await cluster.stop_broker(b)
                await cluster.wait_for(lambda: state(cluster, "u", 0)["isr"] == [a])
                await cluster.kill_broker(a)
                await cluster.wait_for(lambda: state(cluster, "u", 0)["leader"] == -1)
                await cluster.start_broker(b)
                await cluster.wait_for(lambda: b in cluster.brokers[ctl].controller.ctx
                                       .live_broker_ids, what="b registered")  # type: ignore[union-attr]
                assert state(cluster, "u", 0)["leader"] == -1

                u0, ok0 = TopicPartition("u", 0), TopicPartition("ok", 0)
                results = await admin.elect_leaders("PREFERRED", [u0, ok0, ("nope", 0)],
                                                    raise_errors=False, timeout=20)
                assert {tp: e.code if e else 0 for tp, e in results.items()} == {
                    u0: ErrorCode.preferred_leader_not_available,
                    ok0: ErrorCode.election_not_needed,
                    TopicPartition("nope", 0): ErrorCode.unknown_topic_or_partition}
                epoch = state(cluster, "u", 0)["leader_epoch"]
                # The tools report the same, with exit status 1 for a failed election.
                code, out, err = await run_cli(
                    capsys, "leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                    "--election-type", "PREFERRED", "--topic", "u", "--partition", "0")
                assert code == 1 and out == (
                    "Error completing leader election (PREFERRED) for partition: u-0: "
                    "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: "
                    "Failed to elect leader for partition u-0 under strategy "
                    "PreferredReplicaPartitionLeaderElectionStrategy\n")
                assert "1 replica(s) could not be elected" in err
                code, out, err = await run_cli(
                    capsys, "preferred-replica-election", "--bootstrap-server",
                    cluster.bootstrap_servers)
                assert code == 1, err
                # every partition (null): those needing no election are left out (Kafka)
                assert "Preferred replica already elected" not in out
                assert "Failed to elect preferred leader for partition: u-0: " in out

                results = await admin.elect_leaders("UNCLEAN", [u0, ok0], timeout=20)
                assert results == {u0: None, ok0: results[ok0]}
                assert results[ok0] is not None and \
                    results[ok0].code == ErrorCode.election_not_needed
                s = state(cluster, "u", 0)
                assert s["leader"] == b and s["isr"] == [b] and s["leader_epoch"] > epoch
                # The answer came after the controller's broker saw the new leader.
                info = cluster.brokers[ctl].metadata_cache.partition("u", 0)
                assert info is not None and info.leader == b
                desc = (await admin.describe_topics(["u"]))["u"]
                assert desc.partitions[0].leader == b

                # Nothing left to elect uncleanly.
                results = await admin.elect_leaders(1, [u0], raise_errors=False)
                assert results[u0] is not None and \
                    results[u0].code == ErrorCode.election_not_needed
    run(body, 180)


def test_auto_leader_rebalance(tmp_path: Path) -> None:
    """auto.leader.rebalance.enable with a 1 s check: leadership drifts after a restart and
    the controller moves it back by itself; with the percentage at 100 it does not."""
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides={
                "auto.leader.rebalance.enable": "true",
                "leader.imbalance.check.interval.seconds": "1",
                "leader.imbalance.per.broker.percentage": "10"}) as cluster:
            ctl = cluster.controller_id()
            a, b = [x for x in range(3) if x != ctl]
            async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
                await admin.create_topics([NewTopic("r", replica_assignment={
                    0: [a, b, ctl], 1: [b, a, ctl], 2: [a, ctl, b]})])
                await admin.wait_for_topics(["r"], 60)
            await cluster.stop_broker(a)
            await cluster.wait_for(lambda: leaders(cluster, "r", 3)[0] != a, 30)
            await cluster.start_broker(a)
            # Broker a prefers 2 partitions, leads none: ratio 1.0 > 10% -> moved back.
            await cluster.wait_for(lambda: leaders(cluster, "r", 3) == {0: a, 1: b, 2: a}, 60,
                                   "the auto rebalance to restore the preferred leaders")
            assert not znode_exists(cluster, ELECTION_ZNODE)
    run(body, 180)


async def skew_one_partition(cluster: AsyncCluster) -> tuple[int, int, int]:
    """Topic "r", one partition on [a, b, controller]; a is restarted, so b leads it while a,
    its preferred replica, is back in the ISR. Returns (controller, a, b)."""
    ctl = cluster.controller_id()
    a, b = [x for x in range(3) if x != ctl]
    async with AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        await admin.create_topics([NewTopic("r", replica_assignment={0: [a, b, ctl]})])
        await admin.wait_for_topics(["r"], 60)
    await cluster.stop_broker(a)
    await cluster.wait_for(lambda: leaders(cluster, "r", 1)[0] == b, 30)
    await cluster.start_broker(a)
    await wait_isr(cluster, "r", {0: [a]})
    return ctl, a, b


def test_new_controller_checks_balance_5_s_after_failover(tmp_path: Path) -> None:
    """Kafka schedules a new controller's first imbalance check 5 s after failover, not one
    whole leader.imbalance.check.interval.seconds (here an hour) later."""
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides={
                "auto.leader.rebalance.enable": "true",
                "leader.imbalance.check.interval.seconds": "3600"}) as cluster:
            ctl, a, _b = await skew_one_partition(cluster)
            await cluster.kill_broker(ctl)
            await cluster.wait_for(lambda: cluster.controller_id() not in (-1, ctl), 30,
                                   "a new controller")
            await cluster.wait_for(lambda: leaders(cluster, "r", 1) == {0: a}, 40,
                                   "the new controller's first imbalance check")
    run(body, 180)


def test_no_auto_rebalance_below_the_threshold(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides={
                "auto.leader.rebalance.enable": "true",
                "leader.imbalance.check.interval.seconds": "1",
                "leader.imbalance.per.broker.percentage": "100"}) as cluster:
            ctl, _a, b = await skew_one_partition(cluster)
            controller = cluster.brokers[ctl].controller
            assert controller is not None
            # Several checks run (each is an event on the controller's queue)...
            seen = controller.events.processed_count
            await cluster.wait_for(lambda: controller.events.processed_count >= seen + 3, 30)
            await asyncio.sleep(2.5)
            # ...and none moved leadership: a ratio of 100% is not above 100%.
            assert leaders(cluster, "r", 1) == {0: b}
    run(body, 180)


def test_znode_already_there_is_an_error() -> None:
    """Kafka's tool refuses to overwrite a pending election (no controller runs here)."""
    from odradek.coordination.embedded import EmbeddedZooKeeper
    from odradek.tools.command import ToolError

    async def body() -> None:
        server = EmbeddedZooKeeper()
        store = server.client()
        await store.start()
        try:
            data = await write_election_znode(store, [TopicPartition("t", 1)])
            assert json.loads(data) == {"version": 1,
                                        "partitions": [{"topic": "t", "partition": 1}]}
            with pytest.raises(ToolError, match=r"currently in progress for t-1\. Aborting"):
                await write_election_znode(store, [TopicPartition("t", 2)])
            assert (await store.get(ELECTION_ZNODE))[0] == data.encode()
        finally:
            await store.close()
            server.close()
    run(body, 30)


def test_preferred_replica_election_tool_on_zookeeper(
        tmp_path: Path, zookeeper_connect: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`odradek preferred-replica-election --zookeeper` as Kafka 2.x runs it: brokers on a real
    ZooKeeper, the tool writes the znode through kazoo, the controller acts and deletes it."""
    from odradek.coordination.zookeeper import ZooKeeperStore
    from odradek.server.broker import Broker
    from tests.integration.broker_harness import broker_config

    def make(i: int) -> Broker:
        return Broker(broker_config(tmp_path / f"b{i}", broker_id=i, **{
            "zookeeper.connect": zookeeper_connect,
            "auto.leader.rebalance.enable": "false",
            "controlled.shutdown.retry.backoff.ms": "200"}))

    async def body() -> None:
        brokers = {i: make(i) for i in (0, 1)}
        for b in brokers.values():
            await b.start()
        zk = ZooKeeperStore(zookeeper_connect, 10000)
        await zk.start()

        async def state(p: int) -> dict[str, Any]:
            return json.loads((await zk.get(f"/brokers/topics/z/partitions/{p}/state"))[0])

        async def until(pred: Any, what: str) -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not await pred():
                assert loop.time() < deadline, f"timed out waiting for {what}"
                await asyncio.sleep(0.05)
        try:
            ctl = next(i for i, b in brokers.items() if b.controller and b.controller.is_active)
            nc = 1 - ctl
            bootstrap = ",".join(f"127.0.0.1:{b.bound_ports[0]}" for b in brokers.values())
            async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
                await admin.create_topics([NewTopic("z", replica_assignment={
                    0: [nc, ctl], 1: [ctl, nc]})])
                await admin.wait_for_topics(["z"], 60)
            await brokers[nc].stop()
            await until(lambda: _is(state(0), "leader", ctl), "leader moved to the controller")
            brokers[nc] = make(nc)
            await brokers[nc].start()
            await until(lambda: _has(state(0), "isr", nc), "the restarted broker in the ISR")
            plan = tmp_path / "election.json"
            plan.write_text('{"partitions": [{"topic": "z", "partition": 0}]}')
            code, out, err = await run_cli(capsys, "preferred-replica-election", "--zookeeper",
                                           zookeeper_connect, "--path-to-json-file", str(plan))
            assert code == 0, err
            assert out.splitlines() == [
                'Created preferred replica election path with '
                '{"version":1,"partitions":[{"topic":"z","partition":0}]}',
                "Successfully started preferred replica election for partitions z-0"]

            async def done() -> bool:
                return await zk.exists(ELECTION_ZNODE) is None \
                    and (await state(0))["leader"] == nc
            await until(done, "the election and the znode's removal")
            assert (await state(1))["leader"] == ctl
            # Bad input: a clear message, exit status 1, no traceback.
            plan.write_text('{"partitions": []}')
            code, out, err = await run_cli(capsys, "preferred-replica-election", "--zookeeper",
                                           zookeeper_connect, "--path-to-json-file", str(plan))
            assert code == 1 and "Preferred replica election data is empty" in err
            assert "Traceback" not in err
        finally:
            await zk.close()
            for b in brokers.values():
                if b.started:
                    await b.stop()
    run(body, 180)


async def _is(value: Any, key: str, expected: Any) -> bool:
    return (await value)[key] == expected


async def _has(value: Any, key: str, member: Any) -> bool:
    return member in (await value)[key]

"""The control plane on an embedded 3-broker cluster (S-4, S-5): election, Kafka's znodes,
leader and controller failover, controlled shutdown, topic lifecycle, epoch fencing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.controller.channel import send_one
from odradek.protocol import interbroker as ib
from tests.integration.broker_harness import create_topics, metadata, req_module, run
from tests.wire import WireClient


def znode(cluster: AsyncCluster, path: str) -> Any:
    data = cluster.zookeeper.dump(path).get(path)
    if data is None:
        return None
    text = data.decode()
    try:
        return json.loads(text)
    except ValueError:
        return text


def state(cluster: AsyncCluster, topic: str, p: int) -> dict[str, Any]:
    return znode(cluster, f"/brokers/topics/{topic}/partitions/{p}/state")


async def client(cluster: AsyncCluster, broker_id: int) -> WireClient:
    return await WireClient.connect("127.0.0.1", cluster.ports[broker_id])


async def create(cluster: AsyncCluster, topic: str, partitions: int, rf: int = 3,
                 configs: dict[str, str] | None = None) -> None:
    c = await client(cluster, cluster.live_brokers()[0])
    try:
        r = await c.request(create_topics(topic, partitions, configs, replication_factor=rf))
        assert r.topics[0].error_code == ErrorCode.none, r.topics[0].error_message
    finally:
        await c.close()


async def create_pinned(cluster: AsyncCluster, topic: str, replicas: tuple[int, ...],
                        configs: dict[str, str] | None = None) -> None:
    """A one-partition topic on exactly `replicas` (a manual assignment)."""
    import datetime

    m = req_module(19, 7)
    req = m.CreateTopicsRequest(topics=(m.CreatableTopic(
        name=topic, num_partitions=-1, replication_factor=-1,
        assignments=(m.CreatableReplicaAssignment(partition_index=0, broker_ids=replicas),),
        configs=tuple(m.CreatableTopicConfig(name=k, value=v)
                      for k, v in (configs or {}).items())),),
        timeout=datetime.timedelta(seconds=10), validate_only=False)
    c = await client(cluster, cluster.controller_id())
    try:
        assert (await c.request(req)).topics[0].error_code == ErrorCode.none
    finally:
        await c.close()


def test_election_and_the_znode_layout(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            controller = znode(cluster, "/controller")
            assert controller["version"] == 1 and controller["brokerid"] == cluster.controller_id()
            assert znode(cluster, "/controller_epoch") == 1
            assert sorted(cluster.zookeeper.dump("/brokers/ids")) == [
                "/brokers/ids", "/brokers/ids/0", "/brokers/ids/1", "/brokers/ids/2"]
            reg = znode(cluster, "/brokers/ids/1")
            assert reg["port"] == cluster.ports[1] and reg["endpoints"] == [
                f"PLAINTEXT://127.0.0.1:{cluster.ports[1]}"]
            await create(cluster, "t", 4)
            assert znode(cluster, "/brokers/topics/t")["partitions"] == {
                "0": [0, 1, 2], "1": [1, 2, 0], "2": [2, 0, 1], "3": [0, 1, 2]}  # S-3.1
            for p in range(4):
                s = state(cluster, "t", p)
                assert s["leader"] == [0, 1, 2, 0][p] and s["leader_epoch"] == 0
                assert sorted(s["isr"]) == [0, 1, 2] and s["controller_epoch"] == 1
                assert s["version"] == 1
            # Every broker's metadata agrees (UpdateMetadata reached all of them).
            for b in range(3):
                c = await client(cluster, b)
                r = await c.request(metadata(["t"]))
                await c.close()
                assert r.controller_id == cluster.controller_id()
                assert {p.partition_index: p.leader_id for p in r.topics[0].partitions} == \
                    {0: 0, 1: 1, 2: 2, 3: 0}
    run(body, 90)


def test_leader_failover_elects_from_isr_and_bumps_epoch(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "t", 3)
            victim = 1 if cluster.controller_id() != 1 else 2
            led = [p for p in range(3) if state(cluster, "t", p)["leader"] == victim]
            await cluster.kill_broker(victim)
            await cluster.wait_for(lambda: all(state(cluster, "t", p)["leader"] != victim
                                               for p in led), what="new leaders")
            # Elections come first, then the dead replica leaves every other ISR
            # (OfflineReplica): two steps of the controller, each its own znode write.
            await cluster.wait_for(lambda: all(victim not in state(cluster, "t", p)["isr"]
                                               for p in range(3)), what="the victim out of ISRs")
            for p in range(3):
                s = state(cluster, "t", p)
                assert victim not in s["isr"] and s["leader"] in s["isr"]
                assert s["leader"] in cluster.live_brokers()
            for p in led:
                assert state(cluster, "t", p)["leader_epoch"] == 1
            survivor = cluster.live_brokers()[0]
            c = await client(cluster, survivor)

            async def leaders() -> dict[int, int]:
                r = await c.request(metadata(["t"]))
                return {p.partition_index: p.leader_id for p in r.topics[0].partitions}
            want = {p: state(cluster, "t", p)["leader"] for p in range(3)}
            for _ in range(200):
                if await leaders() == want:
                    break
            assert await leaders() == want
            await c.close()
            # The dead broker comes back: its replicas go online and it follows the leaders.
            await cluster.start_broker(victim)
            b = cluster.brokers[victim]
            await cluster.wait_for(lambda: all(
                ("t", p) in b.replica_manager.partitions for p in range(3)), what="replicas")
            assert all(b.replica_manager.partitions[("t", p)].leader_id == want[p]
                       for p in range(3))
    run(body, 90)


def test_controller_failover_increments_epoch_and_resumes(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "before", 2)
            old = cluster.controller_id()
            await cluster.kill_broker(old)
            await cluster.wait_for(lambda: cluster.controller_id() not in (-1, old),
                                   what="a new controller")
            assert znode(cluster, "/controller_epoch") == 2
            assert znode(cluster, "/controller")["brokerid"] == cluster.controller_id()
            # The new controller handled the old controller's death like any broker's.
            await cluster.wait_for(lambda: all(state(cluster, "before", p)["leader"] != old
                                               for p in range(2)), what="leaders moved")
            await create(cluster, "after", 2, rf=2)
            assert all(state(cluster, "after", p)["controller_epoch"] == 2 for p in range(2))
    run(body, 90)


def test_controlled_shutdown_moves_leadership_before_exit(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "t", 6)
            victim = next(b for b in range(3) if b != cluster.controller_id())
            led = [p for p in range(6) if state(cluster, "t", p)["leader"] == victim]
            assert led
            await cluster.stop_broker(victim)
            # No partition was left without a leader: the moves happened before the exit,
            # each to an ISR member that is not shutting down, with the epoch bumped.
            for p in led:
                s = state(cluster, "t", p)
                assert s["leader"] != victim and s["leader"] >= 0 and s["leader_epoch"] == 1
            for p in range(6):
                assert victim not in state(cluster, "t", p)["isr"]
    run(body, 90)


def test_topic_deletion_removes_nodes_and_logs_everywhere(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "doomed", 3, configs={"retention.ms": "1000"})
            assert znode(cluster, "/config/topics/doomed")["config"] == {"retention.ms": "1000"}
            assert len(list(tmp_path.glob("broker-*/doomed-*"))) == 9
            c = await client(cluster, 0)
            import datetime
            m = req_module(20, 6)
            r = await c.request(m.DeleteTopicsRequest(
                topics=(m.DeleteTopicState(name="doomed", topic_id=None),),
                timeout=datetime.timedelta(seconds=20)))
            await c.close()
            assert r.responses[0].error_code == ErrorCode.none
            await cluster.wait_for(lambda: znode(cluster, "/brokers/topics/doomed") is None
                                   and znode(cluster, "/admin/delete_topics/doomed") is None,
                                   what="znodes deleted")
            assert znode(cluster, "/config/topics/doomed") is None
            await cluster.wait_for(lambda: not list(tmp_path.glob("broker-*/doomed-*")),
                                   what="log dirs deleted")
    run(body, 90)


def test_unclean_leader_election_off_keeps_partition_offline(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            ctrl = cluster.controller_id()
            a, b = [x for x in range(3) if x != ctrl]
            await create_pinned(cluster, "u", (a, b))
            await cluster.kill_broker(b)  # the follower leaves the ISR
            await cluster.wait_for(lambda: state(cluster, "u", 0)["isr"] == [a], what="isr")
            await cluster.kill_broker(a)  # the last ISR member dies: no leader
            await cluster.wait_for(lambda: state(cluster, "u", 0)["leader"] == -1,
                                   what="offline")
            assert state(cluster, "u", 0)["isr"] == [a]  # the last ISR member is kept
            await cluster.start_broker(b)  # not in the ISR: must not lead (S-4.1)
            await cluster.wait_for(lambda: cluster.brokers[b].replica_manager.partitions.get(
                ("u", 0)) is not None, what="replica online")
            assert state(cluster, "u", 0)["leader"] == -1
            # a follower of no leader: no replica fetcher (none to broker -1)
            assert not cluster.brokers[b].replica_manager.fetcher_manager.is_fetching(("u", 0))
            await cluster.start_broker(a)  # the ISR member returns and leads again
            await cluster.wait_for(lambda: state(cluster, "u", 0)["leader"] == a,
                                   what="leader back")
    run(body, 120)


def test_brokers_refuse_an_older_controller_epoch(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(2, data_dir=tmp_path) as cluster:
            await create(cluster, "t", 1, rf=2)
            old = cluster.controller_id()
            await cluster.kill_broker(old)
            await cluster.start_broker(old)
            other = 1 - old
            await cluster.wait_for(lambda: cluster.brokers[other].controller_epoch_seen >= 2,
                                   what="epoch 2 seen")
            # A LeaderAndIsr from the deposed controller's epoch 1 is refused (S-5.3).
            stale = ib.LeaderAndIsrRequest(
                controller_id=old, controller_epoch=1,
                topic_states=(ib.LeaderAndIsrTopicState(topic_name="t", partition_states=(
                    ib.LeaderAndIsrPartitionState(
                        topic_name="t", partition_index=0, controller_epoch=1, leader=old,
                        leader_epoch=99, isr=(old,), replicas=(0, 1)),)),))
            resp = await send_one("127.0.0.1", cluster.ports[other], 4, 5, stale, 1, "test", 10)
            assert resp.error_code == ErrorCode.stale_controller_epoch
            assert cluster.brokers[other].replica_manager.partitions[("t", 0)].leader_epoch < 99
    run(body, 90)


def test_controlled_shutdown_request_needs_the_controller(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(2, data_dir=tmp_path) as cluster:
            non_controller = 1 - cluster.controller_id()
            resp = await send_one("127.0.0.1", cluster.ports[non_controller], 7, 3,
                                  ib.ControlledShutdownRequest(broker_id=0), 1, "test", 10)
            assert resp.error_code == ErrorCode.not_controller
    run(body, 60)


def test_controlled_shutdown_from_a_stale_broker_epoch_is_refused(tmp_path: Path) -> None:
    """KIP-380: a ControlledShutdown (v2+) whose broker epoch is older than the broker's
    registration is answered STALE_BROKER_EPOCH and moves nothing; with the current epoch
    the broker's leaderships move as before."""
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "t", 6)
            ctrl = cluster.controller_id()
            victim = next(b for b in range(3) if b != ctrl)
            led = [p for p in range(6) if state(cluster, "t", p)["leader"] == victim]
            assert led
            controller = cluster.brokers[ctrl].controller
            assert controller is not None
            epoch = controller.ctx.live_broker_epochs[victim]

            async def controlled_shutdown(broker_epoch: int) -> Any:
                return await send_one(
                    "127.0.0.1", cluster.ports[ctrl], 7, 3,
                    ib.ControlledShutdownRequest(broker_id=victim, broker_epoch=broker_epoch),
                    1, "test", 10)

            # the broker knows its own epoch (its registration's czxid) and sends it
            assert cluster.brokers[victim].broker_epoch == epoch
            resp = await controlled_shutdown(epoch - 1)
            assert resp.error_code == ErrorCode.stale_broker_epoch
            assert [p for p in range(6) if state(cluster, "t", p)["leader"] == victim] == led
            assert victim not in controller.ctx.shutting_down_broker_ids
            resp = await controlled_shutdown(epoch)
            assert resp.error_code == ErrorCode.none and not resp.remaining_partitions
            assert all(state(cluster, "t", p)["leader"] != victim for p in range(6))
    run(body, 90)


async def _rejoined_with_its_new_epoch(cluster: AsyncCluster, controller: Any,
                                      sent: list[tuple[int, int, int]], victim: int,
                                      new: int) -> None:
    """The restarted `victim` is back in the ISRs of "t", the controller holds its `new` broker
    epoch, and every LeaderAndIsr (4) and UpdateMetadata (6) it was sent (`sent`: broker, API
    key, broker epoch) carried that epoch."""
    await cluster.wait_for(lambda: all(victim in state(cluster, "t", p)["isr"]
                                       for p in range(3)), what="ISR rejoined")
    assert controller.ctx.live_broker_epochs[victim] == new
    to_victim = [(k, epoch) for b, k, epoch in sent if b == victim]
    assert (4, new) in to_victim and (6, new) in to_victim
    assert all(epoch == new for _, epoch in to_victim), to_victim


def test_controller_requests_carry_the_broker_epoch_and_a_stale_one_is_refused(
        tmp_path: Path) -> None:
    """KIP-380 both ways: every LeaderAndIsr, UpdateMetadata and StopReplica the controller
    sends carries the epoch it holds for its recipient (the czxid of the recipient's
    registration). A broker that restarted (a new registration, a larger epoch) is sent its
    new epoch once the controller has read that registration, and refuses with
    STALE_BROKER_EPOCH, applying nothing, a request built for its previous registration."""
    import datetime

    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            ctrl = cluster.controller_id()
            controller = cluster.brokers[ctrl].controller
            assert controller is not None and controller.channel is not None
            sent: list[tuple[int, int, int]] = []  # (broker, api key, broker epoch)
            channel_send = controller.channel.send

            def recording_send(broker: int, api_key: int, version: int, message: Any,
                               body: Any = None) -> Any:
                sent.append((broker, api_key, message.broker_epoch))
                return channel_send(broker, api_key, version, message, body)

            controller.channel.send = recording_send  # type: ignore[method-assign]
            received: list[tuple[int, int, int]] = []
            for b in range(3):  # what reaches the brokers, off the wire
                apis = cluster.brokers[b].apis
                assert apis is not None
                handle = apis.interbroker.handle

                def recording_handle(conn: Any, payload: bytes, b: int = b,
                                     handle: Any = handle) -> Any:
                    key, _, _, msg = ib.decode_request_frame(payload)
                    if key in (4, 5, 6):
                        received.append((b, key, msg.broker_epoch))
                    return handle(conn, payload)

                apis.interbroker.handle = recording_handle  # type: ignore[method-assign]
            epochs = dict(controller.ctx.live_broker_epochs)
            assert all(epochs[b] == cluster.brokers[b].broker_epoch > 0 for b in range(3))
            await create(cluster, "t", 3)
            await create(cluster, "gone", 1)
            c = await client(cluster, ctrl)
            try:  # a deletion: StopReplica
                m = req_module(20, 4)
                r = await c.request(m.DeleteTopicsRequest(
                    topic_names=("gone",), timeout=datetime.timedelta(seconds=10)))
                assert r.responses[0].error_code == ErrorCode.none
            finally:
                await c.close()
            await cluster.wait_for(lambda: {(b, k) for b, k, _ in received} >= {
                (b, k) for b in range(3) for k in (4, 5, 6)}, what="requests of every kind")
            assert {(b, k) for b, k, _ in sent} >= {(b, k) for b in range(3) for k in (4, 5, 6)}
            assert all(epoch == epochs[b] for b, _, epoch in sent), sent
            assert all(epoch == epochs[b] for b, _, epoch in received), received

            victim = next(b for b in range(3) if b != ctrl)
            old = epochs[victim]
            await cluster.kill_broker(victim)
            sent.clear()
            broker = await cluster.start_broker(victim)
            new = broker.broker_epoch
            assert new > old
            await _rejoined_with_its_new_epoch(cluster, controller, sent, victim, new)
            rm = broker.replica_manager
            assert rm is not None
            applied = rm.partitions[("t", 0)].leader_epoch

            # what the controller built for the victim's previous registration is refused
            async def send_old(key: int, version: int, msg: Any) -> Any:
                return await send_one("127.0.0.1", cluster.ports[victim], key, version, msg,
                                      1, "test", 10)

            lai = ib.LeaderAndIsrRequest(
                controller_id=ctrl, controller_epoch=controller.ctx.epoch, broker_epoch=old,
                topic_states=(ib.LeaderAndIsrTopicState(
                    topic_name="t", topic_id=controller.ctx.topic_ids["t"], partition_states=(
                        ib.LeaderAndIsrPartitionState(
                            topic_name="t", partition_index=0,
                            controller_epoch=controller.ctx.epoch, leader=victim,
                            leader_epoch=applied + 50, isr=(victim,),
                            partition_epoch=applied + 50, replicas=(0, 1, 2)),)),))
            resp = await send_old(4, 5, lai)
            assert resp.error_code == ErrorCode.stale_broker_epoch
            assert [e.error_code for t in resp.topics for e in t.partition_errors] == [
                ErrorCode.stale_broker_epoch]
            resp = await send_old(5, 3, ib.StopReplicaRequest(
                controller_id=ctrl, controller_epoch=controller.ctx.epoch, broker_epoch=old,
                topic_states=(ib.StopReplicaTopicState(topic_name="t", partition_states=(
                    ib.StopReplicaPartitionState(partition_index=0, leader_epoch=-2,
                                                 delete_partition=True),)),)))
            assert resp.error_code == ErrorCode.stale_broker_epoch
            resp = await send_old(6, 7, ib.UpdateMetadataRequest(
                controller_id=ctrl, controller_epoch=controller.ctx.epoch, broker_epoch=old))
            assert resp.error_code == ErrorCode.stale_broker_epoch
            p0 = rm.partitions[("t", 0)]
            assert p0.leader_epoch == applied and not p0.is_leader  # nothing applied
            assert sorted(broker.metadata_cache.brokers) == [0, 1, 2]
            assert broker.metadata_cache.partition("t", 0) is not None
    run(body, 120)


def test_a_request_built_before_a_fast_restart_is_refused_then_the_new_epoch_is_sent(
        tmp_path: Path, caplog: Any) -> None:
    """The ordering KIP-380 is for, with the controller's own request batch: the controller
    has not yet seen a broker restart (its watch events are held) and sends it what it built
    for the broker's previous registration; the restarted broker refuses it (the controller
    logs the STALE_BROKER_EPOCH answer and carries on). Once the controller sees the new
    registration (a bounced broker: the same id, a larger czxid), it sends the broker its
    state under the new epoch, which the broker applies."""
    import logging

    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "t", 3)
            ctrl = cluster.controller_id()
            controller = cluster.brokers[ctrl].controller
            store = cluster.brokers[ctrl].store
            assert controller is not None and controller.channel is not None
            assert store is not None
            victim = next(b for b in range(3) if b != ctrl)
            old = controller.ctx.live_broker_epochs[victim]
            other = cluster.brokers[next(b for b in range(3) if b not in (ctrl, victim))].store
            assert other is not None
            sent: list[tuple[int, int, int]] = []
            channel_send = controller.channel.send

            def recording_send(broker: int, api_key: int, version: int, message: Any,
                               body: Any = None) -> Any:
                sent.append((broker, api_key, message.broker_epoch))
                return channel_send(broker, api_key, version, message, body)

            store.disconnect()  # type: ignore[attr-defined]  # the controller hears nothing
            try:
                await cluster.kill_broker(victim)
                batch = controller.requests.new_batch()  # for the registration it knows
                batch.add_update_metadata([victim], controller.ctx.all_partitions())
                (stale,) = controller.requests.send(batch)
                controller.channel.send = recording_send  # type: ignore[method-assign]
                # (start-up completes once the broker has metadata: after the reconnection)
                starting = asyncio.ensure_future(cluster.start_broker(victim))
                response = await asyncio.wait_for(stale, 30)  # sent again until answered
                assert response.error_code == ErrorCode.stale_broker_epoch
                registration = await other.exists(f"/brokers/ids/{victim}")
                assert registration is not None and registration.czxid > old
                new = registration.czxid
                assert controller.is_active and controller.ctx.live_broker_epochs[victim] == old
                assert not starting.done()  # the stale UpdateMetadata was not applied
            finally:
                store.reconnect()  # type: ignore[attr-defined]  # the restart seen: a bounce
            broker = await starting
            assert broker.broker_epoch == new
            await _rejoined_with_its_new_epoch(cluster, controller, sent, victim, new)
            assert broker.metadata_cache.partition("t", 0) is not None
        refused = [r.getMessage() for r in caplog.records if r.name == "state.change.logger"
                   and "Received error STALE_BROKER_EPOCH in UpdateMetadata response from "
                   f"broker {victim}" in r.getMessage()]
        assert refused and f"[Controller id={ctrl} " in refused[0]

    with caplog.at_level(logging.INFO, logger="state.change.logger"):
        run(body, 120)


def test_every_broker_writes_a_parseable_state_change_log(tmp_path: Path) -> None:
    from odradek.common.state_change import LINE_RE, PARTITION_RE

    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "t", 2)
            ctrl = cluster.controller_id()
            victim = next(b for b in range(3) if b != ctrl)
            await cluster.kill_broker(victim)
            await cluster.wait_for(lambda: all(state(cluster, "t", p)["leader"] != victim
                                               for p in range(2)), what="failover")
        for b in range(3):
            lines = (tmp_path / f"broker-{b}" / "state-change.log").read_text().splitlines()
            assert lines
            for line in lines:
                m = LINE_RE.match(line)
                assert m, line
                assert int(m["id"]) == b  # each broker's file holds only its own changes
            received = [ln for ln in lines if "[Broker id=" in ln and "t-0" in ln]
            assert any("from NonExistent to " in ln for ln in received), received
        ctrl_lines = (tmp_path / f"broker-{ctrl}" / "state-change.log").read_text().splitlines()
        changes = [LINE_RE.match(ln) for ln in ctrl_lines]
        partition_changes = [m for m in changes if m and m["actor"] == "Controller"
                             and "Changed partition t-" in m["message"]]
        # NonExistent -> New -> Online at creation; Online -> Offline -> Online on failover.
        seq = [m["message"].split(" state ")[1].split(" with")[0] for m in partition_changes
               if PARTITION_RE.search(m["message"])["partition"] == "0"]
        assert seq[:2] == ["from NonExistentPartition to NewPartition",
                           "from NewPartition to OnlinePartition"], seq
        t0_led_by_victim = any("from OnlinePartition to OfflinePartition" in s for s in seq)
        if t0_led_by_victim:
            assert seq[-1] == "from OfflinePartition to OnlinePartition", seq
    run(body, 90)


def test_new_controller_takes_dead_replicas_out_of_the_isr(tmp_path: Path) -> None:
    """Replicas on the broker that died with the old controller leave every ISR at failover,
    not after the leaders' replica.lag.time.max.ms (here 60 s: the test would time out)."""
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path,
                                overrides={"replica.lag.time.max.ms": "60000"}) as cluster:
            await create(cluster, "t", 3)
            old = cluster.controller_id()
            await cluster.kill_broker(old)
            await cluster.wait_for(lambda: cluster.controller_id() not in (-1, old),
                                   what="new controller")
            await cluster.wait_for(lambda: all(old not in state(cluster, "t", p)["isr"]
                                               for p in range(3)), timeout=15,
                                   what="the dead controller out of every ISR")
    run(body, 90)


def test_unclean_leader_election_on_elects_a_live_replica_outside_the_isr(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            ctrl = cluster.controller_id()
            a, b = [x for x in range(3) if x != ctrl]
            await create_pinned(cluster, "u", (a, b), {"unclean.leader.election.enable": "true"})
            await cluster.kill_broker(b)
            await cluster.wait_for(lambda: state(cluster, "u", 0)["isr"] == [a], what="isr")
            await cluster.kill_broker(a)
            await cluster.wait_for(lambda: state(cluster, "u", 0)["leader"] == -1,
                                   what="offline")
            await cluster.start_broker(b)  # outside the ISR, but unclean election is on
            await cluster.wait_for(lambda: state(cluster, "u", 0)["leader"] == b,
                                   what="unclean leader")
            assert state(cluster, "u", 0)["isr"] == [b]
            lines = (tmp_path / f"broker-{ctrl}" / "state-change.log").read_text()
            assert "Unclean leader election for partition u-0" in lines  # the loss is logged
    run(body, 120)


def test_restarted_broker_learns_the_cluster_before_its_replicas(
        tmp_path: Path, caplog: Any) -> None:
    """Kafka's onBrokerStartup order: UpdateMetadata first, then LeaderAndIsr. A restarted
    broker that got LeaderAndIsr first started following (and could rejoin ISRs) while its
    cache still named only itself, so a client bootstrapping from it was told of a controller
    missing from the broker list (kafka-python: UnknownBrokerIdError)."""
    import logging

    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "t", 3)
            victim = next(b for b in range(3) if b != cluster.controller_id())
            await cluster.stop_broker(victim)
            caplog.clear()
            await cluster.start_broker(victim)
            await cluster.wait_for(lambda: all(victim in state(cluster, "t", p)["isr"]
                                               for p in range(3)), what="ISR rejoined")
        received = [r.getMessage() for r in caplog.records
                    if r.name == "state.change.logger" and getattr(r, "broker_id", None) == victim
                    and ("(UpdateMetadata correlationId" in r.getMessage()
                         or "(LeaderAndIsr correlationId" in r.getMessage())]
        assert received, "the restarted broker logged no controller request"
        assert "(UpdateMetadata correlationId" in received[0], received[:3]
        assert "Cached live brokers [0, 1, 2] and the leadership of 3 partitions" in received[0]

    with caplog.at_level(logging.DEBUG, logger="state.change.logger"):
        run(body, 90)

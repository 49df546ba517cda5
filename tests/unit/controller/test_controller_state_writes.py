"""The controller's state node writes of one loop iteration go as few fenced transactions
(controller/zk_client.py): every caller still gets its own outcome -- its new
version, None on a version conflict, ControllerMovedError when the epoch check fails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from odradek.common.state_change import StateChangeLogger
from odradek.common.topic_partition import TopicPartition
from odradek.controller.channel import RequestBatch
from odradek.controller.context import BrokerEndpoint, ControllerContext, LeaderAndIsr
from odradek.controller.events import ControllerMovedError
from odradek.controller.partition_states import PartitionState
from odradek.controller.state_machines import PartitionStateMachine, ReplicaStateMachine
from odradek.controller.zk_client import ControllerZkClient
from odradek.coordination import paths
from odradek.coordination.embedded import EmbeddedStore, EmbeddedZooKeeper

PARTITIONS = 120


class CountingStore(EmbeddedStore):
    def __init__(self) -> None:
        super().__init__(EmbeddedZooKeeper())
        self.multis = 0

    async def multi(self, ops: Any) -> list[Any]:
        self.multis += 1
        return await super().multi(ops)


async def _setup() -> tuple[CountingStore, ControllerZkClient]:
    store = CountingStore()
    await store.start()
    await store.create(paths.CONTROLLER_EPOCH, b"1", makepath=True)
    ctx = ControllerContext()
    zk = ControllerZkClient(store, ctx)
    for p in range(PARTITIONS):
        await zk.write_leader_and_isr(TopicPartition("t", p), LeaderAndIsr(1, 0, (1, 2), 0, 0),
                                      create=True)
    store.multis = 0
    return store, zk


def _moved(tp: TopicPartition, zk: ControllerZkClient) -> LeaderAndIsr:
    cur = zk.ctx.leader_and_isr(tp)
    assert cur is not None
    return LeaderAndIsr(2, cur.leader_epoch + 1, (2,), cur.zk_version, 0)


def test_concurrent_writes_share_transactions_and_each_gets_its_version() -> None:
    async def body() -> None:
        store, zk = await _setup()
        tps = [TopicPartition("t", p) for p in range(PARTITIONS)]
        stored = await asyncio.gather(*(zk.write_leader_and_isr(tp, _moved(tp, zk))
                                         for tp in tps))
        assert all(s is not None and s.leader == 2 and s.zk_version == 1 for s in stored)
        assert store.multis <= 3  # 120 writes, 50 per transaction
        for tp in tps:
            data, _ = await store.get(paths.partition_state_path(tp.topic, tp.partition))
            decoded = paths.decode_partition_state(data)
            assert decoded is not None and decoded.leader == 2
    asyncio.run(body())


def test_a_conflict_fails_only_its_own_write() -> None:
    async def body() -> None:
        store, zk = await _setup()
        tps = [TopicPartition("t", p) for p in range(10)]
        stale = tps[4]
        await store.set(paths.partition_state_path(stale.topic, stale.partition),
                             b'{"controller_epoch":0,"leader":1,"version":1,'
                             b'"leader_epoch":0,"isr":[1,2]}')  # moved behind our back
        stored = await asyncio.gather(*(zk.write_leader_and_isr(tp, _moved(tp, zk))
                                         for tp in tps))
        assert stored[4] is None
        assert all(s is not None and s.leader == 2 for i, s in enumerate(stored) if i != 4)
    asyncio.run(body())


def test_a_moved_controller_fails_every_write() -> None:
    async def body() -> None:
        store, zk = await _setup()
        await store.set(paths.CONTROLLER_EPOCH, b"2")  # a successor took over
        tps = [TopicPartition("t", p) for p in range(10)]
        results = await asyncio.gather(*(zk.write_leader_and_isr(tp, _moved(tp, zk))
                                          for tp in tps), return_exceptions=True)
        assert all(isinstance(r, ControllerMovedError) for r in results)
        with pytest.raises(ControllerMovedError):
            await zk.write_leader_and_isr(tps[0], _moved(tps[0], zk))
    asyncio.run(body())


def test_bulk_writes_go_fifty_to_a_transaction() -> None:
    async def body() -> None:
        store, zk = await _setup()
        tps = [TopicPartition("t", p) for p in range(PARTITIONS)]
        stored = await zk.write_leader_and_isrs([(tp, _moved(tp, zk)) for tp in tps])
        assert store.multis == 3
        assert all(s is not None and s.leader == 2 and s.zk_version == 1 for s in stored)
        assert all(zk.ctx.leader_and_isr(tp) == s for tp, s in zip(tps, stored, strict=True))
        data, _ = await store.get(paths.partition_state_path("t", 119))
        decoded = paths.decode_partition_state(data)
        assert decoded is not None and decoded.leader == 2 and decoded.leader_epoch == 1
    asyncio.run(body())


def test_a_bulk_conflict_leaves_its_whole_transaction_unwritten_and_no_other() -> None:
    async def body() -> None:
        store, zk = await _setup()
        tps = [TopicPartition("t", p) for p in range(PARTITIONS)]
        stale = tps[60]  # in the second transaction (50..99)
        await store.set(paths.partition_state_path(stale.topic, stale.partition),
                        b'{"controller_epoch":0,"leader":1,"version":1,'
                        b'"leader_epoch":0,"isr":[1,2]}')
        stored = await zk.write_leader_and_isrs([(tp, _moved(tp, zk)) for tp in tps])
        assert [i for i, s in enumerate(stored) if s is None] == list(range(50, 100))
        for i in (49, 50, 100):
            _data, stat = await store.get(paths.partition_state_path("t", i))
            assert stat.version == (0 if i == 50 else 1)
            assert zk.ctx.leader_and_isr(tps[i]).leader == (1 if i == 50 else 2)  # type: ignore
    asyncio.run(body())


def test_bulk_writes_of_a_deposed_controller_fail_on_the_epoch() -> None:
    async def body() -> None:
        store, zk = await _setup()
        await store.set(paths.CONTROLLER_EPOCH, b"2")  # a successor's epoch
        tps = [TopicPartition("t", p) for p in range(10)]
        with pytest.raises(ControllerMovedError):
            await zk.write_leader_and_isrs([(tp, _moved(tp, zk)) for tp in tps])
    asyncio.run(body())


def test_elections_at_once_fall_back_to_one_by_one_for_a_moved_node() -> None:
    """PartitionStateMachine.elect_leaders: broker 1 died leading every partition; partition
    60's node moved behind the controller's back (leader epoch 5). Every partition gets a leader
    from broker 2, the moved one decided again from what it re-read."""
    async def body() -> None:
        store, zk = await _setup()
        ctx = zk.ctx
        ctx.epoch = 1
        for b in (2, 3):
            ctx.add_live_broker(b, BrokerEndpoint("localhost", 9090 + b))
        tps = [TopicPartition("t", p) for p in range(PARTITIONS)]
        ctx.set_topic_assignment("t", {p: [1, 2, 3] for p in range(PARTITIONS)})
        for tp in tps:
            ctx.partition_states.put(tp, PartitionState.OfflinePartition)
        await store.set(paths.partition_state_path("t", 60),
                        b'{"controller_epoch":0,"leader":1,"version":1,'
                        b'"leader_epoch":5,"isr":[1,2]}')
        sc = StateChangeLogger(0)
        psm = PartitionStateMachine(ctx, zk, ReplicaStateMachine(ctx, zk, sc), sc,
                                    lambda _topic: False)
        batch = RequestBatch(0, 1, ctx)
        elected = await psm.elect_leaders(tps, batch, "offline")
        assert elected == set(tps)
        # 3 transactions, then the 50 of the failed one one by one (coalesced again: that
        # transaction fails, each goes alone), partition 60 again after its re-read
        assert store.multis == 3 + 1 + 50 + 1
        for tp in tps:
            assert psm.state(tp) is PartitionState.OnlinePartition
            stored = ctx.leader_and_isr(tp)
            assert stored is not None and stored.leader == 2
            assert (stored.leader_epoch, stored.isr) == ((6, (2,)) if tp.partition == 60
                                                         else (1, (2,)))
            assert batch.leader_and_isr[2][tp].leader_epoch == stored.leader_epoch
            assert batch.leader_and_isr[3][tp].partition_epoch == stored.zk_version
    asyncio.run(body())


def test_isr_shrinks_at_once_fall_back_to_one_by_one_for_a_moved_node() -> None:
    """ReplicaStateMachine.remove_replicas_from_isr: broker 2 leaves every ISR (1, 2); the
    node of partition 7 moved meanwhile (ISR 1, 2, 3 now) and is decided again from it."""
    async def body() -> None:
        store, zk = await _setup()
        ctx = zk.ctx
        ctx.epoch = 1
        for b in (1, 3):
            ctx.add_live_broker(b, BrokerEndpoint("localhost", 9090 + b))
        tps = [TopicPartition("t", p) for p in range(PARTITIONS)]
        ctx.set_topic_assignment("t", {p: [1, 2, 3] for p in range(PARTITIONS)})
        await store.set(paths.partition_state_path("t", 7),
                        b'{"controller_epoch":0,"leader":1,"version":1,'
                        b'"leader_epoch":3,"isr":[1,2,3]}')
        batch = RequestBatch(0, 1, ctx)
        await ReplicaStateMachine(ctx, zk, StateChangeLogger(0)).remove_replicas_from_isr(
            tps, 2, batch)
        for tp in tps:
            stored = ctx.leader_and_isr(tp)
            assert stored is not None and stored.leader == 1
            assert (stored.leader_epoch, stored.isr) == ((4, (1, 3)) if tp.partition == 7
                                                         else (1, (1,)))
            assert tuple(batch.leader_and_isr[3][tp].isr) == stored.isr
            data, _ = await store.get(paths.partition_state_path(tp.topic, tp.partition))
            decoded = paths.decode_partition_state(data)
            assert decoded is not None and tuple(decoded.isr) == stored.isr
    asyncio.run(body())


def test_isr_shrinks_read_a_node_whose_context_says_the_replica_left() -> None:
    """The context says broker 2 left the ISR of partitions 0 to 9 (a controlled shutdown's
    shrink), but their leader took it back since (its own write, not yet notified): the
    broker's failure still takes it out, as Kafka's removeReplicasFromIsr reads the nodes."""
    async def body() -> None:
        store, zk = await _setup()
        ctx = zk.ctx
        ctx.epoch = 1
        ctx.add_live_broker(1, BrokerEndpoint("localhost", 9091))
        tps = [TopicPartition("t", p) for p in range(10)]
        ctx.set_topic_assignment("t", {p: [1, 2] for p in range(10)})
        for tp in tps:
            cur = ctx.leader_and_isr(tp)
            assert cur is not None
            ctx.put_leader_and_isr(tp, LeaderAndIsr(1, 1, (1,), cur.zk_version, 1))
        sm = ReplicaStateMachine(ctx, zk, StateChangeLogger(0))
        batch = RequestBatch(0, 1, ctx)
        await sm.remove_replicas_from_isr(tps[:9], 2, batch)
        await sm.remove_replica_from_isr(tps[9], 2, batch)
        for tp in tps:
            data, _ = await store.get(paths.partition_state_path(tp.topic, tp.partition))
            decoded = paths.decode_partition_state(data)
            assert decoded is not None and tuple(decoded.isr) == (1,), (tp, decoded)
            assert tuple(batch.leader_and_isr[1][tp].isr) == (1,)
    asyncio.run(body())

"""The controller's state node writes of one loop iteration go as few fenced transactions
(controller/zk_client.py, issue 14 item 9): every caller still gets its own outcome -- its new
version, None on a version conflict, ControllerMovedError when the epoch check fails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from odradek.common.topic_partition import TopicPartition
from odradek.controller.context import ControllerContext, LeaderAndIsr
from odradek.controller.events import ControllerMovedError
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

"""A waiting fetch over many partitions is re-checked only for the partition whose state moved
(issue 14 item 9: a follower's fetch of thousands of partitions was re-checked whole for each
of thousands of partition changes of a LeaderAndIsr): the purgatory passes the key, and
DelayedFetch still completes on new data, on a lost leadership and on its timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from pathlib import Path

from kio.schema.errors import ErrorCode

from odradek.protocol.records import build_batch
from odradek.runtime.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.runtime.timer import Timer
from odradek.server.replica_manager import FetchRequestPartition, ReplicaManager
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager

FOLLOWER = 2


class KeyedOp(DelayedOperation):
    def __init__(self) -> None:
        super().__init__(10_000)
        self.keys: list[Hashable] = []

    def try_complete(self) -> bool:
        self.keys.append(None)
        return False

    def try_complete_for(self, key: Hashable) -> bool:
        self.keys.append(key)
        return False

    def on_complete(self) -> None:
        pass


def test_the_purgatory_passes_the_checked_key() -> None:
    p: DelayedOperationPurgatory[KeyedOp] = DelayedOperationPurgatory(
        "fetch", Timer(clock=lambda: 0))
    op = KeyedOp()
    assert not p.try_complete_else_watch(op, ["a", "b"])
    op.keys.clear()
    p.check_and_complete("b")
    assert op.keys == ["b"]


def _manager(tmp_path: Path, partitions: int) -> tuple[LogManager, ReplicaManager]:
    lm = LogManager([tmp_path / "logs"], lock_dirs=False)
    rm = ReplicaManager(1, lm, lambda _t: LogConfig())
    rm.start()
    for i in range(partitions):
        rm.become_leader_or_follower(("t", i), 1, 0, [1, FOLLOWER], [1, FOLLOWER], 0)
    return lm, rm


def _follower_fetch(rm: ReplicaManager, partitions: int, max_wait_ms: int = 5000
                    ) -> asyncio.Future[dict]:
    requests = {("t", i): FetchRequestPartition(0, 1 << 20) for i in range(partitions)}
    fut = rm.fetch_messages(FOLLOWER, max_wait_ms, 1, 1 << 20, requests)
    assert isinstance(fut, asyncio.Future) and not fut.done()
    return fut


def test_a_waiting_follower_fetch_completes_on_new_data_in_one_partition(tmp_path: Path
                                                                         ) -> None:
    async def body() -> None:
        lm, rm = _manager(tmp_path, 50)
        try:
            fut = _follower_fetch(rm, 50)
            for i in range(50):  # state moves that bring no data: still waiting
                rm.on_high_watermark_moved(("t", i))
            assert not fut.done()
            res = rm.append_records(1, 1000, {("t", 37): build_batch([(None, b"x")])})
            assert res[("t", 37)].error == ErrorCode.none
            out = await asyncio.wait_for(fut, 1)
            assert out[("t", 37)].size > 0
            assert all(out[("t", i)].size == 0 for i in range(50) if i != 37)
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())


def test_a_waiting_follower_fetch_answers_when_a_leadership_moves(tmp_path: Path) -> None:
    async def body() -> None:
        lm, rm = _manager(tmp_path, 20)
        try:
            fut = _follower_fetch(rm, 20)
            rm.become_leader_or_follower(("t", 5), 3, 1, [3, 1], [3, 1], 1)
            out = await asyncio.wait_for(fut, 1)
            assert out[("t", 5)].error == ErrorCode.not_leader_or_follower
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())


def test_a_waiting_follower_fetch_still_times_out(tmp_path: Path) -> None:
    async def body() -> None:
        lm, rm = _manager(tmp_path, 5)
        try:
            fut = _follower_fetch(rm, 5, max_wait_ms=50)
            out = await asyncio.wait_for(fut, 5)
            assert all(r.size == 0 and r.error == ErrorCode.none for r in out.values())
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())

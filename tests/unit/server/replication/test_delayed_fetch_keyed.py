"""A waiting fetch over many partitions is re-checked only for the partition whose state moved
(a follower's fetch of thousands of partitions was re-checked whole for each
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
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.server.replication.results import FetchRequestPartition
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.replication_support import replica_manager

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
    rm = replica_manager(1, lm, lambda _t: LogConfig())
    rm.start()
    for i in range(partitions):
        rm.become_leader_or_follower(("t", i), 1, 0, [1, FOLLOWER], [1, FOLLOWER], 0)
    return lm, rm


def _count_reads(rm: ReplicaManager) -> list[set[tuple[str, int]]]:
    """The partitions of each `read_from_local_log` call from now on."""
    reads: list[set[tuple[str, int]]] = []
    real = rm.read_from_local_log

    def counted(replica_id: int, max_bytes: int, reqs: dict, *a: object) -> dict:
        reads.append(set(reqs))
        return real(replica_id, max_bytes, reqs, *a)  # type: ignore[arg-type]
    rm.read_from_local_log = counted  # type: ignore[method-assign]
    return reads


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


def test_check_and_complete_can_name_what_moved() -> None:
    p: DelayedOperationPurgatory[KeyedOp] = DelayedOperationPurgatory(
        "fetch", Timer(clock=lambda: 0))
    op = KeyedOp()
    assert not p.try_complete_else_watch(op, ["replica"], tried=True)
    assert op.keys == []  # `tried`: the caller's own check stands for both tries
    p.check_and_complete("replica", ("t", 3))
    assert op.keys == [("t", 3)]


def test_a_waiting_follower_fetch_is_watched_under_one_key(tmp_path: Path) -> None:
    """A follower's fetch of many partitions: one watch entry (not one per partition); an
    append to a partition it does not fetch leaves it waiting, one to a partition it fetches
    completes it."""
    async def body() -> None:
        lm, rm = _manager(tmp_path, 30)
        try:
            fut = _follower_fetch(rm, 20)
            assert rm.fetch_purgatory.watched() == 1
            rm.append_records(1, 1000, {("t", 25): build_batch([(None, b"x")])})
            await asyncio.sleep(0)
            assert not fut.done()
            rm.append_records(1, 1000, {("t", 7): build_batch([(None, b"y")])})
            out = await asyncio.wait_for(fut, 1)
            assert out[("t", 7)].size > 0 and ("t", 25) not in out
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())


def test_a_follower_at_the_log_end_is_answered_without_a_log_read(tmp_path: Path) -> None:
    """The "nothing new" path: a follower fetching at the leader's log end offset in the
    leader's latest epoch gets an empty answer with the leader's offsets, no read; one behind
    still reads."""
    async def body() -> None:
        lm, rm = _manager(tmp_path, 2)
        try:
            rm.append_records(1, 1000, {("t", i): build_batch([(None, b"x")]) for i in (0, 1)})
            p0 = rm.partitions[("t", 0)]
            reads: list[int] = []
            for i in (0, 1):
                lg = rm.partitions[("t", i)].log
                real = lg.read

                def counted(*a: object, _real: object = real, **k: object) -> object:
                    reads.append(1)
                    return _real(*a, **k)  # type: ignore[operator]
                lg.read = counted  # type: ignore[method-assign]
            epoch = p0.log.latest_epoch
            assert epoch is not None
            out = rm.read_from_local_log(FOLLOWER, 1 << 20, {
                ("t", 0): FetchRequestPartition(1, 1 << 20, 0, 0, epoch),
                ("t", 1): FetchRequestPartition(0, 1 << 20, 0, 0, -1)})
            idle, behind = out[("t", 0)], out[("t", 1)]
            assert (idle.error, idle.size, idle.regions) == (ErrorCode.none, 0, [])
            assert (idle.high_watermark, idle.log_start_offset, idle.leader_end_offset,
                    idle.last_stable_offset, idle.aborted_transactions) == (
                p0.high_watermark, 0, 1, p0.last_stable_offset, None)
            assert behind.size > 0 and len(reads) == 1
            # an epoch the leader never had still goes through the whole KIP-320 check
            out = rm.read_from_local_log(FOLLOWER, 1 << 20, {
                ("t", 0): FetchRequestPartition(1, 1 << 20, 0, 0, epoch + 5)})
            r = out[("t", 0)]
            assert (r.error, r.diverging_epoch) != (ErrorCode.none, None)
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())


def test_an_idle_follower_fetch_timing_out_reads_again_only_what_changed(tmp_path: Path
                                                                       ) -> None:
    """At its timeout a follower's idle fetch answers from the read that made it wait, except
    for partitions re-checked since or whose offsets no longer match that read (a state
    change nobody announced still shows in the answer)."""
    async def body() -> None:
        lm, rm = _manager(tmp_path, 6)
        try:
            rm.append_records(1, 1000, {("t", i): build_batch([(None, b"x")])
                                        for i in range(6)})
            requests = {("t", i): FetchRequestPartition(1, 1 << 20) for i in range(6)}
            fut = rm.fetch_messages(FOLLOWER, 50, 1, 1 << 20, requests)
            assert isinstance(fut, asyncio.Future) and not fut.done()
            reads = _count_reads(rm)
            rm.partitions[("t", 2)].high_watermark = 0  # unannounced: the offsets tell
            rm.on_high_watermark_moved(("t", 4))  # announced, nothing readable
            out = await asyncio.wait_for(fut, 5)
            assert reads == [{("t", 2), ("t", 4)}]
            assert list(out) == list(requests)
            assert out[("t", 2)].high_watermark == 0
            assert all(out[("t", i)].high_watermark == 1 and out[("t", i)].size == 0
                       for i in (0, 1, 3, 4, 5))
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())


def test_a_follower_fetch_completed_by_an_append_reads_again_only_what_moved(tmp_path: Path
                                                                            ) -> None:
    """An append to one partition completes a follower's idle fetch: that partition is read
    again, the others answer from the read that made the fetch wait, as reading them again
    would."""
    async def body() -> None:
        lm, rm = _manager(tmp_path, 6)
        try:
            fut = _follower_fetch(rm, 6)
            real = rm.read_from_local_log
            reads = _count_reads(rm)
            rm.append_records(1, 1000, {("t", 3): build_batch([(None, b"x")])})
            out = await asyncio.wait_for(fut, 1)
            assert reads == [{("t", 3)}]
            requests = {("t", i): FetchRequestPartition(0, 1 << 20) for i in range(6)}
            again = real(FOLLOWER, 1 << 20, requests)
            assert list(out) == list(again)

            def seen(r: object) -> tuple[object, ...]:
                return (r.error, r.high_watermark, r.log_start_offset, r.size,  # type: ignore
                        r.leader_end_offset, r.last_stable_offset)  # type: ignore
            assert [seen(r) for r in out.values()] == [seen(r) for r in again.values()]
            assert out[("t", 3)].size > 0
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())


def test_min_bytes_one_completes_without_a_log_read_larger_ones_count_bytes(tmp_path: Path
                                                                            ) -> None:
    """With fetch.min.bytes 1 (the default) a waiting fetch completes on the first batch below
    its limit without reading the log to count bytes; with a larger min.bytes the bytes are
    counted and a batch smaller than it leaves the fetch waiting."""
    async def body() -> None:
        lm = LogManager([tmp_path / "logs"], lock_dirs=False)
        rm = replica_manager(1, lm, lambda _t: LogConfig())
        rm.start()
        rm.become_leader_or_follower(("t", 0), 1, 0, [1], [1], 0)  # the HW follows the LEO
        try:
            counted: list[int] = []
            real = rm.bytes_between

            def counting(*a: object) -> int:
                counted.append(1)
                return real(*a)  # type: ignore[arg-type]
            rm.bytes_between = counting  # type: ignore[method-assign]
            requests = {("t", 0): FetchRequestPartition(0, 1 << 20)}
            fut = rm.fetch_messages(-1, 5000, 1, 1 << 20, requests)
            assert isinstance(fut, asyncio.Future) and not fut.done()
            rm.append_records(1, 1000, {("t", 0): build_batch([(None, b"x")])})
            assert (await asyncio.wait_for(fut, 1))[("t", 0)].size > 0
            assert counted == []  # min.bytes 1: completed without counting
            requests = {("t", 0): FetchRequestPartition(1, 1 << 20)}
            big = rm.fetch_messages(-1, 5000, 10_000, 1 << 20, requests)
            assert isinstance(big, asyncio.Future) and not big.done()
            rm.append_records(1, 1000, {("t", 0): build_batch([(None, b"y")])})
            await asyncio.sleep(0)
            assert counted and not big.done()  # min.bytes 10,000: counted, not enough
            rm.append_records(1, 1000, {("t", 0): build_batch([(None, b"z" * 12_000)])})
            assert (await asyncio.wait_for(big, 1))[("t", 0)].size >= 10_000
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())

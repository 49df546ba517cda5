"""A follower's replica fetcher completes the consumer fetches waiting on it (KIP-392) when a
fetch response moves its high watermark, as Kafka 3.4's ReplicaFetcherThread does
(partitionsWithNewHighWatermark, then ReplicaManager.completeDelayedFetchRequests once per
response; Kafka 2.8 left them to their max wait): the fetch purgatory is checked for exactly the
partitions whose HW moved, and a consumer parked on the follower gets the new record without
waiting out its max wait."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.common import TopicPartition
from odradek.protocol.records import build_batch
from odradek.server.replication.fetcher import (
    FetcherConfig,
    InitialFetchState,
    ReplicaFetcher,
    initial_fetch_offset,
)
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.server.replication.replica_selector import ClientMetadata
from odradek.server.replication.results import FetchRequestPartition
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.replication_support import LocalLeaderEndpoint, replica_manager

LEADER, FOLLOWER = 1, 2
TPS = [("t", i) for i in range(3)]


def _pair(tmp_path: Path) -> tuple[ReplicaManager, ReplicaManager, ReplicaFetcher]:
    """A leader and a follower of t-0..t-2 (the leader's ISR is itself: its HW is its LEO),
    and the follower's fetcher, caught up with the empty logs."""
    rms = []
    for b in (LEADER, FOLLOWER):
        rm = replica_manager(b, LogManager([tmp_path / f"logs-{b}"], lock_dirs=False),
                             lambda _t: LogConfig())
        rm.start()
        for tp in TPS:
            assert rm.become_leader_or_follower(tp, LEADER, 0, [LEADER], [LEADER, FOLLOWER],
                                                0) == ErrorCode.none
        rms.append(rm)
    leader, follower = rms
    fetcher = ReplicaFetcher("f", FOLLOWER, LEADER, LocalLeaderEndpoint(leader, FOLLOWER),
                             follower.partitions.get, FetcherConfig())
    fetcher.add_partitions({tp: InitialFetchState(LEADER, None, 0, initial_fetch_offset(
        follower.partitions[tp])) for tp in TPS})
    return leader, follower, fetcher


def _produce(leader: ReplicaManager, tp: TopicPartition, value: bytes) -> None:
    res = leader.append_records(1, 1000, {tp: build_batch([(None, value)])})
    assert isinstance(res, dict) and res[tp].error == ErrorCode.none


async def _round(fetcher: ReplicaFetcher) -> None:
    await fetcher.do_work(wait_if_idle=False)


def test_the_fetch_purgatory_is_checked_for_the_partitions_whose_hw_moved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body() -> None:
        leader, follower, fetcher = _pair(tmp_path)
        try:
            await _round(fetcher)  # truncation to the (empty) HW, then a first empty fetch
            await _round(fetcher)
            checked: list[Hashable] = []
            purgatory = follower.purgatories.fetch
            real = purgatory.check_and_complete

            def spy(key: Hashable, changed: Hashable = None) -> int:
                checked.append(key)
                return real(key, changed)
            monkeypatch.setattr(purgatory, "check_and_complete", spy)
            _produce(leader, TPS[0], b"a")
            _produce(leader, TPS[2], b"c")
            await _round(fetcher)  # the records; the leader's HW waits for this follower
            assert checked == []
            assert [follower.partitions[tp].log_end_offset for tp in TPS] == [1, 0, 1]
            await _round(fetcher)  # the leader's new HW
            assert sorted(checked) == [TPS[0], TPS[2]]  # t-1's HW did not move
            assert [follower.partitions[tp].high_watermark for tp in TPS] == [1, 0, 1]
            checked.clear()
            await _round(fetcher)  # nothing new: no HW moved, nothing checked
            assert checked == []
        finally:
            fetcher.stop()
            leader.shutdown()
            follower.shutdown()
    asyncio.run(body())


def test_a_consumer_waiting_on_the_follower_completes_when_its_hw_moves(tmp_path: Path
                                                                        ) -> None:
    async def body() -> None:
        leader, follower, fetcher = _pair(tmp_path)
        try:
            await _round(fetcher)
            await _round(fetcher)
            tp = TPS[1]
            waiting = follower.fetch_messages(
                -1, 20_000, 1, 1 << 20, {tp: FetchRequestPartition(0, 1 << 20)},
                client_metadata=ClientMetadata("rack-b"))
            assert isinstance(waiting, asyncio.Future) and not waiting.done()
            _produce(leader, tp, b"x")
            await _round(fetcher)  # the record, below the follower's HW only at the next round
            assert not waiting.done()
            await _round(fetcher)
            # completed by the fetch response, not by the 20 s timeout
            assert waiting.done()
            result = waiting.result()[tp]
            assert result.error == ErrorCode.none and result.high_watermark == 1
            assert result.size > 0
        finally:
            fetcher.stop()
            leader.shutdown()
            follower.shutdown()
    asyncio.run(body())

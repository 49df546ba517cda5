"""The data-loss and divergence scenarios of HW-based truncation (docs/design.md S-3.7,
KIP-101), reproduced step by step, and KIP-279's fast leader changes (S-3.7).

Replicas are real `ReplicaManager`s over real logs in separate directories; the controller's
decisions are applied by calling `become_leader_or_follower` as LeaderAndIsr would; a follower
fetches through the production `ReplicaFetcher` with a `LocalLeaderEndpoint` (the leader's
replica manager called in-process), one round at a time, so every interleaving is exact.
A crash closes the logs without a clean shutdown, after the periodic HW checkpoint; a power
failure also drops the log tail that was still in the page cache.

Each of the first three tests fails if a new follower truncates to its high watermark instead
of using the leader's end offset of its latest leader epoch. The four KIP-101/KIP-279 scenarios
run both ways a follower learns that offset: from the leader's Fetch answer (`diverging_epoch`,
KIP-320, Kafka 2.7+: no OffsetForLeaderEpoch request at all) and, as with a pre-2.7 leader,
from an OffsetForLeaderEpoch request before fetching; each asserts which path truncated.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.records import Codec, build_batch, decode_records, iter_headers
from odradek.server.replication.fetcher import (
    FetcherConfig,
    InitialFetchState,
    ReplicaFetcher,
    initial_fetch_offset,
)
from odradek.server.replication.partition import Partition
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.replication_support import LocalLeaderEndpoint, replica_manager

TP = ("t", 0)
REPLICAS = [1, 2]


class Replica:
    """One broker's replica of t-0: its log dir, log manager and replica manager."""

    def __init__(self, broker_id: int, root: Path, truncate_on_fetch: bool = True) -> None:
        self.id = broker_id
        self.truncate_on_fetch = truncate_on_fetch
        self.dir = root / f"broker-{broker_id}"
        self.zk_version = 0
        self.open()

    def open(self) -> None:
        self.lm = LogManager([self.dir], lock_dirs=False)
        self.rm = replica_manager(self.id, self.lm,
                                  lambda _t: LogConfig(min_insync_replicas=1))
        self.rm.start()  # reads replication-offset-checkpoint

    @property
    def p(self) -> Partition:
        """The partition (as the first LeaderAndIsr after a restart creates it: the log as
        recovered, the HW from the checkpoint)."""
        return self.rm.get_or_create_partition(*TP)

    def lead(self, epoch: int, isr: list[int]) -> None:
        self.zk_version += 1
        assert self.rm.become_leader_or_follower(TP, self.id, epoch, isr, REPLICAS,
                                                 self.zk_version) == ErrorCode.none

    def follow(self, leader: Replica, epoch: int, isr: list[int]) -> ReplicaFetcher:
        """LeaderAndIsr making this replica a follower, and its fetcher (Truncating first)."""
        self.zk_version += 1
        assert self.rm.become_leader_or_follower(TP, leader.id, epoch, isr, REPLICAS,
                                                 self.zk_version) == ErrorCode.none
        fetcher = ReplicaFetcher(f"fetcher-{self.id}-from-{leader.id}", self.id, leader.id,
                                 LocalLeaderEndpoint(leader.rm, self.id), self.rm.partitions.get,
                                 FetcherConfig(truncate_on_fetch=self.truncate_on_fetch))
        fetcher.add_partitions({TP: InitialFetchState(leader.id, None, epoch,
                                                      initial_fetch_offset(self.p))})
        return fetcher

    def crash(self, lose_from: int | None = None) -> None:
        """kill -9 after the periodic HW checkpoint; with `lose_from`, a power failure that
        also loses the batches from that offset on (not yet flushed from the page cache)."""
        self.lm.write_high_watermarks({TP: self.p.high_watermark})
        cut: tuple[Path, int] | None = None
        if lose_from is not None:
            h = next(h for h in self.p.log.iter_batch_headers(lose_from)
                     if h.base_offset >= lose_from)
            cut = (self.p.log.segments[-1].log_path, h.position)
        self.rm.shutdown()
        self.lm.close_without_shutdown()
        if cut is not None:
            os.truncate(cut[0], cut[1])

    def restart(self) -> None:
        self.open()

    def records(self, end: int | None = None) -> list[tuple[int, int, bytes]]:
        """(offset, leader epoch, value) of every record below `end` (default: the LEO)."""
        log = self.p.log
        data = log.read(log.log_start_offset, 1 << 30, max_offset=end).read_bytes()
        out = []
        for h in iter_headers(data):
            for r in decode_records(data[h.position:h.position + h.size]):
                out.append((r.offset, h.partition_leader_epoch, r.value or b""))
        return out

    def values(self, end: int | None = None) -> list[bytes]:
        return [v for _, _, v in self.records(end)]


def produce(leader: Replica, *values: bytes, compression: int = Codec.NONE,
            acks: int = -1) -> Any:
    """The ProduceResult, or (acks=all) the future of a waiting one."""
    data = build_batch([(None, v) for v in values], compression=compression)
    result = leader.rm.append_records(acks, 30_000, {TP: data})
    return result[TP] if isinstance(result, dict) else result


async def acked(outcome: Any) -> bool:
    await asyncio.sleep(0)
    if isinstance(outcome, asyncio.Future):
        return outcome.done() and outcome.result()[TP].error == ErrorCode.none
    return outcome.error == ErrorCode.none


def fetch_arrives(leader: Replica, follower: Replica, offset: int) -> None:
    """A follower's Fetch reaches the leader (the leader records the follower's LEO and moves
    its HW); the response never reaches the follower, which crashes first."""
    from odradek.server.replication.results import FetchRequestPartition
    leader.rm.fetch_messages(follower.id, 0, 1, 1 << 20, {
        TP: FetchRequestPartition(offset, 1 << 20, leader.p.leader_epoch, 0)})


async def truncate(fetcher: ReplicaFetcher) -> None:
    """The new follower's truncation step: its first Fetch round when truncating on fetch
    (the leader answers diverging_epoch if it must), else its OffsetForLeaderEpoch round."""
    if fetcher.config.truncate_on_fetch:
        await fetcher.do_work(wait_if_idle=False)
    else:
        await fetcher.maybe_truncate()


def truncated_by(fetcher: ReplicaFetcher, diverging: int) -> bool:
    """Did the fetcher truncate the expected way: `diverging` times from diverging epochs and
    no OffsetForLeaderEpoch request (on fetch), or only by OffsetForLeaderEpoch requests?"""
    if fetcher.config.truncate_on_fetch:
        return (fetcher.epoch_requests, fetcher.truncations_on_fetch) == (0, diverging)
    return fetcher.epoch_requests >= 1 and fetcher.truncations_on_fetch == 0


ON_FETCH = pytest.mark.parametrize("on_fetch", [True, False], ids=["on-fetch", "epoch-request"])


def run(coro_fn: Any) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro_fn(), 30)
    asyncio.run(main())


@ON_FETCH
def test_hw_truncation_after_a_restart_loses_a_committed_message(tmp_path: Path,
                                                                 on_fetch: bool) -> None:
    """docs/design.md S-3.7 / KIP-101 scenario 1, min.insync.replicas=1, acks=-1.

    A leads, B follows. B has m1 and m2, and its fetch at offset 2 told A that B has m2: A's HW
    reaches 2 and m2 is acknowledged. B restarts before it learned that HW (its HW is 1). With
    HW truncation B drops m2; A then dies and B, in the ISR, becomes leader: m2, acknowledged,
    is lost — and when A returns it keeps m2 at an offset where B has other data."""
    async def body() -> None:
        a, b = Replica(1, tmp_path, on_fetch), Replica(2, tmp_path, on_fetch)
        a.lead(0, [1, 2])
        fb = b.follow(a, 0, [1, 2])
        m1 = produce(a, b"m1")
        await fb.do_work(wait_if_idle=False)          # B gets m1 (offset 0)
        await fb.do_work(wait_if_idle=False)          # B at 1: A's HW 1, m1 acked
        assert await acked(m1) and b.p.high_watermark == 1
        m2 = produce(a, b"m2")
        await fb.do_work(wait_if_idle=False)          # B gets m2 with the HW 1
        assert (b.p.log_end_offset, b.p.high_watermark) == (2, 1)
        fetch_arrives(a, b, 2)                        # A: B has m2 -> HW 2 -> m2 acked
        assert a.p.high_watermark == 2 and await acked(m2)

        b.crash()                                     # B's HW checkpoint says 1
        b.restart()
        assert (b.p.log_end_offset, b.p.high_watermark) == (2, 1)
        fb = b.follow(a, 0, [1, 2])                   # the controller re-sends LeaderAndIsr
        await truncate(fb)                            # KIP-101: A's end of epoch 0 is 2
        assert b.values() == [b"m1", b"m2"] and truncated_by(fb, 0)

        a.crash()                                     # A dies before B fetches again
        b.lead(1, [2])                                # B was in the ISR: a clean election
        assert b.values() == [b"m1", b"m2"]           # every acknowledged message survives
        assert await acked(produce(b, b"m3"))         # ISR {B}: HW = LEO at once
        a.restart()
        fa = a.follow(b, 1, [2])
        for _ in range(3):
            await fa.do_work(wait_if_idle=False)
        assert a.records() == b.records() == [(0, 0, b"m1"), (1, 0, b"m2"), (2, 1, b"m3")]
    run(body)


@ON_FETCH
def test_both_replicas_restart_and_the_logs_diverge_under_hw_truncation(
        tmp_path: Path, on_fetch: bool) -> None:
    """KIP-101 scenario 2 (S-3.7): a power failure hits both replicas. m2 was committed (B
    had it) but was still in B's page cache: B comes back with m1 only, first, and leads
    (epoch 1), taking m3 at offset 1. A returns with m1, m2 and HW 2. Truncating to its HW,
    A keeps m2 at offset 1 and fetches from 2: the replicas hold different messages at the
    same offset for good. With the leader epoch A learns that B's epoch 0 ended at 1, drops m2
    and follows B's lineage."""
    async def body() -> None:
        a, b = Replica(1, tmp_path, on_fetch), Replica(2, tmp_path, on_fetch)
        a.lead(0, [1, 2])
        fb = b.follow(a, 0, [1, 2])
        produce(a, b"m1")
        for _ in range(2):
            await fb.do_work(wait_if_idle=False)
        produce(a, b"m2")
        for _ in range(2):
            await fb.do_work(wait_if_idle=False)
        assert a.p.high_watermark == 2 and b.p.log_end_offset == 2

        a.crash()
        b.crash(lose_from=1)                          # m2 never reached B's disk
        b.restart()
        assert b.values() == [b"m1"]
        b.lead(1, [2])
        assert await acked(produce(b, b"m3"))
        a.restart()
        assert (a.p.log_end_offset, a.p.high_watermark) == (2, 2)
        fa = a.follow(b, 1, [2])
        await truncate(fa)                            # B's epoch 0 ended at 1: drop m2
        assert a.values() == [b"m1"] and truncated_by(fa, 1)
        for _ in range(3):
            await fa.do_work(wait_if_idle=False)
        # One lineage: B's. (m2 is gone with the power of both replicas, which Kafka's
        # guarantee allows; two histories for offset 1 it does not.)
        assert a.records() == b.records() == [(0, 0, b"m1"), (1, 1, b"m3")]
        assert a.p.high_watermark == b.p.high_watermark == 2
    run(body)


@ON_FETCH
def test_divergent_compressed_batches_stall_replication_under_hw_truncation(
        tmp_path: Path, on_fetch: bool) -> None:
    """KIP-101's worst case of log divergence: with compressed batches the replicas' batch
    boundaries differ, so the follower's HW-based fetch offset points into the middle of a
    leader batch, which cannot be appended at that offset: replication stalls for good. With
    the leader epoch the follower truncates to the divergence point and catches up."""
    async def body() -> None:
        a, b = Replica(1, tmp_path, on_fetch), Replica(2, tmp_path, on_fetch)
        a.lead(0, [1, 2])
        fb = b.follow(a, 0, [1, 2])
        produce(a, b"x0", b"x1", compression=Codec.GZIP)            # offsets 0-1
        for _ in range(2):
            await fb.do_work(wait_if_idle=False)
        produce(a, b"y2", b"y3", b"y4", compression=Codec.GZIP)     # offsets 2-4
        for _ in range(2):
            await fb.do_work(wait_if_idle=False)
        assert a.p.high_watermark == 5 and b.p.log_end_offset == 5

        a.crash()
        b.crash(lose_from=2)                          # the y batch was not flushed on B
        b.restart()
        assert b.p.log_end_offset == 2
        b.lead(1, [2])
        for batch in ((b"z2", b"z3"), (b"w4", b"w5"), (b"v6",)):
            assert await acked(produce(b, *batch, compression=Codec.GZIP))
        a.restart()
        assert a.p.high_watermark == 5
        fa = a.follow(b, 1, [2])
        await truncate(fa)                            # B's epoch 0 ended at 2
        assert a.p.log_end_offset == 2 and truncated_by(fa, 1)
        for _ in range(5):
            await fa.do_work(wait_if_idle=False)
        assert a.p.log_end_offset == b.p.log_end_offset == 7
        assert a.records() == b.records()
        assert a.values() == [b"x0", b"x1", b"z2", b"z3", b"w4", b"w5", b"v6"]
        assert not fa.failed
    run(body)


@ON_FETCH
def test_fast_leader_changes_need_the_leaders_epoch_in_the_answer(tmp_path: Path,
                                                                  on_fetch: bool) -> None:
    """KIP-279: leadership moves A -> B -> A quickly (controlled moves, both replicas alive
    and in the ISR). A had m2 (epoch 0, acks=1) that B never fetched; B, leading epoch 1,
    wrote n2 at offset 2 that A never fetched; A, leading epoch 2, writes p3 at offset 3.
    B asks about epoch 1, which A never saw: A answers its largest epoch below, 0, ending at
    3. Truncating to 3 (KIP-101's epoch-less answer) would keep n2 where A has m2; B instead
    truncates to its own end of epoch 0, offset 2, and fetches A's lineage. (HW truncation
    happens to be right here: n2 was never committed.)"""
    async def body() -> None:
        a, b = Replica(1, tmp_path, on_fetch), Replica(2, tmp_path, on_fetch)
        a.lead(0, [1, 2])
        fb = b.follow(a, 0, [1, 2])
        committed = produce(a, b"m0", b"m1")
        for _ in range(2):
            await fb.do_work(wait_if_idle=False)
        assert await acked(committed)
        assert await acked(produce(a, b"m2", acks=1))   # B does not fetch it
        b.lead(1, [1, 2])                               # a controlled move to B ...
        a.follow(b, 1, [1, 2])                          # ... A has not fetched yet when
        assert await acked(produce(b, b"n2", acks=1))
        a.lead(2, [1, 2])                               # ... leadership returns to A
        assert a.p.log.leader_epoch_cache.entries() == [(0, 0), (2, 3)]
        assert await acked(produce(a, b"p3", acks=1))
        assert b.p.log.leader_epoch_cache.entries() == [(0, 0), (1, 2)]
        fb = b.follow(a, 2, [1, 2])
        await truncate(fb)                            # A: epoch <= 1 is 0, ending at 3
        assert b.p.log_end_offset == 2 and truncated_by(fb, 1)
        for _ in range(3):
            await fb.do_work(wait_if_idle=False)
        assert b.records() == a.records() == [
            (0, 0, b"m0"), (1, 0, b"m1"), (2, 0, b"m2"), (3, 2, b"p3")]
        assert a.p.high_watermark == 4
    run(body)


# -- the fetcher's error paths (Kafka's handling) ---------------------------------------------


def test_follower_behind_the_leaders_log_start_restarts_there(tmp_path: Path) -> None:
    """OFFSET_OUT_OF_RANGE below the leader's log start offset (retention deleted what the
    follower needs): the follower truncates fully and fetches from the leader's start."""
    async def body() -> None:
        a, b = Replica(1, tmp_path), Replica(2, tmp_path)
        a.lead(0, [1])
        a.p.log.truncate_fully_and_start_at(10)
        a.p.initialize_high_watermark(10)
        assert await acked(produce(a, b"a10", b"a11"))
        fb = b.follow(a, 0, [1])
        for _ in range(3):
            await fb.do_work(wait_if_idle=False)
        assert (b.p.log_start_offset, b.p.log_end_offset) == (10, 12)
        assert b.records() == a.records() == [(10, 0, b"a10"), (11, 0, b"a11")]
    run(body)


def test_follower_ahead_of_the_leaders_end_truncates_to_it(tmp_path: Path) -> None:
    """OFFSET_OUT_OF_RANGE above the leader's LEO (an unclean election made a shorter log the
    leader's, and this replica has no epoch the leader can place): truncate to the leader's
    LEO and go on."""
    async def body() -> None:
        a, b = Replica(1, tmp_path), Replica(2, tmp_path)
        b.lead(0, [2])
        assert await acked(produce(b, b"b0", b"b1", b"b2"))
        a.lead(1, [1])  # unclean: A was never in B's ISR
        assert await acked(produce(a, b"a0"))
        fb = b.follow(a, 1, [1])
        st = fb.states[TP]
        fb.states[TP] = type(st)(3, st.current_leader_epoch, "Fetching")  # skip truncation
        await fb.do_work(wait_if_idle=False)
        assert b.p.log_end_offset == 0  # to A's LEO, 1: the batch holding offset 1 goes whole
        await fb.do_work(wait_if_idle=False)
        assert b.records() == a.records() == [(0, 1, b"a0")] and not fb.failed
    run(body)


def test_fenced_follower_waits_for_the_next_leader_and_isr(tmp_path: Path) -> None:
    async def body() -> None:
        a, b = Replica(1, tmp_path), Replica(2, tmp_path)
        a.lead(0, [1, 2])
        assert await acked(produce(a, b"m0", acks=1))
        fb = b.follow(a, 0, [1, 2])
        await fb.do_work(wait_if_idle=False)
        a.lead(1, [1, 2])  # B has not heard of epoch 1 yet
        produce(a, b"m1", acks=1)
        await fb.do_work(wait_if_idle=False)
        assert TP in fb.failed and TP not in fb.states  # FENCED_LEADER_EPOCH: stop
        fb.add_partitions({TP: InitialFetchState(1, None, 1, initial_fetch_offset(b.p))})
        b.rm.become_leader_or_follower(TP, 1, 1, [1, 2], REPLICAS, 9)
        for _ in range(3):
            await fb.do_work(wait_if_idle=False)
        assert b.values() == [b"m0", b"m1"] and not fb.failed
    run(body)


def test_follower_ahead_of_the_leaders_epoch_backs_off(tmp_path: Path) -> None:
    """UNKNOWN_LEADER_EPOCH: the leader has not processed its LeaderAndIsr yet; the follower
    keeps its state and retries after replica.fetch.backoff.ms."""
    async def body() -> None:
        a, b = Replica(1, tmp_path), Replica(2, tmp_path)
        a.lead(0, [1, 2])
        assert await acked(produce(a, b"m0", acks=1))
        fb = b.follow(a, 0, [1, 2])
        await fb.do_work(wait_if_idle=False)
        assert b.values() == [b"m0"]
        fb = b.follow(a, 1, [1, 2])  # B already heard of epoch 1, A not
        await fb.do_work(wait_if_idle=False)
        st = fb.states[TP]  # its Fetch (truncating on fetch) got UNKNOWN_LEADER_EPOCH
        assert not st.is_truncating and not fb._ready(st) and not fb.failed
        a.lead(1, [1, 2])
        assert await acked(produce(a, b"m1", acks=1))
        fb.states[TP] = type(st)(st.fetch_offset, 1, st.state,  # the backoff has passed
                                 st.last_fetched_epoch)
        for _ in range(2):
            await fb.do_work(wait_if_idle=False)
        assert b.records() == a.records() == [(0, 0, b"m0"), (1, 1, b"m1")]
    run(body)

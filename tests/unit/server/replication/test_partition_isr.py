"""HW and ISR decisions of the leader (S-3.3, S-3.4) and the follower's truncation rule (S-3.7),
as pure logic with an injected clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.records import build_batch, validate_batches
from odradek.server.replication.fetcher import TruncationState, truncation_state
from odradek.server.replication.leader_endpoint import EpochEndOffset
from odradek.server.replication.partition import (
    Partition,
    ReplicaState,
    can_join_isr,
    high_watermark_candidate,
    out_of_sync_replicas,
)
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.replication_support import replica_manager

LAG = 10_000


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_leader(tmp_path: Path, clock: Clock, isr: list[int] | None = None,
                replicas: tuple[int, ...] = (1, 2, 3)) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition("t", 0, log, 1, replica_lag_time_max_ms=LAG, clock=clock)
    p.make_leader(0, list(isr or replicas), list(replicas))
    return p


def append(p: Partition, n: int = 1) -> None:
    buf = bytearray(build_batch([(None, b"v")] * n))
    p.append_records_to_leader(buf, validate_batches(buf), 1, 1, p.clock())


def fetch(p: Partition, follower: int, offset: int):
    return p.update_follower_fetch_state(follower, offset, 0, p.clock())


# -- pure functions ------------------------------------------------------------------------------


def test_high_watermark_is_the_min_leo_over_the_isr() -> None:
    remotes = [ReplicaState(2, 7, last_caught_up_time_ms=0), ReplicaState(3, 4)]
    assert high_watermark_candidate(9, remotes, [1, 2, 3], now_ms=100_000, max_lag_ms=LAG) == 4
    # A follower outside the ISR that has not caught up recently does not hold the HW back ...
    assert high_watermark_candidate(9, remotes, [1, 2], now_ms=100_000, max_lag_ms=LAG) == 7
    # ... one caught up within the lag does (Kafka: it can then reach the HW and join).
    remotes[1].last_caught_up_time_ms = 95_000
    assert high_watermark_candidate(9, remotes, [1, 2], now_ms=100_000, max_lag_ms=LAG) == 4
    # An ISR member whose LEO is still unknown (-1) holds it where it is.
    assert high_watermark_candidate(9, [ReplicaState(2)], [1, 2], 0, LAG) == -1


def test_out_of_sync_is_lag_in_time_not_in_messages() -> None:
    now = 50_000
    remotes = {
        2: ReplicaState(2, 100, last_caught_up_time_ms=now - LAG - 1),  # at the LEO: in sync
        3: ReplicaState(3, 99, last_caught_up_time_ms=now - LAG),       # just within the lag
        4: ReplicaState(4, 99, last_caught_up_time_ms=now - LAG - 1),   # too late
    }
    assert out_of_sync_replicas([1, 2, 3, 4], 1, remotes, 100, now, LAG) == {4}


def test_replica_state_caught_up_time_follows_kafka() -> None:
    r = ReplicaState(2)
    r.reset_last_caught_up_time(leader_end_offset=10, now_ms=1000, last_caught_up_time_ms=1000)
    r.update_fetch_state(5, 0, 2000, leader_end_offset=20)  # behind both LEOs: not caught up
    assert r.last_caught_up_time_ms == 1000
    r.update_fetch_state(20, 0, 3000, leader_end_offset=25)  # reached the LEO of the last fetch
    assert r.last_caught_up_time_ms == 2000
    r.update_fetch_state(25, 0, 4000, leader_end_offset=25)  # at the LEO now
    assert (r.last_caught_up_time_ms, r.log_end_offset) == (4000, 25)


def test_joining_the_isr_needs_the_hw_and_the_current_epoch() -> None:
    assert can_join_isr(10, 10, 8)
    assert not can_join_isr(9, 10, 8)            # below the HW
    assert not can_join_isr(10, 5, 12)           # not yet in the current leader epoch
    assert not can_join_isr(10, 5, None)         # not a leader


# -- the partition (leader) ----------------------------------------------------------------------


def test_hw_advances_with_follower_fetches_and_never_moves_back(tmp_path: Path) -> None:
    clock = Clock()
    p = make_leader(tmp_path, clock)
    append(p, 5)
    assert p.high_watermark == 0  # followers have not fetched
    assert fetch(p, 2, 5).high_watermark_moved is False  # 3 still at -1
    out = fetch(p, 3, 3)
    assert out.high_watermark_moved and p.high_watermark == 3
    assert p.log.high_watermark == 3  # published to the log (retention bound)
    assert fetch(p, 3, 5).high_watermark_moved and p.high_watermark == 5
    # A follower fetching from an older offset (it truncated) does not pull the HW back.
    assert not fetch(p, 2, 1).high_watermark_moved
    assert p.high_watermark == 5


def test_isr_shrinks_after_the_lag_and_hw_advances_once_committed(tmp_path: Path) -> None:
    clock = Clock()
    p = make_leader(tmp_path, clock)
    append(p, 4)
    fetch(p, 2, 4)
    fetch(p, 3, 1)  # replica 3 is stuck at 1
    assert p.high_watermark == 1
    clock.now += LAG
    assert p.isr_to_shrink_to() == ((), set())  # not yet: exactly the lag
    fetch(p, 2, 4)  # replica 2 keeps up
    clock.now += 1
    new_isr, out = p.isr_to_shrink_to()
    assert (new_isr, out) == ((1, 2), {3})
    # Pending shrink: the HW still waits for the maximal ISR (the old one).
    p.begin_isr_update(new_isr)
    assert p.maximal_isr == [1, 2, 3] and not p.maybe_increment_high_watermark()
    assert p.isr_to_shrink_to() == ((), set())  # one update at a time
    assert p.complete_isr_update(new_isr, zk_version=1)  # HW moves once committed
    assert p.isr == [1, 2] and p.high_watermark == 4 and p.zk_version == 1


def test_isr_expands_when_the_follower_reaches_the_hw_in_the_current_epoch(
        tmp_path: Path) -> None:
    clock = Clock()
    p = make_leader(tmp_path, clock, isr=[1, 2])
    append(p, 6)
    assert p.leader_epoch_start_offset == 0
    fetch(p, 2, 6)
    assert p.high_watermark == 6
    assert fetch(p, 3, 2).expand_isr_to is None  # behind the HW
    out = fetch(p, 3, 6)
    assert out.expand_isr_to == (1, 2, 3)
    p.begin_isr_update(out.expand_isr_to)
    assert p.maximal_isr == [1, 2, 3]
    append(p, 2)
    fetch(p, 2, 8)
    assert p.high_watermark == 6  # the joining follower counts at once (KIP-497)
    fetch(p, 3, 8)
    assert p.high_watermark == 8
    p.complete_isr_update((1, 2, 3), 1)
    assert p.isr == [1, 2, 3]


def test_a_follower_must_reach_the_new_epoch_before_joining(tmp_path: Path) -> None:
    clock = Clock()
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition("t", 0, log, 1, replica_lag_time_max_ms=LAG, clock=clock)
    p.make_leader(0, [1, 2], [1, 2, 3])
    append(p, 4)
    fetch(p, 2, 4)
    # Re-elected at epoch 1 with committed data (HW 4) and more beyond it.
    p.make_leader(1, [1, 2], [1, 2, 3])
    assert p.leader_epoch_start_offset == 4
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 4)]
    assert fetch(p, 2, 4).high_watermark_moved is False  # same leader: LEOs kept
    assert fetch(p, 3, 4).expand_isr_to == (1, 2, 3)


def test_new_leader_forgets_follower_leos_and_keeps_its_hw(tmp_path: Path) -> None:
    clock = Clock()
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = Partition("t", 0, log, 1, replica_lag_time_max_ms=LAG, clock=clock)
    p.make_follower(2, 0, [2, 1], [2, 1])
    buf = bytearray(build_batch([(None, b"a")] * 3, partition_leader_epoch=0))
    p.append_records_to_follower(buf)
    p.update_follower_high_watermark(leader_high_watermark=9, leader_log_start_offset=0)
    assert p.high_watermark == 3  # min(own LEO, leader HW)
    p.update_follower_high_watermark(2, 0)
    assert p.high_watermark == 2
    assert p.make_leader(1, [1], [2, 1])
    assert p.high_watermark == 3  # the ISR is this replica alone: HW = LEO
    assert p.remote[2].log_end_offset == -1
    assert not p.make_leader(0, [1], [2, 1])  # a stale epoch is refused


def test_follower_of_an_unassigned_replica_is_not_recorded(tmp_path: Path) -> None:
    p = make_leader(tmp_path, Clock())
    assert fetch(p, 9, 0).known is False


# -- acks=all and min.insync.replicas ------------------------------------------------------------


def test_isr_shrinking_below_min_isr_while_waiting_answers_after_append(tmp_path: Path) -> None:
    async def body() -> None:
        clock = Clock()
        lm = LogManager([tmp_path / "logs"], lock_dirs=False)
        rm = replica_manager(1, lm, lambda _t: LogConfig(min_insync_replicas=2), clock=clock)
        rm.start()
        try:
            rm.become_leader_or_follower(("t", 0), 1, 0, [1, 2], [1, 2], 0)
            fut = rm.append_records(-1, 5000, {("t", 0): build_batch([(None, b"x")])})
            assert isinstance(fut, asyncio.Future) and not fut.done()
            p = rm.partitions[("t", 0)]
            clock.now += LAG + 1  # the follower never fetched: it leaves the ISR
            new_isr, out = p.isr_to_shrink_to()
            assert (new_isr, out) == ((1,), {2})
            p.begin_isr_update(new_isr)
            assert not fut.done()
            p.complete_isr_update(new_isr, 1)  # HW = the leader's LEO
            rm.on_high_watermark_moved(("t", 0))
            result = (await asyncio.wait_for(fut, 1))[("t", 0)]
            assert result.error == ErrorCode.not_enough_replicas_after_append
            assert p.high_watermark == 1  # written, but to fewer replicas than required
            refused = rm.append_records(-1, 5000, {("t", 0): build_batch([(None, b"y")])})
            assert refused[("t", 0)].error == ErrorCode.not_enough_replicas
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())


def test_partitions_start_from_the_checkpointed_high_watermark(tmp_path: Path) -> None:
    lm = LogManager([tmp_path / "logs"], lock_dirs=False)
    log = lm.get_or_create_log("t", 0)
    log.append_as_follower(build_batch([(None, b"v")] * 5, partition_leader_epoch=0))
    lm.write_high_watermarks({("t", 0): 3, ("t", 1): 7})

    async def body() -> None:
        rm = replica_manager(1, lm, lambda _t: LogConfig())
        rm.start()
        try:
            p = rm.get_or_create_partition("t", 0)
            assert p.high_watermark == 3 and p.log.high_watermark == 3
            assert rm.get_or_create_partition("t", 1).high_watermark == 0  # clamped to LEO
        finally:
            rm.shutdown()
            lm.shutdown()
    asyncio.run(body())


# -- the follower's truncation point (KIP-101, KIP-279) -----------------------------------------


@pytest.mark.parametrize(("reply", "ours", "leo", "expected"), [
    # The leader knows our epoch: truncate to the smaller end offset.
    (EpochEndOffset(ErrorCode.none, 1, 5), (1, 8), 8, TruncationState(5, True)),
    (EpochEndOffset(ErrorCode.none, 1, 9), (1, 8), 8, TruncationState(8, True)),
    # The leader answers an older epoch (ours is unknown to it, KIP-279): we use our end of
    # that epoch and ask again.
    (EpochEndOffset(ErrorCode.none, 0, 6), (0, 4), 8, TruncationState(4, True)),
    (EpochEndOffset(ErrorCode.none, 2, 6), (1, 4), 8, TruncationState(4, False)),
    # We track no epoch that old: the leader's offset.
    (EpochEndOffset(ErrorCode.none, 0, 3), None, 8, TruncationState(3, True)),
    # Undefined answers.
    (EpochEndOffset(ErrorCode.none, -1, 6), (1, 8), 8, TruncationState(6, True)),
    (EpochEndOffset(ErrorCode.none, -1, -1), (1, 8), 8, TruncationState(7, True)),
])
def test_truncation_state(reply: EpochEndOffset, ours: tuple[int, int] | None, leo: int,
                          expected: TruncationState) -> None:
    assert truncation_state(reply, 7, leo, lambda _e: ours) == expected


# -- ISR change notifications (batched) ---------------------------------------------------------


def test_isr_change_notifications_are_batched_by_linger_and_max_delay() -> None:
    from odradek.coordination import paths
    from odradek.coordination.embedded import EmbeddedZooKeeper
    from odradek.server.replication.isr import IsrChangeManager

    async def body() -> None:
        zk = EmbeddedZooKeeper()
        store = zk.client()
        await store.start()
        await paths.create_top_level_paths(store)
        clock = Clock(0)
        mgr = IsrChangeManager(1, {}, lambda: store, clock, replica_lag_time_max_ms=LAG,
                               linger_ms=100, max_delay_ms=500)

        def change(tp: tuple[str, int]) -> None:
            mgr.isr_change_set.add(tp)
            mgr.last_isr_change_ms = clock.now

        async def notifications() -> list[set[tuple[str, int]]]:
            await asyncio.sleep(0.01)  # let the write task run
            out = []
            for child in await store.get_children(paths.ISR_CHANGE_NOTIFICATION):
                data, _ = await store.get(f"{paths.ISR_CHANGE_NOTIFICATION}/{child}")
                out.append(paths.decode_isr_change_notification(data))
            return out

        change(("t", 0))
        clock.now = 50
        change(("t", 1))
        clock.now = 120
        mgr.maybe_propagate_isr_changes()
        assert await notifications() == []  # a change came 70 ms ago: linger
        clock.now = 151
        mgr.maybe_propagate_isr_changes()
        assert await notifications() == [{("t", 0), ("t", 1)}]  # one node for both
        for t in range(200, 750, 50):  # a storm of changes: no quiet 100 ms ...
            clock.now = t
            change(("u", t))
            mgr.maybe_propagate_isr_changes()
        assert len(await notifications()) == 2  # ... but at most max_delay_ms apart
        await store.close()
        zk.close()
    asyncio.run(body())


def test_a_stale_isr_write_does_not_abort_a_newer_proposal_of_the_same_isr(tmp_path: Path
                                                                          ) -> None:
    """Found by the admin-ops chaos test: the leader proposes ISR X at epoch 8, a LeaderAndIsr
    of epoch 9 arrives, the leader proposes X again at epoch 9. The stale epoch-8 write must
    give up without aborting the new proposal, which then lands in the store and in memory."""
    from odradek.coordination import paths
    from odradek.coordination.embedded import EmbeddedZooKeeper
    from odradek.server.replication.isr import IsrChangeManager

    class Replicas:
        def __init__(self) -> None:
            self.partitions: dict[tuple[str, int], Partition] = {}
            self.replica_lag_time_max_ms = LAG

        def on_high_watermark_moved(self, tp: tuple[str, int]) -> None:
            pass

        def on_leadership_lost(self, tp: tuple[str, int]) -> None:
            raise AssertionError("the leader was not deposed")

    async def body() -> None:
        zk = EmbeddedZooKeeper()
        store = zk.client()
        await store.start()
        await paths.create_top_level_paths(store)
        path = paths.partition_state_path("t", 0)
        await store.create(path, paths.encode_partition_state(
            paths.LeaderIsrAndControllerEpoch(1, 8, (1, 2), 1)), makepath=True)
        clock = Clock()
        p = make_leader(tmp_path, clock, isr=[1, 2])
        p.make_leader(8, [1, 2], [1, 2, 3])
        p.zk_version = (await store.get(path))[1].version
        rm = Replicas()
        rm.partitions[("t", 0)] = p
        p.delayed_operations = rm
        mgr = IsrChangeManager(1, rm.partitions, lambda: store, clock,
                               replica_lag_time_max_ms=rm.replica_lag_time_max_ms)
        mgr.expand_isr(p, (1, 2, 3), 3)  # proposal at epoch 8: its task has not run yet
        # The controller's LeaderAndIsr of epoch 9 (e.g. a reassignment step) overtakes it.
        stat = await store.set(path, paths.encode_partition_state(
            paths.LeaderIsrAndControllerEpoch(1, 9, (1, 2), 1)), -1)
        p.make_leader(9, [1, 2], [1, 2, 3])
        p.zk_version = stat.version
        mgr.expand_isr(p, (1, 2, 3), 3)  # the same ISR again, at epoch 9
        for _ in range(50):
            await asyncio.sleep(0.01)
            if not mgr._inflight:
                break
        data, final = await store.get(path)
        assert paths.decode_partition_state(data).isr == (1, 2, 3)
        assert p.isr == [1, 2, 3] and p.zk_version == final.version and p.pending_isr is None
        await store.close()
    asyncio.run(body())

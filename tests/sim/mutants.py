"""Planted bugs ("mutants") for the simulator's teeth (docs/simulation.md, "Teeth: planted
bugs"): each is a context manager that monkeypatches one odradek class in THIS process for as
long as it is entered, so `run_workload` under it runs the bug. Nothing here touches src/.

`MUTANTS` maps a name to its factory; `tests/sim/test_mutants.py` checks that the simulator
finds each within a few seeds, and the explorer's shrinker may reuse them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager as ContextManager
from typing import Any

from odradek.common import TopicPartition
from odradek.controller import zk_client
from odradek.server import fetch_session
from odradek.server.apis import write_txn_markers
from odradek.server.replication import fetcher, isr, partition

__all__ = ["MUTANTS"]


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = owner.__dict__[name]
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def hw_max_leo() -> ContextManager[None]:
    """The leader's HW is the largest LEO (the leader's own) instead of the smallest over the
    ISR (Kafka's maybeIncrementLeaderHW): acks=all answers before the followers have the
    records."""

    def candidate(leader_end_offset: int, remotes: Iterable[partition.ReplicaState],
                  maximal_isr: Iterable[int], now_ms: int, max_lag_ms: int) -> int:
        return max([leader_end_offset, *(r.log_end_offset for r in remotes)])

    return _patched(partition, "high_watermark_candidate", candidate)


def no_truncation_on_diverging_epoch() -> ContextManager[None]:
    """A follower whose log diverges from its leader's (KIP-101/KIP-279: an OffsetForLeaderEpoch
    answer, or KIP-320's `diverging_epoch` in a fetch response) does not truncate: it goes on
    fetching from its own log end, keeping the records the leader never had (and, while that
    end is past the leader's, waits instead of truncating to the leader's end)."""
    truncate = fetcher.ReplicaFetcher.__dict__["_truncate"]
    reset = fetcher.ReplicaFetcher.__dict__["_fetch_offset_and_truncate"]

    def keep(self: fetcher.ReplicaFetcher, tp: TopicPartition,
             st: fetcher.PartitionFetchState, decision: Any) -> None:
        part = self.partition_of(tp)
        if part is None or decision.offset >= part.log_end_offset:
            truncate(self, tp, st, decision)
            return
        self.states[tp] = fetcher.PartitionFetchState(
            part.log_end_offset, st.current_leader_epoch, fetcher.FETCHING, None, lag=st.lag)

    async def wait(self: fetcher.ReplicaFetcher, tp: TopicPartition, epoch: int) -> None:
        leader_end = await self.endpoint.fetch_latest_offset(tp, epoch)
        part = self.partition_of(tp)
        if part is not None and leader_end < part.log_end_offset:
            self._delay([tp])  # fetch again later, from our own end
            return
        await reset(self, tp, epoch)

    @contextlib.contextmanager
    def planted() -> Iterator[None]:
        with _patched(fetcher.ReplicaFetcher, "_truncate", keep), \
                _patched(fetcher.ReplicaFetcher, "_fetch_offset_and_truncate", wait):
            yield

    return planted()


def isr_shrink_not_in_store() -> ContextManager[None]:
    """A leader shrinks its ISR in memory without writing the partition state node (Kafka's
    ZkIsrManager write skipped): the controller elects from an ISR the leader no longer
    waits for."""

    def shrink(self: isr.IsrChangeManager) -> None:
        now = self.clock()
        for p in list(self.partitions.values()):
            new_isr, out = p.isr_to_shrink_to(now)
            if not out:
                continue
            p.begin_isr_update(new_isr)
            self._committed(p, new_isr, p.leader_epoch, p.zk_version, p.zk_version,
                            p.controller_epoch)

    return _patched(isr.IsrChangeManager, "maybe_shrink_isrs", shrink)


_DROPPED_MARKER = TopicPartition("txn", 0)


def marker_not_written() -> ContextManager[None]:
    """WriteTxnMarkers answers success for `txn-0` without appending its marker: that
    partition's transactions stay open (KIP-98)."""
    m = write_txn_markers

    async def write(self: m.WriteTxnMarkersApi, marker: Any) -> dict[TopicPartition, Any]:
        pid, is_commit = int(marker.producer_id), bool(marker.transaction_result)
        end = m.EndTransactionMarker(
            m.ControlRecordType.COMMIT if is_commit else m.ControlRecordType.ABORT,
            int(marker.coordinator_epoch))
        now = self.clock()
        entries: dict[TopicPartition, bytes | None] = {}
        skipped: dict[TopicPartition, Any] = {}
        for t in marker.topics:
            for index in t.partition_indexes:
                tp = TopicPartition(t.name, int(index))
                if tp == _DROPPED_MARKER:
                    skipped[tp] = m.ErrorCode.none
                    continue
                entries[tp] = m.build_end_txn_marker_batch(
                    end, pid, int(marker.producer_epoch), timestamp_ms=now)
        if not entries:
            return skipped
        outcome = self.replica_manager.append_records(-1, self.request_timeout_ms, entries,
                                                      origin=m.AppendOrigin.COORDINATOR)
        appended = outcome if isinstance(outcome, dict) else await outcome
        errors = {tp: r.error for tp, r in appended.items()}
        offsets = {tp.partition for tp, code in errors.items()
                   if tp.topic == m.OFFSETS_TOPIC and code == m.ErrorCode.none}
        if offsets:
            self.group_coordinator.handle_txn_completion(pid, offsets, is_commit)
        return {**errors, **skipped}

    return _patched(m.WriteTxnMarkersApi, "_write_marker", write)


def fetch_session_misses_hw() -> ContextManager[None]:
    """An incremental fetch session leaves out a partition whose only change is its HW (and
    the LSO that moves with it; Kafka's FetchSession.maybeUpdateResponseData includes it):
    followers and consumers stop learning the HW when nothing new is appended."""
    cached = fetch_session.CachedPartition
    original = cached.__dict__["must_respond"]

    def must_respond(self: Any, r: Any, update: bool = True) -> bool:
        hw, lso = self.high_watermark, self.last_stable_offset
        # as if neither had changed
        self.high_watermark, self.last_stable_offset = r.high_watermark, r.last_stable_offset
        respond = original(self, r, update)
        if not update:
            self.high_watermark, self.last_stable_offset = hw, lso
        return bool(respond)

    return _patched(cached, "must_respond", must_respond)


def controller_without_epoch_check() -> ContextManager[None]:
    """The controller writes without the check of /controller_epoch's version (Kafka's
    expectedControllerEpochZkVersion): a deposed controller's writes land."""

    async def fenced(self: zk_client.ControllerZkClient, ops: Any) -> list[Any]:
        return list(await self.store.multi(list(ops)))

    return _patched(zk_client.ControllerZkClient, "fenced", fenced)


MUTANTS: dict[str, Callable[[], ContextManager[None]]] = {
    "hw-max-leo": hw_max_leo,
    "no-truncation-on-diverging-epoch": no_truncation_on_diverging_epoch,
    "isr-shrink-not-in-store": isr_shrink_not_in_store,
    "marker-not-written": marker_not_written,
    "fetch-session-misses-hw": fetch_session_misses_hw,
    "controller-without-epoch-check": controller_without_epoch_check,
}

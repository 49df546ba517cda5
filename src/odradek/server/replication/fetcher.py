"""Followers (S-3.2, S-3.7): the replica fetchers (Kafka's ReplicaFetcherManager,
AbstractFetcherThread and ReplicaFetcherThread).

One `ReplicaFetcher` task per source (leader) broker and fetcher id (`num.replica.fetchers`)
pulls every partition this broker follows from that leader in one Fetch request (v12, replica id
= this broker, `replica.fetch.wait.max.ms`, `replica.fetch.min.bytes`, `replica.fetch.max.bytes`
per partition, `replica.fetch.response.max.bytes` in all, the partition's current leader epoch).
Fetched batches are appended as they are (`Log.append_as_follower`: batch headers and CRCs only,
never records); the follower's HW is min(its LEO, the leader's HW) and its log start offset
follows the leader's. Once the response is processed, the consumer fetches waiting on the
partitions whose HW moved complete (Kafka 3.4's completeDelayedFetchRequests; Kafka 2.8 left
them to their max wait): a consumer reading from this follower (KIP-392) sees new records as soon
as the follower may serve them, not at its `fetch.max.wait.ms` (docs/design.md S-3.2).

A partition added to a fetcher (LeaderAndIsr made this replica a follower of a new leader or at a
new epoch) whose log has a leader epoch goes straight to *Fetching* with that epoch as its
`last_fetched_epoch` (Kafka 2.7+'s truncation on fetch, KIP-320): the leader checks it against
its epoch history and, if our log diverges, answers `diverging_epoch` {epoch, end offset}
instead of records; we then truncate as for an OffsetForLeaderEpoch answer (Kafka's
truncateOnFetchResponse) and fetch again with our new last epoch, which repeats until the logs
agree. Without leader epochs (an empty log) it starts *Truncating* to its HW. With
`truncate_on_fetch` off (a leader older than Fetch v12) every new partition starts Truncating:
it asks the leader for the end offset of its latest leader epoch (OffsetForLeaderEpoch,
KIP-101) and truncates to min(that offset, its own end offset for that epoch) — KIP-279's rule,
repeated when the leader answers with an epoch this replica does not know. Either way it never
truncates to its HW while it has a leader epoch, so the HW data-loss and divergence scenarios
of docs/design.md S-3.7 cannot happen. `epoch_requests` and `truncations_on_fetch` count the
two paths.

Errors, as Kafka handles them: OFFSET_OUT_OF_RANGE -> ask the leader for its log end offset
(truncate to it if ours is beyond) or its log start offset (truncate fully and start there if
ours is below); FENCED_LEADER_EPOCH -> stop fetching the partition until a newer LeaderAndIsr;
NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH and the like -> back off `replica.fetch.backoff.ms`
for that partition; a connection error -> back off and reconnect.

The leader is reached through a `LeaderEndpoint` (server/replication/leader_endpoint.py):
`RemoteLeaderEndpoint` speaks the wire protocol; tests give the fetcher one that calls another
replica manager in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...protocol.records import CorruptRecordError, InvalidRecordError
from ...security.connector import Connector, open_connection
from ..quotas.replication_quota import ReplicationQuotaManager, should_follower_throttle
from .leader_endpoint import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    FetchedPartition,
    FetchPartitionRequest,
    LeaderEndpoint,
    LeaderOffsetError,
    RemoteLeaderEndpoint,
)

if TYPE_CHECKING:
    from .partition import Partition

log = logging.getLogger("odradek.replica_fetcher")

TRUNCATING, FETCHING = "Truncating", "Fetching"


# -- data ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    num_fetchers: int = 1
    fetch_wait_max_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 1048576
    fetch_response_max_bytes: int = 10485760
    fetch_backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    security: Any = None  # the inter-broker listener's ClientSecurity (None: PLAINTEXT)
    # Kafka's isTruncationOnFetchSupported (KIP-320: the leader answers Fetch v12+
    # `diverging_epoch`); off: truncate by OffsetForLeaderEpoch before fetching
    truncate_on_fetch: bool = True

    @classmethod
    def from_config(cls, config: Any) -> FetcherConfig:
        security = getattr(config, "inter_broker_client_security", None)
        return cls(
            security=security() if security is not None else None,
            num_fetchers=config["num.replica.fetchers"],
            fetch_wait_max_ms=config["replica.fetch.wait.max.ms"],
            fetch_min_bytes=config["replica.fetch.min.bytes"],
            fetch_max_bytes=config["replica.fetch.max.bytes"],
            fetch_response_max_bytes=config["replica.fetch.response.max.bytes"],
            fetch_backoff_ms=config["replica.fetch.backoff.ms"],
            socket_timeout_ms=config["replica.socket.timeout.ms"])


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """Where a new follower starts: its leader, the leader epoch, and the fetch offset (the
    LEO when the log has leader epochs, else the HW)."""

    leader_id: int
    leader_endpoint: tuple[str, int] | None
    current_leader_epoch: int
    init_offset: int


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    fetch_offset: int
    current_leader_epoch: int
    state: str = TRUNCATING
    last_fetched_epoch: int | None = None
    delayed_until: float = 0.0  # loop time before which the partition is not fetched
    lag: int | None = None

    @property
    def is_truncating(self) -> bool:
        return self.state == TRUNCATING


@dataclass(frozen=True, slots=True)
class TruncationState:
    offset: int
    completed: bool


# -- the truncation decision (pure) -------------------------------------------------------------


def truncation_state(reply: EpochEndOffset, initial_fetch_offset: int, replica_end_offset: int,
                     end_offset_for_epoch: Callable[[int], tuple[int, int] | None]
                     ) -> TruncationState:
    """Kafka's getOffsetTruncationState (KIP-101, KIP-279): where a follower truncates, given
    the leader's (epoch, end offset) for the follower's latest epoch.

    * Leader offset undefined: the initial fetch offset (the follower has nothing the leader
      can place).
    * Leader epoch undefined (an old leader): min(leader's offset, our LEO).
    * Otherwise look up our own end offset for the leader's epoch (`end_offset_for_epoch`
      returns (epoch, end offset) for the largest epoch <= the one asked): if we know that
      epoch, truncate to min(leader's end, ours, our LEO) — done; if our largest epoch below it
      is a different one, truncate to min(our end for it, our LEO) and ask again; if we know no
      epoch that old, truncate to min(leader's end, our LEO).
    """
    if reply.end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncationState(initial_fetch_offset, True)
    if reply.leader_epoch == UNDEFINED_EPOCH:
        return TruncationState(min(reply.end_offset, replica_end_offset), True)
    found = end_offset_for_epoch(reply.leader_epoch)
    if found is None:
        return TruncationState(min(reply.end_offset, replica_end_offset), True)
    follower_epoch, follower_end = found
    if follower_epoch != reply.leader_epoch:
        return TruncationState(min(follower_end, replica_end_offset), False)
    return TruncationState(min(follower_end, reply.end_offset, replica_end_offset), True)


def initial_fetch_offset(partition: Partition) -> int:
    """Kafka's initialFetchOffset: the LEO when the log has leader epochs (truncation then goes
    by OffsetForLeaderEpoch), else the HW."""
    if partition.log.latest_epoch is not None:
        return partition.log_end_offset
    return partition.high_watermark


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's getFetcherId (stable across processes: crc32 instead of Java's hashCode)."""
    return (31 * zlib.crc32(tp[0].encode()) + tp[1]) % max(1, num_fetchers)


# -- one fetcher (per leader broker and fetcher id) ---------------------------------------------


class ReplicaFetcher:
    """Kafka's AbstractFetcherThread + ReplicaFetcherThread as one asyncio task: `do_work` is
    one round (truncate what must be truncated, then one Fetch), `run` loops over it."""

    def __init__(self, name: str, broker_id: int, leader_id: int, endpoint: LeaderEndpoint,
                 partition_of: Callable[[TopicPartition], Partition | None],
                 config: FetcherConfig, quota: ReplicationQuotaManager | None = None) -> None:
        self.name = name
        self.quota = quota  # KIP-73 follower quota (None: never throttled)
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.partition_of = partition_of
        self.config = config
        self.states: dict[TopicPartition, PartitionFetchState] = {}
        self.failed: set[TopicPartition] = set()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running = False
        self._last_requests: dict[TopicPartition, FetchPartitionRequest] = {}
        self.epoch_requests = 0  # OffsetForLeaderEpoch requests sent
        self.truncations_on_fetch = 0  # diverging epochs answered by the leader's Fetch
        # Kafka 3.4's partitionsWithNewHighWatermark: of the response being processed
        self._partitions_with_new_high_watermark: list[Partition] = []

    def __repr__(self) -> str:
        return f"ReplicaFetcher({self.name}, partitions={len(self.states)})"

    # -- partitions ----------------------------------------------------------------------------

    def add_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Kafka's addPartitions: a partition already fetched at the same leader epoch keeps
        its state; any other starts at its initial offset, Fetching with its latest epoch as
        the last fetched one when truncating on fetch (the leader tells if we diverge), else
        Truncating."""
        for tp, init in initial.items():
            self.failed.discard(tp)
            current = self.states.get(tp)
            if current is not None and current.current_leader_epoch == init.current_leader_epoch:
                continue
            latest = None
            if self.config.truncate_on_fetch:
                partition = self.partition_of(tp)
                latest = partition.log.latest_epoch if partition is not None else None
            self.states[tp] = PartitionFetchState(
                init.init_offset, init.current_leader_epoch,
                TRUNCATING if latest is None else FETCHING, latest)
        self._wakeup.set()

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition,
                                                                       PartitionFetchState]:
        removed = {}
        for tp in tps:
            st = self.states.pop(tp, None)
            if st is not None:
                removed[tp] = st
        self._wakeup.set()
        return removed

    def _mark_failed(self, tp: TopicPartition, why: str) -> None:
        self.failed.add(tp)
        self.states.pop(tp, None)
        log.warning("[%s] Partition %s-%d marked as failed: %s", self.name, tp[0], tp[1], why)

    def _delay(self, tps: Iterable[TopicPartition], delay_ms: int | None = None) -> None:
        until = self._now() + (self.config.fetch_backoff_ms if delay_ms is None
                               else delay_ms) / 1000
        for tp in tps:
            st = self.states.get(tp)
            if st is not None and st.delayed_until <= self._now():
                self.states[tp] = replace(st, delayed_until=until)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _ready(self, st: PartitionFetchState) -> bool:
        return st.delayed_until <= self._now()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._running = True
            self._task = asyncio.create_task(self.run(), name=self.name)

    def stop(self) -> None:
        self._running = False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.endpoint.close()

    async def run(self) -> None:
        log.info("[%s] Starting", self.name)
        try:
            while self._running:
                try:
                    await self.do_work()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("[%s] Error in fetcher round", self.name)
                    await self._sleep(self.config.fetch_backoff_ms)
        finally:
            log.info("[%s] Stopped", self.name)

    async def _sleep(self, ms: float) -> None:
        """Back off, woken early when partitions were added or removed since this round
        began (the next round then looks at them at once)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), max(ms, 0) / 1000)

    async def do_work(self, wait_if_idle: bool = True) -> None:
        """One round: truncate the partitions that must, then one Fetch."""
        self._wakeup.clear()
        await self.maybe_truncate()
        await self.maybe_fetch(wait_if_idle)

    # -- truncation ----------------------------------------------------------------------------

    async def maybe_truncate(self) -> None:
        with_epochs: dict[TopicPartition, tuple[int, int]] = {}
        without_epochs: list[TopicPartition] = []
        for tp, st in self.states.items():
            if not st.is_truncating or not self._ready(st):
                continue
            partition = self.partition_of(tp)
            latest = partition.log.latest_epoch if partition is not None else None
            if latest is not None:
                with_epochs[tp] = (st.current_leader_epoch, latest)
            else:
                without_epochs.append(tp)
        if without_epochs:
            self._truncate_to_high_watermark(without_epochs)
        if with_epochs:
            await self._truncate_to_epoch_end_offsets(with_epochs)

    def _truncate_to_high_watermark(self, tps: Iterable[TopicPartition]) -> None:
        """No leader epoch to ask about (an empty log): the initial offset is the HW."""
        for tp in tps:
            st = self.states.get(tp)
            if st is None:
                continue
            log.info("[%s] Truncating partition %s-%d to local high watermark %d", self.name,
                     tp[0], tp[1], st.fetch_offset)
            self._truncate(tp, st, TruncationState(st.fetch_offset, True))

    async def _truncate_to_epoch_end_offsets(self, asked: dict[TopicPartition, tuple[int, int]]
                                             ) -> None:
        self.epoch_requests += 1
        try:
            replies = await self.endpoint.fetch_epoch_end_offsets(asked)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("[%s] Error when sending OffsetsForLeaderEpoch request to broker %d: "
                        "%s", self.name, self.leader_id, exc or type(exc).__name__)
            self._delay(asked)
            await self._sleep(self.config.fetch_backoff_ms)
            return
        errors: list[TopicPartition] = []
        for tp, reply in replies.items():
            st = self.states.get(tp)
            request = asked.get(tp)
            # Leadership may have moved while we waited: only the same epoch's answer counts.
            if st is None or request is None or not st.is_truncating \
                    or st.current_leader_epoch != request[0]:
                continue
            if reply.error == ErrorCode.none:
                partition = self.partition_of(tp)
                if partition is None:
                    self._mark_failed(tp, "no local partition")
                    continue
                decision = truncation_state(reply, st.fetch_offset, partition.log_end_offset,
                                            partition.log.end_offset_for_epoch)
                if not decision.completed:
                    log.info("[%s] Based on the replica's leader epoch, leader replied with "
                             "epoch %d unknown to the replica for %s-%d. Will truncate to %d "
                             "and send another leader epoch request to the leader.", self.name,
                             reply.leader_epoch, tp[0], tp[1], decision.offset)
                self._truncate(tp, st, decision)
            elif reply.error == ErrorCode.fenced_leader_epoch:
                if self._on_partition_fenced(tp, request[0]):
                    errors.append(tp)
            else:
                log.info("[%s] Retrying leader epoch request for partition %s-%d as the leader "
                         "reported an error: %s", self.name, tp[0], tp[1], reply.error.name)
                errors.append(tp)
        self._delay(errors)

    def _truncate(self, tp: TopicPartition, st: PartitionFetchState,
                  decision: TruncationState) -> None:
        partition = self.partition_of(tp)
        if partition is None:
            self._mark_failed(tp, "no local partition")
            return
        try:
            if decision.offset < partition.log_end_offset:
                log.info("[%s] Truncating partition %s-%d to offset %d (log end offset %d)",
                         self.name, tp[0], tp[1], decision.offset, partition.log_end_offset)
            partition.truncate_to(decision.offset)
        except Exception as exc:
            log.exception("[%s] Error truncating %s-%d at offset %d", self.name, tp[0], tp[1],
                          decision.offset)
            self._mark_failed(tp, str(exc))
            return
        # Truncating on fetch, an incomplete truncation goes on through the next fetch's
        # last fetched epoch (Kafka's updateFetchOffsetAndMaybeMarkTruncationComplete).
        done = decision.completed or self.config.truncate_on_fetch
        self.states[tp] = PartitionFetchState(
            min(decision.offset, partition.log_end_offset), st.current_leader_epoch,
            FETCHING if done else TRUNCATING, partition.log.latest_epoch, lag=st.lag)

    def _truncate_on_fetch_response(self, diverging: Mapping[TopicPartition, EpochEndOffset]
                                    ) -> None:
        """Kafka's truncateOnFetchResponse: the leader's `diverging_epoch` is its (epoch, end
        offset) for our last fetched epoch; truncate as for an OffsetForLeaderEpoch answer."""
        for tp, reply in diverging.items():
            st, partition = self.states.get(tp), self.partition_of(tp)
            if st is None:
                continue
            if partition is None:
                self._mark_failed(tp, "no local partition")
                continue
            self.truncations_on_fetch += 1
            decision = truncation_state(reply, st.fetch_offset, partition.log_end_offset,
                                        partition.log.end_offset_for_epoch)
            log.info("[%s] Leader answered diverging epoch %d ending at %d for %s-%d (last "
                     "fetched epoch %s, fetch offset %d): truncating to %d", self.name,
                     reply.leader_epoch, reply.end_offset, tp[0], tp[1], st.last_fetched_epoch,
                     st.fetch_offset, decision.offset)
            self._truncate(tp, st, decision)

    def _on_partition_fenced(self, tp: TopicPartition, request_epoch: int) -> bool:
        """Kafka's onPartitionFenced: if our epoch is the one fenced, wait for a new
        LeaderAndIsr (False); if it has moved on meanwhile, retry later (True)."""
        st = self.states.get(tp)
        if st is None:
            return False
        if st.current_leader_epoch == request_epoch:
            log.info("[%s] Partition %s-%d has an older epoch (%d) than the current leader. "
                     "Will await the new LeaderAndIsr state before resuming fetching.",
                     self.name, tp[0], tp[1], st.current_leader_epoch)
            self._mark_failed(tp, "fenced leader epoch")
            return False
        return True

    # -- fetching ------------------------------------------------------------------------------

    def _build_fetch(self) -> dict[TopicPartition, FetchPartitionRequest]:
        requests: dict[TopicPartition, FetchPartitionRequest] = {}
        now = self._now()
        quota = self.quota
        max_bytes = self.config.fetch_max_bytes
        # An idle partition's request is the one of the last round (same object: the fetch
        # session's comparison is then an identity check); 10,000 partitions each round
        # otherwise built as many new ones.
        last = self._last_requests
        for tp, st in list(self.states.items()):
            if st.state == TRUNCATING or st.delayed_until > now:
                continue
            if quota is not None and should_follower_throttle(
                    quota, tp[0], tp[1], st.lag is not None and st.lag <= 0):
                continue  # KIP-73: over the follower quota, fetched in a later round
            partition = self.partition_of(tp)
            if partition is None:
                self._mark_failed(tp, "no local partition")
                continue
            epoch = st.last_fetched_epoch
            epoch = UNDEFINED_EPOCH if epoch is None else epoch
            start = partition.log_start_offset
            prev = last.get(tp)
            if prev is None or prev.fetch_offset != st.fetch_offset \
                    or prev.current_leader_epoch != st.current_leader_epoch \
                    or prev.last_fetched_epoch != epoch or prev.log_start_offset != start \
                    or prev.max_bytes != max_bytes:
                prev = FetchPartitionRequest(st.fetch_offset, st.current_leader_epoch, epoch,
                                             start, max_bytes)
            requests[tp] = prev
        self._last_requests = requests
        return requests

    async def _idle(self) -> None:
        now = self._now()
        waits = [st.delayed_until - now for st in self.states.values()
                 if st.delayed_until > now]
        wait_s = min(waits) if waits else self.config.fetch_backoff_ms / 1000
        await self._sleep(max(wait_s * 1000, 1))

    async def maybe_fetch(self, wait_if_idle: bool = True) -> None:
        requests = self._build_fetch()
        if not requests:
            if wait_if_idle:
                await self._idle()
            return
        try:
            responses = await self.endpoint.fetch(requests)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._running or not wait_if_idle:
                log.warning("[%s] Error in response for fetch request to broker %d: %s",
                            self.name, self.leader_id, exc or type(exc).__name__)
            self._delay(requests)
            if wait_if_idle:
                await self._sleep(self.config.fetch_backoff_ms)
            return
        errors: list[TopicPartition] = []
        out_of_range: list[tuple[TopicPartition, int]] = []
        diverging: dict[TopicPartition, EpochEndOffset] = {}
        for tp, data in responses.items():
            st = self.states.get(tp)
            request = requests.get(tp)
            # A partition removed, re-added or truncated meanwhile: drop this answer.
            if st is None or request is None or st.is_truncating \
                    or st.fetch_offset != request.fetch_offset \
                    or st.current_leader_epoch != request.current_leader_epoch:
                continue
            err = data.error
            if err == ErrorCode.none and data.diverging_epoch is not None:
                diverging[tp] = EpochEndOffset(ErrorCode.none, *data.diverging_epoch)
            elif err == ErrorCode.none:
                if not self._process_partition_data(tp, st, data):
                    errors.append(tp)
            elif err == ErrorCode.offset_out_of_range:
                out_of_range.append((tp, request.current_leader_epoch))
            elif err == ErrorCode.fenced_leader_epoch:
                if self._on_partition_fenced(tp, request.current_leader_epoch):
                    errors.append(tp)
            else:
                if err == ErrorCode.unknown_topic_or_partition:
                    log.warning("[%s] Received UNKNOWN_TOPIC_OR_PARTITION from the leader for "
                                "partition %s-%d", self.name, tp[0], tp[1])
                else:
                    log.debug("[%s] Error %s for partition %s-%d at offset %d", self.name,
                              err.name, tp[0], tp[1], st.fetch_offset)
                errors.append(tp)
        self._complete_delayed_fetch_requests()
        if diverging:
            self._truncate_on_fetch_response(diverging)
        for tp, epoch in out_of_range:
            if await self._handle_out_of_range(tp, epoch):
                errors.append(tp)
        self._delay(errors)

    def _process_partition_data(self, tp: TopicPartition, st: PartitionFetchState,
                                data: FetchedPartition) -> bool:
        """Kafka's processPartitionData: append, then follower HW and log start offset.
        Returns False to back the partition off."""
        partition = self.partition_of(tp)
        if partition is None:
            self._mark_failed(tp, "no local partition")
            return True
        try:
            if st.fetch_offset != partition.log_end_offset:
                raise RuntimeError(f"offset mismatch for partition {tp[0]}-{tp[1]}: fetched "
                                   f"offset = {st.fetch_offset}, log end offset = "
                                   f"{partition.log_end_offset}")
            info = partition.append_records_to_follower(data.records) if data.records else None
            if partition.update_follower_high_watermark(data.high_watermark,
                                                        data.log_start_offset):
                self._partitions_with_new_high_watermark.append(partition)
        except (CorruptRecordError, InvalidRecordError) as exc:
            log.error("[%s] Found invalid messages during fetch for partition %s-%d offset %d: "
                      "%s", self.name, tp[0], tp[1], st.fetch_offset, exc)
            return False
        except Exception as exc:
            log.exception("[%s] Unexpected error while processing data for partition %s-%d at "
                          "offset %d", self.name, tp[0], tp[1], st.fetch_offset)
            self._mark_failed(tp, str(exc))
            return True
        next_offset = info.last_offset + 1 if info is not None and info.valid_bytes > 0 \
            else st.fetch_offset
        if data.records and self.quota is not None and self.quota.is_throttled(*tp):
            self.quota.record(len(data.records))
        self.states[tp] = replace(st, fetch_offset=next_offset,
                                  lag=max(0, data.high_watermark - next_offset),
                                  last_fetched_epoch=partition.log.latest_epoch)
        return True

    def _complete_delayed_fetch_requests(self) -> None:
        """Kafka 3.4's ReplicaFetcherThread.completeDelayedFetchRequests, once per fetch
        response: the consumer fetches waiting on the partitions whose HW it moved re-check
        (KIP-392)."""
        moved = self._partitions_with_new_high_watermark
        if not moved:
            return
        self._partitions_with_new_high_watermark = []
        for partition in moved:
            partition.delayed_operations.on_follower_high_watermark_moved(
                (partition.topic, partition.index))

    async def _handle_out_of_range(self, tp: TopicPartition, request_epoch: int) -> bool:
        """Kafka's handleOutOfRangeError; True to back the partition off."""
        try:
            await self._fetch_offset_and_truncate(tp, request_epoch)
            return False
        except LeaderOffsetError as exc:
            if exc.error == ErrorCode.fenced_leader_epoch:
                return self._on_partition_fenced(tp, request_epoch)
            log.info("[%s] Could not fetch offset for %s-%d due to error: %s", self.name, tp[0],
                     tp[1], exc.error.name)
            return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("[%s] Error getting offset for partition %s-%d: %s", self.name, tp[0],
                      tp[1], exc)
            return True

    async def _fetch_offset_and_truncate(self, tp: TopicPartition, epoch: int) -> None:
        """Kafka's fetchOffsetAndTruncate: our fetch offset is outside the leader's log."""
        leader_end = await self.endpoint.fetch_latest_offset(tp, epoch)
        st, partition = self.states.get(tp), self.partition_of(tp)
        if st is None or partition is None or st.current_leader_epoch != epoch:
            return
        replica_end = partition.log_end_offset
        if leader_end < replica_end:
            log.warning("[%s] Reset fetch offset for partition %s-%d from %d to current leader's "
                        "latest offset %d", self.name, tp[0], tp[1], replica_end, leader_end)
            partition.truncate_to(leader_end)  # a batch holding leader_end goes whole
            self.states[tp] = PartitionFetchState(partition.log_end_offset, epoch, FETCHING,
                                                  partition.log.latest_epoch, lag=0)
            return
        leader_start = await self.endpoint.fetch_earliest_offset(tp, epoch)
        st, partition = self.states.get(tp), self.partition_of(tp)
        if st is None or partition is None or st.current_leader_epoch != epoch:
            return
        replica_end = partition.log_end_offset
        offset = max(leader_start, replica_end)
        log.warning("[%s] Reset fetch offset for partition %s-%d from %d to current leader's "
                    "start offset %d", self.name, tp[0], tp[1], replica_end, leader_start)
        if leader_start > replica_end:
            partition.truncate_fully_and_start_at(leader_start)
        self.states[tp] = PartitionFetchState(offset, epoch, FETCHING,
                                              partition.log.latest_epoch,
                                              lag=max(0, leader_end - offset))


# -- the manager --------------------------------------------------------------------------------


class ReplicaFetcherManager:
    """Kafka's ReplicaFetcherManager: fetchers keyed by (leader broker id, fetcher id); a
    partition lives in exactly one; fetchers left without partitions are stopped."""

    def __init__(self, broker_id: int,
                 partition_of: Callable[[TopicPartition], Partition | None],
                 config: FetcherConfig,
                 broker_endpoint: Callable[[int], tuple[str, int] | None] = lambda _b: None,
                 endpoint_factory: Callable[[int, Callable[[], tuple[str, int] | None]],
                                            LeaderEndpoint] | None = None,
                 quota: ReplicationQuotaManager | None = None,
                 connector: Connector = open_connection) -> None:
        self.broker_id = broker_id
        self.quota = quota
        self.connector = connector  # how the remote endpoints dial their leaders
        self.partition_of = partition_of
        self.config = config
        self.broker_endpoint = broker_endpoint
        self.endpoint_factory = endpoint_factory or self._remote_endpoint
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._endpoints: dict[int, tuple[str, int]] = {}  # from LeaderAndIsr live leaders
        self._closed = False

    def _remote_endpoint(self, leader_id: int, address: Callable[[], tuple[str, int] | None]
                         ) -> LeaderEndpoint:
        return RemoteLeaderEndpoint(self.broker_id, leader_id, address, self.config,
                                    connector=self.connector)

    def _address_of(self, leader_id: int) -> tuple[str, int] | None:
        return self._endpoints.get(leader_id) or self.broker_endpoint(leader_id)

    def add_fetcher_for_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]
                                   ) -> None:
        if self._closed:
            return
        grouped: dict[tuple[int, int], dict[TopicPartition, InitialFetchState]] = {}
        for tp, init in initial.items():
            if init.leader_endpoint is not None:
                self._endpoints[init.leader_id] = init.leader_endpoint
            key = (init.leader_id, fetcher_id(tp, self.config.num_fetchers))
            grouped.setdefault(key, {})[tp] = init
        for key, states in grouped.items():
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                leader_id, fid = key
                fetcher = ReplicaFetcher(
                    f"ReplicaFetcherThread-{fid}-{leader_id} broker={self.broker_id}",
                    self.broker_id, leader_id,
                    self.endpoint_factory(leader_id, lambda b=leader_id: self._address_of(b)),
                    self.partition_of, self.config, self.quota)
                self.fetchers[key] = fetcher
                fetcher.start()
            fetcher.add_partitions(states)
            log.info("[ReplicaFetcherManager on broker %d] Added fetcher to broker %d for "
                     "partitions %s", self.broker_id, key[0],
                     {f"{t}-{p}": (s.init_offset, s.current_leader_epoch)
                      for (t, p), s in states.items()})

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> None:
        tps = list(tps)
        removed: list[TopicPartition] = []
        for fetcher in self.fetchers.values():
            removed += fetcher.remove_partitions(tps)
            for tp in tps:
                fetcher.failed.discard(tp)
        if removed:
            log.info("[ReplicaFetcherManager on broker %d] Removed fetcher for partitions %s",
                     self.broker_id, ", ".join(f"{t}-{p}" for t, p in removed))
        self.shutdown_idle_fetchers()

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        for fetcher in self.fetchers.values():
            st = fetcher.states.get(tp)
            if st is not None:
                return st
        return None

    def is_fetching(self, tp: TopicPartition) -> bool:
        return self.fetch_state(tp) is not None

    def max_lag(self) -> int:
        """Kafka's ReplicaFetcherManager MaxLag: the largest lag (messages behind the
        leader's high watermark) of a partition fetched here; 0 without any."""
        return max((st.lag or 0 for f in self.fetchers.values() for st in f.states.values()),
                   default=0)

    def shutdown_idle_fetchers(self) -> None:
        for key, fetcher in list(self.fetchers.items()):
            if not fetcher.states:
                fetcher.stop()
                del self.fetchers[key]

    def shutdown(self) -> None:
        self._closed = True
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()


class ReplicaFetchers(Protocol):
    """The replica fetcher manager as the replica manager drives it from LeaderAndIsr,
    StopReplica and log dir failures (Kafka's addFetcherForPartitions,
    removeFetcherForPartitions): `ReplicaFetcherManager`, or a `FetcherChanges` collecting
    one LeaderAndIsr request's changes for it."""

    def add_fetcher_for_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]
                                   ) -> None: ...

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> None: ...

    def is_fetching(self, tp: TopicPartition) -> bool: ...


class FetcherManager(ReplicaFetchers, Protocol):
    """`ReplicaFetcherManager` as the replica manager holds it: driven through
    `ReplicaFetchers`, and stopped with it."""

    def shutdown(self) -> None: ...


class FetcherChanges:
    """The replica fetcher changes of one LeaderAndIsr request, told to the fetcher manager
    at its end (`apply`), as Kafka's makeFollowers tells it the request's whole map: the
    partitions to stop fetching, then those to (re)start, each in one call (once per partition
    it was ~10,000 calls, log lines and fetcher scans per failover). Meanwhile `is_fetching`
    answers as the manager will. `pending`: a partition's last change (its initial fetch
    state, or None: removed)."""

    __slots__ = ("manager", "pending", "removed")

    def __init__(self, manager: ReplicaFetchers) -> None:
        self.manager = manager
        self.removed: list[TopicPartition] = []
        self.pending: dict[TopicPartition, InitialFetchState | None] = {}

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.removed.append(tp)
            self.pending[tp] = None

    def add_fetcher_for_partitions(self, initial: Mapping[TopicPartition, InitialFetchState]
                                   ) -> None:
        self.pending.update(initial)

    def is_fetching(self, tp: TopicPartition) -> bool:
        if tp in self.pending:
            return self.pending[tp] is not None
        return self.manager.is_fetching(tp)

    def apply(self) -> None:
        if self.removed:
            self.manager.remove_fetcher_for_partitions(self.removed)
        added = {tp: init for tp, init in self.pending.items() if init is not None}
        if added:
            self.manager.add_fetcher_for_partitions(added)

"""The replica manager: this broker's partitions, appends, reads, and their purgatories.

Produce: validate each partition's record set by batch headers and CRC (never records), append on
the leader, and for acks=all wait in the produce purgatory until the HW passes the last offset
(S-3.5, S-3.6). Fetch: read file regions below the HW (consumers) or the LEO (followers); if
fewer than min_bytes are ready, wait in the fetch purgatory until an append or HW move completes
the DelayedFetch, or max_wait passes.

Replication (S-3.2 - S-3.4, S-3.7): a follower's fetch records its LEO on the leader, which may
move the HW (completing waiting produces and fetches at once) and expand the ISR; LeaderAndIsr
starts (`fetcher.ReplicaFetcherManager`) or stops the replica fetchers; `isr.IsrChangeManager`
shrinks ISRs of lagging followers and writes every ISR change to the partition state node.
Partitions start with the HW of `replication-offset-checkpoint`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..common import TopicPartition
from ..metrics.stats import IsrStats, TopicStats
from ..protocol import interbroker as ib
from ..protocol import records as rb
from ..runtime.purgatory import DelayedOperation, DelayedOperationPurgatory
from ..runtime.timer import AsyncTimerDriver, Timer
from ..state_change import StateChangeLogger, leadership_text
from ..storage.append_origin import AppendOrigin
from ..storage.log import Log
from ..storage.log_config import LogConfig
from ..storage.log_manager import LogManager
from .fetcher import (
    FetcherConfig,
    InitialFetchState,
    ReplicaFetcherManager,
    initial_fetch_offset,
)
from .isr import IsrChangeManager
from .leader_endpoint import EpochEndOffset
from .metadata_cache import BrokerInfo, MetadataCache, PartitionInfo
from .partition import (
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    Partition,
    UnknownLeaderEpochError,
)
from .replication_quota import ReplicationQuotaManager, should_leader_throttle

if TYPE_CHECKING:
    from ..coordination.store import CoordinationStore

log = logging.getLogger("odradek.replica_manager")

# Kafka's FetchRequest.DEBUGGING_CONSUMER_ID: a consumer fetch (below the HW) that followers
# answer too (replica-verification, S-6.4).
DEBUGGING_CONSUMER_ID = -2

# UpdateMetadata's leader of a partition whose topic is being deleted (Kafka's
# LeaderAndIsr.LeaderDuringDelete).
LEADER_DURING_DELETE = -2


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None


@dataclass(slots=True)
class FetchRequestPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1


READ_UNCOMMITTED = 0  # Fetch / ListOffsets isolation levels (KIP-98)
READ_COMMITTED = 1


@dataclass(slots=True)
class FetchResult:
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start_offset: int = -1
    regions: list[Any] = field(default_factory=list)
    size: int = 0
    leader_end_offset: int = -1  # the leader's LEO when the data was read
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of the aborted transactions in the data;
    # None (null in the response) for read_uncommitted and followers, as Kafka
    aborted_transactions: list[tuple[int, int]] | None = None


def _error_for(exc: Exception) -> ErrorCode:
    from ..storage import producer_state
    from ..storage.errors import OffsetOutOfRangeError

    mapping: list[tuple[type[BaseException], ErrorCode]] = [
        (NotLeaderError, ErrorCode.not_leader_or_follower),
        (NotEnoughReplicasError, ErrorCode.not_enough_replicas),
        (FencedLeaderEpochError, ErrorCode.fenced_leader_epoch),
        (UnknownLeaderEpochError, ErrorCode.unknown_leader_epoch),
        (rb.CorruptRecordError, ErrorCode.corrupt_message),
        (rb.InvalidRecordError, ErrorCode.invalid_record),
        (OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
        (producer_state.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
        (producer_state.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
        (producer_state.InvalidTxnStateError, ErrorCode.invalid_txn_state),
        (producer_state.TransactionCoordinatorFencedError,
         ErrorCode.transaction_coordinator_fenced),
    ]
    for cls, code in mapping:
        if isinstance(exc, cls):
            return code
    code = getattr(exc, "error_code", None)  # storage errors carry Kafka's code
    if isinstance(code, int) and code > 0:
        return ErrorCode(code)
    return ErrorCode.unknown_server_error


class DelayedProduce(DelayedOperation):
    """acks=all: completes when every partition's HW reached its last appended offset + 1 (with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR that has it is smaller than
    min.insync.replicas), or the leader lost leadership (Kafka's DelayedProduce and
    checkEnoughReplicasReachOffset). A deposed leader never acknowledges: it answers
    NOT_LEADER_OR_FOLLOWER or the request times out."""

    def __init__(self, timeout_ms: int, manager: ReplicaManager,
                 pending: dict[TopicPartition, ProduceResult],
                 future: asyncio.Future[dict[TopicPartition, ProduceResult]]) -> None:
        super().__init__(timeout_ms)
        self.manager = manager
        self.pending = pending
        self.future = future
        self.waiting = {tp for tp, r in pending.items() if r.error == ErrorCode.none}

    def try_complete(self) -> bool:
        for tp in list(self.waiting):
            partition = self.manager.partitions.get(tp)
            result = self.pending[tp]
            if partition is None or not partition.is_leader:
                result.error = ErrorCode.not_leader_or_follower
                self.waiting.discard(tp)
            elif partition.high_watermark > result.last_offset:
                if len(partition.maximal_isr) < self.manager.min_insync_replicas(tp[0]):
                    result.error = ErrorCode.not_enough_replicas_after_append
                self.waiting.discard(tp)
        return not self.waiting and self.force_complete()

    def on_complete(self) -> None:
        if self.timed_out:
            for tp in self.waiting:
                self.pending[tp].error = ErrorCode.request_timed_out
        if not self.future.done():
            self.future.set_result(self.pending)


class DelayedFetch(DelayedOperation):
    """Waits until min_bytes are readable across the fetched partitions, or max_wait passes."""

    def __init__(self, max_wait_ms: int, manager: ReplicaManager, replica_id: int,
                 min_bytes: int, max_bytes: int,
                 requests: dict[TopicPartition, FetchRequestPartition],
                 future: asyncio.Future[dict[TopicPartition, FetchResult]],
                 isolation_level: int = READ_UNCOMMITTED) -> None:
        super().__init__(max_wait_ms)
        self.manager = manager
        self.isolation_level = isolation_level
        self.replica_id = replica_id
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.requests = requests
        self.future = future

    def try_complete(self) -> bool:
        available = 0
        for tp, req in self.requests.items():
            partition = self.manager.partitions.get(tp)
            if partition is None or not partition.is_leader:
                return self.force_complete()  # an error to report now
            end = fetch_limit(partition, self.replica_id, self.isolation_level)
            if req.fetch_offset > end or req.fetch_offset < partition.log_start_offset:
                return self.force_complete()
            if req.fetch_offset < end and not self.manager.should_leader_throttle(
                    partition, self.replica_id):  # KIP-73: throttled bytes do not count
                available += self.manager.bytes_between(partition, req.fetch_offset, end,
                                                        req.max_bytes)
                if available >= self.min_bytes:
                    return self.force_complete()
        return False

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.manager.read_from_local_log(
                self.replica_id, self.max_bytes, self.requests, self.isolation_level))


def fetch_limit(partition: Partition, replica_id: int, isolation_level: int) -> int:
    """Where a fetch stops (Kafka's FetchIsolation): the LEO for followers, the last stable
    offset for read_committed consumers, the high watermark for the others."""
    if replica_id >= 0:
        return partition.log_end_offset
    if isolation_level == READ_COMMITTED:
        return partition.last_stable_offset
    return partition.high_watermark


#: Errors Kafka's appendToLocalLog and readFromLocalLog answer without marking the failed
#: produce / fetch meters (a client's stale metadata, a retry, a deleted topic).
EXPECTED_ERRORS = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.offset_out_of_range, ErrorCode.message_too_large,
    ErrorCode.record_list_too_large, ErrorCode.corrupt_message,
    ErrorCode.kafka_storage_error})


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager,
                 topic_config: Callable[[str], LogConfig],
                 clock: Callable[[], int] = _now_ms,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS, *,
                 metadata_cache: MetadataCache | None = None,
                 topic_stats: TopicStats | None = None,
                 isr_stats: IsrStats | None = None) -> None:
        self.broker_id = broker_id
        # BrokerTopicMetrics (messages and bytes in per topic) and the ISR meters (metrics/)
        self.topic_stats = topic_stats if topic_stats is not None else TopicStats()
        self.isr_stats = isr_stats if isr_stats is not None else IsrStats()
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.metadata_cache = metadata_cache if metadata_cache is not None else MetadataCache()
        # The newest controller epoch seen in LeaderAndIsr/StopReplica/UpdateMetadata (S-5.3).
        self.controller_epoch = 0
        self.state_change = StateChangeLogger(broker_id)
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self.produce_purgatory: DelayedOperationPurgatory[DelayedProduce] = \
            DelayedOperationPurgatory("Produce", Timer())
        self.fetch_purgatory: DelayedOperationPurgatory[DelayedFetch] = \
            DelayedOperationPurgatory("Fetch", Timer())
        self._drivers = [AsyncTimerDriver(self.produce_purgatory.timer),
                         AsyncTimerDriver(self.fetch_purgatory.timer)]
        self.fetcher_manager: ReplicaFetcherManager | None = None
        self.isr_manager: IsrChangeManager | None = None
        self._checkpointed_hw: dict[TopicPartition, int] = {}
        # topic -> f(partition, is_leader, leader_epoch): told when this broker becomes leader or
        # follower of one of the topic's partitions, and (False, -1) when it stops hosting one.
        # The group coordinator listens for __consumer_offsets (load / unload its groups).
        self.role_listeners: dict[str, Callable[[int, bool, int], None]] = {}
        # KIP-73 replication quotas: bytes this leader sends to followers, and bytes this
        # follower fetches, for throttled partitions (rates set by dynamic broker configs).
        self.leader_quota = ReplicationQuotaManager("LeaderReplication")
        self.follower_quota = ReplicationQuotaManager("FollowerReplication")

    def start(self) -> None:
        """Start the purgatories' timers and read replication-offset-checkpoint: partitions
        created from now on start with the HW they had (S-3.3, S-2.5)."""
        self._checkpointed_hw = self.log_manager.read_high_watermarks()
        for d in self._drivers:
            d.start()

    def start_replication(self, config: Any,
                          store: Callable[[], CoordinationStore | None],
                          broker_endpoint: Callable[[int], tuple[str, int] | None]
                          = lambda _b: None, connector: Any = None) -> None:
        """Start the replica fetchers (driven by LeaderAndIsr) and the ISR tasks: the shrink
        check every replica.lag.time.max.ms / 2 and the ISR change notifications."""
        self.replica_lag_time_max_ms = config["replica.lag.time.max.ms"]
        for p in self.partitions.values():
            p.replica_lag_time_max_ms = self.replica_lag_time_max_ms
        for quota in (self.leader_quota, self.follower_quota):
            quota.configure_window(config["replication.quota.window.num"],
                                   config["replication.quota.window.size.seconds"])
        self.fetcher_manager = ReplicaFetcherManager(
            self.broker_id, self.partitions.get, FetcherConfig.from_config(config),
            broker_endpoint, quota=self.follower_quota,
            **({"connector": connector} if connector is not None else {}))
        self.isr_manager = IsrChangeManager(self.broker_id, self, store, self.clock,
                                            isr_stats=self.isr_stats)
        self.isr_manager.start()

    def shutdown(self) -> None:
        if self.fetcher_manager is not None:
            self.fetcher_manager.shutdown()
        if self.isr_manager is not None:
            self.isr_manager.shutdown()
        for d in self._drivers:
            d.stop()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()

    def should_leader_throttle(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: a follower's fetch of a throttled partition gets no
        data while the leader quota is exceeded, unless the follower is in the ISR."""
        return replica_id >= 0 and should_leader_throttle(
            self.leader_quota, partition.topic, partition.index, replica_id in partition.isr)

    def update_throttled_replicas(self, topic: str, leader: str | frozenset[int],
                                  follower: str | frozenset[int]) -> None:
        """The topic's throttled partitions on this broker (from its
        leader/follower.replication.throttled.replicas configs)."""
        self.leader_quota.mark_throttled(topic, leader)
        self.follower_quota.mark_throttled(topic, follower)

    def min_insync_replicas(self, topic: str) -> int:
        return self.topic_config(topic).min_insync_replicas

    # -- partition lifecycle (LeaderAndIsr / StopReplica) -------------------------------------
    def get_or_create_partition(self, topic: str, index: int) -> Partition:
        tp = (topic, index)
        p = self.partitions.get(tp)
        if p is None:
            log_: Log = self.log_manager.get_or_create_log(topic, index)
            p = Partition(topic, index, log_, self.broker_id,
                          replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                          clock=self.clock)
            p.initialize_high_watermark(self._checkpointed_hw.pop(tp, 0))
            self.partitions[tp] = p
        return p

    def make_leader(self, topic: str, index: int, leader_epoch: int, isr: list[int],
                    replicas: list[int]) -> Partition:
        p = self.get_or_create_partition(topic, index)
        p.make_leader(leader_epoch, isr, replicas, self.clock())
        return p

    # -- controller requests (LeaderAndIsr, StopReplica, UpdateMetadata) -----------------------
    def _is_stale(self, controller_id: int, epoch: int, what: str) -> bool:
        """S-5.3: a request from a controller older than the newest seen is refused
        (STALE_CONTROLLER_EPOCH), so a deposed controller cannot move leadership."""
        if epoch < self.controller_epoch:
            self.state_change.broker(epoch, (
                f"Ignoring {what} request from controller {controller_id} with epoch {epoch} "
                f"since its epoch is older than the current controller epoch "
                f"{self.controller_epoch}"), logging.WARNING)
            return True
        self.controller_epoch = epoch
        return False

    def _role(self, tp: TopicPartition) -> str:
        p = self.partitions.get(tp)
        if p is None:
            return "NonExistent"
        return "Leader" if p.is_leader else "Follower"

    def become_leader_or_followers(self, req: ib.LeaderAndIsrRequest, correlation_id: int
                                   ) -> tuple[ErrorCode, list[tuple[TopicPartition, ErrorCode]]]:
        """Kafka's becomeLeaderOrFollower: the request's error (STALE_CONTROLLER_EPOCH from an
        older controller) and each partition's, in the request's order."""
        if self._is_stale(req.controller_id, req.controller_epoch, "LeaderAndIsr"):
            return ErrorCode.stale_controller_epoch, []
        live_leaders = {ll.broker_id: (ll.host_name, ll.port) for ll in req.live_leaders}
        origin = f"(LeaderAndIsr correlationId {correlation_id} from controller " \
                 f"{req.controller_id})"
        errors: list[tuple[TopicPartition, ErrorCode]] = []
        for s in req.partition_states():
            tp = TopicPartition(s.topic_name, s.partition_index)
            before = self._role(tp)
            code = self.become_leader_or_follower(
                tp, s.leader, s.leader_epoch, list(s.isr), list(s.replicas), s.partition_epoch,
                live_leaders.get(s.leader))
            if code == ErrorCode.none:
                self.state_change.partition_change(
                    req.controller_epoch, tp, before, self._role(tp),
                    f"{leadership_text(s.leader, s.leader_epoch, s.isr)} {origin}",
                    actor="Broker")
            else:
                self.state_change.broker(req.controller_epoch, (
                    f"Ignored the state of partition {tp} with "
                    f"{leadership_text(s.leader, s.leader_epoch, s.isr)} {origin}: "
                    f"{code.name.upper()}"), logging.WARNING)
            errors.append((tp, code))
        return ErrorCode.none, errors

    def stop_replicas(self, controller_id: int, controller_epoch: int,
                      partitions: list[tuple[TopicPartition, int, bool]]
                      ) -> tuple[ErrorCode, list[tuple[TopicPartition, ErrorCode]]]:
        """Kafka's stopReplicas: (partition, leader epoch, delete) from a StopReplica; a deleted
        partition leaves the metadata cache too. The request's error (STALE_CONTROLLER_EPOCH)
        and each partition's."""
        if self._is_stale(controller_id, controller_epoch, "StopReplica"):
            return ErrorCode.stale_controller_epoch, []
        errors: list[tuple[TopicPartition, ErrorCode]] = []
        for tp, epoch, delete in partitions:
            before = self._role(tp)
            code = self.stop_replica_request(tp, epoch, delete)
            self.state_change.partition_change(
                controller_epoch, tp, before, "Deleted" if delete else "Stopped",
                f"StopReplica (delete={str(delete).lower()}) from controller {controller_id}: "
                f"{code.name.upper()}", actor="Broker")
            if delete and code == ErrorCode.none:
                self.metadata_cache.remove_partition(tp.topic, tp.partition)
            errors.append((tp, code))
        return ErrorCode.none, errors

    def maybe_update_metadata_cache(self, req: ib.UpdateMetadataRequest,
                                    correlation_id: int = -1) -> ErrorCode:
        """Kafka's maybeUpdateMetadataCache: live brokers, controller and partition leadership
        from an UpdateMetadata (STALE_CONTROLLER_EPOCH from an older controller)."""
        if self._is_stale(req.controller_id, req.controller_epoch, "UpdateMetadata"):
            return ErrorCode.stale_controller_epoch
        cache = self.metadata_cache
        cache.controller_id = req.controller_id
        brokers: dict[int, BrokerInfo] = {}
        for b in req.live_brokers:
            brokers[b.id] = BrokerInfo.from_update_metadata(b)  # every listener's endpoint
        cache.brokers = brokers
        topic_ids = {t.topic_name: t.topic_id for t in getattr(req, "topic_states", ())}
        states = req.partition_states()
        for s in states:
            if s.leader == LEADER_DURING_DELETE:
                cache.remove_partition(s.topic_name, s.partition_index)
                continue
            cache.update_partition(
                s.topic_name, topic_ids.get(s.topic_name, uuid.UUID(int=0)), s.partition_index,
                PartitionInfo(s.leader, s.leader_epoch, list(s.replicas), list(s.isr),
                              list(s.offline_replicas), s.zk_version, s.controller_epoch),
                internal=s.topic_name.startswith("__"))
        # Kafka traces this per partition; one line per request says the same at DEBUG.
        self.state_change.broker(req.controller_epoch, (
            f"Cached live brokers {sorted(brokers)} and the leadership of "
            f"{len(states)} partitions (UpdateMetadata correlationId "
            f"{correlation_id} from controller {req.controller_id})"), logging.DEBUG)
        cache.initialized.set()
        return ErrorCode.none

    # -- leadership -----------------------------------------------------------------------------
    def leader_partition_or_error(self, tp: TopicPartition, current_leader_epoch: int = -1, *,
                                  require_leader: bool = True
                                  ) -> tuple[Partition | None, ErrorCode]:
        """Kafka's getPartitionOrError + localLeaderOrException: the hosted partition and
        ErrorCode.none if this broker leads it (or, without `require_leader`, hosts it) in the
        request's current leader epoch (-1: any); else the error to answer (the partition, if
        hosted, for the response's offsets). Not hosted: NOT_LEADER_OR_FOLLOWER if its log is
        here, else UNKNOWN_TOPIC_OR_PARTITION."""
        tp = (tp[0], tp[1])
        p = self.partitions.get(tp)
        if p is None:
            return None, (ErrorCode.not_leader_or_follower
                          if self.log_manager.get_log(*tp) is not None
                          else ErrorCode.unknown_topic_or_partition)
        if require_leader and not p.is_leader:
            return p, ErrorCode.not_leader_or_follower
        try:
            p.check_leader_epoch(current_leader_epoch)
        except FencedLeaderEpochError:
            return p, ErrorCode.fenced_leader_epoch
        except UnknownLeaderEpochError:
            return p, ErrorCode.unknown_leader_epoch
        return p, ErrorCode.none

    def become_leader_or_follower(self, tp: TopicPartition, leader: int, leader_epoch: int,
                                  isr: list[int], replicas: list[int], partition_epoch: int,
                                  leader_endpoint: tuple[str, int] | None = None) -> ErrorCode:
        """Apply one partition state of a LeaderAndIsr request (Kafka's
        becomeLeaderOrFollower): an older leader epoch is refused (STALE_CONTROLLER_EPOCH, as
        Kafka 2.x answers), the same epoch only refreshes ISR and replicas, and only from a
        state node version newer than the one this replica holds (a leader's own ISR writes
        are newer than what a controller that has not yet seen them sends). A new leader stops
        fetching; a follower of a new leader or epoch (re)starts its fetcher, which truncates
        by leader epoch before fetching (S-3.7)."""
        if self.broker_id not in replicas:
            return ErrorCode.unknown_topic_or_partition
        tp = (tp[0], tp[1])
        current = self.partitions.get(tp)
        if current is not None and leader_epoch < current.leader_epoch:
            return ErrorCode.stale_controller_epoch
        if current is not None and leader_epoch == current.leader_epoch \
                and current.leader_id == leader and not current.fenced:
            current.replicas = list(replicas)
            if partition_epoch > current.zk_version:
                current.isr, current.zk_version = list(isr), partition_epoch
                current.abort_isr_update()  # an ISR write in flight now fails its check
            if leader != self.broker_id and self.fetcher_manager is not None \
                    and not self.fetcher_manager.is_fetching(tp):
                self.start_fetching(current, leader_endpoint)
            return ErrorCode.none
        # Kafka's makeLeader answers whether this replica *became* leader: the coordinators
        # load their partition then, not on a new epoch of a leadership they already hold (a
        # follower's failure bumps the leader epoch of every partition it followed).
        was_leader = current is not None and current.is_leader and not current.fenced
        p = self.get_or_create_partition(*tp)
        if leader == self.broker_id:
            if self.fetcher_manager is not None:
                self.fetcher_manager.remove_fetcher_for_partitions([tp])
            p.make_leader(leader_epoch, isr, replicas, self.clock())
            p.zk_version = partition_epoch
        else:
            changed = p.make_follower(leader, leader_epoch, isr, replicas)
            p.zk_version = partition_epoch
            if self.fetcher_manager is not None and (
                    changed or not self.fetcher_manager.is_fetching(tp)):
                self.fetcher_manager.remove_fetcher_for_partitions([tp])
                self.start_fetching(p, leader_endpoint)
        listener = self.role_listeners.get(tp[0])
        if listener is not None and not (leader == self.broker_id and was_leader):
            listener(tp[1], leader == self.broker_id, leader_epoch)
        # Waiting produces and fetches re-check: a former leader answers NOT_LEADER now.
        self._after_append(tp)
        return ErrorCode.none

    def start_fetching(self, p: Partition, leader_endpoint: tuple[str, int] | None = None
                       ) -> None:
        """(Re)start fetching a follower partition from its leader, Truncating first."""
        assert self.fetcher_manager is not None
        self.fetcher_manager.add_fetcher_for_partitions({(p.topic, p.index): InitialFetchState(
            p.leader_id, leader_endpoint, p.leader_epoch, initial_fetch_offset(p))})

    def stop_replica_request(self, tp: TopicPartition, leader_epoch: int,
                             delete: bool) -> ErrorCode:
        """StopReplica from the controller (leader epoch -2: the topic is being deleted)."""
        tp = (tp[0], tp[1])
        p = self.partitions.get(tp)
        if p is not None and 0 <= leader_epoch < p.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions([tp])
        if p is None:
            if delete and self.log_manager.get_log(*tp) is not None:
                self.log_manager.delete_log(*tp)
            if delete:
                self._forget_topic_metrics(tp[0])
            return ErrorCode.none
        self.stop_replica(tp[0], tp[1], delete)
        return ErrorCode.none

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions([(topic, index)])
        p = self.partitions.pop((topic, index), None)
        if p is not None:
            p.abort_isr_update()
        if p is not None and (listener := self.role_listeners.get(topic)) is not None:
            listener(index, False, -1)
        for purgatory in (self.produce_purgatory, self.fetch_purgatory):
            purgatory.check_and_complete((topic, index))
        if delete:
            self.log_manager.delete_log(topic, index)
            self._forget_topic_metrics(topic)
        elif p is not None:
            p.log.flush()

    def _forget_topic_metrics(self, topic: str) -> None:
        """Kafka's removeMetrics: a deleted topic's BrokerTopicMetrics go with its last
        partition here."""
        if not any(t == topic for t, _ in self.partitions):
            self.topic_stats.remove_topic(topic)

    # -- ISR changes (called by isr.IsrChangeManager) -----------------------------------------
    def on_high_watermark_moved(self, tp: TopicPartition) -> None:
        """The HW or the ISR moved: waiting produces and consumer fetches re-check at once."""
        self._after_append(tp)

    def on_leadership_lost(self, tp: TopicPartition) -> None:
        """The state node names another leader: answer waiting produces NOT_LEADER."""
        self._after_append(tp)

    # -- OffsetForLeaderEpoch (leader side) ---------------------------------------------------
    def last_offset_for_leader_epoch(self, tp: TopicPartition, current_leader_epoch: int,
                                     leader_epoch: int) -> EpochEndOffset:
        """Kafka's lastOffsetForLeaderEpoch: the end offset of `leader_epoch` in the leader's
        log (the start offset of the next larger epoch, or the LEO for the latest), with the
        largest epoch <= the one asked. Only the leader answers."""
        p, code = self.leader_partition_or_error(tp, current_leader_epoch)
        if p is None or code != ErrorCode.none:
            return EpochEndOffset(code)
        found = p.log.end_offset_for_epoch(leader_epoch)
        if found is None:
            return EpochEndOffset(ErrorCode.none)
        return EpochEndOffset(ErrorCode.none, found[0], found[1])

    # -- produce ----------------------------------------------------------------------------
    def append_records(self, acks: int, timeout_ms: int,
                       entries: dict[TopicPartition, bytes | None], *,
                       origin: AppendOrigin = AppendOrigin.CLIENT
                       ) -> dict[TopicPartition, ProduceResult] | asyncio.Future[Any]:
        """Append each partition's record set on its leader (Kafka's appendRecords). `origin`
        decides the producer checks: CLIENT (Produce) epoch + sequence, control batches
        refused; COORDINATOR (the group and transaction coordinators' writes, WriteTxnMarkers)
        epoch only, control batches (transaction markers) allowed."""
        now = self.clock()
        results: dict[TopicPartition, ProduceResult] = {}
        for tp, data in entries.items():
            results[tp] = self._append_one(tp, data, acks, now, origin)
        if acks != -1 or all(r.error != ErrorCode.none for r in results.values()):
            return results
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        op = DelayedProduce(timeout_ms, self, results, future)
        self.produce_purgatory.try_complete_else_watch(op, list(results))
        return future

    def _append_one(self, tp: TopicPartition, data: bytes | None, acks: int,
                    now: int, origin: AppendOrigin = AppendOrigin.CLIENT) -> ProduceResult:
        partition = self.partitions.get(tp)
        if partition is None:
            return ProduceResult(ErrorCode.unknown_topic_or_partition)
        config = self.topic_config(tp[0])
        try:
            if not data:
                raise rb.InvalidRecordError("empty record set")
            headers = rb.validate_batches(data,
                                          allow_control=origin is AppendOrigin.COORDINATOR)
            for h in headers:
                if h.size > config.max_message_bytes:
                    return ProduceResult(
                        ErrorCode.message_too_large,
                        message=f"batch of {h.size} bytes exceeds max.message.bytes "
                                f"{config.max_message_bytes}")
            buf = bytearray(data)
            info = partition.append_records_to_leader(
                buf, headers, acks, config.min_insync_replicas, now, origin)
        except Exception as exc:  # every failure is a per-partition error code
            code = _error_for(exc)
            if code not in EXPECTED_ERRORS:  # Kafka marks FailedProduceRequestsPerSec so
                self.topic_stats.record_failed_produce(tp[0])
            if code == ErrorCode.unknown_server_error:
                log.exception("Error appending to %s-%d", *tp)
            else:
                log.debug("Produce to %s-%d failed: %s", tp[0], tp[1], exc)
            return ProduceResult(code, message=str(exc))
        if not getattr(info, "duplicate", False):
            # counted from the batch headers: no record is parsed for the metrics
            self.topic_stats.record_append(
                tp[0], sum(h.last_offset_delta + 1 for h in headers), len(data))
            self._after_append(tp)
        return ProduceResult(ErrorCode.none, info.first_offset, info.last_offset,
                             info.log_append_time, partition.log_start_offset)

    def _after_append(self, tp: TopicPartition) -> None:
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)

    # -- fetch ------------------------------------------------------------------------------
    def fetch_messages(self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                       requests: dict[TopicPartition, FetchRequestPartition],
                       isolation_level: int = READ_UNCOMMITTED
                       ) -> dict[TopicPartition, FetchResult] | asyncio.Future[Any]:
        """Read the requested partitions (Kafka's fetchMessages); consumers read below the
        HW, read_committed ones (`isolation_level` 1) below the last stable offset, with the
        aborted transactions of what they read."""
        results = self.read_from_local_log(replica_id, max_bytes, requests, isolation_level)
        if replica_id >= 0:
            self._update_follower_fetch_states(replica_id, requests, results)
        total = sum(r.size for r in results.values())
        errors = any(r.error != ErrorCode.none for r in results.values())
        if max_wait_ms <= 0 or not requests or total >= min_bytes or errors:
            return results
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        op = DelayedFetch(max_wait_ms, self, replica_id, min_bytes, max_bytes, requests, future,
                          isolation_level)
        self.fetch_purgatory.try_complete_else_watch(op, list(requests))
        return future

    def _update_follower_fetch_states(self, replica_id: int,
                                      requests: dict[TopicPartition, FetchRequestPartition],
                                      results: dict[TopicPartition, FetchResult]) -> None:
        """S-3.3/S-3.4 on the leader: a follower's fetch offset is its LEO; record it (and its
        caught-up time), move the HW if it can (completing waiting produces and fetches), and
        expand the ISR if the follower caught up. The response carries the HW after this
        fetch, so the follower learns it without waiting for another round."""
        now = self.clock()
        for tp, result in results.items():
            if result.error != ErrorCode.none:
                continue
            partition = self.partitions.get(tp)
            if partition is None:
                continue
            req = requests[tp]
            outcome = partition.update_follower_fetch_state(
                replica_id, req.fetch_offset, req.log_start_offset, now, result.leader_end_offset)
            if not outcome.known:
                log.warning("Leader %d failed to record follower %d's position %d for partition "
                            "%s-%d since the replica is not recognized to be one of the assigned "
                            "replicas %s. Empty records will be returned for this partition.",
                            self.broker_id, replica_id, req.fetch_offset, tp[0], tp[1],
                            partition.replicas)
                results[tp] = FetchResult(ErrorCode.none, partition.high_watermark,
                                          partition.log_start_offset,
                                          last_stable_offset=partition.last_stable_offset)
                continue
            if outcome.expand_isr_to is not None and self.isr_manager is not None:
                self.isr_manager.expand_isr(partition, outcome.expand_isr_to, replica_id)
            if outcome.high_watermark_moved:
                self._after_append(tp)
            result.high_watermark = partition.high_watermark
            result.last_stable_offset = partition.last_stable_offset

    def read_from_local_log(self, replica_id: int, max_bytes: int,
                            requests: dict[TopicPartition, FetchRequestPartition],
                            isolation_level: int = READ_UNCOMMITTED
                            ) -> dict[TopicPartition, FetchResult]:
        committed = replica_id < 0 and isolation_level == READ_COMMITTED
        results: dict[TopicPartition, FetchResult] = {}
        remaining = max_bytes
        min_one = True  # KIP-74: the first batch of the response is sent whole even if too large
        for tp, req in requests.items():
            partition, code = self.leader_partition_or_error(
                tp, req.current_leader_epoch,
                require_leader=replica_id != DEBUGGING_CONSUMER_ID)
            if partition is None or code != ErrorCode.none:
                results[tp] = (FetchResult(code) if partition is None else FetchResult(
                    code, partition.high_watermark, partition.log_start_offset,
                    last_stable_offset=partition.last_stable_offset))
                continue
            lso = partition.last_stable_offset
            try:
                limit = fetch_limit(partition, replica_id, isolation_level)
                if self.should_leader_throttle(partition, replica_id):
                    # KIP-73: left out of this response (no data, no error)
                    results[tp] = FetchResult(ErrorCode.none, partition.high_watermark,
                                              partition.log_start_offset, [], 0,
                                              partition.log_end_offset, lso)
                    continue
                data = partition.log.read(req.fetch_offset, min(req.max_bytes, remaining),
                                          max_offset=limit, min_one_message=min_one,
                                          include_aborted_txns=committed)
            except Exception as exc:
                code = _error_for(exc)
                if code == ErrorCode.unknown_server_error:
                    log.exception("Error reading %s-%d", *tp)
                results[tp] = FetchResult(code, partition.high_watermark,
                                          partition.log_start_offset, last_stable_offset=lso)
                continue
            size = sum(r.size for r in data.regions)
            if size and replica_id >= 0 and self.leader_quota.is_throttled(*tp):
                self.leader_quota.record(size)
            if size:
                min_one = False
                remaining = max(0, remaining - size)
            aborted = data.aborted_transactions
            results[tp] = FetchResult(ErrorCode.none, partition.high_watermark,
                                      partition.log_start_offset, list(data.regions), size,
                                      data.log_end_offset, lso,
                                      None if aborted is None else
                                      [(t.producer_id, t.first_offset) for t in aborted])
        return results

    def bytes_between(self, partition: Partition, start: int, end: int, cap: int) -> int:
        """Bytes readable from `start` up to `end` (at most `cap`), for DelayedFetch."""
        try:
            data = partition.log.read(start, cap, max_offset=end, min_one_message=True)
        except Exception:
            return cap
        return sum(r.size for r in data.regions)

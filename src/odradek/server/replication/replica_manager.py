"""The replica manager: this broker's partitions, appends, reads, and their purgatories.

Produce: check each partition's record set by its batch headers and CRCs, append it on the
leader, whose log validates it (Kafka's LogValidator from Log.appendAsLeader: sizes, and the
keys of a client's records on a compacted topic, storage/log_validator.py), map what failed to
an error code (results.py), and for acks=all wait in the produce purgatory until the HW passes
the last offset (S-3.5, S-3.6). Fetch: read file regions below the HW (consumers) or the LEO
(followers); if fewer than min_bytes are ready, wait in the fetch purgatory until an append or
HW move completes the DelayedFetch, or max_wait passes.

Replication (S-3.2 - S-3.4, S-3.7): a follower's fetch records its LEO on the leader, which may
move the HW (completing waiting produces and fetches at once) and expand the ISR; LeaderAndIsr
starts (`fetcher.ReplicaFetcherManager`) or stops the replica fetchers; `isr.IsrChangeManager`
shrinks ISRs of lagging followers and writes every ISR change to the partition state node.
Partitions start with the HW of `replication-offset-checkpoint`.

Beside it in server/replication/: the delayed operations (`delayed_produce`, `delayed_fetch`,
`delayed_delete_records`) and their `purgatories`, Fetch's reads (`local_reads`), the result
types and error codes (`results`), log dir failures (`log_dir_failure`); UpdateMetadata is the
metadata cache's own (server/metadata_cache.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...common import TopicPartition, clock
from ...common.state_change import StateChangeLogger, leadership_text
from ...common.topic_id import topic_id_to_text
from ...metrics.stats import TopicStats
from ...protocol import interbroker as ib
from ...protocol import records as rb
from ...storage.append_origin import AppendOrigin
from ...storage.errors import KafkaStorageError
from ...storage.log import Log
from ...storage.log_config import LogConfig
from ...storage.log_manager import LogManager
from ...storage.log_validator import RecordValidationError
from ...storage.partition_metadata import (
    PartitionMetadataError,
    read_partition_metadata,
    write_partition_metadata,
)
from ..metadata_cache import MetadataCache
from ..quotas.replication_quota import ReplicationQuotas, should_leader_throttle
from ..topic_names import INTERNAL_TOPICS
from .delayed_delete_records import DelayedDeleteRecords
from .delayed_fetch import DelayedFetch
from .delayed_produce import DelayedProduce
from .fetcher import (
    FetcherChanges,
    FetcherManager,
    InitialFetchState,
    ReplicaFetchers,
    initial_fetch_offset,
)
from .isr import IsrChanges
from .leader_endpoint import EpochEndOffset
from .local_reads import LocalLogReader
from .log_dir_failure import LogDirFailureHandler
from .partition import (
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    FencedLeaderEpochError,
    Partition,
    UnknownLeaderEpochError,
)
from .purgatories import ReplicaPurgatories
from .replica_alter_log_dirs import DEFAULT_CHUNK_BYTES, ReplicaAlterLogDirsManager
from .replica_selector import ClientMetadata
from .results import (
    EXPECTED_ERRORS,
    READ_UNCOMMITTED,
    DeleteRecordsResult,
    FetchRequestPartition,
    FetchResult,
    LogDirDescription,
    LogDirPartition,
    ProduceResult,
    error_code_for,
)

if TYPE_CHECKING:
    from ...coordination.store import CoordinationStore

log = logging.getLogger("odradek.replica_manager")


def _now_ms() -> int:
    return clock.now_ms()


class PartitionEvents:
    """A hosted partition's DelayedOperations: the replica manager's purgatories and, when the
    partition loses its leadership (the state node names another leader: it is fenced until
    the controller's LeaderAndIsr arrives), the topic's role listener, told (False, -1) as
    when it stops hosting the partition. A coordinator must not go on serving from its cache
    a leadership its replica gave up: the controller's LeaderAndIsr may never come (lost with
    a controller that resigned), and the replica, elected again later, is announced as a new
    leader, whose coordinator loads only a partition it does not hold already."""

    def __init__(self, purgatories: ReplicaPurgatories,
                 role_listeners: dict[str, Callable[[int, bool, int], None]]) -> None:
        self.purgatories = purgatories
        self.role_listeners = role_listeners

    def on_high_watermark_moved(self, tp: TopicPartition) -> None:
        self.purgatories.on_high_watermark_moved(tp)

    def on_leadership_lost(self, tp: TopicPartition) -> None:
        self.purgatories.on_leadership_lost(tp)
        if (listener := self.role_listeners.get(tp[0])) is not None:
            listener(tp[1], False, -1)

    def on_follower_high_watermark_moved(self, tp: TopicPartition) -> None:
        self.purgatories.on_follower_high_watermark_moved(tp)


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager,
                 topic_config: Callable[[str], LogConfig],
                 clock: Callable[[], int] = _now_ms,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS, *,
                 fetcher_manager: FetcherManager,
                 isr_manager: IsrChanges,
                 partitions: dict[TopicPartition, Partition] | None = None,
                 quotas: ReplicationQuotas | None = None,
                 alter_log_dirs_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 store: Callable[[], CoordinationStore | None] = lambda: None,
                 on_all_log_dirs_offline: Callable[[], None] = lambda: None,
                 metadata_cache: MetadataCache | None = None,
                 topic_stats: TopicStats | None = None,
                 replica_selector: str | None = None) -> None:
        """`fetcher_manager` and `isr_manager` act on `partitions`, the partitions hosted here
        (Kafka's allPartitions), which this manager alone changes: the composition root
        (server/broker.py) builds that map first, hands it to them, then to this manager.
        `store` is where ``/log_dir_event_notification`` nodes go; `on_all_log_dirs_offline`
        stops the broker when no log dir is left (KIP-112)."""
        self.broker_id = broker_id
        # BrokerTopicMetrics (messages and bytes in per topic, metrics/)
        self.topic_stats = topic_stats if topic_stats is not None else TopicStats()
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.metadata_cache = metadata_cache if metadata_cache is not None else MetadataCache()
        # The newest controller epoch seen in LeaderAndIsr/StopReplica/UpdateMetadata (S-5.3).
        self.controller_epoch = 0
        self.state_change = StateChangeLogger(broker_id)
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[TopicPartition, Partition] = \
            partitions if partitions is not None else {}
        # the waiting requests, told by every hosted partition's changes (its delayed_operations)
        self.purgatories = ReplicaPurgatories()
        self.produce_purgatory = self.purgatories.produce
        self.fetch_purgatory = self.purgatories.fetch
        self.delete_records_purgatory = self.purgatories.delete_records
        # where LeaderAndIsr's fetcher changes go: the manager, or while a request is
        # applied, its FetcherChanges, told to the manager at its end
        self._fetchers: ReplicaFetchers = fetcher_manager
        self._log_start_checkpoint_due = False
        self._shut_down = False
        self.fetcher_manager = fetcher_manager
        self.isr_manager = isr_manager
        self._checkpointed_hw: dict[TopicPartition, int] = {}
        # topic -> f(partition, is_leader, leader_epoch): told when this broker becomes leader or
        # follower of one of the topic's partitions, and (False, -1) when it stops hosting one.
        # The group coordinator listens for __consumer_offsets (load / unload its groups).
        self.role_listeners: dict[str, Callable[[int, bool, int], None]] = {}
        self._partition_events = PartitionEvents(self.purgatories, self.role_listeners)
        # KIP-73 replication quotas: bytes this leader sends to followers, and bytes this
        # follower fetches, for throttled partitions (rates set by dynamic broker configs).
        quotas = quotas if quotas is not None else ReplicationQuotas.create()
        self.leader_quota = quotas.leader
        self.follower_quota = quotas.follower
        # Fetch's reads (KIP-392: replica.selector.class, None or the rack-aware selector)
        self.local_reads = LocalLogReader(broker_id, self, self.leader_quota,
                                          self.metadata_cache, replica_selector, clock)
        # KIP-112: partitions whose log dir went offline (Kafka's HostedPartition.Offline);
        # they answer KAFKA_STORAGE_ERROR until the broker restarts
        self.offline_partitions: set[TopicPartition] = set()
        # KIP-113: replicas moving between this broker's log dirs (AlterReplicaLogDirs)
        self.alter_log_dirs = ReplicaAlterLogDirsManager(
            log_manager, self.partitions.get, lambda tp: tp in self.offline_partitions,
            lambda tp: self.metadata_cache.partition(tp[0], tp[1]) is not None,
            quota=quotas.alter_log_dirs, chunk_bytes=alter_log_dirs_chunk_bytes)
        # KIP-112: a failed log dir takes its partitions offline and tells the controller;
        # with none left, `on_all_log_dirs_offline` (the broker must stop, as Kafka halts)
        self.log_dir_failures = LogDirFailureHandler(broker_id, self, log_manager, store,
                                                     on_all_log_dirs_offline)

    def start(self) -> None:
        """Start the purgatories' timers and read replication-offset-checkpoint: partitions
        created from now on start with the HW they had (S-3.3, S-2.5). From now on a log dir
        reported offline is handled on this loop (``log_dir_failure.LogDirFailureHandler``)."""
        self._checkpointed_hw = self.log_manager.read_high_watermarks()
        self.purgatories.start()
        self.log_dir_failures.start()
        # the ISR tasks: the shrink check every replica.lag.time.max.ms / 2 and the ISR
        # change notifications
        self.isr_manager.start()

    # -- KIP-112: a failed log dir (log_dir_failure.LogDirFailureHandler) ------------------
    def stop_serving_replicas_in_dir(self, log_dir: Path) -> list[TopicPartition]:
        """The partitions whose log is in the failed `log_dir` stop fetching (and moving
        between log dirs, as do moves into it) and go offline, Kafka's markPartitionOffline:
        KAFKA_STORAGE_ERROR from now on; their role listeners hear (False, -1). Returns them."""
        in_dir = [tp for tp, p in self.partitions.items() if p.log.dir.parent == log_dir]
        for tp in list(self.alter_log_dirs.moving):  # moves from or into the failed dir stop
            if tp in in_dir or self.alter_log_dirs.future_dir(tp) == log_dir:
                self.alter_log_dirs.remove(tp)
        log.warning("[ReplicaManager broker=%d] Stopping serving replicas in dir %s",
                    self.broker_id, log_dir)
        self.fetcher_manager.remove_fetcher_for_partitions(in_dir)
        for tp in in_dir:
            p = self.partitions.pop(tp)
            p.abort_isr_update()
            self.offline_partitions.add(tp)
            if (listener := self.role_listeners.get(tp[0])) is not None:
                listener(tp[1], False, -1)
        return in_dir

    def complete_offline(self, stopped: Iterable[TopicPartition],
                         closed: Iterable[TopicPartition]) -> None:
        """The log manager closed the failed dir's logs (`closed`, of hosted partitions or
        not): all are offline, and the requests waiting on the `stopped` partitions complete."""
        self.offline_partitions.update(closed)
        for tp in stopped:
            self.purgatories.check_produce_and_fetch(tp)

    def shutdown(self) -> None:
        self.log_dir_failures.shutdown()
        self.alter_log_dirs.shutdown()
        self.fetcher_manager.shutdown()
        self.isr_manager.shutdown()
        self.purgatories.shutdown()
        self._shut_down = True  # the log manager writes its own checkpoints at shutdown

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
    def get_or_create_partition(self, topic: str, index: int, is_new: bool = True
                                ) -> Partition:
        """The hosted partition, created with its log if needed. With a log dir offline, a
        partition that is not new and has no log here may have had it in that dir: refused
        with KafkaStorageError (Kafka's getOrCreateLog), as is an offline partition."""
        tp = (topic, index)
        p = self.partitions.get(tp)
        if p is None:
            if tp in self.offline_partitions:
                raise KafkaStorageError(f"partition {topic}-{index} is in an offline log dir")
            if not is_new and self.log_manager.offline_dirs \
                    and self.log_manager.get_log(topic, index) is None:
                raise KafkaStorageError(
                    f"cannot create the log of {topic}-{index}: log dirs "
                    f"{sorted(map(str, self.log_manager.offline_dirs))} are offline")
            log_: Log = self.log_manager.get_or_create_log(topic, index)
            p = Partition(topic, index, log_, self.broker_id,
                          replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                          clock=self.clock, delayed_operations=self._partition_events)
            p.initialize_high_watermark(self._checkpointed_hw.pop(tp, 0))
            try:  # KIP-516: the topic id this log was written for, if recorded
                p.topic_id = read_partition_metadata(log_.dir)
            except (OSError, PartitionMetadataError) as exc:
                log.warning("Ignoring the partition metadata file of %s-%d: %s", topic, index,
                            exc)
            p.log_start_listener = self._on_log_start_moved
            self.partitions[tp] = p
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
        topic_ids = {t.topic_name: t.topic_id for t in getattr(req, "topic_states", ())}
        # the fetcher manager is told once for the whole request
        self._fetchers = changes = FetcherChanges(self.fetcher_manager)
        started = time.monotonic()
        # Kafka's two INFO lines around the request (ReplicaManager.becomeLeaderOrFollower)
        self.state_change.broker(req.controller_epoch, (
            f"Handling LeaderAndIsr request correlationId {correlation_id} from controller "
            f"{req.controller_id} epoch {req.controller_epoch} for {req.partition_count()} "
            "partitions"))
        try:
            # the leader-epoch checkpoints of the request go in one or a few batches
            with self.log_manager.checkpoint_writer.hold():
                self._apply_partition_states(req, live_leaders, topic_ids, origin, errors)
        finally:
            self._fetchers = self.fetcher_manager
            changes.apply()
        self.state_change.broker(req.controller_epoch, (
            f"Finished LeaderAndIsr request in {(time.monotonic() - started) * 1000:.0f}ms "
            f"correlationId {correlation_id} from controller {req.controller_id} epoch "
            f"{req.controller_epoch} for {len(errors)} partitions"))
        return ErrorCode.none, errors

    def _apply_partition_states(self, req: ib.LeaderAndIsrRequest,
                                live_leaders: dict[int, tuple[str, int]],
                                topic_ids: dict[str, uuid.UUID], origin: str,
                                errors: list[tuple[TopicPartition, ErrorCode]]) -> None:
        for topic, s in req.named_partition_states():
            tp = TopicPartition(topic, s.partition_index)
            before = self._role(tp)
            code = self.become_leader_or_follower(
                tp, s.leader, s.leader_epoch, list(s.isr), list(s.replicas), s.partition_epoch,
                live_leaders.get(s.leader), is_new=bool(getattr(s, "is_new", True)),
                topic_id=topic_ids.get(topic))
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
        count = self.metadata_cache.update_metadata(req)
        # Kafka traces this per partition; one line per request says the same at DEBUG.
        self.state_change.broker(req.controller_epoch, (
            f"Cached live brokers {sorted(self.metadata_cache.brokers)} and the leadership of "
            f"{count} partitions (UpdateMetadata correlationId "
            f"{correlation_id} from controller {req.controller_id})"), logging.DEBUG)
        if self.delete_records_purgatory.delayed():  # a dead follower no longer holds them
            for tp in [tp for tp, p in self.partitions.items() if p.is_leader]:
                self.delete_records_purgatory.check_and_complete(tp)
        return ErrorCode.none

    # -- leadership -----------------------------------------------------------------------------
    def leader_partition_or_error(self, tp: TopicPartition, current_leader_epoch: int = -1, *,
                                  require_leader: bool = True
                                  ) -> tuple[Partition | None, ErrorCode]:
        """Kafka's getPartitionOrError + localLeaderOrException: the hosted partition and
        ErrorCode.none if this broker leads it (or, without `require_leader`, hosts it) in the
        request's current leader epoch (-1: any); else the error to answer (the partition, if
        hosted, for the response's offsets). Not hosted: NOT_LEADER_OR_FOLLOWER if its log is
        here or the metadata cache knows the partition (Kafka: the client's metadata is stale),
        else UNKNOWN_TOPIC_OR_PARTITION."""
        tp = (tp[0], tp[1])
        if tp in self.offline_partitions:
            return None, ErrorCode.kafka_storage_error
        p = self.partitions.get(tp)
        if p is None:
            return None, (ErrorCode.not_leader_or_follower
                          if self.log_manager.get_log(*tp) is not None
                          or self.metadata_cache.partition(*tp) is not None
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
                                  leader_endpoint: tuple[str, int] | None = None, *,
                                  is_new: bool = True, topic_id: uuid.UUID | None = None
                                  ) -> ErrorCode:
        """Apply one partition state of a LeaderAndIsr request (Kafka's
        becomeLeaderOrFollower): an older leader epoch is refused (STALE_CONTROLLER_EPOCH, as
        Kafka 2.x answers), the same epoch only refreshes ISR and replicas, and only from a
        state node version newer than the one this replica holds (a leader's own ISR writes
        are newer than what a controller that has not yet seen them sends). A new leader stops
        fetching; a follower of a new leader or epoch (re)starts its fetcher, which truncates
        by leader epoch before fetching (S-3.7), or, its leader unavailable (-1, or not a live
        broker), only stops the one it had."""
        if self.broker_id not in replicas:
            return ErrorCode.unknown_topic_or_partition
        tp = (tp[0], tp[1])
        if tp in self.offline_partitions:  # KIP-112: the controller moves it away
            return ErrorCode.kafka_storage_error
        current = self.partitions.get(tp)
        if current is not None and not self._assign_topic_id(current, topic_id):
            return ErrorCode.inconsistent_topic_id
        if current is not None and leader_epoch < current.leader_epoch:
            return ErrorCode.stale_controller_epoch
        if current is not None and leader_epoch == current.leader_epoch \
                and current.leader_id == leader and not current.fenced:
            current.replicas = list(replicas)
            if partition_epoch > current.zk_version:
                current.isr, current.zk_version = list(isr), partition_epoch
                current.abort_isr_update()  # an ISR write in flight now fails its check
            if leader != self.broker_id and not self._fetchers.is_fetching(tp) \
                    and self._is_leader_available(leader, leader_endpoint):
                self.start_fetching(current, leader_endpoint)
            return ErrorCode.none
        # Kafka's makeLeader answers whether this replica *became* leader: the coordinators
        # load their partition then, not on a new epoch of a leadership they already hold (a
        # follower's failure bumps the leader epoch of every partition it followed).
        was_leader = current is not None and current.is_leader and not current.fenced
        try:
            p = self.get_or_create_partition(*tp, is_new=is_new)
        except KafkaStorageError as exc:
            log.warning("[ReplicaManager broker=%d] %s", self.broker_id, exc)
            return ErrorCode.kafka_storage_error
        if current is None and not self._assign_topic_id(p, topic_id):
            return ErrorCode.inconsistent_topic_id
        self.alter_log_dirs.maybe_resume(tp)  # a move interrupted by a restart goes on
        if leader == self.broker_id:
            self._fetchers.remove_fetcher_for_partitions([tp])
            p.make_leader(leader_epoch, isr, replicas, self.clock())
            p.zk_version = partition_epoch
        else:
            changed = p.make_follower(leader, leader_epoch, isr, replicas)
            p.zk_version = partition_epoch
            if not self._is_leader_available(leader, leader_endpoint):
                # A follower without a leader to fetch from (-1: the partition is offline):
                # the fetcher from its former leader stops and none starts until a
                # LeaderAndIsr names a live leader.
                self._fetchers.remove_fetcher_for_partitions([tp])
                self.state_change.broker(self.controller_epoch, (
                    f"Not fetching partition {p} as a follower at leader epoch {leader_epoch}: "
                    f"its new leader {leader} is unavailable"), logging.WARNING)
            elif changed or not self._fetchers.is_fetching(tp):
                self._fetchers.remove_fetcher_for_partitions([tp])
                self.start_fetching(p, leader_endpoint)
        listener = self.role_listeners.get(tp[0])
        if listener is not None and not (leader == self.broker_id and was_leader):
            listener(tp[1], leader == self.broker_id, leader_epoch)
        # Waiting produces and fetches re-check: a former leader answers NOT_LEADER now.
        self.purgatories.check_produce_and_fetch(tp)
        self.delete_records_purgatory.check_and_complete(tp)
        return ErrorCode.none

    def _is_leader_available(self, leader: int, leader_endpoint: tuple[str, int] | None
                             ) -> bool:
        """Whether a follower may fetch from `leader` (Kafka's makeFollowers adds fetchers
        only for leaders alive in the metadata cache): a broker id among the LeaderAndIsr
        request's live leaders (`leader_endpoint`) or the live brokers of the metadata cache.
        No leader (-1) never is."""
        return leader >= 0 and (leader_endpoint is not None or self.is_broker_alive(leader))

    def _assign_topic_id(self, p: Partition, topic_id: uuid.UUID | None) -> bool:
        """Kafka's LeaderAndIsr topic id check (KIP-516): False if the partition's log holds
        another topic id than the controller's (a log of a deleted topic of the same name);
        a log without one takes the controller's, recorded in its partition.metadata."""
        if topic_id is None or not topic_id.int:
            return True
        if p.topic_id is not None:
            if p.topic_id != topic_id:
                self.state_change.broker(self.controller_epoch, (
                    f"Topic ID in memory: {topic_id_to_text(p.topic_id)} does not match the "
                    f"topic ID for partition {p} received: {topic_id_to_text(topic_id)}."),
                    logging.ERROR)
                return False
            return True
        p.topic_id = topic_id
        try:
            write_partition_metadata(p.log.dir, topic_id)
        except OSError as exc:
            log.warning("Error writing the partition metadata file of %s: %s", p, exc)
        return True

    def start_fetching(self, p: Partition, leader_endpoint: tuple[str, int] | None = None
                       ) -> None:
        """(Re)start fetching a follower partition from its leader, Truncating first."""
        self._fetchers.add_fetcher_for_partitions({(p.topic, p.index): InitialFetchState(
            p.leader_id, leader_endpoint, p.leader_epoch, initial_fetch_offset(p))})

    def stop_replica_request(self, tp: TopicPartition, leader_epoch: int,
                             delete: bool) -> ErrorCode:
        """StopReplica from the controller (leader epoch -2: the topic is being deleted)."""
        tp = (tp[0], tp[1])
        if tp in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        p = self.partitions.get(tp)
        if p is not None and 0 <= leader_epoch < p.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        self.fetcher_manager.remove_fetcher_for_partitions([tp])
        if p is None:
            self.alter_log_dirs.remove(TopicPartition(*tp))
            if delete and self.log_manager.get_log(*tp) is not None:
                self.log_manager.delete_log(*tp)
            if delete:
                self._forget_topic_metrics(tp[0])
            return ErrorCode.none
        self.stop_replica(tp[0], tp[1], delete)
        return ErrorCode.none

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """What replication-offset-checkpoint holds: the hosted partitions' HWs, and those of
        logs not (or no longer) hosted as partitions (read at start-up, or stopped without
        delete), so a clean stop keeps them as Kafka's checkpoint of all its partitions does."""
        return {**self._checkpointed_hw,
                **{tp: p.high_watermark for tp, p in self.partitions.items()}}

    def stop_replica(self, topic: str, index: int, delete: bool) -> None:
        self.alter_log_dirs.remove(TopicPartition(topic, index))
        self.fetcher_manager.remove_fetcher_for_partitions([(topic, index)])
        p = self.partitions.pop((topic, index), None)
        if p is not None:
            p.abort_isr_update()
            if not delete:  # Kafka keeps a stopped partition and checkpoints its HW
                self._checkpointed_hw[(topic, index)] = p.high_watermark
        if p is not None and (listener := self.role_listeners.get(topic)) is not None:
            listener(index, False, -1)
        for purgatory in (self.produce_purgatory, self.delete_records_purgatory):
            purgatory.check_and_complete((topic, index))
        self.purgatories.check_fetches((topic, index))
        if delete:
            self._checkpointed_hw.pop((topic, index), None)
            self.log_manager.delete_log(topic, index)
            self._forget_topic_metrics(topic)
        elif p is not None:
            p.log.flush()

    def _forget_topic_metrics(self, topic: str) -> None:
        """Kafka's removeMetrics: a deleted topic's BrokerTopicMetrics go with its last
        partition here."""
        if not any(t == topic for t, _ in self.partitions):
            self.topic_stats.remove_topic(topic)

    # -- DescribeLogDirs (KIP-113 / KIP-112) ----------------------------------------------------
    def describe_log_dirs(self, partitions: set[TopicPartition] | None = None
                          ) -> list[LogDirDescription]:
        """Kafka's describeLogDirs: every configured log dir with its logs (of `partitions`;
        None: all) -- size, offset lag (HW - LEO, at least 0; -1 without a hosted replica; for
        a future log being moved here, ``is_future`` and the current log's LEO - its LEO) --
        or KAFKA_STORAGE_ERROR for an offline dir."""
        lm = self.log_manager
        out: list[LogDirDescription] = []
        for log_dir in lm.log_dirs:
            if log_dir in lm.offline_dirs:
                out.append(LogDirDescription(str(log_dir), ErrorCode.kafka_storage_error, {}))
                continue
            topics: dict[str, list[LogDirPartition]] = {}
            entries = [(tp, lg, False) for tp, lg in lm.logs_in_dir(log_dir).items()]
            entries += [(tp, lg, True) for tp, lg in lm.logs_in_dir(log_dir, future=True).items()]
            for (topic, index), lg, future in sorted(entries, key=lambda e: (e[0], e[2])):
                parts = topics.setdefault(topic, [])  # Kafka lists the dir's topics
                if partitions is not None and (topic, index) not in partitions:
                    continue
                p = self.partitions.get((topic, index))
                if p is None:
                    lag = -1
                elif future:
                    lag = p.log.log_end_offset - lg.log_end_offset
                else:
                    lag = max(p.high_watermark - lg.log_end_offset, 0)
                parts.append(LogDirPartition(index, lg.size, lag, future))
            out.append(LogDirDescription(str(log_dir), ErrorCode.none, topics))
        return out

    def on_high_watermark_moved(self, tp: TopicPartition) -> None:
        """The HW or the ISR moved: waiting produces and consumer fetches re-check at once."""
        self.purgatories.check_produce_and_fetch(tp)

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
            return ProduceResult(ErrorCode.kafka_storage_error if tp in self.offline_partitions
                                 else ErrorCode.unknown_topic_or_partition)
        records = data or b""  # (a null record set fails as an empty one)
        try:
            # the batches' framing and CRCs, by their headers; the log validates the rest
            # (Kafka's LogValidator from Log.appendAsLeader: sizes, keys, timestamps)
            headers = rb.validate_batches(records,
                                          allow_control=origin is AppendOrigin.COORDINATOR)
            info = partition.append_records_to_leader(
                bytearray(records), headers, acks, self.min_insync_replicas(tp[0]), now, origin)
        except Exception as exc:  # every failure is a per-partition error code
            code = error_code_for(exc)
            if code not in EXPECTED_ERRORS:  # Kafka marks FailedProduceRequestsPerSec so
                self.topic_stats.record_failed_produce(tp[0])
            if code == ErrorCode.unknown_server_error:
                log.exception("Error appending to %s-%d", *tp)
            else:
                log.debug("Produce to %s-%d failed: %s", tp[0], tp[1], exc)
            if isinstance(exc, RecordValidationError):
                return ProduceResult(code, log_start_offset=partition.log_start_offset,
                                     message=str(exc), record_errors=exc.record_errors)
            return ProduceResult(code, message=str(exc))
        if not getattr(info, "duplicate", False):
            # counted from the batch headers: no record is parsed for the metrics
            self.topic_stats.record_append(
                tp[0], sum(h.last_offset_delta + 1 for h in headers), len(records))
            self.purgatories.check_produce_and_fetch(tp)
        return ProduceResult(ErrorCode.none, info.first_offset, info.last_offset,
                             info.log_append_time, partition.log_start_offset)

    # -- DeleteRecords ----------------------------------------------------------------------
    def delete_records(self, timeout_ms: int, offsets: dict[TopicPartition, int]
                       ) -> dict[TopicPartition, DeleteRecordsResult] | asyncio.Future[Any]:
        """Kafka's deleteRecords: move each partition's log start offset up to the offset
        asked for (-1: the high watermark) on its leader, then answer once every live
        replica's log start offset (the low watermark) reached it (DelayedDeleteRecords):
        followers take the leader's from their fetch responses. Errors per partition:
        INVALID_TOPIC_EXCEPTION (internal topic), UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE (negative or beyond the high watermark),
        POLICY_VIOLATION (cleanup.policy without delete)."""
        results = {tp: self._delete_records_on_leader(tp, offset)
                   for tp, offset in offsets.items()}
        if not any(r.error == ErrorCode.none and r.low_watermark < r.requested_offset
                   for r in results.values()):
            return results
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        op = DelayedDeleteRecords(timeout_ms, self, results, future)
        self.delete_records_purgatory.try_complete_else_watch(op, list(results))
        return future

    def _delete_records_on_leader(self, tp: TopicPartition, offset: int) -> DeleteRecordsResult:
        if tp[0] in INTERNAL_TOPICS:
            return DeleteRecordsResult(ErrorCode.invalid_topic_exception)
        partition = self.partitions.get((tp[0], tp[1]))
        if partition is None:
            return DeleteRecordsResult(
                ErrorCode.not_leader_or_follower
                if self.metadata_cache.partition(tp[0], tp[1]) is not None
                else ErrorCode.unknown_topic_or_partition)
        try:
            requested = partition.delete_records_on_leader(offset)
        except Exception as exc:
            code = error_code_for(exc)
            if code == ErrorCode.unknown_server_error:
                log.exception("Error processing delete records operation on partition %s-%d",
                              *tp)
            else:
                log.debug("DeleteRecords on %s-%d failed: %s", tp[0], tp[1], exc)
            return DeleteRecordsResult(code)
        return DeleteRecordsResult(ErrorCode.none,
                                   partition.low_watermark(self.is_broker_alive), requested)

    def is_broker_alive(self, broker_id: int) -> bool:
        return broker_id in self.metadata_cache.brokers

    def _on_log_start_moved(self, partition: Partition) -> None:
        """A log start offset moved (DeleteRecords here or on the leader): write
        log-start-offset-checkpoint soon (once for the moves of one loop iteration) rather
        than at the next periodic checkpoint, so a crash does not bring deleted records
        back."""
        if self._log_start_checkpoint_due or self._shut_down:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a caller outside the broker): write it now
            self._checkpoint_log_starts()
            return
        self._log_start_checkpoint_due = True
        loop.call_soon(self._checkpoint_log_starts)

    def _checkpoint_log_starts(self) -> None:
        self._log_start_checkpoint_due = False
        if self._shut_down:
            return
        try:
            self.log_manager.checkpoint_recovery_points_and_log_start_offsets()
        except Exception:
            log.exception("Error writing the log start offset checkpoint")

    # -- fetch ------------------------------------------------------------------------------
    def fetch_messages(self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                       requests: dict[TopicPartition, FetchRequestPartition],
                       isolation_level: int = READ_UNCOMMITTED,
                       client_metadata: ClientMetadata | None = None
                       ) -> dict[TopicPartition, FetchResult] | asyncio.Future[Any]:
        """Read the requested partitions (Kafka's fetchMessages); consumers read below the
        HW, read_committed ones (`isolation_level` 1) below the last stable offset, with the
        aborted transactions of what they read. A consumer with `client_metadata` (Fetch v11+,
        KIP-392) may read from a follower, and a leader with a replica selector may send it to
        one (`preferred_read_replica`, answered at once)."""
        results = self.read_from_local_log(replica_id, max_bytes, requests, isolation_level,
                                           client_metadata)
        if replica_id >= 0:
            self._update_follower_fetch_states(replica_id, requests, results)
        total = sum(r.size for r in results.values())
        errors = any(r.error != ErrorCode.none or r.preferred_read_replica >= 0
                     or r.diverging_epoch is not None for r in results.values())
        if max_wait_ms <= 0 or not requests or total >= min_bytes or errors:
            return results
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        op = DelayedFetch(max_wait_ms, self, replica_id, min_bytes, max_bytes, requests, future,
                          isolation_level, client_metadata)
        op.seed(results)  # the read above is its first check
        self.purgatories.watch_fetch(op, replica_id, requests)
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
            if result.error != ErrorCode.none or result.diverging_epoch is not None:
                continue  # a diverging follower's fetch offset is not its position
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
            if outcome.expand_isr_to is not None:
                self.isr_manager.expand_isr(partition, outcome.expand_isr_to, replica_id)
            if outcome.high_watermark_moved:
                self.purgatories.check_produce_and_fetch(tp)
            if outcome.log_start_moved:
                self.delete_records_purgatory.check_and_complete(tp)
            if result.high_watermark != partition.high_watermark:  # (the LSO moves with it)
                result.high_watermark = partition.high_watermark
                result.last_stable_offset = partition.last_stable_offset

    def read_from_local_log(self, replica_id: int, max_bytes: int,
                            requests: dict[TopicPartition, FetchRequestPartition],
                            isolation_level: int = READ_UNCOMMITTED,
                            client_metadata: ClientMetadata | None = None
                            ) -> dict[TopicPartition, FetchResult]:
        """Read the requested partitions as they are now (local_reads.LocalLogReader)."""
        return self.local_reads.read_from_local_log(replica_id, max_bytes, requests,
                                                    isolation_level, client_metadata)

    def bytes_between(self, partition: Partition, start: int, end: int, cap: int) -> int:
        """Bytes readable from `start` up to `end` (at most `cap`), for DelayedFetch."""
        try:
            data = partition.log.read(start, cap, max_offset=end, min_one_message=True)
        except Exception:
            return cap
        return sum(r.size for r in data.regions)

"""The controller-to-broker APIs (ZooKeeper era): LeaderAndIsr (4), StopReplica (5),
UpdateMetadata (6), and ControlledShutdown (7, broker-to-controller).

kio lacks these; `protocol/interbroker.py` encodes them. This module decodes, refuses a
controller's request built for an earlier registration of this broker (KIP-380: its broker
epoch is older than this broker's; STALE_BROKER_EPOCH), hands the others to the replica manager
(which refuses a stale controller epoch, S-5.3, and applies the rest) or to the controller, and
encodes the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...controller.controller import KafkaController
from ...controller.events import ControlledShutdown, ControllerMovedError, StaleBrokerEpochError
from ...protocol import interbroker as ib
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..configs.topic_config_manager import TopicConfigManager
from ..gc_freeze import freeze_long_lived, paused_gc
from ..metadata_cache import MetadataCache
from ..network import CloseConnection, Connection
from ..replication.replica_manager import ReplicaManager
from .authz import allowed

log = logging.getLogger("odradek.apis.interbroker")
_NAMES = {4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown"}
UNKNOWN_BROKER_EPOCH = -1  # a request's (a controller before KIP-380) or the broker's own


def _unknown_broker_epoch() -> int:
    return UNKNOWN_BROKER_EPOCH


class InterBrokerApis:
    def __init__(self, replica_manager: ReplicaManager, metadata_cache: MetadataCache,
                 topic_config_manager: TopicConfigManager, controller: KafkaController,
                 flush_checkpoints: Callable[[], Awaitable[Any]],
                 authorizer: Authorizer = ALLOW_ALL,
                 broker_epoch: Callable[[], int] | None = None) -> None:
        self.authorizer = authorizer
        # KIP-380: this broker's epoch now, the czxid of its current registration (-1 before
        # it knows it); Kafka keeps it in the controller object (KafkaController.brokerEpoch)
        self.current_broker_epoch = broker_epoch or _unknown_broker_epoch
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.topic_config_manager = topic_config_manager
        self.controller = controller
        self.flush_checkpoints = flush_checkpoints

    def handle(self, conn: Connection, payload: bytes) -> Any:
        try:
            with paused_gc():  # (10,000 partition states decoded: no collection midway)
                key, version, cid, msg = ib.decode_request_frame(payload)
        except ib.DecodeError as exc:
            raise CloseConnection(str(exc)) from None
        if self.authorizer.enabled and not allowed(
                self.authorizer, conn, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                request_name=_NAMES.get(key, str(key))):  # Kafka: CLUSTER_ACTION on cluster
            denied = int(ErrorCode.cluster_authorization_failed)
            response: Any = {4: ib.LeaderAndIsrResponse, 5: ib.StopReplicaResponse,
                             6: ib.UpdateMetadataResponse}.get(
                key, ib.ControlledShutdownResponse)(error_code=denied)
            return ib.encode_response_frame(key, version, cid, response)
        if key in (4, 5, 6) and self.is_broker_epoch_stale(key, msg, cid):
            return ib.encode_response_frame(key, version, cid,
                                            _stale_broker_epoch_response(key, version, msg))
        if key == 4:
            return self._leader_and_isr(key, version, cid, msg)
        if key == 5:
            return ib.encode_response_frame(key, version, cid, self.stop_replica(msg))
        if key == 6:
            with paused_gc():
                return ib.encode_response_frame(key, version, cid, self.update_metadata(msg, cid))
        return self._controlled_shutdown(key, version, cid, msg)

    def is_broker_epoch_stale(self, key: int, req: Any, correlation_id: int = -1) -> bool:
        """Kafka's isBrokerEpochStale: the controller built `req` for an earlier registration
        of this broker (a broker that restarted fast can be sent what was meant for its
        previous life). Unknown on either side (-1) is never stale, nor is an epoch newer than
        the broker's own: the controller can read a new registration before its broker does."""
        in_request = req.broker_epoch
        current = self.current_broker_epoch()
        if UNKNOWN_BROKER_EPOCH in (in_request, current) or in_request >= current:
            return False
        log.info("Refusing %s request (correlation id %d) of controller %d with the stale broker "
                 "epoch %d: the current broker epoch is %d", _NAMES[key], correlation_id,
                 req.controller_id, in_request, current)
        return True

    async def _leader_and_isr(self, key: int, version: int, cid: int, req: Any) -> bytes:
        # A broker needs a topic's config overrides before it creates the topic's first log.
        await self.topic_config_manager.ensure_loaded(req.topic_names())
        partitions_before = len(self.replica_manager.partitions)
        with paused_gc():
            response = self.leader_and_isr(req, cid, version)
        freeze_long_lived(len(self.replica_manager.partitions) - partitions_before,
                          collect=False, reason="LeaderAndIsr")  # many new partitions: long-lived
        # The new leader epochs are in the caches already; their leader-epoch-checkpoint files
        # are written by the log manager's writer thread, coalesced and off the loop. Answer
        # once they are on disk, as Kafka answers after LeaderEpochFileCache.assign's flush.
        waited = time.perf_counter()
        await self.flush_checkpoints()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("LeaderAndIsr correlationId %d: its leader epoch checkpoints were on disk "
                      "%.3f s after it was applied", cid, time.perf_counter() - waited)
        return ib.encode_response_frame(key, version, cid, response)

    def leader_and_isr(self, req: Any, correlation_id: int, version: int = 5) -> Any:
        error, results = self.replica_manager.become_leader_or_followers(req, correlation_id)
        if error != ErrorCode.none:
            return ib.LeaderAndIsrResponse(error_code=error)
        errors = [ib.LeaderAndIsrPartitionError(topic_name=tp.topic,
                                                partition_index=tp.partition,
                                                error_code=int(code))
                  for tp, code in results]
        if version < 5:  # v0-4 list partition errors; v5+ group them by topic id
            return ib.LeaderAndIsrResponse(error_code=0, partition_errors=tuple(errors))
        topic_ids = {t.topic_name: t.topic_id for t in getattr(req, "topic_states", ())}
        by_topic: dict[str, list[Any]] = {}
        for e in errors:
            by_topic.setdefault(e.topic_name, []).append(e)
        return ib.LeaderAndIsrResponse(
            error_code=0,
            topics=tuple(ib.LeaderAndIsrTopicError(topic_id=topic_ids.get(t, uuid.UUID(int=0)),
                                                   partition_errors=tuple(es))
                         for t, es in by_topic.items()))

    def stop_replica(self, req: Any) -> Any:
        partitions = _stop_replica_partitions(req)
        error, results = self.replica_manager.stop_replicas(
            req.controller_id, req.controller_epoch, partitions)
        if error != ErrorCode.none:
            return ib.StopReplicaResponse(error_code=error)
        # A deleted topic's overrides go once its last partition has left the metadata cache.
        deleted_topics = {tp.topic for (tp, _epoch, delete), (_tp, code)
                          in zip(partitions, results, strict=True)
                          if delete and code == ErrorCode.none}
        for topic in sorted(deleted_topics):
            if self.metadata_cache.topic(topic) is None:
                self.topic_config_manager.forget(topic)
        return ib.StopReplicaResponse(error_code=0, partition_errors=tuple(
            ib.StopReplicaPartitionError(topic_name=tp.topic, partition_index=tp.partition,
                                         error_code=int(code)) for tp, code in results))

    def update_metadata(self, req: Any, correlation_id: int = -1) -> Any:
        return ib.UpdateMetadataResponse(
            error_code=self.replica_manager.maybe_update_metadata_cache(req, correlation_id))

    async def _controlled_shutdown(self, key: int, version: int, cid: int, req: Any) -> bytes:
        controller = self.controller
        if not controller.is_active:
            return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
                error_code=ErrorCode.not_controller))
        reply: asyncio.Future[set[TopicPartition]] = asyncio.get_running_loop().create_future()
        controller.events.put(ControlledShutdown(broker_id=req.broker_id,
                                                 broker_epoch=req.broker_epoch, reply=reply))
        try:
            remaining = await reply
        except ControllerMovedError:
            return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
                error_code=ErrorCode.not_controller))
        except StaleBrokerEpochError:  # KIP-380: sent by an older registration of the broker
            return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
                error_code=ErrorCode.stale_broker_epoch))
        except KeyError:
            return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
                error_code=ErrorCode.broker_not_available))
        except Exception:  # Kafka's Errors.forException: the store unreachable midway, ...
            return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
                error_code=ErrorCode.unknown_server_error))
        return ib.encode_response_frame(key, version, cid, ib.ControlledShutdownResponse(
            error_code=0, remaining_partitions=tuple(
                ib.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
                for tp in sorted(remaining))))


def _stale_broker_epoch_response(key: int, version: int, req: Any) -> Any:
    """The answer to a request refused for its stale broker epoch: nothing applied. A
    LeaderAndIsr's names each of its partitions with the error too, as Kafka's error response
    does."""
    code = int(ErrorCode.stale_broker_epoch)
    if key == 5:
        return ib.StopReplicaResponse(error_code=code)
    if key == 6:
        return ib.UpdateMetadataResponse(error_code=code)
    if version < 5:
        return ib.LeaderAndIsrResponse(error_code=code, partition_errors=tuple(
            ib.LeaderAndIsrPartitionError(topic_name=topic, partition_index=s.partition_index,
                                          error_code=code)
            for topic, s in req.named_partition_states()))
    return ib.LeaderAndIsrResponse(error_code=code, topics=tuple(
        ib.LeaderAndIsrTopicError(topic_id=t.topic_id, partition_errors=tuple(
            ib.LeaderAndIsrPartitionError(partition_index=s.partition_index, error_code=code)
            for s in t.partition_states))
        for t in req.topic_states))


def _stop_replica_partitions(req: Any) -> list[tuple[TopicPartition, int, bool]]:
    """(partition, leader epoch, delete) of a StopReplica of any version."""
    if req.topic_states:
        return [(TopicPartition(t.topic_name, p.partition_index), p.leader_epoch,
                 p.delete_partition) for t in req.topic_states for p in t.partition_states]
    if req.topics:
        return [(TopicPartition(t.name, i), -1, req.delete_partitions) for t in req.topics
                for i in t.partition_indexes]
    return [(TopicPartition(p.topic_name, p.partition_index), -1, req.delete_partitions)
            for p in req.ungrouped_partitions]

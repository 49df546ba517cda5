"""ListOffsets (key 2). v1-v7: earliest (-2), latest (-1: the HW for consumers, the last stable
offset for read_committed ones, v2+ isolation_level 1), max timestamp (-3, v7) and offsets by
timestamp through the time index (S-2.3), never at or past that bound (Kafka's
lastFetchableOffset).

v0 (protocol/list_offsets_v0.py) is Kafka 2.8's handleListOffsetRequestV0: up to
`max_num_offsets` offsets per partition, largest first, from the log end offset and the segments'
base offsets dated by their files' modification times (Log.legacy_offsets_before); a consumer's
(replica id -1) are capped at the high watermark, and a debugging client (-2) may ask a follower.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol import list_offsets_v0 as v0
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...storage.errors import KafkaStorageError
from ..network import Connection
from ..replication.partition import Partition
from ..replication.results import READ_COMMITTED, READ_UNCOMMITTED
from .authz import allowed_names
from .replica_api import ReplicaManagerApi

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2  # Kafka's ListOffsetsRequest constants


class ListOffsetsApi(ReplicaManagerApi):
    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        if isinstance(request, v0.ListOffsetsRequestV0):
            return v0.encode_response_frame(header.correlation_id, self.handle_v0(request, conn))
        mod = response_module(type(request))
        topics = []
        names = [t.name for t in request.topics]
        authorized = allowed_names(self.authorizer, conn, AclOperation.DESCRIBE,
                                   ResourceType.TOPIC, names, request_name="ListOffsets") \
            if self.authorizer.enabled else None
        for t in request.topics:
            parts = []
            for p in t.partitions:
                if authorized is not None and t.name not in authorized:
                    parts.append(make(mod.ListOffsetsPartitionResponse,
                                      partition_index=p.partition_index,
                                      error_code=ErrorCode.topic_authorization_failed,
                                      timestamp=-1, offset=-1, leader_epoch=-1,
                                      old_style_offsets=()))
                    continue
                partition, error = self.replica_manager.leader_partition_or_error(
                    (t.name, p.partition_index), getattr(p, "current_leader_epoch", -1))
                ts, offset, epoch = -1, -1, -1
                if partition is not None and error == ErrorCode.none:
                    ts, offset, epoch = _lookup(partition, p.timestamp, request.replica_id,
                                                int(getattr(request, "isolation_level", 0)))
                parts.append(make(mod.ListOffsetsPartitionResponse,
                                  partition_index=p.partition_index, error_code=error,
                                  timestamp=ts, offset=offset, leader_epoch=epoch,
                                  old_style_offsets=()))
            topics.append(make(mod.ListOffsetsTopicResponse, name=t.name,
                               partitions=tuple(parts)))
        return encode_response(type(request), header.correlation_id,
                               make(mod.ListOffsetsResponse, throttle_time=0,
                                    topics=tuple(topics)))

    def handle_v0(self, request: v0.ListOffsetsRequestV0, conn: Connection
                  ) -> v0.ListOffsetsResponseV0:
        """Kafka's handleListOffsetRequestV0: authorized topics first, then the unauthorized
        ones (TOPIC_AUTHORIZATION_FAILED), each partition with its offsets or its error."""
        authorized = allowed_names(self.authorizer, conn, AclOperation.DESCRIBE,
                                   ResourceType.TOPIC, [t.name for t in request.topics],
                                   request_name="ListOffsets")
        topics = [v0.ListOffsetsTopicResponseV0(name=t.name, partitions=tuple(
            self._partition_v0(t.name, p, request.replica_id) for p in t.partitions))
            for t in request.topics if t.name in authorized]
        topics += [v0.ListOffsetsTopicResponseV0(name=t.name, partitions=tuple(
            v0.ListOffsetsPartitionResponseV0(partition_index=p.partition_index,
                                              error_code=ErrorCode.topic_authorization_failed)
            for p in t.partitions)) for t in request.topics if t.name not in authorized]
        return v0.ListOffsetsResponseV0(topics=tuple(topics))

    def _partition_v0(self, topic: str, p: v0.ListOffsetsPartitionV0, replica_id: int
                      ) -> v0.ListOffsetsPartitionResponseV0:
        partition, error = self.replica_manager.leader_partition_or_error(
            (topic, p.partition_index), require_leader=replica_id != DEBUGGING_REPLICA_ID)
        offsets: list[int] = []
        if partition is not None and error == ErrorCode.none:
            try:
                offsets = partition.log.legacy_offsets_before(p.timestamp, p.max_num_offsets)
            except KafkaStorageError:
                error = ErrorCode.kafka_storage_error
            except ValueError:  # a negative max_num_offsets: Kafka fails the partition so
                error = ErrorCode.unknown_server_error
            hw = partition.high_watermark
            if replica_id == CONSUMER_REPLICA_ID and any(o > hw for o in offsets):
                offsets = [hw, *(o for o in offsets if o <= hw)]
        return v0.ListOffsetsPartitionResponseV0(
            partition_index=p.partition_index, error_code=error,
            old_style_offsets=tuple(offsets) if error == ErrorCode.none else ())


def _lookup(partition: Partition, timestamp: int, replica_id: int,
            isolation_level: int = READ_UNCOMMITTED) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) for one ListOffsets query."""
    log = partition.log
    epoch = partition.leader_epoch
    if timestamp == EARLIEST:
        return -1, log.log_start_offset, epoch
    fetchable = (partition.last_stable_offset if isolation_level == READ_COMMITTED
                 else partition.high_watermark)
    if timestamp == LATEST:
        end = log.log_end_offset if replica_id >= 0 else fetchable
        return -1, end, epoch
    if timestamp == MAX_TIMESTAMP:
        found = log.offset_for_timestamp(MAX_TIMESTAMP)
        if found is None or found.offset >= fetchable:
            return -1, -1, -1
        return found.timestamp, found.offset, epoch
    found = log.offset_for_timestamp(timestamp)
    if found is None or found.offset >= fetchable:
        return -1, -1, -1
    return found.timestamp, found.offset, epoch

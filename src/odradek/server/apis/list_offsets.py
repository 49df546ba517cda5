"""ListOffsets (key 2), v1-v7: earliest (-2), latest (-1: the HW for consumers, the last stable
offset for read_committed ones, v2+ isolation_level 1), max timestamp (-3, v7) and offsets by
timestamp through the time index (S-2.3), never at or past that bound (Kafka's
lastFetchableOffset)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection
from ..replication.partition import Partition
from ..replication.replica_manager import ReplicaManager
from ..replication.results import READ_COMMITTED, READ_UNCOMMITTED
from .authz import allowed_names

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


class ListOffsetsApi:
    def __init__(self, replica_manager: ReplicaManager, authorizer: Authorizer = ALLOW_ALL
                 ) -> None:
        self.replica_manager = replica_manager
        self.authorizer = authorizer

    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
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

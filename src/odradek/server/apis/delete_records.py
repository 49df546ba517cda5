"""DeleteRecords (key 21), v0-2: move partitions' log start offsets forward
(``kafka-delete-records.sh``, ``AdminClient.deleteRecords``).

Kafka's ``handleDeleteRecordsRequest``: a topic without DELETE (when an authorizer is on) answers
TOPIC_AUTHORIZATION_FAILED, a partition the metadata does not know UNKNOWN_TOPIC_OR_PARTITION,
both with low watermark -1; the others go to ``ReplicaManager.delete_records``, which answers
once every live replica's log start offset reached the offset asked for, or at the request's
timeout (REQUEST_TIMED_OUT for the partitions still waiting)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..metadata_cache import MetadataCache
from ..network import Connection
from ..replication.replica_manager import ReplicaManager
from ..replication.results import DeleteRecordsResult
from .authz import allowed_names


class DeleteRecordsApi:
    def __init__(self, replica_manager: ReplicaManager, metadata_cache: MetadataCache,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer

    def handle(self, header: Any, request: Any, conn: Connection) -> bytes | Awaitable[bytes]:
        names = [t.name for t in request.topics]
        deletable = allowed_names(self.authorizer, conn, AclOperation.DELETE, ResourceType.TOPIC,
                                  names, request_name="DeleteRecords")
        refused: dict[TopicPartition, DeleteRecordsResult] = {}
        offsets: dict[TopicPartition, int] = {}
        for t in request.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                if t.name not in deletable:
                    refused[tp] = DeleteRecordsResult(ErrorCode.topic_authorization_failed)
                elif self.metadata_cache.partition(t.name, tp.partition) is None:
                    refused[tp] = DeleteRecordsResult(ErrorCode.unknown_topic_or_partition)
                else:
                    offsets[tp] = int(p.offset)
        if not offsets:
            return _respond(header, request, refused)
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        outcome = self.replica_manager.delete_records(timeout_ms, offsets)
        if isinstance(outcome, dict):
            return _respond(header, request, {**outcome, **refused})
        return _await_and_respond(header, request, outcome, refused)


async def _await_and_respond(header: Any, request: Any,
                             outcome: Awaitable[dict[TopicPartition, DeleteRecordsResult]],
                             refused: dict[TopicPartition, DeleteRecordsResult]) -> bytes:
    results = await outcome
    return _respond(header, request, {**results, **refused})


def _respond(header: Any, request: Any,
             results: dict[TopicPartition, DeleteRecordsResult]) -> bytes:
    mod = response_module(type(request))
    by_topic: dict[str, list[Any]] = {}
    for tp, r in results.items():
        by_topic.setdefault(tp.topic, []).append(make(
            mod.DeleteRecordsPartitionResult, partition_index=tp.partition,
            low_watermark=r.low_watermark,
            error_code=r.error))
    topics = tuple(make(mod.DeleteRecordsTopicResult, name=name, partitions=tuple(parts))
                   for name, parts in by_topic.items())
    return encode_response(type(request), header.correlation_id,
                           make(mod.DeleteRecordsResponse, throttle_time=0, topics=topics))

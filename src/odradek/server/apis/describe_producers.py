"""DescribeProducers (key 61), v0 (KIP-664, Kafka 3.0): the active producers of partitions, as
their replica here knows them -- each producer's id, epoch, last sequence and timestamp, the
coordinator epoch of its last marker and the first offset of its open transaction (-1: none).
What ``kafka-transactions.sh describe-producers`` shows, to find a hanging transaction.

Kafka's ``handleDescribeProducersRequest``: per topic, an invalid name answers
INVALID_TOPIC_EXCEPTION, no READ on the topic TOPIC_AUTHORIZATION_FAILED (when an authorizer is
on), a topic the metadata does not know UNKNOWN_TOPIC_OR_PARTITION, for all its partitions. Then
per partition (``ReplicaManager.activeProducerState``): a partition hosted here (leader or
follower: an admin client may ask a given replica) answers its log's producer state; one not
hosted answers NOT_LEADER_OR_FOLLOWER when the metadata knows it, else
UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ...storage.producer_state import ProducerStateEntry
from ..metadata_cache import MetadataCache
from ..network import Connection
from ..replication.replica_manager import ReplicaManager
from ..topic_names import validate_topic_name
from .authz import allowed_names


def topic_error(name: str, readable: set[str], cache: MetadataCache) -> ErrorCode | None:
    """The error answered for every partition of topic `name` (None: ask each partition)."""
    try:
        validate_topic_name(name)
    except ValueError:
        return ErrorCode.invalid_topic_exception
    if name not in readable:
        return ErrorCode.topic_authorization_failed
    if cache.topic(name) is None:
        return ErrorCode.unknown_topic_or_partition
    return None


def producer_state(mod: Any, entry: ProducerStateEntry) -> Any:
    """One ``ProducerState`` of the response (Kafka's ``Log.activeProducers``)."""
    return make(mod.ProducerState, producer_id=entry.producer_id,
                producer_epoch=entry.producer_epoch, last_sequence=entry.last_seq,
                last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
                current_txn_start_offset=entry.current_txn_first_offset)


class DescribeProducersApi:
    def __init__(self, replica_manager: ReplicaManager, metadata_cache: MetadataCache,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer

    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        names = {t.name for t in request.topics}
        readable = allowed_names(self.authorizer, conn, AclOperation.READ, ResourceType.TOPIC,
                                 names, request_name="DescribeProducers")
        topics = []
        for t in request.topics:
            error = topic_error(t.name, readable, self.metadata_cache)
            parts = [self._partition(mod, t.name, int(index), error)
                     for index in t.partition_indexes]
            topics.append(make(mod.TopicResponse, name=t.name, partitions=tuple(parts)))
        return encode_response(type(request), header.correlation_id,
                               make(mod.DescribeProducersResponse, throttle_time=0,
                                    topics=tuple(topics)))

    def _partition(self, mod: Any, topic: str, index: int, error: ErrorCode | None) -> Any:
        if error is None:
            partition = self.replica_manager.partitions.get((topic, index))
            if partition is not None:
                producers = partition.log.producer_state.producers
                return make(mod.PartitionResponse, partition_index=index,
                            error_code=ErrorCode.none, error_message=None,
                            active_producers=tuple(producer_state(mod, e)
                                                   for e in producers.values()))
            error = (ErrorCode.not_leader_or_follower
                     if self.metadata_cache.partition(topic, index) is not None
                     else ErrorCode.unknown_topic_or_partition)
        return make(mod.PartitionResponse, partition_index=index, error_code=error,
                    error_message=None, active_producers=())

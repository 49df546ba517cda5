"""WriteTxnMarkers (key 27), v0-v1: the transaction coordinator asks the leaders of a
transaction's partitions to write its COMMIT or ABORT marker (KIP-98; Kafka's
``KafkaApis.handleWriteTxnMarkersRequest``).

Requires CLUSTER_ACTION on the cluster (else every partition answers
CLUSTER_AUTHORIZATION_FAILED). Per marker, one control batch (producer id and epoch, the
coordinator's epoch, ``control_records.build_end_txn_marker_batch``) is appended to each named
partition with acks=-1, the COORDINATOR origin and ``request.timeout.ms``, as Kafka does: the
partition's producer state refuses a marker with an older producer epoch
(INVALID_PRODUCER_EPOCH) or an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED); a
partition not hosted here answers UNKNOWN_TOPIC_OR_PARTITION, one led elsewhere
NOT_LEADER_OR_FOLLOWER. Once a marker's appends are done, the ``__consumer_offsets`` partitions
that took it are handed to the group coordinator (``handle_txn_completion``), which makes the
transaction's offset commits visible (COMMIT) or drops them (ABORT); if that fails those
partitions answer UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...common.clock import now_ms
from ...protocol.codec import encode_response, make, response_module
from ...protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ...storage.append_origin import AppendOrigin
from ..network import Connection
from ..replication.replica_manager import ReplicaManager
from ..replication.results import ProduceResult
from .authz import allowed

log = logging.getLogger("odradek.apis.write_txn_markers")

OFFSETS_TOPIC = "__consumer_offsets"


class TxnCompletionListener(Protocol):
    """What WriteTxnMarkers tells the group coordinator (``GroupCoordinator``)."""

    def handle_txn_completion(self, producer_id: int, offsets_partitions: set[int],
                              is_commit: bool) -> None: ...



class WriteTxnMarkersApi:
    def __init__(self, replica_manager: ReplicaManager, group_coordinator: TxnCompletionListener,
                 request_timeout_ms: int, authorizer: Authorizer = ALLOW_ALL,
                 clock: Callable[[], int] = now_ms) -> None:
        self.replica_manager = replica_manager
        self.group_coordinator = group_coordinator
        self.request_timeout_ms = request_timeout_ms
        self.authorizer = authorizer
        self.clock = clock

    async def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        results: list[tuple[int, dict[TopicPartition, ErrorCode]]] = []
        if not allowed(self.authorizer, conn, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                       request_name="WriteTxnMarkers"):
            for marker in request.markers:
                results.append((int(marker.producer_id), {
                    TopicPartition(t.name, int(i)): ErrorCode.cluster_authorization_failed
                    for t in marker.topics for i in t.partition_indexes}))
            return _encode(header, request, results)
        outcomes = await asyncio.gather(*(self._write_marker(m) for m in request.markers))
        for marker, errors in zip(request.markers, outcomes, strict=True):
            results.append((int(marker.producer_id), errors))
        return _encode(header, request, results)

    async def _write_marker(self, marker: Any) -> dict[TopicPartition, ErrorCode]:
        """Append one marker to each of its partitions; then the offsets partitions go to the
        group coordinator. Returns each partition's error."""
        pid, is_commit = int(marker.producer_id), bool(marker.transaction_result)
        end_marker = EndTransactionMarker(
            ControlRecordType.COMMIT if is_commit else ControlRecordType.ABORT,
            int(marker.coordinator_epoch))
        now = self.clock()
        entries: dict[TopicPartition, bytes | None] = {}
        for t in marker.topics:
            for index in t.partition_indexes:
                entries[TopicPartition(t.name, int(index))] = build_end_txn_marker_batch(
                    end_marker, pid, int(marker.producer_epoch), timestamp_ms=now)
        if not entries:
            return {}
        outcome = self.replica_manager.append_records(-1, self.request_timeout_ms, entries,
                                                      origin=AppendOrigin.COORDINATOR)
        appended: dict[TopicPartition, ProduceResult] = (
            outcome if isinstance(outcome, dict) else await outcome)
        errors = {tp: r.error for tp, r in appended.items()}
        offsets = {tp.partition for tp, code in errors.items()
                   if tp.topic == OFFSETS_TOPIC and code == ErrorCode.none}
        if offsets:
            try:
                self.group_coordinator.handle_txn_completion(pid, offsets, is_commit)
            except Exception:
                log.exception("Completing the offsets of producer %d's transaction failed", pid)
                for index in offsets:
                    errors[TopicPartition(OFFSETS_TOPIC, index)] = ErrorCode.unknown_server_error
        return errors


def _encode(header: Any, request: Any,
            results: list[tuple[int, dict[TopicPartition, ErrorCode]]]) -> bytes:
    mod = response_module(type(request))
    markers = []
    for pid, errors in results:
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), code in errors.items():
            by_topic.setdefault(topic, []).append(make(
                mod.WritableTxnMarkerPartitionResult, partition_index=index, error_code=code))
        markers.append(make(mod.WritableTxnMarkerResult, producer_id=pid, topics=tuple(
            make(mod.WritableTxnMarkerTopicResult, name=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items())))
    return encode_response(type(request), header.correlation_id,
                           make(mod.WriteTxnMarkersResponse, markers=tuple(markers)))

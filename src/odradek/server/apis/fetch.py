"""Fetch (key 1), v4-v12, for consumers (replica id -1: below the HW) and followers.

Consumers with isolation_level 1 (read_committed, KIP-98) read below the last stable offset and
get the aborted transactions of what they read; read_uncommitted consumers and followers get
null aborted transactions, as Kafka answers. Every partition carries the real last stable offset.

Fetch sessions (KIP-227) are declined by answering session id 0, which clients take as "use
full fetches"; an incremental fetch naming a session id gets FETCH_SESSION_ID_NOT_FOUND. The
response is encoded by hand so record data goes from the log files with sendfile.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from ...metrics.stats import TopicStats
from ...protocol.fetch_response import PartitionData, encode_fetch_response
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection, Response
from ..replica_manager import (
    EXPECTED_ERRORS,
    FetchRequestPartition,
    FetchResult,
    ReplicaManager,
)
from ..replica_selector import ClientMetadata
from .authz import allowed, allowed_names


class FetchApi:
    def __init__(self, replica_manager: ReplicaManager, fetch_max_bytes: int,
                 authorizer: Authorizer = ALLOW_ALL, topic_stats: TopicStats | None = None
                 ) -> None:
        self.replica_manager = replica_manager
        # BytesOutPerSec (consumers), ReplicationBytesOutPerSec (followers), failed fetches
        self.topic_stats = topic_stats if topic_stats is not None else TopicStats()
        self.fetch_max_bytes = fetch_max_bytes
        self.authorizer = authorizer

    def handle(self, header: Any, request: Any, conn: Connection
               ) -> Response | Awaitable[Response]:
        denied: frozenset[str] = frozenset()
        auth = self.authorizer
        if auth.enabled:
            names = [t.topic for t in request.topics]
            if request.replica_id >= 0:  # a follower: CLUSTER_ACTION on the cluster
                ok = allowed(auth, conn, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                             request_name="Fetch")
                denied = frozenset() if ok else frozenset(names)
            else:  # a consumer: READ on each topic
                denied = frozenset(names) - allowed_names(auth, conn, AclOperation.READ,
                                                          ResourceType.TOPIC, names,
                                                          request_name="Fetch")
        return _handle(self.replica_manager, self.fetch_max_bytes, header, request, denied,
                       self.topic_stats)


def _handle(replica_manager: ReplicaManager, fetch_max_bytes: int, header: Any, request: Any,
            denied: frozenset[str] = frozenset(), stats: TopicStats | None = None
            ) -> Response | Awaitable[Response]:
    version = header.request_api_version
    if getattr(request, "session_id", 0) != 0:
        return encode_fetch_response(version, header.correlation_id, [],
                                     error_code=ErrorCode.fetch_session_id_not_found)
    requests: dict[tuple[str, int], FetchRequestPartition] = {}
    refused: dict[tuple[str, int], FetchResult] = {}
    for t in request.topics:
        if t.topic in denied:
            for p in t.partitions:
                refused[(t.topic, p.partition)] = FetchResult(
                    ErrorCode.topic_authorization_failed)
            continue
        for p in t.partitions:
            requests[(t.topic, p.partition)] = FetchRequestPartition(
                p.fetch_offset, p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1), getattr(p, "log_start_offset", -1))
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    max_bytes = min(getattr(request, "max_bytes", 2**31 - 1), fetch_max_bytes)
    if refused and not requests:
        return _respond(version, header.correlation_id, refused)
    isolation = int(getattr(request, "isolation_level", 0))
    # KIP-392: a consumer's Fetch v11+ carries its client.rack (Kafka's ClientMetadata)
    client = (ClientMetadata(getattr(request, "rack_id", "") or "")
              if version >= 11 and request.replica_id < 0 else None)
    outcome = replica_manager.fetch_messages(
        request.replica_id, max_wait_ms, request.min_bytes, max_bytes, requests, isolation,
        client)
    if isinstance(outcome, dict):
        results = {**refused, **outcome} if refused else outcome
        if stats is not None and stats.enabled:
            _record(stats, results, request.replica_id >= 0)
        return _respond(version, header.correlation_id, results)
    return _await_and_respond(version, header.correlation_id, outcome, refused, stats,
                              request.replica_id >= 0)


async def _await_and_respond(version: int, correlation_id: int, outcome: Awaitable[Any],
                             refused: dict[tuple[str, int], FetchResult] | None = None,
                             stats: TopicStats | None = None, follower: bool = False
                             ) -> list[Any]:
    results = await outcome
    results = {**refused, **results} if refused else results
    if stats is not None and stats.enabled:
        _record(stats, results, follower)
    return _respond(version, correlation_id, results)


def _record(stats: TopicStats, results: dict[tuple[str, int], FetchResult],
            follower: bool) -> None:
    none = ErrorCode.none
    for (topic, _), r in results.items():
        error = r.error
        if error == none:
            stats.record_fetch(topic, r.size, follower, False)
        elif error not in EXPECTED_ERRORS and not follower:
            stats.record_fetch(topic, 0, follower, True)


def _respond(version: int, correlation_id: int,
             results: dict[tuple[str, int], FetchResult]) -> list[Any]:
    topics: list[tuple[str, list[PartitionData]]] = []
    for (topic, index), r in results.items():
        if not topics or topics[-1][0] != topic:
            topics.append((topic, []))
        topics[-1][1].append(PartitionData(
            index, int(r.error), r.high_watermark, r.last_stable_offset, r.log_start_offset,
            r.regions, r.size, preferred_read_replica=r.preferred_read_replica,
            aborted_transactions=r.aborted_transactions))
    return encode_fetch_response(version, correlation_id, topics)

"""Fetch (key 1), v4-v16, for consumers (replica id -1: below the HW) and followers.

From v13 topics are named by id (KIP-516): they are resolved against the metadata cache before
anything else (server/fetch_topic_ids.py; an unknown id gets UNKNOWN_TOPIC_ID), everything after
works on names, and the response names them by the ids asked. A v12+ fetch's
`last_fetched_epoch` lets the leader answer `diverging_epoch` (KIP-320); from v16, partitions
answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH name the current leader and the response
its endpoint (KIP-951).

Consumers with isolation_level 1 (read_committed, KIP-98) read below the last stable offset and
get the aborted transactions of what they read; read_uncommitted consumers and followers get
null aborted transactions, as Kafka answers. Every partition carries the real last stable offset.

Fetch sessions (KIP-227) are declined by answering session id 0, which clients take as "use
full fetches"; an incremental fetch naming a session id gets FETCH_SESSION_ID_NOT_FOUND. The
response is encoded by hand so record data goes from the log files with sendfile.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ...metrics.stats import TopicStats
from ...protocol.fetch_response import (
    NODE_ENDPOINTS_FROM,
    NodeEndpoint,
    PartitionData,
    encode_fetch_response,
)
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..fetch_topic_ids import ResolvedTopics, replica_id_of, resolve_topics
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
        version = header.request_api_version
        resolved = resolve_topics(version, request.topics,
                                  self.replica_manager.metadata_cache.topic_name)
        if auth.enabled:
            names = [n for n in resolved.names if n is not None]
            if replica_id_of(request) >= 0:  # a follower: CLUSTER_ACTION on the cluster
                ok = allowed(auth, conn, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                             request_name="Fetch")
                denied = frozenset() if ok else frozenset(names)
            else:  # a consumer: READ on each topic
                denied = frozenset(names) - allowed_names(auth, conn, AclOperation.READ,
                                                          ResourceType.TOPIC, names,
                                                          request_name="Fetch")
        return _handle(self.replica_manager, self.fetch_max_bytes, header, request, denied,
                       self.topic_stats, resolved, getattr(conn, "listener_name", None))


def _handle(replica_manager: ReplicaManager, fetch_max_bytes: int, header: Any, request: Any,
            denied: frozenset[str] = frozenset(), stats: TopicStats | None = None,
            resolved: ResolvedTopics | None = None, listener: str | None = None
            ) -> Response | Awaitable[Response]:
    version = header.request_api_version
    if resolved is None:
        resolved = resolve_topics(version, request.topics,
                                  replica_manager.metadata_cache.topic_name)
    out = _Encoder(version, header.correlation_id, resolved, request.topics, replica_manager,
                   listener)
    if getattr(request, "session_id", 0) != 0:
        return encode_fetch_response(version, header.correlation_id, [],
                                     error_code=ErrorCode.fetch_session_id_not_found)
    replica_id = replica_id_of(request)
    requests: dict[tuple[str, int], FetchRequestPartition] = {}
    refused: dict[tuple[str, int], FetchResult] = {}
    for t, name in zip(request.topics, resolved.names, strict=True):
        if name is None:
            continue  # an unknown topic id: UNKNOWN_TOPIC_ID (added by the encoder)
        if name in denied:
            for p in t.partitions:
                refused[(name, p.partition)] = FetchResult(
                    ErrorCode.topic_authorization_failed)
            continue
        topic_id = resolved.ids.get(name)
        for p in t.partitions:
            requests[(name, p.partition)] = FetchRequestPartition(
                p.fetch_offset, p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1), getattr(p, "log_start_offset", -1),
                getattr(p, "last_fetched_epoch", -1), topic_id)
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    max_bytes = min(getattr(request, "max_bytes", 2**31 - 1), fetch_max_bytes)
    if not requests:
        return out.respond(refused)
    isolation = int(getattr(request, "isolation_level", 0))
    # KIP-392: a consumer's Fetch v11+ carries its client.rack (Kafka's ClientMetadata)
    client = (ClientMetadata(getattr(request, "rack_id", "") or "")
              if version >= 11 and replica_id < 0 else None)
    outcome = replica_manager.fetch_messages(
        replica_id, max_wait_ms, request.min_bytes, max_bytes, requests, isolation, client)
    if isinstance(outcome, dict):
        results = {**refused, **outcome} if refused else outcome
        if stats is not None and stats.enabled:
            _record(stats, results, replica_id >= 0)
        return out.respond(results)
    return _await_and_respond(out, outcome, refused, stats, replica_id >= 0)


async def _await_and_respond(out: _Encoder, outcome: Awaitable[Any],
                             refused: dict[tuple[str, int], FetchResult] | None = None,
                             stats: TopicStats | None = None, follower: bool = False
                             ) -> list[Any]:
    results = await outcome
    results = {**refused, **results} if refused else results
    if stats is not None and stats.enabled:
        _record(stats, results, follower)
    return out.respond(results)


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
             results: dict[tuple[str, int], FetchResult],
             ids: Mapping[str, uuid.UUID] | None = None,
             unknown_ids: list[tuple[uuid.UUID, list[int]]] | None = None,
             leader_of: Any = None) -> list[Any]:
    """Encode the results; from v13 topics are named by `ids` and the partitions of
    `unknown_ids` answered UNKNOWN_TOPIC_ID; from v16 `leader_of(topic, partition)` gives the
    (leader id, epoch, endpoint or None) a NOT_LEADER / FENCED partition names (KIP-951)."""
    topics: list[tuple[str | uuid.UUID, list[PartitionData]]] = []
    last: str | None = None
    nodes: dict[int, NodeEndpoint] = {}
    kip951 = version >= NODE_ENDPOINTS_FROM and leader_of is not None
    for (topic, index), r in results.items():
        if last != topic or not topics:
            topics.append((topic if ids is None else ids[topic], []))
            last = topic
        current_leader = None
        if kip951 and r.error in _NAMES_LEADER:
            leader_id, epoch, node = leader_of(topic, index)
            current_leader = (leader_id, epoch)
            if node is not None:
                nodes[node.node_id] = node
        topics[-1][1].append(PartitionData(
            index, int(r.error), r.high_watermark, r.last_stable_offset, r.log_start_offset,
            r.regions, r.size, r.diverging_epoch, r.preferred_read_replica,
            r.aborted_transactions, current_leader))
    for topic_id, partitions in unknown_ids or ():
        topics.append((topic_id, [PartitionData(i, ErrorCode.unknown_topic_id)
                                  for i in partitions]))
    return encode_fetch_response(version, correlation_id, topics,
                                 node_endpoints=list(nodes.values()))


_NAMES_LEADER = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


class _Encoder:
    """The response's ends that depend on the request: the ids topics are named by (v13+),
    the unknown ids, and the listener whose endpoints v16 names."""

    def __init__(self, version: int, correlation_id: int, resolved: ResolvedTopics,
                 topics: Any, replica_manager: ReplicaManager,
                 listener: str | None = None) -> None:
        self.version = version
        self.correlation_id = correlation_id
        self.resolved = resolved
        self.topics = topics
        self.replica_manager = replica_manager
        self.listener = listener

    def respond(self, results: dict[tuple[str, int], FetchResult]) -> list[Any]:
        by_id = self.version >= 13
        return _respond(self.version, self.correlation_id, results,
                        self.resolved.ids if by_id else None,
                        self.resolved.unknown(self.topics) if by_id else None,
                        self._leader_of if self.version >= NODE_ENDPOINTS_FROM else None)

    def _leader_of(self, topic: str, index: int) -> tuple[int, int, NodeEndpoint | None]:
        """Kafka's getCurrentLeader: the metadata cache's leader and epoch of the partition,
        and its endpoint on this request's listener."""
        cache = self.replica_manager.metadata_cache
        info = cache.partition(topic, index)
        if info is None:
            return -1, -1, None
        broker = cache.brokers.get(info.leader)
        endpoint = None
        if broker is not None and self.listener is not None:
            endpoint = broker.endpoint(self.listener)
        if endpoint is None:
            return info.leader, info.leader_epoch, None
        return info.leader, info.leader_epoch, NodeEndpoint(info.leader, endpoint.host,
                                                            endpoint.port, broker.rack)

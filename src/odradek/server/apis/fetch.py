"""Fetch (key 1), v4-v16, for consumers (replica id -1: below the HW) and followers.

Consumers with isolation_level 1 (read_committed, KIP-98) read below the last stable offset and
get the aborted transactions of what they read; read_uncommitted consumers and followers get
null aborted transactions, as Kafka answers. Every partition carries the real last stable offset.

A request goes decode -> fetch session (server/fetch_session.py, KIP-227: full, incremental,
sessionless or a session error such as FETCH_SESSION_ID_NOT_FOUND) -> authorization of the
partitions to read -> the replica manager (maybe a delayed fetch) -> the session's filter (an
incremental answer holds only the partitions with news) -> encode. The response is encoded by
hand so record data goes from the log files with sendfile.

From v13 topics are named by id (KIP-516): the decode step resolves them against the metadata
cache (server/replication/fetch_topic_ids.py; an unknown id is answered UNKNOWN_TOPIC_ID),
everything after
works on names, and the encode step names topics by their ids again. A v12+ fetch's
`last_fetched_epoch` lets the replica answer `diverging_epoch` (KIP-320); from v16, partitions
answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH name the current leader, and the
response its endpoint (KIP-951).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ...common import clock
from ...metrics.stats import TopicStats
from ...protocol.fetch_response import (
    NODE_ENDPOINTS_FROM,
    TOPIC_IDS_FROM,
    NodeEndpoint,
    PartitionData,
    encode_fetch_response,
)
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..fetch_session import (
    DEFAULT_SLOTS,
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    FetchSessionCache,
    new_context,
)
from ..network import Connection, Response
from ..replication.fetch_topic_ids import ZERO_ID, ResolvedTopics, replica_id_of, resolve_topics
from ..replication.replica_manager import ReplicaManager
from ..replication.replica_selector import ClientMetadata
from ..replication.results import EXPECTED_ERRORS, FetchRequestPartition, FetchResult
from .authz import allowed, allowed_names

TopicPartition = tuple[str, int]
#: the topics (of those asked) a request may not read
Deny = Callable[[Iterable[str]], frozenset[str]]
#: a consumer's quota (KIP-219): given the answer's size in bytes, the throttle time in ms
#: (0: not throttled); it records the size and mutes the connection itself
Throttle = Callable[[int], int]


def _monotonic_ms() -> int:
    return int(clock.monotonic() * 1000)


class FetchApi:
    def __init__(self, replica_manager: ReplicaManager, fetch_max_bytes: int,
                 authorizer: Authorizer = ALLOW_ALL, topic_stats: TopicStats | None = None,
                 session_slots: int = DEFAULT_SLOTS,
                 clock_ms: Callable[[], int] = _monotonic_ms,
                 fetch_throttle: Callable[[Any, Connection, int], int] | None = None) -> None:
        self.replica_manager = replica_manager
        # BytesOutPerSec (consumers), ReplicationBytesOutPerSec (followers), failed fetches
        self.topic_stats = topic_stats if topic_stats is not None else TopicStats()
        self.fetch_max_bytes = fetch_max_bytes
        self.authorizer = authorizer
        # KIP-227: max.incremental.fetch.session.cache.slots sessions at most
        self.sessions: FetchSessionCache[FetchRequestPartition] = FetchSessionCache(
            session_slots)
        self.clock_ms = clock_ms
        # client quotas: (header, conn, answer size) -> throttle ms, asked before the session
        # is updated (Kafka's getResponseSize, then getThrottledResponse when throttled)
        self.fetch_throttle = fetch_throttle

    def handle(self, header: Any, request: Any, conn: Connection
               ) -> Response | Awaitable[Response]:
        auth = self.authorizer
        deny: Deny | None = None
        replica_id = replica_id_of(request)  # v15+: in replica_state (KIP-903)
        if auth.enabled:
            def deny(names: Iterable[str]) -> frozenset[str]:
                names = list(dict.fromkeys(names))
                if replica_id >= 0:  # a follower: CLUSTER_ACTION on the cluster
                    ok = allowed(auth, conn, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                 request_name="Fetch")
                    return frozenset() if ok else frozenset(names)
                # a consumer: READ on each topic
                return frozenset(names) - allowed_names(auth, conn, AclOperation.READ,
                                                        ResourceType.TOPIC, names,
                                                        request_name="Fetch")
        quota = self.fetch_throttle
        throttle: Throttle | None = None
        if quota is not None and replica_id < 0:
            def throttle(size: int) -> int:
                return quota(header, conn, size)
        return _handle(self.replica_manager, self.fetch_max_bytes, header, request, deny,
                       self.topic_stats, self.sessions, self.clock_ms, throttle,
                       getattr(conn, "listener_name", None))


def fetch_data(request: Any, resolved: ResolvedTopics | None = None
               ) -> dict[TopicPartition, FetchRequestPartition]:
    """The request's partitions, as the replica manager reads them; v13+ topics by the names
    their ids resolved to (`resolved`; unknown ids left out: UNKNOWN_TOPIC_ID)."""
    names = resolved.names if resolved is not None else [t.topic for t in request.topics]
    ids = resolved.ids if resolved is not None else {}
    out: dict[TopicPartition, FetchRequestPartition] = {}
    for t, name in zip(request.topics, names, strict=True):
        if name is None:
            continue
        topic_id = ids.get(name)
        for p in t.partitions:
            out[(name, p.partition)] = FetchRequestPartition(
                p.fetch_offset, p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1), getattr(p, "log_start_offset", -1),
                getattr(p, "last_fetched_epoch", -1), topic_id)
    return out


def forgotten(request: Any, name_of: Callable[[uuid.UUID], str | None] | None = None
              ) -> list[TopicPartition]:
    """An incremental request's `forgotten_topics_data` (v7+; by topic id from v13, resolved
    with `name_of`, an unknown id forgetting nothing)."""
    out: list[TopicPartition] = []
    for t in getattr(request, "forgotten_topics_data", ()) or ():
        if name_of is None:
            name = t.topic
        else:
            name = name_of(t.topic_id) if t.topic_id is not None else None
        if name is not None:
            out += [(name, p) for p in t.partitions]
    return out


def fetch_context(sessions: FetchSessionCache[FetchRequestPartition] | None, request: Any,
                  data: Mapping[TopicPartition, FetchRequestPartition], now_ms: int,
                  version: int, topic_ids: Mapping[str, Any] | None = None,
                  name_of: Callable[[uuid.UUID], str | None] | None = None
                  ) -> FetchContext[Any, Any]:
    """The request's session step (v7+ carry a session id and epoch; older ones, and a broker
    without a cache, are sessionless). `topic_ids`: name -> id of a v13+ request's topics,
    stored beside the session's partitions."""
    session_id = getattr(request, "session_id", INVALID_SESSION_ID)
    epoch = getattr(request, "session_epoch", FINAL_EPOCH)
    if sessions is None:  # sessions declined: answer fully, session id 0
        session_id, epoch, sessions = INVALID_SESSION_ID, FINAL_EPOCH, FetchSessionCache(0)
    return new_context(sessions, session_id, epoch, data,
                       forgotten(request, name_of if version >= TOPIC_IDS_FROM else None),
                       replica_id_of(request) >= 0, now_ms, topic_ids,
                       version >= TOPIC_IDS_FROM)


def _handle(replica_manager: ReplicaManager, fetch_max_bytes: int, header: Any, request: Any,
            deny: Deny | None = None, stats: TopicStats | None = None,
            sessions: FetchSessionCache[FetchRequestPartition] | None = None,
            clock_ms: Callable[[], int] = _monotonic_ms, throttle: Throttle | None = None,
            listener: str | None = None) -> Response | Awaitable[Response]:
    version = header.request_api_version
    cache = replica_manager.metadata_cache
    resolved = resolve_topics(version, request.topics, cache.topic_name)  # KIP-516
    context = fetch_context(sessions, request, fetch_data(request, resolved), clock_ms(),
                            version, resolved.ids or None, cache.topic_name)
    to_read = context.partitions()
    requests: dict[TopicPartition, FetchRequestPartition] = {}
    refused: dict[TopicPartition, FetchResult] = {}
    denied = deny(tp[0] for tp in to_read) if deny is not None and to_read else frozenset()
    for tp, req in to_read.items():
        if tp[0] in denied:
            refused[tp] = FetchResult(ErrorCode.topic_authorization_failed)
        else:
            requests[tp] = req
    replica_id = replica_id_of(request)
    follower = replica_id >= 0
    respond = _Responder(version, header.correlation_id, context, refused, stats, follower,
                         clock_ms, throttle,
                         _Naming(version, resolved, request.topics, replica_manager, listener))
    if not requests:
        return respond({})
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    max_bytes = min(getattr(request, "max_bytes", 2**31 - 1), fetch_max_bytes)
    isolation = int(getattr(request, "isolation_level", 0))
    # KIP-392: a consumer's Fetch v11+ carries its client.rack (Kafka's ClientMetadata)
    client = (ClientMetadata(getattr(request, "rack_id", "") or "")
              if version >= 11 and not follower else None)
    outcome = replica_manager.fetch_messages(
        replica_id, max_wait_ms, request.min_bytes, max_bytes, requests, isolation, client)
    if isinstance(outcome, dict):
        return respond(outcome)
    return _await_and_respond(outcome, respond)


class _Responder:
    """The last steps once the read is done (at once or when a delayed fetch completes):
    refused partitions added, the session's filter, stats, encoding."""

    __slots__ = ("clock_ms", "context", "correlation_id", "follower", "naming", "refused",
                 "stats", "throttle", "version")

    def __init__(self, version: int, correlation_id: int, context: FetchContext[Any, Any],
                 refused: dict[TopicPartition, FetchResult], stats: TopicStats | None,
                 follower: bool, clock_ms: Callable[[], int],
                 throttle: Throttle | None = None, naming: _Naming | None = None) -> None:
        self.naming = naming
        self.throttle = throttle
        self.version = version
        self.correlation_id = correlation_id
        self.context = context
        self.refused = refused
        self.stats = stats
        self.follower = follower
        self.clock_ms = clock_ms

    def __call__(self, results: dict[TopicPartition, FetchResult]) -> list[Any]:
        if self.refused:
            results = {**results, **self.refused}
        context = self.context
        naming = self.naming
        if self.throttle is not None:  # a consumer under quotas: the size decides first
            size = _frame_size(_respond(self.version, self.correlation_id,
                                        context.preview(results), naming=naming))
            throttle_ms = self.throttle(size)
            if throttle_ms > 0:  # an empty answer; the session still owes this one's news
                empty = context.throttled()
                return _respond(self.version, self.correlation_id, {}, empty.error,
                                empty.session_id, throttle_ms)
        answer = context.answer(results, self.clock_ms())
        stats = self.stats
        if stats is not None and stats.enabled:
            _record(stats, answer.partitions, self.follower)
        return _respond(self.version, self.correlation_id, answer.partitions,
                        answer.error, answer.session_id, naming=naming)


async def _await_and_respond(outcome: Awaitable[Any], respond: _Responder) -> list[Any]:
    return respond(await outcome)


def _record(stats: TopicStats, results: dict[TopicPartition, FetchResult],
            follower: bool) -> None:
    none = ErrorCode.none
    for (topic, _), r in results.items():
        error = r.error
        if error == none:
            stats.record_fetch(topic, r.size, follower, False)
        elif error not in EXPECTED_ERRORS and not follower:
            stats.record_fetch(topic, 0, follower, True)


def _respond(version: int, correlation_id: int, results: dict[TopicPartition, FetchResult],
             error_code: int = 0, session_id: int = 0, throttle_time_ms: int = 0,
             naming: _Naming | None = None) -> list[Any]:
    """Encode; with `naming` (v13+: topics by id, unknown ids; v16: current leaders)."""
    # one entry per topic (an incremental answer's order may interleave topics)
    topics: dict[str, list[PartitionData]] = {}
    nodes: dict[int, NodeEndpoint] = {}
    kip951 = naming is not None and version >= NODE_ENDPOINTS_FROM
    for (topic, index), r in results.items():
        parts = topics.get(topic)
        if parts is None:
            parts = topics[topic] = []
        current_leader = None
        if kip951 and r.error in _NAMES_LEADER:
            assert naming is not None
            leader_id, epoch, node = naming.leader_of(topic, index)
            current_leader = (leader_id, epoch)
            if node is not None:
                nodes[node.node_id] = node
        parts.append(PartitionData(
            index, int(r.error), r.high_watermark, r.last_stable_offset, r.log_start_offset,
            r.regions, r.size, r.diverging_epoch, r.preferred_read_replica,
            r.aborted_transactions, current_leader))
    named: list[tuple[str | uuid.UUID, list[PartitionData]]] = list(topics.items())
    if naming is not None and version >= TOPIC_IDS_FROM:
        named = [(naming.id_of(topic), parts) for topic, parts in topics.items()]
        if not error_code:  # (a session error answers no partition)
            named += [(topic_id, [PartitionData(i, ErrorCode.unknown_topic_id)
                                  for i in partitions])
                      for topic_id, partitions in naming.unknown]
    return encode_fetch_response(version, correlation_id, named,
                                 throttle_time_ms=throttle_time_ms,
                                 error_code=int(error_code), session_id=session_id,
                                 node_endpoints=list(nodes.values()))


_NAMES_LEADER = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


class _Naming:
    """What the answer's encoding needs of the request (KIP-516, KIP-951): each topic's id
    (the request's, else the metadata cache's: an incremental answer may hold partitions of
    earlier requests), the request's unknown ids, and the listener whose endpoint names a
    partition's current leader."""

    __slots__ = ("listener", "replica_manager", "resolved", "unknown")

    def __init__(self, version: int, resolved: ResolvedTopics, topics: Any,
                 replica_manager: ReplicaManager, listener: str | None) -> None:
        self.resolved = resolved
        self.unknown = resolved.unknown(topics) if version >= TOPIC_IDS_FROM else []
        self.replica_manager = replica_manager
        self.listener = listener

    def id_of(self, topic: str) -> uuid.UUID:
        topic_id = self.resolved.ids.get(topic)
        if topic_id is None:
            info = self.replica_manager.metadata_cache.topic(topic)
            topic_id = info.topic_id if info is not None else ZERO_ID
        return topic_id

    def leader_of(self, topic: str, index: int) -> tuple[int, int, NodeEndpoint | None]:
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
        if broker is None or endpoint is None:
            return info.leader, info.leader_epoch, None
        return info.leader, info.leader_epoch, NodeEndpoint(info.leader, endpoint.host,
                                                            endpoint.port, broker.rack)


def _frame_size(parts: list[Any]) -> int:
    return sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.size
               for p in parts)

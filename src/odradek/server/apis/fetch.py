"""Fetch (key 1), v4-v12, for consumers (replica id -1: below the HW) and followers.

Consumers with isolation_level 1 (read_committed, KIP-98) read below the last stable offset and
get the aborted transactions of what they read; read_uncommitted consumers and followers get
null aborted transactions, as Kafka answers. Every partition carries the real last stable offset.

A request goes decode -> fetch session (server/fetch_session.py, KIP-227: full, incremental,
sessionless or a session error such as FETCH_SESSION_ID_NOT_FOUND) -> authorization of the
partitions to read -> the replica manager (maybe a delayed fetch) -> the session's filter (an
incremental answer holds only the partitions with news) -> encode. The response is encoded by
hand so record data goes from the log files with sendfile.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ...metrics.stats import TopicStats
from ...protocol.fetch_response import PartitionData, encode_fetch_response
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
from ..replica_manager import (
    EXPECTED_ERRORS,
    FetchRequestPartition,
    FetchResult,
    ReplicaManager,
)
from ..replica_selector import ClientMetadata
from .authz import allowed, allowed_names

TopicPartition = tuple[str, int]
#: the topics (of those asked) a request may not read
Deny = Callable[[Iterable[str]], frozenset[str]]
#: a consumer's quota (KIP-219): given the answer's size in bytes, the throttle time in ms
#: (0: not throttled); it records the size and mutes the connection itself
Throttle = Callable[[int], int]


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


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
        if auth.enabled:
            def deny(names: Iterable[str]) -> frozenset[str]:
                names = list(dict.fromkeys(names))
                if request.replica_id >= 0:  # a follower: CLUSTER_ACTION on the cluster
                    ok = allowed(auth, conn, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                 request_name="Fetch")
                    return frozenset() if ok else frozenset(names)
                # a consumer: READ on each topic
                return frozenset(names) - allowed_names(auth, conn, AclOperation.READ,
                                                        ResourceType.TOPIC, names,
                                                        request_name="Fetch")
        quota = self.fetch_throttle
        throttle: Throttle | None = None
        if quota is not None and request.replica_id < 0:
            def throttle(size: int) -> int:
                return quota(header, conn, size)
        return _handle(self.replica_manager, self.fetch_max_bytes, header, request, deny,
                       self.topic_stats, self.sessions, self.clock_ms, throttle)


def fetch_data(request: Any) -> dict[TopicPartition, FetchRequestPartition]:
    """The request's partitions, as the replica manager reads them."""
    out: dict[TopicPartition, FetchRequestPartition] = {}
    for t in request.topics:
        for p in t.partitions:
            out[(t.topic, p.partition)] = FetchRequestPartition(
                p.fetch_offset, p.partition_max_bytes,
                getattr(p, "current_leader_epoch", -1), getattr(p, "log_start_offset", -1))
    return out


def forgotten(request: Any) -> list[TopicPartition]:
    """An incremental request's `forgotten_topics_data` (v7+)."""
    return [(t.topic, p) for t in getattr(request, "forgotten_topics_data", ()) or ()
            for p in t.partitions]


def fetch_context(sessions: FetchSessionCache[FetchRequestPartition] | None, request: Any,
                  data: Mapping[TopicPartition, FetchRequestPartition], now_ms: int,
                  version: int, topic_ids: Mapping[str, Any] | None = None
                  ) -> FetchContext[Any, Any]:
    """The request's session step (v7+ carry a session id and epoch; older ones, and a broker
    without a cache, are sessionless). `topic_ids`: name -> id of a v13+ request's topics,
    stored beside the session's partitions."""
    session_id = getattr(request, "session_id", INVALID_SESSION_ID)
    epoch = getattr(request, "session_epoch", FINAL_EPOCH)
    if sessions is None:  # sessions declined: answer fully, session id 0
        session_id, epoch, sessions = INVALID_SESSION_ID, FINAL_EPOCH, FetchSessionCache(0)
    return new_context(sessions, session_id, epoch, data,
                       forgotten(request), request.replica_id >= 0, now_ms, topic_ids,
                       version >= 13)


def _handle(replica_manager: ReplicaManager, fetch_max_bytes: int, header: Any, request: Any,
            deny: Deny | None = None, stats: TopicStats | None = None,
            sessions: FetchSessionCache[FetchRequestPartition] | None = None,
            clock_ms: Callable[[], int] = _monotonic_ms, throttle: Throttle | None = None
            ) -> Response | Awaitable[Response]:
    version = header.request_api_version
    context = fetch_context(sessions, request, fetch_data(request), clock_ms(), version)
    to_read = context.partitions()
    requests: dict[TopicPartition, FetchRequestPartition] = {}
    refused: dict[TopicPartition, FetchResult] = {}
    denied = deny(tp[0] for tp in to_read) if deny is not None and to_read else frozenset()
    for tp, req in to_read.items():
        if tp[0] in denied:
            refused[tp] = FetchResult(ErrorCode.topic_authorization_failed)
        else:
            requests[tp] = req
    follower = request.replica_id >= 0
    respond = _Responder(version, header.correlation_id, context, refused, stats, follower,
                         clock_ms, throttle)
    if not requests:
        return respond({})
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    max_bytes = min(getattr(request, "max_bytes", 2**31 - 1), fetch_max_bytes)
    isolation = int(getattr(request, "isolation_level", 0))
    # KIP-392: a consumer's Fetch v11+ carries its client.rack (Kafka's ClientMetadata)
    client = (ClientMetadata(getattr(request, "rack_id", "") or "")
              if version >= 11 and not follower else None)
    outcome = replica_manager.fetch_messages(
        request.replica_id, max_wait_ms, request.min_bytes, max_bytes, requests, isolation,
        client)
    if isinstance(outcome, dict):
        return respond(outcome)
    return _await_and_respond(outcome, respond)


class _Responder:
    """The last steps once the read is done (at once or when a delayed fetch completes):
    refused partitions added, the session's filter, stats, encoding."""

    __slots__ = ("clock_ms", "context", "correlation_id", "follower", "refused", "stats",
                 "throttle", "version")

    def __init__(self, version: int, correlation_id: int, context: FetchContext[Any, Any],
                 refused: dict[TopicPartition, FetchResult], stats: TopicStats | None,
                 follower: bool, clock_ms: Callable[[], int],
                 throttle: Throttle | None = None) -> None:
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
        if self.throttle is not None:  # a consumer under quotas: the size decides first
            size = _frame_size(_respond(self.version, self.correlation_id,
                                        context.preview(results)))
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
                        answer.error, answer.session_id)


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
             error_code: int = 0, session_id: int = 0, throttle_time_ms: int = 0) -> list[Any]:
    # one entry per topic (an incremental answer's order may interleave topics)
    topics: dict[str, list[PartitionData]] = {}
    for (topic, index), r in results.items():
        parts = topics.get(topic)
        if parts is None:
            parts = topics[topic] = []
        parts.append(PartitionData(
            index, int(r.error), r.high_watermark, r.last_stable_offset, r.log_start_offset,
            r.regions, r.size, preferred_read_replica=r.preferred_read_replica,
            aborted_transactions=r.aborted_transactions))
    return encode_fetch_response(version, correlation_id, list(topics.items()),
                                 throttle_time_ms=throttle_time_ms,
                                 error_code=int(error_code), session_id=session_id)


def _frame_size(parts: list[Any]) -> int:
    return sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.size
               for p in parts)

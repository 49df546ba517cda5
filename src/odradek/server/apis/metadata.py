"""Metadata (key 3): brokers, controller, topics and partition leadership from the metadata
cache; auto topic creation per `auto.create.topics.enable` (the topic is answered with
LEADER_NOT_AVAILABLE while its leaders are being made, as Kafka does).

A broker serves from the moment it registers, because the controller reaches it through the same
listener; a Metadata request that arrives before the controller's first UpdateMetadata waits for it
(bounded), instead of answering from a cache that knows only this broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..metadata_cache import MetadataCache
from ..network import Connection
from ..topic_names import validate_topic_name
from .authz import allowed, allowed_names

log = logging.getLogger("odradek.apis.metadata")

UNAUTHORIZED_OPS = -2147483648
INITIAL_METADATA_WAIT_S = 5.0  # normally milliseconds: UpdateMetadata follows registration

# The operations Kafka reports in the authorized-operations bit fields (KIP-430).
TOPIC_OPS = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
             AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
             AclOperation.ALTER_CONFIGS)
CLUSTER_OPS = (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
               AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
               AclOperation.DESCRIBE)


def authorized_operations(authorizer: Authorizer, conn: Any, resource_type: ResourceType,
                          name: str, operations: tuple[AclOperation, ...]) -> int:
    """Kafka's authorizedOperations: one bit (1 << code) per operation allowed."""
    bits = 0
    for op in operations:
        if allowed(authorizer, conn, op, resource_type, name, request_name="Metadata",
                   log_if_allowed=False, log_if_denied=False):
            bits |= 1 << int(op)
    return bits


class MetadataApi:
    def __init__(self, metadata_cache: MetadataCache, auto_create_topics_enable: bool,
                 auto_create_topics: Callable[[list[str]], Awaitable[None]],
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.authorizer = authorizer
        self.metadata_cache = metadata_cache
        self.auto_create_topics_enable = auto_create_topics_enable
        self.auto_create_topics = auto_create_topics

    def handle(self, header: Any, request: Any, conn: Connection) -> Any:
        if not self.metadata_cache.initialized.is_set():
            return self._answer_once_initialized(header, request, conn)
        return self._answer(header, request, conn)

    async def _answer_once_initialized(self, header: Any, request: Any, conn: Any) -> Any:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.metadata_cache.initialized.wait(),
                                   INITIAL_METADATA_WAIT_S)
        return self._answer(header, request, conn)

    def _answer(self, header: Any, request: Any, conn: Any = None) -> Any:
        cache = self.metadata_cache
        unknown_ids = by_id = None
        if header.request_api_version >= 12 and request.topics and any(
                t.topic_id is not None and t.topic_id.int for t in request.topics):
            # KIP-516 (v12): a lookup by topic id; unknown ids are answered UNKNOWN_TOPIC_ID
            ids = {t.topic_id for t in request.topics if t.topic_id is not None
                   and t.topic_id.int}
            by_id = {i: n for i in ids if (n := cache.topic_name(i)) is not None}
            unknown_ids = [i for i in ids if i not in by_id]
        asked = request if by_id is None else _RequestByName(request, sorted(by_id.values()))
        names, errors, to_create = _topics_to_answer(
            cache, header.request_api_version, asked, self.auto_create_topics_enable)
        hidden: set[str] = set()
        auth = self.authorizer
        if auth.enabled:
            names, to_create, hidden = self._authorize(conn, asked, names, errors, to_create)
        topic_ops = cluster_ops = None
        if getattr(request, "include_topic_authorized_operations", False):
            def topic_ops(name: str) -> int:
                return authorized_operations(auth, conn, ResourceType.TOPIC, name, TOPIC_OPS)
        # Kafka 2.8: v8-10 only, and 0 unless the principal may DESCRIBE the cluster
        if (getattr(request, "include_cluster_authorized_operations", False)
                and 8 <= header.request_api_version <= 10):
            cluster_ops = 0
            if allowed(auth, conn, AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster",
                       request_name="Metadata"):
                cluster_ops = authorized_operations(auth, conn, ResourceType.CLUSTER,
                                                    "kafka-cluster", CLUSTER_OPS)
        if to_create:
            task = asyncio.ensure_future(self.auto_create_topics(to_create))
            task.add_done_callback(_log_failure)
        return encode_response(type(request), header.correlation_id,
                               build_response(cache, request, names, errors, hidden,
                                              topic_ops, cluster_ops,
                                              listener=conn.listener_name,
                                              unknown_ids=unknown_ids,
                                              by_id=by_id is not None))

    def _authorize(self, conn: Any, request: Any, names: list[str], errors: dict[str, ErrorCode],
                   to_create: list[str]) -> tuple[list[str], list[str], set[str]]:
        """Kafka's rules: without DESCRIBE a topic is left out of an all-topics answer, and a
        requested one is TOPIC_AUTHORIZATION_FAILED whether it exists or not; auto-creation
        needs CREATE on the cluster or the topic."""
        auth = self.authorizer
        all_topics = request.topics is None or (not request.topics
                                                and not isinstance(request, _RequestByName))
        described = allowed_names(auth, conn, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                  [n for n in names if n is not None],
                                  request_name="Metadata", log_if_denied=not all_topics)
        if all_topics:
            return [n for n in names if n in described], [], set()
        hidden = {n for n in names if n is not None and n not in described}
        for n in hidden:
            errors[n] = ErrorCode.topic_authorization_failed
        to_create = [n for n in to_create if n not in hidden]
        if to_create and not allowed(auth, conn, AclOperation.CREATE, ResourceType.CLUSTER,
                                     request_name="Metadata", log_if_denied=False):
            creatable = allowed_names(auth, conn, AclOperation.CREATE, ResourceType.TOPIC,
                                      to_create, request_name="Metadata")
            for n in to_create:
                if n not in creatable:
                    errors[n] = ErrorCode.topic_authorization_failed
            to_create = [n for n in to_create if n in creatable]
        return names, to_create, hidden


class _RequestByName:
    """A v12 request by topic ids seen as one by the names they resolved to (no topic to
    auto-create: every name is known)."""

    def __init__(self, request: Any, names: list[str]) -> None:
        self._request = request
        self.topics = [_Named(n) for n in names]
        self.allow_auto_topic_creation = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name
        self.topic_id = None


def _topics_to_answer(cache: MetadataCache, version: int, request: Any,
                      auto_create_topics_enable: bool
                      ) -> tuple[list[str], dict[str, ErrorCode], list[str]]:
    """The topics to describe, the errors of those unknown, and those to create."""
    if request.topics is None or (version == 0 and not request.topics):
        names = sorted(cache.topics)
        requested = False
    else:
        names = [t.name for t in request.topics]
        requested = True
    allow_auto = getattr(request, "allow_auto_topic_creation", True)
    to_create: list[str] = []
    errors: dict[str, ErrorCode] = {}
    for name in names:
        if name is None or name in cache.topics:
            continue
        try:
            validate_topic_name(name)
        except ValueError:
            errors[name] = ErrorCode.invalid_topic_exception
            continue
        if requested and allow_auto and auto_create_topics_enable:
            to_create.append(name)
            errors[name] = ErrorCode.leader_not_available
        else:
            errors[name] = ErrorCode.unknown_topic_or_partition
    return names, errors, to_create


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("Auto topic creation failed: %s", task.exception())


def build_response(cache: MetadataCache, request: Any, names: list[str],
                   errors: dict[str, ErrorCode], hidden: set[str] | None = None,
                   topic_ops: Callable[[str], int] | None = None,
                   cluster_ops: int | None = None, listener: str = "PLAINTEXT",
                   unknown_ids: list[uuid.UUID] | None = None, by_id: bool = False) -> Any:
    """The answer on `listener`: each broker's endpoint on that listener (brokers without it
    are left out, as Kafka does). A v12 lookup by id (`by_id`) answers first each of the
    `unknown_ids` (UNKNOWN_TOPIC_ID, no name), and names the id, not the topic, of a topic
    the principal may not describe (Kafka: ids are not sensitive, names are)."""
    mod = response_module(type(request))
    brokers = tuple(make(mod.MetadataResponseBroker, node_id=b.broker_id, host=ep.host,
                         port=ep.port, rack=b.rack)
                    for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
                    if (ep := b.endpoint(listener)) is not None)
    topics = [make(mod.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_id, name=None,
                   topic_id=i, is_internal=False, partitions=(),
                   topic_authorized_operations=UNAUTHORIZED_OPS) for i in unknown_ids or ()]
    for name in names:
        info = None if hidden and name in hidden else cache.topics.get(name)
        if info is None and by_id and hidden and name in hidden:
            t = cache.topics.get(name)
            topics.append(make(mod.MetadataResponseTopic,
                               error_code=ErrorCode.topic_authorization_failed, name=None,
                               topic_id=t.topic_id if t is not None else None,
                               is_internal=False, partitions=(),
                               topic_authorized_operations=UNAUTHORIZED_OPS))
            continue
        if info is None:
            topics.append(make(mod.MetadataResponseTopic, error_code=errors.get(
                name, ErrorCode.unknown_topic_or_partition), name=name, topic_id=None,
                is_internal=False, partitions=(),
                topic_authorized_operations=UNAUTHORIZED_OPS))
            continue
        parts = []
        for index in sorted(info.partitions):
            p = info.partitions[index]
            # Kafka 2.x also flags offline replicas with REPLICA_NOT_AVAILABLE; clients only
            # act on leader errors, and offline_replicas (v5+) says it plainly, so we don't.
            leader_alive = p.leader >= 0 and p.leader in cache.brokers
            parts.append(make(
                mod.MetadataResponsePartition,
                error_code=ErrorCode.none if leader_alive else ErrorCode.leader_not_available,
                partition_index=index, leader_id=p.leader if leader_alive else -1,
                leader_epoch=p.leader_epoch,
                replica_nodes=tuple(p.replicas), isr_nodes=tuple(p.isr),
                # the controller's offline replicas (dead brokers, KIP-112 offline log dirs)
                offline_replicas=tuple(r for r in p.replicas if r not in cache.brokers
                                       or r in p.offline_replicas)))
        topics.append(make(mod.MetadataResponseTopic, error_code=ErrorCode.none, name=name,
                           topic_id=info.topic_id, is_internal=info.internal,
                           partitions=tuple(parts),
                           topic_authorized_operations=UNAUTHORIZED_OPS if topic_ops is None
                           else topic_ops(name)))
    return make(mod.MetadataResponse, throttle_time=0, brokers=brokers,
                cluster_id=cache.cluster_id, controller_id=cache.controller_id,
                topics=tuple(topics), cluster_authorized_operations=UNAUTHORIZED_OPS
                if cluster_ops is None else cluster_ops)


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
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ..metadata_cache import MetadataCache
from ..network import Connection
from ..topic_names import validate_topic_name

log = logging.getLogger("odradek.apis.metadata")

UNAUTHORIZED_OPS = -2147483648
INITIAL_METADATA_WAIT_S = 5.0  # normally milliseconds: UpdateMetadata follows registration


class MetadataApi:
    def __init__(self, metadata_cache: MetadataCache, auto_create_topics_enable: bool,
                 auto_create_topics: Callable[[list[str]], Awaitable[None]]) -> None:
        self.metadata_cache = metadata_cache
        self.auto_create_topics_enable = auto_create_topics_enable
        self.auto_create_topics = auto_create_topics

    def handle(self, header: Any, request: Any, conn: Connection) -> Any:
        listener = getattr(conn, "listener_name", "PLAINTEXT")
        if not self.metadata_cache.initialized.is_set():
            return self._answer_once_initialized(header, request, listener)
        return self._answer(header, request, listener)

    async def _answer_once_initialized(self, header: Any, request: Any, listener: str) -> Any:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.metadata_cache.initialized.wait(),
                                   INITIAL_METADATA_WAIT_S)
        return self._answer(header, request, listener)

    def _answer(self, header: Any, request: Any, listener: str = "PLAINTEXT") -> Any:
        cache = self.metadata_cache
        names, errors, to_create = _topics_to_answer(
            cache, header.request_api_version, request, self.auto_create_topics_enable)
        if to_create:
            task = asyncio.ensure_future(self.auto_create_topics(to_create))
            task.add_done_callback(_log_failure)
        return encode_response(type(request), header.correlation_id,
                               build_response(cache, request, names, errors, listener))


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
                   errors: dict[str, ErrorCode], listener: str = "PLAINTEXT") -> Any:
    """The answer on `listener`: each broker's endpoint on that listener (brokers without it
    are left out, as Kafka does)."""
    mod = response_module(type(request))
    brokers = tuple(make(mod.MetadataResponseBroker, node_id=b.broker_id, host=ep.host,
                         port=ep.port, rack=b.rack)
                    for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
                    if (ep := b.endpoint(listener)) is not None)
    topics = []
    for name in names:
        info = cache.topics.get(name)
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
                offline_replicas=tuple(r for r in p.replicas if r not in cache.brokers)))
        topics.append(make(mod.MetadataResponseTopic, error_code=ErrorCode.none, name=name,
                           topic_id=info.topic_id, is_internal=info.internal,
                           partitions=tuple(parts),
                           topic_authorized_operations=UNAUTHORIZED_OPS))
    return make(mod.MetadataResponse, throttle_time=0, brokers=brokers,
                cluster_id=cache.cluster_id, controller_id=cache.controller_id,
                topics=tuple(topics), cluster_authorized_operations=UNAUTHORIZED_OPS)


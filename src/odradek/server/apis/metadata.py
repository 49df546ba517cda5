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
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ..network import Connection
from ..topic_names import validate_topic_name

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("odradek.apis.metadata")

UNAUTHORIZED_OPS = -2147483648
INITIAL_METADATA_WAIT_S = 5.0  # normally milliseconds: UpdateMetadata follows registration


def handle(broker: Broker, header: Any, request: Any, conn: Connection) -> Any:
    if not broker.metadata_cache.initialized.is_set():
        return _answer_once_initialized(broker, header, request)
    return _answer(broker, header, request)


async def _answer_once_initialized(broker: Broker, header: Any, request: Any) -> Any:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(broker.metadata_cache.initialized.wait(), INITIAL_METADATA_WAIT_S)
    return _answer(broker, header, request)


def _answer(broker: Broker, header: Any, request: Any) -> Any:
    version = header.request_api_version
    cache = broker.metadata_cache
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
        if requested and allow_auto and broker.config["auto.create.topics.enable"]:
            to_create.append(name)
            errors[name] = ErrorCode.leader_not_available
        else:
            errors[name] = ErrorCode.unknown_topic_or_partition
    if to_create:
        task = asyncio.ensure_future(broker.admin.auto_create_topics(to_create))
        task.add_done_callback(_log_failure)
    return encode_response(type(request), header.correlation_id,
                           build_response(broker, request, names, errors))


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("Auto topic creation failed: %s", task.exception())


def build_response(broker: Broker, request: Any, names: list[str],
                   errors: dict[str, ErrorCode]) -> Any:
    mod = response_module(type(request))
    cache = broker.metadata_cache
    brokers = tuple(make(mod.MetadataResponseBroker, node_id=b.broker_id, host=b.host,
                         port=b.port, rack=b.rack)
                    for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id))
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


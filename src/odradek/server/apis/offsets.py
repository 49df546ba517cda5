"""Committed offsets, answered by the group coordinator: OffsetCommit (8) v2-v8, OffsetFetch (9)
v1-v8, OffsetDelete (47) v0, TxnOffsetCommit (28) v0-v3.

OffsetCommit waits until the commit records are replicated (acks=-1, up to
`offsets.commit.timeout.ms`). A partition of a topic this broker does not know is answered
UNKNOWN_TOPIC_OR_PARTITION without reaching the coordinator, as in Kafka. The commit time is the
broker's clock; OffsetCommit v2-v4's retention time, when given, becomes an explicit expire
timestamp (written as offset value v1). OffsetFetch with null topics (v2+) returns every offset
of the group; v8 asks for several groups at once (KIP-709), each with its own error.

TxnOffsetCommit (KIP-98) commits offsets inside a producer's transaction: they are written to
`__consumer_offsets` now and become visible when the transaction commits (OffsetFetch with
require_stable answers UNSTABLE_OFFSET_COMMIT for them meanwhile). With an authorizer it needs
WRITE on the transactional id, then READ on the group (either denial answers every partition),
then READ on each topic. v3 (KIP-447) carries the member id, generation and group instance id,
checked by the coordinator when given. Before v2 a loading coordinator answers
COORDINATOR_NOT_AVAILABLE instead of COORDINATOR_LOAD_IN_PROGRESS (older clients, KAFKA-7296).

OffsetCommit v0/v1 (v0 stored offsets in ZooKeeper) are not served: the codec (kio, Kafka 4.x
schemas) no longer has them, and no client odradek supports sends them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.group import TopicPartition
from ...coordinator.group_coordinator import GroupCoordinator
from ...coordinator.metadata_manager import OffsetFetchResult
from ...coordinator.offsets import NO_LEADER_EPOCH, OffsetAndMetadata
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..metadata_cache import MetadataCache
from ..network import Connection
from .authz import allowed, allowed_names
from .groups import ms, resolver, when_done

DEFAULT_RETENTION_TIME = -1


class OffsetApis:
    """Committed offsets of one group coordinator; partitions this broker's metadata does not
    know are answered here."""

    def __init__(self, coordinator: GroupCoordinator, metadata_cache: MetadataCache,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.coordinator = coordinator
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer

    def _check(self, conn: Connection, group_op: AclOperation, group_id: str,
               topic_op: AclOperation, topics: list[str] | None, request_name: str
               ) -> Check:
        """(group allowed, the allowed topics among `topics`, None: every topic allowed)."""
        auth = self.authorizer
        if not auth.enabled:
            return True, None
        if not allowed(auth, conn, group_op, ResourceType.GROUP, group_id,
                       request_name=request_name):
            return False, set()
        if topics is None:
            return True, _TopicFilter(auth, conn, topic_op, request_name)
        return True, allowed_names(auth, conn, topic_op, ResourceType.TOPIC, topics,
                                   request_name=request_name)

    def handle_offset_commit(self, header: Any, request: Any, conn: Connection) -> Any:
        # Kafka: READ on the group, then READ on each topic
        check = self._check(conn, AclOperation.READ, request.group_id, AclOperation.READ,
                            [t.name for t in request.topics], "OffsetCommit")
        return _offset_commit(self.coordinator, self.metadata_cache, header, request, check)

    def handle_offset_fetch(self, header: Any, request: Any, conn: Connection) -> bytes:
        # Kafka: DESCRIBE on the group, then DESCRIBE on each topic
        def check(group_id: str, topics: Any) -> Check:
            return self._check(conn, AclOperation.DESCRIBE, group_id, AclOperation.DESCRIBE,
                               None if topics is None else [t.name for t in topics],
                               "OffsetFetch")
        return _offset_fetch(self.coordinator, header, request, check)

    def handle_offset_delete(self, header: Any, request: Any, conn: Connection) -> bytes:
        # Kafka: DELETE on the group, then READ on each topic
        check = self._check(conn, AclOperation.DELETE, request.group_id, AclOperation.READ,
                            [t.name for t in request.topics], "OffsetDelete")
        return _offset_delete(self.coordinator, self.metadata_cache, header, request, check)


    def handle_txn_offset_commit(self, header: Any, request: Any, conn: Connection) -> Any:
        auth = self.authorizer
        denied: int | None = None
        check: Check = ALLOWED
        if auth.enabled:
            topics = [t.name for t in request.topics]
            if not allowed(auth, conn, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                           request.transactional_id, request_name="TxnOffsetCommit"):
                denied = ErrorCode.transactional_id_authorization_failed
            elif not allowed(auth, conn, AclOperation.READ, ResourceType.GROUP,
                             request.group_id, request_name="TxnOffsetCommit"):
                denied = ErrorCode.group_authorization_failed
            else:
                check = True, allowed_names(auth, conn, AclOperation.READ, ResourceType.TOPIC,
                                            topics, request_name="TxnOffsetCommit")
        return _txn_offset_commit(self.coordinator, self.metadata_cache, header, request,
                                  check, denied)


class _TopicFilter:
    """Membership test of the topics allowed, decided as they come (OffsetFetch of every
    committed offset of a group: the topics are known only once fetched)."""

    def __init__(self, auth: Authorizer, conn: Connection, operation: AclOperation,
                 request_name: str) -> None:
        self.auth, self.conn, self.operation, self.request_name = (
            auth, conn, operation, request_name)

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and allowed(
            self.auth, self.conn, self.operation, ResourceType.TOPIC, topic,
            request_name=self.request_name, log_if_denied=False)


Check = tuple[bool, "set[str] | _TopicFilter | None"]
ALLOWED: Check = (True, None)


def _known(cache: MetadataCache, tp: TopicPartition) -> bool:
    return cache.partition(tp.topic, tp.partition) is not None


def _by_topic(items: dict[TopicPartition, Any]) -> dict[str, dict[int, Any]]:
    out: dict[str, dict[int, Any]] = {}
    for (topic, partition), value in items.items():
        out.setdefault(topic, {})[partition] = value
    return out


def _commit_response(header: Any, request: Any, api: str, order: list[TopicPartition],
                     errors: dict[TopicPartition, int],
                     offsets: dict[TopicPartition, OffsetAndMetadata],
                     submit: Callable[[Callable[[dict[TopicPartition, int]], None]], None],
                     code_for: Callable[[int], int] = int) -> Any:
    """The response of OffsetCommit or TxnOffsetCommit (`api`): every partition of the request,
    in its order, with the coordinator's error for `offsets` (handed over by `submit`, unless
    none are left) or the error `errors` gave it here, as `code_for` maps it for the version."""
    mod = response_module(type(request))

    def build(result: dict[TopicPartition, int]) -> bytes:
        status = {**result, **errors}
        topics: dict[str, list[Any]] = {}
        for tp in dict.fromkeys(order):
            topics.setdefault(tp.topic, []).append(make(
                getattr(mod, f"{api}ResponsePartition"), partition_index=tp.partition,
                error_code=ErrorCode(code_for(status[tp]))))
        resp = make(getattr(mod, f"{api}Response"), throttle_time=0, topics=tuple(
            make(getattr(mod, f"{api}ResponseTopic"), name=name, partitions=tuple(parts))
            for name, parts in topics.items()))
        return encode_response(type(request), header.correlation_id, resp)

    future: asyncio.Future[dict[TopicPartition, int]] = \
        asyncio.get_running_loop().create_future()
    if not offsets:
        future.set_result({})
    else:
        submit(resolver(future))
    return when_done(future, build)


# -- OffsetCommit ----------------------------------------------------------------------------------

def _offset_commit(coordinator: GroupCoordinator, cache: MetadataCache, header: Any,
                   request: Any, check: Check = ALLOWED) -> Any:
    order: list[TopicPartition] = []
    errors: dict[TopicPartition, int] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    now = coordinator.clock()
    retention = ms(getattr(request, "retention_time", DEFAULT_RETENTION_TIME))
    expire = None if retention == DEFAULT_RETENTION_TIME else now + retention
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            order.append(tp)
            if not check[0]:
                errors[tp] = ErrorCode.group_authorization_failed
                continue
            if check[1] is not None and topic.name not in check[1]:
                errors[tp] = ErrorCode.topic_authorization_failed
                continue
            if not _known(cache, tp):
                errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[tp] = OffsetAndMetadata(
                p.committed_offset, getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                p.committed_metadata or "", now, expire)

    def submit(respond: Callable[[dict[TopicPartition, int]], None]) -> None:
        coordinator.handle_commit_offsets(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch, offsets, respond)
    return _commit_response(header, request, "OffsetCommit", order, errors, offsets, submit)


# -- TxnOffsetCommit -------------------------------------------------------------------------------

def _txn_offset_commit(coordinator: GroupCoordinator, cache: MetadataCache, header: Any,
                       request: Any, check: Check = ALLOWED, denied: int | None = None) -> Any:
    version = header.request_api_version
    order: list[TopicPartition] = []
    errors: dict[TopicPartition, int] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    now = coordinator.clock()
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            order.append(tp)
            if denied is not None:
                errors[tp] = denied
            elif check[1] is not None and topic.name not in check[1]:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif not _known(cache, tp):
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[tp] = OffsetAndMetadata(
                    p.committed_offset, getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                    p.committed_metadata or "", now)

    def submit(respond: Callable[[dict[TopicPartition, int]], None]) -> None:
        coordinator.handle_txn_commit_offsets(
            request.group_id, request.producer_id, request.producer_epoch,
            getattr(request, "member_id", ""), getattr(request, "group_instance_id", None),
            getattr(request, "generation_id", -1), offsets, respond)

    def code_for(code: int) -> int:
        if version < 2 and code == ErrorCode.coordinator_load_in_progress:
            return ErrorCode.coordinator_not_available
        return code
    return _commit_response(header, request, "TxnOffsetCommit", order, errors, offsets, submit,
                            code_for)


# -- OffsetFetch -----------------------------------------------------------------------------------

def _fetch_group(coordinator: GroupCoordinator, group_id: str, topics: Any,
                 require_stable: bool, check: Check = ALLOWED
                 ) -> tuple[int, dict[TopicPartition, OffsetFetchResult]]:
    if not check[0]:
        return ErrorCode.group_authorization_failed, {}
    allowed_topics = check[1]
    partitions = None if topics is None else [
        TopicPartition(t.name, i) for t in topics for i in t.partition_indexes
        if allowed_topics is None or t.name in allowed_topics]
    error, results = coordinator.handle_fetch_offsets(group_id, require_stable, partitions) \
        if partitions is None or partitions else (ErrorCode.none, {})
    if allowed_topics is not None:
        if topics is None:  # every offset of the group: those of unauthorized topics left out
            results = {tp: r for tp, r in results.items() if tp.topic in allowed_topics}
        else:
            for t in topics:
                if t.name not in allowed_topics:
                    for i in t.partition_indexes:
                        results[TopicPartition(t.name, i)] = OffsetFetchResult(
                            error=ErrorCode.topic_authorization_failed)
    return error, results


def _offset_fetch(coordinator: GroupCoordinator, header: Any, request: Any,
                  check: Any = None) -> bytes:
    version = header.request_api_version
    mod = response_module(type(request))
    require_stable = bool(getattr(request, "require_stable", False))

    def topics_of(results: dict[TopicPartition, OffsetFetchResult], topic_cls: Any,
                  partition_cls: Any) -> tuple[Any, ...]:
        return tuple(make(topic_cls, name=name, partitions=tuple(
            make(partition_cls, partition_index=index, committed_offset=r.offset,
                 committed_leader_epoch=r.leader_epoch, metadata=r.metadata,
                 error_code=ErrorCode(r.error))
            for index, r in parts.items()))
            for name, parts in _by_topic(results).items())

    if version >= 8:
        groups = []
        for g in request.groups:
            error, results = _fetch_group(coordinator, g.group_id, g.topics, require_stable,
                                          check(g.group_id, g.topics) if check else ALLOWED)
            groups.append(make(mod.OffsetFetchResponseGroup, group_id=g.group_id,
                               error_code=ErrorCode(error), topics=topics_of(
                                   results, mod.OffsetFetchResponseTopics,
                                   mod.OffsetFetchResponsePartitions)))
        resp = make(mod.OffsetFetchResponse, throttle_time=0, groups=tuple(groups))
        return encode_response(type(request), header.correlation_id, resp)

    error, results = _fetch_group(
        coordinator, request.group_id, request.topics, require_stable,
        check(request.group_id, request.topics) if check else ALLOWED)
    if error != ErrorCode.none:
        # v1 has no top-level error: every requested partition carries it.
        results = ({} if version >= 2 or request.topics is None else
                   {TopicPartition(t.name, i): OffsetFetchResult(error=error)
                    for t in request.topics for i in t.partition_indexes})
    resp = make(mod.OffsetFetchResponse, throttle_time=0, error_code=ErrorCode(error),
                topics=topics_of(results, mod.OffsetFetchResponseTopic,
                                 mod.OffsetFetchResponsePartition))
    return encode_response(type(request), header.correlation_id, resp)


# -- OffsetDelete ----------------------------------------------------------------------------------

def _offset_delete(coordinator: GroupCoordinator, cache: MetadataCache, header: Any,
                   request: Any, check: Check = ALLOWED) -> bytes:
    mod = response_module(type(request))
    if not check[0]:
        return encode_response(type(request), header.correlation_id, make(
            mod.OffsetDeleteResponse, throttle_time=0,
            error_code=ErrorCode.group_authorization_failed, topics=()))
    errors: dict[TopicPartition, int] = {}
    wanted: list[TopicPartition] = []
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if check[1] is not None and topic.name not in check[1]:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif _known(cache, tp):
                wanted.append(tp)
            else:
                errors[tp] = ErrorCode.unknown_topic_or_partition
    group_error, partition_errors = coordinator.handle_delete_offsets(request.group_id, wanted)
    topics: tuple[Any, ...] = ()
    if group_error == ErrorCode.none:
        errors.update(partition_errors)
        topics = tuple(make(mod.OffsetDeleteResponseTopic, name=name, partitions=tuple(
            make(mod.OffsetDeleteResponsePartition, partition_index=index,
                 error_code=ErrorCode(code)) for index, code in parts.items()))
            for name, parts in _by_topic(errors).items())
    resp = make(mod.OffsetDeleteResponse, throttle_time=0, error_code=ErrorCode(group_error),
                topics=topics)
    return encode_response(type(request), header.correlation_id, resp)

"""Topic administration over the Kafka protocol: CreateTopics (19), DeleteTopics (20),
CreatePartitions (37), DescribeConfigs (32). The work is done by the broker's AdminManager,
which writes the coordination store's nodes as Kafka's AdminZkClient does."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..admin_manager import AdminManager, PartitionsSpec, TopicResult, TopicSpec
from ..metadata_cache import MetadataCache
from ..network import Connection
from .authz import allowed, allowed_names


def _ms(td: Any) -> int:
    return int(td.total_seconds() * 1000)


class AdminApis:
    def __init__(self, broker_id: int, admin_manager: AdminManager,
                 metadata_cache: MetadataCache, authorizer: Authorizer = ALLOW_ALL) -> None:
        self.broker_id = broker_id
        self.authorizer = authorizer
        self.admin = admin_manager
        self.metadata_cache = metadata_cache

    async def handle_create_topics(self, header: Any, request: Any, conn: Connection
                                   ) -> bytes:
        denied: set[str] = set()
        auth = self.authorizer
        if auth.enabled and not allowed(auth, conn, AclOperation.CREATE, ResourceType.CLUSTER,
                                        request_name="CreateTopics", log_if_denied=False):
            names = [t.name for t in request.topics]
            denied = set(names) - allowed_names(auth, conn, AclOperation.CREATE,
                                                ResourceType.TOPIC, names,
                                                request_name="CreateTopics")
        return await _create_topics(self.admin, header, request, denied)

    async def handle_delete_topics(self, header: Any, request: Any, conn: Connection
                                   ) -> bytes:
        return await _delete_topics(self.admin, self.metadata_cache, header, request,
                                    self.authorizer, conn)

    async def handle_create_partitions(self, header: Any, request: Any, conn: Connection
                                       ) -> bytes:
        denied: set[str] = set()
        if self.authorizer.enabled:
            names = [t.name for t in request.topics]
            denied = set(names) - allowed_names(self.authorizer, conn, AclOperation.ALTER,
                                                ResourceType.TOPIC, names,
                                                request_name="CreatePartitions")
        return await _create_partitions(self.admin, header, request, denied)

    async def handle_describe_configs(self, header: Any, request: Any, conn: Connection
                                      ) -> bytes:
        return await _describe_configs(self.broker_id, self.admin, self.metadata_cache, header,
                                       request, self.authorizer, conn)


async def _create_topics(admin: AdminManager, header: Any, request: Any,
                         denied: set[str] | None = None) -> bytes:
    mod = response_module(type(request))
    denied = denied or set()
    specs = [TopicSpec(
        name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
        assignments={a.partition_index: list(a.broker_ids) for a in t.assignments},
        configs={c.name: c.value for c in t.configs}) for t in request.topics]
    names = [spec.name for spec in specs]
    wanted = [s for s in specs if s.name not in denied or names.count(s.name) > 1]
    results = await admin.create_topics(wanted, _ms(request.timeout),
                                        getattr(request, "validate_only", False)) \
        if wanted else {}
    for name in denied:  # Kafka: CREATE on the cluster, or on each topic (after duplicates)
        if names.count(name) == 1:
            results[name] = TopicResult(ErrorCode.topic_authorization_failed,
                                        "Authorization failed.")
    topics = []
    for spec in specs:
        r = results[spec.name]
        configs = ()
        if hasattr(mod, "CreatableTopicConfigs"):  # v5+ (KIP-525)
            configs = tuple(make(mod.CreatableTopicConfigs, name=k, value=v, read_only=False,
                                 config_source=src, is_sensitive=False)
                            for k, (v, src) in sorted(r.configs.items()))
        topics.append(make(mod.CreatableTopicResult, name=spec.name, topic_id=r.topic_id,
                           error_code=r.error, error_message=r.message,
                           topic_config_error_code=0, num_partitions=r.num_partitions,
                           replication_factor=r.replication_factor,
                           configs=configs if r.error == ErrorCode.none else None))
    return encode_response(type(request), header.correlation_id,
                           make(mod.CreateTopicsResponse, throttle_time=0, topics=tuple(topics)))


async def _delete_topics(admin: AdminManager, cache: MetadataCache, header: Any, request: Any,
                         authorizer: Authorizer = ALLOW_ALL, conn: Any = None) -> bytes:
    mod = response_module(type(request))
    if any(t.name is not None and t.topic_id is not None and t.topic_id.int
           for t in getattr(request, "topics", ())):
        # Kafka (v6, KIP-516): "Topic name and topic ID can not both be specified." fails the
        # whole request, each topic answered INVALID_REQUEST
        return encode_response(type(request), header.correlation_id, make(
            mod.DeleteTopicsResponse, throttle_time=0, responses=tuple(
                make(mod.DeletableTopicResult, name=t.name, topic_id=t.topic_id,
                     error_code=ErrorCode.invalid_request, error_message=None)
                for t in request.topics)))
    asked_ids: list[uuid.UUID | None] = []  # v6: the id each topic was named by, if any
    if hasattr(request, "topic_names"):
        names: list[str | None] = list(request.topic_names)
    else:
        names = []
        for t in request.topics:
            if t.name is None and t.topic_id is not None:
                info = cache.topic_by_id(t.topic_id)
                names.append(info.name if info else None)
                asked_ids.append(t.topic_id)
            else:
                names.append(t.name)
                asked_ids.append(None)
    known_ids = {n: info.topic_id for n in names if n and (info := cache.topic(n)) is not None}
    wanted = [n for n in names if n]
    denied: set[str] = set()
    if authorizer.enabled:  # Kafka: DELETE on each topic, else TOPIC_AUTHORIZATION_FAILED
        denied = set(wanted) - allowed_names(authorizer, conn, AclOperation.DELETE,
                                             ResourceType.TOPIC, wanted,
                                             request_name="DeleteTopics")
    results = await admin.delete_topics([n for n in wanted if n not in denied],
                                        _ms(request.timeout)) \
        if len(denied) < len(set(wanted)) else {}
    for n in denied:
        results[n] = (ErrorCode.topic_authorization_failed, None)
    responses = []
    for i, n in enumerate(names):
        error, message = results.get(n, (ErrorCode.unknown_topic_id, None)) if n else \
            (ErrorCode.unknown_topic_id, "unknown topic id")
        asked = asked_ids[i] if i < len(asked_ids) else None
        # Kafka: the id asked by (echoed, known or not), else the deleted topic's
        topic_id = asked if asked is not None else (
            known_ids.get(n) if n and n not in denied else None)
        responses.append(make(mod.DeletableTopicResult, name=n, topic_id=topic_id,
                              error_code=error, error_message=message))
    return encode_response(type(request), header.correlation_id,
                           make(mod.DeleteTopicsResponse, throttle_time=0,
                                responses=tuple(responses)))


async def _create_partitions(admin: AdminManager, header: Any, request: Any,
                             denied: set[str] | None = None) -> bytes:
    mod = response_module(type(request))
    denied = denied or set()
    specs = [PartitionsSpec(t.name, t.count,
                            [list(a.broker_ids) for a in t.assignments]
                            if t.assignments is not None else None)
             for t in request.topics]
    names = [spec.name for spec in specs]
    wanted = [s for s in specs if s.name not in denied or names.count(s.name) > 1]
    results = await admin.create_partitions(wanted, _ms(request.timeout),
                                            request.validate_only) if wanted else {}
    for name in denied:  # Kafka: ALTER on each topic (after duplicates)
        if names.count(name) == 1:
            results[name] = (ErrorCode.topic_authorization_failed,
                             "The topic authorization is failed.")
    # one result per topic name (Kafka answers from a map)
    out = tuple(make(mod.CreatePartitionsTopicResult, name=n, error_code=results[n][0],
                     error_message=results[n][1]) for n in dict.fromkeys(names))
    return encode_response(type(request), header.correlation_id,
                           make(mod.CreatePartitionsResponse, throttle_time=0, results=out))


TOPIC, BROKER = 2, 4


async def _describe_configs(broker_id: int, admin: AdminManager, cache: MetadataCache,
                            header: Any, request: Any, authorizer: Authorizer = ALLOW_ALL,
                            conn: Any = None) -> bytes:
    mod = response_module(type(request))
    results = []
    cluster_ok: bool | None = None
    for res in request.resources:
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        error, message, entries = ErrorCode.none, None, []
        if authorizer.enabled and res.resource_type == TOPIC and not allowed(
                authorizer, conn, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC,
                res.resource_name, request_name="DescribeConfigs"):
            error = ErrorCode.topic_authorization_failed
        elif authorizer.enabled and res.resource_type == BROKER and not (
                cluster_ok := cluster_ok if cluster_ok is not None else allowed(
                    authorizer, conn, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER,
                    request_name="DescribeConfigs")):
            error = ErrorCode.cluster_authorization_failed
        elif res.resource_type == TOPIC:
            if cache.topic(res.resource_name) is None:
                error, message = ErrorCode.unknown_topic_or_partition, None
            else:
                entries = await admin.describe_topic_config(res.resource_name)
        elif res.resource_type == BROKER:
            if res.resource_name not in ("", str(broker_id)):
                error, message = ErrorCode.invalid_request, (
                    f"Unexpected broker id, expected {broker_id} or empty string, but "
                    f"received {res.resource_name}")
            else:
                entries = admin.describe_broker_config(res.resource_name)
        else:
            error, message = ErrorCode.invalid_request, \
                f"unsupported resource type {res.resource_type}"
        configs = tuple(
            make(mod.DescribeConfigsResourceResult, name=e.name, value=e.value,
                 read_only=e.read_only, config_source=e.source, is_default=e.source == 5,
                 is_sensitive=e.is_sensitive,
                 synonyms=tuple(make(mod.DescribeConfigsSynonym, name=n, value=v, source=s)
                                for n, v, s in e.synonyms) if request.include_synonyms else (),
                 config_type=e.config_type, documentation=None)
            for e in entries if keys is None or e.name in keys)
        results.append(make(mod.DescribeConfigsResult, error_code=error, error_message=message,
                            resource_type=res.resource_type, resource_name=res.resource_name,
                            configs=configs))
    return encode_response(type(request), header.correlation_id,
                           make(mod.DescribeConfigsResponse, throttle_time=0,
                                results=tuple(results)))

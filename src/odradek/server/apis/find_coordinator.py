"""FindCoordinator (key 10), v0-v4 (v4: batched `coordinator_keys`, KIP-699): the coordinator of
a group is the leader of partition abs(hashCode(group id)) % partitions of `__consumer_offsets`
(S-7.3). As in Kafka, the first request creates that topic and is answered
COORDINATOR_NOT_AVAILABLE until it has leaders; so is a key whose partition has no live leader.
Only group coordinators exist (key type 0); transactional ids get INVALID_REQUEST.

The API must be advertised even without groups: librdkafka enables LZ4 compression (and its
broker-based group features) only when ApiVersions lists FindCoordinator.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.group_coordinator import GroupCoordinator
from ...coordinator.offsets import OFFSETS_TOPIC
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..metadata_cache import MetadataCache
from ..network import Connection
from .authz import allowed

GROUP_KEY_TYPE = 0
NOT_AVAILABLE = "The coordinator is not available."


class FindCoordinatorApi:
    def __init__(self, coordinator: GroupCoordinator, metadata_cache: MetadataCache,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.coordinator = coordinator
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer

    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
        if hasattr(request, "coordinator_keys"):
            coordinators = tuple(make(mod.Coordinator, key=k, **self.find(key_type, k, conn))
                                 for k in request.coordinator_keys)
            resp = make(mod.FindCoordinatorResponse, throttle_time=0, coordinators=coordinators)
        else:
            resp = make(mod.FindCoordinatorResponse, throttle_time=0,
                        **self.find(key_type, request.key, conn))
        return encode_response(type(request), header.correlation_id, resp)

    def find(self, key_type: int, key: str, conn: Any = None) -> dict[str, Any]:
        # Kafka: DESCRIBE on the group (or the transactional id)
        if self.authorizer.enabled and key_type == GROUP_KEY_TYPE and not allowed(
                self.authorizer, conn, AclOperation.DESCRIBE, ResourceType.GROUP, key,
                request_name="FindCoordinator"):
            return {"error_code": ErrorCode.group_authorization_failed, "error_message": None,
                    "node_id": -1, "host": "", "port": -1}
        if self.authorizer.enabled and key_type == 1 and not allowed(
                self.authorizer, conn, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                key, request_name="FindCoordinator"):
            return {"error_code": ErrorCode.transactional_id_authorization_failed,
                    "error_message": None, "node_id": -1, "host": "", "port": -1}
        listener = conn.listener_name if conn is not None else "PLAINTEXT"
        return find(self.coordinator, self.metadata_cache, key_type, key, listener)


def find(coordinator: GroupCoordinator, cache: MetadataCache, key_type: int, key: str,
         listener: str = "PLAINTEXT") -> dict[str, Any]:
    """error_code, error_message, node_id, host, port for one key (the coordinator's endpoint
    on `listener`, the one the request came in on)."""
    def error(code: ErrorCode, message: str) -> dict[str, Any]:
        return {"error_code": code, "error_message": message, "node_id": -1, "host": "",
                "port": -1}

    if key_type != GROUP_KEY_TYPE:
        return error(ErrorCode.invalid_request,
                     f"Coordinator key type {key_type} is not supported (only groups: 0).")
    if not coordinator.is_active:
        return error(ErrorCode.coordinator_not_available, NOT_AVAILABLE)
    topic = cache.topic(OFFSETS_TOPIC)
    if topic is None or not topic.partitions:
        coordinator.ensure_offsets_topic()
        return error(ErrorCode.coordinator_not_available, NOT_AVAILABLE)
    partition = topic.partitions.get(coordinator.partition_for(key))
    node = None if partition is None else cache.broker_endpoint(partition.leader, listener)
    if node is None:
        return error(ErrorCode.coordinator_not_available, NOT_AVAILABLE)
    return {"error_code": ErrorCode.none, "error_message": None,
            "node_id": partition.leader, "host": node.host, "port": node.port}


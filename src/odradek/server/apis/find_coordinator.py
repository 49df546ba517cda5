"""FindCoordinator (key 10), v0-v4 (v4: batched `coordinator_keys`, KIP-699): the coordinator of
a group (key type 0) is the leader of partition abs(hashCode(group id)) % partitions of
`__consumer_offsets` (S-7.3); that of a transactional id (key type 1) the leader of its
`__transaction_state` partition. As in Kafka, the first request creates the topic and is
answered COORDINATOR_NOT_AVAILABLE until it has leaders; so is a key whose partition has no live
leader. Other key types get INVALID_REQUEST.

The API must be advertised even without groups: librdkafka enables LZ4 compression (and its
broker-based group features) only when ApiVersions lists FindCoordinator.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.group_coordinator import GroupCoordinator
from ...coordinator.offsets import OFFSETS_TOPIC
from ...coordinator.transaction_coordinator import TransactionCoordinator
from ...coordinator.transaction_state import TRANSACTION_STATE_TOPIC
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..metadata_cache import MetadataCache
from ..network import Connection
from .authz import allowed

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
NOT_AVAILABLE = "The coordinator is not available."


class FindCoordinatorApi:
    def __init__(self, coordinator: GroupCoordinator, metadata_cache: MetadataCache,
                 authorizer: Authorizer = ALLOW_ALL,
                 txn_coordinator: TransactionCoordinator | None = None) -> None:
        self.coordinator = coordinator
        self.txn_coordinator = txn_coordinator
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
        if self.authorizer.enabled and key_type == TRANSACTION_KEY_TYPE and not allowed(
                self.authorizer, conn, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                key, request_name="FindCoordinator"):
            return {"error_code": ErrorCode.transactional_id_authorization_failed,
                    "error_message": None, "node_id": -1, "host": "", "port": -1}
        listener = conn.listener_name if conn is not None else "PLAINTEXT"
        return find(self.coordinator, self.metadata_cache, key_type, key, listener,
                    self.txn_coordinator)


def find(coordinator: GroupCoordinator, cache: MetadataCache, key_type: int, key: str,
         listener: str = "PLAINTEXT", txn_coordinator: TransactionCoordinator | None = None
         ) -> dict[str, Any]:
    """error_code, error_message, node_id, host, port for one key (the coordinator's endpoint
    on `listener`, the one the request came in on)."""
    def error(code: ErrorCode, message: str) -> dict[str, Any]:
        return {"error_code": code, "error_message": message, "node_id": -1, "host": "",
                "port": -1}

    # Kafka's handleFindCoordinatorRequest: the key's partition of the coordinator's internal
    # topic, created when missing
    if key_type == GROUP_KEY_TYPE:
        active, internal_topic, create_topic, partition_for = (
            coordinator.is_active, OFFSETS_TOPIC, coordinator.ensure_offsets_topic,
            coordinator.partition_for)
    elif key_type == TRANSACTION_KEY_TYPE and txn_coordinator is not None:
        active, internal_topic, create_topic, partition_for = (
            txn_coordinator.is_active, TRANSACTION_STATE_TOPIC,
            txn_coordinator.ensure_transaction_topic, txn_coordinator.partition_for)
    else:
        return error(ErrorCode.invalid_request,
                     f"Coordinator key type {key_type} is not supported (0: group, "
                     "1: transaction).")
    if not active:
        return error(ErrorCode.coordinator_not_available, NOT_AVAILABLE)
    topic = cache.topic(internal_topic)
    if topic is None or not topic.partitions:
        create_topic()
        return error(ErrorCode.coordinator_not_available, NOT_AVAILABLE)
    index = partition_for(key)
    partition = topic.partitions.get(index)
    node = None if partition is None else cache.broker_endpoint(partition.leader, listener)
    if node is None:
        return error(ErrorCode.coordinator_not_available, NOT_AVAILABLE)
    return {"error_code": ErrorCode.none, "error_message": None,
            "node_id": partition.leader, "host": node.host, "port": node.port}


"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), KIP-455, S-6.2.

Alter validates each partition (Kafka's checks and error codes) and merges the valid targets
into ``/admin/reassign_partitions``, which the controller watches and acts on
(controller/reassignment.py); null replicas cancel an ongoing reassignment: the target becomes
the original replicas (OAR), as Kafka reverts a cancelled move. List reports, for each
ongoing reassignment, the replica set during the move and the replicas being added/removed.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...controller.reassignment import original_replicas, validate_replicas
from ...coordination import paths
from ...coordination.admin_zk import alter_admin_node, read_ongoing
from ...coordination.store import CoordinationError, CoordinationStore
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection
from .authz import allowed

log = logging.getLogger("odradek.apis.reassignments")


class ReassignmentApis:
    """Both write or read the coordination store only; the controller acts on the node."""

    def __init__(self, store: CoordinationStore, authorizer: Authorizer = ALLOW_ALL) -> None:
        self.store = store
        self.authorizer = authorizer

    async def handle_alter(self, header: Any, request: Any, conn: Connection) -> bytes:
        if not allowed(self.authorizer, conn, AclOperation.ALTER, ResourceType.CLUSTER,
                       request_name="AlterPartitionReassignments"):  # Kafka: ALTER on cluster
            return _alter_failed(header, request, ErrorCode.cluster_authorization_failed, None)
        try:
            return await _alter(self.store, header, request)
        except CoordinationError as exc:  # Kafka's Errors.forException of a ZooKeeper error
            log.warning("AlterPartitionReassignments interrupted: %r", exc)
            return _alter_failed(header, request, ErrorCode.unknown_server_error, str(exc))

    async def handle_list(self, header: Any, request: Any, conn: Connection) -> bytes:
        if not allowed(self.authorizer, conn, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                       request_name="ListPartitionReassignments"):
            mod = response_module(type(request))
            return encode_response(type(request), header.correlation_id, make(
                mod.ListPartitionReassignmentsResponse, throttle_time=0,
                error_code=ErrorCode.cluster_authorization_failed, error_message=None,
                topics=()))
        try:
            return await _list(self.store, header, request)
        except CoordinationError as exc:
            log.warning("ListPartitionReassignments interrupted: %r", exc)
            mod = response_module(type(request))
            return encode_response(type(request), header.correlation_id, make(
                mod.ListPartitionReassignmentsResponse, throttle_time=0,
                error_code=ErrorCode.unknown_server_error, error_message=str(exc), topics=()))


def _alter_failed(header: Any, request: Any, error: ErrorCode, message: str | None) -> bytes:
    """An AlterPartitionReassignments answer with `error` at the top and for every partition."""
    mod = response_module(type(request))
    return encode_response(type(request), header.correlation_id, make(
        mod.AlterPartitionReassignmentsResponse, throttle_time=0, error_code=error,
        error_message=message, responses=tuple(
            make(mod.ReassignableTopicResponse, name=t.name, partitions=tuple(
                make(mod.ReassignablePartitionResponse, partition_index=p.partition_index,
                     error_code=error, error_message=message) for p in t.partitions))
            for t in request.topics)))


async def _alter(store: CoordinationStore, header: Any, request: Any) -> bytes:
    mod = response_module(type(request))
    known = {int(b) for b in await store.get_children(paths.BROKER_IDS)}
    found = await store.get_or_none(paths.REASSIGN_PARTITIONS)
    pending = paths.decode_reassignment(found[0]) if found is not None else {}
    results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    changes: dict[tuple[str, int], tuple[int, ...] | None] = {}
    assignments: dict[str, paths.TopicAssignment | None] = {}
    deleting: dict[str, bool] = {}
    for t in request.topics:
        if t.name not in assignments:
            node = await store.get_or_none(paths.topic_path(t.name))
            assignments[t.name] = None if node is None else paths.decode_topic_assignment(node[0])
            deleting[t.name] = await store.exists(paths.delete_topic_path(t.name)) is not None
        a = assignments[t.name]
        for p in t.partitions:
            key = (t.name, p.partition_index)
            tp = TopicPartition(*key)
            assigned = () if a is None else a.partitions.get(p.partition_index, ())
            adding = a.adding_replicas.get(tp.partition, ()) if a is not None else ()
            removing = a.removing_replicas.get(tp.partition, ()) if a is not None else ()
            # Kafka's processApiPartitionReassignment: the target's replicas first, then
            # whether there is a reassignment to cancel, then the partition (a topic queued
            # for deletion has none)
            if p.replicas is None:  # cancel
                if key not in pending and not adding and not removing:
                    results[key] = (ErrorCode.no_reassignment_in_progress,
                                    "No partition reassignment is in progress.")
                elif not assigned or deleting[t.name]:
                    results[key] = (ErrorCode.unknown_topic_or_partition,
                                    "The partition does not exist.")
                else:
                    changes[key] = original_replicas(assigned, adding)
                    results[key] = (ErrorCode.none, None)
                continue
            target = tuple(int(r) for r in p.replicas)
            original = original_replicas(assigned, adding)
            new_replicas = [r for r in target if r not in original]
            error = validate_replicas(target, known, new_replicas)
            if error is not None:
                results[key] = (ErrorCode.invalid_replica_assignment, error)
            elif not assigned or deleting[t.name]:
                results[key] = (ErrorCode.unknown_topic_or_partition,
                                "The partition does not exist.")
            else:
                changes[key] = target
                results[key] = (ErrorCode.none, None)
    top_error, top_message = ErrorCode.none, None
    if changes:
        try:
            await alter_admin_node(store, changes)
            log.info("Partition reassignments requested: %s",
                     {f"{t}-{p}": list(r or ()) for (t, p), r in sorted(changes.items())})
        except (CoordinationError, RuntimeError) as exc:
            top_error, top_message = ErrorCode.unknown_server_error, str(exc)
    responses = []
    for t in request.topics:
        responses.append(make(mod.ReassignableTopicResponse, name=t.name, partitions=tuple(
            make(mod.ReassignablePartitionResponse, partition_index=p.partition_index,
                 error_code=results[(t.name, p.partition_index)][0] if top_error == 0
                 else top_error,
                 error_message=results[(t.name, p.partition_index)][1] if top_error == 0
                 else top_message)
            for p in t.partitions)))
    return encode_response(type(request), header.correlation_id, make(
        mod.AlterPartitionReassignmentsResponse, throttle_time=0, error_code=top_error,
        error_message=top_message, responses=tuple(responses)))


async def _list(store: CoordinationStore, header: Any, request: Any) -> bytes:
    mod = response_module(type(request))
    wanted = None if request.topics is None else {
        t.name: set(t.partition_indexes) for t in request.topics}
    ongoing = await read_ongoing(store, wanted)
    by_topic: dict[str, list[Any]] = {}
    for tp, o in sorted(ongoing.items()):
        by_topic.setdefault(tp.topic, []).append(make(
            mod.OngoingPartitionReassignment, partition_index=tp.partition, replicas=o.replicas,
            adding_replicas=o.adding, removing_replicas=o.removing))
    topics = tuple(make(mod.OngoingTopicReassignment, name=t, partitions=tuple(ps))
                   for t, ps in by_topic.items())
    return encode_response(type(request), header.correlation_id, make(
        mod.ListPartitionReassignmentsResponse, throttle_time=0, error_code=ErrorCode.none,
        error_message=None, topics=topics))

"""ElectLeaders (API key 43, v0-2): preferred or unclean leader election for admin clients
(S-6.1, Kafka's ``KafkaApis.handleElectLeaders`` in ZooKeeper mode).

Only the active controller elects: on any other broker every partition is answered
NOT_CONTROLLER (the admin clients send it to the controller they see in the metadata). A null
``topic_partitions`` means every partition this broker's metadata knows. The election runs as a
controller event (controller/preferred_election.py); the answer waits, up to ``timeout_ms``, until
this broker's metadata shows each newly elected leader (Kafka's DelayedElectLeader), and reports
REQUEST_TIMED_OUT for the partitions that did not get there in time.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...controller.controller import KafkaController
from ...controller.events import ControllerMovedError, PreferredReplicaLeaderElection
from ...controller.preferred_election import (
    ELECTION_NOT_NEEDED,
    NONE,
    NOT_CONTROLLER,
    REQUEST_TIMED_OUT,
    ElectionType,
)
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..metadata_cache import MetadataCache
from ..network import Connection
from .authz import allowed

INVALID_REQUEST = 42
UNKNOWN_SERVER_ERROR = -1

Result = tuple[int, str | None, int]


class ElectLeadersApi:
    def __init__(self, controller: KafkaController, metadata_cache: MetadataCache,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.controller = controller
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer

    async def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        authorized = allowed(self.authorizer, conn, AclOperation.ALTER, ResourceType.CLUSTER,
                             request_name="ElectLeaders")  # Kafka: ALTER on the cluster
        return await _handle(self.controller, self.metadata_cache, header, request, authorized)


def _requested(cache: MetadataCache, request: Any) -> list[TopicPartition]:
    if request.topic_partitions is None:
        return sorted(TopicPartition(t.name, p) for t in cache.topics.values()
                      for p in t.partitions)
    return [TopicPartition(t.topic, int(p)) for t in request.topic_partitions
            for p in t.partitions]


async def _elect(controller: KafkaController, cache: MetadataCache,
                 requested: list[TopicPartition], election_type: ElectionType,
                 timeout: float) -> dict[TopicPartition, Result]:
    not_controller: dict[TopicPartition, Result] = {
        tp: (NOT_CONTROLLER, None, -1) for tp in requested}  # Kafka: no message
    if not controller.is_active:
        return not_controller
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    reply: asyncio.Future[dict[TopicPartition, Any]] = loop.create_future()
    controller.events.put(PreferredReplicaLeaderElection(
        partitions=frozenset(requested), reply=reply, election_type=int(election_type)))
    try:
        results: dict[TopicPartition, Result] = await asyncio.wait_for(
            asyncio.shield(reply), max(0.0, deadline - loop.time()))
    except TimeoutError:
        return {tp: (REQUEST_TIMED_OUT, None, -1) for tp in requested}
    except ControllerMovedError:
        return not_controller
    except asyncio.CancelledError:
        if not reply.cancelled():
            raise
        return not_controller  # the controller stopped meanwhile
    except Exception as exc:
        return {tp: (UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}", -1)
                for tp in requested}
    # Wait until this broker's metadata shows the new leaders (Kafka's DelayedElectLeader).
    pending = {tp for tp, (code, _m, _l) in results.items() if code == NONE}
    while pending:
        pending = {tp for tp in pending
                   if (p := cache.partition(tp.topic, tp.partition)) is None
                   or p.leader != results[tp][2]}
        if not pending or loop.time() >= deadline:
            break
        await asyncio.sleep(0.01)
    for tp in pending:  # Kafka's DelayedElectLeader: no message
        results[tp] = (REQUEST_TIMED_OUT, None, results[tp][2])
    return results


async def _handle(controller: KafkaController, cache: MetadataCache, header: Any, request: Any,
                  authorized: bool = True) -> bytes:
    mod = response_module(type(request))
    requested = _requested(cache, request)
    raw_type = int(getattr(request, "election_type", 0))  # v0: always PREFERRED
    timeout = max(0.0, request.timeout.total_seconds())
    top_error = ErrorCode.none
    if not authorized:
        top_error = ErrorCode.cluster_authorization_failed
        results: dict[TopicPartition, Result] = {
            tp: (int(top_error), None, -1) for tp in requested}
    elif raw_type not in (0, 1):
        results = {
            tp: (INVALID_REQUEST, f"Unknown election type {raw_type}", -1) for tp in requested}
    else:
        results = await _elect(controller, cache, requested, ElectionType(raw_type), timeout)
    by_topic: dict[str, list[Any]] = {}
    for tp in requested:
        code, message, _leader = results.get(tp, (NONE, None, -1))
        if code == ELECTION_NOT_NEEDED and request.topic_partitions is None:
            continue  # Kafka: an election of every partition reports the elected and failed
        by_topic.setdefault(tp.topic, []).append(make(
            mod.PartitionResult, partition_id=tp.partition, error_code=ErrorCode(code),
            error_message=message if code != NONE else None))
    return encode_response(type(request), header.correlation_id, make(
        mod.ElectLeadersResponse, throttle_time=0, error_code=top_error,  # v1+
        replica_election_results=tuple(
            make(mod.ReplicaElectionResult, topic=t, partition_result=tuple(ps))
            for t, ps in by_topic.items())))

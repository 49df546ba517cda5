"""Produce (key 0), v3-v10: record batches appended on the partition leaders.

acks=0 gets no response (and, as in Kafka, a failed acks=0 produce closes the connection so the
client refreshes its metadata); acks=1 answers after the leader's append; acks=all (-1) after the
ISR has the data (DelayedProduce). Any other acks value is INVALID_REQUIRED_ACKS.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.produce_response import PartitionResult, encode_produce_response
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import CloseConnection, Connection, Response
from ..replica_manager import ProduceResult, ReplicaManager
from .authz import allowed_names


class ProduceApi:
    def __init__(self, replica_manager: ReplicaManager, authorizer: Authorizer = ALLOW_ALL
                 ) -> None:
        self.replica_manager = replica_manager
        self.authorizer = authorizer

    def handle(self, header: Any, request: Any, conn: Connection
               ) -> Response | Awaitable[Response]:
        denied: frozenset[str] = frozenset()
        if self.authorizer.enabled:  # Kafka: WRITE on each topic
            names = [t.name for t in request.topic_data]
            denied = frozenset(names) - allowed_names(self.authorizer, conn, AclOperation.WRITE,
                                                      ResourceType.TOPIC, names,
                                                      request_name="Produce")
        return _handle(self.replica_manager, header, request, denied)


def _handle(replica_manager: ReplicaManager, header: Any, request: Any,
            denied: frozenset[str] = frozenset()) -> Response | Awaitable[Response]:
    acks = request.acks
    entries: dict[tuple[str, int], bytes | None] = {}
    for topic in request.topic_data:
        for p in topic.partition_data:
            entries[(topic.name, p.index)] = p.records
    if acks not in (0, 1, -1):
        results = {tp: ProduceResult(ErrorCode.invalid_required_acks) for tp in entries}
        return _respond(header, request, results)
    if request.transactional_id is not None:
        results = {tp: ProduceResult(ErrorCode.transactional_id_authorization_failed,
                                     message="transactions are not supported")
                   for tp in entries}
        return _respond(header, request, results)
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    if denied:
        refused = {tp: ProduceResult(ErrorCode.topic_authorization_failed)
                   for tp in entries if tp[0] in denied}
        if acks == 0:
            raise CloseConnection(f"acks=0 produce not authorized for {sorted(denied)}")
        entries = {tp: r for tp, r in entries.items() if tp[0] not in denied}
        if not entries:
            return _respond(header, request, refused)
        outcome = replica_manager.append_records(acks, timeout_ms, entries)
        if isinstance(outcome, dict):
            return _respond(header, request, {**refused, **outcome})
        return _await_and_respond(header, request, outcome, refused)
    outcome = replica_manager.append_records(acks, timeout_ms, entries)
    if acks == 0:
        failed = [tp for tp, r in outcome.items() if r.error != ErrorCode.none]  # type: ignore[union-attr]
        if failed:
            raise CloseConnection(f"acks=0 produce failed for {failed}")
        return None
    if isinstance(outcome, dict):
        return _respond(header, request, outcome)
    return _await_and_respond(header, request, outcome)


async def _await_and_respond(header: Any, request: Any, outcome: Awaitable[Any],
                             refused: dict[tuple[str, int], ProduceResult] | None = None
                             ) -> bytes:
    results = await outcome
    return _respond(header, request, {**refused, **results} if refused else results)


def _respond(header: Any, request: Any,
             results: dict[tuple[str, int], ProduceResult]) -> bytes:
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, index), r in results.items():
        by_topic.setdefault(topic, []).append((
            index, int(r.error), r.base_offset, r.log_append_time, r.log_start_offset,
            r.message if r.error != ErrorCode.none else None))
    return encode_produce_response(header.request_api_version, header.correlation_id,
                                   list(by_topic.items()))

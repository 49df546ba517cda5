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
from ..network import CloseConnection, Connection, Response
from ..replica_manager import ProduceResult, ReplicaManager


class ProduceApi:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager

    def handle(self, header: Any, request: Any, conn: Connection
               ) -> Response | Awaitable[Response]:
        return _handle(self.replica_manager, header, request)


def _handle(replica_manager: ReplicaManager, header: Any, request: Any
            ) -> Response | Awaitable[Response]:
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
    outcome = replica_manager.append_records(acks, timeout_ms, entries)
    if acks == 0:
        failed = [tp for tp, r in outcome.items() if r.error != ErrorCode.none]  # type: ignore[union-attr]
        if failed:
            raise CloseConnection(f"acks=0 produce failed for {failed}")
        return None
    if isinstance(outcome, dict):
        return _respond(header, request, outcome)
    return _await_and_respond(header, request, outcome)


async def _await_and_respond(header: Any, request: Any, outcome: Awaitable[Any]) -> bytes:
    return _respond(header, request, await outcome)


def _respond(header: Any, request: Any,
             results: dict[tuple[str, int], ProduceResult]) -> bytes:
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, index), r in results.items():
        by_topic.setdefault(topic, []).append((
            index, int(r.error), r.base_offset, r.log_append_time, r.log_start_offset,
            r.message if r.error != ErrorCode.none else None))
    return encode_produce_response(header.request_api_version, header.correlation_id,
                                   list(by_topic.items()))

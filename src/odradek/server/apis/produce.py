"""Produce (key 0), v3-v10: record batches appended on the partition leaders.

acks=0 gets no response (and, as in Kafka, a failed acks=0 produce closes the connection so the
client refreshes its metadata); acks=1 answers after the leader's append; acks=all (-1) after the
ISR has the data (DelayedProduce). Any other acks value is INVALID_REQUIRED_ACKS.

Transactional producers (KIP-98): a request whose record sets hold transactional batches (the
first batch of each partition tells, as Kafka's ProduceRequest flags) needs a transactional id
and, with an authorizer, WRITE on that TRANSACTIONAL_ID; otherwise every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED. The batches are appended with the CLIENT origin (epoch,
sequence and transaction state checked by the partition's producer state). Internal topics are
written by the broker's coordinators only: a client gets INVALID_TOPIC_EXCEPTION for them.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.produce_response import PartitionResult, encode_produce_response
from ...security.acl import AclOperation, ResourceType
from ..network import CloseConnection, Connection, Response
from ..replication.replica_manager import ReplicaManager
from ..replication.results import ProduceResult
from ..topic_names import INTERNAL_TOPICS
from .authz import allowed, allowed_names
from .replica_api import ReplicaManagerApi

_ATTRIBUTES_AT = 21  # int16 attributes in a v2 batch header
_TRANSACTIONAL_BIT = 0x10


def has_transactional_records(records: bytes | None) -> bool:
    """Whether a partition's record set starts with a transactional batch (header only)."""
    return bool(records) and len(records) > _ATTRIBUTES_AT + 1 and bool(
        records[_ATTRIBUTES_AT + 1] & _TRANSACTIONAL_BIT)


class ProduceApi(ReplicaManagerApi):
    def handle(self, header: Any, request: Any, conn: Connection
               ) -> Response | Awaitable[Response]:
        denied: frozenset[str] = frozenset()
        txn_id = request.transactional_id
        if any(has_transactional_records(p.records) for t in request.topic_data
               for p in t.partition_data) and (
                txn_id is None or not allowed(self.authorizer, conn, AclOperation.WRITE,
                                              ResourceType.TRANSACTIONAL_ID, str(txn_id),
                                              request_name="Produce")):
            results = {(t.name, p.index): ProduceResult(
                ErrorCode.transactional_id_authorization_failed)
                for t in request.topic_data for p in t.partition_data}
            if request.acks == 0:
                raise CloseConnection("acks=0 transactional produce not authorized")
            return _respond(header, request, results)
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
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    unauthorized = denied
    internal = frozenset(tp[0] for tp in entries if tp[0] in INTERNAL_TOPICS)
    if internal:  # Kafka's internalTopicsAllowed = false for clients
        denied = denied | internal
    if denied:
        refused = {tp: ProduceResult(ErrorCode.topic_authorization_failed
                                     if tp[0] in unauthorized
                                     else ErrorCode.invalid_topic_exception)
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
            r.message if r.error != ErrorCode.none else None, r.record_errors))
    return encode_produce_response(header.request_api_version, header.correlation_id,
                                   list(by_topic.items()))

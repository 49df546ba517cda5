"""The transaction coordinator's APIs (Kafka 2.8's KafkaApis, and 3.0's for 65/66):
AddPartitionsToTxn (24) v0-v3, AddOffsetsToTxn (25) v0-v3, EndTxn (26) v0-v3,
DescribeTransactions (65) v0, ListTransactions (66) v0.

Authorization (when an authorizer is on), as Kafka: WRITE on the TRANSACTIONAL_ID for 24-26
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); AddPartitionsToTxn also WRITE on each topic (internal
topics are never authorized), and a partition refused or unknown fails the whole request, the
others answered OPERATION_NOT_ATTEMPTED; AddOffsetsToTxn also READ on the group.
DescribeTransactions needs DESCRIBE on each id and shows only the topics the caller may
DESCRIBE; ListTransactions lists only the ids the caller may DESCRIBE.

Clients before AddPartitionsToTxn / AddOffsetsToTxn / EndTxn v2 do not know PRODUCER_FENCED and
get INVALID_PRODUCER_EPOCH instead.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...common import TopicPartition
from ...coordinator.group_coordinator import GroupCoordinator
from ...coordinator.offsets import OFFSETS_TOPIC
from ...coordinator.transaction_coordinator import TransactionCoordinator
from ...coordinator.transaction_state import TransactionResult
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..metadata_cache import MetadataCache
from ..network import Connection
from ..topic_names import INTERNAL_TOPICS
from .authz import allowed, allowed_names


def _final_error(error: int, version: int) -> ErrorCode:
    """Kafka: clients before v2 get INVALID_PRODUCER_EPOCH for PRODUCER_FENCED."""
    if error == ErrorCode.producer_fenced and version < 2:
        return ErrorCode.invalid_producer_epoch
    return ErrorCode(error)


def _field(request: Any, name: str) -> Any:
    """AddPartitionsToTxn v0-v3 fields (kio names them v3_and_below_*)."""
    return getattr(request, f"v3_and_below_{name}", None) if not hasattr(request, name) \
        else getattr(request, name)


def _start_time(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        milliseconds=ms)


class TransactionApis:
    def __init__(self, coordinator: TransactionCoordinator, group_coordinator: GroupCoordinator,
                 metadata_cache: MetadataCache, authorizer: Authorizer = ALLOW_ALL) -> None:
        self.coordinator = coordinator
        self.group_coordinator = group_coordinator
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer

    def _may_write_txn_id(self, conn: Connection, transactional_id: str, api: str) -> bool:
        return allowed(self.authorizer, conn, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                       transactional_id, request_name=api)

    # -- AddPartitionsToTxn (24) ------------------------------------------------------------------
    async def handle_add_partitions_to_txn(self, header: Any, request: Any,
                                           conn: Connection) -> bytes:
        mod = response_module(type(request))
        version = request.__version__
        tid = _field(request, "transactional_id")
        requested = [TopicPartition(t.name, p) for t in _field(request, "topics")
                     for p in t.partitions]

        def respond(errors: dict[TopicPartition, int]) -> bytes:
            by_topic: dict[str, list[Any]] = {}
            for tp, error in errors.items():
                by_topic.setdefault(tp.topic, []).append(make(
                    mod.AddPartitionsToTxnPartitionResult, partition_index=tp.partition,
                    partition_error_code=_final_error(error, version)))
            results = tuple(make(mod.AddPartitionsToTxnTopicResult, name=t,
                                 results_by_partition=tuple(ps)) for t, ps in by_topic.items())
            return encode_response(type(request), header.correlation_id, make(
                mod.AddPartitionsToTxnResponse, throttle_time=0,
                results_by_topic_v3_and_below=results, results=results))

        if not self._may_write_txn_id(conn, tid, "AddPartitionsToTxn"):
            return respond({tp: ErrorCode.transactional_id_authorization_failed
                            for tp in requested})
        authorized_topics = allowed_names(
            self.authorizer, conn, AclOperation.WRITE, ResourceType.TOPIC,
            {tp.topic for tp in requested if tp.topic not in INTERNAL_TOPICS},
            request_name="AddPartitionsToTxn")
        failed: dict[TopicPartition, int] = {}
        authorized: list[TopicPartition] = []
        for tp in requested:
            if tp.topic not in authorized_topics:
                failed[tp] = ErrorCode.topic_authorization_failed
            elif self.metadata_cache.partition(tp.topic, tp.partition) is None:
                failed[tp] = ErrorCode.unknown_topic_or_partition
            else:
                authorized.append(tp)
        if failed:
            return respond({**failed, **{tp: ErrorCode.operation_not_attempted
                                         for tp in authorized}})
        error = await self.coordinator.handle_add_partitions_to_transaction(
            tid, _field(request, "producer_id"), _field(request, "producer_epoch"), authorized)
        return respond({tp: error for tp in requested})

    # -- AddOffsetsToTxn (25) ---------------------------------------------------------------------
    async def handle_add_offsets_to_txn(self, header: Any, request: Any,
                                        conn: Connection) -> bytes:
        mod = response_module(type(request))

        def respond(error: int) -> bytes:
            return encode_response(type(request), header.correlation_id, make(
                mod.AddOffsetsToTxnResponse, throttle_time=0,
                error_code=_final_error(error, request.__version__)))

        if not self._may_write_txn_id(conn, request.transactional_id, "AddOffsetsToTxn"):
            return respond(ErrorCode.transactional_id_authorization_failed)
        if not allowed(self.authorizer, conn, AclOperation.READ, ResourceType.GROUP,
                       request.group_id, request_name="AddOffsetsToTxn"):
            return respond(ErrorCode.group_authorization_failed)
        offsets_tp = TopicPartition(OFFSETS_TOPIC,
                                    self.group_coordinator.partition_for(request.group_id))
        return respond(await self.coordinator.handle_add_partitions_to_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch,
            [offsets_tp]))

    # -- EndTxn (26) ------------------------------------------------------------------------------
    async def handle_end_txn(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))

        def respond(error: int) -> bytes:
            return encode_response(type(request), header.correlation_id, make(
                mod.EndTxnResponse, throttle_time=0,
                error_code=_final_error(error, request.__version__)))

        if not self._may_write_txn_id(conn, request.transactional_id, "EndTxn"):
            return respond(ErrorCode.transactional_id_authorization_failed)
        result = TransactionResult.COMMIT if request.committed else TransactionResult.ABORT
        return respond(await self.coordinator.handle_end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch, result))

    # -- DescribeTransactions (65) ----------------------------------------------------------------
    def handle_describe_transactions(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        states = []
        for tid in request.transactional_ids:
            if not allowed(self.authorizer, conn, AclOperation.DESCRIBE,
                           ResourceType.TRANSACTIONAL_ID, tid,
                           request_name="DescribeTransactions"):
                states.append(make(
                    mod.TransactionState,
                    error_code=ErrorCode.transactional_id_authorization_failed,
                    transactional_id=tid, transaction_state="", transaction_timeout=0,
                    transaction_start_time=_start_time(-1), producer_id=-1, producer_epoch=-1,
                    topics=()))
                continue
            d = self.coordinator.handle_describe_transactions(tid)
            topics: dict[str, list[int]] = {}
            for tp in sorted(d.partitions):
                topics.setdefault(tp.topic, []).append(tp.partition)
            visible = allowed_names(self.authorizer, conn, AclOperation.DESCRIBE,
                                    ResourceType.TOPIC, topics,
                                    request_name="DescribeTransactions")
            states.append(make(
                mod.TransactionState, error_code=ErrorCode(d.error), transactional_id=tid,
                transaction_state=d.state, transaction_timeout=d.timeout_ms,
                transaction_start_time=_start_time(d.start_timestamp),
                producer_id=d.producer_id, producer_epoch=d.producer_epoch,
                topics=tuple(make(mod.TopicData, topic=t, partitions=tuple(ps))
                             for t, ps in topics.items() if t in visible)))
        return encode_response(type(request), header.correlation_id, make(
            mod.DescribeTransactionsResponse, throttle_time=0, transaction_states=tuple(states)))

    # -- ListTransactions (66) --------------------------------------------------------------------
    def handle_list_transactions(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        result = self.coordinator.handle_list_transactions(request.producer_id_filters,
                                                           request.state_filters)
        visible = allowed_names(self.authorizer, conn, AclOperation.DESCRIBE,
                                ResourceType.TRANSACTIONAL_ID,
                                {t.transactional_id for t in result.transactions},
                                request_name="ListTransactions", log_if_denied=False)
        return encode_response(type(request), header.correlation_id, make(
            mod.ListTransactionsResponse, throttle_time=0, error_code=ErrorCode(result.error),
            unknown_state_filters=result.unknown_state_filters,
            transaction_states=tuple(
                make(mod.TransactionState, transactional_id=t.transactional_id,
                     producer_id=t.producer_id, transaction_state=t.state)
                for t in result.transactions if t.transactional_id in visible)))

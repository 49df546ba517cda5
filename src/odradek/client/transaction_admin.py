"""The admin client's transaction operations (KIP-664: Kafka's `Admin.describeProducers`,
`describeTransactions`, `listTransactions`, `abortTransaction`), a part of `AsyncAdmin`.

They ask partition leaders (DescribeProducers, WriteTxnMarkers) and transaction coordinators
(DescribeTransactions, ListTransactions on every broker) through the admin's `KafkaClient`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from .cluster_metadata import KafkaClient
from .errors import KafkaError, UnsupportedVersionError
from .types import (
    AbortTransactionSpec,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)


class TransactionAdmin:
    """`AsyncAdmin`'s transaction operations; the admin supplies the client, the timeouts and
    the coordinator lookup."""

    client: KafkaClient
    api_timeout: float
    retry_backoff: float

    async def _coordinator(self, group_id: str, key_type: int = 0) -> int:
        raise NotImplementedError

    async def describe_producers(self, partitions: Iterable[TopicPartition | tuple[str, int]], *,
                                 broker_id: int | None = None
                                 ) -> dict[TopicPartition, list[ProducerState]]:
        """The active producers of each partition (DescribeProducers), asked of its leader or
        of `broker_id` (any replica). Raises the first partition's error."""
        tps = [TopicPartition(*tp) for tp in partitions]
        by_node: dict[int, list[TopicPartition]] = {}
        if broker_id is not None:
            by_node[broker_id] = tps
        else:
            md = await self.client.refresh_metadata()
            for tp in tps:
                leader = md.leader(tp)
                if leader is None:
                    t = md.topics.get(tp.topic)
                    code = ErrorCode.unknown_topic_or_partition if t is None or \
                        tp.partition not in t.partitions else ErrorCode.leader_not_available
                    raise KafkaError.for_code(code, context=f"DescribeProducers {tp}")
                by_node.setdefault(leader, []).append(tp)
        out: dict[TopicPartition, list[ProducerState]] = {}
        for node, parts in by_node.items():
            by_topic: dict[str, list[int]] = {}
            for tp in parts:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            resp = await self.client.send(node, 61, topics=[
                {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()])
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code != ErrorCode.none:
                        raise KafkaError.for_code(p.error_code, p.error_message,
                                                  context=f"DescribeProducers {tp}")
                    out[tp] = [ProducerState(
                        s.producer_id, s.producer_epoch, s.last_sequence, _ms(s.last_timestamp),
                        s.coordinator_epoch, s.current_txn_start_offset)
                        for s in p.active_producers]
        return out

    async def describe_transactions(self, transactional_ids: Iterable[str]
                                    ) -> dict[str, TransactionDescription]:
        """The state of each transactional id at its coordinator (DescribeTransactions);
        raises the first id's error (TRANSACTIONAL_ID_NOT_FOUND for an unknown one)."""
        out: dict[str, TransactionDescription] = {}
        for tid in transactional_ids:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.api_timeout
            while True:
                node = await self._coordinator(tid, key_type=1)
                resp = await self.client.send(node, 65, transactional_ids=[tid])
                st = next((x for x in resp.transaction_states if x.transactional_id == tid),
                          None)
                if st is None:
                    raise KafkaError(f"DescribeTransactions({tid}): no answer for the id")
                if st.error_code == ErrorCode.none:
                    break
                err = KafkaError.for_code(st.error_code, context=f"DescribeTransactions({tid})")
                if not err.retriable or loop.time() > deadline:
                    raise err
                await asyncio.sleep(self.retry_backoff)
            out[tid] = TransactionDescription(
                node, st.transaction_state, st.producer_id, st.producer_epoch,
                _ms(st.transaction_timeout), _ms(st.transaction_start_time),
                [TopicPartition(t.topic, p) for t in st.topics for p in t.partitions])
        return out

    async def list_transactions(self, *, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = (),
                                duration_ms: int = -1) -> dict[int, list[TransactionListing]]:
        """Every broker's transactional ids (ListTransactions), by coordinator id: those in
        `states`, of `producer_ids`, running longer than `duration_ms` (when given)."""
        md = await self.client.refresh_metadata()
        out: dict[int, list[TransactionListing]] = {}
        for node in sorted(md.brokers):
            if duration_ms >= 0 and (await self.client.connection(node)).version(66) < 1:
                raise UnsupportedVersionError(
                    "Duration filter can be set only when using API version 1 or higher. If "
                    "client is connected to an older broker, do not specify duration filter or "
                    "set duration filter to -1.")
            resp = await self.client.send(node, 66, state_filters=list(states),
                                          producer_id_filters=list(producer_ids),
                                          duration_filter=duration_ms)
            if resp.error_code != ErrorCode.none:
                raise KafkaError.for_code(resp.error_code, context=f"ListTransactions on {node}")
            out[node] = [TransactionListing(t.transactional_id, t.producer_id,
                                            t.transaction_state)
                         for t in resp.transaction_states]
        return out

    async def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        """Abort a hanging transaction on one partition: WriteTxnMarkers (ABORT, with the
        producer id/epoch and coordinator epoch of `spec`) to the partition's leader, as
        Kafka's Admin.abortTransaction does (needs CLUSTER_ACTION on the cluster)."""
        tp = spec.topic_partition
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.api_timeout
        while True:
            md = await self.client.refresh_metadata()
            leader = md.leader(tp)
            code: int = int(ErrorCode.leader_not_available)
            if leader is not None:
                resp = await self.client.send(leader, 27, markers=[{
                    "producer_id": spec.producer_id, "producer_epoch": spec.producer_epoch,
                    "transaction_result": False, "coordinator_epoch": spec.coordinator_epoch,
                    "transaction_version": 0,
                    "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}]}])
                codes = [p.error_code for m in resp.markers for t in m.topics
                         for p in t.partitions
                         if t.name == tp.topic and p.partition_index == tp.partition]
                if not codes:
                    raise KafkaError(f"WriteTxnMarkers {tp}: no answer for the partition")
                code = int(codes[0])
                if code == ErrorCode.none:
                    return
            err = KafkaError.for_code(code, context=f"WriteTxnMarkers {tp}")
            if not err.retriable or loop.time() > deadline:
                raise err
            await asyncio.sleep(self.retry_backoff)


def _ms(value: Any) -> int:
    """Milliseconds of a kio field that may be an int, a timedelta or a datetime."""
    if value is None:
        return -1
    if isinstance(value, int):
        return value
    if hasattr(value, "total_seconds"):
        return round(value.total_seconds() * 1000)
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * 1000)
    return int(value)

"""The transactional producer's requests to its transaction coordinator and to the group
coordinator (KIP-98, KIP-447): FindCoordinator (key type 1 for the transactional id, 0 for a
group), InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn.

Each request is retried as Kafka's TransactionManager retries it: after retry.backoff.ms on a
retriable error (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, ...), after a new
coordinator lookup on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE or a lost connection, until
the call's deadline; an abortable or fatal answer moves the `TransactionManager` to that error
state and raises it. Coordinators get connections of their own ("txn", "txn-group"), so a
coordinator request never queues behind a Produce.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from .cluster_metadata import KafkaClient
from .errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from .transaction_manager import Outcome, TransactionManager, TxnApi, classify, error_for
from .types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

log = logging.getLogger("odradek.client.producer")

TXN_KEY_TYPE, GROUP_KEY_TYPE = 1, 0


def find_coordinator_result(resp: Any) -> tuple[int, int, str, int, str | None]:
    """(error code, node id, host, port, message) of a FindCoordinator response of any
    version (v4+ answers a list of coordinators)."""
    if hasattr(resp, "coordinators"):
        c = resp.coordinators[0]
        return int(c.error_code), c.node_id, c.host, c.port, c.error_message
    return (int(resp.error_code), resp.node_id, resp.host, resp.port,
            getattr(resp, "error_message", None))


def add_partitions_codes(resp: Any) -> dict[TopicPartition, int]:
    """Per-partition error codes of an AddPartitionsToTxn v0-v3 response."""
    topics = getattr(resp, "results_by_topic_v3_and_below", None)
    if topics is None:
        topics = getattr(resp, "results", ())
    out: dict[TopicPartition, int] = {}
    for t in topics:
        for p in getattr(t, "results_by_partition", None) or getattr(t, "results", ()):
            code = getattr(p, "partition_error_code", None)
            out[TopicPartition(t.name, p.partition_index)] = int(
                p.error_code if code is None else code)
    return out


def add_partitions_outcome(codes: Mapping[TopicPartition, int]) -> tuple[Outcome, int]:
    """The outcome of a whole AddPartitionsToTxn answer (Kafka's handler): the first retry or
    fatal answer decides; else unauthorized topics or other partition errors are abortable."""
    worst: tuple[Outcome, int] = (Outcome.DONE, 0)
    for code in codes.values():
        outcome = classify(TxnApi.ADD_PARTITIONS, code)
        if outcome in (Outcome.RETRY, Outcome.FIND_COORDINATOR, Outcome.FATAL):
            return outcome, code
        if outcome is Outcome.ABORTABLE and (worst[0] is Outcome.DONE or
                                              code == ErrorCode.topic_authorization_failed):
            worst = (outcome, code)
    return worst


class TransactionalRequests:
    """Sends one transactional producer's coordinator requests (one at a time: the caller
    serializes them)."""

    def __init__(self, client: KafkaClient, manager: TransactionManager,
                 retry_backoff: float, request_timeout: float) -> None:
        self.client = client
        self.manager = manager
        self.retry_backoff = retry_backoff
        self.request_timeout = request_timeout
        self.coordinator: tuple[int, str, int] | None = None
        self.group_coordinators: dict[str, tuple[int, str, int]] = {}
        # coordinator_supports_epoch_bump: InitProducerId v3+ (KIP-360)
        self.init_version = -1

    # -- coordinators --------------------------------------------------------------------------
    async def _find(self, key_type: int, key: str) -> tuple[int, str, int]:
        resp = await self.client.send_any(10, key=key, key_type=key_type, coordinator_keys=[key])
        code, node, host, port, msg = find_coordinator_result(resp)
        if code != ErrorCode.none:
            outcome = classify(TxnApi.FIND_COORDINATOR, code)
            err = KafkaError.for_code(code, msg, context=f"FindCoordinator({key})")
            if outcome is Outcome.RETRY:
                raise err
            self.manager.outcome(outcome, err)
            raise err
        return node, host, port

    async def _connection(self, key_type: int, key: str, deadline: float) -> Any:
        loop = asyncio.get_running_loop()
        purpose = "txn" if key_type == TXN_KEY_TYPE else "txn-group"
        while True:
            found = self.coordinator if key_type == TXN_KEY_TYPE else \
                self.group_coordinators.get(key)
            try:
                if found is None:
                    found = await self._find(key_type, key)
                    if key_type == TXN_KEY_TYPE:
                        self.coordinator = found
                    else:
                        self.group_coordinators[key] = found
                node, host, port = found
                return await self.client.connect_address(node, host, port, purpose)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                self._forget(key_type, key)
                if loop.time() + self.retry_backoff > deadline:
                    raise KafkaTimeoutError(f"no coordinator for {key} before the deadline "
                                            f"({exc})") from None
                await asyncio.sleep(self.retry_backoff)

    def _forget(self, key_type: int, key: str) -> None:
        found = self.coordinator if key_type == TXN_KEY_TYPE else \
            self.group_coordinators.get(key)
        purpose = "txn" if key_type == TXN_KEY_TYPE else "txn-group"
        if found is not None:
            self.client.close_connection(found[0], purpose)
        if key_type == TXN_KEY_TYPE:
            self.coordinator = None
        else:
            self.group_coordinators.pop(key, None)

    async def _request(self, api: TxnApi, api_key: int, deadline: float,
                       outcome_of: Callable[[Any], tuple[Outcome, int]], *,
                       key_type: int = TXN_KEY_TYPE, key: str | None = None,
                       **kwargs: Any) -> Any:
        """Send until DONE; apply and raise an abortable or fatal answer; KafkaTimeoutError
        when `deadline` passes first."""
        loop = asyncio.get_running_loop()
        key = self.manager.transactional_id if key is None else key
        last = ""
        while True:
            conn = await self._connection(key_type, key, deadline)
            try:
                resp = await conn.send(api_key, request_timeout=self.request_timeout, **kwargs)
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                outcome, code, last = Outcome.FIND_COORDINATOR, -1, str(exc)
            else:
                outcome, code = outcome_of(resp)
                if outcome is Outcome.DONE:
                    return resp
                last = ErrorCode(code).name.upper() if code in ErrorCode._value2member_map_ \
                    else str(code)
            if outcome in (Outcome.ABORTABLE, Outcome.FATAL):
                err = error_for(api, code, context=f"{api.value}({key})")
                self.manager.outcome(outcome, err)
                raise err
            if outcome is Outcome.FIND_COORDINATOR:
                self._forget(key_type, key)
            log.debug("%s(%s): %s, retrying", api.value, key, last)
            if loop.time() + self.retry_backoff > deadline:
                raise KafkaTimeoutError(f"{api.value}({key}) did not complete before the "
                                        f"deadline (last error {last})")
            await asyncio.sleep(self.retry_backoff)

    # -- the requests ---------------------------------------------------------------------------
    async def init_producer_id(self, deadline: float, bump: bool = False) -> None:
        """InitProducerId with the transactional id (a fresh id and epoch, or with `bump` the
        current ones, to get the next epoch: KIP-360); moves the manager to READY."""
        m = self.manager
        pid, epoch = (m.producer_id, m.producer_epoch) if bump else (-1, -1)
        resp = await self._request(
            TxnApi.INIT_PRODUCER_ID, 22, deadline,
            lambda r: (classify(TxnApi.INIT_PRODUCER_ID, r.error_code), int(r.error_code)),
            transactional_id=m.transactional_id, transaction_timeout=m.transaction_timeout_ms,
            producer_id=pid, producer_epoch=epoch)
        m.initialized(resp.producer_id, resp.producer_epoch)

    async def add_partitions(self, partitions: list[TopicPartition], deadline: float) -> None:
        """AddPartitionsToTxn for `partitions` (already taken from the manager's new ones)."""
        m = self.manager
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partitions": ps} for t, ps in sorted(by_topic.items())]
        try:
            await self._request(
                TxnApi.ADD_PARTITIONS, 24, deadline,
                lambda r: add_partitions_outcome(add_partitions_codes(r)),
                transactional_id=m.transactional_id, producer_id=m.producer_id,
                producer_epoch=m.producer_epoch, topics=topics,
                v3_and_below_transactional_id=m.transactional_id,
                v3_and_below_producer_id=m.producer_id,
                v3_and_below_producer_epoch=m.producer_epoch, v3_and_below_topics=topics)
        except KafkaError:
            m.add_partitions_failed(partitions, retry=not m.has_error)
            raise
        m.partitions_added(partitions)

    async def send_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                           group: ConsumerGroupMetadata, deadline: float) -> None:
        """AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group's
        coordinator (v3: generation, member id and group instance id of `group`)."""
        m = self.manager
        await self._request(
            TxnApi.ADD_OFFSETS, 25, deadline,
            lambda r: (classify(TxnApi.ADD_OFFSETS, r.error_code), int(r.error_code)),
            transactional_id=m.transactional_id, producer_id=m.producer_id,
            producer_epoch=m.producer_epoch, group_id=group.group_id)
        m.offsets_added()
        pending = dict(offsets)
        while pending:
            resp = await self._request(
                TxnApi.TXN_OFFSET_COMMIT, 28, deadline, _txn_offset_commit_outcome,
                key_type=GROUP_KEY_TYPE, key=group.group_id,
                transactional_id=m.transactional_id, group_id=group.group_id,
                producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                generation_id=group.generation_id, member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=_offset_topics(pending))
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.none:
                        pending.pop(TopicPartition(t.name, p.partition_index), None)
            if pending:  # some partitions answered a retriable error: resend those
                if asyncio.get_running_loop().time() + self.retry_backoff > deadline:
                    raise KafkaTimeoutError(f"TxnOffsetCommit({group.group_id}) of "
                                            f"{sorted(pending)} did not complete in time")
                await asyncio.sleep(self.retry_backoff)

    async def end_txn(self, commit: bool, deadline: float) -> None:
        m = self.manager
        await self._request(
            TxnApi.END_TXN, 26, deadline,
            lambda r: (classify(TxnApi.END_TXN, r.error_code), int(r.error_code)),
            transactional_id=m.transactional_id, producer_id=m.producer_id,
            producer_epoch=m.producer_epoch, committed=commit)


def _offset_topics(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, om in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "committed_offset": om.offset,
            "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata})
    return [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


def _txn_offset_commit_outcome(resp: Any) -> tuple[Outcome, int]:
    """TxnOffsetCommit: DONE when every partition is (or some are and the rest retry: the
    caller resends only those); the first abortable or fatal answer decides."""
    retry: tuple[Outcome, int] | None = None
    any_ok = False
    for t in resp.topics:
        for p in t.partitions:
            outcome = classify(TxnApi.TXN_OFFSET_COMMIT, p.error_code)
            if outcome in (Outcome.ABORTABLE, Outcome.FATAL):
                return outcome, int(p.error_code)
            if outcome is Outcome.DONE:
                any_ok = True
            elif retry is None or outcome is Outcome.FIND_COORDINATOR:
                retry = (outcome, int(p.error_code))
    if retry is None or any_ok:
        return Outcome.DONE, 0
    return retry


def offsets_of(offsets: Mapping[Any, int | OffsetAndMetadata] | Iterable[Any]
               ) -> dict[TopicPartition, OffsetAndMetadata]:
    """send_offsets_to_transaction's argument: {tp: offset or OffsetAndMetadata}, or
    confluent-kafka's list of TopicPartition-like objects with an `offset`."""
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    if isinstance(offsets, Mapping):
        for tp, o in offsets.items():
            out[TopicPartition(*tp)] = o if isinstance(o, OffsetAndMetadata) \
                else OffsetAndMetadata(int(o))
        return out
    for item in offsets:
        tp = TopicPartition(item.topic, item.partition)
        out[tp] = OffsetAndMetadata(int(item.offset), getattr(item, "metadata", "") or "",
                                    getattr(item, "leader_epoch", -1))
    return out

"""Two-phase commit with Kafka transactions (KIP-98), as Flink's Kafka sink does it: one process
writes a transaction and stops short of committing it (`TwoPhaseProducer.prepare`: flush, no
EndTxn), hands over what identifies it (`PreparedTransaction`: transactional id, producer id,
epoch), and another process commits or aborts it (`finish_transactions`: FindCoordinator with
key type 1, then EndTxn with that producer id and epoch, as FlinkKafkaInternalProducer resumes a
pre-committed transaction).

    with TwoPhaseProducer({"bootstrap.servers": bs, "transactional.id": "sink-3"}) as p:
        p.begin()                       # InitProducerId (fences older attempts), then begin
        p.send_rows([("out", b"v", None, None, None)])
        prepared = p.prepare()          # flushed, still open at the coordinator
    # ... later, anywhere:
    finish_transactions({"bootstrap.servers": bs}, [prepared], commit=True)

EndTxn's answers, as the coordinator gives them (Kafka's TransactionCoordinator.endTransaction):
NONE also for a commit of a transaction already committed with that epoch (a replayed commit is
harmless); NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / a lost connection: look the coordinator
up again and retry; CONCURRENT_TRANSACTIONS / COORDINATOR_LOAD_IN_PROGRESS: retry after
retry.backoff.ms; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH: a newer InitProducerId (a retried
writer, or the coordinator aborting the transaction after transaction.timeout.ms) took the id
over, so the transaction was aborted: `TransactionLostError`; INVALID_TXN_STATE on a commit:
the transaction was aborted meanwhile: `TransactionLostError` too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from ..common.loop_thread import LoopThread
from .cluster_metadata import KafkaClient
from .config import PRODUCER, build_config
from .errors import KafkaError, ProducerFencedError
from .producer import AsyncProducer
from .transaction_manager import TransactionManager
from .txn_requests import TransactionalRequests
from .types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition

Row = tuple[str, Any, Any, "int | None", "Sequence[tuple[str, bytes | None]] | None"]


@dataclass(frozen=True)
class PreparedTransaction:
    """An open transaction whose records are all written (pickled between processes).
    `started`: a partition or offsets were added (else there is nothing to end)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    started: bool = True


class TransactionLostError(KafkaError):
    """The prepared transaction can no longer be committed: it was aborted (fenced by a newer
    producer with the same transactional id, or timed out after transaction.timeout.ms)."""


class TwoPhaseProducer:
    """A transactional AsyncProducer on a loop thread of its own whose transaction is committed
    elsewhere. Closing it never ends the transaction (Kafka's close() does not either)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        cfg = dict(config)
        if not cfg.get("transactional.id"):
            raise ValueError("TwoPhaseProducer needs a transactional.id")
        self._runner = LoopThread("odradek-two-phase")
        try:
            self.producer: AsyncProducer = self._runner.run(self._create(cfg))
        except BaseException:
            self._runner.stop()
            raise
        self.errors: list[BaseException] = []
        self.sent = 0
        self.delivered = 0

    @staticmethod
    async def _create(cfg: dict[str, Any]) -> AsyncProducer:
        p = AsyncProducer(cfg)
        try:
            return await p.start()
        except BaseException:
            await p.client.close()
            raise

    @property
    def transactional_id(self) -> str:
        return str(self.producer.transactional_id)

    def begin(self, timeout: float | None = None) -> None:
        """InitProducerId (which fences and aborts an earlier holder's open transaction), then
        begin a transaction."""
        self._runner.run(self.producer.init_transactions(timeout))
        self._runner.run(self._begin())

    async def _begin(self) -> None:
        self.producer.begin_transaction()

    def _done(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self.errors.append(KafkaError("record cancelled"))
        elif fut.exception() is not None:
            self.errors.append(fut.exception())  # type: ignore[arg-type]
        else:
            self.delivered += 1

    async def _send_rows(self, rows: Iterable[Row]) -> None:
        send = self.producer.send
        for topic, value, key, partition, headers in rows:
            if self.errors:
                return
            try:
                fut = await send(topic, value, key, partition=partition, headers=headers)
            except KafkaError as exc:  # refused before sending (no such partition, too large)
                self.errors.append(exc)
                return
            fut.add_done_callback(self._done)
            self.sent += 1

    def send_rows(self, rows: Iterable[Row]) -> None:
        """Queue rows (topic, value, key, partition, headers) in one hop to the loop thread;
        delivery errors are collected and raised by prepare()."""
        self._runner.run(self._send_rows(rows))

    def send_offsets(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     group_id: str, timeout: float | None = None) -> None:
        """Commit `offsets` for `group_id` within the transaction (AddOffsetsToTxn +
        TxnOffsetCommit): they become visible exactly when the transaction commits."""
        self._runner.run(self.producer.send_offsets_to_transaction(
            offsets, ConsumerGroupMetadata(group_id), timeout))

    def prepare(self, timeout: float | None = None) -> PreparedTransaction:
        """Deliver every record (flush) and return what identifies the still-open transaction;
        raises the first delivery error (the transaction is then left to abort)."""
        left = self._runner.run(self.producer.flush(timeout))
        if self.errors:
            raise KafkaError(f"Writing to odradek failed: {self.errors[0]}") from self.errors[0]
        if left:
            raise KafkaError(f"Writing to odradek failed: {left} of {self.sent} records were "
                             "not delivered")
        txn = self.producer.txn
        assert txn is not None
        txn.maybe_fail_with_error()
        return PreparedTransaction(self.transactional_id, txn.producer_id, txn.producer_epoch,
                                   txn.transaction_started)

    def abort(self, timeout: float | None = None) -> None:
        self._runner.run(self.producer.abort_transaction(timeout))

    def close(self, timeout: float | None = 5.0) -> None:
        try:
            self._runner.run(self.producer.close(timeout))
        finally:
            self._runner.stop()

    def __enter__(self) -> TwoPhaseProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _finish_one(client: KafkaClient, prepared: PreparedTransaction, commit: bool,
                      deadline: float, retry_backoff: float, request_timeout: float) -> None:
    manager = TransactionManager(prepared.transactional_id)
    manager.producer_id, manager.producer_epoch = prepared.producer_id, prepared.producer_epoch
    requests = TransactionalRequests(client, manager, retry_backoff, request_timeout)
    what = "commit" if commit else "abort"
    try:
        await requests.end_txn(commit, deadline)
    except ProducerFencedError as exc:
        if not commit:
            return  # fenced means aborted (or taken over): nothing left to abort
        raise TransactionLostError(
            f"Cannot commit transaction {prepared.transactional_id} (producer id "
            f"{prepared.producer_id}, epoch {prepared.producer_epoch}): a newer producer took "
            "the transactional id over, or the coordinator aborted the transaction after "
            "transaction.timeout.ms", int(ErrorCode.producer_fenced)) from exc
    except KafkaError as exc:
        if exc.code == ErrorCode.invalid_txn_state:
            if not commit:
                return
            raise TransactionLostError(
                f"Cannot commit transaction {prepared.transactional_id}: it is no longer open "
                "(aborted)", int(exc.code)) from exc
        if exc.code == ErrorCode.invalid_producer_id_mapping:
            raise TransactionLostError(
                f"Cannot {what} transaction {prepared.transactional_id}: the coordinator has "
                f"no producer id {prepared.producer_id} for it", int(exc.code)) from exc
        raise


async def finish_transactions_async(config: Mapping[str, Any],
                                    prepared: Sequence[PreparedTransaction], commit: bool,
                                    timeout: float = 60.0) -> None:
    """EndTxn(commit or abort) for each prepared transaction (concurrently, through one
    client); raises the first failure after all have been tried."""
    cfg = build_config(PRODUCER, dict(config), {})
    client = KafkaClient(cfg)
    await client.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        backoff = int(cfg["retry.backoff.ms"]) / 1000
        rt = int(cfg["request.timeout.ms"]) / 1000
        results = await asyncio.gather(
            *(_finish_one(client, p, commit, deadline, backoff, rt)
              for p in prepared if p.started), return_exceptions=True)
    finally:
        await client.close()
    for r in results:
        if isinstance(r, BaseException):
            raise r


def finish_transactions(config: Mapping[str, Any], prepared: Sequence[PreparedTransaction],
                        commit: bool, timeout: float = 60.0) -> None:
    """The synchronous face of `finish_transactions_async` (for a driver process)."""
    if not any(p.started for p in prepared):
        return
    asyncio.run(finish_transactions_async(config, prepared, commit, timeout))

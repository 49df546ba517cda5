"""The transaction coordinator (Kafka 2.8's TransactionCoordinator, KIP-98 and KIP-360).

Each broker coordinates the transactional ids of the `__transaction_state` partitions it leads
(`partition_for`: abs(hashCode) % partitions). Its requests:

* InitProducerId: a new transactional id gets a producer id (from the cluster-wide block
  allocator) at epoch 0; an existing one has its epoch bumped, which fences older producers.
  An ongoing transaction is aborted first (PrepareEpochFence -> PrepareAbort with the epoch
  bumped) and the caller told CONCURRENT_TRANSACTIONS to retry. KIP-360: a producer naming its
  id and epoch gets the bump only if they are current (or the retry of a bump that succeeded);
  an exhausted epoch rotates to a new producer id.
* AddPartitionsToTxn / AddOffsetsToTxn: the transaction goes Ongoing with those partitions.
* EndTxn: PrepareCommit / PrepareAbort is written, the client answered, then the markers are
  written to every partition (transaction_marker_channel.py) and CompleteCommit / CompleteAbort
  written. A retried EndTxn is answered as Kafka does (NONE once complete,
  CONCURRENT_TRANSACTIONS while completing, INVALID_TXN_STATE for the other result).
* DescribeTransactions / ListTransactions (Kafka 3.0's KIP-664 views of the cache).

Ongoing transactions older than their timeout are aborted every
`transaction.abort.timed.out.transaction.cleanup.interval.ms` (the epoch bumped, fencing the
producer); idle transactional ids expire after `transactional.id.expiration.ms`.

The decisions are pure functions of the metadata and the request (`init_producer_id_decision`,
`add_partitions_decision`, `end_txn_decision`, `end_txn_complete_decision`); they only ever set
the metadata's pending state (the two-step transitions of transaction_state.py). A transition's
record is then appended; the result comes back through a callback, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from ..common import TopicPartition, entropy
from ..common import replica_assignment as asg
from ..common.clock import now_ms
from ..coordination import paths
from ..coordination.store import CoordinationStore, NodeExistsError
from ..protocol.records import NO_PRODUCER_ID
from ..runtime.scheduler import schedule_periodically
from .transaction_marker_channel import TransactionMarkerChannelManager
from .transaction_state import (
    NO_PRODUCER_EPOCH,
    NO_TXN_START_TIMESTAMP,
    TRANSACTION_STATE_TOPIC,
    CompleteAbort,
    CompleteCommit,
    Dead,
    Empty,
    IllegalTransactionState,
    Ongoing,
    PrepareAbort,
    PrepareCommit,
    PrepareEpochFence,
    ProducerFenced,
    TransactionMetadata,
    TransactionResult,
    TransactionState,
    TransactionStateError,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from .transaction_state_manager import (
    TransactionalIdAndProducerIdEpoch,
    TransactionConfig,
    TransactionStateManager,
)

log = logging.getLogger("odradek.coordinator.transaction")

# Kafka's AdminZkClient.createTopicWithAssignment: (topic, assignment, configs, topic id)
CreateTopic = Callable[[str, dict[int, list[int]], dict[str, str], uuid.UUID], Awaitable[None]]
ErrorCallback = Callable[[int], None]



@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    producer_id: int
    producer_epoch: int
    error: int

    @classmethod
    def failed(cls, error: int) -> InitProducerIdResult:
        return cls(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, error)


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    """One entry of DescribeTransactions (error NONE: the other fields are set)."""

    transactional_id: str
    error: int
    state: str = ""
    timeout_ms: int = 0
    start_timestamp: int = NO_TXN_START_TIMESTAMP
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[TopicPartition] = frozenset()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: int
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTransaction, ...] = ()


# -- decisions -------------------------------------------------------------------------------------

def _illegal(metadata: TransactionMetadata) -> IllegalTransactionState:
    return IllegalTransactionState(
        f"Found transactionalId {metadata.transactional_id} with state {metadata.state}. This is "
        "illegal as we should never have transitioned to this state.")


def is_valid_expected_producer_id(metadata: TransactionMetadata, producer_id: int,
                                  producer_epoch: int) -> bool:
    """KIP-360: a producer naming its id and epoch is not fenced when the metadata was just
    created (epoch -1), when the id is the current one (the epoch is checked when bumping), or
    when it is the previous one with an exhausted epoch (the retry of a rotation)."""
    return (metadata.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == metadata.producer_id
            or (producer_id == metadata.last_producer_id
                and is_epoch_exhausted(producer_epoch)))


def init_producer_id_decision(metadata: TransactionMetadata, txn_timeout_ms: int,
                              expected: tuple[int, int] | None, now_ms: int,
                              new_producer_id: int | None
                              ) -> int | TxnTransitMetadata | None:
    """Kafka's prepareInitProducerIdTransit: an error code, the transition to write (to Empty,
    or PrepareEpochFence for an ongoing transaction, which the caller aborts), or None when a
    new producer id is needed (the epoch is exhausted) and `new_producer_id` is None."""
    if metadata.pending_transition_in_progress:
        return ErrorCode.concurrent_transactions
    if expected is not None and not is_valid_expected_producer_id(metadata, *expected):
        return ErrorCode.producer_fenced
    state = metadata.state
    if state in (PrepareAbort, PrepareCommit):
        return ErrorCode.concurrent_transactions
    if state in (CompleteAbort, CompleteCommit, Empty):
        if metadata.is_producer_epoch_exhausted and (
                expected is None or expected[1] == metadata.producer_epoch):
            if new_producer_id is None:
                return None
            return metadata.prepare_producer_id_rotation(new_producer_id, txn_timeout_ms, now_ms,
                                                         expected is not None)
        try:
            return metadata.prepare_increment_producer_epoch(
                txn_timeout_ms, None if expected is None else expected[1], now_ms)
        except ProducerFenced:
            return ErrorCode.producer_fenced
    if state is Ongoing:
        # abort the ongoing transaction first; this epoch is never returned to the client
        return metadata.prepare_fence_producer_epoch()
    raise _illegal(metadata)


def _producer_error(metadata: TransactionMetadata, producer_id: int, producer_epoch: int
                    ) -> int | None:
    """The checks Kafka's handleAddPartitionsToTransaction and endTransaction (after the
    Prepare* append) share: the request comes from the transaction's producer, at its epoch,
    and no other transition is under way. None when it passes."""
    if metadata.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if metadata.producer_epoch != producer_epoch:
        return ErrorCode.producer_fenced
    if metadata.pending_transition_in_progress:
        return ErrorCode.concurrent_transactions
    return None


def add_partitions_decision(metadata: TransactionMetadata, producer_id: int, producer_epoch: int,
                            partitions: frozenset[TopicPartition], now_ms: int
                            ) -> int | TxnTransitMetadata:
    """Kafka's handleAddPartitionsToTransaction checks: an error (NONE when the partitions are
    already in the ongoing transaction) or the transition to Ongoing."""
    error = _producer_error(metadata, producer_id, producer_epoch)
    if error is not None:
        return error
    if metadata.state in (PrepareCommit, PrepareAbort):
        return ErrorCode.concurrent_transactions
    if metadata.state is Ongoing and partitions <= metadata.topic_partitions:
        return ErrorCode.none
    return metadata.prepare_add_partitions(partitions, now_ms)


def _retry_answer(result: TransactionResult, wanted: TransactionResult, same: int) -> int:
    if result is wanted:
        return same
    return ErrorCode.invalid_txn_state


def end_txn_decision(metadata: TransactionMetadata, producer_id: int, producer_epoch: int,
                     result: TransactionResult, is_from_client: bool, now_ms: int
                     ) -> int | tuple[TxnTransitMetadata, bool]:
    """Kafka's endTransaction, before the append: an error (NONE for a retry of a completed
    one) or (the transition to PrepareCommit / PrepareAbort, whether it is an epoch fence).
    An epoch fence (the coordinator's own abort after PrepareEpochFence) takes the bumped
    epoch into the metadata, as Kafka does."""
    if metadata.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    # clients may not bump the epoch; the coordinator's abort comes with the bumped one
    if (is_from_client and producer_epoch != metadata.producer_epoch) \
            or producer_epoch < metadata.producer_epoch:
        return ErrorCode.producer_fenced
    if metadata.pending_transition_in_progress and metadata.pending_state is not \
            PrepareEpochFence:
        return ErrorCode.concurrent_transactions
    state = metadata.state
    if state is Ongoing:
        next_state = PrepareCommit if result is TransactionResult.COMMIT else PrepareAbort
        is_epoch_fence = False
        if next_state is PrepareAbort and metadata.pending_state is PrepareEpochFence:
            is_epoch_fence = True
            metadata.pending_state = None
            metadata.producer_epoch = producer_epoch
            metadata.last_producer_epoch = NO_PRODUCER_EPOCH
        return metadata.prepare_abort_or_commit(next_state, now_ms), is_epoch_fence
    if state is CompleteCommit:
        return _retry_answer(result, TransactionResult.COMMIT, ErrorCode.none)
    if state is CompleteAbort:
        return _retry_answer(result, TransactionResult.ABORT, ErrorCode.none)
    if state is PrepareCommit:
        return _retry_answer(result, TransactionResult.COMMIT, ErrorCode.concurrent_transactions)
    if state is PrepareAbort:
        return _retry_answer(result, TransactionResult.ABORT, ErrorCode.concurrent_transactions)
    if state is Empty:
        return ErrorCode.invalid_txn_state
    raise _illegal(metadata)


def end_txn_complete_decision(metadata: TransactionMetadata, producer_id: int,
                              producer_epoch: int, result: TransactionResult, now_ms: int
                              ) -> int | TxnTransitMetadata:
    """Kafka's endTransaction after the Prepare* record is written: an error, or the
    transition to CompleteCommit / CompleteAbort that the markers' completion writes."""
    error = _producer_error(metadata, producer_id, producer_epoch)
    if error is not None:
        return error
    state = metadata.state
    if state in (Empty, Ongoing, CompleteCommit, CompleteAbort):
        return ErrorCode.invalid_txn_state
    if state is PrepareCommit:
        if result is not TransactionResult.COMMIT:
            return ErrorCode.invalid_txn_state
        return metadata.prepare_complete(now_ms)
    if state is PrepareAbort:
        if result is not TransactionResult.ABORT:
            return ErrorCode.invalid_txn_state
        return metadata.prepare_complete(now_ms)
    raise _illegal(metadata)


_D = TypeVar("_D")


def _decide(failure: str, transactional_id: str, decision: Callable[[], int | _D]) -> int | _D:
    """A decision's outcome, with an IllegalTransactionState it raises logged (`failure`, a
    format of the transactional id and the exception) and turned into its error code, as
    Kafka's coordinator answers it."""
    try:
        return decision()
    except TransactionStateError as exc:
        log.error(failure, transactional_id, exc)
        return exc.error_code


# -- the coordinator -------------------------------------------------------------------------------

class TransactionCoordinator:
    """Kafka's TransactionCoordinator. `next_producer_id` is the cluster-wide producer id block
    allocator; `live_brokers` and `create_topic` create `__transaction_state` on demand
    (FindCoordinator key type 1); `store` tells the partition count of an existing one."""

    def __init__(self, broker_id: int, config: TransactionConfig,
                 txn_manager: TransactionStateManager,
                 marker_channel: TransactionMarkerChannelManager,
                 next_producer_id: Callable[[], Awaitable[int]], store: CoordinationStore,
                 live_brokers: Callable[[], Iterable[int]], create_topic: CreateTopic,
                 clock: Callable[[], int] = now_ms) -> None:
        self.broker_id = broker_id
        self.config = config
        self.txn_manager = txn_manager
        self.marker_channel = marker_channel
        self.next_producer_id = next_producer_id
        self.store = store
        self.live_brokers = live_brokers
        self.create_topic = create_topic
        self.clock = clock
        self.is_active = False
        self._partition_count = config.num_partitions
        self._tasks: list[asyncio.Task[None]] = []
        self._creating_topic: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    async def startup(self, enable_transactional_id_expiration: bool = True) -> None:
        """Fix the partition count (the topic's if it exists, else the config), start the state
        manager, the marker channel and the periodic aborts / expirations, and listen to the
        leadership of `__transaction_state` partitions."""
        log.info("[TransactionCoordinator id=%d] Starting up.", self.broker_id)
        found = await self.store.get_or_none(paths.topic_path(TRANSACTION_STATE_TOPIC))
        if found is not None:
            self._partition_count = len(paths.decode_topic_assignment(found[0]).partitions)
        self.txn_manager.startup(lambda: self._partition_count)
        self.marker_channel.start()
        self._every("transaction-abort", self.config.abort_timed_out_transactions_interval_ms,
                    self.abort_timed_out_transactions)
        if enable_transactional_id_expiration:
            self._every("transactionalId-expiration",
                        self.config.remove_expired_transactional_ids_interval_ms,
                        self.txn_manager.remove_expired_transactional_ids)
        self.txn_manager.replica_manager.role_listeners[TRANSACTION_STATE_TOPIC] = \
            self.on_partition_role
        self.is_active = True
        log.info("[TransactionCoordinator id=%d] Startup complete.", self.broker_id)

    async def shutdown(self) -> None:
        log.info("[TransactionCoordinator id=%d] Shutting down.", self.broker_id)
        self.is_active = False
        self.txn_manager.replica_manager.role_listeners.pop(TRANSACTION_STATE_TOPIC, None)
        for task in (*self._tasks, self._creating_topic):
            if task is not None:
                task.cancel()
        self._tasks.clear()
        self.txn_manager.shutdown()
        await self.marker_channel.shutdown()
        log.info("[TransactionCoordinator id=%d] Shutdown complete.", self.broker_id)

    def _every(self, name: str, interval_ms: int, fn: Callable[[], Any]) -> None:
        task = schedule_periodically(
            f"{name}-{self.broker_id}", interval_ms, fn, logger=log,
            description=f"[TransactionCoordinator id={self.broker_id}] {name}")
        if task is not None:
            self._tasks.append(task)

    # -- leadership of __transaction_state -----------------------------------------------------
    def on_partition_role(self, partition: int, is_leader: bool, leader_epoch: int) -> None:
        """The replica manager's hook: leader -> onElection, otherwise onResignation (epoch -1:
        StopReplica)."""
        if not self.is_active:
            return
        if is_leader:
            self.on_election(partition, leader_epoch)
        else:
            self.on_resignation(partition, None if leader_epoch < 0 else leader_epoch)

    def on_election(self, partition: int, coordinator_epoch: int) -> None:
        log.info("[TransactionCoordinator id=%d] Elected as the txn coordinator for partition "
                 "%d at epoch %d", self.broker_id, partition, coordinator_epoch)
        self.marker_channel.remove_markers_for_txn_partition(partition)
        self.txn_manager.load_transactions_for_partition(
            partition, coordinator_epoch, self.marker_channel.add_txn_markers_to_send)

    def on_resignation(self, partition: int, coordinator_epoch: int | None) -> None:
        log.info("[TransactionCoordinator id=%d] Resigned as the txn coordinator for partition "
                 "%d at epoch %s", self.broker_id, partition, coordinator_epoch)
        self.txn_manager.remove_transactions_for_partition(partition, coordinator_epoch)
        self.marker_channel.remove_markers_for_txn_partition(partition)

    # -- __transaction_state creation (FindCoordinator) -------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return self.txn_manager.partition_for(transactional_id)

    def ensure_transaction_topic(self) -> None:
        """Create `__transaction_state` (once at a time) as Kafka's auto topic creation does:
        `transaction.state.log.num.partitions` partitions, `...replication.factor` replicas
        capped by the live brokers (as the group coordinator does), Kafka's topic configs."""
        task = self._creating_topic
        if task is not None and not task.done():
            return
        self._creating_topic = asyncio.ensure_future(self._create_topic())

    async def _create_topic(self) -> None:
        if await self.store.exists(paths.topic_path(TRANSACTION_STATE_TOPIC)) is not None:
            return
        brokers = sorted(self.live_brokers())
        if not brokers:
            return
        rf = min(self.config.replication_factor, len(brokers))
        assignment = asg.assign_replicas_to_brokers(brokers, self._partition_count, rf)
        try:
            await self.create_topic(TRANSACTION_STATE_TOPIC, assignment,
                                    self.config.topic_configs(rf), entropy.uuid4())
            log.info("Created internal topic %s with %d partitions and replication factor %d",
                     TRANSACTION_STATE_TOPIC, len(assignment), rf)
        except NodeExistsError:
            pass
        except Exception:
            log.exception("Could not create %s", TRANSACTION_STATE_TOPIC)

    # -- InitProducerId ---------------------------------------------------------------------------
    async def handle_init_producer_id(self, transactional_id: str | None,
                                      txn_timeout_ms: int,
                                      expected: tuple[int, int] | None = None
                                      ) -> InitProducerIdResult:
        if transactional_id is None:
            # no transactional id: blindly a new producer id (the idempotent producer)
            return InitProducerIdResult(await self.next_producer_id(), 0, ErrorCode.none)
        if not transactional_id:
            return InitProducerIdResult.failed(ErrorCode.invalid_request)
        if not self.txn_manager.validate_transaction_timeout_ms(txn_timeout_ms):
            return InitProducerIdResult.failed(ErrorCode.invalid_transaction_timeout)
        try:
            return await self._init_producer_id(transactional_id, txn_timeout_ms, expected)
        except TransactionStateError as exc:
            log.error("InitProducerId of %s failed: %s", transactional_id, exc)
            return InitProducerIdResult.failed(exc.error_code)

    async def _init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                                expected: tuple[int, int] | None) -> InitProducerIdResult:
        new_producer_id: int | None = None
        while True:
            # no await from here to the append: the decision stands on the current cache
            error, found = self.txn_manager.get_transaction_state(transactional_id)
            if error != ErrorCode.none:
                return InitProducerIdResult.failed(error)
            if found is None:
                if new_producer_id is None:
                    new_producer_id = await self.next_producer_id()
                    continue
                created = TransactionMetadata(
                    transactional_id, new_producer_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                    NO_PRODUCER_EPOCH, txn_timeout_ms, Empty, set(), NO_TXN_START_TIMESTAMP,
                    self.clock())
                new_producer_id = None
                error, found = self.txn_manager.put_transaction_state_if_not_exists(created)
                if error != ErrorCode.none or found is None:
                    return InitProducerIdResult.failed(error or ErrorCode.not_coordinator)
            decision = init_producer_id_decision(found.transaction_metadata, txn_timeout_ms,
                                                 expected, self.clock(), new_producer_id)
            if decision is None:
                new_producer_id = await self.next_producer_id()
                continue
            break
        if isinstance(decision, int):
            return InitProducerIdResult.failed(decision)
        coordinator_epoch = found.coordinator_epoch
        future: asyncio.Future[InitProducerIdResult] = \
            asyncio.get_running_loop().create_future()

        def respond(result: InitProducerIdResult) -> None:
            if not future.done():
                future.set_result(result)

        if decision.txn_state is PrepareEpochFence:
            # abort the ongoing transaction, then let the client retry
            def fenced(error: int) -> None:
                respond(InitProducerIdResult.failed(
                    error if error != ErrorCode.none else ErrorCode.concurrent_transactions))
            self._end_transaction(transactional_id, decision.producer_id,
                                  decision.producer_epoch, TransactionResult.ABORT, False,
                                  fenced)
        else:
            def appended(error: int) -> None:
                if error == ErrorCode.none:
                    log.info("Initialized transactionalId %s with producerId %d and producer "
                             "epoch %d on partition %s-%d", transactional_id,
                             decision.producer_id, decision.producer_epoch,
                             TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id))
                    respond(InitProducerIdResult(decision.producer_id, decision.producer_epoch,
                                                 ErrorCode.none))
                else:
                    log.info("Returning %s error code to client for %s's InitProducerId "
                             "request", ErrorCode(error).name, transactional_id)
                    respond(InitProducerIdResult.failed(error))
            self.txn_manager.append_transaction_to_log(transactional_id, coordinator_epoch,
                                                       decision, appended)
        return await future

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------
    async def handle_add_partitions_to_transaction(self, transactional_id: str | None,
                                                   producer_id: int, producer_epoch: int,
                                                   partitions: Iterable[TopicPartition]) -> int:
        if not transactional_id:
            return ErrorCode.invalid_request
        wanted = frozenset(TopicPartition(*tp) for tp in partitions)
        error, found = self.txn_manager.get_transaction_state(transactional_id)
        if error != ErrorCode.none:
            return error
        if found is None:
            return ErrorCode.invalid_producer_id_mapping
        decision = _decide("AddPartitionsToTxn of %s failed: %s", transactional_id,
                           lambda: add_partitions_decision(found.transaction_metadata,
                                                           producer_id, producer_epoch, wanted,
                                                           self.clock()))
        if isinstance(decision, int):
            return decision
        return await self.txn_manager.append(transactional_id, found.coordinator_epoch,
                                             decision)

    # -- EndTxn -----------------------------------------------------------------------------------
    async def handle_end_transaction(self, transactional_id: str | None, producer_id: int,
                                     producer_epoch: int, result: TransactionResult) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def respond(error: int) -> None:
            if not future.done():
                future.set_result(error)

        self._end_transaction(transactional_id, producer_id, producer_epoch, result, True,
                              respond)
        return await future

    def _end_transaction(self, transactional_id: str | None, producer_id: int,
                         producer_epoch: int, result: TransactionResult, is_from_client: bool,
                         respond: ErrorCallback) -> None:
        if not transactional_id:
            respond(ErrorCode.invalid_request)
            return
        error, found = self.txn_manager.get_transaction_state(transactional_id)
        if error != ErrorCode.none:
            respond(error)
            return
        if found is None:
            respond(ErrorCode.invalid_producer_id_mapping)
            return
        coordinator_epoch = found.coordinator_epoch
        decision = _decide("EndTxn of %s failed: %s", transactional_id,
                           lambda: end_txn_decision(found.transaction_metadata, producer_id,
                                                    producer_epoch, result, is_from_client,
                                                    self.clock()))
        if isinstance(decision, int):
            respond(decision)
            return
        new_metadata, is_epoch_fence = decision

        def send_markers(error: int) -> None:
            if error != ErrorCode.none:
                log.info("Aborting sending of transaction markers and returning %s to client "
                         "for %s's EndTxn %s: appending %s at coordinator epoch %d failed",
                         ErrorCode(error).name, transactional_id, result.name, new_metadata,
                         coordinator_epoch)
                if is_epoch_fence:
                    err, current = self.txn_manager.get_transaction_state(transactional_id)
                    if current is not None and current.coordinator_epoch == coordinator_epoch:
                        # the bumped epoch may not be in the log: the next fence keeps it
                        current.transaction_metadata.has_failed_epoch_fence = True
                respond(error)
                return
            err, current = self.txn_manager.get_transaction_state(transactional_id)
            if err != ErrorCode.none or current is None:
                respond(err or ErrorCode.not_coordinator)
                return
            if current.coordinator_epoch != coordinator_epoch:
                respond(ErrorCode.not_coordinator)
                return
            metadata = current.transaction_metadata
            complete = _decide("EndTxn of %s failed after its append: %s", transactional_id,
                               lambda: end_txn_complete_decision(metadata, producer_id,
                                                                 producer_epoch, result,
                                                                 self.clock()))
            if isinstance(complete, int):
                respond(complete)
                return
            # the client is answered now; the markers and the completion follow
            respond(ErrorCode.none)
            self.marker_channel.add_txn_markers_to_send(coordinator_epoch, result, metadata,
                                                        complete)

        self.txn_manager.append_transaction_to_log(transactional_id, coordinator_epoch,
                                                   new_metadata, send_markers)

    # -- timeouts -------------------------------------------------------------------------------
    def abort_timed_out_transactions(self) -> int:
        """Abort the ongoing transactions past their timeout, fencing their producers (the epoch
        bumped through PrepareEpochFence). Returns how many aborts were started."""
        started = 0
        for expired in self.txn_manager.timed_out_transactions():
            error, found = self.txn_manager.get_transaction_state(expired.transactional_id)
            if error != ErrorCode.none or found is None:
                continue
            metadata = found.transaction_metadata
            if metadata.producer_id != expired.producer_id:
                log.error("Found incorrect producerId when expiring transactionalId %s: expected "
                          "%d, found %d", expired.transactional_id, expired.producer_id,
                          metadata.producer_id)
                continue
            if metadata.pending_transition_in_progress:
                continue
            try:
                transit = metadata.prepare_fence_producer_epoch()
            except TransactionStateError as exc:
                log.error("Cannot abort the timed out transaction of %s: %s",
                          expired.transactional_id, exc)
                continue
            started += 1
            self._end_transaction(metadata.transactional_id, transit.producer_id,
                                  transit.producer_epoch, TransactionResult.ABORT, False,
                                  _on_timeout_abort(expired))
        return started

    # -- DescribeTransactions / ListTransactions ------------------------------------------------
    def handle_describe_transactions(self, transactional_id: str) -> DescribedTransaction:
        if not self.is_active:
            return DescribedTransaction(transactional_id, ErrorCode.coordinator_not_available)
        if not transactional_id:
            return DescribedTransaction(transactional_id, ErrorCode.invalid_request)
        error, found = self.txn_manager.get_transaction_state(transactional_id)
        if error != ErrorCode.none:
            return DescribedTransaction(transactional_id, error)
        if found is None or found.transaction_metadata.state is Dead:
            return DescribedTransaction(transactional_id, ErrorCode.transactional_id_not_found)
        m = found.transaction_metadata
        return DescribedTransaction(transactional_id, ErrorCode.none, m.state.state_name,
                                    m.txn_timeout_ms, m.txn_start_timestamp, m.producer_id,
                                    m.producer_epoch, frozenset(m.topic_partitions))

    def handle_list_transactions(self, producer_ids: Iterable[int], states: Iterable[str]
                                 ) -> ListTransactionsResult:
        if not self.is_active:
            return ListTransactionsResult(ErrorCode.coordinator_not_available)
        if self.txn_manager.loading_partitions:
            return ListTransactionsResult(ErrorCode.coordinator_load_in_progress)
        names = list(states)
        wanted_states = {state for name in names
                         if (state := TransactionState.from_name(name)) is not None}
        unknown = tuple(name for name in names if TransactionState.from_name(name) is None)
        wanted_ids = set(producer_ids)
        listed = tuple(
            ListedTransaction(m.transactional_id, m.producer_id, m.state.state_name)
            for m in self.txn_manager.all_metadata()
            if m.state is not Dead
            and (not wanted_ids or m.producer_id in wanted_ids)
            and (not names or m.state in wanted_states))
        return ListTransactionsResult(ErrorCode.none, unknown, listed)


def _on_timeout_abort(expired: TransactionalIdAndProducerIdEpoch) -> ErrorCallback:
    def done(error: int) -> None:
        if error == ErrorCode.none:
            log.info("Completed rollback of ongoing transaction for transactionalId %s due to "
                     "timeout", expired.transactional_id)
        elif error in (ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                       ErrorCode.concurrent_transactions):
            log.debug("Rollback of ongoing transaction for transactionalId %s has been "
                      "cancelled due to error %s", expired.transactional_id,
                      ErrorCode(error).name)
        else:
            log.warning("Rollback of ongoing transaction for transactionalId %s failed due to "
                        "error %s", expired.transactional_id, ErrorCode(error).name)
    return done

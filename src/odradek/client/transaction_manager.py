"""The transactional producer's state (KIP-98), as Kafka's client ``TransactionManager`` keeps it:
the state machine as a table, the partitions of the ongoing transaction, the last error, and the
classification of each coordinator answer as done / retry / look the coordinator up again /
abortable / fatal. Pure: the requests themselves are `txn_requests.TransactionalRequests`'s.

States and transitions (Kafka's ``TransactionManager.State.isTransitionValid``)::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY
                                                 |        \\-> ABORTING_TRANSACTION -> READY
                                                 \\-> ABORTABLE_ERROR -> ABORTING_TRANSACTION
    any -> FATAL_ERROR (never left: the producer can only be closed)

An abortable error (a batch that failed, an unauthorized topic, a group commit refused for a
stale generation, TRANSACTION_ABORTABLE) leaves the transaction to be aborted; a fatal one
(PRODUCER_FENCED / INVALID_PRODUCER_EPOCH from a coordinator,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_TXN_STATE, an unexpected error) ends the producer.
Sending outside a transaction raises IllegalStateError ("Cannot add partition ... to
transaction while in state ..."), as Kafka's ``maybeAddPartition`` does.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .errors import IllegalStateError, KafkaError, ProducerFencedError, is_retriable
from .types import TopicPartition


class TxnState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState
# target -> the states it may be entered from (FATAL_ERROR: from any state).
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION,
                                  S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(TxnState),
}


def is_transition_valid(source: TxnState, target: TxnState) -> bool:
    return source in VALID_PREVIOUS[target]


# -- answers of the coordinators ----------------------------------------------------------------
class Outcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"  # send again after retry.backoff.ms (the same coordinator)
    FIND_COORDINATOR = "find_coordinator"  # look the coordinator up again, then retry
    ABORTABLE = "abortable"
    FATAL = "fatal"


class TxnApi(enum.Enum):
    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"
    ADD_OFFSETS = "AddOffsetsToTxn"
    TXN_OFFSET_COMMIT = "TxnOffsetCommit"
    END_TXN = "EndTxn"
    FIND_COORDINATOR = "FindCoordinator"
    PRODUCE = "Produce"


E = ErrorCode
_COORDINATOR_MOVED = frozenset({E.not_coordinator, E.coordinator_not_available})
_FENCED = frozenset({E.invalid_producer_epoch, E.producer_fenced})



def classify(api: TxnApi, code: int) -> Outcome:
    """What the transactional producer does with `code` answered to `api` (the handlers of
    Kafka's TransactionManager and, for PRODUCE, ``maybeTransitionToErrorState``)."""
    if code == E.none:
        return Outcome.DONE
    if api is TxnApi.PRODUCE:
        # Kafka: ClusterAuthorization, TransactionalIdAuthorization, ProducerFenced and
        # UnsupportedVersion are fatal; anything else that fails a batch of a transaction
        # (INVALID_PRODUCER_EPOCH included, since KIP-588) is abortable.
        if code in (E.producer_fenced, E.transactional_id_authorization_failed,
                    E.cluster_authorization_failed, E.unsupported_version):
            return Outcome.FATAL
        return Outcome.ABORTABLE
    if api is TxnApi.FIND_COORDINATOR:
        if code in (E.transactional_id_authorization_failed,):
            return Outcome.FATAL
        if code == E.group_authorization_failed or code == E.transaction_abortable:
            return Outcome.ABORTABLE
        return Outcome.RETRY if is_retriable(code) else Outcome.FATAL
    if code in _COORDINATOR_MOVED or (api is TxnApi.TXN_OFFSET_COMMIT
                                      and code == E.request_timed_out):
        return Outcome.FIND_COORDINATOR
    if code in _FENCED:
        return Outcome.FATAL  # "treat INVALID_PRODUCER_EPOCH the same as PRODUCER_FENCED"
    if is_retriable(code):  # COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, ...
        return Outcome.RETRY
    if code == E.transaction_abortable:
        return Outcome.ABORTABLE
    if api is TxnApi.INIT_PRODUCER_ID:
        if code in (E.transactional_id_authorization_failed, E.cluster_authorization_failed):
            return Outcome.ABORTABLE
        return Outcome.FATAL
    if code in (E.transactional_id_authorization_failed, E.invalid_txn_state):
        return Outcome.FATAL
    if api is TxnApi.ADD_PARTITIONS:
        # TOPIC_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED, UNKNOWN_PRODUCER_ID, ...
        return Outcome.ABORTABLE
    if api in (TxnApi.END_TXN, TxnApi.ADD_OFFSETS):
        if code in (E.unknown_producer_id, E.invalid_producer_id_mapping,
                    E.group_authorization_failed):
            return Outcome.ABORTABLE
        return Outcome.FATAL
    # TXN_OFFSET_COMMIT
    if code in (E.group_authorization_failed, E.fenced_instance_id, E.unknown_member_id,
                E.illegal_generation):
        return Outcome.ABORTABLE
    return Outcome.FATAL


def error_for(api: TxnApi, code: int, context: str = "") -> KafkaError:
    """The exception a failed `api` leaves as the producer's last error."""
    if code in _FENCED and api is not TxnApi.PRODUCE:
        return ProducerFencedError(
            f"{context}: There is a newer producer with the same transactionalId which fences "
            "the current one (PRODUCER_FENCED)", int(E.producer_fenced))
    if api is TxnApi.TXN_OFFSET_COMMIT and code in (E.unknown_member_id, E.illegal_generation):
        return KafkaError.for_code(code, "Transaction offset Commit failed due to consumer group "
                                   "metadata mismatch", context)
    return KafkaError.for_code(code, context=context)


# -- the state ----------------------------------------------------------------------------------
@dataclass
class TransactionManager:
    """One transactional producer's transaction state (Kafka's TransactionManager, less I/O)."""

    transactional_id: str
    transaction_timeout_ms: int = 60000
    state: TxnState = TxnState.UNINITIALIZED
    last_error: KafkaError | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    # Partitions to add before their first batch is sent; being added; added.
    new_partitions: set[TopicPartition] = field(default_factory=set)
    pending_partitions: set[TopicPartition] = field(default_factory=set)
    partitions_in_txn: set[TopicPartition] = field(default_factory=set)
    transaction_started: bool = False  # a partition or offsets were added: EndTxn is needed
    epoch_bump_required: bool = False

    # -- transitions -------------------------------------------------------------------------
    def transition_to(self, target: TxnState, error: KafkaError | None = None) -> None:
        if not is_transition_valid(self.state, target):
            raise IllegalStateError(
                f"TransactionalId {self.transactional_id}: Invalid transition attempted from "
                f"state {self.state.name} to state {target.name}")
        if target in (TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR):
            if error is None:
                raise ValueError(f"Cannot transition to {target.name} with a null exception")
            self.last_error = error
        elif target is not TxnState.ABORTING_TRANSACTION:
            self.last_error = None
        self.state = target

    def fatal_error(self, error: KafkaError) -> None:
        self.transition_to(TxnState.FATAL_ERROR, error)

    def abortable_error(self, error: KafkaError) -> None:
        """An error the application recovers from by aborting; fatal while the producer has no
        producer id yet (INITIALIZING), as in Kafka."""
        if self.state is TxnState.FATAL_ERROR:
            return
        if self.state in (TxnState.ABORTING_TRANSACTION, TxnState.READY, TxnState.UNINITIALIZED):
            self.last_error = error  # the transaction is being (or was) completed anyway
            return
        self.transition_to(TxnState.ABORTABLE_ERROR, error)

    def outcome(self, outcome: Outcome, error: KafkaError) -> None:
        """Apply an ABORTABLE or FATAL outcome."""
        if outcome is Outcome.FATAL:
            self.fatal_error(error)
        elif outcome is Outcome.ABORTABLE:
            self.abortable_error(error)

    def batch_failed(self, code: int, error: KafkaError) -> None:
        """A batch of the transaction failed for good (Kafka's handleFailedBatch): fatal or
        abortable, and the next transaction needs a fresh epoch (its sequences have a gap)."""
        outcome = classify(TxnApi.PRODUCE, code)
        if outcome is Outcome.ABORTABLE:
            self.epoch_bump_required = True
        self.outcome(outcome, error)

    # -- checks of the public calls ----------------------------------------------------------
    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def has_error(self) -> bool:
        return self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR)

    @property
    def is_completing(self) -> bool:
        return self.state in (TxnState.COMMITTING_TRANSACTION, TxnState.ABORTING_TRANSACTION)

    def maybe_fail_with_error(self) -> None:
        """Raise the last error while in an error state (Kafka's maybeFailWithError)."""
        if not self.has_error:
            return
        err = self.last_error
        if isinstance(err, ProducerFencedError):
            raise ProducerFencedError(
                f"Producer with transactionalId '{self.transactional_id}' and producerId "
                f"{self.producer_id}, epoch {self.producer_epoch} has been fenced by another "
                "producer with the same transactionalId", int(E.producer_fenced))
        if isinstance(err, IllegalStateError):
            raise IllegalStateError(
                f"Producer with transactionalId '{self.transactional_id}' cannot execute "
                f"transactional method because of previous invalid state transition attempt: "
                f"{err}")
        raise KafkaError(
            f"Cannot execute transactional method because we are in an error state: {err}",
            err.code if err is not None else -1, retriable=False)

    def check_can_send(self, what: str) -> None:
        """Before a record is accepted for `what` ("partition t-0", "topic t")."""
        self.maybe_fail_with_error()
        if not self.has_producer_id:
            raise IllegalStateError(f"Cannot add {what} to transaction before completing a call "
                                    "to initTransactions")
        if self.state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot add {what} to transaction while in state  "
                                    f"{self.state.name}")

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """A record for `tp`, accepted while the transaction was in progress, joins its batch:
        `tp` joins the transaction before its first batch is sent. The record may join after
        commit_transaction() began (it waited for its topic's metadata: Kafka's send waits for
        it before adding the partition), and then still belongs to the transaction."""
        if self.state is not TxnState.COMMITTING_TRANSACTION:
            self.check_can_send(f"partition {tp.topic}-{tp.partition}")
        if tp not in self.partitions_in_txn and tp not in self.pending_partitions:
            self.new_partitions.add(tp)

    def may_send_to(self, tp: TopicPartition) -> bool:
        """Kafka's isSendToPartitionAllowed."""
        return self.state is not TxnState.FATAL_ERROR and tp in self.partitions_in_txn

    # -- public calls' transitions -----------------------------------------------------------
    def begin_init(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            self.maybe_fail_with_error()
        if self.state is not TxnState.INITIALIZING:  # a retried init_transactions resumes
            self.transition_to(TxnState.INITIALIZING)

    def initialized(self, producer_id: int, producer_epoch: int) -> None:
        """InitProducerId answered: READY with the new id and epoch. Only an INITIALIZING
        manager sent one (Kafka's InitProducerIdHandler); from any other state (READY after a
        commit, say) the answer would skip clearing the finished transaction's partitions."""
        if self.state is not TxnState.INITIALIZING:
            raise IllegalStateError(
                f"TransactionalId {self.transactional_id}: InitProducerId answered in state "
                f"{self.state.name}, not INITIALIZING")
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.epoch_bump_required = False
        self.transition_to(TxnState.READY)

    def begin_transaction(self) -> None:
        self.maybe_fail_with_error()
        if self.state is TxnState.UNINITIALIZED or not self.has_producer_id:
            raise IllegalStateError("Cannot begin a transaction before completing a call to "
                                    "initTransactions")
        self.transition_to(TxnState.IN_TRANSACTION)

    def begin_commit(self) -> None:
        self.maybe_fail_with_error()
        self.transition_to(TxnState.COMMITTING_TRANSACTION)

    def begin_abort(self) -> None:
        if self.state is not TxnState.ABORTABLE_ERROR:
            self.maybe_fail_with_error()
        self.transition_to(TxnState.ABORTING_TRANSACTION)
        self.new_partitions.clear()

    def check_send_offsets(self) -> None:
        self.maybe_fail_with_error()
        if self.state is not TxnState.IN_TRANSACTION:
            raise IllegalStateError("Cannot send offsets if a transaction is not in progress "
                                    f"(currentState= {self.state.name})")

    def partitions_added(self, partitions: Iterable[TopicPartition]) -> None:
        parts = set(partitions)
        self.pending_partitions -= parts
        self.partitions_in_txn |= parts
        if parts:
            self.transaction_started = True

    def offsets_added(self) -> None:
        self.transaction_started = True

    def complete_transaction(self) -> None:
        """EndTxn succeeded (or was not needed): READY, or INITIALIZING for an epoch bump."""
        self.transition_to(TxnState.INITIALIZING if self.epoch_bump_required else TxnState.READY)
        self.last_error = None
        self.transaction_started = False
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.partitions_in_txn.clear()

    def take_new_partitions(self) -> list[TopicPartition]:
        """The partitions to name in the next AddPartitionsToTxn (now pending)."""
        parts = sorted(self.new_partitions)
        self.pending_partitions |= self.new_partitions
        self.new_partitions.clear()
        return parts

    def add_partitions_failed(self, partitions: Iterable[TopicPartition], retry: bool) -> None:
        """AddPartitionsToTxn failed: pending partitions go back to be added again (`retry`), or
        are dropped (the transaction is in an error state and will be aborted)."""
        parts = set(partitions)
        self.pending_partitions -= parts
        if retry:
            self.new_partitions |= parts

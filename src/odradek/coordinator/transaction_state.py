"""Transaction states and metadata (Kafka 2.8's TransactionState, TransactionMetadata and
TxnTransitMetadata in kafka.coordinator.transaction), pure: no I/O, no clock, no lock.

The transaction coordinator (transaction_coordinator.py) drives these transitions.

A transactional id moves through eight states, each with the byte Kafka writes to
`__transaction_state`. A transition is valid only from the target's valid previous states
(`VALID_PREVIOUS_STATES`, the table, Kafka's `TransactionMetadata.validPreviousStates`):

  Empty             (0) <- Empty, CompleteCommit, CompleteAbort           (InitProducerId)
  Ongoing           (1) <- Ongoing, Empty, CompleteCommit, CompleteAbort  (AddPartitions/Offsets)
  PrepareCommit     (2) <- Ongoing                                        (EndTxn commit)
  PrepareAbort      (3) <- Ongoing, PrepareEpochFence                     (EndTxn abort, timeout)
  CompleteCommit    (4) <- PrepareCommit                                  (markers written)
  CompleteAbort     (5) <- PrepareAbort                                   (markers written)
  Dead              (6) <- Empty, CompleteAbort, CompleteCommit           (id expired)
  PrepareEpochFence (7) <- Ongoing                                        (fencing a producer)

As in Kafka, a change is made in two steps: a `prepare_*` method checks the move, records the
target in `pending_state` (so a second change cannot start meanwhile) and returns the target as
an immutable `TxnTransitMetadata`, which the coordinator writes to the log; once the write is
replicated, `complete_transition_to` checks the target against the current metadata and applies
it. Apart from `pending_state` (and the failed-fence flag Kafka keeps), preparing changes nothing.

Errors are exceptions carrying Kafka's error code (`error_code`): `ProducerFenced`
(PRODUCER_FENCED; the API layer answers INVALID_PRODUCER_EPOCH to InitProducerId < v4, EndTxn and
AddPartitionsToTxn < v2, as Kafka 2.8's KafkaApis does), and `IllegalTransactionState` /
`IllegalTransactionArgument` for Kafka's IllegalStateException / IllegalArgumentException, which
are coordinator bugs that a request would see as UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import NoReturn

from kio.schema.errors import ErrorCode

from ..common import TopicPartition
from ..protocol.records import NO_PRODUCER_ID
from .offsets import java_string_hashcode, kafka_abs

TRANSACTION_STATE_TOPIC = "__transaction_state"
# transaction.state.log.num.partitions (TransactionLog.DefaultNumPartitions)
DEFAULT_NUM_PARTITIONS = 50

NO_PRODUCER_EPOCH = -1  # RecordBatch.NO_PRODUCER_EPOCH
NO_TXN_START_TIMESTAMP = -1
SHORT_MAX = 0x7FFF  # Short.MaxValue, the one epoch only the coordinator may use (to fence)


class TransactionState(Enum):
    """Kafka's TransactionState case objects; the value is the status byte of the log value."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def id(self) -> int:
        """The byte Kafka writes as TransactionStatus (`TransactionState.byte`)."""
        return int(self.value)

    @property
    def state_name(self) -> str:
        """Kafka's name for the state ("PrepareCommit"), as DescribeTransactions reports it."""
        return _NAMES[self]

    @property
    def is_expiration_allowed(self) -> bool:
        """Whether the transactional id may expire in this state (Kafka's isExpirationAllowed)."""
        return self in (Empty, CompleteCommit, CompleteAbort)

    def __str__(self) -> str:
        return self.state_name

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        """Kafka's `TransactionMetadata.byteToState`; an unknown byte: IllegalTransactionState."""
        try:
            return cls(state_id)
        except ValueError:
            raise IllegalTransactionState(
                f"no transaction state has the status byte {state_id}"
            ) from None

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state Kafka calls `name` (the states filter of ListTransactions), or None."""
        return _BY_NAME.get(name)


Empty = TransactionState.EMPTY
Ongoing = TransactionState.ONGOING
PrepareCommit = TransactionState.PREPARE_COMMIT
PrepareAbort = TransactionState.PREPARE_ABORT
CompleteCommit = TransactionState.COMPLETE_COMMIT
CompleteAbort = TransactionState.COMPLETE_ABORT
Dead = TransactionState.DEAD
PrepareEpochFence = TransactionState.PREPARE_EPOCH_FENCE

_NAMES: dict[TransactionState, str] = {
    Empty: "Empty",
    Ongoing: "Ongoing",
    PrepareCommit: "PrepareCommit",
    PrepareAbort: "PrepareAbort",
    CompleteCommit: "CompleteCommit",
    CompleteAbort: "CompleteAbort",
    Dead: "Dead",
    PrepareEpochFence: "PrepareEpochFence",
}
_BY_NAME: dict[str, TransactionState] = {name: state for state, name in _NAMES.items()}

# target state -> the states it may be entered from (Kafka 2.8's validPreviousStates)
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    Empty: frozenset({Empty, CompleteCommit, CompleteAbort}),
    Ongoing: frozenset({Ongoing, Empty, CompleteCommit, CompleteAbort}),
    PrepareCommit: frozenset({Ongoing}),
    PrepareAbort: frozenset({Ongoing, PrepareEpochFence}),
    CompleteCommit: frozenset({PrepareCommit}),
    CompleteAbort: frozenset({PrepareAbort}),
    Dead: frozenset({Empty, CompleteAbort, CompleteCommit}),
    PrepareEpochFence: frozenset({Ongoing}),
}


def is_valid_transition(current: TransactionState, target: TransactionState) -> bool:
    """Kafka's `TransactionMetadata.isValidTransition(oldState, newState)`."""
    return current in VALID_PREVIOUS_STATES[target]


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka's `TransactionMetadata.isEpochExhausted`: epochs Short.MaxValue - 1 and above are
    spent, so that the coordinator can always fence with one more bump."""
    return producer_epoch >= SHORT_MAX - 1


def partition_for(transactional_id: str, partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """The `__transaction_state` partition whose leader coordinates `transactional_id`
    (TransactionStateManager.partitionFor: Utils.abs(String.hashCode) % partitions)."""
    return kafka_abs(java_string_hashcode(transactional_id)) % partitions


class TransactionResult(Enum):
    """Kafka's TransactionResult: what EndTxn asks for and what a marker writes."""

    ABORT = 0
    COMMIT = 1

    @property
    def is_commit(self) -> bool:
        return self is TransactionResult.COMMIT


# -- errors ----------------------------------------------------------------------------------------

class TransactionStateError(Exception):
    """A transition refused; `error_code` is the Kafka error a request would be answered with."""

    error_code: ErrorCode = ErrorCode.unknown_server_error


class IllegalTransactionState(TransactionStateError):
    """Kafka's IllegalStateException from TransactionMetadata (a coordinator bug; on the request
    path it becomes UNKNOWN_SERVER_ERROR)."""


class IllegalTransactionArgument(TransactionStateError):
    """Kafka's IllegalArgumentException from prepareTransitionTo (negative producer id or epoch)."""


class ProducerFenced(TransactionStateError):
    """InitProducerId with an expected epoch that is neither the current nor the last one."""

    error_code = ErrorCode.producer_fenced


# -- the target of a transition ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """Kafka's TxnTransitMetadata: the immutable target of a prepared transition, which is what
    the coordinator writes to `__transaction_state`."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


# -- the metadata of one transactional id --------------------------------------------------------

@dataclass(slots=True)
class TransactionMetadata:
    """Kafka's TransactionMetadata for one transactional id. Build a fresh one with `create`
    (Kafka's `TransactionMetadata.apply`); loading builds one from the log value directly."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    # the state a prepared, not yet completed, transition is going to
    pending_state: TransactionState | None = None
    # a previous fence may not have reached the log: the next fence does not bump again
    has_failed_epoch_fence: bool = False

    @classmethod
    def create(cls, transactional_id: str, producer_id: int, producer_epoch: int,
               txn_timeout_ms: int, timestamp: int, state: TransactionState = Empty, *,
               last_producer_id: int = NO_PRODUCER_ID,
               last_producer_epoch: int = NO_PRODUCER_EPOCH) -> TransactionMetadata:
        """Kafka's `TransactionMetadata.apply`: no partitions; start and last update timestamps
        both `timestamp`."""
        return cls(transactional_id, producer_id, last_producer_id, producer_epoch,
                   last_producer_epoch, txn_timeout_ms, state, set(), timestamp, timestamp)

    # -- partitions --------------------------------------------------------------------------

    def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        self.topic_partitions.update(TopicPartition(*tp) for tp in partitions)

    def remove_partition(self, tp: TopicPartition) -> None:
        """A partition whose marker was written; only while preparing to commit or abort."""
        if self.state not in (PrepareCommit, PrepareAbort):
            raise IllegalTransactionState(
                f"{self.transactional_id}: a marker was written for {tp} in state {self.state} "
                f"(pending {self.pending_state}), not while preparing to commit or abort")
        self.topic_partitions.discard(TopicPartition(*tp))

    # -- predicates ----------------------------------------------------------------------------

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (Ongoing, PrepareAbort, PrepareCommit)

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    # -- preparing transitions -----------------------------------------------------------------

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The current metadata as a transit, without setting a pending state."""
        return TxnTransitMetadata(self.producer_id, self.last_producer_id, self.producer_epoch,
                                  self.last_producer_epoch, self.txn_timeout_ms, self.state,
                                  frozenset(self.topic_partitions), self.txn_start_timestamp,
                                  self.txn_last_update_timestamp)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """To PrepareEpochFence with the epoch bumped (not again after a failed fence), the last
        epoch cleared; the timestamps are kept."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransactionState(
                f"{self.transactional_id}: epoch {SHORT_MAX} cannot be bumped to fence")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare_transition_to(
            PrepareEpochFence, self.producer_id, bumped, NO_PRODUCER_EPOCH, self.txn_timeout_ms,
            frozenset(self.topic_partitions), self.txn_start_timestamp,
            self.txn_last_update_timestamp)

    def prepare_increment_producer_epoch(self, new_txn_timeout_ms: int,
                                         expected_producer_epoch: int | None,
                                         update_timestamp: int) -> TxnTransitMetadata:
        """InitProducerId on an existing id, to Empty with no partitions (KIP-360):

        - no expected epoch: bump, last epoch cleared (a new producer fences the old one);
        - expected epoch is the current one, or there is none yet: bump, last epoch = current;
        - expected epoch is the last one: a retry of a call that succeeded, no bump;
        - otherwise ProducerFenced.

        An exhausted epoch is an IllegalTransactionState: the coordinator rotates the producer id
        (`prepare_producer_id_rotation`) instead of calling this."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransactionState(
                f"{self.transactional_id}: the epochs of producer id {self.producer_id} are "
                "exhausted")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif (self.producer_epoch == NO_PRODUCER_EPOCH
              or expected_producer_epoch == self.producer_epoch):
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFenced(
                f"{self.transactional_id}: epoch {expected_producer_epoch} is neither the "
                f"current {self.producer_epoch} nor the last {self.last_producer_epoch}")
        return self._prepare_transition_to(Empty, self.producer_id, next_epoch, last_epoch,
                                           new_txn_timeout_ms, frozenset(),
                                           NO_TXN_START_TIMESTAMP, update_timestamp)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_txn_timeout_ms: int,
                                     update_timestamp: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        """To Empty with a new producer id at epoch 0 (the epoch is exhausted); the last epoch
        is the current one when `record_last_epoch` (a KIP-360 retry may come back with it)."""
        if self.has_pending_transaction:
            raise IllegalTransactionState(
                f"{self.transactional_id}: no new producer id during a transaction "
                f"({self.state})")
        last_epoch = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare_transition_to(Empty, new_producer_id, 0, last_epoch,
                                           new_txn_timeout_ms, frozenset(),
                                           NO_TXN_START_TIMESTAMP, update_timestamp)

    def prepare_add_partitions(self, added: Iterable[TopicPartition],
                               update_timestamp: int) -> TxnTransitMetadata:
        """To Ongoing with `added` joined to the partitions; a transaction starts (its start
        timestamp becomes `update_timestamp`) when the state was Empty or Complete*."""
        if self.state in (Empty, CompleteAbort, CompleteCommit):
            start = update_timestamp
        else:
            start = self.txn_start_timestamp
        partitions = frozenset(self.topic_partitions) | {TopicPartition(*tp) for tp in added}
        return self._prepare_transition_to(Ongoing, self.producer_id, self.producer_epoch,
                                           self.last_producer_epoch, self.txn_timeout_ms,
                                           partitions, start, update_timestamp)

    def prepare_abort_or_commit(self, new_state: TransactionState,
                                update_timestamp: int) -> TxnTransitMetadata:
        """To PrepareCommit or PrepareAbort (EndTxn, or the coordinator's abort)."""
        return self._prepare_transition_to(new_state, self.producer_id, self.producer_epoch,
                                           self.last_producer_epoch, self.txn_timeout_ms,
                                           frozenset(self.topic_partitions),
                                           self.txn_start_timestamp, update_timestamp)

    def prepare_complete(self, update_timestamp: int) -> TxnTransitMetadata:
        """To CompleteCommit after PrepareCommit, else CompleteAbort, with no partitions; the
        failed-fence flag is cleared (the prepare reached the log)."""
        new_state = CompleteCommit if self.state == PrepareCommit else CompleteAbort
        self.has_failed_epoch_fence = False
        return self._prepare_transition_to(new_state, self.producer_id, self.producer_epoch,
                                           self.last_producer_epoch, self.txn_timeout_ms,
                                           frozenset(), self.txn_start_timestamp,
                                           update_timestamp)

    def prepare_dead(self) -> TxnTransitMetadata:
        """To Dead (the id expired; the coordinator writes a tombstone, never this state)."""
        return self._prepare_transition_to(Dead, self.producer_id, self.producer_epoch,
                                           self.last_producer_epoch, self.txn_timeout_ms,
                                           frozenset(), self.txn_start_timestamp,
                                           self.txn_last_update_timestamp)

    def _prepare_transition_to(self, new_state: TransactionState, new_producer_id: int,
                               new_epoch: int, new_last_epoch: int, new_txn_timeout_ms: int,
                               new_partitions: frozenset[TopicPartition],
                               new_txn_start_timestamp: int,
                               update_timestamp: int) -> TxnTransitMetadata:
        # Kafka 2.8's order of checks; 2.8 refuses a negative epoch even for Dead
        if self.pending_state is not None:
            raise IllegalTransactionState(
                f"{self.transactional_id}: transition to {new_state} while one to "
                f"{self.pending_state} is pending")
        if new_producer_id < 0:
            raise IllegalTransactionArgument(f"negative producer id {new_producer_id}")
        if new_epoch < 0:
            raise IllegalTransactionArgument(f"negative producer epoch {new_epoch}")
        if not is_valid_transition(self.state, new_state):
            raise IllegalTransactionState(
                f"{self.transactional_id}: {new_state} cannot follow {self.state}")
        transit = TxnTransitMetadata(new_producer_id, self.producer_id, new_epoch, new_last_epoch,
                                     new_txn_timeout_ms, new_state, new_partitions,
                                     new_txn_start_timestamp, update_timestamp)
        self.pending_state = new_state
        return transit

    # -- completing a transition -----------------------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Apply a prepared transition once its record is in the log, with Kafka's checks: the
        target is the pending state; to Empty the epoch is kept, bumped by one or reset to 0 with
        a new producer id, with no partitions and no start timestamp; to Ongoing the producer and
        timeout are unchanged and the partitions only grow; to Prepare* nothing but the state and
        the update time changes; to Complete* the producer and timeout are unchanged and the
        transaction had started. PrepareEpochFence and Dead are never completed."""
        to_state = self.pending_state
        if to_state is None:
            raise IllegalTransactionState(
                f"{self.transactional_id}: no transition is pending")
        if to_state != transit.txn_state:
            self._transition_failure(transit)
        if to_state is Empty:  # from InitProducerId
            if ((self.producer_epoch != transit.producer_epoch
                 and not self._valid_producer_epoch_bump(transit))
                    or transit.topic_partitions
                    or transit.txn_start_timestamp != NO_TXN_START_TIMESTAMP):
                self._transition_failure(transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif to_state is Ongoing:  # from AddPartitionsToTxn / AddOffsetsToTxn
            if (not self._valid_producer_epoch(transit)
                    or not self.topic_partitions <= transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms):
                self._transition_failure(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.add_partitions(transit.topic_partitions)
        elif to_state in (PrepareAbort, PrepareCommit):  # from EndTxn
            if (not self._valid_producer_epoch(transit)
                    or self.topic_partitions != transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or self.txn_start_timestamp != transit.txn_start_timestamp):
                self._transition_failure(transit)
        elif to_state in (CompleteAbort, CompleteCommit):  # from the markers
            if (not self._valid_producer_epoch(transit)
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or transit.txn_start_timestamp == NO_TXN_START_TIMESTAMP):
                self._transition_failure(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions.clear()
        elif to_state is PrepareEpochFence:
            # the coordinator turns a fence into PrepareAbort before anything is completed
            self._transition_failure(transit)
        else:  # Dead: an expired id is removed from the cache, never completed
            raise IllegalTransactionState(
                f"{self.transactional_id}: a transition to Dead is completed by removing the "
                "metadata (a tombstone), never by applying it")
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.state = to_state

    def _valid_producer_epoch(self, transit: TxnTransitMetadata) -> bool:
        return (transit.producer_epoch == self.producer_epoch
                and transit.producer_id == self.producer_id)

    def _valid_producer_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        return (transit.producer_epoch == self.producer_epoch + 1
                or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))

    def _transition_failure(self, transit: TxnTransitMetadata) -> NoReturn:
        raise IllegalTransactionState(
            f"{self.transactional_id}: {self} cannot complete the transition to {transit}")

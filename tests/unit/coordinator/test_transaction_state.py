"""Transaction states and metadata (Kafka 2.8's TransactionMetadata), without a coordinator: the
state table against a hand list from Kafka 2.8, every prepare and complete, epoch bumps, KIP-360
retries, fencing, exhaustion and producer id rotation, and partitionFor."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.common import TopicPartition
from odradek.coordinator.offsets import java_string_hashcode
from odradek.coordinator.transaction_state import (
    NO_PRODUCER_EPOCH,
    SHORT_MAX,
    VALID_PREVIOUS_STATES,
    CompleteAbort,
    CompleteCommit,
    Dead,
    Empty,
    IllegalTransactionArgument,
    IllegalTransactionState,
    Ongoing,
    PrepareAbort,
    PrepareCommit,
    PrepareEpochFence,
    ProducerFenced,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
    is_valid_transition,
    partition_for,
)

ALL = list(TransactionState)
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
UP = TopicPartition("u", 3)

# Kafka 2.8 TransactionMetadata.validPreviousStates, written out as (from, to).
KAFKA_VALID = {
    (Empty, Empty), (CompleteCommit, Empty), (CompleteAbort, Empty),
    (Ongoing, Ongoing), (Empty, Ongoing), (CompleteCommit, Ongoing), (CompleteAbort, Ongoing),
    (Ongoing, PrepareCommit),
    (Ongoing, PrepareAbort), (PrepareEpochFence, PrepareAbort),
    (PrepareCommit, CompleteCommit),
    (PrepareAbort, CompleteAbort),
    (Empty, Dead), (CompleteAbort, Dead), (CompleteCommit, Dead),
    (Ongoing, PrepareEpochFence),
}


def meta(state: TransactionState = Empty, *, producer_id: int = 1000, epoch: int = 0,
         last_epoch: int = NO_PRODUCER_EPOCH, partitions: set[TopicPartition] | None = None,
         start: int = -1, timeout: int = 60_000, updated: int = 10) -> TransactionMetadata:
    return TransactionMetadata("txn", producer_id, -1, epoch, last_epoch, timeout, state,
                               set(partitions or ()), start, updated)


# -- the table -------------------------------------------------------------------------------------

def test_state_ids_and_names_are_kafkas() -> None:
    assert [(s.id, s.state_name) for s in ALL] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    for s in ALL:
        assert TransactionState.from_id(s.id) is s
        assert TransactionState.from_name(str(s)) is s
    assert TransactionState.from_name("Stable") is None


@pytest.mark.parametrize("byte", [-1, 8, 127])
def test_unknown_state_byte(byte: int) -> None:
    with pytest.raises(IllegalTransactionState):
        TransactionState.from_id(byte)


def test_expiration_allowed_only_when_no_transaction_is_open() -> None:
    assert {s for s in ALL if s.is_expiration_allowed} == {Empty, CompleteCommit, CompleteAbort}


def test_table_is_kafkas() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(ALL)
    table = {(f, t) for t, prev in VALID_PREVIOUS_STATES.items() for f in prev}
    assert table == KAFKA_VALID


@pytest.mark.parametrize(("current", "target"), list(itertools.product(ALL, ALL)),
                         ids=lambda s: str(s))
def test_every_pair(current: TransactionState, target: TransactionState) -> None:
    assert is_valid_transition(current, target) == ((current, target) in KAFKA_VALID)


# Which prepare reaches each target; each is tried from every state: it succeeds (and sets the
# pending state) exactly when Kafka's table allows it, and otherwise changes nothing.
PREPARES = {
    Empty: lambda m: m.prepare_increment_producer_epoch(60_000, None, 20),
    Ongoing: lambda m: m.prepare_add_partitions({TP0}, 20),
    PrepareCommit: lambda m: m.prepare_abort_or_commit(PrepareCommit, 20),
    PrepareAbort: lambda m: m.prepare_abort_or_commit(PrepareAbort, 20),
    Dead: lambda m: m.prepare_dead(),
    PrepareEpochFence: lambda m: m.prepare_fence_producer_epoch(),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(ALL, PREPARES)),
                         ids=lambda s: str(s))
def test_prepare_from_every_state(current: TransactionState, target: TransactionState) -> None:
    m = meta(current, start=5)
    if (current, target) in KAFKA_VALID:
        transit = PREPARES[target](m)
        assert transit.txn_state is target
        assert m.pending_state is target
        assert m.state is current
    else:
        with pytest.raises(IllegalTransactionState) as info:
            PREPARES[target](m)
        assert info.value.error_code == ErrorCode.unknown_server_error
        assert m.pending_state is None


@pytest.mark.parametrize("current", ALL, ids=str)
def test_prepare_complete_from_every_state(current: TransactionState) -> None:
    m = meta(current, start=5)
    target = CompleteCommit if current is PrepareCommit else CompleteAbort
    if current in (PrepareCommit, PrepareAbort):
        assert m.prepare_complete(20).txn_state is target
    else:
        with pytest.raises(IllegalTransactionState):
            m.prepare_complete(20)


def test_a_second_prepare_while_one_is_pending_is_refused() -> None:
    m = meta(Ongoing, partitions={TP0}, start=5)
    m.prepare_abort_or_commit(PrepareCommit, 20)
    with pytest.raises(IllegalTransactionState):
        m.prepare_abort_or_commit(PrepareAbort, 21)
    assert m.pending_state is PrepareCommit
    assert m.pending_transition_in_progress


def test_prepare_no_transit_sets_nothing() -> None:
    m = meta(Ongoing, partitions={TP0}, start=5, epoch=3, last_epoch=2)
    t = m.prepare_no_transit()
    assert t == TxnTransitMetadata(1000, -1, 3, 2, 60_000, Ongoing, frozenset({TP0}), 5, 10)
    assert m.pending_state is None


# -- a whole transaction ---------------------------------------------------------------------------

def test_create_mirrors_kafkas_apply() -> None:
    m = TransactionMetadata.create("txn", 7, NO_PRODUCER_EPOCH, 30_000, 100)
    assert (m.producer_id, m.last_producer_id, m.producer_epoch, m.last_producer_epoch) \
        == (7, -1, -1, -1)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp, m.txn_last_update_timestamp) \
        == (Empty, set(), 100, 100)


def test_commit_cycle() -> None:
    m = TransactionMetadata.create("txn", 7, NO_PRODUCER_EPOCH, 30_000, 100)
    t = m.prepare_increment_producer_epoch(45_000, None, 110)
    assert t == TxnTransitMetadata(7, 7, 0, -1, 45_000, Empty, frozenset(), -1, 110)
    m.complete_transition_to(t)
    assert (m.state, m.producer_epoch, m.txn_timeout_ms, m.txn_last_update_timestamp) \
        == (Empty, 0, 45_000, 110)

    t = m.prepare_add_partitions({TP0}, 120)
    assert (t.txn_state, t.topic_partitions, t.txn_start_timestamp) \
        == (Ongoing, frozenset({TP0}), 120)
    m.complete_transition_to(t)
    t = m.prepare_add_partitions([("t", 1), UP], 130)  # plain tuples become TopicPartitions
    assert t.txn_start_timestamp == 120  # already started
    m.complete_transition_to(t)
    assert m.topic_partitions == {TP0, TP1, UP}
    assert all(type(tp) is TopicPartition for tp in m.topic_partitions)

    t = m.prepare_abort_or_commit(PrepareCommit, 140)
    assert t.topic_partitions == frozenset({TP0, TP1, UP})
    m.complete_transition_to(t)
    assert (m.state, m.txn_last_update_timestamp) == (PrepareCommit, 140)

    m.remove_partition(TP0)  # its marker was written
    assert m.topic_partitions == {TP1, UP}
    t = m.prepare_complete(150)
    assert (t.txn_state, t.topic_partitions, t.txn_start_timestamp) \
        == (CompleteCommit, frozenset(), 120)
    m.complete_transition_to(t)
    assert (m.state, m.topic_partitions, m.pending_state) == (CompleteCommit, set(), None)

    t = m.prepare_add_partitions({UP}, 160)  # the next transaction starts now
    assert t.txn_start_timestamp == 160


def test_abort_cycle() -> None:
    m = meta(Ongoing, partitions={TP0}, start=5)
    m.complete_transition_to(m.prepare_abort_or_commit(PrepareAbort, 20))
    t = m.prepare_complete(30)
    assert t.txn_state is CompleteAbort
    m.complete_transition_to(t)
    assert m.state is CompleteAbort


@pytest.mark.parametrize("state", [Empty, Ongoing, CompleteCommit, CompleteAbort, Dead])
def test_remove_partition_only_while_preparing(state: TransactionState) -> None:
    m = meta(state, partitions={TP0})
    with pytest.raises(IllegalTransactionState):
        m.remove_partition(TP0)


# -- InitProducerId: epoch bumps (KIP-360) -------------------------------------------------------

def test_new_producer_gets_epoch_zero() -> None:
    m = meta(Empty, epoch=NO_PRODUCER_EPOCH)
    t = m.prepare_increment_producer_epoch(60_000, None, 20)
    assert (t.producer_epoch, t.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)


def test_no_expected_epoch_bumps_and_clears_the_last_epoch() -> None:
    m = meta(Empty, epoch=5, last_epoch=4)
    t = m.prepare_increment_producer_epoch(60_000, None, 20)
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch) == (1000, 6, -1)
    assert (t.topic_partitions, t.txn_start_timestamp) == (frozenset(), -1)


def test_expected_current_epoch_bumps_and_remembers_it() -> None:
    m = meta(CompleteAbort, epoch=5, last_epoch=-1)
    t = m.prepare_increment_producer_epoch(60_000, 5, 20)
    assert (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    m.complete_transition_to(t)
    assert (m.producer_epoch, m.last_producer_epoch) == (6, 5)

    # the same call retried (its response was lost): answered with the same epoch, no bump
    retry = meta(Empty, epoch=6, last_epoch=5).prepare_increment_producer_epoch(60_000, 5, 30)
    assert (retry.producer_epoch, retry.last_producer_epoch) == (6, 5)


def test_expected_epoch_with_no_current_epoch_starts_at_zero() -> None:
    t = meta(Empty, epoch=NO_PRODUCER_EPOCH).prepare_increment_producer_epoch(60_000, 3, 20)
    assert (t.producer_epoch, t.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)


@pytest.mark.parametrize("expected", [0, 3, 7, 100])
def test_other_expected_epoch_is_fenced(expected: int) -> None:
    m = meta(Empty, epoch=5, last_epoch=4)
    with pytest.raises(ProducerFenced) as info:
        m.prepare_increment_producer_epoch(60_000, expected, 20)
    assert info.value.error_code == ErrorCode.producer_fenced == 90
    assert m.pending_state is None


def test_a_new_producer_fences_the_retry_of_the_old_one() -> None:
    # producer A at epoch 5; producer B initialises without an expected epoch (6, last -1);
    # A's KIP-360 re-initialisation with epoch 5 is then neither current nor last: fenced
    m = meta(Empty, epoch=5)
    m.complete_transition_to(m.prepare_increment_producer_epoch(60_000, None, 20))
    assert (m.producer_epoch, m.last_producer_epoch) == (6, -1)
    with pytest.raises(ProducerFenced):
        m.prepare_increment_producer_epoch(60_000, 5, 30)


@pytest.mark.parametrize(("epoch", "exhausted"), [
    (0, False), (SHORT_MAX - 2, False), (SHORT_MAX - 1, True), (SHORT_MAX, True)])
def test_epoch_exhaustion(epoch: int, exhausted: bool) -> None:
    assert is_epoch_exhausted(epoch) is exhausted
    m = meta(Empty, epoch=epoch)
    assert m.is_producer_epoch_exhausted is exhausted
    if exhausted:
        with pytest.raises(IllegalTransactionState):
            m.prepare_increment_producer_epoch(60_000, None, 20)
        assert m.pending_state is None
    else:
        assert m.prepare_increment_producer_epoch(60_000, None, 20).producer_epoch == epoch + 1


def test_last_bumpable_epoch_reaches_short_max_minus_one() -> None:
    m = meta(Empty, epoch=SHORT_MAX - 2)
    m.complete_transition_to(m.prepare_increment_producer_epoch(60_000, None, 20))
    assert m.producer_epoch == SHORT_MAX - 1
    assert m.is_producer_epoch_exhausted


@pytest.mark.parametrize(("record_last", "last_epoch"), [(True, SHORT_MAX - 1), (False, -1)])
def test_producer_id_rotation(record_last: bool, last_epoch: int) -> None:
    m = meta(CompleteCommit, epoch=SHORT_MAX - 1, start=5)
    t = m.prepare_producer_id_rotation(2000, 50_000, 20, record_last)
    assert t == TxnTransitMetadata(2000, 1000, 0, last_epoch, 50_000, Empty, frozenset(), -1, 20)
    m.complete_transition_to(t)
    assert (m.producer_id, m.last_producer_id, m.producer_epoch, m.last_producer_epoch) \
        == (2000, 1000, 0, last_epoch)


@pytest.mark.parametrize("state", [Ongoing, PrepareAbort, PrepareCommit])
def test_no_rotation_while_a_transaction_is_pending(state: TransactionState) -> None:
    m = meta(state, epoch=SHORT_MAX - 1)
    assert m.has_pending_transaction
    with pytest.raises(IllegalTransactionState):
        m.prepare_producer_id_rotation(2000, 50_000, 20, True)


def test_negative_producer_id_or_epoch_is_an_illegal_argument() -> None:
    with pytest.raises(IllegalTransactionArgument):
        meta(Empty).prepare_producer_id_rotation(-5, 50_000, 20, False)
    # Kafka 2.8 refuses a negative epoch for every target, Dead included
    with pytest.raises(IllegalTransactionArgument):
        meta(Empty, epoch=NO_PRODUCER_EPOCH).prepare_dead()


# -- fencing ---------------------------------------------------------------------------------------

def test_fence_bumps_the_epoch_and_clears_the_last_one() -> None:
    m = meta(Ongoing, epoch=5, last_epoch=4, partitions={TP0}, start=5, updated=9)
    t = m.prepare_fence_producer_epoch()
    # every prepared transit names the current producer id as the last one
    assert t == TxnTransitMetadata(1000, 1000, 6, -1, 60_000, PrepareEpochFence,
                                   frozenset({TP0}), 5, 9)
    assert m.pending_state is PrepareEpochFence
    with pytest.raises(IllegalTransactionState):  # a fence is never completed
        m.complete_transition_to(t)


def test_fence_after_a_failed_fence_does_not_bump_again() -> None:
    m = meta(Ongoing, epoch=5, partitions={TP0}, start=5)
    m.has_failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch().producer_epoch == 5


def test_fence_at_short_max_would_overflow() -> None:
    with pytest.raises(IllegalTransactionState):
        meta(Ongoing, epoch=SHORT_MAX).prepare_fence_producer_epoch()
    assert meta(Ongoing, epoch=SHORT_MAX - 1).prepare_fence_producer_epoch().producer_epoch \
        == SHORT_MAX


def test_prepare_complete_clears_the_failed_fence_flag() -> None:
    m = meta(PrepareAbort, partitions={TP0}, start=5)
    m.has_failed_epoch_fence = True
    m.prepare_complete(20)
    assert not m.has_failed_epoch_fence


# -- completeTransitionTo's checks ---------------------------------------------------------------

def test_complete_without_a_pending_state() -> None:
    m = meta(Empty)
    with pytest.raises(IllegalTransactionState):
        m.complete_transition_to(m.prepare_no_transit())


def test_complete_with_a_different_target_than_pending() -> None:
    m = meta(Ongoing, partitions={TP0}, start=5)
    m.prepare_abort_or_commit(PrepareCommit, 20)
    other = TxnTransitMetadata(1000, -1, 0, -1, 60_000, PrepareAbort, frozenset({TP0}), 5, 20)
    with pytest.raises(IllegalTransactionState):
        m.complete_transition_to(other)
    assert m.state is Ongoing


def _pending(state: TransactionState, target: TransactionState, *, epoch: int = 0,
             partitions: set[TopicPartition] | None = None, start: int = -1) -> TransactionMetadata:
    m = meta(state, epoch=epoch, partitions=partitions, start=start)
    m.pending_state = target
    return m


@pytest.mark.parametrize("transit", [
    TxnTransitMetadata(1000, 1000, 7, -1, 60_000, Empty, frozenset(), -1, 20),  # +2
    TxnTransitMetadata(1000, 1000, 0, -1, 60_000, Empty, frozenset(), -1, 20),  # 0, same pid
    TxnTransitMetadata(1000, 1000, 6, -1, 60_000, Empty, frozenset({TP0}), -1, 20),
    TxnTransitMetadata(1000, 1000, 6, -1, 60_000, Empty, frozenset(), 15, 20),
])
def test_complete_to_empty_refuses(transit: TxnTransitMetadata) -> None:
    m = _pending(CompleteCommit, Empty, epoch=5, start=5)
    with pytest.raises(IllegalTransactionState):
        m.complete_transition_to(transit)
    assert (m.state, m.producer_epoch) == (CompleteCommit, 5)


@pytest.mark.parametrize("transit", [
    TxnTransitMetadata(1000, 1000, 5, -1, 30_000, Empty, frozenset(), -1, 20),  # same epoch
    TxnTransitMetadata(1000, 1000, 6, 5, 30_000, Empty, frozenset(), -1, 20),  # +1
    TxnTransitMetadata(2000, 1000, 0, 5, 30_000, Empty, frozenset(), -1, 20),  # new pid at 0
])
def test_complete_to_empty_accepts(transit: TxnTransitMetadata) -> None:
    m = _pending(CompleteCommit, Empty, epoch=5, start=5)
    m.complete_transition_to(transit)
    assert (m.state, m.producer_id, m.producer_epoch, m.txn_timeout_ms) \
        == (Empty, transit.producer_id, transit.producer_epoch, 30_000)


@pytest.mark.parametrize("transit", [
    TxnTransitMetadata(1000, 1000, 1, -1, 60_000, Ongoing, frozenset({TP0, TP1}), 5, 20),
    TxnTransitMetadata(2000, 1000, 0, -1, 60_000, Ongoing, frozenset({TP0, TP1}), 5, 20),
    TxnTransitMetadata(1000, 1000, 0, -1, 60_000, Ongoing, frozenset({TP1}), 5, 20),  # shrinks
    TxnTransitMetadata(1000, 1000, 0, -1, 1_000, Ongoing, frozenset({TP0, TP1}), 5, 20),
])
def test_complete_to_ongoing_refuses(transit: TxnTransitMetadata) -> None:
    m = _pending(Ongoing, Ongoing, partitions={TP0}, start=5)
    with pytest.raises(IllegalTransactionState):
        m.complete_transition_to(transit)
    assert m.topic_partitions == {TP0}


@pytest.mark.parametrize("transit", [
    TxnTransitMetadata(1000, 1000, 1, -1, 60_000, PrepareCommit, frozenset({TP0}), 5, 20),
    TxnTransitMetadata(1000, 1000, 0, -1, 60_000, PrepareCommit, frozenset({TP0, TP1}), 5, 20),
    TxnTransitMetadata(1000, 1000, 0, -1, 1_000, PrepareCommit, frozenset({TP0}), 5, 20),
    TxnTransitMetadata(1000, 1000, 0, -1, 60_000, PrepareCommit, frozenset({TP0}), 6, 20),
])
def test_complete_to_prepare_refuses(transit: TxnTransitMetadata) -> None:
    m = _pending(Ongoing, PrepareCommit, partitions={TP0}, start=5)
    with pytest.raises(IllegalTransactionState):
        m.complete_transition_to(transit)


@pytest.mark.parametrize("transit", [
    TxnTransitMetadata(1000, 1000, 1, -1, 60_000, CompleteAbort, frozenset(), 5, 20),
    TxnTransitMetadata(1000, 1000, 0, -1, 1_000, CompleteAbort, frozenset(), 5, 20),
    TxnTransitMetadata(1000, 1000, 0, -1, 60_000, CompleteAbort, frozenset(), -1, 20),
])
def test_complete_to_complete_refuses(transit: TxnTransitMetadata) -> None:
    m = _pending(PrepareAbort, CompleteAbort, partitions={TP0}, start=5)
    with pytest.raises(IllegalTransactionState):
        m.complete_transition_to(transit)


def test_dead_is_never_completed() -> None:
    m = meta(CompleteCommit, start=5)
    t = m.prepare_dead()
    assert (t.txn_state, t.topic_partitions, t.txn_last_update_timestamp) \
        == (Dead, frozenset(), 10)
    with pytest.raises(IllegalTransactionState):
        m.complete_transition_to(t)


# -- partitionFor ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("txn_id", "n", "expected"), [
    ("", 50, 0),
    ("a", 50, 97 % 50),
    ("hello", 50, 99162322 % 50),
    ("my-group", 50, 12),  # hashCode -1906497762, worked by hand in test_offsets_schema
    ("polygenelubricants", 50, 0),  # hashCode Integer.MIN_VALUE: Utils.abs gives 0
    ("polygenelubricants", 7, 0),  # not abs(MIN_VALUE) % 7 == 2147483648 % 7 == 2
])
def test_partition_for(txn_id: str, n: int, expected: int) -> None:
    assert partition_for(txn_id, n) == expected


def test_partition_for_defaults_to_fifty() -> None:
    assert partition_for("hello") == 99162322 % 50 == 22


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_for_is_in_range_and_follows_the_hash(txn_id: str, n: int) -> None:
    p = partition_for(txn_id, n)
    assert 0 <= p < n
    h = java_string_hashcode(txn_id)
    assert p == (0 if h == -2**31 else abs(h) % n)

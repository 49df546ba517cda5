"""S-5.4: the partition state machine's table, checked against Kafka's source by hand.

VALID below is transcribed from ``validPreviousStates`` in Kafka 3.7's
core/src/main/scala/kafka/controller/PartitionStateMachine.scala, not derived from odradek's
table; every other (from, to) pair must be refused.
"""

from __future__ import annotations

import itertools

import pytest

from odradek.controller.context import TopicPartition
from odradek.controller.partition_states import (
    VALID_PREVIOUS_STATES,
    IllegalStateTransition,
    PartitionState,
    PartitionStates,
    check_transition,
)

New = PartitionState.NewPartition
Online = PartitionState.OnlinePartition
Offline = PartitionState.OfflinePartition
NonExistent = PartitionState.NonExistentPartition

VALID = {
    (NonExistent, New),
    (New, Online), (Online, Online), (Offline, Online),
    (New, Offline), (Online, Offline), (Offline, Offline),
    (Offline, NonExistent),
}
ALL_PAIRS = set(itertools.product(PartitionState, PartitionState))
INVALID = ALL_PAIRS - VALID
TP = TopicPartition("orders", 3)


def test_kafka_state_bytes() -> None:
    assert [(s.name, s.value) for s in PartitionState] == [
        ("NewPartition", 0), ("OnlinePartition", 1), ("OfflinePartition", 2),
        ("NonExistentPartition", 3)]


def test_table_has_every_target() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(PartitionState)
    assert len(VALID) == 8 and len(INVALID) == 8


@pytest.mark.parametrize(("current", "target"), sorted(VALID, key=str))
def test_valid_transition(current: PartitionState, target: PartitionState) -> None:
    check_transition(current, target, TP)
    states: PartitionStates[TopicPartition] = PartitionStates()
    states.put(TP, current)
    change = states.transition(TP, target)
    assert (change.subject, change.from_state, change.to_state) == (TP, current, target)
    assert states.state(TP) is target


@pytest.mark.parametrize(("current", "target"), sorted(INVALID, key=str))
def test_invalid_transition(current: PartitionState, target: PartitionState) -> None:
    with pytest.raises(IllegalStateTransition) as info:
        check_transition(current, target, TP)
    message = str(info.value)
    assert "orders-3" in message
    assert f"before moving to {target.name} state" in message
    assert f"Instead it is in {current.name} state" in message
    states: PartitionStates[TopicPartition] = PartitionStates()
    states.put(TP, current)
    with pytest.raises(IllegalStateTransition):
        states.transition(TP, target)
    assert states.state(TP) is current
    assert states.drain_changes() == []


def test_unknown_partition_is_non_existent_and_lifecycle_is_recorded() -> None:
    states: PartitionStates[TopicPartition] = PartitionStates()
    assert states.state(TP) is NonExistent
    for target in (New, Online, Offline, Online, Offline, NonExistent):
        states.transition(TP, target)
    lines = [c.log_line() for c in states.drain_changes()]
    assert lines[0] == "Changed partition orders-3 state from NonExistentPartition to NewPartition"
    assert len(lines) == 6
    assert states.drain_changes() == []
    assert states.state(TP) is NonExistent and TP in states  # Kafka keeps the entry


def test_transition_all_splits_valid_and_rejected() -> None:
    states: PartitionStates[TopicPartition] = PartitionStates()
    a, b, c = (TopicPartition("t", i) for i in range(3))
    states.put(a, New)
    states.put(b, Offline)
    applied, rejected = states.transition_all([a, b, c], Online)
    assert [ch.subject for ch in applied] == [a, b]
    assert [e.subject for e in rejected] == ["Partition t-2"]
    assert rejected[0].current is NonExistent and rejected[0].target is Online
    assert states.in_states({Online}) == {a, b}


def test_message_lists_valid_previous_states() -> None:
    expected = "NewPartition,OfflinePartition,OnlinePartition"
    with pytest.raises(IllegalStateTransition, match=expected):
        check_transition(NonExistent, Offline)

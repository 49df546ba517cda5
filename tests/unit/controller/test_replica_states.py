"""S-5.4: the replica state machine's table, checked against Kafka's source by hand.

VALID is transcribed from ``validPreviousStates`` in Kafka 3.7's
core/src/main/scala/kafka/controller/ReplicaStateMachine.scala; every other pair is refused.
"""

from __future__ import annotations

import itertools

import pytest

from odradek.controller.context import PartitionAndReplica, TopicPartition
from odradek.controller.replica_states import (
    VALID_PREVIOUS_STATES,
    IllegalStateTransition,
    ReplicaState,
    ReplicaStates,
    check_transition,
)

R = ReplicaState
New, Online, Offline = R.NewReplica, R.OnlineReplica, R.OfflineReplica
Started, Successful = R.ReplicaDeletionStarted, R.ReplicaDeletionSuccessful
Ineligible, NonExistent = R.ReplicaDeletionIneligible, R.NonExistentReplica

VALID = {
    (NonExistent, New),
    (New, Online), (Online, Online), (Offline, Online), (Ineligible, Online),
    (New, Offline), (Online, Offline), (Offline, Offline), (Ineligible, Offline),
    (Offline, Started),
    (Started, Successful),
    (Offline, Ineligible), (Started, Ineligible),
    (Successful, NonExistent),
}
INVALID = set(itertools.product(ReplicaState, ReplicaState)) - VALID
REPLICA = PartitionAndReplica(TopicPartition("orders", 0), 2)


def test_kafka_state_bytes() -> None:
    assert [(s.name, s.value) for s in ReplicaState] == [
        ("NewReplica", 1), ("OnlineReplica", 2), ("OfflineReplica", 3),
        ("ReplicaDeletionStarted", 4), ("ReplicaDeletionSuccessful", 5),
        ("ReplicaDeletionIneligible", 6), ("NonExistentReplica", 7)]


def test_table_shape() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(ReplicaState)
    assert len(VALID) == 14 and len(INVALID) == 35


@pytest.mark.parametrize(("current", "target"), sorted(VALID, key=str))
def test_valid_transition(current: ReplicaState, target: ReplicaState) -> None:
    check_transition(current, target, REPLICA)
    states: ReplicaStates[PartitionAndReplica] = ReplicaStates()
    states.put(REPLICA, current)
    change = states.transition(REPLICA, target)
    assert (change.from_state, change.to_state) == (current, target)
    assert states.state(REPLICA) is target


@pytest.mark.parametrize(("current", "target"), sorted(INVALID, key=str))
def test_invalid_transition(current: ReplicaState, target: ReplicaState) -> None:
    with pytest.raises(IllegalStateTransition) as info:
        check_transition(current, target, REPLICA)
    assert "[Topic=orders,Partition=0,Replica=2]" in str(info.value)
    assert f"Instead it is in {current.name} state" in str(info.value)
    states: ReplicaStates[PartitionAndReplica] = ReplicaStates()
    states.put(REPLICA, current)
    with pytest.raises(IllegalStateTransition):
        states.transition(REPLICA, target)
    assert states.state(REPLICA) is current


def test_topic_deletion_path_forgets_the_replica() -> None:
    states: ReplicaStates[PartitionAndReplica] = ReplicaStates()
    for target in (New, Online, Offline, Started, Ineligible, Offline, Started, Successful,
                   NonExistent):
        states.transition(REPLICA, target)
    assert REPLICA not in states  # Kafka's removeReplicaState
    assert states.state(REPLICA) is NonExistent
    changes = states.drain_changes()
    assert len(changes) == 9
    assert changes[0].log_line() == (
        "Changed state of replica 2 for partition orders-0 from NonExistentReplica to NewReplica")


def test_offline_replica_cannot_come_back_through_new() -> None:
    states: ReplicaStates[PartitionAndReplica] = ReplicaStates()
    states.put(REPLICA, Offline)
    with pytest.raises(IllegalStateTransition):
        states.transition(REPLICA, New)
    applied, rejected = states.transition_all([REPLICA], Online)
    assert len(applied) == 1 and not rejected


def test_recorded_changes_are_bounded() -> None:
    from odradek.controller.partition_states import MAX_RECORDED_CHANGES
    states: ReplicaStates[PartitionAndReplica] = ReplicaStates()
    states.transition(REPLICA, New)
    for _ in range(MAX_RECORDED_CHANGES + 10):
        states.transition(REPLICA, Online)
    changes = states.drain_changes()
    assert len(changes) == MAX_RECORDED_CHANGES
    assert states.drain_changes() == []

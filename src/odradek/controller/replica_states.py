"""The controller's replica state machine, as a table (S-5.4).

Kafka's ZooKeeper-era ``ReplicaStateMachine.scala`` gives every (partition, replica) pair one of
seven states; the three ``ReplicaDeletion*`` states drive topic deletion (S-5.7).  As for
partitions, this module holds only the ``validPreviousStates`` table, a pure
:func:`check_transition` and a :class:`ReplicaStates` holder that returns the applied
transitions for ``state-change.log``.  Member names are Kafka's, values its state bytes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from enum import Enum
from typing import TypeVar

from odradek.controller.partition_states import (
    IllegalStateTransition,
    StateChange,
    TableStates,
    check_table_transition,
)

__all__ = [
    "VALID_PREVIOUS_STATES",
    "IllegalStateTransition",
    "ReplicaState",
    "ReplicaStates",
    "StateChange",
    "check_transition",
]


class ReplicaState(Enum):
    """A replica's state in the controller (Kafka's ``ReplicaState``; value = state byte)."""

    NewReplica = 1
    """Created by topic creation or reassignment; may only be told to become a follower."""
    OnlineReplica = 2
    """Started and part of the assigned replicas; may become leader or follower."""
    OfflineReplica = 3
    """Its broker is down (or it was stopped)."""
    ReplicaDeletionStarted = 4
    """A StopReplica with deletion was sent to it."""
    ReplicaDeletionSuccessful = 5
    """It answered the deleting StopReplica without error."""
    ReplicaDeletionIneligible = 6
    """Its deletion failed (or its broker is down); retried later."""
    NonExistentReplica = 7
    """Deleted, or never created."""

    def __str__(self) -> str:
        return self.name


_R = ReplicaState
_LIVE_OR_OFFLINE = frozenset({
    _R.NewReplica, _R.OnlineReplica, _R.OfflineReplica, _R.ReplicaDeletionIneligible,
})

VALID_PREVIOUS_STATES: Mapping[ReplicaState, frozenset[ReplicaState]] = {
    _R.NewReplica: frozenset({_R.NonExistentReplica}),
    _R.OnlineReplica: _LIVE_OR_OFFLINE,
    _R.OfflineReplica: _LIVE_OR_OFFLINE,
    _R.ReplicaDeletionStarted: frozenset({_R.OfflineReplica}),
    _R.ReplicaDeletionSuccessful: frozenset({_R.ReplicaDeletionStarted}),
    _R.ReplicaDeletionIneligible: frozenset({_R.OfflineReplica, _R.ReplicaDeletionStarted}),
    _R.NonExistentReplica: frozenset({_R.ReplicaDeletionSuccessful}),
}
"""Target state -> the states a replica may be in before moving to it (Kafka's table)."""


def check_transition(current: ReplicaState, target: ReplicaState,
                     subject: object | None = None) -> None:
    """Raise :class:`IllegalStateTransition` unless ``current -> target`` is in the table."""
    check_table_transition(VALID_PREVIOUS_STATES, "Replica", current, target, subject)


K = TypeVar("K", bound=Hashable)


class ReplicaStates(TableStates[K, ReplicaState]):
    """The controller's map replica -> :class:`ReplicaState` (``replicaStates``).

    Keys are ``PartitionAndReplica`` in the controller.  Unknown replicas are
    ``NonExistentReplica``; moving a replica to ``NonExistentReplica`` forgets it
    (Kafka's ``removeReplicaState``).
    """

    _table = VALID_PREVIOUS_STATES
    _absent = ReplicaState.NonExistentReplica
    _kind = "Replica"
    _forget_on_absent = True


"""The controller's partition state machine, as a table (S-5.4).

Kafka's ZooKeeper-era controller (``PartitionStateMachine.scala``) gives every partition one of
four states and lists, for each target state, the states a partition may come from
(``validPreviousStates``).  This module keeps exactly that table and nothing else: no ZooKeeper,
no requests.  The controller asks :func:`check_transition` (or a :class:`PartitionStates` holder)
before acting, and writes the returned :class:`StateChange` records to ``state-change.log``.

Member names are Kafka's own (``NewPartition``, ``OnlinePartition``...) so that log lines read like
Kafka's and ``grep`` finds Kafka's vocabulary; the values are Kafka's state bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

__all__ = [
    "VALID_PREVIOUS_STATES",
    "IllegalStateTransition",
    "PartitionState",
    "PartitionStates",
    "StateChange",
    "TableStates",
    "check_table_transition",
    "check_transition",
    "describe_subject",
]


class PartitionState(Enum):
    """A partition's state in the controller (Kafka's ``PartitionState``; value = state byte)."""

    NewPartition = 0
    """Created, replicas assigned, no leader/ISR yet."""
    OnlinePartition = 1
    """A leader has been elected."""
    OfflinePartition = 2
    """The elected leader died (or no replica was alive to lead)."""
    NonExistentPartition = 3
    """Never created, or created and then deleted."""

    def __str__(self) -> str:
        return self.name


_P = PartitionState

VALID_PREVIOUS_STATES: Mapping[PartitionState, frozenset[PartitionState]] = {
    _P.NewPartition: frozenset({_P.NonExistentPartition}),
    _P.OnlinePartition: frozenset({_P.NewPartition, _P.OnlinePartition, _P.OfflinePartition}),
    _P.OfflinePartition: frozenset({_P.NewPartition, _P.OnlinePartition, _P.OfflinePartition}),
    _P.NonExistentPartition: frozenset({_P.OfflinePartition}),
}
"""Target state -> the states a partition may be in before moving to it (Kafka's table)."""


MAX_RECORDED_CHANGES = 1000
"""Applied transitions a :class:`TableStates` keeps for :meth:`~TableStates.drain_changes`."""


class IllegalStateTransition(Exception):
    """A state machine was asked for a transition its table does not allow.

    Shared by the partition and the replica state machines (Kafka raises
    ``IllegalStateException`` with the same wording and logs it to ``state-change.log``).
    """

    def __init__(self, subject: object, current: Enum, target: Enum,
                 valid_previous: Iterable[Enum]) -> None:
        self.subject = subject
        self.current = current
        self.target = target
        self.valid_previous = frozenset(valid_previous)
        names = ",".join(sorted(s.name for s in self.valid_previous))
        what = f"{subject} " if subject is not None else ""
        super().__init__(
            f"{what}should be in one of {names} states before moving to {target.name} state. "
            f"Instead it is in {current.name} state"
        )


def describe_subject(kind: str, subject: object | None) -> str | None:
    """``"Partition t-0"`` for error messages; ``None`` when there is no subject."""
    return None if subject is None else f"{kind} {subject}"


def check_transition(current: PartitionState, target: PartitionState,
                     subject: object | None = None) -> None:
    """Raise :class:`IllegalStateTransition` unless ``current -> target`` is in the table.

    ``subject`` (e.g. a ``TopicPartition``) only makes the message clearer.
    """
    check_table_transition(VALID_PREVIOUS_STATES, "Partition", current, target, subject)


K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=Enum)


def check_table_transition(table: Mapping[S, frozenset[S]], kind: str, current: S, target: S,
                           subject: object | None = None) -> None:
    """Raise :class:`IllegalStateTransition` unless ``table`` lets ``current`` move to
    ``target`` (the check of both state machines; ``kind`` names the subject)."""
    allowed = table[target]
    if current not in allowed:
        raise IllegalStateTransition(describe_subject(kind, subject), current, target, allowed)


@dataclass(frozen=True, slots=True)
class StateChange(Generic[K, S]):
    """One applied transition, for the caller to write to ``state-change.log``."""

    subject: K
    from_state: S
    to_state: S

    def log_line(self) -> str:
        """Kafka-style wording: ``Changed partition t-0 state from NewPartition to ...``."""
        subject = self.subject
        replica = getattr(subject, "replica", None)
        tp = getattr(subject, "topic_partition", None)
        if replica is not None and tp is not None:
            return (f"Changed state of replica {replica} for partition {tp} "
                    f"from {self.from_state.name} to {self.to_state.name}")
        return (f"Changed partition {subject} state "
                f"from {self.from_state.name} to {self.to_state.name}")


class TableStates(Generic[K, S]):
    """A map subject -> state guarded by a ``validPreviousStates`` table (shared machinery).

    A subject the map does not know is in the ``absent`` state (Kafka puts
    ``NonExistentPartition``/``NonExistentReplica`` if absent before every transition).
    :meth:`transition` checks the table, applies the change, records it and returns it;
    :meth:`drain_changes` hands the recorded changes to the state-change logger. Only the last
    ``MAX_RECORDED_CHANGES`` are kept: the controller logs each change as it applies it and
    never drains, and a list kept every transition of the controller's life (30,000 more per
    broker failure at 10,000 partitions).
    """

    _table: Mapping[S, frozenset[S]]
    _absent: S
    _kind: str
    _forget_on_absent: bool = False

    def __init__(self) -> None:
        self._states: dict[K, S] = {}
        self._changes: deque[StateChange[K, S]] = deque(maxlen=MAX_RECORDED_CHANGES)

    def __len__(self) -> int:
        return len(self._states)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {v.name}" for k, v in self._states.items())
        return f"{type(self).__name__}({{{inner}}})"

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def items(self) -> list[tuple[K, S]]:
        return list(self._states.items())

    def state(self, subject: K) -> S:
        return self._states.get(subject, self._absent)

    def put(self, subject: K, state: S) -> None:
        """Set a state without checking (controller start-up initialises states this way)."""
        self._states[subject] = state

    def remove(self, subject: K) -> None:
        self._states.pop(subject, None)

    def transition(self, subject: K, target: S) -> StateChange[K, S]:
        """Move ``subject`` to ``target`` or raise :class:`IllegalStateTransition`."""
        current = self.state(subject)
        check_table_transition(self._table, self._kind, current, target, subject)
        if target == self._absent and self._forget_on_absent:
            self._states.pop(subject, None)
        else:
            self._states[subject] = target
        change: StateChange[K, S] = StateChange(subject, current, target)
        self._changes.append(change)
        return change

    def transition_all(
        self, subjects: Iterable[K], target: S
    ) -> tuple[list[StateChange[K, S]], list[IllegalStateTransition]]:
        """Kafka's ``checkValid...StateChange`` then apply: returns (applied, rejected)."""
        applied: list[StateChange[K, S]] = []
        rejected: list[IllegalStateTransition] = []
        for subject in subjects:
            try:
                applied.append(self.transition(subject, target))
            except IllegalStateTransition as e:
                rejected.append(e)
        return applied, rejected

    def in_states(self, states: Iterable[S]) -> set[K]:
        """Kafka's ``partitionsInStates`` / ``replicasInState``."""
        wanted = frozenset(states)
        return {k for k, s in self._states.items() if s in wanted}

    def drain_changes(self) -> list[StateChange[K, S]]:
        """Return and forget the changes recorded since the last drain."""
        changes = list(self._changes)
        self._changes.clear()
        return changes


class PartitionStates(TableStates[K, PartitionState]):
    """The controller's map partition -> :class:`PartitionState` (``partitionStates``).

    Unknown partitions are ``NonExistentPartition``; a partition moved to
    ``NonExistentPartition`` stays in the map, as in Kafka.
    """

    _table = VALID_PREVIOUS_STATES
    _absent = PartitionState.NonExistentPartition
    _kind = "Partition"

"""The read-compute-write loop of optimistic concurrency on the coordination store.

Every conditional update of a znode (a partition's leadership, a topic's assignment, the admin
nodes) reads the current value, computes the new one from it, and writes it conditionally on
the version it read. A write that loses a race (someone wrote in between) raises
:class:`VersionConflict`; the loop reads again and decides again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["VersionConflict", "optimistic_update"]

T = TypeVar("T")
U = TypeVar("U")
R = TypeVar("R")


class VersionConflict(Exception):
    """A version-checked write found another version than the one read: read and retry."""


async def optimistic_update(read: Callable[[], Awaitable[T | None]],
                            compute: Callable[[T], U | None],
                            write: Callable[[T, U], Awaitable[R]]) -> R | None:
    """Read, compute, write conditionally on what was read; on :class:`VersionConflict`, again.

    ``read`` returning None (nothing to update) or ``compute`` returning None (nothing to do)
    ends the loop with None; otherwise the result of the successful ``write``.

    After a conflict the loop retries without bound, as Kafka's controller does
    (``ZkPartitionStateMachine.doElectLeaderForPartitions``, ``ZkReplicaStateMachine.
    doRemoveReplicasFromIsr`` and ``KafkaController.updateLeaderEpoch`` loop while partitions
    remain to retry): a conflict means another writer's update succeeded, so every round makes
    progress, and a controller that lost its place does not loop but stops with the fencing
    error its write raises. A write whose node vanished is not a conflict: ``write`` says so
    by its result (or ``read`` finds nothing on the next round).
    """
    while True:
        current = await read()
        if current is None:
            return None
        new = compute(current)
        if new is None:
            return None
        try:
            return await write(current, new)
        except VersionConflict:
            continue

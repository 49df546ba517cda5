"""Partition leader selectors: pure functions (S-4.1, S-4.4, S-5.4, S-6.1, S-6.2).

Each selector mirrors one of Kafka's election strategies (``Election.scala`` and
``PartitionLeaderElectionAlgorithms``) and returns an :class:`ElectionResult`: the new leader
(or ``None`` when no replica qualifies), the new ISR, and the replicas that must receive the
resulting LeaderAndIsr request.  The controller then writes the leadership to the partition's
state node (bumping the leader epoch, see :func:`apply_election`) and sends the requests.

Arguments are plain broker id collections: ``assignment`` is AR in order (its head is the
preferred replica), ``isr`` the current ISR, ``live`` the ids of live brokers.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import Enum

from odradek.controller.context import NO_LEADER, LeaderAndIsr

__all__ = [
    "ElectionResult",
    "LeaderElectionStrategy",
    "apply_election",
    "controlled_shutdown_leader",
    "decide_election",
    "new_partition_leader",
    "offline_partition_leader",
    "preferred_replica_leader",
    "reassign_partition_leader",
    "remove_replica_from_isr",
]


class LeaderElectionStrategy(Enum):
    """Kafka's ``PartitionLeaderElectionStrategy`` (the four leader selectors of S-5.4)."""

    OFFLINE = "OfflinePartitionLeaderSelector"
    REASSIGN = "ReassignedPartitionLeaderSelector"
    PREFERRED_REPLICA = "PreferredReplicaPartitionLeaderSelector"
    CONTROLLED_SHUTDOWN = "ControlledShutdownLeaderSelector"


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """Outcome of a leader selector.

    ``leader`` is ``None`` when no replica qualifies (the partition stays/becomes offline and
    the ISR is returned unchanged).  ``unclean`` is true when the leader came from outside the
    ISR (unclean leader election, possible data loss).
    """

    leader: int | None
    isr: tuple[int, ...]
    recipients: tuple[int, ...]
    unclean: bool = False

    @property
    def elected(self) -> bool:
        return self.leader is not None


def new_partition_leader(assignment: Sequence[int], live: Collection[int]) -> ElectionResult:
    """NewPartition -> OnlinePartition: first live replica leads, ISR = live replicas.

    Recipients are the ISR (Kafka sends the first LeaderAndIsr, with ``isNew``, to the ISR).
    No live replica: no leader, empty ISR (the partition stays NewPartition).
    """
    live_replicas = tuple(r for r in assignment if r in live)
    if not live_replicas:
        return ElectionResult(None, (), ())
    return ElectionResult(live_replicas[0], live_replicas, live_replicas)


def offline_partition_leader(assignment: Sequence[int], isr: Sequence[int],
                             live_replicas: Collection[int],
                             unclean_enabled: bool) -> ElectionResult:
    """OfflinePartitionLeaderSelector (S-4.1), Kafka's ``leaderForOffline``.

    Leader: the first replica in assignment order that is live and in the ISR.  If none and
    ``unclean.leader.election.enable``: the first live replica in assignment order
    (``unclean=True``).  New ISR: the live members of the ISR if the leader came from it,
    else just the leader.  Recipients: the live assigned replicas.
    """
    recipients = tuple(r for r in assignment if r in live_replicas)
    leader = next((r for r in assignment if r in live_replicas and r in isr), None)
    if leader is not None:
        new_isr = tuple(r for r in isr if r in live_replicas)
        return ElectionResult(leader, new_isr, recipients)
    if unclean_enabled and recipients:
        return ElectionResult(recipients[0], (recipients[0],), recipients, unclean=True)
    return ElectionResult(None, tuple(isr), recipients)


def reassign_partition_leader(reassignment_target: Sequence[int], isr: Sequence[int],
                              live: Collection[int]) -> ElectionResult:
    """ReassignedPartitionLeaderSelector (S-6.2), Kafka's ``leaderForReassign``.

    Leader: the first replica of RAR that is live and in the ISR.  ISR unchanged.
    Recipients: all of RAR.
    """
    leader = next((r for r in reassignment_target if r in live and r in isr), None)
    return ElectionResult(leader, tuple(isr), tuple(reassignment_target))


def preferred_replica_leader(assignment: Sequence[int], isr: Sequence[int],
                             live: Collection[int]) -> ElectionResult:
    """PreferredReplicaPartitionLeaderSelector (S-6.1), Kafka's ``leaderForPreferredReplica``.

    Leader: the preferred replica (head of AR) only if it is live and in the ISR; never a
    replica outside the ISR.  ISR unchanged.  Recipients: all of AR.
    """
    preferred = assignment[0] if assignment else None
    leader = preferred if preferred is not None and preferred in live and preferred in isr \
        else None
    return ElectionResult(leader, tuple(isr), tuple(assignment))


def controlled_shutdown_leader(assignment: Sequence[int], isr: Sequence[int],
                               live: Collection[int],
                               shutting_down: Collection[int]) -> ElectionResult:
    """ControlledShutdownLeaderSelector (S-4.4), Kafka's ``leaderForControlledShutdown``.

    Brokers shutting down are still live (Kafka's ``liveOrShuttingDownBrokerIds``): they count
    as recipients whether or not ``live`` lists them.  Leader: the first replica in assignment
    order that is live, in the ISR and not shutting down.  New ISR: the ISR minus the brokers
    shutting down.  Recipients: the live (or shutting down) assigned replicas.
    """
    recipients = tuple(r for r in assignment if r in live or r in shutting_down)
    leader = next((r for r in assignment
                   if (r in live or r in shutting_down) and r in isr and r not in shutting_down),
                  None)
    if leader is None:
        return ElectionResult(None, tuple(isr), recipients)
    new_isr = tuple(r for r in isr if r not in shutting_down)
    return ElectionResult(leader, new_isr, recipients)


def decide_election(strategy: str, assignment: Sequence[int], isr: Sequence[int],
                    live_replicas: Collection[int], unclean_enabled: bool,
                    live_or_shutting_down: Collection[int],
                    shutting_down: Collection[int]) -> ElectionResult:
    """One election by strategy name (Kafka's ``PartitionLeaderElectionStrategy``):
    ``"offline"`` and ``"unclean"`` (ElectLeaders UNCLEAN: unclean whatever the topic says)
    take the offline selector over ``live_replicas`` (live brokers whose replica is online),
    ``"preferred"`` the preferred-replica one, anything else the controlled-shutdown one over
    ``live_or_shutting_down`` and ``shutting_down``."""
    if strategy in ("offline", "unclean"):
        return offline_partition_leader(assignment, isr, live_replicas,
                                        strategy == "unclean" or unclean_enabled)
    if strategy == "preferred":
        return preferred_replica_leader(assignment, isr, live_replicas)
    return controlled_shutdown_leader(assignment, isr, live_or_shutting_down, shutting_down)


def apply_election(current: LeaderAndIsr, result: ElectionResult) -> LeaderAndIsr | None:
    """The leadership to write for an election: new leader and ISR, leader epoch + 1.

    ``None`` if nobody was elected.  ``zk_version`` is kept: the write is conditional on it.
    """
    if result.leader is None:
        return None
    return current.new_leader_and_isr(result.leader, result.isr)


def remove_replica_from_isr(current: LeaderAndIsr, replica: int) -> LeaderAndIsr | None:
    """OfflineReplica transition: take ``replica`` out of the ISR (Kafka's removeReplicasFromIsr).

    Returns ``None`` when ``replica`` is not in the ISR (nothing to write).  If it led, the
    partition loses its leader (``-1``).  The last ISR member is kept in the ISR so that a
    later clean election can pick it when it returns.  The leader epoch is bumped.
    """
    if replica not in current.isr:
        return None
    leader = NO_LEADER if current.leader == replica else current.leader
    isr = current.isr if len(current.isr) == 1 else tuple(r for r in current.isr if r != replica)
    return current.new_leader_and_isr(leader, isr)

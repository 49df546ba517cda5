"""Replica assignment and preferred-leader imbalance (S-3.1, S-6.1, S-6.3).

Two assignment algorithms over the brokers sorted by id:

* ``"consecutive"`` (default): the formula of docs/design.md S-3.1: partition ``i``, replica
  ``j`` -> broker ``(i + j) mod n`` (plus a start index when partitions are added).
  Deterministic.
* ``"kafka"``: Kafka's rack-unaware ``AdminUtils.assignReplicasToBrokers``: the first replica
  round-robin from a random start index, the others at an increasing shift
  (``nextReplicaShift``, bumped every ``n`` partitions) so that the followers of one broker's
  partitions spread over the other brokers.  Randomness comes from an injectable
  :class:`random.Random`.

When every broker has a rack (`broker.rack`), both use Kafka's rack-aware
``assignReplicasToBrokersRackAware`` instead: the brokers in rack-alternated order (one of each
rack in turn), and each further replica skipping brokers in racks that already hold one while
some rack holds none. Some brokers with a rack and some without is refused, as Kafka refuses it
(`AdminOperationException`, answered UNKNOWN_SERVER_ERROR).

Errors carry Kafka's error codes so that CreateTopics/CreatePartitions can answer with them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from . import entropy

__all__ = [
    "INVALID_PARTITIONS",
    "INVALID_REPLICATION_FACTOR",
    "INVALID_REPLICA_ASSIGNMENT",
    "AssignmentError",
    "BrokerImbalance",
    "BrokerNotAvailableError",
    "InvalidPartitionsError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "add_partitions",
    "assign_replicas_to_brokers",
    "brokers_to_rebalance",
    "preferred_replica_imbalance",
    "rack_alternated_brokers",
    "validate_replica_assignment",
]

BROKER_NOT_AVAILABLE = 8
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39

Algorithm = Literal["consecutive", "kafka"]


class AssignmentError(Exception):
    """An assignment request Kafka would refuse; ``error_code`` is Kafka's."""

    error_code: int = -1


class InvalidPartitionsError(AssignmentError):
    error_code = INVALID_PARTITIONS


class InvalidReplicationFactorError(AssignmentError):
    error_code = INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(AssignmentError):
    error_code = INVALID_REPLICA_ASSIGNMENT


class BrokerNotAvailableError(AssignmentError):
    error_code = BROKER_NOT_AVAILABLE


def _check_counts(n_brokers: int, n_partitions: int, replication_factor: int) -> None:
    """Kafka's checks, with Kafka's messages."""
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > n_brokers:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{n_brokers}.")


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int,
                   n_brokers: int) -> int:
    """Kafka's ``replicaIndex``: never lands on the first replica's broker."""
    shift = 1 + (second_replica_shift + replica_index) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: racks in name order, each rack's brokers in id
    order, one broker of each rack in turn (``a1, b1, c1, a2, b2, a3`` ...)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(racks):
        result.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return result


def _assign_rack_aware(racks: Mapping[int, str], n_partitions: int, replication_factor: int,
                       start_index: int, next_replica_shift: int,
                       first_id: int) -> dict[int, list[int]]:
    """Kafka's ``assignReplicasToBrokersRackAware``: a replica goes to a broker in a rack with
    no replica yet (while there is one) that holds no replica yet (while there is one)."""
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    n_racks = len(set(racks.values()))
    result: dict[int, list[int]] = {}
    for p in range(first_id, first_id + n_partitions):
        if p > 0 and p % n == 0:
            next_replica_shift += 1
        first = (p + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used, brokers_used = {racks[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, next_replica_shift * n_racks, k, n)]
                k += 1
                rack = racks[broker]
                if ((rack not in racks_used or len(racks_used) == n_racks)
                        and (broker not in brokers_used or len(brokers_used) == n)):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        result[p] = replicas
    return result


def assign_replicas_to_brokers(
    broker_ids: Iterable[int],
    n_partitions: int,
    replication_factor: int,
    *,
    algorithm: Algorithm = "consecutive",
    rng: random.Random | None = None,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica list (AR; its head is the preferred replica), S-3.1.

    ``broker_ids`` are sorted first.  ``fixed_start_index`` (>= 0) fixes the start index (and,
    for ``"kafka"``, the initial replica shift, as Kafka does); ``start_partition_id`` numbers
    the first partition produced (used when partitions are added).  With ``"kafka"`` and no
    fixed start index, the start index and the initial shift are drawn from ``rng``.
    """
    brokers = sorted(set(broker_ids))
    _check_counts(len(brokers), n_partitions, replication_factor)
    n = len(brokers)
    first_id = max(0, start_partition_id)
    known = {b: (racks or {}).get(b) for b in brokers}
    if any(rack is not None for rack in known.values()):
        if any(rack is None for rack in known.values()):
            raise AssignmentError("Not all brokers have rack information for replica rack "
                                  "aware assignment.")
        if algorithm not in ("consecutive", "kafka"):
            raise ValueError(f"unknown assignment algorithm {algorithm!r}")
        rng = rng if rng is not None else entropy.new_random()
        start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
        shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
        return _assign_rack_aware({b: r for b, r in known.items() if r is not None},
                                  n_partitions, replication_factor, start_index, shift, first_id)
    if algorithm == "consecutive":
        start = max(0, fixed_start_index)
        return {p: [brokers[(p + start + j) % n] for j in range(replication_factor)]
                for p in range(first_id, first_id + n_partitions)}
    if algorithm != "kafka":
        raise ValueError(f"unknown assignment algorithm {algorithm!r}")
    rng = rng if rng is not None else entropy.new_random()
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    next_replica_shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    result: dict[int, list[int]] = {}
    for p in range(first_id, first_id + n_partitions):
        if p > 0 and p % n == 0:
            next_replica_shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        replicas.extend(brokers[_replica_index(first, next_replica_shift, j, n)]
                        for j in range(replication_factor - 1))
        result[p] = replicas
    return result


def validate_replica_assignment(assignment: Mapping[int, Sequence[int]],
                                expected_replication_factor: int,
                                available_broker_ids: Iterable[int]) -> None:
    """Check a manual assignment (Kafka's ``validateReplicaAssignment``), raising on error."""
    available = set(available_broker_ids)
    for partition, replicas in assignment.items():
        if not replicas:
            raise InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition id {partition}.")
        if len(replicas) != len(set(replicas)):
            raise InvalidReplicaAssignmentError(
                "Duplicate brokers not allowed in replica assignment: "
                f"{', '.join(map(str, replicas))} for partition id {partition}.")
        if not set(replicas) <= available:
            raise BrokerNotAvailableError(
                f"Some brokers specified for partition id {partition} are not available. "
                f"Specified brokers: {', '.join(map(str, replicas))}, "
                f"available brokers: {', '.join(map(str, sorted(available)))}.")
    bad = sorted((p, len(r)) for p, r in assignment.items()
                 if len(r) != expected_replication_factor)
    if bad:
        raise InvalidReplicaAssignmentError(
            "Inconsistent replication factor between partitions, partition 0 has "
            f"{expected_replication_factor} while partitions "
            f"[{', '.join(str(p) for p, _ in bad)}] have replication factors "
            f"[{', '.join(str(rf) for _, rf in bad)}], respectively.")


def add_partitions(
    topic: str,
    existing: Mapping[int, Sequence[int]],
    broker_ids: Iterable[int],
    total_partitions: int,
    *,
    replica_assignment: Mapping[int, Sequence[int]] | None = None,
    algorithm: Algorithm = "consecutive",
    rng: random.Random | None = None,
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, list[int]]:
    """Assignment of the NEW partitions when ``topic`` grows to ``total_partitions`` (S-6.3).

    Kafka's ``createNewPartitionsAssignment``: the replication factor is partition 0's; the
    start index is the position of the first broker whose id >= partition 0's first replica,
    so new partitions continue partition 0's round-robin; partition ids continue from the
    current count.  A manual ``replica_assignment`` is validated and returned instead.
    """
    if 0 not in existing:
        raise AssignmentError(
            f"Unexpected existing replica assignment for topic '{topic}', partition id 0 is "
            f"missing. Assignment: {dict(existing)}")
    p0 = list(existing[0])
    to_add = total_partitions - len(existing)
    if to_add <= 0:
        raise InvalidPartitionsError(
            "The number of partitions for a topic can only be increased. "
            f"Topic {topic} currently has {len(existing)} partitions, "
            f"{total_partitions} would not be an increase.")
    brokers = sorted(set(broker_ids))
    if replica_assignment is not None:
        validate_replica_assignment(replica_assignment, len(p0), brokers)
        return {p: list(r) for p, r in replica_assignment.items()}
    start_index = next((i for i, b in enumerate(brokers) if b >= p0[0]), -1)
    return assign_replicas_to_brokers(
        brokers, to_add, len(p0), algorithm=algorithm, rng=rng,
        fixed_start_index=max(0, start_index), start_partition_id=len(existing), racks=racks)


K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class BrokerImbalance(Generic[K]):
    """Preferred-leader imbalance of one broker (auto leader rebalance, S-6.1)."""

    broker: int
    preferred: frozenset[K]
    """Partitions whose preferred replica (head of AR) is this broker."""
    not_led: frozenset[K]
    """Of those, the ones currently led by another broker."""

    @property
    def ratio(self) -> float:
        return len(self.not_led) / len(self.preferred) if self.preferred else 0.0

    def exceeds(self, percentage: float) -> bool:
        """Kafka triggers when the ratio is strictly above ``percentage / 100``."""
        return self.ratio > percentage / 100


def preferred_replica_imbalance(assignments: Mapping[K, Sequence[int]],
                                leaders: Mapping[K, int]) -> dict[int, BrokerImbalance[K]]:
    """Per preferred broker: its partitions and those led elsewhere (``checkAndTriggerAuto...``).

    ``assignments`` maps partition -> AR (the caller leaves out topics queued for deletion);
    ``leaders`` maps partition -> current leader.  A partition without known leadership counts
    in the denominator only, as in Kafka.
    """
    preferred: dict[int, set[K]] = {}
    not_led: dict[int, set[K]] = {}
    for partition, replicas in assignments.items():
        if not replicas:
            continue
        broker = replicas[0]
        preferred.setdefault(broker, set()).add(partition)
        leader = leaders.get(partition)
        if leader is not None and leader != broker:
            not_led.setdefault(broker, set()).add(partition)
    return {b: BrokerImbalance(b, frozenset(ps), frozenset(not_led.get(b, ())))
            for b, ps in preferred.items()}


def brokers_to_rebalance(imbalance: Mapping[int, BrokerImbalance[K]],
                         leader_imbalance_per_broker_percentage: float = 10
                         ) -> dict[int, frozenset[K]]:
    """Brokers above ``leader.imbalance.per.broker.percentage`` -> partitions to elect back."""
    return {b: imb.not_led for b, imb in imbalance.items()
            if imb.exceeds(leader_imbalance_per_broker_percentage)}

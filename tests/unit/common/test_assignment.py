"""S-3.1 replica assignment, S-6.3 adding partitions, S-6.1 preferred-leader imbalance."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.common.replica_assignment import (
    BrokerNotAvailableError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    add_partitions,
    assign_replicas_to_brokers,
    brokers_to_rebalance,
    preferred_replica_imbalance,
    validate_replica_assignment,
)
from odradek.controller.context import TopicPartition

# ---- the formula of S-3.1 (default, algorithm "consecutive") ----------------------------------


def test_consecutive_formula_partition_i_replica_j_on_broker_i_plus_j_mod_n() -> None:
    brokers = [30, 10, 20, 40]  # sorted: 10 20 30 40
    a = assign_replicas_to_brokers(brokers, n_partitions=9, replication_factor=3)
    ordered = sorted(brokers)
    assert sorted(a) == list(range(9))
    for i, replicas in a.items():
        assert replicas == [ordered[(i + j) % 4] for j in range(3)]
    assert a[0] == [10, 20, 30] and a[5] == [20, 30, 40] and a[7] == [40, 10, 20]


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 1000), min_size=1, max_size=12), st.integers(1, 40),
       st.data())
def test_replicas_of_a_partition_are_distinct(brokers: set[int], n_partitions: int,
                                              data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    for algorithm in ("consecutive", "kafka"):
        a = assign_replicas_to_brokers(brokers, n_partitions, rf, algorithm=algorithm,
                                       rng=random.Random(n_partitions))
        assert len(a) == n_partitions
        for replicas in a.values():
            assert len(replicas) == rf == len(set(replicas))
            assert set(replicas) <= brokers


# ---- Kafka's assignReplicasToBrokers ---------------------------------------------------------


def test_kafka_algorithm_matches_the_javadoc_table() -> None:
    # AdminUtils' example: 5 brokers, 10 partitions, 3 replicas, start index 0
    a = assign_replicas_to_brokers(range(5), 10, 3, algorithm="kafka", fixed_start_index=0)
    assert a == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                 5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), st.integers(1, 6), st.integers(0, 2**32))
def test_kafka_algorithm_spreads_leaders_and_replicas_evenly(n: int, rounds: int,
                                                             seed: int) -> None:
    rf = min(3, n)
    a = assign_replicas_to_brokers(range(n), n * rounds, rf, algorithm="kafka",
                                   rng=random.Random(seed))
    leaders = Counter(r[0] for r in a.values())
    replicas = Counter(b for r in a.values() for b in r)
    assert set(leaders.values()) == {rounds}
    assert set(replicas.values()) == {rounds * rf}


def test_kafka_algorithm_followers_of_one_broker_spread_over_the_others() -> None:
    # n*(n-1) partitions: the shift walks through every other broker
    n = 4
    a = assign_replicas_to_brokers(range(n), n * (n - 1), 2, algorithm="kafka",
                                   fixed_start_index=0)
    for leader in range(n):
        followers = Counter(r[1] for r in a.values() if r[0] == leader)
        assert set(followers) == set(range(n)) - {leader}
        assert set(followers.values()) == {1}


def test_kafka_algorithm_random_start_is_injectable() -> None:
    one = assign_replicas_to_brokers(range(6), 12, 3, algorithm="kafka", rng=random.Random(7))
    two = assign_replicas_to_brokers(range(6), 12, 3, algorithm="kafka", rng=random.Random(7))
    assert one == two
    starts = {assign_replicas_to_brokers(range(6), 1, 1, algorithm="kafka",
                                         rng=random.Random(s))[0][0] for s in range(50)}
    assert len(starts) > 1


# ---- validation ------------------------------------------------------------------------------


def test_replication_factor_larger_than_brokers() -> None:
    with pytest.raises(InvalidReplicationFactorError) as info:
        assign_replicas_to_brokers([1, 2, 3], 1, 4)
    assert str(info.value) == "Replication factor: 4 larger than available brokers: 3."
    assert info.value.error_code == 38


def test_bad_counts() -> None:
    with pytest.raises(InvalidPartitionsError, match="Number of partitions must be larger than 0"):
        assign_replicas_to_brokers([1], 0, 1)
    with pytest.raises(InvalidReplicationFactorError, match="must be larger than 0"):
        assign_replicas_to_brokers([1], 1, 0)
    assert InvalidPartitionsError.error_code == 37


def test_validate_manual_assignment() -> None:
    validate_replica_assignment({0: [1, 2], 1: [2, 3]}, 2, [1, 2, 3])
    with pytest.raises(InvalidReplicaAssignmentError, match="Duplicate brokers"):
        validate_replica_assignment({0: [1, 1]}, 2, [1, 2])
    with pytest.raises(BrokerNotAvailableError) as info:
        validate_replica_assignment({0: [1, 9]}, 2, [1, 2])
    assert info.value.error_code == 8
    with pytest.raises(InvalidReplicaAssignmentError,
                       match=r"partition 0 has 2 while partitions \[1\] have replication "
                             r"factors \[3\]"):
        validate_replica_assignment({0: [1, 2], 1: [1, 2, 3]}, 2, [1, 2, 3])
    with pytest.raises(InvalidReplicaAssignmentError, match="replication factor of 0"):
        validate_replica_assignment({0: []}, 2, [1, 2, 3])


# ---- adding partitions -----------------------------------------------------------------------


def test_add_partitions_continues_the_consecutive_assignment() -> None:
    existing = assign_replicas_to_brokers([1, 2, 3], 3, 2)
    new = add_partitions("t", existing, [1, 2, 3], 5)
    assert new == {3: [1, 2], 4: [2, 3]}
    assert {**existing, **new} == assign_replicas_to_brokers([1, 2, 3], 5, 2)


def test_add_partitions_starts_from_partition_0_first_replica() -> None:
    existing = {0: [2, 3, 1], 1: [3, 1, 2]}
    assert add_partitions("t", existing, [1, 2, 3], 3) == {2: [1, 2, 3]}


def test_add_partitions_with_kafka_algorithm() -> None:
    # hand-computed from AdminUtils: start index 1 (broker 1), shift 1, partitions 2 and 3
    existing = {0: [1, 2, 3], 1: [2, 3, 0]}
    new = add_partitions("t", existing, [0, 1, 2, 3], 4, algorithm="kafka")
    assert new == {2: [3, 1, 2], 3: [0, 2, 3]}


def test_add_partitions_must_increase_and_needs_partition_0() -> None:
    with pytest.raises(InvalidPartitionsError) as info:
        add_partitions("t", {0: [1], 1: [2]}, [1, 2], 2)
    assert str(info.value) == ("The number of partitions for a topic can only be increased. "
                               "Topic t currently has 2 partitions, 2 would not be an increase.")
    with pytest.raises(Exception, match="partition id 0 is missing"):
        add_partitions("t", {1: [1]}, [1, 2], 3)


def test_add_partitions_manual_assignment_is_validated() -> None:
    assert add_partitions("t", {0: [1, 2]}, [1, 2, 3], 2,
                          replica_assignment={1: [3, 1]}) == {1: [3, 1]}
    with pytest.raises(InvalidReplicaAssignmentError):
        add_partitions("t", {0: [1, 2]}, [1, 2, 3], 2, replica_assignment={1: [3]})


# ---- preferred replica imbalance (auto.leader.rebalance.enable) ------------------------------


def tp(i: int) -> TopicPartition:
    return TopicPartition("t", i)


def test_imbalance_per_preferred_broker() -> None:
    assignments = {tp(0): [1, 2], tp(1): [1, 2], tp(2): [2, 1], tp(3): [1, 3], tp(4): [3, 1]}
    leaders = {tp(0): 1, tp(1): 2, tp(2): 2, tp(3): 3}  # tp(4) has no leader yet
    imbalance = preferred_replica_imbalance(assignments, leaders)
    assert imbalance[1].preferred == {tp(0), tp(1), tp(3)}
    assert imbalance[1].not_led == {tp(1), tp(3)}
    assert imbalance[1].ratio == pytest.approx(2 / 3)
    assert imbalance[2].ratio == 0.0
    assert imbalance[3].preferred == {tp(4)} and imbalance[3].not_led == frozenset()
    assert brokers_to_rebalance(imbalance, 10) == {1: frozenset({tp(1), tp(3)})}


def test_imbalance_threshold_is_strictly_greater() -> None:
    assignments = {tp(i): [1, 2] for i in range(10)}
    leaders = {tp(i): 1 for i in range(10)} | {tp(0): 2}
    imbalance = preferred_replica_imbalance(assignments, leaders)
    assert imbalance[1].ratio == pytest.approx(0.1)
    assert brokers_to_rebalance(imbalance, 10) == {}
    assert brokers_to_rebalance(imbalance, 9) == {1: frozenset({tp(0)})}

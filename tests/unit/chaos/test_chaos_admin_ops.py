"""Pure decisions behind admin operations under faults (S-6.2): the stray replicas a controller
deletes when a broker comes back, and `odradek chaos --admin-ops`'s health, target and
throughput functions."""

from __future__ import annotations

import random

from odradek.chaos.environment.process_faults import in_sync, random_target
from odradek.chaos.workload import ProducerStats, throughput_series
from odradek.controller.context import TopicPartition
from odradek.controller.reassignment import stray_replicas


def test_stray_replicas_skip_partitions_assigned_to_the_broker_again() -> None:
    t0, t1, t2 = (TopicPartition("t", p) for p in range(3))
    assignment = {t0: [1, 2, 3], t1: [0, 1, 2], t2: []}  # t2: the topic was deleted since
    got = stray_replicas({t1, t0, t2}, 0, lambda tp: assignment[tp])
    assert got == [t0, t2]
    assert stray_replicas(set(), 0, lambda tp: assignment[tp]) == []


def test_in_sync_ignores_only_the_replicas_being_added() -> None:
    node = {"partitions": {"0": [3, 4, 2, 0, 1], "1": [0, 1, 2]},
            "adding_replicas": {"0": [3, 4]}, "removing_replicas": {"0": [0, 1]}}
    states = {0: {"leader": 2, "isr": [0, 1, 2]}, 1: {"leader": 0, "isr": [0, 1, 2]}}
    assert in_sync(node, states)
    states[0]["isr"] = [1, 2]  # a replica not being added is missing
    assert not in_sync(node, states)
    states[0] = {"leader": -1, "isr": [0, 1, 2]}  # no leader
    assert not in_sync(node, states)
    assert not in_sync({"partitions": {"0": [0, 1, 2]}}, {0: {"leader": 0, "isr": [0, 1]}})
    assert not in_sync({"partitions": {"0": [0]}}, {})  # no state node yet


def test_random_target_is_another_replica_set_when_there_is_one() -> None:
    rng = random.Random(7)
    for _ in range(50):
        t = random_target([0, 1, 2], [0, 1, 2, 3, 4], 3, rng)
        assert len(t) == len(set(t)) == 3 and set(t) <= {0, 1, 2, 3, 4}
        assert set(t) != {0, 1, 2}
    # Three brokers, RF 3: only the order can change, and it does.
    for _ in range(20):
        t = random_target([0, 1, 2], [0, 1, 2], 3, rng)
        assert sorted(t) == [0, 1, 2] and t != [0, 1, 2]
    assert random_target([4], [4], 1, rng) == [4]


def test_throughput_series_counts_acks_per_second_with_the_gaps() -> None:
    a, b = ProducerStats(0), ProducerStats(1)
    a.ack_times = [100.1, 100.2, 100.9, 103.5]  # nothing acknowledged in seconds 1 and 2
    b.ack_times = [99.0, 101.5]  # before t0: left out
    series = throughput_series([a, b], t0=100.0)
    assert series == {"producer 0": [(0.0, 3.0), (1.0, 0.0), (2.0, 0.0), (3.0, 1.0)],
                      "producer 1": [(0.0, 0.0), (1.0, 1.0), (2.0, 0.0), (3.0, 0.0)]}
    half = throughput_series([a], t0=100.0, bucket_s=0.5)["producer 0"]
    assert half[0] == (0.0, 4.0) and half[1] == (0.5, 2.0)
    assert throughput_series([ProducerStats(2)], t0=5.0) == {"producer 2": [(0.0, 0.0)]}
